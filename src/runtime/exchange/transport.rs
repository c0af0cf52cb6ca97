//! How a group server's updates reach its peers: two one-sided windows per server on the
//! servers' communicator. A dense inbox the size of the model (`f32`) takes dense updates
//! and indexed accumulates; a mailbox (`u32`) has a slot per peer group holding that
//! group's header (telemetry, counts) and a ring of messages (format in
//! [`crate::protocol::mailbox`]). The mailbox stays in one shared epoch for the whole run.
//!
//! A sender writes its messages first and its header after them, so a peer that sees a
//! new count finds the values; it adds a header as the difference to what it wrote last
//! (an accumulate, atomic against the peer's reads). A receiver publishes how far it has
//! consumed each ring, which is the only thing it writes into another server's memory.
//!
//! [`Transport`] is what the exchange needs of a way to move its messages; [`RmaTransport`]
//! is the MPI one, and the simulated clock has its own (`tools::simulate`), so that both
//! clocks run the same exchange.

use anyhow::Result;

use crate::comm::rma::{LockKind, SharedWindow, Window};
use crate::comm::{Collectives, SubComm};
use crate::protocol::mailbox::{
    Inbox, LowRankError, MailboxError, MailboxLayout, CONSUMED, DENSE_FLUSHES, HEADER, NO_WORKER,
    PUSHES, SENDER_WORDS, SLOWEST_RANK, SLOWEST_SECONDS, SLOWEST_SLOWDOWN, SPEED, WRITTEN,
};
use crate::telemetry::pace::Slowest;

/// What arrives at a server from its peers: mailbox messages (through [`Inbox`]) and the
/// dense inbox's sum.
pub trait Arrivals: Inbox {
    /// Takes the dense inbox's sum into the replica (and leaves `inbox` zeroed).
    fn dense(&mut self, inbox: &mut [f32]) -> Result<()>;
}

/// Hands a ring's messages on to the [`Arrivals`] of a drain.
struct Forward<'a>(&'a mut dyn Arrivals);

impl Inbox for Forward<'_> {
    fn value(&mut self, index: usize, value: f32) {
        self.0.value(index, value)
    }

    fn low_rank(&mut self, rank: usize, payload: &[f32]) -> Result<(), LowRankError> {
        self.0.low_rank(rank, payload)
    }
}

/// What a server says of itself with every exchange: its measured speed (pushes per
/// second), its pushes so far, and its slowest worker (for rank 0's progress line).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Telemetry {
    pub speed: f64,
    pub pushes: u64,
    pub slowest: Option<Slowest>,
}

impl Telemetry {
    /// The sender's header words (`written` and `dense_flushes` are the transport's).
    fn header(&self, written: u32, dense_flushes: u32) -> [u32; SENDER_WORDS] {
        let mut h = [0; SENDER_WORDS];
        h[WRITTEN] = written;
        h[SPEED] = (self.speed as f32).to_bits();
        h[PUSHES] = self.pushes as u32;
        h[DENSE_FLUSHES] = dense_flushes;
        let (rank, seconds, slowdown) = match self.slowest {
            Some(s) => (s.rank as u32, s.seconds as f32, s.slowdown as f32),
            None => (NO_WORKER, 0.0, 0.0),
        };
        h[SLOWEST_RANK] = rank;
        h[SLOWEST_SECONDS] = seconds.to_bits();
        h[SLOWEST_SLOWDOWN] = slowdown.to_bits();
        h
    }

    /// What a sender's header words say of it (a header never written, all zero, names no
    /// slowest worker).
    fn from_header(h: &[u32; SENDER_WORDS]) -> Telemetry {
        let float = |i: usize| f64::from(f32::from_bits(h[i]));
        let named = h[SLOWEST_RANK] != NO_WORKER && float(SLOWEST_SECONDS) > 0.0;
        Telemetry {
            speed: float(SPEED),
            pushes: u64::from(h[PUSHES]),
            slowest: named.then(|| Slowest {
                rank: h[SLOWEST_RANK] as usize,
                seconds: float(SLOWEST_SECONDS),
                slowdown: float(SLOWEST_SLOWDOWN),
            }),
        }
    }
}

