//! A distributed run: set up ([`crate::runtime::setup`]), each rank plays its role, then
//! rank 0 evaluates and summarises ([`crate::runtime::finish`]). This module only
//! dispatches.

use anyhow::{Context, Result};

use crate::checkpoint::Resume;
use crate::comm::{Collectives, Comm, SubComm};
use crate::compute::backend::cpu::Cpu;
use crate::compute::backend::Backend;
use crate::compute::model::Trainable;
use crate::config::Config;
use crate::protocol::layout::{Layout, Role};
use crate::protocol::placement::Placement;
use crate::runtime::collective;
use crate::runtime::finish::{finish, RoleOutcome};
use crate::runtime::group_server::{serve_group, ServerModel};
use crate::runtime::local_worker;
use crate::runtime::setup::{self, RankBackend, RunContext, Setup};
use crate::runtime::shard_links::ShardLinks;
use crate::runtime::worker::{self, WorkerContext};
use crate::telemetry::{RunDir, Snapshots, Summary};

/// Runs `cfg` on all ranks of `comm`, from `resume`'s checkpoint when given. Every rank
/// returns; rank 0 returns the summary.
pub fn run(
    comm: &Comm,
    cfg: &Config,
    run: &RunDir,
    resume: Option<&Resume>,
) -> Result<Option<Summary>> {
    crate::compute::backend::cpu::set_threads(cfg.run.threads);
    emulate_network(comm, cfg)?;
    match setup::choose_backend(comm, cfg)? {
        RankBackend::Cpu => run_on(Cpu, comm, cfg, run, resume),
        #[cfg(feature = "cuda")]
        RankBackend::Cuda(cuda) => {
            log::info!("rank {}: device {}", comm.rank(), cuda.describe());
            run_on(cuda, comm, cfg, run, resume)
        }
    }
}

/// Charges this rank's messages to an emulated link (`heterogeneity.link_gbps`), shared
/// with the ranks `cluster.ranks_per_node` and `cluster.distribution` put on its node.
fn emulate_network(comm: &Comm, cfg: &Config) -> Result<()> {
    let gbps = cfg.heterogeneity.link_gbps;
    let placement = Placement::of(&cfg.cluster);
    let (rank, world) = (comm.rank(), comm.size());
    placement.check(world).map_err(anyhow::Error::msg)?;
    if gbps > 0.0 && placement.shares_nodes(world) {
        crate::comm::share_link(comm, gbps, placement.node_of(rank, world))?;
        if rank == 0 {
            log::info!(
                "emulated network: {world} ranks on {} nodes of up to {} ({}), each node's ranks sharing one {gbps} Gbit/s link",
                placement.node_count(world),
                placement.ranks_per_node(world),
                placement.distribution.name()
            );
        }
    } else {
        crate::comm::emulate_link(gbps);
    }
    Ok(())
}

/// [`run`], this rank computing on `be`.
fn run_on<B: Backend>(
    be: B,
    comm: &Comm,
    cfg: &Config,
    run: &RunDir,
    resume: Option<&Resume>,
) -> Result<Option<Summary>> {
    let Setup {
        corpus,
        mut step,
        mut pacer,
        layout,
        role,
        comms,
        done,
        faults,
        mirror,
        start,
    } = setup::prepare(be, comm, cfg, run, resume)?;
    let ctx = RunContext {
        comm,
        cfg,
        run,
        layout: &layout,
        corpus: &corpus,
        comms: &comms,
        start,
        resume,
        faults,
    };
    let mut snapshots = Snapshots::new(cfg.run.snapshot_every_s);
    let mut trainer = Trainer {
        step: &mut step,
        pacer: &mut pacer,
        done,
    };
    let outcome = match role {
        // A server rank the chosen group count left over: nothing to do until the end.
        Role::Idle => RoleOutcome::default(),
        Role::Collective => play_collective(&ctx, &mut trainer, &mut snapshots)?,
        Role::Server { group } | Role::Shard { group, .. } => {
            let mut saver = ctx.saver(ctx.servers()?);
            let model = ServerModel::of(&trainer.step.net);
            let outcome = serve_group(&ctx, group, model, mirror, &mut snapshots, &mut saver)?;
            if comm.rank() == 0 && !outcome.regroups.is_empty() {
                run.write_json("regroups.json", &outcome.regroups)?;
            }
            outcome
        }
        Role::Worker { .. } => play_worker(&ctx, &mut trainer)?,
    };
    comm.barrier()?;
    finish(&ctx, &mut step, outcome, snapshots)
}

/// What a rank that trains brings to its role: its model and data, its emulated speed,
/// and the iterations it did before the checkpoint a run resumed from.
struct Trainer<'a, B: Backend> {
    step: &'a mut crate::compute::workload::ComputeStep<B>,
    pacer: &'a mut crate::compute::pace::Pacer,
    done: u64,
}

impl<B: Backend> Trainer<'_, B> {
    /// The worker's view of this rank, logging to `log`.
    fn context<'s>(
        &'s mut self,
        ctx: &RunContext<'s>,
        log: &'s mut crate::telemetry::WorkerLog,
    ) -> WorkerContext<'s, B> {
        WorkerContext {
            step: self.step,
            corpus: ctx.corpus,
            pacer: self.pacer,
            log,
            start: ctx.start,
            done: self.done,
        }
    }
}

