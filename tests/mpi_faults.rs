//! Failures under `mpirun`: bad input stops every rank quickly with one clear message, and a
//! rank that dies mid-run takes the job down instead of leaving it hanging.

mod common;
mod skipped;

use std::thread;
use std::time::{Duration, Instant};

use common::{base_toml, job_lock, pids_with_marker, signal, spawn_mpirun, world_rank_of, Scratch};

/// Runs `gssp train` with the base config plus `sets` on `ranks` ranks; expects failure.
fn train_fails(name: &str, ranks: usize, sets: &[&str], within: Duration) -> common::JobResult {
    train_fails_env(name, ranks, sets, &[], within)
}

/// [`train_fails`] with extra environment variables for the ranks.
fn train_fails_env(
    name: &str,
    ranks: usize,
    sets: &[&str],
    env: &[(&str, &str)],
    within: Duration,
) -> common::JobResult {
    let scratch = Scratch::new();
    let config = scratch.config("base", &base_toml());
    let out = scratch.out(name);
    let args = scratch.train_args(&config, sets, &out);
    // Hard deadline well past `within`, so an overrun is reported as such, not as a hang.
    let job = common::spawn_mpirun_env(ranks, &args, &out.display().to_string(), env)
        .wait(within + Duration::from_secs(30));
    assert!(
        matches!(job.code, Some(c) if c != 0),
        "{name}: expected failure, got {:?}\nstdout:\n{}\nstderr:\n{}",
        job.code,
        job.stdout,
        job.stderr
    );
    assert!(
        job.elapsed < within,
        "{name}: took {:?} (limit {within:?})\nstderr:\n{}",
        job.elapsed,
        job.stderr
    );
    eprintln!(
        "{name}: failed as expected in {:.1} s",
        job.elapsed.as_secs_f64()
    );
    job
}

#[test]
fn config_error_stops_every_rank_with_one_message() {
    let _lock = job_lock();
    let job = train_fails(
        "bad-lr",
        3,
        &["sync.mode=asp", "optim.lr=-0.1"],
        Duration::from_secs(10),
    );
    let msg = "optim.lr: must be > 0, got -0.1";
    assert_eq!(
        job.stderr.matches(msg).count(),
        1,
        "expected `{msg}` once\nstderr:\n{}",
        job.stderr
    );
    // Bad input exits 2 on every rank.
    assert_eq!(job.code, Some(2), "stderr:\n{}", job.stderr);
}

#[test]
fn missing_data_dir_is_named() {
    let _lock = job_lock();
    let job = train_fails(
        "no-data",
        3,
        &["sync.mode=asp", "data.dir=/nonexistent/gssp-mnist"],
        Duration::from_secs(20),
    );
    assert!(
        job.stderr.contains("/nonexistent/gssp-mnist"),
        "stderr does not name the path:\n{}",
        job.stderr
    );
}

#[test]
fn single_mode_is_refused_under_mpirun() {
    let _lock = job_lock();
    let job = train_fails("single", 2, &["sync.mode=single"], Duration::from_secs(10));
    let line = job
        .stderr
        .lines()
        .find(|l| l.contains("sync.mode"))
        .unwrap_or_else(|| panic!("no message names sync.mode\nstderr:\n{}", job.stderr));
    assert!(
        line.contains("single") && line.contains("2 ranks"),
        "unclear message: {line}"
    );
    assert_eq!(
        job.stderr.matches("sync.mode").count(),
        1,
        "stderr:\n{}",
        job.stderr
    );
}

