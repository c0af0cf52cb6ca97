//! GSSP between groups: the asynchronous exchange of (sparsified) updates between group
//! servers through one-sided RMA, with GDTopK's per-group upload ratio. The groups
//! themselves come from [`crate::runtime::profiling`].
//!
//! Three parts, one job each: [`transport`] moves messages through the windows (a dense
//! inbox, and a mailbox with a ring per peer), [`encoder`] decides what of the change is
//! sent and applies what arrives, [`ledger`] counts what was sent for the end-of-run
//! check. [`GroupExchange`] chooses, per exchange, the route and the compressor, and
//! counts a sent update in one place. Every `inter_group_every` applied pushes a server:
//! 1. takes its unsent change: the weights minus [`PeerView`](crate::compress::feedback::PeerView) (the replica as the peers
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
//! No server waits for another group between meetings. At the end every server flushes its unsent change
//! densely, the servers meet at a barrier, drain, and the replicas (now equal up to float
//! rounding) are averaged.
//!
//! Checkpoints need the same quiet point. A server whose checkpoint is due meets the others
//! (an agreement over the servers' communicator): if all are training, they flush, drain
//! and save together; if one is already finishing, the server stops training instead. A
//! finishing server keeps meeting until every server is finishing, so the meetings always
//! pair up, whichever comes first.
//!
//! A meeting is bounded: each server comes to it through [`SubComm::arrive`] and waits at
//! most `run.meeting_timeout_s` for the others; a group whose server does not come (held by
//! a stopped worker, or stopped itself) ends the job with an error naming its ranks
//! ([`roll`]), on the servers that came, instead of holding every group for good. The
//! checkpoint before it stays whole, to resume from.

use anyhow::{Context, Result};

use std::ops::Range;
use std::path::Path;
use std::time::Duration;

use crate::checkpoint::{RankFile, RankMeta};
use crate::comm::{Collectives, SubComm};
use crate::compress::powersgd::{rank_for_ratio, LowRankLayout, TensorShape};
use crate::compress::ratio::{k_for_ratio, RatioSettings, SpeedMeter};
use crate::compress::{CompressError, MirrorDevice};
use crate::compute::optim::Outer;
use crate::config::{CompressionKind, Config, SparseTransport};
use crate::protocol::mailbox::{self, MailboxLayout};
use crate::protocol::param_server::ParamServer;
use crate::runtime::peers::{Exchange, Exchanged, Meet, Meetings, SavedPeers};
use crate::telemetry::pace::{slowest_of, Slowest};
use crate::telemetry::{EvalRow, Snapshots};

pub mod encoder;
pub mod ledger;
pub mod roll;
pub mod transport;

use encoder::{Encoder, Taken};
use ledger::Ledger;
use roll::{Occasion, Roll};
use transport::{peers_of, RmaTransport, Telemetry, Transport};

/// The model to evaluate: the snapshots (with their evaluation rows to fill) and the
/// final weights.
pub struct Replicas {
    pub snapshots: Vec<(EvalRow, Vec<f32>)>,
    pub final_weights: Option<Vec<f32>>,
}

/// Seconds one group server spent in each phase of its exchanges.
#[derive(Debug, Clone, Copy, Default)]
struct ExchangePhases {
    /// Taking the unsent change: the top-k selection, the compression or the dense copy.
    take_s: f64,
    /// Sending it to the peers.
    send_s: f64,
    /// Draining what the peers sent.
    drain_s: f64,
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

/// How this server's exchanges compress: dense, top-k, or PowerSGD (with its payload layout at a
/// ratio).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Compression {
    Dense,
    TopK,
    LowRank,
}

/// The outer optimizer of a group server's own progress, and where its last step left
/// the unsent change (progress is measured from there).
struct OuterSteps {
    outer: Outer,
    anchor: Vec<f32>,
    scratch: Vec<f32>,
}

