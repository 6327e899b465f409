//! Log lines that tell the truth: text from outside (a peer's cluster id or host name, a
//! client's software name, any string read from a frame or a file) is escaped and cut before
//! it reaches a log line (`Untrusted`), the text format escapes every field again at the sink
//! (`SafeFields`) so no log site can break a line, and a warning that repeats is said at most
//! once per interval with a count of the ones not said (`RateLimit`).
//!
//! Without this, a Fetch whose cluster id holds `\n` and a forged `leader changed … state=Leader`
//! puts that line into every node's log. This module owns no I/O and no clock: callers pass
//! the time in.

use std::cell::Cell;
use std::fmt::{self, Write};
use std::time::{Duration, Instant};

use crate::constants::{
    LOGGED_FIELD_BYTES_MAX, LOGGED_TEXT_BYTES_MAX, REPEATED_WARNING_INTERVAL_MS,
};

/// A string from outside, shown in a log field as a quoted, escaped string of at most
/// `LOGGED_TEXT_BYTES_MAX` bytes of the original: `"abc\n\u{1b}[31m"…(+9000 bytes)`. Quotes
/// and backslashes are escaped too, so the text can neither end its field nor fake an escape.
/// Plain text (a host name, a cluster id: nothing but letters, digits and `-_.:`, within the
/// cap) is shown as it is, so that the common case reads and parses as before.
pub struct Untrusted<'a>(pub &'a str);

/// Whether `text` can be shown bare: non-empty, within the cap, and only `[A-Za-z0-9-_.:]`.
fn is_plain(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= LOGGED_TEXT_BYTES_MAX
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
}

impl fmt::Display for Untrusted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if is_plain(self.0) {
            return f.write_str(self.0);
        }
        f.write_char('"')?;
        let rest = write_escaped(f, self.0, LOGGED_TEXT_BYTES_MAX, true)?;
        f.write_char('"')?;
        if rest > 0 {
            write!(f, "…(+{rest} bytes)")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Untrusted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// `Untrusted` for an optional string: `none` when absent.
pub struct UntrustedOr<'a>(pub Option<&'a str>);

impl fmt::Display for UntrustedOr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(text) => Untrusted(text).fmt(f),
            None => f.write_str("none"),
        }
    }
}

/// Whether `c` could end a line, move the cursor, colour or reorder what follows on a terminal:
/// C0 and C1 controls, DEL, the Unicode line and paragraph separators, and the bidirectional
/// formatting characters.
fn is_hazard(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}' | '\u{feff}'
        )
        || ('\u{202a}'..='\u{202e}').contains(&c)
        || ('\u{2066}'..='\u{2069}').contains(&c)
}

/// Writes `text` with every hazard escaped (`\n`, `\r`, `\t`, otherwise `\u{..}`), and with
/// `\\` and `\"` too when `quoted`, cut at a character boundary once `cap` bytes of `text` are
/// shown. Returns how many bytes of `text` were cut.
pub fn write_escaped(
    out: &mut impl Write,
    text: &str,
    cap: usize,
    quoted: bool,
) -> Result<usize, fmt::Error> {
    for (at, c) in text.char_indices() {
        if at + c.len_utf8() > cap {
            return Ok(text.len() - at);
        }
        match c {
            '\n' => out.write_str("\\n")?,
            '\r' => out.write_str("\\r")?,
            '\t' => out.write_str("\\t")?,
            '\\' | '"' if quoted => {
                out.write_char('\\')?;
                out.write_char(c)?;
            }
            c if is_hazard(c) => write!(out, "\\u{{{:x}}}", c as u32)?,
            c => out.write_char(c)?,
        }
    }
    Ok(0)
}

/// `text` escaped for one line, without quotes, cut to `cap` bytes with a `…(+N bytes)` tail.
pub fn escaped(text: &str, cap: usize) -> String {
    let mut out = String::with_capacity(text.len().min(cap) + 16);
    let rest = write_escaped(&mut out, text, cap, false).expect("a String takes every write");
    if rest > 0 {
        let _ = write!(out, "…(+{rest} bytes)");
    }
    out
}

/// The field formatter of the text log format: each field and the message as the default
/// formatter shows them (`name=value`, values in their Debug form, the message bare), then
/// escaped (`escaped`, without quotes, so a value already escaped by `Untrusted` stays as it
/// is) and cut to `LOGGED_FIELD_BYTES_MAX`. Whatever a log site passes, one event is one line.
pub fn safe_fields() -> impl for<'w> tracing_subscriber::fmt::FormatFields<'w> + Send + Sync {
    use tracing_subscriber::field::MakeExt;
    tracing_subscriber::fmt::format::debug_fn(|w, field, value| {
        let shown = escaped(&format!("{value:?}"), LOGGED_FIELD_BYTES_MAX);
        if field.name() == "message" {
            w.write_str(&shown)
        } else {
            write!(w, "{field}={shown}")
        }
    })
    .delimited(" ")
}

