//! The hash chain: canonical JSON and the per-line hash (defined in the crate docs).

use std::fmt::Write as _;

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::event::Event;

/// `prev` of the first line: 64 zeros.
pub const GENESIS_PREV: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The hash `ev` should carry, computed from its other fields (its own `hash` is ignored).
pub fn hash_event(ev: &Event) -> String {
    let parts = Parts::of(ev);
    hex(&digest(&ev.prev, &parts, ev.seq))
}

/// Stamps `ev.hash` and gives its line as the log holds it (newline included): the JSON
/// `serde_json::to_string` makes of it, field for field, with each string escaped once for
/// both the canonical form the hash covers and the line (every request's event goes through
/// here, under the log's lock).
pub(crate) fn seal(ev: &mut Event) -> String {
    let parts = Parts::of(ev);
    ev.hash = hex(&digest(&ev.prev, &parts, ev.seq));
    let mut line = String::with_capacity(parts.len() + ev.prev.len() + ev.hash.len() + 96);
    line.push_str("{\"time\":");
    line.push_str(&parts.time);
    line.push_str(",\"session\":");
    line.push_str(&parts.session);
    let _ = write!(line, ",\"seq\":{}", ev.seq);
    line.push_str(",\"layer\":");
    line.push_str(&parts.layer);
    line.push_str(",\"action\":");
    line.push_str(&parts.action);
    line.push_str(",\"reason\":");
    line.push_str(&parts.reason);
    if let Some(rule) = &parts.rule {
        line.push_str(",\"rule\":");
        line.push_str(rule);
    }
    if let Some(detail) = &parts.detail {
        line.push_str(",\"detail\":");
        line.push_str(detail);
    }
    line.push_str(",\"prev\":");
    write_str(&mut line, &ev.prev);
    line.push_str(",\"hash\":");
    write_str(&mut line, &ev.hash);
    line.push_str("}\n");
    line
}

/// An event's fields as JSON text (strings quoted and escaped, `detail` an object with sorted
/// keys), but for `seq` and `prev`, which the log gives last.
struct Parts {
    time: String,
    session: String,
    layer: String,
    action: String,
    reason: String,
    rule: Option<String>,
    detail: Option<String>,
}

impl Parts {
    fn of(ev: &Event) -> Self {
        let quoted = |s: &str| {
            let mut out = String::with_capacity(s.len() + 2);
            write_str(&mut out, s);
            out
        };
        Self {
            time: quoted(&ev.time),
            session: quoted(&ev.session),
            layer: quoted(ev.layer.as_str()),
            action: quoted(ev.action.as_str()),
            reason: quoted(&ev.reason),
            rule: ev.rule.as_deref().map(quoted),
            detail: (!ev.detail.is_empty()).then(|| {
                let mut out = String::with_capacity(256);
                write_map(&mut out, &ev.detail);
                out
            }),
        }
    }

    fn len(&self) -> usize {
        self.time.len()
            + self.session.len()
            + self.layer.len()
            + self.action.len()
            + self.reason.len()
            + self.rule.as_ref().map_or(0, String::len)
            + self.detail.as_ref().map_or(0, String::len)
    }
}

/// SHA-256 of `prev`, a newline, and the canonical JSON of the event without its `hash`.
fn digest(prev: &str, p: &Parts, seq: u64) -> [u8; 32] {
    let c = canonical_text(prev, p, seq);
    let mut hasher = Sha256::new();
    hasher.update(prev.as_bytes());
    hasher.update(b"\n");
    hasher.update(c.as_bytes());
    hasher.finalize().into()
}

