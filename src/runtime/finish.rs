//! The end of a distributed run: every rank's totals gathered on rank 0, the model to
//! evaluate (the one server's, allreduce rank 0's, or the average of the gssp replicas,
//! snapshot by snapshot), its evaluations, and `summary.json`.

use anyhow::{Context, Result};

use crate::comm::Collectives;
use crate::compute::backend::Backend;
use crate::compute::model::Trainable;
use crate::compute::workload::{ComputeStep, Evaluator};
use crate::protocol::regroup::RegroupEvent;
use crate::runtime::exchange::{self, Replicas};
use crate::runtime::server::ServeStats;
use crate::runtime::setup::RunContext;
use crate::runtime::single::{eval_figures, export_model, write_translations};
use crate::runtime::worker::WorkerStats;
use crate::telemetry::{EvalRow, RunTotals, Snapshots, Summary};

/// What one rank brings to the summary.
#[derive(Default)]
pub struct RoleOutcome {
    pub worker: Option<WorkerStats>,
    pub server: Option<ServeStats>,
    /// The model this rank holds at the end (servers; allreduce rank 0).
    pub final_weights: Option<Vec<f32>>,
    pub bytes_sent: u64,
    pub bytes_inter_group: u64,
    /// gssp: max |replica - initial - sum of all groups' sent updates| after the final flush;
    /// localsgd: max |replica - rank 0's| after the final average.
    pub replica_error: Option<f64>,
    /// gssp: exchanges that sent nothing because a peer's mailbox was full.
    pub exchanges_deferred: u64,
    /// gssp: drains between the server's own exchanges (`sync.gssp.drain_on_arrival`).
    pub arrival_drains: u64,
    /// gssp with `sync.gssp.outer`: the outer optimizer's steps on this server's progress.
    pub outer_steps: u64,
    /// gssp with regrouping: every regroup meeting this server took part in.
    pub regroups: Vec<RegroupEvent>,
}

/// The run's totals over every rank (collective), as rank 0 sees them.
struct Gathered {
    /// One row per rank, on rank 0.
    ranks: Option<Vec<RankTotals>>,
    deferred: u64,
    arrival_drains: u64,
    outer_steps: u64,
    replica_error: f64,
}

/// Gathers every rank's totals on rank 0, evaluates the snapshots and the final model,
/// and writes eval.csv and summary.json (collective; rank 0 returns the summary).
pub fn finish<B: Backend>(
    ctx: &RunContext<'_>,
    step: &mut ComputeStep<B>,
    role: RoleOutcome,
    snapshots: Snapshots,
) -> Result<Option<Summary>> {
    let comm = ctx.comm;
    let gathered = gather(ctx, &role)?;
    let n = step.net.num_params();
    let models = models_to_evaluate(ctx, n, snapshots, role.final_weights)?;
    if comm.rank() != 0 {
        return Ok(None);
    }
    let ranks = gathered
        .ranks
        .as_deref()
        .context("rank 0 did not receive the gathered totals")?;
    let totals = run_totals(ctx, ranks);
    let evals = evaluate(ctx, step, models, &totals)?;
    let summary = summarize(ctx, step, ranks, &gathered, totals, &evals);
    ctx.run.write_json("summary.json", &summary)?;
    Ok(Some(summary))
}

fn gather(ctx: &RunContext<'_>, role: &RoleOutcome) -> Result<Gathered> {
    let comm = ctx.comm;
    let deferred = comm.allreduce_sum_u64(role.exchanges_deferred)?;
    let arrival_drains = comm.allreduce_sum_u64(role.arrival_drains)?;
    let outer_steps = comm.allreduce_sum_u64(role.outer_steps)?;
    let replica_error = comm.allreduce_max_f64(role.replica_error.unwrap_or(0.0))?;
    let row = RankTotals::of(role, comm.p2p_messages()).to_row();
    let rows = comm.gather_f64s(0, &row)?;
    Ok(Gathered {
        ranks: rows.map(|rows| rows.iter().map(|r| RankTotals::from_row(r)).collect()),
        deferred,
        arrival_drains,
        outer_steps,
        replica_error,
    })
}

/// The model to evaluate: the single server's, allreduce rank 0's, or the average of the
/// gssp group servers' replicas, each assembled from its shards' ranges with sharded
/// servers (collective over the servers; `n` the model's parameters).
fn models_to_evaluate(
    ctx: &RunContext<'_>,
    n: usize,
    snapshots: Snapshots,
    final_weights: Option<Vec<f32>>,
) -> Result<Replicas> {
    let layout = ctx.layout;
    let (groups, shards) = (layout.servers.len(), layout.shards_per_group());
    match ctx.comms.servers.as_ref() {
        Some(sc) if groups > 1 || shards > 1 => {
            let range = layout.served_range(ctx.comm.rank(), n);
            let part = (groups, range, n);
            exchange::average_replicas(sc, part, snapshots, final_weights)
        }
        _ => Ok(Replicas {
            snapshots: snapshots.taken,
            final_weights,
        }),
    }
}

