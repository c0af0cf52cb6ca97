//! Regrouping during a gssp run, on the group servers: each times its workers
//! ([`SpeedWindow`]); every `sync.gssp.regroup_every_s` the servers meet, pool the windows
//! (`runtime::peers::Meetings::share`), and take the same [`decide`] decision (the pure part, in
//! [`crate::protocol::regroup`]).
//!
//! A group whose members change gets a communicator of its new members: its server tells
//! every worker it had of the group it belongs to from now on (a Regroup message, answering
//! the worker's next push, or at once to a worker already waiting), then forms the new
//! communicator with its new members (`MPI_Comm_create_group`, collective over them alone,
//! so groups that keep their members never pause), moves its link to it, and sends the
//! weights to the workers it took in. Until then it sends no weights and does not stop. A
//! split of the world communicator would do the same only by stopping every rank of the
//! run, the unchanged groups and the idle ranks included.
//!
//! No two servers wait on each other: a server tells its workers before it blocks in the
//! creation, so every worker a new group waits for has been told by its old server, which
//! itself waits only for its own workers' pushes.
//!
//! # Sharded servers (`sync.shards` > 1)
//! Every shard of every group takes part, each with a regrouper of its own. The meeting is
//! held among every server rank at once (`runtime::shard_meetings`), and the decision is
//! taken from the rows of each group's first shard alone, so that every shard reaches the
//! same one. Shard j then tells each worker its new group's shard j and workers, and forms
//! the new group's communicator for shard j (its own tag). A worker told by one shard asks
//! each shard that had already answered its push with weights (a push without payload,
//! [`Regrouper::awaits_telling`]), so that it is told by every shard before it joins; it
//! then joins its new group's communicators in shard order (`runtime::shard_links`). Each
//! shard applied the same pushes of the worker before telling it, so its clock agrees at
//! every shard.

use anyhow::{Context, Result};

use crate::comm::p2p::ServerLink;
use crate::comm::{Collectives, Comm, SubComm};
use crate::protocol::costmodel::CostModel;
use crate::protocol::layout::Layout;
use crate::protocol::param_server::ParamServer;
use crate::protocol::regroup::{decide, Confirmation, Move, RegroupEvent, SpeedWindow};
use crate::runtime::messages::ServerMessages;

/// Values each server contributes per worker slot at a meeting: median seconds per
/// iteration, spread, iterations in the window, and whether the worker is still on its way
/// to another group.
const ROW_WORDS: usize = 4;

/// Tags of the new groups' communicators cycle below MPI's least guaranteed tag bound.
const TAG_CYCLE: u32 = 32_768;

/// One group server's part in regrouping. Worker slots are the run's workers in
/// [`Layout::worker_ranks`] order, the same on every server; every server has a slot for
/// each (in its link and its SSP clock), absent while the worker is in another group.
pub struct Regrouper<'w> {
    world: &'w Comm,
    /// Which shard of its group's server this regrouper's rank is, of how many.
    shard: usize,
    shards: usize,
    every_s: f64,
    next_s: f64,
    min_gain: f64,
    model: CostModel,
    /// This server's group.
    me: usize,
    /// World rank of each group's server (of this shard of it).
    servers: Vec<usize>,
    /// World rank of each worker slot.
    slots: Vec<usize>,
    /// Slots of each group, as all servers agreed at the last meeting.
    groups: Vec<Vec<usize>>,
    window: SpeedWindow,
    /// Whether the last meeting called for a regroup (one must be called for twice).
    confirmation: Confirmation,
    /// Regroups so far (the same count on every server): the new communicators' tag.
    regroups: u32,
    /// A change of this group's members under way.
    transition: Option<Transition>,
    /// The communicator of the group as it is now, once it has changed.
    group_comm: Option<SubComm>,
    /// Every meeting, as rank 0 writes it to `regroups.json`.
    pub history: Vec<RegroupEvent>,
}

/// A change of a group's members, from the meeting that decided it until its new
/// communicator exists.
struct Transition {
    tag: u16,
    /// For each slot still to be told, the world ranks of its new group, server first.
    untold: Vec<Option<Vec<usize>>>,
    /// The group's new members (slots), in slot order.
    members: Vec<usize>,
    /// Slots that were not members before.
    newcomers: Vec<usize>,
}

