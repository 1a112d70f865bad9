//! `cordon approve`: list the questions every running session holds and answer them. An id is
//! written as `--list` prints it, `SESSION#N`; a bare `N` is enough while one session alone
//! holds a question `N`. `--always` and `--for` also write the rule that allows it again into
//! the user's policy (see `remember`).

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use anyhow::{Result, anyhow, bail};
use cordon_events::terminal;

use crate::cli::ApproveArgs;
use crate::remember::{Change, Keep, Scope};

/// A question as `--list` shows it, with the socket that answers it.
struct Waiting {
    session: String,
    socket: PathBuf,
    q: cordon_approval::Question,
}

impl Waiting {
    fn id(&self) -> String {
        format!("{}#{}", self.session, self.q.id)
    }
}

/// `SESSION#N` or `N`: the session (if named) and the number.
fn parse_id(text: &str) -> Result<(Option<&str>, u64)> {
    let (session, n) = match text.rsplit_once('#') {
        Some((s, n)) if !s.is_empty() => (Some(s), n),
        Some((_, n)) => (None, n),
        None => (None, text),
    };
    let n = n.parse::<u64>().map_err(|_| {
        anyhow!("{text:?} is not a question id: write it as `cordon approve --list` prints it (SESSION#N), or just N")
    })?;
    Ok((session, n))
}

pub fn approve(a: ApproveArgs) -> Result<()> {
    let dir = cordon_approval::default_dir()
        .ok_or_else(|| anyhow!("no runtime directory: set XDG_RUNTIME_DIR or HOME"))?;
    let named = a.id.as_deref().map(parse_id).transpose()?;
    let session_filter = match (named.and_then(|(s, _)| s), a.session.as_deref()) {
        (Some(s), Some(o)) if s != o => {
            return Err(anyhow!("the id names session {s} but --session says {o}"));
        }
        (s, o) => s.or(o).map(str::to_string),
    };
    let waiting = collect(&dir, session_filter.as_deref());
    if let Some((_, n)) = named {
        return answer_one(&a, &waiting, n);
    }
    if waiting.is_empty() {
        println!("nothing is waiting for approval");
        return Ok(());
    }
    for w in &waiting {
        println!(
            "{}  [{}] {}  (rule {}; {} s left)",
            w.id(),
            w.q.layer,
            terminal::safe(&w.q.what),
            w.q.rule,
            w.q.seconds_left
        );
    }
    if a.list || !std::io::stdin().is_terminal() {
        return Ok(());
    }
    interactive(&waiting)
}

/// The questions every running session (or only `session`) holds.
fn collect(dir: &std::path::Path, session: Option<&str>) -> Vec<Waiting> {
    let mut waiting: Vec<Waiting> = Vec::new();
    for socket in cordon_approval::sockets(dir) {
        let name = socket
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        if session.is_some_and(|s| s != name) {
            continue;
        }
        // Sockets of sessions that ended without cleaning up refuse connections: skipped.
        if let Ok(qs) = cordon_approval::list(&socket) {
            waiting.extend(qs.into_iter().map(|q| Waiting {
                session: name.clone(),
                socket: socket.clone(),
                q,
            }));
        }
    }
    waiting
}

/// `cordon approve ID --allow|--deny [--always|--for D]`.
fn answer_one(a: &ApproveArgs, waiting: &[Waiting], n: u64) -> Result<()> {
    let shown = a.id.as_deref().unwrap_or_default();
    if !a.allow && !a.deny {
        return Err(anyhow!("say --allow or --deny for question {shown}"));
    }
    // clap's `requires` yields to a conflicting `--deny`: said here instead.
    if a.deny && (a.always || a.keep_for.is_some()) {
        bail!("--always and --for write a rule that allows: they go with --allow, not --deny");
    }
    let hits: Vec<&Waiting> = waiting.iter().filter(|w| w.q.id == n).collect();
    let w = match hits.as_slice() {
        [one] => *one,
        [] => {
            return Err(anyhow!(
                "no question {shown} is waiting (run `cordon approve --list`)"
            ));
        }
        several => {
            let ids: Vec<String> = several.iter().map(|w| w.id()).collect();
            return Err(anyhow!(
                "several sessions hold a question {n}: name one, e.g. `cordon approve {} --allow` ({})",
                ids[0],
                ids.join(", ")
            ));
        }
    };
    if let Some(keep) = keep(a.always, a.keep_for)? {
        let scope = if a.pattern {
            Scope::Pattern
        } else {
            Scope::Exact
        };
        return allow_with_rule(w, keep, scope, a.yes, a.remember);
    }
    cordon_approval::answer(&w.socket, w.q.id, a.allow, a.remember).map_err(|e| anyhow!("{e}"))?;
    println!(
        "{} {}: {}",
        if a.allow { "allowed" } else { "denied" },
        w.id(),
        terminal::safe(&w.q.what)
    );
    Ok(())
}

