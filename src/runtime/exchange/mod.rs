//! GSSP between groups: the asynchronous exchange of (sparsified) updates between group
//! servers through one-sided RMA, with GDTopK's per-group upload ratio. The groups
//! themselves come from [`crate::protocol::grouping::form_groups`].
//!
//! Each server has two windows: a dense inbox the size of the model (`f32`), and a
//! mailbox (`u32`) with one slot per peer group: that group's speed, push count, dense
//! flush count, and a ring of sparse messages (format in [`crate::protocol::mailbox`]). Every
//! `inter_group_every` applied pushes a server:
//! 1. takes its unsent change: the weights minus [`PeerView`] (the replica as the peers
//!    know it), all of it (dense), its top-k entries (sparse), or its rank-r PowerSGD
//!    approximation (low-rank, [`crate::compress::powersgd`]); the rest stays unsent:
//!    error feedback without a residual buffer,
//! 2. sends it: sparse or low-rank, as one message put into its ring at every peer (when a
//!    peer's ring is full, it sends nothing this time and keeps it all unsent, rather than
//!    wait);
//!    dense, accumulated into every peer's inbox. Its telemetry goes with it;
//! 3. drains its own mailbox (applying each message's k values, or the product of its
//!    low-rank factors) and, when a peer flushed
//!    densely, its inbox, into its weights and its view, under exclusive locks on itself.
//!
//! With `sync.gssp.drain_on_arrival` a server also drains between its own exchanges, at the first
//! push after an unlocked peek at its mailbox headers shows new mail.
//!
//! With `sync.gssp.sparse_transport = "accumulate"` (the scheme of docs/design.md) sparse updates
//! instead go into the peers' inboxes through one indexed-block `MPI_Accumulate` each, and
//! count as a dense flush, so the peer drains its inbox densely. The mailbox is the default
//! because it costs one contiguous put per peer and k writes at the receiver, where the
//! accumulate costs MPI a datatype walk per value and the receiver a dense drain.
//!
//! No server waits for another group. At the end every server flushes its unsent change
//! densely, the servers meet at a barrier, drain, and the replicas (now equal up to float
//! rounding) are averaged.
//!
//! Checkpoints need the same quiet point. A server whose checkpoint is due meets the others
//! (an agreement over the servers' communicator): if all are training, they flush, drain
//! and save together; if one is already finishing, the server stops training instead. A
//! finishing server keeps meeting until every server is finishing, so the meetings always
//! pair up, whichever comes first.

use anyhow::{Context, Result};

use crate::comm::rma::{LockKind, SharedWindow, Window};
use crate::comm::{Collectives, SubComm};
use crate::compress::feedback::PeerView;
use crate::compress::powersgd::{rank_for_ratio, reconstruct, LowRankPlan, PowerSgd, TensorShape};
use crate::compress::ratio::{k_for_ratio, RatioSettings, SpeedMeter};
use crate::compress::topk::TopK;
use crate::compress::MirrorDevice;
use crate::config::{CompressionKind, Config, SparseTransport};
use crate::protocol::mailbox::{
    self, Inbox, MailboxError, MailboxLayout, CONSUMED, DENSE_FLUSHES, HEADER, PUSHES,
    SENDER_WORDS, SPEED, WRITTEN,
};
use crate::protocol::param_server::ParamServer;
use crate::runtime::peers::{Exchange, Meet};
use crate::telemetry::{EvalRow, Snapshots};

/// The model to evaluate: the snapshots (with their evaluation rows to fill) and the
/// final weights.
pub struct Replicas {
    pub snapshots: Vec<(EvalRow, Vec<f32>)>,
    pub final_weights: Option<Vec<f32>>,
}

/// Seconds one group server spent in each phase of its exchanges.
#[derive(Debug, Clone, Copy, Default)]
struct ExchangePhases {
    /// Taking the unsent change: the top-k selection (or the dense copy).
    topk_s: f64,
    /// Sending it to the peers.
    send_s: f64,
    /// Draining what the peers sent.
    drain_s: f64,
}

