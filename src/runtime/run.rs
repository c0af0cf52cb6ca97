//! Distributed runs: roles from the config, data loading agreed on by every rank, the
//! role's loop, then evaluation of the snapshots and the summary on rank 0.

use std::time::Instant;

use anyhow::{Context, Result};

use crate::checkpoint::{Resume, Schedule};
use crate::comm::p2p::{ServerLink, WorkerLink};
use crate::comm::{Collectives, Comm, SubComm};
use crate::compress::powersgd::TensorShape;
use crate::compress::MirrorDevice;
use crate::compute::backend::Backend;
use crate::compute::model::Trainable;
use crate::compute::optim::HostOptimizer;
use crate::compute::pace::{Pacer, CALIBRATION_ITERATIONS};
use crate::compute::workload::{ComputeStep, Corpus, Evaluator};
use crate::config::{CompressionKind, Config, Staleness, SyncMode};
use crate::protocol::costmodel::CostModel;
use crate::protocol::grouping;
use crate::protocol::layout::Layout;
use crate::protocol::param_server::{Apply, ParamServer, UpdateRule};
use crate::protocol::regroup::RegroupEvent;
use crate::runtime::collective::{allreduce, localsgd};
use crate::runtime::exchange::{self, Replicas};
use crate::runtime::peers::{Exchange, NoExchange};
use crate::runtime::regrouper::Regrouper;
use crate::runtime::saver::{self, Saver};
use crate::runtime::server::{self, Peers, ServeContext};
use crate::runtime::worker::{self, WorkerContext, WorkerStats};
use crate::telemetry::{EvalRow, RunDir, RunTotals, ServerRow, Snapshots, Summary};

/// The backend one rank computes on.
enum RankBackend {
    Cpu,
    #[cfg(feature = "cuda")]
    Cuda(crate::compute::backend::cuda::Cuda),
}

/// Runs `cfg` on all ranks of `comm`, from `resume`'s checkpoint when given. Every rank
/// returns; rank 0 returns the summary.
///
/// With `device.kind = "cuda"` the ranks that compute gradients (the workers, and every
/// rank of allreduce and localsgd) do so on their GPU, copying the gradient out and the
/// weights in once per iteration (each rank's own GPU: local rank modulo the node's GPUs).
/// Parameter and group servers keep their replica in host memory, where MPI sends and
/// receives it, and run their optimizer there; a gssp group server may select its sparse
/// exchanges on its GPU (`device.exchange_select`, [`crate::compress::mirror`]).
pub fn run(
    comm: &Comm,
    cfg: &Config,
    run: &RunDir,
    resume: Option<&Resume>,
) -> Result<Option<Summary>> {
    crate::compute::backend::cpu::set_threads(cfg.run.threads);
    crate::comm::emulate_link(cfg.heterogeneity.link_gbps);
    let device = comm.fatal_on_all(crate::compute::backend::select(cfg.device.kind))?;
    let backend: Result<RankBackend> = match device {
        crate::compute::backend::Device::Cpu => Ok(RankBackend::Cpu),
        #[cfg(feature = "cuda")]
        // Ranks from num_servers() on compute gradients; with no servers, all of them.
        crate::compute::backend::Device::Cuda(gpu) if comm.rank() >= cfg.num_servers() => {
            crate::compute::backend::cuda::Cuda::new(gpu).map(RankBackend::Cuda)
        }
        #[cfg(feature = "cuda")]
        crate::compute::backend::Device::Cuda(_) => Ok(RankBackend::Cpu),
    };
    let backend = comm.fatal_on_all(backend.map_err(|e| format!("{e:#}")))?;
    let mirror = exchange_mirror(cfg, comm.rank()).map_err(|e| format!("{e:#}"));
    let mirror = comm.fatal_on_all(mirror)?;
    match backend {
        RankBackend::Cpu => run_on(
            crate::compute::backend::cpu::Cpu,
            comm,
            cfg,
            run,
            resume,
            mirror,
        ),
        #[cfg(feature = "cuda")]
        RankBackend::Cuda(cuda) => {
            log::info!("rank {}: device {}", comm.rank(), cuda.describe());
            run_on(cuda, comm, cfg, run, resume, mirror)
        }
    }
}

