//! Every relative link in the README and in `docs/` resolves: the file exists, and a `#anchor`
//! names a heading of it (GitHub's rule: lower case, spaces to `-`, punctuation dropped).
//! Links to the web are not followed (CI has no network beyond the package registries).

use std::path::{Path, PathBuf};

/// (target, anchor) of every `[text](target)` link outside code blocks and code spans.
fn links(markdown: &str) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    let mut in_fence = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        // Drop code spans: a `](` inside backticks is not a link.
        let text: String = line
            .split('`')
            .enumerate()
            .filter(|(i, _)| i % 2 == 0)
            .map(|(_, part)| part)
            .collect();
        let mut rest = text.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            let target = &after[..end];
            rest = &after[end..];
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = match target.split_once('#') {
                Some((file, anchor)) => (file.to_string(), Some(anchor.to_string())),
                None => (target.to_string(), None),
            };
            out.push((file, anchor));
        }
    }
    out
}

/// GitHub's anchor for a heading.
fn anchor_of(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors(markdown: &str) -> Vec<String> {
    let mut in_fence = false;
    let mut out = Vec::new();
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
        } else if !in_fence && line.starts_with('#') {
            out.push(anchor_of(line.trim_start_matches('#')));
        }
    }
    out
}

/// The dead links of `file` (whose text is `markdown`).
fn dead_links(file: &Path, markdown: &str) -> Vec<String> {
    let dir = file.parent().expect("a file in a directory");
    let mut dead = Vec::new();
    for (target, anchor) in links(markdown) {
        let path: PathBuf = if target.is_empty() {
            file.to_path_buf()
        } else {
            dir.join(&target)
        };
        if !path.exists() {
            dead.push(format!("{}: {target} does not exist", file.display()));
            continue;
        }
        let Some(anchor) = anchor else { continue };
        let is_markdown = path.extension().is_some_and(|e| e == "md");
        if is_markdown {
            let text = std::fs::read_to_string(&path).expect("readable markdown");
            if !anchors(&text).contains(&anchor) {
                dead.push(format!(
                    "{}: {target}#{anchor} names no heading of {}",
                    file.display(),
                    path.display()
                ));
            }
        }
    }
    dead
}

#[test]
fn readme_and_docs_links_resolve() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("README.md")];
    for entry in std::fs::read_dir(root.join("docs")).expect("docs/") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
    let mut dead = Vec::new();
    let mut checked = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).expect("readable");
        checked += links(&text).len();
        dead.extend(dead_links(file, &text));
    }
    assert!(checked > 10, "found the links ({checked})");
    assert!(dead.is_empty(), "dead links:\n{}", dead.join("\n"));
}

#[test]
fn readme_is_short_and_starts_with_the_two_commands() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let lines = readme.lines().count();
    assert!(
        lines <= 260,
        "the README is {lines} lines; move reference parts to docs/"
    );
    let first: Vec<&str> = readme.lines().take(6).collect();
    assert!(
        first.iter().any(|l| l.starts_with("cargo run --release"))
            && first.iter().any(|l| l.starts_with("cargo test")),
        "the README begins with `cargo run --release` and `cargo test`: {first:?}"
    );
}

#[test]
fn the_checker_finds_a_dead_file_and_a_dead_anchor() {
    let dir = std::env::temp_dir().join(format!("ringraft-links-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let other = dir.join("other.md");
    std::fs::write(&other, "# A heading, with punctuation\n").expect("write");
    let file = dir.join("index.md");
    let text = "see [gone](gone.md), [ok](other.md#a-heading-with-punctuation), \
                [bad](other.md#nope), `[code](gone.md)` and [web](https://example.com)\n\
                ```\n[fenced](gone.md)\n```\n";
    let dead = dead_links(&file, text);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(dead.len(), 2, "{dead:?}");
    assert!(dead[0].contains("gone.md does not exist"), "{dead:?}");
    assert!(dead[1].contains("other.md#nope"), "{dead:?}");
}

/// docs/wire.md §7 names every API that ApiVersions advertises, and no other.
#[test]
fn wire_doc_lists_exactly_the_advertised_apis() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("docs/wire.md")).unwrap();
    let section = text
        .split("## 7. ")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("docs/wire.md has a section 7");
    let served = ringraft::protocol::apis::SERVED;
    for spec in served {
        let name = spec.key.name();
        assert!(
            section.contains(name),
            "docs/wire.md §7 does not name {name}"
        );
    }
    assert!(
        section.contains(&format!("advertises {} APIs", served.len())),
        "docs/wire.md §7 gives the wrong count; ApiVersions advertises {}",
        served.len()
    );
}