/// The inter-group exchange of one group server (an [`Exchange`], and over MPI's windows
/// the [`Meetings`] of the server loop), over the transport `T` ([`RmaTransport`] under
/// mpirun, the simulated clock's in `tools::simulate`).
pub struct GroupExchange<T: Transport> {
    transport: T,
    encoder: Encoder,
    ledger: Ledger,
    compression: Compression,
    /// `sync.gssp.outer`, unless `none`.
    outer: Option<OuterSteps>,
    n: usize,
    groups: usize,
    me: usize,
    every: u64,
    /// Sparse updates travel as mailbox messages (else as indexed accumulates).
    mailbox: bool,
    drain_on_arrival: bool,
    ratio: RatioSettings,
    /// This server's exchanges so far (named in errors).
    exchanges: u64,
    /// What each group last said of itself (this one's own entry kept up to date here).
    peers: Vec<Telemetry>,
    /// This server's slowest worker, as its server loop last noted it.
    own_slowest: Option<Slowest>,
    speeds: Vec<f64>,
    meter: SpeedMeter,
    /// The training clock at the last exchange, seconds.
    last_exchange_s: f64,
    last_pushes: u64,
    /// Exchanges that sent nothing because a peer's mailbox was full.
    deferred: u64,
    /// Drains between this server's own exchanges (`drain_on_arrival`).
    arrival_drains: u64,
    phases: ExchangePhases,
    /// Scratch: each group's push count before a drain.
    known: Vec<u64>,
    /// The batches a push of each group stands for (empty: one each), so that the
    /// peers' pushes count their batches towards the run's epochs.
    batches_per_push: Vec<f64>,
    /// The meetings this server came to so far (each arrival carries its number).
    meetings: u64,
    /// How long it waits at one for the others (`run.meeting_timeout_s`).
    meeting_timeout: Duration,
    /// What its meetings during training are for: regroups or checkpoints.
    occasion: Occasion,
    /// Who each group is, to name one that does not come.
    roll: Roll,
}

impl<'c> GroupExchange<RmaTransport<'c>> {
    /// Collective over the servers' communicator (creates the windows). `tensors` are the
    /// model's weight tensors (powersgd factors each matrix among them).
    pub fn new(
        comm: &'c SubComm,
        cfg: &Config,
        initial: &[f32],
        tensors: &[TensorShape],
    ) -> Result<Self> {
        let n = initial.len();
        let group = (comm.rank(), comm.size());
        Self::with_transport(cfg, initial, tensors, group, |layout| {
            RmaTransport::new(comm, n, layout)
        })
    }
}

impl<T: Transport> GroupExchange<T> {
    /// The exchange of group `me` of `groups` starting from the weights `initial`, over the
    /// transport `open` makes for the mailbox layout the compression needs.
    pub fn with_transport(
        cfg: &Config,
        initial: &[f32],
        tensors: &[TensorShape],
        (me, groups): (usize, usize),
        open: impl FnOnce(MailboxLayout) -> Result<T>,
    ) -> Result<Self> {
        let n = initial.len();
        let c = &cfg.compression;
        let g = &cfg.sync.gssp;
        let compression = match c.kind {
            CompressionKind::Dense => Compression::Dense,
            CompressionKind::Topk => Compression::TopK,
            CompressionKind::Powersgd => Compression::LowRank,
        };
        let mailbox = g.sparse_transport == SparseTransport::Mailbox;
        let rings = compression != Compression::Dense && mailbox;
        let k_target = if rings { k_for_ratio(n, c.ratio) } else { 0 };
        let seed = cfg.run.seed ^ (0x9e37_79b9_7f4a_7c15 ^ me as u64);
        let low_rank = (compression == Compression::LowRank).then_some((c.rank, tensors, seed));
        let encoder = Encoder::new(initial, low_rank, k_target);
        let layout = match encoder.low_rank_layout(|r| r) {
            Some(low_rank) => {
                let words = mailbox::low_rank_message_words(low_rank.payload_len());
                if me == 0 {
                    log_low_rank(&low_rank, &encoder, (n, c.ratio), k_target);
                }
                MailboxLayout::for_words(groups, words, g.mailbox_messages)
                    .context("the powersgd mailbox ring's size overflows")?
            }
            None => MailboxLayout::new(groups, k_target, g.mailbox_messages),
        };
        Ok(GroupExchange {
            transport: open(layout)?,
            encoder,
            ledger: Ledger::new(initial),
            compression,
            outer: Outer::new(&g.outer, n, groups).map(|outer| OuterSteps {
                outer,
                anchor: vec![0.0; n],
                scratch: Vec::with_capacity(n),
            }),
            n,
            groups,
            me,
            every: g.inter_group_every as u64,
            mailbox,
            drain_on_arrival: g.drain_on_arrival,
            ratio: RatioSettings::from_config(c),
            exchanges: 0,
            peers: vec![Telemetry::default(); groups],
            own_slowest: None,
            speeds: vec![0.0; groups],
            meter: SpeedMeter::new(c.speed_ema)?,
            last_exchange_s: 0.0,
            last_pushes: 0,
            deferred: 0,
            arrival_drains: 0,
            phases: ExchangePhases::default(),
            known: Vec::with_capacity(groups),
            batches_per_push: Vec::new(),
            meetings: 0,
            meeting_timeout: Duration::from_secs_f64(cfg.run.meeting_timeout_s),
            occasion: if g.regroup_every_s > 0.0 {
                Occasion::Regroup
            } else {
                Occasion::Checkpoint
            },
            roll: Roll::default(),
        })
    }