impl<'w> Regrouper<'w> {
    /// For shard `shard` of the server of group `me` in `layout` (0 without shards),
    /// meeting every `every_s` seconds from `from_s`, predicting speeds with `model`; new
    /// group communicators are made from `world`.
    pub fn new(
        world: &'w Comm,
        layout: &Layout,
        (me, shard): (usize, usize),
        (every_s, min_gain): (f64, f64),
        (model, from_s): (CostModel, f64),
    ) -> Self {
        let slots = layout.worker_ranks();
        let slot_of = |r: &usize| slots.iter().position(|s| s == r).unwrap_or(0);
        let groups = layout
            .groups
            .iter()
            .map(|g| g.iter().map(slot_of).collect())
            .collect();
        Regrouper {
            world,
            shard,
            shards: layout.shards_per_group(),
            every_s,
            next_s: from_s + every_s,
            min_gain,
            model,
            me,
            servers: layout.shard_servers(shard),
            window: SpeedWindow::new(slots.len()),
            confirmation: Confirmation::default(),
            regroups: 0,
            transition: None,
            group_comm: None,
            slots,
            groups,
            history: Vec::new(),
        }
    }

    /// World rank of every slot (the link's and the clock's worker order).
    pub fn slot_ranks(&self) -> &[usize] {
        &self.slots
    }

    /// Each slot's rank in the communicator of group `group` as formed at the start: the
    /// server at 0, then its workers in world-rank order; `None` for the other groups'.
    pub fn initial_slots(&self, layout: &Layout) -> Vec<Option<usize>> {
        let mut members = layout.groups[self.me].clone();
        members.sort_unstable();
        self.slots
            .iter()
            .map(|r| members.iter().position(|m| m == r).map(|i| i + 1))
            .collect()
    }

    /// Whether slot `w` is in this server's group.
    pub fn is_member(&self, w: usize) -> bool {
        self.groups[self.me].contains(&w)
    }

    /// Whether the next meeting is due at `time_s` (never while this group changes: its
    /// workers are still being told).
    pub fn due(&self, time_s: f64) -> bool {
        time_s >= self.next_s && self.transition.is_none()
    }

    /// When the next meeting is due (seconds on the training clock; `None` while this
    /// group changes).
    pub fn next_due_s(&self) -> Option<f64> {
        self.transition.is_none().then_some(self.next_s)
    }

    /// Whether slot `w` is still to be told of its new group: then a push without payload
    /// from it asks for that (sharded servers), not leaves.
    pub fn awaits_telling(&self, w: usize) -> bool {
        self.transition
            .as_ref()
            .is_some_and(|t| t.untold.get(w).is_some_and(Option::is_some))
    }

    /// Whether this group's members are changing: the server then sends no weights and
    /// does not stop until its new communicator exists.
    pub fn in_transition(&self) -> bool {
        self.transition.is_some()
    }

    /// Weights went out to `slots` at `time_s`.
    pub fn sent(&mut self, slots: &[usize], time_s: f64) {
        for &w in slots {
            self.window.sent(w, time_s);
        }
    }

    /// Slot `w`'s push arrived at `time_s`.
    pub fn pushed(&mut self, w: usize, time_s: f64) {
        self.window.pushed(w, time_s);
    }

    /// After slot `w`'s push was applied at `time_s`: tells it its new group if it is still
    /// to be told, and forms the new group once every worker has been told.
    pub fn after_push(
        &mut self,
        w: usize,
        link: &mut ServerLink,
        ps: &mut ParamServer,
        time_s: f64,
    ) -> Result<()> {
        let Some(t) = self.transition.as_mut() else {
            return Ok(());
        };
        if let Some(members) = t.untold[w].take() {
            link.send_regroup(w, t.tag, &members)?;
            if !t.members.contains(&w) {
                ps.leave(w);
            }
        }
        self.switch_when_told(link, ps, time_s)
    }

