//! `cordon explain`: which rule decides a request, a path or a command line, and why —
//! asked of the layers' own decision functions, with nothing run. Inside a sandbox it reads
//! the session's policy from the file the session placed there instead of loading one.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use cordon_events::{Builtin, Origin, RuleId};
use cordon_policy::{ExecAction, HttpAction, Owner, Plan};
use cordon_sandbox::explain::POLICY_JSON;

use crate::cli::ExplainArgs;
use crate::program::credential_notes;

mod files;

pub(crate) use files::annotate_read_only;
use files::filesystem;

/// Allowed.
const EXIT_ALLOWED: i32 = 0;
/// Denied, or only decided at run time (a person asked, the judge consulted).
const EXIT_NOT_ALLOWED: i32 = 1;
/// Bad input: nothing was explained.
const EXIT_BAD_INPUT: i32 = 125;

/// The file contents a session places inside its sandbox: the JSON `cordon explain` reads
/// and the TOML `cordon check` would print, both redacted.
pub(crate) fn placed_files(plan: &Plan, session: &str, http_layer: bool) -> Vec<(PathBuf, String)> {
    let plan = cordon_policy::explain::redacted(plan);
    let toml = format!(
        "# The effective policy of cordon session {session}, secrets redacted.\n\
         # Ask `cordon explain …` which rule decides a request, a path or a command.\n{}",
        plan.to_toml()
    );
    // What the session ran with, beside the plan: `cordon explain` inside reads it back.
    // Written straight from the plan, not through a `serde_json::Value` of it first (which
    // built a map per table and a string per key: most of this function's time at start).
    let json = format!(
        "{{\"http_layer\":{http_layer},\"plan\":{},\"session\":{}}}",
        serde_json::to_string(&plan).expect("a plan serializes"),
        serde_json::Value::from(session)
    );
    vec![
        (PathBuf::from(POLICY_JSON), json),
        (PathBuf::from(cordon_sandbox::explain::POLICY_TOML), toml),
    ]
}

/// One answer.
#[derive(Debug, Default)]
struct Explanation {
    /// What was asked about, as the user would say it.
    subject: String,
    /// allow, deny, ask, judge, read-only…
    decision: &'static str,
    allowed: bool,
    /// The deciding rule's name.
    rule: String,
    /// Where the rule comes from (`built-in`, `FILE:LINE`), when known.
    origin: Option<Origin>,
    why: String,
    notes: Vec<String>,
    /// Policy lines that would allow it, when some can.
    allow_with: Option<String>,
    /// When the deciding rule ends (`until`, `for`), if it does.
    expires: Option<cordon_policy::Expiry>,
}

impl Explanation {
    fn print(&self) {
        println!("{}: {}", self.subject, self.decision);
        println!("  rule: {}", self.rule);
        if let Some(o) = &self.origin {
            println!("  from: {o}");
        }
        println!("  why: {}", self.why);
        for n in &self.notes {
            println!("  note: {n}");
        }
        if let Some(lines) = &self.allow_with {
            println!("  to allow it, add to cordon.toml (and review it: `cordon check`):");
            for l in lines.lines() {
                println!("    {l}");
            }
        }
    }
}

/// What the filesystem view of `plan` does with reading `path`: (readable, the deciding
/// rule's origin or name), for `cordon replay`.
pub(crate) fn path_decision(plan: &Plan, path: &Path) -> (bool, String) {
    let x = files::filesystem(plan, path, false);
    (x.allowed, x.origin.map_or(x.rule, |o| o.to_string()))
}

pub fn explain(a: ExplainArgs) -> i32 {
    let (plan, http_layer, inside) = match policy(&a) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("cordon: {}", crate::output::chain(&e));
            return EXIT_BAD_INPUT;
        }
    };
    let owner = a.program.as_deref().map(crate::program::asking);
    let mut answer = match what(&a).and_then(|w| w.explain(&plan, http_layer, owner.as_ref())) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("cordon: explain: {}", crate::output::chain(&e));
            return EXIT_BAD_INPUT;
        }
    };
    if let Some(end) = answer.expires {
        let now = std::time::SystemTime::now();
        let note = crate::grants::note(end, answer.allowed, now, inside);
        answer.notes.push(note);
    }
    answer.print();
    if inside {
        println!("  (the policy of this session, from {POLICY_JSON})");
    }
    if answer.allowed {
        EXIT_ALLOWED
    } else {
        EXIT_NOT_ALLOWED
    }
}

