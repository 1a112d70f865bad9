//! Loading: read the policy layers, merge them, check the result, find what an untrusted
//! project file loosens, and add the rules derived from the host (cordon's own files and
//! directories, credentials' sources) so the [`Plan`] is the whole truth.
//!
//! Merge order: built-in ← user config ← policy file (`--policy`, else `PROJECT/cordon.toml`)
//! ← the selected profile, looked up in every layer in the same order. Lists append (first
//! origin kept on duplicates); scalars override; `deny` and `read_only` can only grow.

use std::fmt;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::{Diagnostic, PolicyError, backticked, did_you_mean};
use crate::expand::normalize;
use crate::file::{
    ParsedFile, built_in_profile, parse_built_in_agents, parse_built_in_part, parse_file_written,
};
use crate::plan::{CredentialSource, PathRule, Plan};
use crate::sections::{Context, Loosen, Origin, PathEntry, Sections};
use crate::trust::{TrustStore, trust_key};

/// The built-in policy, always the first layer.
pub const DEFAULT_POLICY: &str = include_str!("default.toml");

/// Where to find the policy layers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadOptions {
    /// The project directory: absolute and canonical (the caller canonicalises it).
    pub project_dir: PathBuf,
    /// There is no project (`cordon check` or `explain` from the home, which `cordon run`
    /// refuses as a project): `project_dir` is only what `${PROJECT}` expands to. No project
    /// file is read, nothing is made writable for it, and the user's files under it are still
    /// the user's, not an untrusted project's.
    pub no_project: bool,
    /// `$HOME`.
    pub home: PathBuf,
    /// The passwd entry's home when it differs from `$HOME`: deny rules under `~` or `$HOME`
    /// are applied to both.
    pub passwd_home: Option<PathBuf>,
    /// `--policy FILE`; when `None`, `PROJECT/cordon.toml` is used if it exists.
    pub policy_file: Option<PathBuf>,
    /// The user's config (usually `~/.config/cordon/cordon.toml`); skipped when missing.
    pub user_config: Option<PathBuf>,
    /// `--profile NAME`; `none` ([`NO_PROFILE`]) turns auto-detection off. When `None`, the
    /// profile is detected from [`command`](Self::command).
    pub profile: Option<String>,
    /// The command the sandbox runs, for auto-detecting the profile ([`crate::detect`]).
    pub command: Vec<String>,
    /// The trust store (e.g. `$XDG_DATA_HOME/cordon/trusted.json`).
    pub trust_store: PathBuf,
    /// cordon's own directories (audit logs and state layers, caches, its CA and data,
    /// approval brokers), each with what it holds: masked in every sandbox, since a session
    /// must reach neither another session's state nor cordon's keys.
    pub own_dirs: Vec<(PathBuf, &'static str)>,
}

impl LoadOptions {
    /// Options with no policy file, user config, profile or own directories.
    pub fn new(
        project_dir: impl Into<PathBuf>,
        home: impl Into<PathBuf>,
        trust_store: impl Into<PathBuf>,
    ) -> Self {
        LoadOptions {
            project_dir: project_dir.into(),
            no_project: false,
            home: home.into(),
            passwd_home: None,
            policy_file: None,
            user_config: None,
            profile: None,
            command: Vec::new(),
            trust_store: trust_store.into(),
            own_dirs: Vec::new(),
        }
    }
}

/// The outcome of [`load`].
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded {
    /// The profile merged in, and how it was chosen.
    pub profile: Option<ProfileChoice>,
    /// The effective policy, including whatever untrusted files loosen (see
    /// [`untrusted_loosening`](Self::untrusted_loosening)).
    pub plan: Plan,
    /// The files that were read, in merge order (the built-in policy is not included).
    pub sources: Vec<PathBuf>,
    /// What untrusted project files loosen. Non-empty: the caller must refuse to run (exit
    /// 125) and print them, pointing at `cordon trust`.
    pub untrusted_loosening: Vec<Loosening>,
    /// Things worth telling the user that do not stop the run.
    pub warnings: Vec<String>,
}

