//! `gssp bench scale`: the paper's comparison at several cluster sizes. Each size is its own
//! config (`configs/scale_lenet5_mnist_<N>.toml`: N workers in the paper's four speed tiers,
//! a pacing unit that grows with N so that two cores still pace every rank); every variant
//! of `bench paper` runs on each, and one table (`scale.json`, `scale.md`) lines them up.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;

use super::jobs::{paper, BenchRow, Clock};

/// One cluster size of the study.
#[derive(Debug, Serialize)]
pub struct SizeResult {
    pub workers: usize,
    pub config: String,
    pub rows: Vec<BenchRow>,
}

/// The default configs of the study, smallest cluster first.
pub fn default_configs() -> Vec<PathBuf> {
    [8, 16, 32, 64]
        .iter()
        .map(|n| PathBuf::from(format!("configs/scale_lenet5_mnist_{n}.toml")))
        .collect()
}

/// Runs `bench paper` on every config (into `out/<N>-workers/`), then writes the table
/// and the plot. With directories in `from` (earlier `--out`s), runs nothing: each size's
/// rows pool the `bench.json` of that size in every one of them that ran it, their seeds
/// combined (the table and plot then cover every seed run, in several sittings).
pub fn scale(
    (configs, variants): (&[PathBuf], &Path),
    budget_s: (f64, Clock),
    (seeds, modes, from): (&[u64], &[String], &[PathBuf]),
    common: &[String],
    out: &Path,
) -> Result<Vec<SizeResult>> {
    let mut sizes = Vec::new();
    for config in configs {
        let workers = super::variants::configured_workers(config, common)?;
        let dir = out.join(format!("{workers}-workers"));
        let rows = if from.is_empty() {
            eprintln!("bench scale: {workers} workers ({})", config.display());
            paper((config, variants), budget_s, (seeds, modes), common, &dir)?
        } else {
            pooled_rows(from, workers, &dir)?
        };
        sizes.push(SizeResult {
            workers,
            config: config.display().to_string(),
            rows,
        });
    }
    let json = out.join("scale.json");
    std::fs::write(&json, serde_json::to_string_pretty(&sizes)? + "\n")
        .with_context(|| format!("cannot write {}", json.display()))?;
    let plot = plot_accuracy(&sizes, out)?;
    let table = markdown_table(&sizes);
    let md = out.join("scale.md");
    std::fs::write(&md, &table).with_context(|| format!("cannot write {}", md.display()))?;
    println!("{table}");
    println!(
        "table: {} and {}; plot: {}",
        json.display(),
        md.display(),
        plot[0].display()
    );
    Ok(sizes)
}

/// The rows of size `workers` from the `bench.json` of that size in each of `from` (those
/// that ran it), combined over their seeds and written to `dir/bench.json`. A seed is
/// counted once: where two tables hold it, the one with more seeds (a later, fuller
/// sitting) wins and the other is left out, saying so.
fn pooled_rows(from: &[PathBuf], workers: usize, dir: &Path) -> Result<Vec<BenchRow>> {
    let mut found = Vec::new();
    for earlier in from {
        let path = earlier
            .join(format!("{workers}-workers"))
            .join("bench.json");
        if !path.exists() {
            continue;
        }
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let rows: Vec<BenchRow> =
            serde_json::from_str(&text).with_context(|| format!("{}", path.display()))?;
        let seeds = rows.first().map(|r| r.seeds.clone()).unwrap_or_default();
        found.push((path, seeds, rows));
    }
    found.sort_by_key(|(_, seeds, _)| std::cmp::Reverse(seeds.len()));
    let mut tables = Vec::new();
    let mut pooled: Vec<u64> = Vec::new();
    for (path, seeds, rows) in found {
        let shared: Vec<u64> = seeds
            .iter()
            .filter(|s| pooled.contains(s))
            .copied()
            .collect();
        if shared.len() == seeds.len() && !seeds.is_empty() {
            eprintln!(
                "bench scale: {} left out: its seeds {seeds:?} are pooled already",
                path.display()
            );
            continue;
        }
        anyhow::ensure!(
            shared.is_empty(),
            "{}: seeds {shared:?} are also in another table; pool each seed from one run",
            path.display()
        );
        pooled.extend(&seeds);
        tables.push(rows);
    }
    if tables.is_empty() {
        let dirs: Vec<String> = from.iter().map(|d| d.display().to_string()).collect();
        anyhow::bail!(
            "no {workers}-workers/bench.json in {} (run that size first)",
            dirs.join(", ")
        );
    }
    let mut rows = super::jobs::combine_runs(&tables)?;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let reference = super::jobs::reference_mode(&rows);
    super::jobs::finish_table(&mut rows, reference.as_deref(), dir)?;
    Ok(rows)
}

