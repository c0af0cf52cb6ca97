//! Whole-run benchmarks: each variant is its own `mpirun` job of this binary on one
//! config, with the same seed, data and learning-rate schedule; their summaries and
//! server logs become one table, printed and written as `bench.json`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

/// One job of a comparison.
#[derive(Debug, Clone)]
pub struct Variant {
    pub name: String,
    pub ranks: usize,
    pub overrides: Vec<String>,
}

impl Variant {
    pub fn new(name: &str, ranks: usize, overrides: &[&str]) -> Variant {
        Variant {
            name: name.into(),
            ranks,
            overrides: overrides.iter().map(|s| s.to_string()).collect(),
        }
    }
}

/// One row of the comparison table (`bench.json` holds a list of them).
#[derive(Debug, Clone, Serialize)]
pub struct BenchRow {
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
    /// Share of the servers' busy time (apply + send + exchange) spent in the inter-group
    /// exchange (gssp), from the server logs.
    pub exchange_share_of_busy: Option<f64>,
    /// Share of the run the server(s) are busy (apply + send + exchange), from the logs.
    pub server_busy_fraction: Option<f64>,
    /// gssp: worst |replica - initial - all updates| after the final flush.
    pub replica_max_error: Option<f64>,
    /// `bench paper`: how many times faster gssp (dense) reached the target than this mode.
    pub gssp_speedup: Option<f64>,
    pub run_dir: String,
}

/// The part of `summary.json` the table reads.
#[derive(Debug, Deserialize)]
struct SummaryIn {
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
}

#[derive(Debug, Deserialize)]
struct LayoutIn {
    servers: Vec<usize>,
}

/// Runs every variant of `config` (with `common` overrides) under mpirun, one after the
/// other, into `out/<name>`; returns the table rows in order.
pub fn run_all(
    config: &Path,
    common: &[String],
    variants: &[Variant],
    out: &Path,
    job_timeout_s: u64,
) -> Result<Vec<BenchRow>> {
    let exe = std::env::current_exe().context("cannot find the gssp binary")?;
    if !config.is_file() {
        bail!("--config: no such file {}", config.display());
    }
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let mut rows = Vec::new();
    for v in variants {
        let dir = out.join(&v.name);
        let _ = std::fs::remove_dir_all(&dir);
        let mut cmd = Command::new("timeout");
        cmd.arg(job_timeout_s.to_string()).arg("mpirun").args([
            "-n",
            &v.ranks.to_string(),
            "--oversubscribe",
            "--bind-to",
            "none",
        ]);
        cmd.arg(&exe)
            .arg("train")
            .arg("--config")
            .arg(config)
            .arg("--out")
            .arg(&dir);
        for o in common.iter().chain(&v.overrides) {
            cmd.arg("--set").arg(o);
        }
        cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .env("OPENBLAS_NUM_THREADS", "1");
        cmd.env("RUST_LOG", "warn");
        eprintln!("bench: {} on {} ranks ...", v.name, v.ranks);
        let t = Instant::now();
        let output = cmd
            .output()
            .context("cannot start mpirun (is OpenMPI installed?)")?;
        std::fs::write(
            dir.join("mpirun.log"),
            [&output.stdout[..], &output.stderr[..]].concat(),
        )
        .ok();
        if !output.status.success() {
            bail!(
                "bench: {} failed ({}) after {:.0} s; see {}\n{}",
                v.name,
                output.status,
                t.elapsed().as_secs_f64(),
                dir.join("mpirun.log").display(),
                String::from_utf8_lossy(&output.stderr)
                    .lines()
                    .rev()
                    .take(5)
                    .collect::<Vec<_>>()
                    .join("\n")
            );
        }
        let row = read_row(&v.name, v.ranks, &dir)?;
        eprintln!(
            "bench: {} done in {:.0} s: time to target {}, accuracy {:.2}%",
            v.name,
            t.elapsed().as_secs_f64(),
            fmt_opt(row.time_to_target_s),
            100.0 * row.accuracy_at_budget
        );
        rows.push(row);
    }
    Ok(rows)
}

