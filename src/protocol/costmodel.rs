//! The timing cost model of a parameter-server cluster: what a group server spends per push,
//! and how many iterations per second groups of workers sustain. One model for every
//! decision that predicts speed: `sync.gssp.groups = "auto"` ([`choose_group_count`]) and
//! regrouping during a run ([`crate::protocol::regroup`]).
//!
//! The model, per group server with G groups (figures from `[cluster]`):
//!
//! - a push costs the server `2 x 4P / bandwidth` (the gradient in, the weights out, P
//!   parameters of 4 bytes) plus `P x apply_ns_per_param` to apply it; each message also
//!   takes `latency` to arrive, which the server does not spend (nonblocking messages);
//! - every `inter_group_every` pushes it exchanges with its G - 1 peers: one message to each
//!   and one from each, `bytes / bandwidth` (one-sided puts: no side waits out a latency),
//!   where a message holds `ratio x P` values of 4 bytes (dense: ratio 1), 8 with their
//!   index (top-k);
//! - a group runs at its slowest worker's pace (SSP's steady state, whatever the bound):
//!   `size / slowest seconds per iteration` iterations per second, unless its server
//!   saturates first: at most `1 / server seconds per push`;
//! - with gssp's local steps (`sync.gssp.local_steps` H > 1) a push stands for its worker's
//!   h local steps (H for the fastest, in proportion to speed with `dynamic_local_steps`):
//!   a group pushes at the pace of its slowest push, `size / max(h x seconds per
//!   iteration)` pushes per second (the SSP clock counts pushes), each worth the mean h
//!   of its workers' iterations, and its server is saturated by pushes, not iterations.
//!
//! The defaults (`[cluster]`) describe one node's shared memory; on a cluster, set them
//! to its network's latency and bandwidth and its servers' apply rate.

use serde::{Deserialize, Serialize};

use crate::config::{ClusterConfig, CompressionKind, Config};
use crate::protocol::grouping::{
    balance_equal_speeds, dynamic_local_steps, partition_by_speed, GroupingError,
};

/// Among group counts whose predicted throughput lies within this fraction of the best,
/// `"auto"` takes the fewest: fewer groups mean fresher replicas (less staleness between
/// groups) and fewer exchanges, which the throughput does not show.
pub const AUTO_GROUPS_TOLERANCE: f64 = 0.02;

/// The model's inputs for one run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostModel {
    /// Model parameters P.
    pub params: usize,
    pub latency_s: f64,
    pub bytes_per_s: f64,
    pub apply_s_per_param: f64,
    /// Bytes of one exchange message.
    pub exchange_bytes: f64,
    /// Bytes of one worker's push and of one server's reply: the model in f32, or half of
    /// that in bfloat16 (`compression.push`, `compression.reply`).
    pub push_bytes: f64,
    pub reply_bytes: f64,
    /// Pushes between two exchanges of a group server.
    pub exchange_every: usize,
    /// The workers' local steps per push of the fastest worker (1: one batch per push;
    /// gssp's `sync.gssp.local_steps`, which the group count and regrouping weigh), and
    /// whether the others' follow its speed (`dynamic_local_steps`).
    pub local_steps: (usize, bool),
}

impl CostModel {
    /// The model of `cfg`'s cluster figures and exchange for a model of `params` values.
    pub fn new(cfg: &Config, params: usize) -> Self {
        let ClusterConfig {
            latency_us,
            bandwidth_gbps,
            apply_ns_per_param,
            ..
        } = cfg.cluster;
        // An emulated link is the network the run sees.
        let link = cfg.heterogeneity.link_gbps;
        let network_gbps = if link > 0.0 {
            link.min(bandwidth_gbps)
        } else {
            bandwidth_gbps
        };
        let c = &cfg.compression;
        let exchange_bytes = match c.kind {
            CompressionKind::Dense => 4.0 * params as f64,
            CompressionKind::Topk => 8.0 * c.ratio * params as f64,
            CompressionKind::Powersgd => 4.0 * c.ratio * params as f64,
        };
        CostModel {
            params,
            latency_s: latency_us * 1e-6,
            bytes_per_s: network_gbps * 1e9 / 8.0,
            apply_s_per_param: apply_ns_per_param * 1e-9,
            exchange_bytes,
            push_bytes: c.push.bytes(params),
            reply_bytes: c.reply.bytes(params),
            exchange_every: cfg.sync.gssp.inter_group_every.max(1),
            local_steps: cfg
                .sync
                .strategy()
                .local_steps(&cfg.sync)
                .map_or((1, false), |l| (l.per_push, l.dynamic)),
        }
    }

