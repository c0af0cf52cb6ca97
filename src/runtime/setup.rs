//! A distributed run's set-up, before any role starts: the backend this rank computes on,
//! the data every rank loads, the compute step, who does what ([`Layout`], profiled into
//! groups for gssp), the communicators of the groups, and the clock all ranks share.
//!
//! Every step that can fail on one rank (a missing file, no GPU, a bad checkpoint) fails
//! on all of them together ([`Collectives::fatal_on_all`]), each knowing why, so no rank is
//! left waiting in a collective.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use serde::Deserialize;
use thiserror::Error;

use crate::checkpoint::{CheckpointError, Resume, Schedule};
use crate::comm::{Collectives, Comm, SubComm};
use crate::compress::MirrorDevice;
use crate::compute::backend::{self, Backend};
use crate::compute::model::Trainable;
use crate::compute::pace::{Pacer, CALIBRATION_ITERATIONS};
use crate::compute::workload::{ComputeStep, Corpus};
use crate::config::modes::{least_staleness, LocalSteps, Preparation};
use crate::config::{BatchSplit, CompressionKind, Config, Grouping, Groups, GsspConfig, Staleness};
use crate::protocol::costmodel::{choose_shard_count, CostModel};
use crate::protocol::grouping;
use crate::protocol::layout::{Layout, Role};
use crate::runtime::balancer::batches_by_rank;
use crate::runtime::faults::Faults;
use crate::runtime::profiling::{form_groups, WorkerGroups};
use crate::runtime::saver::Saver;
use crate::telemetry::RunDir;

/// The backend one rank computes on.
pub enum RankBackend {
    Cpu,
    #[cfg(feature = "cuda")]
    Cuda(backend::cuda::Cuda),
}

/// The backend of this rank (checked on every rank together). With `device.kind =
/// "cuda"` the ranks that compute gradients (the workers, and every rank of allreduce and
/// localsgd) use their GPU; parameter and group servers keep their replica in host memory,
/// where MPI sends and receives it.
pub fn choose_backend(comm: &Comm, cfg: &Config) -> Result<RankBackend> {
    let device = comm.fatal_on_all(backend::select(cfg.device.kind))?;
    let chosen: Result<RankBackend> = match device {
        backend::Device::Cpu => Ok(RankBackend::Cpu),
        #[cfg(feature = "cuda")]
        // Ranks from num_servers() on compute gradients; with no servers, all of them.
        backend::Device::Cuda(gpu) if comm.rank() >= cfg.num_servers() => {
            backend::cuda::Cuda::new(gpu).map(RankBackend::Cuda)
        }
        #[cfg(feature = "cuda")]
        backend::Device::Cuda(_) => Ok(RankBackend::Cpu),
    };
    Ok(comm.fatal_on_all(chosen.map_err(|e| format!("{e:#}")))?)
}

/// This rank's communicators besides the world.
#[derive(Default)]
pub struct Communicators {
    /// The group servers among themselves (server ranks only, every shard).
    pub servers: Option<SubComm>,
    /// The servers that exchange with each other: shard j of every group, ranked by group
    /// (every group server when groups are not sharded).
    pub exchange: Option<SubComm>,
    /// This rank's group: its server (a shard's: that shard) at rank 0, then its workers in
    /// world-rank order (server modes; idle ranks have none).
    pub group: Option<SubComm>,
    /// A worker's links to its server's other shards (`sync.shards` > 1), shard 1 first:
    /// each the shard at rank 0 and the group's workers.
    pub shards: Vec<SubComm>,
}

/// Everything a rank has once the run is set up.
pub struct Setup<B: Backend> {
    pub corpus: Corpus,
    pub step: ComputeStep<B>,
    pub pacer: Pacer,
    pub layout: Layout,
    pub role: Role,
    pub comms: Communicators,
    /// Iterations this worker did before the checkpoint the run resumed from.
    pub done: u64,
    pub faults: Faults,
    /// A gssp group server's device for selecting sparse exchanges (`None`: the host).
    pub mirror: Option<Box<dyn MirrorDevice>>,
    /// Common time origin of all ranks (taken right after a barrier; a resumed run's lies
    /// its checkpoint's training clock back, and gssp's profiling counts in it).
    pub start: Instant,
}

