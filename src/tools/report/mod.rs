//! `gssp report`: compares finished runs in one `report.md` (a table and pictures).
//!
//! - `read`: the run directory's files into rows,
//! - `series`: what each picture shows, computed from the rows (pure, unit-tested),
//! - `table`: the comparison table,
//! - `plots`: the pictures, as PNG and SVG,
//! - `stragglers`: who computes slowest and who waits most, and why (pure),
//! - `trace`: with `--trace`, the run as a Chrome trace-event file (Perfetto).

pub mod plots;
pub mod read;
pub mod series;
pub mod stragglers;
pub mod table;
pub mod trace;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use plots::{AccuracyFigure, BarFigure, LinesFigure, PerplexityFigure, TimelineFigure};
use read::Run;

/// What `gssp report` is asked for.
#[derive(Debug, Clone)]
pub struct Options {
    pub runs: Vec<PathBuf>,
    pub out: PathBuf,
    /// Run name the speed-ups are against; `None`: the first run.
    pub baseline: Option<String>,
    /// Timeline window in seconds; `None`: 2 s in the middle of each run.
    pub window: Option<(f64, f64)>,
    /// Time at which "accuracy at budget" is read; `None`: the shortest run's wall time.
    pub budget_s: Option<f64>,
    /// Also write each run's timeline as `trace-RUN.json` (Chrome trace-event format).
    pub trace: bool,
}

/// Parses `START:END` seconds, `START < END`.
pub fn parse_window(s: &str) -> Result<(f64, f64)> {
    let bad = || format!("--window must be START:END in seconds with START < END, got {s:?}");
    let (a, b) = s.split_once(':').with_context(bad)?;
    let a: f64 = a.trim().parse().ok().with_context(bad)?;
    let b: f64 = b.trim().parse().ok().with_context(bad)?;
    if !(a >= 0.0 && b > a && b.is_finite()) {
        bail!(bad());
    }
    Ok((a, b))
}

/// Default timeline window: 2 s centred in the logged range (all of it when shorter),
/// where a run is in its steady state.
fn default_window(range: (f64, f64)) -> (f64, f64) {
    let (lo, hi) = range;
    if hi - lo <= 2.0 {
        return (lo, hi);
    }
    let mid = 0.5 * (lo + hi);
    (mid - 1.0, mid + 1.0)
}

