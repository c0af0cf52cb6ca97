//! The comparison table of `report.md`: one row per run, figures straight from its
//! summary (and its `eval.csv` for the accuracy at the budget), speed-up against a baseline.

use super::read::Run;
use super::series::{accuracy_at, time_to_val_perplexity, val_perplexity_at};

/// One run's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub name: String,
    pub mode: String,
    pub time_to_target_s: Option<f64>,
    pub accuracy_at_budget: Option<f64>,
    pub final_accuracy: f64,
    pub mean_wait_fraction: Option<f64>,
    pub bytes_inter_group: Option<u64>,
    pub images_per_s: f64,
    /// Baseline's time to target over this run's; `None` where either never got there.
    pub speedup: Option<f64>,
}

/// The rows of `runs`, with speed-ups against the run named `baseline`.
pub fn rows(runs: &[Run], baseline: &str, budget_s: f64) -> Vec<Row> {
    let base_t = runs
        .iter()
        .find(|r| r.name == baseline)
        .and_then(|r| r.summary.time_to_target_s);
    runs.iter()
        .map(|r| {
            let s = &r.summary;
            Row {
                name: r.name.clone(),
                mode: s.mode.clone(),
                time_to_target_s: s.time_to_target_s,
                accuracy_at_budget: accuracy_at(&r.evals, budget_s),
                final_accuracy: s.final_test_accuracy,
                mean_wait_fraction: s.mean_wait_fraction,
                bytes_inter_group: s.bytes_inter_group,
                images_per_s: s.images_per_s,
                speedup: match (base_t, s.time_to_target_s) {
                    (Some(b), Some(t)) if t > 0.0 => Some(b / t),
                    _ => None,
                },
            }
        })
        .collect()
}

/// The table as Markdown. Percentages and seconds keep the digits the summaries have
/// up to what a reader compares (two decimals).
pub fn markdown(rows: &[Row], budget_s: f64, baseline: &str) -> String {
    let mut s = format!(
        "| Run | Mode | Time to target (s) | Accuracy at {budget_s:.1} s (%) | Final accuracy (%) \
         | Mean wait fraction (%) | Bytes between groups (MB) | Images/s | Speed-up vs {baseline} |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|\n"
    );
    let dash = || "–".to_string();
    for r in rows {
        s += &format!(
            "| {} | {} | {} | {} | {:.2} | {} | {} | {:.0} | {} |\n",
            r.name,
            r.mode,
            r.time_to_target_s.map_or_else(dash, |t| format!("{t:.2}")),
            r.accuracy_at_budget
                .map_or_else(dash, |a| format!("{:.2}", 100.0 * a)),
            100.0 * r.final_accuracy,
            r.mean_wait_fraction
                .map_or_else(dash, |w| format!("{:.2}", 100.0 * w)),
            r.bytes_inter_group
                .map_or_else(dash, |b| format!("{:.2}", b as f64 / 1e6)),
            r.images_per_s,
            r.speedup.map_or_else(dash, |x| format!("{x:.2}x")),
        );
    }
    s
}

/// One text run's translation figures.
#[derive(Debug, Clone, PartialEq)]
pub struct TextRow {
    pub name: String,
    pub mode: String,
    pub val_perplexity_at_budget: Option<f64>,
    pub final_test_perplexity: Option<f64>,
    pub final_bleu: Option<f64>,
    /// First time the run's val perplexity reached the baseline's at the budget.
    pub time_to_baseline_perplexity_s: Option<f64>,
    /// The budget over that time: how much sooner than the baseline's budget the run got
    /// there (`None` for the baseline, whose row shows when it first got there: before
    /// the budget on a plateau).
    pub speedup: Option<f64>,
}

/// The text runs' rows (runs that logged val perplexity), against the baseline's val
/// perplexity at `budget_s`. Empty where no run is a text run.
pub fn text_rows(runs: &[Run], baseline: &str, budget_s: f64) -> Vec<TextRow> {
    let goal = runs
        .iter()
        .find(|r| r.name == baseline)
        .and_then(|r| val_perplexity_at(&r.evals, budget_s));
    runs.iter()
        .filter(|r| r.evals.iter().any(|e| e.val_perplexity.is_some()))
        .map(|r| {
            let t = goal.and_then(|p| time_to_val_perplexity(&r.evals, p));
            TextRow {
                name: r.name.clone(),
                mode: r.summary.mode.clone(),
                val_perplexity_at_budget: val_perplexity_at(&r.evals, budget_s),
                final_test_perplexity: r.summary.final_test_perplexity,
                final_bleu: r.summary.final_bleu,
                time_to_baseline_perplexity_s: t,
                speedup: t
                    .filter(|&t| t > 0.0 && r.name != baseline)
                    .map(|t| budget_s / t),
            }
        })
        .collect()
}

