//! Grouping workers of similar speed.
//!
//! GSSP puts workers whose iteration times are close into the same group so that SSP inside a
//! group rarely waits. Given one measured time per worker, the best split into `G` groups (least
//! total within-group sum of squared deviations) is contiguous in the sorted order of times, so
//! an exact O(G n^2) dynamic programme over the sorted times finds it ([`partition_by_speed`],
//! pure). `runtime::profiling` measures the workers and agrees on the groups with these.

use thiserror::Error;

use crate::telemetry::stats::median;

/// Why a set of measured times cannot be partitioned.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum GroupingError {
    #[error("grouping: the number of groups must be at least 1, got 0")]
    ZeroGroups,
    #[error("grouping: {groups} groups requested but only {workers} workers measured (every group needs at least one worker)")]
    TooManyGroups { groups: usize, workers: usize },
    #[error("grouping: worker {worker} has an invalid time per iteration {value} (must be finite and >= 0)")]
    BadTime { worker: usize, value: f64 },
}

/// Splits workers into `groups` groups of similar speed, exactly minimising the total
/// within-group sum of squared deviations of `times` (seconds per iteration, one per worker).
///
/// Returns worker indices per group, fastest group first, indices ascending within a group.
/// Deterministic: workers with equal times are ordered by index, and among equally good splits
/// the one whose last group starts earliest in the sorted order wins (then the same rule for the
/// groups before it).
pub fn partition_by_speed(times: &[f64], groups: usize) -> Result<Vec<Vec<usize>>, GroupingError> {
    let n = times.len();
    if groups == 0 {
        return Err(GroupingError::ZeroGroups);
    }
    if groups > n {
        return Err(GroupingError::TooManyGroups { groups, workers: n });
    }
    if let Some((worker, &value)) = times
        .iter()
        .enumerate()
        .find(|(_, t)| !t.is_finite() || **t < 0.0)
    {
        return Err(GroupingError::BadTime { worker, value });
    }

    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| times[a].total_cmp(&times[b]).then(a.cmp(&b)));

    // Prefix sums of times centred on their mean: the cost is shift-invariant and centring keeps
    // the `sum sq - sum^2 / len` formula from cancelling catastrophically.
    let mean = times.iter().sum::<f64>() / n as f64;
    let mut s1 = vec![0.0f64; n + 1];
    let mut s2 = vec![0.0f64; n + 1];
    for (j, &w) in order.iter().enumerate() {
        let x = times[w] - mean;
        s1[j + 1] = s1[j] + x;
        s2[j + 1] = s2[j] + x * x;
    }
    // Sum of squared deviations of sorted[i..j], i < j.
    let cost = |i: usize, j: usize| -> f64 {
        let len = (j - i) as f64;
        let a = s1[j] - s1[i];
        (s2[j] - s2[i] - a * a / len).max(0.0)
    };

    // prev[j] = best cost of the first j sorted workers in g groups; back[g][j] = start of the
    // last group in that optimum.
    let mut prev: Vec<f64> = (0..=n)
        .map(|j| if j == 0 { 0.0 } else { cost(0, j) })
        .collect();
    let mut cur = vec![f64::INFINITY; n + 1];
    let mut back = vec![vec![0usize; n + 1]; groups];
    for g in 2..=groups {
        for slot in cur.iter_mut() {
            *slot = f64::INFINITY;
        }
        // j workers in g groups: the last group is sorted[i..j] with g-1 <= i < j.
        for j in g..=n {
            let mut best = f64::INFINITY;
            let mut arg = g - 1;
            for (i, &p) in prev.iter().enumerate().take(j).skip(g - 1) {
                let c = p + cost(i, j);
                if c < best {
                    best = c;
                    arg = i;
                }
            }
            cur[j] = best;
            back[g - 1][j] = arg;
        }
        std::mem::swap(&mut prev, &mut cur);
    }

    let mut bounds = vec![0usize; groups + 1];
    bounds[groups] = n;
    let mut j = n;
    for g in (1..groups).rev() {
        j = back[g][j];
        bounds[g] = j;
    }
    let mut out: Vec<Vec<usize>> = (0..groups)
        .map(|g| order[bounds[g]..bounds[g + 1]].to_vec())
        .collect();
    for grp in &mut out {
        grp.sort_unstable();
    }
    Ok(out)
}

/// Adjacent groups whose mean times lie within this fraction of the faster one count as
/// equally fast: measurement noise, not speed, would decide how their workers split.
pub const EQUAL_SPEED_TOLERANCE: f64 = 0.15;