/// What to add to the header words `old` to make them `new` (wrapping, as MPI's sum of
/// unsigned integers does).
fn header_delta(old: &[u32; SENDER_WORDS], new: &[u32; SENDER_WORDS]) -> [u32; SENDER_WORDS] {
    std::array::from_fn(|i| new[i].wrapping_sub(old[i]))
}

/// Every group but `me` (owns nothing, so loops over it may borrow the exchange mutably).
fn peers_of(me: usize, groups: usize) -> impl Iterator<Item = usize> {
    (0..groups).filter(move |&p| p != me)
}

/// Where one exchange's values go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    /// The whole unsent change, accumulated into every peer's inbox.
    DenseInbox,
    /// Top-k, accumulated into every peer's inbox through an indexed datatype.
    IndexedInbox,
    /// Top-k or low-rank factors, one message into every peer's mailbox ring.
    Mailbox,
    /// Nothing: a peer's ring is full.
    Defer,
}

/// PowerSGD on one group server: the model's tensors, the rank at the target ratio, the
/// sender's warm starts, and scratch for the unsent change, a payload and a reconstruction.
struct LowRank {
    tensors: Vec<TensorShape>,
    rank: usize,
    psgd: PowerSgd,
    unsent: Vec<f32>,
    payload: Vec<f32>,
    scratch: Vec<f32>,
}

impl LowRank {
    /// Compresses the unsent change by `plan` into a message in `msg`, and counts exactly
    /// what the peers will rebuild from it as sent (in the view and in the ledger).
    fn take(
        &mut self,
        view: &mut PeerView,
        sent_total: &mut [f64],
        weights: &[f32],
        plan: &LowRankPlan,
        msg: &mut Vec<u32>,
    ) -> Result<(), crate::compress::CompressError> {
        view.unsent_into(weights, &mut self.unsent)?;
        self.psgd.compress(&self.unsent, plan, &mut self.payload)?;
        reconstruct(plan, &self.payload, &mut self.scratch, |offset, values| {
            view.count_sent(offset, values);
            for (t, &v) in sent_total[offset..offset + values.len()]
                .iter_mut()
                .zip(values)
            {
                *t += v as f64;
            }
        })?;
        mailbox::encode_low_rank(plan.rank, &self.payload, msg);
        Ok(())
    }
}

/// Applies a peer's messages to a server's weights and peer view.
struct Receiver<'a> {
    view: &'a mut PeerView,
    weights: &'a mut [f32],
    /// The model's tensors and a reconstruction buffer (powersgd runs only).
    low_rank: Option<(&'a [TensorShape], &'a mut Vec<f32>)>,
}

impl Inbox for Receiver<'_> {
    fn value(&mut self, index: usize, value: f32) {
        self.view.receive(self.weights, index, value);
    }

    fn low_rank(&mut self, rank: usize, payload: &[f32]) -> Result<(), String> {
        let Some((tensors, scratch)) = self.low_rank.as_mut() else {
            return Err(format!(
                "a low-rank message (rank {rank}) in a run without powersgd"
            ));
        };
        let plan = LowRankPlan::new(tensors, self.weights.len(), rank);
        let (view, weights) = (&mut *self.view, &mut *self.weights);
        reconstruct(&plan, payload, scratch, |offset, values| {
            view.receive_slice(weights, offset, values)
        })
        .map_err(|e| format!("rank {rank}: {e}"))
    }
}

