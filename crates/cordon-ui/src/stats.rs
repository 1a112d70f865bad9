//! A session's numbers, folded from its events one at a time: requests by host and decision,
//! bytes, judge calls and their latency, and a timeline of decisions.

use std::collections::BTreeMap;

use cordon_events::{Action, Event, Layer};
use serde::Serialize;

/// Width of one timeline bucket, seconds.
pub const BUCKET_SECS: u64 = 5;
/// Most buckets kept: the newest win (about 40 minutes at 5 s).
const MAX_BUCKETS: usize = 480;

#[derive(Debug, Default, Clone, Serialize, PartialEq, Eq)]
pub struct HostRow {
    pub host: String,
    pub allow: u64,
    pub deny: u64,
    pub ask: u64,
    pub bytes_up: u64,
    pub bytes_down: u64,
}

#[derive(Debug, Default, Clone, Serialize)]
pub struct Stats {
    /// Per host: HTTP requests and network connections, by decision, and their bytes.
    pub hosts: Vec<HostRow>,
    /// Bytes on every path: connections the gateway relayed, and requests the HTTP layer
    /// forwarded (whose connections the gateway hands over uncounted).
    pub bytes_up: u64,
    pub bytes_down: u64,
    pub judge_calls: u64,
    /// Mean and slowest judge-decided request, milliseconds.
    pub judge_ms_mean: Option<u64>,
    pub judge_ms_max: Option<u64>,
    pub exec_allow: u64,
    pub exec_deny: u64,
    pub dns_allow: u64,
    pub dns_deny: u64,
    /// `[seconds since the session's first event, allow, deny, ask]` per bucket.
    pub timeline: Vec<[u64; 4]>,
    pub bucket_secs: u64,
}

/// Folds events into [`Stats`].
#[derive(Debug, Default)]
pub struct Fold {
    hosts: BTreeMap<String, HostRow>,
    bytes_up: u64,
    bytes_down: u64,
    judge_calls: u64,
    judge_ms_total: u64,
    judge_ms_max: Option<u64>,
    exec_allow: u64,
    exec_deny: u64,
    dns_allow: u64,
    dns_deny: u64,
    start_ms: Option<u64>,
    buckets: BTreeMap<u64, [u64; 3]>,
}

/// Milliseconds since the epoch of an RFC 3339 time; `None` when it does not parse.
fn millis(time: &str) -> Option<u64> {
    let t = humantime::parse_rfc3339(time).ok()?;
    let d = t.duration_since(std::time::UNIX_EPOCH).ok()?;
    u64::try_from(d.as_millis()).ok()
}

/// The host of an absolute URL (`https://h:443/p` → `h:443`).
fn url_host(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let host = &rest[..end];
    // Drop any userinfo: it is not the host (and could be a secret).
    Some(host.rsplit_once('@').map_or(host, |(_, h)| h))
}

impl Fold {
    pub fn take(&mut self, e: &Event) {
        let at = millis(&e.time);
        if self.start_ms.is_none() {
            self.start_ms = at;
        }
        let decision = match e.action {
            Action::Allow => Some(0),
            Action::Deny => Some(1),
            Action::Ask => Some(2),
            _ => None,
        };
        let u = |k: &str| e.detail.get(k).and_then(serde_json::Value::as_u64);
        // A connection's bytes come with its closing event, a request's with its final one.
        let bytes = (u("bytes_up").unwrap_or(0), u("bytes_down").unwrap_or(0));
        let mut counted = false;
        match e.layer {
            Layer::Http => {
                self.bytes_up += bytes.0;
                self.bytes_down += bytes.1;
                // A judged request's final event carries `judge_call` (verdict, the judge's own
                // latency); older logs only name the judge as a step of the deciding rule.
                let call = e.detail.get(cordon_events::JUDGE_CALL);
                let judged = call.is_some()
                    || (matches!(e.action, Action::Allow | Action::Deny) && e.judged());
                if judged {
                    self.judge_calls += 1;
                    let ms = match call {
                        Some(c) => c.get("latency_ms").and_then(serde_json::Value::as_u64),
                        None => u("latency_ms"),
                    };
                    if let Some(ms) = ms {
                        self.judge_ms_total += ms;
                        self.judge_ms_max = Some(self.judge_ms_max.map_or(ms, |m| m.max(ms)));
                    }
                }
                if let (Some(d), Some(host)) = (decision, e.detail_str("url").and_then(url_host)) {
                    self.count_host(host, d, bytes);
                    counted = true;
                }
            }
            Layer::Network => {
                // The gateway logs an allowed connection once, when it closes, with its bytes.
                self.bytes_up += bytes.0;
                self.bytes_down += bytes.1;
                if let Some(d) = decision {
                    let host = e
                        .detail_str("host")
                        .or_else(|| e.detail_str("ip"))
                        .unwrap_or("?")
                        .to_string();
                    let port = u("port").map(|p| format!(":{p}")).unwrap_or_default();
                    self.count_host(&format!("{host}{port}"), d, bytes);
                    counted = true;
                }
            }
            Layer::Exec => match e.action {
                Action::Allow => self.exec_allow += 1,
                Action::Deny => self.exec_deny += 1,
                _ => {}
            },
            Layer::Dns => match e.action {
                Action::Allow => self.dns_allow += 1,
                Action::Deny => self.dns_deny += 1,
                _ => {}
            },
            _ => {}
        }
        let on_timeline = counted || matches!(e.layer, Layer::Exec | Layer::Dns);
        if let (true, Some(d), Some(at), Some(start)) = (on_timeline, decision, at, self.start_ms) {
            let bucket = at.saturating_sub(start) / 1000 / BUCKET_SECS;
            self.buckets.entry(bucket).or_default()[d] += 1;
            while self.buckets.len() > MAX_BUCKETS {
                self.buckets.pop_first();
            }
        }
    }