/// Sets the run up on every rank of `comm` (collective).
pub fn prepare<B: Backend>(
    be: B,
    comm: &Comm,
    cfg: &Config,
    run: &RunDir,
    resume: Option<&Resume>,
) -> Result<Setup<B>> {
    let rank = comm.rank();
    // First, on every rank: nothing below may index a saved layout that does not fit.
    let saved = comm.fatal_on_all(saved_layout(resume, cfg, comm.size()))?;
    let fresh = saved.is_none();
    let corpus = load_corpus(comm, cfg, run)?;
    let mut step = build_step(be, comm, cfg, &corpus)?;
    comm.fatal_on_all(shards_fit(cfg, step.net.num_params(), comm.size()))?;
    let faults = comm.fatal_on_all(Faults::from_env(rank))?;
    let mut layout = Layout::from_config(cfg, comm.size());
    let mut pacer = pacer_for(cfg, &layout, rank);
    match (saved, cfg.sync.strategy().preparation()) {
        (Some(s), _) => layout = s,
        (None, Preparation::Groups) => {
            let groups = form_groups_by_profile(comm, cfg, &mut step, &corpus, &mut pacer)?;
            apply_groups(cfg, &mut layout, groups, step.net.num_params());
        }
        (None, Preparation::LocalSteps) => {
            layout_local_steps(comm, cfg, &mut layout, (&mut step, &corpus, &mut pacer))?;
        }
        (None, Preparation::None) => {}
    }
    if fresh && cfg.sync.balance.is_balanced() && cfg.num_servers() > 0 {
        layout_batches(comm, cfg, &mut layout, (&mut step, &corpus, &mut pacer))?;
    }
    let role = layout.role(rank);
    let share = layout
        .batch_slice(rank)
        .map_or(Ok(()), |s| step.set_share(s));
    comm.fatal_on_all(share.map_err(|e| format!("{e:#}")))?;
    if rank == 0 {
        describe(cfg, &layout, resume);
        run.write_json("layout.json", &layout)?;
    }
    let mirror = exchange_mirror(cfg, role, step.net.num_params()).map_err(|e| format!("{e:#}"));
    let mirror = comm.fatal_on_all(mirror)?;
    let comms = split(comm, &layout, role)?;
    let done = comm.fatal_on_all(resumed_iterations(&layout, role, rank, resume))?;
    if done > 0 {
        step.resume_at(done);
    }
    let start = start_clock(comm, resume, &layout)?;
    pacer.start_clock_at(start);
    Ok(Setup {
        corpus,
        step,
        pacer,
        layout,
        role,
        comms,
        done,
        faults,
        mirror,
        start,
    })
}

/// Every server shard holds at least one parameter (a push without payload is a leave);
/// with regrouping, at least one per rank of the `world` (a shard's reply carries a Regroup
/// naming its group's members).
fn shards_fit(cfg: &Config, params: usize, world: usize) -> Result<(), String> {
    let (shards, key) = match cfg.sync.shards.count() {
        Some(s) => (s, "sync.shards"),
        None => (cfg.sync.max_shards, "sync.max_shards"),
    };
    let regroups = cfg.sync.strategy().regrouping(&cfg.sync).is_some();
    let (per_shard, why) = match regroups {
        true => (world.max(1), format!(" with regrouping on {world} ranks")),
        false => (1, String::new()),
    };
    match shards.saturating_mul(per_shard) <= params {
        true => Ok(()),
        false => Err(format!(
            "{key}: must be at most {} (the model's {params} parameters, at least {per_shard} a shard{why}), got {shards}",
            params / per_shard
        )),
    }
}

/// What every role of a run reads once it is set up.
pub struct RunContext<'a> {
    pub comm: &'a Comm,
    pub cfg: &'a Config,
    pub run: &'a RunDir,
    pub layout: &'a Layout,
    pub corpus: &'a Corpus,
    pub comms: &'a Communicators,
    /// Common time origin of all ranks ([`Setup::start`]).
    pub start: Instant,
    pub resume: Option<&'a Resume>,
    /// The faults a test injects into this rank (none in a real run).
    pub faults: Faults,
}

impl<'a> RunContext<'a> {
    /// The group servers' communicator, on a server.
    pub fn servers(&self) -> Result<&'a SubComm> {
        self.comms
            .servers
            .as_ref()
            .context("a server without the servers' communicator")
    }

    /// The communicator a server exchanges with its peers on (shard j with shard j).
    pub fn exchange(&self) -> Result<&'a SubComm> {
        self.comms
            .exchange
            .as_ref()
            .context("a server without the exchange's communicator")
    }

    /// The checkpoint writer of the ranks of `comm` (those that hold state).
    pub fn saver<'c, C: Collectives>(&self, comm: &'c C) -> Saver<'c, C>
    where
        'a: 'c,
    {
        let resumed_at = self.resume.map_or(0.0, |r| r.manifest.time_s);
        let sequence = self.resume.map_or(0, |r| r.manifest.sequence);
        Saver {
            comm,
            cfg: self.cfg,
            run: self.run,
            world_rank: self.comm.rank(),
            world_size: self.comm.size(),
            layout: serde_json::to_value(self.layout).ok(),
            schedule: Schedule::new(self.cfg.run.checkpoint_every_s, resumed_at, sequence),
        }
    }
}

/// Where a group server that exchanges sparse (top-k) updates with its peers (gssp) selects
/// them (`device.exchange_select`, for a model of `params` parameters): its GPU, the peer
/// view mirrored there, or `None` for the host (every other rank and mode).
fn exchange_mirror(
    cfg: &Config,
    role: Role,
    params: usize,
) -> Result<Option<Box<dyn MirrorDevice>>> {
    let sparse_exchange =
        cfg.sync.strategy().exchanges() && cfg.compression.kind == CompressionKind::Topk;
    if !matches!(role, Role::Server { .. } | Role::Shard { .. }) {
        return Ok(None);
    }
    if !sparse_exchange || !cfg.device.exchange_on_gpu(params) {
        return Ok(None);
    }
    gpu_mirror()
}

