//! What the sandboxed command sees: the filesystem view (masked copies, placed files and
//! sockets, the resolver, `/etc/hosts`, the trust bundle, this program for `cordon explain`)
//! and its environment (the allow-list, the proxy and bundle variables, `CORDON_NOTICE`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use cordon_events::{Action, Layer, NewEvent};
use cordon_policy::{FilesystemPlan, Plan};

use super::Command;
use super::report::report_layout;
use crate::SandboxError;
use crate::layout::{self, MountOp};
use crate::net::NetAttach;
use crate::protocol::NetSetup;

/// The filesystem view, reported: the layout of `fs` with the session's staged paths, the
/// masked copies shown in place of credential files, and, with a network of its own, the
/// sandbox's resolver and (with an intercepting gateway) its trust bundle. Returns the layout
/// and where that bundle is, for the environment.
pub(super) fn view(
    fs: &FilesystemPlan,
    cmd: &Command,
    net_setup: NetSetup,
    net: Option<&dyn NetAttach>,
    emit: &dyn Fn(NewEvent),
) -> Result<(layout::Layout, Option<String>), SandboxError> {
    let mut layout = layout::prepare_with_state(fs, &cmd.staged);
    for (path, content) in &cmd.shown {
        // Never the real file instead: the command does not start.
        let at = layout
            .show_copy(path, content)
            .map_err(|source| SandboxError::ShownCopy { source })?;
        emit(NewEvent::new(
            Layer::Filesystem,
            Action::Apply,
            format!("{} is shown as a masked copy", at.display()),
        ));
    }
    for (path, content) in &cmd.placed {
        if let Err(e) = layout.place_file(path, content) {
            emit(NewEvent::new(
                Layer::Filesystem,
                Action::Degraded,
                format!("{e}: not placed"),
            ));
        }
    }
    for sock in &cmd.sockets {
        if let Err(e) = layout.place_socket(&sock.path, &sock.host) {
            emit(NewEvent::new(
                Layer::Filesystem,
                Action::Degraded,
                format!("{e}: {} not set", sock.env),
            ));
        }
    }
    for (path, host) in &cmd.bound {
        layout
            .place_program(path, host)
            .map_err(|e| SandboxError::Setup {
                stage: "view".into(),
                message: format!("{e}: {} not bound", host.display()),
            })?;
    }
    place_program(&mut layout, emit);
    if net_setup != NetSetup::Host {
        resolv_conf(&mut layout, &gateway_at(net));
    }
    hosts_file(&mut layout);
    let bundle_at = match (&net_setup, net.and_then(|n| n.ca_bundle())) {
        (NetSetup::Gateway { .. }, Some(bundle)) => trust_bundle(&mut layout, bundle),
        _ => None,
    };
    #[cfg(debug_assertions)]
    crate::test_off::apply(&mut layout, emit);
    report_layout(&layout, emit);
    Ok((layout, bundle_at))
}

/// The command's environment, reported: the policy's allow-list of the host's, the proxy
/// variables that point programs honouring them at the gateway's explicit proxy, the trust
/// bundle's variables, and `CORDON_NOTICE`.
pub(super) fn environment(
    plan: &Plan,
    cmd: &Command,
    net_setup: NetSetup,
    gateway_at: &str,
    bundle_at: Option<&str>,
    layout: &layout::Layout,
    emit: &dyn Fn(NewEvent),
) -> Vec<(OsString, OsString)> {
    let mut env = plan.env.apply(std::env::vars_os());
    let explain_at = explain_path(&env, layout);
    let mut set = |k: &str, v: &str| {
        env.retain(|(n, _)| n != k);
        env.push((k.into(), v.into()));
    };
    if let NetSetup::Gateway { proxy_port, .. } = net_setup {
        let proxy = format!("http://{gateway_at}:{proxy_port}");
        for k in [
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
            "http_proxy",
            "https_proxy",
            "all_proxy",
        ] {
            set(k, &proxy);
        }
        for k in ["NO_PROXY", "no_proxy"] {
            set(k, "localhost,127.0.0.1,::1");
        }
        set("NODE_USE_ENV_PROXY", "1");
    }
    if let Some(path) = bundle_at {
        for k in crate::net::BUNDLE_VARS {
            set(k, path);
        }
    }
    if let Some(path) = explain_at {
        set("PATH", &path);
    }
    for sock in &cmd.sockets {
        let placed = layout
            .mounts
            .iter()
            .any(|m| matches!(m, MountOp::Socket { path, .. } if *path == sock.path));
        if placed && !sock.env.is_empty() {
            set(&sock.env, &sock.path.to_string_lossy());
        }
    }
    env.push(("CORDON_NOTICE".into(), denial_notice(layout).into()));
    let passed: Vec<String> = env
        .iter()
        .map(|(k, _)| k.to_string_lossy().into_owned())
        .collect();
    let dropped: Vec<String> = std::env::vars_os()
        .map(|(k, _)| k.to_string_lossy().into_owned())
        .filter(|k| !passed.contains(k))
        .collect();
    emit(
        NewEvent::new(
            Layer::Env,
            Action::Apply,
            format!(
                "{} variables passed, {} dropped",
                passed.len(),
                dropped.len()
            ),
        )
        .detail("passed", passed.clone())
        .detail("dropped", dropped),
    );
    env
}

