//! Runs a future on a glommio executor, one at a time per test process: parallel test threads
//! would otherwise lock more memory than `ulimit -l` allows.
#![allow(dead_code)]

use std::future::Future;
use std::sync::Mutex;

static ONE_EXECUTOR: Mutex<()> = Mutex::new(());

pub fn run<T: Send + 'static>(future: impl Future<Output = T> + 'static) -> T {
    let _guard = ONE_EXECUTOR
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    // A recovered test log keeps one descriptor per segment, as the node's does.
    let _ = ringraft::sys::raise_nofile_soft();
    make_executor().run(future)
}

/// A new executor. Without CAP_IPC_LOCK (any user but root) its rings' buffers count against
/// `ulimit -l`, and the kernel releases a dropped executor's only when it tears the rings down
/// in a worker, a little later: so ENOMEM right after another executor was dropped is retried
/// for up to 5 s before it fails the test.
fn make_executor() -> glommio::LocalExecutor {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        match glommio::LocalExecutorBuilder::default()
            .io_memory(512 * 1024)
            .make()
        {
            Ok(executor) => return executor,
            Err(glommio::GlommioError::IoError(e))
                if e.kind() == std::io::ErrorKind::OutOfMemory
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => panic!("glommio executor: {e:?} (ulimit -l is {:?})", memlock()),
        }
    }
}

fn memlock() -> Option<String> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    limits
        .lines()
        .find(|l| l.starts_with("Max locked memory"))
        .map(str::to_string)
}
