//! The path between nodes: a gssp job with OpenMPI's shared-memory transports excluded, so
//! every message and every one-sided put travels over TCP (on loopback here, as between
//! nodes), loses nothing and trains; and an emulated link holds every message for its
//! transfer.
//!
//! Durations are only checked from below, against what the emulated link must charge: a
//! loaded machine only lengthens them (tests/common/mod.rs: no test depends on the
//! machine's timing).

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
        "sync.gssp.groups=2",
        "sync.gssp.grouping=static",
        "sync.gssp.static_groups=[[2,3],[4,5]]",
        "compression.kind=topk",
        "compression.ratio=0.05",
        "sync.gssp.inter_group_every=4",
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

/// Parameters of the base config's MLP (784-32-10).
const MLP_PARAMS: f64 = (784 * 32 + 32 + 32 * 10 + 10) as f64;

#[test]
fn an_emulated_link_holds_every_message_for_its_transfer() {
    // 0.05 Gbit/s: the MLP's 101.8 kB weights take 16.3 ms, far above what shared memory
    // takes, so each check below fails if that path is not charged to the link.
    let _lock = job_lock();
    let scratch = Scratch::new();
    let rate = 0.05e9 / 8.0;
    let weights_s = 4.0 * MLP_PARAMS / rate;
    let gssp = scratch.train_ok(
        "link-gssp",
        6,
        &[
            "sync.mode=gssp",
            "sync.gssp.groups=2",
            "sync.gssp.grouping=static",
            "sync.gssp.static_groups=[[2,3],[4,5]]",
            "compression.kind=dense",
            "sync.gssp.inter_group_every=1",
            "sync.gssp.staleness=0",
            "heterogeneity.link_gbps=0.05",
            "run.time_budget_s=4",
        ],
        Duration::from_secs(300),
    );
    // A worker's push holds it for its bytes (comm_s); a server's reply holds it for the
    // weights (send_s) and can go out no faster than the link carries them.
    for rank in 2..6 {
        let log = gssp.rank_csv(rank);
        for (comm, sent) in log.col("comm_s").iter().zip(log.col("bytes_sent")) {
            assert!(
                *comm >= 0.95 * sent / rate,
                "rank {rank}: a push of {sent} bytes took {comm} s"
            );
        }
    }
    for server in 0..2 {
        let log = gssp.rank_csv(server);
        // A push answers with 0, 1 or (releasing a group held at its bound) several replies;
        // in all, every push but the two workers' last (answered by the payload-free stop)
        // gets one, and each holds the server for the weights' transfer. (Which rows replied
        // the log does not say: a row that sent nothing can take milliseconds on a loaded
        // machine, so no row is judged on its own.)
        let send = log.col("send_s");
        let replies = log.last("pushes") - 2.0;
        let total: f64 = send.iter().sum();
        assert!(
            total >= 0.95 * replies * weights_s,
            "server {server}: {replies} replies took {total} s in all, not {weights_s} s each"
        );
        let pushes = log.last("pushes");
        let wall = log.last("time_s");
        assert!(
            pushes * weights_s <= 1.05 * wall,
            "server {server}: {pushes} replies of {weights_s} s in {wall} s"
        );
        // Each dense exchange puts the whole model into the one peer's mailbox.
        let exchange = log.col("exchange_s");
        let longest = exchange.iter().cloned().fold(0.0, f64::max);
        assert!(
            longest >= 0.95 * weights_s,
            "server {server}: no exchange took a put's {weights_s} s (longest {longest})"
        );
    }
    let error = num(&gssp.summary(), "replica_max_error");
    assert!(
        error < 1e-5,
        "replica_max_error {error}: an update was lost"
    );

    // allreduce: each rank carries a ring allreduce's share of the gradient, 2 (n-1)/n.
    let ring = scratch.train_ok(
        "link-allreduce",
        2,
        &[
            "sync.mode=allreduce",
            "heterogeneity.link_gbps=0.05",
            "run.time_budget_s=3",
        ],
        Duration::from_secs(300),
    );
    // (The allreduce's call, transfer included, is its wait_s.)
    for rank in 0..2 {
        let call = ring.rank_csv(rank).col("wait_s");
        assert!(!call.is_empty(), "rank {rank}: no iterations");
        assert!(
            call.iter().all(|&c| c >= 0.95 * weights_s),
            "rank {rank}: an allreduce shorter than {weights_s} s: {call:?}"
        );
    }
}

#[test]
fn ranks_on_one_node_share_its_emulated_link() {
    // One server and two workers on one node (`cluster.nodes = 1`): every byte any of them
    // sends leaves through the node's one 0.05 Gbit/s link, so all they sent together takes
    // at least that long. On links of their own, the server's replies and the workers'
    // pushes would go out side by side, twice as much in the same time.
    let _lock = job_lock();
    let scratch = Scratch::new();
    let rate = 0.05e9 / 8.0;
    let (run, job) = scratch.train_ok_env(
        "link-shared",
        3,
        &[
            "sync.mode=asp",
            "heterogeneity.link_gbps=0.05",
            "cluster.nodes=1",
            "run.time_budget_s=3",
        ],
        &[("RUST_LOG", "info")],
        Duration::from_secs(300),
    );
    assert!(
        job.stderr
            .contains("emulated network: 3 ranks on 1 nodes of up to 3 (block)"),
        "no shared-link line:\n{}",
        job.stderr
    );
    // The server answers every push but the workers' last two with the weights.
    let server = run.rank_csv(0);
    let pushes = server.last("pushes");
    assert!(pushes >= 10.0, "only {pushes} pushes");
    let mut sent = (pushes - 2.0) * 4.0 * MLP_PARAMS;
    let mut wall = server.last("time_s");
    for rank in 1..3 {
        let log = run.rank_csv(rank);
        sent += log.col("bytes_sent").iter().sum::<f64>();
        wall = wall.max(log.last("time_s"));
    }
    assert!(
        sent / rate <= 1.05 * wall,
        "{sent} bytes went out in {wall} s, faster than the node's one link carries them ({} s)",
        sent / rate
    );
}
