//! `[filesystem]`: what the sandbox sees of the host's files (layer 1).

use crate::PolicyError;
use crate::file::ParsedFile;
use crate::schema::{Schema, Shape};
use crate::sections::contradiction;
use crate::sections::{
    Convert, Loosen, PathEntry, PathRule, Render, Scalar, Section, Sections, append_rules, covered,
    path_rules, set_scalar,
};

crate::choice! {
    /// How Landlock is treated when the kernel lacks it.
    #[derive(Default)]
    pub enum LandlockMode {
        /// Refuse to start (exit 125) when Landlock cannot be applied at all.
        #[default]
        Required = "required",
        /// Warn loudly and continue with the mount fence alone.
        BestEffort = "best-effort",
    }
}

crate::choice! {
    /// How much of the user's home the sandbox sees.
    #[derive(Default)]
    pub enum HomeView {
        /// What development needs and nothing else: `home_tools` as they are (copy-on-write),
        /// `home_show` as copies checked for secrets, the active agent's state, the caches and
        /// the project. Whatever else the home holds, known or not, is neither readable nor
        /// listable, including what the host creates while the session runs.
        #[default]
        Needed = "needed",
        /// The whole home minus `deny`: every file no deny rule names is readable, including
        /// credentials cordon has no name for.
        Whole = "whole",
    }
}

/// The filesystem view (layer 1). All paths are absolute and lexically normalised.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FilesystemPlan {
    /// Bound read-only at the same path (default: `/`).
    pub readable: Vec<PathRule>,
    /// Bound read-write at the same path (the project is always among them).
    pub writable: Vec<PathRule>,
    /// Masked: reads fail and no content is visible. Deny wins over readable and writable.
    pub deny: Vec<PathRule>,
    /// Bound read-only even inside a writable directory (host-executed files such as `.git/hooks`).
    pub read_only: Vec<PathRule>,
    /// What to do when Landlock is unavailable.
    pub landlock: LandlockMode,
    /// How much of the home is shown.
    #[serde(default)]
    pub home: HomeView,
    /// Home configuration shown as copies made at start, each file checked for secrets
    /// (one that holds a credential is hidden).
    #[serde(default)]
    pub home_show: Vec<PathRule>,
    /// Home toolchains shown as they are, copy-on-write (programs, not secrets).
    #[serde(default)]
    pub home_tools: Vec<PathRule>,
}

/// The glob character in `path`, if it has one: paths are taken literally, so `deny =
/// ["~/work/*.pem"]` would mask a file named `*.pem` and nothing else.
pub(crate) fn glob_char(path: &str) -> Option<usize> {
    let b = path.as_bytes();
    b.iter().enumerate().find_map(|(i, c)| match c {
        b'*' | b'?' => Some(i),
        b'[' if path[i + 1..].contains(']') => Some(i),
        _ => None,
    })
}

/// A path with a glob is an error naming its line, never a rule that silently matches nothing.
pub(crate) fn refuse_globs(
    cx: &Convert<'_>,
    key: &str,
    list: &[serde_spanned::Spanned<String>],
) -> Result<(), PolicyError> {
    for p in list {
        if glob_char(p.get_ref()).is_some() {
            return Err(cx.diag(
                format!(
                    "{key} path {} has a glob, but paths are literal: it would match nothing",
                    crate::schema::toml_string(p.get_ref())
                ),
                p.span(),
                "list each path instead; a directory covers everything inside it (e.g. \"~/work/keys\")",
            ));
        }
    }
    Ok(())
}

raw_table! {
    /// `[filesystem]` as written.
    pub(crate) struct Raw example "writable = [\"~/.cache/x\"]" {
        /// Paths visible read-only (the built-in policy shows all of `/`, the home only as
        /// `home` says).
        readable: Strings = "readable = [\"~/src/shared-lib\"]",
        /// Paths writable besides the project directory, which always is.
        writable: Strings [loosens] = "writable = [\"~/.cache/x\"]",
        /// Paths masked: nothing inside can be read or listed. Deny wins over every other rule.
        deny: Strings = "deny = [\"~/.config/some-tool/tokens\"]",
        /// Paths kept read-only even inside a writable directory (files the host runs later).
        read_only: Strings = "read_only = [\"${PROJECT}/.github/workflows\"]",
        /// What to do where the kernel lacks Landlock: refuse to start, or warn and rely on
        /// the mount view alone.
        landlock: Choice(LandlockMode),
        /// How much of the home is seen: what development needs, or all of it minus `deny`.
        home: Choice(HomeView),
        /// Home configuration files shown as copies made at start, each checked for secrets.
        home_show: Strings [loosens] = "home_show = [\"~/.config/some-tool/config.toml\"]",
        /// Home toolchains shown as they are, copy-on-write.
        home_tools: Strings [loosens] = "home_tools = [\"~/.local/share/some-toolchain\"]",
    }
}

/// `[filesystem]` of one layer, or merged.
#[derive(Debug, Clone, Default)]
pub(crate) struct Filesystem {
    pub readable: Vec<PathEntry>,
    pub writable: Vec<PathEntry>,
    pub deny: Vec<PathEntry>,
    pub read_only: Vec<PathEntry>,
    pub landlock: Scalar<LandlockMode>,
    pub home: Scalar<HomeView>,
    pub home_show: Vec<PathEntry>,
    pub home_tools: Vec<PathEntry>,
}

impl Section for Filesystem {
    type Raw = Raw;
    type Plan = FilesystemPlan;
    const SHAPE: Shape = Shape::Table(&Raw::TABLE);