/// On top of [`EQUAL_SPEED_TOLERANCE`]: groups also count as equally fast while their means
/// differ by less than this many spreads ([`spread`]) of their most erratic worker, whose
/// time the profile could not pin down (on oversubscribed cores, say).
pub const NOISE_SPREADS: f64 = 3.0;

/// A worker's persistent seconds per iteration from its profiled iterations: the median, so
/// that slow spells in fewer than half of them (a noisy neighbour, an I/O stall) do not make
/// it look slow, as they would the mean. NaN for no samples.
pub fn persistent_time(samples: &[f64]) -> f64 {
    median(&mut samples.to_vec())
}

/// How erratic a worker's profiled iterations were: the median absolute deviation from their
/// median (0 when most took the same time, however slow the rest). NaN for no samples.
pub fn spread(samples: &[f64]) -> f64 {
    let m = persistent_time(samples);
    let mut deviations: Vec<f64> = samples.iter().map(|x| (x - m).abs()).collect();
    median(&mut deviations)
}

/// Evens out groups that are equally fast. `groups` come from [`partition_by_speed`] (fastest
/// first); `times` and `spreads` are the workers' [`persistent_time`] and [`spread`]. Each
/// run of adjacent groups whose mean times stay within [`EQUAL_SPEED_TOLERANCE`] of the run's
/// fastest group, or within [`NOISE_SPREADS`] spreads of its most erratic worker, gets its
/// workers dealt anew, in speed order, into sizes that differ by at most one (larger groups
/// first). Groups of clearly different speeds are left as they are.
pub fn balance_equal_speeds(
    times: &[f64],
    spreads: &[f64],
    groups: Vec<Vec<usize>>,
) -> Vec<Vec<usize>> {
    let mean = |g: &Vec<usize>| g.iter().map(|&w| times[w]).sum::<f64>() / g.len().max(1) as f64;
    let noise = |g: &Vec<usize>| g.iter().map(|&w| spreads[w]).fold(0.0, f64::max);
    let mut out = Vec::with_capacity(groups.len());
    let mut start = 0;
    while start < groups.len() {
        let base = mean(&groups[start]);
        let mut erratic = noise(&groups[start]);
        let mut end = start + 1;
        while end < groups.len() {
            let candidate_noise = erratic.max(noise(&groups[end]));
            let limit = base * (1.0 + EQUAL_SPEED_TOLERANCE) + NOISE_SPREADS * candidate_noise;
            if mean(&groups[end]) > limit {
                break;
            }
            erratic = candidate_noise;
            end += 1;
        }
        let mut members: Vec<usize> = groups[start..end].iter().flatten().copied().collect();
        members.sort_by(|&a, &b| times[a].total_cmp(&times[b]).then(a.cmp(&b)));
        let k = end - start;
        let (size, extra) = (members.len() / k, members.len() % k);
        let mut taken = 0;
        for g in 0..k {
            let len = size + usize::from(g < extra);
            let mut grp = members[taken..taken + len].to_vec();
            grp.sort_unstable();
            out.push(grp);
            taken += len;
        }
        start = end;
    }
    out
}

/// A delay shorter than this share of an iteration is jitter: it raises no automatic bound.
pub const AUTO_JITTER: f64 = 0.25;

/// The largest automatic staleness bound: beyond it the stale gradients cost more accuracy
/// than the waits they save, and a delay that long is a slow worker for regrouping, not
/// noise.
pub const AUTO_STALENESS_MAX: usize = 8;

