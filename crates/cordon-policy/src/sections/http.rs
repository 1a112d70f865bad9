//! `[http]`: ordered request rules for the HTTP layer, and what unmatched requests get
//! (layer 3).

use crate::PolicyError;
use crate::Programs;
use crate::expiry::Expiry;
use crate::pattern::HostPattern;
use crate::schema::{Schema, Shape, toml_string};
use crate::sections::{
    Convert, Loosen, Origin, Render, Scalar, Section, Sections, set_scalar, value,
};

crate::choice! {
    /// What an HTTP rule (or the default) does with a request.
    #[derive(Default)]
    pub enum HttpAction {
        /// Forward it.
        Allow = "allow",
        /// Refuse it with a 403 that says why.
        #[default]
        Deny = "deny",
        /// Hold it and ask a person.
        Ask = "ask",
        /// Ask the LLM judge.
        Judge = "judge",
    }
}

/// One `[[http.rule]]`. Empty lists and `None` match anything.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HttpRule {
    /// Its name in events and 403 bodies (`http.rule FILE:LINE` when unnamed).
    pub name: String,
    /// The hosts it is for.
    pub host: HostPattern,
    /// Port, if the rule is for one.
    pub port: Option<u16>,
    /// Methods, upper-case; empty = any.
    pub methods: Vec<String>,
    /// Path glob ([`crate::glob_match`]).
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
    pub origin: cordon_events::Origin,
    /// When it ends (`until`, `for`); `None`: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<Expiry>,
    /// The processes it is for (`programs`, `run_by`); empty: any.
    #[serde(default, skip_serializing_if = "Programs::any")]
    pub programs: Programs,
}

impl HttpRule {
    /// A rule doing `action` with every request to `host`; narrow it with struct update
    /// syntax (`HttpRule { methods: …, ..HttpRule::new(…) }`).
    /// The name a rule written without `name` gets: `http.rule ORIGIN`.
    pub fn unnamed(origin: impl std::fmt::Display) -> String {
        format!("http.rule {origin}")
    }

    /// Whether the rule's name was written by the user (not [`HttpRule::unnamed`]).
    pub fn named(&self) -> bool {
        self.name != Self::unnamed(&self.origin)
    }

    /// A rule named `name` for requests to `host`, deciding `action`, with nothing else set.
    pub fn new(name: impl Into<String>, host: HostPattern, action: HttpAction) -> Self {
        HttpRule {
            name: name.into(),
            host,
            port: None,
            methods: Vec::new(),
            path: None,
            query: None,
            headers: Vec::new(),
            max_body: None,
            action,
            reason: None,
            origin: cordon_events::Origin::Derived(String::new()),
            expires: None,
            programs: Programs::default(),
        }
    }
}

/// HTTP-layer request policy: ordered rules and the default.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HttpPlan {
    /// Rules in merge order; the first match decides.
    pub rules: Vec<HttpRule>,
    /// What a request no rule matches gets, when its host and port are not in a
    /// `[[network.allow]]` rule either.
    pub default: HttpAction,
}

