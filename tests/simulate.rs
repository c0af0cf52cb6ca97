//! `gssp train --simulate`: every rank of a run played in one process on a simulated clock
//! (src/tools/simulate). A simulated balanced step is the single process's step on the
//! global batch (so an epoch visits every sample once, as the single process's epoch does);
//! no worker runs more than its bound ahead of its group's slowest; every update reaches
//! every gssp replica; the same seed gives the same files, bit for bit; and what it cannot
//! run is refused, naming the key, before any step.
//!
//! Everything here reads the run's own files: the simulated clock does not depend on the
//! machine's, so nothing is timed.

mod common;

use std::process::Command;

use common::{base_toml, largest_difference, Csv, Run, Scratch};

/// [`Scratch::simulate`], which must succeed; its run directory.
fn simulate_ok(s: &Scratch, name: &str, ranks: usize, sets: &[&str]) -> Run {
    let config = s.config("base", &base_toml());
    let out = s.out(name);
    let done = s.simulate(&config, (ranks, 0.0), sets, &out);
    assert!(
        done.status.success(),
        "{name}: {}",
        String::from_utf8_lossy(&done.stderr)
    );
    Run { dir: out, ranks }
}

#[test]
fn simulated_balanced_steps_are_the_single_process_step_on_the_global_batch() {
    let s = Scratch::new();
    let config = s.config("base", &base_toml());
    // One epoch of 320 images in 20 global batches of 16, at a constant learning rate.
    let shared = [
        "data.train_limit=320",
        "run.epochs=1.0",
        "optim.lr_schedule=constant",
        "optim.warmup_epochs=0.0",
        "heterogeneity.unit_s=0.01",
    ];
    let single_out = s.out("single");
    let mut args = s.train_args(&config, &shared, &single_out);
    args.extend(["--set".into(), "optim.batch_size=16".into()]);
    let single = Command::new(common::gssp_bin())
        .args(&args)
        .env("OPENBLAS_NUM_THREADS", "1")
        .output()
        .expect("run gssp in single mode");
    assert!(
        single.status.success(),
        "{}",
        String::from_utf8_lossy(&single.stderr)
    );
    let reference = single_out.join("model.safetensors");
    // 4 and 12 of each global batch of 16 on two workers, mean batch 8.
    for (mode, ranks) in [("allreduce", 2), ("bsp", 3)] {
        let mut sets = shared.to_vec();
        let m = format!("sync.mode={mode}");
        sets.extend([
            m.as_str(),
            "optim.batch_size=8",
            "sync.balance.batches=static",
            "sync.balance.static_batches=[4, 12]",
        ]);
        let run = simulate_ok(&s, mode, ranks, &sets);
        let diff = largest_difference(&reference, &run.dir.join("model.safetensors"));
        assert!(
            diff < 1e-5,
            "{mode}: weights differ from single's by {diff}"
        );
        let worker = ranks - 1;
        let csv = run.rank_csv(worker);
        assert_eq!(
            csv.last("iteration"),
            20.0,
            "{mode}: one epoch is 20 global batches"
        );
        assert_eq!(csv.last("batch"), 12.0, "{mode}");
        assert_eq!(run.summary()["clock"], "simulated");
    }
}

/// The largest clock spread a server logged (its workers' clocks after each push).
fn largest_spread(csv: &Csv) -> f64 {
    csv.col("clock_spread").into_iter().fold(0.0, f64::max)
}

#[test]
fn no_simulated_worker_runs_more_than_its_bound_ahead_and_every_update_reaches_every_replica() {
    let s = Scratch::new();
    // Two groups of a fast and a 4x slower worker each, bound 2: the fast one meets the
    // bound and waits there; the groups exchange top-k updates.
    let sets = [
        "sync.mode=gssp",
        "sync.gssp.groups=2",
        "sync.gssp.grouping=static",
        "sync.gssp.staleness=2",
        "compression.kind=topk",
        "run.epochs=0.5",
        "run.log_every=1",
        "heterogeneity.slowdown=[1.0, 4.0, 1.0, 4.0]",
        "heterogeneity.unit_s=0.01",
    ];
    // Unsharded, and each group's server sharded over two ranks (each shard's range
    // exchanged with the other group's same shard).
    let variants = [
        (
            "gssp",
            "sync.shards=1",
            "sync.gssp.static_groups=[[2,3],[4,5]]",
            6,
        ),
        (
            "gssp-shards",
            "sync.shards=2",
            "sync.gssp.static_groups=[[4,5],[6,7]]",
            8,
        ),
    ];
    for (name, shards, groups, ranks) in variants {
        let mut sets = sets.to_vec();
        sets.extend([shards, groups]);
        let run = simulate_ok(&s, name, ranks, &sets);
        for server in [0, 1] {
            // A worker released at c_min + s pushes once more: its server never sees the
            // clocks more than s + 1 apart, and with a 4x slower partner it sees them s
            // apart.
            let spread = largest_spread(&run.rank_csv(server));
            assert!(
                (2.0..=3.0).contains(&spread),
                "{name} server {server}: spread {spread}"
            );
        }
        let summary = run.summary();
        let error = summary["replica_max_error"]
            .as_f64()
            .expect("a replica error");
        assert!(error < 1e-5, "{name}: replica_max_error {error}");
        assert!(summary["bytes_inter_group"].as_u64().expect("bytes") > 0);
        let accuracy = summary["final_test_accuracy"]
            .as_f64()
            .expect("an accuracy");
        assert!(
            accuracy > 0.5,
            "{name}: it learns (chance 0.10), {accuracy}"
        );
    }
}

