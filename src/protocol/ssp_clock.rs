//! Stale Synchronous Parallel bookkeeping of one (group) server.
//!
//! Worker w's clock c_w counts its pushes the server has applied. After pushing, a worker waits
//! for fresh weights; the server may send them (letting it start iteration c_w + 1) only while
//! c_w - c_min <= s, where c_min is the clock of the slowest worker still training and s the
//! staleness bound. s = 0 is BSP, no bound is ASP. Workers that finished their quota are
//! retired: they never push again, so they must not hold the others back. A server that
//! regroups keeps a slot for every worker of the run; a worker of another group is absent:
//! it neither holds anyone back nor is released, and a worker that joins starts at the
//! clock of the slowest present one, so its old clock neither stalls nor rushes the group.
//!
//! The clocks are counted by value (how many workers train at each clock, how many are
//! present at each) and the waiting workers kept in a list of their own, so a push costs
//! O(1) and a release O(waiting workers), with nothing allocated once the counts span the
//! clocks' spread: the simulated clock (`gssp plan`, `--simulate`) runs this very
//! bookkeeping for 10,000 workers.

use std::collections::VecDeque;

/// How many workers are at each clock from `base` on.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Counts {
    base: u64,
    at: VecDeque<usize>,
}

impl Counts {
    /// Adds one worker at `clock`, or takes one away.
    fn add(&mut self, clock: u64, add: bool) {
        if self.at.is_empty() {
            self.base = clock;
        }
        if clock < self.base {
            for _ in clock..self.base {
                self.at.push_front(0);
            }
            self.base = clock;
        }
        let i = (clock - self.base) as usize;
        if i >= self.at.len() {
            self.at.resize(i + 1, 0);
        }
        match add {
            true => self.at[i] += 1,
            false => self.at[i] = self.at[i].saturating_sub(1),
        }
        while self.at.front() == Some(&0) {
            self.at.pop_front();
            self.base += 1;
        }
        while self.at.back() == Some(&0) {
            self.at.pop_back();
        }
    }

    fn min(&self) -> Option<u64> {
        (!self.at.is_empty()).then_some(self.base)
    }

    fn max(&self) -> Option<u64> {
        (!self.at.is_empty()).then(|| self.base + self.at.len() as u64 - 1)
    }
}

/// SSP clocks of `W` workers with staleness bound `s` (`None`: unbounded, ASP).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SspClock {
    clocks: Vec<u64>,
    waiting: Vec<bool>,
    retired: Vec<bool>,
    absent: Vec<bool>,
    bound: Option<usize>,
    /// Present workers still training, by clock (the minimum is c_min).
    training: Counts,
    /// Present workers, retired or not, by clock (the maximum).
    present: Counts,
    /// The waiting workers, in no order.
    queue: Vec<usize>,
}

impl SspClock {
    /// `workers` workers at clock 0, none waiting.
    pub fn new(workers: usize, bound: Option<usize>) -> Self {
        Self::indexed(vec![0; workers], false, bound)
    }

    /// Clocks restored from a checkpoint: every worker waits for weights, so the first
    /// [`SspClock::release_ready`] lets go only the ones the bound allows.
    pub fn restore(clocks: &[u64], bound: Option<usize>) -> Self {
        Self::indexed(clocks.to_vec(), true, bound)
    }

    /// Present, training workers at `clocks`, all `waiting` or none, their counts built.
    fn indexed(clocks: Vec<u64>, waiting: bool, bound: Option<usize>) -> Self {
        let n = clocks.len();
        let mut c = Self {
            clocks,
            waiting: vec![false; n],
            retired: vec![false; n],
            absent: vec![false; n],
            bound,
            training: Counts::default(),
            present: Counts::default(),
            queue: Vec::with_capacity(n),
        };
        for w in 0..n {
            c.count(w, true);
            if waiting {
                c.set_waiting(w, true);
            }
        }
        c
    }

