//! Rules that end: `until = "…"` or `for = "2h"` on a `[[network.allow]]`, `[[http.rule]]`
//! or `[[exec.rule]]`, read with located errors (`Convert::ends`). The plan holds each rule's
//! end as an [`Expiry`]; [`Plan::expire`] takes out what has ended by a given time, which a
//! session does once, when it starts. The time is always an argument here, never read from
//! the clock, so tests fix it.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_spanned::Spanned;

use crate::PolicyError;
use crate::plan::{ExecAction, ExecRule, HostRule, HttpAction, HttpRule, Plan};
use crate::schema::toml_string;
use crate::sections::Convert;

/// The moment a rule ends, in UTC, to the second. In the plan (and `cordon check --json`) an
/// RFC 3339 string: `"2026-12-31T18:00:00Z"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Expiry(i64);

/// Why a time or a duration cannot be a rule's end.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimeError {
    /// Not `YYYY-MM-DDTHH:MM` with optional seconds and a zone.
    #[error("it is not a date and time (YYYY-MM-DDTHH:MM, seconds optional, then a zone)")]
    Form,
    /// No `Z` and no offset: the time would mean a different moment on every host.
    #[error("it has no time zone")]
    NoZone,
    /// A field past its range (month 13, 25 o'clock, February 30…).
    #[error("the {0} is out of range")]
    Range(&'static str),
    /// Outside the years 0000 to 9999, which RFC 3339 can write.
    #[error("it is outside the years 0000 to 9999")]
    Years,
    /// Not a duration `humantime` reads.
    #[error("{0}")]
    Duration(String),
    /// A zero duration would end the rule when the file was written.
    #[error("a rule that lasts no time would never apply")]
    Zero,
}

/// 0000-01-01T00:00:00Z and 9999-12-31T23:59:59Z in seconds since the epoch: what RFC 3339
/// can write.
const FIRST: i64 = -62_167_219_200;
const LAST: i64 = 253_402_300_799;

impl Expiry {
    /// The moment `secs` seconds after 1970-01-01T00:00:00Z.
    pub const fn from_unix(secs: i64) -> Self {
        Expiry(secs)
    }

    /// Seconds since 1970-01-01T00:00:00Z.
    pub const fn unix(self) -> i64 {
        self.0
    }

    /// `t`, to the second below.
    pub fn at(t: SystemTime) -> Self {
        Expiry(unix_floor(t))
    }

    /// An RFC 3339 date and time: `2026-12-31T18:00Z`, `2026-12-31T18:00:00Z`,
    /// `2026-12-31T19:00:00+01:00` (a fraction of a second is dropped).
    pub fn parse(text: &str) -> Result<Self, TimeError> {
        let b = text.trim().as_bytes();
        let num = |at: usize, len: usize| -> Result<i64, TimeError> {
            let digits = b.get(at..at + len).ok_or(TimeError::Form)?;
            if !digits.iter().all(u8::is_ascii_digit) {
                return Err(TimeError::Form);
            }
            Ok(digits.iter().fold(0, |n, d| n * 10 + i64::from(d - b'0')))
        };
        let punct = |at: usize, want: &[u8]| b.get(at).is_some_and(|c| want.contains(c));
        let (year, month, day) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
        if !punct(4, b"-") || !punct(7, b"-") || !punct(10, b"Tt ") || !punct(13, b":") {
            return Err(TimeError::Form);
        }
        let (hour, minute) = (num(11, 2)?, num(14, 2)?);
        let mut at = 16;
        let mut second = 0;
        if punct(at, b":") {
            second = num(at + 1, 2)?;
            at += 3;
            if punct(at, b".") {
                at += 1;
                let digits = b[at..].iter().take_while(|c| c.is_ascii_digit()).count();
                if digits == 0 {
                    return Err(TimeError::Form);
                }
                at += digits;
            }
        }
        let offset = match b.get(at..) {
            Some([]) => return Err(TimeError::NoZone),
            Some([b'Z' | b'z']) => 0,
            Some([sign @ (b'+' | b'-'), _, _, b':', _, _]) => {
                let (h, m) = (num(at + 1, 2)?, num(at + 4, 2)?);
                if h > 23 || m > 59 {
                    return Err(TimeError::Range("offset"));
                }
                let secs = h * 3600 + m * 60;
                if *sign == b'-' { -secs } else { secs }
            }
            _ => return Err(TimeError::Form),
        };
        if !(1..=12).contains(&month) {
            return Err(TimeError::Range("month"));
        }
        if day < 1 || day > days_in_month(year, month) {
            return Err(TimeError::Range("day"));
        }
        for (v, max, what) in [
            (hour, 23, "hour"),
            (minute, 59, "minute"),
            (second, 60, "second"),
        ] {
            if v > max {
                return Err(TimeError::Range(what));
            }
        }
        let secs = days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second
            - offset;
        if !(FIRST..=LAST).contains(&secs) {
            return Err(TimeError::Years);
        }
        Ok(Expiry(secs))
    }

