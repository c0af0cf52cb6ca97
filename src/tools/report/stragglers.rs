//! The straggler report: per group and over all workers, the worker that computes slowest
//! and the one that waits most, each with the cause the logs show. Pure (rows in, findings
//! out), so the classification is unit-tested on hand-built rows.
//!
//! A worker's compute time is the median of its logged iterations' `compute_s` (a median,
//! so transient slow spells do not make a steady worker look slow); its wait share is its
//! `wait_s` over its iterations' whole time. The causes, checked in this order:
//! - slow compute: its median compute is at least [`SLOW`] x its group's median;
//! - a busy server: its group's server was busy (receiving, applying, exchanging,
//!   answering, meeting) at least [`BUSY`] of its logged time;
//! - a group held at its staleness bound: at least [`HELD`] of its server's pushes found
//!   the group's clock spread at the bound (`layout.json`'s `staleness`; never in asp),
//!   named with the slow worker that holds it where the group has one;
//! - a slow link: posting its pushes (`comm_s`) takes at least [`LINK_SHARE`] of its time,
//!   or [`LINK`] x its group's median and a tenth of its time.
//!
//! Where batches follow speed (`sync.balance`), a worker slow per sample whose smaller batch
//! brings its iterations within [`SLOW`] x the median is named as absorbed ([`absorbed`]),
//! with the time its batch was first cut.

use std::fmt::Write as _;

use super::read::{Run, ServerPush, WorkerIter};
use crate::telemetry::stats;

/// Compute at least this many times the group's median is slow compute.
pub const SLOW: f64 = 1.2;
/// A wait share below this is not worth a cause.
pub const WAIT_NOTABLE: f64 = 0.05;
/// A server busy this share of its time is a busy server.
pub const BUSY: f64 = 0.8;
/// A group whose server found the spread at the bound this share of its pushes is held.
pub const HELD: f64 = 0.5;
/// A worker whose pushes take this share of its time is on a slow link.
pub const LINK_SHARE: f64 = 0.25;
/// Or this many times its group's median push time (and a tenth of its time).
pub const LINK: f64 = 2.0;

/// One worker's figures from its logged iterations.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WorkerStat {
    pub rank: usize,
    pub group: usize,
    /// Median `compute_s` and `comm_s`.
    pub compute_s: f64,
    pub comm_s: f64,
    /// Shares of its iterations' time spent posting pushes and waiting for weights.
    pub comm_share: f64,
    pub wait_share: f64,
}

/// What a group's server saw.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ServerStat {
    /// Share of its logged time it was busy (not waiting for a push).
    pub busy_share: f64,
    /// Share of its pushes at the group's staleness bound; `None` without a bound.
    pub held_share: Option<f64>,
    pub bound: Option<usize>,
}

/// Why a worker is slow or waits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Cause {
    SlowCompute,
    BusyServer {
        busy_share: f64,
    },
    /// Held at the staleness bound `bound`, by the group's slow worker `by` where it has one.
    HeldAtBound {
        bound: usize,
        by: Option<usize>,
    },
    SlowLink,
    /// Nothing worth naming: within the group's spread, or hardly waiting.
    Nothing,
}

/// A named worker: its rank, the figure it is named for (slowdown, or wait share) and why.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Finding {
    pub rank: usize,
    pub value: f64,
    pub cause: Cause,
}

/// The findings of a group (`group: Some(g)`) or of all workers (`None`).
#[derive(Debug, Clone, PartialEq)]
pub struct Scope {
    pub group: Option<usize>,
    pub slowest: Finding,
    pub most_waiting: Finding,
    /// Every worker at least [`SLOW`] x the scope's median compute, slowest first:
    /// `(rank, slowdown)`.
    pub slow: Vec<(usize, f64)>,
}

/// [`stats::median`] of `v`, but 0 for none: a scope or run without workers reads as no
/// compute (every slowdown is then 1, nothing is named), not as NaN.
fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        stats::median(&mut v)
    }
}

