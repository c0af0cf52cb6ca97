//! The group servers' exchange on the simulated clock: a [`Transport`] whose rings and
//! dense inboxes are memory of this process, so that the runtime's exchange
//! ([`crate::runtime::exchange::GroupExchange`]: top-k, GDTopK's ratios, PowerSGD, error
//! feedback, the outer optimizer, the ledger) runs unchanged. What a server sends reaches a
//! peer `latency + bytes / bandwidth` later on the simulated clock (and never before what it
//! sent earlier): a drain sees only what has arrived by the time its server drains.
//!
//! A ring is written as the one-sided puts write one (the same [`MailboxLayout`], room
//! counted against what the peer has consumed) and decoded by the same code; the sender's
//! header (its written count, dense flushes and telemetry) becomes visible with the
//! message it announces.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

use anyhow::Result;

use crate::protocol::mailbox::{Inbox, LowRankError, MailboxLayout};
use crate::runtime::exchange::transport::{peers_of, Arrivals, Telemetry, Transport};

/// Every server's mailboxes and inboxes, and the simulated clock's now.
pub struct Network {
    layout: MailboxLayout,
    n: usize,
    latency_s: f64,
    bytes_per_s: f64,
    /// `links[s][r]`: what server `s` sends server `r`.
    links: Vec<Vec<Link>>,
    /// Each server's dense inbox (what has arrived).
    inboxes: Vec<Vec<f32>>,
    now_s: f64,
}

/// What one server sends another: its ring, and what is on its way.
struct Link {
    ring: Vec<u32>,
    /// Words the sender wrote; words the receiver consumed.
    written: u32,
    consumed: u32,
    /// What the receiver can see of the sender: its header as of the last arrival.
    seen: Header,
    pending: VecDeque<Arrival>,
    /// When the last message sent will have arrived (arrivals keep their order).
    last_s: f64,
}

/// A sender's header: its written count, dense flushes and telemetry.
#[derive(Debug, Clone, Copy, Default)]
struct Header {
    written: u32,
    dense_flushes: u32,
    telemetry: Telemetry,
}

/// Something on its way to a server, and when it arrives.
struct Arrival {
    at_s: f64,
    header: Header,
    /// A dense or indexed accumulate into the receiver's inbox.
    dense: Option<(Option<Vec<u32>>, Vec<f32>)>,
}

impl Network {
    /// The network of `groups` servers of a model of `n` values, rings laid out as
    /// `layout`, each message `latency_s` plus its bytes at `bytes_per_s` on its way.
    pub fn new(
        groups: usize,
        n: usize,
        layout: MailboxLayout,
        (latency_s, bytes_per_s): (f64, f64),
    ) -> Self {
        let link = || Link {
            ring: vec![0; layout.cap],
            written: 0,
            consumed: 0,
            seen: Header::default(),
            pending: VecDeque::new(),
            last_s: 0.0,
        };
        Network {
            layout,
            n,
            latency_s,
            bytes_per_s,
            links: (0..groups)
                .map(|_| (0..groups).map(|_| link()).collect())
                .collect(),
            inboxes: vec![vec![0.0; n]; groups],
            now_s: 0.0,
        }
    }

    /// Sets the simulated clock's now: what a server sends from now on leaves now, and what
    /// it drains is what has arrived by now.
    pub fn set_now(&mut self, now_s: f64) {
        self.now_s = now_s;
    }

    /// Sends `bytes` from `s` to `r` now: when they arrive.
    fn arrival_s(&mut self, s: usize, r: usize, bytes: usize) -> f64 {
        let link = &mut self.links[s][r];
        let at = (self.now_s + self.latency_s + bytes as f64 / self.bytes_per_s).max(link.last_s);
        link.last_s = at;
        at
    }

    /// Applies everything that has arrived at server `r` by now.
    fn arrive(&mut self, r: usize) {
        let now = self.now_s;
        for s in 0..self.links.len() {
            while self.links[s][r]
                .pending
                .front()
                .is_some_and(|a| a.at_s <= now)
            {
                let Some(arrival) = self.links[s][r].pending.pop_front() else {
                    break;
                };
                self.links[s][r].seen = arrival.header;
                if let Some((idx, vals)) = arrival.dense {
                    let inbox = &mut self.inboxes[r];
                    match idx {
                        Some(idx) => {
                            for (&i, v) in idx.iter().zip(&vals) {
                                inbox[i as usize] += v;
                            }
                        }
                        None => inbox.iter_mut().zip(&vals).for_each(|(x, v)| *x += v),
                    }
                }
            }
        }
    }
}