/// A group server that fails mid-run (here: its workers' loss diverges) ends the whole job
/// with its message, also when the other group servers are inside a collective by then.
#[test]
fn diverging_gssp_group_ends_the_job_with_its_error() {
    let _lock = job_lock();
    for seed in ["1", "2", "3"] {
        let job = train_fails(
            "diverge",
            6,
            &[
                "sync.mode=gssp",
                "sync.gssp.groups=2",
                "sync.gssp.grouping=static",
                "sync.gssp.static_groups=[[2,3],[4,5]]",
                "sync.gssp.inter_group_every=2",
                "compression.kind=topk",
                "compression.ratio=0.05",
                "optim.lr=1e6",
                "optim.momentum=0.9",
                &format!("run.seed={seed}"),
            ],
            Duration::from_secs(40),
        );
        assert!(
            job.stderr.contains("non-finite loss"),
            "seed {seed}: no message names the divergence\nstderr:\n{}",
            job.stderr
        );
    }
}

/// Starts a long run on `ranks` ranks with `sets`, waits until rank `watch` logs training
/// rows, then two seconds more, and returns the job and the scratch space it writes to.
fn start_training(
    name: &str,
    ranks: usize,
    sets: &[&str],
    watch: usize,
) -> (common::Running, Scratch, String) {
    let scratch = Scratch::new();
    let config = scratch.config("base", &base_toml());
    let out = scratch.out(name);
    let marker = out.display().to_string();
    let args = scratch.train_args(&config, sets, &out);
    let mut job = spawn_mpirun(ranks, &args, &marker);
    let log = out.join(format!("rank-{watch}.csv"));
    let started = Instant::now();
    loop {
        let rows = std::fs::read_to_string(&log)
            .map(|t| t.lines().count())
            .unwrap_or(0);
        if rows > 1 {
            break;
        }
        if let Some(code) = job.try_code() {
            panic!("{name}: job ended before the fault (exit {code:?})");
        }
        if started.elapsed() > Duration::from_secs(60) {
            job.kill_all();
            panic!("{name}: rank {watch} did not start training within 60 s");
        }
        thread::sleep(Duration::from_millis(50));
    }
    thread::sleep(Duration::from_secs(2));
    (job, scratch, marker)
}

/// The process of world rank `rank` of the job marked `marker`.
fn pid_of_rank(marker: &str, rank: usize) -> u32 {
    let pids: Vec<u32> = pids_with_marker(marker)
        .into_iter()
        .filter(|&pid| world_rank_of(pid) == Some(rank))
        .collect();
    assert_eq!(pids.len(), 1, "rank {rank}'s process not found: {pids:?}");
    pids[0]
}

/// SIGKILLs world rank `victim` mid-run and checks that mpirun ends the whole job with a
/// failure within 30 s, instead of leaving the survivors waiting on it.
fn killed_rank_ends_the_job(name: &str, ranks: usize, sets: &[&str], victim: usize) {
    let _lock = job_lock();
    let watch = ranks - 1;
    let (job, _scratch, marker) = start_training(name, ranks, sets, watch);
    signal(pid_of_rank(&marker, victim), "KILL");
    let killed_at = job.elapsed();
    let result = job.wait(killed_at + Duration::from_secs(60));
    let after = result.elapsed - killed_at;
    assert!(
        matches!(result.code, Some(c) if c != 0),
        "{name}: mpirun exited {:?} after rank {victim} was killed",
        result.code
    );
    assert!(
        after < Duration::from_secs(30),
        "{name}: mpirun took {after:?} to notice the dead rank {victim}"
    );
    eprintln!(
        "{name}: killed rank {victim}; mpirun exited {:?} {:.1} s later",
        result.code,
        after.as_secs_f64()
    );
}

const LONG_ASP: [&str; 4] = [
    "sync.mode=asp",
    "run.epochs=0",
    "run.time_budget_s=300",
    "heterogeneity.unit_s=0.01",
];

const LONG_GSSP: [&str; 8] = [
    "sync.mode=gssp",
    "sync.gssp.groups=2",
    "sync.gssp.grouping=static",
    "sync.gssp.static_groups=[[2,3],[4,5]]",
    "compression.kind=topk",
    "run.epochs=0",
    "run.time_budget_s=300",
    "heterogeneity.unit_s=0.01",
];