/// `--profile none`: no profile, and no auto-detection (unless a policy defines a profile of
/// that name).
pub const NO_PROFILE: &str = "none";

/// The profile a session runs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileChoice {
    /// Its name.
    pub name: String,
    /// What in the command selected it, when it was detected rather than named.
    pub detected: Option<String>,
}

/// One way an untrusted policy file makes the policy more permissive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Loosening {
    /// The untrusted file.
    pub file: PathBuf,
    /// What it does, e.g. `adds writable path /home/u/.cache (line 3)`.
    pub what: String,
}

impl fmt::Display for Loosening {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.file.display(), self.what)
    }
}

/// The built-in policy's sections alone. It always parses (its own tests say so); were it not
/// to, `load` would refuse to run at all, so an empty section from here can never be what a
/// sandbox runs with.
fn built_in_sections() -> Sections {
    let root = Path::new("/");
    let ctx = Context {
        home: root,
        passwd_home: None,
        project: root,
    };
    parse_built_in_part(DEFAULT_POLICY, &ctx, &|t| t.is_none())
        .map(|l| l.base)
        .unwrap_or_default()
}

/// The built-in policy's `[dns] block` list, which every plan starts with: for callers that
/// build a resolver without a plan (tests, tools).
pub fn built_in_dns_block() -> Vec<crate::plan::DnsBlock> {
    crate::sections::Section::plan(built_in_sections().dns).block
}

/// The built-in policy's `[[dlp.allow]]` entries (each token shape's issuers), which every plan
/// starts with: for callers that build a scanner without a plan (tests, tools).
pub fn built_in_dlp_allow() -> Vec<crate::plan::DlpAllow> {
    crate::sections::Section::plan(built_in_sections().dlp).allow
}

/// Loads, merges and checks the policy.
pub fn load(opts: &LoadOptions) -> Result<Loaded, PolicyError> {
    // The base and what picks a profile; the picked one is read whole in `load_over`.
    let built_in = parse_built_in_agents(DEFAULT_POLICY, &context(opts))?;
    load_over(opts, built_in, true)
}

/// What `${PROJECT}` expands to when a policy is read without a project: no real path, so
/// the project's rules name nothing there, and [`drop_project_rules`] takes them out.
const NO_PROJECT: &str = "/.cordon-no-project";

fn context(opts: &LoadOptions) -> Context<'_> {
    Context {
        home: &opts.home,
        passwd_home: opts.passwd_home.as_deref(),
        project: match opts.no_project {
            true => Path::new(NO_PROJECT),
            false => &opts.project_dir,
        },
    }
}

/// Without a project, its rules (`${PROJECT}/.git/hooks`, …) are about no directory: gone,
/// rather than shown as if the home were the project.
fn drop_project_rules(plan: &mut Plan) {
    let kept = |r: &PathRule| !r.path.starts_with(NO_PROJECT);
    let fs = &mut plan.filesystem;
    for list in [
        &mut fs.readable,
        &mut fs.writable,
        &mut fs.deny,
        &mut fs.read_only,
    ] {
        list.retain(kept);
    }
    plan.state.protect.retain(kept);
    plan.state.caches.retain(kept);
}

/// [`load`] for the fuzz targets under `fuzz/` (the `fuzzing` feature; not API): the same,
/// with the built-in layer parsed once per process rather than per call (it dominates the
/// time of a call). Every call must pass the same home and project.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub fn load_reusing_built_in(opts: &LoadOptions) -> Result<Loaded, PolicyError> {
    static BUILT_IN: std::sync::OnceLock<ParsedFile> = std::sync::OnceLock::new();
    let built_in = match BUILT_IN.get() {
        Some(b) => b.clone(),
        None => BUILT_IN
            .get_or_init(|| {
                crate::file::parse_file(DEFAULT_POLICY, None, 0, &context(opts))
                    .expect("the built-in policy")
            })
            .clone(),
    };
    load_over(opts, built_in, false)
}

