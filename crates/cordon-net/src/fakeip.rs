//! The session's fake-IP table: name ↔ synthetic IPv4 address.
//!
//! Addresses come from the configured range, skipping the network address, the first host
//! (left for the gateway's own address, see [`crate::NetConfig::gateway_ip`]) and the broadcast
//! address. A name keeps its address for the session. When every address is taken, the
//! least-recently-*queried* name loses its address to the new one (recycling rather than
//! refusing, so a flood of unique names — the shape of DNS exfiltration — cannot break name
//! resolution for the rest of the session). A recycled address then maps to the new name only;
//! the short TTL on answers keeps honest clients from holding on to it.

use std::collections::{BTreeMap, HashMap};
use std::net::Ipv4Addr;
use std::sync::Arc;

use ipnet::Ipv4Net;

#[derive(Debug)]
pub(crate) struct FakeIpTable {
    /// First assignable address, as an integer.
    first: u32,
    /// Number of assignable addresses (at least 1).
    size: u32,
    /// Offsets `0..next` have been handed out at least once.
    next: u32,
    /// name → (offset, tick of last use).
    by_name: HashMap<Arc<str>, (u32, u64)>,
    /// offset → name.
    by_offset: HashMap<u32, Arc<str>>,
    /// tick of last use → offset; the first entry is the least recently used.
    lru: BTreeMap<u64, u32>,
    tick: u64,
}

/// Usable addresses of `range` for the table: (first, count). `None` if fewer than one.
pub(crate) fn usable(range: Ipv4Net) -> Option<(u32, u32)> {
    let net = u32::from(range.network());
    let bcast = u32::from(range.broadcast());
    // network, gateway (network + 1) and broadcast are reserved.
    let span = bcast.checked_sub(net)?;
    let size = span.checked_sub(2)?;
    if size == 0 {
        return None;
    }
    Some((net.checked_add(2)?, size))
}

impl FakeIpTable {
    /// A table over `range`; `None` when the range has no assignable address.
    pub(crate) fn new(range: Ipv4Net) -> Option<Self> {
        let (first, size) = usable(range)?;
        Some(Self {
            first,
            size,
            next: 0,
            by_name: HashMap::new(),
            by_offset: HashMap::new(),
            lru: BTreeMap::new(),
            tick: 0,
        })
    }

    /// The address for `name` (normalised), assigning or recycling one when needed.
    pub(crate) fn assign(&mut self, name: &str) -> Ipv4Addr {
        self.tick += 1;
        let tick = self.tick;
        if let Some((offset, last)) = self.by_name.get_mut(name) {
            self.lru.remove(last);
            *last = tick;
            let offset = *offset;
            self.lru.insert(tick, offset);
            return self.addr(offset);
        }
        let offset = if self.next < self.size {
            self.next += 1;
            self.next - 1
        } else {
            // Full: take the least recently used address.
            match self.lru.pop_first() {
                Some((_, offset)) => {
                    if let Some(old) = self.by_offset.remove(&offset) {
                        self.by_name.remove(&old);
                    }
                    offset
                }
                // Unreachable while size >= 1 (every handed-out offset is in `lru`), but
                // offset 0 is always a valid answer.
                None => 0,
            }
        };
        let name: Arc<str> = Arc::from(name);
        self.by_name.insert(name.clone(), (offset, tick));
        self.by_offset.insert(offset, name);
        self.lru.insert(tick, offset);
        self.addr(offset)
    }

    /// The name currently holding `ip`, if any.
    pub(crate) fn name_for(&self, ip: Ipv4Addr) -> Option<&str> {
        let offset = u32::from(ip).checked_sub(self.first)?;
        if offset >= self.size {
            return None;
        }
        self.by_offset.get(&offset).map(|n| &**n)
    }

    /// Number of names currently mapped.
    pub(crate) fn len(&self) -> usize {
        self.by_name.len()
    }

    fn addr(&self, offset: u32) -> Ipv4Addr {
        // first + offset < first + size <= broadcast, so this never wraps.
        Ipv4Addr::from(self.first.wrapping_add(offset))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> Ipv4Net {
        s.parse().unwrap()
    }

    #[test]
    fn usable_ranges() {
        assert_eq!(usable(net("198.18.0.0/15")), Some((0xC612_0002, 131_069)));
        assert_eq!(usable(net("10.0.0.0/30")), Some((0x0A00_0002, 1)));
        assert_eq!(usable(net("10.0.0.0/31")), None);
        assert_eq!(usable(net("10.0.0.0/32")), None);
        assert_eq!(usable(net("255.255.255.252/30")), Some((0xFFFF_FFFE, 1)));
        assert!(usable(net("0.0.0.0/0")).is_some());
    }

    #[test]
    fn stable_and_distinct() {
        let mut t = FakeIpTable::new(net("198.18.0.0/15")).unwrap();
        let a = t.assign("a.test");
        let b = t.assign("b.test");
        assert_ne!(a, b);
        assert_eq!(t.assign("a.test"), a);
        assert_eq!(a, Ipv4Addr::new(198, 18, 0, 2));
        assert_eq!(t.name_for(a), Some("a.test"));
        assert_eq!(t.name_for(Ipv4Addr::new(198, 18, 0, 1)), None);
        assert_eq!(t.name_for(Ipv4Addr::new(8, 8, 8, 8)), None);
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn lru_recycling() {
        // /29: .2 ..= .6 usable (5 addresses).
        let mut t = FakeIpTable::new(net("10.9.0.0/29")).unwrap();
        let ips: Vec<_> = (0..5).map(|i| t.assign(&format!("n{i}.test"))).collect();
        assert_eq!(ips[4], Ipv4Addr::new(10, 9, 0, 6));
        t.assign("n0.test"); // n0 is now the most recent; n1 the least.
        let new = t.assign("new.test");
        assert_eq!(new, ips[1]);
        assert_eq!(t.name_for(ips[1]), Some("new.test"));
        assert_eq!(t.name_for(ips[0]), Some("n0.test"));
        assert_eq!(t.len(), 5);
        // n1 comes back and takes n2's address.
        assert_eq!(t.assign("n1.test"), ips[2]);
        assert_eq!(t.name_for(ips[2]), Some("n1.test"));
        // Every address stays inside the range.
        for i in 0..1000 {
            let ip = t.assign(&format!("x{i}.test"));
            assert!(net("10.9.0.0/29").contains(&ip));
            assert_ne!(ip, Ipv4Addr::new(10, 9, 0, 1));
            assert_ne!(ip, Ipv4Addr::new(10, 9, 0, 7));
        }
        assert_eq!(t.len(), 5);
    }

    #[test]
    fn single_address_range() {
        let mut t = FakeIpTable::new(net("10.9.0.0/30")).unwrap();
        let a = t.assign("a.test");
        assert_eq!(t.assign("b.test"), a);
        assert_eq!(t.name_for(a), Some("b.test"));
        assert_eq!(t.len(), 1);
    }
}
