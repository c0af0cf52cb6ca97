//! `gssp bench configs`: runs every shipped config as its header says (with its own
//! defaults, no overrides) and checks that the final model reaches the config's own
//! `run.target_accuracy`.
//!
//! A config states its world size in a `# ranks: N` comment before its first table and is
//! run under `mpirun -n N`; a config without one is a single-process config, run directly.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::jobs::{launch, Job};
use crate::config::Config;

/// The comment lines before the first non-comment, non-blank line.
pub fn header(text: &str) -> Vec<&str> {
    text.lines()
        .take_while(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
        .filter(|l| l.trim_start().starts_with('#'))
        .collect()
}

/// The N of a `# ranks: N` header line: `Ok(None)` when there is none, `Err` when the line is
/// there but malformed or repeated.
pub fn declared_ranks(text: &str) -> Result<Option<usize>, String> {
    let mut found = None;
    for line in header(text) {
        let body = line.trim_start().trim_start_matches('#').trim();
        if let Some(rest) = body.strip_prefix("ranks:") {
            let n: usize = rest
                .trim()
                .parse()
                .map_err(|e| format!("`{line}`: ranks is not a positive integer: {e}"))?;
            if n == 0 {
                return Err(format!("`{line}`: ranks must be >= 1"));
            }
            if found.replace(n).is_some() {
                return Err(format!("`{line}`: more than one ranks line"));
            }
        }
    }
    Ok(found)
}

/// One config's check.
#[derive(Debug, Clone, Serialize)]
pub struct ConfigCheck {
    pub config: String,
    pub ranks: usize,
    pub mode: String,
    pub target_accuracy: f64,
    pub final_test_accuracy: f64,
    /// The last evaluation before the final model's (snapshot or periodic evaluation).
    pub last_snapshot_accuracy: Option<f64>,
    pub time_to_target_s: Option<f64>,
    pub wall_s: f64,
    pub passed: bool,
    pub run_dir: String,
}

#[derive(Debug, Deserialize)]
struct SummaryIn {
    final_test_accuracy: f64,
    time_to_target_s: Option<f64>,
    wall_s: f64,
}

/// The accuracy of the evaluation before the last one in an `eval.csv`.
fn last_snapshot_accuracy(eval_csv: &str) -> Option<f64> {
    let mut lines = eval_csv.lines();
    let col = lines
        .next()?
        .split(',')
        .position(|c| c == "test_accuracy")?;
    let rows: Vec<&str> = lines.filter(|l| !l.trim().is_empty()).collect();
    let row = rows.len().checked_sub(2).map(|i| rows[i])?;
    row.split(',').nth(col)?.parse().ok()
}

/// Runs each of `configs` into `out/<file stem>` and checks it; prints a table, writes
/// `out/configs.json`, and fails if any config missed its target.
pub fn check_all(configs: &[PathBuf], out: &Path) -> Result<Vec<ConfigCheck>> {
    if configs.is_empty() {
        anyhow::bail!("no configs to check");
    }
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let mut checks = Vec::new();
    for path in configs {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let ranks =
            declared_ranks(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let cfg = Config::load(path, &[])?;
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .context("config file without a name")?;
        let dir = out.join(stem);
        launch(&Job {
            name: stem,
            config: path,
            ranks,
            overrides: &[],
            dir: &dir,
            timeout_s: 3600,
        })?;
        let summary_path = dir.join("summary.json");
        let s: SummaryIn = serde_json::from_str(
            &std::fs::read_to_string(&summary_path)
                .with_context(|| format!("cannot read {}", summary_path.display()))?,
        )
        .with_context(|| format!("{}", summary_path.display()))?;
        let eval = std::fs::read_to_string(dir.join("eval.csv")).unwrap_or_default();
        let check = ConfigCheck {
            config: path.display().to_string(),
            ranks: ranks.unwrap_or(1),
            mode: cfg.sync.mode.to_string(),
            target_accuracy: cfg.run.target_accuracy,
            final_test_accuracy: s.final_test_accuracy,
            last_snapshot_accuracy: last_snapshot_accuracy(&eval),
            time_to_target_s: s.time_to_target_s,
            wall_s: s.wall_s,
            passed: s.final_test_accuracy >= cfg.run.target_accuracy,
            run_dir: dir.display().to_string(),
        };
        eprintln!(
            "bench: {stem}: final {:.2}% against target {:.2}%: {}",
            100.0 * check.final_test_accuracy,
            100.0 * check.target_accuracy,
            if check.passed { "ok" } else { "MISSED" }
        );
        checks.push(check);
    }
    println!(
        "{:<28} {:>5} {:<9} {:>7} {:>8} {:>9} {:>9} {:>7}",
        "config", "ranks", "mode", "target", "final", "last_snap", "t_target", "result"
    );
    for c in &checks {
        println!(
            "{:<28} {:>5} {:<9} {:>6.2}% {:>7.2}% {:>9} {:>9} {:>7}",
            Path::new(&c.config)
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default(),
            c.ranks,
            c.mode,
            100.0 * c.target_accuracy,
            100.0 * c.final_test_accuracy,
            c.last_snapshot_accuracy
                .map(|a| format!("{:.2}%", 100.0 * a))
                .unwrap_or_else(|| "-".into()),
            c.time_to_target_s
                .map(|t| format!("{t:.1}"))
                .unwrap_or_else(|| "never".into()),
            if c.passed { "ok" } else { "MISSED" }
        );
    }
    let path = out.join("configs.json");
    std::fs::write(&path, serde_json::to_string_pretty(&checks)? + "\n")
        .with_context(|| format!("cannot write {}", path.display()))?;
    println!("table: {}", path.display());
    let missed: Vec<&str> = checks
        .iter()
        .filter(|c| !c.passed)
        .map(|c| c.config.as_str())
        .collect();
    if !missed.is_empty() {
        anyhow::bail!("missed their target accuracy: {}", missed.join(", "));
    }
    Ok(checks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_comment_parsing() {
        assert_eq!(declared_ranks("# ranks: 6\n[run]\n"), Ok(Some(6)));
        assert_eq!(
            declared_ranks("# a config\n\n[run]\n# ranks: 6\n"),
            Ok(None)
        );
        assert!(declared_ranks("# ranks: six\n").is_err());
        assert!(declared_ranks("# ranks: 0\n").is_err());
        assert!(declared_ranks("# ranks: 2\n# ranks: 3\n").is_err());
    }

    #[test]
    fn the_last_snapshot_is_the_row_before_the_final_model() {
        let csv = "time_s,epoch,iteration,test_loss,test_accuracy\n1,0.5,10,0.5,0.80\n2,1,20,0.4,0.85\n2.1,1,21,0.4,0.84\n";
        assert_eq!(last_snapshot_accuracy(csv), Some(0.85));
        assert_eq!(
            last_snapshot_accuracy("time_s,test_accuracy\n1,0.9\n"),
            None,
            "only the final model"
        );
        assert_eq!(last_snapshot_accuracy(""), None);
    }
}
