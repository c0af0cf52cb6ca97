//! The modes without a server, where every rank trains its own replica and one
//! `MPI_Allreduce` keeps the replicas together ([`Averaging`]):
//!
//! - `allreduce`: every rank computes a gradient, the reduction sums them, and every rank
//!   steps on the mean (what PyTorch DDP and Horovod do).
//! - `localsgd`: local SGD with periodic averaging (Lin et al., "Don't Use Large
//!   Mini-Batches, Use Local SGD", ICLR 2020; PyTorch ships it as post-local SGD). Every
//!   rank takes `sync.localsgd.local_steps` steps on its own replica, then the reduction averages
//!   the replicas' parameters. A straggler holds the others back once per H steps instead
//!   of every step, and the model crosses the network H times less often. Each rank keeps
//!   its own momentum (not averaged, as in PyTorch's post-local SGD).
//!
//! The stop decision, rank 0's progress through the run and its call for a checkpoint ride
//! in the same reduction (`CONTROL_SLOTS` extra values), so all ranks stop and checkpoint
//! after the same iteration and step at the same learning rate even under a wall-clock
//! budget. localsgd therefore ends just after an average, every replica equal: a budget
//! may be overrun by up to H - 1 local steps. Batch-norm statistics stay local and are
//! re-estimated before evaluation, as in every distributed mode.
//!
//! With `[sync.balance]` the ranks' batches follow their speed, and each rank's measured
//! rate rides in the same reduction too ([`Balancer`]).
//!
//! A reduction waits at most `run.meeting_timeout_s` for the other ranks, as the servers'
//! meetings do: a rank that stopped answering (killed ranks end the job through mpirun; a
//! stopped or hung one would hold every other in MPI for good) is then looked for with an
//! arrival on a communicator of its own ([`crate::comm::SubComm::arrive`], another
//! `run.meeting_timeout_s` at most), and the job ends naming the ranks that did not come
//! and the checkpoint to resume from.

use std::time::{Duration, Instant};

use anyhow::Result;

use crate::checkpoint::Resume;
use crate::comm::{Collectives, Comm, SubComm};
use crate::compute::backend::Backend;
use crate::compute::model::Trainable;
use crate::compute::optim::{self, NetworkOptimizer};
use crate::compute::workload::ComputeStep;
use crate::config::Config;
use crate::runtime::balancer::Balancer;
use crate::runtime::saver::{restore_replica, save_replica, Saver};
use crate::runtime::worker::{WorkerContext, WorkerStats};
use crate::telemetry::progress::Progress;
use crate::telemetry::{Snapshots, WorkerRow};

/// What the reduction of a collective mode averages, and how often: each mode's strategy
/// says ([`crate::config::modes::Mode::averaging`]).
pub use crate::config::modes::Averaging;

/// What a collective rank ends with.
pub struct CollectiveOutcome {
    pub stats: WorkerStats,
    /// localsgd: the largest |replica - rank 0's replica| over every parameter and rank
    /// after the final average (0 when the averaging left every replica equal).
    pub replica_error: Option<f64>,
}

