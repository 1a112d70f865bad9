//! `cordon replay` and `cordon policy suggest`: the command-line side of cordon-learn. Finds
//! the logs, loads the policy each session ran with (its profile, its project), and prints.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow};
use cordon_events::Event;
use cordon_learn::{Outcome, Replayer, Report, Suggester};

use crate::cli::{PolicyArgs, ReplayArgs};
use crate::commands::EXIT_SETUP;

/// `cordon replay`.
pub fn replay(a: ReplayArgs) -> i32 {
    match run_replay(&a) {
        Ok(r) => {
            if a.json {
                match serde_json::to_string_pretty(&r) {
                    Ok(s) => println!("{s}"),
                    Err(e) => {
                        eprintln!("cordon: {e}");
                        return EXIT_SETUP;
                    }
                }
            } else {
                print_report(&r);
            }
            i32::from(r.newly_denied())
        }
        Err(e) => {
            eprintln!("cordon: {}", crate::output::chain(&e));
            EXIT_SETUP
        }
    }
}

fn run_replay(a: &ReplayArgs) -> Result<Report> {
    let mut total = Report {
        schema: cordon_learn::SCHEMA,
        ..Report::default()
    };
    for log in logs(&a.logs)? {
        let start = first_event(&log)?;
        let plan = plan_for(a.policy.clone(), &start)?;
        let mut seen: HashMap<String, (bool, String)> = HashMap::new();
        let cache = std::cell::RefCell::new(&mut seen);
        let paths = |p: &str| {
            let mut c = cache.borrow_mut();
            let d = c
                .entry(p.to_string())
                .or_insert_with(|| crate::explain::path_decision(&plan, Path::new(p)));
            Some(d.clone())
        };
        let mut r = Replayer::new(&plan, &paths)
            .with_context(|| format!("the policy for {}", log.display()))?;
        cordon_learn::for_each_event(&log, |e| r.event(e))?;
        total.merge(r.finish());
    }
    Ok(total)
}

/// The plan a session's log is replayed under: `policy` over the user's own, with the
/// session's profile, in its project when that still exists.
fn plan_for(policy: Option<PathBuf>, start: &Event) -> Result<cordon_policy::Plan> {
    let project = start
        .detail_str("project")
        .map(PathBuf::from)
        .filter(|p| p.is_dir())
        .or_else(|| std::env::current_dir().ok())
        .ok_or_else(|| anyhow!("no project directory to load the policy in"))?;
    let profile = start
        .detail_str("profile")
        .filter(|p| !p.is_empty())
        .map_or_else(|| cordon_policy::NO_PROFILE.to_string(), str::to_string);
    let args = PolicyArgs {
        project: Some(project.clone()),
        profile: Some(profile),
    };
    let mut opts = crate::commands::load_options(None, &args, project.clone());
    // Without --policy, the file the session ran with: one it named that is neither the
    // user's own nor the project's (`cordon run --policy FILE`).
    opts.policy_file = policy.or_else(|| {
        let own = [opts.user_config.clone(), Some(project.join("cordon.toml"))];
        start
            .detail
            .get("policy_files")?
            .as_array()?
            .iter()
            .filter_map(|v| v.as_str().map(PathBuf::from))
            .find(|f| !own.iter().flatten().any(|o| o == f) && f.is_file())
    });
    let mut plan = cordon_policy::load(&opts).map_err(|e| anyhow!("{e}"))?.plan;
    // Rules that end are judged as the session's start judged them.
    let started = cordon_policy::Expiry::parse(&start.time)
        .ok()
        .and_then(|t| u64::try_from(t.unix()).ok())
        .map_or_else(std::time::SystemTime::now, |secs| {
            std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs)
        });
    plan.expire(started);
    // As `cordon run` does: the home's registry-token files are masked.
    crate::home::add_home_credentials(&mut plan);
    Ok(plan)
}

