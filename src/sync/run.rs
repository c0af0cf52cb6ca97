//! Distributed runs: roles from the config, data loading agreed on by every rank, the
//! role's loop, then evaluation of the snapshots and the summary on rank 0.

use std::time::Instant;

use anyhow::{Context, Result};
use serde::Serialize;

use crate::comm::p2p::{ServerLink, WorkerLink};
use crate::comm::{Collectives, Comm, SubComm};
use crate::config::{Config, SyncMode};
use crate::data::Dataset;
use crate::hetero::{self, Pacer};
use crate::metrics::{self, EvalRow, RunDir, ServerRow, Snapshots, Summary, WorkerRow};
use crate::sync::ps::{Apply, ParamServer};
use crate::sync::server::{self, NoExchange, ServeContext};
use crate::sync::worker::{self, WorkerStats};
use crate::sync::{allreduce, gssp};
use crate::train::{ComputeStep, Evaluator};

/// Who does what: the servers (world ranks) and the workers of each group (world ranks).
/// Group g is served by `servers[g]`; allreduce has no servers and one group.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Layout {
    pub mode: SyncMode,
    pub world_size: usize,
    pub servers: Vec<usize>,
    pub groups: Vec<Vec<usize>>,
    /// Slowdown factor of each world rank (1 for servers).
    pub slowdown: Vec<f64>,
    /// Seconds per local iteration each worker measured when grouping by profile.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profiled_s: Option<Vec<f64>>,
}

impl Layout {
    /// The role of `rank`: `Some((group, is_server))`.
    pub fn role(&self, rank: usize) -> (usize, bool) {
        if let Some(g) = self.servers.iter().position(|&s| s == rank) {
            return (g, true);
        }
        let g = self
            .groups
            .iter()
            .position(|ws| ws.contains(&rank))
            .unwrap_or(0);
        (g, false)
    }
}

/// Ranks 0..S-1 serve, the rest are workers with slowdown factors in rank order.
fn base_layout(cfg: &Config, world_size: usize) -> Layout {
    let servers: Vec<usize> = (0..cfg.num_servers()).collect();
    let workers: Vec<usize> = (servers.len()..world_size).collect();
    let factors = hetero::worker_factors(&cfg.heterogeneity, workers.len());
    let mut slowdown = vec![1.0; world_size];
    for (i, &r) in workers.iter().enumerate() {
        slowdown[r] = factors[i];
    }
    Layout {
        mode: cfg.sync.mode,
        world_size,
        servers,
        groups: vec![workers],
        slowdown,
        profiled_s: None,
    }
}

