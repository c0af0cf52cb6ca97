//! Checkpoints and resume on real MNIST: a run killed mid-way and resumed ends as an
//! uninterrupted one (exactly, in one process; within tolerance, under gssp), every mode
//! resumes, and a damaged checkpoint or a wrong resume is a clear error naming what is wrong.
//!
//! Runs are killed on what their directories show (a committed checkpoint, rows logged past
//! it), never after a sleep, and a failed resume is judged by the rows it did not log, not by
//! how fast it ended (tests/common/mod.rs: no test depends on the machine's timing).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{
    base_toml, job_lock, logged_rows, num, pids_with_marker, poll_until, signal, spawn_mpirun,
    world_rank_of, Csv, Run, Scratch,
};

/// How long a job or a wait may take before it counts as hung: minutes, against seconds.
const HANG_GUARD: Duration = Duration::from_secs(180);

/// `gssp train ARGS` in this process group (single mode runs without mpirun).
fn gssp(args: &[String]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gssp"));
    c.args(args)
        .env("OPENBLAS_NUM_THREADS", "1")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null());
    c
}

fn resume_args(dir: &Path, sets: &[&str]) -> Vec<String> {
    let mut args = vec![
        "train".to_string(),
        "--resume".into(),
        dir.display().to_string(),
    ];
    for s in sets {
        args.push("--set".into());
        args.push((*s).to_string());
    }
    args
}

/// The training-clock time of the newest committed checkpoint in run directory `dir`, if
/// there is one.
fn latest_checkpoint_s(dir: &Path) -> Option<f64> {
    let name = std::fs::read_to_string(dir.join("checkpoints").join("latest")).ok()?;
    let manifest = dir
        .join("checkpoints")
        .join(name.trim())
        .join("manifest.json");
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(manifest).ok()?).ok()?;
    manifest.get("time_s")?.as_f64()
}

/// Whether rank `rank` has logged, as far as its file shows, a row past the newest committed
/// checkpoint of run directory `dir` (work the resumed run must drop and do again).
fn logged_past_checkpoint(dir: &Path, rank: usize) -> bool {
    let Some(saved_at) = latest_checkpoint_s(dir) else {
        return false;
    };
    if logged_rows(dir, rank) == 0 {
        return false;
    }
    let text = std::fs::read_to_string(dir.join(format!("rank-{rank}.csv"))).unwrap_or_default();
    // Complete lines only: the file may end in a row half written.
    let complete = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
    complete
        .lines()
        .skip(1)
        .filter_map(|l| l.split(',').next()?.parse::<f64>().ok())
        .any(|t| t > saved_at)
}

/// Whether every thread of process `pid` is stopped (state T) or has exited (Z, X, gone):
/// nothing it writes changes any more.
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return true;
    };
    tasks.filter_map(Result::ok).all(|task| {
        std::fs::read_to_string(task.path().join("stat"))
            .ok()
            .and_then(|stat| {
                let state = stat
                    .rsplit_once(')')?
                    .1
                    .split_whitespace()
                    .next()?
                    .to_string();
                Some(matches!(state.as_str(), "T" | "t" | "Z" | "X"))
            })
            .unwrap_or(true)
    })
}

fn column(csv: &Csv, name: &str) -> Vec<f64> {
    csv.col(name)
}

/// The single-process mode saves everything its training depends on: killed after a
/// checkpoint and resumed, it ends with the very same model, evaluations and log as a run
/// that was never interrupted.
const LENET: [&str; 4] = [
    "model.name=lenet5",
    "run.epochs=5",
    "run.eval_every_epochs=1",
    "optim.batch_size=32",
];

#[test]
fn single_mode_killed_and_resumed_ends_exactly_as_an_uninterrupted_run() {
    let scratch = Scratch::new();
    let config = scratch.config("base", &base_toml());
    killed_and_resumed_single(
        &scratch,
        &config,
        &[&LENET[..], &["optim.lr=0.05"]].concat(),
    );
}