/// A file-name-safe form of a run name (`seed-7/gssp` -> `seed-7-gssp`).
fn stem(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

/// Reads the runs, writes `report.md` and the pictures into `opts.out`; returns the
/// path of `report.md`.
pub fn run(opts: &Options) -> Result<PathBuf> {
    if opts.runs.is_empty() {
        bail!("give at least one run directory");
    }
    let names = read::run_names(&opts.runs);
    let runs: Vec<Run> = opts
        .runs
        .iter()
        .zip(&names)
        .map(|(d, n)| read::read_run(d, n))
        .collect::<Result<_>>()?;
    let baseline = match &opts.baseline {
        Some(b) if !names.contains(b) => {
            bail!(
                "--baseline {b:?} is not one of the runs: {}",
                names.join(", ")
            )
        }
        Some(b) => b.clone(),
        None => names[0].clone(),
    };
    let budget = opts.budget_s.unwrap_or_else(|| {
        runs.iter()
            .map(|r| r.summary.wall_s)
            .fold(f64::INFINITY, f64::min)
    });
    std::fs::create_dir_all(&opts.out)
        .with_context(|| format!("cannot create {}", opts.out.display()))?;

    let mut md = String::from("# gssp report\n\n");
    write_runs(&mut md, &runs);
    md += "\n## Comparison\n\n";
    md += &table::markdown(&table::rows(&runs, &baseline, budget), budget, &baseline);
    let simulated: Vec<&str> = (runs.iter())
        .filter(|r| r.summary.clock == crate::telemetry::SIMULATED)
        .map(|r| r.name.as_str())
        .collect();
    if !simulated.is_empty() {
        let _ = writeln!(
            md,
            "
On the simulated clock (`gssp train --simulate`; its seconds are simulated \
             ones, not this machine's): {}.",
            simulated.join(", ")
        );
    }
    let _ = writeln!(
        md,
        "\nTime to target: first test evaluation at or above the run's target accuracy (`–`: \
         never). Accuracy at {budget:.1} s: the last evaluation by then. Mean wait fraction: \
         the workers' time waiting for weights over wall time. Bytes between groups: gssp's \
         inter-group traffic. Speed-up: {baseline}'s time to target over the run's.",
    );

    let text = table::text_rows(&runs, &baseline, budget);
    if !text.is_empty() {
        md += "\n## Translation\n\n";
        md += &table::text_markdown(&text, budget, &baseline);
        let _ = writeln!(
            md,
            "\nVal perplexity at {budget:.1} s: the last evaluation by then (snapshots or \
             periodic evaluations). Speed-up: {budget:.1} s over the time the run took to \
             reach {baseline}'s val perplexity at {budget:.1} s; {baseline}'s own row shows \
             when it first got there (earlier than the budget where it plateaued). BLEU: the \
             final model's greedy translations of test2016.",
        );
        let fig = PerplexityFigure {
            runs: runs
                .iter()
                .map(|r| {
                    let pts = r
                        .evals
                        .iter()
                        .filter_map(|e| e.val_perplexity.map(|v| (e.time_s, v)));
                    (r.name.clone(), pts.collect())
                })
                .collect(),
        };
        md += "\n### Val perplexity against wall time\n\n";
        embed(
            &mut md,
            &plots::save(&fig, &opts.out, "perplexity")?,
            &opts.out,
        );
    }

    md += "\n## Test accuracy against wall time\n\n";
    let acc = AccuracyFigure {
        runs: runs
            .iter()
            .map(|r| {
                let pts = r.evals.iter().map(|e| (e.time_s, e.test_accuracy));
                (r.name.clone(), pts.collect())
            })
            .collect(),
        target: common_target(&runs),
        caption: "Test accuracy against wall time".into(),
    };
    embed(
        &mut md,
        &plots::save(&acc, &opts.out, "accuracy")?,
        &opts.out,
    );

    for r in &runs {
        let _ = writeln!(md, "\n## {}", r.name);
        per_run(&mut md, r, opts)?;
    }
    let path = opts.out.join("report.md");
    std::fs::write(&path, md).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

/// The run list: where each run came from and what it was.
fn write_runs(md: &mut String, runs: &[Run]) {
    for r in runs {
        let s = &r.summary;
        let _ = writeln!(
            md,
            "- **{}** (`{}`): {} {} on {}, {} workers, {:.1} s, target {:.1} %",
            r.name,
            r.dir.display(),
            s.mode,
            s.model,
            s.dataset,
            s.workers,
            s.wall_s,
            100.0 * s.target_accuracy
        );
    }
}

/// The target accuracy when all runs share one (else no target line is drawn).
fn common_target(runs: &[Run]) -> Option<f64> {
    let t = runs.first()?.summary.target_accuracy;
    runs.iter()
        .all(|r| r.summary.target_accuracy == t)
        .then_some(t)
}

/// An image link to the PNG, and a link to the SVG beside it.
fn embed(md: &mut String, files: &[PathBuf; 2], out: &Path) {
    let rel = |p: &PathBuf| p.strip_prefix(out).unwrap_or(p).display().to_string();
    let _ = writeln!(
        md,
        "![{0}]({0}) ([SVG]({1}))",
        rel(&files[0]),
        rel(&files[1])
    );
}

/// One run's pictures, or why a picture is left out.
fn per_run(md: &mut String, r: &Run, opts: &Options) -> Result<()> {
    stragglers(md, r);
    if opts.trace {
        trace(md, r, opts)?;
    }
    timeline(md, r, opts)?;
    wait_fraction(md, r, opts)?;
    batch_per_worker(md, r, opts)?;
    upload_ratio(md, r, opts)?;
    staleness(md, r, opts)?;
    bytes_per_group(md, r, opts)
}

/// Who computes slowest and who waits most, per group and over all workers, and why.
fn stragglers(md: &mut String, r: &Run) {
    md.push_str("\n### Stragglers\n\n");
    let scopes = stragglers::analyse(r);
    if scopes.is_empty() {
        skip(md, "Straggler table", "the run logged no worker iterations");
        return;
    }
    md.push_str(&stragglers::markdown(&scopes));
    if !series::batches(r).is_empty() {
        md.push_str(&stragglers::absorbed_markdown(&stragglers::absorbed(r)));
    }
    md.push_str(
        "\nComputes slowest: the worker with the longest median compute per iteration, \
         against the scope's median. Waits most: the largest share of its iterations' time \
         spent waiting for weights. Causes: slow compute, a busy server, a group held at its \
         staleness bound by its slow worker, a slow link; see docs/usage.md.\n",
    );
}

/// The run's trace file, and a line in `md` saying where it is and how big.
fn trace(md: &mut String, r: &Run, opts: &Options) -> Result<()> {
    let events = trace::build(r);
    let name = format!("trace-{}.json", stem(&r.name));
    let bytes = trace::write(r, &events, &opts.out.join(&name))?;
    md.push_str(&format!(
        "\n### Trace\n\n[{name}]({name}): {} events, {:.1} MB, in Chrome trace-event \
         format; open it in https://ui.perfetto.dev or chrome://tracing.\n",
        events.len(),
        bytes as f64 / 1e6
    ));
    Ok(())
}

/// Says in `md` why picture `what` is not drawn.
fn skip(md: &mut String, what: &str, why: &str) {
    md.push_str(&format!("- {what}: not drawn, {why}.\n"));
}

/// The worker timeline of a window of the run.
fn timeline(md: &mut String, r: &Run, opts: &Options) -> Result<()> {
    let (s, out) = (stem(&r.name), &opts.out);
    md.push_str("\n### Worker timeline\n\n");
    match series::worker_time_range(r) {
        None => skip(md, "Worker timeline", "the run logged no worker iterations"),
        Some(range) => {
            let window = opts.window.unwrap_or_else(|| default_window(range));
            let lanes = series::timeline(r, window.0, window.1);
            if lanes.iter().all(|l| l.spans.is_empty()) {
                skip(
                    md,
                    "Worker timeline",
                    "no worker iteration falls in the window",
                );
            } else {
                let fig = TimelineFigure {
                    run: r.name.clone(),
                    lanes,
                    window,
                };
                md.push_str(&format!(
                    "Each lane is a worker: compute (blue), pushing its gradient (orange) and \
                     waiting for fresh weights (red), {:.2}-{:.2} s. A long red span is a \
                     worker held back by a slower one; a long blue one is a straggler.\n",
                    window.0, window.1
                ));
                embed(md, &plots::save(&fig, out, &format!("timeline-{s}"))?, out);
            }
        }
    }
    Ok(())
}

/// Each worker's share of time waiting for weights.
fn wait_fraction(md: &mut String, r: &Run, opts: &Options) -> Result<()> {
    let (s, out) = (stem(&r.name), &opts.out);
    md.push_str("\n### Wait fraction per worker\n\n");
    let waits = series::wait_fractions(r);
    // A single process never waits and never computes on stale weights.
    let single = r.layout.is_none();
    if single {
        skip(md, "Wait fraction", "a single process does not wait");
    } else if waits.is_empty() {
        skip(md, "Wait fraction", "the run logged no worker iterations");
    } else {
        let fig = BarFigure {
            caption: format!("{}: share of time waiting for weights", r.name),
            x_title: "Worker (world rank)".into(),
            y_title: "Wait fraction (%)".into(),
            bars: waits
                .iter()
                .map(|&(rank, g, f)| (rank.to_string(), g, 100.0 * f))
                .collect(),
            legend: group_legend(r),
        };
        embed(md, &plots::save(&fig, out, &format!("wait-{s}"))?, out);
    }
    Ok(())
}

/// Each worker's batch over the run, where batches follow speed.
fn batch_per_worker(md: &mut String, r: &Run, opts: &Options) -> Result<()> {
    let (s, out) = (stem(&r.name), &opts.out);
    md.push_str("\n### Batch per worker\n\n");
    let lines = series::batches(r);
    if lines.is_empty() {
        skip(
            md,
            "Batch per worker",
            "every worker kept one batch size (batches in proportion to speed are off)",
        );
        return Ok(());
    }
    let fig = LinesFigure {
        caption: format!("{}: batch per worker", r.name),
        y_title: "Batch (samples)".into(),
        lines: lines
            .into_iter()
            .enumerate()
            .map(|(i, (rank, pts))| (format!("rank {rank}"), i, pts))
            .collect(),
    };
    md.push_str(
        "Each worker's share of the global batch over the run (`sync.balance`): a slow \
         worker's line falls when a cut absorbs it.\n",
    );
    embed(md, &plots::save(&fig, out, &format!("batch-{s}"))?, out);
    Ok(())
}

/// Each group's upload ratio over the run.
fn upload_ratio(md: &mut String, r: &Run, opts: &Options) -> Result<()> {
    let (s, out) = (stem(&r.name), &opts.out);
    md.push_str("\n### Upload ratio per group\n\n");
    let ratios = series::ratios(r);
    if ratios.is_empty() {
        skip(
            md,
            "Upload ratio",
            "the run has no exchanges between groups (not gssp with several groups)",
        );
    } else {
        let fig = LinesFigure {
            caption: format!("{}: upload ratio per group", r.name),
            y_title: "Upload ratio (% of the model)".into(),
            lines: ratios
                .into_iter()
                .map(|(g, pts)| {
                    let percent = pts.iter().map(|&(t, x)| (t, 100.0 * x)).collect();
                    (format!("group {g}"), g, percent)
                })
                .collect(),
        };
        embed(md, &plots::save(&fig, out, &format!("ratio-{s}"))?, out);
    }
    Ok(())
}

/// How stale the applied pushes were.
fn staleness(md: &mut String, r: &Run, opts: &Options) -> Result<()> {
    let (s, out) = (stem(&r.name), &opts.out);
    md.push_str("\n### Staleness\n\n");
    // A single process computes on fresh weights.
    let single = r.layout.is_none();
    let shares = series::staleness_shares(r);
    if single {
        skip(
            md,
            "Staleness histogram",
            "a single process computes on fresh weights",
        );
    } else if shares.is_empty() {
        skip(md, "Staleness histogram", "the run logged no pushes");
    } else {
        let fig = BarFigure {
            caption: format!("{}: staleness of the applied pushes", r.name),
            x_title: "Staleness (optimizer steps)".into(),
            y_title: "Share of pushes (%)".into(),
            bars: shares
                .iter()
                .map(|&(st, f)| (st.to_string(), 0, 100.0 * f))
                .collect(),
            legend: Vec::new(),
        };
        embed(md, &plots::save(&fig, out, &format!("staleness-{s}"))?, out);
    }
    Ok(())
}

/// Bytes pushed by each group's workers.
fn bytes_per_group(md: &mut String, r: &Run, opts: &Options) -> Result<()> {
    let (s, out) = (stem(&r.name), &opts.out);
    md.push_str("\n### Bytes sent per group\n\n");
    let bytes = series::bytes_per_group(r);
    if bytes.iter().all(|&(_, b)| b <= 0.0) {
        skip(
            md,
            "Bytes per group",
            "the run's workers sent nothing (single process)",
        );
    } else {
        let fig = BarFigure {
            caption: format!("{}: bytes pushed by each group's workers", r.name),
            x_title: "Group".into(),
            y_title: "Bytes sent (MB)".into(),
            bars: bytes
                .iter()
                .map(|&(g, b)| (format!("group {g}"), g, b / 1e6))
                .collect(),
            legend: Vec::new(),
        };
        embed(md, &plots::save(&fig, out, &format!("bytes-{s}"))?, out);
    }
    Ok(())
}

/// "group g" legend entries when the run has more than one group.
fn group_legend(r: &Run) -> Vec<(usize, String)> {
    let n = r.group_count();
    if n < 2 {
        return Vec::new();
    }
    (0..n).map(|g| (g, format!("group {g}"))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_parses_start_end_seconds() {
        assert_eq!(parse_window("1.5:3").unwrap(), (1.5, 3.0));
        for bad in ["3", "3:1", "a:2", "-1:2", "1:inf"] {
            let e = parse_window(bad).unwrap_err().to_string();
            assert!(e.contains("--window"), "{bad}: {e}");
        }
    }

    #[test]
    fn default_window_is_two_seconds_mid_run() {
        assert_eq!(default_window((0.0, 10.0)), (4.0, 6.0));
        assert_eq!(default_window((0.5, 1.5)), (0.5, 1.5));
    }

    #[test]
    fn stems_are_file_name_safe() {
        assert_eq!(stem("seed-7/gssp topk"), "seed-7-gssp-topk");
    }
}
