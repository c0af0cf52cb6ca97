//! `gssp plan`: a discrete-event simulator of every sync mode's timing (not of accuracy),
//! for clusters far larger than the one at hand, from
//!
//! - each worker's seconds per iteration without waiting (compute and its own copies),
//!   optionally with transient stragglers (`straggler_prob`, `straggler_factor`);
//! - the timing cost model of [`crate::protocol::costmodel`] (the same one `sync.gssp.groups = "auto"` and
//!   regrouping use): per message `latency + bytes / bandwidth` on the sender's link,
//!   `apply_ns_per_param` per parameter applied, the exchange's message size from the
//!   compression settings;
//! - the model's size P (4-byte parameters).
//!
//! Which rows it shows is every registered mode's to say ([`Mode::plan_rows`], in
//! [`crate::config::modes`]): each row names its workers (configured, balanced, or grouped
//! by speed at each group count, with the grouped row's variants) and whether its servers
//! compensate delay, and the mode's own answers say the rest: servers or a collective
//! ([`Mode::simulation`]), their bound ([`Mode::bound`], [`Mode::staleness`]) and its
//! workers' local steps ([`Mode::local_steps`]) at the plan's settings ([`PlanOptions`]).
//! No list of modes lives here, so a new mode shows its rows by its registration alone.
//!
//! What it models, per mode:
//!
//! - parameter-server modes (bsp, asp, DC-ASGD, ssp, gssp with 1..G groups): each server is
//!   one first-in first-out resource. A push costs it the gradient's message, the apply (bsp:
//!   a sum per push and one apply per round; DC-ASGD: one more pass for the correction), and
//!   one weights message per worker it releases; every `inter_group_every` pushes a gssp
//!   server spends one exchange with its peers. async-localsgd and gssp-local (gssp with
//!   `sync.gssp.local_steps`) push after each worker's local steps, in proportion to its
//!   speed: a push stands for that many batches, and a gssp-local group exchanges every
//!   `inter_group_every` of its pushes, so at one wall-clock rhythm with the others. Workers are released by the SSP rule of
//!   [`crate::protocol::ssp_clock`]; a worker's wait runs from its push to its weights.
//!   The gssp-overlap row (`sync.overlap`) has each worker compute its next step from the
//!   moment it pushes, its server releasing at the bound less one: its wait runs from the
//!   end of that step to its weights. The gssp-sharded rows (`sync.shards`, without and
//!   with overlap) give each group S server ranks on links of their own: each takes a
//!   share 1/S of every message, apply and exchange, and a worker's own link sends the
//!   whole gradient, so its push reaches the last shard (S - 1)/S of a whole message later
//!   than a shard's share ([`servers::PsScheme::shards`]); its wait runs from then (its
//!   own sending is communication, as its rank CSV counts it). The shard
//!   ranks are extra ranks on nodes of their own, or (the gssp-sharded-colocated rows)
//!   beside workers, sharing their links ([`servers::colocated`]). The -local rows among
//!   them push after gssp-local's local steps, at the same groups and shards.
//! - collective modes (allreduce, local SGD): every round waits for the slowest rank, then
//!   a ring allreduce (2 (N-1) messages of P/N values and the sums).
//! - the balanced rows (`-balanced`: batches in proportion to speed, `sync.balance`): the
//!   same engines on the workers of [`Workload::balanced`], whose iterations take their
//!   time per sample times their share of the global batch; transient stragglers still
//!   strike each iteration, as a cut made from medians does not follow them.
//!
//! What it leaves out: evaluation, and contention between ranks that share a node's cores
//! beyond one figure, [`Workload::burst_s`] (zero in `gssp plan`: each rank its own
//! cores), which spaces out the starts of workers released at the same moment; the
//! validation against runs on one oversubscribed node fits it (docs/scaling.md).

pub mod collective;
pub mod measured;
pub mod servers;
pub mod workers;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use crate::compute::model::Trainable;
use crate::config::modes::{
    self, least_staleness, LocalSteps, Mode, PlanRow, PlanWorkers, Simulation,
};
use crate::config::{Staleness, SyncConfig, SyncMode};
use crate::protocol::costmodel::{groups_for, CostModel, AUTO_GROUPS_TOLERANCE};
use crate::protocol::grouping::{dynamic_local_steps, GroupingError};
pub use workers::Workload;

/// The fastest worker's local steps per push the gssp-local row assumes when the config
/// leaves gssp at one batch per push (`sync.gssp.local_steps = 1`).
pub const GSSP_LOCAL_STEPS_SHOWN: usize = 4;

/// Iterations the slowest worker completes in the default simulated time.
pub const DEFAULT_SLOWEST_ITERATIONS: f64 = 100.0;

/// Per-iteration times drawn for a simulation (transient stragglers, when set).
pub struct Sampler<'a> {
    work: &'a Workload,
    rng: ChaCha8Rng,
}

impl Sampler<'_> {
    /// Worker `w`'s next iteration, seconds.
    pub fn next(&mut self, w: usize) -> f64 {
        let t = self.work.times[w];
        if self.work.straggler_prob > 0.0 && self.rng.gen::<f64>() < self.work.straggler_prob {
            t * self.work.straggler_factor
        } else {
            t
        }
    }
}

impl Workload {
    pub fn sampler(&self, seed: u64) -> Sampler<'_> {
        Sampler {
            work: self,
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }
}

/// Counts of applied pushes by staleness (server versions between the read and the apply).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StalenessHistogram {
    counts: Vec<u64>,
}

impl StalenessHistogram {
    pub fn record(&mut self, staleness: u64) {
        let s = staleness as usize;
        if s >= self.counts.len() {
            self.counts.resize(s + 1, 0);
        }
        self.counts[s] += 1;
    }

    fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    pub fn mean(&self) -> f64 {
        let total = self.total();
        if total == 0 {
            return 0.0;
        }
        let sum: f64 = self
            .counts
            .iter()
            .enumerate()
            .map(|(s, &c)| s as f64 * c as f64)
            .sum();
        sum / total as f64
    }

    /// The smallest staleness at or below which a share `q` of the pushes lie.
    pub fn quantile(&self, q: f64) -> u64 {
        let need = (q * self.total() as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (s, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= need {
                return s as u64;
            }
        }
        self.counts.len().saturating_sub(1) as u64
    }

    pub fn max(&self) -> u64 {
        self.counts.iter().rposition(|&c| c > 0).unwrap_or(0) as u64
    }
}

/// What one simulation gives.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// Iterations (pushes, or steps of every rank) completed within the simulated time.
    pub iterations: u64,
    pub images_per_s: f64,
    /// Each worker's share of the simulated time spent waiting.
    pub wait_fractions: Vec<f64>,
    /// Parameter-server modes: applied pushes by staleness.
    pub staleness: Option<StalenessHistogram>,
    /// Each server's busy share.
    pub server_busy: Vec<f64>,
    /// Each server's bytes in and out per second (collectives: one rank's).
    pub server_bytes_per_s: Vec<f64>,
    /// gssp: each group server's exchange bytes (to and from its peers) per second.
    pub exchange_bytes_per_s: Vec<f64>,
    /// Parameter-server modes: each server's (shard's) replies' bytes per second.
    pub server_out_bytes_per_s: Vec<f64>,
    /// Parameter-server modes: each worker's pushes answered per second.
    pub worker_pushes_per_s: Vec<f64>,
}

