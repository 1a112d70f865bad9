//! `[dlp]`: outbound secret scanning of every inspected request's URL, headers and body
//! prefix (layer 3).

use crate::PolicyError;
use crate::error::did_you_mean;
use crate::pattern::HostPattern;
use crate::schema::{Schema, Shape, quoted_choices, toml_string};
use crate::sections::{
    Convert, Loosen, Origin, Render, Scalar, Section, Sections, set_scalar, value,
};

/// The kinds of secret the scanner knows by shape (`[[dlp.allow]] kinds`); `known:NAME` names
/// a secret known by value.
pub const DLP_KINDS: &[&str] = &[
    "aws-access-key",
    "github-token",
    "gitlab-token",
    "slack-token",
    "stripe-key",
    "anthropic-key",
    "openai-key",
    "private-key",
    "jwt",
];

crate::choice! {
    /// What a request carrying a secret gets.
    #[derive(Default)]
    pub enum DlpAction {
        /// Refused (403) with a redacted event.
        #[default]
        Deny = "deny",
        /// A person decides (refused when nobody can be asked).
        Ask = "ask",
        /// Forwarded, with a redacted event.
        Log = "log",
        /// No scanning at all (an explicit opt-out).
        Off = "off",
    }
}

/// `[dlp]`: outbound secret scanning.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DlpPlan {
    /// What a finding does.
    pub action: DlpAction,
    /// How much of each body is scanned.
    pub max_body_bytes: u64,
    /// Kinds of secret that may go to some hosts (beyond each token's own issuer).
    pub allow: Vec<DlpAllow>,
}

const DEFAULT_MAX_BODY: u64 = 64 << 10;

impl Default for DlpPlan {
    fn default() -> Self {
        Self {
            action: DlpAction::Deny,
            max_body_bytes: DEFAULT_MAX_BODY,
            allow: Vec::new(),
        }
    }
}

/// `[[dlp.allow]]`: these kinds may go to these hosts.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DlpAllow {
    /// Finding kinds (`jwt`, `github-token`, `known:NAME`, …; `*` for all).
    pub kinds: Vec<String>,
    /// The hosts they may go to.
    pub hosts: Vec<HostPattern>,
    /// Where it came from.
    pub origin: cordon_events::Origin,
}

raw_table! {
    /// One `[[dlp.allow]]` as written.
    pub(crate) struct RawAllow example "kinds = [\"jwt\"] and hosts = [\"auth.example.com\"]" {
        /// Kinds of secret (`jwt`, `github-token`, `known:NAME`, …; `*` for all).
        kinds: Strings [required, loosens] = "kinds = [\"jwt\"]",
        /// The hosts they may go to.
        hosts: Strings [required] = "hosts = [\"auth.example.com\"]",
    }
}

raw_table! {
    /// `[dlp]` as written.
    pub(crate) struct Raw example "action = \"deny\"" {
        /// What a request carrying a secret gets: `deny` (a 403, the event redacted), `ask` a
        /// person, `log` (forwarded, the event redacted), or `off` (no scanning).
        action: Choice(DlpAction),
        /// How much of each request body is scanned, in bytes.
        max_body_bytes: Integer = "max_body_bytes = 262144",
        /// Kinds of secret that may go to some hosts (beyond each token's own issuer).
        allow: Tables(RawAllow),
    }
}

/// `[dlp]` of one layer, or merged.
#[derive(Debug, Clone, Default)]
pub(crate) struct Dlp {
    pub action: Scalar<DlpAction>,
    pub max_body: Scalar<u64>,
    pub allow: Vec<(DlpAllow, Origin)>,
}

fn kind(cx: &Convert<'_>, k: &serde_spanned::Spanned<String>) -> Result<String, PolicyError> {
    // `known:NAME` keeps its case: it names a variable or a credential.
    let raw = k.get_ref().trim();
    let kind = match raw.split_once(':') {
        Some((p, n)) if p.eq_ignore_ascii_case("known") => format!("known:{n}"),
        _ => raw.to_ascii_lowercase(),
    };
    let known = kind == "*"
        || kind.strip_prefix("known:").is_some_and(|n| !n.is_empty())
        || DLP_KINDS.contains(&kind.as_str());
    if known {
        return Ok(kind);
    }
    let mut help = format!(
        "expected \"*\", \"known:NAME\" or one of {}",
        quoted_choices(DLP_KINDS)
    );
    if let Some(s) = did_you_mean(&kind, DLP_KINDS) {
        help.push_str(&format!("; did you mean \"{s}\"?"));
    }
    Err(cx.diag(
        format!("unknown secret kind {}", toml_string(k.get_ref())),
        k.span(),
        help,
    ))
}