/// The same with Adam and clipping: its moments and update count are in the checkpoint.
#[test]
fn single_mode_with_adam_killed_and_resumed_ends_exactly_as_an_uninterrupted_run() {
    let scratch = Scratch::new();
    let config = scratch.config("base", &base_toml());
    let adam = ["optim.kind=adam", "optim.lr=0.002", "optim.clip_norm=1.0"];
    killed_and_resumed_single(&scratch, &config, &[&LENET[..], &adam].concat());
}

/// The translation model: its batches, dropout masks and teacher forcing follow the batch
/// count, so a resumed run replays exactly, and it ends with the same perplexity and BLEU.
#[test]
fn seq2seq_killed_and_resumed_ends_exactly_as_an_uninterrupted_run() {
    let scratch = Scratch::new();
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/seq2seq_multi30k.toml");
    let dir = format!("data.dir=\"{}\"", common::multi30k_dir().display());
    let sets = [
        dir.as_str(),
        "model.width=0.125",
        "data.train_limit=1280",
        "data.test_limit=100",
        "run.epochs=3",
        "run.eval_every_epochs=1",
    ];
    killed_and_resumed_single(&scratch, &config, &sets);
}

fn killed_and_resumed_single(scratch: &Scratch, config: &Path, sets: &[&str]) {
    let whole = scratch.out("whole");
    let out = gssp(&scratch.train_args(config, sets, &whole))
        .output()
        .expect("run gssp");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let cut = scratch.out("cut");
    let mut with_checkpoints = sets.to_vec();
    with_checkpoints.push("run.checkpoint_every_s=0.4");
    let mut child = gssp(&scratch.train_args(config, &with_checkpoints, &cut))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run gssp");
    // Killed once its log holds a row past its newest checkpoint. The check is made with the
    // run stopped (SIGSTOP, every thread), so that no newer checkpoint can be committed
    // between the check and the kill.
    let pid = child.id();
    poll_until("a row logged past a checkpoint", HANG_GUARD, || {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the run ended ({status}) before it was killed");
        }
        signal(pid, "STOP");
        poll_until("the run stopping", HANG_GUARD, || all_threads_stopped(pid));
        let past = logged_past_checkpoint(&cut, 0);
        if !past {
            signal(pid, "CONT");
        }
        past
    });
    child.kill().expect("SIGKILL the run");
    let status = child.wait().expect("reap it");
    assert!(!status.success(), "the run ended before it was killed");
    assert!(
        !cut.join("summary.json").exists(),
        "killed too late: the run had finished"
    );

    let out = gssp(&resume_args(&cut, &[])).output().expect("resume");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (a, b) = (
        Run {
            dir: whole,
            ranks: 1,
        },
        Run { dir: cut, ranks: 1 },
    );
    let (sa, sb) = (a.summary(), b.summary());
    for key in [
        "final_test_loss",
        "final_test_accuracy",
        "iterations",
        "epochs",
    ] {
        assert_eq!(num(&sa, key), num(&sb, key), "{key} differs after resume");
    }
    for key in ["final_test_perplexity", "final_bleu"] {
        assert_eq!(sa[key], sb[key], "{key} differs after resume");
    }
    assert_eq!(
        column(&a.eval(), "test_loss"),
        column(&b.eval(), "test_loss"),
        "evaluations differ"
    );
    // Every iteration logged once: rows after the checkpoint written by the killed attempt
    // were dropped, and the resumed run wrote them again.
    assert_eq!(
        column(&a.rank_csv(0), "iteration"),
        column(&b.rank_csv(0), "iteration")
    );
    assert_eq!(
        column(&a.rank_csv(0), "loss"),
        column(&b.rank_csv(0), "loss")
    );
}

const GSSP: [&str; 11] = [
    "sync.mode=gssp",
    "sync.gssp.groups=2",
    "sync.gssp.grouping=static",
    "sync.gssp.static_groups=[[2,3],[4,5]]",
    "compression.kind=topk",
    "compression.ratio=0.05",
    "run.epochs=12",
    "run.snapshot_every_s=1",
    "heterogeneity.unit_s=0.01",
    "optim.staleness_lr=inverse",
    "model.mlp_hidden=[64]",
];

