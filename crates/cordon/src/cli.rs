//! The command-line interface: definitions only, no behaviour.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

pub const EXIT_CODES: &str = "\
Exit status of `cordon run`:
  N        the command's own exit status
  128+N    the command was killed by signal N
  125      cordon failed before the command started (bad policy, untrusted project policy,
           kernel feature missing, audit log not writable)
  126      the command was found but could not be executed
  127      the command was not found in the sandbox's PATH
Other subcommands: 0 success, 1 failure, 2 bad usage or invalid policy; `check` exits 1 for a
valid policy that `run` would refuse (an untrusted project policy that loosens yours).";

/// Fence AI coding agents in: run a command in a sandbox with a policy.
#[derive(Debug, Parser)]
#[command(name = "cordon", version, about, after_help = EXIT_CODES, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Cmd,
}

#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Run COMMAND inside the sandbox, with the project directory writable.
    #[command(after_help = EXIT_CODES)]
    Run(RunArgs),
    /// Validate a policy and print the effective merged policy (rules that have ended left
    /// out, the others' time left beside them).
    Check(CheckArgs),
    /// Say which rule decides a request, a connection, a path or a command, and why, without
    /// running anything (inside a sandbox: by the session's own policy).
    #[command(after_help = EXPLAIN_HELP)]
    Explain(ExplainArgs),
    /// Write a commented cordon.toml for the project, every key shown commented out.
    Init(InitArgs),
    /// Report, layer by layer, what this kernel supports and what cordon does about it.
    Doctor,
    /// Trust a project policy file that loosens your own policy (by content hash, like direnv).
    Trust(TrustArgs),
    /// Print, follow or verify a session's audit log.
    Log(LogArgs),
    /// Answer questions held for a person (e.g. an `ask` exec rule), from another terminal.
    Approve(ApproveArgs),
    /// Serve the live dashboard of every running session on 127.0.0.1 (a random port); the
    /// first line of output is its URL, with the token it needs.
    Ui,
    /// Re-decide every recorded decision of sessions' logs under another policy and report
    /// what changes, layer by layer; exit 1 when something allowed would now be denied.
    #[command(after_help = REPLAY_HELP)]
    Replay(ReplayArgs),
    /// Policy from what sessions did: `cordon policy suggest`.
    #[command(subcommand)]
    Policy(PolicyCmd),
    /// Review protected agent state changed by sessions: list, diff, accept, discard, restore.
    #[command(subcommand)]
    State(StateCmd),
    /// The package and build caches sessions keep in cordon's own layers: list or clear.
    #[command(subcommand)]
    Cache(CacheCmd),
    /// MCP tools pinned per server (rug-pull checks): list them, accept a changed one.
    #[command(subcommand)]
    Mcp(McpCmd),
    /// Print a shell completion script.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff), or write one page per subcommand into DIR.
    Man {
        /// Write cordon.1, cordon-run.1, … into this directory instead.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

/// Where the policy comes from.
#[derive(Debug, Args, Clone)]
pub struct PolicyArgs {
    /// The project directory (writable inside the sandbox). Default: the current directory.
    #[arg(long, value_name = "DIR")]
    pub project: Option<PathBuf>,
    /// Use this built-in or policy-defined profile (claude, codex, gemini, aider, opencode, …).
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
}

/// `cordon run --backend`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendArg {
    Namespace,
    Vm,
}

