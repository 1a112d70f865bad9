//! The journal and syslog: one datagram per event to a local socket.
//!
//! The journal gets its native protocol (systemd's `sd_journal_send` wire format: `NAME=value`
//! lines, a value with a newline as `NAME\n`, its length as 64-bit little-endian, the bytes,
//! `\n`), with the chain in fields of its own. Syslog gets RFC 5424 with the chain in
//! structured data `[cordon@32473 …]` (32473 is the example enterprise number RFC 5612
//! reserves: cordon has none of its own). Both carry the whole line too, so a SIEM can map
//! any field and recompute the chain.

use std::io;
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Failure, Target, parse, severity};
use crate::Event;

/// How long a send may wait on a full socket buffer before it is retried later.
const SEND_WAIT: Duration = Duration::from_millis(500);

/// A datagram socket to one path, made on first use and again after an error.
struct Socket {
    path: PathBuf,
    sock: Option<UnixDatagram>,
}

impl Socket {
    fn send(&mut self, datagram: &[u8]) -> Result<(), Failure> {
        let fail = |e: io::Error, path: &PathBuf| Failure {
            // Too large for a datagram (EMSGSIZE): sending again will not help.
            retry: e.raw_os_error() != Some(libc_emsgsize()),
            error: format!("{}: {e}", path.display()),
        };
        if self.sock.is_none() {
            let s = UnixDatagram::unbound().map_err(|e| fail(e, &self.path))?;
            s.set_write_timeout(Some(SEND_WAIT))
                .map_err(|e| fail(e, &self.path))?;
            self.sock = Some(s);
        }
        let Some(s) = self.sock.as_ref() else {
            return Err(fail(io::ErrorKind::NotConnected.into(), &self.path));
        };
        match s.send_to(datagram, &self.path) {
            Ok(_) => Ok(()),
            Err(e) => {
                self.sock = None;
                Err(fail(e, &self.path))
            }
        }
    }
}

/// EMSGSIZE on Linux (no libc dependency for one number).
const fn libc_emsgsize() -> i32 {
    90
}

/// Sends each of `lines` made into a datagram by `make`; stops at the first that fails (the
/// batch is retried from its start: a collector dedups by `seq`, and lines go one at a time).
fn each(
    sock: &mut Socket,
    lines: &[Arc<str>],
    make: impl Fn(&str, Option<&Event>) -> Vec<u8>,
) -> Result<(), Failure> {
    for l in lines {
        let e = parse(l);
        sock.send(&make(l, e.as_ref()))?;
    }
    Ok(())
}

pub(crate) struct Journald(Socket);

impl Journald {
    pub(crate) fn new(path: PathBuf) -> Self {
        Self(Socket { path, sock: None })
    }
}

impl Target for Journald {
    const NAME: &'static str = "journald";
    // One line a batch: a retry then sends nothing twice.
    const BATCH: usize = 1;

    fn send(
        &mut self,
        lines: &[Arc<str>],
        _until: &dyn Fn() -> Option<Instant>,
    ) -> Result<(), Failure> {
        each(&mut self.0, lines, journal_entry)
    }
}

/// The journal's native datagram for one event.
pub(crate) fn journal_entry(line: &str, e: Option<&Event>) -> Vec<u8> {
    let mut out = Vec::with_capacity(line.len() * 2 + 256);
    let mut field = |name: &str, value: &str| {
        out.extend_from_slice(name.as_bytes());
        if value.contains('\n') {
            out.push(b'\n');
            out.extend_from_slice(&(value.len() as u64).to_le_bytes());
        } else {
            out.push(b'=');
        }
        out.extend_from_slice(value.as_bytes());
        out.push(b'\n');
    };
    field("SYSLOG_IDENTIFIER", "cordon");
    field("CORDON_EVENT", line);
    let Some(e) = e else {
        field("MESSAGE", line);
        field("PRIORITY", "6");
        return out;
    };
    field("MESSAGE", &crate::format_human(e));
    field("PRIORITY", &severity(e.action).to_string());
    field("CORDON_TIME", &e.time);
    field("CORDON_SESSION", &e.session);
    field("CORDON_SEQ", &e.seq.to_string());
    field("CORDON_PREV", &e.prev);
    field("CORDON_HASH", &e.hash);
    field("CORDON_LAYER", e.layer.as_str());
    field("CORDON_ACTION", e.action.as_str());
    if let Some(rule) = &e.rule {
        field("CORDON_RULE", rule);
    }
    out
}

