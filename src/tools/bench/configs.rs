//! `gssp bench configs`: runs every shipped config as its header says (with its own
//! defaults, no overrides) and checks that the final model reaches the config's own
//! `run.target_accuracy`.
//!
//! A config states its world size in a `# ranks: N` comment before its first table and is
//! run under `mpirun -n N`; a config without one is a single-process config, run directly.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::jobs::{divergence, launch, Job};
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
    /// `None` when the run failed before its final evaluation.
    pub final_test_accuracy: Option<f64>,
    /// The last evaluation before the final model's (snapshot or periodic evaluation).
    pub last_snapshot_accuracy: Option<f64>,
    pub time_to_target_s: Option<f64>,
    pub wall_s: Option<f64>,
    pub passed: bool,
    /// Why the run failed (a diverged or dead job), `None` when it finished.
    pub error: Option<String>,
    pub run_dir: String,
}

impl ConfigCheck {
    /// The row of a run with no summary: failed, with what its evaluations show.
    fn unfinished(p: &Planned, target: f64, eval_csv: &str, dir: &Path) -> ConfigCheck {
        ConfigCheck {
            config: p.path.display().to_string(),
            ranks: p.ranks.unwrap_or(1),
            mode: p.cfg.sync.mode.to_string(),
            target_accuracy: target,
            final_test_accuracy: None,
            last_snapshot_accuracy: last_snapshot_accuracy(eval_csv),
            time_to_target_s: None,
            wall_s: None,
            passed: false,
            error: None,
            run_dir: dir.display().to_string(),
        }
    }
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

/// A config ready to run: its file, parsed settings, `# ranks` and run directory name.
struct Planned<'a> {
    path: &'a Path,
    cfg: Config,
    ranks: Option<usize>,
    stem: &'a str,
}

/// Reads and validates `path` before anything runs, so a bad file stops the check at once.
fn plan(path: &Path) -> Result<Planned<'_>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let ranks = declared_ranks(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let cfg = Config::load(path, &[])?;
    cfg.validate_for_world(ranks.unwrap_or(1))
        .with_context(|| format!("{}", path.display()))?;
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .with_context(|| format!("{}: config file without a name", path.display()))?;
    Ok(Planned {
        path,
        cfg,
        ranks,
        stem,
    })
}

/// Runs one planned config into `dir` and reads its summary.
fn run_one(p: &Planned, dir: &Path) -> Result<SummaryIn> {
    launch(&Job {
        name: p.stem,
        config: p.path,
        ranks: p.ranks,
        overrides: &[],
        dir,
        timeout_s: 3600,
        clock: super::jobs::Clock::Wall,
    })?;
    let summary_path = dir.join("summary.json");
    serde_json::from_str(
        &std::fs::read_to_string(&summary_path)
            .with_context(|| format!("cannot read {}", summary_path.display()))?,
    )
    .with_context(|| format!("{}", summary_path.display()))
}

/// Runs each of `configs` into `out/<file stem>` and checks it; prints a table, writes
/// `out/configs.json`, and fails if any config missed its target. Every file is read and
/// validated first; a run that fails (diverges, dies, times out) is recorded with its error
/// and the others still run.
pub fn check_all(configs: &[PathBuf], out: &Path) -> Result<Vec<ConfigCheck>> {
    if configs.is_empty() {
        anyhow::bail!("no configs to check");
    }
    let planned = configs
        .iter()
        .map(|p| plan(p))
        .collect::<Result<Vec<_>>>()?;
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let mut checks = Vec::new();
    for p in &planned {
        let dir = out.join(p.stem);
        let outcome = run_one(p, &dir);
        let eval = std::fs::read_to_string(dir.join("eval.csv")).unwrap_or_default();
        let target = p.cfg.run.target_accuracy;
        let check = match outcome {
            Ok(s) => {
                let passed = s.final_test_accuracy >= target;
                eprintln!(
                    "bench: {}: final {:.2}% against target {:.2}%: {}",
                    p.stem,
                    100.0 * s.final_test_accuracy,
                    100.0 * target,
                    if passed { "ok" } else { "MISSED" }
                );
                ConfigCheck {
                    final_test_accuracy: Some(s.final_test_accuracy),
                    time_to_target_s: s.time_to_target_s,
                    wall_s: Some(s.wall_s),
                    passed,
                    ..ConfigCheck::unfinished(p, target, &eval, &dir)
                }
            }
            Err(e) => {
                let error = match divergence(&dir) {
                    Some(line) => format!("diverged: {line}"),
                    None => format!("{e:#}"),
                };
                eprintln!("bench: {}: FAILED: {error}", p.stem);
                ConfigCheck {
                    error: Some(error),
                    ..ConfigCheck::unfinished(p, target, &eval, &dir)
                }
            }
        };
        checks.push(check);
    }
    println!(
        "{:<28} {:>5} {:<9} {:>7} {:>8} {:>9} {:>9} {:>7}",
        "config", "ranks", "mode", "target", "final", "last_snap", "t_target", "result"
    );
    for c in &checks {
        println!(
            "{:<28} {:>5} {:<9} {:>6.2}% {:>8} {:>9} {:>9} {:>7}",
            Path::new(&c.config)
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default(),
            c.ranks,
            c.mode,
            100.0 * c.target_accuracy,
            c.final_test_accuracy
                .map(|a| format!("{:.2}%", 100.0 * a))
                .unwrap_or_else(|| "-".into()),
            c.last_snapshot_accuracy
                .map(|a| format!("{:.2}%", 100.0 * a))
                .unwrap_or_else(|| "-".into()),
            c.time_to_target_s
                .map(|t| format!("{t:.1}"))
                .unwrap_or_else(|| "never".into()),
            match (c.passed, &c.error) {
                (true, _) => "ok",
                (false, None) => "MISSED",
                (false, Some(_)) => "FAILED",
            }
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
        anyhow::bail!(
            "failed or missed their target accuracy: {}",
            missed.join(", ")
        );
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