/// The inter-group exchange of one group server (an [`Exchange`] for the server loop).
pub struct GroupExchange<'c> {
    comm: &'c SubComm,
    /// Dense updates from peers: dense exchanges, messages too large for a mailbox, and the
    /// final flush.
    inbox: Window<f32>,
    /// Sparse messages and telemetry from peers (format in [`crate::protocol::mailbox`]), in
    /// one shared epoch for the whole run.
    mail: SharedWindow<u32>,
    layout: MailboxLayout,
    n: usize,
    groups: usize,
    me: usize,
    every: u64,
    dense: bool,
    transport: SparseTransport,
    drain_on_arrival: bool,
    ratio: RatioSettings,
    /// The replica as the peers know it; the weights minus it is the unsent change.
    view: PeerView,
    /// Where the view is mirrored and sparse exchanges select (`device.exchange_select`);
    /// `None`: on the host.
    mirror: Option<Box<dyn MirrorDevice>>,
    /// powersgd: the low-rank compressor (`None` for dense and top-k).
    low_rank: Option<LowRank>,
    /// This server's exchanges so far (named in errors).
    exchanges: u64,
    topk: TopK,
    idx: Vec<u32>,
    vals: Vec<f32>,
    msg: Vec<u32>,
    /// Words written into each peer's ring, and its consumed count when last read.
    written: Vec<u32>,
    peer_consumed: Vec<u32>,
    /// The header words this server last wrote into its slot at each peer: a new header
    /// is added as the difference to them, an accumulate, atomic against the peer's reads.
    sent_header: Vec<[u32; SENDER_WORDS]>,
    /// Scratch for the header differences and consumed-count differences of one batch.
    deltas: Vec<[u32; SENDER_WORDS]>,
    consumed_delta: Vec<u32>,
    /// Words consumed from each peer's ring, and the dense flushes seen from each peer.
    consumed: Vec<u32>,
    dense_seen: Vec<u32>,
    /// Copies of this server's own mailbox headers and rings, taken by the drain (own
    /// memory is read through MPI inside the shared epoch, like a peer's).
    heads: Vec<[u32; SENDER_WORDS]>,
    rings_copy: Vec<u32>,
    dense_sent: u32,
    speeds: Vec<f64>,
    peer_pushes: Vec<u64>,
    meter: SpeedMeter,
    last_exchange: std::time::Instant,
    last_pushes: u64,
    bytes_sent: u64,
    /// Exchanges that sent nothing because a peer's mailbox was full.
    deferred: u64,
    /// Drains between this server's own exchanges (`drain_on_arrival`).
    arrival_drains: u64,
    /// Sum of everything this group sent (f64, for the end-of-run check; sparse exchanges
    /// add only their k entries).
    sent_total: Vec<f64>,
    initial: Vec<f32>,
    phases: ExchangePhases,
}