/// The canonical JSON of an event without its `hash`: sorted keys, no whitespace.
fn canonical_text(prev: &str, p: &Parts, seq: u64) -> String {
    let mut c = String::with_capacity(p.len() + prev.len() + 96);
    c.push_str("{\"action\":");
    c.push_str(&p.action);
    if let Some(detail) = &p.detail {
        c.push_str(",\"detail\":");
        c.push_str(detail);
    }
    c.push_str(",\"layer\":");
    c.push_str(&p.layer);
    c.push_str(",\"prev\":");
    write_str(&mut c, prev);
    c.push_str(",\"reason\":");
    c.push_str(&p.reason);
    if let Some(rule) = &p.rule {
        c.push_str(",\"rule\":");
        c.push_str(rule);
    }
    let _ = write!(c, ",\"seq\":{seq}");
    c.push_str(",\"session\":");
    c.push_str(&p.session);
    c.push_str(",\"time\":");
    c.push_str(&p.time);
    c.push('}');
    c
}

fn hex(digest: &[u8; 32]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(64);
    for b in digest {
        out.push(HEX[usize::from(b >> 4)] as char);
        out.push(HEX[usize::from(b & 15)] as char);
    }
    out
}

/// The canonical JSON of `ev` without its `hash` field, built as a `Value`: what
/// [`canonical_text`] must equal (tests).
#[cfg(test)]
fn canonical(ev: &Event) -> String {
    let mut obj = Map::new();
    obj.insert("time".into(), Value::String(ev.time.clone()));
    obj.insert("session".into(), Value::String(ev.session.clone()));
    obj.insert("seq".into(), Value::from(ev.seq));
    obj.insert("layer".into(), Value::String(ev.layer.as_str().into()));
    obj.insert("action".into(), Value::String(ev.action.as_str().into()));
    obj.insert("reason".into(), Value::String(ev.reason.clone()));
    if let Some(rule) = &ev.rule {
        obj.insert("rule".into(), Value::String(rule.clone()));
    }
    if !ev.detail.is_empty() {
        obj.insert("detail".into(), Value::Object(ev.detail.clone()));
    }
    obj.insert("prev".into(), Value::String(ev.prev.clone()));
    let mut out = String::with_capacity(256);
    write_value(&mut out, &Value::Object(obj));
    out
}

/// Sorted-key, whitespace-free JSON. Written by hand so it does not depend on whether some other
/// crate in the build turns on serde_json's `preserve_order`.
fn write_value(out: &mut String, v: &Value) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        // Number's Display is the same text serde_json serialises.
        Value::Number(n) => {
            let _ = write!(out, "{n}");
        }
        Value::String(s) => write_str(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => write_map(out, map),
    }
}

fn write_map(out: &mut String, map: &Map<String, Value>) {
    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
    // Already sorted unless `preserve_order` is on; then this sorts.
    if !entries.is_sorted_by(|a, b| a.0.as_bytes() <= b.0.as_bytes()) {
        entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    }
    out.push('{');
    for (i, (k, val)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_str(out, k);
        out.push(':');
        write_value(out, val);
    }
    out.push('}');
}

