//! allreduce and localsgd on the simulated clock, as `runtime::collective` runs them:
//! rounds that wait for every worker, each worker's real gradient (allreduce) or its real
//! local steps on its own replica with its own momentum (localsgd), then the reduction of
//! their sum, its control (any worker's stop, rank 0's progress) and the balancer's rates
//! riding along ([`Balancer`], batches in proportion to speed). A round's end is its
//! slowest worker plus the allreduce of the cost model; worker `w` starts the next one
//! `w x burst_s` later.

use anyhow::Result;

use super::fleet::{Fleet, Loaded};
use super::Sim;
use crate::compute::model::Trainable;
use crate::compute::optim::{self, NetworkOptimizer};
use crate::config::modes::Averaging;
use crate::runtime::balancer::Balancer;
use crate::telemetry::WorkerRow;

/// What a collective run ends with.
pub struct Ended {
    pub weights: Vec<f32>,
    pub wall_s: f64,
    /// localsgd: the replicas' largest difference after the final average (0: every replica
    /// is the average).
    pub replica_error: Option<f64>,
}

/// The source tag of the collective's replica in [`Loaded`].
const REPLICA: usize = usize::MAX;

/// Runs `sim` (allreduce or localsgd, as `averaging` says) until the run's budget is used.
pub fn run(sim: &mut Sim<'_>, averaging: Averaging) -> Result<Ended> {
    let cfg = sim.cfg;
    let workers = sim.fleet.len();
    let n = sim.fleet.net_params();
    let local_steps = match averaging {
        Averaging::Gradients => 1,
        Averaging::Parameters { every } => every.max(1),
    };
    let mut balancers = (0..workers)
        .map(|w| Balancer::new(cfg, workers, w, sim.fleet.shard_mut(w)))
        .collect::<Result<Vec<_>>>()?;
    let rate_slots = balancers
        .first()
        .and_then(Option::as_ref)
        .map_or(0, Balancer::slots);
    let mut replica = Replica::new(sim, averaging)?;
    let samples_per_step = (cfg.optim.batch_size * workers) as f64 / sim.train_len() as f64;
    let bytes = (4 * (n + CONTROL_SLOTS + rate_slots)) as u64;
    let allreduce_s = sim.cost.allreduce_s(workers);
    let mut begin: Vec<f64> = (0..workers).map(|_| sim.start_s).collect();
    let mut iteration = 0u64;
    let mut progress = cfg.run.progress(0.0, sim.start_s);
    let mut rates = vec![0.0f32; rate_slots];
    loop {
        let epoch = iteration as f64 * samples_per_step;
        if averaging == Averaging::Gradients && sim.recorder.snapshots.due(begin[0]) {
            let weights = &replica.weights;
            sim.recorder
                .snapshots
                .maybe_take(begin[0], epoch, iteration, weights);
        }
        // Every worker's part of the round: its steps, its time, its vote.
        let mut arrive = begin.clone();
        let mut losses = vec![0.0f32; workers];
        let mut computed = vec![0.0f64; workers];
        let mut stop = false;
        replica.sum.fill(0.0);
        let mut last_lr = 0.0;
        for w in 0..workers {
            replica.begin(&mut sim.fleet);
            for step in 0..local_steps {
                let at = iteration + step;
                let compute_s = sim.fleet.compute_s(w, Some(arrive[w]));
                let batch = sim.fleet.shard(w).batch();
                if let Some(b) = balancers[w].as_mut() {
                    b.record(compute_s, batch);
                }
                let lr = optim::lr_at(&cfg.optim, at as f64 * samples_per_step, progress);
                losses[w] = replica.step(&mut sim.fleet, w, lr)?;
                last_lr = lr;
                computed[w] = compute_s;
                arrive[w] += compute_s;
                if step + 1 < local_steps {
                    let row = local_row(
                        arrive[w],
                        at + 1,
                        samples_per_step,
                        compute_s,
                        losses[w],
                        lr,
                        batch,
                    );
                    sim.recorder.worker(w, row)?;
                }
            }
            replica.add_to_sum(&sim.fleet);
            let voted_at = match averaging {
                Averaging::Gradients => begin[w],
                Averaging::Parameters { .. } => arrive[w],
            };
            let epoch_then = match averaging {
                Averaging::Gradients => epoch,
                Averaging::Parameters { .. } => (iteration + local_steps) as f64 * samples_per_step,
            };
            stop |= cfg.run.should_stop(epoch_then, voted_at);
        }
        let slowest = arrive.iter().copied().fold(sim.start_s, f64::max);
        let end = slowest + allreduce_s;
        let rank0_at = match averaging {
            Averaging::Gradients => begin[0],
            Averaging::Parameters { .. } => arrive[0],
        };
        // The balancers' rates ride in the reduction; rank 0 calls for a cut.
        if let Some(b0) = balancers[0].as_ref() {
            if b0.due(rank0_at) {
                rates.fill(0.0);
                let mut slot = vec![0.0f32; rate_slots];
                for b in balancers.iter_mut().flatten() {
                    b.fill(&mut slot);
                    rates.iter_mut().zip(&slot).for_each(|(r, s)| *r += s);
                }
                for (w, b) in balancers.iter_mut().enumerate() {
                    if let Some(b) = b.as_mut() {
                        b.decide(&rates, rank0_at, sim.fleet.shard_mut(w))?;
                    }
                }
            }
        }
        let lr = match averaging {
            Averaging::Gradients => {
                if stop {
                    break;
                }
                let progress_now = cfg.run.progress(epoch, rank0_at);
                progress = progress_now;
                let lr = optim::lr_at(&cfg.optim, epoch, progress_now);
                replica.step_on_sum(&mut sim.fleet, lr, workers)?;
                iteration += 1;
                lr
            }
            Averaging::Parameters { .. } => {
                iteration += local_steps;
                let epoch_now = iteration as f64 * samples_per_step;
                progress = cfg.run.progress(epoch_now, rank0_at);
                replica.average(workers);
                sim.recorder
                    .snapshots
                    .maybe_take(rank0_at, epoch_now, iteration, &replica.weights);
                last_lr
            }
        };
        let epoch = iteration as f64 * samples_per_step;
        for w in 0..workers {
            let row = WorkerRow {
                time_s: end,
                epoch,
                iteration,
                compute_s: computed[w],
                wait_s: end - arrive[w],
                comm_s: 0.0,
                bytes_sent: bytes,
                bytes_recv: bytes,
                staleness: 0,
                loss: losses[w],
                lr: Some(lr),
                batch: sim.fleet.shard(w).batch(),
            };
            sim.recorder.worker(w, row)?;
            begin[w] = end + w as f64 * sim.burst_s;
        }
        if stop {
            break;
        }
    }
    let wall_s = begin.iter().copied().fold(sim.start_s, f64::max);
    let replica_error = matches!(averaging, Averaging::Parameters { .. }).then_some(0.0);
    Ok(Ended {
        weights: replica.weights,
        wall_s,
        replica_error,
    })
}

