//! Regrouping during a gssp run, on the group servers: each times its workers
//! ([`SpeedWindow`]); every `sync.regroup_every_s` the servers meet, pool the windows through
//! [`Exchange::share`], and take the same [`plan`] decision; then each answers its leaving
//! workers' next push with a move and sends the current weights to the workers it takes in.
//! The pure decision lives in [`crate::protocol::regroup`].

use anyhow::Result;

use crate::comm::p2p::ServerLink;
use crate::protocol::costmodel::CostModel;
use crate::protocol::layout::Layout;
use crate::protocol::param_server::ParamServer;
use crate::protocol::regroup::{plan, Confirmation, Decision, Move, RegroupEvent, SpeedWindow};
use crate::runtime::peers::Exchange;

/// Values each server contributes per worker slot at a meeting: median seconds per
/// iteration, spread, iterations in the window, and whether the worker is still on its way
/// to another server.
const ROW_WORDS: usize = 4;

/// One group server's part in regrouping. Worker slots are the run's workers in
/// [`Layout::worker_ranks`] order, the same on every server; every server has a slot for
/// each (in its link and its SSP clock), absent while the worker is in another group.
pub struct Regrouper {
    every_s: f64,
    next_s: f64,
    min_gain: f64,
    model: CostModel,
    /// This server's group.
    me: usize,
    /// World rank of each group's server.
    servers: Vec<usize>,
    /// World rank of each worker slot.
    slots: Vec<usize>,
    /// Slots of each group, as all servers agreed at the last meeting.
    groups: Vec<Vec<usize>>,
    window: SpeedWindow,
    /// Whether the last meeting called for a regroup (one must be called for twice).
    confirmation: Confirmation,
    /// Slots that leave this server at their next push, and the server rank they go to.
    leaving: Vec<Option<usize>>,
    /// Every meeting, as rank 0 writes it to `regroups.json`.
    pub history: Vec<RegroupEvent>,
}

impl Regrouper {
    /// For the server of group `me` in `layout`, meeting every `every_s` seconds from
    /// `from_s`, predicting speeds with `model`.
    pub fn new(
        layout: &Layout,
        me: usize,
        (every_s, min_gain): (f64, f64),
        model: CostModel,
        from_s: f64,
    ) -> Self {
        let slots = layout.worker_ranks();
        let slot_of = |r: &usize| slots.iter().position(|s| s == r).unwrap_or(0);
        let groups = layout
            .groups
            .iter()
            .map(|g| g.iter().map(slot_of).collect())
            .collect();
        Regrouper {
            every_s,
            next_s: from_s + every_s,
            min_gain,
            model,
            me,
            servers: layout.servers.clone(),
            window: SpeedWindow::new(slots.len()),
            confirmation: Confirmation::default(),
            leaving: vec![None; slots.len()],
            slots,
            groups,
            history: Vec::new(),
        }
    }

    /// World rank of every slot (the link's and the clock's worker order).
    pub fn slot_ranks(&self) -> &[usize] {
        &self.slots
    }

    /// Whether slot `w` is in this server's group.
    pub fn is_member(&self, w: usize) -> bool {
        self.groups[self.me].contains(&w)
    }

    pub fn due(&self, time_s: f64) -> bool {
        time_s >= self.next_s
    }

    /// Weights went out to `slots` at `time_s`.
    pub fn sent(&mut self, slots: &[usize], time_s: f64) {
        for &w in slots {
            self.window.sent(w, time_s);
        }
    }

    /// Slot `w`'s push arrived at `time_s`; the server rank it must move to, if it leaves.
    pub fn pushed(&mut self, w: usize, time_s: f64) -> Option<usize> {
        self.window.pushed(w, time_s);
        self.leaving[w].take()
    }