/// Each question in turn, answered from the terminal.
fn interactive(waiting: &[Waiting]) -> Result<()> {
    for w in waiting {
        // Only a question a rule can answer again is offered one in the policy.
        let rules = match w.q.subject {
            Some(_) => " allow [w]ith a rule in your policy, allow for 1 [h]our,",
            None => "",
        };
        print!(
            "{} `{}`: [a]llow, [A]llow for the session,{rules} [d]eny, [D]eny for the session, [s]kip? ",
            w.id(),
            terminal::safe(&w.q.what)
        );
        let _ = std::io::stdout().flush();
        let mut line = String::new();
        if std::io::stdin().read_line(&mut line)? == 0 {
            break;
        }
        let keep = match line.trim() {
            "w" if !rules.is_empty() => keep(true, None)?,
            "h" if !rules.is_empty() => keep(false, Some(Duration::from_secs(3600)))?,
            _ => None,
        };
        if let Some(keep) = keep {
            if let Err(e) = allow_with_rule(w, keep, Scope::Exact, false, false) {
                println!("{}", crate::output::chain(&e));
            }
            continue;
        }
        let (allow, remember) = match line.trim() {
            "a" => (true, false),
            "A" => (true, true),
            "d" => (false, false),
            "D" => (false, true),
            _ => continue,
        };
        match cordon_approval::answer(&w.socket, w.q.id, allow, remember) {
            Ok(()) => println!("{}", if allow { "allowed" } else { "denied" }),
            Err(e) => println!("not answered: {e}"),
        }
    }
    Ok(())
}

/// The longest `--for`: ten years (an end past year 9999 could not be written at all).
pub(crate) const MAX_FOR: Duration = Duration::from_secs(10 * 366 * 24 * 3600);

/// How long an allow is written for: `--always`, `--for DURATION`, or not written.
fn keep(always: bool, keep_for: Option<Duration>) -> Result<Option<Keep>> {
    match (always, keep_for) {
        (true, _) => Ok(Some(Keep::Always)),
        (false, Some(d)) if d > MAX_FOR => bail!(
            "--for {}: a grant that long is not one that ends; use --always",
            humantime::format_duration(d)
        ),
        (false, Some(d)) if d > Duration::ZERO => SystemTime::now()
            .checked_add(d)
            .map(|t| Some(Keep::Until(t)))
            .ok_or_else(|| anyhow!("--for {}: too long", humantime::format_duration(d))),
        (false, Some(_)) => bail!("--for takes a duration longer than 0, e.g. 1h"),
        (false, None) => Ok(None),
    }
}

/// Writes the rule that allows `w` again into the user's policy — its diff shown, and
/// confirmed on the terminal unless `yes` — then allows it. Declined or refused, nothing is
/// written and the question still waits.
fn allow_with_rule(w: &Waiting, keep: Keep, scope: Scope, yes: bool, remember: bool) -> Result<()> {
    let id = w.id();
    let change = Change::new(
        &w.session,
        &w.q,
        keep,
        scope,
        "cordon approve",
        SystemTime::now(),
    )?;
    let file = change.file.display().to_string();
    print!("{}", terminal::lines(&change.diff));
    if !yes {
        if !std::io::stdin().is_terminal() {
            bail!(
                "not written: the change above is confirmed on a terminal; pass --yes to write it \
                 without asking ({id} still waits)"
            );
        }
        print!("Add this to {file} and allow {id}? [y/N] ");
        let _ = std::io::stdout().flush();
        let mut line = String::new();
        std::io::stdin().read_line(&mut line)?;
        if !matches!(line.trim(), "y" | "Y" | "yes") {
            bail!("not written ({id} still waits)");
        }
    }
    change.write()?;
    cordon_approval::answer(&w.socket, w.q.id, true, remember)
        .map_err(|e| anyhow!("the rule is in {file}, but {id} was not answered: {e}"))?;
    println!(
        "allowed {id}: {}
the rule is in {file}: sessions started from now on are not asked (this one keeps the policy it started with)",
        terminal::safe(&w.q.what)
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_id;

    #[test]
    fn ids_are_taken_as_listed_or_bare() {
        assert_eq!(
            parse_id("20261201T082003Z-d668b2f7#1").unwrap(),
            (Some("20261201T082003Z-d668b2f7"), 1)
        );
        assert_eq!(parse_id("7").unwrap(), (None, 7));
        assert_eq!(parse_id("#7").unwrap(), (None, 7));
        assert!(parse_id("S#x").is_err());
        assert!(parse_id("").is_err());
    }
}