/// One row of a plan: one mode (gssp: one group count).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Prediction {
    pub mode: String,
    /// Servers of the parameter-server modes (gssp: groups); `None` for collectives.
    pub servers: Option<usize>,
    pub images_per_s: f64,
    pub mean_wait_fraction: f64,
    pub max_wait_fraction: f64,
    pub staleness_mean: Option<f64>,
    pub staleness_p50: Option<u64>,
    pub staleness_p99: Option<u64>,
    pub staleness_max: Option<u64>,
    /// The busiest server's busy share.
    pub server_busy: Option<f64>,
    /// The busiest server's bytes per second (collectives: one rank's).
    pub bytes_per_s: f64,
    /// gssp: the busiest group server's exchange bytes per second.
    pub exchange_bytes_per_s: Option<f64>,
    /// gssp: each group's SSP bound.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bounds: Option<Vec<usize>>,
    /// Server ranks per group where more than one (`sync.shards`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shards: Option<usize>,
    /// Nodes the mode takes, a worker to a node: the workers' nodes, and one more for each
    /// server rank unless it sits beside a worker (the co-located rows).
    pub nodes: usize,
    /// gssp's local steps per push of the fastest worker, where more than one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_steps: Option<usize>,
}

impl Prediction {
    fn from_outcome(mode: &str, servers: Option<usize>, o: &Outcome) -> Prediction {
        let max = |v: &[f64]| v.iter().cloned().fold(0.0, f64::max);
        let n = o.wait_fractions.len().max(1) as f64;
        Prediction {
            mode: mode.into(),
            servers,
            images_per_s: o.images_per_s,
            mean_wait_fraction: o.wait_fractions.iter().sum::<f64>() / n,
            max_wait_fraction: max(&o.wait_fractions),
            staleness_mean: o.staleness.as_ref().map(StalenessHistogram::mean),
            staleness_p50: o.staleness.as_ref().map(|h| h.quantile(0.5)),
            staleness_p99: o.staleness.as_ref().map(|h| h.quantile(0.99)),
            staleness_max: o.staleness.as_ref().map(StalenessHistogram::max),
            server_busy: (!o.server_busy.is_empty()).then(|| max(&o.server_busy)),
            bytes_per_s: max(&o.server_bytes_per_s),
            exchange_bytes_per_s: (!o.exchange_bytes_per_s.is_empty())
                .then(|| max(&o.exchange_bytes_per_s)),
            bounds: None,
            shards: None,
            nodes: o.wait_fractions.len() + servers.unwrap_or(0),
            local_steps: None,
        }
    }
}

/// The settings of the modes a plan compares.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanOptions {
    /// ssp's bound (the paper's baseline: 3).
    pub ssp_staleness: usize,
    /// The bound inside every gssp group, or `"auto"`: each group's from the rule a run
    /// uses ([`crate::protocol::grouping::auto_staleness`]), with every worker that has transient
    /// stragglers taken to show one spell while profiled.
    pub gssp_staleness: Staleness,
    /// Local SGD's steps between averages.
    pub local_steps: usize,
    /// Asynchronous local SGD's local steps per push of the fastest worker (every worker's
    /// in proportion to its speed, as `dynamic_local_steps` makes them).
    pub async_local_steps: usize,
    /// gssp-local's local steps per push of the fastest worker, and whether every other
    /// worker's follow its speed (`sync.gssp.dynamic_local_steps`) or are the same; its row
    /// is gssp at the recommended group count with them.
    pub gssp_local_steps: (usize, bool),
    /// gssp is simulated with each of these group counts (those above the worker count
    /// are left out).
    pub group_counts: Vec<usize>,
    /// Simulated seconds (default: the slowest worker's [`DEFAULT_SLOWEST_ITERATIONS`]).
    pub horizon_s: Option<f64>,
    pub seed: u64,
    /// The smallest and largest batch of the balanced rows' cut (`sync.balance`).
    pub balance_bounds: (usize, usize),
    /// The gssp-sharded rows' server ranks per group (`sync.shards`); `None`: the fewest
    /// powers of two within [`AUTO_GROUPS_TOLERANCE`] of the fastest (up to the smallest
    /// group's workers, one shard beside each).
    pub shards: Option<usize>,
}

/// Why a plan could not be made.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error(transparent)]
    Grouping(#[from] GroupingError),
    #[error("the balanced rows: {0}")]
    Balance(#[from] crate::protocol::balance::BalanceError),
}

/// Every mode's prediction, and the gssp group count recommended.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    pub workers: usize,
    pub params: usize,
    pub horizon_s: f64,
    pub predictions: Vec<Prediction>,
    /// The fewest gssp groups within [`AUTO_GROUPS_TOLERANCE`] of the fastest gssp row (the
    /// rule of `sync.gssp.groups = "auto"`): the first grouped row's ([`PlanWorkers::Grouped`]),
    /// 1 where no mode shows one.
    pub recommended_groups: usize,
}

/// The horizon `opts` give for `work`.
pub fn horizon(work: &Workload, opts: &PlanOptions) -> f64 {
    opts.horizon_s.unwrap_or_else(|| {
        let slowest = work.times.iter().cloned().fold(0.0, f64::max);
        let straggle = 1.0 + work.straggler_prob * (work.straggler_factor - 1.0).max(0.0);
        DEFAULT_SLOWEST_ITERATIONS * slowest * straggle
    })
}

/// Simulates every registered mode's rows ([`Mode::plan_rows`]) on `work`: the rows of the
/// configured workers, then the balanced, then the grouped (gssp's, with each of
/// `opts.group_counts` and its variants at the recommended count), each kind in order of
/// registration ([`modes::all`]). No mode is named here: a mode's rows come with its
/// registration.
pub fn plan(work: &Workload, cost: &CostModel, opts: &PlanOptions) -> Result<Plan, PlanError> {
    let horizon_s = horizon(work, opts);
    let mut rows: Vec<(&dyn Mode, &PlanRow)> = modes::all()
        .flat_map(|mode| mode.plan_rows().iter().map(move |row| (mode, row)))
        .collect();
    // A stable sort: each kind's rows stay in order of registration.
    rows.sort_by_key(|(_, row)| row.workers);
    let any_balanced = rows.iter().any(|(_, r)| r.workers == PlanWorkers::Balanced);
    let balanced = any_balanced
        .then(|| work.balanced(opts.balance_bounds))
        .transpose()?;
    let at = (cost, opts, horizon_s);
    let mut predictions = Vec::new();
    let mut recommended_groups = None;
    for (mode, row) in rows {
        match row.workers {
            PlanWorkers::Configured => predictions.push(one_group_row(mode, row, work, at)),
            PlanWorkers::Balanced => {
                let even = balanced.as_ref();
                predictions.extend(even.map(|even| one_group_row(mode, row, even, at)));
            }
            PlanWorkers::Grouped => {
                let (grouped, recommended) = grouped_rows(mode, row, work, at)?;
                predictions.extend(grouped);
                recommended_groups.get_or_insert(recommended);
            }
        }
    }
    Ok(Plan {
        workers: work.times.len(),
        params: cost.params,
        horizon_s,
        predictions,
        recommended_groups: recommended_groups.unwrap_or(1),
    })
}