    /// Seconds one exchange costs a group server with `groups` groups: a message to and
    /// one from each of its peers. These are one-sided puts into the peers' mailboxes: the
    /// server moves the bytes, but neither side waits for the other, so no latency counts.
    pub fn exchange_s(&self, groups: usize) -> f64 {
        2.0 * groups.saturating_sub(1) as f64 * self.transfer_s(self.exchange_bytes)
    }

    /// Seconds `bytes` occupy a link (a message's cost to its sender or receiver beside
    /// the latency, which it does not wait out).
    pub fn transfer_s(&self, bytes: f64) -> f64 {
        bytes / self.bytes_per_s
    }

    /// Seconds one reply (the whole model's weights) takes on a server's link.
    pub fn reply_s(&self) -> f64 {
        self.transfer_s(self.reply_bytes)
    }

    /// Seconds one worker's push takes on a link.
    pub fn push_s(&self) -> f64 {
        self.transfer_s(self.push_bytes)
    }

    /// Seconds a group server works per push with `groups` groups: the gradient in, its
    /// apply, the weights out, and its share of an exchange.
    pub fn server_s_per_push(&self, groups: usize) -> f64 {
        let p = self.params as f64;
        let push = self.push_s() + self.reply_s() + p * self.apply_s_per_param;
        push + self.exchange_s(groups) / self.exchange_every as f64
    }

    /// Seconds an allreduce of the model takes among `ranks` ranks, as MPI libraries run
    /// it for all but tiny messages (Rabenseifner: a reduce-scatter by recursive halving,
    /// then an allgather by recursive doubling): 2 ceil(log2 ranks) latencies, each rank
    /// moving 2 (ranks - 1) / ranks of the model and summing half of that.
    pub fn allreduce_s(&self, ranks: usize) -> f64 {
        if ranks <= 1 {
            return 0.0;
        }
        let r = ranks as f64;
        let p = self.params as f64;
        let steps = 2.0 * r.log2().ceil();
        let share = (r - 1.0) / r;
        steps * self.latency_s
            + self.transfer_s(2.0 * share * 4.0 * p)
            + share * p * self.apply_s_per_param
    }

    /// Iterations per second of `groups` (worker indices into `times`, seconds per
    /// iteration), each at its slowest push's pace or its server's limit.
    pub fn rate(&self, groups: &[Vec<usize>], times: &[f64]) -> f64 {
        self.rate_sharded(groups, times, 1)
    }

    /// [`CostModel::rate`] with each group's server sharded over `shards` ranks, each
    /// with a link of its own: a shard moves and applies 1/shards of every push, reply and
    /// exchange, so the server's limit is `shards` times one rank's.
    pub fn rate_sharded(&self, groups: &[Vec<usize>], times: &[f64], shards: usize) -> f64 {
        let limit = shards.max(1) as f64 / self.server_s_per_push(groups.len());
        let steps = self.steps_per_push(times);
        groups
            .iter()
            .filter(|g| !g.is_empty())
            .map(|g| {
                let (pushes, batches) = group_pace(g, times, &steps);
                pushes.min(limit) * batches
            })
            .sum()
    }

    /// The busiest group server's share of its time spent serving, for `groups`.
    pub fn server_load(&self, groups: &[Vec<usize>], times: &[f64]) -> f64 {
        self.server_load_sharded(groups, times, 1)
    }

    /// [`CostModel::server_load`] of the busiest shard, each group's server sharded over
    /// `shards` ranks.
    pub fn server_load_sharded(&self, groups: &[Vec<usize>], times: &[f64], shards: usize) -> f64 {
        let per_push = self.server_s_per_push(groups.len()) / shards.max(1) as f64;
        let steps = self.steps_per_push(times);
        groups
            .iter()
            .filter(|g| !g.is_empty())
            .map(|g| (group_pace(g, times, &steps).0 * per_push).min(1.0))
            .fold(0.0, f64::max)
    }

