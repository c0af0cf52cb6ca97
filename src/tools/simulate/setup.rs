//! A simulated run's layout, decided as a run of processes decides it: gssp's groups from
//! every worker's profile (each profile row timed on the emulated clock, its batches taken
//! from the worker's shard), async-localsgd's local steps from the same profile, the server
//! modes' balanced batches from it; the decisions themselves are the runtime's
//! ([`decide_groups`], [`apply_groups`], [`batches_by_rank`]).

use anyhow::Result;

use super::fleet::Fleet;
use crate::config::modes::Preparation;
use crate::config::{BatchSplit, Config, Grouping, Groups, GsspConfig};
use crate::protocol::costmodel::CostModel;
use crate::protocol::grouping;
use crate::protocol::layout::Layout;
use crate::runtime::balancer::batches_by_rank;
use crate::runtime::profiling::{decide_groups, WorkerGroups};
use crate::runtime::setup::apply_groups;

/// The world rank of worker `w` (workers follow the servers in rank order, worker `w` on
/// shard `w`).
pub fn rank_of(layout: &Layout, w: usize) -> usize {
    layout.world_size - worker_count(layout) + w
}

/// The worker index of world rank `rank` (see [`rank_of`]).
pub fn worker_of(layout: &Layout, rank: usize) -> usize {
    rank + worker_count(layout) - layout.world_size
}

/// Workers of `layout`.
pub fn worker_count(layout: &Layout) -> usize {
    layout.groups.iter().map(Vec::len).sum()
}

/// The layout of `cfg` on `ranks` ranks, with what a fresh run measures at set-up (each
/// worker's shard moved past the batches its profile took, its share of the global batch
/// set); its `profile_cost_s` is the training clock's reading when training starts.
pub fn lay_out(cfg: &Config, ranks: usize, fleet: &mut Fleet<'_>, params: usize) -> Result<Layout> {
    let mut layout = Layout::from_config(cfg, ranks);
    let workers = layout.worker_ranks();
    let model = CostModel::new(cfg, params);
    match cfg.sync.strategy().preparation() {
        Preparation::Groups => {
            let formed = form_groups(&cfg.sync.gssp, &model, &workers, ranks, fleet)?;
            apply_groups(cfg, &mut layout, formed, params);
        }
        Preparation::LocalSteps => {
            let a = &cfg.sync.async_localsgd;
            layout.local_steps = match a.dynamic_local_steps {
                false => vec![a.local_steps; workers.len()],
                true => {
                    let times = profile_as_one_group(cfg, &mut layout, a.profile_iters, fleet)?;
                    grouping::dynamic_local_steps(a.local_steps, &times)
                }
            };
        }
        Preparation::None => {}
    }
    if cfg.sync.balance.is_balanced() && cfg.num_servers() > 0 {
        let profiled = match (&layout.profiled_s, cfg.sync.balance.batches) {
            (_, BatchSplit::Static) => None,
            (Some(times), _) => Some(times.clone()),
            (None, _) => {
                let iters = cfg.sync.balance.measure_iters;
                Some(profile_as_one_group(cfg, &mut layout, iters, fleet)?)
            }
        };
        let workers = layout.worker_ranks();
        layout.batches = batches_by_rank(cfg, ranks, &workers, profiled.as_deref())?;
        for &rank in &workers {
            if let Some(slice) = layout.batch_slice(rank) {
                fleet.shard_mut(worker_of(&layout, rank)).set_share(slice)?;
            }
        }
    }
    Ok(layout)
}

/// gssp's groups: the config's, or from every worker's profile on the emulated clock.
fn form_groups(
    cfg: &GsspConfig,
    model: &CostModel,
    workers: &[usize],
    ranks: usize,
    fleet: &mut Fleet<'_>,
) -> Result<WorkerGroups> {
    if cfg.grouping == Grouping::Static {
        return Ok(WorkerGroups {
            groups: cfg.static_groups.clone(),
            profiled_s: None,
            profiled_spread_s: None,
            profiled_worst_s: None,
            profile_cost_s: None,
            group_count: None,
        });
    }
    let first = ranks - workers.len();
    let mut rows = vec![vec![f64::NAN, f64::NAN, f64::NAN, 0.0]; ranks];
    for &rank in workers {
        rows[rank] = fleet.profile(rank - first, cfg.profile_iters).to_vec();
    }
    decide_groups(cfg, model, workers, &rows)
}

/// Every worker's seconds per iteration from a profile of `iters` iterations as one group
/// (as `runtime::setup` profiles for async-localsgd's local steps and balanced batches),
/// recorded in `layout`.
fn profile_as_one_group(
    cfg: &Config,
    layout: &mut Layout,
    iters: usize,
    fleet: &mut Fleet<'_>,
) -> Result<Vec<f64>> {
    let one_group = GsspConfig {
        groups: Groups::Count(1),
        grouping: Grouping::Profile,
        profile_iters: iters,
        ..GsspConfig::default()
    };
    let model = CostModel::new(cfg, fleet.net_params());
    let workers = layout.worker_ranks();
    let formed = form_groups(&one_group, &model, &workers, layout.world_size, fleet)?;
    let times = formed.profiled_s.clone().unwrap_or_default();
    layout.profiled_s = formed.profiled_s;
    layout.profiled_spread_s = formed.profiled_spread_s;
    layout.profiled_worst_s = formed.profiled_worst_s;
    layout.profile_cost_s = formed.profile_cost_s;
    Ok(times)
}
