//! Whole-run benchmarks: each variant is its own `mpirun` job of this binary on one
//! config, with the same seed, data and learning-rate schedule; their summaries and
//! server logs become one table, printed and written as `bench.json`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::variants::Variant;

/// One row of the comparison table (`bench.json` holds a list of them).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchRow {
    /// The clock its runs' times are on (`wall`, or `simulated`: `--simulate`).
    #[serde(default = "wall_clock")]
    pub clock: String,
    pub mode: String,
    pub ranks: usize,
    pub time_to_target_s: Option<f64>,
    pub accuracy_at_budget: f64,
    pub final_test_loss: f64,
    pub mean_wait_fraction: f64,
    pub bytes_inter_group: u64,
    pub bytes_sent: u64,
    pub wall_s: f64,
    pub images_per_s: f64,
    pub epochs: f64,
    /// gssp: share of a group server's busy time (receive copy + apply + send + exchange)
    /// spent in the inter-group exchange, mean over the group servers.
    pub exchange_share_of_busy: Option<f64>,
    /// gssp: the same share on the group server where it was largest.
    pub max_exchange_share_of_busy: Option<f64>,
    /// gssp: the mean share in thread CPU time (without time the OS ran other ranks).
    pub exchange_share_of_busy_cpu: Option<f64>,
    /// Share of the run the server(s) are busy (receive copy + apply + send + exchange), mean
    /// over servers.
    pub server_busy_fraction: Option<f64>,
    /// Mean staleness of the pushes the server(s) applied (parameter-server modes).
    pub mean_push_staleness: Option<f64>,
    /// gssp: worst |replica - initial - all updates| after the final flush.
    pub replica_max_error: Option<f64>,
    /// `bench paper`: how many times faster gssp (dense) reached the target than this mode.
    pub gssp_speedup: Option<f64>,
    /// Seeds of the runs this row summarises (one per run).
    pub seeds: Vec<u64>,
    /// Time to target of each run, in `seeds` order (null: never). With several runs,
    /// `time_to_target_s` is their median, a run that never got there counting as slowest,
    /// and the other figures are means.
    pub time_to_target_s_runs: Vec<Option<f64>>,
    /// Runs of this row that diverged (a non-finite gradient or loss stopped them): their
    /// time to target counts as never, and the other figures are the means of the rest.
    #[serde(default)]
    pub diverged_runs: usize,
    pub run_dir: String,
}

/// A table written before rows said their clock: the machine's.
fn wall_clock() -> String {
    crate::telemetry::WALL.to_string()
}

/// Which clock a bench's jobs train on: under mpirun on this machine, one job at a time, or
/// on the simulated clock in one process each (`--simulate`; `burst_s` as `gssp train
/// --burst-us` says), `jobs` of them at once: a simulated run's times are the simulator's,
/// whatever runs beside it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Clock {
    Wall,
    Simulated { burst_s: f64, jobs: usize },
}

impl Clock {
    /// How many jobs may train at once on this clock.
    fn parallel_jobs(self) -> usize {
        match self {
            Clock::Wall => 1,
            Clock::Simulated { jobs, .. } => jobs.max(1),
        }
    }
}

/// The part of `summary.json` the table reads.
#[derive(Debug, Deserialize)]
struct SummaryIn {
    #[serde(default = "wall_clock")]
    clock: String,
    seed: u64,
    wall_s: f64,
    images_per_s: f64,
    epochs: f64,
    final_test_loss: f64,
    final_test_accuracy: f64,
    time_to_target_s: Option<f64>,
    mean_wait_fraction: Option<f64>,
    bytes_sent: Option<u64>,
    bytes_inter_group: Option<u64>,
    replica_max_error: Option<f64>,
    server_busy_fractions: Option<Vec<f64>>,
    mean_push_staleness: Option<f64>,
    exchange_shares_of_busy: Option<Vec<f64>>,
    exchange_shares_of_busy_cpu: Option<Vec<f64>>,
}

/// One training job of a benchmark.
pub struct Job<'a> {
    pub name: &'a str,
    pub config: &'a Path,
    /// World size under `mpirun`; `None` runs the binary directly (single mode).
    pub ranks: Option<usize>,
    pub overrides: &'a [String],
    pub dir: &'a Path,
    pub timeout_s: u64,
    pub clock: Clock,
}

