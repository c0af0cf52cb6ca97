//! Failures under `mpirun`: bad input stops every rank before any training with one clear
//! message, and a rank that dies mid-run takes the job down instead of leaving it hanging.
//!
//! Nothing here times the job (tests/common/mod.rs: no test depends on the machine's
//! timing): "before any training" is read from the run directory, "instead of hanging" is a
//! hang guard of minutes, and faults are injected once the logs show the run training.

mod common;
mod skipped;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{
    assert_no_training, base_toml, job_lock, logged_rows, pids_with_marker, poll_until, signal,
    spawn_mpirun, world_rank_of, Scratch,
};

/// How long a job that should fail may run before it counts as hung: minutes, against the
/// seconds a failing job takes even on a loaded machine.
const HANG_GUARD: Duration = Duration::from_secs(180);

/// Runs `gssp train` with the base config plus `sets` on `ranks` ranks; expects failure
/// within the hang guard. Returns the job and the scratch space holding its run directory.
fn train_fails(name: &str, ranks: usize, sets: &[&str]) -> (common::JobResult, Scratch) {
    train_fails_env(name, ranks, sets, &[])
}

/// [`train_fails`] with extra environment variables for the ranks.
fn train_fails_env(
    name: &str,
    ranks: usize,
    sets: &[&str],
    env: &[(&str, &str)],
) -> (common::JobResult, Scratch) {
    let scratch = Scratch::new();
    let config = scratch.config("base", &base_toml());
    let out = scratch.out(name);
    let args = scratch.train_args(&config, sets, &out);
    let job =
        common::spawn_mpirun_env(ranks, &args, &out.display().to_string(), env).wait(HANG_GUARD);
    assert!(
        matches!(job.code, Some(c) if c != 0),
        "{name}: expected failure, got {:?}\nstdout:\n{}\nstderr:\n{}",
        job.code,
        job.stdout,
        job.stderr
    );
    eprintln!(
        "{name}: failed as expected in {:.1} s",
        job.elapsed.as_secs_f64()
    );
    (job, scratch)
}

/// [`train_fails`] for bad input: every rank stops before training.
fn refused(name: &str, ranks: usize, sets: &[&str], env: &[(&str, &str)]) -> common::JobResult {
    let (job, scratch) = train_fails_env(name, ranks, sets, env);
    assert_no_training(&scratch.out(name), name);
    job
}

#[test]
fn config_error_stops_every_rank_with_one_message() {
    let _lock = job_lock();
    let job = refused("bad-lr", 3, &["sync.mode=asp", "optim.lr=-0.1"], &[]);
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
    let job = refused(
        "no-data",
        3,
        &["sync.mode=asp", "data.dir=/nonexistent/gssp-mnist"],
        &[],
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
    let job = refused("single", 2, &["sync.mode=single"], &[]);
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
        let (job, _) = train_fails(
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
        );
        assert!(
            job.stderr.contains("non-finite loss"),
            "seed {seed}: no message names the divergence\nstderr:\n{}",
            job.stderr
        );
    }
}