#[test]
fn killed_worker_ends_the_job() {
    killed_rank_ends_the_job("killed-worker", 4, &LONG_ASP, 2);
}

#[test]
fn killed_group_server_ends_the_job() {
    killed_rank_ends_the_job("killed-server", 6, &LONG_GSSP, 1);
}

#[test]
fn killed_rank_0_ends_the_job() {
    killed_rank_ends_the_job("killed-rank0", 6, &LONG_GSSP, 0);
}

/// Rows of a rank's log whose time_s lies in (from, to).
fn rows_between(run: &common::Run, rank: usize, from: f64, to: f64) -> usize {
    run.rank_csv(rank)
        .col("time_s")
        .iter()
        .filter(|&&t| t > from && t < to)
        .count()
}

/// A worker stopped for 4 s (SIGSTOP, as a swapped-out or preempted process) under gssp:
/// the other group trains on, the stopped worker's partner stops within its staleness bound,
/// the stopped worker resumes on SIGCONT, and the job ends on time with every update
/// delivered.
#[test]
fn stopped_worker_holds_back_only_its_own_group() {
    let _lock = job_lock();
    let sets = [
        "sync.mode=gssp",
        "sync.gssp.groups=2",
        "sync.gssp.grouping=static",
        "sync.gssp.static_groups=[[2,3],[4,5]]",
        "sync.gssp.staleness=2",
        "compression.kind=topk",
        "run.epochs=0",
        "run.time_budget_s=14",
        "heterogeneity.unit_s=0.02",
    ];
    let (job, _scratch, marker) = start_training("stopped", 6, &sets, 5);
    let pid = pid_of_rank(&marker, 4);
    signal(pid, "STOP");
    thread::sleep(Duration::from_secs(4));
    signal(pid, "CONT");
    let result = job.wait(Duration::from_secs(90));
    result.assert_ok("stopped");
    assert!(
        result.elapsed < Duration::from_secs(60),
        "the job took {:?} for a 14 s budget",
        result.elapsed
    );
    let run = common::Run {
        dir: std::path::PathBuf::from(&marker),
        ranks: 6,
    };
    // The stop shows in rank 4's log as its longest gap between two rows.
    let times = run.rank_csv(4).col("time_s");
    let (from, to) = times
        .windows(2)
        .map(|w| (w[0], w[1]))
        .max_by(|a, b| (a.1 - a.0).total_cmp(&(b.1 - b.0)))
        .unwrap_or((0.0, 0.0));
    assert!(
        to - from > 3.0,
        "no stop in rank 4's log: longest gap {from}..{to}"
    );
    let (mid_from, mid_to) = (from + 0.5, to - 0.5);
    // Its partner may run at most s + 1 iterations ahead, then waits.
    let partner = rows_between(&run, 5, mid_from, mid_to);
    assert!(
        partner <= 3,
        "rank 5 logged {partner} iterations while its partner was stopped (bound 2)"
    );
    // The other group kept training (paced at 20 ms: about 150 iterations in 3 s).
    for rank in [2, 3] {
        let rows = rows_between(&run, rank, mid_from, mid_to);
        assert!(
            rows >= 30,
            "rank {rank} logged only {rows} iterations during the stop"
        );
    }
    let s = run.summary();
    let error = common::num(&s, "replica_max_error");
    assert!(error < 1e-5, "replica_max_error {error}");
    eprintln!(
        "stopped rank 4 for {:.1} s: rank 5 {partner} rows, ranks 2-3 kept going; job {:.1} s",
        to - from,
        result.elapsed.as_secs_f64()
    );
}

