//! `gssp bench plot`: a figure of the docs drawn again from the tables that `bench paper`
//! and `bench scale` leave (`bench.json`, one row per mode), so that every chart in
//! `docs/` comes from a command and the runs it shows, not from a hand-made drawing.
//!
//! - `time`: each mode's median time to the target accuracy as a bar, fastest first, the
//!   gssp variants highlighted, a mode that never got there as an outline across the budget;
//! - `accuracy`: each mode's median test-accuracy curve over its seeds (from the runs'
//!   `eval.csv`), one panel per cluster size, as `bench scale` draws it.
//!
//! Several `--from` directories combine: the rows of one cluster size are merged in the
//! order given, a mode that a later table also has taken from the later one (a newer
//! sitting of that mode), so one chart can show the current figure of every mode.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use super::jobs::BenchRow;
use crate::tools::report::plots::{TimeBar, TimeBarsFigure};

/// What `bench plot` draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Bars: each mode's median time to the target.
    Time,
    /// Curves: each mode's median test accuracy against time, a panel per size.
    Accuracy,
}

impl std::str::FromStr for Kind {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "time" => Ok(Kind::Time),
            "accuracy" => Ok(Kind::Accuracy),
            other => bail!("--kind: must be time or accuracy, got {other}"),
        }
    }
}

/// `gssp bench plot`'s arguments (the command line's, through clap).
#[derive(Debug, Clone, clap::Args)]
pub struct Options {
    /// `time`: each mode's median time to target as bars; `accuracy`: each mode's median
    /// accuracy against time, a panel per cluster size (reads the runs' eval.csv).
    #[arg(long, default_value = "time")]
    pub kind: Kind,
    /// A `bench paper` or `bench scale` --out (or one `<N>-workers` folder of it);
    /// repeatable: a mode in a later table replaces the earlier one's row.
    #[arg(long = "from", value_name = "DIR", required = true)]
    pub from: Vec<PathBuf>,
    /// Only this cluster size of a `bench scale` table (default: a panel per size).
    #[arg(long)]
    pub workers: Option<usize>,
    /// Only these modes (comma-separated variant names); default: all.
    #[arg(long, value_delimiter = ',')]
    pub modes: Vec<String>,
    /// The figure's title.
    #[arg(long)]
    pub title: Option<String>,
    /// A line under the title (what ran, when); default: the seeds.
    #[arg(long)]
    pub note: Option<String>,
    /// The file to write, e.g. docs/results-paper.svg (a PNG where it ends in .png).
    #[arg(long)]
    pub out: PathBuf,
}

/// One `bench.json`: the cluster size it is of (from its `<N>-workers` folder; `None` for a
/// `bench paper` table) and its rows.
#[derive(Debug, Clone)]
pub struct Table {
    pub workers: Option<usize>,
    pub source: PathBuf,
    pub rows: Vec<BenchRow>,
}

/// The tables under `dir`: its own `bench.json` (a `bench paper` output, or one size of a
/// `bench scale` output), else each `<N>-workers/bench.json` (a `bench scale` output),
/// smallest size first.
pub fn find_tables(dir: &Path) -> Result<Vec<Table>> {
    let own = dir.join("bench.json");
    if own.is_file() {
        let workers = dir
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(size_of_folder);
        return Ok(vec![read_table(&own, workers)?]);
    }
    let mut sizes = Vec::new();
    let entries =
        std::fs::read_dir(dir).with_context(|| format!("--from: cannot read {}", dir.display()))?;
    for entry in entries {
        let path = entry?.path();
        let size = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(size_of_folder);
        if let Some(n) = size.filter(|_| path.join("bench.json").is_file()) {
            sizes.push((n, path));
        }
    }
    if sizes.is_empty() {
        bail!(
            "--from {}: no bench.json there or in an <N>-workers folder (a bench paper or bench scale --out)",
            dir.display()
        );
    }
    sizes.sort();
    sizes
        .into_iter()
        .map(|(n, path)| read_table(&path.join("bench.json"), Some(n)))
        .collect()
}