pub(crate) struct Syslog {
    sock: Socket,
    hostname: String,
}

impl Syslog {
    pub(crate) fn new(path: PathBuf) -> Self {
        let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .ok()
            .filter(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_graphic()))
            .unwrap_or_else(|| "-".to_owned());
        Self {
            sock: Socket { path, sock: None },
            hostname,
        }
    }
}

impl Target for Syslog {
    const NAME: &'static str = "syslog";
    const BATCH: usize = 1;

    fn send(
        &mut self,
        lines: &[Arc<str>],
        _until: &dyn Fn() -> Option<Instant>,
    ) -> Result<(), Failure> {
        let host = self.hostname.clone();
        each(&mut self.sock, lines, |l, e| {
            syslog_message(&host, std::process::id(), l, e)
        })
    }
}

/// Facility 13, "log audit" (RFC 5424 table 1).
const FACILITY: u8 = 13;

/// One event as an RFC 5424 message: `<PRI>1 TIME HOST cordon PID LAYER.ACTION [SD] LINE`.
pub(crate) fn syslog_message(host: &str, pid: u32, line: &str, e: Option<&Event>) -> Vec<u8> {
    let Some(e) = e else {
        return format!("<{}>1 - {host} cordon {pid} - - {line}", FACILITY * 8 + 6).into_bytes();
    };
    let mut sd = format!(
        "[cordon@32473 session=\"{}\" seq=\"{}\" prev=\"{}\" hash=\"{}\" layer=\"{}\" action=\"{}\"",
        param(&e.session),
        e.seq,
        param(&e.prev),
        param(&e.hash),
        e.layer,
        e.action
    );
    if let Some(rule) = &e.rule {
        sd.push_str(&format!(" rule=\"{}\"", param(rule)));
    }
    sd.push(']');
    format!(
        "<{}>1 {} {host} cordon {pid} {}.{} {sd} {line}",
        FACILITY * 8 + severity(e.action),
        e.time,
        e.layer,
        e.action
    )
    .into_bytes()
}

/// A structured-data parameter value: `"`, `\` and `]` escaped with `\` (RFC 5424 6.3.3).
fn param(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        if matches!(c, '"' | '\\' | ']') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Action, Layer};

    fn event() -> Event {
        Event {
            time: "2026-12-06T10:00:00.000Z".into(),
            session: "s1".into(),
            seq: 4,
            layer: Layer::Network,
            action: Action::Deny,
            reason: "no rule \"x\"\nsecond line".into(),
            rule: Some("a]b".into()),
            detail: Default::default(),
            prev: "p".repeat(64),
            hash: "h".repeat(64),
        }
    }

    #[test]
    fn journal_fields_carry_the_chain_and_length_prefix_multiline_values() {
        let e = event();
        let d = journal_entry("{\"seq\":4}", Some(&e));
        let text = String::from_utf8_lossy(&d);
        assert!(text.contains("SYSLOG_IDENTIFIER=cordon\n"));
        assert!(text.contains("CORDON_SEQ=4\n"));
        assert!(text.contains(&format!("CORDON_HASH={}\n", e.hash)));
        assert!(text.contains(&format!("CORDON_PREV={}\n", e.prev)));
        assert!(text.contains("PRIORITY=4\n"));
        assert!(text.contains("CORDON_RULE=a]b\n"));
        assert!(text.contains("CORDON_EVENT={\"seq\":4}\n"));
        let multi = journal_entry("a\nb", None);
        let mut want = b"CORDON_EVENT\n".to_vec();
        want.extend_from_slice(&3u64.to_le_bytes());
        want.extend_from_slice(b"a\nb\n");
        assert!(multi.windows(want.len()).any(|w| w == want.as_slice()));
    }

    #[test]
    fn syslog_is_rfc5424_with_escaped_structured_data() {
        let e = event();
        let m = String::from_utf8(syslog_message("box", 7, "{}", Some(&e))).unwrap();
        assert_eq!(
            m,
            format!(
                "<108>1 2026-12-06T10:00:00.000Z box cordon 7 network.deny [cordon@32473 session=\"s1\" seq=\"4\" prev=\"{}\" hash=\"{}\" layer=\"network\" action=\"deny\" rule=\"a\\]b\"] {{}}",
                e.prev, e.hash
            )
        );
    }
}
