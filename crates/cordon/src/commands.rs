//! One function per subcommand: gather inputs, call the layer crates, print, pick an exit code.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Result, anyhow};
use clap::CommandFactory;
use cordon_policy::{LoadOptions, Loaded, TrustStore};

use crate::cli::{Cli, Cmd, LogArgs, PolicyArgs, TrustArgs};
pub(crate) use crate::project::{PolicyProject, resolve_policy_project, resolve_project};

/// cordon's own failure before the command started.
pub(crate) const EXIT_SETUP: i32 = 125;
pub(crate) const EXIT_USAGE: i32 = 2;

pub fn dispatch(cmd: Cmd) -> i32 {
    match cmd {
        Cmd::Run(a) => crate::run::run(a),
        Cmd::Check(a) => crate::check::check(a),
        Cmd::Explain(a) => crate::explain::explain(a),
        Cmd::Init(a) => crate::init::init(a),
        Cmd::Doctor => crate::doctor::doctor(),
        Cmd::Trust(a) => report(trust(a)),
        Cmd::Log(a) => match log(a) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("cordon: {}", crate::output::chain(&e));
                1
            }
        },
        Cmd::Approve(a) => report(crate::approve::approve(a)),
        Cmd::Ui => report(crate::ui::ui()),
        Cmd::Replay(a) => crate::replay::replay(a),
        Cmd::Policy(crate::cli::PolicyCmd::Suggest { sessions }) => {
            crate::replay::suggest(&sessions)
        }
        Cmd::State(c) => crate::state::command(c),
        Cmd::Cache(c) => crate::home::cache_command(c),
        Cmd::Mcp(c) => crate::mcp::command(c),
        Cmd::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "cordon", &mut std::io::stdout());
            0
        }
        Cmd::Man { dir } => man(dir.as_deref()),
    }
}

/// The man page on stdout, or every page (one per subcommand) written into `dir`.
fn man(dir: Option<&Path>) -> i32 {
    let done = match dir {
        None => clap_mangen::Man::new(Cli::command()).render(&mut std::io::stdout()),
        Some(d) => clap_mangen::generate_to(Cli::command(), d),
    };
    match done {
        Ok(()) => 0,
        Err(e) => {
            let at = dir
                .map(|d| format!(" into {}", d.display()))
                .unwrap_or_default();
            eprintln!("cordon: man: cannot write the pages{at}: {e}");
            1
        }
    }
}

fn report(r: Result<()>) -> i32 {
    match r {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("cordon: {}", crate::output::chain(&e));
            1
        }
    }
}

pub(crate) fn home() -> PathBuf {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .or_else(|| cordon_sandbox::passwd_home(cordon_sandbox::ids().0))
        .unwrap_or_else(|| PathBuf::from("/"))
}

fn xdg(var: &str, fallback: &str) -> PathBuf {
    std::env::var_os(var)
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| home().join(fallback))
}

fn trust_store() -> TrustStore {
    TrustStore::new(xdg("XDG_DATA_HOME", ".local/share").join("cordon/trusted.json"))
}

/// The login `argv` starts that cannot be brokered inside, under the active profile.
pub(crate) fn login_hint(
    argv: &[String],
    loaded: &Loaded,
) -> Option<cordon_policy::login_hint::LoginHint> {
    let profile = loaded.profile.as_ref()?;
    let host = cordon_policy::login_hint::HostLogins::read(&home(), &|n| std::env::var(n).ok());
    cordon_policy::login_hint::login_hint(
        argv,
        &profile.name,
        &host,
        &cordon_policy::detect::package_of,
    )
}

/// [`load_options`] for reading a policy (`check`, `explain`), with or without a project.
pub(crate) fn policy_load_options(
    policy: Option<PathBuf>,
    args: &PolicyArgs,
    project: PolicyProject,
) -> LoadOptions {
    let mut o = load_options(policy, args, project.dir);
    o.no_project = project.none;
    // `cordon check ~/.config/cordon/cordon.toml` reads the user's file: once, not merged
    // over itself.
    let same = |x: &Path, y: &Path| {
        x.canonicalize()
            .ok()
            .is_some_and(|c| y.canonicalize().ok() == Some(c))
    };
    if let (Some(f), Some(u)) = (&o.policy_file, &o.user_config)
        && same(f, u)
    {
        o.user_config = None;
    }
    o
}

pub(crate) fn load_options(
    policy: Option<PathBuf>,
    args: &PolicyArgs,
    project: PathBuf,
) -> LoadOptions {
    let home = home();
    let passwd_home = cordon_sandbox::passwd_home(cordon_sandbox::ids().0).filter(|p| *p != home);
    LoadOptions {
        project_dir: project,
        no_project: false,
        home,
        passwd_home,
        policy_file: policy,
        user_config: Some(xdg("XDG_CONFIG_HOME", ".config").join("cordon/cordon.toml")),
        profile: args.profile.clone(),
        command: Vec::new(),
        trust_store: trust_store().path().to_path_buf(),
        own_dirs: own_dirs(),
    }
}

