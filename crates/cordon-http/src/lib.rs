//! cordon's HTTP layer (layer 3), host side: what it takes to read and decide the sandbox's
//! HTTPS requests.
//!
//! - [`CertAuthority`]: cordon's own interception CA (ECDSA P-256), made on first use and kept
//!   0600 under the user's data directory, and the per-host leaf certificates it signs on
//!   demand (cached). Trust boundary: the CA's private key stays in the supervisor; the
//!   sandbox only ever sees the CA *certificate*, in its trust bundle.
//! - [`rules`]: ordered request rules, first match wins — host glob, port, method, path and
//!   query globs, header globs, body size — each decision naming its rule.
//! - [`HttpLayer::from_plan`]: the whole layer built from the [`Plan`](cordon_policy::Plan)
//!   in one place — `[[http.rule]]`s and `[[network.allow]]`, `[tls] upstream_ca`, the judge,
//!   `[dlp]`, the broker for `ask`.
//! - [`Interceptor`]: serves each sandbox connection the gateway hands over; every request
//!   runs the pipeline admit → decide → read body → check → forward → relay (one module
//!   per stage, crate-internal). Swaps credential placeholders for real values at the wire
//!   ([`WireCredential`]) and scrubs them from responses. Trust boundary: real values live
//!   here only, never in what goes back into the sandbox.
//! - [`credentials`]: a plan's `[credentials.NAME]` resolved on the host into a
//!   [`WireCredential`] (its real value, the sandbox's placeholder, its slot).
//! - [`Denied`]: a flow the gateway refused that speaks TLS, answered after the handshake
//!   with a 403 naming the rule, the reason and the lines that would allow it (nothing is
//!   forwarded), so the client prints cordon's words.
//! - [`dlp`]: outbound secret scanning (token shapes, known values, their encodings), with
//!   each kind's issuers exempt.
//! - [`mcp`]: MCP over HTTP understood — each `tools/call` in a JSON-RPC body decided by
//!   `[[mcp.rule]]` (a refusal answered as a JSON-RPC error, nothing forwarded), `tools/list`
//!   answers filtered, each tool pinned on first sight in a host-side file and a changed one
//!   held ([`mcp::pins`]). Trust boundary: the pins file is written by the supervisor only.
//! - [`judge`] and [`ask`]: the LLM judge and the approval broker, for `judge` and `ask`
//!   rules.
//!
//! Every crossing named: this crate runs on the **host side**, in the supervisor. It never
//! touches the TUN device itself and does not depend on `cordon-net`: the gateway decides
//! which flows are HTTP and hands over the sandbox's side of each as a plain tokio stream
//! (the binary adapts [`HttpLayer`] to `cordon_net::FlowHandler`), and the layer connects
//! upstream only through the [`ConnectFn`] it is given — the gateway's policy-checked,
//! rebinding-safe connect. Input is the Plan; output is events.
//!
//! Requests come from the sandbox: every input is hostile, nothing here panics on it.
//!
//! ```
//! use cordon_http::rules::{Request, decide};
//! use cordon_policy::{HttpAction, HttpRule};
//! let rules = vec![HttpRule {
//!     methods: vec!["POST".into()],
//!     path: Some("/v1/messages*".into()),
//!     ..HttpRule::new("anthropic", "api.anthropic.com".parse().unwrap(), HttpAction::Allow)
//! }];
//! let req = Request { method: "POST", host: "api.anthropic.com", port: 443, path: "/v1/messages", ..Request::default() };
//! assert_eq!(decide(&rules, HttpAction::Deny, &req).action, HttpAction::Allow);
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod ask;
mod ca;
pub mod credentials;
mod denied;
pub mod dlp;
mod encoding;
pub mod explain;
pub mod intercept;
pub mod judge;
mod layer;
pub mod mcp;
mod pipeline;
pub mod rules;
mod tls_io;
mod upstream;

pub use ask::Asker;
pub use ca::{CaError, CertAuthority};
pub use denied::Denied;
pub use intercept::{Config, ConnectFn, InterceptError, Interceptor, Owned, WireCredential};
pub use judge::{Judge, JudgeConfig};
pub use layer::{AskConfig, HttpLayer, HttpLayerError, Inputs};
