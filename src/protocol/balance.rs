//! Batches in proportion to speed: load-balanced synchronous training (LB-BSP, Chen et al.,
//! "Semi-Dynamic Load Balancing", SoCC 2020), what users of mixed GPUs do first.
//!
//! The global batch `B` (`optim.batch_size` times the workers) stays fixed; [`cut`] divides
//! it among the workers in proportion to the samples per second each measured, so that every
//! worker finishes its step at about the same moment. Each worker's gradient (the mean over
//! its own batch) is weighted by `b_i / mean`, with `mean = B / W`, before the mode's usual
//! `1 / W` average (the compute step does it, `compute::workload::ComputeStep`), so every
//! sample carries the weight `1 / B`: a balanced synchronous step is one step on the global
//! batch, and the learning rate is that of the equal cut. localsgd averages replicas whose
//! steps were weighted so; a parameter server takes each push at `1 / W` as before.
//!
//! The rate comes from a [`Meter`]: the median seconds per sample of a worker's recent paced
//! iterations, so that a transient straggler's slow spell does not move the cut; a new cut is
//! taken only when it changes some worker's batch by more than the hysteresis
//! ([`worth_recutting`]).

use std::ops::Range;

use crate::telemetry::stats::median;

/// Why no cut could be made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BalanceError {
    #[error("rank {rank} measured {rate} samples/s: a rate must be finite and > 0")]
    BadRate { rank: usize, rate: f64 },
    #[error(
        "rank {rank} measured {rate:.3} samples/s, {slower:.0}x slower than the fastest ({fastest:.3}): its share of the global batch {global} would be 0 samples; drop it from the job or raise optim.batch_size"
    )]
    ZeroShare {
        rank: usize,
        rate: f64,
        fastest: f64,
        slower: f64,
        global: usize,
    },
    #[error("{workers} workers cannot hold the global batch {global} within batches of {floor}..={ceiling}")]
    Bounds {
        workers: usize,
        global: usize,
        floor: usize,
        ceiling: usize,
    },
}

/// The batches of workers that process `rates[i]` samples per second, for a global batch of
/// `global` samples: in proportion to the rates, within `floor..=ceiling` each, summing to
/// `global` exactly (largest remainders round). A worker whose proportional share would
/// round to 0 samples is an error naming its world rank (`ranks[i]`) and its rate, never a
/// silent division.
pub fn cut(
    rates: &[f64],
    ranks: &[usize],
    global: usize,
    (floor, ceiling): (usize, usize),
) -> Result<Vec<usize>, BalanceError> {
    let workers = rates.len();
    if workers == 0 || workers * floor > global || workers * ceiling < global || floor > ceiling {
        return Err(BalanceError::Bounds {
            workers,
            global,
            floor,
            ceiling,
        });
    }
    if let Some((worker, &rate)) = rates
        .iter()
        .enumerate()
        .find(|(_, r)| !(r.is_finite() && **r > 0.0))
    {
        return Err(BalanceError::BadRate {
            rank: ranks.get(worker).copied().unwrap_or(worker),
            rate,
        });
    }
    let total: f64 = rates.iter().sum();
    let fastest = rates.iter().copied().fold(0.0, f64::max);
    if let Some((worker, &rate)) = rates
        .iter()
        .enumerate()
        .find(|(_, r)| global as f64 * **r / total < 0.5)
    {
        return Err(BalanceError::ZeroShare {
            rank: ranks.get(worker).copied().unwrap_or(worker),
            rate,
            fastest,
            slower: fastest / rate,
            global,
        });
    }
    let ideal = water_fill(rates, global as f64, (floor as f64, ceiling as f64));
    Ok(round_to_total(&ideal, global, ceiling))
}