/// Runs `job` into its (emptied) directory, with the environment `scripts/env.sh` gives
/// (root allowed, oversubscription, one BLAS thread a rank, its one-sided components);
/// its output goes to `dir/mpirun.log`. Fails, quoting the end of the output, if it fails.
pub fn launch(job: &Job<'_>) -> Result<()> {
    let exe = std::env::current_exe().context("cannot find the gssp binary")?;
    if !job.config.is_file() {
        bail!("--config: no such file {}", job.config.display());
    }
    let _ = std::fs::remove_dir_all(job.dir);
    std::fs::create_dir_all(job.dir)
        .with_context(|| format!("cannot create {}", job.dir.display()))?;
    let mut cmd = Command::new("timeout");
    cmd.arg(job.timeout_s.to_string());
    if let (Some(ranks), Clock::Wall) = (job.ranks, job.clock) {
        cmd.arg("mpirun").args([
            "-n",
            &ranks.to_string(),
            "--oversubscribe",
            "--bind-to",
            "none",
        ]);
    }
    cmd.arg(&exe)
        .arg("train")
        .arg("--config")
        .arg(job.config)
        .arg("--out")
        .arg(job.dir);
    if let (Some(ranks), Clock::Simulated { burst_s, .. }) = (job.ranks, job.clock) {
        cmd.arg("--simulate")
            .arg("--ranks")
            .arg(ranks.to_string())
            .arg("--burst-us")
            .arg((burst_s * 1e6).to_string());
    }
    for o in job.overrides {
        cmd.arg("--set").arg(o);
    }
    cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OPENBLAS_NUM_THREADS", "1")
        .env("RUST_LOG", "warn");
    if let Some(osc) = one_sided_components(
        std::env::var("OMPI_MCA_osc").ok().as_deref(),
        &ompi_info_text(),
    ) {
        cmd.env("OMPI_MCA_osc", osc);
    }
    eprintln!(
        "bench: {} on {} rank(s) ...",
        job.name,
        job.ranks.unwrap_or(1)
    );
    let t = Instant::now();
    let output = cmd
        .output()
        .context("cannot start mpirun (is OpenMPI installed?)")?;
    let log = job.dir.join("mpirun.log");
    std::fs::write(&log, [&output.stdout[..], &output.stderr[..]].concat()).ok();
    if !output.status.success() {
        bail!(
            "bench: {} failed ({}) after {:.0} s; see {}\n{}",
            job.name,
            output.status,
            t.elapsed().as_secs_f64(),
            log.display(),
            String::from_utf8_lossy(&output.stderr)
                .lines()
                .rev()
                .take(5)
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    Ok(())
}

/// Runs every variant of `config` (with `common` overrides) under mpirun, one after the
/// other, or on the simulated clock, as many at once as the clock allows, into
/// `out/<name>`; returns the table rows in the variants' order.
pub fn run_all(
    config: &Path,
    common: &[String],
    variants: &[Variant],
    out: &Path,
    (job_timeout_s, clock): (u64, Clock),
) -> Result<Vec<BenchRow>> {
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let run = |v: &Variant| run_one(config, common, v, out, (job_timeout_s, clock));
    let workers = clock.parallel_jobs().min(variants.len());
    if workers <= 1 {
        return variants.iter().map(run).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let done: Vec<std::sync::Mutex<Option<Result<BenchRow>>>> = variants
        .iter()
        .map(|_| std::sync::Mutex::new(None))
        .collect();
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(v) = variants.get(i) else { break };
                let row = run(v);
                if let Ok(mut slot) = done[i].lock() {
                    *slot = Some(row);
                }
            });
        }
    });
    done.into_iter()
        .zip(variants)
        .map(|(slot, v)| match slot.into_inner() {
            Ok(Some(row)) => row,
            _ => Err(anyhow::anyhow!("bench: {} did not run to its end", v.name)),
        })
        .collect()
}

/// Runs variant `v` into `out/<name>` and reads its row (a diverged run's row says so).
fn run_one(
    config: &Path,
    common: &[String],
    v: &Variant,
    out: &Path,
    (job_timeout_s, clock): (u64, Clock),
) -> Result<BenchRow> {
    let dir = out.join(&v.name);
    let overrides: Vec<String> = common.iter().chain(&v.overrides).cloned().collect();
    let t = Instant::now();
    let launched = launch(&Job {
        name: &v.name,
        config,
        ranks: Some(v.ranks),
        overrides: &overrides,
        dir: &dir,
        timeout_s: job_timeout_s,
        clock,
    });
    let row = match launched {
        Ok(()) => read_row(&v.name, v.ranks, &dir)?,
        Err(e) if diverged(&dir) => {
            eprintln!("bench: {} diverged: {e:#}", v.name);
            diverged_row(&v.name, v.ranks, config, &overrides, &dir)?
        }
        Err(e) => return Err(e),
    };
    eprintln!(
        "bench: {} done in {:.0} s: time to target {}, accuracy {:.2}%",
        v.name,
        t.elapsed().as_secs_f64(),
        fmt_opt(row.time_to_target_s),
        100.0 * row.accuracy_at_budget
    );
    Ok(row)
}

