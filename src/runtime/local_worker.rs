//! The worker loop of asynchronous local SGD (`async-localsgd`; Liu et al. 2024) and of
//! gssp with `sync.gssp.local_steps` > 1: take this worker's local steps on its own replica
//! with its own optimizer, push the change they made to the weights it last received, and
//! continue from the weights the server answers with, until told to stop. The server
//! applies each change at once (`Apply::Delta`): async-localsgd's through its outer
//! optimizer, never waiting for a particular worker; a gssp group server's scaled by 1/W,
//! within its group's staleness bound.
//!
//! gssp's work per push follows speed: with `dynamic_local_steps` the fastest worker takes
//! `local_steps` and a worker t times slower `max(1, round(local_steps / t))`, so every
//! push takes about the same wall time. The SSP clock counts pushes, so workers of unequal
//! speed stay level and the bound rarely binds; and a group server exchanges every
//! `inter_group_every` pushes, so every group exchanges at one wall-clock rhythm.
//!
//! The learning rate needs no rescaling: a change of H local steps at the schedule's lr
//! already carries H steps' worth, as H gradient pushes at that lr would, and the group
//! server takes it at 1/W as it takes a gradient (W the workers of all groups), so one
//! round of every worker's change is their mean, as one round of gradients is their mean
//! step. A push counts as its H batches towards the epochs (the server's
//! `batches_per_push`; a peer group's pushes at its workers' mean H).
//!
//! Each worker keeps its momentum across pushes (as local SGD does) and steps at the
//! schedule's learning rate for its own shard's epochs and the run's clock: a worker's
//! shard is 1/W of the data, so its epochs are the run's when every worker keeps pace.

use std::time::Instant;

use anyhow::Result;

use crate::comm::Comm;
use crate::compute::backend::Backend;
use crate::compute::model::Trainable;
use crate::compute::optim::{self, NetworkOptimizer};
use crate::config::Config;
use crate::runtime::messages::WorkerMessages;
use crate::runtime::shard_links::ShardLinks;
use crate::runtime::worker::{finish_link, recv_weights, WorkerContext, WorkerStats};
use crate::telemetry::WorkerRow;

/// Runs the worker with `local_steps` local steps per push until its server says stop.
pub fn work_locally<B: Backend>(
    link: &mut ShardLinks,
    world: &Comm,
    cfg: &Config,
    w: WorkerContext<'_, B>,
    local_steps: u64,
) -> Result<WorkerStats> {
    let WorkerContext {
        step,
        corpus,
        pacer,
        log,
        start,
        done,
    } = w;
    let mut optimizer = NetworkOptimizer::new(&step.net, &cfg.optim);
    let mut stats = WorkerStats::default();
    // The weights last received, the change since then, and a GPU's host stage.
    let (mut received, mut change, mut stage) = (Vec::new(), Vec::new(), Vec::new());
    let t_first = Instant::now();
    let mut header = recv_weights(link, world, step, &mut stage, &mut stats)?;
    stats.wait_s += t_first.elapsed().as_secs_f64();
    let mut clock = done;
    while !header.stop {
        received.clear();
        received.extend_from_slice(step.net.params_on_host(&mut stage));
        for pushes in round(local_steps) {
            let (loss, compute_s) = step.compute_paced(corpus, pacer)?;
            let time_s = start.elapsed().as_secs_f64();
            let epoch = step.epoch();
            let lr = optim::lr_at(&cfg.optim, epoch, cfg.run.progress(epoch, time_s));
            clock += 1;
            optimizer
                .step(&mut step.net, lr, 1.0)
                .map_err(|e| anyhow::anyhow!("local step {clock}: {e}"))?;
            if !pushes {
                let row = local_row(time_s, epoch, clock, compute_s, loss, lr, step.batch());
                stats.record(log, row)?;
                continue;
            }
            let t1 = Instant::now();
            let before = link.stats();
            let weights = step.net.params_on_host(&mut stage);
            change.clear();
            change.extend(weights.iter().zip(&received).map(|(w, r)| w - r));
            link.push(clock, loss, &change)?;
            let comm_s = t1.elapsed().as_secs_f64();
            let t2 = Instant::now();
            header = recv_weights(link, world, step, &mut stage, &mut stats)?;
            let after = link.stats();
            let row = WorkerRow {
                wait_s: t2.elapsed().as_secs_f64(),
                comm_s,
                bytes_sent: after.bytes_sent - before.bytes_sent,
                bytes_recv: after.bytes_received - before.bytes_received,
                staleness: header.staleness,
                ..local_row(
                    start.elapsed().as_secs_f64(),
                    epoch,
                    clock,
                    compute_s,
                    loss,
                    lr,
                    step.batch(),
                )
            };
            stats.record(log, row)?;
        }
    }
    finish_link(link, stats, start)
}

/// One round's local steps: whether the push follows each, which it does after the last
/// alone. A round takes at least one step, so every round ends in a push (a worker that
/// took none would never hear from its server again).
fn round(local_steps: u64) -> impl Iterator<Item = bool> {
    let steps = local_steps.max(1);
    (1..=steps).map(move |local| local == steps)
}

/// A local step's row: computing, nothing sent or waited for.
fn local_row(
    time_s: f64,
    epoch: f64,
    iteration: u64,
    compute_s: f64,
    loss: f32,
    lr: f64,
    batch: usize,
) -> WorkerRow {
    WorkerRow {
        time_s,
        epoch,
        iteration,
        compute_s,
        wait_s: 0.0,
        comm_s: 0.0,
        bytes_sent: 0,
        bytes_recv: 0,
        staleness: 0,
        loss,
        lr: Some(lr),
        batch,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_pushes_after_its_last_local_step_only() {
        let pushes = |h| round(h).collect::<Vec<_>>();
        assert_eq!(pushes(3), [false, false, true]);
        assert_eq!(pushes(1), [true]);
        assert_eq!(pushes(0), [true], "a round takes at least one step");
    }

    /// The worker's clock counts local steps: H rounds' worth of pushes move it by H each.
    #[test]
    fn the_clock_moves_by_the_local_steps_of_each_round() {
        let mut clock = 10;
        let mut pushed_at = Vec::new();
        for _ in 0..3 {
            for pushes in round(4) {
                clock += 1;
                if pushes {
                    pushed_at.push(clock);
                }
            }
        }
        assert_eq!(pushed_at, [14, 18, 22]);
    }

    #[test]
    fn a_local_step_s_row_sends_and_waits_for_nothing() {
        let row = local_row(2.5, 0.25, 7, 0.1, 1.5, 0.05, 32);
        assert_eq!((row.time_s, row.epoch, row.iteration), (2.5, 0.25, 7));
        assert_eq!(
            (row.compute_s, row.loss, row.lr, row.batch),
            (0.1, 1.5, Some(0.05), 32)
        );
        assert_eq!((row.wait_s, row.comm_s), (0.0, 0.0));
        assert_eq!((row.bytes_sent, row.bytes_recv, row.staleness), (0, 0, 0));
    }
}