/// The effective plan: the session's own inside a sandbox, else loaded as `cordon run`
/// loads it. Returns it, whether the HTTP layer intercepts, and whether it came from a
/// session.
fn policy(a: &ExplainArgs) -> Result<(Plan, bool, bool)> {
    if std::env::var_os("CORDON_SANDBOX").is_some_and(|v| v == "1") {
        let text = std::fs::read_to_string(POLICY_JSON).with_context(|| {
            format!(
                "inside a cordon sandbox, but the session's policy {POLICY_JSON} cannot be read"
            )
        })?;
        let mut v: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("{POLICY_JSON} is not JSON"))?;
        let http_layer = v["http_layer"].as_bool().unwrap_or(false);
        let plan: Plan = serde_json::from_value(v["plan"].take())
            .with_context(|| format!("{POLICY_JSON} holds no plan this cordon reads"))?;
        if a.policy.is_some() || a.policy_args.profile.is_some() || a.policy_args.project.is_some()
        {
            eprintln!(
                "cordon: warning: inside a sandbox the session's own policy decides; \
                 --policy, --profile and --project are ignored"
            );
        }
        return Ok((plan, http_layer, true));
    }
    let project = crate::commands::resolve_policy_project(a.policy_args.project.as_deref())?;
    let opts = crate::commands::policy_load_options(a.policy.clone(), &a.policy_args, project);
    let loaded = cordon_policy::load(&opts).map_err(|e| anyhow!("{e}"))?;
    for w in &loaded.warnings {
        eprintln!("cordon: warning: {w}");
    }
    for l in &loaded.untrusted_loosening {
        eprintln!(
            "cordon: warning: {} loosens your policy and is not trusted: `cordon run` refuses it \
             until `cordon trust {}` (explained as if trusted)",
            l.file.display(),
            l.file.display()
        );
    }
    // As a session starting now would: the session plan's policy (rules that ended left
    // out, the host's part resolved), without its events.
    let now = std::time::SystemTime::now();
    let resolved = crate::session_plan::resolve(&loaded, false, now, &|_| {});
    crate::grants::say(&resolved.expired, now);
    // The HTTP layer is on whenever cordon's CA can be had, which is the normal case.
    Ok((resolved.plan, true, false))
}

/// What is asked about.
#[derive(Debug, PartialEq)]
enum What {
    Request {
        method: String,
        scheme: String,
        host: String,
        port: u16,
        path: String,
        query: String,
    },
    Connection {
        host: String,
        port: u16,
    },
    Path {
        path: PathBuf,
        write: bool,
    },
    Command(Vec<String>),
}

fn what(a: &ExplainArgs) -> Result<What> {
    if !a.command.is_empty() {
        if !a.what.is_empty() || a.write {
            bail!("give either `-- COMMAND ARGS…` or a URL, HOST:PORT or PATH, not both");
        }
        let argv = a
            .command
            .iter()
            .map(|s| {
                s.clone()
                    .into_string()
                    .map_err(|s| anyhow!("argument {s:?} is not UTF-8; exec rules match text"))
            })
            .collect::<Result<Vec<_>>>()?;
        return Ok(What::Command(argv));
    }
    let words: Vec<&str> = a.what.iter().map(String::as_str).collect();
    match words.as_slice() {
        [] => bail!(
            "nothing to explain: give [METHOD] URL, HOST:PORT, [--write] PATH, or -- COMMAND ARGS…"
        ),
        [method, url] => {
            if !method.chars().all(|c| c.is_ascii_alphabetic()) {
                bail!("`{method}` is not an HTTP method (as in `cordon explain POST {url}`)");
            }
            request(&method.to_ascii_uppercase(), url)
        }
        [one] if one.contains("://") => request("GET", one),
        [one] if one.starts_with(['/', '.', '~']) => Ok(What::Path {
            path: absolute(one)?,
            write: a.write,
        }),
        // A relative path as the user types it (`src/main.rs`); a bare name is a host
        // unless a file of that name is here.
        [one] if one.contains('/') || (connection(one).is_none() && Path::new(one).exists()) => {
            Ok(What::Path {
                path: absolute(one)?,
                write: a.write,
            })
        }
        [one] => connection(one).ok_or_else(|| {
            anyhow!(
                "cannot tell what `{one}` is: give a URL (https://host/path), HOST:PORT, a path \
                 (a relative one is taken from here), or -- COMMAND ARGS…"
            )
        }),
        _ => bail!(
            "too many words: a command goes after `--` (cordon explain -- {})",
            words.join(" ")
        ),
    }
}

fn absolute(p: &str) -> Result<PathBuf> {
    let path = if let Some(rest) = p.strip_prefix("~/") {
        crate::commands::home().join(rest)
    } else if p == "~" {
        crate::commands::home()
    } else {
        PathBuf::from(p)
    };
    if path.is_absolute() {
        return Ok(path);
    }
    Ok(std::env::current_dir()
        .context("cannot read the current directory")?
        .join(path))
}