/// A worker's figures; `None` without rows.
pub fn worker_stat(rank: usize, group: usize, rows: &[WorkerIter]) -> Option<WorkerStat> {
    if rows.is_empty() {
        return None;
    }
    let all: f64 = rows.iter().map(|r| r.compute_s + r.comm_s + r.wait_s).sum();
    let share = |x: f64| if all > 0.0 { x / all } else { 0.0 };
    Some(WorkerStat {
        rank,
        group,
        compute_s: median(rows.iter().map(|r| r.compute_s).collect()),
        comm_s: median(rows.iter().map(|r| r.comm_s).collect()),
        comm_share: share(rows.iter().map(|r| r.comm_s).sum()),
        wait_share: share(rows.iter().map(|r| r.wait_s).sum()),
    })
}

/// A server's figures, with its group's staleness `bound`.
pub fn server_stat(rows: &[ServerPush], bound: Option<usize>) -> ServerStat {
    let busy: f64 = rows
        .iter()
        .map(|r| r.receive_s + r.apply_s + r.exchange_s + r.send_s + r.meet_s)
        .sum();
    let idle: f64 = rows.iter().map(|r| r.recv_wait_s).sum();
    let held_share = bound.filter(|_| !rows.is_empty()).map(|b| {
        let at = rows.iter().filter(|r| r.clock_spread >= b as u64).count();
        at as f64 / rows.len() as f64
    });
    ServerStat {
        busy_share: if busy + idle > 0.0 {
            busy / (busy + idle)
        } else {
            0.0
        },
        held_share,
        bound,
    }
}

/// Whether `w`'s pushes are slow against `median_comm`, the scope's median push time.
fn slow_link(w: &WorkerStat, median_comm: f64) -> bool {
    w.comm_share >= LINK_SHARE || (w.comm_s >= LINK * median_comm && w.comm_share >= 0.1)
}

/// The findings over `workers` (one group, or all), with `server_of` giving each worker's
/// group server figures.
pub fn scope(
    group: Option<usize>,
    workers: &[WorkerStat],
    server_of: impl Fn(usize) -> ServerStat,
) -> Option<Scope> {
    let med = median(workers.iter().map(|w| w.compute_s).collect());
    let med_comm = median(workers.iter().map(|w| w.comm_s).collect());
    let slowdown = |w: &WorkerStat| if med > 0.0 { w.compute_s / med } else { 1.0 };
    let slowest = workers
        .iter()
        .max_by(|a, b| a.compute_s.total_cmp(&b.compute_s))?;
    let mut slow: Vec<(usize, f64)> = workers
        .iter()
        .map(|w| (w.rank, slowdown(w)))
        .filter(|&(_, x)| x >= SLOW)
        .collect();
    slow.sort_by(|a, b| b.1.total_cmp(&a.1));
    let slow_cause = if slowdown(slowest) >= SLOW {
        Cause::SlowCompute
    } else if slow_link(slowest, med_comm) {
        Cause::SlowLink
    } else {
        Cause::Nothing
    };
    let waiter = workers
        .iter()
        .max_by(|a, b| a.wait_share.total_cmp(&b.wait_share))?;
    // The slow worker of the waiter's own group holds it.
    let holder = workers
        .iter()
        .filter(|w| w.group == waiter.group && w.rank != waiter.rank)
        .filter(|w| slowdown(w) >= SLOW)
        .max_by(|a, b| a.compute_s.total_cmp(&b.compute_s))
        .map(|w| w.rank);
    Some(Scope {
        group,
        slowest: Finding {
            rank: slowest.rank,
            value: slowdown(slowest),
            cause: slow_cause,
        },
        most_waiting: Finding {
            rank: waiter.rank,
            value: waiter.wait_share,
            cause: wait_cause(waiter, server_of(waiter.group), holder, med_comm),
        },
        slow,
    })
}

/// Why `w` waits, given its group's server and slow worker `holder`.
fn wait_cause(w: &WorkerStat, s: ServerStat, holder: Option<usize>, med_comm: f64) -> Cause {
    let held = s.held_share.is_some_and(|h| h >= HELD);
    match s.bound {
        _ if w.wait_share < WAIT_NOTABLE => Cause::Nothing,
        _ if s.busy_share >= BUSY => Cause::BusyServer {
            busy_share: s.busy_share,
        },
        Some(bound) if held && holder.is_some() => Cause::HeldAtBound { bound, by: holder },
        _ if slow_link(w, med_comm) => Cause::SlowLink,
        Some(bound) if held => Cause::HeldAtBound { bound, by: None },
        _ => Cause::Nothing,
    }
}

