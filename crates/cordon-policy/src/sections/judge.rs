//! `[judge]`: the LLM asked about requests a rule (or the default) sends to it (layer 3).

use serde_spanned::Spanned;

use crate::PolicyError;
use crate::schema::{Schema, Shape, toml_string};
use crate::sections::{Convert, Loosen, Origin, Render, Section, Sections};

crate::choice! {
    /// The judge's wire protocol.
    #[derive(Default)]
    pub enum JudgeApi {
        /// Anthropic's Messages API.
        #[default]
        Anthropic = "anthropic",
        /// OpenAI's Chat Completions API (and compatible servers).
        OpenAi = "openai",
    }
}

crate::choice! {
    /// What a request gets when the judge cannot answer (timeout, error, garbage).
    #[derive(Default)]
    pub enum JudgeOnError {
        /// Refuse it.
        #[default]
        Deny = "deny",
        /// Ask a person instead.
        Ask = "ask",
    }
}

/// `[judge]`: the LLM asked about requests a rule (or the default) sends to it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct JudgePlan {
    /// The policy, in plain English.
    pub policy: String,
    /// The wire protocol.
    pub api: JudgeApi,
    /// Base URL or full endpoint.
    pub url: String,
    /// Model name.
    pub model: String,
    /// Host environment variable holding the API key (read on the host only).
    pub credential: Option<String>,
    /// Per-question timeout.
    pub timeout_ms: u64,
    /// When the judge cannot answer.
    pub on_error: JudgeOnError,
    /// Largest body prefix shown to the model.
    pub max_body_bytes: u64,
    /// Where it came from.
    pub origin: cordon_events::Origin,
}

raw_table! {
    /// `[judge]` as written.
    pub(crate) struct Raw example "policy = \"…\", url = \"https://api.anthropic.com\" and model = \"claude-haiku-4-5\"" {
        /// What the judge allows, in plain English.
        policy: String [required, loosens] = "policy = \"Reading package registries is fine; uploads are not.\"",
        /// Its wire protocol: Anthropic's Messages API, or OpenAI's Chat Completions (and
        /// compatible servers).
        api: Choice(JudgeApi),
        /// Base URL or full endpoint.
        url: String [required] = "url = \"https://api.anthropic.com\"",
        /// The model asked.
        model: String [required] = "model = \"claude-haiku-4-5\"",
        /// The host variable holding its API key (read on the host only).
        credential: String = "credential = \"ANTHROPIC_API_KEY\"",
        /// How long one question may take, in milliseconds.
        timeout_ms: Integer = "timeout_ms = 8000",
        /// What a request gets when the judge cannot answer (timeout, error): `deny`, or `ask`
        /// a person.
        on_error: Choice(JudgeOnError),
        /// How much of a request's body the judge is shown, in bytes.
        max_body_bytes: Integer = "max_body_bytes = 16384",
    }
}

/// `[judge]` of one layer, or merged: a later layer's `[judge]` replaces the whole section.
#[derive(Debug, Clone, Default)]
pub(crate) struct Judge(pub Option<(JudgePlan, Origin)>);

fn text(
    cx: &Convert<'_>,
    v: &Option<Spanned<String>>,
    key: &str,
    example: &str,
) -> Result<String, PolicyError> {
    v.as_ref()
        .map(|s| s.get_ref().trim().to_string())
        .filter(|s| !s.is_empty())
        .ok_or_else(|| {
            cx.missing(
                format!("[judge] has no `{key}`"),
                format!("e.g. {key} = {example}"),
            )
        })
}

impl Section for Judge {
    type Raw = Option<Raw>;
    type Plan = Option<JudgePlan>;
    const SHAPE: Shape = Shape::Table(&Raw::TABLE);

    fn convert(raw: Option<Raw>, cx: &mut Convert<'_>) -> Result<Self, PolicyError> {
        let Some(j) = raw else {
            return Ok(Judge(None));
        };
        let at = j
            .url
            .as_ref()
            .or(j.policy.as_ref())
            .or(j.model.as_ref())
            .map_or(0..0, |s| s.span());
        let origin = cx.origin(at);
        let policy = text(
            cx,
            &j.policy,
            "policy",
            "\"Reading package registries is fine; uploads are not.\"",
        )?;
        let url = text(cx, &j.url, "url", "\"https://api.anthropic.com\"")?;
        let model = text(cx, &j.model, "model", "\"claude-haiku-4-5\"")?;
        if let Some(u) = &j.url
            && !(u.get_ref().starts_with("https://") || u.get_ref().starts_with("http://"))
        {
            return Err(cx.diag(
                format!("invalid judge url {}", toml_string(u.get_ref())),
                u.span(),
                "an http:// or https:// URL, e.g. \"https://api.anthropic.com\"",
            ));
        }
        let timeout_ms = match &j.timeout_ms {
            Some(t) => cx.int_in(
                t,
                "timeout_ms",
                100..=120_000,
                "from 100 to 120000, e.g. timeout_ms = 8000",
            )?,
            None => 8000,
        };
        let max_body_bytes = match &j.max_body_bytes {
            Some(t) => cx.int_in(
                t,
                "max_body_bytes",
                0..=1 << 20,
                "from 0 to 1048576, e.g. max_body_bytes = 16384",
            )?,
            None => 16 << 10,
        };
        Ok(Judge(Some((
            JudgePlan {
                policy,
                api: j.api.map(|a| *a.get_ref()).unwrap_or_default(),
                url,
                model,
                credential: j.credential.map(|c| c.get_ref().trim().to_string()),
                timeout_ms,
                on_error: j.on_error.map(|a| *a.get_ref()).unwrap_or_default(),
                max_body_bytes,
                origin: origin.label.as_str().into(),
            },
            origin,
        ))))
    }

    fn merge(&mut self, later: &Self) {
        if later.0.is_some() {
            self.0.clone_from(&later.0);
        }
    }

    fn loosen(full: &Sections, base: &Sections, out: &mut Loosen<'_>) {
        // The judge decides what rules leave to it: who it is and what it is told is loosening.
        if let Some((j, o)) = &full.judge.0
            && base.judge.0.as_ref().map(|(b, _)| b) != Some(j)
        {
            out.add(o, format!("sets the LLM judge ({} at {})", j.model, j.url));
        }
    }

    fn plan(self) -> Option<JudgePlan> {
        self.0.map(|(j, _)| j)
    }

    fn render(judge: &Option<JudgePlan>, out: &mut Render) {
        let Some(j) = judge else {
            out.line("\n# [judge]: none; rules that send requests to it deny them");
            return;
        };
        out.line(format!(
            "\n[judge] # {}",
            crate::sections::comment(&j.origin.to_string())
        ));
        out.string("policy", &j.policy);
        out.string("api", &j.api.to_string());
        out.string("url", &j.url);
        out.string("model", &j.model);
        if let Some(c) = &j.credential {
            out.string("credential", c);
        }
        out.line(format!("timeout_ms = {}", j.timeout_ms));
        out.string("on_error", &j.on_error.to_string());
        out.line(format!("max_body_bytes = {}", j.max_body_bytes));
    }
}
