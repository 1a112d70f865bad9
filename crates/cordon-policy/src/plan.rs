//! The resolved plan: what every enforcement layer receives.
//!
//! A [`Plan`] holds no `~`, no variables and no relative paths; it is the policy after
//! merging and expansion, ready to apply. Tests build Plans directly.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Everything one `cordon run` enforces.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// The project directory, absolute and canonical; writable inside the sandbox.
    pub project: PathBuf,
    /// The invoking user's home directory (`$HOME`, else the passwd entry).
    pub home: PathBuf,
    /// The filesystem view.
    pub filesystem: FilesystemPlan,
    /// The environment.
    pub env: EnvPlan,
    /// Resource limits.
    pub limits: LimitsPlan,
    /// The syscall filter (layer 4).
    #[serde(default)]
    pub syscalls: SyscallsPlan,
    /// Supervised exec rules (layer 4).
    #[serde(default)]
    pub exec: ExecPlan,
    /// Agent-state protection.
    #[serde(default)]
    pub state: StatePlan,
    /// Network egress (layer 2).
    #[serde(default)]
    pub network: NetworkPlan,
    /// HTTP(S) interception (layer 3).
    #[serde(default)]
    pub http: HttpPlan,
    /// Credentials injected at the wire (layer 1b).
    #[serde(default)]
    pub credentials: Vec<CredentialPlan>,
}

/// How Landlock is treated when the kernel lacks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum LandlockMode {
    /// Refuse to start (exit 125) when Landlock cannot be applied at all.
    #[default]
    Required,
    /// Warn loudly and continue with the mount fence alone.
    BestEffort,
}

/// Where a filesystem rule came from, so denials can name it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathRule {
    /// Absolute, lexically normalised path.
    pub path: PathBuf,
    /// Human-readable origin: `built-in`, or `FILE:LINE`.
    pub origin: String,
}

impl PathRule {
    /// A rule for `path` from `origin`.
    pub fn new(path: impl Into<PathBuf>, origin: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            origin: origin.into(),
        }
    }
}

/// The filesystem view (layer 1). All paths are absolute and lexically normalised.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
}

/// The environment the sandboxed command sees (layer 1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnvPlan {
    /// Variable names passed through from the host when set: an exact name passes even if it
    /// looks like a secret; a glob (`*` matches any run of characters) never passes a name that
    /// [looks like a secret](crate::looks_secret). `LD_*`, `BASH_ENV`, `ENV` and `GCONV_PATH`
    /// never pass. See [`EnvPlan::apply`].
    pub pass: Vec<String>,
    /// Variables set to fixed values (after `pass`, so `set` wins).
    pub set: BTreeMap<String, String>,
}

/// Resource limits (layer 1). `None` means no limit from cordon.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LimitsPlan {
    /// Memory in bytes (cgroup `memory.max`, else `RLIMIT_AS`).
    pub memory: Option<u64>,
    /// Number of processes/threads (cgroup `pids.max`, else `RLIMIT_NPROC`).
    pub pids: Option<u64>,
    /// CPU bandwidth in cores, e.g. 1.5 (cgroup `cpu.max` only; no rlimit equivalent).
    pub cpu: Option<f64>,
    /// Open files per process (`RLIMIT_NOFILE`).
    pub nofile: Option<u64>,
}

/// The syscall filter (layer 4): built-in denials, relaxed or extended by name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyscallsPlan {
    /// Built-in denials to lift, by syscall name (e.g. `ptrace`, which also lifts
    /// `process_vm_readv`/`process_vm_writev`), each with where it came from.
    pub allow: Vec<NamedRule>,
    /// Extra syscalls to deny, by name.
    pub deny: Vec<NamedRule>,
    /// Allow new user namespaces inside the sandbox (`unshare`/`clone` with `CLONE_NEWUSER`),
    /// e.g. for nested sandboxes. Default false.
    pub nested_userns: bool,
}

