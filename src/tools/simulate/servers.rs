//! The parameter-server modes on the simulated clock (bsp, asp and DC-ASGD, ssp,
//! async-localsgd, gssp), as `runtime::server` and the worker loops run them: each group's
//! server is the runtime's [`ParamServer`] (built by [`param_server`]: its SSP clock, update
//! rule, delay compensation, outer optimizer), a first-in first-out resource that takes a
//! push, applies it, exchanges with its peers every `inter_group_every` pushes, and answers
//! the workers its clock releases, one reply after another; each reply's worker computes
//! its next push on the weights it carries (a gradient, or the change of its local steps on
//! its own replica with its own momentum) and sends it back.
//!
//! Times follow `gssp plan`'s engine: a push reaches its server `latency + (S - 1)/S` of a
//! whole push after its worker sends it (shards `S`), the server spends a shard's share of
//! the push, the apply and, every `inter_group_every` pushes, the exchange, then a reply's
//! share per worker it answers; the k-th reply arrives `latency + k x burst_s` after it left.

use std::collections::VecDeque;

use anyhow::{Context, Result};

use super::events::Events;
use super::fleet::{Fleet, Loaded};
use super::group::{GroupServer, Networks};
use super::setup::worker_of;
use super::Sim;
use crate::compress::bf16;
use crate::compute::backend::cpu::Cpu;
use crate::compute::model::Trainable;
use crate::compute::optim::{self, NetworkOptimizer};
use crate::config::Precision;
use crate::runtime::group_server::{batches_per_slot, ServerModel};
use crate::runtime::messages::PushRef;
use crate::runtime::server::check_push;
use crate::telemetry::{ServerRow, WorkerRow};

/// What a server-mode run ends with.
pub struct Ended {
    /// The model to evaluate: the one server's weights, or the average of the replicas.
    pub weights: Vec<f32>,
    pub wall_s: f64,
    /// The furthest any server counted the run's epochs.
    pub epochs: f64,
    pub servers: Vec<ServerTotals>,
    /// gssp with several groups: the replicas' largest departure from the initial weights
    /// plus every update sent, after the final flush (0 up to rounding: nothing lost).
    pub replica_error: Option<f64>,
    /// Bytes the group servers sent each other.
    pub bytes_inter_group: u64,
}

/// One server's totals.
#[derive(Debug, Clone, Copy, Default)]
pub struct ServerTotals {
    pub pushes: u64,
    pub busy_s: f64,
    pub staleness_sum: u64,
}

/// An event of the servers' run.
#[derive(Debug, Clone, Copy)]
enum Event {
    /// Worker `w`'s push reaches its server.
    Arrive { w: usize },
    /// Server `g` is free to take the next push of its queue.
    Serve { g: usize },
}

/// A worker between its pushes.
struct Worker {
    /// Its server and its slot there.
    server: usize,
    slot: usize,
    /// Its next push (a gradient, or a change), computed when it got its weights.
    push: Vec<f32>,
    loss: f32,
    /// Its clock (iterations computed, local steps included) and the push's.
    clock: u64,
    /// When it received the weights its push is computed on, when its push went out, and
    /// the compute it took.
    received_s: f64,
    sent_s: f64,
    compute_s: f64,
    /// 16-bit pushes: what rounding dropped, carried into the next push.
    encoder: Option<bf16::Encoder>,
    /// Local steps: its own optimizer (its momentum across pushes).
    optimizer: Option<NetworkOptimizer<Cpu>>,
    /// Its local steps per push (1: a gradient).
    local_steps: usize,
    stopped: bool,
}

/// A group's server and its place in the run: its queue, clock of work, counts.
struct Server {
    group: GroupServer,
    /// Worker index of each slot.
    members: Vec<usize>,
    /// The batches each slot's push stands for (empty: one each).
    batches_per_slot: Vec<usize>,
    queue: VecDeque<usize>,
    free_at: f64,
    serving: bool,
    /// Changes of its weights so far (pushes and drains), for the workers' loads.
    generation: u64,
    pushes: u64,
    batches: u64,
    epoch: f64,
    stopping: bool,
    totals: ServerTotals,
    snapshots: crate::telemetry::Snapshots,
    /// Its whole model, its shards' ranges laid end to end, as last assembled.
    whole: Vec<f32>,
    ready: Vec<usize>,
}

