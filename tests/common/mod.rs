//! Shared helpers of the mpirun integration tests: start `gssp` under `mpirun` with a hard
//! deadline, write small TOML configs into a temporary directory, and read the run directory
//! (CSV by plain string splitting, JSON with serde_json).
//!
//! MPI cannot be initialised twice in one process, so every run is its own MPI job. Jobs of one
//! test binary are serialised through [`job_lock`]: several jobs at once on a 2-core machine
//! would crowd the emulated speeds the tests rely on (see below) and slow every job.
//!
//! # No test depends on the machine's timing
//!
//! No test asserts on wall-clock windows, sleeps or poll counts; speed is measured by
//! benchmarks (`gssp bench`). A test passes or fails alike on a fast machine and on a loaded
//! 2-core one, so none asserts:
//! - an elapsed time, a logged duration, a run's `wall_s` or an event's time on the run's
//!   clock against a fixed bound ("took under 30 s", "regrouped between 4 s and 8 s");
//! - how many polls, iterations or rows fit in a stretch of time;
//! - that one run or mode is faster than another;
//! - anything after a sleep meant to let something happen: it waits for the thing itself
//!   instead ([`poll_until`]: a log row, a checkpoint, a stopped process), or injects the
//!   clock (unit tests).
//!
//! What a test may assert about time holds at any speed:
//! - hard deadlines that only turn a hang into a failure ([`Running::wait`], the guard of
//!   [`poll_until`]): minutes, against seconds of normal run time;
//! - lower bounds that emulation guarantees: a paced compute phase lasts at least factor x
//!   `heterogeneity.unit_s`, an emulated link holds a message for at least its transfer;
//! - relations between one rank's own records, or causal ones between ranks: `wall_s` at
//!   least `profile_cost_s`, trace spans adding up to the CSV columns, a stopped worker's
//!   longest gap at least as long as its stop (the ranks' clocks start after one barrier and
//!   may differ by a little, so a cross-rank comparison leaves an iteration's margin);
//! - what emulated speed differences (`heterogeneity.*`) of 1.5x and more decide: who is
//!   slower, grouped with whom. Their pads of 10 ms and more dwarf the real compute of these
//!   small models (well under a millisecond), but a loaded machine wakes a sleeping rank a
//!   millisecond or more late, so two workers of one tier can profile 15% apart. What such
//!   small differences decide (a rounding of local steps, a split of a tier) is checked
//!   against the run's own profile in `layout.json`, not as a fixed answer, and thresholds
//!   between tiers leave a fifth or more;
//! - counts the configuration sets: the iterations of N epochs; the meetings due in a run
//!   whose length the pads alone set (epochs, not a time budget, so that a slower machine
//!   only adds meetings); that a phase of a run gets anything done at all, one iteration
//!   in a phase with room for a hundred.

#![allow(dead_code)]

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// Where the real datasets lie: `GSSP_TEST_DATA` (a folder holding mnist/, cifar10/ and
/// multi30k/, such as a GPU pack's data/ on a node without the repository's neighbours), or
/// ../shared/data beside the repository.
fn data_root() -> PathBuf {
    std::env::var_os("GSSP_TEST_DATA").map_or_else(
        || PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/data")),
        PathBuf::from,
    )
}

/// The gssp binary the multi-rank tests start: `GSSP_TEST_BIN` (a prebuilt test binary run
/// elsewhere, as scripts/gpu-check.sh does from a pack), or the one cargo built.
pub fn gssp_bin() -> PathBuf {
    std::env::var_os("GSSP_TEST_BIN")
        .map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_gssp")), PathBuf::from)
}

/// The real MNIST files; tests that use them fail (never skip) when they are absent.
pub fn mnist_dir() -> PathBuf {
    let dir = data_root().join("mnist");
    assert!(
        dir.join("train-images-idx3-ubyte.gz").exists()
            || dir.join("train-images-idx3-ubyte").exists(),
        "MNIST is missing from {} (the tests need the real data)",
        dir.display()
    );
    dir
}