/// How a group server's messages reach its peers: what [`super::GroupExchange`] sends and
/// drains through.
pub trait Transport {
    /// The largest message a ring holds, in words.
    fn ring_words(&self) -> usize;
    /// Bytes this server has sent its peers.
    fn bytes_sent(&self) -> u64;
    /// Whether every peer's ring has room for `words`.
    fn peers_have_room(&mut self, words: usize) -> Result<bool>;
    /// Sends `msg` into every peer's ring, with `telemetry` (room checked by the caller).
    fn send_message(&mut self, msg: &[u32], telemetry: Telemetry) -> Result<()>;
    /// Adds `vals` to every peer's dense inbox (the whole model, or at `idx`), with
    /// `telemetry`, and tells it to drain the inbox.
    fn send_to_inboxes(
        &mut self,
        idx: Option<&[u32]>,
        vals: &[f32],
        telemetry: Telemetry,
    ) -> Result<()>;
    /// Whether a peer seems to have sent something since the last drain.
    fn mail_waiting(&self) -> bool;
    /// Hands what the peers sent to `arrivals` (the dense inbox when a peer flushed into it,
    /// or with `force`), and each peer's telemetry into `peers` (this server's own entry
    /// untouched).
    fn drain(
        &mut self,
        arrivals: &mut dyn Arrivals,
        force: bool,
        peers: &mut [Telemetry],
    ) -> Result<()>;
}

/// One group server's end of the windows, and the counts that order what flows through
/// them.
pub struct RmaTransport<'c> {
    comm: &'c SubComm,
    inbox: Window<f32>,
    mail: SharedWindow<u32>,
    layout: MailboxLayout,
    /// Values in the model (a message's indices are checked against it).
    n: usize,
    groups: usize,
    me: usize,
    /// Words written into each peer's ring, and its consumed count when last read.
    written: Vec<u32>,
    peer_consumed: Vec<u32>,
    /// The header words this server last wrote into its slot at each peer.
    sent_header: Vec<[u32; SENDER_WORDS]>,
    /// Scratch for one batch's header and consumed-count differences.
    deltas: Vec<[u32; SENDER_WORDS]>,
    consumed_delta: Vec<u32>,
    /// Words consumed from each peer's ring, and the dense flushes seen from each peer.
    consumed: Vec<u32>,
    dense_seen: Vec<u32>,
    /// Copies of this server's own mailbox headers and rings, taken by a drain (own memory
    /// is read through MPI inside the shared epoch, like a peer's).
    heads: Vec<[u32; SENDER_WORDS]>,
    rings_copy: Vec<u32>,
    dense_sent: u32,
    bytes_sent: u64,
}

/// Every group but `me` (owns nothing, so loops over it may borrow the transport mutably).
pub fn peers_of(me: usize, groups: usize) -> impl Iterator<Item = usize> {
    (0..groups).filter(move |&p| p != me)
}

/// What to add to the header words `old` to make them `new` (wrapping, as MPI's sum of
/// unsigned integers does).
fn header_delta(old: &[u32; SENDER_WORDS], new: &[u32; SENDER_WORDS]) -> [u32; SENDER_WORDS] {
    std::array::from_fn(|i| new[i].wrapping_sub(old[i]))
}

impl<'c> RmaTransport<'c> {
    /// The windows of a model of `n` values with mailboxes laid out as `layout`
    /// (collective over the servers' communicator).
    pub fn new(comm: &'c SubComm, n: usize, layout: MailboxLayout) -> Result<Self> {
        let groups = comm.size();
        let inbox = Window::create(comm, n)?;
        let mail = Window::create(comm, layout.window_len())?.lock_all()?;
        Ok(RmaTransport {
            comm,
            inbox,
            mail,
            layout,
            n,
            groups,
            me: comm.rank(),
            written: vec![0; groups],
            peer_consumed: vec![0; groups],
            sent_header: vec![[0; SENDER_WORDS]; groups],
            deltas: vec![[0; SENDER_WORDS]; groups],
            consumed_delta: vec![0; groups],
            consumed: vec![0; groups],
            dense_seen: vec![0; groups],
            heads: vec![[0; SENDER_WORDS]; groups],
            rings_copy: vec![0; layout.window_len()],
            dense_sent: 0,
            bytes_sent: 0,
        })
    }

