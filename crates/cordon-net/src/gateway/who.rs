//! The process behind a connection: looked up for every flow's event (see [`super::owner`]),
//! and, for rules keyed on programs, found and identified before such a rule decides it.
//! Only then: a connection no such rule could decide never waits.
//!
//! The owner is the process holding the sandbox side's socket while its SYN is held (or while
//! its proxy connection is open): the one that made it. One that cannot be found (it exited,
//! the lookup timed out) is no program, so only rules for any process let its connection out.

use std::sync::Arc;
use std::time::Duration;

use cordon_policy::{Owner, Process};

use super::identity::Identify;
use super::owner::{self, OwnerSlot};
use super::policy::{self, Dest, FlowDecision};
use super::{Flow, Redact, Shared};

/// Whether descriptor `fd` of host process `pid` is close-on-exec (`/proc/PID/fdinfo`'s
/// `flags`, octal); `false` when it cannot be read.
fn close_on_exec(pid: i32, fd: Option<u32>) -> bool {
    const O_CLOEXEC: u32 = 0o2_000_000;
    let Some(fd) = fd else {
        return false;
    };
    // One read: fdinfo is short, and `read_to_string` would ask procfs for a size it does not
    // know and read in growing steps, on every keyed connection.
    let mut buf = [0u8; 512];
    let n = std::fs::File::open(format!("/proc/{pid}/fdinfo/{fd}"))
        .and_then(|mut f| std::io::Read::read(&mut f, &mut buf))
        .unwrap_or(0);
    String::from_utf8_lossy(&buf[..n])
        .lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        .is_some_and(|f| f & O_CLOEXEC != 0)
}

/// How long a decision waits for the process behind a connection. The common case is
/// answered at once ([`super::owner::Lookups::quick`]); the rest takes a walk of the
/// sandbox's process tree, milliseconds.
const OWNER_DECIDE: Duration = Duration::from_secs(2);

impl Shared {
    /// Looks up the process behind `flow` (see [`owner`]), once per flow: on the spot when it
    /// is where the last flow's was, else in the background. [`Shared::open`] asks while the
    /// host-side connect is under way and the client's SYN is held (its socket surely exists
    /// then); later calls are no-ops.
    pub(crate) fn find_owner(&self, flow: &Flow) {
        self.find_owner_of(&flow.owner, flow.client);
    }

    /// [`find_owner`](Self::find_owner) of a connection from `client` into `slot`.
    pub(crate) fn find_owner_of(
        &self,
        slot: &Arc<owner::OwnerSlot>,
        client: Option<(std::net::SocketAddrV4, std::net::SocketAddrV4)>,
    ) {
        if !slot.ask() {
            return;
        }
        let owners = self.owners.get_or_init(|| {
            let (init, sockets) = self.sandbox.get().cloned()?;
            let http = self.http.get().map(|h| h.handler.clone());
            let redact = self.redact.clone();
            let redact: Redact = Arc::new(move |t: &str| match &http {
                Some(h) => h.redact(t),
                None => redact(t),
            });
            owner::Lookups::start(init, sockets, redact).ok()
        });
        let (Some((local, remote)), Some(owners)) = (client, owners) else {
            slot.set(None);
            return;
        };
        let inode = match owners.quick(local, remote) {
            owner::Quick::Found(o) => return slot.set(Some(o)),
            owner::Quick::Inode(i) => Some(i),
            owner::Quick::Unknown => None,
        };
        owners.ask(owner::Request {
            local,
            remote,
            inode,
            slot: slot.clone(),
        });
    }

    /// Who made the connection from `client` (into `slot`) to `host`, when a rule could
    /// care: `None` when no rule or credential for `host` names programs, or the process
    /// could not be found.
    pub(crate) async fn owner_for(
        &self,
        slot: &Arc<OwnerSlot>,
        client: Option<(std::net::SocketAddrV4, std::net::SocketAddrV4)>,
        host: &str,
    ) -> Option<Arc<Owner>> {
        if !self.program_hosts.iter().any(|h| h.matches(host)) {
            return None;
        }
        self.find_owner_of(slot, client);
        slot.settled(OWNER_DECIDE).await;
        let found = slot.get()?;
        let identify = self
            .identify
            .get_or_init(|| {
                let (init, _) = self.sandbox.get()?;
                Some(Identify::new(*init, self.execs.clone()))
            })
            .as_ref()?;
        let mut owner = identify.owner(found.host_pid)?;
        // A socket that is not close-on-exec may be held by several processes (inherited
        // across an exec, or passed on): the holder found first need not be the one that
        // writes to it. Then every holder must be the same program.
        if owner.process.untrusted.is_none() && !close_on_exec(found.host_pid, found.fd) {
            let (init, _) = self.sandbox.get()?;
            let inode = found.inode?;
            let same = |p: &i32| {
                identify.owner(*p).is_some_and(|o| {
                    Process {
                        pid: 0,
                        ..o.process
                    } == Process {
                        pid: 0,
                        ..owner.process.clone()
                    }
                })
            };
            if !owner::holders(*init, inode).iter().all(same) {
                owner.process.untrusted = Some("its socket is held by another program too".into());
            }
        }
        Some(Arc::new(owner))
    }

    /// `verdict` for `flow` decided again with its process, when only rules that name
    /// programs could let it out (`verdict` then says [`policy::OWNER_UNKNOWN`]).
    pub(crate) async fn decide_for_owner(
        &self,
        flow: &mut Flow,
        dest: &Dest,
        port: u16,
        verdict: FlowDecision,
    ) -> FlowDecision {
        if !verdict.rule.is(policy::OWNER_UNKNOWN) {
            return verdict;
        }
        flow.who = self.owner_for(&flow.owner, flow.client, &dest.host()).await;
        let blocked = |n: &str| self.host.blocked(n);
        policy::decide(
            &self.plan,
            &self.allow_ips,
            &blocked,
            dest,
            port,
            flow.who.as_deref(),
        )
    }
}
