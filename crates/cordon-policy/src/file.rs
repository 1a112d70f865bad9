//! One policy file: parsed, checked against the schema and converted section by section into
//! a layer of the merge.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::Deserialize;
use toml::de::DeTable;

use crate::error::{Diagnostic, PolicyError};
use crate::schema::Checker;
use crate::sections::{Context, Convert, ROOT, RawFile, Sections};

/// One policy file.
#[derive(Debug, Clone)]
pub(crate) struct ParsedFile {
    /// `None` for the built-in policy.
    pub file: Option<PathBuf>,
    pub src: String,
    pub base: Sections,
    pub profiles: BTreeMap<String, Sections>,
    /// Inside the project and not trusted: what it loosens is reported.
    pub untrusted: bool,
}

/// Parses, checks and expands one policy file whose time of writing is not known (a rule's
/// `for` is refused): tests and the fuzz targets.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn parse_file(
    src: &str,
    file: Option<&Path>,
    layer: usize,
    ctx: &Context<'_>,
) -> Result<ParsedFile, PolicyError> {
    parse_checked(src, file, layer, ctx, true, None)
}

/// [`parse_file`] of a file last written at `written`, which its rules' `for` counts from.
pub(crate) fn parse_file_written(
    src: &str,
    file: Option<&Path>,
    layer: usize,
    ctx: &Context<'_>,
    written: Option<SystemTime>,
) -> Result<ParsedFile, PolicyError> {
    parse_checked(src, file, layer, ctx, true, written)
}

/// [`parse_file`] of the built-in policy, without the schema's walk for unknown keys and
/// mistyped values: its text is part of this binary and the schema is checked on it by the
/// test below (`the_built_in_policy_passes_the_schema`), so repeating that at every start
/// (a tenth of the policy's load) would only check a constant. The deserializer and every
/// conversion still run.
pub(crate) fn parse_built_in(src: &str, ctx: &Context<'_>) -> Result<ParsedFile, PolicyError> {
    parse_checked(src, None, 0, ctx, false, None)
}

/// Which tables of the built-in policy a read keeps: `None` is a base table (anything not
/// under `profile`), `Some((name, table))` a profile's (`table` is `""` for `[profile.NAME]`).
type Keep<'a> = &'a dyn Fn(Option<(&str, &str)>) -> bool;

/// The built-in policy read in part: the tables `keep` keeps, the rest of the text blanked
/// (each byte but a newline made a space), so every offset and line is the whole file's and
/// origins are as the whole file gives them. A start reads the base and every profile's
/// `agent` table (what picks a profile), then the picked profile's other tables
/// ([`built_in_profile`]): the rest, three quarters of the text, is never needed.
/// `tests::the_built_in_read_in_parts_is_the_whole` checks the parts are what the whole
/// file gives.
pub(crate) fn parse_built_in_part(
    src: &str,
    ctx: &Context<'_>,
    keep: Keep<'_>,
) -> Result<ParsedFile, PolicyError> {
    parse_blanked(src, ctx, keep, &mut |_| {})
}

/// [`parse_built_in_part`], telling `profile` each profile a header names.
fn parse_blanked<'s>(
    src: &'s str,
    ctx: &Context<'_>,
    keep: Keep<'_>,
    profile: &mut dyn FnMut(&'s str),
) -> Result<ParsedFile, PolicyError> {
    let kept = blank_but(src, keep, profile);
    let mut parsed = parse_built_in(&kept, ctx)?;
    parsed.src = src.to_string();
    Ok(parsed)
}