/// Trains until the run's epochs or time budget are used up, averaging as `averaging`
/// says; rank 0 takes the snapshots.
pub fn work<B: Backend>(
    comm: &Comm,
    cfg: &Config,
    w: WorkerContext<'_, B>,
    snapshots: &mut Snapshots,
    saver: &mut Saver<'_, Comm>,
    (resume, averaging): (Option<&Resume>, Averaging),
) -> Result<CollectiveOutcome> {
    let WorkerContext {
        step,
        corpus,
        pacer,
        log,
        start,
        ..
    } = w;
    let mut replica = Replica::new(comm, cfg, step, corpus.train_len())?;
    if let Some(r) = resume {
        *snapshots = replica.restore(r)?;
    }
    let mut stats = WorkerStats::default();
    let mut shown = Progress::new(cfg, corpus.train_len(), comm.rank() == 0);
    loop {
        let time_s = start.elapsed().as_secs_f64();
        if averaging == Averaging::Gradients && comm.rank() == 0 && snapshots.due(time_s) {
            replica.snapshot(snapshots, time_s);
        }
        let (loss, compute_s) = replica.step.compute_paced(corpus, pacer)?;
        let batch = replica.step.batch();
        if let Some(b) = replica.balancer.as_mut() {
            b.record(compute_s, batch);
        }
        let done = match averaging {
            Averaging::Gradients => replica.average_gradients(saver, snapshots, time_s)?,
            Averaging::Parameters { every } => {
                let time_s = start.elapsed().as_secs_f64();
                replica.step_then_average(every, saver, snapshots, time_s)?
            }
        };
        let Some(done) = done else { break };
        shown.tick(replica.epoch(), done.time_s, loss);
        let row = WorkerRow {
            time_s: start.elapsed().as_secs_f64(),
            epoch: replica.step.epoch(),
            iteration: replica.iteration,
            compute_s,
            wait_s: done.wait_s,
            comm_s: 0.0,
            bytes_sent: done.bytes,
            bytes_recv: done.bytes,
            staleness: 0,
            loss,
            lr: Some(done.lr),
            batch,
        };
        stats.record(log, row)?;
        if done.stop {
            break;
        }
    }
    shown.finish();
    stats.wall_s = start.elapsed().as_secs_f64();
    let replica_error = match averaging {
        Averaging::Gradients => None,
        Averaging::Parameters { .. } => Some(replica.error()?),
    };
    replica.save_final(saver, snapshots, start)?;
    Ok(CollectiveOutcome {
        stats,
        replica_error,
    })
}

/// One iteration's part in the reduction.
struct Averaged {
    /// Waiting for the slowest rank and the transfer are one call, counted as waiting: on a
    /// heterogeneous cluster the wait dominates.
    wait_s: f64,
    /// Bytes this rank put into the reduction (0 for a local step).
    bytes: u64,
    lr: f64,
    /// Every rank stops after this iteration.
    stop: bool,
    /// The training clock the reduction went by.
    time_s: f64,
}

/// One rank's replica and what it reduces with.
struct Replica<'a, B: Backend> {
    comm: &'a Comm,
    /// Every rank of `comm`, for the arrival that looks for a rank that did not come to a
    /// reduction in time.
    watch: SubComm,
    /// Reductions so far: the number of the arrival that follows a late one.
    reductions: u64,
    cfg: &'a Config,
    step: &'a mut ComputeStep<B>,
    optimizer: NetworkOptimizer<B>,
    /// The model's values, the control slots, then the balancer's: what one reduction sums.
    buf: Vec<f32>,
    /// Batches in proportion to speed (`None`: every rank takes `optim.batch_size`).
    balancer: Option<Balancer>,
    samples_per_step: f64,
    iteration: u64,
    /// Rank 0's share of the run done, as of the last reduction.
    progress: f64,
    /// A host copy of the weights for snapshots, used on a GPU only.
    stage: Vec<f32>,
}

impl<'a, B: Backend> Replica<'a, B> {
    fn new(
        comm: &'a Comm,
        cfg: &'a Config,
        step: &'a mut ComputeStep<B>,
        train_len: usize,
    ) -> Result<Self> {
        let optimizer = NetworkOptimizer::new(&step.net, &cfg.optim);
        let n = step.net.num_params();
        let balancer = Balancer::new(cfg, comm.size(), comm.rank(), &mut step.shard)?;
        let extra = balancer.as_ref().map_or(0, Balancer::slots);
        let watch = comm
            .split(Some(0), i32::try_from(comm.rank())?)?
            .ok_or_else(|| anyhow::anyhow!("every rank joins the watch communicator"))?;
        Ok(Replica {
            comm,
            watch,
            reductions: 0,
            cfg,
            samples_per_step: (cfg.optim.batch_size * comm.size()) as f64 / train_len as f64,
            step,
            optimizer,
            buf: vec![0.0; n + CONTROL_SLOTS + extra],
            balancer,
            iteration: 0,
            progress: 0.0,
            stage: Vec::new(),
        })
    }

    /// The model's values in [`Replica::buf`].
    fn n(&self) -> usize {
        self.buf.len() - CONTROL_SLOTS - self.balancer.as_ref().map_or(0, Balancer::slots)
    }

    fn epoch(&self) -> f64 {
        self.iteration as f64 * self.samples_per_step
    }

    fn bytes(&self) -> u64 {
        (self.buf.len() * std::mem::size_of::<f32>()) as u64
    }

