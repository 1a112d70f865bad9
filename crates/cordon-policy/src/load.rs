//! Loading: read the policy layers, merge them, check the result and find what an untrusted
//! project file loosens.
//!
//! Merge order: built-in ← user config ← policy file (`--policy`, else `PROJECT/cordon.toml`)
//! ← the selected profile, looked up in every layer in the same order. Lists append (first
//! origin kept on duplicates); scalars override; `deny` and `read_only` can only grow.

use std::collections::BTreeMap;
use std::fmt;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::env::{glob_matches, looks_secret};
use crate::error::{Diagnostic, PolicyError, backticked, did_you_mean};
use crate::expand::normalize;
use crate::layer::{Context, Layer, Origin, Rule, Sections, parse_layer};
use crate::plan::{
    EnvPlan, ExecAction, ExecPlan, ExecRule, FilesystemPlan, HomeMode, HostRule, HttpAction,
    HttpPlan, HttpRule, LandlockMode, LimitsPlan, NamedRule, NetMode, NetworkPlan, OnExit,
    PathRule, Plan, ProjectFiles, Publish, StatePlan, SyscallsPlan,
};
use crate::trust::{TrustStore, trust_key};

/// The built-in policy, always the first layer.
pub const DEFAULT_POLICY: &str = include_str!("default.toml");

/// Where to find the policy layers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadOptions {
    /// The project directory: absolute and canonical (the caller canonicalises it).
    pub project_dir: PathBuf,
    /// `$HOME`.
    pub home: PathBuf,
    /// The passwd entry's home when it differs from `$HOME`: deny rules under `~` or `$HOME`
    /// are applied to both.
    pub passwd_home: Option<PathBuf>,
    /// `--policy FILE`; when `None`, `PROJECT/cordon.toml` is used if it exists.
    pub policy_file: Option<PathBuf>,
    /// The user's config (usually `~/.config/cordon/cordon.toml`); skipped when missing.
    pub user_config: Option<PathBuf>,
    /// `--profile NAME`.
    pub profile: Option<String>,
    /// The trust store (e.g. `$XDG_DATA_HOME/cordon/trusted.json`).
    pub trust_store: PathBuf,
}

impl LoadOptions {
    /// Options with no policy file, user config or profile.
    pub fn new(
        project_dir: impl Into<PathBuf>,
        home: impl Into<PathBuf>,
        trust_store: impl Into<PathBuf>,
    ) -> Self {
        LoadOptions {
            project_dir: project_dir.into(),
            home: home.into(),
            passwd_home: None,
            policy_file: None,
            user_config: None,
            profile: None,
            trust_store: trust_store.into(),
        }
    }
}

/// The outcome of [`load`].
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded {
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

/// Loads, merges and checks the policy.
pub fn load(opts: &LoadOptions) -> Result<Loaded, PolicyError> {
    let ctx = Context {
        home: &opts.home,
        passwd_home: opts.passwd_home.as_deref(),
        project: &opts.project_dir,
    };
    let store = TrustStore::new(&opts.trust_store);
    let mut layers = vec![parse_layer(DEFAULT_POLICY, None, 0, &ctx)?];
    let mut sources = Vec::new();
    let mut warnings = Vec::new();

    let mut files: Vec<(PathBuf, bool)> = Vec::new();
    if let Some(uc) = &opts.user_config {
        files.push((uc.clone(), false));
    }
    match &opts.policy_file {
        Some(p) => files.push((p.clone(), true)),
        None => files.push((opts.project_dir.join("cordon.toml"), false)),
    }
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
        let mut layer = parse_layer(&src, Some(&path), layers.len(), &ctx)?;
        let key = trust_key(&path)?;
        let inside_project = key.starts_with(&opts.project_dir)
            || (path.is_absolute() && normalize(&path).starts_with(&opts.project_dir));
        layer.untrusted = inside_project && !store.is_trusted_content(&key, src.as_bytes())?;
        sources.push(path);
        layers.push(layer);
    }

    let profile = opts.profile.as_deref();
    if let Some(name) = profile
        && !layers.iter().any(|l| l.profiles.contains_key(name))
    {
        return Err(unknown_profile(name, &layers).into());
    }

    for l in &layers {
        warnings.extend(l.base.warnings.iter().cloned());
        if let Some(p) = profile.and_then(|name| l.profiles.get(name)) {
            warnings.extend(p.warnings.iter().cloned());
        }
    }

    let all: Vec<&Layer> = layers.iter().collect();
    let full = Merged::new(&all, &opts.project_dir, profile);
    full.check_contradictions(&layers)?;
    warnings.extend(full.notes.iter().cloned());

    let mut untrusted_loosening = Vec::new();
    if layers.iter().any(|l| l.untrusted) {
        let trusted: Vec<&Layer> = layers.iter().filter(|l| !l.untrusted).collect();
        let base = Merged::new(&trusted, &opts.project_dir, profile);
        untrusted_loosening = loosenings(&full, &base, &layers);
    }

    let mut plan = full.into_plan(opts);
    protect_own_files(&mut plan, opts, &mut warnings);
    Ok(Loaded {
        plan,
        sources,
        untrusted_loosening,
        warnings,
    })
}