/// `cordon run --accel`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AccelArg {
    Kvm,
    Tcg,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Policy file to use instead of PROJECT/cordon.toml (merged over your ~/.config/cordon/cordon.toml).
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    #[command(flatten)]
    pub policy_args: PolicyArgs,
    /// Write the audit log here instead of $XDG_STATE_HOME/cordon/sessions/SESSION.jsonl.
    #[arg(long, value_name = "FILE")]
    pub audit: Option<PathBuf>,
    /// Print each event to stderr as it happens (and the start and exit lines, even when
    /// stderr is not a terminal).
    #[arg(short, long)]
    pub verbose: bool,
    /// No start and exit lines on the terminal.
    #[arg(short, long)]
    pub quiet: bool,
    /// Never allocate a pty, even when stdin and stdout are terminals.
    #[arg(long)]
    pub no_tty: bool,
    /// List, at exit, the paths of your home the command looked for that the home's view
    /// hides (with the `home_show` line that would show each). Every open, stat and access
    /// then takes a round trip to cordon: a slower run, for finding what a tool needs.
    #[arg(long)]
    pub trace_home: bool,
    /// Also serve the live dashboard (as `cordon ui`) while the session runs; its URL goes
    /// to stderr.
    #[arg(long)]
    pub ui: bool,
    /// A learning run: what your policy would deny for lack of a rule (a host, an HTTP
    /// request, an `[exec]` deny or ask) is let through and logged as "would deny", and the
    /// home paths the view hides that the command looked for are logged; then `cordon policy
    /// suggest` writes the policy that allows them. Secrets stay hidden, credentials stay
    /// placeholders, state is reviewed at exit; the blocklist, raw IPs, syscalls, the judge
    /// and secret scanning still refuse.
    #[arg(long)]
    pub learn: bool,
    /// Where the command runs: `namespace` (the host's kernel, fenced by namespaces, Landlock
    /// and seccomp) or `vm` (a microVM with a kernel of its own, the same fences inside it).
    /// Overrides `[sandbox] backend`.
    #[arg(long, value_name = "BACKEND")]
    pub backend: Option<BackendArg>,
    /// How the VM backend runs the guest: `kvm` (hardware virtualisation) or `tcg`
    /// (software emulation: slow, for machines without KVM). Overrides `[sandbox.vm] accel`.
    #[arg(long, value_name = "ACCEL")]
    pub accel: Option<AccelArg>,
    /// The command and its arguments.
    // No `allow_hyphen_values`: an unknown option before the command is a usage error naming
    // it, not a program called `--bogus`. Once COMMAND starts, its own flags are its own.
    #[arg(required = true, trailing_var_arg = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The policy file to check (default: PROJECT/cordon.toml if present).
    pub file: Option<PathBuf>,
    #[command(flatten)]
    pub policy_args: PolicyArgs,
    /// Print the effective policy as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct TrustArgs {
    /// The policy file (default: ./cordon.toml).
    pub file: Option<PathBuf>,
    /// Remove the file from the trust store instead.
    #[arg(long)]
    pub revoke: bool,
}

#[derive(Debug, Args)]
pub struct LogArgs {
    /// The session to show (default: the newest).
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// Read this log file instead of a session from the state directory.
    #[arg(long, value_name = "FILE", conflicts_with = "session")]
    pub file: Option<PathBuf>,
    /// Keep printing new events until the session stops.
    #[arg(short, long)]
    pub follow: bool,
    /// Print events as JSON lines.
    #[arg(long)]
    pub json: bool,
    /// Check the hash chain: exit 1 if the log was edited, reordered or truncated.
    #[arg(long, conflicts_with = "follow")]
    pub verify: bool,
    /// List the recorded sessions.
    #[arg(long, conflicts_with_all = ["follow", "verify", "session", "file"])]
    pub list: bool,
}

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("lasting").args(["always", "for"]))]
pub struct ApproveArgs {
    /// The question to answer, as the list prints it (SESSION#N; N alone when one session
    /// holds it); without it, list and ask interactively.
    pub id: Option<String>,
    /// Allow it.
    #[arg(long, conflicts_with = "deny", requires = "id")]
    pub allow: bool,
    /// Deny it.
    #[arg(long, requires = "id")]
    pub deny: bool,
    /// Apply the answer to every later question from the same rule in that session (for HTTP:
    /// the same rule, method and host).
    #[arg(long)]
    pub remember: bool,
    /// Also add a rule allowing it to your policy file (~/.config/cordon/cordon.toml), shown
    /// as a diff first, so sessions started later are not asked: for a command, its exact
    /// command line; for a request, its host, port, method and path.
    #[arg(long, requires = "allow", conflicts_with = "for")]
    pub always: bool,
    /// As --always, for a while: the rule carries `until` (now + DURATION, e.g. 1h, 30m, 2d).
    #[arg(long = "for", id = "for", value_name = "DURATION", requires = "allow",
          value_parser = humantime::parse_duration)]
    pub keep_for: Option<std::time::Duration>,
    /// With --always or --for on a command: the rule takes the asking rule's pattern (e.g.
    /// `git push *`) instead of the exact command line.
    #[arg(long, requires = "lasting")]
    pub pattern: bool,
    /// Write the rule without asking after the diff (needed without a terminal).
    #[arg(long, short = 'y', requires = "lasting")]
    pub yes: bool,
    /// The session the question belongs to (needed when several sessions hold the same id).
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// Only list the waiting questions.
    #[arg(long, conflicts_with_all = ["id", "allow", "deny"])]
    pub list: bool,
}