raw_table! {
    /// One `[[http.rule]]` as written.
    pub(crate) struct RawRule example "host = \"api.anthropic.com\" and action = \"allow\"" {
        /// Its name in events and refusals.
        name: String = "name = \"no-npm-publish\"",
        /// The hosts it is for: a name or glob.
        host: String [required] = "host = \"registry.npmjs.org\"",
        /// The port it is for (default: any).
        port: Integer = "port = 443",
        /// The methods it is for (default: any).
        methods: Strings = "methods = [\"PUT\", \"DELETE\"]",
        /// A glob over the path.
        path: String = "path = \"/-/*\"",
        /// A glob over the query string.
        query: String = "query = \"*write=true*\"",
        /// Globs over header values, by header name.
        headers: StringTable = "headers = { content-type = \"application/json*\" }",
        /// The largest declared body it matches, in bytes.
        max_body: Integer = "max_body = 1048576",
        /// What a matching request gets (`allow` forwards it; the others as for `default`);
        /// the first matching rule decides.
        action: Choice(HttpAction) [required] = "action = \"deny\"",
        /// Why, shown to the client when it refuses.
        reason: String = "reason = \"publishing is done from CI\"",
        /// When the rule ends, in RFC 3339 (`Z` or an offset; seconds optional). A session
        /// that starts after it runs without the rule; one that started before keeps it until
        /// it exits. Not with `for`.
        until: String = "until = \"2026-12-31T18:00Z\"",
        /// How long the rule lasts (`90m`, `2h`, `1d`), counted from this file's modification
        /// time: editing the file (or touching it) starts it again. Instead of `until`, not
        /// with it.
        r#for: String [shorthand] = "for = \"2h\"",
        /// Only for requests these programs send (see `[[network.allow]]`'s `programs`). A
        /// request whose process cannot be found meets only rules that refuse or ask.
        programs: Strings = "programs = [\"git\"]",
        /// Only for requests of processes one of these started.
        run_by: Strings = "run_by = [\"npm\"]",
    }
}

raw_table! {
    /// `[http]` as written.
    pub(crate) struct Raw example "default = \"deny\"" {
        /// What a request no rule matches gets: `deny` (a 403 that says why), `ask` a person,
        /// or `judge`, the LLM judge.
        default: Choice(HttpAction, "deny", "ask", "judge"),
        /// Request rules, in order.
        rule: Tables(RawRule),
    }
}

/// `[http]` of one layer, or merged.
#[derive(Debug, Clone, Default)]
pub(crate) struct Http {
    pub default: Scalar<HttpAction>,
    /// In file order, then merge order.
    pub rules: Vec<(HttpRule, Origin)>,
}