/// `s` quoted, escaped as serde_json escapes it: runs of plain text copied whole, only
/// `"`, `\\` and control characters written one by one.
fn write_str(out: &mut String, s: &str) {
    out.push('"');
    let b = s.as_bytes();
    let mut start = 0;
    for (i, &c) in b.iter().enumerate() {
        let esc = match c {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0..0x20 => "",
            _ => continue,
        };
        // Every byte escaped is ASCII, so `start..i` lies on character boundaries.
        out.push_str(&s[start..i]);
        if esc.is_empty() {
            let _ = write!(out, "\\u{:04x}", c);
        } else {
            out.push_str(esc);
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Action, Layer};

    fn sample() -> Event {
        let mut detail = Map::new();
        detail.insert("zeta".into(), Value::from(1));
        detail.insert(
            "alpha".into(),
            serde_json::json!({"b": [1.5, "x\ny"], "a": null}),
        );
        Event {
            time: "2026-11-29T08:30:12.345Z".into(),
            session: "s".into(),
            seq: 2,
            layer: Layer::Filesystem,
            action: Action::Deny,
            reason: "masked \"quoted\" \u{1}".into(),
            rule: Some("built-in".into()),
            detail,
            prev: GENESIS_PREV.into(),
            hash: String::new(),
        }
    }

    #[test]
    fn canonical_is_sorted_compact_and_matches_serde_escaping() {
        let c = canonical(&sample());
        assert_eq!(
            c,
            r#"{"action":"deny","detail":{"alpha":{"a":null,"b":[1.5,"x\ny"]},"zeta":1},"layer":"filesystem","prev":"0000000000000000000000000000000000000000000000000000000000000000","reason":"masked \"quoted\" \u0001","rule":"built-in","seq":2,"session":"s","time":"2026-11-29T08:30:12.345Z"}"#
        );
        // Our string escaping agrees with serde_json's.
        let s = "a\"b\\c\n\r\t\u{8}\u{c}\u{1f}é€😀";
        let mut ours = String::new();
        write_str(&mut ours, s);
        assert_eq!(ours, serde_json::to_string(s).unwrap());
        // And so does our number text.
        for f in [0.1 + 0.2, 1e-300, 5e-324, 1e21, -0.0, 3.0, 2.0 / 3.0] {
            let v = Value::from(f);
            let mut ours = String::new();
            write_value(&mut ours, &v);
            assert_eq!(ours, serde_json::to_string(&v).unwrap());
        }
    }

    /// Events of every shape: with and without rule and detail, strings needing every escape,
    /// non-ASCII text, nested values.
    fn shapes() -> Vec<Event> {
        let mut out = vec![sample()];
        let mut bare = sample();
        bare.rule = None;
        bare.detail = Map::new();
        bare.reason = String::new();
        out.push(bare);
        let mut odd = sample();
        odd.reason = "\u{7f}\u{0}tab\there \"q\" back\\slash é€😀 \u{1f}\u{8}\u{c}\r\n".into();
        odd.rule = Some("file.toml:3 \"x\"".into());
        odd.detail
            .insert("url".into(), Value::from("https://h/p?a=…"));
        odd.detail.insert("n".into(), Value::from(u64::MAX));
        odd.detail.insert("neg".into(), Value::from(-3));
        odd.detail.insert("f".into(), Value::from(0.1 + 0.2));
        odd.detail.insert("b".into(), Value::from(false));
        odd.detail.insert(
            "arr".into(),
            serde_json::json!([{"z": 1, "a": [null, true]}, "\u{1}"]),
        );
        odd.detail.insert("Ключ \"k\"".into(), Value::from("v"));
        odd.prev = "ab".repeat(32);
        odd.seq = 123_456_789;
        out.push(odd);
        out
    }

    #[test]
    fn the_line_is_serdes_and_the_hash_covers_the_canonical_form() {
        for ev in shapes() {
            let p = Parts::of(&ev);
            assert_eq!(canonical_text(&ev.prev, &p, ev.seq), canonical(&ev));
            let mut sealed = ev.clone();
            sealed.hash = "stale".into();
            let line = seal(&mut sealed);
            // The hash is SHA-256 of prev, a newline and the canonical form.
            let mut h = Sha256::new();
            h.update(ev.prev.as_bytes());
            h.update(b"\n");
            h.update(canonical(&ev).as_bytes());
            let want: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(sealed.hash, want);
            assert_eq!(hash_event(&ev), want);
            // Byte for byte what serde_json writes for the sealed event, and it reads back.
            assert_eq!(
                line,
                format!("{}\n", serde_json::to_string(&sealed).unwrap())
            );
            let back: Event = serde_json::from_str(line.trim_end()).unwrap();
            assert_eq!(back, sealed);
        }
    }

    #[test]
    fn hash_ignores_own_hash_and_sees_every_value() {
        let a = sample();
        let h = hash_event(&a);
        assert_eq!(h.len(), 64);
        let mut b = a.clone();
        b.hash = "whatever".into();
        assert_eq!(hash_event(&b), h);
        b.seq = 3;
        assert_ne!(hash_event(&b), h);
        let mut c = a.clone();
        c.detail.insert("zeta".into(), Value::from(2));
        assert_ne!(hash_event(&c), h);
        let mut d = a;
        d.prev = "1".repeat(64);
        assert_ne!(hash_event(&d), h);
    }
}
