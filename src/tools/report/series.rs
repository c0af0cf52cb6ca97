//! The figures each plot draws, computed from a run's rows: pure functions, so what a
//! picture shows is unit-tested without drawing it.

use super::read::{Eval, Run};

/// What a worker does in a stretch of time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Compute,
    Push,
    Wait,
}

/// One worker's timeline in a window: `(phase, start_s, end_s)`, clipped to the window.
#[derive(Debug, Clone, PartialEq)]
pub struct Lane {
    pub rank: usize,
    pub group: usize,
    pub spans: Vec<(Phase, f64, f64)>,
}

/// Test accuracy of the last evaluation at or before `t` seconds.
pub fn accuracy_at(evals: &[Eval], t: f64) -> Option<f64> {
    evals
        .iter()
        .rev()
        .find(|e| e.time_s <= t)
        .map(|e| e.test_accuracy)
}

/// The last val perplexity a text run logged by `t` seconds.
pub fn val_perplexity_at(evals: &[Eval], t: f64) -> Option<f64> {
    evals
        .iter()
        .rev()
        .filter(|e| e.time_s <= t)
        .find_map(|e| e.val_perplexity)
}

/// The first time a text run's val perplexity is at or below `p`.
pub fn time_to_val_perplexity(evals: &[Eval], p: f64) -> Option<f64> {
    evals
        .iter()
        .find(|e| e.val_perplexity.is_some_and(|v| v <= p))
        .map(|e| e.time_s)
}

/// Every worker's compute, push and wait spans within `[start, end]` seconds. A row's
/// `time_s` is the end of its iteration, which was compute, then push, then wait.
pub fn timeline(run: &Run, start: f64, end: f64) -> Vec<Lane> {
    let mut lanes = Vec::new();
    for (rank, rows) in run.workers() {
        let mut spans = Vec::new();
        for r in rows {
            let t_wait = r.time_s - r.wait_s;
            let t_push = t_wait - r.comm_s;
            let t_compute = t_push - r.compute_s;
            for (phase, a, b) in [
                (Phase::Compute, t_compute, t_push),
                (Phase::Push, t_push, t_wait),
                (Phase::Wait, t_wait, r.time_s),
            ] {
                let (a, b) = (a.max(start), b.min(end));
                if b > a {
                    spans.push((phase, a, b));
                }
            }
        }
        lanes.push(Lane {
            rank,
            group: run.group_of(rank),
            spans,
        });
    }
    lanes.sort_by_key(|l| (l.group, l.rank));
    lanes
}

/// Per worker `(rank, group, wait fraction)`: its logged iterations' wait time over their
/// whole time (compute + push + wait), so it does not depend on `run.log_every`.
pub fn wait_fractions(run: &Run) -> Vec<(usize, usize, f64)> {
    let mut out: Vec<_> = run
        .workers()
        .filter(|(_, rows)| !rows.is_empty())
        .map(|(rank, rows)| {
            let wait: f64 = rows.iter().map(|r| r.wait_s).sum();
            let all: f64 = rows.iter().map(|r| r.compute_s + r.comm_s + r.wait_s).sum();
            (
                rank,
                run.group_of(rank),
                if all > 0.0 { wait / all } else { 0.0 },
            )
        })
        .collect();
    out.sort_by_key(|&(r, g, _)| (g, r));
    out
}

/// Per group `(group, [(time_s, ratio)])`: the upload ratio of every logged exchange.
/// Empty when the run has no exchanges with a ratio (not gssp, or dense).
pub fn ratios(run: &Run) -> Vec<(usize, Vec<(f64, f64)>)> {
    run.servers()
        .map(|(rank, rows)| {
            let pts: Vec<(f64, f64)> = rows
                .iter()
                .filter(|p| p.ratio > 0.0)
                .map(|p| (p.time_s, p.ratio))
                .collect();
            (run.group_of(rank), pts)
        })
        .filter(|(_, pts)| !pts.is_empty())
        .collect()
}

/// Each worker's batch over the run as steps, `(rank, [(time_s, batch)])`: its first row,
/// both sides of each change and its last row; empty unless some worker's batch differs
/// from the others' or changes (batches in proportion to speed).
pub fn batches(run: &Run) -> Vec<(usize, Vec<(f64, f64)>)> {
    let lines: Vec<(usize, Vec<(f64, f64)>)> = run
        .workers()
        .map(|(rank, rows)| {
            let mut pts: Vec<(f64, f64)> = Vec::new();
            for (i, r) in rows.iter().enumerate().filter(|(_, r)| r.batch > 0) {
                let b = r.batch as f64;
                match pts.last().map(|p| p.1) {
                    None => pts.push((r.time_s, b)),
                    Some(was) if was != b => pts.extend([(r.time_s, was), (r.time_s, b)]),
                    Some(_) if i + 1 == rows.len() => pts.push((r.time_s, b)),
                    Some(_) => {}
                }
            }
            (rank, pts)
        })
        .filter(|(_, pts)| !pts.is_empty())
        .collect();
    let first = lines.first().and_then(|(_, p)| p.first()).map(|p| p.1);
    let varies = lines
        .iter()
        .flat_map(|(_, p)| p.iter())
        .any(|p| Some(p.1) != first);
    if varies {
        lines
    } else {
        Vec::new()
    }
}

