//! The parameter-server loop over nonblocking point-to-point messages, shared by the
//! single-server baselines (bsp, asp, ssp) and by every gssp group server.
//!
//! The loop takes whichever worker's push arrives first (a matched probe from any source,
//! `MPI_Mprobe` then `MPI_Mrecv`, in [`ServerLink::wait_message`]), never waiting for a
//! particular worker; applies it through [`ParamServer`]; lets its [`Peers`] (the exchange) talk to
//! other groups; and answers every worker the SSP rule allows.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::checkpoint::{RankMeta, WEIGHTS};
use crate::comm::p2p::ServerLink;
use crate::comm::SubComm;
use crate::compress::bf16;
use crate::compute::optim;
use crate::config::{Config, Precision};
use crate::protocol::param_server::ParamServer;
use crate::runtime::messages::{NextPush, PushRef, ServerMessages};
use crate::runtime::peers::{Exchanged, Meet, Peers, SavedPeers};
use crate::runtime::regrouper::Regrouper;
use crate::runtime::saver::{self, Saver};
use crate::runtime::shard_meetings::ShardMeetings;
use crate::telemetry::clock::thread_cpu_s;
use crate::telemetry::pace::WorkerPace;
use crate::telemetry::progress::Progress;
use crate::telemetry::{CsvLog, ServerRow, Snapshots};

/// Who a server talks to besides its workers: its peers, the regrouping it takes part
/// in (gssp with `sync.gssp.regroup_every_s`), and with sharded servers that take periodic
/// checkpoints, the meetings of every server rank ([`ShardMeetings`], which then hold the
/// checkpoint meetings instead of the peers).
pub struct Outside<'a, 'w> {
    pub peers: &'a mut dyn Peers,
    pub regroup: Option<&'a mut Regrouper<'w>>,
    pub shards: Option<&'a mut ShardMeetings<'w>>,
}

/// Totals of one server's run.
#[derive(Debug, Clone, Copy, Default)]
pub struct ServeStats {
    pub pushes: u64,
    pub epoch: f64,
    pub wall_s: f64,
    /// Waiting for a push to arrive (`MPI_Mprobe`).
    pub recv_wait_s: f64,
    /// Copying arrived pushes into the server's buffers (`MPI_Mrecv`).
    pub receive_s: f64,
    pub apply_s: f64,
    pub send_s: f64,
    pub exchange_s: f64,
    /// Pushes after which the server exchanged with its peers (gssp).
    pub exchanges: u64,
    /// Sum of the staleness of every applied push.
    pub staleness_sum: u64,
    /// Thread CPU seconds from receiving each push to answering the workers (exchange and
    /// snapshots included), and of the exchange alone.
    pub busy_cpu_s: f64,
    pub exchange_cpu_s: f64,
}

impl ServeStats {
    /// Seconds the server worked: receiving and applying pushes, answering workers,
    /// exchanging.
    pub fn busy_s(&self) -> f64 {
        self.receive_s + self.apply_s + self.send_s + self.exchange_s
    }
}

/// Everything the loop needs besides the link and the update rule.
pub struct ServeContext<'a> {
    pub cfg: &'a Config,
    pub train_len: usize,
    /// Common time origin of all ranks (taken right after a barrier).
    pub start: Instant,
    /// Whether this server shows the run's progress (world rank 0).
    pub show_progress: bool,
    /// World rank of each of this server's workers, for error messages.
    pub worker_ranks: &'a [usize],
    /// Pushes this server applied before the checkpoint it resumed from (`None`: a fresh
    /// run).
    pub resumed_pushes: Option<u64>,
    /// async-localsgd and gssp's local steps: the batches each worker's push stands for,
    /// its local steps (empty: one per push).
    pub batches_per_push: &'a [usize],
    /// A test's fault: the pushes after which this server decides the stop
    /// ([`crate::runtime::faults`]).
    pub stop_after: Option<u64>,
}

