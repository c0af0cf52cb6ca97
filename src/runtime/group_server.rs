//! A server rank's role: the one server of bsp, asp and ssp, or a gssp group server with
//! its inter-group exchange (and its part in regrouping). It serves its group's workers on
//! the group's communicator ([`crate::runtime::server::serve`]), exchanges with the other
//! group servers on theirs, and saves the final checkpoint.

use std::time::Duration;

use anyhow::{Context, Result};

use crate::checkpoint::{RankFile, RankMeta};
use crate::comm::p2p::ServerLink;
use crate::comm::{Collectives, SubComm};
use crate::compress::powersgd::TensorShape;
use crate::compress::MirrorDevice;
use crate::compute::backend::Backend;
use crate::compute::model::Trainable;
use crate::compute::optim::{parallel, HostOptimizer, Outer};
use crate::compute::workload::Model;
use crate::config::modes::{release_gate, Regrouping};
use crate::config::Config;
use crate::protocol::costmodel::CostModel;
use crate::protocol::layout::{Layout, Role};
use crate::protocol::param_server::{ParamServer, UpdateRule};
use crate::protocol::wire::HEADER_WORDS;
use crate::runtime::exchange::roll::Roll;
use crate::runtime::exchange::transport::RmaTransport;
use crate::runtime::exchange::GroupExchange;
use crate::runtime::finish::RoleOutcome;
use crate::runtime::peers::{Exchange, NoPeers, SavedPeers};
use crate::runtime::regrouper::Regrouper;
use crate::runtime::saver::{self, Saver};
use crate::runtime::server::{self, Outside, ServeContext, ServeStats};
use crate::runtime::setup::RunContext;
use crate::runtime::shard_meetings::ShardMeetings;
use crate::telemetry::{ServerRow, Snapshots};

/// What a server starts from: the initial weights on the host, and the model's tensors
/// (PowerSGD compresses each matrix on its own).
pub struct ServerModel {
    weights: Vec<f32>,
    tensors: Vec<TensorShape>,
}

impl ServerModel {
    pub fn of<B: Backend>(net: &Model<B>) -> ServerModel {
        let weights = net.params_host_copy();
        let tensors = net
            .param_specs()
            .iter()
            .map(|t| TensorShape::new(t.range.clone(), &t.shape))
            .collect();
        ServerModel { weights, tensors }
    }

    /// The model's weight tensors.
    pub fn tensors(&self) -> &[TensorShape] {
        &self.tensors
    }

    /// The part a server shard holds: `range` of the weights, and no tensors (only
    /// PowerSGD's exchange reads them, and it needs every matrix whole, so it is not
    /// sharded: validated).
    fn shard(self, range: std::ops::Range<usize>) -> ServerModel {
        if range.len() == self.weights.len() {
            return self;
        }
        ServerModel {
            weights: self.weights[range].to_vec(),
            tensors: Vec::new(),
        }
    }
}