/// The timing figures of one push's round trip (the cost model's, a shard's share).
struct Timing {
    latency: f64,
    push_share: f64,
    whole_push: f64,
    reply_share: f64,
    apply: f64,
    exchange: f64,
    exchange_every: u64,
    burst: f64,
}

/// Runs `sim`'s servers and workers until every worker has been told to stop.
pub fn run(sim: &mut Sim<'_>) -> Result<Ended> {
    let cfg = sim.cfg;
    let layout = &sim.layout;
    let mode = cfg.sync.strategy();
    let n = sim.fleet.net_params();
    let initial = sim.fleet.net().params_host_copy();
    let shards = layout.shards_per_group().max(1) as f64;
    let timing = Timing {
        latency: sim.cost.latency_s,
        push_share: sim.cost.push_s() / shards,
        whole_push: sim.cost.push_s(),
        reply_share: sim.cost.reply_s() / shards,
        apply: n as f64 * sim.cost.apply_s_per_param / shards
            * (1.0 + f64::from(u8::from(cfg.optim.delay_compensation > 0.0))),
        exchange: sim.cost.exchange_s(layout.servers.len()) / shards,
        exchange_every: sim.cost.exchange_every.max(1) as u64,
        burst: sim.burst_s,
    };
    let local = mode.local_steps(&cfg.sync).is_some();
    let worker_ranks = layout.worker_ranks();
    let mut workers: Vec<Option<Worker>> = (0..sim.fleet.len()).map(|_| None).collect();
    let mut servers = Vec::with_capacity(layout.servers.len());
    for (g, group) in layout.groups.iter().enumerate() {
        let mut members = group.clone();
        members.sort_unstable();
        let group_server = GroupServer::new(cfg, layout, g, &initial, members.len());
        for (slot, &rank) in members.iter().enumerate() {
            let w = worker_of(layout, rank);
            let steps = match local {
                false => 1,
                true => worker_ranks
                    .iter()
                    .position(|&r| r == rank)
                    .and_then(|i| layout.local_steps.get(i))
                    .copied()
                    .unwrap_or(1)
                    .max(1),
            };
            workers[w] = Some(Worker {
                server: g,
                slot,
                push: vec![0.0; n],
                loss: 0.0,
                clock: 0,
                received_s: 0.0,
                sent_s: 0.0,
                compute_s: 0.0,
                encoder: (cfg.compression.push == Precision::Bf16).then(|| bf16::Encoder::new(n)),
                optimizer: local.then(|| NetworkOptimizer::new(sim.fleet.net(), &cfg.optim)),
                local_steps: steps,
                stopped: false,
            });
        }
        servers.push(Server {
            batches_per_slot: batches_per_slot(layout, &members),
            group: group_server,
            members: members.iter().map(|&r| worker_of(layout, r)).collect(),
            queue: VecDeque::new(),
            free_at: sim.start_s,
            serving: false,
            generation: 0,
            pushes: 0,
            batches: 0,
            epoch: 0.0,
            stopping: false,
            totals: ServerTotals::default(),
            snapshots: crate::telemetry::Snapshots::new(cfg.run.snapshot_every_s),
            whole: Vec::new(),
            ready: Vec::new(),
        });
    }
    let model = ServerModel::of(sim.fleet.net());
    let link = (sim.cost.latency_s, sim.cost.bytes_per_s);
    let mut groups = take_groups(&mut servers);
    let nets = GroupServer::connect(cfg, layout, &mut groups, (&model, link))?;
    for (s, g) in servers.iter_mut().zip(groups) {
        s.group = g;
    }
    let mut workers: Vec<Worker> = workers
        .into_iter()
        .enumerate()
        .map(|(w, x)| x.with_context(|| format!("worker {w} is in no group")))
        .collect::<Result<_>>()?;
    let mut engine = Engine {
        sim,
        timing,
        nets,
        events: Events::default(),
        samples_per_push: 0.0,
        reply: Vec::new(),
        wall_s: 0.0,
    };
    engine.samples_per_push = cfg.optim.batch_size as f64 / engine.sim.train_len() as f64;
    // Every worker's first weights, as a server's first answer sends them.
    for (g, server) in servers.iter_mut().enumerate() {
        let slots: Vec<usize> = (0..server.members.len()).collect();
        let start = engine.sim.start_s;
        engine.answer(g, server, &mut workers, &slots, start)?;
    }
    while let Some((t, event)) = engine.events.pop() {
        match event {
            Event::Arrive { w } => {
                let g = workers[w].server;
                let server = &mut servers[g];
                server.queue.push_back(workers[w].slot);
                if !server.serving {
                    server.serving = true;
                    engine.events.at(t.max(server.free_at), Event::Serve { g });
                }
            }
            Event::Serve { g } => {
                let server = &mut servers[g];
                let Some(slot) = server.queue.pop_front() else {
                    server.serving = false;
                    continue;
                };
                engine.serve(g, server, &mut workers, slot, t)?;
                match server.queue.is_empty() {
                    true => server.serving = false,
                    false => engine.events.at(server.free_at, Event::Serve { g }),
                }
            }
        }
    }
    let wall_s = engine.wall_s;
    let mut groups = take_groups(&mut servers);
    let (replica_error, bytes_inter_group) =
        GroupServer::finish(&mut groups, &engine.nets, wall_s)?;
    let epochs = servers.iter().map(|s| s.epoch).fold(0.0, f64::max);
    let wholes: Vec<Vec<f32>> = groups
        .iter()
        .map(|g| {
            let mut w = Vec::new();
            g.weights_into(&mut w);
            w
        })
        .collect();
    let weights = average(wholes.iter().map(Vec::as_slice), n);
    engine.sim.recorder.snapshots.taken = average_snapshots(&mut servers, n);
    Ok(Ended {
        weights,
        wall_s,
        epochs,
        servers: servers.iter().map(|s| s.totals).collect(),
        replica_error,
        bytes_inter_group,
    })
}

