//! A line on the user's terminal for each network and HTTP denial, as exec denials get: the
//! program the agent ran may show only `error: 403` (`curl -f`) or `CONNECT tunnel failed`,
//! so cordon's words must come whether the denial is a host's first or a retry. A flood is
//! bounded: at most [`BURST`] lines per host every [`EVERY`], counting what it held back.
//! Built from the session's events, so it says what the log says.

use std::collections::HashMap;
use std::io::Write;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cordon_events::{Action, Event, Layer, terminal};

use crate::summary::url_host;

/// The window a host's lines are counted in.
pub const EVERY: Duration = Duration::from_secs(10);
/// Lines one host gets in a window: enough for every retry a person or agent makes by hand.
pub const BURST: u32 = 10;
/// Hosts that get lines at all; past it, one line says the rest are only in the log.
const MAX_HOSTS: usize = 200;

/// The terminal lines for one session's denials.
pub struct DenialLines {
    enabled: bool,
    /// Per host (or, for a denial that names none, such as the flow cap, per rule: the words
    /// its counts are said with, "of a.test" or "under rule network.max-flows"): when its
    /// window began, lines printed in it, denials not shown.
    hosts: Mutex<HashMap<String, (Instant, u32, u64)>>,
}

impl DenialLines {
    /// Silent with `-q`.
    pub fn new(quiet: bool) -> Self {
        Self {
            enabled: !quiet,
            hosts: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one emitted event; prints its line when it is a denial that is due one.
    pub fn observe(&self, e: &Event) {
        if let Some(line) = self.line_for(e, Instant::now()) {
            // A pty in raw mode needs the carriage returns; a broken stderr is not fatal.
            let _ = write!(std::io::stderr(), "\r\ncordon: {line}\r\n");
        }
    }

    /// At the session's end: the denials each host had that no line showed yet.
    pub fn finish(&self) {
        for line in self.held_lines() {
            let _ = write!(std::io::stderr(), "\r\ncordon: {line}\r\n");
        }
    }

    fn held_lines(&self) -> Vec<String> {
        if !self.enabled {
            return Vec::new();
        }
        let hosts = self.hosts.lock().unwrap_or_else(|p| p.into_inner());
        let mut held: Vec<(&String, u64)> = hosts
            .iter()
            .filter(|(_, (_, _, n))| *n > 0)
            .map(|(h, (_, _, n))| (h, *n))
            .collect();
        held.sort();
        held.into_iter()
            .map(|(h, n)| {
                let s = if n == 1 { "" } else { "s" };
                format!("{n} more denial{s} {h} not shown (cordon log lists them)")
            })
            .collect()
    }

    fn line_for(&self, e: &Event, now: Instant) -> Option<String> {
        // A name the DNS layer refused by rule (the blocklist) is a refusal too: the client
        // shows only "could not resolve".
        // (A single-label name's NXDOMAIN is what any resolver without a search domain says.)
        let by_dns = e.layer == Layer::Dns && e.rule_id().is_some_and(|r| r.is_blocklist());
        if !self.enabled
            || e.action != Action::Deny
            || !(matches!(e.layer, Layer::Network | Layer::Http) || by_dns)
        {
            return None;
        }
        let host = match e
            .detail_str("host")
            .or_else(|| e.detail_str("name"))
            .or_else(|| e.detail_str("url").map(url_host))
        {
            Some(h) => format!("of {}", terminal::safe(h)),
            None => format!(
                "under rule {}",
                terminal::safe(e.rule.as_deref().unwrap_or("?"))
            ),
        };
        let rule = format!(
            "{}{}",
            terminal::safe(e.rule.as_deref().unwrap_or("?")),
            explain_hint(e)
                .map(|h| format!("; why: `{}`", terminal::safe(&h)))
                .unwrap_or_default()
        );
        let what = match by_dns {
            true => format!(
                "the name {}: it does not resolve inside",
                terminal::safe(e.detail_str("name").unwrap_or("?"))
            ),
            false => terminal::safe(&e.reason),
        };
        // A lookup comes as A and AAAA, and retried: one line a window says it.
        let burst = if by_dns { 1 } else { BURST };
        let mut hosts = self.hosts.lock().unwrap_or_else(|p| p.into_inner());
        let n = hosts.len();
        match hosts.get_mut(&host) {
            None if n >= MAX_HOSTS => None,
            None => {
                hosts.insert(host.clone(), (now, 1, 0));
                Some(if n + 1 == MAX_HOSTS {
                    format!(
                        "denied {what} (rule {rule}); further denied hosts are only in the log (cordon log)"
                    )
                } else {
                    format!("denied {what} (rule {rule})")
                })
            }
            Some((start, shown, held)) if now.duration_since(*start) < EVERY => {
                if *shown >= burst {
                    // A name's other lookups (AAAA, retries) are the same refusal.
                    *held += u64::from(!by_dns);
                    return None;
                }
                *shown += 1;
                Some(format!("denied {what} (rule {rule})"))
            }
            Some((start, shown, held)) => {
                let more = match *held {
                    0 => String::new(),
                    k => format!(
                        "; {k} more denial{} {host} in the last {} s",
                        if k == 1 { "" } else { "s" },
                        EVERY.as_secs()
                    ),
                };
                (*start, *shown, *held) = (now, 1, 0);
                Some(format!("denied {what} (rule {rule}){more}"))
            }
        }
    }
}

/// The `cordon explain` line for a denial: the request for an HTTP one (its query left out:
/// the log shows it redacted), the connection for a network one.
fn explain_hint(e: &Event) -> Option<String> {
    match e.layer {
        Layer::Http => {
            let url = e.detail_str("url")?;
            let url = url.split('?').next().unwrap_or(url);
            Some(cordon_policy::explain::hint_for_request(
                e.detail_str("method")?,
                url,
            ))
        }
        Layer::Dns => Some(cordon_policy::explain::hint_for_host(
            e.detail_str("name")?,
            443,
        )),
        _ => {
            let port = u16::try_from(e.detail.get("port")?.as_u64()?).ok()?;
            Some(cordon_policy::explain::hint_for_host(
                e.detail_str("host")?,
                port,
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cordon_events::NewEvent;

    use crate::summary::tests::ev as event;

    fn ev(host: &str) -> Event {
        event(
            NewEvent::new(
                Layer::Network,
                Action::Deny,
                format!("{host}:443 — no rule"),
            )
            .rule("network.default-deny")
            .detail("host", host),
        )
    }

    #[test]
    fn every_denial_gets_a_line_up_to_a_burst_per_host_then_a_count() {
        let d = DenialLines::new(false);
        let t0 = Instant::now();
        let first = d.line_for(&ev("a.test"), t0).unwrap();
        assert_eq!(
            first,
            "denied a.test:443 — no rule (rule network.default-deny)"
        );
        assert!(
            d.line_for(&ev("b.test"), t0).is_some(),
            "another host: its own line"
        );
        // Retries within the window are said too, up to the burst.
        let t1 = t0 + Duration::from_secs(1);
        for _ in 1..BURST {
            assert_eq!(
                d.line_for(&ev("a.test"), t1).as_deref(),
                Some(first.as_str())
            );
        }
        for _ in 0..3 {
            assert!(d.line_for(&ev("a.test"), t1).is_none());
        }
        let later = d.line_for(&ev("a.test"), t0 + EVERY).unwrap();
        assert!(
            later.ends_with("; 3 more denials of a.test in the last 10 s"),
            "{later}"
        );
        assert!(DenialLines::new(true).line_for(&ev("c.test"), t0).is_none());
        // What no line showed yet is said at the end.
        for _ in 1..BURST + 2 {
            let _ = d.line_for(&ev("a.test"), t0 + EVERY);
        }
        for _ in 1..BURST + 1 {
            let _ = d.line_for(&ev("b.test"), t1);
        }
        assert_eq!(
            d.held_lines(),
            [
                "2 more denials of a.test not shown (cordon log lists them)",
                "1 more denial of b.test not shown (cordon log lists them)"
            ]
        );
        let allowed = event(NewEvent::new(Layer::Network, Action::Allow, "x"));
        assert!(d.line_for(&allowed, t0).is_none());
    }

    /// A host name from inside cannot drive the terminal or reorder the line.
    #[test]
    fn a_hostile_host_is_escaped() {
        let d = DenialLines::new(false);
        let line = d
            .line_for(&ev("x\u{1b}[2J\u{202e}.test"), Instant::now())
            .unwrap();
        assert_eq!(
            line,
            "denied x\\u{1b}[2J\\u{202e}.test:443 — no rule (rule network.default-deny)"
        );
    }

    /// A denial that names no host (the flow cap) is counted under its rule, not under "?".
    #[test]
    fn a_denial_without_a_host_is_counted_under_its_rule() {
        let d = DenialLines::new(false);
        let t0 = Instant::now();
        let cap = || {
            event(
                NewEvent::new(
                    Layer::Network,
                    Action::Deny,
                    "512 connections are open already",
                )
                .rule("network.max-flows"),
            )
        };
        for _ in 0..BURST {
            assert!(d.line_for(&cap(), t0).is_some());
        }
        assert!(d.line_for(&cap(), t0).is_none());
        let later = d.line_for(&cap(), t0 + EVERY).unwrap();
        assert!(
            later.ends_with("; 1 more denial under rule network.max-flows in the last 10 s"),
            "{later}"
        );
        for _ in 1..BURST {
            assert!(d.line_for(&cap(), t0 + EVERY).is_some());
        }
        assert!(d.line_for(&cap(), t0 + EVERY).is_none());
        assert_eq!(
            d.held_lines(),
            ["1 more denial under rule network.max-flows not shown (cordon log lists them)"]
        );
    }

    #[test]
    fn a_name_the_blocklist_refused_gets_one_line_a_window() {
        let d = DenialLines::new(false);
        let t0 = Instant::now();
        let dns = |q: &str| {
            event(
                NewEvent::new(
                    Layer::Dns,
                    Action::Deny,
                    format!("{q} x.ngrok.io → NXDOMAIN"),
                )
                .rule("builtin:ngrok.io")
                .detail("name", "x.ngrok.io"),
            )
        };
        let line = d.line_for(&dns("A"), t0).unwrap();
        assert!(
            line.starts_with(
                "denied the name x.ngrok.io: it does not resolve inside (rule builtin:ngrok.io"
            ),
            "{line}"
        );
        assert!(line.contains("`cordon explain x.ngrok.io:443`"), "{line}");
        assert!(d.line_for(&dns("AAAA"), t0).is_none());
        assert!(
            d.held_lines().is_empty(),
            "the same lookup is not counted apart"
        );
        // A name nothing refused by rule (no such host) is not cordon's refusal.
        let plain = event(NewEvent::new(
            Layer::Dns,
            Action::Deny,
            "A nope.test → NXDOMAIN",
        ));
        assert!(d.line_for(&plain, t0).is_none());
        let short = event(
            NewEvent::new(Layer::Dns, Action::Deny, "A db → NXDOMAIN")
                .rule("single-label")
                .detail("name", "db"),
        );
        assert!(d.line_for(&short, t0).is_none());
    }

    #[test]
    fn a_line_names_the_explain_line_to_run() {
        let d = DenialLines::new(false);
        let t0 = Instant::now();
        let flow = event(
            NewEvent::new(Layer::Network, Action::Deny, "x.test:22 — no rule")
                .rule("network.default-deny")
                .detail("host", "x.test")
                .detail("port", 22),
        );
        let line = d.line_for(&flow, t0).unwrap();
        assert!(
            line.ends_with("(rule network.default-deny; why: `cordon explain x.test:22`)"),
            "{line}"
        );
        let req = event(
            NewEvent::new(
                Layer::Http,
                Action::Deny,
                "POST https://y.test/up?k=… → 403",
            )
            .rule("no-uploads")
            .detail("method", "POST")
            .detail("url", "https://y.test/up?k=…"),
        );
        let line = d.line_for(&req, t0).unwrap();
        assert!(
            line.ends_with("; why: `cordon explain POST https://y.test/up`)"),
            "{line}"
        );
    }
}
