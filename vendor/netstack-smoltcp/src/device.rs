use std::sync::{
    atomic::{AtomicBool, Ordering},
    Arc,
};

use smoltcp::{
    phy::{Device, DeviceCapabilities, Medium, RxToken, TxToken},
    time::Instant,
};
use tokio::sync::mpsc::{unbounded_channel, Permit, Sender, UnboundedReceiver, UnboundedSender};

use crate::packet::AnyIpPktFrame;

/// cordon: where the stack's packets go without a channel: called on the stack's own task
/// with each packet as it is built, in one buffer reused for every packet (no allocation, no
/// zeroing of up to 64 KiB per packet, no hop to a writer task and its wake-up). It must not
/// block; a packet it cannot deliver is lost, as on a wire, and TCP sends it again.
pub type PacketWriter = Box<dyn FnMut(&[u8]) + Send>;

/// cordon: a [`PacketWriter`] and the buffer it is handed.
pub(super) struct DirectOut {
    write: PacketWriter,
    buf: Vec<u8>,
}

pub(super) struct VirtualDevice {
    in_buf_avail: Arc<AtomicBool>,
    in_buf: UnboundedReceiver<Vec<u8>>,
    out_buf: Sender<AnyIpPktFrame>,
    /// cordon: when set, packets go here instead of `out_buf`.
    direct: Option<DirectOut>,
    /// cordon: the writer completes outgoing TCP checksums (see
    /// `StackBuilder::tcp_checksum_offload`).
    tcp_tx_offload: bool,
    mtu: usize,
}

impl VirtualDevice {
    pub(super) fn new(
        iface_egress_tx: Sender<AnyIpPktFrame>,
        mtu: usize,
    ) -> (Self, UnboundedSender<Vec<u8>>, Arc<AtomicBool>) {
        let iface_ingress_tx_avail = Arc::new(AtomicBool::new(false));
        let (iface_ingress_tx, iface_ingress_rx) = unbounded_channel();
        (
            Self {
                in_buf_avail: iface_ingress_tx_avail.clone(),
                in_buf: iface_ingress_rx,
                out_buf: iface_egress_tx,
                direct: None,
                tcp_tx_offload: false,
                mtu,
            },
            iface_ingress_tx,
            iface_ingress_tx_avail,
        )
    }

    /// cordon: send every packet through `write` instead of the stack's channel. With
    /// `tcp_tx_offload`, TCP segments leave with a zero checksum for `write` to have completed
    /// (received segments are still verified here).
    pub(super) fn set_writer(&mut self, write: PacketWriter, tcp_tx_offload: bool) {
        self.direct = Some(DirectOut {
            write,
            buf: Vec::new(),
        });
        self.tcp_tx_offload = tcp_tx_offload;
    }
}

impl Device for VirtualDevice {
    type RxToken<'a> = VirtualRxToken;
    type TxToken<'a> = VirtualTxToken<'a>;

    fn receive(&mut self, _timestamp: Instant) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        if let Some(direct) = self.direct.as_mut() {
            let Ok(buffer) = self.in_buf.try_recv() else {
                self.in_buf_avail.store(false, Ordering::Release);
                return None;
            };
            return Some((Self::RxToken { buffer }, VirtualTxToken::Direct(direct)));
        }
        // First, we reserve space in out_buf: if it is full, we exit without touching in_buf,
        // so that the waiting packet remains in the queue and is not extracted
        // and immediately discarded, and so that in_buf_avail is not reset while it is still true.
        let Ok(permit) = self.out_buf.try_reserve() else {
            return None;
        };

        let Ok(buffer) = self.in_buf.try_recv() else {
            self.in_buf_avail.store(false, Ordering::Release);
            return None;
        };

        Some((Self::RxToken { buffer }, VirtualTxToken::Channel(permit)))
    }

    fn transmit(&mut self, _timestamp: Instant) -> Option<Self::TxToken<'_>> {
        if let Some(direct) = self.direct.as_mut() {
            return Some(VirtualTxToken::Direct(direct));
        }
        match self.out_buf.try_reserve() {
            Ok(permit) => Some(VirtualTxToken::Channel(permit)),
            Err(_) => None,
        }
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut capabilities = DeviceCapabilities::default();
        capabilities.medium = Medium::Ip;
        capabilities.max_transmission_unit = self.mtu;
        if self.tcp_tx_offload {
            capabilities.checksum.tcp = smoltcp::phy::Checksum::Rx;
        }
        capabilities
    }
}