fn unknown_profile(name: &str, layers: &[Layer]) -> Diagnostic {
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
    help.push_str("; define one with a [profile.NAME] section");
    Diagnostic::new(format!("unknown profile `{name}`")).with_help(help)
}

/// The policy after merging some layers.
#[derive(Debug, Clone)]
struct Merged {
    readable: Vec<Rule>,
    writable: Vec<Rule>,
    deny: Vec<Rule>,
    read_only: Vec<Rule>,
    landlock: (LandlockMode, Option<Origin>),
    pass: Vec<(String, Origin)>,
    set: BTreeMap<String, (String, Origin)>,
    memory: Option<(u64, Origin)>,
    pids: Option<(u64, Origin)>,
    cpu: Option<(f64, Origin)>,
    nofile: Option<(u64, Origin)>,
    sys_allow: Vec<(String, Origin)>,
    sys_deny: Vec<(String, Origin)>,
    nested_userns: (bool, Option<Origin>),
    /// In merge order: earlier layers first, so the first match is the most trusted rule.
    exec_rules: Vec<(String, ExecAction, Origin)>,
    ask_timeout: (u64, Option<Origin>),
    protect: Vec<Rule>,
    on_exit: (OnExit, Option<Origin>),
    project_files: (ProjectFiles, Option<Origin>),
    home: (HomeMode, Option<Origin>),
    caches: Vec<Rule>,
    net_mode: (NetMode, Option<Origin>),
    allow_ips: Vec<(String, Origin)>,
    net_allow: Vec<(String, Vec<u16>, Origin)>,
    dns_block: Vec<(String, Origin)>,
    dns_hosts: BTreeMap<String, (std::net::IpAddr, Origin)>,
    dns_upstream: Option<(std::net::SocketAddr, Origin)>,
    publish: Vec<(u16, u16, Origin)>,
    http_default: (HttpAction, Option<Origin>),
    http_rules: Vec<(HttpRule, Origin)>,
    tls_passthrough: Vec<(String, Origin)>,
    upstream_ca: Vec<Rule>,
    judge: Option<(crate::plan::JudgePlan, Origin)>,
    credentials: Vec<(crate::plan::CredentialPlan, Origin)>,
    dlp_action: (crate::plan::DlpAction, Option<Origin>),
    dlp_max_body: (u64, Option<Origin>),
    dlp_allow: Vec<(crate::plan::DlpAllow, Origin)>,
    /// Warnings about how the merge resolved built-in entries.
    notes: Vec<String>,
}

fn push_named(into: &mut Vec<(String, Origin)>, from: &[(String, Origin)]) {
    for (n, o) in from {
        if !into.iter().any(|(x, _)| x == n) {
            into.push((n.clone(), o.clone()));
        }
    }
}

fn push_rules(into: &mut Vec<Rule>, from: &[Rule]) {
    for r in from {
        if !into.iter().any(|x| x.path == r.path) {
            into.push(r.clone());
        }
    }
}

fn project_origin() -> Origin {
    Origin {
        layer: 0,
        label: "project".into(),
        line: 0,
        span: None,
        order: (0, 0, 0),
    }
}

