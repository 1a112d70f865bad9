//! `[audit]`: where the session's audit log is exported besides its own file — the system
//! journal, syslog, an OpenTelemetry (OTLP/HTTP) logs endpoint. The file stays the record;
//! export is a copy (docs/guide/audit.md, "Exporting the log").

use serde_spanned::Spanned;

use crate::PolicyError;
use crate::schema::{Schema, Shape, toml_string};
use crate::sections::{Convert, Loosen, Origin, Render, Scalar, Section, Sections, set_scalar};

/// The export targets a policy may name, in the order they are documented.
pub const EXPORT_TARGETS: [&str; 3] = ["journald", "syslog", "otlp"];

/// Where the audit log is copied to as it is written.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AuditPlan {
    /// Targets, each once, from [`EXPORT_TARGETS`].
    pub export: Vec<String>,
    /// The OTLP/HTTP logs endpoint (`http://HOST:PORT/PATH`); `None`: the OpenTelemetry
    /// variables, else `http://localhost:4318/v1/logs`.
    pub otlp_endpoint: Option<String>,
    /// The journal's native socket; `None`: `/run/systemd/journal/socket`.
    pub journald_socket: Option<String>,
    /// The syslog socket; `None`: `/dev/log`.
    pub syslog_socket: Option<String>,
    /// Where each value came from, for `cordon check` (`built-in` when none is written).
    pub origin: cordon_events::Origin,
}

impl Default for AuditPlan {
    /// Exported nowhere; no origin told (what an empty `String` was before origins were
    /// typed, so a default plan is written as it was).
    fn default() -> Self {
        AuditPlan {
            export: Vec::new(),
            otlp_endpoint: None,
            journald_socket: None,
            syslog_socket: None,
            origin: cordon_events::Origin::Derived(String::new()),
        }
    }
}

raw_table! {
    /// `[audit]` as written.
    pub(crate) struct Raw example "export = [\"journald\"]" {
        /// Where the audit log is copied as it is written: `journald`, `syslog`, `otlp` (an
        /// OpenTelemetry logs endpoint over OTLP/HTTP). The session's file stays the record.
        export: Strings [loosens] = "export = [\"journald\", \"otlp\"]",
        /// The OTLP/HTTP logs endpoint (plain http, to a collector on this host or network);
        /// default: `OTEL_EXPORTER_OTLP_LOGS_ENDPOINT`, `OTEL_EXPORTER_OTLP_ENDPOINT` +
        /// `/v1/logs`, else `http://localhost:4318/v1/logs`.
        otlp_endpoint: String [loosens] = "otlp_endpoint = \"http://127.0.0.1:4318/v1/logs\"",
        /// The journal's native socket (default `/run/systemd/journal/socket`).
        journald_socket: String [loosens] = "journald_socket = \"/run/systemd/journal/socket\"",
        /// The syslog socket, RFC 5424 datagrams (default `/dev/log`).
        syslog_socket: String [loosens] = "syslog_socket = \"/dev/log\"",
    }
}

/// `[audit]` of one layer, or merged: targets add up, a later layer's address replaces one.
#[derive(Debug, Clone, Default)]
pub(crate) struct Audit {
    pub export: Vec<(String, Origin)>,
    pub otlp_endpoint: Scalar<String>,
    pub journald_socket: Scalar<String>,
    pub syslog_socket: Scalar<String>,
}

impl Audit {
    /// Each value written with where it was, for [`Section::loosen`] and the plan's origin.
    fn written(&self) -> Vec<(String, &Origin)> {
        let mut v: Vec<(String, &Origin)> = self
            .export
            .iter()
            .map(|(t, o)| (format!("exports the audit log to {t}"), o))
            .collect();
        let scalars = [
            ("otlp_endpoint", &self.otlp_endpoint),
            ("journald_socket", &self.journald_socket),
            ("syslog_socket", &self.syslog_socket),
        ];
        for (key, s) in scalars {
            if let Some((value, o)) = s {
                v.push((format!("sends the exported audit log to {key} {value}"), o));
            }
        }
        v
    }
}

fn socket(
    cx: &Convert<'_>,
    v: &Option<Spanned<String>>,
    key: &str,
) -> Result<Scalar<String>, PolicyError> {
    let Some(s) = v else { return Ok(None) };
    if !s.get_ref().starts_with('/') {
        return Err(cx.diag(
            format!(
                "[audit] {key} {} is not an absolute path",
                toml_string(s.get_ref())
            ),
            s.span(),
            format!("an absolute socket path, e.g. {key} = \"/dev/log\""),
        ));
    }
    Ok(Some((s.get_ref().clone(), cx.origin(s.span()))))
}

impl Section for Audit {
    type Raw = Raw;
    type Plan = AuditPlan;
    const SHAPE: Shape = Shape::Table(&Raw::TABLE);
    // Where a machine's log goes is the machine's, not one agent's.
    const IN_PROFILE: bool = false;