/// The session's one approval broker, when a layer may ask a person: every layer puts its
/// questions to it, so `cordon approve` shows the session once. Without it, `ask` denies.
pub(crate) fn session_approvals(
    plan: &cordon_policy::Plan,
    session: &str,
) -> Option<cordon_approval::Approvals> {
    use cordon_policy::{DlpAction, ExecAction, HttpAction, JudgeOnError};
    let asks = plan.exec.rules.iter().any(|r| r.action == ExecAction::Ask)
        || plan.http.default == HttpAction::Ask
        || plan.http.rules.iter().any(|r| r.action == HttpAction::Ask)
        || plan.dlp.action == DlpAction::Ask
        || plan
            .judge
            .as_ref()
            .is_some_and(|j| j.on_error == JudgeOnError::Ask);
    if !asks {
        return None;
    }
    let dir = cordon_approval::default_dir()?;
    match cordon_approval::Approvals::start(&dir, session) {
        Ok(a) => Some(a),
        Err(e) => {
            eprintln!("cordon: warning: no approval broker ({e}): `ask` decisions deny");
            None
        }
    }
}

/// cordon's own directories, masked in every sandbox (the loader puts them in the plan):
/// snapshots hold hard links to files a deny rule hides elsewhere, cache layers belong to
/// every session, the data directory holds the CA's key, brokers take approvals.
pub(crate) fn own_dirs() -> Vec<(PathBuf, &'static str)> {
    let mut v = Vec::new();
    v.extend(cordon_events::state_dir().map(|d| (d, "own state")));
    v.extend(cordon_state::cache_dir().map(|d| (d, "own caches")));
    v.extend(cordon_events::data_dir().map(|d| (d, "CA and data")));
    v.extend(cordon_approval::default_dir().map(|d| (d, "approval brokers")));
    v
}

fn trust(a: TrustArgs) -> Result<()> {
    let file = a.file.unwrap_or_else(|| PathBuf::from("cordon.toml"));
    let store = trust_store();
    if a.revoke {
        if store.revoke(&file).map_err(|e| anyhow!("{e}"))? {
            println!("revoked trust in {}", file.display());
        } else {
            println!("{} was not trusted", file.display());
        }
        return Ok(());
    }
    let hash = store.trust(&file).map_err(|e| anyhow!("{e}"))?;
    println!(
        "trusted {} (sha256 {hash}); any edit to it revokes this",
        file.display()
    );
    Ok(())
}

fn log(a: LogArgs) -> Result<i32> {
    let dir = cordon_events::default_log_dir();
    if a.list {
        let dir = dir.ok_or_else(|| anyhow!("no state directory: set HOME or XDG_STATE_HOME"))?;
        for s in cordon_events::list_sessions(&dir)? {
            let exit = s.exit_code.map_or("-".to_string(), |c| c.to_string());
            let state = if s.stopped {
                "ended"
            } else {
                "running or crashed"
            };
            println!(
                "{}  {}  {} events  exit {exit}  {state}",
                s.session,
                s.start.unwrap_or_default(),
                s.events
            );
        }
        return Ok(0);
    }
    let path = match (&a.file, &a.session) {
        (Some(f), _) => f.clone(),
        (None, Some(id)) => cordon_events::default_log_path(id)
            .ok_or_else(|| anyhow!("invalid session id {id:?}"))?,
        (None, None) => crate::replay::newest_log()?,
    };
    if a.verify {
        let r = cordon_events::verify(&path)?;
        for p in &r.problems {
            println!("{}:{}: {}", path.display(), p.line, p.what);
        }
        if r.ok() {
            println!(
                "{}: {} events, hash chain intact, session complete",
                path.display(),
                r.events
            );
            return Ok(0);
        }
        println!(
            "{}: verification FAILED ({})",
            path.display(),
            crate::output::count(r.problems.len(), "problem", "problems")
        );
        return Ok(1);
    }
    let print = |e: &cordon_events::Event| {
        if a.json {
            println!("{}", serde_json::to_string(e).unwrap_or_default());
        } else {
            println!("{}", cordon_events::format_human(e));
        }
    };
    if !a.follow {
        for e in cordon_events::read_log(&path)? {
            print(&e);
        }
        return Ok(0);
    }
    let mut f = cordon_events::Follower::open(&path)?;
    loop {
        if let Some(e) = f.next_event(Duration::from_millis(500))? {
            print(&e);
            let _ = std::io::stdout().flush();
            if e.is_session_stop() {
                return Ok(0);
            }
        }
    }
}
