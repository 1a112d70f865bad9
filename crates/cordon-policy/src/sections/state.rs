//! `[state]`: agent-state protection and the copy-on-write home — what the agent may change
//! only through review, and what persists.

use std::path::Path;

use crate::PolicyError;
use crate::file::ParsedFile;
use crate::schema::{Schema, Shape};
use crate::sections::{
    Convert, Loosen, PathEntry, PathRule, Render, Scalar, Section, Sections, append_rules, covered,
    path_rules, set_scalar, value,
};
use crate::sections::{contradiction, protects_project};

crate::choice! {
    /// What happens to changes in protected state when a session ends.
    #[derive(Default)]
    pub enum OnExit {
        /// Show the summary and ask (on a terminal; without one this acts as `Pending`).
        #[default]
        Ask = "ask",
        /// Apply the changes to the host copies.
        Keep = "keep",
        /// Throw the changes away.
        Discard = "discard",
        /// Keep them aside for `cordon state accept/discard`.
        Pending = "pending",
    }
}

crate::choice! {
    /// How the project's host-executed files (`.git/hooks`, `.envrc`, …) are protected.
    #[derive(Default)]
    pub enum ProjectFiles {
        /// Read-only inside the sandbox (the filesystem plan's `read_only`).
        #[default]
        Readonly = "readonly",
        /// Writable copy-on-write, reviewed at exit like other protected state: the whole
        /// host-executed surface of every writable path (git dirs through their indirections,
        /// agents' and editors' settings, rc files), including names made during the session.
        /// Git changes that run nothing are applied at exit without asking. The built-in policy's
        /// choice.
        Staged = "staged",
    }
}

crate::choice! {
    /// How the sandbox sees the user's home outside the project and the writable paths.
    #[derive(Default)]
    pub enum HomeMode {
        /// Copy-on-write: writes land in the session's own layer (protected paths go to review,
        /// caches to cordon's persistent cache layers, the rest is discarded at exit). Where the
        /// kernel or filesystem refuses the overlay, the home is read-only, with a warning.
        #[default]
        Overlay = "overlay",
        /// Read-only, as the rest of the host.
        Readonly = "readonly",
    }
}

/// Agent-state protection: paths the agent may change only through review.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StatePlan {
    /// Directories or files mounted copy-on-write; the host copy is untouched until accepted.
    /// A protected path may also be (inside) a writable one: protection wins. None is inside a
    /// denied path or contains the project directory (the loader refuses both).
    pub protect: Vec<PathRule>,
    /// What happens to changes in protected paths when the session ends.
    pub on_exit: OnExit,
    /// How the project's host-executed files are protected.
    pub project_files: ProjectFiles,
    /// How the home is seen (copy-on-write or read-only).
    #[serde(default)]
    pub home: HomeMode,
    /// Package and build caches in the home that persist across a project's sessions in
    /// cordon's own sandbox-side layers, one per project (the host's cache below, never
    /// written back).
    #[serde(default)]
    pub caches: Vec<PathRule>,
}

raw_table! {
    /// `[state]` as written.
    pub(crate) struct Raw example "protect = [\"~/.claude\"]" {
        /// Agent state the sandbox may change only through review: copy-on-write, the host
        /// copy untouched until accepted.
        protect: Strings = "protect = [\"~/.config/some-agent\"]",
        /// What happens to reviewed changes when the session ends: `ask` shows them and asks
        /// (without a terminal, `pending`), `keep` applies them, `discard` drops them, `pending`
        /// keeps them for `cordon state accept` or `discard`.
        on_exit: Choice(OnExit),
        /// How the project's host-executed files (`.git/hooks`, `.envrc`, …) are protected:
        /// `readonly` inside, or `staged`: writable copy-on-write and reviewed at exit (git
        /// changes that run nothing applied without asking).
        project_files: Choice(ProjectFiles),
        /// How the home is written: `overlay`, copy-on-write (protected paths reviewed, caches
        /// kept, the rest discarded at exit), or `readonly`.
        home: Choice(HomeMode),
        /// Package and build caches in the home kept across the project's sessions, in
        /// cordon's own layer (the host's cache never written).
        caches: Strings [loosens] = "caches = [\"~/.cache/some-tool\"]",
    }
}

/// `[state]` of one layer, or merged.
#[derive(Debug, Clone, Default)]
pub(crate) struct State {
    pub protect: Vec<PathEntry>,
    pub on_exit: Scalar<OnExit>,
    pub project_files: Scalar<ProjectFiles>,
    pub home: Scalar<HomeMode>,
    pub caches: Vec<PathEntry>,
}

impl Section for State {
    type Raw = Raw;
    type Plan = StatePlan;
    const SHAPE: Shape = Shape::Table(&Raw::TABLE);

    fn convert(raw: Raw, cx: &mut Convert<'_>) -> Result<Self, PolicyError> {
        crate::sections::filesystem::refuse_globs(cx, "protect", &raw.protect)?;
        crate::sections::filesystem::refuse_globs(cx, "caches", &raw.caches)?;
        Ok(State {
            protect: cx.paths(&raw.protect, "protect", false)?,
            on_exit: raw.on_exit.map(|v| (*v.get_ref(), cx.origin(v.span()))),
            project_files: raw
                .project_files
                .map(|v| (*v.get_ref(), cx.origin(v.span()))),
            home: raw.home.map(|v| (*v.get_ref(), cx.origin(v.span()))),
            caches: cx.paths(&raw.caches, "caches", false)?,
        })
    }