/// `ompi_info`'s output, or empty when it cannot run.
fn ompi_info_text() -> String {
    Command::new("ompi_info")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// The one-sided components for the jobs, as `scripts/env.sh` chooses them, so that the
/// bench measures the same exchange with or without it: OpenMPI 4's `sm,pt2pt` where it has
/// pt2pt (its default `osc/rdma` is an order of magnitude slower for the gssp exchange on
/// one node), unless the caller chose (`OMPI_MCA_osc` set: `None`, the jobs inherit it).
fn one_sided_components(chosen: Option<&str>, ompi_info: &str) -> Option<&'static str> {
    let has_pt2pt = ompi_info.lines().any(|l| l.contains("MCA osc: pt2pt"));
    (chosen.is_none() && has_pt2pt).then_some("sm,pt2pt")
}

/// Whether the run in `dir` stopped because its training diverged: a server names a
/// non-finite push (`sync::server`) before it aborts the job.
fn diverged(dir: &Path) -> bool {
    divergence(dir).is_some()
}

/// The log line of the run in `dir` that names its divergence, if it diverged.
pub(super) fn divergence(dir: &Path) -> Option<String> {
    let log = std::fs::read_to_string(dir.join("mpirun.log")).ok()?;
    log.lines()
        .find(|l| l.contains("pushed a non-finite"))
        .map(|l| l.trim().to_string())
}

/// The row of a run that diverged: its seed, and the time it reached the target before
/// that if it did (from its `eval.csv`); no other figure exists.
fn diverged_row(
    name: &str,
    ranks: usize,
    config: &Path,
    overrides: &[String],
    dir: &Path,
) -> Result<BenchRow> {
    let cfg = crate::config::Config::load(config, overrides)
        .with_context(|| format!("{}", config.display()))?;
    let evals = std::fs::read_to_string(dir.join("eval.csv")).unwrap_or_default();
    let reached = time_reaching(&evals, cfg.run.target_accuracy);
    Ok(BenchRow {
        clock: wall_clock(),
        mode: name.into(),
        ranks,
        time_to_target_s: reached,
        accuracy_at_budget: 0.0,
        final_test_loss: 0.0,
        mean_wait_fraction: 0.0,
        bytes_inter_group: 0,
        bytes_sent: 0,
        wall_s: 0.0,
        images_per_s: 0.0,
        epochs: 0.0,
        exchange_share_of_busy: None,
        max_exchange_share_of_busy: None,
        exchange_share_of_busy_cpu: None,
        server_busy_fraction: None,
        mean_push_staleness: None,
        replica_max_error: None,
        gssp_speedup: None,
        seeds: vec![cfg.run.seed],
        time_to_target_s_runs: vec![reached],
        diverged_runs: 1,
        run_dir: dir.display().to_string(),
    })
}

/// The first `time_s` of an `eval.csv` whose `test_accuracy` reaches `target`.
fn time_reaching(eval_csv: &str, target: f64) -> Option<f64> {
    crate::tools::report::read::parse_evals(eval_csv)
        .ok()?
        .into_iter()
        .find(|e| e.test_accuracy >= target)
        .map(|e| e.time_s)
}

fn read_row(name: &str, ranks: usize, dir: &Path) -> Result<BenchRow> {
    let path = dir.join("summary.json");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let s: SummaryIn =
        serde_json::from_str(&text).with_context(|| format!("{}", path.display()))?;
    let shares = s.exchange_shares_of_busy.as_deref();
    Ok(BenchRow {
        clock: s.clock,
        mode: name.into(),
        ranks,
        time_to_target_s: s.time_to_target_s,
        accuracy_at_budget: s.final_test_accuracy,
        final_test_loss: s.final_test_loss,
        mean_wait_fraction: s.mean_wait_fraction.unwrap_or(0.0),
        bytes_inter_group: s.bytes_inter_group.unwrap_or(0),
        bytes_sent: s.bytes_sent.unwrap_or(0),
        wall_s: s.wall_s,
        images_per_s: s.images_per_s,
        epochs: s.epochs,
        exchange_share_of_busy: shares.and_then(mean),
        max_exchange_share_of_busy: shares.and_then(|v| v.iter().cloned().reduce(f64::max)),
        exchange_share_of_busy_cpu: s.exchange_shares_of_busy_cpu.as_deref().and_then(mean),
        server_busy_fraction: s.server_busy_fractions.as_deref().and_then(mean),
        mean_push_staleness: s.mean_push_staleness,
        replica_max_error: s.replica_max_error,
        gssp_speedup: None,
        seeds: vec![s.seed],
        time_to_target_s_runs: vec![s.time_to_target_s],
        diverged_runs: 0,
        run_dir: dir.display().to_string(),
    })
}