/// `N` of a folder named `<N>-workers`.
fn size_of_folder(name: &str) -> Option<usize> {
    name.strip_suffix("-workers")?.parse().ok()
}

fn read_table(path: &Path, workers: Option<usize>) -> Result<Table> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let rows: Vec<BenchRow> =
        serde_json::from_str(&text).with_context(|| format!("{}", path.display()))?;
    Ok(Table {
        workers,
        source: path.to_path_buf(),
        rows,
    })
}

/// The tables combined per cluster size, sizes in the order first met: a mode's row is the
/// one of the last table that has it, kept at the place its first table gave it; a mode
/// only in a later table comes after. `workers` keeps one size, `modes` (when not empty)
/// those modes.
pub fn combine(
    tables: &[Table],
    workers: Option<usize>,
    modes: &[String],
) -> Vec<(Option<usize>, Vec<BenchRow>)> {
    let mut sizes: Vec<(Option<usize>, Vec<BenchRow>)> = Vec::new();
    for t in tables
        .iter()
        .filter(|t| workers.is_none() || t.workers == workers)
    {
        let at = match sizes.iter().position(|(w, _)| *w == t.workers) {
            Some(i) => i,
            None => {
                sizes.push((t.workers, Vec::new()));
                sizes.len() - 1
            }
        };
        let rows = &mut sizes[at].1;
        for r in &t.rows {
            match rows.iter_mut().find(|old| old.mode == r.mode) {
                Some(old) => *old = r.clone(),
                None => rows.push(r.clone()),
            }
        }
    }
    for (_, rows) in &mut sizes {
        rows.retain(|r| modes.is_empty() || modes.contains(&r.mode));
    }
    sizes.retain(|(_, rows)| !rows.is_empty());
    sizes
}

/// The label a mode's bar carries: the variant name, with the method's name where the
/// variant's does not say it.
pub fn mode_label(mode: &str) -> String {
    match mode {
        "asp-dc" => "DC-ASGD (asp-dc)".into(),
        "gssp" => "gssp (dense)".into(),
        other => other.into(),
    }
}

/// Seconds as the bars print them: whole seconds without decimals (`21 s`), else one.
fn seconds_text(s: f64) -> String {
    if (s - s.round()).abs() < 0.05 {
        format!("{s:.0} s")
    } else {
        format!("{s:.1} s")
    }
}

/// The bars of one table: the modes that reached the target, fastest first (ties in table
/// order), then those that never did, highest accuracy at the budget first.
pub fn time_bars(rows: &[BenchRow], budget_s: Option<f64>) -> Vec<TimeBar> {
    let mut reached: Vec<&BenchRow> = rows
        .iter()
        .filter(|r| r.time_to_target_s.is_some())
        .collect();
    reached.sort_by(|a, b| {
        let t = |r: &BenchRow| r.time_to_target_s.unwrap_or(f64::INFINITY);
        t(a).total_cmp(&t(b))
    });
    let mut never: Vec<&BenchRow> = rows
        .iter()
        .filter(|r| r.time_to_target_s.is_none())
        .collect();
    never.sort_by(|a, b| b.accuracy_at_budget.total_cmp(&a.accuracy_at_budget));
    reached
        .into_iter()
        .chain(never)
        .map(|r| TimeBar {
            label: mode_label(&r.mode),
            seconds: r.time_to_target_s,
            highlight: r.mode.starts_with("gssp"),
            text: match (r.time_to_target_s, budget_s) {
                (Some(s), _) => seconds_text(s),
                (None, Some(b)) => format!(
                    "never in {} ({:.2}%)",
                    seconds_text(b),
                    100.0 * r.accuracy_at_budget
                ),
                (None, None) => format!("never ({:.2}%)", 100.0 * r.accuracy_at_budget),
            },
        })
        .collect()
}

/// The seeds of a table's rows, as `42/43/44` (those of its first row).
fn seeds_text(rows: &[BenchRow]) -> String {
    let seeds = rows.first().map(|r| r.seeds.as_slice()).unwrap_or_default();
    let s: Vec<String> = seeds.iter().map(u64::to_string).collect();
    s.join("/")
}