/// A rank of allreduce or localsgd.
fn play_collective<B: Backend>(
    ctx: &RunContext<'_>,
    trainer: &mut Trainer<'_, B>,
    snapshots: &mut Snapshots,
) -> Result<RoleOutcome> {
    let (comm, cfg) = (ctx.comm, ctx.cfg);
    let averaging = cfg
        .sync
        .strategy()
        .averaging(&cfg.sync)
        .with_context(|| format!("{} has no collective averaging", cfg.sync.mode))?;
    let mut saver = ctx.saver(comm);
    let mut log = ctx.run.worker_log(comm.rank(), cfg.run.log_every)?;
    let work = trainer.context(ctx, &mut log);
    let done = collective::work(
        comm,
        cfg,
        work,
        snapshots,
        &mut saver,
        (ctx.resume, averaging),
    )?;
    log.flush()?;
    Ok(RoleOutcome {
        worker: Some(done.stats),
        replica_error: done.replica_error,
        final_weights: Some(trainer.step.net.params_host_copy()),
        ..RoleOutcome::default()
    })
}

/// A worker of a parameter or group server, on its group's communicator (and one per
/// further shard of its server).
fn play_worker<B: Backend>(
    ctx: &RunContext<'_>,
    trainer: &mut Trainer<'_, B>,
) -> Result<RoleOutcome> {
    let faults = ctx.faults;
    let group = ctx
        .comms
        .group
        .as_ref()
        .context("worker without its group's communicator")?;
    let comms: Vec<&SubComm> = std::iter::once(group).chain(&ctx.comms.shards).collect();
    let params = trainer.step.net.num_params();
    let formats = (ctx.cfg.compression.push, ctx.cfg.compression.reply);
    let mut link = ShardLinks::new(&comms, params, formats)?;
    let mut log = ctx.run.worker_log(ctx.comm.rank(), ctx.cfg.run.log_every)?;
    let work = trainer.context(ctx, &mut log);
    let stats = match local_steps(ctx)? {
        Some(steps) => local_worker::work_locally(&mut link, ctx.comm, ctx.cfg, work, steps)?,
        None => worker::work(&mut link, ctx.comm, work, (faults, ctx.cfg.sync.overlap))?,
    };
    log.flush()?;
    Ok(RoleOutcome {
        worker: Some(stats),
        ..RoleOutcome::default()
    })
}

/// This worker's local steps per push ([`local_steps_of`]).
fn local_steps(ctx: &RunContext<'_>) -> Result<Option<u64>> {
    local_steps_of(ctx.cfg, ctx.layout, ctx.comm.rank())
}

/// The local steps per push of the worker of world rank `rank`, from `layout` (in the order
/// of its workers), where the mode's workers take local steps (async-localsgd, gssp with
/// `sync.gssp.local_steps` > 1); `None` where it pushes one batch's gradient.
fn local_steps_of(cfg: &Config, layout: &Layout, rank: usize) -> Result<Option<u64>> {
    let sync = &cfg.sync;
    if sync.strategy().local_steps(sync).is_none() {
        return Ok(None);
    }
    let me = layout.worker_ranks().iter().position(|&r| r == rank);
    let steps = me.and_then(|i| layout.local_steps.get(i)).copied();
    let steps = steps.with_context(|| format!("worker rank {rank} without its local steps"))?;
    Ok(Some(steps as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A config of `mode` on 4 ranks with `sets` on top.
    fn config(mode: &str, sets: &[&str]) -> Config {
        let minimal = "[data]\ndataset = \"synthetic\"\n[model]\nname = \"mlp\"\n";
        let mut all = vec![format!("sync.mode={mode}")];
        all.extend(sets.iter().map(|s| s.to_string()));
        Config::from_str_with_overrides(minimal, "t", &all).expect("a valid config")
    }

    #[test]
    fn only_local_sgd_workers_take_local_steps() {
        for (mode, sets) in [
            ("allreduce", &[][..]),
            ("bsp", &[]),
            ("asp", &[]),
            ("gssp", &["sync.gssp.local_steps=1"]),
        ] {
            let cfg = config(mode, sets);
            let layout = Layout::from_config(&cfg, 4);
            assert_eq!(local_steps_of(&cfg, &layout, 3).unwrap(), None, "{mode}");
        }
    }

    /// Each worker takes the count the layout holds at its place among the workers.
    #[test]
    fn a_worker_takes_the_local_steps_of_its_place_in_the_layout() {
        for (mode, sets) in [
            ("async-localsgd", &[][..]),
            ("gssp", &["sync.gssp.local_steps=4", "sync.gssp.groups=1"]),
        ] {
            let cfg = config(mode, sets);
            let mut layout = Layout::from_config(&cfg, 4);
            let workers = layout.worker_ranks();
            assert_eq!(workers.len(), 3, "{mode}");
            layout.local_steps = vec![4, 2, 1];
            for (&rank, want) in workers.iter().zip([4, 2, 1]) {
                let steps = local_steps_of(&cfg, &layout, rank).unwrap();
                assert_eq!(steps, Some(want), "{mode} rank {rank}");
            }
            layout.local_steps.truncate(2);
            let err = local_steps_of(&cfg, &layout, workers[2]).unwrap_err();
            let want = format!("worker rank {} without its local steps", workers[2]);
            assert_eq!(err.to_string(), want);
        }
    }
}