fn read_row(name: &str, ranks: usize, dir: &Path) -> Result<BenchRow> {
    let read = |f: &str| -> Result<String> {
        std::fs::read_to_string(dir.join(f))
            .with_context(|| format!("cannot read {}", dir.join(f).display()))
    };
    let s: SummaryIn = serde_json::from_str(&read("summary.json")?).context("summary.json")?;
    let layout: LayoutIn = serde_json::from_str(&read("layout.json")?).context("layout.json")?;
    let (mut busy, mut exchange) = (0.0, 0.0);
    for r in &layout.servers {
        let (b, e) = server_busy(&dir.join(format!("rank-{r}.csv")))?;
        busy += b;
        exchange += e;
    }
    let servers = layout.servers.len() as f64;
    Ok(BenchRow {
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
        exchange_share_of_busy: (servers > 0.0 && busy > 0.0).then(|| exchange / busy),
        server_busy_fraction: (servers > 0.0).then(|| busy / servers / s.wall_s.max(1e-9)),
        replica_max_error: s.replica_max_error,
        gssp_speedup: None,
        run_dir: dir.display().to_string(),
    })
}

/// (busy seconds = apply + send + exchange, exchange seconds) summed over a server log.
fn server_busy(csv: &Path) -> Result<(f64, f64)> {
    let text =
        std::fs::read_to_string(csv).with_context(|| format!("cannot read {}", csv.display()))?;
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split(',').collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .with_context(|| format!("{}: no column {name}", csv.display()))
    };
    let (a, s, e) = (col("apply_s")?, col("send_s")?, col("exchange_s")?);
    let (mut busy, mut exchange) = (0.0, 0.0);
    for line in lines {
        let f: Vec<f64> = line.split(',').map(|x| x.parse().unwrap_or(0.0)).collect();
        busy += f[a] + f[s] + f[e];
        exchange += f[e];
    }
    Ok((busy, exchange))
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
    for r in rows
        .iter()
        .filter(|r| r.exchange_share_of_busy.is_some() || r.server_busy_fraction.is_some())
    {
        println!(
            "{}: server busy {:.1}% of the run; exchange {:.1}% of server busy time{}",
            r.mode,
            100.0 * r.server_busy_fraction.unwrap_or(0.0),
            100.0 * r.exchange_share_of_busy.unwrap_or(0.0),
            r.replica_max_error
                .map(|e| format!("; replica error {e:.1e}"))
                .unwrap_or_default()
        );
    }
    let path: PathBuf = out.join("bench.json");
    std::fs::write(&path, serde_json::to_string_pretty(rows)? + "\n")
        .with_context(|| format!("cannot write {}", path.display()))?;
    println!("table: {}", path.display());
    Ok(())
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
                "allreduce" => workers,
                "bsp" | "asp" | "ssp" => workers + 1,
                other => bail!("--modes: must be among bsp, asp, ssp, allreduce, got {other}"),
            };
            Ok(Variant::new(m, ranks, &[&format!("sync.mode={m}")]))
        })
        .collect::<Result<_>>()?;
    let mut rows = run_all(config, common, &variants, out, 3600)?;
    finish_table(&mut rows, None, out)?;
    Ok(rows)
}

/// `gssp bench paper`: the paper's LeNet-5/MNIST experiment. 16 workers in four speed
/// tiers; every mode with the same seed, data and learning-rate schedule; gssp with one
/// group server per tier.
pub fn paper(config: &Path, budget_s: f64, common: &[String], out: &Path) -> Result<Vec<BenchRow>> {
    let budget = format!("run.time_budget_s={budget_s}");
    let mut all_common = vec![budget, "run.epochs=0".to_string()];
    all_common.extend(common.iter().cloned());
    let gssp = ["sync.mode=gssp", "sync.groups=4"];
    let variants = [
        Variant::new("allreduce", 16, &["sync.mode=allreduce"]),
        Variant::new("bsp", 17, &["sync.mode=bsp"]),
        Variant::new("asp", 17, &["sync.mode=asp"]),
        Variant::new("ssp", 17, &["sync.mode=ssp", "sync.staleness=3"]),
        Variant::new("gssp", 20, &[gssp[0], gssp[1], "compression.kind=dense"]),
        Variant::new(
            "gssp-topk",
            20,
            &[
                gssp[0],
                gssp[1],
                "compression.kind=topk",
                "compression.policy=uniform",
            ],
        ),
        Variant::new(
            "gssp-gdtopk",
            20,
            &[
                gssp[0],
                gssp[1],
                "compression.kind=topk",
                "compression.policy=speed",
            ],
        ),
    ];
    let mut rows = run_all(
        config,
        &all_common,
        &variants,
        out,
        (budget_s as u64) * 3 + 300,
    )?;
    finish_table(&mut rows, Some("gssp"), out)?;
    Ok(rows)
}