    fn merge(&mut self, later: &Self) {
        append_rules(&mut self.protect, &later.protect);
        set_scalar(&mut self.on_exit, &later.on_exit);
        set_scalar(&mut self.project_files, &later.project_files);
        set_scalar(&mut self.home, &later.home);
        append_rules(&mut self.caches, &later.caches);
    }

    fn loosen(full: &Sections, base: &Sections, out: &mut Loosen<'_>) {
        let (f, b) = (&full.state, &base.state);
        // A copy-on-write home only adds a layer that is discarded; a persistent cache layer
        // is shared by every later session of every project, so a new one is a way to reach
        // them.
        if let (Some((HomeMode::Overlay, o)), HomeMode::Readonly) = (&f.home, value(&b.home)) {
            out.add(
                o,
                "makes the home copy-on-write (home = \"overlay\") where your policy keeps it read-only"
                    .to_string(),
            );
        }
        for r in &f.caches {
            if !b.caches.iter().any(|x| x.path == r.path) {
                out.add(
                    &r.origin,
                    format!(
                        "keeps {} as a cache shared by later sessions",
                        r.path.display()
                    ),
                );
            }
        }
        // Protection only adds review; what is kept without review is what loosens.
        if value(&f.on_exit) != OnExit::Keep {
            return;
        }
        if let (Some((_, o)), false) = (&f.on_exit, value(&b.on_exit) == OnExit::Keep) {
            out.add(
                o,
                "applies changes to protected state without review (on_exit = \"keep\")"
                    .to_string(),
            );
        }
        // Protecting a path makes it writable copy-on-write; kept without review, that is
        // plain write access.
        let fs = &base.filesystem;
        let changeable: Vec<&PathEntry> = fs.writable.iter().chain(&b.protect).collect();
        let ro: Vec<&PathEntry> = fs.read_only.iter().collect();
        for r in &f.protect {
            if !covered(&r.path, &changeable) || covered(&r.path, &ro) {
                out.add(
                    &r.origin,
                    format!(
                        "protects {}, whose changes are kept without review (on_exit = \"keep\")",
                        r.path.display()
                    ),
                );
            }
        }
        if let (Some((ProjectFiles::Staged, o)), ProjectFiles::Readonly) =
            (&f.project_files, value(&b.project_files))
        {
            out.add(
                o,
                "stages the project's read-only files, whose changes are kept without review (on_exit = \"keep\")"
                    .to_string(),
            );
        }
    }

    /// The built-in policy's protected paths give way where a file denies them (deny wins,
    /// and the user cannot remove a built-in entry) or where they contain the project (which
    /// is always writable, never staged). Paths written in a file are checked instead.
    fn settle(m: &mut Sections, project: &Path, notes: &mut Vec<String>) {
        let deny = &m.filesystem.deny;
        m.state.protect.retain(|r| {
        if r.origin.layer != 0 {
            return true;
        }
        if project.starts_with(&r.path) {
            notes.push(format!(
                "{} contains the project directory, so it is not protected ({}); the project is writable as always",
                r.path.display(),
                r.origin.label
            ));
            return false;
        }
        !deny.iter().any(|d| r.path.starts_with(&d.path))
    });
    }

    /// A protected path inside a denied one (deny wins), or one that contains the project
    /// directory (the project cannot be staged).
    fn check(m: &Sections, files: &[ParsedFile]) -> Result<(), PolicyError> {
        let fs = &m.filesystem;
        for r in &m.state.protect {
            if let Some(d) = fs.deny.iter().find(|d| r.path.starts_with(&d.path)) {
                return Err(contradiction("protect", r, d, files).into());
            }
        }
        // The project rule is the first writable one.
        if let Some(project) = fs.writable.first()
            && let Some(r) = m
                .state
                .protect
                .iter()
                .find(|r| project.path.starts_with(&r.path))
        {
            return Err(protects_project(r, &project.path, files).into());
        }
        Ok(())
    }

    fn plan(self) -> StatePlan {
        StatePlan {
            protect: path_rules(self.protect),
            on_exit: value(&self.on_exit),
            project_files: value(&self.project_files),
            home: value(&self.home),
            caches: path_rules(self.caches),
        }
    }

    fn render(s: &StatePlan, out: &mut Render) {
        out.header("state");
        out.line("# copy-on-write; changes reach the host only as on_exit says");
        out.rules("protect", &s.protect);
        out.string("on_exit", &s.on_exit.to_string());
        out.string("project_files", &s.project_files.to_string());
        out.line("# the home: copy-on-write layer (discarded at exit) or read-only");
        out.string("home", &s.home.to_string());
        out.line(
            "# persist across sessions in cordon's own layers; never written back to the host",
        );
        out.rules("caches", &s.caches);
    }
}