    fn convert(raw: Raw, cx: &mut Convert<'_>) -> Result<Self, PolicyError> {
        let mut out = Audit::default();
        for t in &raw.export {
            if !EXPORT_TARGETS.contains(&t.get_ref().as_str()) {
                return Err(cx.diag(
                    format!("[audit] export has unknown target {}", toml_string(t.get_ref())),
                    t.span(),
                    "export takes \"journald\", \"syslog\" and \"otlp\", e.g. export = [\"journald\"]",
                ));
            }
            if !out.export.iter().any(|(x, _)| x == t.get_ref()) {
                out.export.push((t.get_ref().clone(), cx.origin(t.span())));
            }
        }
        if let Some(e) = &raw.otlp_endpoint {
            if let Err(why) = otlp_endpoint_problem(e.get_ref()) {
                return Err(cx.diag(
                    format!("[audit] otlp_endpoint {}: {why}", toml_string(e.get_ref())),
                    e.span(),
                    "an http:// URL of an OTLP/HTTP logs endpoint, e.g. otlp_endpoint = \"http://127.0.0.1:4318/v1/logs\" (for TLS, send to a local OpenTelemetry Collector that forwards it)",
                ));
            }
            out.otlp_endpoint = Some((e.get_ref().clone(), cx.origin(e.span())));
        }
        out.journald_socket = socket(cx, &raw.journald_socket, "journald_socket")?;
        out.syslog_socket = socket(cx, &raw.syslog_socket, "syslog_socket")?;
        Ok(out)
    }

    fn merge(&mut self, later: &Self) {
        crate::sections::append_new(&mut self.export, &later.export, |a, b| a == b);
        set_scalar(&mut self.otlp_endpoint, &later.otlp_endpoint);
        set_scalar(&mut self.journald_socket, &later.journald_socket);
        set_scalar(&mut self.syslog_socket, &later.syslog_socket);
    }

    fn loosen(full: &Sections, base: &Sections, out: &mut Loosen<'_>) {
        // The log names the host's paths, commands and hosts: sending it somewhere, or to a
        // socket a project chose (one the sandbox could listen on), is the user's call.
        let base = base.audit.written();
        for (what, o) in full.audit.written() {
            if !base.iter().any(|(b, _)| *b == what) {
                out.add(o, what);
            }
        }
    }

    fn plan(self) -> AuditPlan {
        let origin = self
            .written()
            .first()
            .map_or(cordon_events::Origin::BuiltIn, |(_, o)| {
                o.label.as_str().into()
            });
        AuditPlan {
            export: self.export.into_iter().map(|(t, _)| t).collect(),
            otlp_endpoint: self.otlp_endpoint.map(|(v, _)| v),
            journald_socket: self.journald_socket.map(|(v, _)| v),
            syslog_socket: self.syslog_socket.map(|(v, _)| v),
            origin,
        }
    }

    fn render(a: &AuditPlan, out: &mut Render) {
        if *a
            == (AuditPlan {
                origin: a.origin.clone(),
                ..AuditPlan::default()
            })
        {
            out.line("\n# [audit]: the log is written to its file only, not exported");
            return;
        }
        out.line(format!(
            "\n[audit] # {}",
            crate::sections::comment(&a.origin.to_string())
        ));
        out.strings("export", &a.export);
        let scalars = [
            ("otlp_endpoint", &a.otlp_endpoint),
            ("journald_socket", &a.journald_socket),
            ("syslog_socket", &a.syslog_socket),
        ];
        for (key, v) in scalars {
            if let Some(v) = v {
                out.string(key, v);
            }
        }
    }
}

/// Why `url` is not an endpoint cordon can send OTLP/HTTP to, if it is not: plain `http://`
/// with a host (TLS is left to a collector beside cordon: one client fewer to keep).
pub fn otlp_endpoint_problem(url: &str) -> Result<(), &'static str> {
    let Some(rest) = url.strip_prefix("http://") else {
        return Err(if url.starts_with("https://") {
            "https is not sent by cordon itself"
        } else {
            "not an http:// URL"
        });
    };
    let authority = rest.split('/').next().unwrap_or("");
    if authority.is_empty() || authority.contains('@') {
        return Err("no host (or a user name in it)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::otlp_endpoint_problem;

    #[test]
    fn endpoints_are_plain_http_with_a_host() {
        assert!(otlp_endpoint_problem("http://127.0.0.1:4318/v1/logs").is_ok());
        assert!(otlp_endpoint_problem("http://collector/v1/logs").is_ok());
        assert!(otlp_endpoint_problem("https://collector/v1/logs").is_err());
        assert!(otlp_endpoint_problem("http:///v1/logs").is_err());
        assert!(otlp_endpoint_problem("http://u:p@h/v1/logs").is_err());
        assert!(otlp_endpoint_problem("collector:4318").is_err());
    }
}
