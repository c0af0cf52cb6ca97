//! The simulator against measured runs: what a run directory says about its workers'
//! speeds and its setup (the simulator's inputs) and about its images per second and
//! waits (what the simulator predicts). `gssp plan --validate RUN_DIR...` compares them
//! and can store the runs as a small fixture (`--save`), which the tests check again.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{collective, servers, Outcome, Workload};
use crate::config::modes::Simulation;
use crate::config::{Config, Distribution, Precision, SyncMode};
use crate::protocol::costmodel::CostModel;

/// A measured run, reduced to what the simulator takes and what it predicts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeasuredRun {
    /// The size and the run directory's name (the bench variant): `16-workers/gssp-gdtopk`.
    pub name: String,
    /// Runs (seeds) averaged into this one ([`MeasuredRun::mean`]).
    #[serde(default = "one")]
    pub seeds: usize,
    pub mode: SyncMode,
    pub batch: usize,
    pub params: usize,
    /// Workers (indices into `times`) of each server; empty for collective modes.
    pub groups: Vec<Vec<usize>>,
    /// SSP bound of each server, as in `groups` (layout.json's; `"auto"` gives each group
    /// its own); empty for collective modes.
    pub staleness: Vec<usize>,
    pub local_steps: usize,
    /// async-localsgd: each worker's local steps per push, as in `times` (layout.json's).
    #[serde(default)]
    pub worker_local_steps: Vec<usize>,
    pub delay_compensation: bool,
    /// Its workers computed a step ahead (`sync.overlap`).
    #[serde(default)]
    pub overlap: bool,
    /// Server ranks per group (`sync.shards`).
    #[serde(default = "one")]
    pub shards: usize,
    /// The server ranks sat beside workers, a worker to a node (`cluster.distribution =
    /// "cyclic"` over `cluster.nodes` = the workers), sharing their links.
    #[serde(default)]
    pub colocated: bool,
    /// What its workers' pushes and its servers' replies carried (`compression.push`,
    /// `compression.reply`).
    #[serde(default)]
    pub push: Precision,
    #[serde(default)]
    pub reply: Precision,
    pub exchange_bytes: f64,
    pub exchange_every: usize,
    /// Each worker's measured seconds per iteration outside waits (compute and push): the
    /// mean, or with transient stragglers the median, which sees through the spells.
    pub times: Vec<f64>,
    /// When each worker (as in `times`) began its first iteration, seconds after the
    /// profiling: the server hands out the first weights one worker after another.
    #[serde(default)]
    pub start_s: Vec<f64>,
    /// Transient stragglers of the run's emulation (`[heterogeneity]`): each iteration's
    /// probability of a spell and its slowdown (0 and 1: none).
    #[serde(default)]
    pub straggler_prob: f64,
    #[serde(default = "no_slowdown")]
    pub straggler_factor: f64,
    /// Measured server busy seconds per push (mean over servers), when there are servers.
    pub server_s_per_push: Option<f64>,
    /// Seconds of gssp's profiling at the start of the run, counted in `wall_s` (the run's
    /// clock starts with it) but spent before any worker trains (layout.json's
    /// `profile_cost_s`; 0 for the other modes).
    #[serde(default)]
    pub profile_s: f64,
    pub wall_s: f64,
    pub images_per_s: f64,
    pub mean_wait_fraction: f64,
    /// A run whose batches followed speed (`sync.balance.batches = "speed"`): the bounds of
    /// its cut. Its `times` are then each worker's at the mean batch (its compute per
    /// sample times the mean batch), and the simulator cuts them as the run did.
    #[serde(default)]
    pub balance_bounds: Option<(usize, usize)>,
}

fn one() -> usize {
    1
}

fn no_slowdown() -> f64 {
    1.0
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
    #[serde(default)]
    staleness: Vec<usize>,
    #[serde(default)]
    profile_cost_s: Option<f64>,
    #[serde(default)]
    local_steps: Vec<usize>,
    /// Each group's further shards (empty: one server rank a group).
    #[serde(default)]
    shards: Vec<Vec<usize>>,
}

fn read<T: serde::de::DeserializeOwned>(path: &Path) -> anyhow::Result<T> {
    use anyhow::Context;
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_str(&text)
        .with_context(|| format!("{}: not the expected JSON", path.display()))
}