/// `HOST:PORT` (`[V6]:PORT`).
fn connection(s: &str) -> Option<What> {
    let (host, port) = s.rsplit_once(':')?;
    let port = port.parse().ok()?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    (!host.is_empty()).then(|| What::Connection {
        host: host.to_ascii_lowercase(),
        port,
    })
}

/// A URL, split as the HTTP layer sees the request (http and https only).
fn request(method: &str, url: &str) -> Result<What> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| anyhow!("`{url}` is not a URL"))?;
    let scheme = scheme.to_ascii_lowercase();
    let default_port = match scheme.as_str() {
        "https" => 443,
        "http" => 80,
        _ => bail!("`{url}`: only http and https URLs are decided by request"),
    };
    let rest = rest.split('#').next().unwrap_or_default();
    let split = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, target) = rest.split_at(split);
    let authority = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(':') && (h.starts_with('[') || !h.contains(':')) => (
            h,
            p.parse::<u16>()
                .map_err(|_| anyhow!("`{url}`: `{p}` is not a port"))?,
        ),
        _ => (authority, default_port),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        bail!("`{url}` names no host");
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    Ok(What::Request {
        method: method.to_string(),
        scheme,
        host: host.to_ascii_lowercase(),
        port,
        path: if path.is_empty() { "/" } else { path }.to_string(),
        query: query.to_string(),
    })
}

impl What {
    fn explain(&self, plan: &Plan, http_layer: bool, who: Option<&Owner>) -> Result<Explanation> {
        match self {
            What::Request {
                method,
                scheme,
                host,
                port,
                path,
                query,
            } => {
                let shown_port = match (scheme.as_str(), port) {
                    ("https", 443) | ("http", 80) => String::new(),
                    _ => format!(":{port}"),
                };
                let shown_host = if host.contains(':') {
                    format!("[{host}]")
                } else {
                    host.clone()
                };
                let url = format!("{scheme}://{shown_host}{shown_port}{path}");
                let subject = format!("{method} {url}");
                let mut x = flow(plan, (host, *port), http_layer, &subject, who)?;
                if x.decision == "intercepted" {
                    let target = (method.as_str(), host.as_str(), *port);
                    x = http(plan, target, path, query, x.subject, who)?;
                }
                Ok(x)
            }
            What::Connection { host, port } => {
                let mut x = flow(
                    plan,
                    (host, *port),
                    http_layer,
                    &format!("{host}:{port}"),
                    who,
                )?;
                if x.decision == "intercepted" {
                    x.decision = "allow";
                    x.notes.push(
                        "each HTTP request on it is decided by rule: ask with its URL".into(),
                    );
                }
                Ok(x)
            }
            What::Path { path, write } => Ok(filesystem(plan, path, *write)),
            What::Command(argv) => Ok(exec(plan, argv)),
        }
    }
}

/// `who`: the process asking (`--program`); `None`, one not known.
fn flow(
    plan: &Plan,
    (host, port): (&str, u16),
    http_layer: bool,
    subject: &str,
    who: Option<&Owner>,
) -> Result<Explanation> {
    let v = cordon_net::explain_flow(plan, host, port, http_layer, who)?;
    let allow_with = (!v.allow && v.rule.is_no_rule()).then(|| {
        format!(
            "[[network.allow]]\nhost = {}\nports = [{port}]",
            cordon_policy::explain::toml_string(host)
        )
    });
    let (rule, origin) = split_origin(&v.rule);
    Ok(Explanation {
        subject: subject.to_string(),
        decision: if v.http {
            "intercepted"
        } else if v.allow {
            "allow"
        } else {
            "deny"
        },
        allowed: v.allow,
        rule,
        origin,
        why: v.reason,
        allow_with,
        expires: crate::grants::of_label(plan, &v.rule),
        ..Explanation::default()
    })
}

/// A rule and its origin as `explain` shows them, apart (`network.allow HOST`, `ORIGIN`).
fn split_origin(rule: &RuleId) -> (String, Option<Origin>) {
    let (rule, origin) = rule.split_origin();
    (rule, origin.cloned())
}