/// Serves group `group` (this rank's range of it, with sharded servers), exchanging with
/// the other groups' servers in gssp (shard j with the others' shard j; and
/// regrouping with them, with `sync.gssp.regroup_every_s`); `mirror`: where a gssp server
/// selects its sparse exchanges (`None`: on the host).
pub fn serve_group(
    ctx: &RunContext<'_>,
    group: usize,
    model: ServerModel,
    mirror: Option<Box<dyn MirrorDevice>>,
    snapshots: &mut Snapshots,
    saver: &mut Saver<'_, SubComm>,
) -> Result<RoleOutcome> {
    let (cfg, layout) = (ctx.cfg, ctx.layout);
    let rank = ctx.comm.rank();
    let mode = cfg.sync.strategy();
    // gssp with one group has no peers to exchange with: it is ssp with a group server.
    let exchanges = mode.exchanges() && layout.servers.len() > 1;
    let params = model.weights.len();
    let range = layout.served_range(rank, params);
    let model = model.shard(range.clone());
    let n = model.weights.len();
    // Every shard predicts with the whole model, so that all take the same decision.
    let mut regroup = mode
        .regrouping(&cfg.sync)
        .filter(|_| exchanges)
        .map(|every| regrouper(ctx, group, every, params));
    let (slots, ranks) = slots_of(layout, group, regroup.as_ref());
    let batches = batches_per_slot(layout, &ranks);
    let group_comm = ctx
        .comms
        .group
        .as_ref()
        .context("server without its group's communicator")?;
    let mut link = ServerLink::new(group_comm, &slots, HEADER_WORDS, n)?.with_copy(parallel::copy);
    let mut ps = param_server(cfg, layout, group, model.weights, slots.len());
    let resumed = restore(ctx, (group, range.clone()), &mut ps, snapshots)?;
    // After the restore, which sets every slot's clock.
    for (w, _) in slots.iter().enumerate().filter(|(_, s)| s.is_none()) {
        ps.leave(w);
    }
    let mut log = ctx
        .run
        .csv_continued::<ServerRow>(&format!("rank-{rank}.csv"))?;
    let serve_ctx = ServeContext {
        cfg,
        train_len: ctx.corpus.train_len(),
        start: ctx.start,
        show_progress: rank == 0,
        worker_ranks: &ranks,
        resumed_pushes: resumed.as_ref().map(|f| f.meta.steps),
        batches_per_push: &batches,
        stop_after: ctx.faults.server_stop_after,
    };
    let mut outcome = RoleOutcome::default();
    let mut meetings = shard_meetings(ctx, regroup.is_some())?;
    let served = (&mut link, &mut ps, &serve_ctx);
    let (stats, known) = match exchanges {
        true => {
            let what = (&model.tensors[..], mirror, resumed);
            let mut ex = exchange_for(ctx, rank, served.1.weights(), what)?;
            ex.count_batches(batches_per_group_push(layout));
            let roll = Roll::new(
                layout.servers.clone(),
                layout.groups.clone(),
                regroup.is_some(),
            );
            ex.name_groups(roll);
            let outside = Outside {
                peers: &mut ex,
                regroup: regroup.as_mut(),
                shards: meetings.as_mut(),
            };
            let stats = server::serve(
                served.0, served.1, served.2, outside, &mut log, snapshots, saver,
            )?;
            outcome.regroups = regroup.map(|r| r.history).unwrap_or_default();
            let own = serve_ctx.resumed_pushes.unwrap_or(0) + stats.pushes;
            let known = finish_exchange(ex, served.1, own, &mut outcome)?;
            (stats, known)
        }
        false => {
            let outside = Outside {
                peers: &mut NoPeers,
                regroup: None,
                shards: meetings.as_mut(),
            };
            let stats = server::serve(
                served.0, served.1, served.2, outside, &mut log, snapshots, saver,
            )?;
            let own = serve_ctx.resumed_pushes.unwrap_or(0) + stats.pushes;
            (stats, NoPeers.saved_state(own))
        }
    };
    log.flush()?;
    let own_pushes = serve_ctx.resumed_pushes.unwrap_or(0) + stats.pushes;
    save_final(ctx, saver, &ps, (&stats, own_pushes, known), snapshots)?;
    outcome.bytes_sent = link.stats().bytes_sent + outcome.bytes_inter_group;
    outcome.server = Some(stats);
    if let Some(outer) = ps.outer() {
        outcome.outer_steps = outer.steps();
    }
    outcome.final_weights = Some(ps.weights().to_vec());
    Ok(outcome)
}

/// The meetings of every server rank, with sharded servers that take periodic checkpoints
/// or regroup (`None` otherwise: the peers hold the meetings, `runtime::shard_meetings`).
fn shard_meetings<'w>(ctx: &RunContext<'w>, regrouping: bool) -> Result<Option<ShardMeetings<'w>>> {
    let layout = ctx.layout;
    let meets = regrouping || ctx.cfg.run.checkpoint_every_s > 0.0;
    if layout.shards_per_group() == 1 || !meets {
        return Ok(None);
    }
    let mut ranks: Vec<usize> = layout.servers.clone();
    ranks.extend(layout.shards.iter().flatten());
    ranks.sort_unstable();
    let timeout = Duration::from_secs_f64(ctx.cfg.run.meeting_timeout_s);
    let comm = ctx.servers()?;
    Ok(Some(ShardMeetings::new(
        comm,
        (ranks, &layout.servers),
        ctx.comm.size(),
        timeout,
    )))
}

/// The regrouping of group `group`'s server (this rank's shard of it), meeting from now on.
fn regrouper<'w>(
    ctx: &RunContext<'w>,
    group: usize,
    regrouping: Regrouping,
    params: usize,
) -> Regrouper<'w> {
    let every = (regrouping.every_s, regrouping.min_gain);
    let from = ctx.start.elapsed().as_secs_f64();
    let model = CostModel::new(ctx.cfg, params);
    let shard = shard_of(ctx);
    Regrouper::new(ctx.comm, ctx.layout, (group, shard), every, (model, from))
}

