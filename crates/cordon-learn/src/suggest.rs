//! `cordon policy suggest`: the least policy addition that would have allowed what sessions
//! needed — what a learning run let through, and what an ordinary run was refused for lack of
//! a rule. Exact names and ports; a wildcard only where several sibling names were seen; a
//! host that takes free-form uploads gets an HTTP rule for the requests seen, never a host
//! allow.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use cordon_events::{Action, Builtin, Event, LEARN, Layer, RuleId};
use cordon_policy::explain::toml_string;

/// Hosts where anything can be posted for others to read (forges, paste sites, chat
/// webhooks, file drops): allowing the host would allow sending the project anywhere on it.
const UPLOAD_HOSTS: &[&str] = &[
    "github.com",
    "api.github.com",
    "uploads.github.com",
    "gist.github.com",
    "gitlab.com",
    "bitbucket.org",
    "api.bitbucket.org",
    "codeberg.org",
    "pastebin.com",
    "paste.ee",
    "hastebin.com",
    "dpaste.org",
    "ix.io",
    "termbin.com",
    "transfer.sh",
    "file.io",
    "0x0.st",
    "hooks.slack.com",
    "discord.com",
    "discordapp.com",
    "api.telegram.org",
    "webhook.site",
    "pipedream.net",
    "ngrok.io",
    "ngrok-free.app",
];

/// Parents under which sibling names belong to different owners: never a wildcard there.
const SHARED_PARENTS: &[&str] = &[
    "github.io",
    "githubusercontent.com",
    "gitlab.io",
    "herokuapp.com",
    "netlify.app",
    "vercel.app",
    "pages.dev",
    "workers.dev",
    "amazonaws.com",
    "s3.amazonaws.com",
    "cloudfront.net",
    "azurewebsites.net",
    "blob.core.windows.net",
    "appspot.com",
    "web.app",
    "firebaseapp.com",
    "co.uk",
    "com.au",
    "co.jp",
];

/// How many sibling names make a wildcard.
const SIBLINGS: usize = 3;

#[derive(Default)]
struct Seen {
    count: u64,
    /// The first event that showed it: (session, seq).
    first: Option<(String, u64)>,
}

impl Seen {
    fn add(&mut self, e: &Event) {
        self.count += 1;
        if self.first.is_none() {
            self.first = Some((e.session.clone(), e.seq));
        }
    }

    fn cite(&self, what: &str) -> String {
        let (s, q) = self.first.clone().unwrap_or_default();
        let plural = if self.count == 1 { "" } else { "s" };
        // `what` may name a path from inside: a newline would end the comment and start a
        // line of policy, an escape sequence would reach the terminal.
        let what = cordon_events::terminal::safe(what);
        format!(
            "# {} {what}{plural}; first: session {s}, event {q}",
            self.count
        )
    }
}

/// What [`suggest`] drafted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suggestion {
    /// TOML, commented, that `cordon check` accepts; empty when nothing was needed.
    pub text: String,
    /// How many entries it holds.
    pub entries: usize,
}

/// Gathers what sessions needed, event by event.
#[derive(Default)]
pub struct Suggester {
    sessions: BTreeSet<String>,
    /// host → port → Seen (connections or requests).
    hosts: BTreeMap<String, BTreeMap<u16, Seen>>,
    /// (host, port, path prefix) → method → Seen, for upload hosts.
    requests: BTreeMap<(String, u16, String), BTreeMap<String, Seen>>,
    /// Command line → Seen.
    execs: BTreeMap<String, Seen>,
    /// Home path → (program, Seen).
    paths: BTreeMap<PathBuf, (String, Seen)>,
    home: PathBuf,
}

/// The suggestion for `events` (in order, several sessions allowed); `home` is the user's
/// home, so paths are written `~/…`.
pub fn suggest<'e>(events: impl IntoIterator<Item = &'e Event>, home: &Path) -> Suggestion {
    let mut s = Suggester::new(home);
    for e in events {
        s.event(e);
    }
    s.finish()
}

impl Suggester {
    /// An empty one for a user whose home is `home`.
    pub fn new(home: &Path) -> Self {
        Suggester {
            home: home.to_path_buf(),
            ..Default::default()
        }
    }

