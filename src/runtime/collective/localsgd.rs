//! `localsgd`: local SGD with periodic averaging (Lin et al., "Don't Use Large Mini-Batches,
//! Use Local SGD", ICLR 2020; PyTorch ships it as post-local SGD). No server: every rank
//! takes `sync.local_steps` SGD steps on its own replica, then one `MPI_Allreduce` averages
//! the replicas' parameters. A straggler holds the others back once per H steps instead of
//! every step, and the model crosses the network H times less often than in `allreduce`.
//!
//! Each rank keeps its own momentum (not averaged, as in PyTorch's post-local SGD). The stop
//! decision and rank 0's progress through the run ride in the averaging call, so the run
//! ends just after an average, with every replica equal: a wall-clock budget may be
//! overrun by up to H - 1 local steps. Batch-norm statistics stay local and are recomputed
//! before evaluation, as in every distributed mode.

use std::time::Instant;

use anyhow::Result;

use crate::checkpoint::Resume;
use crate::comm::{Collectives, Comm};
use crate::compute::backend::Backend;
use crate::compute::model::Trainable;
use crate::compute::optim::{self, NetworkOptimizer};
use crate::config::Config;
use crate::runtime::collective::allreduce::{
    fill_control_slots, save_final, Control, CONTROL_SLOTS,
};
use crate::runtime::saver::{restore_replica, save_replica, Saver};
use crate::runtime::worker::{WorkerContext, WorkerStats};
use crate::telemetry::{Snapshots, WorkerRow};

/// What a local-SGD rank ends with.
pub struct LocalSgdOutcome {
    pub stats: WorkerStats,
    /// Largest |replica - rank 0's replica| over every parameter and rank after the final
    /// average (0 when the averaging left every replica equal).
    pub replica_error: f64,
}

/// Trains until the run's epochs or time budget are used up; rank 0 takes the snapshots,
/// right after each average.
pub fn work<B: Backend>(
    comm: &Comm,
    cfg: &Config,
    w: WorkerContext<'_, B>,
    snapshots: &mut Snapshots,
    saver: &mut Saver<'_, Comm>,
    resume: Option<&Resume>,
) -> Result<LocalSgdOutcome> {
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
    let local_steps = cfg.sync.local_steps.max(1) as u64;
    let mut optimizer = NetworkOptimizer::new(&step.net, &cfg.optim);
    let mut buf = vec![0.0f32; n + CONTROL_SLOTS];
    let bytes = (buf.len() * std::mem::size_of::<f32>()) as u64;
    let samples_per_step = (cfg.optim.batch_size * workers) as f64 / corpus.train_len() as f64;
    let mut stats = WorkerStats::default();
    let mut iteration = 0u64;
    // Rank 0's share of the run done, as of the last average: every rank steps at the
    // same learning rate between averages.
    let mut progress = 0.0f64;
    if let Some(r) = resume {
        (iteration, *snapshots) = restore_replica(
            r,
            comm.rank(),
            step,
            &mut optimizer,
            cfg.run.snapshot_every_s,
        )?;
        // A checkpoint follows an average: every rank restores the same clock.
        let epoch = iteration as f64 * samples_per_step;
        progress = cfg.run.progress(epoch, r.manifest.time_s);
    }
    let mut shown =
        crate::telemetry::progress::Progress::new(cfg, corpus.train_len(), comm.rank() == 0);
    loop {
        let epoch = iteration as f64 * samples_per_step;
        let (loss, compute_s) = step.compute_paced(corpus, pacer)?;
        let lr = optim::lr_at(&cfg.optim, epoch, progress);
        optimizer
            .step(&mut step.net, lr, 1.0)
            .map_err(|e| anyhow::anyhow!("iteration {}: {e}", iteration + 1))?;
        iteration += 1;
        let epoch = iteration as f64 * samples_per_step;
        let time_s = start.elapsed().as_secs_f64();

        let (mut wait_s, mut sent, mut stop) = (0.0, 0, false);
        if iteration.is_multiple_of(local_steps) {
            // Waiting for the slowest rank and the transfer are one call, counted as waiting.
            let t1 = Instant::now();
            step.net.params_to_host(&mut buf[..n]);
            fill_control_slots(&mut buf[n..], comm, cfg, (epoch, time_s), saver);
            comm.allreduce_sum_f32_in_place(&mut buf)?;
            let scale = 1.0 / workers as f32;
            for x in &mut buf[..n] {
                *x *= scale;
            }
            step.net.params_from_host(&buf[..n]);
            wait_s = t1.elapsed().as_secs_f64();
            sent = bytes;
            let control = Control::read(&buf[n..]);
            stop = control.stop;
            progress = control.progress;
            if comm.rank() == 0 {
                // The average just reduced, on the host already.
                snapshots.maybe_take(time_s, epoch, iteration, &buf[..n]);
            }
            // Right after an average the replicas are equal: a quiet point.
            if let (Some(at), false) = (control.checkpoint_at, stop) {
                save_replica(saver, step, &optimizer, (iteration, epoch, at), snapshots)?;
            }
        }
        shown.tick(epoch, time_s, loss);
        stats.iterations = iteration;
        stats.compute_s += compute_s;
        stats.wait_s += wait_s;
        stats.bytes_sent += sent;
        stats.bytes_recv += sent;
        log.record(&WorkerRow {
            time_s: start.elapsed().as_secs_f64(),
            epoch: step.epoch(),
            iteration,
            compute_s,
            wait_s,
            comm_s: 0.0,
            bytes_sent: sent,
            bytes_recv: sent,
            staleness: 0,
            loss,
            lr: Some(lr),
        })?;
        if stop {
            shown.finish();
            break;
        }
    }
    stats.wall_s = start.elapsed().as_secs_f64();
    let replica_error = replica_error(comm, step.net.params_on_host(&mut buf))?;
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
    Ok(LocalSgdOutcome {
        stats,
        replica_error,
    })
}

/// Largest |replica - rank 0's replica| over the parameters of every rank, at the end only:
/// after an average every replica should hold the very same bits.
fn replica_error(comm: &Comm, params: &[f32]) -> Result<f64> {
    let mut bytes: Vec<u8> = if comm.rank() == 0 {
        params.iter().flat_map(|x| x.to_le_bytes()).collect()
    } else {
        Vec::new()
    };
    comm.broadcast_bytes(0, &mut bytes)?;
    let local = params
        .iter()
        .zip(bytes.chunks_exact(4))
        .map(|(&p, b)| f64::from((p - f32::from_le_bytes([b[0], b[1], b[2], b[3]])).abs()))
        .fold(0.0, f64::max);
    Ok(comm.allreduce_max_f64(local)?)
}