/// What a worker's `rank-<r>.csv` gives the simulator: its seconds per iteration outside
/// waits (the mean, or the median where the run had transient stragglers, `median`, whose
/// spells the simulator draws itself), and when its first iteration began, seconds after
/// `profile_s` (the first weights' arrival). With `at_batch`, each iteration's compute is
/// taken at that batch, in proportion to its samples (a run whose batches followed speed).
fn worker_figures(
    path: &Path,
    (median, at_batch): (bool, Option<usize>),
    profile_s: f64,
) -> anyhow::Result<(f64, f64)> {
    use anyhow::{bail, Context};
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let log = crate::tools::report::read::parse_rank_log(&text)
        .with_context(|| format!("{}", path.display()))?;
    let crate::tools::report::read::RankLog::Worker(rows) = log else {
        bail!("{}: a server's log, not a worker's", path.display());
    };
    let Some(first) = rows.first() else {
        bail!("{}: no iterations", path.display());
    };
    let start = (first.time_s - first.compute_s - first.wait_s - first.comm_s - profile_s).max(0.0);
    let compute = |r: &crate::tools::report::read::WorkerIter| match at_batch {
        Some(b) if r.batch > 0 => r.compute_s * b as f64 / r.batch as f64,
        _ => r.compute_s,
    };
    let times: Vec<f64> = rows.iter().map(|r| compute(r) + r.comm_s).collect();
    let per_iteration = if median {
        crate::protocol::grouping::persistent_time(&times)
    } else {
        times.iter().sum::<f64>() / times.len() as f64
    };
    Ok((per_iteration, start))
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
        let h = &cfg.heterogeneity;
        let spells = h.straggler_prob > 0.0 && h.straggler_factor > 1.0;
        let staleness = if layout.staleness.len() == groups.len() {
            layout.staleness.clone()
        } else {
            vec![cfg.sync.gssp.staleness.bound().unwrap_or(0); groups.len()]
        };
        let profile_s = layout.profile_cost_s.unwrap_or(0.0);
        let mean_batch = cfg.optim.batch_size;
        let balance = &cfg.sync.balance;
        let balance_bounds = (balance.batches == crate::config::BatchSplit::Speed)
            .then(|| balance.balanced_bounds(mean_batch));
        let at_batch = balance_bounds.map(|_| mean_batch);
        let (times, start_s): (Vec<f64>, Vec<f64>) = workers
            .iter()
            .map(|r| {
                let csv = dir.join(format!("rank-{r}.csv"));
                worker_figures(&csv, (spells, at_batch), profile_s)
            })
            .collect::<anyhow::Result<Vec<(f64, f64)>>>()?
            .into_iter()
            .unzip();
        let params = super::model_params(&cfg).map_err(|e| anyhow::anyhow!(e))?;
        let cost = CostModel::new(&cfg, params);
        let variant = dir
            .file_name()
            .map_or_else(|| dir.display().to_string(), |s| s.to_string_lossy().into());
        Ok(MeasuredRun {
            name: format!("{}-workers/{variant}", times.len()),
            seeds: 1,
            mode: cfg.sync.mode,
            batch: cfg.optim.batch_size,
            params,
            groups,
            staleness,
            local_steps: cfg.sync.localsgd.local_steps,
            worker_local_steps: layout.local_steps.clone(),
            delay_compensation: cfg.optim.delay_compensation > 0.0,
            overlap: cfg.sync.overlap,
            shards: layout.shards.first().map_or(1, |s| s.len() + 1),
            colocated: cfg.cluster.distribution == Distribution::Cyclic
                && cfg.cluster.nodes == times.len(),
            push: cfg.compression.push,
            reply: cfg.compression.reply,
            exchange_bytes: cost.exchange_bytes,
            exchange_every: cost.exchange_every,
            times,
            start_s,
            straggler_prob: if spells { h.straggler_prob } else { 0.0 },
            straggler_factor: if spells { h.straggler_factor } else { 1.0 },
            server_s_per_push: summary.server_busy_ms_per_push.as_deref().and_then(|v| {
                (!v.is_empty()).then(|| 1e-3 * v.iter().sum::<f64>() / v.len() as f64)
            }),
            profile_s,
            wall_s: summary.wall_s,
            images_per_s: summary.images_per_s,
            mean_wait_fraction: summary.mean_wait_fraction.unwrap_or(0.0),
            balance_bounds,
        })
    }

    /// The mean of runs of one variant and size that differ only in their seed: worker
    /// seconds per iteration, server time per push and the measured figures averaged,
    /// so that one run's scheduling noise does not decide the comparison.
    pub fn mean(runs: &[MeasuredRun]) -> anyhow::Result<MeasuredRun> {
        let Some(first) = runs.first() else {
            anyhow::bail!("no runs to average");
        };
        for r in runs {
            let same = r.name == first.name
                && r.mode == first.mode
                && r.groups == first.groups
                && r.times.len() == first.times.len()
                && r.staleness == first.staleness
                && r.overlap == first.overlap
                && r.shards == first.shards
                && r.straggler_prob == first.straggler_prob
                && r.straggler_factor == first.straggler_factor
                && r.balance_bounds == first.balance_bounds;
            if !same {
                anyhow::bail!(
                    "{} and {} differ in more than their seed (mode, groups, bounds, overlap, spells or workers)",
                    first.name,
                    r.name
                );
            }
        }
        let n = runs.len() as f64;
        let mean = |f: &dyn Fn(&MeasuredRun) -> f64| runs.iter().map(f).sum::<f64>() / n;
        let server_s_per_push = runs
            .iter()
            .map(|r| r.server_s_per_push)
            .collect::<Option<Vec<f64>>>()
            .map(|v| v.iter().sum::<f64>() / n);
        Ok(MeasuredRun {
            seeds: runs.iter().map(|r| r.seeds).sum(),
            times: (0..first.times.len())
                .map(|w| mean(&|r| r.times[w]))
                .collect(),
            start_s: (0..first.start_s.len())
                .map(|w| mean(&|r| r.start_s.get(w).copied().unwrap_or(0.0)))
                .collect(),
            server_s_per_push,
            profile_s: mean(&|r| r.profile_s),
            wall_s: mean(&|r| r.wall_s),
            images_per_s: mean(&|r| r.images_per_s),
            mean_wait_fraction: mean(&|r| r.mean_wait_fraction),
            ..first.clone()
        })
    }

    /// Runs grouped by name (variant and size) and averaged, in order of first appearance.
    pub fn means(runs: &[MeasuredRun]) -> anyhow::Result<Vec<MeasuredRun>> {
        let mut names: Vec<String> = Vec::new();
        for r in runs {
            if !names.contains(&r.name) {
                names.push(r.name.clone());
            }
        }
        names
            .iter()
            .map(|name| {
                let same: Vec<MeasuredRun> =
                    runs.iter().filter(|r| &r.name == name).cloned().collect();
                MeasuredRun::mean(&same)
            })
            .collect()
    }
}

