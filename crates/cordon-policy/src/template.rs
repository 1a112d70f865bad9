//! The commented `cordon.toml` that `cordon init` writes: every section and key of the
//! schema, commented out, with the schema's own examples — generated from the section
//! declarations, so a new key appears here without anyone re-spelling it. Every example is
//! valid uncommented, and one that loosens the built-in policy says so: the `cordon` crate's
//! `tests/init.rs` uncomments each and runs `cordon check` on it.

use crate::schema::{Field, Shape, Table};
use crate::sections::ROOT;

/// A policy file in which every section and key is a comment: it loads as an empty policy,
/// and each line is there to uncomment. `additions`, when given, are shown (commented) under
/// a heading naming the profile they come from.
pub fn template(additions: Option<(&str, &str)>) -> String {
    let mut out = String::from(
        "# cordon.toml: this project's sandbox policy, merged over your own\n\
         # (~/.config/cordon/cordon.toml) and cordon's built-in default, which already fences\n\
         # the filesystem, network and exec. Uncomment only what this project needs; a file that\n\
         # loosens your policy runs only once you `cordon trust` it.\n\
         # `cordon check` prints the effective policy; `cordon explain …` says which rule\n\
         # decides a request, a path or a command. docs/policy.md describes every key.\n",
    );
    if let Some((profile, lines)) = additions {
        out.push_str(&format!(
            "\n# Run with `cordon run --profile {profile} -- …`; the profile adds to the policy:\n"
        ));
        for l in lines.lines() {
            out.push_str(&format!("#   {l}\n"));
        }
    }
    for (name, shape, _) in ROOT.sections {
        out.push('\n');
        match shape {
            Shape::Table(t) => table(&mut out, &format!("[{name}]"), name, t),
            Shape::Tables(t) => table(&mut out, &format!("[[{name}]]"), name, t),
            Shape::Map(t) => table(
                &mut out,
                &format!("[{name}.NAME]"),
                &format!("{name}.NAME"),
                t,
            ),
            other => out.push_str(&format!("# {name} = {}\n", value(other))),
        }
    }
    out
}

/// One table: its header, its plain keys, then its nested tables (TOML wants them last). A
/// required sub-table is written inline among the keys (`source = { env = "GH_TOKEN" }`), so
/// that uncommenting the table's required lines gives a valid entry.
fn table(out: &mut String, header: &str, path: &str, t: &Table) {
    // Each key carries its own example; the table's (a help line's `a = 1 and b = 2`) is
    // not TOML, so it is not repeated here.
    out.push_str(&format!("# {header}\n"));
    for f in t.fields.iter().filter(|f| !nested(f)) {
        for l in wrap(&doc(f), 88) {
            out.push_str(&format!("#   {l}\n"));
        }
        out.push_str(&format!("# {}\n", line(f, t.example)));
    }
    for f in t.fields.iter().filter(|f| nested(f)) {
        let sub = format!("{path}.{}", f.key);
        match f.shape {
            Shape::Table(st) => table(out, &format!("[{sub}]"), &sub, st),
            Shape::Tables(st) => table(out, &format!("[[{sub}]]"), &sub, st),
            Shape::Map(st) => table(out, &format!("[{sub}.NAME]"), &format!("{sub}.NAME"), st),
            _ => {}
        }
    }
}

/// Whether a field is written as a table of its own rather than as a key line.
fn nested(f: &Field) -> bool {
    match f.shape {
        Shape::Table(_) => !f.required,
        Shape::Tables(_) | Shape::Map(_) => true,
        _ => false,
    }
}

/// `key = value  # notes`, the value from the field's example, else from the table's
/// (`host = "github.com" and ports = [22]`), else a placeholder of the right type.
fn line(f: &Field, table_example: &str) -> String {
    let written = format!("{} = {}", f.key, example_value(f, table_example));
    let mut notes = Vec::new();
    if let Shape::Choice(names) = f.shape {
        notes.push(format!("one of {}", crate::schema::quoted_choices(names)));
    }
    if let Shape::Table(t) = f.shape {
        notes.push(format!("a table of {}", t.keys().join(", ")));
    }
    if f.required {
        notes.push("required".to_string());
    }
    if f.loosens {
        notes.push(LOOSENS.to_string());
    }
    if notes.is_empty() {
        written
    } else {
        format!("{written}  # {}", notes.join("; "))
    }
}

/// The note on a key that exists to loosen the built-in policy.
pub(crate) const LOOSENS: &str = "loosens: runs once you `cordon trust` it";

/// What a field does, its doc comment's lines as one paragraph.
pub(crate) fn doc(f: &Field) -> String {
    f.doc.iter().map(|l| l.trim()).collect::<Vec<_>>().join(" ")
}

