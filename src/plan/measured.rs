//! The simulator against measured runs: what a run directory says about its workers'
//! speeds and its setup (the simulator's inputs) and about its images per second and
//! waits (what the simulator predicts). `gssp plan --validate RUN_DIR...` compares them
//! and can store the runs as a small fixture (`--save`), which the tests check again.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{collective, ps, Outcome, Workload};
use crate::config::{Config, SyncMode};
use crate::costmodel::CostModel;

/// A measured run, reduced to what the simulator takes and what it predicts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeasuredRun {
    /// The run directory's name (the bench variant, e.g. `gssp-gdtopk`), with its parent's.
    pub name: String,
    pub mode: SyncMode,
    pub batch: usize,
    pub params: usize,
    /// Workers (indices into `times`) of each server; empty for collective modes.
    pub groups: Vec<Vec<usize>>,
    pub staleness: Option<usize>,
    pub local_steps: usize,
    pub delay_compensation: bool,
    pub exchange_bytes: f64,
    pub exchange_every: usize,
    /// Each worker's measured seconds per iteration outside waits (compute and push).
    pub times: Vec<f64>,
    /// Measured server busy seconds per push (mean over servers), when there are servers.
    pub server_s_per_push: Option<f64>,
    pub wall_s: f64,
    pub images_per_s: f64,
    pub mean_wait_fraction: f64,
}

#[derive(Deserialize)]
struct Summary {
    wall_s: f64,
    images_per_s: f64,
    mean_wait_fraction: Option<f64>,
    server_busy_ms_per_push: Option<Vec<f64>>,
}

#[derive(Deserialize)]
struct Layout {
    servers: Vec<usize>,
    groups: Vec<Vec<usize>>,
}

fn read<T: serde::de::DeserializeOwned>(path: &Path) -> anyhow::Result<T> {
    use anyhow::Context;
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_str(&text)
        .with_context(|| format!("{}: not the expected JSON", path.display()))
}

/// Mean seconds per iteration outside waits in a worker's `rank-<r>.csv`.
fn worker_seconds_per_iteration(path: &Path) -> anyhow::Result<f64> {
    use anyhow::{bail, Context};
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let log = crate::report::read::parse_rank_log(&text)
        .with_context(|| format!("{}", path.display()))?;
    let crate::report::read::RankLog::Worker(rows) = log else {
        bail!("{}: a server's log, not a worker's", path.display());
    };
    if rows.is_empty() {
        bail!("{}: no iterations", path.display());
    }
    Ok(rows.iter().map(|r| r.compute_s + r.comm_s).sum::<f64>() / rows.len() as f64)
}

impl MeasuredRun {
    /// Reads a finished run directory (config.toml, summary.json, layout.json, rank CSVs).
    pub fn from_dir(dir: &Path) -> anyhow::Result<MeasuredRun> {
        let cfg = Config::load(&dir.join("config.toml"), &[])?;
        let summary: Summary = read(&dir.join("summary.json"))?;
        let layout: Layout = read(&dir.join("layout.json"))?;
        let workers: Vec<usize> = layout.groups.iter().flatten().cloned().collect();
        let index = |rank: usize| workers.iter().position(|&r| r == rank).unwrap_or(0);
        let groups = if layout.servers.is_empty() {
            Vec::new()
        } else {
            layout
                .groups
                .iter()
                .map(|g| g.iter().map(|&r| index(r)).collect())
                .collect()
        };
        let times = workers
            .iter()
            .map(|r| worker_seconds_per_iteration(&dir.join(format!("rank-{r}.csv"))))
            .collect::<anyhow::Result<Vec<f64>>>()?;
        let params = super::model_params(&cfg).map_err(|e| anyhow::anyhow!(e))?;
        let cost = CostModel::new(&cfg, params);
        let name = [dir.parent().and_then(|p| p.file_name()), dir.file_name()]
            .iter()
            .flatten()
            .map(|s| s.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("/");
        Ok(MeasuredRun {
            name,
            mode: cfg.sync.mode,
            batch: cfg.optim.batch_size,
            params,
            groups,
            staleness: cfg.sync.staleness.bound(),
            local_steps: cfg.sync.local_steps,
            delay_compensation: cfg.optim.delay_compensation > 0.0,
            exchange_bytes: cost.exchange_bytes,
            exchange_every: cost.exchange_every,
            times,
            server_s_per_push: summary.server_busy_ms_per_push.as_deref().and_then(|v| {
                (!v.is_empty()).then(|| 1e-3 * v.iter().sum::<f64>() / v.len() as f64)
            }),
            wall_s: summary.wall_s,
            images_per_s: summary.images_per_s,
            mean_wait_fraction: summary.mean_wait_fraction.unwrap_or(0.0),
        })
    }
}

/// The figures of the machine the runs were measured on that the runs do not carry:
/// per-message latency and link bandwidth.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    pub latency_s: f64,
    pub bytes_per_s: f64,
}