/// One server's end of the [`Network`].
pub struct SimTransport {
    net: Rc<RefCell<Network>>,
    me: usize,
    groups: usize,
    dense_sent: u32,
    bytes_sent: u64,
    /// The dense flushes of each peer this server has drained.
    dense_seen: Vec<u32>,
}

impl SimTransport {
    /// Server `me`'s end of `net`.
    pub fn new(net: Rc<RefCell<Network>>, me: usize) -> Self {
        let groups = net.borrow().links.len();
        SimTransport {
            net,
            me,
            groups,
            dense_sent: 0,
            bytes_sent: 0,
            dense_seen: vec![0; groups],
        }
    }

    /// Queues `header` (and a dense accumulate) to every peer, arriving after `bytes`.
    fn post(
        &mut self,
        bytes: usize,
        telemetry: Telemetry,
        dense: Option<(Option<&[u32]>, &[f32])>,
    ) {
        let mut net = self.net.borrow_mut();
        for r in peers_of(self.me, self.groups) {
            let at_s = net.arrival_s(self.me, r, bytes);
            let header = Header {
                written: net.links[self.me][r].written,
                dense_flushes: self.dense_sent,
                telemetry,
            };
            let dense = dense.map(|(idx, vals)| (idx.map(<[u32]>::to_vec), vals.to_vec()));
            net.links[self.me][r].pending.push_back(Arrival {
                at_s,
                header,
                dense,
            });
        }
        self.bytes_sent += (bytes * (self.groups - 1)) as u64;
    }
}

impl Transport for SimTransport {
    fn ring_words(&self) -> usize {
        self.net.borrow().layout.cap
    }

    fn bytes_sent(&self) -> u64 {
        self.bytes_sent
    }

    fn peers_have_room(&mut self, words: usize) -> Result<bool> {
        let net = self.net.borrow();
        let layout = net.layout;
        Ok(peers_of(self.me, self.groups).all(|r| {
            let link = &net.links[self.me][r];
            layout.room(link.written, link.consumed) >= words
        }))
    }

    fn send_message(&mut self, msg: &[u32], telemetry: Telemetry) -> Result<()> {
        {
            let mut net = self.net.borrow_mut();
            let layout = net.layout;
            for r in peers_of(self.me, self.groups) {
                let link = &mut net.links[self.me][r];
                for (at, from, len) in layout.pieces(link.written, msg.len()) {
                    link.ring[at..at + len].copy_from_slice(&msg[from..from + len]);
                }
                link.written = link.written.wrapping_add(msg.len() as u32);
            }
        }
        self.post(4 * msg.len(), telemetry, None);
        Ok(())
    }

    fn send_to_inboxes(
        &mut self,
        idx: Option<&[u32]>,
        vals: &[f32],
        telemetry: Telemetry,
    ) -> Result<()> {
        self.dense_sent = self.dense_sent.wrapping_add(1);
        let per_value = if idx.is_some() { 8 } else { 4 };
        self.post(per_value * vals.len(), telemetry, Some((idx, vals)));
        Ok(())
    }

    fn mail_waiting(&self) -> bool {
        let net = self.net.borrow();
        let now = net.now_s;
        peers_of(self.me, self.groups).any(|s| {
            net.links[s][self.me]
                .pending
                .front()
                .is_some_and(|a| a.at_s <= now)
        })
    }

    fn drain(
        &mut self,
        arrivals: &mut dyn Arrivals,
        force: bool,
        peers: &mut [Telemetry],
    ) -> Result<()> {
        let mut net = self.net.borrow_mut();
        net.arrive(self.me);
        let (layout, n) = (net.layout, net.n);
        let mut dense_new = force;
        for s in peers_of(self.me, self.groups) {
            let link = &mut net.links[s][self.me];
            let (from, to) = (link.consumed, link.seen.written);
            link.consumed = layout.decode(s, &link.ring, from, to, n, Forward(&mut *arrivals))?;
            peers[s] = link.seen.telemetry;
            if link.seen.dense_flushes != self.dense_seen[s] {
                self.dense_seen[s] = link.seen.dense_flushes;
                dense_new = true;
            }
        }
        if dense_new {
            arrivals.dense(&mut net.inboxes[self.me])?;
        }
        Ok(())
    }
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