    /// A humantime duration (`90m`, `2h`, `1d`, `1h 30m`) from `start`; a part of a second
    /// counts as a whole one.
    pub fn after_text(start: SystemTime, text: &str) -> Result<Self, TimeError> {
        let d = humantime::parse_duration(text.trim())
            .map_err(|e| TimeError::Duration(e.to_string()))?;
        Self::after(start, d)
    }

    /// `d` from `start`.
    pub fn after(start: SystemTime, d: Duration) -> Result<Self, TimeError> {
        if d.is_zero() {
            return Err(TimeError::Zero);
        }
        let secs = d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0));
        let end = i64::try_from(secs)
            .ok()
            .and_then(|s| unix_floor(start).checked_add(s))
            .filter(|e| *e <= LAST)
            .ok_or(TimeError::Years)?;
        Ok(Expiry(end))
    }

    /// Whether the rule has ended by `now`: it ends at this second, not after it.
    pub fn has_passed(self, now: SystemTime) -> bool {
        self.0 <= unix_floor(now)
    }

    /// The time left at `now`, in words: `1 h 12 min left`, `40 s left`, `expired 3 min ago`.
    pub fn left(self, now: SystemTime) -> String {
        match self.0.saturating_sub(unix_floor(now)) {
            d if d > 0 => format!("{} left", span(d)),
            d => format!("expired {}", ago(d.saturating_neg())),
        }
    }

    /// How long ago it ended at `now`, in words (`3 min ago`, `just now`); for one that has
    /// not, [`Expiry::left`].
    pub fn ago(self, now: SystemTime) -> String {
        match unix_floor(now).saturating_sub(self.0) {
            d if d >= 0 => ago(d),
            _ => self.left(now),
        }
    }
}

fn ago(secs: i64) -> String {
    match secs {
        0 => "just now".to_string(),
        s => format!("{} ago", span(s)),
    }
}

/// A positive number of seconds in words: the largest unit and the next, when it is not zero.
fn span(secs: i64) -> String {
    let two = |a: i64, ua: &str, b: i64, ub: &str| match b {
        0 => format!("{a} {ua}"),
        _ => format!("{a} {ua} {b} {ub}"),
    };
    match secs {
        s if s < 60 => format!("{s} s"),
        s if s < 3600 => format!("{} min", s / 60),
        s if s < 86_400 => two(s / 3600, "h", s % 3600 / 60, "min"),
        s => two(s / 86_400, "d", s % 86_400 / 3600, "h"),
    }
}

/// Seconds since the epoch, rounded down (before the epoch too).
fn unix_floor(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(e) => {
            let d = e.duration();
            let secs = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
            -secs - i64::from(d.subsec_nanos() > 0)
        }
    }
}

fn is_leap(y: i64) -> bool {
    y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let (era, yoe) = (y.div_euclid(400), y.rem_euclid(400));
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day since 1970-01-01: the inverse of [`days_from_civil`].
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let (era, doe) = (z.div_euclid(146_097), z.rem_euclid(146_097));
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

impl fmt::Display for Expiry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (days, secs) = (self.0.div_euclid(86_400), self.0.rem_euclid(86_400));
        let (y, m, d) = civil_from_days(days);
        write!(
            f,
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
            secs / 3600,
            secs % 3600 / 60,
            secs % 60
        )
    }
}