/// The real CIFAR-10 batches in ../shared/data/cifar10 (data_batch_1 and 1,000 test
/// images).
pub fn cifar10_dir() -> PathBuf {
    let dir = data_root().join("cifar10");
    assert!(
        dir.join("data_batch_1.bin").exists(),
        "CIFAR-10 is missing from {} (the tests need the real data)",
        dir.display()
    );
    dir
}

/// The real Multi30k task-1 text in ../shared/data/multi30k (train, val, test2016; .de and
/// .en).
pub fn multi30k_dir() -> PathBuf {
    let dir = data_root().join("multi30k");
    assert!(
        dir.join("train.de").exists() || dir.join("train.de.gz").exists(),
        "Multi30k is missing from {} (the tests need the real data)",
        dir.display()
    );
    dir
}

static JOB_LOCK: Mutex<()> = Mutex::new(());

/// Held for the whole of one test's MPI jobs; a failed (panicked) test does not poison it.
pub fn job_lock() -> MutexGuard<'static, ()> {
    JOB_LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Polls `done` every 20 ms until it holds; past `guard` (a hang guard: minutes, against
/// the seconds it normally takes) the test fails naming `what` it waited for.
pub fn poll_until(what: &str, guard: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < guard, "{what}: not within {guard:?}");
        thread::sleep(Duration::from_millis(20));
    }
}

/// Complete rows (lines after the header) that rank `rank`'s log in run directory `dir`
/// holds so far; 0 while it does not exist. A log reaches its file in chunks (at least once
/// a second while the rank logs), so a live count trails the rank.
pub fn logged_rows(dir: &Path, rank: usize) -> usize {
    std::fs::read(dir.join(format!("rank-{rank}.csv")))
        .map(|b| b.iter().filter(|&&c| c == b'\n').count().saturating_sub(1))
        .unwrap_or(0)
}

/// Fails unless the job that wrote (or would have written) run directory `dir` stopped
/// before training: no rank logged an iteration and no summary was written. This, not how
/// fast the job ended, is what "bad input stops every rank at once" means.
pub fn assert_no_training(dir: &Path, what: &str) {
    assert!(
        !dir.join("summary.json").exists(),
        "{what}: the run finished"
    );
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name().to_string_lossy().into_owned();
        let rank = name
            .strip_prefix("rank-")
            .and_then(|r| r.strip_suffix(".csv"))
            .and_then(|r| r.parse::<usize>().ok());
        if let Some(rank) = rank {
            assert_eq!(
                logged_rows(dir, rank),
                0,
                "{what}: rank {rank} trained before the job stopped"
            );
        }
    }
}

/// What a finished `mpirun` left behind.
#[derive(Debug)]
pub struct JobResult {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl JobResult {
    /// Panics with the job's output unless it exited 0.
    pub fn assert_ok(&self, what: &str) {
        assert_eq!(
            self.code,
            Some(0),
            "{what}: mpirun failed\nstdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
    }
}

/// A running `mpirun ... gssp ...` job whose output is being collected.
pub struct Running {
    child: Child,
    start: Instant,
    out: Option<JoinHandle<String>>,
    err: Option<JoinHandle<String>>,
    /// A string unique to this job's command lines (its run directory), to find its ranks.
    marker: String,
    describe: String,
}

fn reader(mut pipe: Box<dyn Read + Send>) -> JoinHandle<String> {
    thread::spawn(move || {
        let mut s = String::new();
        let _ = pipe.read_to_string(&mut s);
        s
    })
}

/// Starts `mpirun -n <ranks> --bind-to none gssp <args>` in its own process group.
/// `marker` must appear in the rank processes' command lines (e.g. the `--out` path): it is
/// how stray ranks are found and killed if the job overruns.
pub fn spawn_mpirun(ranks: usize, args: &[String], marker: &str) -> Running {
    spawn_mpirun_env(ranks, args, marker, &[])
}

/// [`spawn_mpirun`] with extra environment variables for mpirun and the ranks (MCA settings).
pub fn spawn_mpirun_env(
    ranks: usize,
    args: &[String],
    marker: &str,
    env: &[(&str, &str)],
) -> Running {
    let child = Command::new("mpirun")
        .args(["-n", &ranks.to_string(), "--bind-to", "none"])
        .arg(gssp_bin())
        .args(args)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_rmaps_base_oversubscribe", "1")
        .env("OPENBLAS_NUM_THREADS", "1")
        .env("RUST_LOG", "warn")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("mpirun must be installed (OpenMPI)");
    let mut child = child;
    let out = reader(Box::new(child.stdout.take().expect("piped stdout")));
    let err = reader(Box::new(child.stderr.take().expect("piped stderr")));
    Running {
        child,
        start: Instant::now(),
        out: Some(out),
        err: Some(err),
        marker: marker.to_string(),
        describe: format!("mpirun -n {ranks} gssp {}", args.join(" ")),
    }
}

/// Process ids of every process (other than this one) whose command line contains `marker`.
pub fn pids_with_marker(marker: &str) -> Vec<u32> {
    let me = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .filter(|&pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(marker))
                .unwrap_or(false)
        })
        .collect()
}

