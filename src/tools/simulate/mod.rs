//! Training on a simulated clock (`gssp train --simulate`, `gssp bench ... --simulate`):
//! one process plays every rank of a run, the model's real arithmetic on a clock that the
//! emulated cluster drives.
//!
//! Each worker computes the real gradient of the real model on its own next batch (its
//! shard, augmentation and dropout draws as its process would take them), from the weights
//! it holds at that simulated moment; each server, collective and exchange applies it when
//! the simulated event says, with the code the runtime runs ([`ParamServer`] and its SSP
//! clock, DC-ASGD's correction, the optimizers, the balancer, the runtime's group
//! decisions). What the clock adds is time: a worker's step lasts what its pacer says
//! (`heterogeneity`: its factor, its transient stragglers drawn from its own seed, its
//! speed changes), and a message, an apply and an allreduce what the cost model says
//! (`[cluster]`, `heterogeneity.link_gbps`), as `gssp plan` orders them. Workers released
//! at one moment start `burst_s` apart (the queue for a node's cores that `gssp bench
//! plan` fits on an oversubscribed machine; 0 on a cluster).
//!
//! A worker's step is computed when it receives its weights, not when its simulated
//! step ends: what it computes depends on nothing else, so only one gradient per worker
//! is in flight, never a copy of the weights it read. Memory is the model's parameters
//! once per worker in flight (their pushes), once per server, and a worker's optimizer
//! state where it keeps one (local steps), beside one model's activations.
//!
//! Deterministic: events at equal times run in the order they were scheduled, every draw
//! has its own seed, and the step gives the same bits whatever the load
//! (tests/determinism.rs), so the same seed and thread count give the same run.

mod collective;
pub mod events;
mod fleet;
mod group;
mod network;
mod record;
mod servers;
mod setup;

use anyhow::{bail, Result};

use crate::compute::backend::cpu::set_threads;
use crate::compute::model::Trainable;
use crate::compute::workload::Corpus;
use crate::config::modes::Roles;
use crate::config::Config;
use crate::protocol::costmodel::CostModel;
use crate::protocol::layout::Layout;
use crate::telemetry::{RunDir, RunTotals, Summary};

use fleet::Fleet;
use record::Recorder;

/// How a simulated run is played beside its config.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Options {
    /// Ranks of the run (what `mpirun -n` would start): the servers and the workers.
    pub ranks: usize,
    /// Seconds between the starts of workers released at one moment (see the module doc).
    pub burst_s: f64,
}

/// A simulated run's state that every engine shares.
pub struct Sim<'a> {
    pub cfg: &'a Config,
    pub fleet: Fleet<'a>,
    pub layout: Layout,
    pub cost: CostModel,
    pub burst_s: f64,
    pub recorder: Recorder,
    /// The training clock's reading when training starts (what profiling cost).
    pub start_s: f64,
    train_len: usize,
}

impl Sim<'_> {
    /// Samples in the training set.
    pub fn train_len(&self) -> usize {
        self.train_len
    }
}

/// Why `cfg` cannot run on the simulated clock, naming the key (checked before any data is
/// read or any step computed).
pub fn refusal(cfg: &Config, opts: &Options) -> Option<String> {
    let mode = cfg.sync.mode;
    if cfg.sync.strategy().roles() == Roles::Single {
        return Some(format!(
            "sync.mode = \"{mode}\": the simulated clock plays a cluster's ranks; train single without --simulate"
        ));
    }
    if cfg.heterogeneity.unit_s.is_nan() || cfg.heterogeneity.unit_s <= 0.0 {
        return Some(format!(
            "heterogeneity.unit_s = {}: the simulated clock needs the seconds of a 1x step (> 0); it has no compute of its own to time",
            cfg.heterogeneity.unit_s
        ));
    }
    if cfg.device.kind == crate::config::DeviceKind::Cuda {
        return Some("device.kind = \"cuda\": the simulated clock computes on the CPU".into());
    }
    if cfg.run.checkpoint_every_s > 0.0 {
        return Some(format!(
            "run.checkpoint_every_s = {}: a simulated run takes no checkpoints (set it to 0)",
            cfg.run.checkpoint_every_s
        ));
    }
    if cfg.sync.overlap {
        return Some("sync.overlap = true: a step computed ahead is not simulated yet".into());
    }
    if cfg.sync.shards.count().is_none() {
        return Some(
            "sync.shards = \"auto\": the count chosen at set-up is not simulated yet; set it"
                .into(),
        );
    }
    if let Some(r) = cfg.sync.strategy().regrouping(&cfg.sync) {
        return Some(format!(
            "sync.gssp.regroup_every_s = {}: regrouping is not simulated yet",
            r.every_s
        ));
    }
    if !(opts.burst_s >= 0.0 && opts.burst_s.is_finite()) {
        return Some(format!(
            "--burst-us: must be >= 0, got {}",
            1e6 * opts.burst_s
        ));
    }
    None
}