    fn count_host(&mut self, host: &str, decision: usize, (up, down): (u64, u64)) {
        let row = self
            .hosts
            .entry(host.to_string())
            .or_insert_with(|| HostRow {
                host: host.to_string(),
                ..HostRow::default()
            });
        match decision {
            0 => row.allow += 1,
            1 => row.deny += 1,
            _ => row.ask += 1,
        }
        row.bytes_up += up;
        row.bytes_down += down;
    }

    pub fn stats(&self) -> Stats {
        let mut hosts: Vec<HostRow> = self.hosts.values().cloned().collect();
        hosts.sort_by(|a, b| {
            (b.allow + b.deny + b.ask)
                .cmp(&(a.allow + a.deny + a.ask))
                .then_with(|| a.host.cmp(&b.host))
        });
        Stats {
            hosts,
            bytes_up: self.bytes_up,
            bytes_down: self.bytes_down,
            judge_calls: self.judge_calls,
            judge_ms_mean: (self.judge_calls > 0 && self.judge_ms_max.is_some())
                .then(|| self.judge_ms_total / self.judge_calls),
            judge_ms_max: self.judge_ms_max,
            exec_allow: self.exec_allow,
            exec_deny: self.exec_deny,
            dns_allow: self.dns_allow,
            dns_deny: self.dns_deny,
            timeline: self
                .buckets
                .iter()
                .map(|(b, [a, d, q])| [b * BUCKET_SECS, *a, *d, *q])
                .collect(),
            bucket_secs: BUCKET_SECS,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ev(
        time: &str,
        layer: Layer,
        action: Action,
        rule: Option<&str>,
        detail: serde_json::Value,
    ) -> Event {
        Event {
            time: time.into(),
            session: "s".into(),
            seq: 0,
            layer,
            action,
            reason: "r".into(),
            rule: rule.map(str::to_string),
            detail: detail.as_object().cloned().unwrap_or_default(),
            prev: String::new(),
            hash: String::new(),
        }
    }

    #[test]
    fn folds_hosts_bytes_judge_and_timeline() {
        let mut f = Fold::default();
        f.take(&ev(
            "2026-12-01T10:00:00.000Z",
            Layer::Session,
            Action::Start,
            None,
            json!({}),
        ));
        f.take(&ev(
            "2026-12-01T10:00:01.000Z",
            Layer::Http,
            Action::Allow,
            Some("r → judge"),
            json!({"url": "https://user:pw@api.test:443/x?q", "latency_ms": 40, "bytes_up": 7}),
        ));
        f.take(&ev(
            "2026-12-01T10:00:02.000Z",
            Layer::Http,
            Action::Deny,
            Some("r → judge"),
            json!({"url": "https://api.test:443/y", "latency_ms": 100}),
        ));
        f.take(&ev(
            "2026-12-01T10:00:12.000Z",
            Layer::Network,
            Action::Deny,
            Some("built-in"),
            json!({"host": "evil.test", "port": 22}),
        ));
        f.take(&ev(
            "2026-12-01T10:00:13.000Z",
            Layer::Network,
            Action::Allow,
            None,
            json!({"host": "api.test", "port": 443, "bytes_up": 100, "bytes_down": 2000}),
        ));
        f.take(&ev(
            "2026-12-01T10:00:14.000Z",
            Layer::Exec,
            Action::Deny,
            Some("x"),
            json!({}),
        ));
        let s = f.stats();
        assert_eq!(
            s.hosts,
            vec![
                HostRow {
                    host: "api.test:443".into(),
                    allow: 2,
                    deny: 1,
                    ask: 0,
                    bytes_up: 107,
                    bytes_down: 2000,
                },
                HostRow {
                    host: "evil.test:22".into(),
                    allow: 0,
                    deny: 1,
                    ask: 0,
                    ..HostRow::default()
                },
            ]
        );
        assert_eq!((s.bytes_up, s.bytes_down), (107, 2000));
        assert_eq!(s.judge_calls, 2);
        assert_eq!((s.judge_ms_mean, s.judge_ms_max), (Some(70), Some(100)));
        assert_eq!(s.exec_deny, 1);
        // Buckets of 5 s from the first event: 0 s (allow+deny), 10 s (flow, deny, exec deny).
        assert_eq!(s.timeline, vec![[0, 1, 1, 0], [10, 1, 2, 0]]);
    }

    #[test]
    fn a_recorded_judge_call_gives_the_judges_own_latency() {
        let mut f = Fold::default();
        f.take(&ev(
            "2026-12-01T10:00:01.000Z",
            Layer::Http,
            Action::Deny,
            Some("r → judge"),
            json!({"url": "https://a.test/", "latency_ms": 900,
                   "judge_call": {"verdict": "deny", "latency_ms": 300}}),
        ));
        let s = f.stats();
        assert_eq!((s.judge_calls, s.judge_ms_max), (1, Some(300)));
    }

    #[test]
    fn proxied_requests_count_both_ways_in_the_totals_and_per_host() {
        let mut f = Fold::default();
        let http = |url: &str, up: u64, down: u64| {
            ev(
                "2026-12-01T10:00:01.000Z",
                Layer::Http,
                Action::Allow,
                Some("r"),
                json!({"url": url, "method": "GET", "status": 200,
                       "bytes_up": up, "bytes_down": down}),
            )
        };
        // Through the proxy's CONNECT and the transparent interception alike: one event per
        // request, the connection itself never counted by the gateway.
        f.take(&http("https://pkg.test/a.tgz", 300, 5000));
        f.take(&http("https://pkg.test/b.tgz", 310, 7000));
        f.take(&http("http://plain.test:8080/x", 90, 400));
        // A CONNECT the HTTP layer does not take (another port) is spliced: the gateway's flow.
        f.take(&ev(
            "2026-12-01T10:00:02.000Z",
            Layer::Network,
            Action::Allow,
            Some("r"),
            json!({"host": "git.test", "port": 22, "via": "proxy",
                   "bytes_up": 1000, "bytes_down": 3000}),
        ));
        // A refused request carries no bytes: nothing left.
        f.take(&ev(
            "2026-12-01T10:00:03.000Z",
            Layer::Http,
            Action::Deny,
            Some("r"),
            json!({"url": "https://pkg.test/secret", "method": "GET", "status": 403}),
        ));
        let s = f.stats();
        assert_eq!(
            (s.bytes_up, s.bytes_down),
            (300 + 310 + 90 + 1000, 5000 + 7000 + 400 + 3000)
        );
        let row = |h: &str| s.hosts.iter().find(|r| r.host == h).cloned().unwrap();
        assert_eq!(
            row("pkg.test"),
            HostRow {
                host: "pkg.test".into(),
                allow: 2,
                deny: 1,
                ask: 0,
                bytes_up: 610,
                bytes_down: 12000,
            }
        );
        assert_eq!(
            (
                row("plain.test:8080").bytes_up,
                row("plain.test:8080").bytes_down
            ),
            (90, 400)
        );
        assert_eq!(
            (row("git.test:22").bytes_up, row("git.test:22").bytes_down),
            (1000, 3000)
        );
    }

    #[test]
    fn url_hosts() {
        assert_eq!(url_host("http://a.test:8080/p"), Some("a.test:8080"));
        assert_eq!(url_host("https://a.test"), Some("a.test"));
        assert_eq!(url_host("https://u:p@a.test?x"), Some("a.test"));
        assert_eq!(url_host("nonsense"), None);
    }
}