/// Fills `gssp_speedup` (this row's time to target / the reference's, when a reference
/// mode is given), prints the table and writes `bench.json`.
pub fn finish_table(rows: &mut [BenchRow], reference: Option<&str>, out: &Path) -> Result<()> {
    let reference_t = reference
        .and_then(|m| rows.iter().find(|r| r.mode == m))
        .and_then(|r| r.time_to_target_s);
    for r in rows.iter_mut() {
        r.gssp_speedup = match (reference_t, r.time_to_target_s) {
            (Some(g), Some(t)) if g > 0.0 => Some(t / g),
            _ => None,
        };
    }
    if rows.iter().any(|r| r.clock == crate::telemetry::SIMULATED) {
        println!("on the simulated clock: times are simulated seconds");
    }
    println!(
        "{:<12} {:>5} {:>11} {:>10} {:>9} {:>14} {:>9} {:>10}",
        "mode",
        "ranks",
        "t_target_s",
        "acc_budget",
        "wait_frac",
        "bytes_inter",
        "img_per_s",
        reference
            .map(|m| format!("{m}_speedup"))
            .unwrap_or_default()
    );
    for r in rows.iter() {
        println!(
            "{:<12} {:>5} {:>11} {:>9.2}% {:>9.3} {:>14} {:>9.0} {:>10}",
            r.mode,
            r.ranks,
            fmt_opt(r.time_to_target_s),
            100.0 * r.accuracy_at_budget,
            r.mean_wait_fraction,
            r.bytes_inter_group,
            r.images_per_s,
            match (reference, r.gssp_speedup) {
                (None, _) => String::new(),
                (Some(_), Some(x)) => format!("{x:.2}"),
                (Some(_), None) => "-".into(),
            }
        );
    }
    for r in rows.iter().filter(|r| r.diverged_runs > 0) {
        println!(
            "{}: {} of {} run(s) diverged (a non-finite push stopped them); their time to target counts as never unless reached before",
            r.mode,
            r.diverged_runs,
            r.seeds.len()
        );
    }
    for r in rows.iter() {
        let Some(busy) = r.server_busy_fraction else {
            continue;
        };
        let exchange = match (r.exchange_share_of_busy, r.max_exchange_share_of_busy) {
            (Some(m), Some(x)) => format!(
                "; exchange {:.1}% of a group server's busy time (largest {:.1}%; {} in CPU time)",
                100.0 * m,
                100.0 * x,
                r.exchange_share_of_busy_cpu
                    .map(|c| format!("{:.1}%", 100.0 * c))
                    .unwrap_or_else(|| "-".into())
            ),
            _ => String::new(),
        };
        println!(
            "{}: server busy {:.1}% of the run{exchange}{}",
            r.mode,
            100.0 * busy,
            r.replica_max_error
                .map(|e| format!("; replica error {e:.1e}"))
                .unwrap_or_default()
        );
    }
    if let Some(line) = first_to_target(rows) {
        println!("{line}");
    }
    let path: PathBuf = out.join("bench.json");
    std::fs::write(&path, serde_json::to_string_pretty(rows)? + "\n")
        .with_context(|| format!("cannot write {}", path.display()))?;
    println!("table: {}", path.display());
    Ok(())
}

/// The table's verdict by time to target, not images per second: the variant that reached
/// the target first (its median), and how much later the next one did (`None`: none did).
pub fn first_to_target(rows: &[BenchRow]) -> Option<String> {
    let mut reached: Vec<(&BenchRow, f64)> = rows
        .iter()
        .filter_map(|r| r.time_to_target_s.map(|t| (r, t)))
        .collect();
    reached.sort_by(|a, b| a.1.total_cmp(&b.1));
    let (first, t) = *reached.first()?;
    let next = match reached.get(1) {
        Some((r, u)) => format!("; next {} at {u:.1} s ({:.2}x)", r.mode, u / t.max(1e-9)),
        None => "; no other variant reached it".to_string(),
    };
    Some(format!(
        "first to target: {} at {t:.1} s ({:.0} images/s){next}",
        first.mode, first.images_per_s
    ))
}