impl FromStr for Expiry {
    type Err = TimeError;
    fn from_str(s: &str) -> Result<Self, TimeError> {
        Expiry::parse(s)
    }
}

impl Serialize for Expiry {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Expiry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Expiry::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// Whether a rule ending at `later` ends no earlier than one ending at `first` (`None`: it
/// never ends). An untrusted file's rule that outlasts the trusted one it repeats loosens.
pub(crate) fn outlasts(first: Option<Expiry>, later: Option<Expiry>) -> bool {
    match (first, later) {
        (_, None) => true,
        (None, Some(_)) => false,
        (Some(a), Some(b)) => b >= a,
    }
}

impl Convert<'_> {
    /// When a rule ends, from its `until` or its `for` (at most one), `None` when it does not.
    pub(crate) fn ends(
        &self,
        until: &Option<Spanned<String>>,
        r#for: &Option<Spanned<String>>,
        table: &str,
    ) -> Result<Option<Expiry>, PolicyError> {
        match (until, r#for) {
            (Some(_), Some(f)) => Err(self.diag(
                format!("{table} has both `until` and `for`"),
                f.span(),
                "a rule ends once: keep `until` (a date and time) or `for` (a duration from when this file was last written), not both",
            )),
            (Some(u), None) => Expiry::parse(u.get_ref()).map(Some).map_err(|e| {
                let help = match e {
                    TimeError::NoZone => "add `Z` for UTC or the offset from it: until = \"2026-12-31T18:00Z\" or \"2026-12-31T19:00+01:00\"",
                    _ => "write a date and time in RFC 3339 with `Z` for UTC or an offset, seconds optional: until = \"2026-12-31T18:00Z\" or \"2026-12-31T19:00:00+01:00\"",
                };
                self.diag(
                    format!("invalid `until` {} in {table}: {e}", toml_string(u.get_ref())),
                    u.span(),
                    help,
                )
            }),
            (None, Some(f)) => {
                let Some(written) = self.written else {
                    return Err(self.diag(
                        format!("`for` in {table} counts from when the policy file was written, which is not known here"),
                        f.span(),
                        "write when it ends instead: until = \"2026-12-31T18:00Z\"",
                    ));
                };
                Expiry::after_text(written, f.get_ref()).map(Some).map_err(|e| {
                    self.diag(
                        format!("invalid `for` {} in {table}: {e}", toml_string(f.get_ref())),
                        f.span(),
                        "a duration from when this file was last written, e.g. for = \"90m\", \"2h\", \"1d\" or \"1h 30m\"",
                    )
                })
            }
            (None, None) => Ok(None),
        }
    }
}

/// Which kind of rule ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum GrantKind {
    /// A `[[network.allow]]`.
    #[serde(rename = "network.allow")]
    NetworkAllow,
    /// An `[[http.rule]]`.
    #[serde(rename = "http.rule")]
    HttpRule,
    /// An `[[exec.rule]]`.
    #[serde(rename = "exec.rule")]
    ExecRule,
    /// An `[[mcp.rule]]`.
    #[serde(rename = "mcp.rule")]
    McpRule,
}

impl fmt::Display for GrantKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GrantKind::NetworkAllow => "network.allow",
            GrantKind::HttpRule => "http.rule",
            GrantKind::ExecRule => "exec.rule",
            GrantKind::McpRule => "mcp.rule",
        })
    }
}

/// A rule [`Plan::expire`] took out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExpiredGrant {
    /// Its kind.
    pub kind: GrantKind,
    /// Whether it allowed (a grant), rather than denied or asked.
    pub allowed: bool,
    /// What it did, in words: `connections to example.com on port 443`.
    pub what: String,
    /// Where it was written (`FILE:LINE`).
    pub origin: cordon_events::Origin,
    /// When it ended.
    pub ended: Expiry,
}