/// The servers' groups, taken out of them (an empty group server left in each).
fn take_groups(servers: &mut [Server]) -> Vec<GroupServer> {
    servers
        .iter_mut()
        .map(|s| std::mem::replace(&mut s.group, GroupServer::empty()))
        .collect()
}

/// The servers' snapshots averaged index by index (those every server took; the i-th of
/// each is of the i-th interval), each row as the first server took it at the latest
/// server's time: the model a run evaluates at each snapshot.
fn average_snapshots(
    servers: &mut [Server],
    n: usize,
) -> Vec<(crate::telemetry::EvalRow, Vec<f32>)> {
    let count = servers
        .iter()
        .map(|s| s.snapshots.taken.len())
        .min()
        .unwrap_or(0);
    (0..count)
        .map(|i| {
            // The latest server's time: each took its copy at its first push of the interval.
            let mut row = servers[0].snapshots.taken[i].0;
            row.time_s = servers
                .iter()
                .map(|s| s.snapshots.taken[i].0.time_s)
                .fold(row.time_s, f64::max);
            let weights = average(servers.iter().map(|s| s.snapshots.taken[i].1.as_slice()), n);
            (row, weights)
        })
        .collect()
}

/// The mean of the servers' replicas.
fn average<'a>(replicas: impl Iterator<Item = &'a [f32]>, n: usize) -> Vec<f32> {
    let mut sum = vec![0.0f32; n];
    let mut count = 0;
    for r in replicas {
        sum.iter_mut().zip(r).for_each(|(s, v)| *s += v);
        count += 1;
    }
    let scale = 1.0 / count.max(1) as f32;
    sum.iter_mut().for_each(|s| *s *= scale);
    sum
}

/// The servers' run in progress.
struct Engine<'s, 'a> {
    sim: &'s mut Sim<'a>,
    timing: Timing,
    /// gssp with several groups: the servers' networks, one per shard index.
    nets: Networks,
    events: Events<Event>,
    samples_per_push: f64,
    /// The weights a reply carries (rounded to bfloat16 with `compression.reply`).
    reply: Vec<f32>,
    /// When the last worker was told to stop.
    wall_s: f64,
}