impl<'c> GroupExchange<'c> {
    /// Collective over the servers' communicator (creates the windows). `tensors` are the
    /// model's weight tensors (powersgd factors each matrix among them).
    pub fn new(
        comm: &'c SubComm,
        cfg: &Config,
        initial: &[f32],
        tensors: &[TensorShape],
    ) -> Result<Self> {
        let n = initial.len();
        let groups = comm.size();
        let me = comm.rank();
        let c = &cfg.compression;
        let dense = c.kind == CompressionKind::Dense;
        let rings = !dense && cfg.sync.gssp.sparse_transport == SparseTransport::Mailbox;
        let k_target = if rings { k_for_ratio(n, c.ratio) } else { 0 };
        let messages = cfg.sync.gssp.mailbox_messages;
        let (layout, low_rank) = if c.kind == CompressionKind::Powersgd {
            let plan = LowRankPlan::new(tensors, n, c.rank);
            let words = mailbox::low_rank_message_words(plan.payload_len());
            if me == 0 {
                log::info!(
                    "powersgd rank {}: {} of {n} values in {} matrices go low-rank; {} values ({} bytes) per exchange at ratio {} (top-k would send {} values, {} bytes)",
                    c.rank,
                    plan.low_rank_values(),
                    plan.blocks.iter().filter(|b| matches!(b, crate::compress::powersgd::Block::LowRank { .. })).count(),
                    plan.payload_len(),
                    4 * words,
                    c.ratio,
                    k_target,
                    4 * mailbox::message_words(k_target)
                );
            }
            let layout = MailboxLayout::for_words(groups, words, messages)
                .context("the powersgd mailbox ring's size overflows")?;
            let low_rank = LowRank {
                tensors: tensors.to_vec(),
                rank: c.rank,
                psgd: PowerSgd::new(cfg.run.seed ^ (0x9e37_79b9_7f4a_7c15 ^ me as u64)),
                unsent: Vec::with_capacity(n),
                payload: Vec::with_capacity(plan.payload_len()),
                scratch: Vec::new(),
            };
            (layout, Some(low_rank))
        } else {
            (MailboxLayout::new(groups, k_target, messages), None)
        };
        let inbox = Window::create(comm, n)?;
        let mail = Window::create(comm, layout.window_len())?.lock_all()?;
        Ok(GroupExchange {
            comm,
            inbox,
            mail,
            layout,
            n,
            groups,
            me,
            every: cfg.sync.gssp.inter_group_every as u64,
            dense,
            transport: cfg.sync.gssp.sparse_transport,
            drain_on_arrival: cfg.sync.gssp.drain_on_arrival,
            ratio: RatioSettings::from_config(c),
            view: PeerView::new(initial),
            mirror: None,
            low_rank,
            exchanges: 0,
            topk: TopK::new(),
            idx: Vec::with_capacity(k_target),
            vals: Vec::with_capacity(if dense { n } else { k_target }),
            msg: Vec::new(),
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
            speeds: vec![0.0; groups],
            peer_pushes: vec![0; groups],
            meter: SpeedMeter::new(c.speed_ema)?,
            last_exchange: std::time::Instant::now(),
            last_pushes: 0,
            bytes_sent: 0,
            deferred: 0,
            arrival_drains: 0,
            sent_total: vec![0.0; n],
            initial: initial.to_vec(),
            phases: ExchangePhases::default(),
        })
    }

    /// Selects sparse exchanges on `device` from now on, the peer view mirrored there.
    pub fn select_on(&mut self, mut device: Box<dyn MirrorDevice>) {
        self.view.mirror_on(device.as_mut());
        self.mirror = Some(device);
    }

    pub fn bytes_sent(&self) -> u64 {
        self.bytes_sent
    }

    /// Exchanges that sent nothing because a peer's mailbox was full.
    pub fn deferred(&self) -> u64 {
        self.deferred
    }

    /// Drains between this server's own exchanges (`sync.gssp.drain_on_arrival`).
    pub fn arrival_drains(&self) -> u64 {
        self.arrival_drains
    }

    /// Header words this server writes into its slot at every peer.
    fn header(&self, written: u32, own_pushes: u64) -> [u32; SENDER_WORDS] {
        [
            written,
            (self.meter.speed() as f32).to_bits(),
            own_pushes as u32,
            self.dense_sent,
        ]
    }