/// Starts a run on `ranks` ranks with `sets` and returns once every rank has logged a few
/// rows (servers and workers alike: the whole job is training, whatever time that took),
/// with the scratch space it writes to and its marker.
fn start_training(name: &str, ranks: usize, sets: &[&str]) -> (common::Running, Scratch, String) {
    let scratch = Scratch::new();
    let config = scratch.config("base", &base_toml());
    let out = scratch.out(name);
    let marker = out.display().to_string();
    let args = scratch.train_args(&config, sets, &out);
    let mut job = spawn_mpirun(ranks, &args, &marker);
    poll_until(
        &format!("{name}: every rank logging training rows"),
        HANG_GUARD,
        || {
            if let Some(code) = job.try_code() {
                panic!("{name}: job ended before the fault (exit {code:?})");
            }
            (0..ranks).all(|rank| logged_rows(&out, rank) >= 3)
        },
    );
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
/// failure instead of leaving the survivors waiting on it: the runs are budgeted for 10
/// minutes, and the job must end within the hang guard of the kill.
fn killed_rank_ends_the_job(name: &str, ranks: usize, sets: &[&str], victim: usize) {
    let _lock = job_lock();
    let (job, _scratch, marker) = start_training(name, ranks, sets);
    signal(pid_of_rank(&marker, victim), "KILL");
    let killed_at = job.elapsed();
    let result = job.wait(killed_at + HANG_GUARD);
    assert!(
        matches!(result.code, Some(c) if c != 0),
        "{name}: mpirun exited {:?} after rank {victim} was killed",
        result.code
    );
    eprintln!(
        "{name}: killed rank {victim}; mpirun exited {:?} {:.1} s later",
        result.code,
        (result.elapsed - killed_at).as_secs_f64()
    );
}

const LONG_ASP: [&str; 4] = [
    "sync.mode=asp",
    "run.epochs=0",
    "run.time_budget_s=600",
    "heterogeneity.unit_s=0.01",
];

const LONG_GSSP: [&str; 8] = [
    "sync.mode=gssp",
    "sync.gssp.groups=2",
    "sync.gssp.grouping=static",
    "sync.gssp.static_groups=[[2,3],[4,5]]",
    "compression.kind=topk",
    "run.epochs=0",
    "run.time_budget_s=600",
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

/// Iterations the other group must log while rank 4 is stopped. Paced at 20 ms, a worker
/// logs at most 51 rows in a second, and its log reaches the file at least once a second: of
/// the rows that reach the file after the stop, all but 51 at most were logged after it.
const OTHER_GROUP_ROWS: usize = 30;
const ROWS_BUFFERED_AT_MOST: usize = 51;

/// A worker stopped (SIGSTOP, as a swapped-out or preempted process) under gssp: the other
/// group trains on, the stopped worker's partner stops within its staleness bound, the
/// stopped worker resumes on SIGCONT, and the job ends with every update delivered.
///
/// The stop lasts until the other group has logged 30 iterations after it (a condition,
/// however long that takes; a group held back by the stopped worker fails its hang guard),
/// and the run ends on its epochs (20, about 1,900 pushes), which the other group alone
/// cannot use up meanwhile. Each check reads one rank's own log, so neither the machine's
/// speed nor the ranks' clocks matter.
#[test]
fn stopped_worker_holds_back_only_its_own_group() {
    let _lock = job_lock();
    let staleness = 2.0;
    let sets = [
        "sync.mode=gssp",
        "sync.gssp.groups=2",
        "sync.gssp.grouping=static",
        "sync.gssp.static_groups=[[2,3],[4,5]]",
        "sync.gssp.staleness=2",
        "compression.kind=topk",
        "run.epochs=20",
        "heterogeneity.unit_s=0.02",
    ];
    let (job, _scratch, marker) = start_training("stopped", 6, &sets);
    let dir = Path::new(&marker);
    let pid = pid_of_rank(&marker, 4);
    signal(pid, "STOP");
    let stopped = Instant::now();
    // The other group trains on meanwhile.
    let before = [2, 3].map(|rank| logged_rows(dir, rank));
    poll_until(
        "the other group (ranks 2, 3) training on while rank 4 is stopped",
        HANG_GUARD,
        || {
            [2, 3].iter().zip(before).all(|(&rank, n)| {
                logged_rows(dir, rank) >= n + ROWS_BUFFERED_AT_MOST + OTHER_GROUP_ROWS
            })
        },
    );
    let stopped_for = stopped.elapsed().as_secs_f64();
    signal(pid, "CONT");
    let result = job.wait(HANG_GUARD);
    result.assert_ok("stopped");
    let run = common::Run {
        dir: dir.to_path_buf(),
        ranks: 6,
    };
    // The stop shows in rank 4's log as its longest gap between two rows, at least as long
    // as the stop (the row before it was logged before the SIGSTOP, the one after after the
    // SIGCONT).
    let times = run.rank_csv(4).col("time_s");
    let longest = times.windows(2).map(|w| w[1] - w[0]).fold(0.0, f64::max);
    assert!(
        longest >= stopped_for - 0.01,
        "no stop of {stopped_for:.2} s in rank 4's log: longest gap {longest} s"
    );
    // Its partner ran into the bound and waited there: its server never saw the group's
    // clocks more than s + 1 apart (a worker released at c_min + s pushes once more), and
    // during a stop of 30 iterations and more it saw them at least s apart.
    let spread = run.rank_csv(1).col("clock_spread");
    let max = spread.iter().copied().fold(0.0, f64::max);
    assert!(
        (staleness..=staleness + 1.0).contains(&max),
        "group 1's clock spread reached {max} (bound {staleness})"
    );
    let s = run.summary();
    let error = common::num(&s, "replica_max_error");
    assert!(error < 1e-5, "replica_max_error {error}");
    eprintln!(
        "stopped rank 4 for {stopped_for:.1} s while ranks 2-3 logged {OTHER_GROUP_ROWS}+ rows: group 1's clock spread at most {max}; job {:.1} s",
        result.elapsed.as_secs_f64()
    );
}

/// The meeting timeout of the tests below: seconds, against the hang guard's minutes.
const MEETING_TIMEOUT: &str = "run.meeting_timeout_s=3";

/// A worker stopped for good (SIGSTOP, never continued) while the group servers meet now
/// and then (`extra`: checkpoints or regrouping): its group's server, held by the SSP bound,
/// never comes to the next meeting, and the servers that came end the job within
/// `run.meeting_timeout_s`, naming the group by its ranks, instead of waiting for it for good.
/// Returns the run directory, the scratch space that holds it, and the job's stderr.
fn stopped_worker_at_a_meeting_ends_the_job(
    name: &str,
    extra: &[&str],
    occasion: &str,
) -> (PathBuf, Scratch, String) {
    let _lock = job_lock();
    let mut sets = LONG_GSSP.to_vec();
    sets.extend(["sync.gssp.staleness=2", MEETING_TIMEOUT]);
    sets.extend(extra);
    let (job, scratch, marker) = start_training(name, 6, &sets);
    let dir = Path::new(&marker).to_path_buf();
    if occasion == "checkpoint" {
        poll_until(&format!("{name}: a first checkpoint"), HANG_GUARD, || {
            dir.join("checkpoints").join("latest").exists()
        });
    }
    signal(pid_of_rank(&marker, 4), "STOP");
    let stopped_at = job.elapsed();
    let result = job.wait(stopped_at + HANG_GUARD);
    assert!(
        matches!(result.code, Some(c) if c != 0),
        "{name}: mpirun exited {:?} with rank 4 stopped\nstderr:\n{}",
        result.code,
        result.stderr
    );
    let named = format!(
        "group 1 (server rank 1, workers{} 4, 5) did not come to the group servers' {occasion} meeting within 3 s (run.meeting_timeout_s)",
        if occasion == "regroup" { " at the start" } else { "" }
    );
    assert!(
        result.stderr.contains(&named),
        "{name}: stderr does not say {named:?}:\n{}",
        result.stderr
    );
    eprintln!(
        "{name}: rank 4 stopped; the job ended {:.1} s later naming its group:\n{}",
        (result.elapsed - stopped_at).as_secs_f64(),
        result.stderr
    );
    (dir, scratch, result.stderr)
}

/// With checkpoints on, a stopped worker ends the job at the next checkpoint meeting, and
/// the checkpoint before the stop stays whole to resume from (its manifest committed and
/// readable).
#[test]
fn stopped_worker_ends_the_job_at_a_checkpoint_meeting_naming_its_group() {
    let (dir, _scratch, stderr) = stopped_worker_at_a_meeting_ends_the_job(
        "stopped-checkpoint",
        &["run.checkpoint_every_s=1"],
        "checkpoint",
    );
    let checkpoints = dir.join("checkpoints");
    let latest = std::fs::read_to_string(checkpoints.join("latest")).expect("checkpoints/latest");
    let hint = format!("stays the newest: `gssp train --resume {}`", dir.display());
    assert!(stderr.contains(&hint), "no resume hint {hint:?}:\n{stderr}");
    let manifest = checkpoints.join(latest.trim()).join("manifest.json");
    let text = std::fs::read_to_string(&manifest).expect("the latest checkpoint's manifest");
    let parsed: serde_json::Value = serde_json::from_str(&text).expect("a whole manifest");
    assert!(
        parsed.get("time_s").is_some(),
        "{}: {text}",
        manifest.display()
    );
}

/// With regrouping on, a stopped worker ends the job at the next regroup meeting. The
/// servers meet every second but never move a worker (a gain of 100x asked for, and the
/// groups even), so rank 4 is in group 1 whatever speeds the load makes them measure.
#[test]
fn stopped_worker_ends_the_job_at_a_regroup_meeting_naming_its_group() {
    stopped_worker_at_a_meeting_ends_the_job(
        "stopped-regroup",
        &[
            "sync.gssp.regroup_every_s=1",
            "sync.gssp.regroup_min_gain=100",
        ],
        "regroup",
    );
}

/// A NaN in one worker's gradient (injected at its 5th iteration) is caught by its group
/// server before it reaches any replica: the job ends with an error naming the worker's rank
/// and iteration.
/// A rank of a collective mode stopped for good (SIGSTOP, never continued) with checkpoints
/// on: the reduction it does not come to is given up after `run.meeting_timeout_s`, the
/// arrival after it finds it missing, and the job ends naming it and the checkpoint to
/// resume from, instead of every other rank waiting in MPI for good.
fn stopped_rank_ends_a_collective_job(name: &str, mode: &[&str]) {
    let _lock = job_lock();
    let mut sets = mode.to_vec();
    sets.extend([
        "run.epochs=0",
        "run.time_budget_s=600",
        "heterogeneity.unit_s=0.01",
        "run.checkpoint_every_s=1",
        MEETING_TIMEOUT,
    ]);
    let (job, _scratch, marker) = start_training(name, 4, &sets);
    let dir = Path::new(&marker).to_path_buf();
    poll_until(&format!("{name}: a first checkpoint"), HANG_GUARD, || {
        dir.join("checkpoints").join("latest").exists()
    });
    signal(pid_of_rank(&marker, 2), "STOP");
    let stopped_at = job.elapsed();
    let result = job.wait(stopped_at + HANG_GUARD);
    assert!(
        matches!(result.code, Some(c) if c != 0),
        "{name}: mpirun exited {:?} with rank 2 stopped\nstderr:\n{}",
        result.code,
        result.stderr
    );
    let named = "rank 2 did not come to the reduction after iteration";
    let within = "within 3 s (run.meeting_timeout_s): it stopped answering";
    let hint = format!("stays the newest: `gssp train --resume {}`", dir.display());
    for want in [named, within, hint.as_str()] {
        assert!(
            result.stderr.contains(want),
            "{name}: stderr does not say {want:?}:\n{}",
            result.stderr
        );
    }
    eprintln!(
        "{name}: rank 2 stopped; the job ended {:.1} s later naming it:\n{}",
        (result.elapsed - stopped_at).as_secs_f64(),
        result.stderr
    );
}

#[test]
fn stopped_rank_ends_an_allreduce_job_naming_it() {
    stopped_rank_ends_a_collective_job("stopped-allreduce", &["sync.mode=allreduce"]);
}

#[test]
fn stopped_rank_ends_a_localsgd_job_naming_it() {
    stopped_rank_ends_a_collective_job(
        "stopped-localsgd",
        &["sync.mode=localsgd", "sync.localsgd.local_steps=4"],
    );
}

#[test]
fn nan_gradient_ends_the_job_naming_rank_and_iteration() {
    let _lock = job_lock();
    let (job, _) = train_fails_env(
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
    let job = refused(
        "badfault",
        3,
        &["sync.mode=asp", "run.epochs=1"],
        &[("GSSP_FAULT_NAN_GRADIENT", "soon")],
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
    let job = spawn_mpirun(3, &args, &out.display().to_string()).wait(HANG_GUARD);
    assert!(
        matches!(job.code, Some(c) if c != 0),
        "expected failure, got {:?}",
        job.code
    );
    assert!(
        job.stderr.contains(&blocker.display().to_string()),
        "the error does not name the run directory\nstderr:\n{}",
        job.stderr
    );
}

/// A full disk (a 256 KiB tmpfs as the run directory) ends the job with an error naming the
/// file that could not be written and the cause (within the hang guard); neither the model file nor
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
    let job = spawn_mpirun(3, &args, &out.display().to_string()).wait(HANG_GUARD);
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