/// Every group's findings, then all workers'. Empty for a run without worker rows.
pub fn analyse(run: &Run) -> Vec<Scope> {
    let workers: Vec<WorkerStat> = run
        .workers()
        .filter_map(|(r, rows)| worker_stat(r, run.group_of(r), rows))
        .collect();
    let servers: Vec<(usize, ServerStat)> = run
        .servers()
        .map(|(r, rows)| {
            let g = run.group_of(r);
            let bound = run.layout.as_ref().and_then(|l| l.bound(g));
            (g, server_stat(rows, bound))
        })
        .collect();
    let server_of = |g: usize| {
        servers
            .iter()
            .find(|(sg, _)| *sg == g)
            .map(|s| s.1)
            .unwrap_or_default()
    };
    let mut out = Vec::new();
    let groups = run.group_count();
    if groups > 1 {
        for g in 0..groups {
            let members: Vec<WorkerStat> =
                workers.iter().copied().filter(|w| w.group == g).collect();
            out.extend(scope(Some(g), &members, server_of));
        }
    }
    out.extend(scope(None, &workers, server_of));
    out
}

/// A worker slow per sample whose batch balancing cut, so that its iterations no longer
/// hold the others back.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Absorbed {
    pub rank: usize,
    /// Its median compute per sample over all workers' median.
    pub per_sample: f64,
    /// Its median batch, and the median of all workers' median batches.
    pub batch: f64,
    pub median_batch: f64,
    /// When its batch first changed (`None`: it had its batch from the start).
    pub cut_at_s: Option<f64>,
}

/// The workers that balanced batches absorbed: at least [`SLOW`] x the median compute per
/// sample, under it per iteration. Empty for a run whose logs have no batches.
pub fn absorbed(run: &Run) -> Vec<Absorbed> {
    let stats: Vec<(usize, f64, f64, f64, Option<f64>)> = run
        .workers()
        .filter(|(_, rows)| rows.iter().all(|r| r.batch > 0) && !rows.is_empty())
        .map(|(rank, rows)| {
            let per_sample = median(rows.iter().map(|r| r.compute_s / r.batch as f64).collect());
            let per_iteration = median(rows.iter().map(|r| r.compute_s).collect());
            let batch = median(rows.iter().map(|r| r.batch as f64).collect());
            let cut_at_s = rows
                .iter()
                .find(|r| r.batch != rows[0].batch)
                .map(|r| r.time_s);
            (rank, per_sample, per_iteration, batch, cut_at_s)
        })
        .collect();
    let med = |i: usize| {
        median(
            stats
                .iter()
                .map(|s| [s.1, s.2, s.3][i])
                .collect::<Vec<f64>>(),
        )
    };
    let (per_sample, per_iteration, median_batch) = (med(0), med(1), med(2));
    if per_sample <= 0.0 || per_iteration <= 0.0 {
        return Vec::new();
    }
    stats
        .iter()
        .filter(|s| s.1 >= SLOW * per_sample && s.2 < SLOW * per_iteration)
        .map(|&(rank, ps, _, batch, cut_at_s)| Absorbed {
            rank,
            per_sample: ps / per_sample,
            batch,
            median_batch,
            cut_at_s,
        })
        .collect()
}

/// The absorbed workers in a sentence.
pub fn absorbed_markdown(list: &[Absorbed]) -> String {
    let each: Vec<String> = list
        .iter()
        .map(|a| {
            let when = a
                .cut_at_s
                .map_or("from the start".to_string(), |t| format!("cut at {t:.1} s"));
            format!(
                "rank {} ({:.2}x the median compute per sample; batch {:.0} against the median {:.0}, {when})",
                a.rank, a.per_sample, a.batch, a.median_batch
            )
        })
        .collect();
    format!(
        "\nAbsorbed by batches in proportion to speed (slow per sample, not per iteration): {}.\n",
        if each.is_empty() {
            "none".to_string()
        } else {
            each.join(", ")
        }
    )
}

