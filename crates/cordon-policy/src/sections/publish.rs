//! `[[publish]]`: sandbox ports forwarded from the host's loopback — a way *in*.

use crate::PolicyError;
use crate::schema::{Schema, Shape};
use crate::sections::{Convert, Loosen, Origin, Render, Section, Sections};

/// One `[[publish]]` entry: the host's `127.0.0.1:host_port` forwards to the sandbox's `port`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Publish {
    /// Port inside the sandbox (its loopback).
    pub port: u16,
    /// Port bound on the host's loopback.
    pub host_port: u16,
    /// Where the entry came from.
    pub origin: cordon_events::Origin,
}

raw_table! {
    /// One `[[publish]]` as written.
    pub(crate) struct Raw example "port = 3000" {
        /// The port inside the sandbox (its loopback).
        port: Integer [required, loosens] = "port = 3000",
        /// The port on the host's 127.0.0.1 (default: the same).
        host_port: Integer = "host_port = 8080",
    }
}

/// The `[[publish]]` entries of one layer, or merged: (sandbox port, host port).
#[derive(Debug, Clone, Default)]
pub(crate) struct PublishList(pub Vec<(u16, u16, Origin)>);

impl Section for PublishList {
    type Raw = Vec<serde_spanned::Spanned<Raw>>;
    type Plan = Vec<Publish>;
    const SHAPE: Shape = Shape::Tables(&Raw::TABLE);

    fn convert(raw: Self::Raw, cx: &mut Convert<'_>) -> Result<Self, PolicyError> {
        let mut out: Vec<(u16, u16, Origin)> = Vec::new();
        for e in &raw {
            let p = e.get_ref();
            let port = cx.port(cx.required(&p.port, "port", "[[publish]]")?, "port")?;
            let host_port = match &p.host_port {
                Some(h) => cx.port(h, "host_port")?,
                None => port,
            };
            if let Some((_, _, o)) = out.iter().find(|(_, h, _)| *h == host_port) {
                return Err(cx.diag(
                    format!(
                        "host port {host_port} is published twice (first at {})",
                        o.label
                    ),
                    e.span(),
                    "each [[publish]] needs its own host_port",
                ));
            }
            out.push((port, host_port, cx.origin(e.span())));
        }
        Ok(PublishList(out))
    }

    fn merge(&mut self, later: &Self) {
        for (port, host_port, o) in &later.0 {
            // A later layer's entry for the same host port replaces the earlier one.
            self.0.retain(|(_, h, _)| h != host_port);
            self.0.push((*port, *host_port, o.clone()));
        }
    }

    fn loosen(full: &Sections, base: &Sections, out: &mut Loosen<'_>) {
        // A published port is a way *in*: host tools that expect a service on that port (a
        // database, a local model server) would hand their credentials to the sandbox.
        for (port, host_port, o) in &full.publish.0 {
            if !base
                .publish
                .0
                .iter()
                .any(|(p, h, _)| p == port && h == host_port)
            {
                out.add(
                    o,
                    format!(
                        "publishes the sandbox's port {port} on the host's 127.0.0.1:{host_port}"
                    ),
                );
            }
        }
    }

    fn plan(self) -> Vec<Publish> {
        self.0
            .into_iter()
            .map(|(port, host_port, o)| Publish {
                port,
                host_port,
                origin: o.label.into(),
            })
            .collect()
    }

    fn render(list: &Vec<Publish>, out: &mut Render) {
        for p in list {
            out.entry("publish", &p.origin);
            out.line(format!("port = {}", p.port));
            out.line(format!("host_port = {}", p.host_port));
        }
    }
}