impl PlanOptions {
    /// The `[sync]` section of a run of `mode` at these settings, for the answers the plan
    /// asks its strategy ([`Mode::staleness`], [`Mode::local_steps`]).
    fn sync(&self, mode: SyncMode) -> SyncConfig {
        let mut sync = SyncConfig {
            mode,
            ..SyncConfig::default()
        };
        sync.ssp.staleness = self.ssp_staleness;
        sync.gssp.staleness = self.gssp_staleness;
        sync.localsgd.local_steps = self.local_steps;
        sync.async_localsgd.local_steps = self.async_local_steps;
        sync.async_localsgd.dynamic_local_steps = true;
        sync
    }
}

/// `mode`'s `row` on all of `work`'s workers in one group: one server, or one collective
/// (`opts.local_steps` between averages where it averages after local steps).
fn one_group_row(
    mode: &dyn Mode,
    row: &PlanRow,
    work: &Workload,
    (cost, opts, horizon_s): (&CostModel, &PlanOptions, f64),
) -> Prediction {
    let (servers, outcome) = match mode.simulation() {
        Simulation::Collective { local_steps } => {
            let steps = if local_steps { opts.local_steps } else { 1 };
            let o = collective::simulate(steps, work, cost, horizon_s, opts.seed);
            (None, o)
        }
        Simulation::Servers { .. } => {
            let all = vec![(0..work.times.len()).collect()];
            let (scheme, _) = server_scheme(mode, row, work, all, (cost, opts));
            let o = servers::simulate(&scheme, work, cost, horizon_s, opts.seed);
            (Some(1), o)
        }
    };
    Prediction::from_outcome(row.name, servers, &outcome)
}

/// The servers of `mode`'s `row` over `groups` of `work`'s workers, each bounding its group
/// as the mode's servers do at the plan's settings, and the bound each group records (the
/// mode's staleness: [`group_bounds`]).
fn server_scheme(
    mode: &dyn Mode,
    row: &PlanRow,
    work: &Workload,
    groups: Vec<Vec<usize>>,
    (cost, opts): (&CostModel, &PlanOptions),
) -> (servers::PsScheme, Vec<usize>) {
    let sync = opts.sync(mode.mode());
    let recorded = group_bounds(work, &groups, mode.staleness(&sync), cost.reply_s());
    let local_steps = mode.local_steps(&sync);
    let scheme = servers::PsScheme {
        groups,
        bounds: recorded.iter().map(|&b| mode.bound().of_group(b)).collect(),
        round: mode.simulation() == Simulation::Servers { round: true },
        extra_apply_passes: if row.delay_compensation { 1.0 } else { 0.0 },
        local_steps: local_steps.map_or_else(Vec::new, |l| each_workers_steps(l, &work.times)),
        ..servers::PsScheme::default()
    };
    (scheme, recorded)
}

/// Each worker's local steps per push under `steps`: in proportion to its speed (of
/// `times`) where dynamic, else the same.
fn each_workers_steps(steps: LocalSteps, times: &[f64]) -> Vec<usize> {
    match steps.dynamic {
        true => dynamic_local_steps(steps.per_push, times),
        false => vec![steps.per_push; times.len()],
    }
}

/// `mode`'s grouped `row` ([`PlanWorkers::Grouped`]): a row per group count of
/// `opts.group_counts` (those within the worker count), its workers grouped by speed, then
/// its variants at the recommended count; and that count, the fewest groups within
/// [`AUTO_GROUPS_TOLERANCE`] of the fastest (the rule of `sync.gssp.groups = "auto"`).
fn grouped_rows(
    mode: &dyn Mode,
    row: &PlanRow,
    work: &Workload,
    (cost, opts, horizon_s): (&CostModel, &PlanOptions, f64),
) -> Result<(Vec<Prediction>, usize), GroupingError> {
    let n = work.times.len();
    let spreads = vec![0.0; n];
    let mut plain = Vec::new();
    for &g in opts.group_counts.iter().filter(|&&g| (1..=n).contains(&g)) {
        let groups = groups_for(&work.times, &spreads, g)?;
        let (scheme, bounds) = server_scheme(mode, row, work, groups, (cost, opts));
        let o = servers::simulate(&scheme, work, cost, horizon_s, opts.seed);
        let mut p = Prediction::from_outcome(row.name, Some(g), &o);
        p.bounds = Some(bounds);
        plain.push(p);
    }
    let best = plain.iter().map(|p| p.images_per_s).fold(0.0, f64::max);
    let recommended = plain
        .iter()
        .find(|p| p.images_per_s >= best * (1.0 - AUTO_GROUPS_TOLERANCE))
        .and_then(|p| p.servers)
        .unwrap_or(1);
    let at_recommended = plain.iter().find(|p| p.servers == Some(recommended));
    let variant_row = |variant| {
        let p = at_recommended?;
        Some(gssp_variant(work, cost, opts, (recommended, p), variant))
    };
    let local = variant_row(GsspVariant::local(opts, &work.times));
    let ahead = variant_row(GsspVariant::overlap());
    let sharded = sharded_rows(work, cost, opts, &plain)?;
    let mut rows = plain;
    rows.extend(local.transpose()?);
    rows.extend(ahead.transpose()?);
    rows.extend(sharded);
    Ok((rows, recommended))
}

/// gssp with sharded servers, without and with overlap, at the group count and shards per
/// group (`opts.shards`, or each power of two from 2 up to the smallest group's workers: no
/// more shards than one beside each worker) that simulate fastest, taking the fewest
/// server ranks within [`AUTO_GROUPS_TOLERANCE`] of that; `gssp` holds the `gssp` row of
/// each group count (its bounds).
fn sharded_rows(
    work: &Workload,
    cost: &CostModel,
    opts: &PlanOptions,
    gssp: &[Prediction],
) -> Result<Vec<Prediction>, GroupingError> {
    let row = |at: (usize, &Prediction), shards, overlap| {
        let variant = GsspVariant::sharded(shards, overlap);
        gssp_variant(work, cost, opts, at, variant)
    };
    let mut tried = Vec::new();
    for plain in gssp {
        let Some(groups) = plain.servers else {
            continue;
        };
        for shards in shard_counts(work, opts, groups)? {
            tried.push((row((groups, plain), shards, false)?, plain));
        }
    }
    let best = tried
        .iter()
        .map(|(p, _)| p.images_per_s)
        .fold(0.0, f64::max);
    let ranks = |p: &Prediction| p.servers.unwrap_or(1) * p.shards.unwrap_or(1);
    let chosen = tried
        .iter()
        .filter(|(p, _)| p.images_per_s >= best * (1.0 - AUTO_GROUPS_TOLERANCE))
        .min_by_key(|(p, _)| ranks(p));
    let Some((fastest, plain)) = chosen else {
        return Ok(Vec::new());
    };
    let groups = fastest.servers.unwrap_or(1);
    let shards = fastest.shards.unwrap_or(1);
    let local = GsspVariant::sharded_local(opts, &work.times, shards, false);
    let mut rows = vec![
        fastest.clone(),
        row((groups, plain), shards, true)?,
        gssp_variant(work, cost, opts, (groups, plain), local)?,
    ];
    // Beside the workers: at the group count of the fastest row whose shard ranks fit on
    // the workers' nodes.
    let fits = tried
        .iter()
        .filter(|(p, _)| ranks(p) <= work.times.len())
        .max_by(|(a, _), (b, _)| a.images_per_s.total_cmp(&b.images_per_s));
    if let Some((p, plain)) = fits {
        let groups = p.servers.unwrap_or(1);
        rows.extend(colocated_rows(work, cost, opts, (groups, plain))?);
    }
    Ok(rows)
}