/// Serves until the run's epochs or time budget are used up and every worker has been
/// told to stop.
pub fn serve(
    link: &mut ServerLink,
    ps: &mut ParamServer,
    ctx: &ServeContext<'_>,
    outside: Outside<'_, '_>,
    log: &mut CsvLog<ServerRow>,
    snapshots: &mut Snapshots,
    saver: &mut Saver<'_, SubComm>,
) -> Result<ServeStats> {
    let before = ctx.resumed_pushes.unwrap_or(0);
    let samples_per_push = ctx.cfg.optim.batch_size as f64 / ctx.train_len as f64;
    let epoch = outside.peers.global_pushes(before) as f64 * samples_per_push;
    let pace = WorkerPace::new(&pace_ranks(link.workers(), ctx.worker_ranks));
    let mut server = Server {
        link,
        ps,
        ctx,
        peers: outside.peers,
        regroup: outside.regroup,
        shards: outside.shards,
        log,
        snapshots,
        saver,
        stats: ServeStats::default(),
        before,
        batches: 0,
        samples_per_push,
        epoch,
        stopping: false,
        ready: Vec::new(),
        shown: Progress::new(ctx.cfg, ctx.train_len, ctx.show_progress),
        pace,
        slowest_due_s: 0.0,
        widened: Vec::new(),
        packed: Vec::new(),
    };
    server.send_first_weights()?;
    while let Some(pushed) = server.next_push()? {
        server.after_push(pushed)?;
    }
    server.shown.finish();
    server.link.finish()?;
    // Before the exchange's own end, whose meetings are on another communicator.
    if let Some(shards) = server.shards.as_deref_mut() {
        shards.finish()?;
    }
    server.stats.epoch = server.epoch;
    server.stats.wall_s = ctx.start.elapsed().as_secs_f64();
    Ok(server.stats)
}

/// One applied push, as the rest of the loop needs it.
struct Pushed {
    worker: usize,
    loss: f32,
    staleness: u64,
    lr: f64,
    /// Whether the push completed an optimizer step (in bsp, a round).
    stepped: bool,
    /// Seconds waiting for the push, copying it in, applying it; the thread's CPU seconds
    /// at the start of the work and of the copy.
    recv_wait_s: f64,
    receive_s: f64,
    apply_s: f64,
    cpu_start: f64,
    receive_cpu_s: f64,
}

/// The world rank of each of `workers` slots (the slot itself where `ranks` is short).
fn pace_ranks(workers: usize, ranks: &[usize]) -> Vec<usize> {
    (0..workers)
        .map(|w| ranks.get(w).copied().unwrap_or(w))
        .collect()
}

/// Which push a server waits for: whichever comes first (until a deadline, when given), or
/// one worker slot's.
#[derive(Debug, Clone, Copy)]
enum Wait {
    Any(Option<Instant>),
    From(usize),
}

/// What a wait for a push ended with.
enum Received {
    Pushed(Pushed),
    /// The deadline passed (a checkpoint is due).
    Due,
    /// Every worker has been told to stop.
    Done,
}

/// What one exchange cost and did, and when it ended.
struct AfterPush {
    exchanged: Exchanged,
    seconds: f64,
    time_s: f64,
}

/// The server loop's state.
struct Server<'a, 'c, 's, 'p, 'w> {
    link: &'a mut ServerLink,
    ps: &'a mut ParamServer,
    ctx: &'a ServeContext<'c>,
    peers: &'p mut dyn Peers,
    regroup: Option<&'p mut Regrouper<'w>>,
    shards: Option<&'p mut ShardMeetings<'w>>,
    log: &'a mut CsvLog<ServerRow>,
    snapshots: &'a mut Snapshots,
    saver: &'a mut Saver<'s, SubComm>,
    stats: ServeStats,
    /// Pushes applied before the checkpoint the run resumed from.
    before: u64,
    /// Batches the pushes applied in this run stand for (the pushes themselves, but in
    /// async-localsgd).
    batches: u64,
    samples_per_push: f64,
    /// Epochs of all groups together, as far as this server knows.
    epoch: f64,
    stopping: bool,
    ready: Vec<usize>,
    shown: Progress,
    /// Each worker's pace, for the progress line's slowest worker.
    pace: WorkerPace,
    /// When this server next tells its peers its slowest worker (seconds on the clock).
    slowest_due_s: f64,
    /// With 16-bit pushes (`compression.push = "bf16"`), the last push widened to f32.
    widened: Vec<f32>,
    /// With 16-bit replies (`compression.reply = "bf16"`), the last weights sent, packed.
    packed: Vec<f32>,
}

