//! Regrouping during a run (gssp, `sync.gssp.regroup_every_s`): the pure decisions.
//!
//! Each group server times every one of its workers' iterations as it sees them, from the
//! weights it sent to the push that answered them ([`SpeedWindow`]): compute plus emulated or
//! real slowdown plus transfer, without the SSP waits the server itself imposed. At each
//! regroup point the servers pool these windows and [`decide`] decides, the same way on every
//! server:
//!
//! 1. Each worker's speed is the median of its iterations since the last regroup point, so
//!    a slow spell shorter than half the window (a noisy neighbour, an I/O stall) does not
//!    move it; a worker with fewer than [`MIN_SAMPLES`] iterations in the window blocks the
//!    decision (nothing moves).
//! 2. The candidate partition is the one the profile would give:
//!    [`partition_by_speed`](crate::protocol::grouping::partition_by_speed) into as many
//!    groups, then [`balance_equal_speeds`](crate::protocol::grouping::balance_equal_speeds).
//! 3. Hysteresis: the candidate is taken only if it raises the throughput the cost model
//!    predicts ([`CostModel::rate`]: inside a group SSP runs at its slowest worker's pace,
//!    whatever the bound, unless its server saturates) by more than `min_gain` (default
//!    [`MIN_GAIN`]). Noise between equal workers moves nothing; a worker that became 4x
//!    slower in a fast group does move.
//! 4. Even sizes: when the candidate is not faster but more even in size (largest minus
//!    smallest group), the current groups are evened out to its spread by moving workers
//!    one at a time from a largest group to a smallest (`even_out`), and taken if their
//!    predicted throughput stays within the same `min_gain` band (a loss that small counts
//!    as noise too). A worker moved into a group of its own during a long slow spell would
//!    otherwise be stranded there once it recovers: 5/5/5/1 equal workers predict the
//!    throughput of 4/4/4/4, but the lone worker's replica learns the other 15 workers'
//!    updates only through the exchange. Groups already as even as the candidate never
//!    trigger it, so it cannot oscillate.
//! 5. Faster candidate groups are matched to the current servers by largest overlap, so
//!    only the workers that must move do.
//! 6. Persistence ([`Confirmation`]): a regroup happens only when two regroup points in a
//!    row call for one. A short window holds few iterations of a worker, and with random
//!    slow spells their median is now and then a spell's (with spells on a fifth of the
//!    iterations, about 1% of the windows of 16 iterations); a real change shows at the
//!    next point too, an unlucky streak does not.

use serde::{Deserialize, Serialize};

use crate::protocol::costmodel::{groups_for, CostModel};
use crate::protocol::grouping::{persistent_time, spread};

/// Fewest iterations of a worker in a window for its median to count.
pub const MIN_SAMPLES: usize = 3;

pub use crate::config::REGROUP_MIN_GAIN as MIN_GAIN;

/// Iteration times of the workers (slots) of one server since the last regroup point.
#[derive(Debug, Clone, Default)]
pub struct SpeedWindow {
    sent_at: Vec<Option<f64>>,
    samples: Vec<Vec<f64>>,
}

impl SpeedWindow {
    pub fn new(slots: usize) -> Self {
        SpeedWindow {
            sent_at: vec![None; slots],
            samples: vec![Vec::new(); slots],
        }
    }

    /// Weights went out to worker `w` at `t` seconds.
    pub fn sent(&mut self, w: usize, t: f64) {
        self.sent_at[w] = Some(t);
    }

    /// Worker `w`'s push arrived at `t`: one iteration, if its weights were sent in this
    /// window.
    pub fn pushed(&mut self, w: usize, t: f64) {
        if let Some(s) = self.sent_at[w].take() {
            self.samples[w].push((t - s).max(0.0));
        }
    }

    /// Worker `w`'s median iteration and its spread (median absolute deviation), seconds;
    /// NaN for both with fewer than [`MIN_SAMPLES`] iterations.
    pub fn summary(&self, w: usize) -> (f64, f64) {
        let s = &self.samples[w];
        if s.len() < MIN_SAMPLES {
            return (f64::NAN, f64::NAN);
        }
        (persistent_time(s), spread(s))
    }

    /// Iterations of worker `w` in this window.
    pub fn count(&self, w: usize) -> usize {
        self.samples[w].len()
    }

    /// Starts a new window; an iteration under way keeps its start.
    pub fn clear(&mut self) {
        for s in &mut self.samples {
            s.clear();
        }
    }
}