/// Syscalls denied by default, whatever their arguments (names missing from the running
/// architecture's table, such as `iopl` on aarch64, are skipped by the filter). Each can be
/// lifted with `[syscalls] allow`; see [`SyscallsPlan::lifted_by`].
pub const BUILTIN_DENIED_SYSCALLS: &[&str] = &[
    // Kernel code and kernel-wide state.
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "lookup_dcookie",
    "acct",
    "swapon",
    "swapoff",
    "reboot",
    "syslog",
    "quotactl",
    "vhangup",
    "iopl",
    "ioperm",
    // io_uring bypasses the syscall filter (its operations are not syscalls).
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    // The kernel keyring: shared with the host user's keys.
    "keyctl",
    "add_key",
    "request_key",
    // Other processes' memory.
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    // The mount tree (locked anyway; denied so attempts are visible).
    "mount",
    "umount2",
    "pivot_root",
    "move_mount",
    "open_tree",
    "open_tree_attr",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "setns",
    // Handles bypass path-based checks.
    "open_by_handle_at",
    // The clock.
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
];

/// Syscalls denied by default only for some arguments; not liftable by name.
/// (`unshare`/`clone` with `CLONE_NEWUSER` are lifted by `nested_userns`.)
pub const BUILTIN_CONDITIONAL_SYSCALLS: &[(&str, &str)] = &[
    (
        "unshare",
        "only with CLONE_NEWUSER; set `nested_userns = true` to allow nested user namespaces",
    ),
    (
        "clone",
        "only with CLONE_NEWUSER; set `nested_userns = true` to allow nested user namespaces",
    ),
    (
        "clone3",
        "it always fails with ENOSYS so that programs fall back to `clone`, whose flags the filter can inspect",
    ),
    (
        "ioctl",
        "only TIOCSTI and TIOCLINUX (typing into or controlling the terminal); these cannot be allowed",
    ),
    (
        "socket",
        "only for address families other than AF_UNIX, AF_INET, AF_INET6 and AF_NETLINK (route); these cannot be allowed",
    ),
];

impl SyscallsPlan {
    /// The built-in denials that `allow = [name]` lifts (`ptrace` also lifts
    /// `process_vm_readv` and `process_vm_writev`); empty when `name` is not denied by default.
    pub fn lifted_by(name: &str) -> &'static [&'static str] {
        const PTRACE: &[&str] = &["ptrace", "process_vm_readv", "process_vm_writev"];
        if name == "ptrace" {
            return PTRACE;
        }
        match BUILTIN_DENIED_SYSCALLS.iter().position(|n| *n == name) {
            Some(i) => &BUILTIN_DENIED_SYSCALLS[i..=i],
            None => &[],
        }
    }

    /// Every syscall denied whatever its arguments, by name, with the rule that denies it:
    /// the built-in list minus what `allow` lifts (origin `built-in`), then `deny` (its own
    /// origin). A name both lifted and denied again by `deny` stays denied.
    pub fn denied(&self) -> Vec<NamedRule> {
        let lifted = |n: &str| {
            self.allow
                .iter()
                .any(|a| Self::lifted_by(&a.name).contains(&n))
        };
        let mut out: Vec<NamedRule> = BUILTIN_DENIED_SYSCALLS
            .iter()
            .filter(|n| !lifted(n))
            .map(|n| NamedRule {
                name: (*n).to_string(),
                origin: "built-in".to_string(),
            })
            .collect();
        for d in &self.deny {
            if !out.iter().any(|o| o.name == d.name) {
                out.push(d.clone());
            }
        }
        out
    }
}

/// A name (syscall) with the origin of the rule that named it (`built-in` or `FILE:LINE`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamedRule {
    /// The syscall name, validated against the syscall tables.
    pub name: String,
    /// `built-in`, or `FILE:LINE`.
    pub origin: String,
}

/// What to do with an exec that a rule matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecAction {
    /// Let it run.
    Allow,
    /// Fail it with EPERM and tell the terminal.
    Deny,
    /// Hold it until a person answers through `cordon approve` (or the timeout denies it).
    Ask,
}