impl Merged {
    fn new(layers: &[&Layer], project: &Path, profile: Option<&str>) -> Self {
        let mut m = Merged {
            readable: Vec::new(),
            writable: vec![Rule {
                path: project.to_path_buf(),
                origin: project_origin(),
            }],
            deny: Vec::new(),
            read_only: Vec::new(),
            landlock: (LandlockMode::Required, None),
            pass: Vec::new(),
            set: BTreeMap::new(),
            memory: None,
            pids: None,
            cpu: None,
            nofile: None,
            sys_allow: Vec::new(),
            sys_deny: Vec::new(),
            nested_userns: (false, None),
            exec_rules: Vec::new(),
            ask_timeout: (ExecPlan::default().ask_timeout_secs, None),
            protect: Vec::new(),
            on_exit: (OnExit::default(), None),
            project_files: (ProjectFiles::default(), None),
            home: (HomeMode::default(), None),
            caches: Vec::new(),
            net_mode: (NetMode::default(), None),
            allow_ips: Vec::new(),
            net_allow: Vec::new(),
            dns_block: Vec::new(),
            dns_hosts: BTreeMap::new(),
            dns_upstream: None,
            publish: Vec::new(),
            http_default: (HttpAction::Deny, None),
            http_rules: Vec::new(),
            tls_passthrough: Vec::new(),
            upstream_ca: Vec::new(),
            judge: None,
            credentials: Vec::new(),
            dlp_action: (crate::plan::DlpAction::Deny, None),
            dlp_max_body: (crate::plan::DlpPlan::default().max_body_bytes, None),
            dlp_allow: Vec::new(),
            notes: Vec::new(),
        };
        for l in layers {
            m.apply(&l.base);
        }
        if let Some(name) = profile {
            for l in layers {
                if let Some(p) = l.profiles.get(name) {
                    m.apply(p);
                }
            }
        }
        m.yield_built_in_protection(project);
        m
    }

