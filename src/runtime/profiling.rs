//! gssp's groups at the start of a run: from the config (`static`), or from the workers'
//! measured speeds (`profile`), agreed on by every rank.

use std::time::Instant;

use anyhow::Context;

use crate::comm::Collectives;
use crate::compute::pace::CALIBRATION_ITERATIONS;
use crate::config::{Grouping, Groups, GsspConfig};
use crate::protocol::costmodel::{choose_group_count, groups_for, CostModel, GroupCountChoice};
use crate::protocol::grouping::{persistent_time, spread};

/// The workers' groups a gssp run uses.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct WorkerGroups {
    /// World ranks of the workers of each group.
    pub groups: Vec<Vec<usize>>,
    /// With `grouping = "profile"`: each worker's measured seconds per iteration (the
    /// median of its timed iterations), in the order of the `worker_ranks` given to
    /// [`form_groups`].
    pub profiled_s: Option<Vec<f64>>,
    /// With `grouping = "profile"`: the [`spread`] of each worker's timed iterations, same
    /// order.
    pub profiled_spread_s: Option<Vec<f64>>,
    /// With `grouping = "profile"`: each worker's slowest timed iteration, same order.
    pub profiled_worst_s: Option<Vec<f64>>,
    /// With `grouping = "profile"`: what profiling cost, the longest any worker spent in it
    /// (calibration included), in seconds.
    pub profile_cost_s: Option<f64>,
    /// With `groups = "auto"`: the count chosen and the cost model's figures for each.
    pub group_count: Option<GroupCountChoice>,
}

/// Groups of worker ranks: from the config (`static`) or from measured speeds (`profile`:
/// every worker times `profile_iters` of its local iterations, compute plus emulated
/// slowdown, and reports their median; rank 0 partitions them exactly, evens out groups of
/// equal speed ([`balance_equal_speeds`](crate::protocol::grouping::balance_equal_speeds)) and broadcasts the result). With `groups = "auto"`
/// rank 0 first picks the group count `model` predicts fastest ([`choose_group_count`]).
///
/// `worker_ranks` are the world ranks of all workers; `iterate` runs one local iteration of
/// this rank (only called on workers; its failure stops the profiling). Collective over
/// `comm`, the world, when profiling.
pub fn form_groups<C: Collectives, R>(
    comm: &C,
    cfg: &GsspConfig,
    model: &CostModel,
    worker_ranks: &[usize],
    mut iterate: impl FnMut() -> anyhow::Result<R>,
) -> anyhow::Result<WorkerGroups> {
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
    let mut row = [f64::NAN, f64::NAN, f64::NAN, 0.0];
    if worker_ranks.contains(&comm.rank()) {
        let start = Instant::now();
        // The pacer's calibration iterations first (no padding while calibrating), then the
        // timed ones, each on its own.
        for _ in 0..CALIBRATION_ITERATIONS {
            iterate()?;
        }
        let mut samples = Vec::with_capacity(cfg.profile_iters);
        for _ in 0..cfg.profile_iters {
            let t = Instant::now();
            iterate()?;
            samples.push(t.elapsed().as_secs_f64());
        }
        row = profile_row(&samples, start.elapsed().as_secs_f64());
    }
    let rows = comm.gather_f64s(0, &row)?;
    let mut text = Vec::new();
    if let Some(rows) = rows {
        let formed = decide_groups(cfg, model, worker_ranks, &rows)?;
        text = serde_json::to_vec(&formed)?;
    }
    comm.broadcast_bytes(0, &mut text)?;
    serde_json::from_slice(&text).context("layout broadcast")
}

/// One worker's profile row, as [`decide_groups`] reads it: its seconds per iteration (the
/// persistent time of its timed iterations `samples`), their spread, the slowest of them,
/// and what the whole profile cost it (`cost_s`, calibration included).
pub fn profile_row(samples: &[f64], cost_s: f64) -> [f64; 4] {
    let worst = samples.iter().copied().fold(f64::NAN, f64::max);
    [persistent_time(samples), spread(samples), worst, cost_s]
}

/// The groups of the workers `worker_ranks` from every rank's [`profile_row`] (`rows`,
/// indexed by world rank): with `groups = "auto"` the count `model` predicts fastest
/// ([`choose_group_count`]), then the exact partition by speed ([`groups_for`]). Pure: the
/// MPI run decides on rank 0 from the gathered rows, the simulated clock from its own.
pub fn decide_groups(
    cfg: &GsspConfig,
    model: &CostModel,
    worker_ranks: &[usize],
    rows: &[Vec<f64>],
) -> anyhow::Result<WorkerGroups> {
    let column = |c: usize| -> Vec<f64> { worker_ranks.iter().map(|&r| rows[r][c]).collect() };
    let (worker_times, spreads, worst) = (column(0), column(1), column(2));
    let cost = rows.iter().map(|r| r[3]).fold(0.0, f64::max);
    let choice = match cfg.groups {
        Groups::Count(_) => None,
        Groups::Auto => Some(
            choose_group_count(model, &worker_times, &spreads, cfg.max_groups)
                .context("choosing the group count")?,
        ),
    };
    let count = cfg
        .groups
        .count()
        .or(choice.as_ref().map(|c| c.chosen))
        .unwrap_or(1);
    let parts = groups_for(&worker_times, &spreads, count).context("grouping by profile")?;
    let groups: Vec<Vec<usize>> = parts
        .iter()
        .map(|p| p.iter().map(|&i| worker_ranks[i]).collect())
        .collect();
    Ok(WorkerGroups {
        groups,
        profiled_s: Some(worker_times),
        profiled_spread_s: Some(spreads),
        profiled_worst_s: Some(worst),
        profile_cost_s: Some(cost),
        group_count: choice,
    })
}