    pub fn comm(&self) -> &'c SubComm {
        self.comm
    }

    /// Writes this server's header (with its `written` count for each peer) into its slot at
    /// every peer, as an accumulate of the difference to what is there, so that a peer
    /// reading its headers meanwhile sees old or new words, never a torn one; with
    /// `consumed`, also reads how far each peer has drained. One batch for all peers.
    fn write_headers(&mut self, telemetry: Telemetry, consumed: bool) -> Result<()> {
        let (me, slot) = (self.me, self.layout.slot(self.me));
        for peer in peers_of(me, self.groups) {
            let header = telemetry.header(self.written[peer], self.dense_sent);
            self.deltas[peer] = header_delta(&self.sent_header[peer], &header);
            self.sent_header[peer] = header;
        }
        let mut batch = self.mail.batch();
        let peers = self.deltas.iter().zip(self.peer_consumed.iter_mut());
        for (peer, (delta, seen)) in peers.enumerate().filter(|&(p, _)| p != me) {
            batch.accumulate_sum(peer, slot + WRITTEN, delta)?;
            if consumed {
                batch.fetch(peer, slot + CONSUMED, std::slice::from_mut(seen))?;
            }
        }
        batch.complete()?;
        self.bytes_sent += (4 * SENDER_WORDS * (self.groups - 1)) as u64;
        Ok(())
    }

    /// The headers the peers wrote, read atomically (they may be writing them now).
    fn read_headers(&mut self) -> Result<()> {
        let (me, layout) = (self.me, self.layout);
        let mut batch = self.mail.batch();
        for (s, head) in self.heads.iter_mut().enumerate().filter(|&(s, _)| s != me) {
            batch.fetch(me, layout.slot(s) + WRITTEN, head)?;
        }
        batch.complete()?;
        Ok(())
    }

    /// The messages the headers announce: complete (a sender completes a message before
    /// its header), and not written again before this server publishes its consumed count.
    fn read_rings(&mut self) -> Result<()> {
        let (me, layout) = (self.me, self.layout);
        let mut batch = self.mail.batch();
        for (s, slot) in self.rings_copy.chunks_mut(HEADER + layout.cap).enumerate() {
            let pending = self.heads[s][WRITTEN].wrapping_sub(self.consumed[s]) as usize;
            if s == me || pending == 0 {
                continue;
            }
            if pending > layout.cap {
                return Err(MailboxError::Corrupt {
                    sender: s,
                    detail: format!("{pending} words pending in a ring of {}", layout.cap),
                }
                .into());
            }
            let [(start, _, first), (_, _, rest)] = layout.pieces(self.consumed[s], pending);
            let (wrapped, tail) = slot[HEADER..].split_at_mut(start);
            batch.get(me, layout.ring(s) + start, &mut tail[..first])?;
            batch.get(me, layout.ring(s), &mut wrapped[..rest])?;
        }
        batch.complete()?;
        Ok(())
    }

    /// Publishes the new consumed counts: the senders may reuse that ring space.
    fn publish_consumed(&mut self) -> Result<()> {
        let (me, layout) = (self.me, self.layout);
        let mut batch = self.mail.batch();
        for (s, delta) in self.consumed_delta.iter().enumerate() {
            if s != me && *delta != 0 {
                batch.accumulate_sum(me, layout.slot(s) + CONSUMED, std::slice::from_ref(delta))?;
            }
        }
        batch.complete()?;
        Ok(())
    }

    /// Frees the windows (collective over the servers).
    pub fn close(self) -> Result<()> {
        self.inbox.free()?;
        self.mail.free()?;
        Ok(())
    }
}

