//! `[tls]`: which hosts are never intercepted, and which extra CAs upstream servers may use
//! (layer 3).

use std::path::PathBuf;

use serde_spanned::Spanned;

use crate::PolicyError;
use crate::pattern::HostPattern;
use crate::schema::{Schema, Shape};
use crate::sections::{
    Convert, Loosen, Origin, PathEntry, Render, Section, Sections, append_new, append_rules,
};

/// TLS interception exceptions and upstream trust.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TlsPlan {
    /// Hosts decided by name only and never intercepted (clients that pin).
    pub passthrough: Vec<HostPattern>,
    /// Extra CA certificates (PEM files) trusted for upstream servers.
    pub upstream_ca: Vec<PathBuf>,
}

raw_table! {
    /// `[tls]` as written.
    pub(crate) struct Raw example "passthrough = [\"*.pinned.example\"]" {
        /// Hosts never intercepted, decided by name only (clients that pin certificates).
        passthrough: Strings [loosens] = "passthrough = [\"*.pinned.example\"]",
        /// Extra CA certificates (PEM files) trusted for upstream servers.
        upstream_ca: StringOrStrings [loosens] = "upstream_ca = \"/etc/ssl/certs/ca-certificates.crt\"",
    }
}

/// `[tls]` of one layer, or merged.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tls {
    pub passthrough: Vec<(HostPattern, Origin)>,
    pub upstream_ca: Vec<PathEntry>,
}

impl Section for Tls {
    type Raw = Raw;
    type Plan = TlsPlan;
    const SHAPE: Shape = Shape::Table(&Raw::TABLE);

    fn convert(raw: Raw, cx: &mut Convert<'_>) -> Result<Self, PolicyError> {
        let mut out = Tls::default();
        for p in &raw.passthrough {
            out.passthrough
                .push((cx.host_glob(p)?, cx.origin(p.span())));
        }
        if let Some(cas) = raw.upstream_ca {
            let span = cas.span();
            let located: Vec<Spanned<String>> = cas
                .into_inner()
                .0
                .into_iter()
                .map(|c| Spanned::new(span.clone(), c))
                .collect();
            out.upstream_ca = cx.paths(&located, "upstream_ca", false)?;
        }
        Ok(out)
    }

    fn merge(&mut self, later: &Self) {
        append_new(&mut self.passthrough, &later.passthrough, |a, b| a == b);
        append_rules(&mut self.upstream_ca, &later.upstream_ca);
    }

    fn loosen(full: &Sections, base: &Sections, out: &mut Loosen<'_>) {
        let (f, b) = (&full.tls, &base.tls);
        for (p, o) in &f.passthrough {
            if !b.passthrough.iter().any(|(x, _)| x == p) {
                out.add(o, format!("exempts {p} from HTTPS inspection"));
            }
        }
        for r in &f.upstream_ca {
            if !b.upstream_ca.iter().any(|x| x.path == r.path) {
                out.add(
                    &r.origin,
                    format!("trusts {} for upstream TLS", r.path.display()),
                );
            }
        }
    }

    fn plan(self) -> TlsPlan {
        TlsPlan {
            passthrough: self.passthrough.into_iter().map(|(p, _)| p).collect(),
            upstream_ca: self.upstream_ca.into_iter().map(|r| r.path).collect(),
        }
    }

    fn render(tls: &TlsPlan, out: &mut Render) {
        out.header("tls");
        let pt: Vec<String> = tls.passthrough.iter().map(ToString::to_string).collect();
        out.strings("passthrough", &pt);
        let ca: Vec<String> = tls
            .upstream_ca
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        out.strings("upstream_ca", &ca);
    }
}