impl Engine<'_, '_> {
    /// Server `g` takes the push of `slot` at `t`: applies it, counts it, exchanges, takes
    /// a snapshot when due, decides the stop, answers.
    fn serve(
        &mut self,
        g: usize,
        server: &mut Server,
        workers: &mut [Worker],
        slot: usize,
        t: f64,
    ) -> Result<()> {
        let cfg = self.sim.cfg;
        let w = server.members[slot];
        let worker = &workers[w];
        let push = PushRef {
            worker: slot,
            clock: worker.clock,
            loss: worker.loss,
            payload: &worker.push,
            receive_s: 0.0,
            receive_cpu_s: 0.0,
        };
        let rank = super::setup::rank_of(&self.sim.layout, w);
        check_push(&push, rank, server.pushes, cfg.optim.lr)?;
        let time_s = t + self.timing.push_share;
        let progress = cfg.run.progress(server.epoch, time_s);
        let lr = optim::lr_at(&cfg.optim, server.epoch, progress);
        let (applied, stepped) = server.group.apply(slot, &worker.push, lr).map_err(|e| {
            anyhow::anyhow!(
                "worker {w}, its iteration {}: {e}; lower optim.lr (now {})",
                worker.clock,
                cfg.optim.lr
            )
        })?;
        server.pushes += 1;
        server.batches += server.batches_per_slot.get(slot).copied().unwrap_or(1) as u64;
        let mut end = time_s + self.timing.apply;
        let (pushes_now, epoch_now) = (server.pushes, server.epoch);
        let exchanged = server
            .group
            .exchange(pushes_now, (epoch_now, end), &self.nets)?;
        let exchanges = self.sim.layout.servers.len() > 1;
        if exchanges && server.pushes.is_multiple_of(self.timing.exchange_every) {
            end += self.timing.exchange;
        }
        server.generation += 1;
        let pushes = server.group.global_pushes(server.batches);
        server.epoch = pushes as f64 * self.samples_per_push;
        if server.snapshots.due(end) {
            server.group.weights_into(&mut server.whole);
            server
                .snapshots
                .maybe_take(end, server.epoch, pushes, &server.whole);
        }
        server.stopping |= stepped && cfg.run.should_stop(server.epoch, end);
        server.totals.pushes += 1;
        server.totals.staleness_sum += applied.staleness;
        server.totals.busy_s += end - t;
        if server
            .pushes
            .is_multiple_of(cfg.run.log_every.max(1) as u64)
        {
            self.sim.recorder.server(
                g,
                &ServerRow {
                    time_s: end,
                    epoch: server.epoch,
                    pushes: server.pushes,
                    version: server.group.lead().version(),
                    worker: slot,
                    staleness: applied.staleness,
                    clock_spread: server.group.lead().clock().spread(),
                    apply_s: self.timing.apply,
                    receive_s: self.timing.push_share,
                    exchange_s: end - time_s - self.timing.apply,
                    loss: worker.loss,
                    lr: applied.lr,
                    ratio: exchanged.ratio,
                    sent_bytes: exchanged.sent_bytes,
                    drained_from: exchanged.drained_from,
                    ..ServerRow::default()
                },
            )?;
        }
        server.free_at = end;
        server.ready.clear();
        if server.stopping {
            // Each worker is told once: a retired worker stays waiting on the clock.
            let v: Vec<usize> = (0..server.members.len())
                .filter(|&s| server.group.lead().clock().is_waiting(s))
                .filter(|&s| !workers[server.members[s]].stopped)
                .collect();
            for s in v {
                server.group.retire(s);
                let w = server.members[s];
                workers[w].stopped = true;
                let told = server.free_at + self.timing.reply_share + self.timing.latency;
                self.wall_s = self.wall_s.max(told);
                let staleness = server.group.lead().last_staleness(s);
                self.record(w, &workers[w], told, staleness)?;
            }
            return Ok(());
        }
        let mut ready = std::mem::take(&mut server.ready);
        server.group.release(&mut ready);
        let released = ready.clone();
        server.ready = ready;
        let t_answer = server.free_at;
        self.answer(g, server, workers, &released, t_answer)
    }