/// Shares of `total` in proportion to `rates`, each held within `low..=high`: a share past
/// a bound is fixed there and the rest is divided again among the others.
fn water_fill(rates: &[f64], total: f64, (low, high): (f64, f64)) -> Vec<f64> {
    let mut fixed: Vec<Option<f64>> = vec![None; rates.len()];
    loop {
        let left = total - fixed.iter().flatten().sum::<f64>();
        let free_rate: f64 = rates
            .iter()
            .zip(&fixed)
            .filter(|(_, f)| f.is_none())
            .map(|(r, _)| r)
            .sum();
        let share = |i: usize| fixed[i].unwrap_or(left * rates[i] / free_rate);
        let over: Vec<usize> = (0..rates.len())
            .filter(|&i| fixed[i].is_none() && share(i) > high)
            .collect();
        let under: Vec<usize> = (0..rates.len())
            .filter(|&i| fixed[i].is_none() && share(i) < low)
            .collect();
        let (pinned, at) = match (over.is_empty(), under.is_empty()) {
            (true, true) => return (0..rates.len()).map(share).collect(),
            (false, _) => (over, high),
            (true, false) => (under, low),
        };
        for i in pinned {
            fixed[i] = Some(at);
        }
    }
}

/// Whole batches from the real-valued `ideal` ones: each rounded down, then the samples
/// left over go one each to the largest remainders (never past `ceiling`).
fn round_to_total(ideal: &[f64], total: usize, ceiling: usize) -> Vec<usize> {
    let mut batches: Vec<usize> = ideal
        .iter()
        .map(|x| (x.floor() as usize).min(ceiling))
        .collect();
    let mut order: Vec<usize> = (0..ideal.len()).collect();
    order.sort_by(|&a, &b| (ideal[b] - ideal[b].floor()).total_cmp(&(ideal[a] - ideal[a].floor())));
    let mut left = total.saturating_sub(batches.iter().sum());
    for &i in order.iter().cycle() {
        if left == 0 {
            break;
        }
        if batches[i] < ceiling {
            batches[i] += 1;
            left -= 1;
        }
    }
    batches
}

/// Whether `next` is worth taking over `now`: some worker's batch changes by more than
/// `hysteresis` times its current one.
pub fn worth_recutting(now: &[usize], next: &[usize], hysteresis: f64) -> bool {
    now.len() != next.len()
        || now
            .iter()
            .zip(next)
            .any(|(&a, &b)| (a as f64 - b as f64).abs() > hysteresis * a as f64)
}

/// Each worker's slice of the global batch: consecutive, in worker order.
pub fn slices(batches: &[usize]) -> Vec<Range<usize>> {
    let mut start = 0;
    batches
        .iter()
        .map(|&b| {
            let r = start..start + b;
            start += b;
            r
        })
        .collect()
}

/// Iterations a [`Meter`] keeps: the recent past, not the whole run.
const METER_WINDOW: usize = 64;

/// One worker's recent seconds per sample (its paced compute over its batch), iteration by
/// iteration; allocated once.
#[derive(Debug, Clone)]
pub struct Meter {
    seconds_per_sample: Vec<f64>,
    next: usize,
    scratch: Vec<f64>,
}

impl Default for Meter {
    fn default() -> Self {
        Meter {
            seconds_per_sample: Vec::with_capacity(METER_WINDOW),
            next: 0,
            scratch: Vec::with_capacity(METER_WINDOW),
        }
    }
}

impl Meter {
    /// Records an iteration that took `compute_s` for `samples` samples.
    pub fn record(&mut self, compute_s: f64, samples: usize) {
        if samples == 0 || !compute_s.is_finite() || compute_s <= 0.0 {
            return;
        }
        let v = compute_s / samples as f64;
        if self.seconds_per_sample.len() < METER_WINDOW {
            self.seconds_per_sample.push(v);
        } else {
            self.seconds_per_sample[self.next] = v;
        }
        self.next = (self.next + 1) % METER_WINDOW;
    }

    /// Iterations recorded since the last [`Meter::clear`] (at most the window).
    pub fn len(&self) -> usize {
        self.seconds_per_sample.len()
    }

    pub fn is_empty(&self) -> bool {
        self.seconds_per_sample.is_empty()
    }

    /// Samples per second: the inverse of the median seconds per sample (`None` before any
    /// iteration).
    pub fn rate(&mut self) -> Option<f64> {
        if self.is_empty() {
            return None;
        }
        self.scratch.clear();
        self.scratch.extend_from_slice(&self.seconds_per_sample);
        Some(1.0 / median(&mut self.scratch))
    }