#[cfg(feature = "cuda")]
fn gpu_mirror() -> Result<Option<Box<dyn MirrorDevice>>> {
    use crate::compute::backend::{cuda, gpu_for, Device};
    let Device::Cuda(gpu) = gpu_for("device.exchange_select")? else {
        anyhow::bail!("device.exchange_select: no GPU for this group server");
    };
    let gpu = cuda::Cuda::new(gpu)?;
    log::info!("sparse exchanges select on {}", gpu.describe());
    Ok(Some(Box::new(crate::compress::CudaMirror::new(gpu))))
}

#[cfg(not(feature = "cuda"))]
fn gpu_mirror() -> Result<Option<Box<dyn MirrorDevice>>> {
    crate::compute::backend::gpu_for("device.exchange_select").map(|_| None)
}

/// The data, loaded on every rank: workers train on it, servers need its size and rank 0
/// the test set. A bad file on any rank stops all ranks here.
fn load_corpus(comm: &Comm, cfg: &Config, run: &RunDir) -> Result<Corpus> {
    let corpus = comm.fatal_on_all(Corpus::load(&cfg.data, cfg.run.seed))?;
    if comm.rank() == 0 {
        log::info!("data: {} from {}", corpus.describe(), cfg.data.dataset);
        corpus.save_to(run.path())?;
    }
    Ok(corpus)
}

/// The model and this rank's data shard: worker i (in rank order, servers excluded) trains
/// on shard i; servers only use the model, so they take shard 0.
fn build_step<B: Backend>(
    be: B,
    comm: &Comm,
    cfg: &Config,
    corpus: &Corpus,
) -> Result<ComputeStep<B>> {
    let workers = comm.size() - cfg.num_servers();
    let shard = comm
        .rank()
        .saturating_sub(cfg.num_servers())
        .min(workers.saturating_sub(1));
    let step = ComputeStep::new_on(be, cfg, corpus, workers, shard).map_err(|e| format!("{e:#}"));
    Ok(comm.fatal_on_all(step)?)
}

/// The pacer of world rank `rank`: its slowdown factor, and its own seed for transient
/// stragglers.
fn pacer_for(cfg: &Config, layout: &Layout, rank: usize) -> Pacer {
    let worker_index = layout.worker_ranks().iter().position(|&r| r == rank);
    Pacer::from_config(
        &cfg.heterogeneity,
        layout.slowdown[rank],
        worker_index,
        pacer_seed(cfg, rank),
        CALIBRATION_ITERATIONS,
    )
}

/// The seed of world rank `rank`'s transient stragglers: its own, from `run.seed`.
pub fn pacer_seed(cfg: &Config, rank: usize) -> u64 {
    cfg.run.seed ^ ((rank as u64 + 1) * 0x9E37)
}

/// The layout a resumed run keeps (its groups: the replicas it saved belong to them), read
/// from the checkpoint's manifest and checked against the config and the `world_size` ranks
/// of this run ([`Layout::validate_for`]); an error names the manifest and the field.
/// `None` for a fresh run, and for one resumed on another rank count or laid out again
/// ([`Resume::rescale`]): that run is laid out as a fresh one on its ranks.
pub fn saved_layout(
    resume: Option<&Resume>,
    cfg: &Config,
    world_size: usize,
) -> Result<Option<Layout>, CheckpointError> {
    let Some((r, saved)) = resume
        .filter(|r| r.rescale.is_none())
        .and_then(|r| Some((r, r.manifest.layout.as_ref()?)))
    else {
        return Ok(None);
    };
    let path = r.manifest_path();
    let layout = Layout::deserialize(saved)
        .map_err(|e| CheckpointError::field(&path, "layout", e.to_string()))?;
    layout
        .validate_for(cfg, world_size)
        .map_err(|e| CheckpointError::field(&path, format!("layout.{}", e.field), e.reason))?;
    Ok(Some(layout))
}

/// gssp's groups, from the config or by profiling every worker (collective).
fn form_groups_by_profile<B: Backend>(
    comm: &Comm,
    cfg: &Config,
    step: &mut ComputeStep<B>,
    corpus: &Corpus,
    pacer: &mut Pacer,
) -> Result<WorkerGroups> {
    let workers = Layout::from_config(cfg, comm.size()).worker_ranks();
    let model = CostModel::new(cfg, step.net.num_params());
    form_groups(comm, &cfg.sync.gssp, &model, &workers, || {
        step.compute_paced(corpus, pacer)
    })
}

/// async-localsgd: every worker's local steps per push, in proportion to its profiled
/// speed with `dynamic_local_steps` (collective), else `local_steps` each.
fn layout_local_steps<B: Backend>(
    comm: &Comm,
    cfg: &Config,
    layout: &mut Layout,
    work: (&mut ComputeStep<B>, &Corpus, &mut Pacer),
) -> Result<()> {
    let a = &cfg.sync.async_localsgd;
    let workers = layout.worker_ranks();
    if !a.dynamic_local_steps {
        layout.local_steps = vec![a.local_steps; workers.len()];
        return Ok(());
    }
    let times = profile_as_one_group(comm, cfg, layout, a.profile_iters, work)?;
    layout.local_steps = grouping::dynamic_local_steps(a.local_steps, &times);
    Ok(())
}

