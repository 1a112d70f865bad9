//! The inventory of the boundary: every way between the host side (the supervisor, the
//! gateway, the services cordon runs for the sandbox) and the sandbox (init, the publish
//! helper, the command and its children). This is the one list; the docs
//! (`docs/architecture.md`, `docs/security.md`) are written from it; a descriptor crosses the
//! control channel only on a frame that names its [`Crossing`] (`protocol::Frame`: sent by
//! `protocol::hand_over`, kept by `protocol::recv_handed`, anything else closed); and
//! `crates/cordon/tests/crossings.rs` checks that the processes on each side hold exactly the
//! descriptors it lists.
//!
//! Not crossings, because nothing passes: the host's `/proc` view of the sandbox's processes
//! (the exec supervisor reads a trapped process's memory; the gateway reads `/proc/PID` to
//! name a flow's program), the cgroups the supervisor writes, and the approval broker's
//! socket, in a directory every sandbox has masked.

/// One way between the two sides. Each variant says who makes it, what may travel through
/// it, and how the side that receives it treats what it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Crossing {
    /// The filesystem view: the ordered [`crate::MountOp`]s the supervisor sends in the
    /// `InitSpec` and init mounts before the command starts (binds, overlays of the session's
    /// state, masks, files cordon writes: policy, trust bundle, `resolv.conf`). Locked by the
    /// command's nested user namespace. Everything the command writes to a staged path stays
    /// in the session's upper directory until the user accepts it at review.
    View,
    /// A unix socket pair the supervisor makes before the clone (`supervisor::spawn::launch`,
    /// `fork_launch`); init's end is fd 3 (`init::CONTROL_FD`). Down: the network setup, the
    /// view's overlays, the spec; up: frames of the `protocol` module, a descriptor riding with
    /// those that name a crossing. Init closes it before it waits for the command, so the
    /// command never holds it. Frames are length-capped; init is trusted only until the
    /// command starts, and nothing is read from it afterwards but the publish helper's
    /// answers.
    ControlChannel,
    /// Descriptors 0, 1 and 2: without a pty of its own (`--no-tty`, or cordon's stdin not a
    /// terminal) the command inherits cordon's own stdin, stdout and stderr through init.
    /// Whatever cordon was given, the command reads and writes directly; it is in a new
    /// session, so it cannot reach a terminal's input queue (TIOCSTI).
    Stdio,
    /// A pty of the sandbox's own devpts, made by init (`sys::open_pty`) when the user has a
    /// terminal; the slave becomes the command's 0, 1 and 2, the master goes up with
    /// `FromInit::Pty` to the supervisor's `relay`. Down: the user's keystrokes and window
    /// size; up: the command's output, written to the user's terminal as it came.
    Pty,
    /// The signals of `init::FORWARDED` the supervisor catches (`Signals::catch`) and sends
    /// to init through its pidfd; init's handler passes each to the command. Nothing else is
    /// signalled from the host but `SIGKILL` to init when setup fails or the sandbox must end.
    Signals,
    /// The seccomp user-notification descriptor the command's filter returns
    /// (`seccomp::install`), sent to init over the report socket and up with
    /// `FromInit::Listener` to the exec supervisor. Up: one notification per trapped `execve`
    /// (and, with `--trace-home`, open/stat); every argument is a pointer into the trapped
    /// process's memory, which the supervisor reads, reads again and checks against the
    /// notification id (still valid) before it answers.
    SeccompNotify,
    /// The TUN device, made by init in the sandbox's network namespace (`sys::open_tun`,
    /// holding the default route) and sent up with `FromInit::NetTun` to the gateway. Every
    /// IP packet the sandbox sends or receives; each is attacker-controlled, parsed by the
    /// gateway's userspace stack, which terminates every flow.
    Tun,
    /// Two UDP sockets init binds on the sandbox's loopback port 53 (127.0.0.1 and
    /// 127.0.0.53, where `resolv.conf` points), sent up with `FromInit::NetDns` to the
    /// gateway's resolver. Queries are hostile; answers are fake addresses, nothing is asked
    /// upstream.
    DnsSockets,
    /// The explicit proxy's listener, bound by init on the sandbox's `127.0.0.1:3128`
    /// (`HTTP_PROXY`), sent up with `FromInit::NetProxy`. Each accepted connection is the
    /// sandbox's, decided like a flow from the TUN.
    ProxyListener,
    /// A `NETLINK_SOCK_DIAG` socket of the sandbox's network namespace (optional), sent up
    /// with `FromInit::NetDiag`; the gateway asks it which socket a flow is, to name the
    /// process behind it. Answers come from the kernel, not the sandbox.
    SockDiag,
    /// The command's end: a pipe init makes after the command's fork, its read end sent up
    /// with `FromInit::Started`. Init writes one byte, the command's exit code, once every
    /// process inside is gone; init's own wait status (through its pidfd) says the same.
    ExitPipe,
    /// With `[[publish]]` only: a child of init outside the command's namespaces, not
    /// dumpable, keeps the control channel (`init::inward_helper`). Down: "connect to your
    /// loopback's port N"; up: the connected socket (`InwardReply`), whose bytes are the
    /// sandboxed server's and go to whoever connected to the published host port.
    PublishHelper,
    /// A unix socket of a service cordon runs host-side, bound inside a masked directory
    /// ([`crate::MountOp::Socket`], [`crate::PlacedSocket`]): today the filtering ssh agent
    /// at `/run/cordon/ssh-agent.sock` (`SSH_AUTH_SOCK`). The sandbox may say anything on
    /// it; the service answers only its own protocol, filtered (cordon-ssh).
    HostSocket,
}