    /// Each worker's iterations per push, for workers of `times` seconds per iteration.
    fn steps_per_push(&self, times: &[f64]) -> Vec<usize> {
        match self.local_steps {
            (h, true) if h > 1 => dynamic_local_steps(h, times),
            (h, _) => vec![h.max(1); times.len()],
        }
    }
}

/// Pushes per second of group `g` (at its slowest push, `steps[w] x times[w]`) and the
/// iterations a push stands for on average.
fn group_pace(g: &[usize], times: &[f64], steps: &[usize]) -> (f64, f64) {
    let push_s = |w: usize| steps[w] as f64 * times[w];
    let slowest = g.iter().map(|&w| push_s(w)).fold(0.0, f64::max);
    let batches = g.iter().map(|&w| steps[w]).sum::<usize>() as f64 / g.len() as f64;
    (g.len() as f64 / slowest, batches)
}

/// The groups the profile gives for `count` groups: the exact partition by speed, then
/// groups of equal speed evened out.
pub fn groups_for(
    times: &[f64],
    spreads: &[f64],
    count: usize,
) -> Result<Vec<Vec<usize>>, GroupingError> {
    Ok(balance_equal_speeds(
        times,
        spreads,
        partition_by_speed(times, count)?,
    ))
}

/// One group count the model weighed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    pub groups: usize,
    /// Predicted iterations per second.
    pub rate: f64,
    /// Predicted busy share of the busiest group server.
    pub server_load: f64,
}

/// What `sync.gssp.groups = "auto"` chose, and from what (written to `layout.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupCountChoice {
    pub chosen: usize,
    pub candidates: Vec<Candidate>,
    /// The model's figures: seconds per push of a group server with one group, and bytes
    /// of one exchange message.
    pub server_s_per_push: f64,
    pub exchange_bytes: f64,
}

/// The group count for workers of profiled `times` (and `spreads`), from 1 to `max` (at
/// most one per worker): the fewest groups whose predicted rate is within
/// [`AUTO_GROUPS_TOLERANCE`] of the best.
pub fn choose_group_count(
    model: &CostModel,
    times: &[f64],
    spreads: &[f64],
    max: usize,
) -> Result<GroupCountChoice, GroupingError> {
    let mut candidates = Vec::new();
    for g in 1..=max.min(times.len()).max(1) {
        let groups = groups_for(times, spreads, g)?;
        candidates.push(Candidate {
            groups: g,
            rate: model.rate(&groups, times),
            server_load: model.server_load(&groups, times),
        });
    }
    let best = candidates.iter().map(|c| c.rate).fold(0.0, f64::max);
    let chosen = candidates
        .iter()
        .find(|c| c.rate >= best * (1.0 - AUTO_GROUPS_TOLERANCE))
        .map_or(1, |c| c.groups);
    Ok(GroupCountChoice {
        chosen,
        candidates,
        server_s_per_push: model.server_s_per_push(1),
        exchange_bytes: model.exchange_bytes,
    })
}

/// One shard count the model weighed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardCandidate {
    pub shards: usize,
    /// Predicted iterations per second.
    pub rate: f64,
    /// Predicted busy share of the busiest shard.
    pub server_load: f64,
}

/// What `sync.shards = "auto"` chose, and from what (written to `layout.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardCountChoice {
    pub chosen: usize,
    pub candidates: Vec<ShardCandidate>,
}

