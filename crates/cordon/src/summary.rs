//! The start and exit lines of `cordon run` on a terminal: what is on, and what happened.
//! Built only from the events the session emits (the same ones the audit log gets), so the
//! lines never claim more than the log records.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Instant;

use cordon_events::{Action, Event, Layer, Shortfall, terminal};

/// How many denied hosts the exit line names.
const TOP_DENIED: usize = 3;

/// The start line's layers, outermost first.
const ORDER: [&str; 11] = [
    "fs", "landlock", "net", "http", "tls", "judge", "creds", "seccomp", "exec", "limits", "state",
];

/// What the session's events said so far.
#[derive(Default)]
struct Facts {
    profile: String,
    /// What in the command selected the profile, when it was detected.
    profile_by: String,
    /// The agent's expected denials (telemetry, update checks): counted apart, not named one
    /// by one among the denied hosts.
    quiet: cordon_policy::AgentPlan,
    quiet_hosts: BTreeMap<String, u64>,
    project: String,
    policy_files: Vec<String>,
    session: String,
    /// Layers in the order they reported, each with its note (`partial`, `gateway`…) and
    /// whether it runs with less than the policy asked.
    layers: Vec<(&'static str, String, bool)>,
    allowed: u64,
    denied: u64,
    denied_hosts: BTreeMap<String, u64>,
    exec_allowed: u64,
    exec_denied: u64,
    /// A shell tries each PATH entry in turn: one command, one hit.
    exec_seen: std::collections::HashSet<(Action, u64, String)>,
    judge_calls: u64,
    state_pending: Option<u64>,
    home_writes_dropped: Option<u64>,
    started: bool,
}

/// The lines for one session; silent unless enabled.
pub struct Lines {
    enabled: bool,
    log: PathBuf,
    began: Instant,
    facts: Mutex<Facts>,
}

impl Lines {
    /// Shown on a terminal (stderr), or with `-v` anywhere; never with `-q`.
    pub fn new(quiet: bool, verbose: bool, log: PathBuf) -> Self {
        let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
        Self {
            enabled: !quiet && (verbose || tty),
            log,
            began: Instant::now(),
            facts: Mutex::new(Facts::default()),
        }
    }

    /// Takes one emitted event; prints the start line once setup is complete.
    pub fn observe(&self, e: &Event) {
        if !self.enabled {
            return;
        }
        let line = {
            let mut f = self.facts.lock().unwrap_or_else(|p| p.into_inner());
            f.take(e);
            // The seccomp filter's report is the sandbox's last setup event, sent before
            // the relay starts: the line comes before anything the command prints on a pty.
            (e.layer == Layer::Syscall && e.action == Action::Apply && !f.started).then(|| {
                f.started = true;
                f.start_line()
            })
        };
        if let Some(l) = line {
            say(&l);
        }
    }

    /// The selected profile's quiet hosts (see [`is_quiet_denial`]).
    pub fn quiet(&self, agent: &cordon_policy::AgentPlan) {
        let mut f = self.facts.lock().unwrap_or_else(|p| p.into_inner());
        f.quiet = agent.clone();
    }

    /// The exit line, with the command's exit status.
    pub fn finish(&self, code: i32) {
        if !self.enabled {
            return;
        }
        let secs = self.began.elapsed().as_secs_f64();
        let line = {
            let f = self.facts.lock().unwrap_or_else(|p| p.into_inner());
            f.exit_line(secs, code, &self.log)
        };
        say(&line);
    }
}

/// A closed or broken stderr must not take the session down.
pub(crate) fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "cordon: {line}");
}

fn strings(e: &Event, key: &str) -> Vec<String> {
    e.detail
        .get(key)
        .and_then(|v| v.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(terminal::safe))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default()
}

/// The host a network or HTTP denial names.
fn denied_host(e: &Event) -> &str {
    e.detail_str("host")
        .or_else(|| e.detail_str("url").map(url_host))
        .unwrap_or("?")
}

/// A network or HTTP denial of one of the agent's quiet hosts: logged as always, but not
/// announced on the terminal one by one (the exit line counts them).
pub fn is_quiet_denial(agent: &cordon_policy::AgentPlan, e: &Event) -> bool {
    e.action == Action::Deny
        && matches!(e.layer, Layer::Network | Layer::Http)
        && agent.is_quiet(denied_host(e))
}

/// The host of `https://host:port/path` (HTTP events name a URL, not a host).
pub(crate) fn url_host(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let auth = &rest[..end];
    auth.rsplit_once(':')
        .filter(|(_, p)| p.chars().all(|c| c.is_ascii_digit()))
        .map_or(auth, |(h, _)| h)
}