/// Trains `cfg` on `opts.ranks` simulated ranks into `run` (the same files a run under
/// mpirun writes, its times on the simulated clock) and returns its summary.
pub fn train(cfg: &Config, run: &RunDir, opts: &Options) -> Result<Summary> {
    if let Some(why) = refusal(cfg, opts) {
        bail!("--simulate: {why}");
    }
    cfg.validate_for_world(opts.ranks)?;
    set_threads(cfg.run.threads);
    let corpus = Corpus::load(&cfg.data, cfg.run.seed)?;
    log::info!("data: {} from {}", corpus.describe(), cfg.data.dataset);
    corpus.save_to(run.path())?;
    let first = Layout::from_config(cfg, opts.ranks);
    let workers = first.worker_ranks();
    let mut fleet = Fleet::new(cfg, &corpus, &workers, &first.slowdown)?;
    let params = fleet.net_params();
    let layout = setup::lay_out(cfg, opts.ranks, &mut fleet, params)?;
    run.write_json("layout.json", &layout)?;
    let recorder = Recorder::new(cfg, run, &workers, &layout.servers)?;
    let mut sim = Sim {
        cfg,
        cost: CostModel::new(cfg, params),
        burst_s: opts.burst_s,
        start_s: layout.profile_cost_s.unwrap_or(0.0),
        train_len: corpus.train_len(),
        fleet,
        layout,
        recorder,
    };
    log::info!(
        "simulated clock: {} ranks ({} workers), model {} with {params} parameters",
        opts.ranks,
        workers.len(),
        sim.fleet.net().name()
    );
    let played = std::time::Instant::now();
    let mut server_figures = None;
    let (weights, wall_s, replica_error) = match cfg.sync.strategy().averaging(&cfg.sync) {
        Some(averaging) => {
            let ended = collective::run(&mut sim, averaging)?;
            (ended.weights, ended.wall_s, ended.replica_error)
        }
        None => {
            let ended = servers::run(&mut sim)?;
            server_figures = Some((ended.epochs, ended.servers, ended.bytes_inter_group));
            (ended.weights, ended.wall_s, ended.replica_error)
        }
    };
    sim.recorder.close(wall_s)?;
    let mut totals = totals(&sim, wall_s);
    if let Some((epochs, _, _)) = &server_figures {
        totals.epochs = *epochs;
    }
    let snapshots = std::mem::replace(
        &mut sim.recorder.snapshots,
        crate::telemetry::Snapshots::new(0.0),
    );
    let (samples, step_s) = sim.fleet.throughput();
    let played_s = played.elapsed().as_secs_f64();
    log::info!(
        "simulated {wall_s:.1} s in {played_s:.1} s: {samples} samples, {:.0} a second in the steps ({step_s:.1} s), {:.0} a second in all",
        samples as f64 / step_s.max(1e-9),
        samples as f64 / played_s.max(1e-9)
    );
    let mut net = sim.fleet.into_net();
    let evals = record::evaluate(cfg, run, &corpus, &mut net, (snapshots, &weights), &totals)?;
    let mut summary = Summary {
        replica_max_error: replica_error,
        ..record::summary(cfg, &net, totals, &evals, &sim.recorder)
    };
    if let Some((_, servers, inter_group)) = server_figures {
        record::add_servers(&mut summary, &servers, wall_s - sim.start_s);
        summary.bytes_inter_group = Some(inter_group);
    }
    record::write_summary(run, &summary)?;
    Ok(summary)
}

/// The run's totals: every worker's iterations together, its epochs, the simulated clock.
fn totals(sim: &Sim<'_>, wall_s: f64) -> RunTotals {
    let iterations: u64 = sim.recorder.stats.iter().map(|s| s.iterations).sum();
    let epochs = iterations as f64 * sim.cfg.optim.batch_size as f64 / sim.train_len as f64;
    RunTotals {
        ranks: sim.layout.world_size,
        workers: sim.fleet.len(),
        epochs,
        iterations,
        wall_s,
    }
}