/// Where group server `rank` selects its sparse exchanges (`device.exchange_select`): its
/// GPU, the peer view mirrored there, or `None` for the host (every other rank and mode).
fn exchange_mirror(cfg: &Config, rank: usize) -> Result<Option<Box<dyn MirrorDevice>>> {
    let sparse_gssp =
        cfg.sync.mode == SyncMode::Gssp && cfg.compression.kind == CompressionKind::Topk;
    if rank >= cfg.num_servers() || !sparse_gssp {
        return Ok(None);
    }
    let params = crate::tools::plan::model_params(cfg).map_err(anyhow::Error::msg)?;
    if !cfg.device.exchange_on_gpu(params) {
        return Ok(None);
    }
    gpu_mirror(rank)
}

#[cfg(feature = "cuda")]
fn gpu_mirror(rank: usize) -> Result<Option<Box<dyn MirrorDevice>>> {
    use crate::compute::backend::{cuda, gpu_for, Device};
    let Device::Cuda(gpu) = gpu_for("device.exchange_select")? else {
        anyhow::bail!("device.exchange_select: no GPU for rank {rank}");
    };
    let gpu = cuda::Cuda::new(gpu)?;
    log::info!("rank {rank}: sparse exchanges select on {}", gpu.describe());
    Ok(Some(Box::new(crate::compress::CudaMirror::new(gpu))))
}

#[cfg(not(feature = "cuda"))]
fn gpu_mirror(_rank: usize) -> Result<Option<Box<dyn MirrorDevice>>> {
    crate::compute::backend::gpu_for("device.exchange_select").map(|_| None)
}