    /// Counts worker `w` at its clock (as training, unless retired), or takes it out.
    fn count(&mut self, w: usize, add: bool) {
        if self.absent[w] {
            return;
        }
        let clock = self.clocks[w];
        self.present.add(clock, add);
        if !self.retired[w] {
            self.training.add(clock, add);
        }
    }

    /// Marks worker `w` as waiting or not (absent workers wait for nothing).
    fn set_waiting(&mut self, w: usize, on: bool) {
        let on = on && !self.absent[w];
        if self.waiting[w] == on {
            return;
        }
        self.waiting[w] = on;
        match on {
            true => self.queue.push(w),
            false => {
                if let Some(i) = self.queue.iter().position(|&q| q == w) {
                    self.queue.swap_remove(i);
                }
            }
        }
    }

    pub fn bound(&self) -> Option<usize> {
        self.bound
    }

    /// Every worker's clock.
    pub fn clocks(&self) -> &[u64] {
        &self.clocks
    }

    /// Records that worker `w`'s push was applied: advances its clock and marks it as waiting
    /// for weights. Returns the new clock.
    ///
    /// # Panics
    /// If `w` is not a worker index (a bug in the caller's rank mapping).
    pub fn on_push(&mut self, w: usize) -> u64 {
        self.count(w, false);
        self.clocks[w] += 1;
        self.count(w, true);
        self.set_waiting(w, true);
        self.clocks[w]
    }

    /// Appends to `out` (ascending, without clearing it) every waiting worker that may proceed
    /// now, and marks them as no longer waiting. Allocates nothing if `out` has room.
    /// A retired worker that is still waiting is always released: it trains no further.
    pub fn release_ready(&mut self, out: &mut Vec<usize>) {
        let from = out.len();
        let limit = match self.bound {
            None => u64::MAX,
            Some(s) => self.min_clock().saturating_add(s as u64),
        };
        let mut i = 0;
        while i < self.queue.len() {
            let w = self.queue[i];
            if self.retired[w] || self.clocks[w] <= limit {
                self.queue.swap_remove(i);
                self.waiting[w] = false;
                out.push(w);
            } else {
                i += 1;
            }
        }
        out[from..].sort_unstable();
    }

    #[cfg(test)]
    fn clock(&self, w: usize) -> u64 {
        self.clocks[w]
    }

    /// Clock of the slowest present worker still training; if every present worker is
    /// retired, the largest clock (nobody is held back). 0 with no workers.
    pub fn min_clock(&self) -> u64 {
        self.training.min().unwrap_or_else(|| self.max_clock())
    }

    /// Largest clock of any present worker, retired or not.
    pub fn max_clock(&self) -> u64 {
        self.present.max().unwrap_or(0)
    }

    /// Worker `w` now belongs to another group: it holds nobody back and is not released.
    pub fn leave(&mut self, w: usize) {
        self.set_waiting(w, false);
        self.count(w, false);
        self.absent[w] = true;
    }

    /// Worker `w` joins (it is sent the weights now, so it is not waiting), at the clock of
    /// the slowest present worker still training (its own if there is none).
    pub fn join(&mut self, w: usize) {
        self.set_waiting(w, false);
        self.count(w, false);
        if let Some(c) = self.training.min() {
            self.clocks[w] = c;
        }
        self.absent[w] = false;
        self.retired[w] = false;
        self.count(w, true);
    }

    pub fn is_absent(&self, w: usize) -> bool {
        self.absent[w]
    }

    /// `max_clock() - min_clock()`: how far the fastest worker is ahead of the slowest one
    /// still training.
    pub fn spread(&self) -> u64 {
        self.max_clock().saturating_sub(self.min_clock())
    }

    pub fn is_waiting(&self, w: usize) -> bool {
        self.waiting[w]
    }

