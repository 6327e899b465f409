//! The library's layers point only down: a module may name (`crate::m`) only modules below it in
//! `LAYERS`. With a strict order no two modules can import each other, so the only cycles left
//! are between files of one module. Comments and `#[cfg(test)]` modules are not read.
//!
//! This is the check the wire-edge issue asks for ("cargo modules dependencies --acyclic or an
//! equivalent"): it reads the sources, needs no tool, and runs in `cargo test` (so in `.ci/run`).

use std::collections::BTreeSet;
use std::path::Path;

/// Lowest first. A module may import any module listed before it, never one after it.
const LAYERS: &[&str] = &[
    "constants",
    "sys",
    "dma_alloc",
    "ids",
    "types",
    "logsafe",
    "protocol",
    "records",
    "config",
    "membership",
    "raft",
    "log",
    "net",
    "fetch",
    "node",
    "embed",
    "bench",
    "cli",
];

/// Files that sit above every layer: the crate root and the binary.
const ROOTS: &[&str] = &["lib", "main"];

/// The code of a file without comments and without its `#[cfg(test)]` modules.
fn code_of(text: &str) -> String {
    let mut out = String::new();
    let mut skipping_tests = false;
    let mut depth = 0i32;
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if !skipping_tests
            && trimmed.starts_with("#[cfg(test)]")
            && lines
                .peek()
                .is_some_and(|next| next.trim_start().starts_with("mod "))
        {
            skipping_tests = true;
            depth = 0;
            continue;
        }
        if skipping_tests {
            depth += line.matches('{').count() as i32 - line.matches('}').count() as i32;
            if depth <= 0 && line.contains('}') {
                skipping_tests = false;
            }
            continue;
        }
        if trimmed.starts_with("//") {
            continue;
        }
        let code = match line.find(" //") {
            Some(at) if !line[..at].contains('"') => &line[..at],
            _ => line,
        };
        out.push_str(code);
        out.push('\n');
    }
    out
}

/// The modules `code` names as `crate::<name>`.
fn named_modules(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let after = &rest[at + "crate::".len()..];
        let name: String = after
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        // A grouped `crate::{a, b}` is reported as not in LAYERS (it would hide its names).
        out.insert(if name.is_empty() { "{".into() } else { name });
        rest = after;
    }
    out
}

/// Every import that points up or sideways-unknown: (file, its module, the module it names).
fn violations(files: &[(String, String)]) -> Vec<String> {
    let rank = |m: &str| LAYERS.iter().position(|l| *l == m);
    let mut out = Vec::new();
    for (path, text) in files {
        let module = path
            .trim_start_matches("src/")
            .split('/')
            .next()
            .unwrap_or("")
            .trim_end_matches(".rs")
            .to_string();
        if ROOTS.contains(&module.as_str()) {
            continue;
        }
        let Some(own) = rank(&module) else {
            out.push(format!("{path}: module {module} is not in LAYERS"));
            continue;
        };
        for named in named_modules(&code_of(text)) {
            match rank(&named) {
                Some(r) if r < own || named == module => {}
                Some(_) => out.push(format!(
                    "{path}: {module} imports {named}, a layer above it"
                )),
                None => out.push(format!("{path}: names crate::{named}, not in LAYERS")),
            }
        }
    }
    out
}

fn sources(dir: &Path, out: &mut Vec<(String, String)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).expect("readable source");
            let rel = path
                .strip_prefix(env!("CARGO_MANIFEST_DIR"))
                .expect("under the crate")
                .display()
                .to_string();
            out.push((rel, text));
        }
    }
}

#[test]
fn modules_import_only_layers_below_them() {
    let mut files = Vec::new();
    sources(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    assert!(
        files.len() > 50,
        "found the sources ({} files)",
        files.len()
    );
    let found = violations(&files);
    assert!(
        found.is_empty(),
        "imports that point up (move the type down, or report through a trait the lower \
         layer owns):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_check_catches_an_upward_import_and_ignores_comments_and_tests() {
    let file = |path: &str, text: &str| (path.to_string(), text.to_string());
    let broken = [file(
        "src/net/server.rs",
        "use crate::protocol::ApiKey;\nfn f(m: crate::node::metrics::SharedMetrics) {}\n",
    )];
    let found = violations(&broken);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("net imports node"), "{found:?}");
    let harmless = [file(
        "src/raft/serve.rs",
        "//! answers as `crate::fetch` does\nuse crate::records::Batch; // not crate::node\n\
         #[cfg(test)]\nmod tests {\n    use crate::node::Thing;\n    fn g() {\n    }\n}\n\
         fn after() -> crate::types::Time {}\n",
    )];
    assert_eq!(violations(&harmless), Vec::<String>::new());
    let after_tests = [file(
        "src/raft/core.rs",
        "#[cfg(test)]\nmod tests {\n}\nuse crate::cli::Args;\n",
    )];
    assert_eq!(violations(&after_tests).len(), 1);
}