/// `src` with the tables `keep` does not keep blanked: each of their bytes but a newline made
/// a space, in runs (a start reads ~600 lines this way, and a character at a time was a fifth
/// of the built-in policy's first read). `profile` hears each profile a header names.
fn blank_but<'s>(src: &'s str, keep: Keep<'_>, profile: &mut dyn FnMut(&'s str)) -> String {
    const SPACES: &str = "                                                                ";
    let mut kept = String::with_capacity(src.len());
    let mut keeping = keep(None);
    for line in src.split_inclusive('\n') {
        if line.starts_with('[') {
            let table = profile_table(line);
            if let Some((name, _)) = table {
                profile(name);
            }
            keeping = keep(table);
        }
        if keeping {
            kept.push_str(line);
            continue;
        }
        let (mut blank, newline) = match line.strip_suffix('\n') {
            Some(body) => (body.len(), true),
            None => (line.len(), false),
        };
        while blank > 0 {
            let n = blank.min(SPACES.len());
            kept.push_str(&SPACES[..n]);
            blank -= n;
        }
        if newline {
            kept.push('\n');
        }
    }
    kept
}

/// The first read of a start: the base and every profile's `agent` table; a profile without
/// one (`shell`, never detected) is there with nothing in it, so `--profile` finds it.
pub(crate) fn parse_built_in_agents(
    src: &str,
    ctx: &Context<'_>,
) -> Result<ParsedFile, PolicyError> {
    let agents = |t: Option<(&str, &str)>| t.is_none_or(|(_, table)| table == "agent");
    let mut profiles = Vec::new();
    let mut parsed = parse_blanked(src, ctx, &agents, &mut |name| profiles.push(name))?;
    for name in profiles {
        parsed.profiles.entry(name.to_string()).or_default();
    }
    Ok(parsed)
}

/// The whole of the built-in profile `name` (`None` when it has none), for
/// [`parse_built_in_part`]'s reads.
pub(crate) fn built_in_profile(
    src: &str,
    name: &str,
    ctx: &Context<'_>,
) -> Result<Option<Sections>, PolicyError> {
    let keep = |t: Option<(&str, &str)>| t.is_some_and(|(n, _)| n == name);
    Ok(parse_built_in_part(src, ctx, &keep)?.profiles.remove(name))
}

/// `(name, table)` of a header line under `profile` (`[profile.NAME.TABLE…]` or
/// `[[profile.NAME.TABLE…]]`); `None` for any other header.
fn profile_table(header: &str) -> Option<(&str, &str)> {
    let inner = header.trim_start_matches('[');
    let rest = inner.strip_prefix("profile.")?;
    let end = rest.find(']')?;
    let mut parts = rest[..end].splitn(3, '.');
    let name = parts.next()?;
    Some((name, parts.next().unwrap_or("")))
}

fn parse_checked(
    src: &str,
    file: Option<&Path>,
    layer: usize,
    ctx: &Context<'_>,
    check: bool,
    written: Option<SystemTime>,
) -> Result<ParsedFile, PolicyError> {
    let table = DeTable::parse(src).map_err(|e| toml_error(&e, src, file))?;
    if check {
        Checker {
            src,
            file,
            root: &ROOT,
        }
        .check(table.get_ref())?;
    }
    let parsed = RawFile::deserialize(toml::de::Deserializer::from(table))
        .map_err(|e| toml_error(&e, src, file))?;
    let mut cx = Convert {
        src,
        file,
        layer,
        ctx,
        phase: 0,
        warnings: Vec::new(),
        newlines: crate::sections::newlines(src),
        written,
    };
    let (base, profile) = parsed.split();
    let base = Sections::convert(base, &mut cx)?;
    cx.phase = 1;
    let mut profiles = BTreeMap::new();
    for (name, p) in profile {
        profiles.insert(name.into_inner(), Sections::convert(p, &mut cx)?);
    }
    Ok(ParsedFile {
        file: file.map(Path::to_path_buf),
        src: src.to_string(),
        base,
        profiles,
        untrusted: false,
    })
}