    /// Takes one event.
    pub fn event(&mut self, e: &Event) {
        if e.layer == Layer::Session && e.action == Action::Start {
            self.sessions.insert(e.session.clone());
        }
        // Only what was let through: a learned flow refused after all (its name resolved to
        // a private address, the audit log was full) or an upstream that failed is not.
        let learned = e.detail.contains_key(LEARN)
            && (e.action == Action::Allow
                || (e.layer == Layer::Filesystem && e.action == Action::Log));
        let rule = e.rule_id();
        let is = |b: Builtin| rule.as_ref().is_some_and(|r| r.is(b));
        let port = e
            .detail
            .get("port")
            .and_then(|v| v.as_u64())
            .and_then(|p| u16::try_from(p).ok());
        let host = e.detail_str("host").map(str::to_string);
        match e.layer {
            Layer::Network
                if learned
                    || (e.action == Action::Deny
                        && rule.as_ref().is_some_and(RuleId::is_no_rule)) =>
            {
                if let (Some(h), Some(p)) = (host, port)
                    && h.parse::<std::net::IpAddr>().is_err()
                {
                    self.host(h, p, e);
                }
            }
            Layer::Http if learned || (e.action == Action::Deny && is(Builtin::Default)) => {
                let (Some(h), Some(p)) = (host, port) else {
                    return;
                };
                let method = e.detail_str("method").unwrap_or("GET").to_string();
                let path = e.detail_str("path").unwrap_or("/").to_string();
                // A rule of the user's refused it: an allowance would come after that rule and
                // change nothing, so it takes an HTTP rule of its own.
                let by_rule = !(is(Builtin::Default) || is(Builtin::HttpDefaultDeny));
                if upload_host(&h) || by_rule {
                    self.requests
                        .entry((h, p, prefix(&path)))
                        .or_default()
                        .entry(method)
                        .or_default()
                        .add(e);
                } else {
                    self.host(h, p, e);
                }
            }
            Layer::Exec if learned => {
                if let Some(line) = exec_line(e) {
                    self.execs.entry(line).or_default().add(e);
                }
            }
            Layer::Filesystem if is(Builtin::FilesystemHome) => {
                if let Some(p) = e.detail_str("path") {
                    let program = e.detail_str("program").unwrap_or("?").to_string();
                    let entry = self
                        .paths
                        .entry(PathBuf::from(p))
                        .or_insert((program, Seen::default()));
                    entry.1.add(e);
                }
            }
            _ => {}
        }
    }

    fn host(&mut self, host: String, port: u16, e: &Event) {
        self.hosts
            .entry(host)
            .or_default()
            .entry(port)
            .or_default()
            .add(e);
    }

    /// The TOML.
    pub fn finish(self) -> Suggestion {
        let mut out = Vec::new();
        let mut entries = 0;
        for (host, ports) in wildcards(&self.hosts) {
            let total: u64 = ports.values().map(|s| s.count).sum();
            let first = ports.values().find_map(|s| s.first.clone());
            let seen = Seen {
                count: total,
                first,
            };
            let list: Vec<String> = ports.keys().map(u16::to_string).collect();
            let mut block = vec![seen.cite("connection or request")];
            if host.starts_with("*.") {
                block.push("# several names below it were seen: one rule for them all".into());
            }
            if cordon_net::is_host_alias(&host) {
                block.push(
                    "# FLAGGED: this is your host's own loopback: its services on these ports"
                        .into(),
                );
            }
            if upload_host(&host) {
                // Seen as connections only (ssh, or no HTTP layer): nothing finer to allow.
                block.push(format!(
                    "# FLAGGED: {host} takes free-form uploads; this allows any connection to it on these ports"
                ));
            }
            block.push("[[network.allow]]".into());
            block.push(format!("host = {}", toml_string(&host)));
            block.push(format!("ports = [{}]", list.join(", ")));
            out.push(block.join("\n"));
            entries += 1;
        }
        for ((host, port, path), methods) in &self.requests {
            let total: u64 = methods.values().map(|s| s.count).sum();
            let first = methods.values().find_map(|s| s.first.clone());
            let seen = Seen {
                count: total,
                first,
            };
            let names: Vec<String> = methods.keys().map(|m| toml_string(m)).collect();
            let why = if upload_host(host) {
                format!("# {host} takes free-form uploads: these requests only, not the whole host")
            } else {
                "# a rule of yours denies or asks about these: this must come before it".into()
            };
            out.push(
                [
                    seen.cite("request"),
                    why,
                    "[[http.rule]]".into(),
                    format!("name = {}", toml_string(&format!("learned {host}{path}"))),
                    format!("host = {}", toml_string(host)),
                    format!("port = {port}"),
                    format!("methods = [{}]", names.join(", ")),
                    format!("path = {}", toml_string(path)),
                    "action = \"allow\"".into(),
                ]
                .join("\n"),
            );
            entries += 1;
        }
        for (line, seen) in &self.execs {
            let (pattern, flag) = exec_pattern(line);
            let mut block = vec![seen.cite("run")];
            block.extend(flag.map(|f| format!("# FLAGGED: {f}")));
            block.push("[[exec.rule]]".into());
            block.push(format!("pattern = {}", toml_string(&pattern)));
            block.push("action = \"allow\"".into());
            out.push(block.join("\n"));
            entries += 1;
        }
        if !self.paths.is_empty() {
            let mut block = vec![
                "# home paths tools looked for that the home's view hides: shown as copies,"
                    .to_string(),
                "# each checked for secrets (one that holds a secret stays hidden)".into(),
            ];
            let mut shown = Vec::new();
            for (path, (program, seen)) in &self.paths {
                let tilde = match path.strip_prefix(&self.home) {
                    Ok(r) => format!("~/{}", r.display()),
                    Err(_) => path.display().to_string(),
                };
                block.push(format!(
                    "{} ({})",
                    seen.cite(&format!("lookup of {tilde}")),
                    cordon_events::terminal::safe(program)
                ));
                shown.push(toml_string(&tilde));
            }
            block.push("[filesystem]".into());
            block.push(format!("home_show = [{}]", shown.join(", ")));
            out.push(block.join("\n"));
            entries += self.paths.len();
        }
        if out.is_empty() {
            return Suggestion {
                text: String::new(),
                entries: 0,
            };
        }
        let sessions: Vec<&str> = self.sessions.iter().map(String::as_str).collect();
        let head = format!(
            "# cordon policy suggest, from session{} {}\n\
             # Review each entry, then add what you want to a policy file; `cordon check FILE`\n\
             # validates it and `cordon replay LOG --policy FILE` shows what it changes.\n",
            if sessions.len() == 1 { "" } else { "s" },
            sessions.join(", ")
        );
        Suggestion {
            text: format!("{head}\n{}\n", out.join("\n\n")),
            entries,
        }
    }
}

