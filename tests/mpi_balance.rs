//! Batches in proportion to speed (`[sync.balance]`) under `mpirun`: the cut follows the
//! emulated speeds in allreduce and in the server modes, a re-measure follows a speed that
//! changes mid-run, a balanced step is the single process's step on the global batch (so an
//! epoch's batches are the single process's, each sample once), and a rank whose share would
//! be zero stops every rank, named.
//!
//! The emulated speeds pace every iteration to a multiple of a 10 ms unit, far above the
//! MLP's real compute, so the measured rates follow the factors on a loaded machine too;
//! nothing here asserts on wall-clock time.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{base_toml, job_lock, largest_difference, spawn_mpirun, Run, Scratch};

const DEADLINE: Duration = Duration::from_secs(120);

/// The batch column of rank `rank`'s last logged iteration.
fn last_batch(run: &Run, rank: usize) -> usize {
    run.rank_csv(rank).last("batch") as usize
}

/// `got` is `want` within a quarter of it (and one sample for rounding).
fn assert_near(got: usize, want: f64, what: &str) {
    let (g, w) = (got as f64, want);
    assert!(
        (g - w).abs() <= 0.25 * w + 1.0,
        "{what}: batch {got}, expected about {want:.1}"
    );
}

#[test]
fn the_cut_follows_the_emulated_speeds_in_allreduce_and_the_server_modes() {
    let _lock = job_lock();
    let s = Scratch::new();
    // Speeds 1 : 1 : 1/2 : 1/4 of a global batch of 64: 23.3, 23.3, 11.6, 5.8.
    let want = [64.0 / 2.75, 64.0 / 2.75, 32.0 / 2.75, 16.0 / 2.75];
    let common = [
        "optim.batch_size=16",
        "run.epochs=0.5",
        "heterogeneity.slowdown=[1.0, 1.0, 2.0, 4.0]",
        "heterogeneity.unit_s=0.01",
        "sync.balance.batches=speed",
    ];
    let mut sets = common.to_vec();
    sets.push("sync.mode=allreduce");
    let run = s.train_ok("allreduce", 4, &sets, DEADLINE);
    for (rank, &w) in want.iter().enumerate() {
        assert_near(last_batch(&run, rank), w, &format!("allreduce rank {rank}"));
    }
    let batches: usize = (0..4).map(|r| last_batch(&run, r)).sum();
    assert_eq!(batches, 64, "the cut keeps the global batch");
    // The first rows ran at the equal cut, before anything was measured.
    assert_eq!(run.rank_csv(3).col("batch")[0], 16.0);

    for mode in ["bsp", "gssp"] {
        let mut sets = common.to_vec();
        let m = format!("sync.mode={mode}");
        sets.extend([
            m.as_str(),
            "sync.gssp.groups=1",
            "sync.gssp.profile_iters=10",
        ]);
        let run = s.train_ok(mode, 5, &sets, DEADLINE);
        let layout = run.layout();
        let cut: Vec<usize> = layout["batches"]
            .as_array()
            .unwrap_or_else(|| panic!("{mode}: no batches in {layout}"))
            .iter()
            .map(|b| b.as_u64().expect("a batch") as usize)
            .collect();
        assert_eq!(cut[0], 0, "{mode}: the server has no batch");
        assert_eq!(cut.iter().sum::<usize>(), 64, "{mode}: {cut:?}");
        for (worker, &w) in want.iter().enumerate() {
            let rank = worker + 1;
            assert_near(cut[rank], w, &format!("{mode} rank {rank}"));
            assert_eq!(
                last_batch(&run, rank),
                cut[rank],
                "{mode}: rank {rank}'s log"
            );
        }
    }
}

#[test]
fn a_re_measure_follows_a_speed_change() {
    let _lock = job_lock();
    let s = Scratch::new();
    // Worker 1 turns 4x slower 1.5 s into training. Every step lasts at least 20 ms, so
    // 2.5 epochs of 187 steps leave it at least 2.5 s at its new speed: six re-measures.
    let sets = [
        "sync.mode=allreduce",
        "optim.batch_size=16",
        "run.epochs=2.5",
        "heterogeneity.unit_s=0.02",
        "heterogeneity.changes=[{ at_s = 1.5, worker = 1, factor = 4.0 }]",
        "sync.balance.batches=speed",
        "sync.balance.every_s=0.4",
        "sync.balance.hysteresis=0.2",
    ];
    let run = s.train_ok("change", 2, &sets, DEADLINE);
    let (fast, slow) = (run.rank_csv(0), run.rank_csv(1));
    let time = slow.col("time_s");
    let before: Vec<f64> = slow
        .col("batch")
        .iter()
        .zip(&time)
        .filter(|(_, &t)| t < 1.5)
        .map(|(&b, _)| b)
        .collect();
    // Equal speeds keep about the equal cut (a late sleep may move it a little).
    assert!(
        !before.is_empty() && before.iter().all(|&b| (12.0..=20.0).contains(&b)),
        "before the change: {before:?}"
    );
    // 1 : 1/4 of 32: 25.6 and 6.4.
    assert_near(last_batch(&run, 1), 6.4, "the slowed rank");
    assert_near(last_batch(&run, 0), 25.6, "the other rank");
    assert_eq!(fast.last("batch") + slow.last("batch"), 32.0);
}

