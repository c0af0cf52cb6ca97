//! Each worker's pace as its server sees it, for rank 0's progress line: the seconds from
//! the weights a worker was sent to its next push (its compute and its push, without the
//! time it waited for the weights), smoothed, and the slowest worker against its group's
//! median. In gssp each group server sends its slowest worker with its exchanges, and
//! [`slowest_of`] picks the run's from them.
//!
//! Pure bookkeeping, O(1) per push and per answer; the median is taken only when the
//! progress line refreshes and once a second for the peers.

/// Weight of the newest iteration in a worker's smoothed pace.
const EMA: f64 = 0.2;

/// The pace of one server's workers, by worker slot.
#[derive(Debug, Clone)]
pub struct WorkerPace {
    ranks: Vec<usize>,
    /// When each slot was last sent weights (NaN: not since its last push).
    sent_at: Vec<f64>,
    /// Each slot's smoothed seconds from weights to push (NaN: none yet).
    seconds: Vec<f64>,
}

/// The slowest worker and how much slower it is than its group's median.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Slowest {
    pub rank: usize,
    /// Its smoothed seconds per iteration (weights to push).
    pub seconds: f64,
    /// `seconds` over the median of the group's workers.
    pub slowdown: f64,
}

/// The slowest of the servers' slowest workers (the most seconds per iteration), each
/// with its slowdown against its own group's median.
pub fn slowest_of(candidates: impl IntoIterator<Item = Option<Slowest>>) -> Option<Slowest> {
    candidates
        .into_iter()
        .flatten()
        .filter(|s| s.seconds.is_finite())
        .max_by(|a, b| a.seconds.total_cmp(&b.seconds))
}

impl WorkerPace {
    /// Slots `0..ranks.len()`, slot `w` being world rank `ranks[w]`.
    pub fn new(ranks: &[usize]) -> WorkerPace {
        WorkerPace {
            ranks: ranks.to_vec(),
            sent_at: vec![f64::NAN; ranks.len()],
            seconds: vec![f64::NAN; ranks.len()],
        }
    }

    /// Slot `w` was sent weights at `t` seconds.
    pub fn sent(&mut self, w: usize, t: f64) {
        if let Some(s) = self.sent_at.get_mut(w) {
            *s = t;
        }
    }

    /// Slot `w`'s push arrived at `t` seconds.
    pub fn pushed(&mut self, w: usize, t: f64) {
        let (Some(sent), Some(s)) = (self.sent_at.get_mut(w), self.seconds.get_mut(w)) else {
            return;
        };
        let dt = t - *sent;
        *sent = f64::NAN;
        if !(dt.is_finite() && dt >= 0.0) {
            return;
        }
        *s = if s.is_finite() {
            (1.0 - EMA) * *s + EMA * dt
        } else {
            dt
        };
    }

    /// The slowest worker with a measured pace, against the median of those measured;
    /// `None` with fewer than two measured.
    pub fn slowest(&self) -> Option<Slowest> {
        let mut known: Vec<f64> = self
            .seconds
            .iter()
            .copied()
            .filter(|s| s.is_finite())
            .collect();
        if known.len() < 2 {
            return None;
        }
        let median = super::stats::median(&mut known);
        let (w, &seconds) = self
            .seconds
            .iter()
            .enumerate()
            .filter(|(_, s)| s.is_finite())
            .max_by(|a, b| a.1.total_cmp(b.1))?;
        Some(Slowest {
            rank: self.ranks.get(w).copied().unwrap_or(w),
            seconds,
            slowdown: if median > 0.0 { seconds / median } else { 1.0 },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slowest_worker_is_named_against_the_median() {
        let mut p = WorkerPace::new(&[4, 5, 6]);
        assert_eq!(p.slowest(), None);
        for (w, dt) in [(0, 0.1), (1, 0.1), (2, 0.3)] {
            p.sent(w, 1.0);
            p.pushed(w, 1.0 + dt);
        }
        let s = p.slowest().unwrap();
        assert_eq!(s.rank, 6);
        assert!((s.slowdown - 3.0).abs() < 1e-9, "{s:?}");
        // A push without weights sent before it (a resume) does not count.
        p.pushed(0, 9.0);
        assert!((p.slowest().unwrap().slowdown - 3.0).abs() < 1e-9);
    }

    #[test]
    fn the_run_s_slowest_worker_is_the_slowest_of_every_group_s() {
        let fast_group = Slowest {
            rank: 3,
            seconds: 0.2,
            slowdown: 2.0,
        };
        let slow_group = Slowest {
            rank: 7,
            seconds: 0.5,
            slowdown: 1.1,
        };
        // The absolute pace decides, not the slowdown within a group.
        assert_eq!(
            slowest_of([Some(fast_group), None, Some(slow_group)]),
            Some(slow_group)
        );
        assert_eq!(slowest_of([None, Some(fast_group)]), Some(fast_group));
        assert_eq!(slowest_of([None, None]), None);
    }

    #[test]
    fn the_pace_is_smoothed() {
        let mut p = WorkerPace::new(&[2, 3]);
        p.sent(0, 0.0);
        p.pushed(0, 1.0);
        p.sent(0, 1.0);
        p.pushed(0, 3.0);
        p.sent(1, 0.0);
        p.pushed(1, 1.0);
        let s = p.slowest().unwrap();
        assert_eq!(s.rank, 2);
        assert!((s.seconds - 1.2).abs() < 1e-9, "{s:?}");
    }
}