/// A NaN in one worker's gradient (injected at its 5th iteration) is caught by its group
/// server before it reaches any replica: the job ends with an error naming the worker's rank
/// and iteration.
#[test]
fn nan_gradient_ends_the_job_naming_rank_and_iteration() {
    let _lock = job_lock();
    let job = train_fails_env(
        "nan",
        6,
        &[
            "sync.mode=gssp",
            "sync.gssp.groups=2",
            "sync.gssp.grouping=static",
            "sync.gssp.static_groups=[[2,3],[4,5]]",
            "compression.kind=topk",
        ],
        &[("GSSP_FAULT_NAN_GRADIENT", "4:5")],
        Duration::from_secs(30),
    );
    assert!(
        job.stderr.contains("(rank 4) pushed a non-finite gradient")
            && job.stderr.contains("at its iteration 5"),
        "the error names neither rank nor iteration\nstderr:\n{}",
        job.stderr
    );
}

/// A bad fault-injection value is refused on every rank, like any bad input.
#[test]
fn bad_fault_injection_value_is_named() {
    let _lock = job_lock();
    let job = train_fails_env(
        "badfault",
        3,
        &["sync.mode=asp", "run.epochs=1"],
        &[("GSSP_FAULT_NAN_GRADIENT", "soon")],
        Duration::from_secs(30),
    );
    assert!(
        job.stderr
            .contains("GSSP_FAULT_NAN_GRADIENT: must be RANK:ITERATION"),
        "stderr:\n{}",
        job.stderr
    );
}

/// A run directory that cannot be created (its parent is a file) is one clear error naming
/// it, on every rank, before any training.
#[test]
fn unwritable_run_directory_is_named() {
    let _lock = job_lock();
    let scratch = Scratch::new();
    let config = scratch.config("base", &base_toml());
    let blocker = scratch.out("blocker");
    std::fs::write(&blocker, b"a file, not a directory").expect("write the blocking file");
    let out = blocker.join("run");
    let args = scratch.train_args(&config, &["sync.mode=asp", "run.epochs=1"], &out);
    let job = spawn_mpirun(3, &args, &out.display().to_string()).wait(Duration::from_secs(60));
    assert!(
        matches!(job.code, Some(c) if c != 0),
        "expected failure, got {:?}",
        job.code
    );
    assert!(
        job.elapsed < Duration::from_secs(30),
        "took {:?}",
        job.elapsed
    );
    assert!(
        job.stderr.contains(&blocker.display().to_string()),
        "the error does not name the run directory\nstderr:\n{}",
        job.stderr
    );
}

/// A full disk (a 256 KiB tmpfs as the run directory) ends the job with an error naming the
/// file that could not be written and the cause, in bounded time; neither the model file nor
/// a checkpoint is ever left half-written. Skipped, with the reason printed, where tmpfs cannot be mounted.
#[test]
fn full_disk_is_a_clear_error_and_leaves_no_half_written_model() {
    let _lock = job_lock();
    let scratch = Scratch::new();
    let mount = scratch.out("tmpfs");
    std::fs::create_dir_all(&mount).expect("create the mount point");
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=256k", "tmpfs"])
        .arg(&mount)
        .status();
    if !matches!(mounted, Ok(s) if s.success()) {
        skipped::skip(
            "full_disk_is_a_clear_error_and_leaves_no_half_written_model",
            &format!("cannot mount a tmpfs here (needs root with CAP_SYS_ADMIN): {mounted:?}"),
        );
        return;
    }
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(mount.clone());
    let config = scratch.config("base", &base_toml());
    let out = mount.join("run");
    // lenet5's model file alone (about 250 KB) and the per-iteration logs overflow 256 KiB.
    let args = scratch.train_args(
        &config,
        &[
            "sync.mode=asp",
            "run.epochs=2",
            "model.name=lenet5",
            "run.checkpoint_every_s=0.5",
        ],
        &out,
    );
    let job = spawn_mpirun(3, &args, &out.display().to_string()).wait(Duration::from_secs(120));
    assert!(
        matches!(job.code, Some(c) if c != 0),
        "expected failure on a full disk, got {:?}\nstderr:\n{}",
        job.code,
        job.stderr
    );
    assert!(
        job.stderr.contains("No space left on device")
            && job.stderr.contains(&out.display().to_string()),
        "the error names neither the cause nor the file\nstderr:\n{}",
        job.stderr
    );
    let model = out.join("model.safetensors");
    if model.exists() {
        let eval = std::process::Command::new(env!("CARGO_BIN_EXE_gssp"))
            .args(["eval", "--model"])
            .arg(&model)
            .arg("--config")
            .arg(&config)
            .args(["--set", "model.name=lenet5"])
            .output()
            .expect("run gssp eval");
        assert!(
            eval.status.success(),
            "a half-written model file was left behind"
        );
    }
    // Nor a half-written checkpoint: the newest committed one, if any, reads back whole.
    if out.join("checkpoints").join("latest").exists() {
        let resume = gssp::checkpoint::Resume::open(&out).expect("the newest checkpoint opens");
        for f in &resume.manifest.files {
            let rank: usize = f.name["rank-".len()..f.name.len() - ".safetensors".len()]
                .parse()
                .expect("a rank file name");
            resume
                .load(rank)
                .expect("a committed checkpoint file reads back");
        }
    }
    eprintln!(
        "full disk: job failed in {:.1} s: {}",
        job.elapsed.as_secs_f64(),
        job.stderr
            .lines()
            .find(|l| l.contains("No space"))
            .unwrap_or("")
    );
}

