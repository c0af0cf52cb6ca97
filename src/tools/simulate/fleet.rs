//! The simulated workers: one model that every worker's step computes on, and each
//! worker's own data shard and pacer (its emulated speed). A worker's step loads the
//! weights it holds into the model, computes the gradient of its own next batch (its own
//! augmentation and dropout draws, as its process would), and says how long that took on
//! the emulated clock.

use anyhow::Result;

use crate::compute::model::Trainable;
use crate::compute::pace::{worker_factors, Pacer, CALIBRATION_ITERATIONS};
use crate::compute::workload::step::build_model;
use crate::compute::workload::{step::Shard, Corpus, Model};
use crate::config::Config;
use crate::runtime::profiling::profile_row;

/// Which weights the model holds: a server's (or the collective's) weights after its
/// `generation`-th change, so that workers released together load them once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loaded {
    pub source: usize,
    pub generation: u64,
}

/// Every worker of a simulated run, on one model.
pub struct Fleet<'a> {
    corpus: &'a Corpus,
    net: Model,
    shards: Vec<Shard>,
    pacers: Vec<Pacer>,
    loaded: Option<Loaded>,
    /// This machine's seconds in the workers' steps and the samples they computed, for
    /// the account of what the simulation cost ([`Fleet::throughput`]).
    step_s: f64,
    samples: u64,
}

impl<'a> Fleet<'a> {
    /// The workers of world ranks `workers` (worker `i` trains on shard `i`), each with the
    /// pacer its process would have: its factor and its own straggler seed.
    pub fn new(
        cfg: &Config,
        corpus: &'a Corpus,
        workers: &[usize],
        slowdown: &[f64],
    ) -> Result<Self> {
        let net = build_model(crate::compute::backend::cpu::Cpu, cfg, corpus, 0)?;
        let n = workers.len();
        let shards = (0..n)
            .map(|i| Shard::new(cfg, corpus, &net, n, i))
            .collect::<Result<Vec<_>>>()?;
        let factors = worker_factors(&cfg.heterogeneity, n);
        let pacers = workers
            .iter()
            .enumerate()
            .map(|(i, &rank)| {
                let factor = slowdown.get(rank).copied().unwrap_or(factors[i]);
                Pacer::from_config(
                    &cfg.heterogeneity,
                    factor,
                    Some(i),
                    crate::runtime::setup::pacer_seed(cfg, rank),
                    CALIBRATION_ITERATIONS,
                )
            })
            .collect();
        Ok(Fleet {
            corpus,
            net,
            shards,
            pacers,
            loaded: None,
            step_s: 0.0,
            samples: 0,
        })
    }

    /// Workers in the fleet.
    pub fn len(&self) -> usize {
        self.shards.len()
    }

    /// Whether it has none.
    pub fn is_empty(&self) -> bool {
        self.shards.is_empty()
    }

    /// Parameters of the model.
    pub fn net_params(&self) -> usize {
        self.net.num_params()
    }

    /// The model (its parameters as last loaded or stepped).
    pub fn net(&self) -> &Model {
        &self.net
    }

    /// The model, the fleet done with (for the evaluations).
    pub fn into_net(self) -> Model {
        self.net
    }

    /// The model to change in place (a local step): what it holds is then no one's.
    pub fn net_mut(&mut self) -> &mut Model {
        self.loaded = None;
        &mut self.net
    }

    /// Puts `weights` into the model, unless `tag` says it holds them already.
    pub fn load(&mut self, weights: &[f32], tag: Option<Loaded>) {
        if tag.is_some() && tag == self.loaded {
            return;
        }
        self.net.params_from_host(weights);
        self.loaded = tag;
    }

    /// Worker `w`'s step on the weights loaded: the gradient of its next batch, left in the
    /// model's gradient buffer ([`Fleet::grads`]); returns the batch loss.
    pub fn step(&mut self, w: usize) -> Result<f32> {
        let t = std::time::Instant::now();
        let loss = self.shards[w].compute(&mut self.net, self.corpus)?;
        self.step_s += t.elapsed().as_secs_f64();
        self.samples += self.shards[w].batch() as u64;
        Ok(loss)
    }

    /// The samples the workers' steps computed and this machine's seconds in them.
    pub fn throughput(&self) -> (u64, f64) {
        (self.samples, self.step_s)
    }

    /// The gradient the last step left.
    pub fn grads(&self) -> &[f32] {
        self.net.grads()
    }

    /// How long worker `w`'s next step takes at `elapsed_s` on the training clock (`None`:
    /// before training), its straggler draw included.
    pub fn compute_s(&mut self, w: usize, elapsed_s: Option<f64>) -> f64 {
        let work = self.shards[w].work();
        let pacer = &mut self.pacers[w];
        pacer.set_work(work);
        pacer.emulated_s(elapsed_s)
    }

    /// Worker `w`'s profile row (`runtime::profiling`): its pacer's calibration iterations
    /// and `iters` timed ones, each a batch of its shard consumed (as the profiling
    /// process computes them), timed on the emulated clock.
    pub fn profile(&mut self, w: usize, iters: usize) -> [f64; 4] {
        let mut cost = 0.0;
        let mut samples = Vec::with_capacity(iters);
        for i in 0..CALIBRATION_ITERATIONS + iters {
            let s = self.compute_s(w, None);
            cost += s;
            if i >= CALIBRATION_ITERATIONS {
                samples.push(s);
            }
        }
        let served = self.shards[w].batches();
        self.shards[w].resume_at(served + (CALIBRATION_ITERATIONS + iters) as u64);
        profile_row(&samples, cost)
    }

    /// Worker `w`'s shard.
    pub fn shard(&self, w: usize) -> &Shard {
        &self.shards[w]
    }

    /// Worker `w`'s shard, to set its share of the global batch.
    pub fn shard_mut(&mut self, w: usize) -> &mut Shard {
        &mut self.shards[w]
    }
}
