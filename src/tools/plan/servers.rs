//! The parameter-server engine of the simulator: bsp, asp, ssp, gssp (one SSP server
//! per group) and async-localsgd (local steps between pushes). Events are pushes reaching a server, in time order; each server is one
//! first-in first-out resource whose busy time per push comes from the cost model.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::{Outcome, Sampler, StalenessHistogram, Workload};
use crate::config::modes::release_gate;
use crate::protocol::costmodel::CostModel;
use crate::protocol::ssp_clock::SspClock;

/// How a parameter-server scheme applies and releases.
#[derive(Debug, Clone, PartialEq)]
pub struct PsScheme {
    /// Workers (indices into the workload) of each server.
    pub groups: Vec<Vec<usize>>,
    /// SSP bound of each server, one per entry of `groups` (`None`: asp); gssp's
    /// `staleness = "auto"` gives each group its own.
    pub bounds: Vec<Option<usize>>,
    /// bsp: pushes are summed and applied once per round, as `Apply::Round` does.
    pub round: bool,
    /// Extra passes over the parameters per applied push (DC-ASGD's correction: 1).
    pub extra_apply_passes: f64,
    /// async-localsgd: each worker's local steps per push (empty: one each), every one a
    /// batch the push counts.
    pub local_steps: Vec<usize>,
    /// `sync.overlap`: a worker computes its next step from the moment it pushes, and its
    /// server releases it at each bound less one ([`release_gate`]).
    pub overlap: bool,
    /// `sync.shards`: server ranks per group, each with its own link. Every shard takes
    /// every push of its group in the same order, so one queue stands for them all, each
    /// message and apply a shard's share (1/S); a worker's own link still sends the whole
    /// gradient, one share after another, so its push reaches the last shard (S - 1)/S of a
    /// whole message later than one shard's share, and the replies, each sent as its shard
    /// answers, come in one after another behind it.
    pub shards: usize,
    /// How much slower each group's shards move their messages than their link's rate
    /// (>= 1; empty: 1), because a node's link is shared with a worker ([`colocated`]).
    pub server_link_factor: Vec<f64>,
    /// How much slower each worker sends its push than its link's rate (>= 1; empty: 1),
    /// because its node's link is shared with a shard.
    pub worker_link_factor: Vec<f64>,
}

/// No groups; one shard each, nothing else: the fields a scheme leaves unsaid.
impl Default for PsScheme {
    fn default() -> Self {
        PsScheme {
            groups: Vec::new(),
            bounds: Vec::new(),
            round: false,
            extra_apply_passes: 0.0,
            local_steps: Vec::new(),
            overlap: false,
            shards: 1,
            server_link_factor: Vec::new(),
            worker_link_factor: Vec::new(),
        }
    }
}

impl PsScheme {
    /// Group `g`'s factor on its shards' messages.
    fn server_factor(&self, g: usize) -> f64 {
        self.server_link_factor.get(g).copied().unwrap_or(1.0)
    }

    /// Worker `w`'s factor on its own sending.
    fn worker_factor(&self, w: usize) -> f64 {
        self.worker_link_factor.get(w).copied().unwrap_or(1.0)
    }

    /// Local steps per push of worker `w`.
    fn steps_of(&self, w: usize) -> usize {
        self.local_steps.get(w).copied().unwrap_or(1).max(1)
    }

    /// Seconds worker `w`'s next push takes to compute (its local steps), drawn from
    /// `sampler`.
    fn push_s(&self, sampler: &mut Sampler<'_>, w: usize) -> f64 {
        (0..self.steps_of(w)).map(|_| sampler.next(w)).sum()
    }
}

/// Simulation time, ordered for the event heap.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Time(f64);

impl Eq for Time {}