fn fmt_opt(x: Option<f64>) -> String {
    x.map(|v| format!("{v:.1}"))
        .unwrap_or_else(|| "never".into())
}

/// `gssp bench modes`: the baselines of one config (bsp, asp, ssp, allreduce by default).
pub fn modes(
    config: &Path,
    workers: usize,
    modes: &[String],
    common: &[String],
    out: &Path,
) -> Result<Vec<BenchRow>> {
    let variants: Vec<Variant> = modes
        .iter()
        .map(|m| {
            let ranks = match m.as_str() {
                "allreduce" | "localsgd" => workers,
                "bsp" | "asp" | "ssp" => workers + 1,
                other => {
                    bail!("--modes: must be among bsp, asp, ssp, allreduce, localsgd, got {other}")
                }
            };
            Ok(Variant::new(m, ranks, &[&format!("sync.mode={m}")]))
        })
        .collect::<Result<_>>()?;
    let mut rows = run_all(config, common, &variants, out, (3600, Clock::Wall))?;
    finish_table(&mut rows, None, out)?;
    write_report(&rows, None, out)?;
    Ok(rows)
}

/// `gssp bench paper`: the paper's LeNet-5/MNIST experiment. 16 workers in four speed
/// tiers; every mode with the same seed, data and learning-rate schedule; gssp with one
/// group server per tier. With `seeds`, every mode runs once per seed (into
/// `out/seed-<s>/`, each with its own table) and `out/bench.json` summarises them. `modes`
/// names the variants to run (empty: all).
pub fn paper(
    (config, variants): (&Path, &Path),
    (budget_s, clock): (f64, Clock),
    (seeds, modes): (&[u64], &[String]),
    common: &[String],
    out: &Path,
) -> Result<Vec<BenchRow>> {
    if seeds.is_empty() {
        return paper_once((config, variants), (budget_s, clock), modes, common, out);
    }
    let mut runs = Vec::new();
    for &seed in seeds {
        let mut with_seed = common.to_vec();
        with_seed.push(format!("run.seed={seed}"));
        eprintln!("bench: seed {seed}");
        runs.push(paper_once(
            (config, variants),
            (budget_s, clock),
            modes,
            &with_seed,
            &out.join(format!("seed-{seed}")),
        )?);
    }
    let mut rows = combine_runs(&runs)?;
    println!("over seeds {seeds:?}:");
    let reference = reference_mode(&rows);
    finish_table(&mut rows, reference.as_deref(), out)?;
    Ok(rows)
}

/// The row speed-ups are measured against: dense gssp, else the first gssp variant run.
pub(super) fn reference_mode(rows: &[BenchRow]) -> Option<String> {
    rows.iter()
        .find(|r| r.mode == "gssp")
        .or_else(|| rows.iter().find(|r| r.mode.starts_with("gssp")))
        .map(|r| r.mode.clone())
}