/// `(staleness, share of the pushes)` for staleness 0..=max: from the servers' applied
/// pushes where the run has servers, else from the workers' rows. Empty without rows.
pub fn staleness_shares(run: &Run) -> Vec<(u64, f64)> {
    let mut values: Vec<u64> = run
        .servers()
        .flat_map(|(_, rows)| rows.iter().map(|p| p.staleness))
        .collect();
    if values.is_empty() {
        values = run
            .workers()
            .flat_map(|(_, rows)| rows.iter().map(|r| r.staleness))
            .collect();
    }
    let Some(&max) = values.iter().max() else {
        return Vec::new();
    };
    let mut counts = vec![0u64; max as usize + 1];
    for v in &values {
        counts[*v as usize] += 1;
    }
    let n = values.len() as f64;
    counts
        .into_iter()
        .enumerate()
        .map(|(s, c)| (s as u64, c as f64 / n))
        .collect()
}

/// Bytes each group's workers sent, by group: each worker's mean bytes per logged row
/// times its iterations (its last row's `iteration`), so rows skipped by `run.log_every`
/// count too.
pub fn bytes_per_group(run: &Run) -> Vec<(usize, f64)> {
    let mut per = vec![0.0; run.group_count()];
    for (rank, rows) in run.workers() {
        let Some(last) = rows.last() else { continue };
        let mean = rows.iter().map(|r| r.bytes_sent as f64).sum::<f64>() / rows.len() as f64;
        let g = run.group_of(rank);
        if g >= per.len() {
            per.resize(g + 1, 0.0);
        }
        per[g] += mean * last.iteration as f64;
    }
    per.into_iter().enumerate().collect()
}