/// Each group's SSP bound under `sync.gssp.staleness = "auto"`, from the profile.
///
/// A worker held up for d seconds stalls its group unless the others may run d / t of
/// their own iterations (t seconds each) ahead of it, and the bound is how far ahead they
/// may run. Two delays hold a worker up:
/// - the longest any of the group's workers showed while profiled (its slowest iteration
///   minus its median, `worst[w] - times[w]`), a slow spell;
/// - the release burst: a group released together gets its n replies one after another on
///   its server's link, so the last starts `(n - 1) * reply_s` after the first (`reply_s`,
///   one reply's transfer, from the cost model's network); at bound 0 that lag recurs
///   every round.
///
/// The group gets the larger, counted in its fastest median iterations, less
/// [`AUTO_JITTER`], rounded up, at most [`AUTO_STALENESS_MAX`]:
/// `s_g = ceil(max(max_w (worst_w - t_w), (n_g - 1) reply_s) / min_w t_w - AUTO_JITTER)`.
/// Steady workers on a fast network get 0 (pure BSP inside the group, the freshest
/// gradients); workers with slow spells, or a link slow against their iterations, get a
/// bound that rides the delay out. `groups` hold worker indices into `times` and `worst`.
pub fn auto_staleness(
    times: &[f64],
    worst: &[f64],
    groups: &[Vec<usize>],
    reply_s: f64,
) -> Vec<usize> {
    groups
        .iter()
        .map(|g| {
            let fastest = g.iter().map(|&w| times[w]).fold(f64::INFINITY, f64::min);
            let spell = g
                .iter()
                .map(|&w| (worst[w] - times[w]).max(0.0))
                .fold(0.0, f64::max);
            let burst = g.len().saturating_sub(1) as f64 * reply_s.max(0.0);
            let delay = spell.max(burst);
            if fastest.is_nan() || fastest <= 0.0 || !delay.is_finite() {
                return AUTO_STALENESS_MAX;
            }
            let iterations = (delay / fastest - AUTO_JITTER).ceil();
            (iterations.max(0.0) as usize).min(AUTO_STALENESS_MAX)
        })
        .collect()
}

/// Dynamic local updates (Liu et al. 2024): each worker's local steps per push in
/// proportion to its speed, `max(1, round(steps * fastest / t_w))` for seconds per iteration
/// `t_w`, so that every worker pushes at about the fastest one's rhythm of `steps`
/// iterations. A time that is not a positive number gets `steps` (nothing is known of it).
pub fn dynamic_local_steps(steps: usize, times: &[f64]) -> Vec<usize> {
    let known = |t: f64| t.is_finite() && t > 0.0;
    let fastest = times
        .iter()
        .copied()
        .filter(|&t| known(t))
        .fold(f64::INFINITY, f64::min);
    times
        .iter()
        .map(|&t| match known(t) {
            true => ((steps as f64 * fastest / t).round() as usize).max(1),
            false => steps,
        })
        .collect()
}

