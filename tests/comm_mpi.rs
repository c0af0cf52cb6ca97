//! Multi-rank tests of the comm module: start the example programs `comm_selftest` and
//! `panic_on_rank` (examples/) under `mpirun`.
//!
//! MPI cannot be initialised twice in one process, so every test is its own MPI job. Its
//! deadline only turns a hang into a failure (tests/common/mod.rs: no test depends on the
//! machine's timing): a job that should end does so within it or never.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

struct JobResult {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// The built example program `name`. `cargo test` builds the examples next to the test
/// binaries: this test is `target/<profile>/deps/comm_mpi-<hash>`, the example
/// `target/<profile>/examples/<name>`.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test binary lies in target/<profile>/deps");
    let path = profile_dir.join("examples").join(name);
    assert!(
        path.is_file(),
        "{} is missing: `cargo test` builds it, except with a target filter such as \
         `--test comm_mpi`; then run `cargo build --examples` (same profile) first",
        path.display()
    );
    path
}

/// Runs `mpirun <mpi_args> <example program> <args>` with a deadline; on timeout the whole
/// process group is killed and the test fails.
fn mpirun(mpi_args: &[&str], program: &str, args: &[&str], deadline: Duration) -> JobResult {
    let start = Instant::now();
    let mut child = Command::new("mpirun")
        .args(mpi_args)
        .arg(example(program))
        .args(args)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("mpirun must be installed (OpenMPI)");
    let reader = |mut pipe: Box<dyn Read + Send>| {
        thread::spawn(move || {
            let mut s = String::new();
            let _ = pipe.read_to_string(&mut s);
            s
        })
    };
    let out = reader(Box::new(child.stdout.take().expect("piped stdout")));
    let err = reader(Box::new(child.stderr.take().expect("piped stderr")));
    let code = loop {
        if let Some(status) = child.try_wait().expect("wait for mpirun") {
            break status.code();
        }
        if start.elapsed() > deadline {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .status();
            let _ = child.wait();
            panic!(
                "mpirun {mpi_args:?} {program} {args:?} still running after {deadline:?}; killed\n\
                 stderr so far: {}",
                err.join().unwrap_or_default()
            );
        }
        thread::sleep(Duration::from_millis(50));
    };
    JobResult {
        code,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}

fn assert_comm_selftest_ok(r: &JobResult) {
    assert_eq!(
        r.code,
        Some(0),
        "comm_selftest failed\nstdout:\n{}\nstderr:\n{}",
        r.stdout,
        r.stderr
    );
    assert_eq!(
        r.stdout
            .lines()
            .filter(|l| *l == "comm_selftest: ok")
            .count(),
        1,
        "expected one ok line from rank 0\nstdout:\n{}",
        r.stdout
    );
}

#[test]
fn comm_selftest_on_2_ranks() {
    let r = mpirun(&["-n", "2"], "comm_selftest", &[], Duration::from_secs(120));
    assert_comm_selftest_ok(&r);
}

#[test]
fn comm_selftest_on_5_oversubscribed_ranks() {
    let r = mpirun(
        &["-n", "5", "--oversubscribe", "--bind-to", "none"],
        "comm_selftest",
        &[],
        Duration::from_secs(180),
    );
    assert_comm_selftest_ok(&r);
}

/// The other ranks wait for a message that never comes: without the abort the job would
/// hang until the deadline (a hang guard, not a measure of how fast it ends).
#[test]
fn panic_on_one_rank_ends_the_whole_job() {
    let r = mpirun(
        &["-n", "3", "--oversubscribe", "--bind-to", "none"],
        "panic_on_rank",
        &["--rank", "1"],
        Duration::from_secs(120),
    );
    assert!(
        matches!(r.code, Some(c) if c != 0),
        "job must fail, got {:?}\nstderr:\n{}",
        r.code,
        r.stderr
    );
    let lines: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.contains("panicked"))
        .collect();
    assert_eq!(
        lines.len(),
        1,
        "expected one panic line\nstderr:\n{}",
        r.stderr
    );
    assert!(
        lines[0].contains("error: rank 1 panicked: injected panic"),
        "unexpected panic line: {}",
        lines[0]
    );
}

#[test]
fn error_seen_by_all_ranks_exits_2_without_abort() {
    // --rank outside the job: every rank detects it, agrees through fatal_on_all, exits 2.
    let r = mpirun(
        &["-n", "2"],
        "panic_on_rank",
        &["--rank", "9"],
        Duration::from_secs(60),
    );
    assert_eq!(r.code, Some(2), "stderr:\n{}", r.stderr);
    assert!(
        r.stderr.contains("--rank 9 is outside 0..2"),
        "stderr:\n{}",
        r.stderr
    );
    assert!(!r.stderr.contains("MPI_ABORT"), "stderr:\n{}", r.stderr);
}