impl Facts {
    fn layer(&mut self, name: &'static str, note: impl Into<String>, degraded: bool) {
        let note = note.into();
        match self.layers.iter_mut().find(|(n, _, _)| *n == name) {
            // A degraded report wins over an earlier one: that is what runs.
            Some(l) if degraded || !l.2 => *l = (name, note, degraded),
            Some(_) => {}
            None => self.layers.push((name, note, degraded)),
        }
    }

    fn take(&mut self, e: &Event) {
        let (layer, action) = (e.layer, e.action);
        if self.session.is_empty() {
            self.session = terminal::safe(&e.session);
        }
        match (layer, action) {
            (Layer::Session, Action::Start) => {
                self.profile = terminal::safe(e.detail_str("profile").unwrap_or_default());
                self.profile_by =
                    terminal::safe(e.detail_str("profile_detected").unwrap_or_default());
                self.project = terminal::safe(e.detail_str("project").unwrap_or_default());
                self.policy_files = strings(e, "policy_files");
            }
            (Layer::Filesystem, Action::Apply) if e.detail.contains_key("writable") => {
                self.layer("fs", "", false)
            }
            // Nested sandboxes turn the filesystem rules off; a profile may have asked for
            // that without the user knowing, so the fence shows as degraded even when the
            // scoping left is all the policy wanted.
            (Layer::Landlock, _) if e.detail.contains_key("filesystem_rules") => {
                let note = match action {
                    Action::Apply => "scoping only, nested sandboxes",
                    _ => "off, nested sandboxes",
                };
                self.layer("landlock", note, true)
            }
            (Layer::Landlock, Action::Apply) => self.layer("landlock", "", false),
            (Layer::Landlock, Action::Degraded) => self.layer(
                "landlock",
                e.detail_str("enforcement").unwrap_or("partial"),
                true,
            ),
            (Layer::Network, Action::Apply) => self.layer("net", "gateway", false),
            (Layer::Network, Action::Degraded) if e.shortfall() == Some(Shortfall::HostNetwork) => {
                self.layer("net", "host", true)
            }
            (Layer::Network, Action::Degraded) => self.layer("net", "proxy only", true),
            (Layer::Http, Action::Apply) => {
                self.layer("http", "", false);
                self.layer("tls", "", false);
            }
            (Layer::Http, Action::Degraded) if e.shortfall() == Some(Shortfall::NoJudgeKey) => {
                self.layer("judge", "no key", true)
            }
            (Layer::Http, Action::Degraded) => {
                self.layer("http", "connections only", true);
                self.layer("tls", "no CA", true);
            }
            (Layer::Syscall, Action::Apply) => {
                self.layer("seccomp", "", false);
                let rules = e
                    .detail
                    .get("exec_rules")
                    .and_then(|v| v.as_array())
                    .map_or(0, Vec::len);
                if rules > 0 {
                    self.layer("exec", format!("{rules} rules"), false);
                }
            }
            (Layer::State, Action::Apply) if e.detail.contains_key("before") => {
                let home = e.detail_str("home").is_some_and(|h| !h.is_empty());
                let protected = e
                    .detail
                    .get("before")
                    .and_then(|v| v.as_array())
                    .map_or(0, Vec::len);
                let note = match (home, protected) {
                    (true, _) => "home overlay".to_string(),
                    (false, n) => format!("{n} protected"),
                };
                self.layer("state", note, false);
            }
            (Layer::State, Action::Degraded) => self.layer("state", "home read-only", true),
            (Layer::State, Action::Ask) => {
                self.state_pending = e.detail.get("files").and_then(|v| v.as_u64());
            }
            (Layer::State, Action::Log) if e.detail.contains_key("flagged") => {
                self.home_writes_dropped = e.detail.get("files").and_then(|v| v.as_u64());
            }
            (Layer::Limits, Action::Degraded) => {
                self.layer("limits", e.detail_str("limit").unwrap_or("some"), true)
            }
            (Layer::Credentials, Action::Degraded) => self.layer("creds", "partly", true),
            (Layer::Exec, Action::Degraded) => self.layer("exec", "no broker", true),
            (Layer::Network | Layer::Http, Action::Allow) => self.allowed += 1,
            (Layer::Network | Layer::Http, Action::Deny) if is_quiet_denial(&self.quiet, e) => {
                *self
                    .quiet_hosts
                    .entry(terminal::safe(denied_host(e)))
                    .or_default() += 1;
            }
            (Layer::Network | Layer::Http, Action::Deny) => {
                self.denied += 1;
                *self
                    .denied_hosts
                    .entry(terminal::safe(denied_host(e)))
                    .or_default() += 1;
            }
            // An exec no rule matched is logged for replay; the line counts rules hit.
            (Layer::Exec, Action::Allow | Action::Deny) if e.rule.is_some() => {
                let key = (
                    action,
                    e.detail.get("pid").and_then(|v| v.as_u64()).unwrap_or(0),
                    e.detail_str("command").unwrap_or_default().to_string(),
                );
                if self.exec_seen.insert(key) {
                    match action {
                        Action::Allow => self.exec_allowed += 1,
                        _ => self.exec_denied += 1,
                    }
                }
            }
            _ => {}
        }
        // The final event of each judged request says so, whatever became of the request.
        if e.judge_call().is_some() {
            self.judge_calls += 1;
        }
    }

