//! `allreduce`: no server; every rank computes a gradient, `MPI_Allreduce` sums them,
//! and every rank steps on the mean (what PyTorch DDP and Horovod do).
//!
//! The stop decision, rank 0's progress through the run and its call for a checkpoint ride
//! in the same reduction ([`CONTROL_SLOTS`] extra values), so all ranks stop and checkpoint
//! after the same iteration and step at the same learning rate even under a wall-clock
//! budget.

use std::time::Instant;

use anyhow::Result;

use crate::checkpoint::Resume;
use crate::comm::{Collectives, Comm};
use crate::compute::backend::Backend;
use crate::compute::model::Trainable;
use crate::compute::optim::{self, NetworkOptimizer};
use crate::config::Config;
use crate::runtime::saver::{restore_replica, save_replica, Saver};
use crate::runtime::worker::{WorkerContext, WorkerStats};
use crate::telemetry::{Snapshots, WorkerRow};

/// Trains until the run's epochs or time budget are used up; rank 0 takes the snapshots.
pub fn work<B: Backend>(
    comm: &Comm,
    cfg: &Config,
    w: WorkerContext<'_, B>,
    snapshots: &mut Snapshots,
    saver: &mut Saver<'_, Comm>,
    resume: Option<&Resume>,
) -> Result<WorkerStats> {
    let WorkerContext {
        step,
        corpus,
        pacer,
        log,
        start,
        ..
    } = w;
    let n = step.net.num_params();
    let workers = comm.size();
    let mut optimizer = NetworkOptimizer::new(&step.net, &cfg.optim);
    let mut iteration = 0u64;
    if let Some(r) = resume {
        (iteration, *snapshots) = restore_replica(
            r,
            comm.rank(),
            step,
            &mut optimizer,
            cfg.run.snapshot_every_s,
        )?;
    }
    let mut buf = vec![0.0f32; n + CONTROL_SLOTS];
    let bytes = (buf.len() * std::mem::size_of::<f32>()) as u64;
    let samples_per_step = (cfg.optim.batch_size * workers) as f64 / corpus.train_len() as f64;
    let mut stats = WorkerStats::default();
    let mut shown =
        crate::telemetry::progress::Progress::new(cfg, corpus.train_len(), comm.rank() == 0);
    // A host copy of the weights for snapshots, used on a GPU only.
    let mut stage = Vec::new();
    loop {
        let epoch = iteration as f64 * samples_per_step;
        let time_s = start.elapsed().as_secs_f64();
        if comm.rank() == 0 && snapshots.due(time_s) {
            let weights = step.net.params_on_host(&mut stage);
            snapshots.maybe_take(time_s, epoch, iteration, weights);
        }
        let (loss, compute_s) = step.compute_paced(corpus, pacer)?;

        // Waiting for the slowest rank and the transfer are one call here; it is counted
        // as waiting, since on a heterogeneous cluster the wait dominates.
        let t1 = Instant::now();
        step.net.grads_to_host(&mut buf[..n]);
        fill_control_slots(&mut buf[n..], comm, cfg, (epoch, time_s), saver);
        comm.allreduce_sum_f32_in_place(&mut buf)?;
        let wait_s = t1.elapsed().as_secs_f64();
        let control = Control::read(&buf[n..]);
        if control.stop {
            shown.finish();
            break;
        }
        let lr = optim::lr_at(&cfg.optim, epoch, control.progress);
        step.net.grads_from_host(&buf[..n]);
        optimizer
            .step(&mut step.net, lr, 1.0 / workers as f32)
            .map_err(|e| anyhow::anyhow!("iteration {}: {e}", iteration + 1))?;
        iteration += 1;
        if let Some(at) = control.checkpoint_at {
            let epoch = iteration as f64 * samples_per_step;
            save_replica(saver, step, &optimizer, (iteration, epoch, at), snapshots)?;
        }
        shown.tick(iteration as f64 * samples_per_step, time_s, loss);
        stats.iterations = iteration;
        stats.compute_s += compute_s;
        stats.wait_s += wait_s;
        stats.bytes_sent += bytes;
        stats.bytes_recv += bytes;
        log.record(&WorkerRow {
            time_s: start.elapsed().as_secs_f64(),
            epoch: step.epoch(),
            iteration,
            compute_s,
            wait_s,
            comm_s: 0.0,
            bytes_sent: bytes,
            bytes_recv: bytes,
            staleness: 0,
            loss,
            lr: Some(lr),
        })?;
    }
    stats.wall_s = start.elapsed().as_secs_f64();
    let epoch = iteration as f64 * samples_per_step;
    save_final(
        comm,
        saver,
        step,
        &optimizer,
        (iteration, epoch),
        snapshots,
        start,
    )?;
    Ok(stats)
}

/// The final checkpoint of a rank that trains its own replica, at the latest rank's clock.
pub(super) fn save_final<B: Backend>(
    comm: &Comm,
    saver: &mut Saver<'_, Comm>,
    step: &crate::compute::workload::ComputeStep<B>,
    optimizer: &NetworkOptimizer<B>,
    (iteration, epoch): (u64, f64),
    snapshots: &Snapshots,
    start: Instant,
) -> Result<()> {
    let time_s = comm.allreduce_max_f64(start.elapsed().as_secs_f64())?;
    save_replica(
        saver,
        step,
        optimizer,
        (iteration, epoch, time_s),
        snapshots,
    )
}

/// Values that ride after the model in a reduction.
pub(super) const CONTROL_SLOTS: usize = 4;

/// What the control slots say after the sum.
pub(super) struct Control {
    /// Some rank stopped: every rank stops after this iteration.
    pub stop: bool,
    /// Rank 0's share of the run done: every rank steps at the same learning rate.
    pub progress: f64,
    /// Rank 0's checkpoint is due: every rank saves after this iteration, at this clock.
    pub checkpoint_at: Option<f64>,
}

impl Control {
    pub fn read(slots: &[f32]) -> Control {
        Control {
            stop: slots[0] > 0.0,
            progress: f64::from(slots[1]),
            checkpoint_at: (slots[2] > 0.0).then_some(f64::from(slots[3])),
        }
    }
}

/// Fills this rank's [`CONTROL_SLOTS`]: its vote to stop; on rank 0 its progress, and
/// whether a checkpoint is due with its clock (rank 0 alone decides when).
pub(super) fn fill_control_slots(
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