/// The bar chart of one size's rows, titled.
pub fn time_figure(
    rows: &[BenchRow],
    (target, budget_s): (Option<f64>, Option<f64>),
    title: String,
    note: String,
) -> TimeBarsFigure {
    let seeds = rows.first().map_or(0, |r| r.seeds.len());
    let target = target.map_or_else(|| "target".into(), |t| format!("{:.0}%", 100.0 * t));
    let x_title = match seeds {
        0 | 1 => format!("seconds to {target} test accuracy"),
        n => format!("seconds to {target} test accuracy (median of {n} seeds)"),
    };
    TimeBarsFigure {
        title,
        note,
        x_title,
        bars: time_bars(rows, budget_s),
        budget_s,
    }
}

/// The target accuracy and the training budget of the runs behind `rows`, read from the
/// first run's `summary.json` and `config.toml` (`None` where they cannot be read).
fn run_facts(rows: &[BenchRow]) -> (Option<f64>, Option<f64>) {
    let Some(dir) = rows
        .iter()
        .flat_map(|r| r.run_dir.split(','))
        .find(|d| !d.is_empty())
        .map(Path::new)
    else {
        return (None, None);
    };
    let target = std::fs::read_to_string(dir.join("summary.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v.get("target_accuracy")?.as_f64())
        .filter(|t| *t > 0.0);
    let budget = std::fs::read_to_string(dir.join("config.toml"))
        .ok()
        .and_then(|t| toml::from_str::<toml::Table>(&t).ok())
        .and_then(|v| {
            let budget = v.get("run")?.get("time_budget_s")?;
            budget.as_float().or(budget.as_integer().map(|i| i as f64))
        })
        .filter(|b| *b > 0.0);
    (target, budget)
}

/// Runs `bench plot`: reads the tables, draws the figure into `opts.out`; returns what it
/// drew from (one line per size and table) for the caller to print.
pub fn plot(opts: &Options) -> Result<Vec<String>> {
    if opts.from.is_empty() {
        bail!("--from: name at least one bench output directory");
    }
    let mut tables = Vec::new();
    for dir in &opts.from {
        tables.extend(find_tables(dir)?);
    }
    let sizes = combine(&tables, opts.workers, &opts.modes);
    if sizes.is_empty() {
        bail!(
            "no rows to draw{}{}",
            opts.workers
                .map(|w| format!(" at {w} workers"))
                .unwrap_or_default(),
            if opts.modes.is_empty() {
                String::new()
            } else {
                format!(" for the modes {}", opts.modes.join(", "))
            }
        );
    }
    if let Some(parent) = opts.out.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    match opts.kind {
        Kind::Time => draw_time(&sizes, opts)?,
        Kind::Accuracy => draw_accuracy(&sizes, &opts.out)?,
    }
    let mut said: Vec<String> = tables
        .iter()
        .map(|t| format!("table: {}", t.source.display()))
        .collect();
    said.push(format!("figure: {}", opts.out.display()));
    Ok(said)
}

fn draw_time(sizes: &[(Option<usize>, Vec<BenchRow>)], opts: &Options) -> Result<()> {
    use crate::tools::report::plots::{save_as, PanelsFigure};
    let figure = |workers: Option<usize>, rows: &[BenchRow], several: bool| {
        let size = workers.map(|w| format!("{w} workers")).unwrap_or_default();
        let title = match (&opts.title, several) {
            (Some(t), false) => t.clone(),
            (Some(t), true) => format!("{t}: {size}"),
            (None, _) if size.is_empty() => "Time to the target accuracy per mode".into(),
            (None, _) => format!("Time to the target accuracy per mode, {size}"),
        };
        let note = opts
            .note
            .clone()
            .unwrap_or_else(|| format!("seeds {}", seeds_text(rows)));
        time_figure(rows, run_facts(rows), title, note)
    };
    if let [(workers, rows)] = sizes {
        let fig = figure(*workers, rows, false);
        return save_as(&fig, &opts.out, fig.size());
    }
    let panels: Vec<TimeBarsFigure> = sizes.iter().map(|(w, r)| figure(*w, r, true)).collect();
    let (width, height) = panels
        .iter()
        .map(TimeBarsFigure::size)
        .fold((0, 0), |a, b| (a.0.max(b.0), a.1.max(b.1)));
    let columns = 2.min(panels.len());
    let rows = panels.len().div_ceil(columns) as u32;
    let fig = PanelsFigure { panels, columns };
    save_as(&fig, &opts.out, (width * columns as u32, height * rows))
}

fn draw_accuracy(sizes: &[(Option<usize>, Vec<BenchRow>)], out: &Path) -> Result<()> {
    use crate::tools::report::plots::{save_as, PanelsFigure};
    let panels = sizes
        .iter()
        .map(|(workers, rows)| super::scale::accuracy_panel(*workers, rows))
        .collect::<Result<Vec<_>>>()?;
    let columns = if panels.len() > 2 { 2 } else { panels.len() };
    let rows = panels.len().div_ceil(columns.max(1)) as u32;
    let fig = PanelsFigure { panels, columns };
    save_as(&fig, out, (1280 * columns.max(1) as u32, 800 * rows.max(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(mode: &str, t: Option<f64>, acc: f64) -> BenchRow {
        BenchRow {
            clock: "wall".into(),
            mode: mode.into(),
            ranks: 17,
            time_to_target_s: t,
            accuracy_at_budget: acc,
            final_test_loss: 0.1,
            mean_wait_fraction: 0.1,
            bytes_inter_group: 0,
            bytes_sent: 0,
            wall_s: 60.0,
            images_per_s: 2000.0,
            epochs: 1.0,
            exchange_share_of_busy: None,
            max_exchange_share_of_busy: None,
            exchange_share_of_busy_cpu: None,
            server_busy_fraction: None,
            mean_push_staleness: None,
            replica_max_error: None,
            gssp_speedup: None,
            seeds: vec![1, 2, 3],
            time_to_target_s_runs: vec![t; 3],
            diverged_runs: 0,
            run_dir: String::new(),
        }
    }

    fn table(workers: Option<usize>, rows: Vec<BenchRow>) -> Table {
        Table {
            workers,
            source: PathBuf::from("bench.json"),
            rows,
        }
    }

    #[test]
    fn bars_go_fastest_first_then_never_by_accuracy() {
        let rows = vec![
            row("bsp", None, 0.9743),
            row("asp", Some(56.0), 0.98),
            row("gssp-gdtopk", Some(27.0), 0.984),
            row("asp-dc", Some(47.5), 0.98),
            row("ssp", None, 0.9753),
            row("allreduce", Some(27.0), 0.98),
        ];
        let bars = time_bars(&rows, Some(60.0));
        let labels: Vec<&str> = bars.iter().map(|b| b.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "gssp-gdtopk",
                "allreduce",
                "DC-ASGD (asp-dc)",
                "asp",
                "ssp",
                "bsp"
            ],
            "ties keep table order; never last, higher accuracy first"
        );
        assert_eq!(bars[0].text, "27 s");
        assert!(bars[0].highlight && !bars[1].highlight);
        assert_eq!(bars[2].text, "47.5 s");
        assert_eq!(bars[4].seconds, None);
        assert_eq!(bars[4].text, "never in 60 s (97.53%)");
        assert_eq!(time_bars(&rows[..1], None)[0].text, "never (97.43%)");
        assert!(time_bars(&[], Some(60.0)).is_empty());
    }

    #[test]
    fn a_later_table_replaces_a_mode_in_place_and_adds_its_new_ones() {
        let old = table(
            None,
            vec![
                row("gssp-gdtopk", Some(27.0), 0.984),
                row("localsgd", Some(37.0), 0.984),
                row("asp-dc", Some(48.0), 0.98),
            ],
        );
        let new = table(
            None,
            vec![
                row("asp-dc", Some(47.0), 0.98),
                row("gssp-gdtopk-outer", Some(23.0), 0.985),
                row("gssp-gdtopk", Some(28.0), 0.983),
            ],
        );
        let sizes = combine(&[old, new], None, &[]);
        assert_eq!(sizes.len(), 1);
        let got: Vec<(&str, Option<f64>)> = sizes[0]
            .1
            .iter()
            .map(|r| (r.mode.as_str(), r.time_to_target_s))
            .collect();
        assert_eq!(
            got,
            [
                ("gssp-gdtopk", Some(28.0)),
                ("localsgd", Some(37.0)),
                ("asp-dc", Some(47.0)),
                ("gssp-gdtopk-outer", Some(23.0)),
            ]
        );
    }

    #[test]
    fn combine_keeps_sizes_apart_and_filters_sizes_and_modes() {
        let tables = [
            table(Some(8), vec![row("asp", Some(19.0), 0.98)]),
            table(
                Some(16),
                vec![row("asp", Some(21.0), 0.98), row("bsp", Some(43.0), 0.98)],
            ),
            table(Some(8), vec![row("bsp", Some(39.0), 0.98)]),
        ];
        let all = combine(&tables, None, &[]);
        let shape: Vec<(Option<usize>, usize)> = all.iter().map(|(w, r)| (*w, r.len())).collect();
        assert_eq!(shape, [(Some(8), 2), (Some(16), 2)]);
        let one = combine(&tables, Some(16), &["bsp".to_string()]);
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].0, Some(16));
        assert_eq!(one[0].1.len(), 1);
        assert_eq!(one[0].1[0].time_to_target_s, Some(43.0));
        assert!(combine(&tables, Some(32), &[]).is_empty());
        assert!(combine(&tables, None, &["ssp".to_string()]).is_empty());
    }

    #[test]
    fn the_figure_says_the_target_and_the_seeds() {
        let rows = vec![row("asp", Some(21.0), 0.98), row("bsp", None, 0.97)];
        let fig = time_figure(&rows, (Some(0.98), Some(60.0)), "T".into(), "N".into());
        assert_eq!(
            fig.x_title,
            "seconds to 98% test accuracy (median of 3 seeds)"
        );
        assert_eq!(fig.bars.len(), 2);
        assert_eq!(fig.budget_s, Some(60.0));
        assert_eq!(seeds_text(&rows), "1/2/3");
        let fig = time_figure(&rows[..1], (None, None), "T".into(), String::new());
        assert!(fig.x_title.starts_with("seconds to target test accuracy"));
    }

    #[test]
    fn tables_are_found_in_paper_and_scale_outputs_and_drawn() {
        let tmp = tempfile::tempdir().unwrap();
        let write = |dir: &Path, rows: &[BenchRow]| {
            std::fs::create_dir_all(dir).unwrap();
            std::fs::write(dir.join("bench.json"), serde_json::to_string(rows).unwrap()).unwrap();
        };
        let paper = tmp.path().join("paper");
        // The first run's summary and config give the target and the budget.
        let run = paper.join("seed-1").join("asp");
        std::fs::create_dir_all(&run).unwrap();
        std::fs::write(run.join("summary.json"), r#"{"target_accuracy": 0.98}"#).unwrap();
        std::fs::write(run.join("config.toml"), "[run]\ntime_budget_s = 60.0\n").unwrap();
        let mut asp = row("asp", Some(19.0), 0.98);
        asp.run_dir = run.display().to_string();
        write(&paper, &[asp, row("ssp", None, 0.97)]);
        let scale = tmp.path().join("scale");
        write(&scale.join("16-workers"), &[row("asp", Some(21.0), 0.98)]);
        write(&scale.join("8-workers"), &[row("asp", Some(19.0), 0.98)]);
        std::fs::create_dir_all(scale.join("report")).unwrap();

        let found = find_tables(&paper).unwrap();
        assert_eq!((found.len(), found[0].workers), (1, None));
        let sizes: Vec<Option<usize>> = find_tables(&scale)
            .unwrap()
            .iter()
            .map(|t| t.workers)
            .collect();
        assert_eq!(sizes, [Some(8), Some(16)]);
        assert_eq!(
            find_tables(&scale.join("16-workers")).unwrap()[0].workers,
            Some(16)
        );
        let err = find_tables(tmp.path()).unwrap_err().to_string();
        assert!(err.contains("no bench.json"), "{err}");

        let out = tmp.path().join("docs").join("bars.svg");
        let opts = Options {
            kind: Kind::Time,
            from: vec![paper.clone()],
            workers: None,
            modes: Vec::new(),
            title: Some("Paper scenario".into()),
            note: None,
            out: out.clone(),
        };
        let said = plot(&opts).unwrap();
        assert_eq!(said.last().unwrap(), &format!("figure: {}", out.display()));
        let svg = std::fs::read_to_string(&out).unwrap();
        for text in [
            "Paper scenario",
            "seeds 1/2/3",
            "asp",
            "19 s",
            "never in 60 s (97.00%)",
            "seconds to 98% test accuracy (median of 3 seeds)",
        ] {
            assert!(svg.contains(text), "{text} missing from the SVG");
        }
        // The same as a PNG, where the name says so.
        let png = tmp.path().join("bars.png");
        plot(&Options {
            out: png.clone(),
            from: vec![paper.clone()],
            title: None,
            ..opts
        })
        .unwrap();
        assert!(std::fs::read(&png).unwrap().starts_with(b"\x89PNG"));
        // Two sizes: a panel each.
        let out2 = tmp.path().join("sizes.svg");
        let opts = Options {
            kind: Kind::Time,
            from: vec![scale],
            workers: None,
            modes: Vec::new(),
            title: Some("Paper scenario".into()),
            note: None,
            out: out2.clone(),
        };
        plot(&opts).unwrap();
        let svg = std::fs::read_to_string(&out2).unwrap();
        assert!(svg.contains("Paper scenario: 8 workers"));
        assert!(svg.contains("Paper scenario: 16 workers"));
    }

    #[test]
    fn the_accuracy_panels_take_each_modes_median_curve_over_its_runs() {
        let tmp = tempfile::tempdir().unwrap();
        let size = tmp.path().join("scale").join("16-workers");
        let mut rows = Vec::new();
        for mode in ["asp", "gssp-gdtopk"] {
            let mut dirs = Vec::new();
            for seed in [1, 2] {
                let run = size.join(format!("seed-{seed}")).join(mode);
                std::fs::create_dir_all(&run).unwrap();
                let summary = serde_json::json!({
                    "mode": mode, "model": "lenet5", "dataset": "mnist", "workers": 16,
                    "wall_s": 60.0, "images_per_s": 2000.0, "final_test_accuracy": 0.985,
                    "target_accuracy": 0.98, "time_to_target_s": 20.0,
                });
                std::fs::write(run.join("summary.json"), summary.to_string()).unwrap();
                std::fs::write(
                    run.join("eval.csv"),
                    "time_s,epoch,iteration,test_loss,test_accuracy\n\
                     10.0,0.2,100,0.3,0.95\n\
                     20.0,0.4,200,0.1,0.981\n",
                )
                .unwrap();
                dirs.push(run.display().to_string());
            }
            let mut r = row(mode, Some(20.0), 0.985);
            r.seeds = vec![1, 2];
            r.run_dir = dirs.join(",");
            rows.push(r);
        }
        std::fs::write(
            size.join("bench.json"),
            serde_json::to_string(&rows).unwrap(),
        )
        .unwrap();
        let out = tmp.path().join("accuracy.svg");
        plot(&Options {
            kind: Kind::Accuracy,
            from: vec![tmp.path().join("scale")],
            workers: None,
            modes: Vec::new(),
            title: None,
            note: None,
            out: out.clone(),
        })
        .unwrap();
        let svg = std::fs::read_to_string(&out).unwrap();
        for text in [
            "16 workers, median of 2 seeds",
            "asp",
            "gssp-gdtopk",
            "target 98.0 %",
        ] {
            assert!(svg.contains(text), "{text} missing from the SVG");
        }
    }
}
