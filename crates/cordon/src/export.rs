//! The audit log's export for one session (`[audit] export`, docs/guide/audit.md): the
//! targets resolved from the policy and OpenTelemetry's standard variables, the exporter
//! started beside the log, and its counts at the end — in the log (before its stop event)
//! and on stderr when anything was not delivered.

use std::path::PathBuf;
use std::time::Duration;

use cordon_events::export::{ExportConfig, ExportReport, Exporter, OtlpConfig};
use cordon_events::{Action, AuditLog, Layer, NewEvent};
use cordon_policy::AuditPlan;

/// The rule of the note that counts what was exported.
const RULE: &str = "audit.export";

/// How long the session's end waits for the queues to empty, at most.
const GRACE: Duration = Duration::from_secs(3);

/// Targets from the plan, addresses from it or else from OpenTelemetry's variables; an
/// error names the key or variable and the fix.
pub(crate) fn config(
    plan: &AuditPlan,
    env: impl Fn(&str) -> Option<String>,
) -> Result<ExportConfig, String> {
    let on = |t: &str| plan.export.iter().any(|x| x == t);
    // OTEL_LOGS_EXPORTER=otlp is how OpenTelemetry turns the logs exporter on.
    let otel_on = env("OTEL_LOGS_EXPORTER").is_some_and(|v| v.split(',').any(|x| x == "otlp"));
    let mut c = ExportConfig {
        journald: on("journald").then(|| {
            PathBuf::from(
                plan.journald_socket
                    .as_deref()
                    .unwrap_or("/run/systemd/journal/socket"),
            )
        }),
        syslog: on("syslog")
            .then(|| PathBuf::from(plan.syslog_socket.as_deref().unwrap_or("/dev/log"))),
        otlp: None,
    };
    if !(on("otlp") || otel_on) {
        return Ok(c);
    }
    if let Some(p) = env("OTEL_EXPORTER_OTLP_LOGS_PROTOCOL")
        .or_else(|| env("OTEL_EXPORTER_OTLP_PROTOCOL"))
        .filter(|p| p != "http/protobuf")
    {
        return Err(format!(
            "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL is {p:?}: cordon sends OTLP logs as http/protobuf only; unset it or set it to http/protobuf"
        ));
    }
    let (endpoint, from) = match (
        &plan.otlp_endpoint,
        env("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"),
        env("OTEL_EXPORTER_OTLP_ENDPOINT"),
    ) {
        (Some(e), _, _) => (e.clone(), "[audit] otlp_endpoint"),
        (None, Some(e), _) => (e, "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"),
        (None, None, Some(base)) => (
            format!("{}/v1/logs", base.trim_end_matches('/')),
            "OTEL_EXPORTER_OTLP_ENDPOINT",
        ),
        (None, None, None) => (
            "http://localhost:4318/v1/logs".to_owned(),
            "the default endpoint",
        ),
    };
    if let Err(why) = cordon_policy::otlp_endpoint_problem(&endpoint) {
        return Err(format!(
            "{from} {endpoint:?}: {why}; give an http:// OTLP/HTTP logs endpoint, e.g. http://127.0.0.1:4318/v1/logs (for TLS, a local OpenTelemetry Collector that forwards it)"
        ));
    }
    let (hvar, raw) = match env("OTEL_EXPORTER_OTLP_LOGS_HEADERS") {
        Some(h) => ("OTEL_EXPORTER_OTLP_LOGS_HEADERS", h),
        None => (
            "OTEL_EXPORTER_OTLP_HEADERS",
            env("OTEL_EXPORTER_OTLP_HEADERS").unwrap_or_default(),
        ),
    };
    let mut headers = Vec::new();
    for pair in raw.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((k, v)) = pair.split_once('=') else {
            return Err(format!(
                "{hvar}: {pair:?} is not NAME=VALUE; write e.g. {hvar}=api-key=SECRET,tenant=me"
            ));
        };
        // OpenTelemetry's headers are percent-encoded.
        let v = percent_encoding::percent_decode_str(v.trim()).decode_utf8_lossy();
        headers.push((k.trim().to_owned(), v.into_owned()));
    }
    c.otlp = Some(OtlpConfig { endpoint, headers });
    Ok(c)
}

/// The session's exporter, if the policy or the environment asks for one.
pub(crate) struct Export(Option<Exporter>);

impl Export {
    /// No export: a session an untrusted project policy stops exports nothing, since its
    /// `[audit]` (addresses, sockets) may be the project's.
    pub(crate) fn off() -> Export {
        Export(None)
    }