fn http(
    plan: &Plan,
    (method, host, port): (&str, &str, u16),
    path: &str,
    query: &str,
    subject: String,
    who: Option<&Owner>,
) -> Result<Explanation> {
    let d = cordon_http::explain::explain_request(plan, method, host, port, path, query, who)
        .map_err(|why| anyhow!("the HTTP layer refuses this path outright (400): {why}"))?;
    let from_rule = plan
        .http
        .rules
        .iter()
        .find(|r| RuleId::parse(&r.name) == d.rule);
    let (rule, origin) = match from_rule {
        Some(r) => (format!("http.rule {}", r.name), Some(r.origin.clone())),
        None if d.rule.is(Builtin::Default) => {
            ("http.default".to_string(), Some("[http] default".into()))
        }
        None => split_origin(&d.rule),
    };
    let (decision, why) = match d.action {
        HttpAction::Allow => ("allow", "the first matching rule allows it".to_string()),
        HttpAction::Deny => ("deny", "the first matching rule denies it".to_string()),
        HttpAction::Ask => (
            "ask",
            "held until a person answers with `cordon approve` (or the timeout denies it)"
                .to_string(),
        ),
        HttpAction::Judge => (
            "judge",
            "the LLM judge ([judge]) decides when the request is made, from its body too"
                .to_string(),
        ),
    };
    let mut notes = Vec::new();
    if let Some(reason) = &d.reason {
        notes.push(format!("the rule says: {reason}"));
    }
    notes.extend(credential_notes(plan, host));
    notes.extend(who.map(|o| format!("asked for {}", o.describe())));
    let allow_with = (d.action != HttpAction::Allow).then(|| {
        let mut lines = format!(
            "[[http.rule]]\nname = \"allow-{}\"\nhost = {}\nmethods = [{}]\npath = {}\naction = \"allow\"",
            host.replace('.', "-"),
            cordon_policy::explain::toml_string(host),
            cordon_policy::explain::toml_string(method),
            cordon_policy::explain::toml_string(path)
        );
        if from_rule.is_some() {
            lines.push_str(&format!(
                "\n# the first matching rule decides: this must come before `{}`",
                d.rule
            ));
        }
        lines
    });
    Ok(Explanation {
        subject,
        decision,
        allowed: d.action == HttpAction::Allow,
        rule,
        origin,
        why,
        notes,
        allow_with,
        expires: crate::grants::of_label(plan, &d.rule),
    })
}

fn exec(plan: &Plan, argv: &[String]) -> Explanation {
    let program = Path::new(&argv[0])
        .file_name()
        .and_then(|s| s.to_str())
        .unwrap_or(&argv[0])
        .to_string();
    let resolved = crate::program::which(&argv[0])
        .and_then(|p| p.canonicalize().ok())
        .and_then(|p| p.file_name().map(|s| s.to_string_lossy().into_owned()))
        .unwrap_or_else(|| program.clone());
    let args = &argv[1..];
    let subject = format!(
        "run `{}`",
        cordon_policy::explain::hint_for_command(argv).trim_start_matches("cordon explain -- ")
    );
    let Some(rule) = cordon_sandbox::explain::decide_exec(&plan.exec, &program, &resolved, args)
    else {
        return Explanation {
            subject,
            decision: "allow",
            allowed: true,
            rule: "exec (no rule)".into(),
            why: "no [exec] rule matches this command line, so it runs".into(),
            ..Explanation::default()
        };
    };
    let mut line = program.clone();
    for a in args {
        line.push(' ');
        line.push_str(a);
    }
    let mut notes = Vec::new();
    if resolved != program {
        notes.push(format!(
            "`{program}` is `{resolved}` on this PATH; rules match either name"
        ));
    }
    let (decision, why) = match rule.action {
        ExecAction::Allow => ("allow", "the first matching rule allows it"),
        ExecAction::Deny => ("deny", "the first matching rule denies it (EPERM)"),
        ExecAction::Ask => (
            "ask",
            "held until a person answers with `cordon approve` (or the timeout denies it)",
        ),
    };
    let allow_with = (rule.action != ExecAction::Allow).then(|| {
        format!(
            "[exec]\nallow = [{}]\n# the first matching rule decides, earlier files first: \
             this helps only where it comes before \"{}\" ({})",
            cordon_policy::explain::toml_string(&line),
            rule.pattern,
            rule.origin
        )
    });
    Explanation {
        subject,
        decision,
        allowed: rule.action == ExecAction::Allow,
        rule: format!("exec {} \"{}\"", decision, rule.pattern),
        origin: Some(rule.origin.clone()),
        why: why.into(),
        notes,
        allow_with,
        expires: rule.expires,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_as_the_layer_sees_them() {
        assert_eq!(
            request("POST", "https://u:p@API.example.com:8443/v1/x?a=1#f").unwrap(),
            What::Request {
                method: "POST".into(),
                scheme: "https".into(),
                host: "api.example.com".into(),
                port: 8443,
                path: "/v1/x".into(),
                query: "a=1".into(),
            }
        );
        assert!(matches!(
            request("GET", "http://[::1]/").unwrap(),
            What::Request { host, port: 80, .. } if host == "::1"
        ));
        assert!(request("GET", "ftp://x/").is_err());
        assert!(request("GET", "https://:443/").is_err());
        assert_eq!(
            connection("github.com:22"),
            Some(What::Connection {
                host: "github.com".into(),
                port: 22
            })
        );
        assert_eq!(connection("github.com"), None);
    }
}
