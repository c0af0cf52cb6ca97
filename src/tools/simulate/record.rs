//! What a simulated run leaves behind, as a run under mpirun leaves it: a `rank-<r>.csv`
//! per rank (times on the simulated clock), the snapshots evaluated into `eval.csv`, the
//! final model exported, and `summary.json` (its `clock` says `simulated`).

use anyhow::{Context, Result};

use crate::compute::model::Trainable;
use crate::compute::workload::{Corpus, Evaluator, Model};
use crate::config::Config;
use crate::runtime::single::{eval_figures, export_model};
use crate::runtime::worker::WorkerStats;
use crate::telemetry::{CsvLog, EvalRow, RunDir, RunTotals, ServerRow, Snapshots, Summary};
use crate::telemetry::{WorkerLog, WorkerRow};

/// The logs of a simulated run's ranks and the snapshots of its model.
pub struct Recorder {
    /// Each worker's log and totals, in worker order.
    logs: Vec<WorkerLog>,
    pub stats: Vec<WorkerStats>,
    /// Each server's log, in server order.
    servers: Vec<CsvLog<ServerRow>>,
    pub snapshots: Snapshots,
}

impl Recorder {
    /// Logs for the workers of world ranks `workers` and the servers of world ranks
    /// `servers`, in `run`.
    pub fn new(cfg: &Config, run: &RunDir, workers: &[usize], servers: &[usize]) -> Result<Self> {
        let logs = workers
            .iter()
            .map(|&r| run.worker_log(r, cfg.run.log_every))
            .collect::<Result<Vec<_>>>()?;
        let servers = servers
            .iter()
            .map(|&r| run.csv::<ServerRow>(&format!("rank-{r}.csv")))
            .collect::<Result<Vec<_>>>()?;
        Ok(Recorder {
            stats: vec![WorkerStats::default(); logs.len()],
            logs,
            servers,
            snapshots: Snapshots::new(cfg.run.snapshot_every_s),
        })
    }

    /// Worker `w`'s row, counted into its totals.
    pub fn worker(&mut self, w: usize, row: WorkerRow) -> Result<()> {
        self.stats[w].record(&mut self.logs[w], row)
    }

    /// Server `s`'s row (every `run.log_every` pushes, as its process logs).
    pub fn server(&mut self, s: usize, row: &ServerRow) -> Result<()> {
        self.servers[s].push(row)
    }

    /// Flushes every log; each worker's totals end at `wall_s`.
    pub fn close(&mut self, wall_s: f64) -> Result<()> {
        for (log, stats) in self.logs.iter_mut().zip(&mut self.stats) {
            log.flush()?;
            stats.wall_s = wall_s;
        }
        for log in &mut self.servers {
            log.flush()?;
        }
        Ok(())
    }

    /// Each worker's share of the run spent waiting.
    pub fn wait_fractions(&self) -> Vec<f64> {
        self.stats.iter().map(WorkerStats::wait_fraction).collect()
    }
}

/// Evaluates the snapshots and `final_weights` on `net` (batch-norm statistics re-estimated
/// for each, as a run's rank 0 does), writes `eval.csv`, exports the final model and
/// returns the evaluation rows (the final one last, at `totals`).
pub fn evaluate(
    cfg: &Config,
    run: &RunDir,
    corpus: &Corpus,
    net: &mut Model,
    (snapshots, final_weights): (Snapshots, &[f32]),
    totals: &RunTotals,
) -> Result<Vec<EvalRow>> {
    let mut evaluator = Evaluator::with_bn_calibration(corpus, net, cfg.run.seed);
    let mut eval_log = run.csv::<EvalRow>("eval.csv")?;
    let mut evals = Vec::new();
    for (row, weights) in Snapshots::distinct(snapshots.taken) {
        net.params_from_host(&weights);
        let ev = evaluator.evaluate(net, corpus)?;
        let row = ev.row(row.time_s, row.epoch, row.iteration);
        eval_log.push(&row)?;
        evals.push(row);
    }
    net.params_from_host(final_weights);
    let ev = evaluator.evaluate_final(net, corpus)?;
    let last = ev.row(totals.wall_s, totals.epochs, totals.iterations);
    eval_log.push(&last)?;
    eval_log.flush()?;
    evals.push(last);
    log::info!("final model: {}", eval_figures(&last));
    export_model(cfg, run, net)?;
    Ok(evals)
}

/// The summary every mode has, marked as the simulated clock's, with the workers' waits.
pub fn summary(
    cfg: &Config,
    net: &Model,
    totals: RunTotals,
    evals: &[EvalRow],
    recorder: &Recorder,
) -> Summary {
    let waits = recorder.wait_fractions();
    let sent: u64 = recorder.stats.iter().map(|s| s.bytes_sent).sum();
    Summary {
        clock: crate::telemetry::SIMULATED.to_string(),
        mean_wait_fraction: Some(waits.iter().sum::<f64>() / waits.len().max(1) as f64),
        worker_wait_fractions: Some(waits),
        bytes_sent: Some(sent),
        bytes_inter_group: Some(0),
        p2p_messages_on_world: Some(0),
        ..Summary::new(cfg, net.name(), totals, evals)
    }
}

/// Writes `summary.json`.
pub fn write_summary(run: &RunDir, summary: &Summary) -> Result<()> {
    run.write_json("summary.json", summary).context("summary")
}

/// The servers' figures in `summary`: each one's busy share of the `trained_s` seconds of
/// training and busy milliseconds per push, and the mean staleness of every push.
pub fn add_servers(
    summary: &mut Summary,
    servers: &[super::servers::ServerTotals],
    trained_s: f64,
) {
    let pushes: u64 = servers.iter().map(|s| s.pushes).sum();
    let staleness: u64 = servers.iter().map(|s| s.staleness_sum).sum();
    summary.server_busy_fractions = Some(
        servers
            .iter()
            .map(|s| (s.busy_s / trained_s.max(1e-9)).min(1.0))
            .collect(),
    );
    summary.server_busy_ms_per_push = Some(
        servers
            .iter()
            .map(|s| 1e3 * s.busy_s / s.pushes.max(1) as f64)
            .collect(),
    );
    summary.mean_push_staleness = Some(staleness as f64 / pushes.max(1) as f64);
}