    /// Writes this server's header (with its `written` count for each peer) into its slot at
    /// every peer, as an accumulate of the difference to what is there, so that a peer
    /// reading its headers meanwhile sees old or new words, never a torn one; with
    /// `consumed`, also reads how far each peer has drained. One batch for all peers.
    fn write_headers(&mut self, own_pushes: u64, consumed: bool) -> Result<()> {
        let (me, slot) = (self.me, self.layout.slot(self.me));
        for peer in peers_of(me, self.groups) {
            let header = self.header(self.written[peer], own_pushes);
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

    /// Writes `idx`/`vals` as one message into every peer's ring (room checked), then this
    /// server's header and telemetry, and reads back how far each peer has consumed.
    fn send_sparse(&mut self, own_pushes: u64) -> Result<()> {
        mailbox::encode(&self.idx, &self.vals, &mut self.msg);
        self.send_message(own_pushes)?;
        self.record_sent(true);
        Ok(())
    }

    /// Writes the message in `msg` into every peer's ring (room checked), then this
    /// server's header and telemetry, and reads back how far each peer has consumed.
    fn send_message(&mut self, own_pushes: u64) -> Result<()> {
        let (me, ring, len) = (self.me, self.layout.ring(self.me), self.msg.len());
        let mut batch = self.mail.batch();
        for peer in peers_of(me, self.groups) {
            for (at, from, n) in self.layout.pieces(self.written[peer], len) {
                batch.put(peer, ring + at, &self.msg[from..from + n])?;
            }
        }
        // Every message is complete at its peer before a header announces it.
        batch.complete()?;
        for peer in peers_of(me, self.groups) {
            self.written[peer] = self.written[peer].wrapping_add(len as u32);
        }
        self.write_headers(own_pushes, true)?;
        self.bytes_sent += (4 * len * (self.groups - 1)) as u64;
        Ok(())
    }

    /// Adds what was just sent (`vals`, at `idx` when `sparse`) to the end-of-run ledger.
    fn record_sent(&mut self, sparse: bool) {
        if sparse {
            for (&i, &v) in self.idx.iter().zip(&self.vals) {
                self.sent_total[i as usize] += v as f64;
            }
        } else {
            for (t, &v) in self.sent_total.iter_mut().zip(&self.vals) {
                *t += v as f64;
            }
        }
    }

    /// Adds `vals` to every peer's inbox (the whole model, or with `sparse` at `idx` through
    /// one indexed datatype), then tells it so (dense flush count and telemetry in its
    /// mailbox), so that it drains the inbox.
    fn send_to_inboxes(&mut self, sparse: bool, own_pushes: u64) -> Result<()> {
        self.dense_sent = self.dense_sent.wrapping_add(1);
        let scatter = if sparse {
            Some(self.inbox.scatter(&self.idx)?)
        } else {
            None
        };
        for peer in peers_of(self.me, self.groups) {
            let mut epoch = self.inbox.lock(peer, LockKind::Shared)?;
            match &scatter {
                Some(scatter) => epoch.accumulate_scattered(scatter, &self.vals)?,
                None => epoch.accumulate_sum(0, &self.vals)?,
            }
            epoch.unlock()?;
            let per_value = if sparse { 8 } else { 4 };
            self.bytes_sent += (per_value * self.vals.len()) as u64;
        }
        // After every inbox epoch has ended: a peer that sees the new count finds the values.
        self.write_headers(own_pushes, false)?;
        self.record_sent(sparse);
        Ok(())
    }

    /// Whether a peer seems to have written a message or flushed densely since the last
    /// drain (an unlocked peek, confirmed by [`GroupExchange::drain`]).
    fn mail_waiting(&self) -> bool {
        peers_of(self.me, self.groups).any(|s| {
            let slot = self.layout.slot(s);
            self.mail.peek_local(slot + WRITTEN) != Some(self.consumed[s])
                || self.mail.peek_local(slot + DENSE_FLUSHES) != Some(self.dense_seen[s])
        })
    }

    /// Applies every message the peers wrote into this server's mailbox, reads their
    /// telemetry, and drains the dense inbox when a peer flushed into it (or `force`).
    fn drain(&mut self, weights: &mut [f32], force: bool) -> Result<()> {
        let (me, layout) = (self.me, self.layout);
        // The headers the peers wrote, read atomically (they may be writing them now).
        let mut batch = self.mail.batch();
        for (s, head) in self.heads.iter_mut().enumerate().filter(|&(s, _)| s != me) {
            batch.fetch(me, layout.slot(s) + WRITTEN, head)?;
        }
        batch.complete()?;
        // The messages announced by them: complete (a sender completes a message before its
        // header), and not written again before this server publishes its consumed count.
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
        let mut dense_new = force;
        for s in peers_of(me, self.groups) {
            let ring = &self.rings_copy[layout.ring(s)..layout.ring(s) + layout.cap];
            let head = self.heads[s];
            let receiver = Receiver {
                view: &mut self.view,
                weights: &mut *weights,
                low_rank: self
                    .low_rank
                    .as_mut()
                    .map(|l| (&l.tensors[..], &mut l.scratch)),
            };
            let consumed =
                layout.decode(s, ring, self.consumed[s], head[WRITTEN], self.n, receiver)?;
            self.consumed_delta[s] = consumed.wrapping_sub(self.consumed[s]);
            self.consumed[s] = consumed;
            self.speeds[s] = f32::from_bits(head[SPEED]) as f64;
            self.peer_pushes[s] = head[PUSHES] as u64;
            if head[DENSE_FLUSHES] != self.dense_seen[s] {
                self.dense_seen[s] = head[DENSE_FLUSHES];
                dense_new = true;
            }
        }
        // Publish the new consumed counts (the senders may reuse that ring space).
        let mut batch = self.mail.batch();
        for (s, delta) in self.consumed_delta.iter().enumerate() {
            if s != me && *delta != 0 {
                batch.accumulate_sum(me, layout.slot(s) + CONSUMED, std::slice::from_ref(delta))?;
            }
        }
        batch.complete()?;
        if dense_new {
            // The inbox takes accumulates from every peer: read and zero it under an
            // exclusive lock (a shared epoch would need an atomic fetch and a subtraction).
            let mut inbox = self.inbox.lock_local()?;
            self.view.receive_dense(weights, &mut inbox)?;
            inbox.unlock()?;
        }
        Ok(())
    }

    /// Frees the windows (collective over the servers, after [`GroupExchange::finish`]).
    pub fn close(self) -> Result<()> {
        self.inbox.free()?;
        self.mail.free()?;
        Ok(())
    }

    /// Continues from a checkpoint: the pushes of every group and this server's speed as
    /// it saved them (the weights, and with them the peer view, come from the server's
    /// replica; the mailboxes start empty, as they were at the checkpoint's quiet point).
    pub fn resume(&mut self, group_pushes: &[u64], speed: f64) -> Result<()> {
        anyhow::ensure!(
            group_pushes.len() == self.groups,
            "the checkpoint knows {} groups, this run has {}",
            group_pushes.len(),
            self.groups
        );
        self.peer_pushes.copy_from_slice(group_pushes);
        self.last_pushes = group_pushes[self.me];
        self.meter.resume(speed);
        self.speeds[self.me] = self.meter.speed();
        Ok(())
    }

    /// Flushes the unsent change densely, meets the other servers, drains: every update
    /// has then reached every replica and nothing is in flight (collective).
    fn flush_and_drain(&mut self, ps: &mut ParamServer) -> Result<()> {
        self.view
            .take_dense(ps.weights(), &mut self.vals)
            .map_err(|e| e.in_context(self.me, self.exchanges, self.last_pushes))?;
        self.send_to_inboxes(false, self.last_pushes)?;
        self.comm.barrier()?;
        self.drain(ps.weights_mut(), true)?;
        self.comm.barrier()?;
        Ok(())
    }

    /// One meeting of the servers (collective): whether all of them, and whether any of
    /// them, are stopping, and the latest of their clocks.
    fn meet_all(&self, stopping: bool, time_s: f64) -> Result<(bool, bool, f64)> {
        let vote = f64::from(u8::from(stopping));
        let all = self.comm.allreduce_min_f64(vote)? > 0.0;
        let any = self.comm.allreduce_max_f64(vote)? > 0.0;
        let time_s = self.comm.allreduce_max_f64(time_s)?;
        Ok((all, any, time_s))
    }

    /// End of training: flush the unsent change densely, meet the other servers, drain, and
    /// check that the replica equals the initial weights plus every group's updates.
    pub fn finish(&mut self, ps: &mut ParamServer) -> Result<f64> {
        // A server still training meets this one only when a checkpoint is due for it or
        // when it stops too; it learns here that it must stop. Meet until all stop.
        while !self.meet_all(true, 0.0)?.0 {}
        let ExchangePhases {
            topk_s,
            send_s,
            drain_s,
        } = self.phases;
        log::info!(
            "group {}: {} exchanges, phases (s): top-k or compression {topk_s:.4} send {send_s:.4} drain {drain_s:.4}; {} exchanges deferred by a full mailbox; {} drains on arrival",
            self.me,
            self.exchanges,
            self.deferred,
            self.arrival_drains
        );
        self.flush_and_drain(ps)?;
        // Nothing lost: replica - initial must equal the sum of everything all groups sent,
        // final flushes included. A group's own changes reach its replica directly, not
        // through what it sent, so anything its feedback or top-k dropped shows up here.
        let mut total: Vec<f32> = self.sent_total.iter().map(|&x| x as f32).collect();
        self.comm.allreduce_sum_f32_in_place(&mut total)?;
        let mut max_err = 0.0f64;
        let mut max_ref = 0.0f64;
        for ((&w, &i), &t) in ps.weights().iter().zip(&self.initial).zip(&total) {
            max_err = max_err.max(((w - i) as f64 - t as f64).abs());
            max_ref = max_ref.max((t as f64).abs());
        }
        log::info!(
            "group {}: replica - initial vs sum of all groups' sent updates: max abs difference {max_err:.3e} (updates up to {max_ref:.3e})",
            self.me
        );
        Ok(max_err)
    }
}

impl Exchange for GroupExchange<'_> {
    fn after_push(&mut self, ps: &mut ParamServer, own_pushes: u64, epoch: f64) -> Result<f64> {
        if !own_pushes.is_multiple_of(self.every) {
            // With `drain_on_arrival`, apply what peers sent as soon as it is seen: the
            // workers then compute on fresher weights. A peek at a few words decides.
            if self.drain_on_arrival && self.mail_waiting() {
                let t = std::time::Instant::now();
                self.drain(ps.weights_mut(), false)?;
                self.phases.drain_s += t.elapsed().as_secs_f64();
                self.arrival_drains += 1;
            }
            return Ok(0.0);
        }
        let dt = self.last_exchange.elapsed().as_secs_f64();
        self.meter.update(own_pushes - self.last_pushes, dt);
        self.last_exchange = std::time::Instant::now();
        self.last_pushes = own_pushes;
        self.speeds[self.me] = self.meter.speed();

        let ratio = if self.dense {
            1.0
        } else {
            self.ratio.ratio(epoch, self.speeds[self.me], &self.speeds)
        };
        self.exchanges += 1;
        let k = k_for_ratio(self.n, ratio);
        let t = std::time::Instant::now();
        let plan = self.low_rank.as_ref().map(|l| {
            let rank = rank_for_ratio(l.rank, ratio, self.ratio.target);
            LowRankPlan::new(&l.tensors, self.n, rank)
        });
        let words = match &plan {
            Some(plan) => mailbox::low_rank_message_words(plan.payload_len()),
            None => mailbox::message_words(k),
        };
        let (me, exchange) = (self.me, self.exchanges);
        let context = |e: crate::compress::CompressError| e.in_context(me, exchange, own_pushes);
        let mailbox = self.transport == SparseTransport::Mailbox;
        let route = if self.dense || (mailbox && words > self.layout.cap) {
            Route::DenseInbox
        } else if !mailbox {
            Route::IndexedInbox
        } else if self.peers_have_room(words)? {
            Route::Mailbox
        } else {
            // A peer has not drained yet: keep everything unsent rather than wait for it.
            Route::Defer
        };
        let taken = match route {
            Route::Defer => {
                self.deferred += 1;
                Ok(())
            }
            Route::DenseInbox => self.view.take_dense(ps.weights(), &mut self.vals),
            Route::IndexedInbox | Route::Mailbox => match (&mut self.low_rank, &plan) {
                (Some(low_rank), Some(plan)) => {
                    let (view, sent) = (&mut self.view, &mut self.sent_total);
                    low_rank.take(view, sent, ps.weights(), plan, &mut self.msg)
                }
                _ => {
                    let (topk, idx, vals) = (&mut self.topk, &mut self.idx, &mut self.vals);
                    match &mut self.mirror {
                        Some(device) => {
                            self.view
                                .take_sparse_on(device.as_mut(), ps.weights(), k, idx, vals)
                        }
                        None => self.view.take_sparse(ps.weights(), k, topk, idx, vals),
                    }
                }
            },
        };
        taken.map_err(context)?;
        self.phases.topk_s += t.elapsed().as_secs_f64();
        let t = std::time::Instant::now();
        match route {
            Route::Defer => {}
            Route::DenseInbox => self.send_to_inboxes(false, own_pushes)?,
            Route::IndexedInbox => self.send_to_inboxes(true, own_pushes)?,
            Route::Mailbox if plan.is_some() => self.send_message(own_pushes)?,
            Route::Mailbox => self.send_sparse(own_pushes)?,
        }
        self.phases.send_s += t.elapsed().as_secs_f64();
        let t = std::time::Instant::now();
        self.drain(ps.weights_mut(), false)?;
        self.phases.drain_s += t.elapsed().as_secs_f64();
        Ok(ratio)
    }

    fn meet(&mut self, time_s: f64) -> Result<Meet> {
        let (_, any_stopping, time_s) = self.meet_all(false, time_s)?;
        Ok(if any_stopping {
            Meet::Stop
        } else {
            Meet::Together { time_s }
        })
    }

    fn quiesce(&mut self, ps: &mut ParamServer) -> Result<()> {
        self.flush_and_drain(ps)
    }

    fn saved_state(&self, own_pushes: u64) -> (Vec<u64>, f64) {
        let mut pushes = self.peer_pushes.clone();
        pushes[self.me] = own_pushes;
        (pushes, self.meter.speed())
    }

    fn share(&mut self, row: &[f64]) -> Result<Vec<Vec<f64>>> {
        // Gathered on the first server, then every row to everyone as little-endian bytes.
        let rows = self.comm.gather_f64s(0, row)?;
        let mut bytes: Vec<u8> = rows
            .iter()
            .flatten()
            .flatten()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        self.comm.broadcast_bytes(0, &mut bytes)?;
        let values: Vec<f64> = bytes
            .chunks_exact(8)
            .map(|b| f64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
            .collect();
        anyhow::ensure!(
            values.len() == row.len() * self.comm.size(),
            "regroup: {} values shared, expected {} rows of {}",
            values.len(),
            self.comm.size(),
            row.len()
        );
        Ok(values
            .chunks(row.len().max(1))
            .map(<[f64]>::to_vec)
            .collect())
    }

    fn global_pushes(&self, own_pushes: u64) -> u64 {
        own_pushes
            + self
                .peer_pushes
                .iter()
                .enumerate()
                .filter(|&(g, _)| g != self.me)
                .map(|(_, &p)| p)
                .sum::<u64>()
    }
}

/// Averages the group servers' replicas: the final weights and each snapshot index that
/// every server took (collective over the servers' communicator; rank 0 of it gets them).
pub fn average_replicas(
    comm: &SubComm,
    snapshots: Snapshots,
    final_weights: Option<Vec<f32>>,
) -> Result<Replicas> {
    let groups = comm.size() as f32;
    let count = comm.allreduce_min_f64(snapshots.taken.len() as f64)? as usize;
    let mut taken = snapshots.taken;
    taken.truncate(count);
    for (_, w) in &mut taken {
        comm.allreduce_sum_f32_in_place(w)?;
        w.iter_mut().for_each(|x| *x /= groups);
    }
    let mut final_weights = final_weights.context("group server holds no model")?;
    comm.allreduce_sum_f32_in_place(&mut final_weights)?;
    final_weights.iter_mut().for_each(|x| *x /= groups);
    Ok(Replicas {
        snapshots: taken,
        final_weights: Some(final_weights),
    })
}