/// One worker changing groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Move {
    pub worker: usize,
    pub from: usize,
    pub to: usize,
}

/// What one regroup point decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// A worker had too few iterations in the window to judge (its index).
    TooFewSamples(usize),
    /// The best partition would not gain enough: nothing moves.
    Keep { rate: f64, candidate_rate: f64 },
    /// A regroup called for at this point only: it waits for the next one to confirm it.
    Unconfirmed {
        rate: f64,
        candidate_rate: f64,
        reason: Reason,
    },
    /// New groups (same group count, matched to the current servers) and who moves.
    Regroup {
        groups: Vec<Vec<usize>>,
        moves: Vec<Move>,
        rate: f64,
        candidate_rate: f64,
        reason: Reason,
    },
}

/// Why a regroup was called for (module docs, items 3 and 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The candidate predicts more than `min_gain` more throughput.
    Faster,
    /// The candidate predicts about the same throughput with more even group sizes.
    EvenSizes,
}

impl Reason {
    /// What a log or `regroups.json` says of it, with the predicted rates before and after.
    pub fn describe(self, rate: f64, candidate_rate: f64) -> String {
        let change = 100.0 * (candidate_rate / rate - 1.0);
        match self {
            Reason::Faster => format!("faster: the best groups gain {change:.1}%"),
            Reason::EvenSizes => {
                format!("even sizes: the best groups are more even, at {change:+.1}% throughput")
            }
        }
    }
}

/// Largest minus smallest group size.
fn size_imbalance(groups: &[Vec<usize>]) -> usize {
    let sizes = groups.iter().map(Vec::len);
    sizes.clone().max().unwrap_or(0) - sizes.min().unwrap_or(0)
}

/// Whether the last regroup point called for a regroup: a [`Decision::Regroup`] passes
/// only when the point before called for one too (persistence, in the module docs). Every server keeps
/// one and feeds it the same pooled decisions, so they agree.
#[derive(Debug, Clone, Default)]
pub struct Confirmation {
    called_for: bool,
}

impl Confirmation {
    pub fn confirm(&mut self, decision: Decision) -> Decision {
        match decision {
            Decision::Regroup {
                rate,
                candidate_rate,
                reason,
                ..
            } if !self.called_for => {
                self.called_for = true;
                Decision::Unconfirmed {
                    rate,
                    candidate_rate,
                    reason,
                }
            }
            // Anything else, a confirmed regroup included, leaves nothing called for.
            other => {
                self.called_for = false;
                other
            }
        }
    }
}

/// The decision at a regroup point (see the module docs). `current` holds worker indices
/// into `times` and `spreads` (each worker in exactly one group, no group empty).
pub fn decide(
    model: &CostModel,
    current: &[Vec<usize>],
    times: &[f64],
    spreads: &[f64],
    min_gain: f64,
) -> Decision {
    if let Some(w) = times.iter().position(|t| !t.is_finite() || *t <= 0.0) {
        return Decision::TooFewSamples(w);
    }
    let rate = model.rate(current, times);
    let candidate = match groups_for(times, spreads, current.len()) {
        Ok(groups) => groups,
        Err(_) => {
            return Decision::Keep {
                rate,
                candidate_rate: rate,
            }
        }
    };
    let candidate_rate = model.rate(&candidate, times);
    let (groups, candidate_rate, reason) = if candidate_rate > rate * (1.0 + min_gain) {
        (
            match_to_current(current, candidate),
            candidate_rate,
            Reason::Faster,
        )
    } else {
        let evened = even_out(current, times, size_imbalance(&candidate));
        let evened_rate = model.rate(&evened, times);
        if size_imbalance(&evened) >= size_imbalance(current)
            || evened_rate < rate * (1.0 - min_gain)
        {
            return Decision::Keep {
                rate,
                candidate_rate,
            };
        }
        (evened, evened_rate, Reason::EvenSizes)
    };
    let mut moves = Vec::new();
    for (to, g) in groups.iter().enumerate() {
        for &w in g {
            if let Some(from) = current.iter().position(|c| c.contains(&w)) {
                if from != to {
                    moves.push(Move {
                        worker: w,
                        from,
                        to,
                    });
                }
            }
        }
    }
    moves.sort_by_key(|m| m.worker);
    Decision::Regroup {
        groups,
        moves,
        rate,
        candidate_rate,
        reason,
    }
}

