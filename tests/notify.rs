//! systemd's readiness protocol without systemd: the test plays the service manager on a
//! datagram socket (`NOTIFY_SOCKET`) and checks what the real binary tells it, and when.
//! (Under a real systemd, `tests/interop/run.sh` also starts a unit with `systemd-run`.)

mod common;

use std::net::TcpStream;
use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn next(socket: &UnixDatagram) -> Option<String> {
    let mut buf = [0u8; 256];
    let n = socket.recv(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf[..n]).into_owned())
}

#[test]
fn ready_comes_once_the_listener_accepts_then_watchdog_pings_then_stopping() {
    let dir = common::TempDir::new("notify");
    let socket_path = dir.path().join("notify.sock");
    let manager = UnixDatagram::bind(&socket_path).unwrap();
    manager
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let port = common::free_port();
    let config = dir.path().join("server.properties");
    std::fs::write(
        &config,
        format!(
            "process.roles=controller\nnode.id=1\nlisteners=CONTROLLER://127.0.0.1:{port}\n\
             controller.listener.names=CONTROLLER\ncontroller.quorum.voters=1@127.0.0.1:{port}\n\
             metadata.log.dir={}\n",
            dir.path().join("data").display()
        ),
    )
    .unwrap();
    let format = Command::new(common::binary())
        .args(["storage", "format", "-t", "bm90aWZ5LXNvY2tldC10AA", "-c"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(format.status.success(), "{format:?}");
    let mut node = Command::new(common::binary())
        .args(["start", "-c"])
        .arg(&config)
        .env("NOTIFY_SOCKET", &socket_path)
        .env("WATCHDOG_USEC", "200000")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let ready = next(&manager);
    assert_eq!(ready.as_deref(), Some("READY=1"));
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_ok(),
        "READY=1 came before the listener accepted"
    );
    let started = Instant::now();
    let mut pings = 0;
    while started.elapsed() < Duration::from_secs(2) {
        if next(&manager).as_deref() == Some("WATCHDOG=1") {
            pings += 1;
        }
    }
    assert!(
        pings >= 3,
        "{pings} watchdog pings in 2 s at a 200 ms watchdog"
    );
    // SIGTERM: STOPPING=1 before it exits.
    unsafe { libc::kill(node.id() as i32, libc::SIGTERM) };
    let mut stopping = false;
    while let Some(message) = next(&manager) {
        if message == "STOPPING=1" {
            stopping = true;
            break;
        }
    }
    assert!(stopping, "no STOPPING=1");
    assert!(node.wait().unwrap().success());
}