/// The pointwise median of accuracy-against-time curves of one setup over its seeds
/// (their snapshots share one schedule): point i is the median time and the median
/// accuracy of the runs' i-th points, as far as the shortest run goes.
pub fn median_curve(curves: &[Vec<(f64, f64)>]) -> Vec<(f64, f64)> {
    let len = curves.iter().map(Vec::len).min().unwrap_or(0);
    (0..len)
        .map(|i| {
            let mut t: Vec<f64> = curves.iter().map(|c| c[i].0).collect();
            let mut a: Vec<f64> = curves.iter().map(|c| c[i].1).collect();
            (
                crate::telemetry::stats::median(&mut t),
                crate::telemetry::stats::median(&mut a),
            )
        })
        .collect()
}

/// One Markdown table over every size and mode: time to target, accuracy at the budget,
/// images per second, wait fraction, mean push staleness and server busy share.
pub fn markdown_table(sizes: &[SizeResult]) -> String {
    let mut t = String::from(
        "| workers | mode | time to target (s) | accuracy at budget | images/s | wait fraction | push staleness | server busy |\n\
         |---:|---|---:|---:|---:|---:|---:|---:|\n",
    );
    for size in sizes {
        for r in &size.rows {
            t.push_str(&format!(
                "| {} | {} | {} | {:.2}% | {:.0} | {:.3} | {} | {} |\n",
                size.workers,
                r.mode,
                r.time_to_target_s
                    .map_or_else(|| "never".to_string(), |v| format!("{v:.1}")),
                100.0 * r.accuracy_at_budget,
                r.images_per_s,
                r.mean_wait_fraction,
                r.mean_push_staleness
                    .map_or_else(|| "-".to_string(), |v| format!("{v:.2}")),
                r.server_busy_fraction
                    .map_or_else(|| "-".to_string(), |b| format!("{:.1}%", 100.0 * b)),
            ));
        }
    }
    t
}

/// `out/accuracy.png` (and `.svg`): test accuracy against time per mode, one panel per
/// size ([`accuracy_panel`]).
fn plot_accuracy(sizes: &[SizeResult], out: &Path) -> Result<[PathBuf; 2]> {
    use crate::tools::report::plots::{save_sized, PanelsFigure};
    let panels = sizes
        .iter()
        .map(|size| accuracy_panel(Some(size.workers), &size.rows))
        .collect::<Result<Vec<_>>>()?;
    let columns = if panels.len() > 2 { 2 } else { panels.len() };
    let rows = panels.len().div_ceil(columns.max(1)) as u32;
    let fig = PanelsFigure { panels, columns };
    save_sized(
        &fig,
        out,
        "accuracy",
        (1280 * columns.max(1) as u32, 800 * rows.max(1)),
    )
}