    /// Worker `w`, released already, waits again at the clock it has (its clock does not
    /// move): a sharded group's worker that asks a shard for its new group waits for that
    /// shard's weights again, as it does at the shard that told it at its push.
    pub fn wait_again(&mut self, w: usize) {
        if !self.absent[w] && !self.retired[w] {
            self.set_waiting(w, true);
        }
    }

    /// Marks worker `w` as finished: it no longer counts towards `min_clock`.
    pub fn retire(&mut self, w: usize) {
        if self.retired[w] {
            return;
        }
        self.count(w, false);
        self.retired[w] = true;
        self.count(w, true);
    }

    pub fn is_retired(&self, w: usize) -> bool {
        self.retired[w]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn release(c: &mut SspClock) -> Vec<usize> {
        let mut out = Vec::new();
        c.release_ready(&mut out);
        out
    }

    #[test]
    fn bound_zero_is_bsp() {
        let mut c = SspClock::new(3, Some(0));
        for round in 1..=3u64 {
            assert_eq!(c.on_push(2), round);
            assert!(release(&mut c).is_empty());
            c.on_push(0);
            assert!(release(&mut c).is_empty());
            assert!(c.is_waiting(0) && c.is_waiting(2) && !c.is_waiting(1));
            c.on_push(1);
            assert_eq!(release(&mut c), vec![0, 1, 2]);
            assert!(!c.is_waiting(0) && !c.is_waiting(1) && !c.is_waiting(2));
            assert_eq!(
                (c.min_clock(), c.max_clock(), c.spread()),
                (round, round, 0)
            );
        }
    }

    #[test]
    fn bound_two_with_a_silent_worker() {
        let mut c = SspClock::new(3, Some(2));
        for clock in 1..=2u64 {
            c.on_push(0);
            c.on_push(1);
            assert_eq!(release(&mut c), vec![0, 1], "clock {clock}");
        }
        c.on_push(0);
        c.on_push(1);
        assert!(release(&mut c).is_empty());
        assert!(c.is_waiting(0) && c.is_waiting(1));
        assert_eq!((c.clock(0), c.min_clock(), c.spread()), (3, 0, 3));
        // The silent worker's first push lets them go.
        c.on_push(2);
        assert_eq!(release(&mut c), vec![0, 1, 2]);
    }

    #[test]
    fn unbounded_releases_at_once() {
        let mut c = SspClock::new(2, None);
        for i in 1..=100u64 {
            assert_eq!(c.on_push(0), i);
            assert_eq!(release(&mut c), vec![0]);
        }
        assert_eq!(c.spread(), 100);
    }

    #[test]
    fn release_appends_without_clearing() {
        let mut c = SspClock::new(2, None);
        c.on_push(1);
        let mut out = Vec::with_capacity(4);
        out.push(7);
        let ptr = out.as_ptr();
        c.release_ready(&mut out);
        assert_eq!(out, vec![7, 1]);
        assert_eq!(ptr, out.as_ptr());
    }

    #[test]
    fn retired_worker_no_longer_holds_others_back() {
        let mut c = SspClock::new(3, Some(1));
        c.on_push(0);
        c.on_push(1);
        assert_eq!(release(&mut c), vec![0, 1]);
        c.on_push(0);
        c.on_push(1);
        assert!(release(&mut c).is_empty()); // clock 2, worker 2 at 0
        c.retire(2);
        assert_eq!(c.min_clock(), 2);
        assert_eq!(release(&mut c), vec![0, 1]);
        // A worker retiring while waiting is released regardless of the bound.
        c.on_push(0);
        c.on_push(0);
        assert!(release(&mut c).is_empty()); // 4 - 2 > 1
        c.retire(0);
        assert_eq!(release(&mut c), vec![0]);
        // All retired: nobody is held back.
        c.retire(1);
        assert_eq!(c.min_clock(), c.max_clock());
        assert_eq!(c.spread(), 0);
    }

    #[test]
    fn absent_workers_hold_nobody_back_and_joiners_start_at_the_slowest() {
        let mut c = SspClock::new(3, Some(0));
        c.leave(2);
        for round in 1..=3u64 {
            c.on_push(0);
            assert!(release(&mut c).is_empty());
            c.on_push(1);
            assert_eq!(release(&mut c), vec![0, 1], "round {round}");
        }
        assert_eq!((c.min_clock(), c.max_clock(), c.spread()), (3, 3, 0));
        assert!(c.is_absent(2));
        // Worker 2 joins at clock 3, so the others wait for its first push, not three.
        c.join(2);
        assert_eq!(c.clock(2), 3);
        c.on_push(0);
        c.on_push(1);
        assert!(release(&mut c).is_empty());
        c.on_push(2);
        assert_eq!(release(&mut c), vec![0, 1, 2]);
        // A worker that leaves while waiting is not released, and no longer holds back.
        c.on_push(0);
        c.on_push(1);
        c.leave(2);
        assert_eq!(release(&mut c), vec![0, 1]);
        assert!(!c.is_waiting(2));
    }

    /// A released worker that waits again keeps its clock and is released by the same
    /// rule as a worker whose push was just applied; one that left does not wait.
    #[test]
    fn a_worker_waiting_again_keeps_its_clock_and_the_bound() {
        let mut c = SspClock::new(3, Some(0));
        for w in 0..3 {
            c.on_push(w);
        }
        assert_eq!(release(&mut c), vec![0, 1, 2]);
        c.on_push(0);
        c.wait_again(1);
        assert_eq!(c.clock(1), 1);
        // Worker 0 is a push ahead of 2 (bound 0): only 1, level with 2, may go.
        assert_eq!(release(&mut c), vec![1]);
        c.leave(2);
        c.wait_again(2);
        assert!(!c.is_waiting(2));
        c.on_push(1);
        assert_eq!(release(&mut c), vec![0, 1]);
    }

    /// Random arrival orders: every release respects the bound, and after each release round
    /// no waiting worker is one that was allowed to go.
    #[test]
    fn randomized_simulation_respects_bound_and_never_stalls() {
        let mut rng = ChaCha8Rng::seed_from_u64(99);
        for case in 0..300 {
            let w = rng.gen_range(1..=6);
            let bound = match rng.gen_range(0..5) {
                0 => None,
                b => Some(b - 1),
            };
            let quota: Vec<u64> = (0..w).map(|_| rng.gen_range(1..=30)).collect();
            let mut c = SspClock::new(w, bound);
            let mut out = Vec::with_capacity(w);
            loop {
                // Workers able to push: not waiting and quota not reached.
                let ready: Vec<usize> = (0..w)
                    .filter(|&i| !c.is_waiting(i) && c.clock(i) < quota[i])
                    .collect();
                if ready.is_empty() {
                    break;
                }
                let pusher = ready[rng.gen_range(0..ready.len())];
                let clock = c.on_push(pusher);
                if clock == quota[pusher] {
                    c.retire(pusher);
                }
                let c_min = c.min_clock();
                out.clear();
                c.release_ready(&mut out);
                for &r in &out {
                    assert!(!c.is_waiting(r));
                    if let (Some(s), false) = (bound, c.is_retired(r)) {
                        assert!(
                            c.clock(r) - c_min <= s as u64,
                            "case {case}: released {r} at {} with c_min {c_min}",
                            c.clock(r)
                        );
                    }
                }
                for i in 0..w {
                    if c.is_waiting(i) {
                        let s = bound.expect("unbounded never leaves anyone waiting");
                        assert!(!c.is_retired(i));
                        assert!(c.clock(i) - c.min_clock() > s as u64, "case {case}");
                    }
                }
            }
            // Everyone reached the quota: no deadlock.
            for (i, &q) in quota.iter().enumerate() {
                assert_eq!(c.clock(i), q, "case {case} worker {i}");
                assert!(!c.is_waiting(i));
            }
        }
    }
}
