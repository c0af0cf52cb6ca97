//! Failures under `mpirun`: bad input stops every rank quickly with one clear message, and a
//! rank that dies mid-run takes the job down instead of leaving it hanging.

mod common;

use std::thread;
use std::time::{Duration, Instant};

use common::{base_toml, job_lock, pids_with_marker, signal, spawn_mpirun, world_rank_of, Scratch};

/// Runs `gssp train` with the base config plus `sets` on `ranks` ranks; expects failure.
fn train_fails(name: &str, ranks: usize, sets: &[&str], within: Duration) -> common::JobResult {
    let scratch = Scratch::new();
    let config = scratch.config("base", &base_toml());
    let out = scratch.out(name);
    let args = scratch.train_args(&config, sets, &out);
    // Hard deadline well past `within`, so an overrun is reported as such, not as a hang.
    let job = spawn_mpirun(ranks, &args, &out.display().to_string())
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
                "sync.groups=2",
                "sync.grouping=static",
                "sync.static_groups=[[2,3],[4,5]]",
                "sync.inter_group_every=2",
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

#[test]
fn killed_worker_ends_the_job() {
    let _lock = job_lock();
    let scratch = Scratch::new();
    let config = scratch.config("base", &base_toml());
    let out = scratch.out("killed");
    let marker = out.display().to_string();
    let args = scratch.train_args(
        &config,
        &[
            "sync.mode=asp",
            "run.epochs=0",
            "run.time_budget_s=300",
            "heterogeneity.unit_s=0.01",
        ],
        &out,
    );
    let mut job = spawn_mpirun(4, &args, &marker);
    // Wait until worker rank 2 is training (its log has rows), then kill it.
    let log = out.join("rank-2.csv");
    let started = Instant::now();
    loop {
        let rows = std::fs::read_to_string(&log)
            .map(|t| t.lines().count())
            .unwrap_or(0);
        if rows > 1 {
            break;
        }
        if let Some(code) = job.try_code() {
            panic!("job ended before the kill (exit {code:?})");
        }
        if started.elapsed() > Duration::from_secs(60) {
            job.kill_all();
            panic!("rank 2 did not start training within 60 s");
        }
        thread::sleep(Duration::from_millis(50));
    }
    thread::sleep(Duration::from_secs(2));
    let victims: Vec<u32> = pids_with_marker(&marker)
        .into_iter()
        .filter(|&pid| world_rank_of(pid) == Some(2))
        .collect();
    assert_eq!(victims.len(), 1, "rank 2's process not found: {victims:?}");
    signal(victims[0], "KILL");
    let killed_at = job.elapsed();
    let result = job.wait(killed_at + Duration::from_secs(60));
    let after = result.elapsed - killed_at;
    assert!(
        matches!(result.code, Some(c) if c != 0),
        "mpirun exited {:?} after a rank was killed",
        result.code
    );
    assert!(
        after < Duration::from_secs(30),
        "mpirun took {after:?} to notice the dead rank"
    );
    eprintln!(
        "killed rank 2; mpirun exited {:?} {:.1} s later",
        result.code,
        after.as_secs_f64()
    );
}
