//! Every shipped `configs/*.toml` loads, validates for the world size it is meant to run on,
//! and its header comments agree with its contents.
//!
//! A config states its world size in a `# ranks: N` comment before its first table; a config
//! without one is a single-process config and must be valid on 1 rank. When the header shows
//! an `mpirun` command, that command must start N ranks on this very file, so copying the
//! line from the header runs what the file says.

use std::path::{Path, PathBuf};

use gssp::config::Config;

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

/// The comment lines before the first non-comment, non-blank line.
fn header(text: &str) -> Vec<&str> {
    text.lines()
        .take_while(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
        .filter(|l| l.trim_start().starts_with('#'))
        .collect()
}

/// The N of a `# ranks: N` header line: `Ok(None)` when there is none, `Err` when the line is
/// there but malformed or repeated.
fn declared_ranks(text: &str) -> Result<Option<usize>, String> {
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

#[test]
fn ranks_comment_parsing() {
    assert_eq!(declared_ranks("# x\n# ranks: 10\n\n[run]\n"), Ok(Some(10)));
    assert_eq!(declared_ranks("#ranks:3\n[run]\n"), Ok(Some(3)));
    assert_eq!(declared_ranks("# no count\n[run]\n"), Ok(None));
    // Only the header counts: a ranks comment further down is not a declaration.
    assert_eq!(declared_ranks("[run]\n# ranks: 4\n"), Ok(None));
    assert!(declared_ranks("# ranks: many\n").is_err());
    assert!(declared_ranks("# ranks: 0\n").is_err());
    assert!(declared_ranks("# ranks: 2\n# ranks: 3\n").is_err());
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