    /// Forgets the past: the next rate measures what follows.
    pub fn clear(&mut self) {
        self.seconds_per_sample.clear();
        self.next = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_follow_the_rates_and_sum_to_the_global_batch() {
        // Four tiers of speed 1, 1/2, 1/3, 1/4: 48 samples in proportion 12:6:4:3.
        let rates = [1.0, 0.5, 1.0 / 3.0, 0.25];
        let b = cut(&rates, &[], 50, (1, 100)).unwrap();
        assert_eq!(b.iter().sum::<usize>(), 50);
        assert_eq!(b, [24, 12, 8, 6]);
        // Equal rates give equal batches, the remainder to the first largest remainders.
        assert_eq!(
            cut(&[2.0; 3], &[], 10, (1, 10))
                .unwrap()
                .iter()
                .sum::<usize>(),
            10
        );
        let equal = cut(&[2.0; 4], &[], 64, (1, 64)).unwrap();
        assert_eq!(equal, [16; 4]);
    }

    #[test]
    fn bounds_hold_and_the_rest_is_divided_again() {
        // The fast worker would take 90 of 100; the ceiling holds it to 40.
        let b = cut(&[9.0, 0.5, 0.5], &[], 100, (1, 40)).unwrap();
        assert_eq!(b, [40, 30, 30]);
        // The slow workers would take 5 each; the floor lifts them to 10.
        let b = cut(&[18.0, 1.0, 1.0], &[], 100, (10, 100)).unwrap();
        assert_eq!(b, [80, 10, 10]);
        for rates in [[1.0, 2.0, 3.0, 50.0], [0.5, 0.5, 7.0, 7.0]] {
            let b = cut(&rates, &[], 64, (4, 24)).unwrap();
            assert_eq!(b.iter().sum::<usize>(), 64, "{b:?}");
            assert!(b.iter().all(|&x| (4..=24).contains(&x)), "{b:?}");
        }
    }

    #[test]
    fn a_share_that_rounds_to_zero_names_the_worker_and_its_rate() {
        let e = cut(&[100.0, 100.0, 0.1], &[1, 2, 3], 64, (1, 64)).unwrap_err();
        assert!(
            matches!(
                e,
                BalanceError::ZeroShare {
                    rank: 3,
                    global: 64,
                    ..
                }
            ),
            "{e:?}"
        );
        let text = e.to_string();
        assert!(
            text.contains("rank 3") && text.contains("0.100 samples/s"),
            "{text}"
        );
        let e = cut(&[1.0, f64::NAN], &[], 8, (1, 8)).unwrap_err();
        assert!(matches!(e, BalanceError::BadRate { rank: 1, .. }), "{e:?}");
        let e = cut(&[1.0, 0.0], &[5, 6], 8, (1, 8)).unwrap_err();
        assert!(matches!(e, BalanceError::BadRate { rank: 6, .. }), "{e:?}");
        assert!(matches!(
            cut(&[1.0, 1.0], &[], 8, (1, 3)).unwrap_err(),
            BalanceError::Bounds { .. }
        ));
    }

    #[test]
    fn a_small_change_is_not_worth_a_recut() {
        assert!(!worth_recutting(&[20, 20], &[21, 19], 0.1));
        assert!(worth_recutting(&[20, 20], &[24, 16], 0.1));
        assert!(worth_recutting(&[20, 20], &[21, 19], 0.0));
        assert!(!worth_recutting(&[20, 20], &[20, 20], 0.0));
    }

    #[test]
    fn slices_are_consecutive_and_cover_the_global_batch() {
        assert_eq!(slices(&[3, 1, 4]), [0..3, 3..4, 4..8]);
    }

    #[test]
    fn the_meter_takes_the_median_so_a_slow_spell_does_not_move_it() {
        let mut m = Meter::default();
        assert_eq!(m.rate(), None);
        for i in 0..20 {
            // 32 samples in 0.1 s, but every fifth iteration a straggler's 1 s.
            let s = if i % 5 == 4 { 1.0 } else { 0.1 };
            m.record(s, 32);
        }
        assert!((m.rate().unwrap() - 320.0).abs() < 1e-9);
        m.record(f64::NAN, 32);
        m.record(0.1, 0);
        assert_eq!(m.len(), 20);
        m.clear();
        assert!(m.is_empty());
        // The window keeps the recent past only: old fast iterations fall out.
        for _ in 0..METER_WINDOW {
            m.record(0.1, 10);
        }
        for _ in 0..METER_WINDOW {
            m.record(0.4, 10);
        }
        assert!((m.rate().unwrap() - 25.0).abs() < 1e-9);
    }
}