    /// Starts exporting `log` as `plan` says; `Err` is a line for stderr (a setup error).
    pub(crate) fn start(plan: &AuditPlan, log: &AuditLog) -> Result<Export, String> {
        let env = |k: &str| std::env::var(k).ok();
        let c = match config(plan, env) {
            Ok(c) => c,
            // Asked for by the policy: a setup error. Asked for only by the environment
            // (OTEL_LOGS_EXPORTER, set for other programs too): a warning, and no OTLP export,
            // never the reason a session does not start.
            Err(e) if !plan.export.iter().any(|t| t == "otlp") => {
                eprintln!("cordon: warning: no OTLP export of the audit log: {e}");
                config(plan, |k| env(k).filter(|_| k != "OTEL_LOGS_EXPORTER"))?
            }
            Err(e) => return Err(e),
        };
        if c.is_empty() {
            return Ok(Export(None));
        }
        let ex = Exporter::start(&c, log.session()).map_err(|e| e.to_string())?;
        if let Some(tap) = ex.tap() {
            log.export_to(tap);
        }
        Ok(Export(Some(ex)))
    }

    /// Before the session's stop event: what was exported so far, as a note in the log.
    pub(crate) fn note(&self, emit: &dyn Fn(NewEvent)) {
        let Some(ex) = &self.0 else { return };
        ex.flush(GRACE);
        let reports = ex.reports();
        let mut ev = NewEvent::new(
            Layer::Session,
            Action::Log,
            format!(
                "audit log exported (counted up to this event): {}",
                summary(&reports)
            ),
        )
        .rule(RULE);
        for r in &reports {
            ev = ev.detail(r.target, serde_json::to_value(r).unwrap_or_default());
        }
        emit(ev);
    }

    /// After the stop event: the queues get [`GRACE`] to empty; anything not delivered is
    /// said on stderr (the log file has every event regardless).
    pub(crate) fn finish(self, log: &AuditLog) {
        let Some(ex) = self.0 else { return };
        log.stop_export();
        let reports = ex.finish(GRACE);
        if reports.iter().any(|r| r.dropped + r.failed > 0) {
            eprintln!(
                "cordon: audit export incomplete ({}); the log file {} has every event",
                summary(&reports),
                log.path().display()
            );
        }
    }
}

fn summary(reports: &[ExportReport]) -> String {
    let parts: Vec<String> = reports
        .iter()
        .map(|r| {
            let mut s = format!(
                "{} {} sent, {} dropped, {} failed",
                r.target, r.sent, r.dropped, r.failed
            );
            if let Some(e) = r.error.as_deref().filter(|_| r.failed > 0) {
                s.push_str(&format!(" ({})", cordon_events::terminal::safe(e)));
            }
            s
        })
        .collect();
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(export: &[&str]) -> AuditPlan {
        AuditPlan {
            export: export.iter().map(|s| s.to_string()).collect(),
            ..AuditPlan::default()
        }
    }

    #[test]
    fn the_standard_variables_configure_otlp() {
        let env = |k: &str| match k {
            "OTEL_EXPORTER_OTLP_ENDPOINT" => Some("http://c:4318/".to_owned()),
            "OTEL_EXPORTER_OTLP_HEADERS" => Some("api-key=a%20b, x=y".to_owned()),
            _ => None,
        };
        let c = config(&plan(&["otlp"]), env).unwrap();
        let o = c.otlp.unwrap();
        assert_eq!(o.endpoint, "http://c:4318/v1/logs");
        assert_eq!(
            o.headers,
            vec![("api-key".into(), "a b".into()), ("x".into(), "y".into())]
        );
        assert!(c.journald.is_none());
        // Off unless named, or OTEL_LOGS_EXPORTER=otlp.
        assert!(config(&plan(&[]), env).unwrap().otlp.is_none());
        let on = |k: &str| (k == "OTEL_LOGS_EXPORTER").then(|| "otlp".to_owned());
        let o = config(&plan(&[]), on).unwrap().otlp.unwrap();
        assert_eq!(o.endpoint, "http://localhost:4318/v1/logs");
    }

    #[test]
    fn bad_variables_are_named_with_the_fix() {
        let grpc = |k: &str| (k == "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL").then(|| "grpc".into());
        let e = config(&plan(&["otlp"]), grpc).unwrap_err();
        assert!(e.contains("OTEL_EXPORTER_OTLP_LOGS_PROTOCOL") && e.contains("http/protobuf"));
        let tls =
            |k: &str| (k == "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT").then(|| "https://c/v1/logs".into());
        let e = config(&plan(&["otlp"]), tls).unwrap_err();
        assert!(e.contains("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT") && e.contains("Collector"));
        let h = |k: &str| (k == "OTEL_EXPORTER_OTLP_HEADERS").then(|| "nokey".into());
        assert!(
            config(&plan(&["otlp"]), h)
                .unwrap_err()
                .contains("NAME=VALUE")
        );
    }
}