/// Every worker's seconds per iteration at the mean batch, each timing `iters` iterations
/// as gssp's profiling does (collective); the profile goes into `layout`, in the order of
/// [`Layout::worker_ranks`], and counts against the training clock.
fn profile_as_one_group<B: Backend>(
    comm: &Comm,
    cfg: &Config,
    layout: &mut Layout,
    iters: usize,
    (step, corpus, pacer): (&mut ComputeStep<B>, &Corpus, &mut Pacer),
) -> Result<Vec<f64>> {
    let one_group = GsspConfig {
        groups: Groups::Count(1),
        grouping: Grouping::Profile,
        profile_iters: iters,
        ..GsspConfig::default()
    };
    let model = CostModel::new(cfg, step.net.num_params());
    let formed = form_groups(comm, &one_group, &model, &layout.worker_ranks(), || {
        step.compute_paced(corpus, pacer)
    })?;
    let times = formed.profiled_s.unwrap_or_default();
    layout.profiled_s = Some(times.clone());
    layout.profiled_spread_s = formed.profiled_spread_s;
    layout.profiled_worst_s = formed.profiled_worst_s;
    layout.profile_cost_s = formed.profile_cost_s;
    Ok(times)
}

/// The server modes with `[sync.balance]`: every worker's batch, from the static list or in
/// proportion to its profiled speed (the profile gssp's grouping took, or one of its own,
/// collective); the same on every rank.
fn layout_batches<B: Backend>(
    comm: &Comm,
    cfg: &Config,
    layout: &mut Layout,
    work: (&mut ComputeStep<B>, &Corpus, &mut Pacer),
) -> Result<()> {
    let workers = layout.worker_ranks();
    let profiled = match (&layout.profiled_s, cfg.sync.balance.batches) {
        (_, BatchSplit::Static) => None,
        // gssp's profile, in the order of `workers`.
        (Some(times), _) => Some(times.clone()),
        (None, _) => {
            let iters = cfg.sync.balance.measure_iters;
            Some(profile_as_one_group(comm, cfg, layout, iters, work)?)
        }
    };
    layout.batches = batches_by_rank(cfg, layout.world_size, &workers, profiled.as_deref())?;
    if comm.rank() == 0 {
        log::info!("balance: batches by rank {:?}", layout.batches);
    }
    Ok(())
}

/// Takes the formed groups into `layout`, with each group's staleness bound: the
/// configured one, or with `sync.gssp.staleness = "auto"` the one each group's profile calls
/// for ([`grouping::auto_staleness`]); with `sync.gssp.local_steps` > 1, each worker's local
/// steps per push ([`grouping::local_steps_per_worker`]).
pub fn apply_groups(cfg: &Config, layout: &mut Layout, formed: WorkerGroups, params: usize) {
    let profiled = layout.worker_ranks();
    layout.keep_servers(formed.groups.len());
    layout.staleness = match (
        cfg.sync.gssp.staleness,
        &formed.profiled_s,
        &formed.profiled_worst_s,
    ) {
        (Staleness::Auto, Some(times), Some(worst)) => {
            let index = |r: &usize| profiled.iter().position(|p| p == r).unwrap_or(0);
            let groups: Vec<Vec<usize>> = formed
                .groups
                .iter()
                .map(|g| g.iter().map(index).collect())
                .collect();
            let reply_s = CostModel::new(cfg, params).reply_s();
            let bounds = grouping::auto_staleness(times, worst, &groups, reply_s);
            let least = least_staleness(cfg.sync.overlap);
            bounds.into_iter().map(|s| s.max(least)).collect()
        }
        (s, _, _) => vec![s.bound().unwrap_or(0); formed.groups.len()],
    };
    layout.groups = formed.groups;
    if let Some(LocalSteps { per_push, dynamic }) = cfg.sync.strategy().local_steps(&cfg.sync) {
        layout.local_steps = grouping::local_steps_per_worker(
            (per_push, dynamic),
            &profiled,
            formed.profiled_s.as_deref(),
            &layout.worker_ranks(),
        );
    }
    if let (None, Some(times)) = (cfg.sync.shards.count(), &formed.profiled_s) {
        let index = |r: &usize| profiled.iter().position(|p| p == r).unwrap_or(0);
        let groups: Vec<Vec<usize>> = (layout.groups.iter())
            .map(|g| g.iter().map(index).collect())
            .collect();
        let model = CostModel::new(cfg, params);
        let choice = choose_shard_count(&model, &groups, times, cfg.sync.max_shards);
        layout.keep_shards(choice.chosen);
        layout.shard_count = Some(choice);
    }
    layout.profiled_s = formed.profiled_s;
    layout.profiled_spread_s = formed.profiled_spread_s;
    layout.profiled_worst_s = formed.profiled_worst_s;
    layout.profile_cost_s = formed.profile_cost_s;
    layout.group_count = formed.group_count;
}