#[test]
fn the_same_seed_gives_the_same_files_bit_for_bit() {
    let s = Scratch::new();
    let sets = [
        "sync.mode=gssp",
        "sync.gssp.groups=2",
        "sync.gssp.profile_iters=3",
        "compression.kind=topk",
        "run.epochs=0.3",
        "heterogeneity.slowdown=[1.0, 1.0, 3.0, 3.0]",
        "heterogeneity.unit_s=0.01",
        "heterogeneity.straggler_prob=0.2",
        "heterogeneity.straggler_factor=5.0",
        "run.snapshot_every_s=0.5",
    ];
    let runs = ["first", "second"].map(|name| simulate_ok(&s, name, 6, &sets));
    for file in ["eval.csv", "rank-0.csv", "rank-3.csv", "layout.json"] {
        let [a, b] = runs
            .each_ref()
            .map(|r| std::fs::read(r.dir.join(file)).expect("a run's file"));
        assert!(a == b, "{file} differs between two runs of one seed");
    }
    let evals = std::fs::read_to_string(runs[0].dir.join("eval.csv")).expect("eval.csv");
    assert!(evals.lines().count() > 3, "snapshots were taken:\n{evals}");
}

#[test]
fn what_the_simulated_clock_cannot_run_is_refused_naming_the_key_before_any_step() {
    let s = Scratch::new();
    let config = s.config("base", &base_toml());
    let cases: [(&[&str], &str); 6] = [
        (
            &["heterogeneity.unit_s=0", "sync.mode=asp"],
            "heterogeneity.unit_s = 0",
        ),
        (
            &["heterogeneity.unit_s=0.01", "sync.mode=single"],
            "sync.mode = \"single\"",
        ),
        (
            &[
                "heterogeneity.unit_s=0.01",
                "sync.mode=asp",
                "run.checkpoint_every_s=5",
            ],
            "run.checkpoint_every_s = 5",
        ),
        (
            &[
                "heterogeneity.unit_s=0.01",
                "sync.mode=asp",
                "sync.overlap=true",
            ],
            "sync.overlap = true",
        ),
        (
            &[
                "heterogeneity.unit_s=0.01",
                "sync.mode=gssp",
                "sync.gssp.regroup_every_s=5",
            ],
            "sync.gssp.regroup_every_s = 5",
        ),
        (
            &[
                "heterogeneity.unit_s=0.01",
                "sync.mode=asp",
                "sync.shards=auto",
            ],
            "sync.shards = \"auto\"",
        ),
    ];
    for (i, (sets, key)) in cases.iter().enumerate() {
        let out = s.out(&format!("refused-{i}"));
        let done = s.simulate(&config, (3, 0.0), sets, &out);
        let stderr = String::from_utf8_lossy(&done.stderr);
        assert_eq!(done.status.code(), Some(2), "{sets:?}: {stderr}");
        assert!(
            stderr.contains(key),
            "{sets:?}: stderr does not name {key:?}:\n{stderr}"
        );
        assert!(
            !out.join("rank-1.csv").exists() && !out.join("eval.csv").exists(),
            "{sets:?}: a refused run left training files"
        );
    }
}