/// The MPI world rank of process `pid`, from its environment (OpenMPI sets it).
pub fn world_rank_of(pid: u32) -> Option<usize> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    env.split(|&b| b == 0)
        .filter_map(|kv| std::str::from_utf8(kv).ok())
        .find_map(|kv| kv.strip_prefix("OMPI_COMM_WORLD_RANK="))
        .and_then(|r| r.parse().ok())
}

/// Sends `signal` (e.g. "KILL") to one process by id.
pub fn signal(pid: u32, signal: &str) {
    let _ = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .stderr(Stdio::null())
        .status();
}

impl Running {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    /// Has mpirun exited? (Non-blocking.)
    pub fn try_code(&mut self) -> Option<Option<i32>> {
        self.child
            .try_wait()
            .expect("wait for mpirun")
            .map(|s| s.code())
    }

    /// Kills mpirun, its process group and every rank carrying this job's marker.
    pub fn kill_all(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .stderr(Stdio::null())
            .status();
        for pid in pids_with_marker(&self.marker) {
            signal(pid, "KILL");
        }
        let _ = self.child.wait();
    }

    /// Waits for mpirun to exit; past `deadline` (from the start) everything is killed and
    /// the test fails. The deadline is a hang guard, generous against the job's normal time,
    /// never a check of its speed.
    pub fn wait(mut self, deadline: Duration) -> JobResult {
        let code = loop {
            if let Some(code) = self.try_code() {
                break code;
            }
            if self.start.elapsed() > deadline {
                self.kill_all();
                let err = self.err.take().map(|h| h.join().unwrap_or_default());
                panic!(
                    "{} still running after {deadline:?}; killed\nstderr so far:\n{}",
                    self.describe,
                    err.unwrap_or_default()
                );
            }
            thread::sleep(Duration::from_millis(20));
        };
        let elapsed = self.start.elapsed();
        // A rank that outlived mpirun would hold the pipes open: give it a moment, then kill.
        thread::sleep(Duration::from_millis(50));
        for pid in pids_with_marker(&self.marker) {
            signal(pid, "KILL");
        }
        JobResult {
            code,
            stdout: self
                .out
                .take()
                .map(|h| h.join().unwrap_or_default())
                .unwrap_or_default(),
            stderr: self
                .err
                .take()
                .map(|h| h.join().unwrap_or_default())
                .unwrap_or_default(),
            elapsed,
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.kill_all();
        }
    }
}

/// A test's scratch space: a temporary directory holding the config and the run directory.
pub struct Scratch {
    pub tmp: tempfile::TempDir,
}

/// The base config of the tests: a small MLP on 6000 real MNIST images, 5 epochs, momentum
/// 0.5 (with the default 0.9 the asynchronous modes are erratic on this tiny problem).
pub fn base_toml() -> String {
    format!(
        r#"[run]
epochs = 5.0
seed = 7
[data]
dataset = "mnist"
dir = "{}"
train_limit = 6000
test_limit = 1000
[model]
name = "mlp"
mlp_hidden = [32]
[optim]
lr = 0.1
momentum = 0.5
[device]
kind = "cpu"
"#,
        mnist_dir().display()
    )
}