/// gssp, 2 groups of 2 workers: a worker SIGKILLed after a checkpoint ends the job; resumed,
/// the run trains its planned epochs, every update reaches both replicas, the snapshots taken
/// before the kill survive, and it ends within 3 points of an uninterrupted run.
#[test]
fn gssp_worker_killed_then_resumed_finishes_its_epochs() {
    let _lock = job_lock();
    let scratch = Scratch::new();
    let config = scratch.config("base", &base_toml());
    let whole = scratch.train_ok("whole", 6, &GSSP, HANG_GUARD);

    let cut = scratch.out("cut");
    let marker = cut.display().to_string();
    let mut sets = GSSP.to_vec();
    sets.push("run.checkpoint_every_s=1.5");
    let mut job = spawn_mpirun(6, &scratch.train_args(&config, &sets, &cut), &marker);
    // Killed once it has logged work past a checkpoint, which the resumed run must redo.
    poll_until("rank 5 logging past a checkpoint", HANG_GUARD, || {
        if let Some(code) = job.try_code() {
            panic!("the job ended (exit {code:?}) before rank 5 was killed");
        }
        logged_past_checkpoint(&cut, 5)
    });
    let victim: Vec<u32> = pids_with_marker(&marker)
        .into_iter()
        .filter(|&p| world_rank_of(p) == Some(5))
        .collect();
    assert_eq!(victim.len(), 1, "rank 5 not found");
    signal(victim[0], "KILL");
    let killed_at = job.elapsed();
    let ended = job.wait(killed_at + HANG_GUARD);
    assert!(
        matches!(ended.code, Some(c) if c != 0),
        "the job went on without its killed worker: {:?}",
        ended.code
    );
    assert!(!cut.join("summary.json").exists(), "killed too late");
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(latest_manifest(&cut)).expect("a manifest"))
            .expect("manifest JSON");
    let saved_at = num(&manifest, "time_s");

    let resumed = spawn_mpirun(6, &resume_args(&cut, &[]), &marker).wait(HANG_GUARD);
    resumed.assert_ok("resume");
    let (a, b) = (whole, Run { dir: cut, ranks: 6 });
    let (sa, sb) = (a.summary(), b.summary());
    assert!(
        num(&sb, "epochs") >= 12.0,
        "resumed run stopped early: {sb}"
    );
    assert!(
        num(&sb, "replica_max_error") < 1e-4,
        "an update did not reach every replica: {sb}"
    );
    let (acc_a, acc_b) = (
        num(&sa, "final_test_accuracy"),
        num(&sb, "final_test_accuracy"),
    );
    assert!(
        (acc_a - acc_b).abs() <= 0.03,
        "uninterrupted {acc_a:.4} vs resumed {acc_b:.4}"
    );
    let times = column(&b.eval(), "time_s");
    assert!(
        times.iter().filter(|&&t| t <= saved_at).count() >= 1,
        "the snapshots before the checkpoint at {saved_at:.1} s are gone: {times:?}"
    );
    assert!(
        times.windows(2).all(|w| w[0] <= w[1]),
        "eval.csv goes back in time: {times:?}"
    );
    eprintln!(
        "gssp: uninterrupted {:.2}% vs killed at {:.1} s, resumed from {saved_at:.1} s: {:.2}%",
        100.0 * acc_a,
        killed_at.as_secs_f64(),
        100.0 * acc_b
    );
}

/// The manifest `latest` names in run directory `dir`.
fn latest_manifest(dir: &Path) -> PathBuf {
    let latest = std::fs::read_to_string(dir.join("checkpoints").join("latest"))
        .expect("checkpoints/latest");
    dir.join("checkpoints")
        .join(latest.trim())
        .join("manifest.json")
}