/// One row per mode from several runs of the same modes (one table per run, same order):
/// the median time to target (a run that never got there counts as slowest; null when the
/// median run never got there), the mean of the other figures. A table may itself combine
/// several seeds: its rows then weigh as many runs as they have seeds.
pub fn combine_runs(runs: &[Vec<BenchRow>]) -> Result<Vec<BenchRow>> {
    let first = runs.first().context("no runs to combine")?;
    let mut rows = Vec::new();
    for (i, base) in first.iter().enumerate() {
        let same: Vec<&BenchRow> = runs
            .iter()
            .map(|run| {
                run.get(i)
                    .filter(|r| r.mode == base.mode)
                    .with_context(|| format!("runs disagree on mode {}", base.mode))
            })
            .collect::<Result<_>>()?;
        // A diverged run has no figures but its time; when every run diverged, the zeros.
        let finished = |r: &BenchRow| r.seeds.len().saturating_sub(r.diverged_runs) as f64;
        let any_finished = same.iter().any(|r| finished(r) > 0.0);
        let weight = |r: &BenchRow| {
            if any_finished {
                finished(r)
            } else {
                r.seeds.len().max(1) as f64
            }
        };
        let mean_of = |f: &dyn Fn(&BenchRow) -> f64| {
            let total: f64 = same.iter().map(|r| weight(r)).sum();
            same.iter().map(|r| weight(r) * f(r)).sum::<f64>() / total
        };
        let mean_opt = |f: &dyn Fn(&BenchRow) -> Option<f64>| {
            let some: Vec<(f64, f64)> = same
                .iter()
                .filter_map(|r| f(r).map(|v| (weight(r), v)))
                .collect();
            let total: f64 = some.iter().map(|(w, _)| w).sum();
            (total > 0.0).then(|| some.iter().map(|(w, v)| w * v).sum::<f64>() / total)
        };
        let times: Vec<Option<f64>> = same
            .iter()
            .flat_map(|r| r.time_to_target_s_runs.clone())
            .collect();
        rows.push(BenchRow {
            clock: base.clock.clone(),
            mode: base.mode.clone(),
            ranks: base.ranks,
            time_to_target_s: median_time(&times),
            accuracy_at_budget: mean_of(&|r| r.accuracy_at_budget),
            final_test_loss: mean_of(&|r| r.final_test_loss),
            mean_wait_fraction: mean_of(&|r| r.mean_wait_fraction),
            bytes_inter_group: mean_of(&|r| r.bytes_inter_group as f64).round() as u64,
            bytes_sent: mean_of(&|r| r.bytes_sent as f64).round() as u64,
            wall_s: mean_of(&|r| r.wall_s),
            images_per_s: mean_of(&|r| r.images_per_s),
            epochs: mean_of(&|r| r.epochs),
            exchange_share_of_busy: mean_opt(&|r| r.exchange_share_of_busy),
            max_exchange_share_of_busy: mean_opt(&|r| r.max_exchange_share_of_busy),
            exchange_share_of_busy_cpu: mean_opt(&|r| r.exchange_share_of_busy_cpu),
            server_busy_fraction: mean_opt(&|r| r.server_busy_fraction),
            mean_push_staleness: mean_opt(&|r| r.mean_push_staleness),
            replica_max_error: same
                .iter()
                .filter_map(|r| r.replica_max_error)
                .reduce(f64::max),
            gssp_speedup: None,
            seeds: same.iter().flat_map(|r| r.seeds.clone()).collect(),
            time_to_target_s_runs: times,
            diverged_runs: same.iter().map(|r| r.diverged_runs).sum(),
            run_dir: same
                .iter()
                .map(|r| r.run_dir.as_str())
                .collect::<Vec<_>>()
                .join(","),
        });
    }
    Ok(rows)
}

/// Mean of `v`; `None` when it is empty.
fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// Median of run times where `None` (never reached) ranks above every time; `None` when the
/// median falls on such a run. With an even count, the mean of the two middle runs.
pub fn median_time(times: &[Option<f64>]) -> Option<f64> {
    let mut v: Vec<f64> = times.iter().map(|t| t.unwrap_or(f64::INFINITY)).collect();
    // Infinite where it falls on (or, with an even count, beside) a run that never got
    // there; NaN for no runs.
    let m = crate::telemetry::stats::median(&mut v);
    m.is_finite().then_some(m)
}

/// `gssp report` over the runs of `rows` into `out/report` (speed-ups against `baseline`,
/// else the first run).
fn write_report(rows: &[BenchRow], baseline: Option<&str>, out: &Path) -> Result<()> {
    // A diverged run left no summary to report.
    let runs: Vec<PathBuf> = rows
        .iter()
        .filter(|r| r.diverged_runs == 0)
        .map(|r| PathBuf::from(&r.run_dir))
        .collect();
    if runs.is_empty() {
        return Ok(());
    }
    let reported = |mode: &str| rows.iter().any(|r| r.mode == mode && r.diverged_runs == 0);
    let path = crate::tools::report::run(&crate::tools::report::Options {
        runs,
        out: out.join("report"),
        baseline: baseline.filter(|b| reported(b)).map(String::from),
        window: None,
        budget_s: None,
        trace: false,
    })?;
    println!("report: {}", path.display());
    Ok(())
}

/// How long one simulated job may take, seconds (a 1,000-worker sitting of a config's
/// every variant is required to take under 30 minutes in all).
const SIMULATED_JOB_TIMEOUT_S: u64 = 4 * 3600;

