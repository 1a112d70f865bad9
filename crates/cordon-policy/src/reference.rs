//! The policy reference (`docs/policy.md`): every section and key of the schema with its
//! shape, choices, built-in value and what it does — rendered from the same declarations
//! the checker and `cordon init` use, so the document cannot drift from what cordon reads.

use crate::load::DEFAULT_POLICY;
use crate::schema::{Field, Shape, Table};
use crate::sections::{ROOT, SECTION_DOCS};
use crate::template::{doc, example_value};

/// How to regenerate the reference; the checked-in file says it, and so does the test that
/// compares the two.
pub const REGENERATE: &str = "CORDON_BLESS=1 cargo test -p cordon-policy --test reference";

/// The policy reference as Markdown.
pub fn reference() -> String {
    let defaults: toml::Table = toml::from_str(DEFAULT_POLICY).unwrap_or_default();
    let mut out = intro();
    for ((name, shape, _), docs) in ROOT.sections.iter().zip(SECTION_DOCS) {
        let (header, path, t) = match shape {
            Shape::Table(t) => (format!("[{name}]"), name.to_string(), *t),
            Shape::Tables(t) => (format!("[[{name}]]"), name.to_string(), *t),
            Shape::Map(t) => (format!("[{name}.NAME]"), format!("{name}.NAME"), *t),
            _ => continue,
        };
        out.push_str(&format!("\n## `{header}`\n\n{}\n", paragraph(docs)));
        section(&mut out, &header, &path, t, defaults.get(*name), Some(""));
    }
    out
}

fn intro() -> String {
    let profiled: Vec<String> = ROOT
        .sections
        .iter()
        .filter(|s| s.2)
        .map(|s| format!("`{}`", s.0))
        .collect();
    let contents: Vec<String> = ROOT
        .sections
        .iter()
        .zip(SECTION_DOCS)
        .map(|((name, _, _), docs)| format!("- [`{name}`](#{name}): {}", paragraph(docs)))
        .collect();
    format!(
        "# Policy reference\n\
         \n\
         <!-- Generated from the schema in crates/cordon-policy: edit the schema, then run\n     \
         `{REGENERATE}`. -->\n\
         \n\
         A cordon policy is a TOML file. cordon merges three layers, in this order: its built-in\n\
         policy, your own `~/.config/cordon/cordon.toml`, and the project's `cordon.toml`. A later\n\
         layer adds to lists and replaces single values; nothing removes a `deny` or `read_only`\n\
         entry of an earlier layer. A project file that loosens the policy runs only once you\n\
         `cordon trust` it; the keys that exist to loosen say so below.\n\
         \n\
         - `cordon init` writes a project `cordon.toml` with every key below commented out, each\n  \
         with an example that is valid uncommented.\n\
         - `cordon check [FILE]` checks a policy and prints the effective one, each entry with\n  \
         where it came from; it runs from any directory, your home included.\n\
         - `cordon explain PATH`, `cordon explain https://HOST/…` and `cordon explain --\n  \
         COMMAND ARGS…` say which rule decides.\n\
         \n\
         Paths may start with `~`, `$HOME`, `${{PROJECT}}` (the project directory), an XDG base\n\
         directory (`$XDG_CONFIG_HOME`, …) or `$XDG_RUNTIME_DIR`. The **Built-in** column is\n\
         the value of cordon's built-in policy (`—`: it sets none, so the key is off or takes\n\
         the default its description gives).\n\
         \n\
         A profile (`[profile.NAME.SECTION]`, chosen with `cordon run --profile NAME` or by the\n\
         agent command) adds to the policy while it is in use; it may hold {}.\n\
         \n\
         ## Sections\n\
         \n\
         {}\n",
        if profiled.len() == ROOT.sections.len() {
            "any of the sections below".to_string()
        } else {
            join_and(&profiled)
        },
        contents.join("\n")
    )
}

