//! The path between nodes: a gssp job with OpenMPI's shared-memory transports excluded, so
//! every message and every one-sided put travels over TCP (on loopback here, as between
//! nodes), loses nothing and trains.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{job_lock, num, spawn_mpirun_env, Scratch};

/// MCA settings of a TCP-only job: the ob1 point-to-point layer over the tcp and self
/// transports (no vader shared memory, no UCX), TCP allowed on loopback (OpenMPI excludes
/// it by default), and a one-sided component that works over those transports: pt2pt on
/// OpenMPI 4, rdma (over the btl) on OpenMPI 5, which has no pt2pt.
fn tcp_only_env() -> Vec<(&'static str, &'static str)> {
    let info = Command::new("ompi_info")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let osc = if info.contains("MCA osc: pt2pt") {
        "pt2pt"
    } else {
        "rdma"
    };
    vec![
        ("OMPI_MCA_pml", "ob1"),
        ("OMPI_MCA_btl", "tcp,self"),
        ("OMPI_MCA_btl_tcp_if_include", "lo"),
        ("OMPI_MCA_oob_tcp_if_include", "lo"),
        ("OMPI_MCA_osc", osc),
    ]
}

#[test]
fn gssp_over_tcp_only_loses_nothing_and_trains() {
    let _lock = job_lock();
    let scratch = Scratch::new();
    let config = scratch.config("base", &common::base_toml());
    let out = scratch.out("tcp");
    let sets = [
        "sync.mode=gssp",
        "sync.groups=2",
        "sync.grouping=static",
        "sync.static_groups=[[2,3],[4,5]]",
        "compression.kind=topk",
        "compression.ratio=0.05",
        "sync.inter_group_every=4",
        "run.epochs=1",
    ];
    let args = scratch.train_args(&config, &sets, &out);
    let env = tcp_only_env();
    eprintln!("TCP-only MCA settings: {env:?}");
    let job =
        spawn_mpirun_env(6, &args, &out.display().to_string(), &env).wait(Duration::from_secs(300));
    job.assert_ok("tcp");
    let run = common::Run { dir: out, ranks: 6 };
    let s = run.summary();
    let error = num(&s, "replica_max_error");
    assert!(
        error < 1e-5,
        "replica_max_error {error}: an update was lost"
    );
    assert!(
        num(&s, "bytes_inter_group") > 0.0,
        "no inter-group traffic: {s}"
    );
    for rank in 2..6 {
        let loss = run.rank_csv(rank).col("loss");
        let k = (loss.len() / 5).max(1);
        let (first, last) = (
            loss[..k].iter().sum::<f64>() / k as f64,
            loss[loss.len() - k..].iter().sum::<f64>() / k as f64,
        );
        assert!(last < first, "rank {rank}: loss {first:.3} -> {last:.3}");
    }
    let acc = num(&s, "final_test_accuracy");
    assert!(acc > 0.75, "final_test_accuracy {acc}");
}