/// One exec rule: a glob over the command line `PROGRAM ARG1 ARG2 …`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecRule {
    /// Glob over `PROGRAM ARGS…`, where PROGRAM is the basename of the executed file and
    /// arguments are joined by single spaces; `*` matches any run of characters (spaces too),
    /// `?` one character. A trailing ` *` also matches the bare program (`git push *` matches
    /// `git push`).
    pub pattern: String,
    /// The action when it matches.
    pub action: ExecAction,
    /// `built-in`, or `FILE:LINE`.
    pub origin: String,
}

/// Supervised exec rules (layer 4). The first matching rule decides; none matching allows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecPlan {
    /// Ordered rules.
    pub rules: Vec<ExecRule>,
    /// Seconds an `ask` waits for a person before it is denied.
    pub ask_timeout_secs: u64,
}

impl Default for ExecPlan {
    fn default() -> Self {
        ExecPlan {
            rules: Vec::new(),
            ask_timeout_secs: 60,
        }
    }
}

impl ExecPlan {
    /// The first rule matching the command line `program args…`, if any.
    pub fn decide(&self, program: &str, args: &[String]) -> Option<&ExecRule> {
        let mut line = program.to_string();
        for a in args {
            line.push(' ');
            line.push_str(a);
        }
        self.rules.iter().find(|r| exec_glob(&r.pattern, &line))
    }
}

/// Glob match for exec rules: `*` any run (spaces included), `?` one character.
/// A pattern ending in ` *` also matches the text without that tail.
pub fn exec_glob(pattern: &str, text: &str) -> bool {
    fn m(p: &[char], t: &[char]) -> bool {
        // Iterative matching with backtracking on the last `*`: linear-ish, no recursion blowup.
        let (mut pi, mut ti) = (0, 0);
        let (mut star, mut mark) = (None, 0);
        while ti < t.len() {
            if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
                pi += 1;
                ti += 1;
            } else if pi < p.len() && p[pi] == '*' {
                star = Some(pi);
                mark = ti;
                pi += 1;
            } else if let Some(s) = star {
                pi = s + 1;
                mark += 1;
                ti = mark;
            } else {
                return false;
            }
        }
        while pi < p.len() && p[pi] == '*' {
            pi += 1;
        }
        pi == p.len()
    }
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    if m(&p, &t) {
        return true;
    }
    match pattern.strip_suffix(" *") {
        Some(head) => m(&head.chars().collect::<Vec<_>>(), &t),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::syscall_table::{AARCH64, X86_64};

    fn rule(name: &str, origin: &str) -> NamedRule {
        NamedRule {
            name: name.into(),
            origin: origin.into(),
        }
    }

    #[test]
    fn built_in_denials_are_real_syscalls() {
        let known = |n: &str| X86_64.iter().chain(AARCH64).any(|(x, _)| *x == n);
        for n in BUILTIN_DENIED_SYSCALLS {
            // open_tree_attr (Linux 6.15) is newer than the libc tables.
            assert!(known(n) || *n == "open_tree_attr", "{n}");
        }
        for (n, _) in BUILTIN_CONDITIONAL_SYSCALLS {
            assert!(known(n), "{n}");
            assert!(!BUILTIN_DENIED_SYSCALLS.contains(n), "{n}");
        }
        assert!(!BUILTIN_DENIED_SYSCALLS.contains(&"execve"));
    }

    #[test]
    fn ptrace_lifts_the_process_vm_calls() {
        assert_eq!(
            SyscallsPlan::lifted_by("ptrace"),
            ["ptrace", "process_vm_readv", "process_vm_writev"]
        );
        assert_eq!(SyscallsPlan::lifted_by("mount"), ["mount"]);
        assert_eq!(
            SyscallsPlan::lifted_by("process_vm_readv"),
            ["process_vm_readv"]
        );
        assert!(SyscallsPlan::lifted_by("getpid").is_empty());
        assert!(SyscallsPlan::lifted_by("socket").is_empty());
    }

    #[test]
    fn denied_is_built_in_minus_lifted_plus_deny() {
        let plan = SyscallsPlan {
            allow: vec![rule("ptrace", "a:1"), rule("bpf", "a:2")],
            deny: vec![
                rule("chroot", "d:1"),
                rule("bpf", "d:2"),
                rule("mount", "d:3"),
            ],
            nested_userns: false,
        };
        let d = plan.denied();
        let find = |n: &str| d.iter().find(|r| r.name == n).map(|r| r.origin.as_str());
        assert_eq!(find("ptrace"), None);
        assert_eq!(find("process_vm_writev"), None);
        assert_eq!(find("mount"), Some("built-in"), "first origin kept");
        assert_eq!(find("chroot"), Some("d:1"));
        assert_eq!(find("bpf"), Some("d:2"), "denied again after the lift");
        assert_eq!(find("kexec_load"), Some("built-in"));
        assert_eq!(d.iter().filter(|r| r.name == "mount").count(), 1);
        let default = SyscallsPlan::default().denied();
        assert_eq!(default.len(), BUILTIN_DENIED_SYSCALLS.len());
    }

    #[test]
    fn exec_rules_first_match_wins() {
        let r = |p: &str, action| ExecRule {
            pattern: p.into(),
            action,
            origin: "t".into(),
        };
        let plan = ExecPlan {
            rules: vec![
                r("git push --dry-run *", ExecAction::Allow),
                r("git push *", ExecAction::Ask),
                r("sudo *", ExecAction::Deny),
            ],
            ask_timeout_secs: 60,
        };
        let args = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        let decide = |p: &str, a: &str| plan.decide(p, &args(a)).map(|r| r.action);
        assert_eq!(decide("git", "push origin main"), Some(ExecAction::Ask));
        assert_eq!(decide("git", "push --dry-run x"), Some(ExecAction::Allow));
        assert_eq!(
            plan.decide("git", &["push".into()]).map(|r| r.action),
            Some(ExecAction::Ask)
        );
        assert_eq!(decide("sudo", "-i"), Some(ExecAction::Deny));
        assert_eq!(decide("git", "status"), None);
        assert!(exec_glob("*", ""));
        assert!(exec_glob("*make", "cmake"));
        assert!(!exec_glob("su *", "sudo x"));
    }
}