/// Every distributed mode writes a final checkpoint and trains on from it when resumed
/// with more epochs, on as many ranks or on another count (`(mode, ranks, resumed on)`);
/// gssp's 2 groups of 2 workers then go on to 3 workers and to 6.
#[test]
fn every_mode_resumes_its_final_checkpoint_and_trains_on() {
    let _lock = job_lock();
    let scratch = Scratch::new();
    // Adam's moments and update count are state too (checked exactly in one process by
    // `single_mode_with_adam_...`); here, that every mode saves and restores them.
    let adam = ["optim.kind=adam", "optim.lr=0.003", "optim.clip_norm=1.0"];
    for (mode, ranks, resumed_on, extra) in [
        ("bsp", 3, 4, &[][..]),
        ("asp", 3, 2, &[]),
        ("ssp", 4, 4, &[]),
        ("allreduce", 3, 2, &[]),
        ("localsgd", 3, 4, &[]),
        ("async-localsgd", 3, 4, &[]),
        ("gssp", 6, 6, &[]),
        ("asp", 3, 3, &adam),
        ("allreduce", 3, 4, &adam),
    ] {
        let mut sets = vec![format!("sync.mode={mode}"), "run.epochs=1".to_string()];
        sets.extend(extra.iter().map(|s| s.to_string()));
        let label = format!("{mode}{}", if extra.is_empty() { "" } else { "-adam" });
        let mode = label.as_str();
        if mode.starts_with("gssp") {
            sets.extend([
                "sync.gssp.groups=2".into(),
                "sync.gssp.grouping=static".into(),
            ]);
            sets.push("sync.gssp.static_groups=[[2,3],[4,5]]".into());
        }
        if mode.starts_with("localsgd") {
            sets.push("sync.localsgd.local_steps=4".into());
        }
        let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
        let first = scratch.train_ok(mode, ranks, &sets, HANG_GUARD);
        let layout = first.layout();
        resume_trains_on(&first, mode, resumed_on, 2);
        if resumed_on == ranks {
            assert_eq!(first.layout(), layout, "{mode}: the layout changed");
        }
        if mode == "async-localsgd" {
            // The new workers were profiled again: one count of local steps each.
            let steps = first.layout()["local_steps"].as_array().map(Vec::len);
            assert_eq!(steps, Some(resumed_on - 1), "{}", first.layout());
        }
        if mode == "gssp" {
            // Two replicas merged into one model, then split again: 3 workers, then 6.
            resume_trains_on(&first, "gssp on 3 workers", 5, 3);
            resume_trains_on(&first, "gssp on 6 workers", 8, 4);
        }
    }
}

/// gssp in 2 groups of 2 workers (ranks 4-5, 6-7), each group's server 2 ranks (0 and 2,
/// 1 and 3).
const SHARDED: [&str; 5] = [
    "sync.mode=gssp",
    "sync.gssp.groups=2",
    "sync.gssp.grouping=static",
    "sync.gssp.static_groups=[[4,5],[6,7]]",
    "sync.shards=2",
];

/// A run of sharded servers (gssp in 2 groups of 2 workers, each group's server 2 ranks:
/// 0 and 2, 1 and 3) resumes its final checkpoint on its own 8 ranks, each shard from its
/// own file (its range), and trains on: over both runs every push reached both shards of
/// its group and the replicas agree.
#[test]
fn a_sharded_run_resumes_its_final_checkpoint_on_its_own_ranks() {
    let _lock = job_lock();
    let scratch = Scratch::new();
    let mut sets = SHARDED.to_vec();
    sets.push("run.epochs=1");
    let first = scratch.train_ok("gssp-sharded", 8, &sets, HANG_GUARD);
    let layout = first.layout();
    resume_trains_on(&first, "gssp-sharded", 8, 2);
    assert_eq!(first.layout(), layout, "the layout changed");
    every_push_reached_both_shards(&first);
}

