//! A reader and writer for Java `.properties` text, the format of Kafka's `server.properties`
//! and `meta.properties` (java.util.Properties: `#`/`!` comments, `=`, `:` or whitespace
//! separators, backslash continuations and escapes). Pure: callers do the file I/O.

use std::collections::BTreeMap;

/// Properties in file order of first appearance; a repeated key keeps its last value, as Java's
/// `Properties.load` does. `line` is where each key was last set, for error messages.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Properties {
    entries: BTreeMap<String, (String, usize)>,
}

impl Properties {
    pub fn parse(text: &str) -> Properties {
        let mut entries = BTreeMap::new();
        let mut logical = String::new();
        let mut start_line = 0;
        for (index, raw) in text.lines().enumerate() {
            // Java strips leading whitespace from every line, continuation lines included.
            let line = raw.trim_start();
            if logical.is_empty() {
                if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
                    continue;
                }
                start_line = index + 1;
            }
            if ends_with_odd_backslashes(line) {
                logical.push_str(&line[..line.len() - 1]);
                continue;
            }
            logical.push_str(line);
            let (key, value) = split_key_value(&logical);
            entries.insert(key, (value, start_line));
            logical.clear();
        }
        if !logical.is_empty() {
            let (key, value) = split_key_value(&logical);
            entries.insert(key, (value, start_line));
        }
        Properties { entries }
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries.get(key).map(|(value, _)| value.as_str())
    }

    pub fn line_of(&self, key: &str) -> Option<usize> {
        self.entries.get(key).map(|(_, line)| *line)
    }

    pub fn set(&mut self, key: &str, value: &str) {
        self.entries.insert(key.to_owned(), (value.to_owned(), 0));
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

fn ends_with_odd_backslashes(line: &str) -> bool {
    line.bytes().rev().take_while(|b| *b == b'\\').count() % 2 == 1
}

/// Splits a logical line at the first unescaped `=`, `:` or whitespace, then unescapes both.
fn split_key_value(line: &str) -> (String, String) {
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            '=' | ':' | ' ' | '\t' | '\x0c' => break,
            _ => i += 1,
        }
    }
    let key_end = i.min(chars.len());
    let mut j = key_end;
    while j < chars.len() && matches!(chars[j], ' ' | '\t' | '\x0c') {
        j += 1;
    }
    if j < chars.len() && matches!(chars[j], '=' | ':') {
        j += 1;
        while j < chars.len() && matches!(chars[j], ' ' | '\t' | '\x0c') {
            j += 1;
        }
    }
    let key: String = chars[..key_end].iter().collect();
    let value: String = chars[j..].iter().collect();
    (unescape(&key), unescape(&value))
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('f') => out.push('\x0c'),
            Some('u') => {
                let hex: String = chars.by_ref().take(4).collect();
                match u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                    Some(decoded) if hex.len() == 4 => out.push(decoded),
                    _ => {
                        out.push_str("\\u");
                        out.push_str(&hex);
                    }
                }
            }
            Some(other) => out.push(other),
            None => {}
        }
    }
    out
}

/// Escapes a value the way `Properties.store` does for the ASCII text ringraft writes.
pub fn escape_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for (i, c) in value.chars().enumerate() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '=' | ':' | '#' | '!' => {
                out.push('\\');
                out.push(c);
            }
            ' ' if i == 0 => out.push_str("\\ "),
            c if !(' '..='~').contains(&c) => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn separators_comments_and_continuations() {
        let p = Properties::parse(
            "# comment\n! also\n a = 1\nb:2\nc 3\nd=x\\\n   y\ne=\\u0041\\=\nf\n",
        );
        assert_eq!(p.get("a"), Some("1"));
        assert_eq!(p.get("b"), Some("2"));
        assert_eq!(p.get("c"), Some("3"));
        assert_eq!(p.get("d"), Some("xy"));
        assert_eq!(p.get("e"), Some("A="));
        assert_eq!(p.get("f"), Some(""));
        assert_eq!(p.line_of("c"), Some(5));
    }

    #[test]
    fn last_value_wins() {
        let p = Properties::parse("k=1\nk=2\n");
        assert_eq!(p.get("k"), Some("2"));
    }

    #[test]
    fn escape_round_trips() {
        for v in ["plain", "a=b:c", "#x", " lead", "tab\there"] {
            let p = Properties::parse(&format!("k={}\n", escape_value(v)));
            assert_eq!(p.get("k"), Some(v));
        }
    }
}
