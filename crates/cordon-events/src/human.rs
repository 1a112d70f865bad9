//! One readable line per event, for `cordon log` and the terminal UI.

use std::fmt::Write as _;

use serde_json::Value;

use crate::event::Event;
use crate::terminal;

/// `detail` keys shown as an event's subject, right after the action, in this order of
/// preference; the first present is used.
pub const SUBJECT_KEYS: [&str; 9] = [
    "path", "url", "host", "name", "program", "command", "syscall", "var", "pid",
];

/// Longest rendering of one detail value before it is cut with `…`.
const MAX_VALUE_CHARS: usize = 120;

/// One readable line, no colours, no newline:
///
/// ```text
/// 08:30:12.345 [filesystem] deny  /home/u/.ssh — masked by built-in deny (rule: built-in)
/// 08:30:13.002 [network] allow api.example.com — allowed by policy (rule: cordon.toml:12) port=443
/// 08:30:14.120 [session] exit  agent exited code=0
/// ```
///
/// Time (UTC) of day, layer, action, the subject (see [`SUBJECT_KEYS`]) and `—` when there is
/// one, the reason, the rule, then the remaining detail as `key=value` (strings bare unless they
/// need quoting, other values as compact JSON).
pub fn format_human(ev: &Event) -> String {
    let time = ev
        .time
        .get(11..23)
        .filter(|t| t.is_ascii())
        .unwrap_or(&ev.time);
    let mut out = format!("{time} [{}] {:<5} ", ev.layer, ev.action);
    let subject = SUBJECT_KEYS
        .iter()
        .find(|k| ev.detail.get(**k).is_some_and(is_scalar))
        .copied();
    if let Some(key) = subject {
        out.push_str(&render(&ev.detail[key]));
        out.push_str(" — ");
    }
    out.push_str(&one_line(&ev.reason));
    if let Some(rule) = &ev.rule {
        let _ = write!(out, " (rule: {})", one_line(rule));
    }
    for (k, v) in &ev.detail {
        if Some(k.as_str()) != subject {
            let _ = write!(out, " {}={}", one_line(k), render(v));
        }
    }
    out
}

fn is_scalar(v: &Value) -> bool {
    !matches!(v, Value::Array(_) | Value::Object(_) | Value::Null)
}

/// Strings bare when safe to read back (no spaces, quotes, `=` or characters unsafe for a
/// terminal), else quoted with unsafe characters escaped ([`terminal::quote`]); everything else
/// compact JSON with what JSON leaves raw (C1 controls such as CSI, bidi overrides) escaped too.
/// Cut at [`MAX_VALUE_CHARS`].
fn render(v: &Value) -> String {
    let text = match v {
        Value::String(s)
            if !s.is_empty()
                && !s
                    .chars()
                    .any(|c| c.is_whitespace() || terminal::is_unsafe(c) || "\"'=".contains(c)) =>
        {
            s.clone()
        }
        Value::String(s) => terminal::quote(s),
        other => terminal::safe(&other.to_string()),
    };
    cut(text)
}

/// Unsafe characters (newlines, escapes, bidi overrides) escaped, so one event stays one
/// terminal line and cannot drive the terminal.
fn one_line(s: &str) -> String {
    cut(terminal::safe(s))
}

#[cfg(test)]
mod c1_tests {
    #[test]
    fn c1_controls_never_reach_the_terminal() {
        let v = serde_json::Value::String("evil\u{9b}31mred".into());
        let out = super::render(&v);
        assert!(!out.contains('\u{9b}'), "{out:?}");
        assert!(out.contains("\\u{9b}"), "{out:?}");
        let v = serde_json::json!(["a\u{202e}b", "c\u{1b}"]);
        let out = super::render(&v);
        assert!(
            !out.contains('\u{202e}') && !out.contains('\u{1b}'),
            "{out:?}"
        );
    }
}

fn cut(s: String) -> String {
    match s.char_indices().nth(MAX_VALUE_CHARS) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::GENESIS_PREV;
    use crate::event::{Action, Layer, NewEvent};

    fn event(new: NewEvent) -> Event {
        Event {
            time: "2026-11-29T08:30:12.345Z".into(),
            session: "s".into(),
            seq: 0,
            layer: new.layer,
            action: new.action,
            reason: new.reason,
            rule: new.rule,
            detail: new.detail,
            prev: GENESIS_PREV.into(),
            hash: String::new(),
        }
    }

    #[test]
    fn deny_with_subject_and_rule() {
        let ev = event(
            NewEvent::new(Layer::Filesystem, Action::Deny, "masked by built-in deny")
                .rule("built-in")
                .detail("path", "/home/u/.ssh"),
        );
        assert_eq!(
            format_human(&ev),
            "08:30:12.345 [filesystem] deny  /home/u/.ssh — masked by built-in deny (rule: built-in)"
        );
    }

    #[test]
    fn detail_pairs_and_quoting() {
        let ev = event(
            NewEvent::new(Layer::Session, Action::Exit, "agent exited")
                .detail("code", 0)
                .detail("note", "two words")
                .detail("argv", serde_json::json!(["ls", "-l"])),
        );
        let s = format_human(&ev);
        assert_eq!(
            s,
            r#"08:30:12.345 [session] exit  agent exited argv=["ls","-l"] code=0 note="two words""#
        );
        assert!(s.contains("[session]") && s.contains("agent exited"));
    }

    #[test]
    fn hostile_text_stays_on_one_line() {
        let ev = event(
            NewEvent::new(Layer::Exec, Action::Deny, "bad\n\u{1b}[2Jthing\u{202e}")
                .detail("program", "x\u{1b}]0;t\u{7}\u{2066}")
                .detail("long", "y".repeat(500)),
        );
        let s = format_human(&ev);
        assert!(!s.chars().any(crate::terminal::is_unsafe), "{s:?}");
        assert!(s.contains("bad\\u{a}\\u{1b}[2Jthing\\u{202e}"), "{s:?}");
        assert!(s.contains("\"x\\u{1b}]0;t\\u{7}\\u{2066}\""), "{s:?}");
        assert!(s.contains('…'));
        assert!(s.len() < 400);
        // A malformed time is shown as is, not panicked on.
        let mut odd = ev;
        odd.time = "é".into();
        assert!(format_human(&odd).starts_with("é [exec]"));
    }
}