/// How a crossing crosses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carrier {
    /// Mounted into the view (reached by path).
    Mount,
    /// A descriptor the sandbox inherits from the host side.
    Inherited,
    /// A descriptor made inside and passed out over the control channel (SCM_RIGHTS).
    Passed,
    /// Signals, through init's pidfd.
    Signal,
}

/// Which way what matters travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Host to sandbox only.
    In,
    /// Sandbox to host only.
    Out,
    /// Both ways.
    Both,
}

/// A process inside the sandbox that holds a descriptor once the command runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder {
    /// PID 1, `cordon-init`.
    Init,
    /// The `[[publish]]` helper, a child of init also named `cordon-init`.
    PublishHelper,
    /// The command (and what it starts, unless it closes them).
    Command,
}

impl Crossing {
    /// Every crossing, in the order the docs list them.
    pub const ALL: [Crossing; 13] = [
        Crossing::View,
        Crossing::ControlChannel,
        Crossing::Stdio,
        Crossing::Pty,
        Crossing::Signals,
        Crossing::SeccompNotify,
        Crossing::Tun,
        Crossing::DnsSockets,
        Crossing::ProxyListener,
        Crossing::SockDiag,
        Crossing::ExitPipe,
        Crossing::PublishHelper,
        Crossing::HostSocket,
    ];

    /// How it crosses.
    pub fn carrier(self) -> Carrier {
        match self {
            Crossing::View | Crossing::HostSocket => Carrier::Mount,
            Crossing::ControlChannel | Crossing::Stdio => Carrier::Inherited,
            Crossing::Signals => Carrier::Signal,
            Crossing::Pty
            | Crossing::SeccompNotify
            | Crossing::Tun
            | Crossing::DnsSockets
            | Crossing::ProxyListener
            | Crossing::SockDiag
            | Crossing::ExitPipe
            | Crossing::PublishHelper => Carrier::Passed,
        }
    }

    /// Which way what matters travels.
    pub fn direction(self) -> Direction {
        match self {
            Crossing::View | Crossing::Signals => Direction::In,
            Crossing::SeccompNotify | Crossing::SockDiag | Crossing::ExitPipe => Direction::Out,
            Crossing::ControlChannel
            | Crossing::Stdio
            | Crossing::Pty
            | Crossing::Tun
            | Crossing::DnsSockets
            | Crossing::ProxyListener
            | Crossing::PublishHelper
            | Crossing::HostSocket => Direction::Both,
        }
    }