impl Scratch {
    pub fn new() -> Scratch {
        Scratch {
            tmp: tempfile::Builder::new()
                .prefix("gssp-mpi-test-")
                .tempdir()
                .expect("create a temporary directory"),
        }
    }

    /// Writes `text` as `<name>.toml` and returns its path.
    pub fn config(&self, name: &str, text: &str) -> PathBuf {
        let p = self.tmp.path().join(format!("{name}.toml"));
        std::fs::write(&p, text).expect("write the test config");
        p
    }

    /// The run directory for run `name` (unique per scratch space, so it marks the job).
    pub fn out(&self, name: &str) -> PathBuf {
        self.tmp.path().join(format!("run-{name}"))
    }

    /// Args of `gssp train --config <config> --set ... --out <out>`.
    pub fn train_args(&self, config: &Path, sets: &[&str], out: &Path) -> Vec<String> {
        let mut args = vec![
            "train".to_string(),
            "--config".into(),
            config.display().to_string(),
        ];
        for s in sets {
            args.push("--set".into());
            args.push((*s).to_string());
        }
        args.push("--out".into());
        args.push(out.display().to_string());
        args
    }

    /// `gssp train --simulate --ranks <ranks> --burst-us <burst_us>` of `config` with `sets`
    /// into `out` (the simulated clock, one process; tests/simulate.rs).
    pub fn simulate(
        &self,
        config: &Path,
        (ranks, burst_us): (usize, f64),
        sets: &[&str],
        out: &Path,
    ) -> std::process::Output {
        let mut args = self.train_args(config, sets, out);
        args.extend(["--simulate".into(), "--ranks".into(), ranks.to_string()]);
        args.extend(["--burst-us".into(), burst_us.to_string()]);
        Command::new(gssp_bin())
            .args(&args)
            .env("OPENBLAS_NUM_THREADS", "1")
            .output()
            .expect("run gssp train --simulate")
    }

    /// Trains on `ranks` ranks with the base config plus `sets`; fails the test unless the job
    /// exits 0 within `deadline`. Returns the run directory.
    pub fn train_ok(&self, name: &str, ranks: usize, sets: &[&str], deadline: Duration) -> Run {
        let config = self.config("base", &base_toml());
        self.train_config_ok(name, &config, ranks, sets, deadline)
    }

    /// Like [`Scratch::train_ok`] with extra environment variables (e.g. `RUST_LOG`), and
    /// what the job printed.
    pub fn train_ok_env(
        &self,
        name: &str,
        ranks: usize,
        sets: &[&str],
        env: &[(&str, &str)],
        deadline: Duration,
    ) -> (Run, JobResult) {
        let config = self.config("base", &base_toml());
        let out = self.out(name);
        let args = self.train_args(&config, sets, &out);
        let job = spawn_mpirun_env(ranks, &args, &out.display().to_string(), env).wait(deadline);
        job.assert_ok(name);
        (Run { dir: out, ranks }, job)
    }

    /// Like [`Scratch::train_ok`] on the config file `config`.
    pub fn train_config_ok(
        &self,
        name: &str,
        config: &Path,
        ranks: usize,
        sets: &[&str],
        deadline: Duration,
    ) -> Run {
        let out = self.out(name);
        let args = self.train_args(config, sets, &out);
        let job = spawn_mpirun(ranks, &args, &out.display().to_string()).wait(deadline);
        job.assert_ok(name);
        eprintln!("{name}: {ranks} ranks, {:.1} s", job.elapsed.as_secs_f64());
        Run { dir: out, ranks }
    }
}

/// A CSV file: header names and numeric rows.
#[derive(Debug, Clone)]
pub struct Csv {
    pub path: PathBuf,
    pub header: Vec<String>,
    pub rows: Vec<Vec<f64>>,
}

