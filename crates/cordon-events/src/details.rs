//! Typed `detail` entries: the facts readers decide on, each written and read through one
//! type so that no reader matches an event's words. On disk they are plain JSON values under
//! their keys, as before.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::verdict::{RuleId, Step};
use crate::{Event, LEARN, NewEvent};

/// What a learning run let through would have got from the policy: the value of
/// [`LEARN`](crate::LEARN) (`would deny`, `would ask`, `would judge`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Learned {
    /// Refused.
    #[serde(rename = "would deny")]
    WouldDeny,
    /// A person would have been asked.
    #[serde(rename = "would ask")]
    WouldAsk,
    /// The LLM judge would have been asked.
    #[serde(rename = "would judge")]
    WouldJudge,
}

impl Learned {
    /// The value in the log (`would deny`).
    pub fn as_str(self) -> &'static str {
        match self {
            Learned::WouldDeny => "would deny",
            Learned::WouldAsk => "would ask",
            Learned::WouldJudge => "would judge",
        }
    }
}

impl From<Learned> for Value {
    fn from(l: Learned) -> Value {
        Value::String(l.as_str().to_owned())
    }
}

/// The detail key of a `degraded` event's [`Shortfall`].
pub const SHORTFALL: &str = "shortfall";

/// What a `degraded` network or HTTP layer lacks, under [`SHORTFALL`]: what the exit
/// summary shows, decided by this value rather than by the event's reason.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum Shortfall {
    /// `[network] mode = "host"`: the host's network, no egress policy.
    HostNetwork,
    /// No TUN device: only programs that honour `HTTP_PROXY` have a network.
    ProxyOnly,
    /// No HTTPS inspection (no CA): HTTP(S) decided by host and port only.
    NoInspection,
    /// The judge's credential is not set: the judge is asked without a key.
    NoJudgeKey,
}

impl NewEvent {
    /// Records what the degraded layer lacks ([`SHORTFALL`]).
    pub fn shortfall(self, s: Shortfall) -> Self {
        let v = serde_json::to_value(s).unwrap_or(Value::Null);
        self.detail(SHORTFALL, v)
    }

    /// Records what a learning run let through would have got ([`LEARN`]).
    pub fn learned(self, l: Learned) -> Self {
        self.detail(LEARN, l)
    }
}

impl Event {
    /// The rule that decided, typed (`None`: none did).
    pub fn rule_id(&self) -> Option<RuleId> {
        self.rule.as_deref().map(RuleId::parse)
    }

    /// What a learning run let through would have got, if this is such an event. `Some`
    /// of an unknown value is taken as a refusal, the policy's strictest answer.
    pub fn learned(&self) -> Option<Learned> {
        let v = self.detail.get(LEARN)?;
        Some(serde_json::from_value(v.clone()).unwrap_or(Learned::WouldDeny))
    }

    /// What a degraded layer lacks, when the event says ([`SHORTFALL`]).
    pub fn shortfall(&self) -> Option<Shortfall> {
        serde_json::from_value(self.detail.get(SHORTFALL)?.clone()).ok()
    }

    /// Whether the LLM judge was asked about this HTTP request: its final event carries
    /// [`JUDGE_CALL`](crate::JUDGE_CALL); logs older than that field name the judge as a step
    /// of the deciding rule (`r → judge`).
    pub fn judged(&self) -> bool {
        self.detail.contains_key(crate::JUDGE_CALL)
            || self
                .rule_id()
                .is_some_and(|r| r.steps().contains(&Step::Judge))
    }
}