/// A server's worker slots (each's rank on the group's communicator) and their world
/// ranks. A regrouping server has a slot for every worker of the run, absent while in
/// another group; otherwise its slots are its group's workers, in the order of its
/// communicator.
fn slots_of(
    layout: &Layout,
    group: usize,
    regroup: Option<&Regrouper<'_>>,
) -> (Vec<Option<usize>>, Vec<usize>) {
    match regroup {
        Some(r) => (r.initial_slots(layout), r.slot_ranks().to_vec()),
        None => {
            let mut members = layout.groups[group].clone();
            members.sort_unstable();
            ((1..=members.len()).map(Some).collect(), members)
        }
    }
}

/// The batches a push of each of `ranks` (a server's slots, by world rank) stands for:
/// its local steps (empty where pushes are one batch each).
pub fn batches_per_slot(layout: &Layout, ranks: &[usize]) -> Vec<usize> {
    if layout.local_steps.is_empty() {
        return Vec::new();
    }
    let workers = layout.worker_ranks();
    let steps_of = |r: &usize| {
        let i = workers.iter().position(|w| w == r);
        i.and_then(|i| layout.local_steps.get(i))
            .copied()
            .unwrap_or(1)
    };
    ranks.iter().map(steps_of).collect()
}

/// The mean batches a push of each group stands for (its workers' local steps; 1 without
/// them): a peer's pushes, so weighted, count its batches towards the run's epochs.
pub fn batches_per_group_push(layout: &Layout) -> Vec<f64> {
    layout
        .groups
        .iter()
        .map(|g| {
            let steps = batches_per_slot(layout, g);
            match steps.is_empty() {
                true => 1.0,
                false => steps.iter().sum::<usize>() as f64 / steps.len() as f64,
            }
        })
        .collect()
}

/// Group `group`'s server's state from the checkpoint a run resumes from (replica,
/// optimizer, clocks, snapshots); what else it saved, `None` for a fresh run.
fn restore(
    ctx: &RunContext<'_>,
    (group, range): (usize, std::ops::Range<usize>),
    ps: &mut ParamServer,
    snapshots: &mut Snapshots,
) -> Result<Option<RankFile<RankMeta>>> {
    let Some(r) = ctx.resume else {
        return Ok(None);
    };
    let every_s = ctx.cfg.run.snapshot_every_s;
    // Each shard restores its own file (its range); an unsharded server is its group's rank.
    let rank = ctx.comm.rank();
    let sizes: Vec<usize> = ctx.layout.groups.iter().map(Vec::len).collect();
    let (file, restored) = saver::restore_server(r, (rank, range), ps, every_s, (group, &sizes))?;
    let first = ctx.layout.servers[group];
    // Resumed on its own ranks, each shard's file must be at its first shard's point; a
    // rescaled one is cut from one merged model.
    if rank != first && r.rescale.is_none() {
        let theirs = r.load(first)?;
        let paths = (r.path(rank), r.path(first));
        saver::shards_agree(&file.meta, &theirs.meta, paths)?;
    }
    *snapshots = restored;
    Ok(Some(file))
}

/// A device a group server selects its sparse exchanges on.
type Mirror = Box<dyn MirrorDevice>;

/// The inter-group exchange of server `rank`, starting from `weights` (collective over
/// the group servers), selecting on `mirror` when given and continuing from the resumed
/// checkpoint's counts.
fn exchange_for<'c>(
    ctx: &RunContext<'c>,
    rank: usize,
    weights: &[f32],
    (tensors, mirror, resumed): (&[TensorShape], Option<Mirror>, Option<RankFile<RankMeta>>),
) -> Result<GroupExchange<RmaTransport<'c>>> {
    let mut ex = one_shard_at_a_time(ctx, || {
        GroupExchange::new(ctx.exchange()?, ctx.cfg, weights, tensors)
    })?;
    if let Some(device) = mirror {
        ex.select_on(device);
    }
    if let (Some(mut file), Some(r)) = (resumed, ctx.resume) {
        let path = r.path(rank);
        ex.resume(&mut file, &path)
            .with_context(|| path.display().to_string())?;
    }
    Ok(ex)
}

