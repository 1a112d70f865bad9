//! `cordon init`: a commented `cordon.toml` for the project, from the policy schema.

use std::io::Write;

use anyhow::{Context, Result, anyhow, bail};

use crate::cli::{InitArgs, PolicyArgs};

pub fn init(a: InitArgs) -> i32 {
    match write(&a) {
        Ok(path) => {
            println!(
                "wrote {}: every key commented out; uncomment what the project needs, then \
                 `cordon check`",
                path.display()
            );
            0
        }
        Err(e) => {
            eprintln!("cordon: init: {}", crate::output::chain(&e));
            1
        }
    }
}

fn write(a: &InitArgs) -> Result<std::path::PathBuf> {
    let project = crate::commands::resolve_project(a.project.as_deref())?;
    let path = project.join("cordon.toml");
    let additions = match &a.profile {
        Some(name) => Some((name.as_str(), profile_additions(&project, name)?)),
        None => None,
    };
    let text = cordon_policy::template(additions.as_ref().map(|(n, l)| (*n, l.as_str())));
    let mut open = std::fs::OpenOptions::new();
    open.write(true);
    if a.force {
        open.create(true).truncate(true);
    } else {
        // Never a check-then-write race with an existing file: creation itself refuses.
        open.create_new(true);
    }
    let mut f = match open.open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => bail!(
            "{} exists already; keep it, or pass --force to replace it",
            path.display()
        ),
        Err(e) => return Err(e).with_context(|| format!("cannot create {}", path.display())),
    };
    f.write_all(text.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

/// The lines of the effective policy (as `cordon check` prints it) that `--profile NAME`
/// adds to the project's policy without it.
fn profile_additions(project: &std::path::Path, name: &str) -> Result<String> {
    let load = |profile: Option<String>| {
        let args = PolicyArgs {
            project: Some(project.to_path_buf()),
            profile,
        };
        let opts = crate::commands::load_options(None, &args, project.to_path_buf());
        cordon_policy::load(&opts).map_err(|e| anyhow!("{e}"))
    };
    let without = load(None)?.plan.to_toml();
    let with = load(Some(name.to_string()))
        .with_context(|| format!("profile `{name}`"))?
        .plan
        .to_toml();
    let base = units(&without);
    let mut out = String::new();
    let mut shown_section = "";
    for (section, head, items) in units(&with) {
        let before = base.iter().find(|(s, h, _)| *s == section && *h == head);
        let new: Vec<&str> = match before {
            Some(_) if items.is_empty() => continue,
            Some((_, _, old)) => items.iter().filter(|i| !old.contains(i)).copied().collect(),
            None => items.clone(),
        };
        if before.is_some() && new.is_empty() {
            continue;
        }
        if shown_section != section {
            out.push_str(section);
            out.push('\n');
            shown_section = section;
        }
        out.push_str(head);
        out.push('\n');
        if !items.is_empty() {
            for i in new {
                out.push_str(i);
                out.push('\n');
            }
            out.push_str("]\n");
        }
    }
    if out.is_empty() {
        out.push_str("(nothing beyond the policy without it)\n");
    }
    Ok(out)
}

/// `cordon check`'s TOML as (section header, key line, items of a multi-line array): enough
/// to tell which keys and array entries a profile adds.
fn units(toml: &str) -> Vec<(&str, &str, Vec<&str>)> {
    let mut out: Vec<(&str, &str, Vec<&str>)> = Vec::new();
    let mut section = "";
    let mut open = false;
    for l in toml.lines() {
        if open {
            if l.trim() == "]" {
                open = false;
            } else if let Some(last) = out.last_mut() {
                last.2.push(l);
            }
            continue;
        }
        if l.trim().is_empty() || l.starts_with('#') {
            continue;
        }
        if l.starts_with('[') {
            section = l;
            continue;
        }
        open = l.trim_end().ends_with('[');
        out.push((section, l, Vec::new()));
    }
    out
}