/// `current` with workers moved one at a time from a largest group to a smallest one until
/// sizes differ by at most `target` (the best partition's own spread of sizes; at least 1,
/// which any sizes can reach). Each move takes, from any largest group, the worker whose
/// time is closest to the receiving group's median, so the fewest workers move and each
/// joins the group nearest its speed. Speed-sorting from scratch, as the best partition
/// does, would reshuffle equal workers by their noise.
fn even_out(current: &[Vec<usize>], times: &[f64], target: usize) -> Vec<Vec<usize>> {
    let mut groups = current.to_vec();
    while size_imbalance(&groups) > target.max(1) {
        let Some(to) = (0..groups.len()).min_by_key(|&g| groups[g].len()) else {
            break;
        };
        let largest = groups.iter().map(Vec::len).max().unwrap_or(0);
        let receiving: Vec<f64> = groups[to].iter().map(|&w| times[w]).collect();
        let pace = persistent_time(&receiving);
        let distance = |w: usize| (times[w] - pace).abs();
        let Some((from, pos)) = (0..groups.len())
            .filter(|&g| groups[g].len() == largest)
            .flat_map(|g| (0..groups[g].len()).map(move |i| (g, i)))
            .min_by(|&(g, i), &(h, j)| distance(groups[g][i]).total_cmp(&distance(groups[h][j])))
        else {
            break;
        };
        let w = groups[from].remove(pos);
        groups[to].push(w);
        groups[to].sort_unstable();
    }
    groups
}

/// `candidate`'s groups reordered so that group i shares as many workers as possible with
/// `current[i]`: greedily, the pair with the largest overlap first (ties by index).
fn match_to_current(current: &[Vec<usize>], candidate: Vec<Vec<usize>>) -> Vec<Vec<usize>> {
    let k = current.len();
    let mut pairs = Vec::with_capacity(k * k);
    for (i, c) in current.iter().enumerate() {
        for (j, g) in candidate.iter().enumerate() {
            let overlap = g.iter().filter(|w| c.contains(w)).count();
            pairs.push((overlap, i, j));
        }
    }
    pairs.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    let mut slot_of: Vec<Option<usize>> = vec![None; k];
    let mut used = vec![false; k];
    for (_, i, j) in pairs {
        if slot_of[i].is_none() && !used[j] {
            slot_of[i] = Some(j);
            used[j] = true;
        }
    }
    let mut candidate: Vec<Option<Vec<usize>>> = candidate.into_iter().map(Some).collect();
    slot_of
        .into_iter()
        .map(|j| j.and_then(|j| candidate[j].take()).unwrap_or_default())
        .collect()
}

/// One regroup point, as written to the run directory's `regroups.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegroupEvent {
    /// Training clock of the meeting, seconds.
    pub time_s: f64,
    /// Whether workers moved.
    pub regrouped: bool,
    /// Why not, when nothing moved.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kept_because: Option<String>,
    /// Why, when workers moved: "faster" or "even sizes".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regrouped_because: Option<String>,
    /// World ranks of the workers, the order of the next two lists.
    pub worker_ranks: Vec<usize>,
    /// Each worker's median seconds per iteration in the window (null: too few).
    pub seconds_per_iteration: Vec<Option<f64>>,
    /// Each worker's iterations in the window.
    pub iterations: Vec<usize>,
    /// Predicted iterations per second of the groups before, and of the best partition.
    pub predicted_rate: f64,
    pub candidate_rate: f64,
    /// The groups after this point (world ranks), moved or not.
    pub groups: Vec<Vec<usize>>,
    /// Who moved (world ranks; groups by index).
    pub moves: Vec<Move>,
}

impl RegroupEvent {
    /// A meeting at `time_s` that pooled these windows (`times` NaN where a worker had too
    /// few iterations), before its decision.
    pub fn pooled(
        time_s: f64,
        worker_ranks: &[usize],
        times: &[f64],
        iterations: Vec<usize>,
    ) -> RegroupEvent {
        RegroupEvent {
            time_s,
            regrouped: false,
            kept_because: None,
            regrouped_because: None,
            worker_ranks: worker_ranks.to_vec(),
            seconds_per_iteration: times.iter().map(|t| t.is_finite().then_some(*t)).collect(),
            iterations,
            predicted_rate: f64::NAN,
            candidate_rate: f64::NAN,
            groups: Vec::new(),
            moves: Vec::new(),
        }
    }