/// What happens to changes in protected state when a session ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum OnExit {
    /// Show the summary and ask (on a terminal; without one this acts as `Pending`).
    #[default]
    Ask,
    /// Apply the changes to the host copies.
    Keep,
    /// Throw the changes away.
    Discard,
    /// Keep them aside for `cordon state accept/discard`.
    Pending,
}

/// How the project's host-executed files (`.git/hooks`, `.envrc`, …) are protected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ProjectFiles {
    /// Read-only inside the sandbox (the filesystem plan's `read_only`).
    #[default]
    Readonly,
    /// Writable copy-on-write, reviewed at exit like other protected state.
    Staged,
}

/// How the sandbox sees the user's home outside the project and the writable paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum HomeMode {
    /// Copy-on-write: writes land in the session's own layer (protected paths go to review,
    /// caches to cordon's persistent cache layers, the rest is discarded at exit). Where the
    /// kernel or filesystem refuses the overlay, the home is read-only, with a warning.
    #[default]
    Overlay,
    /// Read-only, as the rest of the host.
    Readonly,
}

/// Agent-state protection: paths the agent may change only through review.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
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
    /// Package and build caches in the home that persist across sessions in cordon's own
    /// sandbox-side layers (the host's cache below, never written back).
    #[serde(default)]
    pub caches: Vec<PathRule>,
}

/// How the sandbox reaches the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum NetMode {
    /// Through cordon's egress gateway only: every flow is decided by name, host and port.
    #[default]
    Gateway,
    /// Loopback only; no way out at all.
    None,
    /// The host's network, unfiltered (no network isolation at all).
    Host,
}