/// Runs `create` (collective over this shard's exchange communicator) for shard 0 of every
/// group first, then shard 1, and so on (barriers on the servers' communicator between).
///
/// Why: the exchange communicators of the shards come from one split, so they share a
/// context id, and OpenMPI's osc/rdma names a window's shared-memory segment after the node,
/// the job and that id. Two shards creating their windows on one node at once then open
/// one segment between them, and their window locks never come free (a hang seen in one
/// run of four with 2 groups x 2 shards). One shard at a time, each segment is created,
/// mapped and unlinked before the next shard names it.
fn one_shard_at_a_time<T>(ctx: &RunContext<'_>, create: impl FnOnce() -> Result<T>) -> Result<T> {
    let shards = ctx.layout.shards_per_group();
    if shards == 1 {
        return create();
    }
    let (mine, servers) = (shard_of(ctx), ctx.servers()?);
    let (mut create, mut created) = (Some(create), None);
    for j in 0..shards {
        if let Some(create) = create.take_if(|_| j == mine) {
            created = Some(create()?);
        }
        servers.barrier()?;
    }
    created.context("a server rank that is no shard of its group")
}

/// Which shard of its group's server this rank is (0 without shards).
fn shard_of(ctx: &RunContext<'_>) -> usize {
    match ctx.layout.role(ctx.comm.rank()) {
        Role::Shard { shard, .. } => shard,
        _ => 0,
    }
}

/// The exchange's end (final flush and the check that nothing was lost) and its figures;
/// returns what the final checkpoint saves of it, after the final drain (this server's
/// pushes are `own_pushes`).
fn finish_exchange(
    mut ex: GroupExchange<RmaTransport<'_>>,
    ps: &mut ParamServer,
    own_pushes: u64,
    outcome: &mut RoleOutcome,
) -> Result<SavedPeers> {
    outcome.replica_error = Some(ex.finish(ps)?);
    outcome.bytes_inter_group = ex.bytes_sent();
    outcome.exchanges_deferred = ex.deferred();
    outcome.arrival_drains = ex.arrival_drains();
    let known = ex.saved_state(own_pushes);
    outcome.outer_steps = known.outer_steps;
    ex.close()?;
    Ok(known)
}

/// The update rule of group `group`'s server with `slots` worker slots, starting from
/// `weights`, as the mode's strategy gives it: its bound (none, bsp's lockstep, or the
/// group's from the layout), how it applies a push, the outer optimizer it steps changes
/// through and the weight of a change.
pub fn param_server(
    cfg: &Config,
    layout: &Layout,
    group: usize,
    weights: Vec<f32>,
    slots: usize,
) -> ParamServer {
    let (sync, mode) = (&cfg.sync, cfg.sync.strategy());
    let n = weights.len();
    let rule = UpdateRule {
        workers: slots,
        total_workers: layout.groups.iter().map(Vec::len).sum(),
        bound: release_gate(mode.bound().of_group(layout.staleness[group]), sync.overlap),
        apply: mode.apply(sync),
        momentum: cfg.optim.momentum,
        weight_decay: cfg.optim.weight_decay,
        staleness_lr: cfg.optim.staleness_lr,
        delay_compensation: cfg.optim.delay_compensation,
        clip_norm: cfg.optim.clip_norm,
        reads_ahead: sync.overlap,
    };
    let outer = mode.outer(sync).and_then(|o| Outer::new(&o, n, slots));
    // gssp's local steps: a change is worth its H steps at the workers' lr, taken at 1/W
    // as a gradient push is (module docs of `runtime::local_worker`).
    let delta_scale = match mode.changes_per_worker(sync) {
        true => 1.0 / rule.total_workers.max(1) as f32,
        false => 1.0,
    };
    ParamServer::new(weights, rule)
        .with_optimizer(HostOptimizer::new(&cfg.optim, n))
        .with_outer(outer)
        .with_delta_scale(delta_scale)
}

/// The final checkpoint, at the latest server's clock: after the final flush every
/// replica holds every update. `own_pushes` counts the whole run's.
fn save_final(
    ctx: &RunContext<'_>,
    saver: &mut Saver<'_, SubComm>,
    ps: &ParamServer,
    (stats, own_pushes, known): (&ServeStats, u64, SavedPeers),
    snapshots: &Snapshots,
) -> Result<()> {
    let time_s = saver
        .comm
        .allreduce_max_f64(ctx.start.elapsed().as_secs_f64())?;
    let at = (own_pushes, stats.epoch, time_s);
    server::save(saver, ps, known, at, snapshots)
}