    /// Server `g` answers `slots` from `t` on with its weights, one reply after another;
    /// each worker computes its next push on them and sends it.
    fn answer(
        &mut self,
        g: usize,
        server: &mut Server,
        workers: &mut [Worker],
        slots: &[usize],
        t: f64,
    ) -> Result<()> {
        let cfg = self.sim.cfg;
        server.group.weights_into(&mut server.whole);
        let weights = match cfg.compression.reply {
            Precision::F32 => &server.whole,
            Precision::Bf16 => {
                let mut packed = Vec::new();
                bf16::pack_rounded(&server.whole, &mut packed);
                self.reply.resize(server.whole.len(), 0.0);
                bf16::decode(&packed, &mut self.reply).context("a 16-bit reply")?;
                &self.reply
            }
        };
        let tag = Some(Loaded {
            source: g,
            generation: server.generation,
        });
        let mut left = t;
        for (k, &slot) in slots.iter().enumerate() {
            left += self.timing.reply_share;
            let arrives = left + self.timing.latency + k as f64 * self.timing.burst;
            let w = server.members[slot];
            let worker = &mut workers[w];
            if worker.clock > 0 {
                let staleness = server.group.lead().last_staleness(slot);
                Self::record_row(self.sim, w, worker, arrives, staleness)?;
            }
            worker.received_s = arrives;
            compute_push(
                &mut self.sim.fleet,
                worker,
                w,
                (weights, tag),
                (cfg, arrives),
            )?;
            let sent = arrives + worker.compute_s;
            worker.sent_s = sent;
            let to_server = self.timing.latency + self.timing.whole_push - self.timing.push_share;
            self.events.at(sent + to_server, Event::Arrive { w });
        }
        server.totals.busy_s += left - t;
        server.free_at = server.free_at.max(left);
        Ok(())
    }

    /// Worker `w`'s row for the push it was told to stop after.
    fn record(&mut self, w: usize, worker: &Worker, at: f64, staleness: u64) -> Result<()> {
        Self::record_row(self.sim, w, worker, at, staleness)
    }

    /// Worker `w`'s row for its last push, answered at `at` (as its process logs it once
    /// the answer is in).
    fn record_row(
        sim: &mut Sim<'_>,
        w: usize,
        worker: &Worker,
        at: f64,
        staleness: u64,
    ) -> Result<()> {
        let n = worker.push.len() as u64;
        let row = WorkerRow {
            time_s: at,
            epoch: sim.fleet.shard(w).epoch(),
            iteration: worker.clock,
            compute_s: worker.compute_s,
            wait_s: at - worker.sent_s,
            comm_s: 0.0,
            bytes_sent: 4 * n,
            bytes_recv: 4 * n,
            staleness,
            loss: worker.loss,
            lr: None,
            batch: sim.fleet.shard(w).batch(),
        };
        sim.recorder.worker(w, row)
    }
}

/// Worker `w`'s next push on `weights` (received at `arrives`): the gradient of its next
/// batch, or the change its local steps make to them; rounded to bfloat16 with error
/// feedback where pushes are 16-bit. Sets its compute time and clock.
fn compute_push(
    fleet: &mut Fleet<'_>,
    worker: &mut Worker,
    w: usize,
    (weights, tag): (&[f32], Option<Loaded>),
    (cfg, arrives): (&crate::config::Config, f64),
) -> Result<()> {
    fleet.load(weights, tag);
    let mut compute_s = 0.0;
    match worker.optimizer.as_mut() {
        None => {
            worker.loss = fleet.step(w)?;
            compute_s += fleet.compute_s(w, Some(arrives));
            worker.push.copy_from_slice(fleet.grads());
            worker.clock += 1;
        }
        Some(optimizer) => {
            for _ in 0..worker.local_steps {
                worker.loss = fleet.step(w)?;
                compute_s += fleet.compute_s(w, Some(arrives + compute_s));
                let epoch = fleet.shard(w).epoch();
                let time_s = arrives + compute_s;
                let lr = optim::lr_at(&cfg.optim, epoch, cfg.run.progress(epoch, time_s));
                worker.clock += 1;
                optimizer.step(fleet.net_mut(), lr, 1.0).map_err(|e| {
                    anyhow::anyhow!("worker {w}'s local step {}: {e}", worker.clock)
                })?;
            }
            let params = fleet.net().params();
            worker
                .push
                .iter_mut()
                .zip(params.iter().zip(weights))
                .for_each(|(c, (p, r))| *c = p - r);
        }
    }
    if let Some(encoder) = worker.encoder.as_mut() {
        let mut packed = Vec::new();
        encoder.encode(&worker.push, &mut packed);
        bf16::decode(&packed, &mut worker.push).context("a 16-bit push")?;
    }
    worker.compute_s = compute_s;
    Ok(())
}