/// Loads the policy files over the built-in layer, merges and checks. `partial`: the built-in
/// layer holds only its profiles' `agent` tables, so the profile picked is read whole here.
fn load_over(
    opts: &LoadOptions,
    built_in: ParsedFile,
    partial: bool,
) -> Result<Loaded, PolicyError> {
    let ctx = context(opts);
    let mut layers = vec![built_in];
    let sources = read_files(opts, &ctx, &mut layers)?;

    let chosen = choose_profile(opts, &layers)?;
    if let Some(c) = chosen.as_ref().filter(|_| partial)
        && let Some(whole) = built_in_profile(DEFAULT_POLICY, &c.name, &ctx)?
    {
        layers[0].profiles.insert(c.name.clone(), whole);
    }
    let profile = chosen.as_ref().map(|c| c.name.as_str());
    let mut warnings = Vec::new();
    for l in &layers {
        warnings.extend(l.base.warnings.iter().cloned());
        if let Some(p) = profile.and_then(|name| l.profiles.get(name)) {
            warnings.extend(p.warnings.iter().cloned());
        }
    }

    let all: Vec<&ParsedFile> = layers.iter().collect();
    let mut notes = Vec::new();
    let full = merge(&all, opts, profile, &mut notes);
    full.check(&layers)?;
    warnings.extend(notes);
    // The escape hatch is loud: at every start and in `cordon check`.
    if let Some((crate::HomeView::Whole, origin)) = &full.filesystem.home {
        warnings.push(format!(
            "the whole home is shown (home = \"whole\", {}): every file no deny rule names is \
             readable inside, credentials of tools cordon does not know among them",
            origin.label
        ));
    }

    let mut untrusted_loosening = Vec::new();
    if layers.iter().any(|l| l.untrusted) {
        let trusted: Vec<&ParsedFile> = layers.iter().filter(|l| !l.untrusted).collect();
        let base = merge(&trusted, opts, profile, &mut Vec::new());
        let untrusted: Vec<Option<PathBuf>> = layers
            .iter()
            .map(|l| l.file.clone().filter(|_| l.untrusted))
            .collect();
        let mut out = Loosen {
            untrusted: &untrusted,
            out: Vec::new(),
        };
        Sections::loosenings(&full, &base, &mut out);
        untrusted_loosening = out.out;
    }

    let mut plan = full.into_plan(opts.project_dir.clone(), opts.home.clone());
    derive(&mut plan, opts, &mut warnings);
    if opts.no_project {
        drop_project_rules(&mut plan);
    }
    Ok(Loaded {
        profile: chosen,
        plan,
        sources,
        untrusted_loosening,
        warnings,
    })
}

/// Reads and parses the user config and the policy file, marking an untrusted project file.
fn read_files(
    opts: &LoadOptions,
    ctx: &Context<'_>,
    layers: &mut Vec<ParsedFile>,
) -> Result<Vec<PathBuf>, PolicyError> {
    let store = TrustStore::new(&opts.trust_store);
    let mut files: Vec<(PathBuf, bool)> = Vec::new();
    if let Some(uc) = &opts.user_config {
        files.push((uc.clone(), false));
    }
    match &opts.policy_file {
        Some(p) => files.push((p.clone(), true)),
        None if opts.no_project => {}
        None => files.push((opts.project_dir.join("cordon.toml"), false)),
    }
    let mut sources = Vec::new();
    for (path, required) in files {
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == ErrorKind::NotFound && !required => continue,
            Err(e) => return Err(PolicyError::io("read", &path, e)),
        };
        let src = String::from_utf8(bytes).map_err(|e| {
            // Everything before `valid` is UTF-8, so it is unchanged in the lossy text.
            let valid = e.utf8_error().valid_up_to();
            let text = String::from_utf8_lossy(e.as_bytes()).into_owned();
            PolicyError::from(
                Diagnostic::new("the policy file is not valid UTF-8")
                    .in_file(Some(&path))
                    .at(&text, valid..valid + 1)
                    .with_help("save it as UTF-8"),
            )
        })?;
        // What a rule's `for` counts from; a file system without times refuses `for`.
        let written = std::fs::metadata(&path).and_then(|m| m.modified()).ok();
        let mut layer = parse_file_written(&src, Some(&path), layers.len(), ctx, written)?;
        let key = trust_key(&path)?;
        let inside_project = !opts.no_project
            && (key.starts_with(&opts.project_dir)
                || (path.is_absolute() && normalize(&path).starts_with(&opts.project_dir)));
        layer.untrusted = inside_project && !store.is_trusted_content(&key, src.as_bytes())?;
        sources.push(path);
        layers.push(layer);
    }
    Ok(sources)
}