    /// The meeting (collective over the group servers, through `share`, which returns
    /// every group's row in group order): pools the windows, decides, records the event,
    /// and starts this group's change of members when it has one.
    pub fn meet(
        &mut self,
        share: impl FnOnce(&[f64]) -> Result<Vec<Vec<f64>>>,
        link: &mut ServerLink,
        ps: &mut ParamServer,
        time_s: f64,
    ) -> Result<()> {
        self.next_s = time_s + self.every_s;
        let rows = share(&self.row())?;
        let pooled = Pooled::from_rows(&rows, &self.groups, self.slots.len());
        let decision = match pooled.moving {
            Some(w) => Err(format!("worker rank {} is still moving", self.slots[w])),
            None => Ok(self.confirmation.confirm(decide(
                &self.model,
                &self.groups,
                &pooled.times,
                &pooled.spreads,
                self.min_gain,
            ))),
        };
        if decision.is_err() {
            self.confirmation = Confirmation::default();
        }
        let mut event = RegroupEvent::pooled(time_s, &self.slots, &pooled.times, pooled.counts);
        let (groups, moves) = event
            .record(decision, self.min_gain)
            .unwrap_or_else(|| (self.groups.clone(), Vec::new()));
        // Only the workers' own counts are per server; the pooled window starts anew.
        self.window.clear();
        event.settle(&groups, &moves);
        if !moves.is_empty() {
            self.regroups += 1;
            let before = std::mem::replace(&mut self.groups, groups);
            self.begin_transition(&before, link, ps, time_s)?;
            if self.me == 0 && self.shard == 0 {
                log::info!(
                    "regroup at {time_s:.1} s: predicted {:.1} -> {:.1} iterations/s; moves {:?}; groups {:?}",
                    event.predicted_rate,
                    event.candidate_rate,
                    event.moves.iter().map(|m: &Move| (m.worker, m.from, m.to)).collect::<Vec<_>>(),
                    event.groups
                );
            }
        }
        self.history.push(event);
        Ok(())
    }

    /// The tag of this shard's new communicator at the current regroup: distinct for each
    /// shard, so that a worker's creations of its new group's communicators, one per shard
    /// in turn, never match each other.
    fn tag(&self) -> u16 {
        let n = u64::from(self.regroups) * self.shards as u64 + self.shard as u64;
        (n % u64::from(TAG_CYCLE)) as u16
    }

    /// This server's values for the meeting, slot by slot (NaN for other groups' workers).
    fn row(&self) -> Vec<f64> {
        let n = self.slots.len();
        let mut row = vec![f64::NAN; ROW_WORDS * n];
        for w in (0..n).filter(|&w| self.is_member(w)) {
            let (t, s) = self.window.summary(w);
            row[ROW_WORDS * w] = t;
            row[ROW_WORDS * w + 1] = s;
            row[ROW_WORDS * w + 2] = self.window.count(w) as f64;
        }
        for w in 0..n {
            let untold = self
                .transition
                .as_ref()
                .is_some_and(|t| t.untold[w].is_some());
            row[ROW_WORDS * w + 3] = f64::from(u8::from(untold));
        }
        row
    }

    /// The world ranks of group `g`'s members as its new communicator orders them: its
    /// server, then its workers in slot order.
    fn member_ranks(&self, g: usize) -> Vec<usize> {
        let mut members = vec![self.servers[g]];
        let mut slots = self.groups[g].clone();
        slots.sort_unstable();
        members.extend(slots.iter().map(|&w| self.slots[w]));
        members
    }

    /// Starts the change from `before` (this group's slots until now) to the agreed groups,
    /// if this group's members change: every worker it had is told of its new group, one
    /// that is waiting at once, the others at their next push.
    fn begin_transition(
        &mut self,
        before: &[Vec<usize>],
        link: &mut ServerLink,
        ps: &mut ParamServer,
        time_s: f64,
    ) -> Result<()> {
        let mut members = self.groups[self.me].clone();
        members.sort_unstable();
        let mut old = before[self.me].clone();
        old.sort_unstable();
        if members == old {
            return Ok(());
        }
        let mut untold = vec![None; self.slots.len()];
        for &w in &old {
            let to = self
                .groups
                .iter()
                .position(|g| g.contains(&w))
                .unwrap_or(self.me);
            untold[w] = Some(self.member_ranks(to));
        }
        let newcomers = members
            .iter()
            .copied()
            .filter(|w| !old.contains(w))
            .collect();
        self.transition = Some(Transition {
            tag: self.tag(),
            untold,
            members,
            newcomers,
        });
        for w in old {
            if ps.clock().is_waiting(w) {
                self.after_push(w, link, ps, time_s)?;
            }
        }
        self.switch_when_told(link, ps, time_s)
    }

