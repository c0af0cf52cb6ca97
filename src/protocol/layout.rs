//! Who does what in a distributed run: which world ranks serve, which work, in which
//! group, and how much each worker is slowed down.

use serde::{Deserialize, Serialize};

use crate::compute::pace;
use crate::config::{Config, SyncMode};
use crate::protocol::costmodel::GroupCountChoice;

/// What one rank does in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The server of group `group` (the one server of bsp, asp and ssp is group 0's).
    Server { group: usize },
    /// A worker of group `group`'s server.
    Worker { group: usize },
    /// A rank of allreduce or localsgd: it trains and averages with every other.
    Collective,
    /// A rank reserved as a server that the chosen group count left over.
    Idle,
}

/// Who does what: the servers (world ranks) and the workers of each group (world ranks).
/// Group g is served by `servers[g]`; allreduce has no servers and one group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Layout {
    pub mode: SyncMode,
    pub world_size: usize,
    pub servers: Vec<usize>,
    pub groups: Vec<Vec<usize>>,
    /// SSP staleness bound of each group's server (ssp and gssp; `sync.gssp.staleness`, or per
    /// group from the profile when it is `"auto"`).
    pub staleness: Vec<usize>,
    /// Slowdown factor of each world rank (1 for servers).
    pub slowdown: Vec<f64>,
    /// Seconds per local iteration each worker measured when grouping by profile.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profiled_s: Option<Vec<f64>>,
    /// Median absolute deviation of each worker's profiled iterations (how erratic they were).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profiled_spread_s: Option<Vec<f64>>,
    /// Each worker's slowest profiled iteration, seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profiled_worst_s: Option<Vec<f64>>,
    /// What grouping by profile cost: the longest any worker spent profiling, in seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile_cost_s: Option<f64>,
    /// `sync.gssp.groups = "auto"`: the count chosen and what the cost model predicted for each.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_count: Option<GroupCountChoice>,
    /// Ranks reserved as servers that the chosen group count left over: they take no part.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub idle: Vec<usize>,
    /// async-localsgd, and gssp with `sync.gssp.local_steps` > 1: each worker's local
    /// steps per push, in [`Layout::worker_ranks`] order (empty: one batch's gradient per
    /// push).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub local_steps: Vec<usize>,
    /// The server modes with `[sync.balance]`: each world rank's batch (0 for a server),
    /// cut once at the start; empty: every worker takes `optim.batch_size` (and the
    /// collective modes cut theirs during the run).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub batches: Vec<usize>,
}

impl Layout {
    /// The layout before any grouping: ranks 0..S-1 serve, the rest are workers (one
    /// group), with slowdown factors in rank order.
    pub fn from_config(cfg: &Config, world_size: usize) -> Layout {
        let servers: Vec<usize> = (0..cfg.num_servers()).collect();
        let workers: Vec<usize> = (servers.len()..world_size).collect();
        let factors = pace::worker_factors(&cfg.heterogeneity, workers.len());
        let mut slowdown = vec![1.0; world_size];
        for (i, &r) in workers.iter().enumerate() {
            slowdown[r] = factors[i];
        }
        Layout {
            mode: cfg.sync.mode,
            world_size,
            servers,
            groups: vec![workers],
            staleness: vec![cfg.sync.server_bound().unwrap_or(0)],
            slowdown,
            profiled_s: None,
            profiled_spread_s: None,
            profiled_worst_s: None,
            profile_cost_s: None,
            group_count: None,
            idle: Vec::new(),
            local_steps: Vec::new(),
            batches: Vec::new(),
        }
    }

    /// World rank `rank`'s slice of each global batch of a shared order, the workers'
    /// batches laid end to end in rank order (`None` without [`Layout::batches`], or for a
    /// rank with no batch).
    pub fn batch_slice(&self, rank: usize) -> Option<std::ops::Range<usize>> {
        let batch = *self.batches.get(rank).filter(|&&b| b > 0)?;
        let start: usize = self.batches[..rank].iter().sum();
        Some(start..start + batch)
    }