/// A replica id as a log shows it: Kafka's sentinel ids by what they mean (−1: an observer or
/// consumer that has no id, −2: a debugging consumer), any other negative one as invalid.
#[derive(Debug, Clone, Copy)]
pub struct ReplicaShown(pub i32);

impl fmt::Display for ReplicaShown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            id if id >= 0 => write!(f, "{id}"),
            -1 => f.write_str("observer"),
            -2 => f.write_str("debug-consumer"),
            id => write!(f, "invalid({id})"),
        }
    }
}

/// A repeated warning said at most once per `interval`: `due` says whether to say it now and
/// how many were not said since the last one. One per warning and per shard (`Cell`: not
/// shared between threads).
#[derive(Debug)]
pub struct RateLimit {
    interval: Duration,
    /// When it was last said, and how many were not said since.
    last: Cell<Option<(Instant, u64)>>,
}

impl RateLimit {
    pub const fn new(interval: Duration) -> RateLimit {
        RateLimit {
            interval,
            last: Cell::new(None),
        }
    }

    /// At most once per `REPEATED_WARNING_INTERVAL_MS`: for warnings a peer or a failing file
    /// can make repeat many times a second.
    pub const fn repeated_warning() -> RateLimit {
        RateLimit::new(Duration::from_millis(REPEATED_WARNING_INTERVAL_MS))
    }

    /// `Some(unsaid)` when the warning is due at `now` (the count of the ones not said since
    /// it was last said), `None` when it must stay quiet (and is counted).
    pub fn due(&self, now: Instant) -> Option<u64> {
        match self.last.get() {
            Some((at, unsaid)) if now.saturating_duration_since(at) < self.interval => {
                self.last.set(Some((at, unsaid + 1)));
                None
            }
            previous => {
                self.last.set(Some((now, 0)));
                Some(previous.map_or(0, |(_, unsaid)| unsaid))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_escaped_and_quotes_cannot_end_the_field() {
        let shown = Untrusted("a\nb\r\tc\u{1b}[31m\u{7f}\u{85}\u{202e}\\\"d").to_string();
        assert_eq!(shown, r#""a\nb\r\tc\u{1b}[31m\u{7f}\u{85}\u{202e}\\\"d""#);
        assert!(!shown.chars().any(is_hazard));
        assert_eq!(Untrusted("plain-id_1.2:3").to_string(), "plain-id_1.2:3");
        assert_eq!(Untrusted("two words").to_string(), "\"two words\"");
        assert_eq!(Untrusted("").to_string(), "\"\"");
        assert_eq!(Untrusted("a=b").to_string(), "\"a=b\"");
        assert_eq!(UntrustedOr(None).to_string(), "none");
    }

    #[test]
    fn sentinel_replica_ids_are_named() {
        let shown: Vec<String> = [3, -1, -2, -9]
            .map(|id| ReplicaShown(id).to_string())
            .into();
        assert_eq!(shown, ["3", "observer", "debug-consumer", "invalid(-9)"]);
    }

    #[test]
    fn long_text_is_cut_at_the_cap_on_a_character_boundary() {
        let long = "x".repeat(10_000);
        let shown = Untrusted(&long).to_string();
        let cut = 10_000 - LOGGED_TEXT_BYTES_MAX;
        assert_eq!(
            shown,
            format!("\"{}\"…(+{cut} bytes)", "x".repeat(LOGGED_TEXT_BYTES_MAX))
        );
        // A two-byte character straddling the cap is left out whole.
        let straddle = format!("{}é", "y".repeat(LOGGED_TEXT_BYTES_MAX - 1));
        assert!(Untrusted(&straddle).to_string().ends_with("y\"…(+2 bytes)"));
        assert_eq!(escaped("a\nb", 2), "a\\n…(+1 bytes)");
    }

    #[test]
    fn rate_limit_says_once_per_interval_with_the_count_not_said() {
        let limit = RateLimit::new(Duration::from_secs(1));
        let t0 = Instant::now();
        assert_eq!(limit.due(t0), Some(0));
        for ms in 1..=42 {
            assert_eq!(limit.due(t0 + Duration::from_millis(ms * 20)), None);
        }
        assert_eq!(limit.due(t0 + Duration::from_millis(1000)), Some(42));
        assert_eq!(limit.due(t0 + Duration::from_millis(1500)), None);
        assert_eq!(limit.due(t0 + Duration::from_millis(2100)), Some(1));
    }
}