/// The text runs' table as Markdown.
pub fn text_markdown(rows: &[TextRow], budget_s: f64, baseline: &str) -> String {
    let mut s = format!(
        "| Run | Mode | Val perplexity at {budget_s:.1} s | Final test perplexity | BLEU \
         | Time to {baseline}'s val perplexity at {budget_s:.1} s (s) | Speed-up |\n\
         |---|---|---:|---:|---:|---:|---:|\n"
    );
    let dash = || "–".to_string();
    let num = |v: Option<f64>| v.map_or_else(dash, |v| format!("{v:.2}"));
    for r in rows {
        s += &format!(
            "| {} | {} | {} | {} | {} | {} | {} |\n",
            r.name,
            r.mode,
            num(r.val_perplexity_at_budget),
            num(r.final_test_perplexity),
            num(r.final_bleu),
            num(r.time_to_baseline_perplexity_s),
            r.speedup.map_or_else(dash, |x| format!("{x:.2}x")),
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::report::series::tests::sample_run;

    fn two_runs() -> Vec<Run> {
        let a = sample_run();
        let mut b = sample_run();
        b.name = "asp".into();
        b.summary.mode = "asp".into();
        b.summary.time_to_target_s = Some(10.0);
        b.summary.bytes_inter_group = None;
        let mut c = sample_run();
        c.name = "bsp".into();
        c.summary.time_to_target_s = None;
        vec![a, b, c]
    }

    #[test]
    fn speedup_is_the_baselines_time_over_the_runs() {
        let r = rows(&two_runs(), "asp", 6.0);
        assert_eq!(r[0].speedup, Some(2.0));
        assert_eq!(r[1].speedup, Some(1.0));
        assert_eq!(r[2].speedup, None);
        assert_eq!(r[0].accuracy_at_budget, Some(0.85));
        // A baseline that never reached the target gives no speed-ups.
        assert!(rows(&two_runs(), "bsp", 6.0)
            .iter()
            .all(|r| r.speedup.is_none()));
    }

    #[test]
    fn markdown_has_a_row_per_run_with_the_summaries_figures() {
        let runs = two_runs();
        let md = markdown(&rows(&runs, "gssp", 6.0), 6.0, "gssp");
        let lines: Vec<&str> = md.lines().collect();
        assert_eq!(lines.len(), 2 + runs.len());
        assert!(lines[0].contains("Accuracy at 6.0 s") && lines[0].contains("vs gssp"));
        assert_eq!(
            lines[2],
            "| gssp | gssp | 5.00 | 85.00 | 90.00 | 20.00 | 0.00 | 100 | 1.00x |"
        );
        assert_eq!(
            lines[3],
            "| asp | asp | 10.00 | 85.00 | 90.00 | 20.00 | – | 100 | 0.50x |"
        );
        assert!(lines[4].starts_with("| bsp | gssp | – |"));
    }

    #[test]
    fn text_rows_time_each_run_to_the_baselines_val_perplexity_at_the_budget() {
        let mut runs = two_runs();
        let curve = |pts: &[(f64, f64)]| -> Vec<crate::tools::report::read::Eval> {
            pts.iter()
                .map(|&(time_s, v)| crate::tools::report::read::Eval {
                    time_s,
                    test_accuracy: 0.0,
                    val_perplexity: Some(v),
                })
                .collect()
        };
        // The baseline reaches 60 at 80 s and holds it to the budget.
        runs[0].evals = curve(&[(10.0, 200.0), (50.0, 80.0), (80.0, 60.0), (100.0, 60.0)]);
        runs[1].evals = curve(&[(10.0, 150.0), (40.0, 60.0), (100.0, 30.0)]);
        let rows = text_rows(&runs, &runs[0].name.clone(), 100.0);
        // The third run logged no perplexity: not a text run.
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].val_perplexity_at_budget, Some(60.0));
        assert_eq!(rows[0].time_to_baseline_perplexity_s, Some(80.0));
        assert_eq!(rows[0].speedup, None, "the baseline against itself");
        assert_eq!(rows[1].time_to_baseline_perplexity_s, Some(40.0));
        assert_eq!(rows[1].speedup, Some(2.5));
        let md = text_markdown(&rows, 100.0, "base");
        assert!(md.contains("| 30.00 | – | – | 40.00 | 2.50x |"), "{md}");
    }
}