fn same(a: &DlpAllow, b: &DlpAllow) -> bool {
    a.kinds == b.kinds && a.hosts == b.hosts
}

impl Section for Dlp {
    type Raw = Raw;
    type Plan = DlpPlan;
    const SHAPE: Shape = Shape::Table(&Raw::TABLE);

    fn convert(raw: Raw, cx: &mut Convert<'_>) -> Result<Self, PolicyError> {
        let mut out = Dlp {
            action: raw.action.map(|a| (*a.get_ref(), cx.origin(a.span()))),
            ..Default::default()
        };
        if let Some(t) = &raw.max_body_bytes {
            let n = cx.int_in(
                t,
                "max_body_bytes",
                0..=16 << 20,
                "from 0 to 16777216, e.g. max_body_bytes = 65536",
            )?;
            out.max_body = Some((n, cx.origin(t.span())));
        }
        for a in &raw.allow {
            let e = a.get_ref();
            let origin = cx.origin(a.span());
            if e.kinds.is_empty() || e.hosts.is_empty() {
                return Err(cx.diag(
                    "a [[dlp.allow]] entry needs at least one kind and one host".to_string(),
                    a.span(),
                    "e.g. kinds = [\"jwt\"] and hosts = [\"auth.example.com\"]",
                ));
            }
            let kinds = e
                .kinds
                .iter()
                .map(|k| kind(cx, k))
                .collect::<Result<_, _>>()?;
            let hosts = e
                .hosts
                .iter()
                .map(|h| cx.host_glob(h))
                .collect::<Result<_, _>>()?;
            out.allow.push((
                DlpAllow {
                    kinds,
                    hosts,
                    origin: origin.label.as_str().into(),
                },
                origin,
            ));
        }
        Ok(out)
    }

    fn merge(&mut self, later: &Self) {
        set_scalar(&mut self.action, &later.action);
        set_scalar(&mut self.max_body, &later.max_body);
        for (a, o) in &later.allow {
            if !self.allow.iter().any(|(x, _)| same(x, a)) {
                self.allow.push((a.clone(), o.clone()));
            }
        }
    }

    fn loosen(full: &Sections, base: &Sections, out: &mut Loosen<'_>) {
        // A weaker action, a shorter scanned prefix or a new exemption lets a secret out that
        // the base policy would have stopped.
        let (f, b) = (&full.dlp, &base.dlp);
        if let Some((a, o)) = &f.action
            && *a != DlpAction::Deny
            && *a != value(&b.action)
        {
            out.add(
                o,
                format!("lets requests carrying secrets through ([dlp] action = {a:?})"),
            );
        }
        let base_max = b.max_body.as_ref().map_or(DEFAULT_MAX_BODY, |m| m.0);
        if let Some((n, o)) = &f.max_body
            && *n < base_max
        {
            out.add(
                o,
                format!("scans only the first {n} bytes of request bodies for secrets"),
            );
        }
        for (a, o) in &f.allow {
            if !b.allow.iter().any(|(x, _)| same(x, a)) {
                let hosts: Vec<String> = a.hosts.iter().map(ToString::to_string).collect();
                out.add(
                    o,
                    format!("lets secrets of kinds {:?} go to {hosts:?}", a.kinds),
                );
            }
        }
    }

    fn plan(self) -> DlpPlan {
        DlpPlan {
            action: value(&self.action),
            max_body_bytes: self.max_body.map_or(DEFAULT_MAX_BODY, |m| m.0),
            allow: self.allow.into_iter().map(|(a, _)| a).collect(),
        }
    }

    fn render(dlp: &DlpPlan, out: &mut Render) {
        out.header("dlp");
        out.line(
            "# Secrets (token shapes, credentials' and secret-looking host variables' values) in a request's URL, headers or body prefix.",
        );
        out.string("action", &dlp.action.to_string());
        out.line(format!("max_body_bytes = {}", dlp.max_body_bytes));
        for a in &dlp.allow {
            out.entry("dlp.allow", &a.origin);
            out.strings("kinds", &a.kinds);
            let h: Vec<String> = a.hosts.iter().map(ToString::to_string).collect();
            out.strings("hosts", &h);
        }
    }
}