fn paper_once(
    (config, variants): (&Path, &Path),
    (budget_s, clock): (f64, Clock),
    modes: &[String],
    common: &[String],
    out: &Path,
) -> Result<Vec<BenchRow>> {
    let budget = format!("run.time_budget_s={budget_s}");
    let mut all_common = vec![budget, "run.epochs=0".to_string()];
    all_common.extend(common.iter().cloned());
    let variants = super::variants::load(variants, config, &all_common)?;
    let names: Vec<&str> = variants.iter().map(|v| v.name.as_str()).collect();
    if let Some(bad) = modes.iter().find(|m| !names.contains(&m.as_str())) {
        anyhow::bail!(
            "--modes: no variant {bad:?}; the variants are {}",
            names.join(", ")
        );
    }
    let chosen: Vec<Variant> = variants
        .into_iter()
        .filter(|v| modes.is_empty() || modes.contains(&v.name))
        .collect();
    let timeout_s = match clock {
        Clock::Wall => (budget_s as u64) * 3 + 300,
        // A simulated run takes what its arithmetic takes, not its budget.
        Clock::Simulated { .. } => SIMULATED_JOB_TIMEOUT_S,
    };
    let mut rows = run_all(config, &all_common, &chosen, out, (timeout_s, clock))?;
    let reference = reference_mode(&rows);
    finish_table(&mut rows, reference.as_deref(), out)?;
    write_report(&rows, reference.as_deref(), out)?;
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_get_the_one_sided_components_of_env_sh() {
        let ompi4 = "  MCA osc: sm (MCA v2.1.0)\n  MCA osc: pt2pt (MCA v2.1.0)\n";
        let ompi5 = "  MCA osc: sm (MCA v2.1.0)\n  MCA osc: rdma (MCA v2.1.0)\n";
        assert_eq!(one_sided_components(None, ompi4), Some("sm,pt2pt"));
        assert_eq!(
            one_sided_components(Some("rdma"), ompi4),
            None,
            "caller's choice"
        );
        assert_eq!(
            one_sided_components(None, ompi5),
            None,
            "no pt2pt: MPI's default"
        );
        assert_eq!(one_sided_components(None, ""), None, "no ompi_info");
    }

    #[test]
    fn the_verdict_is_the_first_to_target_not_the_fastest_in_images() {
        let mut quick = row("gssp", 1, Some(20.0), 0.99);
        quick.images_per_s = 1_000.0;
        let mut busy = row("asp", 1, Some(25.0), 0.99);
        busy.images_per_s = 3_000.0;
        let never = row("bsp", 1, None, 0.95);
        let line = first_to_target(&[busy, never.clone(), quick]).unwrap_or_default();
        assert_eq!(
            line,
            "first to target: gssp at 20.0 s (1000 images/s); next asp at 25.0 s (1.25x)"
        );
        assert_eq!(first_to_target(&[never]), None);
    }

    fn row(mode: &str, seed: u64, t: Option<f64>, acc: f64) -> BenchRow {
        BenchRow {
            clock: wall_clock(),
            mode: mode.into(),
            ranks: 3,
            time_to_target_s: t,
            accuracy_at_budget: acc,
            final_test_loss: 0.1,
            mean_wait_fraction: 0.5,
            bytes_inter_group: 10,
            bytes_sent: 100,
            wall_s: 60.0,
            images_per_s: 1000.0,
            epochs: 1.0,
            exchange_share_of_busy: None,
            max_exchange_share_of_busy: None,
            exchange_share_of_busy_cpu: None,
            server_busy_fraction: Some(0.01),
            mean_push_staleness: None,
            replica_max_error: None,
            gssp_speedup: None,
            seeds: vec![seed],
            time_to_target_s_runs: vec![t],
            diverged_runs: 0,
            run_dir: format!("d{seed}/{mode}"),
        }
    }

    #[test]
    fn a_diverged_run_counts_as_never_and_leaves_the_means_to_the_others() {
        let mut bad = row("asp-dc", 3, None, 0.0);
        bad.diverged_runs = 1;
        bad.images_per_s = 0.0;
        let runs = vec![
            vec![row("asp-dc", 1, Some(30.0), 0.98)],
            vec![row("asp-dc", 2, Some(40.0), 0.96)],
            vec![bad],
        ];
        let r = &combine_runs(&runs).unwrap()[0];
        assert_eq!(r.diverged_runs, 1);
        assert_eq!(r.seeds, vec![1, 2, 3]);
        assert_eq!(r.time_to_target_s_runs, vec![Some(30.0), Some(40.0), None]);
        assert_eq!(r.time_to_target_s, Some(40.0));
        assert!((r.accuracy_at_budget - 0.97).abs() < 1e-12);
        assert!((r.images_per_s - 1000.0).abs() < 1e-9);
        // Every run diverged: nothing else to average.
        let mut all = row("asp", 1, None, 0.0);
        all.diverged_runs = 1;
        let r = &combine_runs(&[vec![all]]).unwrap()[0];
        assert_eq!((r.diverged_runs, r.time_to_target_s), (1, None));
    }

    #[test]
    fn a_diverged_run_is_told_by_its_log_and_timed_by_its_evaluations() {
        let dir = std::env::temp_dir().join(format!("gssp-diverged-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("mpirun.log"), "error: rank 0: mpirun exited").unwrap();
        assert!(!diverged(&dir));
        std::fs::write(
            dir.join("mpirun.log"),
            "Error: rank 0: worker 10 (rank 11) pushed a non-finite gradient (entry 2797 is NaN)",
        )
        .unwrap();
        assert!(diverged(&dir));
        assert!(!diverged(&dir.join("absent")));
        std::fs::remove_dir_all(&dir).unwrap();
        let evals = "time_s,epoch,iteration,test_loss,test_accuracy\n\
                     3.0,0.1,10,0.5,0.90\n\
                     6.0,0.2,20,0.1,0.981\n\
                     9.0,0.3,30,NaN,0.098\n";
        assert_eq!(time_reaching(evals, 0.98), Some(6.0));
        assert_eq!(time_reaching(evals, 0.99), None);
        assert_eq!(time_reaching("", 0.98), None);
        assert_eq!(time_reaching("time_s,loss\n1.0,0.3\n", 0.98), None);
    }

    #[test]
    fn median_time_ranks_never_as_slowest() {
        assert_eq!(median_time(&[]), None);
        assert_eq!(median_time(&[Some(3.0)]), Some(3.0));
        assert_eq!(median_time(&[None]), None);
        assert_eq!(median_time(&[Some(30.0), None, Some(10.0)]), Some(30.0));
        assert_eq!(median_time(&[None, Some(10.0), None]), None);
        assert_eq!(median_time(&[Some(20.0), Some(10.0)]), Some(15.0));
        assert_eq!(median_time(&[Some(20.0), None]), None);
        assert_eq!(
            median_time(&[Some(4.0), Some(1.0), None, Some(2.0)]),
            Some(3.0)
        );
    }

    #[test]
    fn combine_runs_takes_medians_and_means_per_mode() {
        let runs = vec![
            vec![
                row("bsp", 1, Some(40.0), 0.98),
                row("gssp", 1, Some(20.0), 0.99),
            ],
            vec![row("bsp", 2, None, 0.97), row("gssp", 2, Some(26.0), 0.98)],
            vec![
                row("bsp", 3, Some(44.0), 0.96),
                row("gssp", 3, Some(22.0), 0.97),
            ],
        ];
        let rows = combine_runs(&runs).unwrap();
        assert_eq!(rows.len(), 2);
        let (bsp, gssp) = (&rows[0], &rows[1]);
        assert_eq!(bsp.mode, "bsp");
        assert_eq!(bsp.time_to_target_s, Some(44.0));
        assert_eq!(
            bsp.time_to_target_s_runs,
            vec![Some(40.0), None, Some(44.0)]
        );
        assert_eq!(bsp.seeds, vec![1, 2, 3]);
        assert!((bsp.accuracy_at_budget - 0.97).abs() < 1e-12);
        assert_eq!(gssp.time_to_target_s, Some(22.0));
        assert_eq!(gssp.run_dir, "d1/gssp,d2/gssp,d3/gssp");
        assert_eq!(gssp.exchange_share_of_busy, None);
        assert_eq!(gssp.server_busy_fraction, Some(0.01));
    }

    #[test]
    fn combine_runs_weighs_a_combined_table_by_its_seeds() {
        let mut two = row("asp", 1, Some(20.0), 0.9);
        two.seeds = vec![1, 2];
        two.time_to_target_s_runs = vec![Some(20.0), Some(30.0)];
        let one = row("asp", 3, None, 0.6);
        let rows = combine_runs(&[vec![two], vec![one]]).unwrap();
        assert!((rows[0].accuracy_at_budget - 0.8).abs() < 1e-12);
        assert_eq!(rows[0].seeds, vec![1, 2, 3]);
        assert_eq!(rows[0].time_to_target_s, Some(30.0));
    }

    #[test]
    fn combine_runs_rejects_mismatched_tables() {
        let runs = vec![
            vec![row("bsp", 1, Some(40.0), 0.98)],
            vec![row("asp", 2, Some(30.0), 0.98)],
        ];
        let err = combine_runs(&runs).unwrap_err().to_string();
        assert!(err.contains("bsp"), "{err}");
        assert!(combine_runs(&[]).is_err());
        assert!(combine_runs(&[vec![row("bsp", 1, None, 0.9)], vec![]]).is_err());
    }
}