/// The sandbox's hostname (its own UTS namespace).
pub(super) const HOSTNAME: &str = "cordon";

/// The host's `/etc/hosts` with the sandbox's hostname on its loopback, as container runtimes
/// do: programs that look up their own name (`hostname -f`, Java's `getLocalHost`) find it
/// without asking DNS, where a single-label name is NXDOMAIN.
fn hosts_file(layout: &mut layout::Layout) {
    let mut hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    if !hosts.is_empty() && !hosts.ends_with('\n') {
        hosts.push('\n');
    }
    hosts.push_str(&format!(
        "# added by cordon: the sandbox's hostname\n127.0.1.1\t{HOSTNAME}\n"
    ));
    bind_content(layout, "/etc/hosts", &hosts);
}

/// Point the sandbox's resolver at its loopback, where the gateway's DNS sockets are. Where
/// `/etc/resolv.conf` is a link into a masked directory (systemd-resolved's stub under /run),
/// it is left dangling: glibc then asks 127.0.0.1, which is the same place.
fn resolv_conf(layout: &mut layout::Layout, at: &str) {
    bind_content(
        layout,
        "/etc/resolv.conf",
        &format!(
            "# written by cordon: the egress gateway answers here\nnameserver {at}\noptions edns0\n"
        ),
    );
}

/// Where the sandbox reaches the gateway's resolver and proxy: its loopback, or the address
/// a VM guest's link gives it ([`NetAttach::link_gateway`]).
pub(super) fn gateway_at(net: Option<&dyn NetAttach>) -> String {
    net.and_then(|n| n.link_gateway())
        .map_or_else(|| "127.0.0.1".to_string(), |a| a.to_string())
}

/// Binds a read-only file holding `content` over the regular file `path` leads to (through
/// links), unless that lies in a masked directory; returns the file it covered.
fn bind_content(layout: &mut layout::Layout, path: &str, content: &str) -> Option<PathBuf> {
    bind_over(layout, path, |path| MountOp::Content {
        path,
        content: content.to_string(),
    })
}

/// [`bind_content`] with the file `op` makes for the target.
fn bind_over(
    layout: &mut layout::Layout,
    path: &str,
    op: impl FnOnce(PathBuf) -> MountOp,
) -> Option<PathBuf> {
    let target = std::fs::canonicalize(path).ok()?;
    if !target.is_file() || layout.masks().any(|(m, _)| target.starts_with(m)) {
        return None;
    }
    let covered = layout.mounts.iter().any(|m| {
        matches!(m, MountOp::Content { path, .. } | MountOp::File { path, .. } if *path == target)
    });
    if covered {
        return None;
    }
    layout.mounts.push(op(target.clone()));
    Some(target)
}