/// The shards per group the sharded rows try at `groups` groups: `opts.shards`, or each
/// power of two from 2 up to the smallest group's workers (no more shards than one beside
/// each worker).
fn shard_counts(
    work: &Workload,
    opts: &PlanOptions,
    groups: usize,
) -> Result<Vec<usize>, GroupingError> {
    if let Some(s) = opts.shards {
        return Ok(vec![s]);
    }
    let spreads = vec![0.0; work.times.len()];
    let smallest = groups_for(&work.times, &spreads, groups)?
        .iter()
        .map(Vec::len)
        .min()
        .unwrap_or(1);
    Ok((1..=12)
        .map(|k| 1usize << k)
        .filter(|&s| s <= smallest.max(2))
        .collect())
}

/// The sharded rows on the workers' nodes alone (`cluster.distribution = "cyclic"`, a
/// shard beside a worker, sharing its link: [`servers::colocated`]), without and with
/// overlap, at `groups` groups (the gssp row `plain`'s) and the shards per group that
/// simulate fastest (the fewest within [`AUTO_GROUPS_TOLERANCE`]), no more shard ranks
/// than workers (so no more nodes than allreduce takes).
fn colocated_rows(
    work: &Workload,
    cost: &CostModel,
    opts: &PlanOptions,
    (groups, plain): (usize, &Prediction),
) -> Result<Vec<Prediction>, GroupingError> {
    let n = work.times.len();
    let counts = shard_counts(work, opts, groups)?;
    let row = |shards, overlap| {
        let variant = GsspVariant::colocated(shards, overlap);
        gssp_variant(work, cost, opts, (groups, plain), variant)
    };
    let mut tried = Vec::new();
    for shards in counts.into_iter().filter(|s| groups * s <= n) {
        tried.push(row(shards, false)?);
    }
    let best = tried.iter().map(|p| p.images_per_s).fold(0.0, f64::max);
    let Some(fastest) = tried
        .into_iter()
        .find(|p| p.images_per_s >= best * (1.0 - AUTO_GROUPS_TOLERANCE))
    else {
        return Ok(Vec::new());
    };
    let shards = fastest.shards.unwrap_or(1);
    let local = GsspVariant::sharded_local(opts, &work.times, shards, true);
    Ok(vec![
        fastest,
        row(shards, true)?,
        gssp_variant(work, cost, opts, (groups, plain), local)?,
    ])
}

/// A variant of a grouped row (gssp's, [`PlanWorkers::Grouped`]) at a group count: what
/// its name adds to the row's (`-local`), its workers' local steps per push (empty: one
/// each), whether they compute a step ahead, and its server ranks per group.
struct GsspVariant {
    suffix: &'static str,
    local_steps: Vec<usize>,
    overlap: bool,
    shards: usize,
    /// The shards sit beside workers, sharing their links ([`servers::colocated`]).
    colocated: bool,
}

impl GsspVariant {
    /// gssp with local steps (`opts.gssp_local_steps`, in proportion to each of `times`
    /// where dynamic), at the `gssp` row's bounds.
    fn local(opts: &PlanOptions, times: &[f64]) -> GsspVariant {
        let (per_push, dynamic) = opts.gssp_local_steps;
        GsspVariant {
            suffix: "-local",
            local_steps: each_workers_steps(LocalSteps { per_push, dynamic }, times),
            overlap: false,
            shards: 1,
            colocated: false,
        }
    }

    /// gssp with `shards` server ranks per group (`sync.shards`), its workers computing a
    /// step ahead with `overlap`.
    fn sharded(shards: usize, overlap: bool) -> GsspVariant {
        GsspVariant {
            suffix: match overlap {
                true => "-sharded-overlap",
                false => "-sharded",
            },
            local_steps: Vec::new(),
            overlap,
            shards,
            colocated: false,
        }
    }

    /// [`GsspVariant::sharded`] with each shard beside a worker, on the workers' nodes.
    fn colocated(shards: usize, overlap: bool) -> GsspVariant {
        GsspVariant {
            suffix: match overlap {
                true => "-sharded-colocated-overlap",
                false => "-sharded-colocated",
            },
            colocated: true,
            ..GsspVariant::sharded(shards, overlap)
        }
    }

    /// gssp-local's local steps ([`GsspVariant::local`]) with `shards` server ranks per
    /// group, beside the workers where `colocated`: the rank count of the sharded row
    /// without them (a push of H steps comes H times less often, so fewer shards may do).
    fn sharded_local(
        opts: &PlanOptions,
        times: &[f64],
        shards: usize,
        colocated: bool,
    ) -> GsspVariant {
        GsspVariant {
            suffix: match colocated {
                true => "-sharded-colocated-local",
                false => "-sharded-local",
            },
            shards,
            colocated,
            ..GsspVariant::local(opts, times)
        }
    }

    /// gssp whose workers compute a step ahead (`sync.overlap`), its bounds the `gssp`
    /// row's raised as a run raises them ([`least_staleness`]): the same clock spread as
    /// the `gssp` row at bound 0, each step one push staler.
    fn overlap() -> GsspVariant {
        GsspVariant {
            suffix: "-overlap",
            local_steps: Vec::new(),
            overlap: true,
            shards: 1,
            colocated: false,
        }
    }
}

/// `variant`'s row at `groups` groups, its bounds those of the `gssp` row there (at least
/// the least a run takes).
fn gssp_variant(
    work: &Workload,
    cost: &CostModel,
    opts: &PlanOptions,
    (groups, gssp): (usize, &Prediction),
    variant: GsspVariant,
) -> Result<Prediction, GroupingError> {
    let spreads = vec![0.0; work.times.len()];
    let least = least_staleness(variant.overlap);
    let bounds: Vec<usize> = (gssp.bounds.clone().unwrap_or_default().into_iter())
        .map(|b| b.max(least))
        .collect();
    let fastest_steps = variant.local_steps.iter().max().copied().filter(|&h| h > 1);
    let scheme = servers::PsScheme {
        groups: groups_for(&work.times, &spreads, groups)?,
        bounds: bounds.iter().map(|&b| Some(b)).collect(),
        local_steps: variant.local_steps,
        overlap: variant.overlap,
        shards: variant.shards,
        ..servers::PsScheme::default()
    };
    let simulate = match variant.colocated {
        true => servers::colocated,
        false => servers::simulate,
    };
    let o = simulate(&scheme, work, cost, horizon(work, opts), opts.seed);
    let name = format!("{}{}", gssp.mode, variant.suffix);
    let mut row = Prediction::from_outcome(&name, Some(groups), &o);
    row.bounds = Some(bounds);
    row.shards = (variant.shards > 1).then_some(variant.shards);
    row.local_steps = fastest_steps;
    row.nodes = match variant.colocated {
        true => work.times.len(),
        false => work.times.len() + groups * variant.shards.max(1),
    };
    Ok(row)
}