/// The figures of the machine the runs were measured on that the runs do not carry:
/// per-message latency, link bandwidth, and the spacing of the starts of workers released
/// at once ([`Workload::burst_s`]: fitted; on one node with far more ranks than cores,
/// the server logs show the released ranks' next pushes arriving about that far apart).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    pub latency_s: f64,
    pub bytes_per_s: f64,
    #[serde(default)]
    pub burst_s: f64,
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
    let cost = cost_model(run, machine);
    // A worker's measured time holds the sending of its whole push (its rank CSV's
    // `comm_s`); with shards the simulator sends the shares before the last itself
    // ([`servers::simulate`]), so they come out of the time here, not counted twice.
    let other_shares_s = cost.push_s() * (1.0 - 1.0 / run.shards.max(1) as f64);
    let work = Workload {
        times: run
            .times
            .iter()
            .map(|t| (t - other_shares_s).max(0.0))
            .collect(),
        straggler_prob: run.straggler_prob,
        straggler_factor: run.straggler_factor,
        batch: run.batch,
        burst_s: machine.burst_s,
        start_s: run.start_s.clone(),
    };
    // The run cut these speeds when it started: the simulator cuts them the same way.
    let work = match run.balance_bounds.map(|b| work.balanced(b)) {
        Some(Ok(even)) => even,
        _ => work,
    };
    // Workers train after the profiling, and the run's clock counts it: its images per
    // second and wait fractions are over the whole of `wall_s`.
    let horizon = (run.wall_s - run.profile_s).max(0.0);
    let trained = horizon / run.wall_s.max(f64::MIN_POSITIVE);
    let outcome: Outcome = match run.mode.strategy().simulation() {
        Simulation::Collective { local_steps } => {
            let steps = if local_steps { run.local_steps } else { 1 };
            collective::simulate(steps, &work, &cost, horizon, 1)
        }
        Simulation::Servers { round } => {
            let scheme = servers_of(run, round);
            match run.colocated {
                true => servers::colocated(&scheme, &work, &cost, horizon, 1),
                false => servers::simulate(&scheme, &work, &cost, horizon, 1),
            }
        }
    };
    Check {
        name: run.name.clone(),
        measured_images_per_s: run.images_per_s,
        predicted_images_per_s: outcome.images_per_s * trained,
        measured_wait_fraction: run.mean_wait_fraction,
        predicted_wait_fraction: trained * outcome.wait_fractions.iter().sum::<f64>()
            / n.max(1) as f64,
    }
}