/// [`run`], this rank computing on `be`.
fn run_on<B: Backend>(
    be: B,
    comm: &Comm,
    cfg: &Config,
    run: &RunDir,
    resume: Option<&Resume>,
    mirror: Option<Box<dyn MirrorDevice>>,
) -> Result<Option<Summary>> {
    let rank = comm.rank();
    // Every rank loads the data (workers train on it; servers need its size and the test
    // set). A bad file on any rank stops all ranks here, each knowing why.
    let corpus = comm.fatal_on_all(Corpus::load(&cfg.data, cfg.run.seed))?;
    if rank == 0 {
        log::info!("data: {} from {}", corpus.describe(), cfg.data.dataset);
        corpus.save_to(run.path())?;
    }
    // Worker i (in rank order, servers excluded) trains on shard i; servers only use the
    // model, so they take shard 0.
    let workers = comm.size() - cfg.num_servers();
    let shard = rank
        .saturating_sub(cfg.num_servers())
        .min(workers.saturating_sub(1));
    let step = ComputeStep::new_on(be, cfg, &corpus, workers, shard).map_err(|e| format!("{e:#}"));
    let mut step = comm.fatal_on_all(step)?;

    let nan_fault = std::env::var(worker::NAN_FAULT_VAR).ok();
    let nan_at = comm.fatal_on_all(worker::nan_fault_for(nan_fault.as_deref(), rank))?;
    let mut layout = Layout::from_config(cfg, comm.size());
    let factor = layout.slowdown[rank];
    let worker_index = layout.worker_ranks().iter().position(|&r| r == rank);
    let mut pacer = Pacer::from_config(
        &cfg.heterogeneity,
        factor,
        worker_index,
        cfg.run.seed ^ ((rank as u64 + 1) * 0x9E37),
        CALIBRATION_ITERATIONS,
    );
    let saved_layout = resume.and_then(|r| r.manifest.layout.clone());
    if let Some(saved) = saved_layout {
        // A resumed run keeps its groups: the replicas it saved belong to them.
        let saved = serde_json::from_value::<Layout>(saved).map_err(|e| {
            format!(
                "{}: layout: {e}",
                resume.map_or_else(Default::default, |r| r.dir.display().to_string())
            )
        });
        layout = comm.fatal_on_all(saved)?;
    } else if cfg.sync.mode == SyncMode::Gssp {
        let profiled = layout.worker_ranks();
        let model = CostModel::new(cfg, step.net.num_params());
        let formed =
            crate::runtime::profiling::form_groups(comm, &cfg.sync, &model, &profiled, || {
                step.compute_paced(&corpus, &mut pacer)
            })?;
        layout.keep_servers(formed.groups.len());
        layout.staleness = match (
            cfg.sync.staleness,
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
                grouping::auto_staleness(times, worst, &groups, model.weights_s())
            }
            (s, _, _) => vec![s.bound().unwrap_or(0); formed.groups.len()],
        };
        layout.groups = formed.groups;
        layout.profiled_s = formed.profiled_s;
        layout.profiled_spread_s = formed.profiled_spread_s;
        layout.profiled_worst_s = formed.profiled_worst_s;
        layout.profile_cost_s = formed.profile_cost_s;
        layout.group_count = formed.group_count;
    }
    // gssp's profiling is part of its training time: the clock (time budget, time to target,
    // speed changes) starts when profiling did. A resumed run does not profile; its saved
    // clock already counts the first run's profiling.
    let profiling = if resume.is_none() {
        layout.profile_cost_s.unwrap_or(0.0)
    } else {
        0.0
    };
    let (group, is_server) = layout.role(rank);
    if rank == 0 {
        log::info!(
            "layout: servers {:?}, groups {:?}",
            layout.servers,
            layout.groups
        );
        if let Some(cost) = layout.profile_cost_s {
            log::info!("grouping by profile took {cost:.2} s of the training clock");
            let budget = cfg.run.time_budget_s;
            if budget > 0.0 && profiling >= 0.5 * budget {
                log::warn!(
                    "profiling took {cost:.2} s, {:.0}% of run.time_budget_s = {budget} s, which it counts against: lower sync.profile_iters or raise the budget",
                    100.0 * cost / budget
                );
            }
        }
        if let Some(choice) = &layout.group_count {
            let each: Vec<String> = choice
                .candidates
                .iter()
                .map(|c| {
                    format!(
                        "{}: {:.1} it/s (server load {:.1}%)",
                        c.groups,
                        c.rate,
                        100.0 * c.server_load
                    )
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
                    "ranks {:?} were reserved as servers (sync.max_groups = {}) and stay idle",
                    layout.idle,
                    cfg.sync.max_groups
                );
            }
        }
        if cfg.sync.staleness == Staleness::Auto {
            log::info!(
                "staleness per group (auto, from each group's longest profiled delay): {:?}",
                layout.staleness
            );
        }
        run.write_json("layout.json", &layout)?;
    }
    // Servers and workers talk point to point on the world communicator, so that a
    // regrouped worker can reach any server.
    let server_comm = comm.split(is_server.then_some(0), rank as i32)?;

    let mut snapshots = Snapshots::new(cfg.run.snapshot_every_s);
    let mut role = RoleOutcome::default();
    // A worker of the server modes resumes at its clock, which its server saved.
    let mut done = Ok(0);
    let idle = layout.idle.contains(&rank);
    if let (Some(r), false, false, false) = (resume, is_server, serverless(cfg), idle) {
        let server = layout.servers[group];
        let index = layout.groups[group].iter().position(|&w| w == rank);
        done = r.load(server).map_err(|e| e.to_string()).and_then(|f| {
            index
                .and_then(|i| f.meta.worker_clocks.get(i).copied())
                .ok_or_else(|| format!("{}: no clock for rank {rank}", r.path(server).display()))
        });
    }
    // Collective: every rank learns whether some worker could not read its clock.
    let done = comm.fatal_on_all(done)?;
    if done > 0 {
        step.resume_at(done);
    }
    let resumed_at = resume.map_or(0.0, |r| r.manifest.time_s);
    let layout_json = serde_json::to_value(&layout).ok();

    comm.barrier()?;
    let start = Instant::now()
        .checked_sub(std::time::Duration::from_secs_f64(resumed_at + profiling))
        .context("the checkpoint's training clock lies before this machine's boot")?;
    pacer.start_clock_at(start);
    let ctx = RunContext {
        comm,
        cfg,
        run,
        layout: &layout,
        corpus: &corpus,
        server_comm: server_comm.as_ref(),
        start,
        resume,
    };
    let schedule = || {
        Schedule::new(
            cfg.run.checkpoint_every_s,
            resumed_at,
            resume.map_or(0, |r| r.manifest.sequence),
        )
    };
    match (cfg.sync.mode, is_server) {
        // A server rank the chosen group count left over: nothing to do until the end.
        _ if idle => {}
        (SyncMode::Allreduce | SyncMode::Localsgd, _) => {
            if cfg.num_servers() > 0 {
                anyhow::bail!("{} has no servers", cfg.sync.mode);
            }
            let mut log = run.worker_log(rank, cfg.run.log_every)?;
            let w = WorkerContext {
                step: &mut step,
                corpus: &corpus,
                pacer: &mut pacer,
                log: &mut log,
                start: ctx.start,
                done: 0,
            };
            let mut saver = Saver {
                comm,
                cfg,
                run,
                world_rank: rank,
                world_size: comm.size(),
                layout: layout_json,
                schedule: schedule(),
            };
            if cfg.sync.mode == SyncMode::Localsgd {
                let outcome = localsgd::work(comm, cfg, w, &mut snapshots, &mut saver, resume)?;
                role.worker = Some(outcome.stats);
                role.replica_error = Some(outcome.replica_error);
            } else {
                role.worker = Some(allreduce::work(
                    comm,
                    cfg,
                    w,
                    &mut snapshots,
                    &mut saver,
                    resume,
                )?);
            }
            log.flush()?;
            role.final_weights = Some(step.net.params_host_copy());
        }
        (_, true) => {
            let sc = ctx
                .server_comm
                .context("server without the servers' communicator")?;
            let mut saver = Saver {
                comm: sc,
                cfg,
                run,
                world_rank: rank,
                world_size: comm.size(),
                layout: layout_json,
                schedule: schedule(),
            };
            let model = ServerModel::of(&step.net);
            role = serve_group(&ctx, group, model, mirror, &mut snapshots, &mut saver)?;
            if rank == 0 && !role.regroups.is_empty() {
                run.write_json("regroups.json", &role.regroups)?;
            }
        }
        (_, false) => {
            let server = layout.servers[group];
            let mut link = WorkerLink::new(comm, server, step.net.num_params())?;
            let mut log = run.worker_log(rank, cfg.run.log_every)?;
            let w = WorkerContext {
                step: &mut step,
                corpus: &corpus,
                pacer: &mut pacer,
                log: &mut log,
                start: ctx.start,
                done,
            };
            role.worker = Some(worker::work(&mut link, w, nan_at)?);
            log.flush()?;
        }
    }
    comm.barrier()?;
    finish(&ctx, &mut step, role, snapshots)
}