impl Transport for RmaTransport<'_> {
    /// The largest message a ring holds, in words.
    fn ring_words(&self) -> usize {
        self.layout.cap
    }

    /// Bytes this server has put into its peers' windows.
    fn bytes_sent(&self) -> u64 {
        self.bytes_sent
    }

    /// Whether every peer's ring has room for `words` (re-reading, in one batch, the
    /// consumed count of the peers that look full: the cached one only underestimates).
    fn peers_have_room(&mut self, words: usize) -> Result<bool> {
        let (me, layout, at) = (self.me, self.layout, self.layout.slot(self.me) + CONSUMED);
        let written = &self.written;
        let full = |peer: usize, consumed: u32| layout.room(written[peer], consumed) < words;
        if !peers_of(me, self.groups).any(|p| full(p, self.peer_consumed[p])) {
            return Ok(true);
        }
        let mut batch = self.mail.batch();
        for (peer, seen) in self.peer_consumed.iter_mut().enumerate() {
            if peer != me && full(peer, *seen) {
                batch.fetch(peer, at, std::slice::from_mut(seen))?;
            }
        }
        batch.complete()?;
        Ok(!peers_of(me, self.groups).any(|p| full(p, self.peer_consumed[p])))
    }

    /// Writes `msg` into every peer's ring (room checked by the caller), then this server's
    /// header with `telemetry`, and reads back how far each peer has consumed.
    fn send_message(&mut self, msg: &[u32], telemetry: Telemetry) -> Result<()> {
        let (me, ring, len) = (self.me, self.layout.ring(self.me), msg.len());
        let mut batch = self.mail.batch();
        for peer in peers_of(me, self.groups) {
            for (at, from, n) in self.layout.pieces(self.written[peer], len) {
                batch.put(peer, ring + at, &msg[from..from + n])?;
            }
        }
        // Every message is complete at its peer before a header announces it.
        batch.complete()?;
        for peer in peers_of(me, self.groups) {
            self.written[peer] = self.written[peer].wrapping_add(len as u32);
        }
        self.write_headers(telemetry, true)?;
        self.bytes_sent += (4 * len * (self.groups - 1)) as u64;
        Ok(())
    }

    /// Adds `vals` to every peer's inbox (the whole model, or at `idx` through one indexed
    /// datatype), then tells it so (its dense flush count, with `telemetry`), so that it
    /// drains the inbox.
    fn send_to_inboxes(
        &mut self,
        idx: Option<&[u32]>,
        vals: &[f32],
        telemetry: Telemetry,
    ) -> Result<()> {
        self.dense_sent = self.dense_sent.wrapping_add(1);
        let scatter = idx.map(|idx| self.inbox.scatter(idx)).transpose()?;
        let per_value = if idx.is_some() { 8 } else { 4 };
        for peer in peers_of(self.me, self.groups) {
            let mut epoch = self.inbox.lock(peer, LockKind::Shared)?;
            match &scatter {
                Some(scatter) => epoch.accumulate_scattered(scatter, vals)?,
                None => epoch.accumulate_sum(0, vals)?,
            }
            epoch.unlock()?;
            self.bytes_sent += (per_value * vals.len()) as u64;
        }
        // After every inbox epoch has ended: a peer that sees the new count finds the values.
        self.write_headers(telemetry, false)
    }

    /// Whether a peer seems to have written a message or flushed densely since the last
    /// drain (an unlocked peek, confirmed by [`Transport::drain`]).
    fn mail_waiting(&self) -> bool {
        peers_of(self.me, self.groups).any(|s| {
            let slot = self.layout.slot(s);
            self.mail.peek_local(slot + WRITTEN) != Some(self.consumed[s])
                || self.mail.peek_local(slot + DENSE_FLUSHES) != Some(self.dense_seen[s])
        })
    }

    /// Hands every message the peers wrote into this server's mailbox to `arrivals`, the
    /// dense inbox too when a peer flushed into it (or `force`); returns each peer's
    /// telemetry from its header (this server's own entry untouched in `peers`).
    fn drain(
        &mut self,
        arrivals: &mut dyn Arrivals,
        force: bool,
        peers: &mut [Telemetry],
    ) -> Result<()> {
        self.read_headers()?;
        self.read_rings()?;
        let (me, layout) = (self.me, self.layout);
        let mut dense_new = force;
        for s in peers_of(me, self.groups) {
            let ring = &self.rings_copy[layout.ring(s)..layout.ring(s) + layout.cap];
            let head = self.heads[s];
            let (from, to) = (self.consumed[s], head[WRITTEN]);
            let consumed = layout.decode(s, ring, from, to, self.n, Forward(&mut *arrivals))?;
            self.consumed_delta[s] = consumed.wrapping_sub(self.consumed[s]);
            self.consumed[s] = consumed;
            peers[s] = Telemetry::from_header(&head);
            if head[DENSE_FLUSHES] != self.dense_seen[s] {
                self.dense_seen[s] = head[DENSE_FLUSHES];
                dense_new = true;
            }
        }
        self.publish_consumed()?;
        if dense_new {
            // The inbox takes accumulates from every peer: read and zero it under an
            // exclusive lock (a shared epoch would need an atomic fetch and a subtraction).
            let mut inbox = self.inbox.lock_local()?;
            arrivals.dense(&mut inbox)?;
            inbox.unlock()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn telemetry_travels_through_the_header_words() {
        let sent = Telemetry {
            speed: 12.5,
            pushes: 77,
            slowest: Some(Slowest {
                rank: 9,
                seconds: 0.25,
                slowdown: 1.5,
            }),
        };
        let h = sent.header(5, 2);
        assert_eq!((h[WRITTEN], h[DENSE_FLUSHES]), (5, 2));
        assert_eq!(Telemetry::from_header(&h), sent);
        let quiet = Telemetry {
            slowest: None,
            ..sent
        };
        assert_eq!(Telemetry::from_header(&quiet.header(0, 0)), quiet);
        // A slot no sender has written yet names nobody.
        assert_eq!(Telemetry::from_header(&[0; SENDER_WORDS]).slowest, None);
    }
}
