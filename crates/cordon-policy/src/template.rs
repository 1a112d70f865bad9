//! The commented `cordon.toml` that `cordon init` writes: every section and key of the
//! schema, commented out, with the schema's own examples — generated from the section
//! declarations, so a new key appears here without anyone re-spelling it.

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
         # decides a request, a path or a command.\n",
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

/// One table: its header, its plain keys, then its nested tables (TOML wants them last).
fn table(out: &mut String, header: &str, path: &str, t: &Table) {
    out.push_str(&format!("# {header}\n"));
    if !t.example.is_empty() {
        out.push_str(&format!("#   (e.g. {})\n", t.example));
    }
    let nested = |f: &&Field| matches!(f.shape, Shape::Table(_) | Shape::Tables(_) | Shape::Map(_));
    for f in t.fields.iter().filter(|f| !nested(f)) {
        out.push_str(&format!("# {}\n", line(f, t.example)));
    }
    for f in t.fields.iter().filter(nested) {
        let sub = format!("{path}.{}", f.key);
        match f.shape {
            Shape::Table(st) => table(out, &format!("[{sub}]"), &sub, st),
            Shape::Tables(st) => table(out, &format!("[[{sub}]]"), &sub, st),
            Shape::Map(st) => table(out, &format!("[{sub}.NAME]"), &format!("{sub}.NAME"), st),
            _ => {}
        }
    }
}

/// `key = value  # what it is`, the value from the field's example, else from the table's
/// (`host = "github.com" and ports = [22]`), else a placeholder of the right type.
fn line(f: &Field, table_example: &str) -> String {
    let assigned = |text: &str| {
        text.split(" or ")
            .flat_map(|t| t.split(" and "))
            .flat_map(|t| t.split(", "))
            .find_map(|t| {
                let (k, v) = t.split_once('=')?;
                (k.trim() == f.key).then(|| v.trim().to_string())
            })
    };
    let written = match assigned(f.example).or_else(|| assigned(table_example)) {
        Some(v) => format!("{} = {v}", f.key),
        None => format!("{} = {}", f.key, value(&f.shape)),
    };
    let mut notes = Vec::new();
    if let Shape::Choice(names) = f.shape {
        notes.push(format!("one of {}", crate::schema::quoted_choices(names)));
    }
    if f.required {
        notes.push("required".to_string());
    }
    if notes.is_empty() {
        written
    } else {
        format!("{written}  # {}", notes.join("; "))
    }
}

/// A placeholder value of the right type.
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
}