/// A cause in words.
pub fn describe(c: Cause) -> String {
    match c {
        Cause::SlowCompute => "slow compute".into(),
        Cause::BusyServer { busy_share } => {
            format!(
                "a busy server ({:.0}% of its time busy)",
                100.0 * busy_share
            )
        }
        Cause::HeldAtBound { bound, by: Some(r) } => {
            format!("its group held at its staleness bound ({bound}) by rank {r}")
        }
        Cause::HeldAtBound { bound, by: None } => {
            format!("its group held at its staleness bound ({bound})")
        }
        Cause::SlowLink => "a slow link (its pushes take long)".into(),
        Cause::Nothing => "none: within the usual spread".into(),
    }
}

/// The findings as a Markdown table, and the slow ranks of all workers.
pub fn markdown(scopes: &[Scope]) -> String {
    let mut s = String::from(
        "| Scope | Computes slowest | Cause | Waits most | Cause |\n|---|---|---|---|---|\n",
    );
    for sc in scopes {
        let name = sc
            .group
            .map_or_else(|| "all workers".to_string(), |g| format!("group {g}"));
        let _ = writeln!(
            s,
            "| {name} | rank {} ({:.2}x the median) | {} | rank {} ({:.1}% of its time) | {} |",
            sc.slowest.rank,
            sc.slowest.value,
            describe(sc.slowest.cause),
            sc.most_waiting.rank,
            100.0 * sc.most_waiting.value,
            describe(sc.most_waiting.cause),
        );
    }
    if let Some(all) = scopes.iter().find(|sc| sc.group.is_none()) {
        let list: Vec<String> = all
            .slow
            .iter()
            .map(|(r, x)| format!("rank {r} ({x:.2}x)"))
            .collect();
        let _ = writeln!(
            s,
            "\nSlow ranks (median compute at least {SLOW}x the median of all workers): {}.",
            if list.is_empty() {
                "none".to_string()
            } else {
                list.join(", ")
            }
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::report::read::{RankLog, RunLayout};
    use crate::tools::report::series::tests::sample_run;

    fn iters(compute_s: f64, comm_s: f64, wait_s: f64) -> Vec<WorkerIter> {
        (1..=9)
            .map(|i| WorkerIter {
                time_s: i as f64,
                iteration: i,
                // A transient spell in one iteration does not move the median.
                compute_s: if i == 5 { 4.0 * compute_s } else { compute_s },
                comm_s,
                wait_s,
                ..WorkerIter::default()
            })
            .collect()
    }

    fn pushes(recv_wait_s: f64, clock_spread: u64) -> Vec<ServerPush> {
        (1..=10)
            .map(|i| ServerPush {
                time_s: i as f64,
                recv_wait_s,
                apply_s: 0.01,
                clock_spread,
                ..ServerPush::default()
            })
            .collect()
    }

    /// Servers 0 and 1; group 0 = workers 2, 3; group 1 = workers 4, 5 (bound 1).
    fn run(ranks: Vec<(usize, RankLog)>) -> Run {
        let mut r = sample_run();
        r.layout = Some(RunLayout {
            servers: vec![0, 1],
            groups: vec![vec![2, 3], vec![4, 5]],
            mode: "gssp".into(),
            staleness: vec![1, 1],
            profile_cost_s: None,
        });
        r.ranks = ranks;
        r
    }

    #[test]
    fn a_slow_worker_and_the_one_it_holds_at_the_bound_are_named() {
        let r = run(vec![
            (0, RankLog::Server(pushes(0.1, 0))),
            (1, RankLog::Server(pushes(0.1, 1))),
            (2, RankLog::Worker(iters(0.10, 0.001, 0.002))),
            (3, RankLog::Worker(iters(0.11, 0.001, 0.001))),
            (4, RankLog::Worker(iters(0.10, 0.001, 0.2))),
            (5, RankLog::Worker(iters(0.30, 0.001, 0.001))),
        ]);
        let s = analyse(&r);
        assert_eq!(s.len(), 3);
        let g1 = &s[1];
        assert_eq!(g1.group, Some(1));
        assert_eq!((g1.slowest.rank, g1.slowest.cause), (5, Cause::SlowCompute));
        assert!((g1.slowest.value - 1.5).abs() < 1e-9, "{g1:?}");
        assert_eq!(g1.most_waiting.rank, 4);
        assert_eq!(
            g1.most_waiting.cause,
            Cause::HeldAtBound {
                bound: 1,
                by: Some(5)
            }
        );
        // Group 0 is even: nothing to name.
        assert_eq!(s[0].slowest.cause, Cause::Nothing);
        assert_eq!(s[0].most_waiting.cause, Cause::Nothing);
        let all = &s[2];
        assert_eq!((all.group, all.slowest.rank), (None, 5));
        assert_eq!(all.slow.len(), 1);
        assert!((all.slow[0].1 - 0.30 / 0.105).abs() < 1e-9);
        let md = markdown(&s);
        assert!(md.contains("| group 1 | rank 5 (1.50x the median) | slow compute | rank 4"));
        assert!(md.contains("by rank 5"), "{md}");
        assert!(md.contains("Slow ranks (median compute at least 1.2x the median of all workers): rank 5 (2.86x)."), "{md}");
    }

    #[test]
    fn a_busy_server_and_a_slow_link_are_told_apart() {
        let r = run(vec![
            // Server 0 hardly waits for pushes: busy.
            (0, RankLog::Server(pushes(0.001, 0))),
            (1, RankLog::Server(pushes(0.1, 0))),
            (2, RankLog::Worker(iters(0.10, 0.001, 0.05))),
            (3, RankLog::Worker(iters(0.10, 0.001, 0.04))),
            (4, RankLog::Worker(iters(0.10, 0.001, 0.001))),
            // Rank 5's pushes take as long as its compute.
            (5, RankLog::Worker(iters(0.10, 0.1, 0.03))),
        ]);
        let s = analyse(&r);
        assert_eq!(s[0].most_waiting.rank, 2);
        assert!(matches!(s[0].most_waiting.cause, Cause::BusyServer { .. }));
        assert_eq!(s[1].most_waiting.rank, 5);
        assert_eq!(s[1].most_waiting.cause, Cause::SlowLink);
    }

    #[test]
    fn asp_has_no_bound_to_be_held_at() {
        let mut r = run(vec![
            (0, RankLog::Server(pushes(0.1, 5))),
            (2, RankLog::Worker(iters(0.1, 0.001, 0.05))),
            (3, RankLog::Worker(iters(0.3, 0.001, 0.001))),
        ]);
        if let Some(l) = r.layout.as_mut() {
            l.mode = "asp".into();
            l.servers = vec![0];
            l.groups = vec![vec![2, 3]];
        }
        let s = analyse(&r);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].slowest.rank, 3);
        assert_eq!(s[0].most_waiting.cause, Cause::Nothing);
        assert_eq!(server_stat(&pushes(0.1, 5), None).held_share, None);
    }

    #[test]
    fn a_slow_worker_whose_batch_was_cut_is_named_as_absorbed() {
        // Ranks 1-3 compute 8 samples in 0.1 s; rank 4 is 4x slower per sample, but its
        // batch falls from 8 to 2 at 3 s, after which its iterations take 0.1 s too.
        let balanced = |slow: bool| -> Vec<WorkerIter> {
            (1..=20)
                .map(|i| {
                    let cut = slow && i > 3;
                    let batch = if cut { 2 } else { 8 };
                    let per_sample = if slow { 0.05 } else { 0.0125 };
                    WorkerIter {
                        time_s: i as f64,
                        iteration: i,
                        compute_s: per_sample * batch as f64,
                        batch,
                        ..WorkerIter::default()
                    }
                })
                .collect()
        };
        let mut r = run((1..=4)
            .map(|rank| (rank, RankLog::Worker(balanced(rank == 4))))
            .collect());
        let found = absorbed(&r);
        assert_eq!(found.len(), 1, "{found:?}");
        let a = found[0];
        assert_eq!(
            (a.rank, a.batch, a.median_batch, a.cut_at_s),
            (4, 2.0, 8.0, Some(4.0))
        );
        assert!((a.per_sample - 4.0).abs() < 1e-9);
        assert!(absorbed_markdown(&found).contains("rank 4 (4.00x the median compute per sample; batch 2 against the median 8, cut at 4.0 s)"));
        // Without its cut it is plain slow compute, not absorbed.
        r.ranks[3].1 = RankLog::Worker(
            balanced(true)
                .into_iter()
                .map(|w| WorkerIter {
                    batch: 8,
                    compute_s: 0.4,
                    ..w
                })
                .collect(),
        );
        assert!(absorbed(&r).is_empty());
    }
}