    /// Continues from `resume`: weights, statistics, momentum and iterations; returns the
    /// snapshots rank 0 had taken. A checkpoint follows a reduction, so every rank restores
    /// the same clock.
    fn restore(&mut self, resume: &Resume) -> Result<Snapshots> {
        let (iteration, snapshots, batches) = restore_replica(
            resume,
            self.comm.rank(),
            self.step,
            &mut self.optimizer,
            self.cfg.run.snapshot_every_s,
        )?;
        self.iteration = iteration;
        self.progress = self.cfg.run.progress(self.epoch(), resume.manifest.time_s);
        if let Some(b) = self.balancer.as_mut() {
            b.resume(&batches, resume.manifest.time_s, &mut self.step.shard)?;
        }
        Ok(snapshots)
    }

    fn snapshot(&mut self, snapshots: &mut Snapshots, time_s: f64) {
        let (epoch, iteration) = (self.epoch(), self.iteration);
        let weights = self.step.net.params_on_host(&mut self.stage);
        snapshots.maybe_take(time_s, epoch, iteration, weights);
    }

    /// Sums the model's values in `buf` (put there by the caller after `iteration`), the
    /// control slots and the balancer's rates over all ranks; re-cuts the batches where
    /// rank 0 called for it.
    fn reduce(
        &mut self,
        saver: &Saver<'_, Comm>,
        (iteration, time_s): (u64, f64),
    ) -> Result<Control> {
        let n = self.n();
        let at = (self.epoch(), time_s);
        let (control, rates) = self.buf[n..].split_at_mut(CONTROL_SLOTS);
        fill_control_slots(control, self.comm, self.cfg, at, saver);
        if let Some(b) = self.balancer.as_mut() {
            b.fill(rates);
            if self.comm.rank() == 0 && b.due(time_s) {
                control[RECUT_SLOT] = 1.0;
            }
        }
        self.reduce_in_time(saver, iteration)?;
        let (control, rates) = self.buf[n..].split_at(CONTROL_SLOTS);
        let control = Control::read(control);
        self.progress = control.progress;
        if let (Some(b), true) = (self.balancer.as_mut(), control.recut) {
            if let Some(cut) = b.decide(rates, time_s, &mut self.step.shard)? {
                if self.comm.rank() == 0 {
                    log::info!(
                        "balance: batches by speed from iteration {}: {cut:?}",
                        self.iteration + 1
                    );
                }
            }
        }
        Ok(control)
    }

    /// The sum of `buf` over the ranks, or, where it does not complete within
    /// `run.meeting_timeout_s`, an error naming the ranks that did not come (as the
    /// arrival that follows finds them) and the checkpoint to resume from.
    fn reduce_in_time(&mut self, saver: &Saver<'_, Comm>, iteration: u64) -> Result<()> {
        self.reductions += 1;
        let timeout = Duration::from_secs_f64(self.cfg.run.meeting_timeout_s);
        let deadline = Instant::now() + timeout;
        if self
            .comm
            .allreduce_sum_f32_in_place_until(&mut self.buf, deadline)?
        {
            return Ok(());
        }
        // One apart: a rank may have finished the reduction this rank gave up on.
        let absent = self.watch.arrive_within(self.reductions, 1, timeout)?;
        let late = late_reduction(&absent, iteration, self.cfg.run.meeting_timeout_s);
        Err(match saver.resume_hint() {
            Some(hint) => anyhow::anyhow!("{late}; {hint}"),
            None => anyhow::anyhow!("{late}"),
        })
    }

    fn optimizer_step(&mut self, lr: f64, scale: f32) -> Result<()> {
        self.optimizer
            .step(&mut self.step.net, lr, scale)
            .map_err(|e| anyhow::anyhow!("iteration {}: {e}", self.iteration + 1))?;
        self.iteration += 1;
        Ok(())
    }

