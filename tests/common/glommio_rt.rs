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
    glommio::LocalExecutorBuilder::default()
        .io_memory(512 * 1024)
        .make()
        .expect("glommio executor")
        .run(future)
}