/// One size's panel: test accuracy against time per mode (each row's runs read from its
/// `run_dir`s); with several seeds, each mode's median curve over them ([`median_curve`]).
pub(super) fn accuracy_panel(
    workers: Option<usize>,
    rows: &[BenchRow],
) -> Result<crate::tools::report::plots::AccuracyFigure> {
    let mut runs = Vec::new();
    let mut target = None;
    let mut seeds = 1;
    for r in rows {
        let mut curves = Vec::new();
        for dir in r.run_dir.split(',').filter(|d| !d.is_empty()) {
            let run = crate::tools::report::read::read_run(Path::new(dir), &r.mode)?;
            target = target
                .or((run.summary.target_accuracy > 0.0).then_some(run.summary.target_accuracy));
            let points = run.evals.iter().map(|e| (e.time_s, e.test_accuracy));
            curves.push(points.collect());
        }
        seeds = seeds.max(curves.len());
        runs.push((r.mode.clone(), median_curve(&curves)));
    }
    let size = workers.map_or_else(|| "every mode".to_string(), |w| format!("{w} workers"));
    let caption = match seeds {
        1 => size,
        n => format!("{size}, median of {n} seeds"),
    };
    Ok(crate::tools::report::plots::AccuracyFigure {
        runs,
        target,
        caption,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_curve_takes_each_points_median_up_to_the_shortest_run() {
        let curves = vec![
            vec![(1.0, 0.5), (2.0, 0.9), (3.0, 0.95)],
            vec![(1.1, 0.7), (2.1, 0.8)],
            vec![(0.9, 0.6), (1.9, 0.85), (2.9, 0.97)],
        ];
        assert_eq!(median_curve(&curves), vec![(1.0, 0.6), (2.0, 0.85)]);
        assert_eq!(median_curve(&curves[..1]), curves[0]);
        assert!(median_curve(&[]).is_empty());
    }

    /// Writes `dir/8-workers/bench.json` with one asp row of `seeds` at accuracy `acc`.
    fn write_table(dir: &Path, seeds: &[u64], acc: f64) {
        let size = dir.join("8-workers");
        std::fs::create_dir_all(&size).unwrap();
        let row = serde_json::json!([{
            "mode": "asp", "ranks": 9, "time_to_target_s": null, "accuracy_at_budget": acc,
            "final_test_loss": 0.1, "mean_wait_fraction": 0.0, "bytes_inter_group": 0,
            "bytes_sent": 0, "wall_s": 60.0, "images_per_s": 1.0, "epochs": 1.0,
            "exchange_share_of_busy": null, "max_exchange_share_of_busy": null,
            "exchange_share_of_busy_cpu": null, "server_busy_fraction": null,
            "mean_push_staleness": null, "replica_max_error": null, "gssp_speedup": null,
            "seeds": seeds, "time_to_target_s_runs": seeds.iter().map(|_| None::<f64>).collect::<Vec<_>>(),
            "run_dir": "",
        }]);
        std::fs::write(size.join("bench.json"), row.to_string()).unwrap();
    }

    #[test]
    fn pooling_counts_each_seed_once_and_names_what_it_cannot_pool() {
        let tmp = tempfile::tempdir().unwrap();
        let [one, three, other, out] = ["one", "three", "other", "out"].map(|d| tmp.path().join(d));
        write_table(&one, &[42], 0.5);
        write_table(&three, &[42, 43, 44], 0.9);
        write_table(&other, &[45], 0.5);
        // Seed 42 of `one` is in `three` already: left out.
        let rows = pooled_rows(&[one.clone(), three.clone(), other.clone()], 8, &out).unwrap();
        assert_eq!(rows[0].seeds, vec![42, 43, 44, 45]);
        assert!((rows[0].accuracy_at_budget - 0.8).abs() < 1e-12);
        assert!(out.join("bench.json").exists());
        // A table that shares only some of its seeds cannot be pooled.
        write_table(&other, &[44, 45], 0.5);
        let err = pooled_rows(&[three, other], 8, &out)
            .unwrap_err()
            .to_string();
        assert!(err.contains("seeds [44]"), "{err}");
        let err = pooled_rows(&[tmp.path().join("none")], 8, &out)
            .unwrap_err()
            .to_string();
        assert!(err.contains("no 8-workers/bench.json"), "{err}");
    }

    #[test]
    fn the_table_has_a_row_per_size_and_mode() {
        let row = |mode: &str, t: Option<f64>, busy: Option<f64>| BenchRow {
            clock: "wall".into(),
            mode: mode.into(),
            ranks: 9,
            time_to_target_s: t,
            accuracy_at_budget: 0.9812,
            final_test_loss: 0.1,
            mean_wait_fraction: 0.25,
            bytes_inter_group: 0,
            bytes_sent: 0,
            wall_s: 60.0,
            images_per_s: 1999.6,
            epochs: 1.0,
            exchange_share_of_busy: None,
            max_exchange_share_of_busy: None,
            exchange_share_of_busy_cpu: None,
            server_busy_fraction: busy,
            mean_push_staleness: busy.map(|_| 7.0),
            replica_max_error: None,
            gssp_speedup: None,
            seeds: vec![1],
            time_to_target_s_runs: vec![t],
            diverged_runs: 0,
            run_dir: String::new(),
        };
        let sizes = [
            SizeResult {
                workers: 8,
                config: "a".into(),
                rows: vec![
                    row("asp", Some(26.04), Some(0.027)),
                    row("allreduce", None, None),
                ],
            },
            SizeResult {
                workers: 64,
                config: "b".into(),
                rows: vec![row("asp", Some(30.0), Some(0.1))],
            },
        ];
        let t = markdown_table(&sizes);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 2 + 3);
        assert_eq!(
            lines[2],
            "| 8 | asp | 26.0 | 98.12% | 2000 | 0.250 | 7.00 | 2.7% |"
        );
        assert_eq!(
            lines[3],
            "| 8 | allreduce | never | 98.12% | 2000 | 0.250 | - | - |"
        );
        assert!(lines[4].starts_with("| 64 | asp | 30.0 |"));
    }
}