/// What every role of a run reads, set up by [`run`] before the roles start.
struct RunContext<'a> {
    comm: &'a Comm,
    cfg: &'a Config,
    run: &'a RunDir,
    layout: &'a Layout,
    corpus: &'a Corpus,
    /// The group servers' communicator (on the servers).
    server_comm: Option<&'a SubComm>,
    /// Common time origin of all ranks (taken right after a barrier; a resumed run's lies
    /// its checkpoint's training clock back).
    start: Instant,
    resume: Option<&'a Resume>,
}

/// The modes without parameter servers.
fn serverless(cfg: &Config) -> bool {
    matches!(cfg.sync.mode, SyncMode::Allreduce | SyncMode::Localsgd)
}

/// One rank's numbers for the summary, gathered on rank 0 as one row of `f64`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct RankTotals {
    /// 1 for a worker, 0 otherwise.
    worker: f64,
    wait_fraction: f64,
    iterations: f64,
    bytes_sent: f64,
    bytes_inter_group: f64,
    wall_s: f64,
    epoch: f64,
    /// Servers: pushes applied and the sum of their staleness.
    pushes: f64,
    staleness_sum: f64,
    busy_fraction: f64,
    busy_ms_per_push: f64,
    exchange_share: f64,
    exchange_cpu_share: f64,
    exchange_ms: f64,
    exchange_cpu_ms: f64,
}

