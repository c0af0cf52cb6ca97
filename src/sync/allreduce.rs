//! `allreduce`: no server; every rank computes a gradient, `MPI_Allreduce` sums them,
//! and every rank steps on the mean (what PyTorch DDP and Horovod do).
//!
//! The stop decision and rank 0's progress through the run ride in the same reduction (two
//! extra slots), so all ranks stop after the same iteration and step at the same learning
//! rate even under a wall-clock budget.

use std::time::Instant;

use anyhow::Result;

use crate::comm::{Collectives, Comm};
use crate::config::Config;
use crate::metrics::{Snapshots, WorkerRow};
use crate::optim::{self, NetworkSgd};
use crate::sync::worker::{WorkerContext, WorkerStats};
use crate::train::{run_progress, should_stop};

/// Trains until the run's epochs or time budget are used up; rank 0 takes the snapshots.
pub fn work(
    comm: &Comm,
    cfg: &Config,
    w: WorkerContext<'_>,
    snapshots: &mut Snapshots,
) -> Result<WorkerStats> {
    let WorkerContext {
        step,
        train,
        pacer,
        log,
        start,
    } = w;
    let n = step.net.num_params();
    let workers = comm.size();
    let mut sgd = NetworkSgd::new(&step.net, cfg.optim.momentum, cfg.optim.weight_decay);
    let mut buf = vec![0.0f32; n + 2];
    let bytes = (buf.len() * std::mem::size_of::<f32>()) as u64;
    let samples_per_step = (cfg.optim.batch_size * workers) as f64 / train.len() as f64;
    let mut stats = WorkerStats::default();
    let mut iteration = 0u64;
    let mut shown = crate::progress::Progress::new(cfg, train.len(), comm.rank() == 0);
    loop {
        let epoch = iteration as f64 * samples_per_step;
        let time_s = start.elapsed().as_secs_f64();
        if comm.rank() == 0 {
            snapshots.maybe_take(time_s, epoch, iteration, step.net.params());
        }
        let (loss, compute_s) = step.compute_paced(train, pacer);

        // Waiting for the slowest rank and the transfer are one call here; it is counted
        // as waiting, since on a heterogeneous cluster the wait dominates.
        let t1 = Instant::now();
        step.net.grads_to_host(&mut buf[..n]);
        fill_control_slots(&mut buf[n..], comm, cfg, epoch, time_s);
        comm.allreduce_sum_f32_in_place(&mut buf)?;
        let wait_s = t1.elapsed().as_secs_f64();
        if buf[n] > 0.0 {
            shown.finish();
            break;
        }
        let lr = optim::lr_at(&cfg.optim, epoch, f64::from(buf[n + 1]));
        step.net.grads_from_host(&buf[..n]);
        sgd.step(&mut step.net, lr, 1.0 / workers as f32);
        iteration += 1;
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
    Ok(stats)
}

/// Fills the two slots that ride after the model in a reduction (`CONTROL_SLOTS` values):
/// this rank's vote to stop, and rank 0's share of the run done. After the sum, slot 0 > 0
/// means some rank stopped, and slot 1 is rank 0's progress, so every rank stops after the
/// same iteration and steps at the same learning rate.
pub(super) fn fill_control_slots(
    slots: &mut [f32],
    comm: &Comm,
    cfg: &Config,
    epoch: f64,
    time_s: f64,
) {
    slots[0] = f32::from(u8::from(should_stop(cfg, epoch, time_s)));
    slots[1] = if comm.rank() == 0 {
        run_progress(cfg, epoch, time_s) as f32
    } else {
        0.0
    };
}