impl Server<'_, '_, '_, '_, '_> {
    fn time_s(&self) -> f64 {
        self.ctx.start.elapsed().as_secs_f64()
    }

    /// Pushes applied over the whole run (a resumed run counts those before its
    /// checkpoint).
    fn own_pushes(&self) -> u64 {
        self.before + self.stats.pushes
    }

    /// Whether this group's members are changing (no weights go out and the server does
    /// not stop until they have their new communicator).
    fn changing(&self) -> bool {
        self.regroup
            .as_deref()
            .is_some_and(Regrouper::in_transition)
    }

    /// The first weights: to every worker of this group, or after a resume to those the
    /// SSP bound lets go first (every worker then waits for weights).
    fn send_first_weights(&mut self) -> Result<()> {
        let (link, ps) = (&mut *self.link, &mut *self.ps);
        let reply = self.ctx.cfg.compression.reply;
        if self.ctx.resumed_pushes.is_some() {
            ps.release(&mut self.ready);
            let weights = reply_payload(&self.ready, ps.weights(), reply, &mut self.packed);
            link.send_weights(&self.ready, ps.version(), weights, |_| 0)?;
            return Ok(());
        }
        // A regrouping server has slots for the other groups' workers too.
        let workers = link.workers();
        let everyone: Vec<usize> = (0..workers).filter(|&w| !link.has_left(w)).collect();
        let weights = reply_payload(&everyone, ps.weights(), reply, &mut self.packed);
        link.send_weights(&everyone, ps.version(), weights, |_| 0)?;
        let time_s = self.time_s();
        for &w in &everyone {
            self.pace.sent(w, time_s);
        }
        if let Some(r) = self.regroup.as_deref_mut() {
            r.sent(&everyone, time_s);
        }
        Ok(())
    }

    /// The next applied push (whichever worker's comes first); `None` once every worker
    /// has been told to stop. With [`ShardMeetings`] the wait ends when a checkpoint is due,
    /// for the meeting, and goes on after it.
    fn next_push(&mut self) -> Result<Option<Pushed>> {
        loop {
            let deadline = self.meeting_deadline();
            match self.receive_and_apply(Wait::Any(deadline))? {
                Received::Pushed(p) => return Ok(Some(p)),
                Received::Done => return Ok(None),
                Received::Due => {
                    let time_s = self.time_s();
                    self.meet_shards_if_due(time_s)?;
                    self.answer()?;
                }
            }
        }
    }

    /// When a wait for a push must end for a meeting (sharded servers with periodic
    /// checkpoints or regrouping; `None`: wait as long as it takes).
    fn meeting_deadline(&self) -> Option<Instant> {
        let shards = self.shards.as_deref()?;
        if shards.stopped() {
            return None;
        }
        let checkpoint_s = self.saver.schedule.next_due_s();
        let regroup_s = self.regroup.as_deref().and_then(Regrouper::next_due_s);
        let due_s = match (checkpoint_s, regroup_s) {
            (Some(c), Some(r)) => c.min(r),
            (due, None) | (None, due) => due?,
        };
        Some(self.ctx.start + Duration::from_secs_f64(due_s.max(0.0)))
    }

    /// Waits for a push as `wait` says, checks it and applies it. Every push is applied,
    /// also one that arrives after the stop decision (the worker computed it and counts
    /// it), so no work is lost.
    fn receive_and_apply(&mut self, wait: Wait) -> Result<Received> {
        let cfg = self.ctx.cfg;
        let t_wait = Instant::now();
        let push = match wait {
            Wait::Any(None) => match self.link.wait_push()? {
                Some(push) => push,
                None => return Ok(Received::Done),
            },
            Wait::Any(Some(deadline)) => match self.link.wait_push_until(deadline)? {
                NextPush::Push(push) => push,
                NextPush::Deadline => return Ok(Received::Due),
                NextPush::AllGone => return Ok(Received::Done),
            },
            Wait::From(w) => self.link.wait_push_from(w)?,
        };
        if push.payload.is_empty() {
            let w = push.worker;
            if let Wait::From(_) = wait {
                anyhow::bail!("worker slot {w} left while its group's shards met for a checkpoint, which no shard had decided to stop");
            }
            match self.regroup.as_deref_mut() {
                Some(r) if r.awaits_telling(w) => {
                    log::debug!("worker slot {w} asked for its new group");
                    // It waits for this shard's weights again, as at the shard that told it.
                    self.ps.wait_again(w);
                    let time_s = self.ctx.start.elapsed().as_secs_f64();
                    r.after_push(w, self.link, self.ps, time_s)?;
                    self.answer()?;
                }
                _ => self.stop_leaving(w)?,
            }
            return self.receive_and_apply(wait);
        }
        let recv_wait_s = (t_wait.elapsed().as_secs_f64() - push.receive_s).max(0.0);
        let (w, loss) = (push.worker, push.loss);
        let time_s = self.ctx.start.elapsed().as_secs_f64();
        self.pace.pushed(w, time_s);
        if let Some(r) = self.regroup.as_deref_mut() {
            r.pushed(w, time_s);
        }
        let rank = self.ctx.worker_ranks.get(w).copied().unwrap_or(w);
        let params = self.ps.weights().len();
        let push = match cfg.compression.push {
            Precision::F32 if push.payload.len() != params => anyhow::bail!(
                "worker {w} (rank {rank}) pushed {} values at its iteration {}; the model has {params}",
                push.payload.len(),
                push.clock
            ),
            Precision::F32 => push,
            Precision::Bf16 => {
                self.widened.resize(params, 0.0);
                bf16::decode(push.payload, &mut self.widened).with_context(|| {
                    format!("worker {w} (rank {rank}), its iteration {}", push.clock)
                })?;
                PushRef {
                    payload: &self.widened,
                    ..push
                }
            }
        };
        check_push(&push, rank, self.stats.pushes, cfg.optim.lr)?;
        let progress = cfg.run.progress(self.epoch, time_s);
        let lr = optim::lr_at(&cfg.optim, self.epoch, progress);
        let cpu_start = thread_cpu_s();
        let t_apply = Instant::now();
        let version_before = self.ps.version();
        let applied = self.ps.on_push(w, push.payload, lr).map_err(|e| {
            anyhow::anyhow!(
                "worker {w} (rank {rank}), its iteration {}: {e}; lower optim.lr (now {})",
                push.clock,
                cfg.optim.lr
            )
        })?;
        Ok(Received::Pushed(Pushed {
            worker: w,
            loss,
            staleness: applied.staleness,
            lr: applied.lr,
            stepped: self.ps.version() > version_before,
            recv_wait_s,
            receive_s: push.receive_s,
            apply_s: t_apply.elapsed().as_secs_f64(),
            cpu_start,
            receive_cpu_s: push.receive_cpu_s,
        }))
    }

    /// A leave from worker `w` (sharded servers: another shard of this group told it to
    /// stop, `runtime::shard_links`): the run is over, so `w` and every waiting worker are
    /// told stop, as are the others at their next push.
    fn stop_leaving(&mut self, w: usize) -> Result<()> {
        log::debug!("worker slot {w} left: another server shard told it to stop");
        let (link, ps) = (&mut *self.link, &mut *self.ps);
        link.send_stop(w, ps.version(), ps.last_staleness(w))?;
        ps.retire(w);
        self.stopping = true;
        self.answer()
    }

    /// Everything after a push is applied: regrouping's part, the exchange with the other
    /// groups, snapshots and progress, a meeting if one is due, the answers to the
    /// workers, and the log.
    fn after_push(&mut self, pushed: Pushed) -> Result<()> {
        let time_s = self.time_s();
        if let Some(r) = self.regroup.as_deref_mut() {
            r.after_push(pushed.worker, self.link, self.ps, time_s)?;
        }
        let exchanged = self.count_push(&pushed)?;
        // Stop, or meet, only after a completed step: in bsp every worker is then waiting,
        // so no partial round is left behind.
        let stepped = pushed.stepped;
        let stop = self.ctx.cfg.run.should_stop(self.epoch, exchanged.time_s)
            || self.ctx.stop_after.is_some_and(|n| self.own_pushes() >= n);
        self.stopping |= stepped && !self.changing() && stop;
        let t_meet = Instant::now();
        let met = match self.shards.is_some() {
            true => stepped && self.meet_shards_if_due(exchanged.time_s)?,
            false => stepped && !self.stopping && self.meet_if_due(exchanged.time_s)?,
        };
        let meet_s = if met {
            t_meet.elapsed().as_secs_f64()
        } else {
            0.0
        };
        let t_send = Instant::now();
        self.answer()?;
        let send_s = t_send.elapsed().as_secs_f64();
        self.record(&pushed, &exchanged, (meet_s, send_s))
    }

    /// Counts an applied push (its batches), then does this server's part in the exchange
    /// between groups after it, the snapshot and the progress line.
    fn count_push(&mut self, pushed: &Pushed) -> Result<AfterPush> {
        self.stats.pushes += 1;
        let batches = self.ctx.batches_per_push.get(pushed.worker).copied();
        self.batches += batches.unwrap_or(1) as u64;
        self.exchange(pushed.loss)
    }

    /// This server's part in the exchange between groups after the push, then the snapshot
    /// and the progress line.
    fn exchange(&mut self, loss: f32) -> Result<AfterPush> {
        let own_pushes = self.own_pushes();
        let cpu = thread_cpu_s();
        let t = Instant::now();
        let at = (self.epoch, self.time_s());
        let exchanged = self.peers.after_push(self.ps, own_pushes, at)?;
        let seconds = t.elapsed().as_secs_f64();
        self.stats.exchange_cpu_s += thread_cpu_s() - cpu;
        // The iteration a snapshot records is every group's batches (gssp: as far as this
        // server knows), as the final evaluation counts every worker's iterations.
        let pushes = self.peers.global_pushes(self.before + self.batches);
        self.epoch = pushes as f64 * self.samples_per_push;
        let time_s = self.time_s();
        self.snapshots
            .maybe_take(time_s, self.epoch, pushes, self.ps.weights());
        self.tell_slowest(time_s);
        let (pace, peers) = (&self.pace, &*self.peers);
        self.shown.tick_with(self.epoch, time_s, loss, || {
            peers.slowest_of_run(pace.slowest())
        });
        Ok(AfterPush {
            exchanged,
            seconds,
            time_s,
        })
    }

    /// Tells the peers this group's slowest worker, once a second (the median is taken only
    /// then), so that rank 0's progress line names the run's slowest worker, not only its
    /// own group's.
    fn tell_slowest(&mut self, time_s: f64) {
        if time_s >= self.slowest_due_s {
            self.peers.note_slowest(self.pace.slowest());
            self.slowest_due_s = time_s + 1.0;
        }
    }

    /// A checkpoint or a regroup, when one is due at `time_s`: the group servers meet (a
    /// server already finishing makes this one stop instead). Checkpoints and regrouping
    /// do not mix (validated), so a meeting is one or the other. Returns whether the
    /// servers met.
    fn meet_if_due(&mut self, time_s: f64) -> Result<bool> {
        let regroup_due = self.regroup.as_deref().is_some_and(|r| r.due(time_s));
        let checkpoint_due = self.saver.due(time_s);
        if !checkpoint_due && !regroup_due {
            return Ok(false);
        }
        let met = self.peers.meet(time_s).map_err(|e| self.with_hint(e))?;
        let Meet::Together { time_s } = met else {
            self.stopping = true;
            return Ok(false);
        };
        if checkpoint_due {
            self.checkpoint(time_s)?;
            return Ok(true);
        }
        if let Some(r) = self.regroup.as_deref_mut() {
            let peers = &mut *self.peers;
            r.meet(|row| peers.share(row), self.link, self.ps, time_s)?;
        }
        Ok(true)
    }

    /// With [`ShardMeetings`]: the meeting of every server rank when a checkpoint or a
    /// regroup is due at `time_s` (also when this server is stopping: its siblings are on
    /// their way there). When no server is stopping, the checkpoint, after this shard has
    /// taken in its workers' pushes up to its group's clocks, or the regroup, decided from
    /// each group's first shard's figures. Returns whether the servers met.
    fn meet_shards_if_due(&mut self, time_s: f64) -> Result<bool> {
        let Some(shards) = self.shards.as_deref_mut() else {
            return Ok(false);
        };
        let regroup_due = self.regroup.as_deref().is_some_and(|r| r.due(time_s));
        let checkpoint_due = self.saver.due(time_s);
        if shards.stopped() || !(checkpoint_due || regroup_due) {
            return Ok(false);
        }
        let occasion = if checkpoint_due {
            "checkpoint"
        } else {
            "regroup"
        };
        let met = shards.meet(self.stopping, time_s, occasion);
        let met = met.map_err(|e| self.with_hint(e))?;
        let Meet::Together { time_s } = met else {
            self.stopping = true;
            return Ok(true);
        };
        // Checkpoints and regrouping do not mix (validated): a meeting is one or the other.
        if !checkpoint_due {
            if let (Some(r), Some(shards)) = (self.regroup.as_deref_mut(), self.shards.as_deref()) {
                r.meet(|row| shards.share_leads(row), self.link, self.ps, time_s)?;
            }
            return Ok(true);
        }
        self.catch_up_with_group()?;
        self.checkpoint(time_s)?;
        Ok(true)
    }

    /// Applies the pushes this shard's workers have sent that another shard of the group
    /// has applied and this one has not yet taken in (collective over every server), so
    /// that every shard of the group is at the same clocks.
    fn catch_up_with_group(&mut self) -> Result<()> {
        let Some(shards) = self.shards.as_deref() else {
            return Ok(());
        };
        let ranks = pace_ranks(self.link.workers(), self.ctx.worker_ranks);
        let target = shards.group_clocks(&ranks, self.ps.clock().clocks())?;
        let mut taken = 0;
        for (w, &clock) in target.iter().enumerate() {
            while self.ps.clock().clocks()[w] < clock {
                let Received::Pushed(pushed) = self.receive_and_apply(Wait::From(w))? else {
                    anyhow::bail!("worker slot {w}'s push did not come");
                };
                let exchanged = self.count_push(&pushed)?;
                self.record(&pushed, &exchanged, (0.0, 0.0))?;
                taken += 1;
            }
        }
        log::debug!("took in {taken} pushes to reach the group's clocks for the checkpoint");
        Ok(())
    }

    /// A meeting's error `e`, with what the run can be resumed from.
    fn with_hint(&self, e: anyhow::Error) -> anyhow::Error {
        match self.saver.resume_hint() {
            Some(hint) => anyhow::anyhow!("{e:#}; {hint}"),
            None => e,
        }
    }

    /// A checkpoint at the agreed `time_s`, at a quiet point of the exchange.
    fn checkpoint(&mut self, time_s: f64) -> Result<()> {
        let t = Instant::now();
        self.peers.quiesce(self.ps)?;
        let quiet_s = t.elapsed().as_secs_f64();
        let own_pushes = self.own_pushes();
        let known = self.peers.saved_state(own_pushes);
        let at = (own_pushes, self.epoch, time_s);
        save(self.saver, self.ps, known, at, self.snapshots)?;
        if self.ctx.show_progress {
            log::info!(
                "checkpoint took {:.0} ms (quiet point {:.0} ms)",
                1e3 * t.elapsed().as_secs_f64(),
                1e3 * quiet_s
            );
        }
        Ok(())
    }

    /// Answers the waiting workers: stop when the run is over, else weights to those the
    /// SSP rule releases (none while this group's members change).
    fn answer(&mut self) -> Result<()> {
        let (link, ps) = (&mut *self.link, &mut *self.ps);
        if self.stopping {
            for v in 0..link.workers() {
                if ps.clock().is_waiting(v) && !link.has_left(v) {
                    link.send_stop(v, ps.version(), ps.last_staleness(v))?;
                    ps.retire(v);
                }
            }
            return Ok(());
        }
        if self
            .regroup
            .as_deref()
            .is_some_and(Regrouper::in_transition)
        {
            return Ok(());
        }
        self.ready.clear();
        ps.release(&mut self.ready);
        let reply = self.ctx.cfg.compression.reply;
        let weights = reply_payload(&self.ready, ps.weights(), reply, &mut self.packed);
        link.send_weights(&self.ready, ps.version(), weights, |w| ps.last_staleness(w))?;
        let time_s = self.ctx.start.elapsed().as_secs_f64();
        for &w in &self.ready {
            self.pace.sent(w, time_s);
        }
        if let Some(r) = self.regroup.as_deref_mut() {
            r.sent(&self.ready, time_s);
        }
        Ok(())
    }

    /// Adds the push's times to the totals, and its row to the log every `log_every` (and
    /// whenever the servers met after it, so the trace sees every meeting).
    fn record(&mut self, p: &Pushed, e: &AfterPush, (meet_s, send_s): (f64, f64)) -> Result<()> {
        let stats = &mut self.stats;
        stats.busy_cpu_s += p.receive_cpu_s + (thread_cpu_s() - p.cpu_start);
        stats.recv_wait_s += p.recv_wait_s;
        stats.receive_s += p.receive_s;
        stats.apply_s += p.apply_s;
        stats.send_s += send_s;
        stats.exchange_s += e.seconds;
        stats.exchanges += u64::from(e.exchanged.ratio > 0.0);
        stats.staleness_sum += p.staleness;
        let every = self.ctx.cfg.run.log_every as u64;
        if !stats.pushes.is_multiple_of(every) && meet_s == 0.0 {
            return Ok(());
        }
        self.log.push(&ServerRow {
            time_s: e.time_s,
            epoch: self.epoch,
            pushes: self.own_pushes(),
            version: self.ps.version(),
            worker: p.worker,
            staleness: p.staleness,
            clock_spread: self.ps.clock().spread(),
            recv_wait_s: p.recv_wait_s,
            receive_s: p.receive_s,
            apply_s: p.apply_s,
            send_s,
            exchange_s: e.seconds,
            loss: p.loss,
            lr: p.lr,
            ratio: e.exchanged.ratio,
            sent_bytes: e.exchanged.sent_bytes,
            drained_from: e.exchanged.drained_from,
            meet_s,
        })
    }
}