fn rule(
    cx: &Convert<'_>,
    entry: &serde_spanned::Spanned<RawRule>,
) -> Result<HttpRule, PolicyError> {
    let r = entry.get_ref();
    let origin = cx.origin(entry.span());
    let host = cx.host_glob(cx.required(&r.host, "host", "[[http.rule]]")?)?;
    let port = match &r.port {
        Some(p) => Some(cx.port(p, "port")?),
        None => None,
    };
    let mut methods = Vec::new();
    for m in &r.methods {
        let up = m.get_ref().trim().to_ascii_uppercase();
        if up.is_empty() || !up.bytes().all(|b| b.is_ascii_alphabetic() || b == b'-') {
            return Err(cx.diag(
                format!(
                    "invalid method {} in [[http.rule]]",
                    toml_string(m.get_ref())
                ),
                m.span(),
                "e.g. methods = [\"GET\", \"HEAD\"]",
            ));
        }
        methods.push(up);
    }
    let max_body = match &r.max_body {
        Some(v) => Some(cx.int_in(
            v,
            "max_body",
            0..=i64::MAX,
            "a size in bytes, e.g. max_body = 1048576",
        )?),
        None => None,
    };
    let name = match &r.name {
        Some(n) if !n.get_ref().trim().is_empty() => {
            let name = n.get_ref().trim();
            if reserved_name(name) {
                return Err(cx.diag(
                    format!(
                        "[[http.rule]] name {} reads as one of cordon's own rules in the log",
                        toml_string(name)
                    ),
                    n.span(),
                    "choose another name (cordon's own are e.g. `dlp`, `default`, `builtin:…`, `block:…`, and ` → ` marks a step)",
                ));
            }
            name.to_string()
        }
        _ => HttpRule::unnamed(&origin.label),
    };
    Ok(HttpRule {
        name,
        host,
        port,
        methods,
        path: r.path.as_ref().map(|p| p.get_ref().clone()),
        query: r.query.as_ref().map(|q| q.get_ref().clone()),
        headers: r
            .headers
            .iter()
            .map(|(k, v)| (k.get_ref().to_ascii_lowercase(), v.get_ref().clone()))
            .collect(),
        max_body,
        action: *cx.required(&r.action, "action", "[[http.rule]]")?.get_ref(),
        reason: r.reason.as_ref().map(|x| x.get_ref().clone()),
        expires: cx.ends(&r.until, &r.r#for, "[[http.rule]]")?,
        programs: cx.programs(&r.programs, &r.run_by)?,
        origin: origin.label.into(),
    })
}

impl Section for Http {
    type Raw = Raw;
    type Plan = HttpPlan;
    const SHAPE: Shape = Shape::Table(&Raw::TABLE);

    fn convert(raw: Raw, cx: &mut Convert<'_>) -> Result<Self, PolicyError> {
        let mut out = Http {
            default: raw.default.map(|d| (*d.get_ref(), cx.origin(d.span()))),
            rules: Vec::new(),
        };
        for entry in &raw.rule {
            out.rules.push((rule(cx, entry)?, cx.origin(entry.span())));
        }
        Ok(out)
    }

    fn merge(&mut self, later: &Self) {
        set_scalar(&mut self.default, &later.default);
        self.rules.extend(later.rules.iter().cloned());
    }

    fn loosen(full: &Sections, base: &Sections, out: &mut Loosen<'_>) {
        let (f, b) = (&full.http, &base.http);
        for (r, o) in &f.rules {
            if r.action != HttpAction::Deny && !b.rules.iter().any(|(x, _)| x == r) {
                out.add(
                    o,
                    format!("adds HTTP rule `{}` ({:?} {})", r.name, r.action, r.host),
                );
            }
        }
        if let Some((d, o)) = &f.default
            && *d != HttpAction::Deny
            && *d != value(&b.default)
        {
            out.add(o, format!("lets unmatched HTTP requests through {d:?}"));
        }
    }

    fn plan(self) -> HttpPlan {
        HttpPlan {
            rules: self.rules.into_iter().map(|(r, _)| r).collect(),
            default: value(&self.default),
        }
    }

    fn render(http: &HttpPlan, out: &mut Render) {
        out.header("http");
        out.line(
            "# Requests to 80/443: rules in order, then [[network.allow]] host and port, then this.",
        );
        out.string("default", &http.default.to_string());
        for r in &http.rules {
            out.entry("http.rule", &r.origin);
            out.string("name", &r.name);
            out.string("host", &r.host.to_string());
            if let Some(p) = r.port {
                out.line(format!("port = {p}"));
            }
            if !r.methods.is_empty() {
                out.strings("methods", &r.methods);
            }
            if let Some(p) = &r.path {
                out.string("path", p);
            }
            if let Some(q) = &r.query {
                out.string("query", q);
            }
            if !r.headers.is_empty() {
                let h: Vec<String> = r
                    .headers
                    .iter()
                    .map(|(k, v)| format!("{} = {}", toml_string(k), toml_string(v)))
                    .collect();
                out.line(format!("headers = {{ {} }}", h.join(", ")));
            }
            if let Some(m) = r.max_body {
                out.line(format!("max_body = {m}"));
            }
            out.string("action", &r.action.to_string());
            if let Some(reason) = &r.reason {
                out.string("reason", reason);
            }
            out.programs(&r.programs);
            out.until(r.expires);
        }
    }
}

/// Whether a rule named `name` would read back, in the audit log, as one of cordon's own
/// rules (`RuleId::parse`): a built-in name, a qualified one (`dlp:…`, `dns.rebinding:…`),
/// a blocklist entry (`builtin:…`, `block:…`), a network rule's label, or a step (` → `).
fn reserved_name(name: &str) -> bool {
    let head = name.split(':').next().unwrap_or(name);
    cordon_events::Builtin::from_name(name).is_some()
        || cordon_events::Builtin::from_name(head).is_some()
        || ["builtin:", "block:", "network.allow"]
            .iter()
            .any(|p| name.starts_with(p))
        || name.contains(" → ")
}