/// Binds `bundle` over every distribution bundle file this host has (once per real file);
/// returns the path the variables should name.
fn trust_bundle(layout: &mut layout::Layout, bundle: crate::TrustBundle) -> Option<String> {
    let mut first = None;
    for p in crate::net::BUNDLE_PATHS {
        let bound = match &bundle {
            crate::TrustBundle::File(host) => bind_over(layout, p, |path| MountOp::File {
                path,
                host: host.clone(),
            }),
            crate::TrustBundle::Inline(pem) => bind_content(layout, p, pem),
        };
        if bound.is_some() {
            first.get_or_insert_with(|| (*p).to_string());
        }
    }
    first
}

/// This cordon executable, bound at [`crate::explain::PROGRAM`] when the view hides where
/// it lives (a private `/tmp`, a masked directory).
fn place_program(layout: &mut layout::Layout, emit: &dyn Fn(NewEvent)) {
    let Ok(exe) = std::env::current_exe().and_then(|e| e.canonicalize()) else {
        return;
    };
    if program_visible(layout, &exe) {
        return;
    }
    if let Err(e) = layout.place_program(Path::new(crate::explain::PROGRAM), &exe) {
        emit(NewEvent::new(
            Layer::Filesystem,
            Action::Degraded,
            format!("{e}: `cordon explain` is not available inside"),
        ));
    }
}

fn program_visible(layout: &layout::Layout, exe: &Path) -> bool {
    // A fresh tmpfs (the private /tmp) is "private" to explain, but holds nothing of the host.
    let deciding = layout
        .mounts
        .iter()
        .rev()
        .find(|m| exe.starts_with(m.path()));
    if matches!(deciding, Some(MountOp::Tmpfs { .. })) {
        return false;
    }
    !matches!(
        crate::explain::path_access(layout, exe),
        crate::explain::PathAccess::Hidden { .. } | crate::explain::PathAccess::Absent
    )
}

/// `PATH` with the directory of this cordon executable appended (where the view shows it, or
/// [`crate::explain::PROGRAM`]'s when it was placed there), unless it is on `PATH` already:
/// the denial messages name `cordon explain …`, and the agent must be able to run it. `None`
/// when nothing changes (or it could be neither seen nor placed: a degraded event said so).
fn explain_path(env: &[(OsString, OsString)], layout: &layout::Layout) -> Option<String> {
    let host_exe = std::env::current_exe().ok()?.canonicalize().ok()?;
    let placed = Path::new(crate::explain::PROGRAM);
    let exe = if program_visible(layout, &host_exe) {
        host_exe
    } else if layout
        .mounts
        .iter()
        .any(|m| matches!(m, MountOp::Program { path, .. } if path == placed))
    {
        placed.to_path_buf()
    } else {
        return None;
    };
    let dir = exe.parent()?;
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.to_string_lossy().into_owned())
        .unwrap_or_default();
    let on_path = path.split(':').any(|d| {
        Path::new(d)
            .join("cordon")
            .canonicalize()
            .is_ok_and(|p| p == exe)
    });
    if on_path || dir.to_str()?.contains(':') {
        return None;
    }
    Some(if path.is_empty() {
        dir.display().to_string()
    } else {
        format!("{path}:{}", dir.display())
    })
}

/// What the agent is told about denials: agents otherwise retry a masked read through other
/// paths, links or tools. The sandboxed program sees this as `CORDON_NOTICE`.
fn denial_notice(layout: &layout::Layout) -> String {
    let masked: Vec<String> = layout
        .masks()
        .map(|(p, rule)| format!("{} (rule: {rule})", p.display()))
        .collect();
    // Agents look for a missing config file elsewhere: say the home holds only part of itself.
    let home = if !layout.home_view {
        ""
    } else {
        "The home shows only what tools need (toolchains, configuration without secrets, the \
         agent's own state); anything else there is not missing by accident but hidden. "
    };
    format!(
        "This program runs inside cordon. Denials are deliberate policy, not errors to work around: \
         retrying another way (other paths, links, copies, tools, proxies) will not help. \
         Outside the project the filesystem is read-only; these paths are masked: {}. {home}\
         To learn which rule decides and why, ask `cordon explain -- COMMAND…`, `cordon explain \
         [METHOD] URL` or `cordon explain [--write] PATH`; the effective policy is in {}.",
        masked.join(", "),
        crate::explain::POLICY_TOML
    )
}