/// One table's example, key table and nested tables, each under a heading of its own.
/// `before` is the entry of the table it sits in (empty for a section), so that the example
/// is a whole valid policy; `None` for a required sub-table, whose example is its parent's.
fn section(
    out: &mut String,
    header: &str,
    path: &str,
    t: &Table,
    defaults: Option<&toml::Value>,
    before: Option<&str>,
) {
    if let Some(b) = before {
        out.push_str(&format!("\n```toml\n{b}{}```\n", entry(header, t, false)));
    }
    // What a nested table's example needs of this one: its required keys, if any.
    let within = before.map(|b| format!("{b}{}", entry(header, t, true)));
    let keys: Vec<&Field> = t.fields.iter().filter(|f| !nested(f)).collect();
    if !keys.is_empty() {
        out.push_str("\n| Key | Value | Built-in | What it does |\n|---|---|---|---|\n");
        for f in keys {
            let builtin = defaults
                .and_then(|d| d.get(f.key))
                .map_or("—".to_string(), shown);
            out.push_str(&format!(
                "| `{}` | {} | {} | {} |\n",
                f.key,
                cell(&shape(f.shape)),
                cell(&builtin),
                cell(&what(f, t.example))
            ));
        }
    }
    for f in t.fields.iter().filter(|f| nested(f)) {
        let sub = format!("{path}.{}", f.key);
        let (h, p, st) = match f.shape {
            Shape::Table(st) => (format!("[{sub}]"), sub.clone(), st),
            Shape::Tables(st) => (format!("[[{sub}]]"), sub.clone(), st),
            Shape::Map(st) => (format!("[{sub}.NAME]"), format!("{sub}.NAME"), st),
            _ => continue,
        };
        let mut intro = doc(f);
        if f.required {
            intro.push_str(&format!(" Required in `{header}`."));
        }
        if let Shape::Table(_) = f.shape {
            intro.push_str(&format!(
                " Written as a table of its own or inline: `{} = {{ … }}`.",
                f.key
            ));
        }
        let sub_defaults = defaults.and_then(|d| d.get(f.key));
        if let Some(toml::Value::Array(items)) = sub_defaults {
            intro.push_str(&format!(
                " The built-in policy has {} (`cordon check` lists them).",
                match items.len() {
                    1 => "one".to_string(),
                    n => format!("{n}"),
                }
            ));
        }
        out.push_str(&format!("\n### `{h}`\n\n{}\n", intro.trim()));
        let inline = f.required && matches!(f.shape, Shape::Table(_));
        let parent = within.as_deref().filter(|_| !inline);
        section(out, &h, &p, st, sub_defaults, parent);
    }
}

/// A short valid entry of the table: its header and required keys (else its first key, or
/// with `only_required` nothing), each with its example — what `cordon init`'s test proves
/// valid uncommented.
fn entry(header: &str, t: &Table, only_required: bool) -> String {
    // A required sub-table is written inline, as `cordon init` writes it.
    let inline = |f: &&Field| !matches!(f.shape, Shape::Tables(_) | Shape::Map(_));
    let required: Vec<&Field> = t
        .fields
        .iter()
        .filter(inline)
        .filter(|f| f.required)
        .collect();
    let shown: Vec<&Field> = match (required.is_empty(), only_required) {
        (true, true) => return String::new(),
        (true, false) => t.fields.iter().filter(|f| !nested(f)).take(1).collect(),
        (false, _) => required,
    };
    let mut out = format!("{header}\n");
    for f in shown {
        out.push_str(&format!("{} = {}\n", f.key, example_value(f, t.example)));
    }
    out
}

/// Sub-tables get a heading and a key table of their own.
fn nested(f: &Field) -> bool {
    matches!(f.shape, Shape::Table(_) | Shape::Tables(_) | Shape::Map(_))
}

/// The description cell: what the key does, an example, and whether it is required or
/// loosens.
fn what(f: &Field, table_example: &str) -> String {
    let mut s = doc(f);
    if f.required {
        s.push_str(" **Required.**");
    }
    if !matches!(f.shape, Shape::Choice(_)) {
        s.push_str(&format!(
            " E.g. `{} = {}`.",
            f.key,
            example_value(f, table_example)
        ));
    }
    if f.loosens {
        s.push_str(" *Loosens the policy: in a project file, runs once you `cordon trust` it.*");
    }
    s.trim().to_string()
}

/// What a value must be, in words.
fn shape(s: Shape) -> String {
    match s {
        Shape::String => "string".into(),
        Shape::Integer => "integer".into(),
        Shape::Number => "number".into(),
        Shape::Boolean => "`true` or `false`".into(),
        Shape::Size => "bytes, or a size such as `\"4G\"`".into(),
        Shape::Strings => "array of strings".into(),
        Shape::Integers => "array of integers".into(),
        Shape::StringTable => "table of strings".into(),
        Shape::StringOrStrings => "string or array of strings".into(),
        Shape::Choice(names) => format!("one of {}", code_choices(names)),
        Shape::Table(_) => "table".into(),
        Shape::Tables(_) => "array of tables".into(),
        Shape::Map(_) => "table of tables".into(),
    }
}