    /// Keeps the first `groups` servers; the others become idle.
    pub fn keep_servers(&mut self, groups: usize) {
        if groups < self.servers.len() {
            self.idle = self.servers.split_off(groups);
        }
    }

    /// The role of world rank `rank`.
    pub fn role(&self, rank: usize) -> Role {
        if matches!(self.mode, SyncMode::Allreduce | SyncMode::Localsgd) {
            return Role::Collective;
        }
        if self.idle.contains(&rank) {
            return Role::Idle;
        }
        if let Some(group) = self.servers.iter().position(|&s| s == rank) {
            return Role::Server { group };
        }
        let group = self
            .groups
            .iter()
            .position(|ws| ws.contains(&rank))
            .unwrap_or(0);
        Role::Worker { group }
    }

    /// World ranks of all workers, group by group.
    pub fn worker_ranks(&self) -> Vec<usize> {
        self.groups.iter().flatten().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(overrides: &[&str]) -> Config {
        let mut all = vec!["data.dataset=synthetic", "model.name=mlp"];
        all.extend_from_slice(overrides);
        let all: Vec<String> = all.iter().map(|s| s.to_string()).collect();
        Config::from_str_with_overrides(
            "[data]\ndataset = \"synthetic\"\n[model]\nname = \"mlp\"\n",
            "t",
            &all,
        )
        .expect("a valid config")
    }

    #[test]
    fn every_rank_has_the_role_its_layout_gives_it() {
        let mut layout = Layout::from_config(&config(&["sync.mode=gssp", "sync.gssp.groups=3"]), 8);
        layout.groups = vec![vec![3, 6], vec![4, 7], vec![5]];
        layout.keep_servers(2);
        layout.groups.truncate(2);
        layout.groups[1].push(5);
        let roles: Vec<Role> = (0..8).map(|r| layout.role(r)).collect();
        assert_eq!(
            roles,
            [
                Role::Server { group: 0 },
                Role::Server { group: 1 },
                Role::Idle,
                Role::Worker { group: 0 },
                Role::Worker { group: 1 },
                Role::Worker { group: 1 },
                Role::Worker { group: 0 },
                Role::Worker { group: 1 },
            ]
        );
        let allreduce = Layout::from_config(&config(&["sync.mode=allreduce"]), 3);
        assert!((0..3).all(|r| allreduce.role(r) == Role::Collective));
    }

    #[test]
    fn a_workers_slice_follows_the_batches_of_the_ranks_before_it() {
        let mut layout = Layout::from_config(&config(&["sync.mode=bsp"]), 4);
        assert_eq!(layout.batch_slice(2), None);
        layout.batches = vec![0, 24, 8, 32];
        assert_eq!(layout.batch_slice(0), None);
        assert_eq!(layout.batch_slice(1), Some(0..24));
        assert_eq!(layout.batch_slice(2), Some(24..32));
        assert_eq!(layout.batch_slice(3), Some(32..64));
        assert_eq!(layout.batch_slice(4), None);
    }

    #[test]
    fn a_server_bound_comes_from_its_modes_section() {
        let bound = |sets: &[&str]| Layout::from_config(&config(sets), 4).staleness;
        assert_eq!(bound(&["sync.mode=bsp", "sync.ssp.staleness=5"]), [0]);
        assert_eq!(
            bound(&[
                "sync.mode=ssp",
                "sync.ssp.staleness=5",
                "sync.gssp.staleness=1"
            ]),
            [5]
        );
        assert_eq!(
            bound(&[
                "sync.mode=gssp",
                "sync.ssp.staleness=5",
                "sync.gssp.staleness=1"
            ]),
            [1]
        );
        assert_eq!(bound(&["sync.mode=gssp", "sync.gssp.staleness=auto"]), [0]);
    }
}