pub const REPLAY_HELP: &str = "\
Examples:
  cordon replay 20261206T101758Z-f4309d84 --policy new.toml
  cordon replay ~/.local/state/cordon/sessions/*.jsonl --policy cordon.toml --json
Each log is replayed with the profile and project its session ran with. Person's answers and
the judge's verdicts are taken from the log where the same question would be asked again.
Exit status: 0 nothing allowed would be denied; 1 something would; 2 bad usage; 125 a log or
the policy does not load.";

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// Session ids or log files (default: the newest session).
    #[arg(value_name = "LOG")]
    pub logs: Vec<String>,
    /// The policy to replay under, as `cordon run --policy` would use it (merged over your
    /// own); default: the policy `cordon run` would use in each session's project.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// Print the report as JSON (schema `cordon-replay/1`, docs/guide/learn.md).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum PolicyCmd {
    /// Print the least policy addition that would have allowed what sessions needed: what a
    /// learning run let through, what an ordinary run was refused for lack of a rule.
    Suggest {
        /// Session ids or log files (default: the newest session).
        #[arg(value_name = "SESSION")]
        sessions: Vec<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum StateCmd {
    /// Sessions with protected-state changes, newest first.
    List,
    /// Show what a session changed (default: the newest pending one).
    Diff { session: Option<String> },
    /// Apply a session's changes to the host copies (all, or only the given paths). A path
    /// in the home outside protected state keeps what the session wrote there.
    Accept {
        session: String,
        paths: Vec<PathBuf>,
    },
    /// Throw a session's changes away (and what it wrote elsewhere in the home).
    Discard { session: String },
    /// Bring protected paths back to a session's before-snapshot (SESSION or SESSION:PATH).
    /// Shows what it would do and asks first; what it replaces is kept in a backup folder.
    Restore {
        snapshot: String,
        path: Option<PathBuf>,
        /// Do it without asking (needed without a terminal).
        #[arg(long)]
        yes: bool,
        /// Restore even a session whose changes were never applied.
        #[arg(long)]
        force: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum CacheCmd {
    /// Each cache layer: the path it stands for, what sessions added, whether one uses it now.
    List,
    /// Drop cache layers (all, or those of the given cache paths or projects); the host's
    /// caches are untouched.
    Clear { paths: Vec<PathBuf> },
}

#[derive(Debug, Subcommand)]
pub enum McpCmd {
    /// Every pinned tool by server; a changed one (held) with what it says now.
    Pins,
    /// Take a held tool's new description and input schema as its pin: its calls go again.
    Accept {
        /// The server as `cordon mcp pins` shows it (`host:port`).
        server: String,
        /// The tool's name.
        tool: String,
    },
}

pub const EXPLAIN_HELP: &str = "\
Examples:
  cordon explain POST https://api.example.com/v1/upload
  cordon explain https://pypi.org/simple/requests/     (GET)
  cordon explain github.com:22
  cordon explain ~/.ssh/id_rsa
  cordon explain --write ~/.bashrc
  cordon explain -- git push origin main
Inside a sandbox the session's own policy (secrets redacted, /run/cordon/policy.json) decides.
Exit status: 0 allowed; 1 denied, or decided only when it happens (ask: a person; judge: the
LLM judge); 125 bad input or a policy that does not load.";

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// Policy file to use instead of PROJECT/cordon.toml (as `cordon run --policy`).
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    #[command(flatten)]
    pub policy_args: PolicyArgs,
    /// Ask about writing PATH (default: reading it).
    #[arg(long)]
    pub write: bool,
    /// Ask for the connections of PROGRAM (a command on PATH, a path, or an npm package),
    /// for rules that name programs (`programs = [...]`). Default: a process no such rule
    /// is for.
    #[arg(long, value_name = "PROGRAM")]
    pub program: Option<String>,
    /// `[METHOD] URL`, `HOST:PORT`, or `PATH`.
    #[arg(value_name = "WHAT", num_args = 0..=2)]
    pub what: Vec<String>,
    /// The command line to explain, after `--`.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

#[derive(Debug, Args)]
pub struct InitArgs {
    /// The project directory to write cordon.toml in. Default: the current directory.
    #[arg(long, value_name = "DIR")]
    pub project: Option<PathBuf>,
    /// Show what this profile adds (and name it in the file).
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// Overwrite an existing cordon.toml.
    #[arg(long)]
    pub force: bool,
}