/// `"a"`, `"b"` or `"c"` in code spans.
fn code_choices(names: &[&str]) -> String {
    let q: Vec<String> = names.iter().map(|n| format!("`\"{n}\"`")).collect();
    join_or(&q)
}

/// A built-in value: short ones as written, long lists by their length (`cordon check`
/// prints them whole).
fn shown(v: &toml::Value) -> String {
    match v {
        toml::Value::Array(items) if items.len() > 3 => {
            format!("{} entries (`cordon check` lists them)", items.len())
        }
        toml::Value::Table(t) if t.len() > 3 => {
            format!("{} entries (`cordon check` lists them)", t.len())
        }
        other => format!("`{}`", inline(other)),
    }
}

/// `v` as TOML on one line.
fn inline(v: &toml::Value) -> String {
    match v {
        toml::Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(inline).collect();
            format!("[{}]", parts.join(", "))
        }
        toml::Value::Table(t) => {
            let parts: Vec<String> = t
                .iter()
                .map(|(k, v)| format!("{} = {}", crate::schema::quote_key(k), inline(v)))
                .collect();
            format!("{{ {} }}", parts.join(", "))
        }
        other => other.to_string(),
    }
}

/// Text safe inside a Markdown table cell.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// A doc comment's lines as one paragraph.
fn paragraph(lines: &[&str]) -> String {
    lines.iter().map(|l| l.trim()).collect::<Vec<_>>().join(" ")
}

/// `a, b and c`.
fn join_and(items: &[String]) -> String {
    join_last(items, " and ")
}

/// `a, b or c`.
fn join_or(items: &[String]) -> String {
    join_last(items, " or ")
}

fn join_last(items: &[String], last: &str) -> String {
    match items.split_last() {
        Some((l, [])) => l.clone(),
        Some((l, rest)) => format!("{}{last}{l}", rest.join(", ")),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_section_and_key_is_documented() {
        let r = reference();
        for (name, _, _) in ROOT.sections {
            assert!(
                r.contains(&format!("## `[{name}")) || r.contains(&format!("## `[[{name}")),
                "{name}"
            );
        }
        assert!(r.contains("| `pids` | integer | — |"), "{r}");
        assert!(
            r.contains(
                "| `landlock` | one of `\"required\"` or `\"best-effort\"` | `\"required\"` |"
            ),
            "{r}"
        );
        assert!(r.contains("### `[[exec.rule]]`"), "{r}");
        assert!(r.contains("### `[credentials.NAME.source]`"), "{r}");
    }

    /// Each example entry is a policy the schema accepts (`cordon init`'s test runs the same
    /// examples through `cordon check`).
    #[test]
    fn every_example_entry_passes_the_schema() {
        let r = reference();
        let blocks: Vec<&str> = r
            .split("```toml\n")
            .skip(1)
            .filter_map(|b| b.split_once("```").map(|(code, _)| code))
            .collect();
        assert!(blocks.len() > ROOT.sections.len(), "{r}");
        for b in blocks {
            let table = toml::de::DeTable::parse(b).unwrap_or_else(|e| panic!("{b}: {e}"));
            let checked = crate::schema::Checker {
                src: b,
                file: None,
                root: &ROOT,
            }
            .check(table.get_ref());
            assert!(checked.is_ok(), "{b}: {:?}", checked.err());
        }
    }

    /// A key without a description would be a blank cell: the schema must say what each is.
    #[test]
    fn every_key_and_section_has_a_description() {
        fn walk(path: &str, t: &Table) {
            for f in t.fields {
                assert!(!f.doc.is_empty(), "{path}.{} has no doc comment", f.key);
                if let Shape::Table(st) | Shape::Tables(st) | Shape::Map(st) = f.shape {
                    walk(&format!("{path}.{}", f.key), st);
                }
            }
        }
        for ((name, shape, _), docs) in ROOT.sections.iter().zip(SECTION_DOCS) {
            assert!(!docs.is_empty(), "[{name}] has no doc comment");
            if let Shape::Table(t) | Shape::Tables(t) | Shape::Map(t) = shape {
                walk(name, t);
            }
        }
    }
}