/// gssp's local steps per push of each of `workers` (world ranks, the layout's order):
/// `steps` each, or with `dynamic` in proportion to speed ([`dynamic_local_steps`]) from
/// `times`, the seconds per iteration profiled for the world ranks `profiled`. A worker
/// without a profiled time gets `steps`.
pub fn local_steps_per_worker(
    (steps, dynamic): (usize, bool),
    profiled: &[usize],
    times: Option<&[f64]>,
    workers: &[usize],
) -> Vec<usize> {
    let by_profile = match times {
        Some(t) if dynamic => dynamic_local_steps(steps, t),
        _ => Vec::new(),
    };
    workers
        .iter()
        .map(|r| {
            let i = profiled.iter().position(|p| p == r);
            i.and_then(|i| by_profile.get(i)).copied().unwrap_or(steps)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_steps_follow_each_worker_into_its_group() {
        // Ranks 2..=5 profiled at 1, 2, 4 and 1 s; grouped as [[5, 2], [3], [4]].
        let profiled = [2, 3, 4, 5];
        let times = [1.0, 2.0, 4.0, 1.0];
        let grouped = [5, 2, 3, 4];
        let each =
            |dynamic| local_steps_per_worker((8, dynamic), &profiled, Some(&times), &grouped);
        assert_eq!(each(true), [8, 8, 4, 2]);
        assert_eq!(each(false), [8, 8, 8, 8]);
        // Static groups have no profile: every worker takes `steps`.
        assert_eq!(
            local_steps_per_worker((3, true), &profiled, None, &grouped),
            [3; 4]
        );
    }
    use rand::{Rng, SeedableRng};

    #[test]
    fn dynamic_local_steps_follow_speed_with_at_least_one() {
        // The paper's tiers 1x, 2x, 3x, 4x at H = 8, a worker 20x slower, one unknown.
        let times = [0.01, 0.02, 0.03, 0.04, 0.2, f64::NAN];
        assert_eq!(dynamic_local_steps(8, &times), [8, 4, 3, 2, 1, 8]);
        assert_eq!(dynamic_local_steps(1, &[0.01, 0.04]), [1, 1]);
    }
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn auto_staleness_rides_out_the_longest_delay_in_fastest_iterations() {
        // Group 0: steady workers (jitter below a quarter iteration) -> 0.
        // Group 1: one worker once took 0.5 s instead of 0.1 s -> 4 iterations late -> 4.
        // Group 2: medians 0.2 and 0.4; a 0.25 s delay is 1.25 of the fastest's iterations -> 1.
        // Group 3: a delay of 100 iterations is capped.
        let times = [0.1, 0.1, 0.1, 0.1, 0.2, 0.4, 0.01];
        let worst = [0.12, 0.11, 0.5, 0.1, 0.2, 0.65, 1.01];
        let groups = vec![vec![0, 1], vec![2, 3], vec![4, 5], vec![6]];
        assert_eq!(
            auto_staleness(&times, &worst, &groups, 0.0),
            vec![0, 4, 1, AUTO_STALENESS_MAX]
        );
    }

    #[test]
    fn auto_staleness_rides_out_a_release_burst_on_a_slow_link() {
        // Four steady 30 ms workers; each reply takes 4 ms (LeNet-5 at 0.5 Gbit/s): the last
        // of a released group starts 12 ms late, 0.4 iteration -> 1. Steady 120 ms workers
        // lag 0.1 iteration -> 0, as does a fast network; a slow spell longer than the
        // burst decides.
        let steady = [0.03, 0.03, 0.03, 0.03, 0.12, 0.12, 0.12, 0.12];
        let groups = vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]];
        assert_eq!(auto_staleness(&steady, &steady, &groups, 0.004), vec![1, 0]);
        assert_eq!(
            auto_staleness(&steady, &steady, &groups, 2.5e-5),
            vec![0, 0]
        );
        let mut spells = steady;
        spells[1] = 0.15;
        assert_eq!(auto_staleness(&steady, &spells, &groups, 0.004), vec![4, 0]);
        // A worker alone waits for nobody's reply but its own.
        assert_eq!(auto_staleness(&[0.03], &[0.03], &[vec![0]], 0.1), vec![0]);
    }

    #[test]
    fn auto_staleness_rounds_up_past_the_jitter_allowance() {
        // 0.3 of an iteration late: beyond the 0.25 jitter allowance, so one iteration.
        assert_eq!(auto_staleness(&[1.0], &[1.3], &[vec![0]], 0.0), vec![1]);
        // Exactly the allowance: none.
        assert_eq!(auto_staleness(&[1.0], &[1.25], &[vec![0]], 0.0), vec![0]);
        // A worker that was never slower than its median (worst = median): none.
        assert_eq!(
            auto_staleness(&[0.5, 0.5], &[0.5, 0.5], &[vec![0, 1]], 0.0),
            vec![0]
        );
    }

    #[test]
    fn auto_staleness_of_degenerate_profiles_is_the_cap() {
        // A zero-time worker (nothing to count in) or a non-finite sample: the cap, not a panic.
        assert_eq!(
            auto_staleness(&[0.0], &[0.1], &[vec![0]], 0.0),
            vec![AUTO_STALENESS_MAX]
        );
        assert_eq!(
            auto_staleness(&[0.1], &[f64::INFINITY], &[vec![0]], 0.0),
            vec![AUTO_STALENESS_MAX]
        );
    }

    /// Total within-group sum of squared deviations from the group mean; the quantity
    /// [`partition_by_speed`] minimises.
    fn within_group_sse(times: &[f64], groups: &[Vec<usize>]) -> f64 {
        groups
            .iter()
            .filter(|g| !g.is_empty())
            .map(|g| {
                let mean = g.iter().map(|&w| times[w]).sum::<f64>() / g.len() as f64;
                g.iter().map(|&w| (times[w] - mean).powi(2)).sum::<f64>()
            })
            .sum()
    }

    /// Best cost over every split of the sorted order into `g` contiguous non-empty runs.
    fn brute_contiguous(times: &[f64], g: usize) -> f64 {
        let mut sorted = times.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let mut best = f64::INFINITY;
        // Choose g-1 cut points among the n-1 gaps via bitmasks.
        for mask in 0u32..(1u32 << (n - 1)) {
            if mask.count_ones() as usize != g - 1 {
                continue;
            }
            let mut groups = Vec::new();
            let mut start = 0;
            for gap in 0..n - 1 {
                if mask & (1 << gap) != 0 {
                    groups.push((start..=gap).collect::<Vec<_>>());
                    start = gap + 1;
                }
            }
            groups.push((start..n).collect());
            best = best.min(within_group_sse(&sorted, &groups));
        }
        best
    }

    /// Best cost over every assignment of workers to exactly `g` non-empty groups
    /// (set partitions enumerated as restricted growth strings).
    fn brute_assignments(times: &[f64], g: usize) -> f64 {
        fn rec(times: &[f64], g: usize, labels: &mut Vec<usize>, used: usize, best: &mut f64) {
            let n = times.len();
            let i = labels.len();
            if i == n {
                if used == g {
                    let mut groups = vec![Vec::new(); g];
                    for (w, &l) in labels.iter().enumerate() {
                        groups[l].push(w);
                    }
                    *best = best.min(within_group_sse(times, &groups));
                }
                return;
            }
            // Not enough workers left to open the missing groups.
            if g - used > n - i {
                return;
            }
            for l in 0..=used.min(g - 1) {
                labels.push(l);
                rec(times, g, labels, used.max(l + 1), best);
                labels.pop();
            }
        }
        let mut best = f64::INFINITY;
        rec(times, g, &mut Vec::new(), 0, &mut best);
        best
    }

    fn check_shape(groups: &[Vec<usize>], times: &[f64], g: usize) {
        assert_eq!(groups.len(), g);
        let mut all: Vec<usize> = groups.iter().flatten().copied().collect();
        all.sort_unstable();
        assert_eq!(all, (0..times.len()).collect::<Vec<_>>());
        for grp in groups {
            assert!(!grp.is_empty());
            assert!(grp.windows(2).all(|w| w[0] < w[1]));
        }
        // Fastest group first: every time in group a <= every time in group a+1.
        for pair in groups.windows(2) {
            let max_a = pair[0].iter().map(|&w| times[w]).fold(f64::MIN, f64::max);
            let min_b = pair[1].iter().map(|&w| times[w]).fold(f64::MAX, f64::min);
            assert!(max_a <= min_b);
        }
    }

    #[test]
    fn matches_brute_force_on_random_inputs() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for case in 0..200 {
            let n = rng.gen_range(1..=8);
            let g = rng.gen_range(1..=n);
            // Mix of continuous values and a few repeated levels to create ties.
            let times: Vec<f64> = (0..n)
                .map(|_| {
                    if rng.gen_bool(0.3) {
                        rng.gen_range(1..4) as f64 * 0.5
                    } else {
                        rng.gen_range(0.01..5.0)
                    }
                })
                .collect();
            let groups = partition_by_speed(&times, g).unwrap();
            check_shape(&groups, &times, g);
            let got = within_group_sse(&times, &groups);
            let contiguous = brute_contiguous(&times, g);
            let any = brute_assignments(&times, g);
            assert!(
                (got - contiguous).abs() <= 1e-9,
                "case {case}: dp {got} vs contiguous brute {contiguous} for {times:?}, g={g}"
            );
            assert!(
                (got - any).abs() <= 1e-9,
                "case {case}: dp {got} vs assignment brute {any} for {times:?}, g={g}"
            );
        }
    }

    #[test]
    fn obvious_tiers_split_exactly() {
        let times = [3.0, 1.0, 4.0, 2.0, 1.0, 3.0, 2.0, 4.0];
        let groups = partition_by_speed(&times, 4).unwrap();
        assert_eq!(groups, vec![vec![1, 4], vec![3, 6], vec![0, 5], vec![2, 7]]);
    }

    #[test]
    fn one_group_and_one_per_worker() {
        let times = [0.5, 0.1, 0.3];
        assert_eq!(partition_by_speed(&times, 1).unwrap(), vec![vec![0, 1, 2]]);
        assert_eq!(
            partition_by_speed(&times, 3).unwrap(),
            vec![vec![1], vec![2], vec![0]]
        );
    }

    #[test]
    fn all_equal_times_are_deterministic() {
        let times = [1.0; 6];
        let a = partition_by_speed(&times, 3).unwrap();
        let b = partition_by_speed(&times, 3).unwrap();
        assert_eq!(a, b);
        check_shape(&a, &times, 3);
    }

    #[test]
    fn rejects_bad_inputs() {
        assert_eq!(
            partition_by_speed(&[1.0, 2.0], 0),
            Err(GroupingError::ZeroGroups)
        );
        assert_eq!(
            partition_by_speed(&[1.0, 2.0], 3),
            Err(GroupingError::TooManyGroups {
                groups: 3,
                workers: 2
            })
        );
        assert_eq!(
            partition_by_speed(&[], 1),
            Err(GroupingError::TooManyGroups {
                groups: 1,
                workers: 0
            })
        );
        let err = partition_by_speed(&[1.0, -0.5, 2.0], 2).unwrap_err();
        assert_eq!(
            err,
            GroupingError::BadTime {
                worker: 1,
                value: -0.5
            }
        );
        assert!(err.to_string().contains("worker 1"));
        assert!(err.to_string().contains("-0.5"));
        let err = partition_by_speed(&[1.0, 2.0, f64::NAN], 2).unwrap_err();
        assert!(matches!(err, GroupingError::BadTime { worker: 2, .. }));
        assert!(partition_by_speed(&[f64::INFINITY], 1).is_err());
    }

    #[test]
    fn large_input_is_fast_and_valid() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let times: Vec<f64> = (0..2000).map(|_| rng.gen_range(0.1..2.0)).collect();
        let groups = partition_by_speed(&times, 8).unwrap();
        check_shape(&groups, &times, 8);
    }

    #[test]
    fn persistent_time_ignores_a_minority_of_slow_spells() {
        assert!(persistent_time(&[]).is_nan());
        assert_eq!(persistent_time(&[0.01, 0.05, 0.01, 0.01, 0.05]), 0.01);
        assert_eq!(persistent_time(&[0.04, 0.02]), 0.03);
        // The mean of the same samples would call this worker 1.8x slower.
        let spells = [0.01, 0.01, 0.05, 0.01, 0.01, 0.01, 0.05, 0.01, 0.01];
        assert_eq!(persistent_time(&spells), 0.01);
        assert_eq!(spread(&spells), 0.0);
        assert!((spread(&[1.0, 2.0, 4.0]) - 1.0).abs() < 1e-12);
        assert!(spread(&[]).is_nan());
    }

    #[test]
    fn equal_speeds_are_dealt_evenly_and_tiers_kept() {
        // Eight equal workers with noise: whatever split the partition made, sizes even out.
        let times = [
            0.0101, 0.0100, 0.0102, 0.0099, 0.0100, 0.0108, 0.0101, 0.0100,
        ];
        let lopsided = vec![vec![0, 1, 2, 3, 4, 6, 7], vec![5]];
        let balanced = balance_equal_speeds(&times, &[0.0; 8], lopsided);
        assert_eq!(
            balanced.iter().map(Vec::len).collect::<Vec<_>>(),
            vec![4, 4]
        );
        // The faster half in the first group: 3, 1, 4, 7 (ties by index).
        assert_eq!(balanced[0], vec![1, 3, 4, 7]);
        // Two genuine tiers, more groups than tiers: the partition splits the slow tier by
        // noise, balancing deals it evenly (2, 2, 1), and the fast tier stays whole.
        let times = [1.0, 1.02, 1.01, 1.0, 4.0, 4.1, 4.05, 4.0, 3.98];
        let parts = partition_by_speed(&times, 4).unwrap();
        let balanced = balance_equal_speeds(&times, &[0.0; 9], parts);
        assert_eq!(balanced[0], vec![0, 1, 2, 3], "{balanced:?}");
        let sizes: Vec<usize> = balanced.iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![4, 2, 2, 1]);
        let slow: std::collections::BTreeSet<usize> =
            balanced[1..].iter().flatten().copied().collect();
        assert_eq!(slow, (4..9).collect());
        // Distinct tiers (1x..4x) are untouched.
        let times = [1.0, 2.0, 3.0, 4.0, 1.0, 2.0, 3.0, 4.0];
        let parts = partition_by_speed(&times, 4).unwrap();
        assert_eq!(
            balance_equal_speeds(&times, &[0.0; 8], parts.clone()),
            parts
        );
        // An erratic worker measured slow among equals: its spread says it is noise.
        let times = [
            0.00121, 0.00126, 0.00124, 0.00126, 0.00122, 0.0028, 0.00128, 0.00125,
        ];
        let mut spreads = [0.00002; 8];
        let parts = partition_by_speed(&times, 2).unwrap();
        assert_eq!(parts[1], vec![5]);
        assert_eq!(balance_equal_speeds(&times, &spreads, parts.clone()), parts);
        spreads[5] = 0.0008;
        let balanced = balance_equal_speeds(&times, &spreads, parts);
        assert_eq!(
            balanced.iter().map(Vec::len).collect::<Vec<_>>(),
            vec![4, 4]
        );
        // ... but a spread does not merge clear tiers (1x against 4x, erratic or not).
        let times = [1.0, 1.0, 4.0, 4.0];
        let parts = partition_by_speed(&times, 2).unwrap();
        let spreads = [0.1, 0.1, 0.5, 0.5];
        assert_eq!(balance_equal_speeds(&times, &spreads, parts.clone()), parts);
    }
}