    /// The processes inside that hold a descriptor of this crossing once the command runs;
    /// every other end is the host side's (or closed).
    pub fn held_inside(self) -> &'static [Holder] {
        match self {
            Crossing::Stdio => &[Holder::Init, Holder::PublishHelper, Holder::Command],
            Crossing::ExitPipe => &[Holder::Init],
            Crossing::ControlChannel => &[Holder::PublishHelper],
            // The pty's slave is the command's stdio, counted under Stdio.
            _ => &[],
        }
    }

    /// A short name, as the docs' table and the tests say it.
    pub fn name(self) -> &'static str {
        match self {
            Crossing::View => "filesystem view",
            Crossing::ControlChannel => "control channel",
            Crossing::Stdio => "stdio",
            Crossing::Pty => "pty",
            Crossing::Signals => "signals",
            Crossing::SeccompNotify => "seccomp notification fd",
            Crossing::Tun => "TUN device",
            Crossing::DnsSockets => "DNS sockets",
            Crossing::ProxyListener => "proxy listener",
            Crossing::SockDiag => "sock_diag socket",
            Crossing::ExitPipe => "exit pipe",
            Crossing::PublishHelper => "publish helper",
            Crossing::HostSocket => "host sockets mounted inside",
        }
    }

    /// The tests that show this crossing's property, as `file::test` under `crates/`.
    pub fn shown_by(self) -> &'static [&'static str] {
        match self {
            Crossing::View => &[
                "cordon/tests/escape_fs.rs::write_outside_the_project_each_layer_alone",
                "cordon/tests/isolation.rs::masks_cannot_be_unmounted_or_remounted",
            ],
            Crossing::ControlChannel => &[
                "cordon-sandbox/src/protocol.rs::the_spec_and_its_file_contents_arrive_whole_with_the_contents_outside_the_json",
                "cordon/tests/crossings.rs::each_side_holds_exactly_the_listed_descriptors",
            ],
            Crossing::Stdio => &[
                "cordon/tests/crossings.rs::each_side_holds_exactly_the_listed_descriptors",
                "cordon/tests/isolation.rs::no_terminal_injection_without_a_pty",
            ],
            Crossing::Pty => &[
                "cordon/tests/lifecycle.rs::interactive_shell_under_a_pty",
                "cordon/tests/lifecycle.rs::window_resizes_reach_the_sandbox",
                "cordon/tests/crossings.rs::the_command_under_a_pty_holds_only_its_terminal",
            ],
            Crossing::Signals => &[
                "cordon/tests/lifecycle.rs::signals_are_forwarded",
                "cordon/tests/lifecycle.rs::ctrl_c_reaches_the_foreground_job",
            ],
            Crossing::SeccompNotify => &[
                "cordon/tests/syscalls.rs::exec_deny_rule_blocks_git_push_but_not_git_status",
                "cordon/tests/crossings.rs::the_gateways_descriptors_are_held_by_the_host_side_only",
            ],
            Crossing::Tun => &[
                "cordon/tests/isolation.rs::network_namespace_is_private",
                "cordon/tests/crossings.rs::the_gateways_descriptors_are_held_by_the_host_side_only",
            ],
            Crossing::DnsSockets => &[
                "cordon/tests/network.rs::dns_never_leaks_and_blocklist_is_nxdomain",
                "cordon/tests/crossings.rs::the_gateways_descriptors_are_held_by_the_host_side_only",
            ],
            Crossing::ProxyListener => &[
                "cordon/tests/network.rs::http_by_name_with_and_without_proxy",
                "cordon/tests/crossings.rs::the_gateways_descriptors_are_held_by_the_host_side_only",
            ],
            Crossing::SockDiag => &[
                "cordon-sandbox/src/net.rs::the_socket_table_names_each_connection_by_its_addresses",
                "cordon/tests/network/load_modes_events.rs::each_short_flow_names_its_process",
                "cordon/tests/crossings.rs::the_gateways_descriptors_are_held_by_the_host_side_only",
            ],
            Crossing::ExitPipe => &[
                "cordon/tests/lifecycle.rs::exit_codes_follow_the_command",
                "cordon/tests/crossings.rs::each_side_holds_exactly_the_listed_descriptors",
            ],
            Crossing::PublishHelper => &[
                "cordon/tests/network.rs::publish_exposes_a_server_started_inside",
                "cordon/tests/crossings.rs::the_publish_helper_holds_only_the_control_channel",
            ],
            Crossing::HostSocket => &[
                "cordon/tests/ssh.rs::git_push_over_ssh_signs_only_for_allowed_hosts",
                "cordon/tests/crossings.rs::the_only_sockets_in_the_view_are_the_placed_ones",
            ],
        }
    }
}

#[cfg(test)]
#[path = "crossing_tests.rs"]
mod tests;
