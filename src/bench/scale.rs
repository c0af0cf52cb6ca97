//! `gssp bench scale`: the paper's comparison at several cluster sizes. Each size is its own
//! config (`configs/scale_lenet5_mnist_<N>.toml`: N workers in the paper's four speed tiers,
//! a pacing unit that grows with N so that two cores still pace every rank); every variant
//! of `bench paper` runs on each, and one table (`scale.json`, `scale.md`) lines them up.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;

use super::jobs::{paper, BenchRow};

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
/// and the plot. With `report_only`, runs nothing and rebuilds them from the
/// `bench.json` of each size's earlier run.
pub fn scale(
    configs: &[PathBuf],
    budget_s: f64,
    (seeds, modes, report_only): (&[u64], &[String], bool),
    common: &[String],
    out: &Path,
) -> Result<Vec<SizeResult>> {
    let mut sizes = Vec::new();
    for config in configs {
        let workers = super::jobs::configured_workers(config, common)?;
        let dir = out.join(format!("{workers}-workers"));
        let rows = if report_only {
            let path = dir.join("bench.json");
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("cannot read {} (run the size first)", path.display()))?;
            serde_json::from_str(&text).with_context(|| format!("{}", path.display()))?
        } else {
            eprintln!("bench scale: {workers} workers ({})", config.display());
            paper(config, budget_s, (seeds, modes), common, &dir)?
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
/// size (with several seeds, each mode's first run).
fn plot_accuracy(sizes: &[SizeResult], out: &Path) -> Result<[PathBuf; 2]> {
    use crate::report::plots::{save_sized, AccuracyFigure, PanelsFigure};
    let mut panels = Vec::new();
    for size in sizes {
        let mut runs = Vec::new();
        let mut target = None;
        for r in &size.rows {
            let dir = r.run_dir.split(',').next().unwrap_or_default();
            let run = crate::report::read::read_run(Path::new(dir), &r.mode)?;
            target = target
                .or((run.summary.target_accuracy > 0.0).then_some(run.summary.target_accuracy));
            let points = run.evals.iter().map(|e| (e.time_s, e.test_accuracy));
            runs.push((r.mode.clone(), points.collect()));
        }
        panels.push(AccuracyFigure {
            runs,
            target,
            caption: format!("{} workers", size.workers),
        });
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_has_a_row_per_size_and_mode() {
        let row = |mode: &str, t: Option<f64>, busy: Option<f64>| BenchRow {
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
