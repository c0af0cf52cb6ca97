//! The meetings of every server rank of a sharded run (`sync.shards` > 1) that takes
//! periodic checkpoints (`run.checkpoint_every_s`).
//!
//! Without shards each group server meets its peers when a checkpoint is due, after a
//! push: its workers answer to it alone, so a push always comes. A shard cannot count on
//! that: while another shard of its group sits in a meeting, the group's workers wait for
//! that shard's answer and push nothing more. So every shard goes to a meeting on its own
//! clock, whether or not a push came (`runtime::server` waits for a push only until the
//! checkpoint is due), and the meeting takes every server rank at once (one communicator),
//! so that the shards of a group cannot be told different things: one shard stopping makes
//! every server stop ([`Meet::Stop`]), and a stopping shard still comes to the meeting that
//! is due (voting stop) rather than leaving its siblings waiting there.
//!
//! At a meeting the shards of a group may have applied different pushes: a worker sends its
//! push to every shard before it waits for any answer, and each shard takes pushes in its
//! own order. Before the checkpoint each shard takes in its workers' pushes up to the
//! highest clock any shard of its group has for them ([`ShardMeetings::group_clocks`]);
//! those pushes were sent already, so a receive from that worker alone finds them. Then
//! every shard's file holds the same pushes, and `--resume` checks that they agree.
//!
//! Regrouping (`sync.gssp.regroup_every_s`) meets the same way: at a regroup meeting each
//! group's first shard contributes its workers' speeds ([`ShardMeetings::share_leads`]), so
//! every shard of every group takes the same decision from the same figures
//! (`runtime::regrouper`).
//!
//! After its serve loop a server meets until every server is stopping
//! ([`ShardMeetings::finish`]), before the exchange's own end (whose meetings are on the
//! shard's exchange communicator): no server can then wait on a communicator another one
//! has left.

use std::time::Duration;

use anyhow::Result;

use crate::comm::{Collectives, SubComm};
use crate::runtime::peers::Meet;

/// Meetings of every server rank (shards included) on their common communicator.
pub struct ShardMeetings<'c> {
    comm: &'c SubComm,
    /// World rank of each rank of `comm`, for the error naming who did not come.
    world_ranks: Vec<usize>,
    /// The rank in `comm` of each group's first shard, in group order.
    leads: Vec<usize>,
    world_size: usize,
    timeout: Duration,
    held: u64,
    /// Whether a meeting has decided the stop (no more meetings until the end's).
    stopped: bool,
}

impl<'c> ShardMeetings<'c> {
    /// Meetings on `comm` (every server rank; `world_ranks` its ranks' world ranks, in
    /// order; `first_shards` the world rank of each group's first shard, in group order)
    /// in a world of `world_size` ranks, each member waited for at most `timeout`.
    pub fn new(
        comm: &'c SubComm,
        (world_ranks, first_shards): (Vec<usize>, &[usize]),
        world_size: usize,
        timeout: Duration,
    ) -> Self {
        let leads = first_shards
            .iter()
            .map(|s| world_ranks.iter().position(|r| r == s).unwrap_or(0))
            .collect();
        ShardMeetings {
            comm,
            world_ranks,
            leads,
            world_size,
            timeout,
            held: 0,
            stopped: false,
        }
    }

    /// Whether a meeting has decided the stop: the serve loop meets no more.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// A meeting at this server's clock `time_s`, voting `stopping`: [`Meet::Together`] at
    /// the latest clock when no server is stopping, else [`Meet::Stop`].
    pub fn meet(&mut self, stopping: bool, time_s: f64, occasion: &str) -> Result<Meet> {
        let votes = self.meet_once(stopping, time_s, occasion)?;
        if votes.any_stop {
            self.stopped = true;
            return Ok(Meet::Stop);
        }
        Ok(Meet::Together {
            time_s: votes.time_s,
        })
    }

    /// The end: meets, voting stop, until every server votes stop.
    pub fn finish(&mut self) -> Result<()> {
        self.stopped = true;
        while !self.meet_once(true, 0.0, "end")?.all_stop {}
        Ok(())
    }

    /// Each group's first shard's `row`, in group order (collective over every server; the
    /// other shards' rows are not read).
    pub fn share_leads(&self, row: &[f64]) -> Result<Vec<Vec<f64>>> {
        let mut rows = self.comm.allgather_f64s(row)?;
        Ok(self
            .leads
            .iter()
            .map(|&i| std::mem::take(&mut rows[i]))
            .collect())
    }

    /// For each of a server's worker slots (`ranks`: their world ranks), the highest clock
    /// any server has for that worker, given this server's `clocks` (collective over every
    /// server; only the shards of a worker's group have it as a slot).
    pub fn group_clocks(&self, ranks: &[usize], clocks: &[u64]) -> Result<Vec<u64>> {
        let mut by_rank = vec![0; self.world_size];
        for (&r, &c) in ranks.iter().zip(clocks) {
            anyhow::ensure!(
                r < self.world_size,
                "worker rank {r} outside a world of {}",
                self.world_size
            );
            by_rank[r] = c;
        }
        let highest = self.comm.allreduce_max_u64s(&by_rank)?;
        Ok(ranks.iter().map(|&r| highest[r]).collect())
    }

    fn meet_once(
        &mut self,
        stopping: bool,
        time_s: f64,
        occasion: &str,
    ) -> Result<crate::comm::Votes> {
        self.held += 1;
        match self
            .comm
            .meet(self.held, self.timeout, (stopping, time_s))?
        {
            Ok(votes) => Ok(votes),
            Err(absent) => {
                let ranks: Vec<String> = absent
                    .iter()
                    .map(|&i| self.world_ranks.get(i).copied().unwrap_or(i).to_string())
                    .collect();
                anyhow::bail!(
                    "server rank{} {} did not come to the servers' {occasion} meeting within {} s (run.meeting_timeout_s)",
                    if ranks.len() == 1 { "" } else { "s" },
                    ranks.join(", "),
                    self.timeout.as_secs_f64()
                )
            }
        }
    }
}