    /// allreduce: sums the gradients, and steps on their mean unless the ranks stop
    /// (`None`).
    fn average_gradients(
        &mut self,
        saver: &mut Saver<'_, Comm>,
        snapshots: &Snapshots,
        time_s: f64,
    ) -> Result<Option<Averaged>> {
        let n = self.n();
        let t = Instant::now();
        self.step.net.grads_to_host(&mut self.buf[..n]);
        let control = self.reduce(saver, (self.iteration + 1, time_s))?;
        let wait_s = t.elapsed().as_secs_f64();
        if control.stop {
            return Ok(None);
        }
        let lr = optim::lr_at(&self.cfg.optim, self.epoch(), control.progress);
        self.step.net.grads_from_host(&self.buf[..n]);
        self.optimizer_step(lr, 1.0 / self.comm.size() as f32)?;
        if let Some(at) = control.checkpoint_at {
            self.save(saver, snapshots, at)?;
        }
        let bytes = self.bytes();
        Ok(Some(Averaged {
            wait_s,
            bytes,
            lr,
            stop: false,
            time_s,
        }))
    }

    /// localsgd: a local step, then, every `every` of them, the average of the replicas
    /// (rank 0 snapshots it; right after it the replicas are equal, a quiet point for a
    /// checkpoint).
    fn step_then_average(
        &mut self,
        every: u64,
        saver: &mut Saver<'_, Comm>,
        snapshots: &mut Snapshots,
        time_s: f64,
    ) -> Result<Option<Averaged>> {
        let lr = optim::lr_at(&self.cfg.optim, self.epoch(), self.progress);
        self.optimizer_step(lr, 1.0)?;
        if !averages_after(self.iteration, every) {
            return Ok(Some(Averaged {
                wait_s: 0.0,
                bytes: 0,
                lr,
                stop: false,
                time_s,
            }));
        }
        let n = self.n();
        let t = Instant::now();
        self.step.net.params_to_host(&mut self.buf[..n]);
        let control = self.reduce(saver, (self.iteration, time_s))?;
        let scale = 1.0 / self.comm.size() as f32;
        self.buf[..n].iter_mut().for_each(|x| *x *= scale);
        self.step.net.params_from_host(&self.buf[..n]);
        let wait_s = t.elapsed().as_secs_f64();
        if self.comm.rank() == 0 {
            // The average just reduced, on the host already.
            snapshots.maybe_take(time_s, self.epoch(), self.iteration, &self.buf[..n]);
        }
        if let (Some(at), false) = (control.checkpoint_at, control.stop) {
            self.save(saver, snapshots, at)?;
        }
        let bytes = self.bytes();
        Ok(Some(Averaged {
            wait_s,
            bytes,
            lr,
            stop: control.stop,
            time_s,
        }))
    }

    fn save(&self, saver: &mut Saver<'_, Comm>, snapshots: &Snapshots, at: f64) -> Result<()> {
        let when = (self.iteration, self.epoch(), at);
        let batches = self.balancer.as_ref().map_or(&[][..], Balancer::batches);
        save_replica(
            saver,
            self.step,
            &self.optimizer,
            when,
            (snapshots, batches),
        )
    }

    /// The final checkpoint, at the latest rank's clock.
    fn save_final(
        &self,
        saver: &mut Saver<'_, Comm>,
        snapshots: &Snapshots,
        start: Instant,
    ) -> Result<()> {
        let time_s = self.comm.allreduce_max_f64(start.elapsed().as_secs_f64())?;
        self.save(saver, snapshots, time_s)
    }

    /// Largest |replica - rank 0's replica| over the parameters of every rank, at the end
    /// only: after an average every replica should hold the very same bits.
    fn error(&mut self) -> Result<f64> {
        let params = self.step.net.params_on_host(&mut self.stage);
        let mut bytes: Vec<u8> = if self.comm.rank() == 0 {
            params.iter().flat_map(|x| x.to_le_bytes()).collect()
        } else {
            Vec::new()
        };
        self.comm.broadcast_bytes(0, &mut bytes)?;
        let local = params
            .iter()
            .zip(bytes.chunks_exact(4))
            .map(|(&p, b)| f64::from((p - f32::from_le_bytes([b[0], b[1], b[2], b[3]])).abs()))
            .fold(0.0, f64::max);
        Ok(self.comm.allreduce_max_f64(local)?)
    }
}