#[test]
fn a_balanced_step_is_the_single_process_step_on_the_global_batch() {
    let _lock = job_lock();
    let s = Scratch::new();
    let config = s.config("base", &base_toml());
    // One epoch of 320 images in 20 global batches of 16, at a constant learning rate.
    let shared = [
        "data.train_limit=320",
        "run.epochs=1.0",
        "optim.lr_schedule=constant",
        "optim.warmup_epochs=0.0",
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
    let mut iterations = Vec::new();
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
        let run = s.train_config_ok(mode, &config, ranks, &sets, DEADLINE);
        let diff = largest_difference(&reference, &run.dir.join("model.safetensors"));
        assert!(
            diff < 1e-5,
            "{mode}: weights differ from single's by {diff}"
        );
        let worker = ranks - 1;
        iterations.push(run.rank_csv(worker).last("iteration"));
        assert_eq!(last_batch(&run, worker), 12);
    }
    assert_eq!(iterations, [20.0, 20.0], "one epoch is 20 global batches");
}

#[test]
fn a_share_that_would_be_zero_stops_every_rank_naming_it() {
    let _lock = job_lock();
    let s = Scratch::new();
    let config = s.config("base", &base_toml());
    let out = s.out("zero");
    // A global batch of 4 over speeds 1 and 1/16: the slow rank's share is 0.24 samples.
    let sets = [
        "sync.mode=allreduce",
        "optim.batch_size=2",
        "run.epochs=1.0",
        "heterogeneity.slowdown=[1.0, 16.0]",
        "heterogeneity.unit_s=0.002",
        "sync.balance.batches=speed",
        "sync.balance.measure_iters=3",
    ];
    let args = s.train_args(&config, &sets, &out);
    let job = spawn_mpirun(2, &args, &out.display().to_string()).wait(DEADLINE);
    assert!(matches!(job.code, Some(c) if c != 0), "{job:?}");
    let msg = "rank 1 measured";
    assert_eq!(
        job.stderr.matches(msg).count(),
        2,
        "every rank names rank 1\nstderr:\n{}",
        job.stderr
    );
    assert!(job
        .stderr
        .contains("its share of the global batch 4 would be 0 samples"));
}

/// Args of `gssp train --resume <dir> --set ...`.
fn resume_args(dir: &Path, sets: &[&str]) -> Vec<String> {
    let mut args = vec!["train".into(), "--resume".into(), dir.display().to_string()];
    for s in sets {
        args.extend(["--set".into(), (*s).to_string()]);
    }
    args
}

/// The batch of each of `rank`'s rows logged after `after_s` of the training clock.
fn batches_after(run: &Run, rank: usize, after_s: f64) -> Vec<f64> {
    let csv = run.rank_csv(rank);
    let time = csv.col("time_s");
    csv.col("batch")
        .into_iter()
        .zip(time)
        .filter(|&(_, t)| t > after_s)
        .map(|(b, _)| b)
        .collect()
}

#[test]
fn a_resumed_run_keeps_its_cut_and_another_rank_count_cuts_anew() {
    let _lock = job_lock();
    let s = Scratch::new();
    let sets = [
        "sync.mode=allreduce",
        "optim.batch_size=16",
        "run.epochs=0.3",
        // Worker 1 is 4x slower from the start, on 4 ranks and on 3.
        "heterogeneity.changes=[{ at_s = 0.0, worker = 1, factor = 4.0 }]",
        "heterogeneity.unit_s=0.01",
        "sync.balance.batches=speed",
    ];
    let run = s.train_ok("first", 4, &sets, DEADLINE);
    let cut: Vec<f64> = (0..4).map(|r| run.rank_csv(r).last("batch")).collect();
    assert!(cut[1] < 16.0 && cut[0] > 16.0, "the first run cut: {cut:?}");
    let first_s = run.summary()["wall_s"].as_f64().expect("wall_s");

    let more = spawn_mpirun(
        4,
        &resume_args(&run.dir, &["run.epochs=0.6"]),
        &run.dir.display().to_string(),
    );
    more.wait(DEADLINE).assert_ok("resumed on 4 ranks");
    for (rank, &b) in cut.iter().enumerate() {
        let after = batches_after(&run, rank, first_s);
        assert!(!after.is_empty(), "rank {rank} logged after the resume");
        assert_eq!(after[0], b, "rank {rank} continues with its cut");
    }
    let second_s = run.summary()["wall_s"].as_f64().expect("wall_s");

    // On 3 ranks the saved cut does not fit: equal batches of 16 first, then a new cut.
    let three = resume_args(&run.dir, &["run.epochs=0.9"]);
    spawn_mpirun(3, &three, &run.dir.display().to_string())
        .wait(DEADLINE)
        .assert_ok("resumed on 3 ranks");
    let slow = batches_after(&run, 1, second_s);
    assert_eq!(slow.first(), Some(&16.0), "the equal cut first: {slow:?}");
    assert_near(
        *slow.last().expect("rows") as usize,
        48.0 / 9.0,
        "rank 1 cut anew",
    );
}
