//! `cordon approve`: list the questions every running session holds and answer them. An id is
//! written as `--list` prints it, `SESSION#N`; a bare `N` is enough while one session alone
//! holds a question `N`.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Result, anyhow};

use crate::cli::ApproveArgs;

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
    // Sockets of sessions that ended without cleaning up refuse connections: skip them.
    let mut waiting: Vec<Waiting> = Vec::new();
    for socket in cordon_approval::sockets(&dir) {
        let session = socket
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        if session_filter.as_ref().is_some_and(|s| *s != session) {
            continue;
        }
        if let Ok(qs) = cordon_approval::list(&socket) {
            waiting.extend(qs.into_iter().map(|q| Waiting {
                session: session.clone(),
                socket: socket.clone(),
                q,
            }));
        }
    }
    if let Some((_, n)) = named {
        let shown = a.id.as_deref().unwrap_or_default();
        if !a.allow && !a.deny {
            return Err(anyhow!("say --allow or --deny for question {shown}"));
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
        cordon_approval::answer(&w.socket, w.q.id, a.allow, a.remember)
            .map_err(|e| anyhow!("{e}"))?;
        println!(
            "{} {}: {}",
            if a.allow { "allowed" } else { "denied" },
            w.id(),
            w.q.what
        );
        return Ok(());
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
            w.q.what,
            w.q.rule,
            w.q.seconds_left
        );
    }
    if a.list || !std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        return Ok(());
    }
    for w in &waiting {
        print!(
            "{} `{}`: [a]llow, [A]llow for the session, [d]eny, [D]eny for the session, [s]kip? ",
            w.id(),
            w.q.what
        );
        let _ = std::io::stdout().flush();
        let mut line = String::new();
        if std::io::stdin().read_line(&mut line)? == 0 {
            break;
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