/// The profile named by `--profile`, else the one the command selects (see [`crate::detect`]).
fn choose_profile(
    opts: &LoadOptions,
    layers: &[ParsedFile],
) -> Result<Option<ProfileChoice>, PolicyError> {
    let defined = |name: &str| layers.iter().any(|l| l.profiles.contains_key(name));
    match opts.profile.as_deref() {
        Some(NO_PROFILE) if !defined(NO_PROFILE) => Ok(None),
        Some(name) if !defined(name) => Err(unknown_profile(name, layers).into()),
        Some(name) => Ok(Some(ProfileChoice {
            name: name.to_string(),
            detected: None,
        })),
        None => {
            let names: std::collections::BTreeSet<&String> =
                layers.iter().flat_map(|l| l.profiles.keys()).collect();
            let candidates: Vec<(String, crate::AgentPlan)> = names
                .into_iter()
                .map(|n| {
                    let mut agent = crate::sections::agent::Agent::default();
                    for p in layers.iter().filter_map(|l| l.profiles.get(n)) {
                        crate::sections::Section::merge(&mut agent, &p.agent);
                    }
                    (n.clone(), agent.to_plan())
                })
                .collect();
            Ok(
                crate::detect::detect(&opts.command, &candidates, &crate::detect::package_of).map(
                    |d| ProfileChoice {
                        name: d.profile,
                        detected: Some(d.by),
                    },
                ),
            )
        }
    }
}

fn unknown_profile(name: &str, layers: &[ParsedFile]) -> Diagnostic {
    let mut names: Vec<&str> = layers
        .iter()
        .flat_map(|l| l.profiles.keys().map(String::as_str))
        .collect();
    names.sort_unstable();
    names.dedup();
    let mut help = if names.is_empty() {
        "no profiles are defined".to_string()
    } else {
        format!("available profiles: {}", backticked(&names))
    };
    if let Some(s) = did_you_mean(name, &names) {
        help.push_str(&format!("; did you mean `{s}`?"));
    }
    help.push_str("; define one with a [profile.NAME] section, or pass `--profile none` for none");
    Diagnostic::new(format!("unknown profile `{name}`")).with_help(help)
}

/// The base sections of `layers` in order, then the profile's in every layer in the same
/// order; the project directory, if there is one, is the first writable path.
fn merge(
    layers: &[&ParsedFile],
    opts: &LoadOptions,
    profile: Option<&str>,
    notes: &mut Vec<String>,
) -> Sections {
    let project = opts.project_dir.as_path();
    let mut m = Sections::default();
    if !opts.no_project {
        m.filesystem.writable.push(PathEntry {
            path: project.to_path_buf(),
            origin: Origin::project(),
        });
    }
    for l in layers {
        m.merge(&l.base);
    }
    if let Some(name) = profile {
        for l in layers {
            if let Some(p) = l.profiles.get(name) {
                m.merge(p);
            }
        }
    }
    m.settle(project, notes);
    m
}