/// Each group's SSP bound under `staleness` (a mode's, [`Mode::staleness`]: gssp's, ssp's,
/// 0 where its servers keep none). For `"auto"`, the run's rule on the
/// simulated workers: a worker's slowest profiled iteration is a transient straggler's
/// (`straggler_factor` times its own) where stragglers occur, else its own; a reply takes
/// `reply_s`.
fn group_bounds(
    work: &Workload,
    groups: &[Vec<usize>],
    staleness: Staleness,
    reply_s: f64,
) -> Vec<usize> {
    match staleness {
        Staleness::Bound(s) => vec![s; groups.len()],
        Staleness::Auto => {
            let spell = if work.straggler_prob > 0.0 {
                work.straggler_factor.max(1.0)
            } else {
                1.0
            };
            let worst: Vec<f64> = work.times.iter().map(|t| t * spell).collect();
            crate::protocol::grouping::auto_staleness(&work.times, &worst, groups, reply_s)
        }
    }
}

/// The plan as a Markdown table, one row per mode and gssp group count.
pub fn render(plan: &Plan) -> String {
    let mut t = format!(
        "{} workers, {} parameters, {:.1} s simulated\n\n\
         | mode | servers | nodes | images/s | wait (mean) | wait (max) | staleness mean / p99 / max | busiest server | MB/s per server | exchange MB/s |\n\
         |---|---:|---:|---:|---:|---:|---|---:|---:|---:|\n",
        plan.workers, plan.params, plan.horizon_s
    );
    for p in &plan.predictions {
        let dash = || "-".to_string();
        t.push_str(&format!(
            "| {} | {} | {} | {:.0} | {:.3} | {:.3} | {} | {} | {:.1} | {} |\n",
            p.mode,
            match (p.servers, p.shards) {
                (Some(g), Some(s)) => format!("{g} x {s}"),
                (Some(g), None) => g.to_string(),
                _ => dash(),
            },
            p.nodes,
            p.images_per_s,
            p.mean_wait_fraction,
            p.max_wait_fraction,
            match (p.staleness_mean, p.staleness_p99, p.staleness_max) {
                (Some(m), Some(q), Some(x)) => format!("{m:.1} / {q} / {x}"),
                _ => dash(),
            },
            p.server_busy
                .map_or_else(dash, |b| format!("{:.1}%", 100.0 * b)),
            p.bytes_per_s / 1e6,
            p.exchange_bytes_per_s
                .map_or_else(dash, |b| format!("{:.1}", b / 1e6)),
        ));
    }
    t.push_str(&format!(
        "\ngssp: {} group(s) recommended (the fewest within {:.0}% of the fastest gssp row)",
        plan.recommended_groups,
        100.0 * AUTO_GROUPS_TOLERANCE
    ));
    let recommended = plan
        .predictions
        .iter()
        .find(|p| p.mode == "gssp" && p.servers == Some(plan.recommended_groups));
    if let Some(bounds) = recommended.and_then(|p| p.bounds.as_ref()) {
        let list: Vec<String> = bounds.iter().map(usize::to_string).collect();
        t.push_str(&format!(", staleness bound per group {}", list.join(", ")));
    }
    t.push('\n');
    if let Some(advice) = colocated_advice(plan) {
        t.push_str(&advice);
    }
    t
}

/// How to run the fastest gssp row on the workers' own nodes (a co-located sharded row,
/// not computing a step ahead, which costs accuracy): its groups, shards, local steps and
/// placement as `--set` overrides, and the ranks the job needs.
fn colocated_advice(plan: &Plan) -> Option<String> {
    let p = plan
        .predictions
        .iter()
        .filter(|p| p.mode.starts_with("gssp-sharded-colocated") && !p.mode.ends_with("overlap"))
        .max_by(|a, b| a.images_per_s.total_cmp(&b.images_per_s))?;
    let (groups, shards) = (p.servers?, p.shards?);
    let w = plan.workers;
    let steps = p
        .local_steps
        .map_or_else(String::new, |h| format!(" --set sync.gssp.local_steps={h}"));
    Some(format!(
        "gssp on the workers' {w} nodes: {} ({:.0} images/s); run it on {} ranks with --set sync.gssp.groups={groups} --set sync.shards={shards}{steps} --set cluster.nodes={w} --set cluster.distribution=cyclic (`gssp placement` prints the sbatch line)\n",
        p.mode,
        p.images_per_s,
        w + groups * shards
    ))
}