    /// Names each group by its ranks in the error of a meeting it does not come to.
    pub fn name_groups(&mut self, roll: Roll) {
        self.roll = roll;
    }

    /// Counts a push of group g as `per_group[g]` batches in [`Exchange::global_pushes`]
    /// (gssp's local steps: the mean of the group's workers' local steps).
    pub fn count_batches(&mut self, per_group: Vec<f64>) {
        self.batches_per_push = per_group;
    }

    /// Selects sparse exchanges on `device` from now on, the peer view mirrored there.
    pub fn select_on(&mut self, device: Box<dyn MirrorDevice>) {
        self.encoder.select_on(device);
    }

    /// Bytes this server put into its peers' windows.
    pub fn bytes_sent(&self) -> u64 {
        self.transport.bytes_sent()
    }

    /// Exchanges that sent nothing because a peer's mailbox was full.
    pub fn deferred(&self) -> u64 {
        self.deferred
    }

    /// Drains between this server's own exchanges (`sync.gssp.drain_on_arrival`).
    pub fn arrival_drains(&self) -> u64 {
        self.arrival_drains
    }

    /// What this server tells its peers with its next message.
    fn telemetry(&self, own_pushes: u64) -> Telemetry {
        Telemetry {
            speed: self.meter.speed(),
            pushes: own_pushes,
            slowest: self.own_slowest,
        }
    }

    /// Updates this server's speed for an exchange after `own_pushes` applied pushes, at
    /// `time_s` on the training clock.
    fn measure(&mut self, own_pushes: u64, time_s: f64) {
        let dt = time_s - self.last_exchange_s;
        self.meter.update(own_pushes - self.last_pushes, dt);
        self.last_exchange_s = time_s;
        self.last_pushes = own_pushes;
        self.speeds[self.me] = self.meter.speed();
    }

    /// Where this exchange's `words`-word message (top-k or low-rank) goes.
    fn route(&mut self, words: usize) -> Result<Route> {
        let route = if self.compression == Compression::Dense
            || (self.mailbox && words > self.transport.ring_words())
        {
            Route::DenseInbox
        } else if !self.mailbox {
            Route::IndexedInbox
        } else if self.transport.peers_have_room(words)? {
            Route::Mailbox
        } else {
            // A peer has not drained yet: keep everything unsent rather than wait for it.
            Route::Defer
        };
        Ok(route)
    }