/// Rank 0's account of the layout: the groups, what profiling cost, the group count and
/// staleness bounds it chose.
fn describe(cfg: &Config, layout: &Layout, resume: Option<&Resume>) {
    log::info!(
        "layout: servers {:?}, groups {:?}",
        layout.servers,
        layout.groups
    );
    if !layout.shards.is_empty() {
        log::info!(
            "each group's server sharded over {} ranks by key range: further shards {:?}",
            layout.shards_per_group(),
            layout.shards
        );
    }
    if let Some(rs) = resume.and_then(|r| r.rescale.as_ref()) {
        log::info!(
            "resumed on {} ranks, the checkpoint was taken on {}: laid out anew from the {} saved replicas (see checkpoint::rescale); each of the {} workers continues at batch {} of its shard ({} done in all)",
            rs.to_world,
            rs.from_world,
            rs.saved_ranks.len(),
            rs.workers,
            rs.per_worker,
            rs.work
        );
    }
    let profiled_now = resume.is_none_or(|r| r.rescale.is_some());
    if let (Some(cost), true) = (layout.profile_cost_s, profiled_now) {
        log::info!("grouping by profile took {cost:.2} s of the training clock");
        let budget = cfg.run.time_budget_s;
        if budget > 0.0 && cost >= 0.5 * budget {
            log::warn!(
                "profiling took {cost:.2} s, {:.0}% of run.time_budget_s = {budget} s, which it counts against: lower sync.gssp.profile_iters or raise the budget",
                100.0 * cost / budget
            );
        }
    }
    if !layout.local_steps.is_empty() {
        log::info!(
            "local steps per push of each worker (in the order of the groups above): {:?}",
            layout.local_steps
        );
    }
    if let Some(choice) = &layout.group_count {
        let each: Vec<String> = choice
            .candidates
            .iter()
            .map(|c| {
                let load = 100.0 * c.server_load;
                format!("{}: {:.1} it/s (server load {load:.1}%)", c.groups, c.rate)
            })
            .collect();
        log::info!(
            "groups (auto): {} from the cost model ({:.1} us per push, {:.0} bytes per exchange message); predicted {}",
            choice.chosen,
            1e6 * choice.server_s_per_push,
            choice.exchange_bytes,
            each.join(", ")
        );
        if !layout.idle.is_empty() {
            log::info!(
                "ranks {:?} were reserved as servers (sync.gssp.max_groups = {}) and stay idle",
                layout.idle,
                cfg.sync.gssp.max_groups
            );
        }
    }
    if let Some(choice) = &layout.shard_count {
        let each: Vec<String> = (choice.candidates.iter())
            .map(|c| {
                let load = 100.0 * c.server_load;
                format!(
                    "{}: {:.1} it/s (busiest shard {load:.1}%)",
                    c.shards, c.rate
                )
            })
            .collect();
        log::info!(
            "server ranks per group (auto): {} from the cost model; predicted {}",
            choice.chosen,
            each.join(", ")
        );
        if !layout.idle.is_empty() {
            log::info!(
                "ranks {:?} were reserved as shards (sync.max_shards = {}) and stay idle",
                layout.idle,
                cfg.sync.max_shards
            );
        }
    }
    if cfg.sync.gssp.staleness == Staleness::Auto {
        log::info!(
            "staleness per group (auto, from each group's longest profiled delay): {:?}",
            layout.staleness
        );
    }
}

/// The servers' communicator, the exchange's, and each group's: its server (key 0, so
/// rank 0 there) and its workers; with `sync.shards` > 1 one such communicator per shard
/// (collective over the world).
fn split(comm: &Comm, layout: &Layout, role: Role) -> Result<Communicators> {
    let rank = comm.rank() as i32;
    let (group, shard, is_server) = match role {
        Role::Server { group } => (Some(group), 0, true),
        Role::Shard { group, shard } => (Some(group), shard, true),
        Role::Worker { group } => (Some(group), 0, false),
        Role::Collective | Role::Idle => (None, 0, false),
    };
    let servers = comm.split(is_server.then_some(0), rank)?;
    // Shard j of every group exchanges with the others' shard j, ranked by group.
    let key = group.unwrap_or(0) as i32;
    let exchange = comm.split(is_server.then_some(shard as u32), key)?;
    let mut comms = Communicators {
        servers,
        exchange,
        ..Communicators::default()
    };
    for j in 0..layout.shards_per_group() {
        let member = match role {
            Role::Worker { .. } => true,
            _ => is_server && shard == j,
        };
        let color = group.filter(|_| member).map(|g| g as u32);
        let key = if is_server { 0 } else { rank + 1 };
        let Some(c) = comm.split(color, key)? else {
            continue;
        };
        if is_server {
            check_group_comm(&c, layout, group.unwrap_or(0))?;
            comms.group = Some(c);
        } else if j == 0 {
            comms.group = Some(c);
        } else {
            comms.shards.push(c);
        }
    }
    Ok(comms)
}