    fn convert(raw: Raw, cx: &mut Convert<'_>) -> Result<Self, PolicyError> {
        for (key, list) in [
            ("readable", &raw.readable),
            ("writable", &raw.writable),
            ("deny", &raw.deny),
            ("read_only", &raw.read_only),
            ("home_show", &raw.home_show),
            ("home_tools", &raw.home_tools),
        ] {
            refuse_globs(cx, key, list)?;
        }
        Ok(Filesystem {
            readable: cx.paths(&raw.readable, "readable", false)?,
            writable: cx.paths(&raw.writable, "writable", false)?,
            // A credential under `~` is masked in both homes when `$HOME` is not the passwd one.
            deny: cx.deny_paths(&raw.deny)?,
            read_only: cx.paths(&raw.read_only, "read_only", false)?,
            landlock: raw.landlock.map(|l| (*l.get_ref(), cx.origin(l.span()))),
            home: raw.home.map(|h| (*h.get_ref(), cx.origin(h.span()))),
            home_show: cx.home_paths(&raw.home_show, "home_show")?,
            home_tools: cx.home_paths(&raw.home_tools, "home_tools")?,
        })
    }

    fn merge(&mut self, later: &Self) {
        append_rules(&mut self.readable, &later.readable);
        append_rules(&mut self.writable, &later.writable);
        append_rules(&mut self.deny, &later.deny);
        append_rules(&mut self.read_only, &later.read_only);
        set_scalar(&mut self.landlock, &later.landlock);
        set_scalar(&mut self.home, &later.home);
        append_rules(&mut self.home_show, &later.home_show);
        append_rules(&mut self.home_tools, &later.home_tools);
    }

    fn loosen(full: &Sections, base: &Sections, out: &mut Loosen<'_>) {
        let (f, b) = (&full.filesystem, &base.filesystem);
        let visible: Vec<&PathEntry> = b.readable.iter().chain(&b.writable).collect();
        for r in &f.readable {
            if !covered(&r.path, &visible) {
                out.add(
                    &r.origin,
                    format!("adds readable path {}", r.path.display()),
                );
            }
        }
        let writable: Vec<&PathEntry> = b.writable.iter().collect();
        let ro: Vec<&PathEntry> = b.read_only.iter().collect();
        for r in &f.writable {
            if !covered(&r.path, &writable) || covered(&r.path, &ro) {
                out.add(
                    &r.origin,
                    format!("adds writable path {}", r.path.display()),
                );
            }
        }
        if let (Some((LandlockMode::BestEffort, o)), None | Some((LandlockMode::Required, _))) =
            (&f.landlock, &b.landlock)
        {
            out.add(o, "makes Landlock best-effort".to_string());
        }
        if let (Some((HomeView::Whole, o)), None | Some((HomeView::Needed, _))) = (&f.home, &b.home)
        {
            out.add(
                o,
                "shows the whole home (home = \"whole\"): credentials no deny rule names are readable"
                    .to_string(),
            );
        }
        for (key, full, base) in [
            ("home_show", &f.home_show, &b.home_show),
            ("home_tools", &f.home_tools, &b.home_tools),
        ] {
            for r in full {
                if !base.iter().any(|x| x.path == r.path) {
                    out.add(&r.origin, format!("shows {} ({key})", r.path.display()));
                }
            }
        }
    }

    /// A readable or writable path equal to or inside a denied one: deny wins, so the
    /// user's intent cannot be what happens.
    fn check(m: &Sections, files: &[ParsedFile]) -> Result<(), PolicyError> {
        let fs = &m.filesystem;
        let allowed = fs.writable.iter().map(|r| ("writable", r));
        for (kind, r) in allowed.chain(fs.readable.iter().map(|r| ("readable", r))) {
            if let Some(d) = fs.deny.iter().find(|d| r.path.starts_with(&d.path)) {
                return Err(contradiction(kind, r, d, files).into());
            }
        }
        Ok(())
    }

    fn plan(self) -> FilesystemPlan {
        FilesystemPlan {
            readable: path_rules(self.readable),
            writable: path_rules(self.writable),
            deny: path_rules(self.deny),
            read_only: path_rules(self.read_only),
            landlock: self.landlock.map(|l| l.0).unwrap_or_default(),
            home: self.home.map(|h| h.0).unwrap_or_default(),
            home_show: path_rules(self.home_show),
            home_tools: path_rules(self.home_tools),
        }
    }

    fn render(p: &FilesystemPlan, out: &mut Render) {
        out.header("filesystem");
        out.rules("readable", &p.readable);
        out.rules("writable", &p.writable);
        out.rules("deny", &p.deny);
        out.rules("read_only", &p.read_only);
        out.string("landlock", &p.landlock.to_string());
        out.line("# the home: what tools need (\"needed\") or all of it minus deny (\"whole\")");
        out.string("home", &p.home.to_string());
        out.rules("home_show", &p.home_show);
        out.rules("home_tools", &p.home_tools);
    }
}

#[cfg(test)]
mod tests {
    use super::glob_char;

    #[test]
    fn globs_are_found_and_plain_paths_pass() {
        assert_eq!(glob_char("~/work/*.pem"), Some(7));
        assert_eq!(glob_char("/a/b?c"), Some(4));
        assert_eq!(glob_char("/a/[xy]"), Some(3));
        assert_eq!(glob_char("/a/[x"), None);
        assert_eq!(glob_char("${PROJECT}/.git/hooks"), None);
    }
}