/// The cost model of `run` on `machine`: its messages' bytes at the machine's link, and
/// the apply rate left of its measured server time per push once the transfers and the
/// exchange's share are taken out.
fn cost_model(run: &MeasuredRun, machine: &Machine) -> CostModel {
    let shards = run.shards.max(1) as f64;
    let (push_bytes, reply_bytes) = (run.push.bytes(run.params), run.reply.bytes(run.params));
    let p = run.params as f64;
    // A shard's measured time per push moves, applies and exchanges its range alone.
    let transfer = (push_bytes + reply_bytes) / shards / machine.bytes_per_s;
    // The measured server time per push holds both transfers and the apply (and, for gssp,
    // the exchange's share): the apply is what is left.
    let exchange_share = if run.groups.len() > 1 {
        2.0 * (run.groups.len() - 1) as f64 * run.exchange_bytes
            / machine.bytes_per_s
            / run.exchange_every as f64
            / shards
    } else {
        0.0
    };
    let apply_s = run
        .server_s_per_push
        .map_or(0.0, |s| (s - transfer - exchange_share).max(0.0));
    CostModel {
        params: run.params,
        latency_s: machine.latency_s,
        bytes_per_s: machine.bytes_per_s,
        apply_s_per_param: apply_s * shards / p / if run.delay_compensation { 2.0 } else { 1.0 },
        exchange_bytes: run.exchange_bytes,
        push_bytes,
        reply_bytes,
        exchange_every: run.exchange_every,
        // The simulator takes each worker's local steps from its scheme.
        local_steps: (1, false),
    }
}

