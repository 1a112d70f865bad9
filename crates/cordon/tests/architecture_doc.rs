//! docs/architecture.md's journeys name real functions: every `path::function` or
//! `Type::method` written in them is defined in the workspace's sources, so the map a
//! newcomer follows does not drift from the code when a function is renamed or removed.

use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The names written as `a::b` (code spans) in the journeys' sections.
fn named_in_journeys(doc: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut in_journey = false;
    for line in doc.lines() {
        if line.starts_with("## ") {
            in_journey = line.starts_with("## Journey");
        }
        if !in_journey {
            continue;
        }
        for (i, span) in line.split('`').enumerate() {
            let is_path = span.contains("::")
                && span
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
            if i % 2 == 1 && is_path {
                names.push(span.to_string());
            }
        }
    }
    names
}

#[test]
fn every_function_the_journeys_name_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let doc = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let mut files = Vec::new();
    sources(&root.join("crates"), &mut files);
    let text: String = files
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap())
        .collect();
    let names = named_in_journeys(&doc);
    assert!(
        names.len() > 30,
        "the journeys name too few functions: {names:?}"
    );
    let mut missing = Vec::new();
    for name in &names {
        let last = name.rsplit("::").next().unwrap();
        let defined = match last.chars().next() {
            // A type, a trait or an enum's variant: named at its definition.
            Some(c) if c.is_ascii_uppercase() => [
                format!("struct {last}"),
                format!("enum {last}"),
                format!("trait {last}"),
                format!("type {last}"),
                format!("    {last}"),
            ]
            .iter()
            .any(|d| text.contains(d.as_str())),
            _ => [format!("fn {last}("), format!("fn {last}<")]
                .iter()
                .any(|d| text.contains(d.as_str())),
        };
        if !defined {
            missing.push(name.clone());
        }
    }
    assert!(
        missing.is_empty(),
        "docs/architecture.md's journeys name what the code does not define: {missing:?}"
    );
}
