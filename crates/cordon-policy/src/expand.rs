//! Path expansion (`~`, `$HOME`, `${HOME}`, `${PROJECT}`, the XDG base directories,
//! `$XDG_RUNTIME_DIR`) and lexical normalisation.

use std::ffi::OsString;
use std::ops::Range;
use std::path::{Path, PathBuf};

pub(crate) use cordon_events::lexical::normalize;

/// Why a policy path could not be expanded. Ranges are byte offsets into the raw string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ExpandError {
    /// `$NAME` or `${NAME}` other than HOME and PROJECT.
    UnknownVariable { name: String, at: Range<usize> },
    /// A `$` that does not start a variable, or an unclosed `${`.
    BadDollar { at: Range<usize> },
    /// `~user`.
    TildeUser,
    /// Not absolute after expansion.
    Relative,
    /// An empty string.
    Empty,
    /// A NUL byte, which no path can contain.
    Nul,
    /// `$XDG_RUNTIME_DIR` is unset (or not absolute): it has no default, so the entry names
    /// nothing on this host and is dropped rather than refused (the built-in policy masks the
    /// runtime directory wherever there is one).
    Unset,
}

/// The values variables expand to.
#[derive(Debug, Clone)]
pub(crate) struct Vars<'a> {
    pub home: &'a Path,
    pub project: &'a Path,
}

/// The XDG base directories a path may name, each with its default under the home. An agent
/// that follows them keeps its state wherever the user pointed them, so a profile names
/// `$XDG_CONFIG_HOME/opencode`, not `~/.config/opencode`.
const XDG: &[(&str, &str)] = &[
    ("XDG_CONFIG_HOME", ".config"),
    ("XDG_DATA_HOME", ".local/share"),
    ("XDG_STATE_HOME", ".local/state"),
    ("XDG_CACHE_HOME", ".cache"),
];

/// The user's runtime directory (sockets: D-Bus, pulse, wayland, ssh/gpg agents). Unlike the
/// base directories it has no default: unset, relative or empty, it is [`ExpandError::Unset`].
pub(crate) const RUNTIME_DIR: &str = "XDG_RUNTIME_DIR";

/// The value of XDG variable `name`: the environment's when absolute (the spec says a relative
/// or empty one is ignored), else the default under `home`. `None` when `name` is no XDG base
/// directory.
fn xdg_dir(name: &str, home: &Path, env: &dyn Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let (_, default) = XDG.iter().find(|(n, _)| *n == name)?;
    match env(name).map(PathBuf::from) {
        Some(p) if p.is_absolute() => Some(p),
        _ => Some(home.join(default)),
    }
}

/// Whether the raw path refers to the home directory (so deny rules apply to both homes).
pub(crate) fn uses_home(raw: &str) -> bool {
    raw == "~" || raw.starts_with("~/") || raw.contains("$HOME") || raw.contains("${HOME}")
}

fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Expands `raw` and normalises the result lexically. The result is absolute. The XDG
/// variables are read from cordon's own environment, which the sandbox inherits: the agent
/// inside resolves them to the same directories.
pub(crate) fn expand(raw: &str, vars: &Vars<'_>) -> Result<PathBuf, ExpandError> {
    expand_with(raw, vars, &|n| std::env::var_os(n))
}