    /// The built-in policy's protected paths give way where a file denies them (deny wins,
    /// and the user cannot remove a built-in entry) or where they contain the project (which
    /// is always writable, never staged). Paths written in a file are checked instead, by
    /// [`check_contradictions`](Self::check_contradictions).
    fn yield_built_in_protection(&mut self, project: &Path) {
        let (deny, notes) = (&self.deny, &mut self.notes);
        self.protect.retain(|r| {
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

    fn apply(&mut self, s: &Sections) {
        push_rules(&mut self.readable, &s.readable);
        push_rules(&mut self.writable, &s.writable);
        push_rules(&mut self.deny, &s.deny);
        push_rules(&mut self.read_only, &s.read_only);
        if let Some((mode, o)) = &s.landlock {
            self.landlock = (*mode, Some(o.clone()));
        }
        for (p, o) in &s.pass {
            if !self.pass.iter().any(|(x, _)| x == p) {
                self.pass.push((p.clone(), o.clone()));
            }
        }
        for (k, v, o) in &s.set {
            self.set.insert(k.clone(), (v.clone(), o.clone()));
        }
        if s.memory.is_some() {
            self.memory.clone_from(&s.memory);
        }
        if s.pids.is_some() {
            self.pids.clone_from(&s.pids);
        }
        if s.cpu.is_some() {
            self.cpu.clone_from(&s.cpu);
        }
        if s.nofile.is_some() {
            self.nofile.clone_from(&s.nofile);
        }
        push_named(&mut self.sys_allow, &s.sys_allow);
        push_named(&mut self.sys_deny, &s.sys_deny);
        if let Some((v, o)) = &s.nested_userns {
            self.nested_userns = (*v, Some(o.clone()));
        }
        for (p, a, o) in &s.exec_rules {
            if !self.exec_rules.iter().any(|(x, b, _)| x == p && b == a) {
                self.exec_rules.push((p.clone(), *a, o.clone()));
            }
        }
        if let Some((v, o)) = &s.ask_timeout {
            self.ask_timeout = (*v, Some(o.clone()));
        }
        push_rules(&mut self.protect, &s.protect);
        if let Some((v, o)) = &s.on_exit {
            self.on_exit = (*v, Some(o.clone()));
        }
        if let Some((v, o)) = &s.project_files {
            self.project_files = (*v, Some(o.clone()));
        }
        if let Some((v, o)) = &s.home {
            self.home = (*v, Some(o.clone()));
        }
        push_rules(&mut self.caches, &s.caches);
        if let Some((v, o)) = &s.net_mode {
            self.net_mode = (*v, Some(o.clone()));
        }
        push_named(&mut self.allow_ips, &s.allow_ips);
        for (h, ports, o) in &s.net_allow {
            if !self.net_allow.iter().any(|(x, p, _)| x == h && p == ports) {
                self.net_allow.push((h.clone(), ports.clone(), o.clone()));
            }
        }
        push_named(&mut self.dns_block, &s.dns_block);
        for (name, ip, o) in &s.dns_hosts {
            self.dns_hosts.insert(name.clone(), (*ip, o.clone()));
        }
        if s.dns_upstream.is_some() {
            self.dns_upstream.clone_from(&s.dns_upstream);
        }
        if let Some((v, o)) = &s.http_default {
            self.http_default = (*v, Some(o.clone()));
        }
        self.http_rules.extend(s.http_rules.iter().cloned());
        push_named(&mut self.tls_passthrough, &s.tls_passthrough);
        push_rules(&mut self.upstream_ca, &s.upstream_ca);
        if s.judge.is_some() {
            self.judge.clone_from(&s.judge);
        }
        if let Some((a, o)) = &s.dlp_action {
            self.dlp_action = (*a, Some(o.clone()));
        }
        if let Some((n, o)) = &s.dlp_max_body {
            self.dlp_max_body = (*n, Some(o.clone()));
        }
        for (a, o) in &s.dlp_allow {
            if !self
                .dlp_allow
                .iter()
                .any(|(x, _)| x.kinds == a.kinds && x.hosts == a.hosts)
            {
                self.dlp_allow.push((a.clone(), o.clone()));
            }
        }
        for (c, o) in &s.credentials {
            // A later layer's credential of the same name replaces the earlier one.
            self.credentials.retain(|(x, _)| x.name != c.name);
            self.credentials.push((c.clone(), o.clone()));
        }
        for (port, host_port, o) in &s.publish {
            // A later layer's entry for the same host port replaces the earlier one.
            self.publish.retain(|(_, h, _)| h != host_port);
            self.publish.push((*port, *host_port, o.clone()));
        }
    }

    /// A readable, writable or protected path equal to or inside a denied one is a
    /// contradiction: deny wins, so the user's intent cannot be what happens. A protected path
    /// that contains the project directory is one too: the project cannot be staged.
    fn check_contradictions(&self, layers: &[Layer]) -> Result<(), PolicyError> {
        let allowed = self.writable.iter().map(|r| ("writable", r));
        let allowed = allowed.chain(self.readable.iter().map(|r| ("readable", r)));
        let allowed = allowed.chain(self.protect.iter().map(|r| ("protect", r)));
        for (kind, r) in allowed {
            for d in &self.deny {
                if r.path.starts_with(&d.path) {
                    return Err(contradiction(kind, r, d, layers).into());
                }
            }
        }
        // The project rule is the first writable one.
        if let Some(project) = self.writable.first() {
            for r in &self.protect {
                if project.path.starts_with(&r.path) {
                    return Err(protects_project(r, &project.path, layers).into());
                }
            }
        }
        Ok(())
    }

    fn into_plan(self, opts: &LoadOptions) -> Plan {
        let named = |v: Vec<(String, Origin)>| -> Vec<NamedRule> {
            v.into_iter()
                .map(|(name, o)| NamedRule {
                    name,
                    origin: o.label,
                })
                .collect()
        };
        let rules = |v: Vec<Rule>| -> Vec<PathRule> {
            v.into_iter()
                .map(|r| PathRule::new(r.path, r.origin.label))
                .collect()
        };
        Plan {
            project: opts.project_dir.clone(),
            home: opts.home.clone(),
            filesystem: FilesystemPlan {
                readable: rules(self.readable),
                writable: rules(self.writable),
                deny: rules(self.deny),
                read_only: rules(self.read_only),
                landlock: self.landlock.0,
            },
            env: EnvPlan {
                pass: self.pass.into_iter().map(|(p, _)| p).collect(),
                set: self.set.into_iter().map(|(k, (v, _))| (k, v)).collect(),
            },
            limits: LimitsPlan {
                memory: self.memory.map(|x| x.0),
                pids: self.pids.map(|x| x.0),
                cpu: self.cpu.map(|x| x.0),
                nofile: self.nofile.map(|x| x.0),
            },
            syscalls: SyscallsPlan {
                allow: named(self.sys_allow),
                deny: named(self.sys_deny),
                nested_userns: self.nested_userns.0,
            },
            exec: ExecPlan {
                rules: self
                    .exec_rules
                    .into_iter()
                    .map(|(pattern, action, o)| ExecRule {
                        pattern,
                        action,
                        origin: o.label,
                    })
                    .collect(),
                ask_timeout_secs: self.ask_timeout.0,
            },
            state: StatePlan {
                protect: rules(self.protect),
                on_exit: self.on_exit.0,
                project_files: self.project_files.0,
                home: self.home.0,
                caches: rules(self.caches),
            },
            network: NetworkPlan {
                mode: self.net_mode.0,
                allow_ips: self.allow_ips.into_iter().map(|(c, _)| c).collect(),
                allow: self
                    .net_allow
                    .into_iter()
                    .map(|(host, ports, o)| HostRule {
                        host,
                        ports,
                        origin: o.label,
                    })
                    .collect(),
                dns_block: self.dns_block.into_iter().map(|(b, _)| b).collect(),
                dns_hosts: self
                    .dns_hosts
                    .into_iter()
                    .map(|(k, (ip, _))| (k, ip))
                    .collect(),
                dns_upstream: self.dns_upstream.map(|(a, _)| a),
                publish: self
                    .publish
                    .into_iter()
                    .map(|(port, host_port, o)| Publish {
                        port,
                        host_port,
                        origin: o.label,
                    })
                    .collect(),
            },
            http: HttpPlan {
                rules: self.http_rules.into_iter().map(|(r, _)| r).collect(),
                default: self.http_default.0,
                passthrough: self.tls_passthrough.into_iter().map(|(p, _)| p).collect(),
                upstream_ca: self.upstream_ca.into_iter().map(|r| r.path).collect(),
                judge: self.judge.map(|(j, _)| j),
                dlp: crate::plan::DlpPlan {
                    action: self.dlp_action.0,
                    max_body_bytes: self.dlp_max_body.0,
                    allow: self.dlp_allow.into_iter().map(|(a, _)| a).collect(),
                },
            },
            credentials: self.credentials.into_iter().map(|(c, _)| c).collect(),
        }
    }
}

/// A diagnostic located at `origin`, when it was written in a file.
fn diag_at(message: String, origin: &Origin, layers: &[Layer]) -> Diagnostic {
    let d = Diagnostic::new(message);
    match (&origin.span, layers.get(origin.layer)) {
        (Some(span), Some(l)) if l.file.is_some() => {
            d.in_file(l.file.as_deref()).at(&l.src, span.clone())
        }
        _ => d,
    }
}

fn protects_project(r: &Rule, project: &Path, layers: &[Layer]) -> Diagnostic {
    let (rp, pp) = (r.path.display(), project.display());
    let msg = if r.path == project {
        format!("protected path {rp} is the project directory")
    } else {
        format!("protected path {rp} contains the project directory {pp}")
    };
    let help =
        "the project itself cannot be staged (it is always writable); protect narrower paths";
    diag_at(msg, &r.origin, layers).with_help(help)
}

fn contradiction(key: &str, r: &Rule, d: &Rule, layers: &[Layer]) -> Diagnostic {
    let kind = if key == "protect" { "protected" } else { key };
    let (rp, dp) = (r.path.display(), d.path.display());
    let r_builtin = r.origin.span.is_none() || layers[r.origin.layer].file.is_none();
    let d_builtin = d.origin.span.is_none() || layers[d.origin.layer].file.is_none();
    if r.origin.span.is_none() {
        // The project directory itself.
        let msg = format!(
            "the project directory {rp} is inside denied path {dp} ({})",
            d.origin.label
        );
        let help = if d_builtin {
            format!("run cordon in a project outside {dp}")
        } else {
            "the project directory is always writable; deny a narrower path".to_string()
        };
        return diag_at(msg, &d.origin, layers).with_help(help);
    }
    let blame_rule = !r_builtin && (d_builtin || r.origin.order >= d.origin.order);
    if blame_rule {
        let msg = if r.path == d.path {
            format!("{rp} is both {kind} and denied ({})", d.origin.label)
        } else {
            format!(
                "{kind} path {rp} is inside denied path {dp} ({})",
                d.origin.label
            )
        };
        diag_at(msg, &r.origin, layers).with_help(format!(
            "deny always wins; remove it from `{key}`, or deny narrower paths"
        ))
    } else {
        let msg = format!(
            "denied path {dp} contains {kind} path {rp} ({})",
            r.origin.label
        );
        diag_at(msg, &d.origin, layers).with_help(format!(
            "deny always wins; remove one of the two (the {kind} entry would have no effect)"
        ))
    }
}

fn as_f(x: &Option<(u64, Origin)>) -> Option<(f64, &Origin)> {
    x.as_ref().map(|(v, o)| (*v as f64, o))
}

fn covered(path: &Path, rules: &[&Rule]) -> bool {
    rules.iter().any(|r| path.starts_with(&r.path))
}

fn loosenings(full: &Merged, base: &Merged, layers: &[Layer]) -> Vec<Loosening> {
    let mut out = Vec::new();
    let fallback = layers
        .iter()
        .find(|l| l.untrusted)
        .and_then(|l| l.file.clone());
    let mut add = |o: &Origin, what: String| {
        let file = layers
            .get(o.layer)
            .filter(|l| l.untrusted)
            .and_then(|l| l.file.clone())
            .or_else(|| fallback.clone())
            .unwrap_or_default();
        let what = if o.line > 0 {
            format!("{what} (line {})", o.line)
        } else {
            what
        };
        out.push(Loosening { file, what });
    };

    let base_visible: Vec<&Rule> = base.readable.iter().chain(&base.writable).collect();
    for r in &full.readable {
        if !covered(&r.path, &base_visible) {
            add(
                &r.origin,
                format!("adds readable path {}", r.path.display()),
            );
        }
    }
    let base_writable: Vec<&Rule> = base.writable.iter().collect();
    let base_ro: Vec<&Rule> = base.read_only.iter().collect();
    for r in &full.writable {
        if !covered(&r.path, &base_writable) || covered(&r.path, &base_ro) {
            add(
                &r.origin,
                format!("adds writable path {}", r.path.display()),
            );
        }
    }
    for (p, o) in &full.pass {
        let known = base.pass.iter().any(|(b, _)| {
            b == p
                || (!p.contains('*') && !looks_secret(p) && b.contains('*') && glob_matches(b, p))
        });
        if !known {
            let what = if p.contains('*') {
                format!("passes host variables matching `{p}`")
            } else {
                format!("passes host variable `{p}`")
            };
            add(o, what);
        }
    }
    for (k, (v, o)) in &full.set {
        if base.set.get(k).map(|(b, _)| b) != Some(v) {
            add(o, format!("sets environment variable `{k}`"));
        }
    }
    if let (LandlockMode::BestEffort, LandlockMode::Required, Some(o)) =
        (full.landlock.0, base.landlock.0, &full.landlock.1)
    {
        add(o, "makes Landlock best-effort".to_string());
    }
    let limit = |name: &str, b: Option<(f64, &Origin)>, f: Option<(f64, &Origin)>| match (b, f) {
        (Some((b, _)), Some((f, o))) if f > b => {
            Some((o.clone(), format!("raises the {name} limit")))
        }
        (Some(_), None) => Some((project_origin(), format!("removes the {name} limit"))),
        _ => None,
    };
    let changes = [
        limit("memory", as_f(&base.memory), as_f(&full.memory)),
        limit("pids", as_f(&base.pids), as_f(&full.pids)),
        limit(
            "cpu",
            base.cpu.as_ref().map(|(v, o)| (*v, o)),
            full.cpu.as_ref().map(|(v, o)| (*v, o)),
        ),
        limit("nofile", as_f(&base.nofile), as_f(&full.nofile)),
    ];
    for (o, what) in changes.into_iter().flatten() {
        add(&o, what);
    }
    for (name, o) in &full.sys_allow {
        if !base.sys_allow.iter().any(|(b, _)| b == name) {
            add(o, format!("allows syscall `{name}`"));
        }
    }
    if let (true, false, Some(o)) = (
        full.nested_userns.0,
        base.nested_userns.0,
        &full.nested_userns.1,
    ) {
        add(o, "allows nested user namespaces".to_string());
    }
    for (p, a, o) in &full.exec_rules {
        if *a == ExecAction::Allow
            && !base
                .exec_rules
                .iter()
                .any(|(b, ba, _)| b == p && *ba == ExecAction::Allow)
        {
            add(o, format!("adds exec allow rule `{p}`"));
        }
    }
    match (full.net_mode.0, base.net_mode.0, &full.net_mode.1) {
        (NetMode::Host, NetMode::Host, _) | (_, _, None) => {}
        (NetMode::Host, _, Some(o)) => add(
            o,
            "turns network isolation off (mode = \"host\")".to_string(),
        ),
        (NetMode::Gateway, NetMode::None, Some(o)) => add(
            o,
            "gives the sandbox network access (mode = \"gateway\")".to_string(),
        ),
        _ => {}
    }
    for (cidr, o) in &full.allow_ips {
        if !base.allow_ips.iter().any(|(b, _)| b == cidr) {
            add(o, format!("allows connections to raw addresses {cidr}"));
        }
    }
    for (h, ports, o) in &full.net_allow {
        let known = |p: &u16| {
            base.net_allow
                .iter()
                .any(|(b, bp, _)| b == h && bp.contains(p))
        };
        if !ports.iter().all(known) {
            add(o, format!("allows connections to {h} on ports {ports:?}"));
        }
    }
    for (name, (ip, o)) in &full.dns_hosts {
        if base.dns_hosts.get(name).map(|(b, _)| b) != Some(ip) {
            add(
                o,
                format!("answers {name} with {ip} (names may point at private addresses)"),
            );
        }
    }
    if let (Some((u, o)), false) = (
        &full.dns_upstream,
        full.dns_upstream.as_ref().map(|x| x.0) == base.dns_upstream.as_ref().map(|x| x.0),
    ) {
        add(o, format!("resolves names through {u}"));
    }
    // A published port is a way *in*: host tools that expect a service on that port (a
    // database, a local model server) would hand their credentials to the sandbox.
    for (port, host_port, o) in &full.publish {
        if !base
            .publish
            .iter()
            .any(|(p, h, _)| p == port && h == host_port)
        {
            add(
                o,
                format!("publishes the sandbox's port {port} on the host's 127.0.0.1:{host_port}"),
            );
        }
    }
    for (r, o) in &full.http_rules {
        if r.action != HttpAction::Deny && !base.http_rules.iter().any(|(b, _)| b == r) {
            add(
                o,
                format!("adds HTTP rule `{}` ({:?} {})", r.name, r.action, r.host),
            );
        }
    }
    if let (d, Some(o)) = (&full.http_default.0, &full.http_default.1)
        && *d != HttpAction::Deny
        && *d != base.http_default.0
    {
        add(o, format!("lets unmatched HTTP requests through {d:?}"));
    }
    // A credential sends a real secret somewhere: who defines where is loosening.
    for (c, o) in &full.credentials {
        if !base.credentials.iter().any(|(b, _)| b == c) {
            add(o, format!("sends credential `{}` to {:?}", c.name, c.hosts));
        }
    }
    // Secret scanning: a weaker action, a shorter scanned prefix or a new exemption lets a
    // secret out that the base policy would have stopped.
    if let (a, Some(o)) = (&full.dlp_action.0, &full.dlp_action.1)
        && *a != crate::plan::DlpAction::Deny
        && *a != base.dlp_action.0
    {
        add(
            o,
            format!("lets requests carrying secrets through ([dlp] action = {a:?})"),
        );
    }
    if let (n, Some(o)) = (full.dlp_max_body.0, &full.dlp_max_body.1)
        && n < base.dlp_max_body.0
    {
        add(
            o,
            format!("scans only the first {n} bytes of request bodies for secrets"),
        );
    }
    for (a, o) in &full.dlp_allow {
        if !base
            .dlp_allow
            .iter()
            .any(|(b, _)| b.kinds == a.kinds && b.hosts == a.hosts)
        {
            add(
                o,
                format!("lets secrets of kinds {:?} go to {:?}", a.kinds, a.hosts),
            );
        }
    }
    // The judge decides what rules leave to it: who it is and what it is told is loosening.
    if let Some((j, o)) = &full.judge
        && base.judge.as_ref().map(|(b, _)| b) != Some(j)
    {
        add(o, format!("sets the LLM judge ({} at {})", j.model, j.url));
    }
    for (p, o) in &full.tls_passthrough {
        if !base.tls_passthrough.iter().any(|(b, _)| b == p) {
            add(o, format!("exempts {p} from HTTPS inspection"));
        }
    }
    for r in &full.upstream_ca {
        if !base.upstream_ca.iter().any(|b| b.path == r.path) {
            add(
                &r.origin,
                format!("trusts {} for upstream TLS", r.path.display()),
            );
        }
    }
    // A copy-on-write home only adds a layer that is discarded; a persistent cache layer is
    // shared by every later session of every project, so a new one is a way to reach them.
    if let (HomeMode::Overlay, HomeMode::Readonly, Some(o)) =
        (full.home.0, base.home.0, &full.home.1)
    {
        add(
            o,
            "makes the home copy-on-write (home = \"overlay\") where your policy keeps it read-only"
                .to_string(),
        );
    }
    for r in &full.caches {
        if !base.caches.iter().any(|b| b.path == r.path) {
            add(
                &r.origin,
                format!(
                    "keeps {} as a cache shared by later sessions",
                    r.path.display()
                ),
            );
        }
    }
    // Protection only adds review; what is kept without review is what loosens.
    if let (OnExit::Keep, false, Some(o)) = (
        full.on_exit.0,
        base.on_exit.0 == OnExit::Keep,
        &full.on_exit.1,
    ) {
        add(
            o,
            "applies changes to protected state without review (on_exit = \"keep\")".to_string(),
        );
    }
    if full.on_exit.0 == OnExit::Keep {
        // Protecting a path makes it writable copy-on-write; kept without review, that is
        // plain write access.
        let base_changeable: Vec<&Rule> = base.writable.iter().chain(&base.protect).collect();
        for r in &full.protect {
            if !covered(&r.path, &base_changeable) || covered(&r.path, &base_ro) {
                add(
                    &r.origin,
                    format!(
                        "protects {}, whose changes are kept without review (on_exit = \"keep\")",
                        r.path.display()
                    ),
                );
            }
        }
        if let (ProjectFiles::Staged, ProjectFiles::Readonly, Some(o)) = (
            full.project_files.0,
            base.project_files.0,
            &full.project_files.1,
        ) {
            add(
                o,
                "stages the project's read-only files, whose changes are kept without review (on_exit = \"keep\")"
                    .to_string(),
            );
        }
    }
    out
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
        fs.read_only.push(PathRule::new(f, "built-in"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            31
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
            ("aider", &["/home/u/.aider"]),
            (
                "opencode",
                &[
                    "/home/u/.config/opencode",
                    "/home/u/.local/share/opencode",
                    "/home/u/.local/state/opencode",
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
                        .map(|r| r.origin.as_str())
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
    fn the_built_in_state_section() {
        let dir = tempfile::tempdir().unwrap();
        let opts = LoadOptions::new("/work/p", "/home/u", dir.path().join("t.json"));
        let s = load(&opts).unwrap().plan.state;
        assert_eq!(s.on_exit, OnExit::Ask);
        assert_eq!(s.project_files, ProjectFiles::Readonly);
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
        let r = Rule {
            path: "/a/b".into(),
            origin: project_origin(),
        };
        assert!(covered(Path::new("/a/b/c"), &[&r]));
        assert!(covered(Path::new("/a/b"), &[&r]));
        assert!(!covered(Path::new("/a/bc"), &[&r]));
    }
}
