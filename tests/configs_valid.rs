//! Every shipped `configs/*.toml` loads, validates for the world size it is meant to run on,
//! and its header comments agree with its contents.
//!
//! A config states its world size in a `# ranks: N` comment before its first table; a config
//! without one is a single-process config and must be valid on 1 rank. When the header shows
//! an `mpirun` command, that command must start N ranks on this very file, so copying the
//! line from the header runs what the file says; a config whose header says `# clock:
//! simulated` (a cluster this machine cannot run) shows the `gssp train --simulate` line
//! instead.

use std::path::{Path, PathBuf};

use gssp::config::Config;
use gssp::tools::bench::configs::{declared_ranks, header};

const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// All `configs/*.toml`, sorted; fails if there are none (a moved folder must not pass).
fn config_files() -> Vec<PathBuf> {
    let dir = Path::new(REPO).join("configs");
    let entries =
        std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display())))
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no configs in {}", dir.display());
    files
}

#[test]
fn every_config_validates_for_its_declared_world() {
    let mut failures = Vec::new();
    for path in config_files() {
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let ranks = match declared_ranks(&text) {
            Ok(r) => r.unwrap_or(1),
            Err(e) => {
                failures.push(format!("{}: {e}", path.display()));
                continue;
            }
        };
        match Config::load(&path, &[]).and_then(|c| c.validate_for_world(ranks)) {
            Ok(()) => {}
            Err(e) => failures.push(format!("{} on {ranks} ranks: {e}", path.display())),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn job_configs_name_their_run_and_their_mpirun_line() {
    let mut failures = Vec::new();
    let mut jobs = 0;
    for path in config_files() {
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let Ok(Some(ranks)) = declared_ranks(&text) else {
            continue;
        };
        jobs += 1;
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_string();
        let cfg = match Config::load(&path, &[]) {
            Ok(c) => c,
            Err(e) => {
                failures.push(format!("{}: {e}", path.display()));
                continue;
            }
        };
        // The run directory runs/<name> is named after the file.
        if cfg.run.name != stem {
            failures.push(format!(
                "{}: run.name is {:?}, expected the file name {stem:?}",
                path.display(),
                cfg.run.name
            ));
        }
        let lines = header(&text);
        if lines.iter().any(|l| l.trim() == "# clock: simulated") {
            let expect = format!("train --config configs/{stem}.toml --simulate");
            if !lines.iter().any(|l| l.contains(&expect)) {
                failures.push(format!(
                    "{}: a simulated config's header should show `{expect}`",
                    path.display()
                ));
            }
            continue;
        }
        let Some(mpirun) = lines.iter().find(|l| l.contains("mpirun ")) else {
            failures.push(format!(
                "{}: no mpirun command in the header",
                path.display()
            ));
            continue;
        };
        let expect_n = format!("mpirun -n {ranks} ");
        let expect_cfg = format!("--config configs/{stem}.toml");
        if !mpirun.contains(&expect_n) || !mpirun.contains(&expect_cfg) {
            failures.push(format!(
                "{}: header command `{}` should contain `{expect_n}` and `{expect_cfg}`",
                path.display(),
                mpirun.trim()
            ));
        }
    }
    assert!(jobs > 0, "no config declares `# ranks: N`");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The dataset folder each config points at exists (relative paths are taken from the
/// repository root, where the configs are run from). Real data is required, not optional.
#[test]
fn every_config_finds_its_dataset_folder() {
    let mut failures = Vec::new();
    for path in config_files() {
        let cfg = Config::load(&path, &[]).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if cfg.data.dataset == gssp::config::DatasetKind::Synthetic {
            continue;
        }
        let dir = cfg.data.resolved_dir();
        let dir = if dir.is_relative() {
            Path::new(REPO).join(dir)
        } else {
            dir
        };
        if !dir.is_dir() {
            failures.push(format!(
                "{}: data folder {} does not exist (run ./scripts/setup.sh; MNIST and CIFAR-10 \
                 live in ../shared/data)",
                path.display(),
                dir.display()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