impl RankTotals {
    fn of(role: &RoleOutcome) -> Self {
        let w = role.worker.unwrap_or_default();
        let s = role.server.unwrap_or_default();
        RankTotals {
            worker: if role.worker.is_some() { 1.0 } else { 0.0 },
            wait_fraction: w.wait_fraction(),
            iterations: w.iterations as f64,
            bytes_sent: (w.bytes_sent + role.bytes_sent) as f64,
            bytes_inter_group: role.bytes_inter_group as f64,
            wall_s: role.server.map_or(w.wall_s, |s| s.wall_s),
            epoch: s.epoch,
            pushes: s.pushes as f64,
            staleness_sum: s.staleness_sum as f64,
            busy_fraction: s.busy_s() / s.wall_s.max(1e-9),
            busy_ms_per_push: 1e3 * s.busy_s() / s.pushes.max(1) as f64,
            exchange_share: s.exchange_s / s.busy_s().max(1e-12),
            exchange_cpu_share: s.exchange_cpu_s / s.busy_cpu_s.max(1e-12),
            exchange_ms: 1e3 * s.exchange_s / s.exchanges.max(1) as f64,
            exchange_cpu_ms: 1e3 * s.exchange_cpu_s / s.exchanges.max(1) as f64,
        }
    }

    fn to_row(self) -> [f64; 15] {
        [
            self.worker,
            self.wait_fraction,
            self.iterations,
            self.bytes_sent,
            self.bytes_inter_group,
            self.wall_s,
            self.epoch,
            self.pushes,
            self.staleness_sum,
            self.busy_fraction,
            self.busy_ms_per_push,
            self.exchange_share,
            self.exchange_cpu_share,
            self.exchange_ms,
            self.exchange_cpu_ms,
        ]
    }

    fn from_row(r: &[f64]) -> Self {
        RankTotals {
            worker: r[0],
            wait_fraction: r[1],
            iterations: r[2],
            bytes_sent: r[3],
            bytes_inter_group: r[4],
            wall_s: r[5],
            epoch: r[6],
            pushes: r[7],
            staleness_sum: r[8],
            busy_fraction: r[9],
            busy_ms_per_push: r[10],
            exchange_share: r[11],
            exchange_cpu_share: r[12],
            exchange_ms: r[13],
            exchange_cpu_ms: r[14],
        }
    }
}

/// What one rank brings to the summary.
#[derive(Default)]
pub struct RoleOutcome {
    pub worker: Option<WorkerStats>,
    pub server: Option<server::ServeStats>,
    /// The model this rank holds at the end (servers; allreduce rank 0).
    pub final_weights: Option<Vec<f32>>,
    pub bytes_sent: u64,
    pub bytes_inter_group: u64,
    /// gssp: max |replica - initial - sum of all groups' sent updates| after the final flush.
    pub replica_error: Option<f64>,
    /// gssp: exchanges that sent nothing because a peer's mailbox was full.
    pub exchanges_deferred: u64,
    /// gssp: drains between the server's own exchanges (`sync.drain_on_arrival`).
    pub arrival_drains: u64,
    /// gssp with regrouping: every regroup meeting this server took part in.
    pub regroups: Vec<RegroupEvent>,
}

