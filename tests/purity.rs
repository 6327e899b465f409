//! The Raft and membership cores stay pure (STYLE.md): no runtime, no clock, no files. This
//! test fails the moment one of those words appears in their sources.

use std::path::Path;

const FORBIDDEN: &[&str] = &[
    "glommio",
    "async fn",
    "Instant::now",
    "SystemTime",
    "std::fs",
];

fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn raft_and_membership_are_pure() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    for module in ["raft", "membership"] {
        sources(&root.join(module), &mut files);
    }
    assert!(!files.is_empty(), "src/raft and src/membership must exist");
    let mut hits = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in text.lines().enumerate() {
            for word in FORBIDDEN {
                if line.contains(word) {
                    hits.push(format!("{}:{}: {word}", file.display(), n + 1));
                }
            }
        }
    }
    assert!(hits.is_empty(), "impure core:\n{}", hits.join("\n"));
}