/// The run's size: ranks, workers, epochs (of all workers together), iterations, wall time.
fn run_totals(ctx: &RunContext<'_>, ranks: &[RankTotals]) -> RunTotals {
    let cfg = ctx.cfg;
    let iterations: f64 = ranks.iter().map(|r| r.iterations).sum();
    let epochs = if cfg.sync.strategy().counts_epochs_collectively() {
        iterations * cfg.optim.batch_size as f64 / ctx.corpus.train_len() as f64
    } else {
        ranks.iter().map(|r| r.epoch).fold(0.0, f64::max)
    };
    RunTotals {
        ranks: ctx.comm.size(),
        workers: ranks.iter().filter(|r| r.worker > 0.0).count(),
        epochs,
        iterations: iterations as u64,
        wall_s: ranks.iter().map(|r| r.wall_s).fold(0.0, f64::max),
    }
}

/// Evaluates every snapshot and the final model into eval.csv (rank 0), writes the test
/// translations of a text model and exports the final model with the batch-norm
/// statistics re-estimated for it.
fn evaluate<B: Backend>(
    ctx: &RunContext<'_>,
    step: &mut ComputeStep<B>,
    models: Replicas,
    totals: &RunTotals,
) -> Result<Vec<EvalRow>> {
    let (cfg, run, corpus) = (ctx.cfg, ctx.run, ctx.corpus);
    let final_weights = models.final_weights.context("rank 0 holds no model")?;
    let mut evaluator = Evaluator::with_bn_calibration(corpus, &step.net, cfg.run.seed);
    let mut eval_log = run.csv::<EvalRow>("eval.csv")?;
    let mut evals = Vec::new();
    for (row, weights) in Snapshots::distinct(models.snapshots) {
        step.net.params_from_host(&weights);
        let ev = evaluator.evaluate(&mut step.net, corpus)?;
        let row = ev.row(row.time_s, row.epoch, row.iteration);
        eval_log.push(&row)?;
        evals.push(row);
    }
    step.net.params_from_host(&final_weights);
    let ev = evaluator.evaluate_final(&mut step.net, corpus)?;
    let last = ev.row(totals.wall_s, totals.epochs, totals.iterations);
    eval_log.push(&last)?;
    eval_log.flush()?;
    evals.push(last);
    log::info!("final model: {}", eval_figures(&last));
    write_translations(run, &ev)?;
    export_model(cfg, run, &step.net)?;
    Ok(evals)
}

/// The summary: the figures every mode has, and those of the workers, servers and
/// exchanges of this one (`None` where a mode has none).
fn summarize<B: Backend>(
    ctx: &RunContext<'_>,
    step: &ComputeStep<B>,
    ranks: &[RankTotals],
    gathered: &Gathered,
    totals: RunTotals,
    evals: &[EvalRow],
) -> Summary {
    let (cfg, layout) = (ctx.cfg, ctx.layout);
    let per_server = |f: fn(&RankTotals) -> f64| -> Vec<f64> {
        layout.servers.iter().map(|&r| f(&ranks[r])).collect()
    };
    let servers = || layout.servers.iter().map(|&r| &ranks[r]);
    let pushes: f64 = servers().map(|r| r.pushes).sum();
    let has_servers = !layout.servers.is_empty();
    let mode = cfg.sync.strategy();
    let (exchanges, reports) = (mode.exchanges(), mode.reports());
    let exchanged = exchanges && layout.servers.len() > 1;
    let worker_waits: Vec<f64> = ranks
        .iter()
        .filter(|r| r.worker > 0.0)
        .map(|r| r.wait_fraction)
        .collect();
    let sum = |f: fn(&RankTotals) -> f64| ranks.iter().map(f).sum::<f64>();
    let common = Summary::new(cfg, step.net.name(), totals, evals);
    Summary {
        mean_wait_fraction: Some(
            worker_waits.iter().sum::<f64>() / worker_waits.len().max(1) as f64,
        ),
        worker_wait_fractions: Some(worker_waits),
        bytes_sent: Some(sum(|r| r.bytes_sent) as u64),
        bytes_inter_group: Some(sum(|r| r.bytes_inter_group) as u64),
        p2p_messages_on_world: Some(sum(|r| r.p2p_on_world) as u64),
        replica_max_error: reports.replica_error.then_some(gathered.replica_error),
        exchanges_deferred: exchanges.then_some(gathered.deferred),
        arrival_drains: exchanges.then_some(gathered.arrival_drains),
        outer_steps: reports.outer_steps.then_some(gathered.outer_steps),
        server_busy_fractions: has_servers.then(|| per_server(|r| r.busy_fraction)),
        server_busy_ms_per_push: has_servers.then(|| per_server(|r| r.busy_ms_per_push)),
        mean_push_staleness: has_servers
            .then(|| servers().map(|r| r.staleness_sum).sum::<f64>() / pushes.max(1.0)),
        exchange_shares_of_busy: exchanged.then(|| per_server(|r| r.exchange_share)),
        exchange_shares_of_busy_cpu: exchanged.then(|| per_server(|r| r.exchange_cpu_share)),
        mean_exchange_ms: exchanged.then(|| per_server(|r| r.exchange_ms)),
        mean_exchange_cpu_ms: exchanged.then(|| per_server(|r| r.exchange_cpu_ms)),
        ..common
    }
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
    /// Point-to-point messages this rank sent or received on the world communicator (every
    /// point-to-point message travels on a group's communicator, so 0).
    p2p_on_world: f64,
}

impl RankTotals {
    fn of(role: &RoleOutcome, p2p_on_world: u64) -> Self {
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
            p2p_on_world: p2p_on_world as f64,
        }
    }

    fn to_row(self) -> [f64; 16] {
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
            self.p2p_on_world,
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
            p2p_on_world: r[15],
        }
    }
}