/// Runs `cfg` on all ranks of `comm`. Every rank returns; rank 0 returns the summary.
pub fn run(comm: &Comm, cfg: &Config, run: &RunDir) -> Result<Option<Summary>> {
    crate::backend::cpu::set_threads(cfg.run.threads);
    let rank = comm.rank();
    let device = crate::backend::select(cfg.device.kind);
    comm.fatal_on_all(device)?;
    // Every rank loads the data (workers train on it; servers need its size and the test
    // set). A bad file on any rank stops all ranks here, each knowing why.
    let (train, test) = comm.fatal_on_all(crate::data::load(&cfg.data, cfg.run.seed))?;
    // Worker i (in rank order, servers excluded) trains on shard i; servers only use the
    // model, so they take shard 0.
    let workers = comm.size() - cfg.num_servers();
    let shard = rank
        .saturating_sub(cfg.num_servers())
        .min(workers.saturating_sub(1));
    let step = ComputeStep::new(cfg, &train, workers, shard).map_err(|e| format!("{e:#}"));
    let mut step = comm.fatal_on_all(step)?;

    let mut layout = base_layout(cfg, comm.size());
    let factor = layout.slowdown[rank];
    let mut pacer = Pacer::from_config(
        &cfg.heterogeneity,
        factor,
        cfg.run.seed ^ ((rank as u64 + 1) * 0x9E37),
        5,
    );
    if cfg.sync.mode == SyncMode::Gssp {
        (layout.groups, layout.profiled_s) =
            gssp::form_groups(comm, cfg, &layout, &mut step, &train, &mut pacer)?;
    }
    let (group, is_server) = layout.role(rank);
    if rank == 0 {
        log::info!(
            "layout: servers {:?}, groups {:?}",
            layout.servers,
            layout.groups
        );
        run.write_json("layout.json", &layout)?;
    }
    // One communicator per group: its server first (rank 0 there), then its workers.
    let group_comm = if cfg.sync.mode == SyncMode::Allreduce {
        None
    } else {
        comm.split(
            Some(group as u32),
            if is_server { 0 } else { 1 + rank as i32 },
        )?
    };
    let server_comm = comm.split(is_server.then_some(0), rank as i32)?;

    let mut snapshots = Snapshots::new(cfg.run.snapshot_every_s);
    let mut role = RoleOutcome::default();

    comm.barrier()?;
    let start = Instant::now();
    match (cfg.sync.mode, is_server) {
        (SyncMode::Allreduce, _) => {
            if cfg.num_servers() > 0 {
                anyhow::bail!("allreduce has no servers");
            }
            let mut log = run.csv::<WorkerRow>(&format!("rank-{rank}.csv"))?;
            role.worker = Some(allreduce::work(
                comm,
                cfg,
                &mut step,
                &train,
                &mut pacer,
                &mut log,
                &mut snapshots,
                start,
            )?);
            log.flush()?;
            role.final_weights = Some(step.net.params().to_vec());
        }
        (_, true) => {
            let gc = group_comm
                .as_ref()
                .context("server without a group communicator")?;
            let outcome = serve_group(
                cfg,
                gc,
                server_comm.as_ref(),
                &layout,
                group,
                &train,
                &step,
                run,
                &mut snapshots,
                start,
            )?;
            role = outcome;
        }
        (_, false) => {
            let gc = group_comm
                .as_ref()
                .context("worker without a group communicator")?;
            let mut link = WorkerLink::new(gc, 0, step.net.num_params())?;
            let mut log = run.csv::<WorkerRow>(&format!("rank-{rank}.csv"))?;
            role.worker = Some(worker::work(
                &mut link,
                &mut step,
                &train,
                &mut pacer,
                &mut log,
                cfg.run.log_every as u64,
                start,
            )?);
            log.flush()?;
        }
    }
    comm.barrier()?;
    finish(
        comm,
        cfg,
        &layout,
        run,
        (train.len(), &test),
        &mut step,
        role,
        snapshots,
        server_comm.as_ref(),
    )
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
}

#[allow(clippy::too_many_arguments)]
fn serve_group(
    cfg: &Config,
    group_comm: &SubComm,
    server_comm: Option<&SubComm>,
    layout: &Layout,
    group: usize,
    train: &Dataset,
    step: &ComputeStep,
    run: &RunDir,
    snapshots: &mut Snapshots,
    start: Instant,
) -> Result<RoleOutcome> {
    let workers = layout.groups[group].len();
    let n = step.net.num_params();
    let ranks: Vec<usize> = (1..=workers).collect();
    let mut link = ServerLink::new(group_comm, 0, &ranks, n)?;
    let (bound, apply) = match cfg.sync.mode {
        SyncMode::Bsp => (Some(0), Apply::Round),
        SyncMode::Asp => (None, Apply::Immediate),
        _ => (Some(cfg.sync.staleness), Apply::Immediate),
    };
    let total_workers = layout.groups.iter().map(Vec::len).sum();
    let mut ps = ParamServer::new(
        step.net.params().to_vec(),
        workers,
        total_workers,
        bound,
        apply,
        cfg.optim.momentum,
        cfg.optim.weight_decay,
    );
    let rank = layout.servers[group];
    let mut log = run.csv::<ServerRow>(&format!("rank-{rank}.csv"))?;
    let ctx = ServeContext {
        cfg,
        train_len: train.len(),
        start,
    };
    let mut outcome = RoleOutcome::default();
    // gssp with one group has no peers to exchange with: it is ssp with a group server.
    let stats = if cfg.sync.mode == SyncMode::Gssp && layout.servers.len() > 1 {
        let sc = server_comm.context("group server without the servers' communicator")?;
        let mut ex = gssp::GroupExchange::new(sc, cfg, ps.weights())?;
        let stats = server::serve(&mut link, &mut ps, &ctx, &mut ex, &mut log, snapshots)?;
        outcome.replica_error = Some(ex.finish(&mut ps)?);
        outcome.bytes_inter_group = ex.bytes_sent();
        outcome.exchanges_deferred = ex.deferred();
        outcome.arrival_drains = ex.arrival_drains();
        stats
    } else {
        server::serve(
            &mut link,
            &mut ps,
            &ctx,
            &mut NoExchange,
            &mut log,
            snapshots,
        )?
    };
    log.flush()?;
    outcome.bytes_sent = link.stats().bytes_sent + outcome.bytes_inter_group;
    outcome.server = Some(stats);
    outcome.final_weights = Some(ps.weights().to_vec());
    Ok(outcome)
}