/// The weights as a reply to `workers` carries them (`compression.reply`): as they are, or
/// rounded to bfloat16 and packed into `packed` (not when no worker is answered).
fn reply_payload<'a>(
    workers: &[usize],
    weights: &'a [f32],
    reply: Precision,
    packed: &'a mut Vec<f32>,
) -> &'a [f32] {
    match reply {
        Precision::Bf16 if !workers.is_empty() => {
            bf16::pack_rounded(weights, packed);
            packed
        }
        _ => weights,
    }
}

/// Refuses a push whose loss or gradient is not finite: applied, it would poison every
/// replica. A NaN or infinity anywhere makes the sum non-finite: one cheap pass (over the
/// pool's threads), and the search for the entry only when it fails.
pub fn check_push(push: &PushRef<'_>, rank: usize, pushes: u64, lr: f64) -> Result<()> {
    let w = push.worker;
    if !push.loss.is_finite() {
        anyhow::bail!(
            "worker {w} (rank {rank}) pushed a non-finite loss ({}) at push {pushes}; lower optim.lr (now {lr})",
            push.loss
        );
    }
    if !optim::parallel::sum(push.payload).is_finite() {
        let what = match push.payload.iter().position(|v| !v.is_finite()) {
            Some(i) => format!("entry {i} is {}", push.payload[i]),
            None => "its entries overflow when summed".to_string(),
        };
        anyhow::bail!(
            "worker {w} (rank {rank}) pushed a non-finite gradient ({what}) at its iteration {}; lower optim.lr (now {lr})",
            push.clock
        );
    }
    Ok(())
}