    /// One exchange at `ratio` after `own_pushes` applied pushes: takes the unsent change
    /// as the route allows, sends it, and counts it as sent once it went out.
    fn exchange(&mut self, ps: &mut ParamServer, ratio: f64, own_pushes: u64) -> Result<()> {
        let k = k_for_ratio(self.n, ratio);
        let target = self.ratio.target;
        let low_rank = (self.compression == Compression::LowRank)
            .then(|| {
                self.encoder
                    .low_rank_layout(|r| rank_for_ratio(r, ratio, target))
            })
            .flatten();
        let words = match &low_rank {
            Some(layout) => mailbox::low_rank_message_words(layout.payload_len()),
            None => mailbox::message_words(k),
        };
        let route = self.route(words)?;
        let t = std::time::Instant::now();
        let (me, exchange) = (self.me, self.exchanges);
        let context = |e: CompressError| e.in_context(me, exchange, own_pushes);
        if let Some(o) = self.outer.as_mut() {
            let weights = ps.weights_mut();
            let anchor = &o.anchor;
            self.encoder
                .outer_step(weights, &mut o.outer, anchor, &mut o.scratch)
                .map_err(context)?;
        }
        let taken = match (route, &low_rank) {
            (Route::Defer, _) => None,
            (Route::DenseInbox, _) => Some(self.encoder.take_dense(ps.weights())),
            (_, Some(layout)) => Some(self.encoder.take_low_rank(ps.weights(), layout)),
            (_, None) => Some(self.encoder.take_sparse(ps.weights(), k)),
        };
        let taken = taken.transpose().map_err(context)?;
        self.anchor_progress(ps.weights()).map_err(context)?;
        self.phases.take_s += t.elapsed().as_secs_f64();
        let Some(taken) = taken else {
            self.deferred += 1;
            return Ok(());
        };
        let t = std::time::Instant::now();
        self.send(route, taken, own_pushes)?;
        self.phases.send_s += t.elapsed().as_secs_f64();
        Ok(())
    }

    /// With an outer optimizer: the unsent change now is where the group's next progress
    /// is measured from.
    fn anchor_progress(&mut self, weights: &[f32]) -> Result<(), CompressError> {
        match self.outer.as_mut() {
            Some(o) => self.encoder.unsent(weights, &mut o.anchor),
            None => Ok(()),
        }
    }

    /// Sends what the encoder took as `taken` by `route`, then counts it as sent: the one
    /// place an update enters the ledger.
    fn send(&mut self, route: Route, taken: Taken, own_pushes: u64) -> Result<()> {
        let telemetry = self.telemetry(own_pushes);
        let e = &mut self.encoder;
        match (route, taken) {
            (Route::DenseInbox, _) => self.transport.send_to_inboxes(None, &e.vals, telemetry)?,
            (Route::IndexedInbox, _) => {
                self.transport
                    .send_to_inboxes(Some(&e.idx), &e.vals, telemetry)?
            }
            (Route::Mailbox, Taken::Sparse) => {
                self.transport.send_message(e.sparse_message(), telemetry)?
            }
            (Route::Mailbox, _) => self.transport.send_message(&e.msg, telemetry)?,
            (Route::Defer, _) => return Ok(()),
        }
        self.ledger.count(taken, &self.encoder);
        Ok(())
    }

    /// Applies what the peers sent (the dense inbox too with `force`), and takes in their
    /// telemetry. Returns the groups whose updates it applied, bit g for group g: those
    /// whose push count (sent with every update) moved on.
    fn drain(&mut self, weights: &mut [f32], force: bool) -> Result<u64> {
        let t = std::time::Instant::now();
        // The scratch is reused: no allocation on the server's hot path.
        self.known.clear();
        self.known.extend(self.peers.iter().map(|p| p.pushes));
        let mut receiver = self.encoder.receiver(weights);
        self.transport
            .drain(&mut receiver, force, &mut self.peers)?;
        let mut from = 0u64;
        for s in peers_of(self.me, self.groups) {
            self.speeds[s] = self.peers[s].speed;
            if s < 64 && self.peers[s].pushes != self.known[s] {
                from |= 1 << s;
            }
        }
        self.phases.drain_s += t.elapsed().as_secs_f64();
        Ok(from)
    }

