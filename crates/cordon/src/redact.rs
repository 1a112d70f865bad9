//! Secrets out of the command lines the exec layer logs. The exec supervisor runs in the
//! sandbox crate, which knows no secret; an agent that was told a real value (or read one)
//! may pass it as an argument, and the log must not keep it. The HTTP layer knows every
//! credential's value and the host's secret-looking variables; until it is up (or without
//! it) values are redacted by token shape.

use std::sync::{Arc, OnceLock};

use cordon_events::{Layer, NewEvent};
use serde_json::Value;

/// The session's HTTP layer, once built (one session per process).
static LAYER: OnceLock<Arc<cordon_http::HttpLayer>> = OnceLock::new();

/// From now on exec events are redacted with what `layer` knows.
pub fn know(layer: Arc<cordon_http::HttpLayer>) {
    let _ = LAYER.set(layer);
}

fn redact(text: &str) -> String {
    match LAYER.get() {
        Some(l) => l.redact(text),
        None => cordon_http::dlp::redact(text).into_owned(),
    }
}

/// `ev` with its command line and arguments redacted, when it is the exec layer's.
pub fn exec_event(mut ev: NewEvent) -> NewEvent {
    if ev.layer != Layer::Exec {
        return ev;
    }
    for key in ["command", "program", "resolved"] {
        if let Some(Value::String(s)) = ev.detail.get_mut(key) {
            *s = redact(s);
        }
    }
    if let Some(Value::Array(args)) = ev.detail.get_mut("args") {
        for a in args {
            if let Value::String(s) = a {
                *s = redact(s);
            }
        }
    }
    ev
}