/// `gssp bench configs` records a config whose run diverges as FAILED with its error and
/// still runs the next one; the command fails at the end, naming the failed config.
#[test]
fn bench_configs_records_a_diverged_run_and_goes_on() {
    let _lock = job_lock();
    let scratch = Scratch::new();
    let base = base_toml().replace("epochs = 5.0", "epochs = 0.5\ntarget_accuracy = 0.5");
    let diverges = scratch.config(
        "a_diverges",
        &format!(
            "# ranks: 3\n{}\n[sync]\nmode = \"asp\"\n",
            base.replace("lr = 0.1", "lr = 1e6")
        ),
    );
    let fine = scratch.config("b_fine", &base);
    let out = scratch.out("configs");
    let o = std::process::Command::new(common::gssp_bin())
        .env("RUST_LOG", "warn")
        .args(["bench", "configs"])
        .arg(&diverges)
        .arg(&fine)
        .arg("--out")
        .arg(&out)
        .output()
        .expect("start gssp bench configs");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "a failed config must fail the check");
    assert!(
        stderr.contains("failed or missed their target accuracy")
            && stderr.contains("a_diverges.toml")
            && !stderr.contains("b_fine.toml"),
        "{stderr}"
    );
    let text = std::fs::read_to_string(out.join("configs.json")).expect("configs.json written");
    let rows: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
    assert_eq!(rows.len(), 2, "both configs checked: {text}");
    let error = rows[0]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("non-finite"),
        "the divergence is named: {text}"
    );
    assert_eq!(rows[0]["passed"], false);
    assert!(rows[0]["final_test_accuracy"].is_null(), "{text}");
    assert_eq!(rows[1]["passed"], true, "{text}");
    assert!(rows[1]["error"].is_null(), "{text}");
}

/// A bad config among several stops `gssp bench configs` before anything runs.
#[test]
fn bench_configs_checks_every_file_before_running() {
    let scratch = Scratch::new();
    let fine = scratch.config("fine", &base_toml());
    let bad = scratch.config("bad", &base_toml().replace("lr = 0.1", "lr = -1.0"));
    let out = scratch.out("configs");
    let o = std::process::Command::new(common::gssp_bin())
        .args(["bench", "configs"])
        .arg(&fine)
        .arg(&bad)
        .arg("--out")
        .arg(&out)
        .output()
        .expect("start gssp bench configs");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(stderr.contains("optim.lr: must be > 0"), "{stderr}");
    assert!(!out.join("fine").exists(), "ran before checking: {stderr}");
}