impl Csv {
    pub fn read(path: &Path) -> Csv {
        let text = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let mut lines = text.lines();
        let header: Vec<String> = lines
            .next()
            .unwrap_or_else(|| panic!("{} is empty", path.display()))
            .split(',')
            .map(str::to_string)
            .collect();
        let rows: Vec<Vec<f64>> = lines
            .enumerate()
            .map(|(i, l)| {
                let row: Vec<f64> = l
                    .split(',')
                    .map(|x| {
                        // An empty field is a missing value (pandas reads it as NaN).
                        if x.is_empty() {
                            return f64::NAN;
                        }
                        x.parse::<f64>().unwrap_or_else(|e| {
                            panic!("{} line {}: bad number {x:?}: {e}", path.display(), i + 2)
                        })
                    })
                    .collect();
                assert_eq!(
                    row.len(),
                    header.len(),
                    "{} line {}: {} fields, header has {}",
                    path.display(),
                    i + 2,
                    row.len(),
                    header.len()
                );
                row
            })
            .collect();
        Csv {
            path: path.to_path_buf(),
            header,
            rows,
        }
    }

    pub fn col(&self, name: &str) -> Vec<f64> {
        let i = self
            .header
            .iter()
            .position(|h| h == name)
            .unwrap_or_else(|| {
                panic!(
                    "{} has no column {name}: {:?}",
                    self.path.display(),
                    self.header
                )
            });
        self.rows.iter().map(|r| r[i]).collect()
    }

    pub fn last(&self, name: &str) -> f64 {
        *self
            .col(name)
            .last()
            .unwrap_or_else(|| panic!("{} has no rows", self.path.display()))
    }
}

/// A finished run's directory.
pub struct Run {
    pub dir: PathBuf,
    pub ranks: usize,
}

impl Run {
    pub fn rank_csv(&self, rank: usize) -> Csv {
        Csv::read(&self.dir.join(format!("rank-{rank}.csv")))
    }

    pub fn json(&self, name: &str) -> serde_json::Value {
        let p = self.dir.join(name);
        let text = std::fs::read_to_string(&p)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display()));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", p.display()))
    }

    pub fn summary(&self) -> serde_json::Value {
        self.json("summary.json")
    }

    pub fn layout(&self) -> serde_json::Value {
        self.json("layout.json")
    }

    pub fn eval(&self) -> Csv {
        Csv::read(&self.dir.join("eval.csv"))
    }
}

/// `v[key]` as f64, failing the test when absent or not a number.
pub fn num(v: &serde_json::Value, key: &str) -> f64 {
    v.get(key)
        .and_then(serde_json::Value::as_f64)
        .unwrap_or_else(|| panic!("{key} missing or not a number in {v}"))
}

/// Mean of a non-empty slice.
pub fn mean(x: &[f64]) -> f64 {
    assert!(!x.is_empty(), "mean of nothing");
    x.iter().sum::<f64>() / x.len() as f64
}

/// Median of a non-empty slice ([`gssp::telemetry::stats::median`], which gives NaN for
/// none; a test that takes the median of nothing has a bug of its own).
pub fn median(x: &[f64]) -> f64 {
    assert!(!x.is_empty(), "median of nothing");
    gssp::telemetry::stats::median(&mut x.to_vec())
}

/// The named tensors of a safetensors file, as f32 values.
pub fn tensors(path: &Path) -> std::collections::HashMap<String, Vec<f32>> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let file = safetensors::SafeTensors::deserialize(&bytes).expect("a safetensors file");
    file.tensors()
        .into_iter()
        .map(|(name, view)| {
            let values = view
                .data()
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            (name, values)
        })
        .collect()
}

/// Largest |a - b| over every value of two models with the same tensors.
pub fn largest_difference(a: &Path, b: &Path) -> f32 {
    let (a, b) = (tensors(a), tensors(b));
    assert_eq!(
        a.keys().collect::<std::collections::BTreeSet<_>>(),
        b.keys().collect()
    );
    a.iter()
        .flat_map(|(name, x)| x.iter().zip(&b[name]).map(|(p, q)| (p - q).abs()))
        .fold(0.0, f32::max)
}