/// The rules that follow from the host rather than from a file, added to the plan so that
/// what `cordon check` prints is what runs.
fn derive(plan: &mut Plan, opts: &LoadOptions, warnings: &mut Vec<String>) {
    for (dir, what) in &opts.own_dirs {
        let rule = PathRule::new(normalize(dir), format!("built-in: cordon's {what}"));
        if !plan.filesystem.deny.iter().any(|d| d.path == rule.path) {
            plan.filesystem.deny.push(rule);
        }
    }
    hide_credential_sources(plan);
    git_reads_more(plan);
    protect_own_files(plan, opts, warnings);
}

/// Git reads more config than `.git/config`: each submodule's own config and hooks (run by a
/// host `git status` in the superproject) and per-worktree config. Wherever `.git/config` is
/// read-only, so are they, with the same origin.
fn git_reads_more(plan: &mut Plan) {
    let mut more = Vec::new();
    for r in &plan.filesystem.read_only {
        if r.path.file_name().is_some_and(|n| n == "config")
            && let Some(gitdir) = r
                .path
                .parent()
                .filter(|d| d.file_name().is_some_and(|n| n == ".git"))
        {
            more.extend(
                git_extras(gitdir)
                    .into_iter()
                    .map(|p| PathRule::new(p, r.origin.clone())),
            );
        }
    }
    for r in more {
        if !plan.filesystem.read_only.iter().any(|x| x.path == r.path) {
            plan.filesystem.read_only.push(r);
        }
    }
}

/// Config and hooks git reads besides `.git/config` and `.git/hooks`: `config.worktree`,
/// every submodule repository under `.git/modules` (nested too), and linked worktrees.
fn git_extras(gitdir: &Path) -> Vec<PathBuf> {
    let mut out = vec![gitdir.join("config.worktree")];
    if let Ok(rd) = std::fs::read_dir(gitdir.join("worktrees")) {
        for e in rd.flatten() {
            out.push(e.path().join("config.worktree"));
        }
    }
    // A module's git dir holds HEAD; modules nest (modules/a/modules/b), names may have '/'.
    let mut stack = vec![(gitdir.join("modules"), 0)];
    while let Some((dir, depth)) = stack.pop() {
        if depth > 8 {
            continue;
        }
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.flatten() {
            let d = e.path();
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            if d.join("HEAD").is_file() {
                out.extend(["config", "config.worktree", "hooks"].map(|f| d.join(f)));
                stack.push((d.join("modules"), depth + 1));
            } else {
                stack.push((d, depth + 1));
            }
        }
    }
    out
}

/// A credential's source never enters the sandbox, whatever the network mode and whether or
/// not it resolves: its variable does not pass, its file is hidden, and so are the files it
/// lists (a masked copy is shown there instead when the HTTP layer holds the credential).
fn hide_credential_sources(plan: &mut Plan) {
    for c in &plan.credentials {
        match &c.source {
            CredentialSource::Env(v) => plan.env.pass.retain(|p| p != v),
            CredentialSource::File(f) => plan
                .filesystem
                .deny
                .push(PathRule::new(f, format!("credentials.{}: source", c.name))),
            CredentialSource::Command(_) => {}
            // A login file: hidden unless its masked copy can be shown.
            CredentialSource::Json { file, .. }
            | CredentialSource::Yaml { file, .. }
            | CredentialSource::Npmrc { file, .. } => plan.filesystem.deny.push(PathRule::new(
                file,
                format!("credentials.{}: login file", c.name),
            )),
        }
        for f in &c.files {
            plan.filesystem
                .deny
                .push(PathRule::new(f, format!("credentials.{}: files", c.name)));
        }
    }
}