/// Gathers every rank's totals on rank 0, evaluates the snapshots and the final model,
/// and writes eval.csv and summary.json.
#[allow(clippy::too_many_arguments)]
fn finish(
    comm: &Comm,
    cfg: &Config,
    layout: &Layout,
    run: &RunDir,
    (train_len, test): (usize, &Dataset),
    step: &mut ComputeStep,
    role: RoleOutcome,
    snapshots: Snapshots,
    server_comm: Option<&SubComm>,
) -> Result<Option<Summary>> {
    let w = role.worker.unwrap_or_default();
    let is_worker = role.worker.is_some();
    let gather = |v: f64| comm.gather_f64(0, v);
    let worker_flags = gather(if is_worker { 1.0 } else { 0.0 })?;
    let waits = gather(w.wait_fraction())?;
    let iterations = gather(w.iterations as f64)?;
    let bytes = gather((w.bytes_sent + role.bytes_sent) as f64)?;
    let inter = gather(role.bytes_inter_group as f64)?;
    let deferred = comm.allreduce_sum_u64(role.exchanges_deferred)?;
    let arrival_drains = comm.allreduce_sum_u64(role.arrival_drains)?;
    let walls = gather(role.server.map(|s| s.wall_s).unwrap_or(w.wall_s))?;
    let epochs = gather(role.server.map(|s| s.epoch).unwrap_or(0.0))?;
    let replica_error = comm.allreduce_max_f64(role.replica_error.unwrap_or(0.0))?;
    let serve = role.server.unwrap_or_default();
    let busy_fractions = gather(serve.busy_s() / serve.wall_s.max(1e-9))?;
    let exchange_shares = gather(serve.exchange_s / serve.busy_s().max(1e-12))?;
    let exchange_ms = gather(1e3 * serve.exchange_s / serve.exchanges.max(1) as f64)?;
    let exchange_cpu_shares = gather(serve.exchange_cpu_s / serve.busy_cpu_s.max(1e-12))?;

    // The model to evaluate: the single server's, allreduce rank 0's, or the average of
    // the gssp group servers' replicas (snapshot by snapshot).
    let (snaps, final_weights) = match server_comm {
        Some(sc) if layout.servers.len() > 1 => {
            gssp::average_replicas(sc, snapshots, role.final_weights)?
        }
        _ => (snapshots.taken, role.final_weights),
    };
    if comm.rank() != 0 {
        return Ok(None);
    }
    let (
        Some(flags),
        Some(waits),
        Some(iters),
        Some(bytes),
        Some(inter),
        Some(walls),
        Some(epochs),
        Some(busy_fractions),
        Some(exchange_shares),
        Some(exchange_ms),
        Some(exchange_cpu_shares),
    ) = (
        worker_flags,
        waits,
        iterations,
        bytes,
        inter,
        walls,
        epochs,
        busy_fractions,
        exchange_shares,
        exchange_ms,
        exchange_cpu_shares,
    )
    else {
        anyhow::bail!("rank 0 did not receive the gathered totals");
    };
    let final_weights = final_weights.context("rank 0 holds no model")?;
    let wall_s = walls.iter().cloned().fold(0.0, f64::max);
    let worker_waits: Vec<f64> = waits
        .iter()
        .zip(&flags)
        .filter(|(_, &f)| f > 0.0)
        .map(|(&x, _)| x)
        .collect();
    let total_iters: f64 = iters.iter().sum();
    let epoch = if cfg.sync.mode == SyncMode::Allreduce {
        total_iters * cfg.optim.batch_size as f64 / train_len as f64
    } else {
        epochs.iter().cloned().fold(0.0, f64::max)
    };

    let mut evaluator = Evaluator::new(test, step.net.max_batch());
    let mut eval_log = run.csv::<EvalRow>("eval.csv")?;
    let mut evals = Vec::new();
    for (mut row, weights) in snaps {
        step.net.params_mut().copy_from_slice(&weights);
        (row.test_loss, row.test_accuracy) = evaluator.evaluate(&mut step.net, test);
        eval_log.push(&row)?;
        evals.push(row);
    }
    step.net.params_mut().copy_from_slice(&final_weights);
    let (test_loss, test_accuracy) = evaluator.evaluate(&mut step.net, test);
    let last = EvalRow {
        time_s: wall_s,
        epoch,
        iteration: total_iters as u64,
        test_loss,
        test_accuracy,
    };
    eval_log.push(&last)?;
    eval_log.flush()?;
    evals.push(last);
    log::info!(
        "final model: test loss {test_loss:.4}, accuracy {:.2}%",
        100.0 * test_accuracy
    );

    let per_server = |v: &[f64]| layout.servers.iter().map(|&r| v[r]).collect::<Vec<f64>>();
    let has_servers = !layout.servers.is_empty();
    let exchanged = cfg.sync.mode == SyncMode::Gssp && layout.servers.len() > 1;
    let summary = Summary {
        mode: cfg.sync.mode.to_string(),
        model: step.net.name().into(),
        dataset: cfg.data.dataset.to_string(),
        ranks: comm.size(),
        workers: worker_waits.len(),
        seed: cfg.run.seed,
        epochs: epoch,
        iterations: total_iters as u64,
        wall_s,
        images_per_s: total_iters * cfg.optim.batch_size as f64 / wall_s.max(1e-9),
        final_test_loss: test_loss,
        final_test_accuracy: test_accuracy,
        target_accuracy: cfg.run.target_accuracy,
        time_to_target_s: metrics::time_to_target(&evals, cfg.run.target_accuracy),
        mean_wait_fraction: Some(
            worker_waits.iter().sum::<f64>() / worker_waits.len().max(1) as f64,
        ),
        worker_wait_fractions: Some(worker_waits),
        bytes_sent: Some(bytes.iter().sum::<f64>() as u64),
        bytes_inter_group: Some(inter.iter().sum::<f64>() as u64),
        replica_max_error: (cfg.sync.mode == SyncMode::Gssp).then_some(replica_error),
        exchanges_deferred: (cfg.sync.mode == SyncMode::Gssp).then_some(deferred),
        arrival_drains: (cfg.sync.mode == SyncMode::Gssp).then_some(arrival_drains),
        server_busy_fractions: has_servers.then(|| per_server(&busy_fractions)),
        exchange_shares_of_busy: exchanged.then(|| per_server(&exchange_shares)),
        exchange_shares_of_busy_cpu: exchanged.then(|| per_server(&exchange_cpu_shares)),
        mean_exchange_ms: exchanged.then(|| per_server(&exchange_ms)),
    };
    run.write_json("summary.json", &summary)?;
    Ok(Some(summary))
}