/// What a server starts from: the initial weights on the host, and the model's tensors
/// (PowerSGD compresses each matrix on its own).
struct ServerModel {
    weights: Vec<f32>,
    tensors: Vec<TensorShape>,
}

impl ServerModel {
    fn of<B: Backend>(net: &crate::compute::workload::Model<B>) -> ServerModel {
        let weights = net.params_host_copy();
        let tensors = net
            .param_specs()
            .iter()
            .map(|t| TensorShape::new(t.range.clone(), &t.shape))
            .collect();
        ServerModel { weights, tensors }
    }
}

/// Serves group `group`, exchanging with the other groups' servers in gssp (and
/// regrouping with them, with `sync.regroup_every_s`).
fn serve_group(
    ctx: &RunContext<'_>,
    group: usize,
    model: ServerModel,
    mirror: Option<Box<dyn MirrorDevice>>,
    snapshots: &mut Snapshots,
    saver: &mut Saver<'_, SubComm>,
) -> Result<RoleOutcome> {
    let (cfg, layout) = (ctx.cfg, ctx.layout);
    let ServerModel {
        weights: initial_weights,
        tensors,
    } = model;
    let n = initial_weights.len();
    let rank = layout.servers[group];
    let regroups = cfg.sync.mode == SyncMode::Gssp
        && layout.servers.len() > 1
        && cfg.sync.regroup_every_s > 0.0;
    let mut regroup = regroups.then(|| {
        let every = (cfg.sync.regroup_every_s, cfg.sync.regroup_min_gain);
        let from = ctx.start.elapsed().as_secs_f64();
        Regrouper::new(layout, group, every, CostModel::new(cfg, n), from)
    });
    // A regrouping server has a slot for every worker of the run, absent while in another
    // group; otherwise its slots are its group's workers.
    let slots: Vec<usize> = match &regroup {
        Some(r) => r.slot_ranks().to_vec(),
        None => layout.groups[group].clone(),
    };
    let workers = slots.len();
    let mut link = ServerLink::new(ctx.comm, rank, &slots, n)?;
    let (bound, apply) = match cfg.sync.mode {
        SyncMode::Bsp => (Some(0), Apply::Round),
        SyncMode::Asp => (None, Apply::Immediate),
        _ => (Some(layout.staleness[group]), Apply::Immediate),
    };
    let total_workers = layout.groups.iter().map(Vec::len).sum();
    let mut ps = ParamServer::new(
        initial_weights,
        UpdateRule {
            workers,
            total_workers,
            bound,
            apply,
            momentum: cfg.optim.momentum,
            weight_decay: cfg.optim.weight_decay,
            staleness_lr: cfg.optim.staleness_lr,
            delay_compensation: cfg.optim.delay_compensation,
            clip_norm: cfg.optim.clip_norm,
        },
    )
    .with_optimizer(HostOptimizer::new(&cfg.optim, n));
    if let Some(r) = &regroup {
        for w in (0..workers).filter(|&w| !r.is_member(w)) {
            link.leave(w)?;
            ps.leave(w);
        }
    }
    let resumed = match ctx.resume {
        Some(r) => {
            let every_s = cfg.run.snapshot_every_s;
            let (meta, restored) = saver::restore_server(r, rank, &mut ps, every_s)?;
            *snapshots = restored;
            Some(meta)
        }
        None => None,
    };
    let mut log = ctx
        .run
        .csv_continued::<ServerRow>(&format!("rank-{rank}.csv"))?;
    let serve_ctx = ServeContext {
        cfg,
        train_len: ctx.corpus.train_len(),
        start: ctx.start,
        show_progress: rank == 0,
        worker_ranks: &slots,
        resumed_pushes: resumed.as_ref().map(|m| m.steps),
    };
    let mut outcome = RoleOutcome::default();
    // gssp with one group has no peers to exchange with: it is ssp with a group server.
    let (stats, own_pushes, known) = if cfg.sync.mode == SyncMode::Gssp && layout.servers.len() > 1
    {
        let sc = ctx
            .server_comm
            .context("group server without the servers' communicator")?;
        let mut ex = exchange::GroupExchange::new(sc, cfg, ps.weights(), &tensors)?;
        if let Some(device) = mirror {
            ex.select_on(device);
        }
        if let Some(m) = &resumed {
            ex.resume(&m.group_pushes, m.speed).with_context(|| {
                ctx.resume
                    .map(|r| r.path(rank).display().to_string())
                    .unwrap_or_default()
            })?;
        }
        let peers = Peers {
            exchange: &mut ex,
            regroup: regroup.as_mut(),
        };
        let stats = server::serve(
            &mut link, &mut ps, &serve_ctx, peers, &mut log, snapshots, saver,
        )?;
        outcome.regroups = regroup.map(|r| r.history).unwrap_or_default();
        outcome.replica_error = Some(ex.finish(&mut ps)?);
        outcome.bytes_inter_group = ex.bytes_sent();
        outcome.exchanges_deferred = ex.deferred();
        outcome.arrival_drains = ex.arrival_drains();
        let own = serve_ctx.resumed_pushes.unwrap_or(0) + stats.pushes;
        let known = ex.saved_state(own);
        ex.close()?;
        (stats, own, known)
    } else {
        let peers = Peers {
            exchange: &mut NoExchange,
            regroup: None,
        };
        let stats = server::serve(
            &mut link, &mut ps, &serve_ctx, peers, &mut log, snapshots, saver,
        )?;
        let own = serve_ctx.resumed_pushes.unwrap_or(0) + stats.pushes;
        (stats, own, NoExchange.saved_state(own))
    };
    log.flush()?;
    // The final checkpoint: after the final flush every replica holds every update.
    let time_s = saver
        .comm
        .allreduce_max_f64(ctx.start.elapsed().as_secs_f64())?;
    let at = (own_pushes, stats.epoch, time_s);
    server::save(saver, &ps, known, at, snapshots)?;
    outcome.bytes_sent = link.stats().bytes_sent + outcome.bytes_inter_group;
    outcome.server = Some(stats);
    outcome.final_weights = Some(ps.weights().to_vec());
    Ok(outcome)
}