    /// Records `decision` (`Err`: why none could be taken) with `min_gain`, the gain it
    /// needed; returns the new groups (worker slots) and who moves when it regroups.
    pub fn record(
        &mut self,
        decision: Result<Decision, String>,
        min_gain: f64,
    ) -> Option<(Vec<Vec<usize>>, Vec<Move>)> {
        let rates = |e: &mut RegroupEvent, rate: f64, candidate_rate: f64| {
            e.predicted_rate = rate;
            e.candidate_rate = candidate_rate;
        };
        match decision {
            Err(why) => self.kept_because = Some(why),
            Ok(Decision::TooFewSamples(w)) => {
                let rank = self.worker_ranks.get(w).copied().unwrap_or(w);
                self.kept_because = Some(format!(
                    "worker rank {rank} had fewer than {MIN_SAMPLES} iterations in the window"
                ));
            }
            Ok(Decision::Keep {
                rate,
                candidate_rate,
            }) => {
                rates(self, rate, candidate_rate);
                self.kept_because = Some(format!(
                    "the best groups would gain {:.1}%, not more than {:.0}%",
                    100.0 * (candidate_rate / rate - 1.0),
                    100.0 * min_gain
                ));
            }
            Ok(Decision::Unconfirmed {
                rate,
                candidate_rate,
                reason,
            }) => {
                rates(self, rate, candidate_rate);
                self.kept_because = Some(format!(
                    "{}; waiting for the next point to confirm it",
                    reason.describe(rate, candidate_rate)
                ));
            }
            Ok(Decision::Regroup {
                groups,
                moves,
                rate,
                candidate_rate,
                reason,
            }) => {
                rates(self, rate, candidate_rate);
                self.regrouped = true;
                self.regrouped_because = Some(reason.describe(rate, candidate_rate));
                return Some((groups, moves));
            }
        }
        None
    }