    /// The meeting (collective over the group servers, through `exchange`): pools the
    /// windows, decides, records the event, and carries out this server's side of the moves:
    /// a leaving worker that waits here is moved now, the others at their next push; a
    /// joining worker gets the current weights.
    pub fn meet(
        &mut self,
        exchange: &mut dyn Exchange,
        link: &mut ServerLink,
        ps: &mut ParamServer,
        time_s: f64,
    ) -> Result<()> {
        self.next_s = time_s + self.every_s;
        let n = self.slots.len();
        let mut row = vec![f64::NAN; ROW_WORDS * n];
        for w in 0..n {
            if self.is_member(w) {
                let (t, s) = self.window.summary(w);
                row[ROW_WORDS * w] = t;
                row[ROW_WORDS * w + 1] = s;
                row[ROW_WORDS * w + 2] = self.window.count(w) as f64;
            }
            row[ROW_WORDS * w + 3] = f64::from(u8::from(self.leaving[w].is_some()));
        }
        let rows = exchange.share(&row)?;
        let owner = |w: usize| self.groups.iter().position(|g| g.contains(&w)).unwrap_or(0);
        let value = |w: usize, k: usize| {
            rows.get(owner(w))
                .and_then(|r| r.get(ROW_WORDS * w + k))
                .copied()
                .unwrap_or(f64::NAN)
        };
        let times: Vec<f64> = (0..n).map(|w| value(w, 0)).collect();
        let spreads: Vec<f64> = (0..n).map(|w| value(w, 1)).collect();
        let moving = (0..n).find(|&w| rows.iter().any(|r| r.get(ROW_WORDS * w + 3) == Some(&1.0)));
        let decision = match moving {
            Some(w) => Err(format!("worker rank {} is still moving", self.slots[w])),
            None => Ok(self.confirmation.confirm(plan(
                &self.model,
                &self.groups,
                &times,
                &spreads,
                self.min_gain,
            ))),
        };
        if decision.is_err() {
            self.confirmation = Confirmation::default();
        }
        let mut event = RegroupEvent {
            time_s,
            regrouped: false,
            kept_because: None,
            regrouped_because: None,
            worker_ranks: self.slots.clone(),
            seconds_per_iteration: times.iter().map(|t| t.is_finite().then_some(*t)).collect(),
            iterations: (0..n).map(|w| value(w, 2).max(0.0) as usize).collect(),
            predicted_rate: f64::NAN,
            candidate_rate: f64::NAN,
            groups: Vec::new(),
            moves: Vec::new(),
        };
        let moves = match decision {
            Err(why) => {
                event.kept_because = Some(why);
                Vec::new()
            }
            Ok(Decision::TooFewSamples(w)) => {
                event.kept_because = Some(format!(
                    "worker rank {} had fewer than {} iterations in the window",
                    self.slots[w],
                    crate::protocol::regroup::MIN_SAMPLES
                ));
                Vec::new()
            }
            Ok(Decision::Keep {
                rate,
                candidate_rate,
            }) => {
                event.predicted_rate = rate;
                event.candidate_rate = candidate_rate;
                event.kept_because = Some(format!(
                    "the best groups would gain {:.1}%, not more than {:.0}%",
                    100.0 * (candidate_rate / rate - 1.0),
                    100.0 * self.min_gain
                ));
                Vec::new()
            }
            Ok(Decision::Unconfirmed {
                rate,
                candidate_rate,
                reason,
            }) => {
                event.predicted_rate = rate;
                event.candidate_rate = candidate_rate;
                event.kept_because = Some(format!(
                    "{}; waiting for the next point to confirm it",
                    reason.describe(rate, candidate_rate)
                ));
                Vec::new()
            }
            Ok(Decision::Regroup {
                groups,
                moves,
                rate,
                candidate_rate,
                reason,
            }) => {
                event.predicted_rate = rate;
                event.candidate_rate = candidate_rate;
                event.regrouped = true;
                event.regrouped_because = Some(reason.describe(rate, candidate_rate));
                self.groups = groups;
                moves
            }
        };
        // Only the workers' own counts are per server; the pooled window starts anew.
        self.window.clear();
        for m in &moves {
            self.carry_out(*m, link, ps, time_s)?;
        }
        event.groups = self
            .groups
            .iter()
            .map(|g| g.iter().map(|&w| self.slots[w]).collect())
            .collect();
        event.moves = moves
            .iter()
            .map(|m| Move {
                worker: self.slots[m.worker],
                ..*m
            })
            .collect();
        if event.regrouped && self.me == 0 {
            log::info!(
                "regroup at {time_s:.1} s: predicted {:.1} -> {:.1} iterations/s; moves {:?}; groups {:?}",
                event.predicted_rate,
                event.candidate_rate,
                event
                    .moves
                    .iter()
                    .map(|m| (m.worker, m.from, m.to))
                    .collect::<Vec<_>>(),
                event.groups
            );
        }
        self.history.push(event);
        Ok(())
    }

    /// This server's side of move `m`.
    fn carry_out(
        &mut self,
        m: Move,
        link: &mut ServerLink,
        ps: &mut ParamServer,
        time_s: f64,
    ) -> Result<()> {
        let w = m.worker;
        if m.from == self.me {
            let to = self.servers[m.to];
            if ps.clock().is_waiting(w) {
                // Its push was applied and it waits for weights: it goes now.
                link.send_move(w, to)?;
                ps.leave(w);
            } else {
                self.leaving[w] = Some(to);
            }
        }
        if m.to == self.me {
            ps.join(w);
            link.join(w)?;
            link.send_weights(&[w], ps.version(), ps.weights(), |_| 0)?;
            self.window.sent(w, time_s);
        }
        Ok(())
    }

    /// After slot `w`'s push was applied: moves it if it leaves ([`Regrouper::pushed`]
    /// returned `to`).
    pub fn move_now(
        w: usize,
        to: usize,
        link: &mut ServerLink,
        ps: &mut ParamServer,
    ) -> Result<()> {
        link.send_move(w, to)?;
        ps.leave(w);
        Ok(())
    }
}
