//! The hash chain: canonical JSON and the per-line hash (defined in the crate docs).

use std::fmt::Write as _;

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::event::Event;

/// `prev` of the first line: 64 zeros.
pub const GENESIS_PREV: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The hash `ev` should carry, computed from its other fields (its own `hash` is ignored).
pub fn hash_event(ev: &Event) -> String {
    let mut hasher = Sha256::new();
    hasher.update(ev.prev.as_bytes());
    hasher.update(b"\n");
    hasher.update(canonical(ev).as_bytes());
    let digest = hasher.finalize();
    let mut hex = String::with_capacity(64);
    for b in digest {
        // Writing to a String cannot fail.
        let _ = write!(hex, "{b:02x}");
    }
    hex
}

/// The canonical JSON of `ev` without its `hash` field.
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
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
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
    }
}

fn write_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
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