/// One `[[network.allow]]` rule: TCP to `host` on one of `ports`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostRule {
    /// Exact name, or `*.suffix` for any name below `suffix` (at any depth), lower-case.
    pub host: String,
    /// Ports this rule opens (non-empty).
    pub ports: Vec<u16>,
    /// Where the rule came from (`built-in`, `FILE:LINE`).
    pub origin: String,
}

impl HostRule {
    /// Whether `name` (normalised, lower-case, no trailing dot) matches this rule's host.
    pub fn matches_host(&self, name: &str) -> bool {
        match self.host.strip_prefix("*.") {
            Some(suffix) => {
                name.len() > suffix.len() + 1 && name.ends_with(suffix) && {
                    name.as_bytes()[name.len() - suffix.len() - 1] == b'.'
                }
            }
            None => self.host == name,
        }
    }

    /// A name for this rule in events: `network.allow:HOST` and its origin.
    pub fn label(&self) -> String {
        format!("network.allow {} ({})", self.host, self.origin)
    }
}

/// One `[[publish]]` entry: the host's `127.0.0.1:host_port` forwards to the sandbox's `port`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Publish {
    /// Port inside the sandbox (its loopback).
    pub port: u16,
    /// Port bound on the host's loopback.
    pub host_port: u16,
    /// Where the entry came from.
    pub origin: String,
}

/// Network egress policy: the gateway's rules and its resolver's configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkPlan {
    /// Gateway (default), none or host.
    pub mode: NetMode,
    /// Raw-IP destinations (CIDR, validated) the sandbox may connect to without a name.
    pub allow_ips: Vec<String>,
    /// TCP egress by name and port, in merge order.
    pub allow: Vec<HostRule>,
    /// Extra DNS blocklist patterns (`name` blocks it and below; `*.name` only below).
    pub dns_block: Vec<String>,
    /// Static host-side answers: name → address.
    pub dns_hosts: BTreeMap<String, std::net::IpAddr>,
    /// The resolver the host side asks, if not the system's.
    pub dns_upstream: Option<std::net::SocketAddr>,
    /// Ports published on the host's loopback.
    pub publish: Vec<Publish>,
}

impl NetworkPlan {
    /// The first rule allowing TCP to `name:port`, if any.
    pub fn allowing(&self, name: &str, port: u16) -> Option<&HostRule> {
        self.allow
            .iter()
            .find(|r| r.ports.contains(&port) && r.matches_host(name))
    }
}

/// What an HTTP rule (or the default) does with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum HttpAction {
    /// Forward it.
    Allow,
    /// Refuse it with a 403 that says why.
    #[default]
    Deny,
    /// Hold it and ask a person.
    Ask,
    /// Ask the LLM judge.
    Judge,
}

/// One `[[http.rule]]`. Empty lists and `None` match anything.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpRule {
    /// Its name in events and 403 bodies (`http.rule FILE:LINE` when unnamed).
    pub name: String,
    /// Host glob (`*.x` = any name below x).
    pub host: String,
    /// Port, if the rule is for one.
    pub port: Option<u16>,
    /// Methods, upper-case; empty = any.
    pub methods: Vec<String>,
    /// Path glob.
    pub path: Option<String>,
    /// Query glob.
    pub query: Option<String>,
    /// Header globs by lower-case name.
    pub headers: Vec<(String, String)>,
    /// Largest declared body the rule matches.
    pub max_body: Option<u64>,
    /// What it does.
    pub action: HttpAction,
    /// Shown to the client (the model) when it denies.
    pub reason: Option<String>,
    /// Where it came from.
    pub origin: String,
}

/// HTTP-layer policy: ordered request rules, the default, and TLS exceptions.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpPlan {
    /// Rules in merge order; the first match decides.
    pub rules: Vec<HttpRule>,
    /// What a request no rule matches gets, when its host and port are not in a
    /// `[[network.allow]]` rule either.
    pub default: HttpAction,
    /// Hosts (globs) decided by name only and never intercepted (clients that pin).
    pub passthrough: Vec<String>,
    /// Extra CA certificates (PEM files) trusted for upstream servers.
    pub upstream_ca: Vec<PathBuf>,
    /// The LLM judge, if configured.
    #[serde(default)]
    pub judge: Option<JudgePlan>,
    /// Outbound secret scanning.
    #[serde(default)]
    pub dlp: DlpPlan,
}