    fn start_line(&self) -> String {
        let mut ordered: Vec<&(&'static str, String, bool)> = self.layers.iter().collect();
        // Layer order, whatever order setup reported them in.
        ordered.sort_by_key(|(n, _, _)| ORDER.iter().position(|o| o == n).unwrap_or(ORDER.len()));
        let layers: Vec<String> = ordered
            .into_iter()
            .map(|(n, note, degraded)| match (note.is_empty(), degraded) {
                (true, false) => n.to_string(),
                (true, true) => format!("{n}(DEGRADED)"),
                (false, false) => format!("{n}({note})"),
                (false, true) => format!("{n}({note}: DEGRADED)"),
            })
            .collect();
        let policy = if self.policy_files.is_empty() {
            "built-in only".to_string()
        } else {
            self.policy_files.join(", ")
        };
        let profile = match (self.profile.as_str(), self.profile_by.as_str()) {
            ("", _) => "none".to_string(),
            (p, "") => p.to_string(),
            (p, by) => format!("{p} (detected: {by})"),
        };
        format!(
            "profile {profile} · {} · project {} · policy {policy} · session {}",
            layers.join(" "),
            self.project,
            self.session
        )
    }

    fn exit_line(&self, secs: f64, code: i32, log: &std::path::Path) -> String {
        let mut parts = vec![format!("exit {code} after {secs:.1}s")];
        let mut req = format!("requests {} allowed, {} denied", self.allowed, self.denied);
        if !self.denied_hosts.is_empty() {
            req.push_str(&format!(" ({})", top(&self.denied_hosts).join(", ")));
        }
        parts.push(req);
        if !self.quiet_hosts.is_empty() {
            parts.push(format!(
                "{} expected denials not shown ({})",
                self.quiet_hosts.values().sum::<u64>(),
                top(&self.quiet_hosts).join(", ")
            ));
        }
        parts.push(format!(
            "exec rules hit {} ({} denied)",
            self.exec_allowed + self.exec_denied,
            self.exec_denied
        ));
        parts.push(format!("judge calls {}", self.judge_calls));
        if let Some(n) = self.state_pending {
            parts.push(format!(
                "{} pending: `cordon state diff {}`",
                crate::output::count(n as usize, "state change", "state changes"),
                self.session
            ));
        }
        if let Some(n) = self.home_writes_dropped {
            parts.push(format!(
                "{} not kept",
                crate::output::count(n as usize, "home write", "home writes")
            ));
        }
        parts.push(format!(
            "log {}",
            terminal::safe(&log.display().to_string())
        ));
        parts.join(" · ")
    }
}

/// The most frequent hosts, `host ×N`, most first.
fn top(counts: &BTreeMap<String, u64>) -> Vec<String> {
    let mut hosts: Vec<(&String, &u64)> = counts.iter().collect();
    hosts.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    hosts
        .iter()
        .take(TOP_DENIED)
        .map(|(h, n)| format!("{h} ×{n}"))
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use cordon_events::NewEvent;

    /// An event as the log would hold it, for tests of what reads events.
    pub(crate) fn ev(n: NewEvent) -> Event {
        Event {
            time: "2026-12-01T00:00:00.000Z".into(),
            session: "S1".into(),
            seq: 0,
            layer: n.layer,
            action: n.action,
            reason: n.reason,
            rule: n.rule,
            detail: n.detail,
            prev: String::new(),
            hash: String::new(),
        }
    }

    #[test]
    fn lines_from_events() {
        let mut f = Facts::default();
        for n in [
            NewEvent::new(Layer::Session, Action::Start, "s")
                .detail("project", "/p")
                .detail("policy_files", vec!["/p/cordon.toml".to_string()])
                .detail("profile", ""),
            NewEvent::new(Layer::Filesystem, Action::Apply, "v").detail("writable", 1),
            NewEvent::new(Layer::Landlock, Action::Degraded, "l").detail("enforcement", "partial"),
            NewEvent::new(Layer::Network, Action::Apply, "g"),
            NewEvent::new(Layer::Http, Action::Apply, "h"),
            NewEvent::new(Layer::Http, Action::Deny, "d")
                .rule("x")
                .detail("url", "https://evil.test:8443/a"),
            NewEvent::new(Layer::Network, Action::Deny, "d")
                .rule("x")
                .detail("host", "evil.test"),
            NewEvent::new(Layer::Network, Action::Deny, "d")
                .rule("x")
                .detail("host", "b\u{1b}\u{202e}.test"),
            NewEvent::new(Layer::Http, Action::Allow, "a")
                .rule("r → judge")
                .judge_call(&cordon_events::JudgeCall {
                    verdict: "allow".into(),
                    latency_ms: 40,
                }),
            // Words alone are no judge call: only the field counts.
            NewEvent::new(Layer::Http, Action::Deny, "the judge said no")
                .rule("r → judge")
                .detail("url", "https://judged.test/"),
            NewEvent::new(Layer::Exec, Action::Deny, "e").rule("x"),
            NewEvent::new(Layer::Syscall, Action::Apply, "s")
                .detail("exec_rules", vec!["a".to_string(), "b".to_string()]),
            NewEvent::new(Layer::State, Action::Ask, "p").detail("files", 2),
        ] {
            f.take(&ev(n));
        }
        assert_eq!(
            f.start_line(),
            "profile none · fs landlock(partial: DEGRADED) net(gateway) http tls seccomp \
             exec(2 rules) · project /p · policy /p/cordon.toml · session S1"
        );
        let exit = f.exit_line(1.24, 3, std::path::Path::new("/l.jsonl"));
        assert!(
            exit.starts_with("exit 3 after 1.2s · requests 1 allowed, 4 denied (evil.test ×2, "),
            "{exit}"
        );
        assert!(
            exit.contains("exec rules hit 1 (1 denied) · judge calls 1"),
            "{exit}"
        );
        assert!(exit.contains("`cordon state diff S1`"), "{exit}");
        assert!(exit.contains("b\\u{1b}\\u{202e}.test ×1"), "{exit}");
        assert!(!exit.contains(['\u{1b}', '\u{202e}']), "{exit}");
        assert!(exit.ends_with("log /l.jsonl"), "{exit}");
    }

    #[test]
    fn landlock_without_its_filesystem_rules_is_degraded() {
        for (action, want) in [
            (
                Action::Apply,
                "landlock(scoping only, nested sandboxes: DEGRADED)",
            ),
            (
                Action::Degraded,
                "landlock(off, nested sandboxes: DEGRADED)",
            ),
        ] {
            let mut f = Facts::default();
            f.take(&ev(NewEvent::new(Layer::Landlock, action, "l")
                .detail("enforcement", "partial")
                .detail("filesystem_rules", "off for nested sandboxes")));
            assert!(f.start_line().contains(want), "{}", f.start_line());
        }
        let mut f = Facts::default();
        f.take(&ev(NewEvent::new(Layer::Landlock, Action::Apply, "l")));
        assert!(f.start_line().contains(" landlock "), "{}", f.start_line());
    }

    #[test]
    fn a_detected_profile_and_quiet_denials() {
        let mut f = Facts {
            quiet: cordon_policy::AgentPlan {
                quiet: vec![cordon_policy::HostPattern::glob("*.telemetry.test").unwrap()],
                ..Default::default()
            },
            ..Default::default()
        };
        for n in [
            NewEvent::new(Layer::Session, Action::Start, "s")
                .detail("project", "/p")
                .detail("profile", "claude")
                .detail("profile_detected", "npx @anthropic-ai/claude-code"),
            NewEvent::new(Layer::Network, Action::Deny, "d")
                .rule("x")
                .detail("host", "a.telemetry.test"),
            NewEvent::new(Layer::Http, Action::Deny, "d")
                .rule("x")
                .detail("url", "https://a.telemetry.test/v1/log"),
            NewEvent::new(Layer::Network, Action::Deny, "d")
                .rule("x")
                .detail("host", "evil.test"),
        ] {
            let e = ev(n);
            assert_eq!(
                is_quiet_denial(&f.quiet, &e),
                denied_host(&e).ends_with("telemetry.test"),
                "{e:?}"
            );
            f.take(&e);
        }
        assert!(
            f.start_line()
                .starts_with("profile claude (detected: npx @anthropic-ai/claude-code) · "),
            "{}",
            f.start_line()
        );
        let exit = f.exit_line(1.0, 0, std::path::Path::new("/l.jsonl"));
        assert!(
            exit.contains(
                "requests 0 allowed, 1 denied (evil.test ×1) · \
                 2 expected denials not shown (a.telemetry.test ×2)"
            ),
            "{exit}"
        );
    }

    #[test]
    fn url_hosts() {
        assert_eq!(url_host("https://a.test/x"), "a.test");
        assert_eq!(url_host("http://a.test:80"), "a.test");
        assert_eq!(url_host("http://[::1]:80/"), "[::1]");
        assert_eq!(url_host(""), "");
    }
}