impl ExpiredGrant {
    /// `grant` for a rule that allowed, `rule` for one that denied or asked.
    pub fn noun(&self) -> &'static str {
        if self.allowed { "grant" } else { "rule" }
    }

    /// `expired grant ignored: WHAT (KIND, FILE:LINE, ended TIME, 3 min ago)`.
    pub fn line(&self, now: SystemTime) -> String {
        format!(
            "expired {} ignored: {} ({}, {}, ended {}, {})",
            self.noun(),
            self.what,
            self.kind,
            self.origin,
            self.ended,
            self.ended.ago(now)
        )
    }

    fn network(r: &HostRule, ended: Expiry) -> Self {
        let ports: Vec<String> = r.ports.iter().map(u16::to_string).collect();
        let s = if ports.len() == 1 { "" } else { "s" };
        ExpiredGrant {
            kind: GrantKind::NetworkAllow,
            allowed: true,
            what: format!("connections to {} on port{s} {}", r.host, ports.join(", ")),
            origin: r.origin.clone(),
            ended,
        }
    }

    fn http(r: &HttpRule, ended: Expiry) -> Self {
        let verb = match r.action {
            HttpAction::Allow => "",
            HttpAction::Deny => "refusing ",
            HttpAction::Ask => "asking before ",
            HttpAction::Judge => "judging ",
        };
        let methods = match r.methods.is_empty() {
            true => String::new(),
            false => format!("{} ", r.methods.join(", ")),
        };
        let port = r.port.map(|p| format!(":{p}")).unwrap_or_default();
        let path = r.path.as_deref().unwrap_or("");
        let named = match r.named() {
            true => format!("`{}`: ", r.name),
            false => String::new(),
        };
        ExpiredGrant {
            kind: GrantKind::HttpRule,
            allowed: r.action == HttpAction::Allow,
            what: format!("{named}{verb}{methods}requests to {}{port}{path}", r.host),
            origin: r.origin.clone(),
            ended,
        }
    }

    fn mcp(r: &crate::sections::mcp::McpRule, ended: Expiry) -> Self {
        use crate::sections::mcp::McpAction;
        let verb = match r.action {
            McpAction::Allow => "calling",
            McpAction::Deny => "refusing",
            McpAction::Ask => "asking before",
            McpAction::Judge => "judging",
        };
        ExpiredGrant {
            kind: GrantKind::McpRule,
            allowed: r.action == McpAction::Allow,
            what: format!(
                "{verb} MCP tool {} on {}",
                r.tool.as_deref().unwrap_or("*"),
                r.server
            ),
            origin: r.origin.clone(),
            ended,
        }
    }

    fn exec(r: &ExecRule, ended: Expiry) -> Self {
        let verb = match r.action {
            ExecAction::Allow => "running",
            ExecAction::Deny => "refusing",
            ExecAction::Ask => "asking before",
        };
        ExpiredGrant {
            kind: GrantKind::ExecRule,
            allowed: r.action == ExecAction::Allow,
            what: format!("{verb} `{}`", r.pattern),
            origin: r.origin.clone(),
            ended,
        }
    }
}

/// Keeps the items of `v` that have not ended by `now`; the others go to `gone`, described.
fn take_ended<T>(
    v: &mut Vec<T>,
    now: SystemTime,
    ends: impl Fn(&T) -> Option<Expiry>,
    describe: impl Fn(&T, Expiry) -> ExpiredGrant,
    gone: &mut Vec<ExpiredGrant>,
) {
    v.retain(|r| match ends(r).filter(|e| e.has_passed(now)) {
        Some(e) => {
            gone.push(describe(r, e));
            false
        }
        None => true,
    });
}

impl Plan {
    /// Takes out every rule whose end is at or before `now` and says what went, in plan
    /// order. A session applies it once, when it starts: a rule that ends while it runs holds
    /// until it exits.
    pub fn expire(&mut self, now: SystemTime) -> Vec<ExpiredGrant> {
        let mut gone = Vec::new();
        let allow = &mut self.network.allow;
        take_ended(allow, now, |r| r.expires, ExpiredGrant::network, &mut gone);
        let rules = &mut self.http.rules;
        take_ended(rules, now, |r| r.expires, ExpiredGrant::http, &mut gone);
        let rules = &mut self.exec.rules;
        take_ended(rules, now, |r| r.expires, ExpiredGrant::exec, &mut gone);
        let rules = &mut self.mcp.rules;
        take_ended(rules, now, |r| r.expires, ExpiredGrant::mcp, &mut gone);
        gone
    }
}

#[cfg(test)]
#[path = "expiry_tests.rs"]
mod tests;