/// Writes this server's part of a checkpoint at a quiet point: its replica, momentum,
/// version, workers' clocks, what the exchange knows ([`crate::runtime::peers::Exchange::saved_state`]) and its
/// snapshots; then own pushes (over the whole run), epoch, and the agreed training clock.
pub fn save(
    saver: &mut Saver<'_, SubComm>,
    ps: &ParamServer,
    peers: SavedPeers,
    (own_pushes, epoch, time_s): (u64, f64, f64),
    snapshots: &Snapshots,
) -> Result<()> {
    let (optimizer, optimizer_steps) = ps.optimizer().state();
    let meta = RankMeta {
        time_s,
        epoch,
        steps: own_pushes,
        version: ps.version(),
        worker_clocks: ps.clock().clocks().to_vec(),
        group_pushes: peers.group_pushes,
        speed: peers.speed,
        evals: saver::snapshot_rows(snapshots),
        optimizer_steps,
        outer_steps: peers.outer_steps,
        batches: Vec::new(),
    };
    let names = saver::snapshot_names(snapshots);
    let mut tensors = vec![(WEIGHTS, ps.weights())];
    tensors.extend(optimizer);
    tensors.extend(peers.outer.iter().map(|(n, v)| (*n, v.as_slice())));
    for (name, (_, w)) in names.iter().zip(&snapshots.taken) {
        tensors.push((name.as_str(), w.as_slice()));
    }
    saver.save((time_s, epoch), &tensors, &meta)
}