/// `text` in lines of at most `width` characters, broken at spaces.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for w in text.split_whitespace() {
        match lines.last_mut() {
            Some(l) if l.len() + 1 + w.len() <= width => {
                l.push(' ');
                l.push_str(w);
            }
            _ => lines.push(w.to_string()),
        }
    }
    lines
}

/// The value the field's example (else its table's) assigns to it, else a placeholder of the
/// right type. An example may hold several assignments (`host = "a" or host = "b"`,
/// `x = 1, y = 2`): the value is the shortest text after `key = ` that ends at such a
/// separator and is TOML on its own, so arrays and inline tables with commas stay whole.
pub(crate) fn example_value(f: &Field, table_example: &str) -> String {
    example_of(f, table_example).unwrap_or_else(|| value(&f.shape))
}

/// The value the field's example (else its table's) assigns to it, if one does.
fn example_of(f: &Field, table_example: &str) -> Option<String> {
    let assigned = |text: &str| {
        let at = format!("{} = ", f.key);
        let starts = text.match_indices(&at).map(|(i, _)| i).filter(|&i| {
            i == 0
                || [", ", " or ", " and "]
                    .iter()
                    .any(|s| text[..i].ends_with(s))
        });
        starts.into_iter().find_map(|i| {
            let rest = &text[i + at.len()..];
            let ends = [", ", " or ", " and "]
                .iter()
                .flat_map(|s| rest.match_indices(s).map(|(j, _)| j))
                .chain([rest.len()]);
            let mut ends: Vec<usize> = ends.collect();
            ends.sort_unstable();
            ends.into_iter()
                .map(|j| rest[..j].trim())
                .find(|v| toml::from_str::<toml::Table>(&format!("v = {v}")).is_ok())
                .map(str::to_string)
        })
    };
    assigned(f.example).or_else(|| assigned(table_example))
}

/// A placeholder value of the right type, for a field with no example.
fn value(shape: &Shape) -> String {
    match shape {
        Shape::String => "\"\"".into(),
        Shape::Integer | Shape::Number => "0".into(),
        Shape::Boolean => "false".into(),
        Shape::Size => "\"4G\"".into(),
        Shape::Strings | Shape::Integers | Shape::StringOrStrings => "[]".into(),
        Shape::StringTable => "{}".into(),
        Shape::Choice(names) => crate::schema::toml_string(names.first().copied().unwrap_or("")),
        Shape::Table(_) | Shape::Tables(_) | Shape::Map(_) => "{}".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each commented line, uncommented, is TOML of the right shape for its section: the
    /// template is the schema, not a hand-written copy of it.
    #[test]
    fn every_section_is_there_and_the_whole_file_is_comments() {
        let t = template(Some((
            "claude",
            "[[network.allow]]\nhost = \"api.anthropic.com\"",
        )));
        for (name, _, _) in ROOT.sections {
            assert!(
                t.contains(&format!("# [{name}"))
                    || t.contains(&format!("# [[{name}"))
                    || t.contains(&format!("# {name} =")),
                "{name} missing:\n{t}"
            );
        }
        assert!(t.lines().all(|l| l.is_empty() || l.starts_with('#')), "{t}");
        assert!(t.contains("#   host = \"api.anthropic.com\""));
        assert!(t.contains("# host = \"github.com\""), "{t}");
        let parsed: toml::Table = toml::from_str(&t).unwrap();
        assert!(parsed.is_empty());
    }

    /// A placeholder (`0`, `""`, `[]`) is rarely a value anyone would write, and `0` is out
    /// of range for most counts: every key the template writes has an example of its own.
    #[test]
    fn every_key_line_has_an_example_that_is_toml() {
        fn walk(path: &str, t: &Table) {
            for f in t.fields {
                match f.shape {
                    Shape::Tables(st) | Shape::Map(st) => walk(&format!("{path}.{}", f.key), st),
                    Shape::Table(st) if !f.required => walk(&format!("{path}.{}", f.key), st),
                    Shape::Choice(_) => {}
                    _ => {
                        let v = example_of(f, "")
                            .unwrap_or_else(|| panic!("{path}.{}: no example", f.key));
                        let doc = format!("{} = {v}", f.key);
                        assert!(toml::from_str::<toml::Table>(&doc).is_ok(), "{path}: {doc}");
                    }
                }
            }
        }
        for (name, shape, _) in ROOT.sections {
            if let Shape::Table(t) | Shape::Tables(t) | Shape::Map(t) = shape {
                walk(name, t);
            }
        }
        // Several assignments in one example, commas inside values kept whole.
        let f = Field {
            key: "headers",
            shape: Shape::Strings,
            required: false,
            shorthand: false,
            loosens: false,
            example: "headers = [\"x-api-key\", \"authorization: Bearer {}\"] or query = \"key\"",
            doc: &[],
        };
        assert_eq!(
            example_value(&f, ""),
            "[\"x-api-key\", \"authorization: Bearer {}\"]"
        );
    }
}