    /// Continues from this server's checkpoint `file` (read from `path`): the pushes of
    /// every group, its speed and its outer optimizer as it saved them (the weights, and
    /// with them the peer view, come from the server's replica; the mailboxes start empty
    /// and nothing is unsent, as at the checkpoint's quiet point).
    pub fn resume(&mut self, file: &mut RankFile<RankMeta>, path: &Path) -> Result<()> {
        let (group_pushes, speed) = (file.meta.group_pushes.clone(), file.meta.speed);
        let n = self.n;
        if let Some(o) = self.outer.as_mut() {
            let steps = file.meta.outer_steps;
            o.outer.restore(steps, |name| file.take(name, n, path))?;
        }
        anyhow::ensure!(
            group_pushes.len() == self.groups,
            "the checkpoint knows {} groups, this run has {}",
            group_pushes.len(),
            self.groups
        );
        for (p, &pushes) in self.peers.iter_mut().zip(&group_pushes) {
            p.pushes = pushes;
        }
        self.last_pushes = group_pushes[self.me];
        self.meter.resume(speed);
        self.speeds[self.me] = self.meter.speed();
        Ok(())
    }

    /// Sends the unsent change densely to every peer (the final flush: nothing stays
    /// unsent).
    pub fn flush(&mut self, ps: &mut ParamServer) -> Result<()> {
        let (me, exchanges, pushes) = (self.me, self.exchanges, self.last_pushes);
        let context = |e: CompressError| e.in_context(me, exchanges, pushes);
        let taken = self.encoder.take_dense(ps.weights()).map_err(context)?;
        self.anchor_progress(ps.weights()).map_err(context)?;
        self.send(Route::DenseInbox, taken, pushes)
    }

    /// Applies everything the peers sent, their dense inboxes included (after every
    /// server's [`GroupExchange::flush`]: every update has then reached every replica).
    pub fn drain_all(&mut self, ps: &mut ParamServer) -> Result<()> {
        self.drain(ps.weights_mut(), true).map(|_| ())
    }

    /// What this server sent over the whole run, for the end's check
    /// ([`GroupExchange::replica_error`]).
    pub fn sent(&self) -> Vec<f32> {
        self.ledger.sent()
    }

    /// The check after the final drain: the largest |replica - initial - `all_sent`|, the
    /// sum of everything every group sent (0 up to rounding when nothing was lost).
    pub fn replica_error(&self, ps: &ParamServer, all_sent: &[f32]) -> f64 {
        let (max_err, max_ref) = self.ledger.error(ps.weights(), all_sent);
        log::info!(
            "group {}: replica - initial vs sum of all groups' sent updates: max abs difference {max_err:.3e} (updates up to {max_ref:.3e})",
            self.me
        );
        max_err
    }

    /// The account of this server's exchanges, for the log at the end.
    fn log_phases(&self) {
        let ExchangePhases {
            take_s,
            send_s,
            drain_s,
        } = self.phases;
        log::info!(
            "group {}: {} exchanges, phases (s): top-k or compression {take_s:.4} send {send_s:.4} drain {drain_s:.4}; {} exchanges deferred by a full mailbox; {} drains on arrival",
            self.me,
            self.exchanges,
            self.deferred,
            self.arrival_drains
        );
    }
}

impl<'c> GroupExchange<RmaTransport<'c>> {
    /// Flushes the unsent change densely, meets the other servers, drains: every update
    /// has then reached every replica and nothing is in flight (collective).
    fn flush_and_drain(&mut self, ps: &mut ParamServer) -> Result<()> {
        self.flush(ps)?;
        self.transport.comm().barrier()?;
        self.drain_all(ps)?;
        self.transport.comm().barrier()?;
        Ok(())
    }