    /// Once every worker of the transition has been told: forms the group's new
    /// communicator (blocking until every new member joins it), moves the link to it, and
    /// sends the weights to the newcomers (their first iteration here starts at `time_s`).
    fn switch_when_told(
        &mut self,
        link: &mut ServerLink,
        ps: &mut ParamServer,
        time_s: f64,
    ) -> Result<()> {
        let told = self
            .transition
            .as_ref()
            .is_some_and(|t| t.untold.iter().all(Option::is_none));
        if !told {
            return Ok(());
        }
        let Some(t) = self.transition.take() else {
            return Ok(());
        };
        let ranks = self.member_ranks(self.me);
        let comm = self.world.create_group(&ranks, t.tag).with_context(|| {
            format!(
                "regroup: forming group {}'s communicator {ranks:?}",
                self.me
            )
        })?;
        let in_group: Vec<Option<usize>> = (0..self.slots.len())
            .map(|w| t.members.iter().position(|&m| m == w).map(|i| i + 1))
            .collect();
        link.rebind(&comm, &in_group)?;
        self.group_comm = Some(comm);
        for &w in &t.newcomers {
            ps.join(w);
        }
        link.send_weights(&t.newcomers, ps.version(), ps.weights(), |_| 0)?;
        self.sent(&t.newcomers, time_s);
        Ok(())
    }
}

/// What the servers' rows say together, slot by slot: each worker's values as its own
/// server measured them, and the first worker still on its way to another group.
struct Pooled {
    times: Vec<f64>,
    spreads: Vec<f64>,
    counts: Vec<usize>,
    moving: Option<usize>,
}

impl Pooled {
    fn from_rows(rows: &[Vec<f64>], groups: &[Vec<usize>], n: usize) -> Pooled {
        let owner = |w: usize| groups.iter().position(|g| g.contains(&w)).unwrap_or(0);
        let value = |w: usize, k: usize| {
            rows.get(owner(w))
                .and_then(|r| r.get(ROW_WORDS * w + k))
                .copied()
                .unwrap_or(f64::NAN)
        };
        Pooled {
            times: (0..n).map(|w| value(w, 0)).collect(),
            spreads: (0..n).map(|w| value(w, 1)).collect(),
            counts: (0..n).map(|w| value(w, 2).max(0.0) as usize).collect(),
            moving: (0..n).find(|&w| rows.iter().any(|r| r.get(ROW_WORDS * w + 3) == Some(&1.0))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two servers' rows for slots 0..4: group 0 holds 0 and 1, group 1 holds 2 and 3;
    /// each server fills its own workers' values, and server 1 says slot 3 is moving.
    #[test]
    fn pooling_takes_each_workers_values_from_its_own_server() {
        let groups = vec![vec![0, 1], vec![2, 3]];
        let nan = f64::NAN;
        let row0 = [
            0.1, 0.01, 5.0, 0.0, 0.2, 0.02, 6.0, 0.0, nan, nan, nan, 0.0, nan, nan, nan, 0.0,
        ];
        let row1 = [
            nan, nan, nan, 0.0, nan, nan, nan, 0.0, 0.3, 0.03, 7.0, 0.0, 0.4, 0.04, 8.0, 1.0,
        ];
        let pooled = Pooled::from_rows(&[row0.to_vec(), row1.to_vec()], &groups, 4);
        assert_eq!(pooled.times, [0.1, 0.2, 0.3, 0.4]);
        assert_eq!(pooled.spreads, [0.01, 0.02, 0.03, 0.04]);
        assert_eq!(pooled.counts, [5, 6, 7, 8]);
        assert_eq!(pooled.moving, Some(3));
        let row1_settled: Vec<f64> = row1
            .iter()
            .enumerate()
            .map(|(i, &v)| if i == 15 { 0.0 } else { v })
            .collect();
        let pooled = Pooled::from_rows(&[row0.to_vec(), row1_settled], &groups, 4);
        assert_eq!(pooled.moving, None);
    }
}