    /// The groups after the meeting, `groups` in worker slots, and `moves` in slots: both
    /// recorded in world ranks.
    pub fn settle(&mut self, groups: &[Vec<usize>], moves: &[Move]) {
        let rank = |w: usize| self.worker_ranks.get(w).copied().unwrap_or(w);
        self.groups = groups
            .iter()
            .map(|g| g.iter().map(|&w| rank(w)).collect())
            .collect();
        self.moves = moves
            .iter()
            .map(|m| Move {
                worker: rank(m.worker),
                ..*m
            })
            .collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_meeting_records_its_decision_and_the_groups_in_world_ranks() {
        let ranks = [10, 11, 12, 13];
        let times = [0.1, f64::NAN, 0.3, 0.4];
        let mut e = RegroupEvent::pooled(2.5, &ranks, &times, vec![5, 1, 7, 8]);
        assert_eq!(
            e.seconds_per_iteration,
            [Some(0.1), None, Some(0.3), Some(0.4)]
        );
        assert_eq!(e.record(Ok(Decision::TooFewSamples(1)), 0.1), None);
        assert_eq!(
            e.kept_because.as_deref(),
            Some("worker rank 11 had fewer than 3 iterations in the window")
        );
        let mut e = RegroupEvent::pooled(2.5, &ranks, &times, vec![5, 5, 7, 8]);
        let keep = Decision::Keep {
            rate: 10.0,
            candidate_rate: 10.5,
        };
        assert_eq!(e.record(Ok(keep), 0.1), None);
        assert_eq!(
            e.kept_because.as_deref(),
            Some("the best groups would gain 5.0%, not more than 10%")
        );
        let moves = vec![Move {
            worker: 1,
            from: 0,
            to: 1,
        }];
        let regroup = Decision::Regroup {
            groups: vec![vec![0], vec![1, 2, 3]],
            moves: moves.clone(),
            rate: 10.0,
            candidate_rate: 12.0,
            reason: Reason::Faster,
        };
        let mut e = RegroupEvent::pooled(2.5, &ranks, &times, vec![5, 5, 7, 8]);
        let (groups, moved) = e.record(Ok(regroup), 0.1).expect("a regroup");
        assert!(e.regrouped && e.kept_because.is_none());
        e.settle(&groups, &moved);
        assert_eq!(e.groups, [vec![10], vec![11, 12, 13]]);
        assert_eq!(
            e.moves,
            [Move {
                worker: 11,
                from: 0,
                to: 1
            }]
        );
        let mut e = RegroupEvent::pooled(2.5, &ranks, &times, vec![5, 5, 7, 8]);
        assert_eq!(
            e.record(Err("worker rank 12 is still moving".into()), 0.1),
            None
        );
        assert_eq!(
            e.kept_because.as_deref(),
            Some("worker rank 12 is still moving")
        );
    }

    /// LeNet-5's size on one node: no server comes near saturation in these cases.
    fn model() -> CostModel {
        CostModel {
            params: 61_706,
            latency_s: 1e-6,
            bytes_per_s: 10e9,
            apply_s_per_param: 0.55e-9,
            exchange_bytes: 4.0 * 61_706.0,
            push_bytes: 4.0 * 61_706.0,
            reply_bytes: 4.0 * 61_706.0,
            exchange_every: 8,
            local_steps: (1, false),
        }
    }

    #[test]
    fn window_times_iterations_from_send_to_push() {
        let mut w = SpeedWindow::new(2);
        w.pushed(0, 1.0); // nothing sent: no sample
        for k in 0..4 {
            let t = k as f64;
            w.sent(0, t);
            w.pushed(0, t + if k == 2 { 0.9 } else { 0.1 });
        }
        let (median, spread) = w.summary(0);
        assert!((median - 0.1).abs() < 1e-9 && spread.abs() < 1e-9);
        assert_eq!(w.count(0), 4);
        assert!(w.summary(1).0.is_nan());
        w.sent(1, 5.0);
        w.clear();
        assert_eq!(w.count(0), 0);
        w.pushed(1, 5.5); // the iteration under way at the clear still counts
        assert_eq!(w.count(1), 1);
    }

    #[test]
    fn rate_is_paced_by_each_groups_slowest_worker() {
        let times = [1.0, 1.0, 4.0, 4.0];
        assert_eq!(model().rate(&[vec![0, 1], vec![2, 3]], &times), 2.5);
        assert_eq!(model().rate(&[vec![0, 2], vec![1, 3]], &times), 1.0);
    }

    #[test]
    fn noise_between_equal_workers_moves_nobody() {
        // Eight equal workers, 3% noise in their medians.
        let times = [0.100, 0.103, 0.098, 0.101, 0.102, 0.099, 0.100, 0.097];
        let current = vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]];
        let d = decide(&model(), &current, &times, &[0.002; 8], MIN_GAIN);
        assert!(matches!(d, Decision::Keep { .. }), "{d:?}");
    }

    #[test]
    fn a_worker_slowed_in_a_fast_group_moves_to_the_slow_one() {
        // Four tiers of two; worker 1 (tier 1x) became 4x slower.
        let times = [1.0, 4.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0];
        let current = vec![vec![0, 1], vec![2, 3], vec![4, 5], vec![6, 7]];
        let Decision::Regroup {
            groups,
            moves,
            rate,
            candidate_rate,
            reason,
        } = decide(&model(), &current, &times, &[0.0; 8], MIN_GAIN)
        else {
            panic!("expected a regroup");
        };
        assert_eq!(groups, vec![vec![0], vec![2, 3], vec![4, 5], vec![1, 6, 7]]);
        assert_eq!(
            moves,
            vec![Move {
                worker: 1,
                from: 0,
                to: 3
            }]
        );
        assert!(candidate_rate > rate * 1.2, "{rate} -> {candidate_rate}");
        assert_eq!(reason, Reason::Faster);
    }

    /// A worker moved into a group of its own during a long spell, now as fast as the rest:
    /// the groups are evened out again, moving one worker from each of the larger groups.
    #[test]
    fn a_recovered_worker_alone_in_a_group_is_joined_again() {
        // Sixteen equal workers (3% noise); worker 0 alone, the rest in groups of five.
        let times: Vec<f64> = (0..16)
            .map(|w| 0.1 * (1.0 + 0.03 * ((w * 7 % 5) as f64 - 2.0) / 2.0))
            .collect();
        let current = vec![
            vec![0],
            vec![1, 2, 3, 4, 5],
            vec![6, 7, 8, 9, 10],
            vec![11, 12, 13, 14, 15],
        ];
        let Decision::Regroup {
            groups,
            moves,
            reason,
            ..
        } = decide(&model(), &current, &times, &[0.002; 16], MIN_GAIN)
        else {
            panic!("expected a regroup");
        };
        assert_eq!(reason, Reason::EvenSizes);
        assert!(groups.iter().all(|g| g.len() == 4), "{groups:?}");
        assert!(
            groups[0].contains(&0),
            "worker 0 keeps its server: {groups:?}"
        );
        assert_eq!(moves.len(), 3, "{moves:?}");
        assert!(moves.iter().all(|m| m.to == 0), "{moves:?}");
        // Once even, the same speeds move nobody.
        let d = decide(&model(), &groups, &times, &[0.002; 16], MIN_GAIN);
        assert!(matches!(d, Decision::Keep { .. }), "{d:?}");
    }

    /// Of two equally large groups, the one whose speed matches gives the worker: the fast
    /// pair is evened out from the fast group of four, not from the slow one.
    #[test]
    fn evening_out_moves_workers_between_groups_of_their_speed() {
        let times = [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 4.0, 4.0, 4.0, 4.0, 4.0, 4.0];
        let current = vec![vec![0, 1, 2, 3], vec![6, 7, 8, 9], vec![4, 5], vec![10, 11]];
        let evened = even_out(&current, &times, 1);
        assert_eq!(evened.iter().map(Vec::len).collect::<Vec<_>>(), [3; 4]);
        assert!(evened[2].iter().all(|&w| times[w] == 1.0), "{evened:?}");
        assert!(evened[3].iter().all(|&w| times[w] == 4.0), "{evened:?}");
    }

    /// Uneven groups of different speeds are what they should be: one slow worker stays
    /// alone rather than pacing a group of fast ones.
    #[test]
    fn a_slow_worker_alone_is_not_evened_out() {
        let times = [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 4.0];
        let current = vec![vec![0, 1, 2, 3, 4, 5, 6], vec![7]];
        let d = decide(&model(), &current, &times, &[0.0; 8], MIN_GAIN);
        assert!(matches!(d, Decision::Keep { .. }), "{d:?}");
    }

    /// A regroup passes only when called for at two points in a row: a one-window streak
    /// (a worker of equal ones whose median fell on a spell) moves nobody.
    #[test]
    fn a_regroup_waits_for_the_next_point_to_confirm_it() {
        let current = vec![vec![0, 1], vec![2, 3], vec![4, 5], vec![6, 7]];
        let slowed = [1.0, 4.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0];
        let steady = [1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0];
        let decide = |c: &mut Confirmation, times: &[f64]| {
            c.confirm(decide(&model(), &current, times, &[0.0; 8], MIN_GAIN))
        };
        let mut c = Confirmation::default();
        assert!(matches!(
            decide(&mut c, &slowed),
            Decision::Unconfirmed { .. }
        ));
        assert!(matches!(decide(&mut c, &steady), Decision::Keep { .. }));
        assert!(matches!(
            decide(&mut c, &slowed),
            Decision::Unconfirmed { .. }
        ));
        assert!(matches!(decide(&mut c, &slowed), Decision::Regroup { .. }));
        // Carried out: the next call for one needs confirming again.
        assert!(matches!(
            decide(&mut c, &slowed),
            Decision::Unconfirmed { .. }
        ));
        let mut c = Confirmation::default();
        assert!(matches!(
            decide(&mut c, &slowed),
            Decision::Unconfirmed { .. }
        ));
        assert!(matches!(
            c.confirm(Decision::TooFewSamples(3)),
            Decision::TooFewSamples(3)
        ));
        assert!(matches!(
            decide(&mut c, &slowed),
            Decision::Unconfirmed { .. }
        ));
    }

    #[test]
    fn groups_keep_their_servers_when_speeds_swap() {
        // Groups of two: the fast pair and the slow pair trade speeds entirely. Matching by
        // overlap keeps every worker where it is (the groups just changed speed).
        let times = [4.0, 4.0, 1.0, 1.0];
        let current = vec![vec![0, 1], vec![2, 3]];
        assert!(matches!(
            decide(&model(), &current, &times, &[0.0; 4], MIN_GAIN),
            Decision::Keep { .. }
        ));
    }

    #[test]
    fn too_few_samples_decide_nothing() {
        let current = vec![vec![0], vec![1]];
        assert_eq!(
            decide(
                &model(),
                &current,
                &[1.0, f64::NAN],
                &[0.0, f64::NAN],
                MIN_GAIN
            ),
            Decision::TooFewSamples(1)
        );
    }

    #[test]
    fn matching_minimises_moves() {
        let current = vec![vec![0, 1, 2], vec![3, 4, 5]];
        let candidate = vec![vec![3, 4, 0], vec![1, 2, 5]];
        assert_eq!(
            match_to_current(&current, candidate),
            vec![vec![1, 2, 5], vec![3, 4, 0]]
        );
    }
}