    /// One meeting of the servers (collective): whether all of them, and whether any of
    /// them, are stopping, and the latest of their clocks. A server that does not come
    /// within the meeting timeout is an error naming its group.
    fn meet_all(&mut self, stopping: bool, time_s: f64) -> Result<(bool, bool, f64)> {
        let comm = self.transport.comm();
        self.meetings += 1;
        let timeout = self.meeting_timeout;
        match comm.meet(self.meetings, timeout, (stopping, time_s))? {
            Ok(v) => Ok((v.all_stop, v.any_stop, v.time_s)),
            Err(absent) => {
                let occasion = if stopping {
                    Occasion::End
                } else {
                    self.occasion
                };
                let timeout_s = timeout.as_secs_f64();
                anyhow::bail!(self.roll.absent(&absent, occasion, timeout_s))
            }
        }
    }

    /// End of training: flush the unsent change densely, meet the other servers, drain, and
    /// check that the replica equals the initial weights plus every group's updates.
    pub fn finish(&mut self, ps: &mut ParamServer) -> Result<f64> {
        // A server still training meets this one only when a checkpoint is due for it or
        // when it stops too; it learns here that it must stop. Meet until all stop.
        while !self.meet_all(true, 0.0)?.0 {}
        self.log_phases();
        self.flush_and_drain(ps)?;
        // Nothing lost: replica - initial must equal the sum of everything all groups sent,
        // final flushes included.
        let mut all_sent = self.sent();
        self.transport
            .comm()
            .allreduce_sum_f32_in_place(&mut all_sent)?;
        Ok(self.replica_error(ps, &all_sent))
    }

    /// Frees the windows (collective over the servers, after [`GroupExchange::finish`]).
    pub fn close(self) -> Result<()> {
        self.transport.close()
    }
}

/// Rank 0's account of the PowerSGD exchange against top-k's at the same ratio.
fn log_low_rank(layout: &LowRankLayout, encoder: &Encoder, (n, ratio): (usize, f64), k: usize) {
    let words = mailbox::low_rank_message_words(layout.payload_len());
    log::info!(
        "powersgd rank {}: {} of {} values in {} matrices go low-rank; {} values ({} bytes) per exchange at ratio {ratio} (top-k would send {k} values, {} bytes)",
        layout.rank,
        layout.low_rank_values(),
        n,
        encoder.low_rank_matrices(),
        layout.payload_len(),
        4 * words,
        4 * mailbox::message_words(k)
    );
}

impl<T: Transport> Exchange for GroupExchange<T> {
    fn after_push(
        &mut self,
        ps: &mut ParamServer,
        own_pushes: u64,
        (epoch, time_s): (f64, f64),
    ) -> Result<Exchanged> {
        if !own_pushes.is_multiple_of(self.every) {
            // With `drain_on_arrival`, apply what peers sent as soon as it is seen: the
            // workers then compute on fresher weights. A peek at a few words decides.
            let mut drained_from = 0;
            if self.drain_on_arrival && self.transport.mail_waiting() {
                drained_from = self.drain(ps.weights_mut(), false)?;
                self.arrival_drains += 1;
            }
            return Ok(Exchanged {
                drained_from,
                ..Exchanged::default()
            });
        }
        self.measure(own_pushes, time_s);
        let ratio = match self.compression {
            Compression::Dense => 1.0,
            _ => self.ratio.ratio(epoch, self.speeds[self.me], &self.speeds),
        };
        self.exchanges += 1;
        let bytes_before = self.transport.bytes_sent();
        self.exchange(ps, ratio, own_pushes)?;
        let sent_bytes = self.transport.bytes_sent() - bytes_before;
        let drained_from = self.drain(ps.weights_mut(), false)?;
        Ok(Exchanged {
            ratio,
            sent_bytes,
            drained_from,
        })
    }

    fn saved_state(&self, own_pushes: u64) -> SavedPeers {
        let mut group_pushes: Vec<u64> = self.peers.iter().map(|p| p.pushes).collect();
        group_pushes[self.me] = own_pushes;
        let (outer_steps, outer) = match &self.outer {
            Some(o) => {
                let (steps, tensors) = o.outer.state();
                (
                    steps,
                    tensors.into_iter().map(|(n, v)| (n, v.to_vec())).collect(),
                )
            }
            None => (0, Vec::new()),
        };
        SavedPeers {
            group_pushes,
            speed: self.meter.speed(),
            outer_steps,
            outer,
        }
    }