/// A run of sharded servers on 12 ranks (gssp in 2 groups of 4 workers, each group's
/// server 2 ranks) resumes its final checkpoint on 9 (5 workers): each group's two ranges
/// are joined into the model, the groups' models merged, and each new shard takes its
/// range of it (weights, momentum, snapshots); the run trains on from there and its
/// replicas agree.
#[test]
fn a_sharded_run_resumes_on_another_rank_count() {
    let _lock = job_lock();
    let scratch = Scratch::new();
    let sets = [
        "sync.mode=gssp",
        "sync.gssp.groups=2",
        "sync.shards=2",
        "run.epochs=1",
        "run.snapshot_every_s=0.5",
    ];
    let first = scratch.train_ok("gssp-sharded-12", 12, &sets, HANG_GUARD);
    resume_trains_on(&first, "gssp-sharded-12", 9, 2);
    let layout = first.layout();
    assert_eq!(
        layout["shards"].as_array().map(Vec::len),
        Some(2),
        "{layout}"
    );
    let workers: usize = layout["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .map(|g| g.as_array().map_or(0, Vec::len))
        .sum();
    assert_eq!(workers, 5, "{layout}");
}

/// Sharded servers with periodic checkpoints (gssp in 2 groups of 2 workers at 1x and 3x,
/// each group's server 2 ranks, links emulated at 0.02 Gbit/s so that a push reaches the
/// second shard about 40 ms after the first): the job is killed whole, as a Slurm time
/// limit would, once a worker of the slow group has logged past a checkpoint. In that
/// checkpoint the shards of each group hold the same pushes (each worker's clock and the
/// count), and the run resumed from it trains its epochs with every push applied at both
/// shards of its group and the replicas in agreement.
#[test]
fn a_sharded_run_killed_after_a_periodic_checkpoint_resumes_it() {
    let _lock = job_lock();
    let scratch = Scratch::new();
    let config = scratch.config("base", &base_toml());
    let mut sets = SHARDED.to_vec();
    sets.extend([
        "run.epochs=6",
        "heterogeneity.unit_s=0.02",
        "heterogeneity.slowdown=[1,1,3,3]",
        "heterogeneity.link_gbps=0.02",
        "run.checkpoint_every_s=0.5",
    ]);
    let cut = scratch.out("cut");
    let marker = cut.display().to_string();
    let mut job = spawn_mpirun(8, &scratch.train_args(&config, &sets, &cut), &marker);
    poll_until("rank 6 logging past a checkpoint", HANG_GUARD, || {
        if let Some(code) = job.try_code() {
            panic!("the job ended (exit {code:?}) before it was killed");
        }
        logged_past_checkpoint(&cut, 6)
    });
    job.kill_all();
    assert!(!cut.join("summary.json").exists(), "killed too late");
    let resume = gssp::checkpoint::Resume::open(&cut).expect("the newest checkpoint opens");
    for shards in [[0, 2], [1, 3]] {
        let metas: Vec<_> = shards
            .iter()
            .map(|&r| resume.load(r).expect("a shard's file").meta)
            .collect();
        assert_eq!(
            metas[0].worker_clocks, metas[1].worker_clocks,
            "shards {shards:?}: workers' clocks"
        );
        assert_eq!(metas[0].steps, metas[1].steps, "shards {shards:?}: pushes");
        let clocks: u64 = metas[0].worker_clocks.iter().sum();
        assert_eq!(
            metas[0].steps, clocks,
            "shards {shards:?}: pushes against clocks"
        );
    }
    let saved_at = latest_checkpoint_s(&cut).expect("a committed checkpoint");

    let resumed = spawn_mpirun(8, &resume_args(&cut, &[]), &marker).wait(HANG_GUARD);
    resumed.assert_ok("resume");
    let run = Run { dir: cut, ranks: 8 };
    let summary = run.summary();
    assert!(num(&summary, "epochs") >= 6.0, "stopped early: {summary}");
    assert!(
        num(&summary, "replica_max_error") < 1e-4,
        "an update did not reach every replica: {summary}"
    );
    every_push_reached_both_shards(&run);
    eprintln!(
        "gssp-sharded: killed past the checkpoint at {saved_at:.1} s; resumed to {:.2} epochs, {:.2}%",
        num(&summary, "epochs"),
        100.0 * num(&summary, "final_test_accuracy")
    );
}

/// In a run of 2 groups with 2 shards each (ranks 0 and 2, 1 and 3; workers 4-5 and 6-7),
/// both shards of a group applied every push its workers made.
fn every_push_reached_both_shards(run: &Run) {
    for (shards, workers) in [([0, 2], [4, 5]), ([1, 3], [6, 7])] {
        let applied: Vec<f64> = shards
            .iter()
            .map(|&r| run.rank_csv(r).last("pushes"))
            .collect();
        let iterations: f64 = workers
            .iter()
            .map(|&w| run.rank_csv(w).last("iteration"))
            .sum();
        assert_eq!(applied, [iterations; 2], "shards {shards:?}");
    }
}

/// Resumes `run` on `ranks` ranks until epoch `epochs`; checks that it trained on from the
/// checkpoint (more iterations, accuracy kept within 2 points), that its layout has
/// `ranks` ranks, and that its replicas agree.
fn resume_trains_on(run: &Run, label: &str, ranks: usize, epochs: usize) {
    let before = run.summary();
    let set = format!("run.epochs={epochs}");
    let job = spawn_mpirun(
        ranks,
        &resume_args(&run.dir, &[&set]),
        &run.dir.display().to_string(),
    )
    .wait(HANG_GUARD);
    job.assert_ok(&format!("{label}: resume on {ranks} ranks"));
    let after = run.summary();
    assert_eq!(
        num(&run.layout(), "world_size"),
        ranks as f64,
        "{label}: not laid out on {ranks} ranks"
    );
    assert!(
        num(&after, "epochs") >= epochs as f64 - 0.01
            && num(&after, "iterations") > num(&before, "iterations"),
        "{label}: did not train on: before {before}\nafter {after}"
    );
    let (a, b) = (
        num(&before, "final_test_accuracy"),
        num(&after, "final_test_accuracy"),
    );
    assert!(
        b >= a - 0.02,
        "{label}: accuracy fell from {a} to {b} after resuming"
    );
    if label.starts_with("gssp") || label == "localsgd" {
        assert!(num(&after, "replica_max_error") < 1e-4, "{label}: {after}");
    }
    eprintln!(
        "{label}: {:.2}% at epoch {:.2} -> {:.2}% at epoch {:.2} on {ranks} ranks",
        100.0 * a,
        num(&before, "epochs"),
        100.0 * b,
        num(&after, "epochs")
    );
}

/// A finished asp run (final checkpoint), for the resume errors.
fn finished_run(scratch: &Scratch, name: &str) -> Run {
    scratch.train_ok(name, 3, &["sync.mode=asp", "run.epochs=0.2"], HANG_GUARD)
}

/// Resumes run directory `dir` on `ranks` ranks, expecting a failure before any training:
/// no rank's log gains a row. Returns what the job printed on stderr.
fn resume_fails(dir: &Path, ranks: usize, sets: &[&str]) -> String {
    let rows = |dir: &Path| (0..8).map(|r| logged_rows(dir, r)).collect::<Vec<_>>();
    let before = rows(dir);
    let job =
        spawn_mpirun(ranks, &resume_args(dir, sets), &dir.display().to_string()).wait(HANG_GUARD);
    assert!(
        matches!(job.code, Some(c) if c != 0),
        "resume of {} should fail, exited {:?}",
        dir.display(),
        job.code
    );
    let after = rows(dir);
    assert!(
        after.iter().zip(&before).all(|(a, b)| a <= b),
        "resume of {} trained before it failed: rows per rank {before:?} -> {after:?}",
        dir.display()
    );
    job.stderr
}

#[test]
fn a_damaged_checkpoint_is_an_error_naming_the_file() {
    let _lock = job_lock();
    let scratch = Scratch::new();
    let run = finished_run(&scratch, "damaged");
    let manifest = latest_manifest(&run.dir);
    let file = manifest.with_file_name("rank-0.safetensors");
    let bytes = std::fs::read(&file).expect("rank 0's file");

    let mut flipped = bytes.clone();
    let at = flipped.len() - 100;
    flipped[at] ^= 0x01;
    std::fs::write(&file, &flipped).expect("corrupt it");
    let err = resume_fails(&run.dir, 3, &[]);
    assert!(
        err.contains(&file.display().to_string()) && err.contains("CRC-32"),
        "a corrupted file is not named:\n{err}"
    );

    std::fs::write(&file, &bytes[..bytes.len() / 2]).expect("truncate it");
    let err = resume_fails(&run.dir, 3, &[]);
    assert!(
        err.contains(&file.display().to_string()) && err.contains("truncated"),
        "a truncated file is not named:\n{err}"
    );

    std::fs::write(&manifest, "{ not json").expect("break the manifest");
    let err = resume_fails(&run.dir, 3, &[]);
    assert!(
        err.contains(&manifest.display().to_string()),
        "a broken manifest is not named:\n{err}"
    );
}

/// A hand-edited manifest whose saved layout lists fewer groups than servers (gssp, 2
/// groups): every rank finds it before anything indexes the layout, and the job stops before
/// training with the manifest and the field named, no rank panicking. The message comes
/// once, without a rank, because every rank failed alike (see `report_fatal` in main.rs).
#[test]
fn a_hand_edited_layout_is_refused_naming_the_manifest_and_the_field() {
    let _lock = job_lock();
    let scratch = Scratch::new();
    let sets = [
        "sync.mode=gssp",
        "sync.gssp.groups=2",
        "sync.gssp.grouping=static",
        "sync.gssp.static_groups=[[2,3],[4,5]]",
        "run.epochs=0.2",
    ];
    let run = scratch.train_ok("hand-edited", 6, &sets, HANG_GUARD);
    let manifest = latest_manifest(&run.dir);
    let text = std::fs::read_to_string(&manifest).expect("the manifest");
    let mut json: serde_json::Value = serde_json::from_str(&text).expect("manifest JSON");
    json["layout"]["groups"]
        .as_array_mut()
        .expect("the saved groups")
        .truncate(1);
    let edited = serde_json::to_string_pretty(&json).expect("JSON");
    std::fs::write(&manifest, edited).expect("edit the manifest");
    let err = resume_fails(&run.dir, 6, &[]);
    let expected = format!(
        "error: {}: layout.groups: 1 group for 2 servers",
        manifest.display()
    );
    assert!(
        err.lines().any(|l| l == expected),
        "not refused by every rank alike as {expected:?}:\n{err}"
    );
    assert!(!err.contains("panicked"), "a rank panicked:\n{err}");
}

/// A resumed worker reads its server's file for its clock (the run directory must be on a
/// file system every node sees): where it cannot, each such rank names itself and the
/// path, and the job ends before training.
#[test]
fn a_rank_that_cannot_read_what_it_needs_names_itself_and_the_path() {
    let _lock = job_lock();
    let scratch = Scratch::new();
    let run = finished_run(&scratch, "unreadable");
    let file = latest_manifest(&run.dir).with_file_name("rank-0.safetensors");
    std::fs::remove_file(&file).expect("remove the server's file");
    let err = resume_fails(&run.dir, 3, &[]);
    let path = file.display().to_string();
    for rank in [1, 2] {
        let line = err
            .lines()
            .find(|l| l.starts_with(&format!("error: rank {rank}: ")))
            .unwrap_or_else(|| panic!("rank {rank} does not name itself:\n{err}"));
        assert!(
            line.contains(&path),
            "rank {rank} does not name {path}:\n{err}"
        );
    }
}

#[test]
fn a_wrong_resume_is_refused_with_the_reason() {
    let _lock = job_lock();
    let scratch = Scratch::new();
    let run = finished_run(&scratch, "wrong");
    // Any rank count the mode can run on resumes; one it cannot is named with both counts.
    let err = resume_fails(&run.dir, 1, &[]);
    assert!(
        err.contains("--resume on 1 ranks")
            && err.contains("taken on 3")
            && err.contains("asp needs server rank 0"),
        "a rank count the mode cannot run on:\n{err}"
    );
    let err = resume_fails(&run.dir, 3, &["model.mlp_hidden=[8]"]);
    assert!(
        err.contains("model.mlp_hidden") && err.contains("run.epochs"),
        "a key that shapes the state:\n{err}"
    );
    let empty = scratch.out("never-ran");
    std::fs::create_dir_all(&empty).expect("an empty run directory");
    let err = resume_fails(&empty, 3, &[]);
    assert!(
        err.contains("no checkpoint") && err.contains(&empty.display().to_string()),
        "a directory without checkpoints:\n{err}"
    );
}