/// `gssp bench paper --simulate --jobs 2` trains its variants side by side: the table lists
/// them in the variants file's order, and every run's eval.csv is, bit for bit, the one the
/// same sitting writes one job at a time (a simulated run does not depend on what runs
/// beside it).
#[test]
fn simulated_jobs_side_by_side_write_the_files_of_one_job_at_a_time() {
    let s = Scratch::new();
    let scenario = base_toml()
        + "[heterogeneity]\nslowdown = [1.0, 1.0, 2.0, 2.0]\nunit_s = 0.01\n"
        + "[sync.gssp]\ngroups = 2\nprofile_iters = 3\n";
    let config = s.config("scenario", &scenario);
    let variants = s.tmp.path().join("variants.toml");
    std::fs::write(
        &variants,
        "[[variant]]\nname = \"gssp\"\nset = [\"sync.mode=gssp\"]\n\
         [[variant]]\nname = \"asp\"\nset = [\"sync.mode=asp\"]\n\
         [[variant]]\nname = \"allreduce\"\nset = [\"sync.mode=allreduce\"]\n",
    )
    .expect("write the variants");
    let sitting = |jobs: &str| {
        let out = s.out(&format!("jobs-{jobs}"));
        let done = Command::new(common::gssp_bin())
            .args([
                "bench",
                "paper",
                "--simulate",
                "--jobs",
                jobs,
                "--budget-s",
                "1",
            ])
            .arg("--config")
            .arg(&config)
            .arg("--variants")
            .arg(&variants)
            .arg("--out")
            .arg(&out)
            .env("OPENBLAS_NUM_THREADS", "1")
            .output()
            .expect("run gssp bench paper --simulate");
        let stderr = String::from_utf8_lossy(&done.stderr);
        assert!(done.status.success(), "--jobs {jobs}: {stderr}");
        out
    };
    let (one, side_by_side) = (sitting("1"), sitting("3"));
    let table = std::fs::read_to_string(side_by_side.join("bench.json")).expect("bench.json");
    let rows: serde_json::Value = serde_json::from_str(&table).expect("bench.json parses");
    let names: Vec<&str> = rows
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["mode"].as_str())
        .collect();
    assert_eq!(names, ["gssp", "asp", "allreduce"], "{table}");
    for name in names {
        let [a, b] = [&one, &side_by_side]
            .map(|dir| std::fs::read(dir.join(name).join("eval.csv")).expect("a run's eval.csv"));
        assert!(a == b, "{name}: eval.csv differs with jobs side by side");
    }
}

/// A worker's log has one row an iteration, and its wait is part of its time: when a server
/// stops, each of its workers is told once, however many pushes still arrive.
#[test]
fn each_worker_logs_each_iteration_once_and_waits_less_than_it_runs() {
    let s = Scratch::new();
    let sets = [
        "sync.mode=asp",
        "run.epochs=0.3",
        "run.log_every=1",
        "heterogeneity.slowdown=[1.0, 1.0, 2.0, 4.0, 4.0]",
        "heterogeneity.unit_s=0.01",
    ];
    let run = simulate_ok(&s, "asp", 6, &sets);
    for rank in 1..6 {
        let iterations = run.rank_csv(rank).col("iteration");
        assert!(
            iterations.windows(2).all(|p| p[1] == p[0] + 1.0),
            "rank {rank}: iterations {iterations:?}"
        );
    }
    let summary = run.summary();
    let waits = summary["worker_wait_fractions"]
        .as_array()
        .expect("the workers' waits");
    assert_eq!(waits.len(), 5);
    for wait in waits {
        let wait = wait.as_f64().expect("a wait fraction");
        assert!((0.0..1.0).contains(&wait), "wait fraction {wait}");
    }
}

/// A group server whose pushes come rarer than the snapshots still has one copy per
/// interval, so the run evaluates the groups' average at every interval, each of one
/// moment: a slow group (pushes every 0.1 s) beside a fast one, snapshots every 0.05 s.
#[test]
fn a_slow_group_leaves_a_snapshot_at_every_interval() {
    let s = Scratch::new();
    let sets = [
        "sync.mode=gssp",
        "sync.gssp.groups=2",
        "sync.gssp.grouping=static",
        "sync.gssp.static_groups=[[2,3],[4,5]]",
        "run.epochs=0",
        "run.time_budget_s=3",
        "run.snapshot_every_s=0.05",
        "heterogeneity.slowdown=[1.0, 1.0, 20.0, 20.0]",
        "heterogeneity.unit_s=0.01",
    ];
    let run = simulate_ok(&s, "slow-group", 6, &sets);
    let times = run.eval().col("time_s");
    let snapshots = &times[..times.len() - 1];
    let (first, last) = (snapshots[0], snapshots[snapshots.len() - 1]);
    let intervals = ((last - first) / 0.05).round() as usize + 1;
    assert!(
        snapshots.len() + 2 >= intervals,
        "{} snapshots from {first} s to {last} s, {intervals} intervals",
        snapshots.len()
    );
    assert!(times.windows(2).all(|t| t[0] <= t[1]), "{times:?}");
}
