//! Failure injection for tests of what happens when storage fails: the environment variable
//! `RINGRAFT_FAILPOINT=<name>` makes `check(<name>)` return an error. Read once per process.

use std::io;
use std::sync::OnceLock;

static ACTIVE: OnceLock<Option<String>> = OnceLock::new();

pub fn check(name: &str) -> io::Result<()> {
    let active = ACTIVE.get_or_init(|| std::env::var("RINGRAFT_FAILPOINT").ok());
    if active.as_deref() == Some(name) {
        return Err(io::Error::other(format!(
            "failpoint {name} (RINGRAFT_FAILPOINT)"
        )));
    }
    Ok(())
}