/// Gathers every rank's totals on rank 0, evaluates the snapshots and the final model,
/// and writes eval.csv and summary.json.
fn finish<B: Backend>(
    ctx: &RunContext<'_>,
    step: &mut ComputeStep<B>,
    role: RoleOutcome,
    snapshots: Snapshots,
) -> Result<Option<Summary>> {
    let (comm, cfg, layout, run, corpus) = (ctx.comm, ctx.cfg, ctx.layout, ctx.run, ctx.corpus);
    let deferred = comm.allreduce_sum_u64(role.exchanges_deferred)?;
    let arrival_drains = comm.allreduce_sum_u64(role.arrival_drains)?;
    let replica_error = comm.allreduce_max_f64(role.replica_error.unwrap_or(0.0))?;
    let rows = comm.gather_f64s(0, &RankTotals::of(&role).to_row())?;

    // The model to evaluate: the single server's, allreduce rank 0's, or the average of
    // the gssp group servers' replicas (snapshot by snapshot).
    let models = match ctx.server_comm {
        Some(sc) if layout.servers.len() > 1 => {
            exchange::average_replicas(sc, snapshots, role.final_weights)?
        }
        _ => Replicas {
            snapshots: snapshots.taken,
            final_weights: role.final_weights,
        },
    };
    if comm.rank() != 0 {
        return Ok(None);
    }
    let ranks: Vec<RankTotals> = rows
        .context("rank 0 did not receive the gathered totals")?
        .iter()
        .map(|r| RankTotals::from_row(r))
        .collect();
    let final_weights = models.final_weights.context("rank 0 holds no model")?;
    let wall_s = ranks.iter().map(|r| r.wall_s).fold(0.0, f64::max);
    let worker_waits: Vec<f64> = ranks
        .iter()
        .filter(|r| r.worker > 0.0)
        .map(|r| r.wait_fraction)
        .collect();
    let total_iters: f64 = ranks.iter().map(|r| r.iterations).sum();
    let epoch = if matches!(cfg.sync.mode, SyncMode::Allreduce | SyncMode::Localsgd) {
        total_iters * cfg.optim.batch_size as f64 / corpus.train_len() as f64
    } else {
        ranks.iter().map(|r| r.epoch).fold(0.0, f64::max)
    };

    let mut evaluator = Evaluator::with_bn_calibration(corpus, &step.net, cfg.run.seed);
    let mut eval_log = run.csv::<EvalRow>("eval.csv")?;
    let mut evals = Vec::new();
    for (row, weights) in models.snapshots {
        step.net.params_from_host(&weights);
        let ev = evaluator.evaluate(&mut step.net, corpus)?;
        let row = ev.row(row.time_s, row.epoch, row.iteration);
        eval_log.push(&row)?;
        evals.push(row);
    }
    step.net.params_from_host(&final_weights);
    let ev = evaluator.evaluate_final(&mut step.net, corpus)?;
    let last = ev.row(wall_s, epoch, total_iters as u64);
    eval_log.push(&last)?;
    eval_log.flush()?;
    evals.push(last);
    log::info!(
        "final model: {}",
        crate::runtime::single::eval_figures(&last)
    );
    crate::runtime::single::write_translations(run, &ev)?;
    // The weights and the re-estimated batch-norm statistics just evaluated.
    crate::runtime::single::export_model(cfg, run, &step.net)?;

    let per_server = |f: fn(&RankTotals) -> f64| -> Vec<f64> {
        layout.servers.iter().map(|&r| f(&ranks[r])).collect()
    };
    let servers = || layout.servers.iter().map(|&r| &ranks[r]);
    let pushes: f64 = servers().map(|r| r.pushes).sum();
    let has_servers = !layout.servers.is_empty();
    let exchanged = cfg.sync.mode == SyncMode::Gssp && layout.servers.len() > 1;
    let totals = RunTotals {
        ranks: comm.size(),
        workers: worker_waits.len(),
        epochs: epoch,
        iterations: total_iters as u64,
        wall_s,
    };
    let common = Summary::new(cfg, step.net.name(), totals, &evals);
    let summary = Summary {
        mean_wait_fraction: Some(
            worker_waits.iter().sum::<f64>() / worker_waits.len().max(1) as f64,
        ),
        worker_wait_fractions: Some(worker_waits),
        bytes_sent: Some(ranks.iter().map(|r| r.bytes_sent).sum::<f64>() as u64),
        bytes_inter_group: Some(ranks.iter().map(|r| r.bytes_inter_group).sum::<f64>() as u64),
        replica_max_error: matches!(cfg.sync.mode, SyncMode::Gssp | SyncMode::Localsgd)
            .then_some(replica_error),
        exchanges_deferred: (cfg.sync.mode == SyncMode::Gssp).then_some(deferred),
        arrival_drains: (cfg.sync.mode == SyncMode::Gssp).then_some(arrival_drains),
        server_busy_fractions: has_servers.then(|| per_server(|r| r.busy_fraction)),
        server_busy_ms_per_push: has_servers.then(|| per_server(|r| r.busy_ms_per_push)),
        mean_push_staleness: has_servers
            .then(|| servers().map(|r| r.staleness_sum).sum::<f64>() / pushes.max(1.0)),
        exchange_shares_of_busy: exchanged.then(|| per_server(|r| r.exchange_share)),
        exchange_shares_of_busy_cpu: exchanged.then(|| per_server(|r| r.exchange_cpu_share)),
        mean_exchange_ms: exchanged.then(|| per_server(|r| r.exchange_ms)),
        mean_exchange_cpu_ms: exchanged.then(|| per_server(|r| r.exchange_cpu_ms)),
        ..common
    };
    run.write_json("summary.json", &summary)?;
    Ok(Some(summary))
}