    fn note_slowest(&mut self, own: Option<Slowest>) {
        self.own_slowest = own;
    }

    fn slowest_of_run(&self, own: Option<Slowest>) -> Option<Slowest> {
        let peers = peers_of(self.me, self.groups).map(|g| self.peers[g].slowest);
        slowest_of(std::iter::once(own).chain(peers))
    }

    /// `own_pushes` (the server's own batches) and each peer's pushes, as many batches as
    /// [`GroupExchange::count_batches`] says a push of its group stands for.
    fn global_pushes(&self, own_pushes: u64) -> u64 {
        let peers: f64 = peers_of(self.me, self.groups)
            .map(|g| self.peers[g].pushes as f64 * self.batches_per_push.get(g).unwrap_or(&1.0))
            .sum();
        own_pushes + peers.round() as u64
    }
}

impl Meetings for GroupExchange<RmaTransport<'_>> {
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

    fn share(&mut self, row: &[f64]) -> Result<Vec<Vec<f64>>> {
        Ok(self.transport.comm().allgather_f64s(row)?)
    }
}

/// Averages the group servers' replicas: the final weights and each snapshot index that
/// every server took (collective over the servers' communicator; rank 0 of it gets them).
/// With sharded servers each rank holds `range` of a model of `n` parameters: the ranges
/// are laid into the whole model before the sum, so the average over `groups` assembles
/// the model as well.
pub fn average_replicas(
    comm: &SubComm,
    (groups, range, n): (usize, Range<usize>, usize),
    snapshots: Snapshots,
    final_weights: Option<Vec<f32>>,
) -> Result<Replicas> {
    let groups = groups.max(1) as f32;
    let count = comm.allreduce_min_f64(snapshots.taken.len() as f64)? as usize;
    let mut taken = snapshots.taken;
    taken.truncate(count);
    for (row, w) in &mut taken {
        // The latest server's time: each took its copy at its first push of the interval.
        row.time_s = comm.allreduce_max_f64(row.time_s)?;
        *w = laid_into_model(std::mem::take(w), &range, n)?;
        comm.allreduce_sum_f32_in_place(w)?;
        w.iter_mut().for_each(|x| *x /= groups);
    }
    let final_weights = final_weights.context("group server holds no model")?;
    let mut final_weights = laid_into_model(final_weights, &range, n)?;
    comm.allreduce_sum_f32_in_place(&mut final_weights)?;
    final_weights.iter_mut().for_each(|x| *x /= groups);
    Ok(Replicas {
        snapshots: taken,
        final_weights: Some(final_weights),
    })
}

/// `part`, the values of `range`, in a model of `n` parameters that is zero elsewhere
/// (`part` itself when it is the whole model).
fn laid_into_model(part: Vec<f32>, range: &Range<usize>, n: usize) -> Result<Vec<f32>> {
    anyhow::ensure!(
        part.len() == range.len() && range.end <= n,
        "a server holds {} values for the range {range:?} of a model of {n}",
        part.len()
    );
    if part.len() == n {
        return Ok(part);
    }
    let mut whole = vec![0.0; n];
    whole[range.clone()].copy_from_slice(&part);
    Ok(whole)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shards_range_is_laid_into_a_model_zero_elsewhere() {
        let whole = laid_into_model(vec![1.0, 2.0], &(2..4), 5).unwrap();
        assert_eq!(whole, [0.0, 0.0, 1.0, 2.0, 0.0]);
        let same = laid_into_model(vec![1.0, 2.0, 3.0], &(0..3), 3).unwrap();
        assert_eq!(same, [1.0, 2.0, 3.0]);
        let err = laid_into_model(vec![1.0], &(2..4), 5).unwrap_err();
        assert!(
            err.to_string().contains("1 values for the range 2..4"),
            "{err}"
        );
    }
}