fn upload_host(host: &str) -> bool {
    UPLOAD_HOSTS.contains(&host) || host.starts_with("hooks.") || host.starts_with("paste.")
}

/// The path's first two segments, then `*` (`/org/repo.git/*`); a shorter path as it is.
fn prefix(path: &str) -> String {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    if segments.len() <= 2 {
        return path.to_string();
    }
    format!("/{}/{}/*", segments[0], segments[1])
}

/// The exec pattern for exactly `line`, and why it may say more or less than the line: a `*`
/// or `?` in it stays a wildcard (patterns have no escape); an argument the log holds
/// redacted (`ghp_… (40 chars)`, a secret) becomes `*`, so the rule matches the real one.
fn exec_pattern(line: &str) -> (String, Option<&'static str>) {
    let mut text = line.to_string();
    let mut redacted = false;
    while let Some(at) = text.find("… (") {
        let Some(end) = text[at..].find(" chars)").map(|e| at + e + " chars)".len()) else {
            break;
        };
        let start = text[..at].rfind(' ').map_or(0, |s| s + 1);
        text.replace_range(start..end, "*");
        redacted = true;
    }
    let wild = line.contains(['*', '?']);
    let cordon_policy::remember::Grant::Exec { pattern } =
        cordon_policy::remember::Grant::exact_exec(&text)
    else {
        return (text, None);
    };
    let flag = match (redacted, wild) {
        (true, _) => Some("an argument held a secret (redacted in the log): `*` stands for it"),
        (false, true) => {
            Some("the command line holds `*` or `?`, which a pattern reads as a wildcard")
        }
        _ => None,
    };
    (pattern, flag)
}

/// The command line an exec event ran, as an exec rule matches it (`PROGRAM ARGS…`).
fn exec_line(e: &Event) -> Option<String> {
    let program = e.detail_str("program")?;
    let mut line = program.to_string();
    for a in e.detail.get("args")?.as_array()? {
        line.push(' ');
        line.push_str(a.as_str()?);
    }
    Some(line)
}

/// Hosts with their ports, where at least [`SIBLINGS`] names below one parent with the same
/// ports become `*.parent` (never below a parent shared by different owners).
fn wildcards(hosts: &BTreeMap<String, BTreeMap<u16, Seen>>) -> Vec<(String, BTreeMap<u16, Seen>)> {
    let mut by_parent: BTreeMap<(String, Vec<u16>), Vec<&String>> = BTreeMap::new();
    for (h, ports) in hosts {
        if let Some((_, parent)) = h.split_once('.')
            && parent.contains('.')
            && !upload_host(h)
            && !SHARED_PARENTS
                .iter()
                .any(|s| parent == *s || parent.ends_with(&format!(".{s}")))
        {
            let key = (parent.to_string(), ports.keys().copied().collect());
            by_parent.entry(key).or_default().push(h);
        }
    }
    let mut merged: BTreeMap<String, String> = BTreeMap::new();
    for ((parent, _), names) in &by_parent {
        if names.len() >= SIBLINGS {
            for n in names {
                merged.insert((*n).clone(), format!("*.{parent}"));
            }
        }
    }
    let mut out: BTreeMap<String, BTreeMap<u16, Seen>> = BTreeMap::new();
    for (h, ports) in hosts {
        let name = merged.get(h).cloned().unwrap_or_else(|| h.clone());
        let slot = out.entry(name).or_default();
        for (p, s) in ports {
            let e = slot.entry(*p).or_default();
            e.count += s.count;
            if e.first.is_none() {
                e.first.clone_from(&s.first);
            }
        }
    }
    out.into_iter().collect()
}