/// cordon's own configuration must not be writable from inside the sandbox: a file the agent
/// could edit would loosen the next run. Any such file under a writable or protected path is
/// made read-only.
fn protect_own_files(plan: &mut Plan, opts: &LoadOptions, warnings: &mut Vec<String>) {
    let mut own: Vec<PathBuf> = vec![opts.trust_store.clone()];
    own.extend(opts.user_config.clone());
    own.extend(opts.policy_file.clone());
    for f in own {
        if !f.is_absolute() {
            continue;
        }
        let f = normalize(&f);
        let fs = &mut plan.filesystem;
        // Protected state can be changed too (and applied at exit).
        let mut changeable = fs.writable.iter().chain(&plan.state.protect);
        if !changeable.any(|w| f.starts_with(&w.path)) {
            continue;
        }
        if fs.read_only.iter().any(|r| f.starts_with(&r.path)) {
            continue;
        }
        if !f.exists() {
            warnings.push(format!(
                "{} is inside a writable path and does not exist yet, so the sandboxed command could create it",
                f.display()
            ));
        }
        fs.read_only
            .push(PathRule::new(f, cordon_events::Origin::BuiltIn));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{LandlockMode, LimitsPlan, OnExit, ProjectFiles};

    #[test]
    fn the_built_in_policy_loads_and_is_safe_alone() {
        let dir = tempfile::tempdir().unwrap();
        let opts = LoadOptions::new("/work/p", "/home/u", dir.path().join("t.json"));
        let l = load(&opts).unwrap();
        let fs = &l.plan.filesystem;
        assert_eq!(fs.readable, [PathRule::new("/", "built-in")]);
        assert_eq!(fs.writable, [PathRule::new("/work/p", "project")]);
        assert_eq!(fs.landlock, LandlockMode::Required);
        for d in [
            "/home/u/.ssh",
            "/home/u/.aws",
            "/etc/shadow",
            "/run",
            "/var/run",
            "/etc/ssh",
        ] {
            assert!(
                fs.deny.iter().any(|r| r.path == Path::new(d)),
                "{d} not denied"
            );
        }
        assert_eq!(
            fs.deny
                .iter()
                .filter(|r| r.path.starts_with("/home/u"))
                .count(),
            30
        );
        assert!(
            fs.read_only
                .contains(&PathRule::new("/work/p/.git/hooks", "built-in"))
        );
        assert!(
            fs.read_only
                .contains(&PathRule::new("/work/p/cordon.toml", "built-in"))
        );
        assert_eq!(
            l.plan.env.set.get("CORDON_SANDBOX").map(String::as_str),
            Some("1")
        );
        assert!(l.plan.env.pass.iter().any(|p| p == "LC_*"));
        assert!(!l.plan.env.pass.iter().any(|p| p == "TMPDIR"));
        assert_eq!(l.plan.limits, LimitsPlan::default());
        assert!(l.sources.is_empty());
        assert!(l.untrusted_loosening.is_empty());
    }

    #[test]
    fn built_in_profiles() {
        let dir = tempfile::tempdir().unwrap();
        for (name, paths) in [
            (
                "claude",
                &[
                    "/home/u/.claude",
                    "/home/u/.claude.json",
                    "/home/u/.config/claude",
                ][..],
            ),
            ("codex", &["/home/u/.codex"]),
            ("gemini", &["/home/u/.gemini"]),
            ("aider", &["/home/u/.aider", "/home/u/.aider.conf.yml"]),
            (
                "opencode",
                &[
                    "/home/u/.config/opencode",
                    "/home/u/.local/share/opencode",
                    "/home/u/.local/state/opencode",
                ],
            ),
            (
                "copilot",
                &["/home/u/.copilot", "/home/u/.config/github-copilot"],
            ),
            ("qwen", &["/home/u/.qwen"]),
            (
                "crush",
                &["/home/u/.config/crush", "/home/u/.local/share/crush"],
            ),
            (
                "goose",
                &[
                    "/home/u/.config/goose",
                    "/home/u/.local/share/goose",
                    "/home/u/.local/state/goose",
                ],
            ),
        ] {
            let mut opts = LoadOptions::new("/work/p", "/home/u", dir.path().join("t.json"));
            opts.profile = Some(name.into());
            let l = load(&opts).unwrap();
            // The agent's state is protected (copy-on-write, reviewed), no longer plainly
            // writable: only the project is.
            assert_eq!(
                l.plan.filesystem.writable,
                [PathRule::new("/work/p", "project")],
                "{name}"
            );
            let protect = &l.plan.state.protect;
            for path in paths {
                assert_eq!(
                    protect
                        .iter()
                        .filter(|r| r.path == Path::new(path))
                        .map(|r| r.origin.to_string())
                        .collect::<Vec<_>>(),
                    ["built-in"],
                    "{name}: {path}"
                );
            }
            // The profile's paths are all there is: nothing is protected by default.
            assert_eq!(protect.len(), paths.len(), "{name}");
        }
    }

    #[test]
    fn the_command_picks_the_profile_and_none_turns_it_off() {
        let dir = tempfile::tempdir().unwrap();
        let mut opts = LoadOptions::new("/work/p", "/home/u", dir.path().join("t.json"));
        opts.command = vec!["npx".into(), "-y".into(), "@openai/codex@1".into()];
        let l = load(&opts).unwrap();
        assert_eq!(
            l.profile,
            Some(ProfileChoice {
                name: "codex".into(),
                detected: Some("npx @openai/codex".into()),
            })
        );
        assert!(l.plan.syscalls.nested_userns);
        assert!(
            l.plan
                .state
                .protect
                .iter()
                .any(|r| r.path == Path::new("/home/u/.codex"))
        );
        let creds: Vec<&str> = l.plan.credentials.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            creds,
            [
                "codex-access-token",
                "codex-api-key",
                "codex-file-api-key",
                "codex-id-token",
                "codex-refresh-token",
                "openai-api-key"
            ]
        );
        assert!(l.plan.agent.is_quiet("ab.chatgpt.com") && !l.plan.agent.is_quiet("chatgpt.com"));
        opts.profile = Some(NO_PROFILE.into());
        let l = load(&opts).unwrap();
        assert_eq!(l.profile, None);
        assert!(l.plan.credentials.is_empty() && l.plan.state.protect.is_empty());
        assert!(!l.plan.syscalls.nested_userns);
        // A command no profile names selects none.
        opts.profile = None;
        opts.command = vec!["sh".into(), "-c".into(), "claude".into()];
        assert_eq!(load(&opts).unwrap().profile, None);
    }

    #[test]
    fn the_built_in_state_section() {
        let dir = tempfile::tempdir().unwrap();
        let opts = LoadOptions::new("/work/p", "/home/u", dir.path().join("t.json"));
        let s = load(&opts).unwrap().plan.state;
        assert_eq!(s.on_exit, OnExit::Ask);
        assert_eq!(s.project_files, ProjectFiles::Staged);
        // Outside the project everything is read-only by default, which is stronger than review.
        assert!(s.protect.is_empty(), "{:?}", s.protect);
    }

    #[test]
    fn own_files_under_a_protected_path_are_read_only() {
        let mut opts = LoadOptions::new("/work/p", "/home/u", "/home/u/.codex/cordon/t.json");
        opts.profile = Some("codex".into());
        let l = load(&opts).unwrap();
        assert!(
            l.plan
                .filesystem
                .read_only
                .contains(&PathRule::new("/home/u/.codex/cordon/t.json", "built-in"))
        );
    }

    #[test]
    fn covered_is_component_wise() {
        use crate::sections::covered;
        let r = PathEntry {
            path: "/a/b".into(),
            origin: Origin::project(),
        };
        assert!(covered(Path::new("/a/b/c"), &[&r]));
        assert!(covered(Path::new("/a/b"), &[&r]));
        assert!(!covered(Path::new("/a/bc"), &[&r]));
    }
}
