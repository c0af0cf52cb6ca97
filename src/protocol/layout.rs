//! Who does what in a distributed run: which world ranks serve, which work, in which
//! group, and how much each worker is slowed down.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::compute::pace;
use crate::config::modes::{Roles, ServerCount};
use crate::config::{Config, Staleness, SyncMode};
use crate::protocol::costmodel::{GroupCountChoice, ShardCountChoice};
use crate::protocol::grouping::AUTO_STALENESS_MAX;

/// What one rank does in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The server of group `group` (the one server of bsp, asp and ssp is group 0's); with
    /// `sync.shards` > 1, its first shard.
    Server { group: usize },
    /// Shard `shard` (1 or more) of group `group`'s server (`sync.shards` > 1): it serves
    /// that range of the parameters ([`shard_ranges`]) to the group's workers.
    Shard { group: usize, shard: usize },
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
    /// `sync.shards` > 1: the world ranks of each group's server shards after the first
    /// (which is `servers[g]`), in shard order; empty: one server rank per group.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<Vec<usize>>,
    /// `sync.shards = "auto"`: the count chosen and what the cost model predicted for each.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard_count: Option<ShardCountChoice>,
}

impl Layout {
    /// The layout before any grouping: ranks 0..S-1 serve, the rest are workers (one
    /// group), with slowdown factors in rank order.
    pub fn from_config(cfg: &Config, world_size: usize) -> Layout {
        let per_group = cfg.sync.shards_reserved();
        let reserved = cfg.num_servers();
        let servers: Vec<usize> = (0..reserved / per_group).collect();
        let shards = match per_group {
            1 => Vec::new(),
            s => servers
                .iter()
                .map(|g| {
                    (0..s - 1)
                        .map(|j| servers.len() + g * (s - 1) + j)
                        .collect()
                })
                .collect(),
        };
        let workers: Vec<usize> = (reserved..world_size).collect();
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
            staleness: vec![configured_bound(cfg)],
            slowdown,
            profiled_s: None,
            profiled_spread_s: None,
            profiled_worst_s: None,
            profile_cost_s: None,
            group_count: None,
            idle: Vec::new(),
            local_steps: Vec::new(),
            batches: Vec::new(),
            shards,
            shard_count: None,
        }
    }

    /// Server ranks per group: 1, or `sync.shards`.
    pub fn shards_per_group(&self) -> usize {
        self.shards.first().map_or(1, |s| s.len() + 1)
    }

    /// The world rank of shard `shard` of every group's server, in group order (shard 0:
    /// [`Layout::servers`]); a shard a group lacks is left out.
    pub fn shard_servers(&self, shard: usize) -> Vec<usize> {
        match shard {
            0 => self.servers.clone(),
            j => self
                .shards
                .iter()
                .filter_map(|g| g.get(j - 1).copied())
                .collect(),
        }
    }

    /// The range of a model of `n` parameters that world rank `rank` serves: its shard's,
    /// or the whole model (an unsharded server, and every other role).
    pub fn served_range(&self, rank: usize, n: usize) -> std::ops::Range<usize> {
        let shard = match self.role(rank) {
            Role::Server { .. } => 0,
            Role::Shard { shard, .. } => shard,
            _ => return 0..n,
        };
        match self.shards_per_group() {
            1 => 0..n,
            s => shard_ranges(n, s)[shard].clone(),
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

    /// Keeps `shards` server ranks per group (each group's first `shards - 1` further
    /// shards); the others become idle.
    pub fn keep_shards(&mut self, shards: usize) {
        let further = shards.max(1) - 1;
        for group in &mut self.shards {
            if further < group.len() {
                self.idle.extend(group.split_off(further));
            }
        }
        if further == 0 {
            self.shards.clear();
        }
    }

    /// The role of world rank `rank`.
    pub fn role(&self, rank: usize) -> Role {
        if self.mode.strategy().roles() == Roles::Collective {
            return Role::Collective;
        }
        if self.idle.contains(&rank) {
            return Role::Idle;
        }
        if let Some(group) = self.servers.iter().position(|&s| s == rank) {
            return Role::Server { group };
        }
        for (group, shards) in self.shards.iter().enumerate() {
            if let Some(j) = shards.iter().position(|&s| s == rank) {
                return Role::Shard {
                    group,
                    shard: j + 1,
                };
            }
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

/// The range of the parameters each of `shards` server shards holds, for a model of `n`:
/// contiguous, in order, covering `0..n`, their lengths differing by at most one (the
/// first `n % shards` one longer). Key ranges of equal size, as ps-lite's, so every shard
/// moves the same bytes per push.
pub fn shard_ranges(n: usize, shards: usize) -> Vec<std::ops::Range<usize>> {
    let shards = shards.max(1);
    let (base, longer) = (n / shards, n % shards);
    let mut start = 0;
    (0..shards)
        .map(|j| {
            let len = base + usize::from(j < longer);
            let range = start..start + len;
            start += len;
            range
        })
        .collect()
}

/// A saved layout that does not fit the run taking it up: the field (`groups`,
/// `staleness[1]`) and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct LayoutError {
    pub field: String,
    pub reason: String,
}

/// `Err` of field `field` for `reason`.
fn wrong<T>(field: impl Into<String>, reason: impl Into<String>) -> Result<T, LayoutError> {
    Err(LayoutError {
        field: field.into(),
        reason: reason.into(),
    })
}

/// The SSP bound a fresh layout records for each group: the mode's configured one (0
/// without one, and for gssp's `"auto"`, whose groups get theirs from the profile).
fn configured_bound(cfg: &Config) -> usize {
    cfg.sync
        .strategy()
        .staleness(&cfg.sync)
        .bound()
        .unwrap_or(0)
}

/// `n` `thing`s, in words ("1 group", "2 groups", "3 batches").
fn count(n: usize, thing: &str) -> String {
    match (n, thing.ends_with("ch")) {
        (1, _) => format!("1 {thing}"),
        (_, true) => format!("{n} {thing}es"),
        (_, false) => format!("{n} {thing}s"),
    }
}

impl Layout {
    /// Checks a layout an earlier run saved (a checkpoint's) against the config and the
    /// world of the run that takes it up, before anything indexes it: the mode and world
    /// size; the servers as ranks `0..G` and the ranks reserved beyond them as idle; one
    /// group per server (one of every rank without servers), each worker rank exactly once
    /// and every rank in range; one staleness bound per group, the configured one unless it
    /// is `"auto"`; each rank's slowdown factor as the config gives it; local steps and
    /// profiled times per worker, batches per rank, each where the config calls for them
    /// and within their bounds. The
    /// first problem is named by its field, so a hand-edited file is refused by what is
    /// wrong with it rather than by a symptom on some rank later.
    pub fn validate_for(&self, cfg: &Config, world_size: usize) -> Result<(), LayoutError> {
        self.check_world(cfg, world_size)?;
        self.check_servers(cfg)?;
        self.check_groups(cfg)?;
        self.check_staleness(cfg)?;
        self.check_slowdown(cfg)?;
        self.check_batches(cfg)?;
        self.check_local_steps(cfg)?;
        self.check_shards(cfg, world_size)?;
        self.check_profile()
    }

    /// Each group server's further shards at the ranks a fresh layout gives them (none
    /// without `sync.shards`; with `"auto"`, the same first ones of every group, the rest
    /// idle): a resumed shard takes up the file of its own rank.
    fn check_shards(&self, cfg: &Config, world_size: usize) -> Result<(), LayoutError> {
        let mut want = Layout::from_config(cfg, world_size);
        let auto = cfg.sync.shards.count().is_none();
        if auto {
            want.keep_shards(self.shards_per_group());
        }
        if self.shards != want.shards {
            return wrong(
                "shards",
                format!(
                    "{:?}, the config's sync.shards = {} puts them at {:?}",
                    self.shards, cfg.sync.shards, want.shards
                ),
            );
        }
        // The group servers' idle ranks are `check_servers`'s; those above are shards'.
        let servers = cfg.sync.strategy().servers(&cfg.sync).reserved();
        let idle_shards = |l: &Layout| -> Vec<usize> {
            l.idle.iter().copied().filter(|&r| r >= servers).collect()
        };
        let (have, left) = (idle_shards(self), idle_shards(&want));
        match !auto || have == left {
            true => Ok(()),
            false => wrong(
                "idle",
                format!("shard ranks {have:?}, the shards chosen leave {left:?} idle"),
            ),
        }
    }

    /// The mode and the world size are the run's.
    fn check_world(&self, cfg: &Config, world_size: usize) -> Result<(), LayoutError> {
        let mode = cfg.sync.mode;
        if self.mode != mode {
            let reason = format!("{}, the config's sync.mode is {mode}", self.mode);
            return wrong("mode", reason);
        }
        if self.world_size != world_size {
            let reason = format!("{} ranks, the run has {world_size}", self.world_size);
            return wrong("world_size", reason);
        }
        Ok(())
    }

    /// The servers are ranks `0..G`, G the configured count (with `groups = "auto"`, any
    /// count from 1 to `max_groups`); the ranks reserved beyond them are idle.
    fn check_servers(&self, cfg: &Config) -> Result<(), LayoutError> {
        let servers = cfg.sync.strategy().servers(&cfg.sync);
        let (reserved, auto) = (servers.reserved(), matches!(servers, ServerCount::UpTo(_)));
        let g = self.servers.len();
        if auto && !(1..=reserved).contains(&g) {
            let reason = format!("sync.gssp.max_groups = {reserved} allows 1 to {reserved}");
            return wrong("servers", format!("{}, {reason}", count(g, "server")));
        }
        if !auto && g != reserved {
            let reason = format!("{}, the config has {reserved}", count(g, "server"));
            return wrong("servers", reason);
        }
        if self.servers.iter().copied().ne(0..g) {
            let reason = format!("{:?}, must be ranks 0..{g} in order", self.servers);
            return wrong("servers", reason);
        }
        let left = reserved - g;
        // Shard ranks left idle by `sync.shards = "auto"` lie above `reserved`
        // (`check_shards`).
        let auto_shards = cfg.sync.shards.count().is_none();
        let idle: Vec<usize> = (self.idle.iter().copied())
            .filter(|&r| r < reserved || !auto_shards)
            .collect();
        if idle.len() != left || idle.iter().copied().ne(g..reserved) {
            let reason = format!(
                "{}, must be the {} reserved as servers that the {} leave over ({g}..{reserved})",
                count(idle.len(), "rank"),
                count(left, "rank"),
                count(g, "server")
            );
            return wrong("idle", reason);
        }
        Ok(())
    }

    /// One group per server (one without servers), none empty in a server mode, and each
    /// worker rank (`num_servers..world_size`) in exactly one.
    fn check_groups(&self, cfg: &Config) -> Result<(), LayoutError> {
        let servers = self.servers.len();
        let collective = servers == 0;
        let expected = if collective { 1 } else { servers };
        if self.groups.len() != expected {
            let n = count(self.groups.len(), "group");
            if collective {
                return wrong(
                    "groups",
                    format!("{n}, {} has one of every rank", self.mode),
                );
            }
            return wrong("groups", format!("{n} for {}", count(servers, "server")));
        }
        let workers = cfg.num_servers()..self.world_size;
        let mut seen = BTreeSet::new();
        for (i, group) in self.groups.iter().enumerate() {
            let field = || format!("groups[{i}]");
            if group.is_empty() {
                return wrong(field(), "no workers (each group's server needs one)");
            }
            for &rank in group {
                if !workers.contains(&rank) {
                    let (first, end) = (workers.start, workers.end);
                    let reason = format!("rank {rank}, the workers are ranks {first}..{end}");
                    return wrong(field(), reason);
                }
                if !seen.insert(rank) {
                    return wrong(field(), format!("rank {rank} again (each worker once)"));
                }
            }
        }
        match workers.clone().find(|r| !seen.contains(r)) {
            Some(missing) => wrong("groups", format!("no group for rank {missing}")),
            None => Ok(()),
        }
    }

    /// One bound per group: the configured one, or with gssp's `staleness = "auto"` any up
    /// to [`AUTO_STALENESS_MAX`].
    fn check_staleness(&self, cfg: &Config) -> Result<(), LayoutError> {
        let groups = self.groups.len();
        if self.staleness.len() != groups {
            let n = count(self.staleness.len(), "bound");
            return wrong("staleness", format!("{n} for {}", count(groups, "group")));
        }
        let auto = cfg.sync.strategy().staleness(&cfg.sync) == Staleness::Auto;
        let configured = configured_bound(cfg);
        for (i, &s) in self.staleness.iter().enumerate() {
            if auto && s > AUTO_STALENESS_MAX {
                let reason = format!("{s}, \"auto\" sets at most {AUTO_STALENESS_MAX}");
                return wrong(format!("staleness[{i}]"), reason);
            }
            if !auto && s != configured {
                let reason = format!("{s}, the config sets {configured}");
                return wrong(format!("staleness[{i}]"), reason);
            }
        }
        Ok(())
    }

    /// A factor per rank, the one the config's `[heterogeneity]` gives it (the factors are
    /// a function of the config, which a resumed run cannot change).
    fn check_slowdown(&self, cfg: &Config) -> Result<(), LayoutError> {
        if self.slowdown.len() != self.world_size {
            let n = count(self.slowdown.len(), "factor");
            return wrong("slowdown", format!("{n} for {} ranks", self.world_size));
        }
        let configured = Layout::from_config(cfg, self.world_size).slowdown;
        let differs = self
            .slowdown
            .iter()
            .zip(&configured)
            .position(|(a, b)| a != b);
        match differs {
            Some(r) => wrong(
                format!("slowdown[{r}]"),
                format!(
                    "{}, the config's [heterogeneity] gives {}",
                    self.slowdown[r], configured[r]
                ),
            ),
            None => Ok(()),
        }
    }

    /// The server modes with `[sync.balance]`: one batch per rank, 0 for a server or an idle
    /// rank, each worker's within `min_batch..=max_batch`, all summing to the global batch;
    /// otherwise none.
    fn check_batches(&self, cfg: &Config) -> Result<(), LayoutError> {
        let reserved = cfg.num_servers();
        let b = &cfg.sync.balance;
        if !(b.is_balanced() && reserved > 0) {
            return match self.batches.len() {
                0 => Ok(()),
                n => wrong(
                    "batches",
                    format!(
                        "{}, the config cuts none ([sync.balance])",
                        count(n, "batch")
                    ),
                ),
            };
        }
        if self.batches.len() != self.world_size {
            let n = count(self.batches.len(), "batch");
            return wrong("batches", format!("{n} for {} ranks", self.world_size));
        }
        let mean = cfg.optim.batch_size;
        let (low, high) = (b.min_batch, b.ceiling(mean));
        for (rank, &batch) in self.batches.iter().enumerate() {
            let field = || format!("batches[{rank}]");
            if rank < reserved && batch != 0 {
                return wrong(field(), format!("{batch} for a server's rank, must be 0"));
            }
            if rank >= reserved && !(low..=high).contains(&batch) {
                let bounds = "sync.balance.min_batch and max_batch";
                return wrong(
                    field(),
                    format!("{batch}, must be in {low}..={high} ({bounds})"),
                );
            }
        }
        let workers = self.world_size.saturating_sub(reserved) as u128;
        let global = workers * mean as u128;
        let sum: u128 = self.batches.iter().map(|&x| x as u128).sum();
        if sum != global {
            let reason = format!("a sum of {sum}, the global batch is {global}");
            return wrong("batches", reason);
        }
        Ok(())
    }

    /// Where the mode's workers take local steps (async-localsgd, gssp with
    /// `sync.gssp.local_steps` > 1): at least one per worker; otherwise none.
    fn check_local_steps(&self, cfg: &Config) -> Result<(), LayoutError> {
        let takes = cfg.sync.strategy().local_steps(&cfg.sync).is_some();
        let n = self.local_steps.len();
        if !takes {
            return match n {
                0 => Ok(()),
                _ => wrong(
                    "local_steps",
                    format!("{}, the config takes no local steps", count(n, "count")),
                ),
            };
        }
        let workers = self.worker_count();
        if n != workers {
            let reason = format!("{} for {}", count(n, "count"), count(workers, "worker"));
            return wrong("local_steps", reason);
        }
        match self.local_steps.iter().position(|&s| s == 0) {
            Some(i) => wrong(format!("local_steps[{i}]"), "0, must be at least 1"),
            None => Ok(()),
        }
    }

    /// What profiling measured: a finite, non-negative time per worker, and its cost; the
    /// group count the cost model chose is the number of servers.
    fn check_profile(&self) -> Result<(), LayoutError> {
        let workers = self.worker_count();
        for (name, times) in [
            ("profiled_s", &self.profiled_s),
            ("profiled_spread_s", &self.profiled_spread_s),
            ("profiled_worst_s", &self.profiled_worst_s),
        ] {
            let Some(times) = times else { continue };
            if times.len() != workers {
                let reason = format!(
                    "{} for {}",
                    count(times.len(), "time"),
                    count(workers, "worker")
                );
                return wrong(name, reason);
            }
            if let Some(i) = times.iter().position(|t| !seconds(*t)) {
                return wrong(format!("{name}[{i}]"), not_seconds(times[i]));
            }
        }
        if let Some(cost) = self.profile_cost_s.filter(|c| !seconds(*c)) {
            return wrong("profile_cost_s", not_seconds(cost));
        }
        match &self.group_count {
            Some(c) if c.chosen != self.servers.len() => {
                let servers = count(self.servers.len(), "server");
                wrong(
                    "group_count.chosen",
                    format!("{}, the layout has {servers}", c.chosen),
                )
            }
            _ => Ok(()),
        }
    }

    /// The workers of all groups (each once in a checked layout).
    fn worker_count(&self) -> usize {
        self.groups.iter().map(Vec::len).sum()
    }
}

/// Whether `t` is a time in seconds: finite and not negative.
fn seconds(t: f64) -> bool {
    t.is_finite() && t >= 0.0
}

/// The reason a time is refused.
fn not_seconds(t: f64) -> String {
    format!("{t}, must be a finite number of seconds >= 0")
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
    fn shard_ranges_cover_the_model_in_order_and_differ_by_at_most_one() {
        for (n, shards) in [(10, 3), (9, 3), (5, 5), (61_706, 4), (7, 1)] {
            let ranges = shard_ranges(n, shards);
            assert_eq!(ranges.len(), shards);
            assert_eq!(ranges[0].start, 0);
            assert_eq!(ranges[shards - 1].end, n);
            for pair in ranges.windows(2) {
                assert_eq!(pair[0].end, pair[1].start, "{n}/{shards}: {ranges:?}");
            }
            let lens: Vec<usize> = ranges.iter().map(|r| r.len()).collect();
            let (lo, hi) = (lens.iter().min(), lens.iter().max());
            assert!(hi.unwrap() - lo.unwrap() <= 1, "{n}/{shards}: {lens:?}");
            assert!(*lo.unwrap() >= 1);
        }
        assert_eq!(shard_ranges(10, 3), [0..4, 4..7, 7..10]);
    }

    /// Two groups of two shards on 8 ranks: the first shards are ranks 0-1, the second
    /// 2-3 (group 0's, then group 1's), the workers follow; each rank serves its range.
    #[test]
    fn sharded_servers_take_the_ranks_after_the_first_shards() {
        let cfg = config(&["sync.mode=gssp", "sync.gssp.groups=2", "sync.shards=2"]);
        assert_eq!(cfg.num_servers(), 4);
        let layout = Layout::from_config(&cfg, 8);
        assert_eq!(layout.servers, [0, 1]);
        assert_eq!(layout.shards, [[2], [3]]);
        assert_eq!(layout.shard_servers(0), layout.servers);
        assert_eq!(layout.shard_servers(1), [2, 3]);
        assert_eq!(layout.groups, [vec![4, 5, 6, 7]]);
        assert_eq!(layout.shards_per_group(), 2);
        let roles: Vec<Role> = (0..5).map(|r| layout.role(r)).collect();
        let shard = |group| Role::Shard { group, shard: 1 };
        assert_eq!(
            roles,
            [
                Role::Server { group: 0 },
                Role::Server { group: 1 },
                shard(0),
                shard(1),
                Role::Worker { group: 0 },
            ]
        );
        assert_eq!(layout.served_range(0, 11), 0..6);
        assert_eq!(layout.served_range(3, 11), 6..11);
        assert_eq!(layout.served_range(5, 11), 0..11);
        let one = Layout::from_config(&config(&["sync.mode=ssp", "sync.shards=3"]), 6);
        assert_eq!(
            (one.servers.clone(), one.shards.clone()),
            (vec![0], vec![vec![1, 2]])
        );
        // A saved layout's shards must be where the config puts them.
        let ssp = config(&["sync.mode=ssp", "sync.shards=3"]);
        assert_eq!(one.validate_for(&ssp, 6), Ok(()));
        let mut edited = one.clone();
        edited.shards = vec![vec![2, 1]];
        let err = edited.validate_for(&ssp, 6).unwrap_err().to_string();
        assert_eq!(
            err,
            "shards: [[2, 1]], the config's sync.shards = 3 puts them at [[1, 2]]"
        );
        let plain = Layout::from_config(&config(&["sync.mode=ssp"]), 6);
        assert!(plain.shards.is_empty());
        assert_eq!(plain.served_range(0, 11), 0..11);
    }

    #[test]
    fn auto_shards_reserve_the_most_and_leave_the_unchosen_idle() {
        let auto = [
            "sync.mode=gssp",
            "sync.gssp.groups=2",
            "sync.shards=auto",
            "sync.max_shards=4",
        ];
        let cfg = config(&auto);
        assert_eq!(cfg.num_servers(), 8);
        let mut reserved = Layout::from_config(&cfg, 12);
        assert_eq!(reserved.shards, [[2, 3, 4], [5, 6, 7]]);
        reserved.groups = vec![vec![8, 9], vec![10, 11]];
        reserved.staleness = vec![reserved.staleness[0]; 2];
        let mut two = reserved.clone();
        two.keep_shards(2);
        assert_eq!(
            (two.shards.clone(), two.idle.clone()),
            (vec![vec![2], vec![5]], vec![3, 4, 6, 7])
        );
        assert_eq!(two.shards_per_group(), 2);
        assert_eq!(two.role(3), Role::Idle);
        assert_eq!(two.role(5), Role::Shard { group: 1, shard: 1 });
        assert_eq!(two.served_range(5, 11), 6..11);
        assert_eq!(two.validate_for(&cfg, 12), Ok(()));
        let mut one = reserved.clone();
        one.keep_shards(1);
        assert!(one.shards.is_empty());
        assert_eq!(one.idle, [2, 3, 4, 5, 6, 7]);
        assert_eq!(one.validate_for(&cfg, 12), Ok(()));
        assert_eq!(reserved.validate_for(&cfg, 12), Ok(()));
        // A saved layout whose groups kept different shards, or whose idle ranks are not
        // the ones left over, is refused.
        let mut uneven = two.clone();
        uneven.shards = vec![vec![2], vec![5, 6]];
        uneven.idle = vec![3, 4, 7];
        let err = uneven.validate_for(&cfg, 12).unwrap_err().to_string();
        assert!(err.starts_with("shards: [[2], [5, 6]]"), "{err}");
        let mut lost = two.clone();
        lost.idle = vec![3, 4, 6];
        let err = lost.validate_for(&cfg, 12).unwrap_err().to_string();
        assert_eq!(
            err,
            "idle: shard ranks [3, 4, 6], the shards chosen leave [3, 4, 6, 7] idle"
        );
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
    /// gssp with 2 static groups of 2 workers on 6 ranks, as a run lays it out.
    fn two_groups(extra: &[&str]) -> (Config, Layout) {
        let mut sets = vec![
            "sync.mode=gssp",
            "sync.gssp.groups=2",
            "sync.gssp.grouping=static",
            "sync.gssp.static_groups=[[2,3],[4,5]]",
            "sync.gssp.staleness=2",
        ];
        sets.extend_from_slice(extra);
        let cfg = config(&sets);
        let mut layout = Layout::from_config(&cfg, 6);
        layout.groups = vec![vec![2, 3], vec![4, 5]];
        layout.staleness = vec![2, 2];
        (cfg, layout)
    }

    /// The error `edit` makes of the two-group layout, as `field: reason`.
    fn refused(edit: impl FnOnce(&mut Layout)) -> String {
        let (cfg, mut layout) = two_groups(&[]);
        edit(&mut layout);
        layout.validate_for(&cfg, 6).unwrap_err().to_string()
    }

    #[test]
    fn the_layouts_a_run_saves_fit_its_config_and_world() {
        let (cfg, layout) = two_groups(&[]);
        assert_eq!(layout.validate_for(&cfg, 6), Ok(()));
        for mode in ["bsp", "asp", "ssp", "allreduce", "localsgd"] {
            let cfg = config(&[format!("sync.mode={mode}").as_str()]);
            assert_eq!(
                Layout::from_config(&cfg, 4).validate_for(&cfg, 4),
                Ok(()),
                "{mode}"
            );
        }
        // groups = "auto": 2 of 3 reserved ranks serve, the third is idle.
        let cfg = config(&[
            "sync.mode=gssp",
            "sync.gssp.groups=auto",
            "sync.gssp.max_groups=3",
        ]);
        let mut layout = Layout::from_config(&cfg, 8);
        layout.keep_servers(2);
        layout.groups = vec![vec![3, 5, 7], vec![4, 6]];
        layout.staleness = vec![layout.staleness[0]; 2];
        assert_eq!(layout.validate_for(&cfg, 8), Ok(()));
    }

    #[test]
    fn fewer_groups_than_servers_or_a_worker_out_of_place_is_named() {
        assert_eq!(
            refused(|l| l.groups.truncate(1)),
            "groups: 1 group for 2 servers"
        );
        assert_eq!(
            refused(|l| l.groups[1] = vec![4]),
            "groups: no group for rank 5"
        );
        assert_eq!(
            refused(|l| l.groups[1].push(3)),
            "groups[1]: rank 3 again (each worker once)"
        );
        assert_eq!(
            refused(|l| l.groups[0][0] = 6),
            "groups[0]: rank 6, the workers are ranks 2..6"
        );
        assert_eq!(
            refused(|l| l.groups[0][0] = 1),
            "groups[0]: rank 1, the workers are ranks 2..6"
        );
        assert!(refused(|l| l.groups[0].clear()).starts_with("groups[0]: no workers"));
    }

    #[test]
    fn the_mode_world_and_servers_are_the_runs() {
        assert_eq!(
            refused(|l| l.mode = SyncMode::Ssp),
            "mode: ssp, the config's sync.mode is gssp"
        );
        assert_eq!(
            refused(|l| l.world_size = 7),
            "world_size: 7 ranks, the run has 6"
        );
        assert_eq!(
            refused(|l| l.servers = vec![0]),
            "servers: 1 server, the config has 2"
        );
        assert_eq!(
            refused(|l| l.servers = vec![1, 0]),
            "servers: [1, 0], must be ranks 0..2 in order"
        );
        assert!(refused(|l| l.idle = vec![2]).starts_with("idle: 1 rank, must be the 0 ranks"));
        let cfg = config(&[
            "sync.mode=gssp",
            "sync.gssp.groups=auto",
            "sync.gssp.max_groups=2",
        ]);
        let mut layout = Layout::from_config(&cfg, 6);
        layout.keep_servers(1);
        layout.idle.clear();
        let err = layout.validate_for(&cfg, 6).unwrap_err().to_string();
        assert!(
            err.starts_with("idle: 0 ranks, must be the 1 rank"),
            "{err}"
        );
    }

    #[test]
    fn per_group_and_per_rank_lists_match_their_counts_and_bounds() {
        assert_eq!(
            refused(|l| {
                l.staleness.pop();
            }),
            "staleness: 1 bound for 2 groups"
        );
        assert_eq!(
            refused(|l| l.staleness[1] = 5),
            "staleness[1]: 5, the config sets 2"
        );
        assert_eq!(
            refused(|l| l.slowdown.truncate(5)),
            "slowdown: 5 factors for 6 ranks"
        );
        assert_eq!(
            refused(|l| l.slowdown[3] = f64::NAN),
            "slowdown[3]: NaN, the config's [heterogeneity] gives 1"
        );
        assert_eq!(
            refused(|l| l.batches = vec![0, 0, 32, 32, 32, 32]),
            "batches: 6 batches, the config cuts none ([sync.balance])"
        );
        assert_eq!(
            refused(|l| l.local_steps = vec![1, 1, 1, 1]),
            "local_steps: 4 counts, the config takes no local steps"
        );
        assert_eq!(
            refused(|l| l.profiled_s = Some(vec![0.1; 3])),
            "profiled_s: 3 times for 4 workers"
        );
        assert!(
            refused(|l| l.profiled_worst_s = Some(vec![0.1, -1.0, 0.1, 0.1]))
                .starts_with("profiled_worst_s[1]: -1")
        );
        assert!(
            refused(|l| l.profile_cost_s = Some(f64::INFINITY)).starts_with("profile_cost_s: inf")
        );
        let auto = config(&[
            "sync.mode=gssp",
            "sync.gssp.groups=2",
            "sync.gssp.staleness=auto",
        ]);
        let mut layout = Layout::from_config(&auto, 6);
        layout.groups = vec![vec![2, 3], vec![4, 5]];
        layout.staleness = vec![3, AUTO_STALENESS_MAX];
        assert_eq!(layout.validate_for(&auto, 6), Ok(()));
        layout.staleness[0] = AUTO_STALENESS_MAX + 1;
        let err = layout.validate_for(&auto, 6).unwrap_err().to_string();
        assert!(err.starts_with("staleness[0]: 9"), "{err}");
    }

    #[test]
    fn balanced_batches_and_local_steps_are_checked_where_the_config_takes_them() {
        let cfg = config(&[
            "sync.mode=bsp",
            "optim.batch_size=16",
            "sync.balance.batches=static",
            "sync.balance.static_batches=[8, 24, 16]",
        ]);
        let mut layout = Layout::from_config(&cfg, 4);
        layout.batches = vec![0, 8, 24, 16];
        assert_eq!(layout.validate_for(&cfg, 4), Ok(()));
        let check = |batches: Vec<usize>| {
            let mut l = layout.clone();
            l.batches = batches;
            l.validate_for(&cfg, 4).unwrap_err().to_string()
        };
        assert_eq!(check(vec![0, 8, 24]), "batches: 3 batches for 4 ranks");
        assert_eq!(
            check(vec![4, 8, 20, 16]),
            "batches[0]: 4 for a server's rank, must be 0"
        );
        assert!(check(vec![0, 0, 32, 16]).starts_with("batches[1]: 0, must be in 1..=64"));
        assert_eq!(
            check(vec![0, 8, 24, 24]),
            "batches: a sum of 56, the global batch is 48"
        );

        let cfg = config(&["sync.mode=async-localsgd"]);
        let mut layout = Layout::from_config(&cfg, 4);
        layout.local_steps = vec![4, 2, 1];
        assert_eq!(layout.validate_for(&cfg, 4), Ok(()));
        layout.local_steps = vec![4, 2];
        let err = layout.validate_for(&cfg, 4).unwrap_err().to_string();
        assert_eq!(err, "local_steps: 2 counts for 3 workers");
        layout.local_steps = vec![4, 0, 1];
        let err = layout.validate_for(&cfg, 4).unwrap_err().to_string();
        assert_eq!(err, "local_steps[1]: 0, must be at least 1");
    }

    #[test]
    fn a_collective_mode_has_one_group_of_every_rank() {
        let cfg = config(&["sync.mode=allreduce"]);
        let mut layout = Layout::from_config(&cfg, 3);
        layout.groups.push(vec![]);
        let err = layout.validate_for(&cfg, 3).unwrap_err().to_string();
        assert_eq!(err, "groups: 2 groups, allreduce has one of every rank");
        layout.groups = vec![vec![0, 2]];
        let err = layout.validate_for(&cfg, 3).unwrap_err().to_string();
        assert_eq!(err, "groups: no group for rank 1");
    }
}