/// The servers of `run` as the simulator takes them: its groups (one of every worker
/// where it recorded none), each bounded as its mode's servers bound staleness, stepping on
/// each round's mean with `round`.
fn servers_of(run: &MeasuredRun, round: bool) -> servers::PsScheme {
    let groups = if run.groups.is_empty() {
        vec![(0..run.times.len()).collect()]
    } else {
        run.groups.clone()
    };
    let bound = run.mode.strategy().bound();
    let bounds = (0..groups.len())
        .map(|g| bound.of_group(run.staleness.get(g).copied().unwrap_or(0)))
        .collect();
    servers::PsScheme {
        groups,
        bounds,
        round,
        extra_apply_passes: if run.delay_compensation { 1.0 } else { 0.0 },
        local_steps: run.worker_local_steps.clone(),
        overlap: run.overlap,
        shards: run.shards,
        ..servers::PsScheme::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(seed_images: f64, times: Vec<f64>) -> MeasuredRun {
        MeasuredRun {
            name: "4-workers/gssp".into(),
            seeds: 1,
            mode: SyncMode::Gssp,
            batch: 8,
            params: 1000,
            groups: vec![vec![0, 1], vec![2, 3]],
            staleness: vec![0, 0],
            local_steps: 8,
            worker_local_steps: Vec::new(),
            delay_compensation: false,
            overlap: false,
            shards: 1,
            colocated: false,
            push: Precision::F32,
            reply: Precision::F32,
            exchange_bytes: 80.0,
            exchange_every: 4,
            times,
            start_s: vec![0.0; 4],
            straggler_prob: 0.0,
            straggler_factor: 1.0,
            server_s_per_push: Some(1e-4 * seed_images / 100.0),
            profile_s: 0.0,
            wall_s: 60.0,
            images_per_s: seed_images,
            mean_wait_fraction: seed_images / 1000.0,
            balance_bounds: None,
        }
    }

    #[test]
    fn seeds_average_worker_times_and_measured_figures() {
        let a = run(100.0, vec![0.01, 0.02, 0.03, 0.04]);
        let b = run(300.0, vec![0.03, 0.04, 0.05, 0.06]);
        let m = MeasuredRun::mean(&[a, b]).unwrap();
        assert_eq!(m.seeds, 2);
        assert_eq!(m.images_per_s, 200.0);
        assert!((m.mean_wait_fraction - 0.2).abs() < 1e-12);
        assert_eq!(m.server_s_per_push, Some(2e-4));
        for (got, want) in m.times.iter().zip([0.02, 0.03, 0.04, 0.05]) {
            assert!((got - want).abs() < 1e-12, "{got} != {want}");
        }
    }

    #[test]
    fn profiling_and_late_first_starts_are_time_the_workers_did_not_train() {
        let machine = Machine {
            latency_s: 1e-6,
            bytes_per_s: 10e9,
            burst_s: 0.0,
        };
        let steady = check(&run(100.0, vec![0.01; 4]), &machine);
        // A third of the clock spent profiling: a third fewer images per second.
        let mut profiled = run(100.0, vec![0.01; 4]);
        profiled.profile_s = 20.0;
        let c = check(&profiled, &machine);
        let ratio = c.predicted_images_per_s / steady.predicted_images_per_s;
        assert!((ratio - 2.0 / 3.0).abs() < 0.01, "{ratio}");
        // Worker 3 got its first weights 6 s in: 6 s of its 60 waiting, and as many for
        // worker 2, held by the bound 0 of their group; in the mean over four workers, 0.05.
        let mut late = run(100.0, vec![0.01; 4]);
        late.start_s[3] = 6.0;
        let c = check(&late, &machine);
        let extra = c.predicted_wait_fraction - steady.predicted_wait_fraction;
        assert!((extra - 0.05).abs() < 0.002, "{extra}");
        // An allreduce's first round waits for the late worker: every worker waits 6 s.
        let collective = |start: f64| {
            let mut r = run(100.0, vec![0.01; 4]);
            r.mode = SyncMode::Allreduce;
            r.groups.clear();
            r.start_s[3] = start;
            check(&r, &machine).predicted_wait_fraction
        };
        let extra = collective(6.0) - collective(0.0);
        assert!((extra - 0.1).abs() < 0.002, "{extra}");
    }

    /// One worker of 0.1 s an iteration measured (0.06 s computing, 0.04 s sending its
    /// push) and four shards, on a link where a whole message takes 0.04 s: the simulator
    /// sends three quarters of the push before the last shard takes its quarter (0.01 s)
    /// and answers with a quarter of the weights (0.01 s), so an iteration is 0.06 + 0.04
    /// + 0.02 = 0.12 s, 0.02 of it waiting; counting the measured push twice made it 0.15.
    #[test]
    fn a_sharded_runs_push_is_counted_once() {
        let machine = Machine {
            latency_s: 0.0,
            bytes_per_s: 1e5,
            burst_s: 0.0,
        };
        let mut sharded = run(100.0, vec![0.1]);
        sharded.groups = vec![vec![0]];
        sharded.staleness = vec![0];
        sharded.start_s = vec![0.0];
        sharded.shards = 4;
        let c = check(&sharded, &machine);
        assert!((c.predicted_images_per_s - 8.0 / 0.12).abs() < 1.0, "{c:?}");
        assert!(
            (c.predicted_wait_fraction - 0.02 / 0.12).abs() < 0.01,
            "{c:?}"
        );
    }

    #[test]
    fn runs_that_differ_beyond_their_seed_are_not_averaged() {
        let a = run(100.0, vec![0.01; 4]);
        let mut b = run(100.0, vec![0.01; 4]);
        b.groups = vec![vec![0, 1, 2], vec![3]];
        let err = MeasuredRun::mean(&[a.clone(), b]).unwrap_err().to_string();
        assert!(err.contains("differ in more than their seed"), "{err}");
        let mut c = a.clone();
        c.name = "8-workers/gssp".into();
        let means = MeasuredRun::means(&[a.clone(), c, a]).unwrap();
        assert_eq!(
            means
                .iter()
                .map(|m| (m.name.as_str(), m.seeds))
                .collect::<Vec<_>>(),
            [("4-workers/gssp", 2), ("8-workers/gssp", 1)]
        );
    }

    #[test]
    fn a_run_with_slow_spells_is_simulated_with_them_at_its_own_bounds() {
        // Two groups of two equal workers with 5x spells: at bound 0 each spell stalls its
        // partner; the run's bound of 4 rides most of them out; without the spells nobody
        // waits. The simulation must tell the three apart.
        let machine = Machine {
            latency_s: 1e-5,
            bytes_per_s: 1e10,
            burst_s: 0.0,
        };
        let mut spells = run(100.0, vec![0.01; 4]);
        spells.straggler_prob = 0.2;
        spells.straggler_factor = 5.0;
        let wait = |r: &MeasuredRun| check(r, &machine).predicted_wait_fraction;
        let steady = MeasuredRun {
            straggler_prob: 0.0,
            straggler_factor: 1.0,
            ..spells.clone()
        };
        let ridden = MeasuredRun {
            staleness: vec![4, 4],
            ..spells.clone()
        };
        assert!(wait(&steady) < 0.05, "{}", wait(&steady));
        assert!(wait(&spells) > 0.2, "{}", wait(&spells));
        assert!(
            wait(&ridden) < 0.6 * wait(&spells),
            "{} against {}",
            wait(&ridden),
            wait(&spells)
        );
        assert!(
            MeasuredRun::mean(&[spells.clone(), steady]).is_err(),
            "runs with and without spells are different setups"
        );
    }
}