/// The newest session's log (`cordon log`, `cordon replay` and `suggest` without a session).
pub(crate) fn newest_log() -> Result<PathBuf> {
    let dir = cordon_events::default_log_dir()
        .ok_or_else(|| anyhow!("no state directory: set HOME or XDG_STATE_HOME"))?;
    cordon_events::list_sessions(&dir)?
        .into_iter()
        .next()
        .map(|s| s.path)
        .ok_or_else(|| anyhow!("no sessions recorded in {}", dir.display()))
}

/// The log files named (session ids or paths), or the newest session's.
fn logs(named: &[String]) -> Result<Vec<PathBuf>> {
    if named.is_empty() {
        return Ok(vec![newest_log()?]);
    }
    named
        .iter()
        .map(|n| {
            let p = PathBuf::from(n);
            if p.is_file() {
                return Ok(p);
            }
            if cordon_events::is_valid_session_id(n) {
                let path = cordon_events::default_log_path(n)
                    .ok_or_else(|| anyhow!("no state directory for session {n}"))?;
                if path.is_file() {
                    return Ok(path);
                }
                return Err(anyhow!(
                    "no log for session {n} (looked in {})",
                    path.display()
                ));
            }
            Err(anyhow!(
                "{n}: neither a log file nor a session id; `cordon log --list` lists sessions"
            ))
        })
        .collect()
}

fn first_event(log: &Path) -> Result<Event> {
    use std::io::BufRead;
    let file = std::fs::File::open(log).with_context(|| log.display().to_string())?;
    let mut line = String::new();
    std::io::BufReader::new(file)
        .read_line(&mut line)
        .with_context(|| log.display().to_string())?;
    serde_json::from_str(&line)
        .with_context(|| format!("{}: the first line is not an audit event", log.display()))
}

fn print_report(r: &Report) {
    println!(
        "replayed {} session{}: {} events, {} decisions: {} unchanged, {} changed, {} kept as logged (decided on what the log does not hold)",
        r.sessions.len(),
        if r.sessions.len() == 1 { "" } else { "s" },
        r.events,
        r.decisions,
        r.unchanged,
        r.changes.len(),
        r.kept
    );
    for (layer, c) in &r.by_layer {
        let mut parts = Vec::new();
        for (n, what) in [
            (c.allowed_to_denied, "allowed → denied"),
            (c.denied_to_allowed, "denied → allowed"),
            (c.now_ask, "now asks a person"),
            (c.now_judge, "now asks the judge"),
            (c.other, "other changes"),
        ] {
            if n > 0 {
                parts.push(format!("{n} {what}"));
            }
        }
        if parts.is_empty() {
            parts.push("no change".into());
        }
        println!(
            "  {layer:<11} {} decisions: {}",
            c.decisions,
            parts.join(", ")
        );
    }
    for c in &r.changes {
        let word = |o: Outcome| match o {
            Outcome::Allowed => "allowed",
            Outcome::Denied => "denied",
            Outcome::Ask => "ask",
            Outcome::Judge => "judge",
        };
        let rule = |r: &Option<String>| r.clone().unwrap_or_else(|| "no rule".into());
        println!(
            "{} {}#{} {}: {} ({}) → {} ({}){}",
            c.layer,
            c.session,
            c.seq,
            c.subject,
            word(c.was),
            rule(&c.was_rule),
            word(c.now),
            rule(&c.now_rule),
            if c.learned { " [learning run]" } else { "" }
        );
    }
}

/// `cordon policy suggest`.
pub fn suggest(named: &[String]) -> i32 {
    let run = || -> Result<cordon_learn::Suggestion> {
        let mut s = Suggester::new(&crate::commands::home());
        for log in logs(named)? {
            cordon_learn::for_each_event(&log, |e| s.event(e))?;
        }
        Ok(s.finish())
    };
    match run() {
        Ok(s) if s.entries == 0 => {
            eprintln!(
                "cordon: nothing to suggest: the sessions needed nothing their policy denied"
            );
            0
        }
        Ok(s) => {
            print!("{}", s.text);
            0
        }
        Err(e) => {
            eprintln!("cordon: {}", crate::output::chain(&e));
            EXIT_SETUP
        }
    }
}