/// The server ranks per group for `groups` of workers of profiled `times`, from 1 to
/// `max`: the fewest whose predicted rate is within [`AUTO_GROUPS_TOLERANCE`] of the best
/// (a shard more is a rank more, and buys nothing once the workers bind).
pub fn choose_shard_count(
    model: &CostModel,
    groups: &[Vec<usize>],
    times: &[f64],
    max: usize,
) -> ShardCountChoice {
    let candidates: Vec<ShardCandidate> = (1..=max.max(1))
        .map(|s| ShardCandidate {
            shards: s,
            rate: model.rate_sharded(groups, times, s),
            server_load: model.server_load_sharded(groups, times, s),
        })
        .collect();
    let best = candidates.iter().map(|c| c.rate).fold(0.0, f64::max);
    let chosen = candidates
        .iter()
        .find(|c| c.rate >= best * (1.0 - AUTO_GROUPS_TOLERANCE))
        .map_or(1, |c| c.shards);
    ShardCountChoice { chosen, candidates }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(params: usize) -> CostModel {
        CostModel {
            params,
            latency_s: 1e-6,
            bytes_per_s: 10e9,
            apply_s_per_param: 0.55e-9,
            exchange_bytes: 4.0 * params as f64,
            push_bytes: 4.0 * params as f64,
            reply_bytes: 4.0 * params as f64,
            exchange_every: 8,
            local_steps: (1, false),
        }
    }

    #[test]
    fn default_figures_match_the_measured_lenet_push() {
        let cfg = crate::config::Config::from_str_with_overrides(
            "[data]\ndataset = \"synthetic\"\n[model]\nname = \"mlp\"\n",
            "test",
            &[],
        )
        .unwrap();
        let m = CostModel::new(&cfg, 61_706);
        let us = 1e6 * m.server_s_per_push(1);
        // Measured: 59 us (33 applying, 26 answering); the model counts the push's copy
        // in too.
        assert!((55.0..=90.0).contains(&us), "{us} us per push");
    }

    #[test]
    fn bf16_pushes_and_replies_are_half_the_f32_ones_rounded_up_to_a_word() {
        let cfg = |push: &str| {
            crate::config::Config::from_str_with_overrides(
                "[data]\ndataset = \"synthetic\"\n[model]\nname = \"mlp\"\n[sync]\nmode = \"asp\"\n",
                "test",
                &[format!("compression.push={push}"), format!("compression.reply={push}")],
            )
            .unwrap()
        };
        let (f32_model, bf16_model) = (
            CostModel::new(&cfg("f32"), 1001),
            CostModel::new(&cfg("bf16"), 1001),
        );
        assert_eq!(
            (f32_model.push_bytes, f32_model.reply_bytes),
            (4004.0, 4004.0)
        );
        assert_eq!(
            (bf16_model.push_bytes, bf16_model.reply_bytes),
            (2004.0, 2004.0)
        );
        assert_eq!(bf16_model.push_s() * 2.0, bf16_model.transfer_s(4008.0));
        assert_eq!(bf16_model.reply_s() * 2.0, bf16_model.transfer_s(4008.0));
    }

    #[test]
    fn exchange_cost_grows_with_peers_and_shrinks_with_sparsity() {
        let dense = model(1_000_000);
        assert!(dense.server_s_per_push(4) > dense.server_s_per_push(2));
        assert_eq!(dense.server_s_per_push(1), {
            let p = 1e6;
            2.0 * (4.0 * p / 10e9) + p * 0.55e-9
        });
        let sparse = CostModel {
            exchange_bytes: 8.0 * 0.01 * 1e6,
            ..dense
        };
        assert!(sparse.server_s_per_push(4) < dense.server_s_per_push(4));
    }

    #[test]
    fn a_saturated_server_caps_its_group() {
        // 1e8 parameters: about 0.13 s per push, so 100 workers at 1 s each would need 13 s
        // of server time per second; the group gets 1 / 0.13 per second.
        let m = model(100_000_000);
        let times = vec![1.0; 100];
        let one = vec![(0..100).collect::<Vec<_>>()];
        let rate = m.rate(&one, &times);
        assert!((rate - 1.0 / m.server_s_per_push(1)).abs() < 1e-9, "{rate}");
        assert_eq!(m.server_load(&one, &times), 1.0);
    }

    #[test]
    fn auto_shards_are_the_fewest_that_take_a_saturated_server_off_the_path() {
        // 1e7 parameters: about 0.0135 s per push on one rank. 16 workers at 0.1 s each
        // offer 160 pushes/s to their one group: one rank takes 74, two 148, three 222
        // (within 2% of the best from there on: the workers bind).
        let m = model(10_000_000);
        let times = vec![0.1; 16];
        let one = vec![(0..16).collect::<Vec<_>>()];
        let per_push = m.server_s_per_push(1);
        let choice = choose_shard_count(&m, &one, &times, 6);
        assert_eq!(choice.candidates.len(), 6);
        let rate = |s: usize| choice.candidates[s - 1].rate;
        assert!((rate(1) - 1.0 / per_push).abs() < 1e-9, "{}", rate(1));
        assert!((rate(2) - 2.0 / per_push).abs() < 1e-9, "{}", rate(2));
        assert!((rate(6) - 160.0).abs() < 1e-9, "{}", rate(6));
        assert_eq!(choice.chosen, 3, "{choice:?}");
        assert!(choice.candidates[2].server_load < 1.0);
        assert_eq!(choice.candidates[0].server_load, 1.0);
        // Workers that bind already: one rank a group.
        let slow = vec![10.0; 16];
        assert_eq!(choose_shard_count(&m, &one, &slow, 6).chosen, 1);
    }

    #[test]
    fn local_steps_let_a_mixed_group_run_at_its_workers_own_pace() {
        // Four tiers 1x..4x of four workers, 10 ms per unit, in one group. One batch per
        // push: the group runs at the slowest, 16 / 0.04 iterations per second. With 4
        // local steps in proportion to speed (4, 2, 1, 1; pushes of 40, 40, 30 and 40 ms)
        // it pushes every 40 ms, each push worth 2 iterations: twice as many, a quarter of
        // the server's pushes per iteration.
        let times: Vec<f64> = (0..16).map(|i| 0.01 * (1 + i / 4) as f64).collect();
        let one = vec![(0..16).collect::<Vec<_>>()];
        let m = model(61_706);
        let local = CostModel {
            local_steps: (4, true),
            ..m
        };
        assert!((m.rate(&one, &times) - 400.0).abs() < 1e-6);
        assert!((local.rate(&one, &times) - 800.0).abs() < 1e-6);
        let (load, local_load) = (m.server_load(&one, &times), local.server_load(&one, &times));
        assert!(
            (local_load - load).abs() < 1e-12,
            "{local_load} against {load}"
        );
        // The same steps everywhere: every push as slow as the slowest tier's 4 steps.
        let fixed = CostModel {
            local_steps: (4, false),
            ..m
        };
        assert!((fixed.rate(&one, &times) - 400.0).abs() < 1e-6);
        // One group now does almost what one per tier does: "auto" takes one.
        let spreads = vec![0.0; 16];
        let chosen = choose_group_count(&local, &times, &spreads, 4)
            .unwrap()
            .chosen;
        assert!(chosen < 4, "{chosen}");
    }

    #[test]
    fn auto_picks_one_group_per_tier_and_one_for_equal_workers() {
        let m = model(61_706);
        // Four tiers 1x..4x of four workers, 10 ms per unit: four groups.
        let times: Vec<f64> = (0..16).map(|i| 0.01 * (1 + i / 4) as f64).collect();
        let choice = choose_group_count(&m, &times, &[0.0; 16], 8).unwrap();
        assert_eq!(choice.chosen, 4, "{choice:?}");
        assert_eq!(choice.candidates.len(), 8);
        // Sixteen equal workers: more groups only add exchanges.
        let choice = choose_group_count(&m, &[0.01; 16], &[0.0; 16], 8).unwrap();
        assert_eq!(choice.chosen, 1, "{choice:?}");
        // Two tiers: two groups.
        let times: Vec<f64> = (0..8).map(|i| if i < 4 { 0.01 } else { 0.03 }).collect();
        let choice = choose_group_count(&m, &times, &[0.0; 8], 4).unwrap();
        assert_eq!(choice.chosen, 2, "{choice:?}");
    }

    #[test]
    fn auto_splits_a_saturated_server() {
        // A large model and many fast equal workers: one server would saturate, so the
        // model spreads them over more servers even though their speeds are equal.
        let m = model(10_000_000);
        let times = vec![0.05; 64];
        let choice = choose_group_count(&m, &times, &[0.0; 64], 8).unwrap();
        assert_eq!(choice.chosen, 8, "{choice:?}");
        let rates: Vec<f64> = choice.candidates.iter().map(|c| c.rate).collect();
        assert!(rates.windows(2).all(|r| r[1] > r[0]), "{rates:?}");
        assert_eq!(choice.candidates[0].server_load, 1.0);
    }
}
