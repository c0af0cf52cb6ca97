//! Distributed training with `device.kind = "cuda"`: the workers of every mode compute on
//! their GPU (local rank modulo the node's GPUs) and the servers keep their replicas on
//! the host. Where a GPU is present (scripts/gpu-check.sh, which sets `GSSP_REQUIRE_GPU`),
//! each mode trains LeNet-5 on real MNIST under `mpirun` and allreduce's first losses match
//! the CPU's from the same weights and batches; elsewhere (CI) the same job must stop on
//! every rank before any training, exit 2 and say what is missing (read from the run
//! directory, not timed: tests/common/mod.rs).
#![cfg(feature = "cuda")]

mod common;
mod skipped;

use std::time::Duration;

use common::{assert_no_training, base_toml, job_lock, Scratch};

/// Why this node cannot run CUDA, or `None` where it can; with `GSSP_REQUIRE_GPU` set a
/// missing GPU fails the test.
fn gpu_missing(test: &str) -> Option<String> {
    let why = gssp::compute::backend::cuda::device::unavailable();
    if let (Some(why), Some(_)) = (&why, std::env::var_os("GSSP_REQUIRE_GPU")) {
        panic!("{test}: GSSP_REQUIRE_GPU is set but the GPU is not usable: {why}");
    }
    why
}

/// LeNet-5 on 6,000 MNIST images for one epoch.
fn lenet5_toml() -> String {
    base_toml().replace("name = \"mlp\"", "name = \"lenet5\"") + "[sync]\n"
}

const MODES: [(&str, usize, &[&str]); 4] = [
    ("asp", 3, &["sync.mode=asp"]),
    ("gssp", 4, &["sync.mode=gssp", "sync.gssp.groups=2"]),
    ("allreduce", 2, &["sync.mode=allreduce"]),
    (
        "localsgd",
        2,
        &["sync.mode=localsgd", "sync.localsgd.local_steps=2"],
    ),
];

#[test]
fn every_distributed_mode_trains_on_the_gpu_or_stops_every_rank_saying_why() {
    let _lock = job_lock();
    let scratch = Scratch::new();
    let config = scratch.config("lenet5", &lenet5_toml());
    let missing = gpu_missing("mpi_cuda");
    for (mode, ranks, sets) in MODES {
        let mut sets = sets.to_vec();
        sets.extend(["device.kind=cuda", "run.epochs=1.0"]);
        let out = scratch.out(mode);
        let args = scratch.train_args(&config, &sets, &out);
        let job = common::spawn_mpirun(ranks, &args, &out.display().to_string())
            .wait(Duration::from_secs(180));
        match &missing {
            Some(why) => {
                let test =
                    "every_distributed_mode_trains_on_the_gpu_or_stops_every_rank_saying_why";
                skipped::skip(
                    test,
                    &format!("{mode} on the GPU not run ({why}); its refusal checked"),
                );
                assert_eq!(job.code, Some(2), "{mode}: stderr:\n{}", job.stderr);
                assert!(
                    job.stderr.contains("device.kind: \"cuda\" cannot run here")
                        && job.stderr.contains(why.as_str()),
                    "{mode}: the reason is not named:\n{}",
                    job.stderr
                );
                assert_eq!(
                    job.stderr.matches("device.kind").count(),
                    1,
                    "{mode}: one message for the job:\n{}",
                    job.stderr
                );
                assert_no_training(&out, mode);
            }
            None => {
                job.assert_ok(mode);
                let summary = common::Run { dir: out, ranks }.summary();
                let accuracy = common::num(&summary, "final_test_accuracy");
                assert!(
                    accuracy > 0.85,
                    "{mode}: accuracy {accuracy} after one epoch"
                );
            }
        }
    }
}

/// allreduce is deterministic: from the same weights and batches, the GPU workers' first
/// losses are the CPU workers' within float tolerance.
#[test]
fn allreduce_on_the_gpu_follows_the_cpu() {
    let _lock = job_lock();
    if let Some(why) = gpu_missing("allreduce_on_the_gpu_follows_the_cpu") {
        skipped::skip("allreduce_on_the_gpu_follows_the_cpu", &why);
        return;
    }
    let scratch = Scratch::new();
    let config = scratch.config("lenet5", &lenet5_toml());
    let losses = |kind: &str| {
        let sets = [
            "sync.mode=allreduce",
            "run.epochs=0.1",
            &format!("device.kind={kind}"),
        ];
        let run = scratch.train_config_ok(kind, &config, 2, &sets, Duration::from_secs(180));
        run.rank_csv(0).col("loss")[..5].to_vec()
    };
    let (cpu, gpu) = (losses("cpu"), losses("cuda"));
    for (i, (c, g)) in cpu.iter().zip(&gpu).enumerate() {
        assert!(
            (c - g).abs() <= 1e-3 * c.abs().max(1.0),
            "iteration {}: loss {g} on the GPU, {c} on the CPU",
            i + 1
        );
    }
}

/// gssp group servers selecting their sparse exchanges on the GPU
/// (`device.exchange_select = "cuda"`, the peer view mirrored there) while the workers
/// compute on the CPU: where a GPU is present the run trains and loses nothing (every
/// replica is the start plus every group's sent updates); elsewhere every rank stops
/// within seconds, naming the key and what is missing.
#[test]
fn group_servers_select_on_the_gpu_or_stop_every_rank_saying_why() {
    let _lock = job_lock();
    let scratch = Scratch::new();
    let config = scratch.config("lenet5", &lenet5_toml());
    let sets = [
        "sync.mode=gssp",
        "sync.gssp.groups=2",
        "compression.kind=topk",
        "compression.ratio=0.05",
        "device.exchange_select=cuda",
        "run.epochs=1.0",
    ];
    let out = scratch.out("exchange-select");
    let args = scratch.train_args(&config, &sets, &out);
    let job =
        common::spawn_mpirun(4, &args, &out.display().to_string()).wait(Duration::from_secs(180));
    match gpu_missing("group_servers_select_on_the_gpu") {
        Some(why) => {
            let test = "group_servers_select_on_the_gpu";
            skipped::skip(
                test,
                &format!("selection on the GPU not run ({why}); its refusal checked"),
            );
            assert_eq!(job.code, Some(2), "stderr:\n{}", job.stderr);
            assert!(
                job.stderr
                    .contains("device.exchange_select: \"cuda\" cannot run here")
                    && job.stderr.contains(why.as_str()),
                "the key and the reason are not named:\n{}",
                job.stderr
            );
            // The group servers (ranks 0 and 1) are the ranks that need a GPU here.
            let messages = job.stderr.matches("device.exchange_select").count();
            assert!(
                (1..=2).contains(&messages)
                    && !job.stderr.contains("rank 2:")
                    && !job.stderr.contains("rank 3:"),
                "a message from each server that failed, none from the workers:\n{}",
                job.stderr
            );
            assert_no_training(&out, "exchange-select");
        }
        None => {
            job.assert_ok("exchange-select");
            let summary = common::Run { dir: out, ranks: 4 }.summary();
            let accuracy = common::num(&summary, "final_test_accuracy");
            assert!(accuracy > 0.85, "accuracy {accuracy} after one epoch");
            let lost = common::num(&summary, "replica_max_error");
            assert!(lost < 1e-3, "replica error {lost}");
        }
    }
}