/// What went wrong where a reduction after `iteration` did not complete within `timeout_s`:
/// the ranks that did not come to the arrival after it (none: every rank came back, too
/// late).
fn late_reduction(absent: &[usize], iteration: u64, timeout_s: f64) -> String {
    let ranks: Vec<String> = absent.iter().map(usize::to_string).collect();
    match ranks.len() {
        0 => format!(
            "the reduction after iteration {iteration} did not complete within {timeout_s} s \
             (run.meeting_timeout_s), though every rank came back afterwards"
        ),
        1 => format!(
            "rank {} did not come to the reduction after iteration {iteration} within {timeout_s} s \
             (run.meeting_timeout_s): it stopped answering",
            ranks[0]
        ),
        _ => format!(
            "ranks {} did not come to the reduction after iteration {iteration} within {timeout_s} s \
             (run.meeting_timeout_s): they stopped answering",
            ranks.join(", ")
        ),
    }
}

/// Whether localsgd averages after its `iteration`-th local step (from 1), averaging every
/// `every` of them (0 counts as 1: every step).
fn averages_after(iteration: u64, every: u64) -> bool {
    iteration.is_multiple_of(every.max(1))
}

/// Values that ride after the model in a reduction.
const CONTROL_SLOTS: usize = 5;

/// The control slot in which rank 0 calls for a new cut of the batches.
const RECUT_SLOT: usize = 4;

/// What the control slots say after the sum.
struct Control {
    /// Some rank stopped: every rank stops after this iteration.
    stop: bool,
    /// Rank 0's share of the run done: every rank steps at the same learning rate.
    progress: f64,
    /// Rank 0's checkpoint is due: every rank saves after this iteration, at this clock.
    checkpoint_at: Option<f64>,
    /// Rank 0 called for a new cut of the batches.
    recut: bool,
}

impl Control {
    fn read(slots: &[f32]) -> Control {
        Control {
            stop: slots[0] > 0.0,
            progress: f64::from(slots[1]),
            checkpoint_at: (slots[2] > 0.0).then_some(f64::from(slots[3])),
            recut: slots[RECUT_SLOT] > 0.0,
        }
    }
}

/// Fills this rank's [`CONTROL_SLOTS`]: its vote to stop; on rank 0 its progress, and
/// whether a checkpoint is due with its clock (rank 0 alone decides when).
fn fill_control_slots(
    slots: &mut [f32],
    comm: &Comm,
    cfg: &Config,
    (epoch, time_s): (f64, f64),
    saver: &Saver<'_, Comm>,
) {
    slots.fill(0.0);
    slots[0] = f32::from(u8::from(cfg.run.should_stop(epoch, time_s)));
    if comm.rank() == 0 {
        slots[1] = cfg.run.progress(epoch, time_s) as f32;
        if saver.due(time_s) {
            slots[2] = 1.0;
            slots[3] = time_s as f32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn localsgd_averages_after_every_h_th_local_step() {
        let after = |every| {
            (1..=7)
                .filter(|&i| averages_after(i, every))
                .collect::<Vec<_>>()
        };
        assert_eq!(after(3), [3, 6]);
        assert_eq!(after(1), [1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(after(0), after(1), "0 averages every step");
    }

    #[test]
    fn a_late_reduction_names_the_ranks_that_did_not_come() {
        assert_eq!(
            late_reduction(&[2], 41, 5.0),
            "rank 2 did not come to the reduction after iteration 41 within 5 s \
             (run.meeting_timeout_s): it stopped answering"
        );
        assert!(late_reduction(&[1, 3], 7, 2.5).starts_with("ranks 1, 3 did not come"));
        assert!(late_reduction(&[], 7, 2.5).contains("every rank came back afterwards"));
    }

    /// The control slots as the sum over the ranks leaves them: any rank's vote stops all,
    /// and rank 0's progress and checkpoint call come through.
    #[test]
    fn control_slots_read_as_the_ranks_sum_them() {
        let quiet = Control::read(&[0.0, 0.25, 0.0, 0.0, 0.0]);
        assert!(!quiet.stop && !quiet.recut);
        assert_eq!((quiet.progress, quiet.checkpoint_at), (0.25, None));
        // Two of the ranks voted to stop; rank 0 called for a checkpoint at 12.5 s and a
        // new cut.
        let busy = Control::read(&[2.0, 1.0, 1.0, 12.5, 1.0]);
        assert!(busy.stop && busy.recut);
        assert_eq!((busy.progress, busy.checkpoint_at), (1.0, Some(12.5)));
    }
}