fn toml_error(e: &toml::de::Error, src: &str, file: Option<&Path>) -> PolicyError {
    let message = e.message().trim().replace('\n', "; ");
    let mut d = Diagnostic::new(format!("invalid TOML: {message}"))
        .in_file(file)
        .with_help("fix the TOML syntax (https://toml.io); strings need quotes, arrays brackets");
    if let Some(span) = e.span() {
        d = d.at(src, span);
    }
    d.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_read_in_parts_is_the_whole() {
        let (h, v, p) = ctx();
        let c = Context {
            home: &h,
            passwd_home: Some(&v),
            project: &p,
        };
        let src = crate::load::DEFAULT_POLICY;
        let whole = parse_file(src, None, 0, &c).unwrap();
        let first = parse_built_in_agents(src, &c).unwrap();
        assert_eq!(first.src, whole.src);
        assert_eq!(format!("{:?}", first.base), format!("{:?}", whole.base));
        assert!(whole.profiles.len() >= 5, "{:?}", whole.profiles.keys());
        let names: Vec<&String> = first.profiles.keys().collect();
        assert_eq!(names, whole.profiles.keys().collect::<Vec<_>>());
        for (name, full) in &whole.profiles {
            // What picks a profile is read for every one of them, first.
            assert_eq!(
                format!("{:?}", first.profiles[name].agent),
                format!("{:?}", full.agent),
                "{name}"
            );
            let read = built_in_profile(src, name, &c).unwrap().unwrap();
            assert_eq!(format!("{read:?}"), format!("{full:?}"), "{name}");
        }
        assert!(
            built_in_profile(src, "no-such-agent", &c)
                .unwrap()
                .is_none()
        );
        // Origins keep the whole file's lines.
        assert_eq!(
            profile_table("[profile.claude.agent]\n"),
            Some(("claude", "agent"))
        );
        assert_eq!(
            profile_table("[[profile.codex.network.allow]]\n"),
            Some(("codex", "network"))
        );
        assert_eq!(profile_table("[profile.x]\n"), Some(("x", "")));
        assert_eq!(profile_table("[network]\n"), None);
        assert_eq!(profile_table("[[network.allow]]\n"), None);
    }

    #[test]
    fn the_built_in_policy_passes_the_schema() {
        let table = DeTable::parse(crate::load::DEFAULT_POLICY).unwrap();
        let checked = Checker {
            src: crate::load::DEFAULT_POLICY,
            file: None,
            root: &ROOT,
        }
        .check(table.get_ref());
        assert!(checked.is_ok(), "{:?}", checked.err());
        // And the start's unchecked parse gives what the checked one gives.
        let (h, v, p) = ctx();
        let c = Context {
            home: &h,
            passwd_home: Some(&v),
            project: &p,
        };
        let checked = parse_file(crate::load::DEFAULT_POLICY, None, 0, &c).unwrap();
        let unchecked = parse_built_in(crate::load::DEFAULT_POLICY, &c).unwrap();
        assert_eq!(
            format!("{:?}", checked.base),
            format!("{:?}", unchecked.base)
        );
        assert_eq!(
            format!("{:?}", checked.profiles),
            format!("{:?}", unchecked.profiles)
        );
    }
    use crate::plan::{ExecAction, OnExit, ProjectFiles};

    fn ctx() -> (PathBuf, PathBuf, PathBuf) {
        ("/home/u".into(), "/home/v".into(), "/work/p".into())
    }

    #[test]
    fn deny_under_home_uses_both_homes_other_lists_do_not() {
        let (h, ph, p) = ctx();
        let c = Context {
            home: &h,
            passwd_home: Some(&ph),
            project: &p,
        };
        let src = "[filesystem]\ndeny = [\"~/.ssh\", \"/etc/x\"]\nwritable = [\"~/.cache\"]\n";
        let l = parse_file(src, Some(Path::new("/f.toml")), 1, &c).unwrap();
        let deny: Vec<_> = l
            .base
            .filesystem
            .deny
            .iter()
            .map(|r| r.path.clone())
            .collect();
        assert_eq!(
            deny,
            [
                PathBuf::from("/home/u/.ssh"),
                "/home/v/.ssh".into(),
                "/etc/x".into()
            ]
        );
        assert_eq!(l.base.filesystem.deny[1].origin.label, "/f.toml:2");
        assert_eq!(l.base.filesystem.writable.len(), 1);
        assert_eq!(l.base.filesystem.writable[0].origin.label, "/f.toml:3");
    }

    #[test]
    fn origins_name_the_line_of_each_entry_and_duplicates_keep_the_first() {
        let (h, _, p) = ctx();
        let c = Context {
            home: &h,
            passwd_home: None,
            project: &p,
        };
        // Entries on the first line, after blank and CRLF lines, and on the last line without
        // a final newline; `/a//b` is the same path as `/a/b` and keeps the first origin.
        let src = "[filesystem]\r\ndeny = [\"/a/b\",\n\n  \"/c\",\r\n\"/a//b\", \"/d\"]";
        let l = parse_file(src, Some(Path::new("/f.toml")), 1, &c).unwrap();
        let got: Vec<_> = l
            .base
            .filesystem
            .deny
            .iter()
            .map(|r| (r.path.clone(), r.origin.line, r.origin.label.clone()))
            .collect();
        assert_eq!(
            got,
            [
                (PathBuf::from("/a/b"), 2, "/f.toml:2".to_string()),
                ("/c".into(), 4, "/f.toml:4".into()),
                ("/d".into(), 5, "/f.toml:5".into()),
            ]
        );
    }

    #[test]
    fn same_home_is_not_doubled() {
        let (h, _, p) = ctx();
        let c = Context {
            home: &h,
            passwd_home: Some(&h),
            project: &p,
        };
        let l = parse_file("[filesystem]\ndeny = [\"~/.ssh\"]", None, 0, &c).unwrap();
        assert_eq!(l.base.filesystem.deny.len(), 1);
        assert_eq!(l.base.filesystem.deny[0].origin.label, "built-in");
    }

    #[test]
    fn variable_caret_points_at_the_variable() {
        let (h, _, p) = ctx();
        let c = Context {
            home: &h,
            passwd_home: None,
            project: &p,
        };
        let src = "[filesystem]\nreadable = [\"/a/${FOO}/b\"]\n";
        let err = parse_file(src, Some(Path::new("/f")), 1, &c).unwrap_err();
        let loc = err.diagnostic().unwrap().location.clone().unwrap();
        assert_eq!((loc.line, loc.column, loc.width), (2, 17, 6));
    }

    #[test]
    fn escaped_string_falls_back_to_the_whole_literal() {
        let (h, _, p) = ctx();
        let c = Context {
            home: &h,
            passwd_home: None,
            project: &p,
        };
        let src = "[filesystem]\nreadable = [\"/a\\u0041/${FOO}\"]\n";
        let err = parse_file(src, Some(Path::new("/f")), 1, &c).unwrap_err();
        let loc = err.diagnostic().unwrap().location.clone().unwrap();
        assert_eq!((loc.line, loc.column), (2, 13));
        assert!(err.to_string().contains("unknown variable `FOO`"));
    }

    fn layer(src: &str) -> Result<ParsedFile, PolicyError> {
        let (h, _, p) = ctx();
        let c = Context {
            home: &h,
            passwd_home: None,
            project: &p,
        };
        parse_file(src, Some(Path::new("/f")), 1, &c)
    }

    #[test]
    fn exec_rules_in_file_order_then_deny_ask_allow() {
        let src = "[exec]\nallow = [\"a *\"]\nask = [\"b *\"]\ndeny = [\"c *\", \"c *\"]\nask_timeout = 9\n\
                   [[exec.rule]]\npattern = \"r1\"\naction = \"allow\"\n\
                   [[exec.rule]]\naction = \"deny\"\npattern = \"*\"\n";
        let l = layer(src).unwrap();
        let got: Vec<(&str, ExecAction, &str)> = l
            .base
            .exec
            .rules
            .iter()
            .map(|(p, a, _, o)| (p.as_str(), *a, o.label.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("r1", ExecAction::Allow, "/f:7"),
                ("*", ExecAction::Deny, "/f:11"),
                ("c *", ExecAction::Deny, "/f:4"),
                ("b *", ExecAction::Ask, "/f:3"),
                ("a *", ExecAction::Allow, "/f:2"),
            ]
        );
        assert_eq!(l.base.exec.ask_timeout.as_ref().map(|t| t.0), Some(9));
    }

    #[test]
    fn syscall_names() {
        let l = layer("[syscalls]\nallow = [\"ptrace\", \"ptrace\"]\ndeny = [\"chroot\"]\nnested_userns = true\n")
            .unwrap();
        assert_eq!(l.base.syscalls.allow.len(), 1);
        assert_eq!(l.base.syscalls.deny[0].0, "chroot");
        assert_eq!(l.base.syscalls.deny[0].1.label, "/f:3");
        assert_eq!(
            l.base.syscalls.nested_userns.as_ref().map(|n| n.0),
            Some(true)
        );
        assert!(l.base.warnings.is_empty());

        // A name of the other architecture only (aarch64's are a subset of x86_64's), or a
        // built-in denial newer than the tables: a warning, not an error.
        let other = if cfg!(target_arch = "aarch64") {
            "open"
        } else {
            "open_tree_attr"
        };
        let l = layer(&format!("[syscalls]\ndeny = [\"{other}\"]\n")).unwrap();
        let w = &l.base.warnings;
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].starts_with(&format!(
                "/f:2: syscall `{other}` (syscalls.deny) does not exist on"
            )),
            "{w:?}"
        );
        assert_eq!(l.base.syscalls.deny[0].0, other);
        // iopl is x86-only and denied by default: allowing it is valid on both.
        let l = layer("[syscalls]\nallow = [\"iopl\"]\n").unwrap();
        assert_eq!(l.base.syscalls.allow[0].0, "iopl");

        for (src, msg) in [
            (
                "[syscalls]\ndeny = [\"SYS_chroot\"]\n",
                "did you mean `chroot`?",
            ),
            ("[syscalls]\ndeny = [\"\"]\n", "unknown syscall \"\""),
            ("[syscalls]\ndeny = [\"execve\"]\n", "use [exec] rules"),
            (
                "[syscalls]\nallow = [\"unshare\"]\n",
                "nested_userns = true",
            ),
            ("[syscalls]\nallow = [\"ioctl\"]\n", "TIOCSTI"),
            (
                "[syscalls]\nallow = [\"read\"]\n",
                "denied by default: `kexec_load`",
            ),
            ("[syscalls]\nnested_userns = \"yes\"\n", "must be a boolean"),
            (
                "[exec]\ndeny = [\"  \"]\n",
                "empty exec pattern in exec.deny",
            ),
            (
                "[exec]\nask = [\" git\"]\n",
                "starts or ends with whitespace",
            ),
            ("[exec]\nask_timeout = 0\n", "from 1 to 3600 seconds"),
            (
                "[exec]\nask_timeout = 3601\n",
                "`ask_timeout` is out of range",
            ),
            (
                "[[exec.rule]]\npattern = \"x\"\n",
                "[[exec.rule]] has no `action`",
            ),
            (
                "[[exec.rule]]\naction = \"ask\"\n",
                "[[exec.rule]] has no `pattern`",
            ),
            (
                "[[exec.rule]]\npattern = \"x\"\naction = \"Deny\"\n",
                "did you mean \"deny\"?",
            ),
            (
                "[[exec.rule]]\npattern = \"x\"\naction = \"ask\"\nwhy = 1\n",
                "unknown key `why` in [[exec.rule]]",
            ),
            (
                "[profile.p.exec]\nrule = [1]\n",
                "elements of `rule` in [profile.p.exec] must be tables",
            ),
            (
                "[profile.p.exec]\nrule = [{ pattern = \"x\", action = 1 }]\n",
                "`action` in [[profile.p.exec.rule]] must be a string",
            ),
            ("[exec]\nrule = \"x\"\n", "must be an array of tables"),
        ] {
            let e = layer(src).unwrap_err().to_string();
            assert!(e.contains(msg), "{src:?}: {e}");
            assert!(e.contains("help:"), "{src:?}: {e}");
        }
    }

    #[test]
    fn state_section() {
        let l = layer(
            "[state]\nprotect = [\"~/.claude\", \"${PROJECT}/../notes\", \"~/.claude\"]\n\
             on_exit = \"discard\"\nproject_files = \"staged\"\n\
             [profile.x.state]\nprotect = [\"$HOME/.x\"]\non_exit = \"keep\"\n",
        )
        .unwrap();
        let paths: Vec<_> = l
            .base
            .state
            .protect
            .iter()
            .map(|r| r.path.clone())
            .collect();
        assert_eq!(
            paths,
            [PathBuf::from("/home/u/.claude"), "/work/notes".into()]
        );
        assert_eq!(l.base.state.protect[1].origin.label, "/f:2");
        let (v, o) = l.base.state.on_exit.as_ref().unwrap();
        assert_eq!((*v, o.label.as_str()), (OnExit::Discard, "/f:3"));
        assert_eq!(
            l.base.state.project_files.as_ref().map(|p| p.0),
            Some(ProjectFiles::Staged)
        );
        let x = &l.profiles["x"];
        assert_eq!(x.state.protect[0].path, Path::new("/home/u/.x"));
        assert_eq!(x.state.on_exit.as_ref().map(|v| v.0), Some(OnExit::Keep));
        assert!(x.state.project_files.is_none());

        for (src, msg) in [
            (
                "[state]\non_exit = \"never\"\n",
                "invalid value \"never\" for `on_exit`",
            ),
            ("[state]\non_exit = \"Keep\"\n", "did you mean \"keep\"?"),
            (
                "[state]\non_exit = \"pendng\"\n",
                "did you mean \"pending\"?",
            ),
            (
                "[state]\nproject_files = \"read-only\"\n",
                "did you mean \"readonly\"?",
            ),
            (
                "[state]\nproject_files = \"x\"\n",
                "expected \"readonly\" or \"staged\"",
            ),
            (
                "[state]\non_exit = true\n",
                "expected \"ask\", \"keep\", \"discard\" or \"pending\"",
            ),
            ("[state]\nprotect = \"~/.x\"\n", "write it as an array"),
            (
                "[state]\nprotect = [\"x\"]\n",
                "relative path \"x\" in protect",
            ),
            (
                "[state]\nprotect = [\"${X}/y\"]\n",
                "unknown variable `X` in protect path",
            ),
            ("[state]\nprotected = [\"/x\"]\n", "did you mean `protect`?"),
            (
                "[profile.p.state]\non_exit = 1\n",
                "`on_exit` in [profile.p.state] must be a string",
            ),
            ("[stat]\n", "did you mean `state`?"),
            ("[profile.p.stat]\n", "did you mean `state`?"),
        ] {
            let e = layer(src).unwrap_err().to_string();
            assert!(e.contains(msg), "{src:?}: {e}");
            assert!(e.contains("help:"), "{src:?}: {e}");
        }
    }

    #[test]
    fn profiles_are_parsed() {
        let (h, _, p) = ctx();
        let c = Context {
            home: &h,
            passwd_home: None,
            project: &p,
        };
        let src = "[profile.x.env]\npass = [\"A\"]\n[profile.x.limits]\npids = 5\n";
        let l = parse_file(src, None, 0, &c).unwrap();
        let x = &l.profiles["x"];
        assert_eq!(x.env.pass[0].0, "A");
        assert_eq!(x.limits.pids.as_ref().unwrap().0, 5);
        assert_eq!(x.limits.pids.as_ref().unwrap().1.order.0, 1);
    }
}