/// The kinds of secret the scanner knows by shape (`[[dlp.allow]] kinds`); `known:NAME` names
/// a secret known by value.
pub const DLP_KINDS: &[&str] = &[
    "aws-access-key",
    "github-token",
    "gitlab-token",
    "slack-token",
    "stripe-key",
    "anthropic-key",
    "openai-key",
    "private-key",
    "jwt",
];

/// What a request carrying a secret gets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DlpAction {
    /// Refused (403) with a redacted event.
    #[default]
    Deny,
    /// A person decides (refused when nobody can be asked).
    Ask,
    /// Forwarded, with a redacted event.
    Log,
    /// No scanning at all (an explicit opt-out).
    Off,
}

/// `[dlp]`: outbound secret scanning of every inspected request's URL, headers and body
/// prefix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DlpPlan {
    /// What a finding does.
    pub action: DlpAction,
    /// How much of each body is scanned.
    pub max_body_bytes: u64,
    /// Kinds of secret that may go to some hosts (beyond each token's own issuer).
    pub allow: Vec<DlpAllow>,
}

impl Default for DlpPlan {
    fn default() -> Self {
        Self {
            action: DlpAction::Deny,
            max_body_bytes: 64 << 10,
            allow: Vec::new(),
        }
    }
}

/// `[[dlp.allow]]`: these kinds may go to these hosts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DlpAllow {
    /// Finding kinds (`jwt`, `github-token`, `known:NAME`, …; `*` for all).
    pub kinds: Vec<String>,
    /// Host globs.
    pub hosts: Vec<String>,
    /// Where it came from.
    pub origin: String,
}

/// `[judge]`: the LLM asked about requests a rule (or the default) sends to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JudgePlan {
    /// The policy, in plain English.
    pub policy: String,
    /// `anthropic` (Messages) or `openai` (Chat Completions).
    pub api: String,
    /// Base URL or full endpoint.
    pub url: String,
    /// Model name.
    pub model: String,
    /// Host environment variable holding the API key (read on the host only).
    pub credential: Option<String>,
    /// Per-question timeout.
    pub timeout_ms: u64,
    /// `deny` or `ask` when the judge cannot answer.
    pub on_error: String,
    /// Largest body prefix shown to the model.
    pub max_body_bytes: u64,
    /// Where it came from.
    pub origin: String,
}

/// Where a credential's real value comes from (read on the host only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CredentialSource {
    /// A host environment variable.
    Env(String),
    /// A file (its contents, trimmed).
    File(PathBuf),
    /// A command's standard output, trimmed (`gh auth token`).
    Command(Vec<String>),
}

/// `[credentials.NAME]`: the sandbox holds a placeholder; the HTTP layer swaps in the real
/// value only in requests to `hosts`, only in `header`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CredentialPlan {
    /// Its name in events.
    pub name: String,
    /// The sandbox variable that holds the placeholder, if any.
    pub env: Option<String>,
    /// Where the real value comes from.
    pub source: CredentialSource,
    /// Host globs the real value may go to.
    pub hosts: Vec<String>,
    /// The header it travels in (lower-case); empty when it travels in `query`.
    pub header: String,
    /// The query parameter it travels in instead of a header.
    #[serde(default)]
    pub query: Option<String>,
    /// Files shown inside as copies with the real value replaced by the placeholder.
    #[serde(default)]
    pub files: Vec<PathBuf>,
    /// How the header's value is written when injected: `{}` is the value; `Basic …` is
    /// base64-encoded after the scheme.
    pub format: String,
    /// Set the header on every request to `hosts`, whatever the client sent.
    pub inject: bool,
    /// Where it came from.
    pub origin: String,
}