/// A server's group communicator holds it at rank 0 and its group's workers.
fn check_group_comm(c: &SubComm, layout: &Layout, index: usize) -> Result<()> {
    anyhow::ensure!(
        c.rank() == 0 && c.size() == layout.groups[index].len() + 1,
        "group {index}'s communicator has {} ranks with the server at {}, expected {} with it at 0",
        c.size(),
        c.rank(),
        layout.groups[index].len() + 1
    );
    Ok(())
}

/// Why a resumed worker cannot tell how many iterations it did before the checkpoint
/// ([`resumed_iterations`]), with its world rank. Only workers read their count, so the
/// ranks that fail are never all of them, and each reports its own failure, named by its
/// rank ([`Collectives::fatal_on_all`]).
#[derive(Debug, Error)]
pub enum ResumeError {
    /// Its server's checkpoint file cannot be read.
    #[error("{error}")]
    Load { rank: usize, error: CheckpointError },
    /// Its server's file holds no clock for it.
    #[error("{}: no clock for rank {rank}", path.display())]
    NoClock { rank: usize, path: PathBuf },
}

/// The iterations a worker of a server mode did before the checkpoint: its clock, which
/// its server saved, or on another rank count its share of the work done (0 for a fresh
/// run and for the other roles).
fn resumed_iterations(
    layout: &Layout,
    role: Role,
    rank: usize,
    resume: Option<&Resume>,
) -> Result<u64, ResumeError> {
    let (Some(r), Role::Worker { group }) = (resume, role) else {
        return Ok(0);
    };
    if let Some(rescale) = &r.rescale {
        return Ok(rescale.per_worker);
    }
    let server = layout.servers[group];
    let index = layout.groups[group].iter().position(|&w| w == rank);
    let file = r
        .load(server)
        .map_err(|error| ResumeError::Load { rank, error })?;
    index
        .and_then(|i| file.meta.worker_clocks.get(i).copied())
        .ok_or_else(|| ResumeError::NoClock {
            rank,
            path: r.path(server),
        })
}

/// The training clock's origin, the same on every rank (after a barrier). gssp's profiling
/// is part of its training time: the clock (time budget, time to target, speed changes)
/// starts when profiling did. A resumed run on the same ranks does not profile; its saved
/// clock already counts the first run's profiling. On another rank count it profiles again,
/// after its saved clock.
fn start_clock(comm: &Comm, resume: Option<&Resume>, layout: &Layout) -> Result<Instant> {
    let elapsed = clock_at_start_s(resume, layout.profile_cost_s);
    comm.barrier()?;
    clock_origin(Instant::now(), elapsed)
        .context("the checkpoint's training clock lies before this machine's boot")
}

/// The instant `elapsed_s` seconds before `now`: where a training clock that reads
/// `elapsed_s` at `now` started. `None` for a reading no `Duration` holds (negative, NaN,
/// infinite) or one that reaches back past what `Instant` can express, an error rather than
/// a panic (the manifest's time was checked when it was read; the
/// profile's cost is measured).
fn clock_origin(now: Instant, elapsed_s: f64) -> Option<Instant> {
    std::time::Duration::try_from_secs_f64(elapsed_s)
        .ok()
        .and_then(|back| now.checked_sub(back))
}