fn expand_with(
    raw: &str,
    vars: &Vars<'_>,
    env: &dyn Fn(&str) -> Option<OsString>,
) -> Result<PathBuf, ExpandError> {
    if raw.is_empty() {
        return Err(ExpandError::Empty);
    }
    if raw.contains('\0') {
        return Err(ExpandError::Nul);
    }
    let mut out = OsString::new();
    let mut rest_start = 0;
    if raw == "~" || raw.starts_with("~/") {
        out.push(vars.home.as_os_str());
        rest_start = 1;
    } else if raw.starts_with('~') {
        return Err(ExpandError::TildeUser);
    }
    let bytes = raw.as_bytes();
    let mut i = rest_start;
    let mut literal_start = i;
    while i < bytes.len() {
        if bytes[i] != b'$' {
            i += 1;
            continue;
        }
        out.push(&raw[literal_start..i]);
        let dollar = i;
        let (name, end) = if bytes.get(i + 1) == Some(&b'{') {
            match raw[i + 2..].find('}') {
                Some(close) => (&raw[i + 2..i + 2 + close], i + 2 + close + 1),
                None => {
                    return Err(ExpandError::BadDollar {
                        at: dollar..raw.len(),
                    });
                }
            }
        } else {
            let len = bytes[i + 1..]
                .iter()
                .take_while(|b| is_name_byte(**b))
                .count();
            (&raw[i + 1..i + 1 + len], i + 1 + len)
        };
        match name {
            "HOME" => out.push(vars.home.as_os_str()),
            "PROJECT" => out.push(vars.project.as_os_str()),
            RUNTIME_DIR => match env(RUNTIME_DIR).map(PathBuf::from) {
                Some(p) if p.is_absolute() => out.push(p.as_os_str()),
                _ => return Err(ExpandError::Unset),
            },
            xdg if let Some(dir) = xdg_dir(xdg, vars.home, env) => out.push(dir.as_os_str()),
            "" => {
                return Err(ExpandError::BadDollar {
                    at: dollar..end.max(dollar + 1),
                });
            }
            other => {
                return Err(ExpandError::UnknownVariable {
                    name: other.to_string(),
                    at: dollar..end,
                });
            }
        }
        i = end;
        literal_start = end;
    }
    out.push(&raw[literal_start..]);
    let path = PathBuf::from(out);
    if !path.is_absolute() {
        return Err(ExpandError::Relative);
    }
    Ok(normalize(&path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ex(raw: &str) -> Result<PathBuf, ExpandError> {
        expand(
            raw,
            &Vars {
                home: Path::new("/home/u"),
                project: Path::new("/work/p"),
            },
        )
    }

    #[test]
    fn expands_home_and_project() {
        assert_eq!(ex("~").unwrap(), PathBuf::from("/home/u"));
        assert_eq!(ex("~/").unwrap(), PathBuf::from("/home/u"));
        assert_eq!(ex("~/.ssh").unwrap(), PathBuf::from("/home/u/.ssh"));
        assert_eq!(ex("$HOME/.x").unwrap(), PathBuf::from("/home/u/.x"));
        assert_eq!(ex("${HOME}/.x").unwrap(), PathBuf::from("/home/u/.x"));
        assert_eq!(
            ex("${PROJECT}/.git/hooks").unwrap(),
            PathBuf::from("/work/p/.git/hooks")
        );
        assert_eq!(ex("$PROJECT").unwrap(), PathBuf::from("/work/p"));
        assert_eq!(ex("/mnt/${PROJECT}").unwrap(), PathBuf::from("/mnt/work/p"));
        assert_eq!(ex("/a/b~c").unwrap(), PathBuf::from("/a/b~c"));
    }

    #[test]
    fn expands_xdg_from_the_environment_or_its_default() {
        let vars = Vars {
            home: Path::new("/home/u"),
            project: Path::new("/work/p"),
        };
        let unset = |_: &str| None;
        let set = |n: &str| match n {
            "XDG_CONFIG_HOME" => Some(OsString::from("/elsewhere/cfg")),
            "XDG_DATA_HOME" => Some(OsString::from("relative/ignored")),
            "XDG_STATE_HOME" => Some(OsString::new()),
            _ => None,
        };
        let ex = |raw, env: &dyn Fn(&str) -> Option<OsString>| expand_with(raw, &vars, env);
        assert_eq!(
            ex("$XDG_CONFIG_HOME/opencode", &unset).unwrap(),
            PathBuf::from("/home/u/.config/opencode")
        );
        assert_eq!(
            ex("${XDG_DATA_HOME}/opencode", &unset).unwrap(),
            PathBuf::from("/home/u/.local/share/opencode")
        );
        assert_eq!(
            ex("$XDG_STATE_HOME/x", &unset).unwrap(),
            PathBuf::from("/home/u/.local/state/x")
        );
        assert_eq!(
            ex("$XDG_CACHE_HOME/x", &unset).unwrap(),
            PathBuf::from("/home/u/.cache/x")
        );
        assert_eq!(
            ex("$XDG_CONFIG_HOME/opencode", &set).unwrap(),
            PathBuf::from("/elsewhere/cfg/opencode")
        );
        // A relative or empty value is ignored, as the XDG spec says.
        assert_eq!(
            ex("$XDG_DATA_HOME/opencode", &set).unwrap(),
            PathBuf::from("/home/u/.local/share/opencode")
        );
        assert_eq!(
            ex("$XDG_STATE_HOME/opencode", &set).unwrap(),
            PathBuf::from("/home/u/.local/state/opencode")
        );
        assert_eq!(
            ex("$XDG_RUNTIME_DIR/x", &set),
            Err(ExpandError::Unset),
            "unset: no default"
        );
        let runtime = |n: &str| match n {
            "XDG_RUNTIME_DIR" => Some(OsString::from("/var/tmp/xdg-u/")),
            _ => None,
        };
        assert_eq!(
            ex("$XDG_RUNTIME_DIR", &runtime).unwrap(),
            PathBuf::from("/var/tmp/xdg-u")
        );
        assert_eq!(
            ex("${XDG_RUNTIME_DIR}/bus", &runtime).unwrap(),
            PathBuf::from("/var/tmp/xdg-u/bus")
        );
        for bad in ["", "run/user/1"] {
            let relative = |n: &str| (n == "XDG_RUNTIME_DIR").then(|| OsString::from(bad));
            assert_eq!(
                ex("$XDG_RUNTIME_DIR", &relative),
                Err(ExpandError::Unset),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn normalises() {
        assert_eq!(ex("//a//b/./c/").unwrap(), PathBuf::from("/a/b/c"));
        assert_eq!(ex("/a/b/../c").unwrap(), PathBuf::from("/a/c"));
        assert_eq!(ex("/../../etc").unwrap(), PathBuf::from("/etc"));
        assert_eq!(ex("~/../v/.ssh").unwrap(), PathBuf::from("/home/v/.ssh"));
        assert_eq!(ex("/").unwrap(), PathBuf::from("/"));
    }

    #[test]
    fn rejects() {
        assert_eq!(ex("relative/x"), Err(ExpandError::Relative));
        assert_eq!(ex("./x"), Err(ExpandError::Relative));
        assert_eq!(ex(""), Err(ExpandError::Empty));
        assert_eq!(ex("/a\0b"), Err(ExpandError::Nul));
        assert_eq!(ex("~root/x"), Err(ExpandError::TildeUser));
        assert_eq!(
            ex("/x/${FOO}/y"),
            Err(ExpandError::UnknownVariable {
                name: "FOO".into(),
                at: 3..9
            })
        );
        assert_eq!(
            ex("$HOMEDIR/x"),
            Err(ExpandError::UnknownVariable {
                name: "HOMEDIR".into(),
                at: 0..8
            })
        );
        assert_eq!(
            ex("${home}"),
            Err(ExpandError::UnknownVariable {
                name: "home".into(),
                at: 0..7
            })
        );
        assert_eq!(ex("/x/$"), Err(ExpandError::BadDollar { at: 3..4 }));
        assert_eq!(ex("/x/${HOME"), Err(ExpandError::BadDollar { at: 3..9 }));
        assert_eq!(ex("/x/${}"), Err(ExpandError::BadDollar { at: 3..6 }));
        assert_eq!(ex("/x/$-"), Err(ExpandError::BadDollar { at: 3..4 }));
    }

    #[test]
    fn home_use() {
        assert!(uses_home("~"));
        assert!(uses_home("~/.ssh"));
        assert!(uses_home("$HOME/.ssh"));
        assert!(uses_home("/x/${HOME}"));
        assert!(!uses_home("/etc/shadow"));
        assert!(!uses_home("${PROJECT}/x"));
    }

    #[test]
    fn multibyte_text_is_safe() {
        assert_eq!(ex("/é/$é"), Err(ExpandError::BadDollar { at: 4..5 }));
        assert_eq!(ex("/é/ü").unwrap(), PathBuf::from("/é/ü"));
    }
}
