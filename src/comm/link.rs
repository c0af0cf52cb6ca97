//! The emulated network link's arithmetic (pure): when a message may leave and when it is
//! in. The `emulation` module holds each rank for what it says.

/// One rank's emulated network link (`heterogeneity.link_gbps`): full duplex, each
/// direction carrying one message at a time at the link's rate. A message of `b` bytes
/// holds its sender's outgoing side for `b / rate` seconds (the sender waits for it, as a
/// busy NIC makes it), and reaches a receiver whose incoming side is still busy with an
/// earlier message only `b / rate` after that one is in. One message between idle links
/// costs `b / rate` once; sixteen pushes arriving at one server together are taken in one
/// after another, which is what makes a single parameter server the bottleneck on a slow
/// network. Times are seconds on any one clock; pure logic, the comm module sleeps.
#[derive(Debug, Clone, PartialEq)]
pub struct EmulatedLink {
    bytes_per_s: f64,
    /// When the outgoing side finishes what it has been given.
    egress_free: f64,
    /// When the incoming side finished the last message.
    ingress_free: f64,
}

impl EmulatedLink {
    /// A link of `gbps` gigabits per second; `None` for 0 (not emulated).
    pub fn new(gbps: f64) -> Option<EmulatedLink> {
        (gbps.is_finite() && gbps > 0.0).then(|| EmulatedLink {
            bytes_per_s: gbps * 1e9 / 8.0,
            egress_free: f64::NEG_INFINITY,
            ingress_free: f64::NEG_INFINITY,
        })
    }

    /// Seconds a sender must hold back, at `now`, before it may hand `bytes` to MPI: until
    /// its outgoing side has carried them after whatever it was given before.
    pub fn send(&mut self, now: f64, bytes: u64) -> f64 {
        self.egress_free = egress_after(self.egress_free, now, self.transfer_s(bytes));
        self.egress_free - now
    }

    /// Seconds `bytes` take on the link.
    pub fn transfer_s(&self, bytes: u64) -> f64 {
        bytes as f64 / self.bytes_per_s
    }

    /// Seconds a receiver must wait, at `now`, for `bytes` that MPI just delivered: none if
    /// its incoming side was free while they were sent, else until they are in after the
    /// message before.
    pub fn receive(&mut self, now: f64, bytes: u64) -> f64 {
        self.ingress_free = ingress_after(self.ingress_free, now, self.transfer_s(bytes));
        self.ingress_free - now
    }
}

/// When an outgoing side that was busy until `free` has carried a transfer of
/// `transfer_s` seconds handed to it at `now`.
pub fn egress_after(free: f64, now: f64, transfer_s: f64) -> f64 {
    free.max(now) + transfer_s
}

/// When an incoming side that finished its last message at `free` has taken in a message
/// of `transfer_s` seconds that MPI delivered at `now`.
pub fn ingress_after(free: f64, now: f64, transfer_s: f64) -> f64 {
    now.max(free + transfer_s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_emulated_link_serialises_each_direction_and_nothing_else() {
        assert!(EmulatedLink::new(0.0).is_none());
        // 1 Gbit/s: 1.25e8 bytes per second; 250,000 bytes take 2 ms.
        let mut link = EmulatedLink::new(1.0).unwrap();
        let ms = |s: f64| (s * 1e3 * 1e6).round() / 1e6;
        // Sends queue behind each other; an idle link holds one message's transfer.
        assert_eq!(ms(link.send(10.0, 250_000)), 2.0);
        assert_eq!(ms(link.send(10.0, 250_000)), 4.0);
        assert_eq!(ms(link.send(20.0, 250_000)), 2.0);
        // A message that finds the incoming side idle is in when MPI delivers it.
        assert_eq!(ms(link.receive(30.0, 250_000)), 0.0);
        // Three delivered at once: each 2 ms after the one before.
        assert_eq!(ms(link.receive(40.0, 250_000)), 0.0);
        assert_eq!(ms(link.receive(40.0, 250_000)), 2.0);
        assert_eq!(ms(link.receive(40.001, 250_000)), 3.0);
        // Receiving does not delay sending (full duplex).
        assert_eq!(ms(link.send(40.001, 125_000)), 1.0);
    }
}