/// The run's logged worker time range `(first start, last end)` in seconds.
pub fn worker_time_range(run: &Run) -> Option<(f64, f64)> {
    let mut lo = f64::INFINITY;
    let mut hi = f64::NEG_INFINITY;
    for (_, rows) in run.workers() {
        for r in rows {
            lo = lo.min(r.time_s - r.wait_s - r.comm_s - r.compute_s);
            hi = hi.max(r.time_s);
        }
    }
    (lo <= hi).then_some((lo.max(0.0), hi))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::tools::report::read::{RankLog, RunLayout, RunSummary, ServerPush, WorkerIter};

    /// A gssp run: servers 0 and 1; group 0 = worker 2, group 1 = worker 3.
    pub(crate) fn sample_run() -> Run {
        let w = |time_s, iteration, wait_s, bytes_sent, staleness| WorkerIter {
            time_s,
            iteration,
            compute_s: 0.5,
            wait_s,
            comm_s: 0.1,
            bytes_sent,
            staleness,
            batch: 8,
        };
        let s = |time_s, staleness, ratio| ServerPush {
            time_s,
            staleness,
            ratio,
            ..ServerPush::default()
        };
        Run {
            name: "gssp".into(),
            dir: "runs/gssp".into(),
            summary: RunSummary {
                clock: "wall".into(),
                mode: "gssp".into(),
                model: "lenet5".into(),
                dataset: "mnist".into(),
                workers: 2,
                wall_s: 10.0,
                images_per_s: 100.0,
                final_test_accuracy: 0.9,
                target_accuracy: 0.8,
                time_to_target_s: Some(5.0),
                mean_wait_fraction: Some(0.2),
                bytes_inter_group: Some(1000),
                final_test_perplexity: None,
                final_bleu: None,
            },
            evals: vec![
                Eval {
                    time_s: 2.0,
                    test_accuracy: 0.5,
                    val_perplexity: None,
                },
                Eval {
                    time_s: 5.0,
                    test_accuracy: 0.85,
                    val_perplexity: None,
                },
                Eval {
                    time_s: 10.0,
                    test_accuracy: 0.9,
                    val_perplexity: None,
                },
            ],
            layout: Some(RunLayout {
                servers: vec![0, 1],
                groups: vec![vec![2], vec![3]],
                ..RunLayout::default()
            }),
            ranks: vec![
                (0, RankLog::Server(vec![s(1.0, 0, 0.0), s(2.0, 2, 0.01)])),
                (1, RankLog::Server(vec![s(1.5, 1, 0.0), s(2.5, 2, 0.0)])),
                // Logged every 2nd iteration: iterations 2 and 4.
                (
                    2,
                    RankLog::Worker(vec![w(1.0, 2, 0.4, 100, 0), w(2.0, 4, 0.4, 100, 1)]),
                ),
                (3, RankLog::Worker(vec![w(1.6, 1, 0.0, 300, 0)])),
            ],
            regroups: Vec::new(),
        }
    }

    #[test]
    fn accuracy_at_takes_the_last_evaluation_so_far() {
        let r = sample_run();
        assert_eq!(accuracy_at(&r.evals, 1.0), None);
        assert_eq!(accuracy_at(&r.evals, 5.0), Some(0.85));
        assert_eq!(accuracy_at(&r.evals, 9.9), Some(0.85));
    }

    #[test]
    fn val_perplexity_is_read_at_a_time_and_its_first_crossing_found() {
        let e = |time_s, v| Eval {
            time_s,
            test_accuracy: 0.0,
            val_perplexity: v,
        };
        let evals = [
            e(1.0, Some(90.0)),
            e(2.0, None),
            e(3.0, Some(40.0)),
            e(4.0, Some(45.0)),
        ];
        assert_eq!(val_perplexity_at(&evals, 0.5), None);
        assert_eq!(val_perplexity_at(&evals, 2.5), Some(90.0));
        assert_eq!(val_perplexity_at(&evals, 9.0), Some(45.0));
        assert_eq!(time_to_val_perplexity(&evals, 45.0), Some(3.0));
        assert_eq!(time_to_val_perplexity(&evals, 90.0), Some(1.0));
        assert_eq!(time_to_val_perplexity(&evals, 39.9), None);
    }

    #[test]
    fn timeline_splits_each_iteration_and_clips_to_the_window() {
        let lanes = timeline(&sample_run(), 1.2, 2.0);
        assert_eq!(lanes.len(), 2);
        assert_eq!((lanes[0].rank, lanes[0].group), (2, 0));
        // Worker 2's second iteration ends at 2.0: compute 1.0-1.5, push 1.5-1.6, wait 1.6-2.0.
        let s = &lanes[0].spans;
        assert_eq!(s.len(), 3);
        assert_eq!(s[0].0, Phase::Compute);
        assert!((s[0].1 - 1.2).abs() < 1e-9 && (s[0].2 - 1.5).abs() < 1e-9);
        assert_eq!(s[1].0, Phase::Push);
        assert!((s[2].1 - 1.6).abs() < 1e-9 && (s[2].2 - 2.0).abs() < 1e-9);
        // Worker 3's only iteration ends at 1.6 without waiting: compute 1.0-1.5 clipped.
        let t = &lanes[1].spans;
        assert_eq!(
            t.iter().map(|x| x.0).collect::<Vec<_>>(),
            [Phase::Compute, Phase::Push]
        );
    }

    #[test]
    fn wait_fraction_is_wait_over_the_logged_iterations_time() {
        let f = wait_fractions(&sample_run());
        assert_eq!((f[0].0, f[0].1), (2, 0));
        assert!((f[0].2 - 0.4).abs() < 1e-9, "{f:?}");
        assert_eq!(f[1].2, 0.0);
    }

    #[test]
    fn ratios_keep_only_exchanges() {
        assert_eq!(ratios(&sample_run()), [(0, vec![(2.0, 0.01)])]);
    }

    #[test]
    fn staleness_shares_come_from_the_servers_when_there_are_any() {
        let h = staleness_shares(&sample_run());
        assert_eq!(h, [(0, 0.25), (1, 0.25), (2, 0.5)]);
        let mut single = sample_run();
        single.ranks.retain(|(r, _)| *r >= 2);
        assert_eq!(staleness_shares(&single), [(0, 2.0 / 3.0), (1, 1.0 / 3.0)]);
    }

    #[test]
    fn bytes_per_group_scales_the_logged_rows_to_all_iterations() {
        assert_eq!(bytes_per_group(&sample_run()), [(0, 400.0), (1, 300.0)]);
    }

    #[test]
    fn worker_time_range_spans_first_start_to_last_end() {
        let (a, b) = worker_time_range(&sample_run()).unwrap();
        assert!((a - 0.0).abs() < 1e-9 && (b - 2.0).abs() < 1e-9, "{a} {b}");
    }

    #[test]
    fn batches_are_steps_and_only_where_they_differ() {
        let mut run = sample_run();
        assert!(
            batches(&run).is_empty(),
            "every worker at batch 8 throughout"
        );
        let RankLog::Worker(rows) = &mut run.ranks[2].1 else {
            panic!("rank 2 is a worker in the sample")
        };
        rows[1].batch = 12;
        let (t0, t1) = (rows[0].time_s, rows[1].time_s);
        let lines = batches(&run);
        let two = &lines
            .iter()
            .find(|(r, _)| *r == 2)
            .expect("rank 2's line")
            .1;
        assert_eq!(two[..3], [(t0, 8.0), (t1, 8.0), (t1, 12.0)]);
    }
}