/// Values that ride after the model in a reduction (`runtime::collective`'s control slots).
const CONTROL_SLOTS: usize = 5;

/// A local step's row: computing, nothing sent or waited for.
fn local_row(
    time_s: f64,
    iteration: u64,
    samples_per_step: f64,
    compute_s: f64,
    loss: f32,
    lr: f64,
    batch: usize,
) -> WorkerRow {
    WorkerRow {
        time_s,
        epoch: iteration as f64 * samples_per_step,
        iteration,
        compute_s,
        loss,
        lr: Some(lr),
        batch,
        ..WorkerRow::default()
    }
}

/// The replica every worker holds after a reduction, what the next one sums, and the
/// optimizers: one for allreduce (every rank steps the same), one per worker for
/// localsgd (each keeps its own momentum).
struct Replica {
    averaging: Averaging,
    weights: Vec<f32>,
    generation: u64,
    sum: Vec<f32>,
    optimizers: Vec<NetworkOptimizer<crate::compute::backend::cpu::Cpu>>,
}

impl Replica {
    fn new(sim: &Sim<'_>, averaging: Averaging) -> Result<Replica> {
        let net = sim.fleet.net();
        let count = match averaging {
            Averaging::Gradients => 1,
            Averaging::Parameters { .. } => sim.fleet.len(),
        };
        Ok(Replica {
            averaging,
            weights: net.params_host_copy(),
            generation: 0,
            sum: vec![0.0; net.num_params()],
            optimizers: (0..count)
                .map(|_| NetworkOptimizer::new(net, &sim.cfg.optim))
                .collect(),
        })
    }

    fn tag(&self) -> Option<Loaded> {
        Some(Loaded {
            source: REPLICA,
            generation: self.generation,
        })
    }

    /// A worker's round starts from the replica (allreduce: loaded once for all of them).
    fn begin(&self, fleet: &mut Fleet<'_>) {
        fleet.load(&self.weights, self.tag());
    }

    /// Worker `w`'s next step: allreduce, the gradient on the replica; localsgd, a local
    /// step of its own replica at `lr`.
    fn step(&mut self, fleet: &mut Fleet<'_>, w: usize, lr: f64) -> Result<f32> {
        match self.averaging {
            Averaging::Gradients => fleet.step(w),
            Averaging::Parameters { .. } => {
                let loss = fleet.step(w)?;
                self.optimizers[w]
                    .step(fleet.net_mut(), lr, 1.0)
                    .map_err(|e| anyhow::anyhow!("worker {w}'s local step: {e}"))?;
                Ok(loss)
            }
        }
    }

    /// Adds what worker `w` brings to the reduction: its gradient, or its replica.
    fn add_to_sum(&mut self, fleet: &Fleet<'_>) {
        let values = match self.averaging {
            Averaging::Gradients => fleet.grads(),
            Averaging::Parameters { .. } => fleet.net().params(),
        };
        self.sum.iter_mut().zip(values).for_each(|(s, v)| *s += v);
    }

    /// allreduce: the step on the summed gradients at `lr`, each worker's at 1/`workers`.
    fn step_on_sum(&mut self, fleet: &mut Fleet<'_>, lr: f64, workers: usize) -> Result<()> {
        fleet.load(&self.weights, self.tag());
        let net = fleet.net_mut();
        net.grads_from_host(&self.sum);
        self.optimizers[0]
            .step(net, lr, 1.0 / workers as f32)
            .map_err(|e| anyhow::anyhow!("the step on the summed gradients: {e}"))?;
        net.params_to_host(&mut self.weights);
        self.generation += 1;
        Ok(())
    }

    /// localsgd: the replicas' average, which every worker starts its next round from.
    fn average(&mut self, workers: usize) {
        let scale = 1.0 / workers as f32;
        self.weights
            .iter_mut()
            .zip(&self.sum)
            .for_each(|(w, s)| *w = s * scale);
        self.generation += 1;
    }
}