impl PartialOrd for Time {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Time {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// One server's state during a simulation.
struct Server {
    members: Vec<usize>,
    clock: SspClock,
    free_at: f64,
    busy_s: f64,
    version: u64,
    pushes: u64,
    /// bsp: pushes summed in the round under way.
    round_pushes: u64,
    bytes: f64,
    /// Replies' bytes (a shard's share of each).
    out_bytes: f64,
    exchange_bytes: f64,
}

/// Runs `scheme` on `work` for `horizon_s` simulated seconds.
pub fn simulate(
    scheme: &PsScheme,
    work: &Workload,
    cost: &CostModel,
    horizon_s: f64,
    seed: u64,
) -> Outcome {
    let n = work.times.len();
    let groups = scheme.groups.len();
    let p = cost.params as f64;
    // The server spends a message's transfer; the latency is flight time.
    let shards = scheme.shards.max(1) as f64;
    // A push and a reply (each f32 or bfloat16: `compression.push`, `compression.reply`),
    // whole and a shard's.
    let whole_push = cost.push_s();
    let (push_share, reply_share) = (whole_push / shards, cost.reply_s() / shards);
    let latency = cost.latency_s;
    // A push reaches the last shard once the worker's link has moved every other shard's
    // share before it; the replies come back as each shard answers, so the last one is
    // in a share after that.
    let to_server = |w: usize| latency + (whole_push - push_share) * scheme.worker_factor(w);
    let apply = p * cost.apply_s_per_param / shards;
    let exchange = cost.exchange_s(groups) / shards;
    let exchange_bytes = 2.0 * groups.saturating_sub(1) as f64 * cost.exchange_bytes / shards;
    let (mut servers, server_of, slot_of) = servers_of(scheme, n);
    let mut sampler = work.sampler(seed);
    // The version of each worker's latest reply and of the one before (the one a step
    // computed ahead was computed on).
    let mut read_version = vec![[0u64; 2]; n];
    // When each worker, having pushed, starts waiting for its reply: once its link has
    // moved its push (the shares before the last; the last is the server's to take in:
    // its own sending is communication, as its rank CSV counts it), or with `overlap`
    // once the step it computes ahead is done.
    let mut waits_from = vec![0.0f64; n];
    let mut wait_s = vec![0.0f64; n];
    let mut iterations = 0u64;
    // Each worker's replies within the horizon (each a push of its it sent before).
    let mut pushes_of = vec![0u64; n];
    let mut staleness = StalenessHistogram::default();
    let mut heap = BinaryHeap::new();
    for (w, &srv) in server_of.iter().enumerate() {
        if srv != usize::MAX {
            // Waiting for the first weights counts as waiting.
            let start = work.start(w).min(horizon_s);
            wait_s[w] += start;
            let compute = scheme.push_s(&mut sampler, w);
            heap.push(Reverse((Time(start + compute + to_server(w)), w)));
        }
    }
    let mut ready = Vec::new();
    while let Some(Reverse((Time(t), w))) = heap.pop() {
        if t > horizon_s {
            break;
        }
        waits_from[w] = match scheme.overlap {
            true => t - to_server(w) + scheme.push_s(&mut sampler, w),
            false => t - latency,
        };
        let factor = scheme.server_factor(server_of[w]);
        let srv = &mut servers[server_of[w]];
        let start = t.max(srv.free_at);
        let mut end = start + push_share * factor + apply * (1.0 + scheme.extra_apply_passes);
        // An iteration (its bytes, its staleness) counts once its push is applied within
        // the horizon, bsp's once its round is: a saturated server's queue at the end is
        // work not done.
        let within = end <= horizon_s;
        if within {
            srv.bytes += cost.push_bytes / shards;
        }
        if scheme.round {
            srv.round_pushes += 1;
        } else {
            if within {
                iterations += scheme.steps_of(w) as u64;
                let read = read_version[w][usize::from(scheme.overlap)];
                staleness.record(srv.version - read);
            }
            srv.version += 1;
        }
        srv.pushes += 1;
        if groups > 1 && srv.pushes.is_multiple_of(cost.exchange_every as u64) {
            end += exchange;
            if end <= horizon_s {
                srv.exchange_bytes += exchange_bytes;
            }
        }
        srv.clock.on_push(slot_of[w]);
        ready.clear();
        srv.clock.release_ready(&mut ready);
        if scheme.round && !ready.is_empty() {
            // The round is complete: one apply of the summed gradients.
            end += apply;
            srv.version += 1;
            if end <= horizon_s {
                iterations += srv.round_pushes;
                for _ in 0..srv.round_pushes {
                    staleness.record(0);
                }
            }
            srv.round_pushes = 0;
        }
        for (k, &slot) in ready.iter().enumerate() {
            let r = srv.members[slot];
            end += reply_share * factor;
            if end <= horizon_s {
                srv.bytes += cost.reply_bytes / shards;
                srv.out_bytes += cost.reply_bytes / shards;
                pushes_of[r] += 1;
            }
            let arrives = end + latency + k as f64 * work.burst_s;
            read_version[r] = [srv.version, read_version[r][0]];
            let next = match scheme.overlap {
                true => arrives.max(waits_from[r]),
                false => arrives + scheme.push_s(&mut sampler, r),
            };
            wait_s[r] += (arrives.min(horizon_s) - waits_from[r].min(horizon_s)).max(0.0);
            heap.push(Reverse((Time(next + to_server(r)), r)));
        }
        srv.busy_s += end.min(horizon_s) - start.min(horizon_s);
        srv.free_at = end;
    }
    // Workers still waiting at the horizon waited from their push (or the step they
    // computed ahead) to it.
    for w in 0..n {
        let srv = server_of[w];
        if srv != usize::MAX && servers[srv].clock.is_waiting(slot_of[w]) {
            wait_s[w] += (horizon_s - waits_from[w]).max(0.0);
        }
    }
    let active: Vec<usize> = (0..n).filter(|&w| server_of[w] != usize::MAX).collect();
    let waits = active.iter().map(|&w| wait_s[w] / horizon_s).collect();
    let mut o = outcome(
        &servers,
        (iterations, staleness, waits),
        work.batch,
        horizon_s,
    );
    o.worker_pushes_per_s = pushes_of.iter().map(|&k| k as f64 / horizon_s).collect();
    o
}

/// [`simulate`] with each of `scheme`'s shard ranks on the node of a worker, sharing its
/// link, as `cluster.distribution = "cyclic"` over one node per worker places them: shard
/// rank k (the first shards of the groups, then each group's others, as
/// [`crate::protocol::layout::Layout`] numbers them) beside the worker of rank
/// `shard ranks + i` with `(shard ranks + i) mod n = k`, that is worker `n - shard ranks + k`.
/// A shared link is taken as shared in proportion to use: a shard's messages move at the
/// share of its link its worker leaves free (the time its whole pushes take a second), a
/// worker's pushes at the share its shard's replies leave; the shares come
/// from the simulation before, three times over (fluid sharing, no packet-level detail).
/// Every shard of a group takes every push, so a group moves at its busiest shard's pace.
pub fn colocated(
    scheme: &PsScheme,
    work: &Workload,
    cost: &CostModel,
    horizon_s: f64,
    seed: u64,
) -> Outcome {
    let n = work.times.len();
    let (groups, shards) = (scheme.groups.len(), scheme.shards.max(1));
    let ranks = groups * shards;
    // Shard rank k serves group g: the first shards 0..groups, then groups' others in turn.
    let group_of = |k: usize| match k < groups {
        true => k,
        false => (k - groups) / (shards - 1).max(1),
    };
    let beside = |k: usize| (n + k).checked_sub(ranks).filter(|&w| w < n);
    let mut sharing = scheme.clone();
    let mut o = simulate(&sharing, work, cost, horizon_s, seed);
    let whole = cost.push_s();
    let free = |used: f64| 1.0 / (1.0 - used.min(0.9));
    for _ in 0..3 {
        let mut server_factor = vec![1.0f64; groups];
        let mut worker_factor = vec![1.0f64; n];
        for k in 0..ranks.min(n) {
            let Some(w) = beside(k) else { continue };
            let g = group_of(k);
            let worker_use = o.worker_pushes_per_s.get(w).copied().unwrap_or(0.0) * whole;
            let shard_use =
                cost.transfer_s(o.server_out_bytes_per_s.get(g).copied().unwrap_or(0.0));
            server_factor[g] = server_factor[g].max(free(worker_use));
            worker_factor[w] = free(shard_use);
        }
        sharing.server_link_factor = server_factor;
        sharing.worker_link_factor = worker_factor;
        o = simulate(&sharing, work, cost, horizon_s, seed);
    }
    o
}

/// The servers of `scheme` over `n` workers, and each worker's server and slot there
/// (`usize::MAX`: a worker of no server).
fn servers_of(scheme: &PsScheme, n: usize) -> (Vec<Server>, Vec<usize>, Vec<usize>) {
    let mut server_of = vec![usize::MAX; n];
    let mut slot_of = vec![0; n];
    let servers = scheme
        .groups
        .iter()
        .enumerate()
        .map(|(s, members)| {
            for (slot, &w) in members.iter().enumerate() {
                server_of[w] = s;
                slot_of[w] = slot;
            }
            let bound = if scheme.round {
                Some(0)
            } else {
                release_gate(scheme.bounds[s], scheme.overlap)
            };
            Server {
                members: members.clone(),
                clock: SspClock::new(members.len(), bound),
                free_at: 0.0,
                busy_s: 0.0,
                version: 0,
                pushes: 0,
                round_pushes: 0,
                bytes: 0.0,
                out_bytes: 0.0,
                exchange_bytes: 0.0,
            }
        })
        .collect();
    (servers, server_of, slot_of)
}

/// What a simulation of `horizon_s` seconds amounts to, from its servers, the iterations
/// applied within it, their staleness and the workers' wait fractions (`batch` samples an
/// iteration).
fn outcome(
    servers: &[Server],
    (iterations, staleness, wait_fractions): (u64, StalenessHistogram, Vec<f64>),
    batch: usize,
    horizon_s: f64,
) -> Outcome {
    let per_s = |f: fn(&Server) -> f64| servers.iter().map(|s| f(s) / horizon_s).collect();
    Outcome {
        iterations,
        images_per_s: iterations as f64 * batch as f64 / horizon_s,
        wait_fractions,
        staleness: Some(staleness),
        server_busy: servers
            .iter()
            .map(|s| (s.busy_s / horizon_s).min(1.0))
            .collect(),
        server_bytes_per_s: per_s(|s| s.bytes + s.exchange_bytes),
        exchange_bytes_per_s: per_s(|s| s.exchange_bytes),
        server_out_bytes_per_s: per_s(|s| s.out_bytes),
        worker_pushes_per_s: Vec::new(),
    }
}