/// Predicted against measured figures of one run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Check {
    pub name: String,
    pub measured_images_per_s: f64,
    pub predicted_images_per_s: f64,
    pub measured_wait_fraction: f64,
    pub predicted_wait_fraction: f64,
}

impl Check {
    /// |predicted - measured| / measured images per second.
    pub fn images_error(&self) -> f64 {
        (self.predicted_images_per_s - self.measured_images_per_s).abs()
            / self.measured_images_per_s
    }

    /// |predicted - measured| / measured wait fraction.
    pub fn wait_error(&self) -> f64 {
        (self.predicted_wait_fraction - self.measured_wait_fraction).abs()
            / self.measured_wait_fraction.max(f64::MIN_POSITIVE)
    }
}

/// Simulates `run` from its measured inputs on `machine` for its wall time.
pub fn check(run: &MeasuredRun, machine: &Machine) -> Check {
    let n = run.times.len();
    let work = Workload {
        times: run.times.clone(),
        straggler_prob: 0.0,
        straggler_factor: 1.0,
        batch: run.batch,
    };
    let p = run.params as f64;
    let transfer = 2.0 * 4.0 * p / machine.bytes_per_s;
    // The measured server time per push holds both transfers and the apply (and, for gssp,
    // the exchange's share): the apply is what is left.
    let exchange_share = if run.groups.len() > 1 {
        2.0 * (run.groups.len() - 1) as f64 * run.exchange_bytes
            / machine.bytes_per_s
            / run.exchange_every as f64
    } else {
        0.0
    };
    let apply_s = run
        .server_s_per_push
        .map_or(0.0, |s| (s - transfer - exchange_share).max(0.0));
    let cost = CostModel {
        params: run.params,
        latency_s: machine.latency_s,
        bytes_per_s: machine.bytes_per_s,
        apply_s_per_param: apply_s / p / if run.delay_compensation { 2.0 } else { 1.0 },
        exchange_bytes: run.exchange_bytes,
        exchange_every: run.exchange_every,
    };
    let horizon = run.wall_s;
    let outcome: Outcome = match run.mode {
        SyncMode::Allreduce => collective::simulate(1, &work, &cost, horizon, 1),
        SyncMode::Localsgd => collective::simulate(run.local_steps, &work, &cost, horizon, 1),
        _ => {
            let scheme = ps::PsScheme {
                groups: if run.groups.is_empty() {
                    vec![(0..n).collect()]
                } else {
                    run.groups.clone()
                },
                bound: match run.mode {
                    SyncMode::Asp => None,
                    SyncMode::Bsp => Some(0),
                    _ => run.staleness,
                },
                round: run.mode == SyncMode::Bsp,
                extra_apply_passes: if run.delay_compensation { 1.0 } else { 0.0 },
            };
            ps::simulate(&scheme, &work, &cost, horizon, 1)
        }
    };
    Check {
        name: run.name.clone(),
        measured_images_per_s: run.images_per_s,
        predicted_images_per_s: outcome.images_per_s,
        measured_wait_fraction: run.mean_wait_fraction,
        predicted_wait_fraction: outcome.wait_fractions.iter().sum::<f64>() / n.max(1) as f64,
    }
}