/// The training clock's reading when this run's training starts, in seconds: the
/// checkpoint's clock for a resumed run, plus the profiling just done (`profile_cost_s`)
/// where it counts (a fresh run, or a resumed one that profiled again on another rank
/// count; the same ranks resumed do not profile).
fn clock_at_start_s(resume: Option<&Resume>, profile_cost_s: Option<f64>) -> f64 {
    let profiled = profile_cost_s.unwrap_or(0.0);
    match resume {
        Some(r) if r.rescale.is_some() => r.manifest.time_s + profiled,
        Some(r) => r.manifest.time_s,
        None => profiled,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::store::FORMAT;
    use crate::checkpoint::Manifest;
    use std::path::PathBuf;

    /// A shard holds at least one parameter, and with regrouping one per rank of the world
    /// (its reply may carry a Regroup naming every member of a group).
    #[test]
    fn a_shard_too_small_for_a_regroup_is_refused_with_the_largest_count_that_fits() {
        let minimal = "[data]\ndataset = \"synthetic\"\n[model]\nname = \"mlp\"\n";
        let with = |sets: &[&str]| {
            let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
            Config::from_str_with_overrides(minimal, "t", &sets).expect("a valid config")
        };
        let sharded = ["sync.mode=gssp", "sync.gssp.groups=2", "sync.shards=4"];
        assert_eq!(shards_fit(&with(&sharded), 4, 16), Ok(()));
        assert_eq!(
            shards_fit(&with(&sharded), 3, 16),
            Err("sync.shards: must be at most 3 (the model's 3 parameters, at least 1 a shard), got 4".into())
        );
        let regrouping = [&sharded[..], &["sync.gssp.regroup_every_s=5"]].concat();
        assert_eq!(shards_fit(&with(&regrouping), 64, 16), Ok(()));
        assert_eq!(
            shards_fit(&with(&regrouping), 63, 16),
            Err("sync.shards: must be at most 3 (the model's 63 parameters, at least 16 a shard with regrouping on 16 ranks), got 4".into())
        );
    }

    /// A checkpoint of gssp with 2 static groups on 6 ranks whose saved layout is `layout`.
    fn resume_with(layout: serde_json::Value) -> (Config, Resume) {
        let sets: Vec<String> = [
            "data.dataset=synthetic",
            "model.name=mlp",
            "sync.mode=gssp",
            "sync.gssp.groups=2",
            "sync.gssp.grouping=static",
            "sync.gssp.static_groups=[[2,3],[4,5]]",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let minimal = "[data]\ndataset = \"synthetic\"\n[model]\nname = \"mlp\"\n";
        let cfg = Config::from_str_with_overrides(minimal, "t", &sets).expect("a valid config");
        let manifest = Manifest {
            format: FORMAT,
            sequence: 3,
            time_s: 1.0,
            epoch: 0.5,
            world_size: 6,
            mode: "gssp".into(),
            config: cfg.to_toml_string(),
            layout: Some(layout),
            files: Vec::new(),
        };
        let resume = Resume {
            run_dir: PathBuf::from("RUN"),
            dir: PathBuf::from("RUN/checkpoints/000003"),
            manifest,
            rescale: None,
        };
        (cfg, resume)
    }

    fn layout_of(cfg: &Config) -> Layout {
        let mut layout = Layout::from_config(cfg, 6);
        layout.groups = vec![vec![2, 3], vec![4, 5]];
        layout.staleness = vec![layout.staleness[0]; 2];
        layout
    }

    #[test]
    fn a_saved_layout_that_does_not_fit_is_named_by_the_manifest_and_its_field() {
        let (cfg, _) = resume_with(serde_json::Value::Null);
        let mut layout = layout_of(&cfg);
        let (cfg, resume) = resume_with(serde_json::to_value(&layout).unwrap());
        assert_eq!(
            saved_layout(Some(&resume), &cfg, 6).unwrap(),
            Some(layout.clone())
        );

        layout.groups.truncate(1);
        let (cfg, resume) = resume_with(serde_json::to_value(&layout).unwrap());
        let err = saved_layout(Some(&resume), &cfg, 6)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "RUN/checkpoints/000003/manifest.json: layout.groups: 1 group for 2 servers"
        );
        let (cfg, resume) = resume_with(serde_json::json!({"mode": "gssp"}));
        let err = saved_layout(Some(&resume), &cfg, 6)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("RUN/checkpoints/000003/manifest.json: layout: missing field"),
            "{err}"
        );
    }

    #[test]
    fn a_run_laid_out_anew_takes_no_saved_layout() {
        let (cfg, mut resume) = resume_with(serde_json::json!({"not": "read"}));
        assert_eq!(saved_layout(None, &cfg, 6).unwrap(), None);
        resume.rescale = Some(rescaled());
        assert_eq!(saved_layout(Some(&resume), &cfg, 8).unwrap(), None);
        resume.rescale = None;
        resume.manifest.layout = None;
        assert_eq!(saved_layout(Some(&resume), &cfg, 6).unwrap(), None);
    }

    /// A resume from the 6 ranks of [`resume_with`]'s checkpoint on 8.
    fn rescaled() -> crate::checkpoint::Rescale {
        crate::checkpoint::Rescale {
            from_world: 6,
            to_world: 8,
            work: 0,
            workers: 6,
            per_worker: 0,
            saved_ranks: vec![0, 1],
        }
    }

    #[test]
    fn the_clock_counts_profiling_unless_the_same_ranks_resume() {
        assert_eq!(clock_at_start_s(None, None), 0.0);
        assert_eq!(clock_at_start_s(None, Some(1.5)), 1.5);
        let (_, mut resume) = resume_with(serde_json::Value::Null);
        // The checkpoint's clock (1.0 s) already holds the first run's profiling.
        assert_eq!(clock_at_start_s(Some(&resume), Some(1.5)), 1.0);
        resume.rescale = Some(rescaled());
        assert_eq!(clock_at_start_s(Some(&resume), Some(1.5)), 2.5);
        assert_eq!(clock_at_start_s(Some(&resume), None), 1.0);
    }

    #[test]
    fn a_training_clock_started_its_reading_before_now() {
        let now = Instant::now();
        assert_eq!(clock_origin(now, 0.0), Some(now));
        let origin = clock_origin(now, 1.5).expect("1.5 s back");
        assert_eq!(now - origin, std::time::Duration::from_secs_f64(1.5));
        // No duration, or one that reaches back further than an `Instant` can express.
        for bad in [-1.0, f64::NAN, f64::INFINITY, 1e30, 1e19] {
            assert_eq!(clock_origin(now, bad), None, "{bad}");
        }
    }

    /// Only a worker of a resumed run has done iterations; on another rank count, its share
    /// of the work done.
    #[test]
    fn a_fresh_run_and_the_other_roles_resume_at_zero_and_a_rescaled_worker_at_its_share() {
        let (cfg, mut resume) = resume_with(serde_json::Value::Null);
        let layout = layout_of(&cfg);
        let worker = Role::Worker { group: 1 };
        assert_eq!(resumed_iterations(&layout, worker, 5, None).unwrap(), 0);
        for role in [Role::Server { group: 1 }, Role::Collective, Role::Idle] {
            let done = resumed_iterations(&layout, role, 1, Some(&resume)).unwrap();
            assert_eq!(done, 0, "{role:?}");
        }
        resume.rescale = Some(crate::checkpoint::Rescale {
            per_worker: 12,
            ..rescaled()
        });
        let done = resumed_iterations(&layout, worker, 5, Some(&resume)).unwrap();
        assert_eq!(done, 12);
    }

    /// A worker resumes at the clock its server saved for its place in the group; a file that
    /// cannot be read or holds no clock for it is an error naming its rank.
    #[test]
    fn a_worker_resumes_at_the_clock_its_server_saved_for_it() {
        let (cfg, mut resume) = resume_with(serde_json::Value::Null);
        let layout = layout_of(&cfg);
        let worker = Role::Worker { group: 1 };
        let err = resumed_iterations(&layout, worker, 5, Some(&resume)).unwrap_err();
        assert!(matches!(err, ResumeError::Load { rank: 5, .. }), "{err:?}");
        assert!(err.to_string().contains("lists no file"), "{err}");

        let dir = tempfile::tempdir().expect("a temporary directory");
        resume.dir = dir.path().to_path_buf();
        let save = |resume: &mut Resume, clocks: Vec<u64>| {
            let meta = crate::checkpoint::RankMeta {
                worker_clocks: clocks,
                ..Default::default()
            };
            let entry = crate::checkpoint::store::write_rank_file(dir.path(), 1, &[], &meta)
                .expect("a rank file");
            resume.manifest.files = vec![entry];
        };
        // Group 1 is [4, 5], served by rank 1.
        save(&mut resume, vec![7, 9]);
        let at = |rank| resumed_iterations(&layout, worker, rank, Some(&resume)).unwrap();
        assert_eq!((at(4), at(5)), (7, 9));
        save(&mut resume, vec![7]);
        let err = resumed_iterations(&layout, worker, 5, Some(&resume)).unwrap_err();
        let path = resume.path(1);
        assert!(
            matches!(&err, ResumeError::NoClock { rank: 5, path: p } if *p == path),
            "{err:?}"
        );
        assert!(err.to_string().ends_with("no clock for rank 5"), "{err}");
    }

    fn formed(groups: Vec<Vec<usize>>, profile: Option<(Vec<f64>, Vec<f64>)>) -> WorkerGroups {
        let (times, worst) = profile.unzip();
        WorkerGroups {
            groups,
            profiled_spread_s: times.as_ref().map(|t: &Vec<f64>| vec![0.0; t.len()]),
            profiled_s: times,
            profiled_worst_s: worst,
            profile_cost_s: Some(0.5),
            group_count: None,
        }
    }

    #[test]
    fn formed_groups_take_their_servers_and_the_configured_bound() {
        let (cfg, _) = resume_with(serde_json::Value::Null);
        let mut layout = Layout::from_config(&cfg, 6);
        let bound = cfg.sync.gssp.staleness.bound().unwrap_or(0);
        apply_groups(
            &cfg,
            &mut layout,
            formed(vec![vec![2, 3], vec![4, 5]], None),
            100,
        );
        assert_eq!(layout.groups, [vec![2, 3], vec![4, 5]]);
        assert_eq!(layout.staleness, [bound, bound]);
        assert_eq!(layout.profile_cost_s, Some(0.5));
        assert!(layout.idle.is_empty());

        // One group formed of four workers: the second server has no group and idles.
        let mut layout = Layout::from_config(&cfg, 6);
        apply_groups(&cfg, &mut layout, formed(vec![vec![2, 3, 4, 5]], None), 100);
        assert_eq!(layout.servers, [0]);
        assert_eq!(layout.idle, [1]);
        assert_eq!(layout.role(1), Role::Idle);
        assert_eq!(layout.role(4), Role::Worker { group: 0 });
        assert_eq!(layout.staleness, [bound]);
    }

    #[test]
    fn an_automatic_bound_follows_each_groups_slow_spells() {
        let (mut cfg, _) = resume_with(serde_json::Value::Null);
        cfg.sync.gssp.staleness = Staleness::Auto;
        let mut layout = Layout::from_config(&cfg, 6);
        // Workers 2 and 3 never stall; worker 5 once took ten of its iterations.
        let times = vec![0.1, 0.1, 0.2, 0.2];
        let worst = vec![0.1, 0.1, 0.2, 2.0];
        let groups = vec![vec![2, 3], vec![4, 5]];
        let want = grouping::auto_staleness(
            &times,
            &worst,
            &[vec![0, 1], vec![2, 3]],
            CostModel::new(&cfg, 100).reply_s(),
        );
        apply_groups(&cfg, &mut layout, formed(groups, Some((times, worst))), 100);
        assert_eq!(layout.staleness, want);
        assert!(
            want[1] > want[0],
            "the group with a slow spell gets the larger bound"
        );
    }
}