/// Parameters of `cfg`'s model, built (on the CPU, without data) for its dataset's image
/// shape; seq2seq's size depends on the vocabulary, so it needs `--params`.
pub fn model_params(cfg: &crate::config::Config) -> Result<usize, String> {
    use crate::config::DatasetKind;
    let d = &cfg.data;
    let (shape, classes) = match d.dataset {
        DatasetKind::Mnist | DatasetKind::FashionMnist => ((1, 28, 28), 10),
        DatasetKind::Cifar10 => ((3, 32, 32), 10),
        DatasetKind::Synthetic => {
            let s = &d.synthetic;
            ((s.channels, s.height, s.width), s.classes)
        }
        DatasetKind::Multi30k => {
            return Err(
                "seq2seq's size depends on its vocabulary: pass --params (a run's summary or log names it)".into(),
            )
        }
    };
    crate::compute::model::build(&cfg.model, shape, classes, 1, cfg.run.seed)
        .map(|net| net.num_params())
        .map_err(|e| format!("model {}: {e}", cfg.model.name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(params: usize, latency_s: f64) -> CostModel {
        CostModel {
            params,
            latency_s,
            bytes_per_s: 10e9,
            apply_s_per_param: 1e-9,
            exchange_bytes: 4.0 * params as f64,
            push_bytes: 4.0 * params as f64,
            reply_bytes: 4.0 * params as f64,
            exchange_every: 4,
            local_steps: (1, false),
        }
    }

    fn work(times: Vec<f64>) -> Workload {
        Workload {
            times,
            straggler_prob: 0.0,
            straggler_factor: 1.0,
            batch: 8,
            burst_s: 0.0,
            start_s: Vec::new(),
        }
    }

    fn opts() -> PlanOptions {
        PlanOptions {
            ssp_staleness: 3,
            gssp_staleness: Staleness::Bound(0),
            local_steps: 4,
            async_local_steps: 4,
            gssp_local_steps: (4, true),
            group_counts: vec![1, 2, 3, 4],
            horizon_s: Some(20.0),
            seed: 1,
            balance_bounds: (1, 32),
            shards: None,
        }
    }

    fn row<'a>(plan: &'a Plan, mode: &str, servers: Option<usize>) -> &'a Prediction {
        plan.predictions
            .iter()
            .find(|p| p.mode == mode && (servers.is_none() || p.servers == servers))
            .unwrap()
    }

    #[test]
    fn asp_equal_workers_run_at_their_pace_with_staleness_of_the_others() {
        // 8 equal workers of 10 ms, a round trip of 2 latencies and the server's service.
        let c = cost(1_000, 1e-4);
        let service = 2.0 * 4e3 / 10e9 + 1e3 * 1e-9;
        let plan = plan(&work(vec![0.01; 8]), &c, &opts()).unwrap();
        let asp = row(&plan, "asp", None);
        let cycle = 0.01 + 2e-4 + service;
        let expected = 8.0 * 8.0 / cycle;
        assert!((asp.images_per_s / expected - 1.0).abs() < 0.01, "{asp:?}");
        assert!(
            (asp.mean_wait_fraction - (cycle - 0.01) / cycle).abs() < 0.005,
            "{asp:?}"
        );
        // Each push finds the other 7 workers' pushes applied since its read.
        assert!((asp.staleness_mean.unwrap() - 7.0).abs() < 0.1, "{asp:?}");
    }

    #[test]
    fn synchronous_modes_wait_for_the_slowest_worker() {
        // Two workers at 10 ms, two at 40 ms: bsp, allreduce and gssp with one group run
        // at the slow pace, so the fast ones wait about 3/4 of the time; two gssp groups
        // free them.
        let c = cost(1_000, 1e-5);
        let times = vec![0.01, 0.01, 0.04, 0.04];
        let plan = plan(&work(times), &c, &opts()).unwrap();
        for (mode, servers) in [("bsp", None), ("allreduce", None), ("gssp", Some(1))] {
            let p = row(&plan, mode, servers);
            let rate = 4.0 * 8.0 / 0.04;
            assert!((p.images_per_s / rate - 1.0).abs() < 0.02, "{p:?}");
            assert!((p.max_wait_fraction - 0.75).abs() < 0.02, "{p:?}");
        }
        let two = row(&plan, "gssp", Some(2));
        assert!((two.images_per_s / (2.0 * 8.0 / 0.01 + 2.0 * 8.0 / 0.04) - 1.0).abs() < 0.02);
        assert!(two.mean_wait_fraction < 0.02, "{two:?}");
        assert_eq!(plan.recommended_groups, 2);
        // Local SGD waits once every 4 steps, as long as bsp per step.
        let local = row(&plan, "localsgd", None);
        assert!((local.max_wait_fraction - 0.75).abs() < 0.02, "{local:?}");
        // Balanced batches of 12.8 and 3.2 (rounded 13, 13, 3, 3) make every iteration
        // about 13 ms: the offered 2 x 800 + 2 x 200 images/s at 1/1.3 of it, no one waiting
        // for long.
        for mode in ["bsp-balanced", "allreduce-balanced"] {
            let p = row(&plan, mode, None);
            let rate = 4.0 * 8.0 / (0.01 * 13.0 / 8.0);
            assert!((p.images_per_s / rate - 1.0).abs() < 0.02, "{mode}: {p:?}");
            assert!(p.max_wait_fraction < 0.1, "{mode}: {p:?}");
        }
    }

    /// A model of 1,000 parameters whose message takes 0.04 s on a link, applied at no cost.
    fn slow_link() -> CostModel {
        CostModel {
            bytes_per_s: 4.0 * 1000.0 / 0.04,
            apply_s_per_param: 0.0,
            ..cost(1_000, 0.0)
        }
    }

    /// Eight workers at 0.1 s per step on one server whose messages take 0.04 s each way
    /// (0.08 s a push): alone it takes at most 12.5 pushes a second of the 80 offered. Eight
    /// shards take an eighth each (0.01 s a push), and a worker's own link sends the other
    /// seven shards' eighths first (0.035 s): every iteration 0.1 + 0.035 + 2 x 0.005 =
    /// 0.145 s, 55 pushes a second, the shards 55% busy. A worker waits only for the last
    /// eighth and its reply (0.01 s of the 0.145): its own sending is communication, as its
    /// rank CSV counts it.
    #[test]
    fn shards_divide_a_saturated_servers_work() {
        let c = slow_link();
        let scheme = |shards| servers::PsScheme {
            groups: vec![(0..8).collect()],
            bounds: vec![None],
            shards,
            ..servers::PsScheme::default()
        };
        let eight = work(vec![0.1; 8]);
        let one = servers::simulate(&scheme(1), &eight, &c, 20.0, 1);
        let shared = servers::simulate(&scheme(8), &eight, &c, 20.0, 1);
        let per_s = |o: &Outcome| o.iterations as f64 / 20.0;
        assert!((per_s(&one) - 12.5).abs() < 0.3, "{one:?}");
        assert!(one.server_busy[0] > 0.99, "{one:?}");
        assert!((per_s(&shared) - 8.0 / 0.145).abs() < 1.5, "{shared:?}");
        assert!(shared.server_busy[0] < 0.6, "{shared:?}");
        let mean_wait = |o: &Outcome| o.wait_fractions.iter().sum::<f64>() / 8.0;
        assert!(
            (mean_wait(&shared) - 0.01 / 0.145).abs() < 0.02,
            "{shared:?}"
        );
        // The plan's sharded rows: gssp at one group (bound 0, in step: 3x here) with the
        // shards that pay.
        let plan = plan(
            &eight,
            &c,
            &PlanOptions {
                group_counts: vec![1],
                ..opts()
            },
        )
        .unwrap();
        let sharded = row(&plan, "gssp-sharded", Some(1));
        assert!(sharded.shards.unwrap_or(1) >= 4, "{sharded:?}");
        let gssp = row(&plan, "gssp", Some(1));
        assert!(
            sharded.images_per_s > 2.5 * gssp.images_per_s,
            "{sharded:?} {gssp:?}"
        );
        // With gssp-local's 4 local steps (equal workers: 4 each) on the same shards, a
        // push comes a quarter as often: the shards idle more, and no image is lost.
        let local = row(&plan, "gssp-sharded-local", Some(1));
        assert_eq!(local.shards, sharded.shards, "{local:?}");
        assert_eq!(local.local_steps, Some(4), "{local:?}");
        // The rendered plan says how to run the fastest co-located row without overlap
        // (here the one with local steps): on the 8 workers' nodes, 8 + S ranks.
        let beside = row(&plan, "gssp-sharded-colocated-local", Some(1));
        let s = beside.shards.unwrap_or(0);
        assert!((2..=8).contains(&s), "{beside:?}");
        let text = render(&plan);
        let want = format!(
            "gssp on the workers' 8 nodes: gssp-sharded-colocated-local ({:.0} images/s); run it on {} ranks with --set sync.gssp.groups=1 --set sync.shards={s} --set sync.gssp.local_steps=4 --set cluster.nodes=8 --set cluster.distribution=cyclic",
            beside.images_per_s,
            8 + s
        );
        assert!(text.contains(&want), "{text}");
        let busy = |p: &Prediction| p.server_busy.unwrap_or(1.0);
        assert!(busy(local) < 0.5 * busy(sharded), "{local:?} {sharded:?}");
        assert!(local.images_per_s >= sharded.images_per_s, "{local:?}");
    }

    /// The saturated server of [`shards_divide_a_saturated_servers_work`] with 16-bit pushes
    /// (`compression.push = "bf16"`): a push takes 0.02 s on its link instead of 0.04, the
    /// reply still 0.04, so the server takes 1 / 0.06 pushes a second instead of 1 / 0.08.
    #[test]
    fn half_size_pushes_lift_a_saturated_server_by_the_bytes_they_save() {
        let f32_push = slow_link();
        let bf16_push = CostModel {
            push_bytes: 2.0 * 1000.0,
            ..slow_link()
        };
        let scheme = servers::PsScheme {
            groups: vec![(0..8).collect()],
            bounds: vec![None],
            ..servers::PsScheme::default()
        };
        let eight = work(vec![0.1; 8]);
        let per_s = |c: &CostModel| {
            let o = servers::simulate(&scheme, &eight, c, 20.0, 1);
            assert!(o.server_busy[0] > 0.99, "{o:?}");
            o.iterations as f64 / 20.0
        };
        assert!((per_s(&f32_push) - 12.5).abs() < 0.3);
        assert!((per_s(&bf16_push) - 1.0 / 0.06).abs() < 0.4);
        assert!((f32_push.server_s_per_push(1) - 0.08).abs() < 1e-12);
        assert!((bf16_push.server_s_per_push(1) - 0.06).abs() < 1e-12);
    }

    /// The eight shards of [`shards_divide_a_saturated_servers_work`], each beside one of
    /// the workers on its node: a worker's pushes and replies (0.04 s each) and its shard's
    /// messages share one link. At x pushes a second per worker each side is 0.04 x busy
    /// with the other's traffic, so every message of the other moves at 1 / (1 - 0.04 x)
    /// of its pace: an iteration 0.1 + 0.045 / (1 - 0.04 x) s, which settles at 0.16 s
    /// (x = 6.25, 50 pushes a second in all, against 55 on nodes of their own).
    #[test]
    fn shards_beside_workers_share_their_links() {
        let c = slow_link();
        let scheme = servers::PsScheme {
            groups: vec![(0..8).collect()],
            bounds: vec![None],
            shards: 8,
            ..servers::PsScheme::default()
        };
        let eight = work(vec![0.1; 8]);
        let own = servers::simulate(&scheme, &eight, &c, 20.0, 1);
        let beside = servers::colocated(&scheme, &eight, &c, 20.0, 1);
        let per_s = |o: &Outcome| o.iterations as f64 / 20.0;
        assert!((per_s(&beside) - 50.0).abs() < 2.0, "{beside:?}");
        assert!(per_s(&beside) < 0.95 * per_s(&own), "{beside:?} {own:?}");
        // The plan's co-located rows take the workers' nodes alone.
        let plan = plan(
            &eight,
            &c,
            &PlanOptions {
                group_counts: vec![1],
                shards: Some(8),
                ..opts()
            },
        )
        .unwrap();
        let colocated = row(&plan, "gssp-sharded-colocated", Some(1));
        assert_eq!((colocated.nodes, colocated.shards), (8, Some(8)));
        assert_eq!(row(&plan, "gssp-sharded", Some(1)).nodes, 16);
        assert_eq!(row(&plan, "gssp", Some(1)).nodes, 9);
    }

    /// One worker computing 0.1 s per step, a server whose push costs it 0.04 s each way:
    /// without overlap an iteration takes 0.18 s, 0.08 of it waiting; with it the round
    /// trip hides behind the next step (0.1 s, no wait) and every push but the first misses
    /// exactly its own push before it.
    #[test]
    fn overlap_hides_a_round_trip_shorter_than_a_step() {
        let c = slow_link();
        let scheme = |overlap| servers::PsScheme {
            groups: vec![vec![0]],
            bounds: vec![None],
            overlap,
            ..servers::PsScheme::default()
        };
        let one = work(vec![0.1]);
        let (waits, ahead) = (
            servers::simulate(&scheme(false), &one, &c, 18.0, 1),
            servers::simulate(&scheme(true), &one, &c, 18.0, 1),
        );
        assert!((waits.iterations as f64 - 100.0).abs() <= 1.0, "{waits:?}");
        assert!((ahead.iterations as f64 - 180.0).abs() <= 1.0, "{ahead:?}");
        assert!(
            (waits.wait_fractions[0] - 0.08 / 0.18).abs() < 0.01,
            "{waits:?}"
        );
        assert!(ahead.wait_fractions[0] < 0.01, "{ahead:?}");
        let stale = ahead.staleness.unwrap();
        assert_eq!(
            (stale.quantile(0.0), stale.quantile(0.02), stale.max()),
            (0, 1, 1)
        );
        assert!(stale.mean() > 0.99, "{stale:?}");
    }

    /// With overlap a server releases at its bound less one: bound 1 with overlap keeps two
    /// workers of 10 ms and 40 ms exactly as far apart as bound 0 without it.
    #[test]
    fn overlap_releases_at_the_bound_less_one() {
        let scheme = |bound, overlap| servers::PsScheme {
            groups: vec![vec![0, 1]],
            bounds: vec![Some(bound)],
            overlap,
            ..servers::PsScheme::default()
        };
        let c = cost(1_000, 0.0);
        let pair = work(vec![0.01, 0.04]);
        let run = |bound, overlap| servers::simulate(&scheme(bound, overlap), &pair, &c, 4.0, 1);
        let (lockstep, ahead) = (run(0, false), run(1, true));
        // Both at the slow worker's pace: 2 pushes per 40 ms.
        for o in [&lockstep, &ahead] {
            assert!((o.iterations as f64 - 200.0).abs() <= 2.0, "{o:?}");
        }
        // Bound 1 without overlap lets the fast worker one push further ahead.
        assert!(run(1, false).iterations > lockstep.iterations);
    }

    #[test]
    fn gssp_local_keeps_the_rate_and_pushes_at_one_rhythm() {
        // Two workers at 10 ms, two at 40 ms, in two groups: with 4 local steps for the
        // fast and 1 for the slow, every worker pushes every 40 ms. The images per second
        // are gssp's (neither waits), the fast group's server serves a quarter of the
        // pushes, and the exchange happens as often in both groups.
        let c = cost(1_000, 1e-5);
        let plan = plan(&work(vec![0.01, 0.01, 0.04, 0.04]), &c, &opts()).unwrap();
        let (gssp, local) = (
            row(&plan, "gssp", Some(2)),
            row(&plan, "gssp-local", Some(2)),
        );
        let n = plan.predictions.len();
        assert_eq!(plan.predictions.get(n - 8), Some(local));
        let last: Vec<&str> = plan.predictions[n - 7..]
            .iter()
            .map(|p| p.mode.as_str())
            .collect();
        assert_eq!(
            last,
            [
                "gssp-overlap",
                "gssp-sharded",
                "gssp-sharded-overlap",
                "gssp-sharded-local",
                "gssp-sharded-colocated",
                "gssp-sharded-colocated-overlap",
                "gssp-sharded-colocated-local"
            ]
        );
        assert!(
            (local.images_per_s / gssp.images_per_s - 1.0).abs() < 0.02,
            "{local:?}"
        );
        assert!(local.mean_wait_fraction < 0.02, "{local:?}");
        let (busy, busy_local) = (gssp.server_busy.unwrap(), local.server_busy.unwrap());
        assert!(busy_local < 0.3 * busy, "{busy_local} against {busy}");
        assert!(local.staleness_max.unwrap() <= gssp.staleness_max.unwrap());
    }

    #[test]
    fn auto_staleness_follows_the_run_rule_and_rides_out_transient_spells() {
        // Equal workers with 5x spells: "auto" gives each group the bound a run's profile
        // would (a spell is 4 iterations late, less the jitter allowance: 4), and that
        // bound waits far less than s = 0; without spells it is 0.
        let c = cost(1_000, 1e-5);
        let spells = Workload {
            straggler_prob: 0.1,
            straggler_factor: 5.0,
            ..work(vec![0.01; 8])
        };
        let mut o = opts();
        o.group_counts = vec![2];
        let fixed = plan(&spells, &c, &o).unwrap();
        o.gssp_staleness = Staleness::Auto;
        let auto = plan(&spells, &c, &o).unwrap();
        let (fixed, auto) = (row(&fixed, "gssp", Some(2)), row(&auto, "gssp", Some(2)));
        assert_eq!(fixed.bounds, Some(vec![0, 0]));
        assert_eq!(auto.bounds, Some(vec![4, 4]));
        assert!(
            auto.mean_wait_fraction < 0.6 * fixed.mean_wait_fraction,
            "{auto:?} against {fixed:?}"
        );
        assert!(auto.staleness_max.unwrap() > fixed.staleness_max.unwrap());
        let steady = plan(&work(vec![0.01; 8]), &c, &o).unwrap();
        assert_eq!(row(&steady, "gssp", Some(2)).bounds, Some(vec![0, 0]));
    }

    #[test]
    fn ssp_lets_the_fast_run_ahead_by_the_bound_only() {
        // One worker 4x slower: within its bound the fast one runs ahead, then waits, so
        // over a long run both average the slow pace, and the staleness stays within what
        // the bound allows.
        let c = cost(1_000, 1e-5);
        let mut o = opts();
        o.ssp_staleness = 3;
        let plan = plan(&work(vec![0.01, 0.04]), &c, &o).unwrap();
        let ssp = row(&plan, "ssp", None);
        let slow_pace = 2.0 * 8.0 / 0.04;
        assert!((ssp.images_per_s / slow_pace - 1.0).abs() < 0.05, "{ssp:?}");
        assert!(ssp.staleness_max.unwrap() <= 4 + 1, "{ssp:?}");
    }

    #[test]
    fn a_saturated_server_caps_asp_and_more_groups_relieve_it() {
        // 1,000 workers of 10 ms and a 1M-parameter model (about 1.8 ms a push): one server
        // serves about 550 pushes a second, far below the 100,000 offered.
        let c = cost(1_000_000, 1e-5);
        let per_push = c.server_s_per_push(1);
        let mut o = opts();
        o.horizon_s = Some(2.0);
        o.group_counts = (1..=8).collect();
        let plan = plan(&work(vec![0.01; 1_000]), &c, &o).unwrap();
        let asp = row(&plan, "asp", None);
        assert!(asp.server_busy.unwrap() > 0.99, "{asp:?}");
        let capped = 8.0 / per_push;
        assert!(
            (asp.images_per_s / capped - 1.0).abs() < 0.02,
            "{asp:?} vs {capped}"
        );
        let rates: Vec<f64> = (1..=8)
            .map(|g| row(&plan, "gssp", Some(g)).images_per_s)
            .collect();
        assert!(rates.windows(2).all(|r| r[1] > r[0]), "{rates:?}");
        assert_eq!(plan.recommended_groups, 8);
    }

    #[test]
    fn ten_thousand_workers_are_simulated() {
        let c = cost(61_706, 1e-5);
        let tiers: Vec<f64> = (0..10_000).map(|i| 0.03 * (1 + i / 2_500) as f64).collect();
        let mut o = opts();
        o.horizon_s = None;
        o.group_counts = vec![1, 2];
        let plan = plan(&work(tiers), &c, &o).unwrap();
        assert_eq!(plan.workers, 10_000);
        assert!((plan.horizon_s - 12.0).abs() < 1e-9);
        // One server for 10,000 LeNet-5 workers saturates.
        assert!(row(&plan, "asp", None).server_busy.unwrap() > 0.99);
    }

    #[test]
    fn transient_stragglers_slow_synchronous_rounds() {
        let c = cost(1_000, 1e-5);
        let mut w = work(vec![0.01; 16]);
        let calm = plan(&w, &c, &opts()).unwrap();
        w.straggler_prob = 0.1;
        w.straggler_factor = 5.0;
        let spells = plan(&w, &c, &opts()).unwrap();
        // A round waits for its slowest: with 16 workers, most rounds hold a straggler.
        let bsp = row(&spells, "bsp", None).images_per_s / row(&calm, "bsp", None).images_per_s;
        let asp = row(&spells, "asp", None).images_per_s / row(&calm, "asp", None).images_per_s;
        assert!(bsp < 0.4, "{bsp}");
        assert!((asp - 1.0 / 1.4).abs() < 0.03, "{asp}");
    }

    #[test]
    fn workers_released_at_once_start_a_burst_apart() {
        // Four equal workers released together each round: the k-th starts k bursts late,
        // so each waits for the three others' late pushes, 3 bursts per round in all.
        let burst = 0.002;
        let work = Workload {
            burst_s: burst,
            ..work(vec![0.1; 4])
        };
        let free = CostModel {
            apply_s_per_param: 0.0,
            bytes_per_s: f64::INFINITY,
            ..cost(1000, 0.0)
        };
        let round = 0.1 + 3.0 * burst;
        let lockstep = servers::PsScheme {
            groups: vec![(0..4).collect()],
            bounds: vec![Some(0)],
            ..servers::PsScheme::default()
        };
        let gssp = servers::simulate(&lockstep, &work, &free, 100.0, 1);
        let allreduce = collective::simulate(1, &work, &free, 100.0, 1);
        for outcome in [gssp, allreduce] {
            for w in &outcome.wait_fractions {
                assert!((w - 3.0 * burst / round).abs() < 1e-3, "{w}");
            }
            let expected = 4.0 * 8.0 / round;
            assert!((outcome.images_per_s - expected).abs() / expected < 0.01);
        }
        // One worker at a time (asp) is never part of a burst.
        let asp = servers::PsScheme {
            bounds: vec![None],
            ..lockstep
        };
        let asp = servers::simulate(&asp, &work, &free, 100.0, 1);
        assert!(asp.wait_fractions.iter().all(|&w| w < 1e-9));
    }

    #[test]
    fn histogram_quantiles() {
        let mut h = StalenessHistogram::default();
        for s in [0, 1, 1, 2, 9] {
            h.record(s);
        }
        assert_eq!(h.quantile(0.5), 1);
        assert_eq!(h.quantile(0.99), 9);
        assert_eq!(h.max(), 9);
        assert!((h.mean() - 2.6).abs() < 1e-12);
    }
}