pub(super) struct VirtualRxToken {
    buffer: Vec<u8>,
}

impl RxToken for VirtualRxToken {
    fn consume<R, F>(self, f: F) -> R
    where
        F: FnOnce(&[u8]) -> R,
    {
        f(&self.buffer[..])
    }
}

pub(super) enum VirtualTxToken<'a> {
    Channel(Permit<'a, Vec<u8>>),
    /// cordon: straight to the [`PacketWriter`].
    Direct(&'a mut DirectOut),
}

impl<'a> TxToken for VirtualTxToken<'a> {
    fn consume<R, F>(self, len: usize, f: F) -> R
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        match self {
            Self::Channel(permit) => {
                let mut buffer = vec![0u8; len];
                let result = f(&mut buffer);
                permit.send(buffer);
                result
            }
            Self::Direct(out) => {
                // Grown once to the largest packet. smoltcp writes every payload byte, but
                // may leave the padding after a TCP option list as it found it: the header
                // room (at most 60 bytes of IPv4 and 60 of TCP) is cleared as a fresh
                // buffer would be, so no byte of an earlier packet goes out in this one.
                if out.buf.len() < len {
                    out.buf.resize(len, 0);
                }
                let pkt = &mut out.buf[..len];
                let head = len.min(120);
                pkt[..head].fill(0);
                let result = f(pkt);
                (out.write)(pkt);
                result
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// cordon: with a writer set, each packet goes to it whole, with nothing on the channel;
    /// the reused buffer's header room starts cleared, whatever the packet before it held.
    #[test]
    fn a_direct_writer_gets_each_packet_and_no_stale_header_bytes() {
        let (out_tx, mut out_rx) = channel::<AnyIpPktFrame>(4);
        let (mut device, _ingress_tx, _avail) = VirtualDevice::new(out_tx, 1500);
        let seen = Arc::new(std::sync::Mutex::new(Vec::<Vec<u8>>::new()));
        let s = seen.clone();
        device.set_writer(
            Box::new(move |p: &[u8]| s.lock().unwrap().push(p.to_vec())),
            false,
        );
        let tx = device
            .transmit(Instant::from_millis(0))
            .expect("always a token");
        tx.consume(200, |b| b.fill(0xab));
        let tx = device
            .transmit(Instant::from_millis(0))
            .expect("always a token");
        let left = tx.consume(150, |b| {
            let stale = b.iter().filter(|&&x| x == 0xab).count();
            b[130..].fill(7);
            stale
        });
        assert_eq!(
            left, 30,
            "only the payload past the header room is as it was"
        );
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 2);
        assert_eq!(seen[0], vec![0xab; 200]);
        assert_eq!(seen[1].len(), 150);
        assert!(seen[1][..120].iter().all(|&x| x == 0));
        assert!(
            out_rx.try_recv().is_err(),
            "nothing went through the channel"
        );
    }

    use tokio::sync::mpsc::channel;

    /// Regression test for the receive() ordering bug: reserving out_buf
    /// capacity before dequeuing in_buf must not lose the in_buf packet, and
    /// must not clear in_buf_avail while a real packet is still queued.
    #[test]
    fn receive_keeps_in_buf_packet_when_out_buf_is_full() {
        let (out_tx, mut out_rx) = channel::<AnyIpPktFrame>(1);
        let (mut device, ingress_tx, in_buf_avail) = VirtualDevice::new(out_tx.clone(), 1500);

        // Saturate the bounded out_buf (capacity 1) so try_reserve() fails.
        out_tx.try_send(vec![0u8; 4]).unwrap();

        // Queue an in_buf packet and mark it available, as handle_packet would.
        ingress_tx.send(b"payload".to_vec()).unwrap();
        in_buf_avail.store(true, Ordering::Release);

        // out_buf is full: receive() must yield nothing this poll...
        assert!(device.receive(Instant::from_millis(0)).is_none());
        // ...without discarding the queued in_buf packet or claiming there's no more work.
        assert!(
            in_buf_avail.load(Ordering::Acquire),
            "in_buf_avail must stay true: the in_buf packet is still pending, \
             only out_buf capacity was the blocker"
        );

        // Free up out_buf capacity.
        out_rx.try_recv().unwrap();

        // The packet must still be there, untouched, once out_buf has room again.
        let (rx_token, _tx_token) = device
            .receive(Instant::from_millis(1))
            .expect("in_buf packet must not have been dropped while out_buf was full");
        assert_eq!(rx_token.consume(|buf| buf.to_vec()), b"payload");
    }
}
