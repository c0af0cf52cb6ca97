//! Run configuration: the typed TOML schema ([`Config`] and its sections, with their
//! defaults) and loading a file with `--set` overrides.
//!
//! * `overrides.rs`: `--set KEY=VALUE` parsing and applying, the unknown-key check, and the
//!   one-line messages for TOML syntax and type errors.
//! * `validate.rs`: [`Config::validate`] and [`Config::validate_for_world`]. Validation runs
//!   on the fully resolved config (file + overrides) before any work starts and reports the
//!   first problem as `section.key: must be ..., got VALUE`.
//! * `modes/`: each sync mode's strategy ([`modes::Mode`]), which every layer asks about
//!   the mode instead of matching on [`SyncMode`].
//!
//! Unknown keys are errors. One check over the parsed TOML tree rejects them (see
//! `overrides.rs`), naming the key by its full dotted path and where it came from (the file or
//! an override); the serde types do not repeat the rule (`deny_unknown_fields`), so build a
//! [`Config`] from TOML only through [`Config::load`] or [`Config::from_str_with_overrides`].

mod balance;
pub mod modes;
mod overrides;
mod validate;

pub use balance::{BalanceConfig, BatchSplit};
pub use validate::MAX_MAILBOX_MESSAGES;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use toml::{Table, Value};

use overrides::{apply_override, check_known_keys, schema, syntax_error, type_error};

/// A whole run configuration. Unknown keys are rejected by [`Config::from_str_with_overrides`],
/// not by serde (see the module documentation).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Config {
    #[serde(default)]
    pub run: RunConfig,
    pub data: DataConfig,
    pub model: ModelConfig,
    #[serde(default)]
    pub optim: OptimConfig,
    #[serde(default)]
    pub sync: SyncConfig,
    #[serde(default)]
    pub compression: CompressionConfig,
    #[serde(default)]
    pub heterogeneity: HeterogeneityConfig,
    #[serde(default)]
    pub device: DeviceConfig,
    #[serde(default)]
    pub cluster: ClusterConfig,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct RunConfig {
    /// Run name; the default run directory is `runs/<name>`.
    pub name: String,
    /// Epochs over the training set (per worker shard in distributed modes). 0 = no limit.
    pub epochs: f64,
    /// Wall-clock budget for training in seconds. 0 = no limit. At least one of
    /// `epochs` and `time_budget_s` must be > 0.
    pub time_budget_s: f64,
    /// Master seed: weights, shuffling, heterogeneity.
    pub seed: u64,
    /// Evaluate on the test set every this many epochs (one process). 0 = only at the end.
    pub eval_every_epochs: f64,
    /// Distributed modes: snapshot the model every this many seconds; snapshots are
    /// evaluated after training. 0 = only at the end.
    pub snapshot_every_s: f64,
    /// Write a checkpoint every this many seconds of training (and always at the end);
    /// `gssp train --resume RUN_DIR` continues from the newest. 0 = at the end only.
    pub checkpoint_every_s: f64,
    /// gssp: how long a group server waits at a meeting of the group servers (a checkpoint,
    /// a regroup, the end of training) for the others to come; then the job stops, naming
    /// the groups that did not (a server held by a stopped worker, or stopped itself).
    pub meeting_timeout_s: f64,
    /// Accuracy (fraction in 0..1) for `time_to_target_s` in the summary.
    pub target_accuracy: f64,
    /// Write one CSV row every this many iterations.
    pub log_every: usize,
    /// Seconds between rank 0's `progress:` lines when stderr is not a terminal.
    pub progress_every_s: f64,
    /// Compute threads per rank.
    pub threads: usize,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum DatasetKind {
    Mnist,
    FashionMnist,
    Cifar10,
    Synthetic,
    /// Multi30k German-English sentence pairs (train, val, test2016; see
    /// [`crate::data::multi30k`]): the dataset of the `seq2seq` model.
    Multi30k,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DataConfig {
    pub dataset: DatasetKind,
    /// Folder holding the official files (IDX for MNIST/Fashion-MNIST, `*.bin` for CIFAR-10).
    #[serde(default)]
    pub dir: String,
    /// Use only the first N training samples (0 = all).
    #[serde(default)]
    pub train_limit: usize,
    /// Use only the first N test samples (0 = all).
    #[serde(default)]
    pub test_limit: usize,
    /// Synthetic dataset: number of train / test samples, image shape, classes.
    #[serde(default)]
    pub synthetic: SyntheticConfig,
    /// Training-time augmentation (evaluation never augments).
    #[serde(default)]
    pub augment: Augment,
}

/// Training-time augmentation of the images a worker trains on.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Augment {
    #[default]
    None,
    /// Random crop of the image zero-padded by 4 pixels, then a horizontal flip with
    /// probability 1/2 (the CIFAR-10 recipe; mirroring suits natural images, not digits).
    CropFlip,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct SyntheticConfig {
    pub train: usize,
    pub test: usize,
    pub channels: usize,
    pub height: usize,
    pub width: usize,
    pub classes: usize,
    /// Standard deviation of the per-pixel noise around each class prototype.
    pub noise: f32,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum ModelKind {
    Lenet5,
    Mlp,
    Resnet18,
    Vgg19,
    /// The LSTM encoder-decoder of [`crate::compute::model::seq2seq`], on `multi30k`.
    Seq2seq,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ModelConfig {
    pub name: ModelKind,
    /// Hidden layer widths of the MLP (ignored by other models).
    #[serde(default = "default_mlp_hidden")]
    pub mlp_hidden: Vec<usize>,
    /// Channel multiplier of resnet18 and vgg19, and of seq2seq's embedding and hidden
    /// sizes (narrow versions for tests); must stay 1 for the others.
    #[serde(default = "default_width")]
    pub width: f64,
    /// Initial weights from a safetensors file (a gssp export, or a PyTorch `state_dict`
    /// of the matching module saved with safetensors) instead of the seeded
    /// initialisation; every rank reads it. Empty: seeded from `run.seed`.
    #[serde(default)]
    pub init_file: String,
}

fn default_mlp_hidden() -> Vec<usize> {
    vec![128]
}

pub(crate) fn default_width() -> f64 {
    1.0
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum LrSchedule {
    Constant,
    /// Multiply by `lr_decay` at each epoch in `lr_decay_epochs`.
    Step,
    /// Cosine from `lr` down to 0 at the end of the run (`run.epochs` or
    /// `run.time_budget_s`, whichever ends it). The default: a run that ends at learning
    /// rate 0 leaves a settled final model, and gssp's final flush then carries almost
    /// nothing.
    Cosine,
}

/// How a parameter server scales the learning rate of a stale push.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum StalenessLr {
    /// Every push at the schedule's learning rate.
    None,
    /// A push of staleness t at `lr / max(1, t)` (Zhang et al., "Staleness-aware
    /// Async-SGD", IJCAI 2016).
    Inverse,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct OptimConfig {
    /// SGD with momentum, or Adam (PyTorch's defaults: betas 0.9 and 0.999, eps 1e-8;
    /// `momentum` is then unused).
    pub kind: OptimizerKind,
    pub lr: f64,
    pub momentum: f64,
    pub weight_decay: f64,
    /// Per-worker mini-batch size.
    pub batch_size: usize,
    pub lr_schedule: LrSchedule,
    pub lr_decay: f64,
    pub lr_decay_epochs: Vec<f64>,
    /// Linear warm-up of the learning rate over this many epochs (0 = none).
    pub warmup_epochs: f64,
    /// Learning rate of stale pushes where a server applies them one by one (asp, ssp, the
    /// group servers of gssp).
    pub staleness_lr: StalenessLr,
    /// DC-ASGD's lambda: where a server applies pushes one by one, a push's gradient g is
    /// corrected by `lambda * g * g * (w_now - w_then)` (0 = off).
    pub delay_compensation: f64,
    /// Clip the gradient of each step to this global L2 norm before the optimizer uses
    /// it (0 = off); where that is in each mode: docs/config.md, `[optim]`.
    pub clip_norm: f64,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum OptimizerKind {
    Sgd,
    Adam,
}

/// `sync.mode`. What each mode is (its roles, update rule, set-up, summary, simulation)
/// is its strategy's to say ([`modes::of`]); code asks that rather than matching here.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum SyncMode {
    /// One process, no MPI communication.
    Single,
    Bsp,
    Asp,
    Ssp,
    Gssp,
    Allreduce,
    /// Local SGD: `sync.localsgd.local_steps` steps on each rank's replica, then an average.
    Localsgd,
    /// Asynchronous local SGD (Liu et al. 2024): each worker takes local steps on its own
    /// replica and pushes the change to one server, which applies it through an outer
    /// optimizer at once (`[sync.async_localsgd]`).
    AsyncLocalsgd,
}

/// The SSP staleness bound: a number, or `"auto"` (gssp with profile grouping): each group's
/// bound from the delays its workers showed while profiled ([`crate::protocol::grouping::auto_staleness`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Staleness {
    Bound(usize),
    Auto,
}

impl Staleness {
    /// The fixed bound, or `None` for `"auto"`.
    pub fn bound(self) -> Option<usize> {
        match self {
            Staleness::Bound(s) => Some(s),
            Staleness::Auto => None,
        }
    }
}

impl Serialize for Staleness {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        serialize_count_or_auto(self.bound(), ser)
    }
}

impl<'de> Deserialize<'de> for Staleness {
    fn deserialize<D: serde::Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        Ok(deserialize_count_or_auto(de)?.map_or(Staleness::Auto, Staleness::Bound))
    }
}

/// The number of gssp groups: a number, or `"auto"` (profile grouping): the count the cost
/// model predicts fastest, up to `sync.gssp.max_groups` ([`crate::protocol::costmodel::choose_group_count`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Groups {
    Count(usize),
    Auto,
}

impl Groups {
    /// The fixed count, or `None` for `"auto"`.
    pub fn count(self) -> Option<usize> {
        match self {
            Groups::Count(g) => Some(g),
            Groups::Auto => None,
        }
    }
}

impl Serialize for Groups {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        serialize_count_or_auto(self.count(), ser)
    }
}

impl<'de> Deserialize<'de> for Groups {
    fn deserialize<D: serde::Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        Ok(deserialize_count_or_auto(de)?.map_or(Groups::Auto, Groups::Count))
    }
}

fn serialize_count_or_auto<S: serde::Serializer>(
    v: Option<usize>,
    ser: S,
) -> Result<S::Ok, S::Error> {
    match v {
        Some(n) => ser.serialize_u64(n as u64),
        None => ser.serialize_str("auto"),
    }
}

/// An integer >= 0 (`Some`) or the string `"auto"` (`None`).
fn deserialize_count_or_auto<'de, D: serde::Deserializer<'de>>(
    de: D,
) -> Result<Option<usize>, D::Error> {
    struct Visit;
    impl serde::de::Visitor<'_> for Visit {
        type Value = Option<usize>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an integer >= 0 or \"auto\"")
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Option<usize>, E> {
            usize::try_from(v)
                .map(Some)
                .map_err(|_| E::invalid_value(serde::de::Unexpected::Unsigned(v), &self))
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Option<usize>, E> {
            u64::try_from(v)
                .map_err(|_| E::invalid_value(serde::de::Unexpected::Signed(v), &self))
                .and_then(|v| self.visit_u64(v))
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Option<usize>, E> {
            match v {
                "auto" => Ok(None),
                _ => Err(E::invalid_value(serde::de::Unexpected::Str(v), &self)),
            }
        }
    }
    de.deserialize_any(Visit)
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Grouping {
    Profile,
    Static,
}

/// How a gssp server sends sparse (top-k) updates to its peers.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum SparseTransport {
    /// One contiguous put per peer into a ring in its mailbox window; k values to apply.
    Mailbox,
    /// `MPI_Accumulate(SUM)` through an indexed-block datatype into the peer's dense inbox,
    /// which the peer then drains densely (the scheme of docs/design.md).
    Accumulate,
}

/// `[sync]`: the mode, and one section of settings per mode that has any. A file may hold
/// the sections of several modes (a scenario file that every mode of a comparison runs,
/// switching `sync.mode`); a run reads its own mode's section only, and every section is
/// validated on its own. Code asks the mode's strategy ([`SyncConfig::strategy`]), which
/// reads its mode's section.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct SyncConfig {
    pub mode: SyncMode,
    /// `[sync.ssp]`: the single-server stale synchronous baseline.
    pub ssp: SspConfig,
    /// `[sync.gssp]`: groups, their staleness, the exchange between group servers and
    /// regrouping.
    pub gssp: GsspConfig,
    /// `[sync.localsgd]`: local SGD's averaging period.
    pub localsgd: LocalSgdConfig,
    /// `[sync.async_localsgd]`: asynchronous local SGD's local steps and outer optimizer.
    pub async_localsgd: AsyncLocalSgdConfig,
    /// `[sync.balance]`: each worker's batch in proportion to its speed (every mode with
    /// workers but async-localsgd).
    pub balance: BalanceConfig,
    /// Workers compute their next step while a push and its reply travel, on the weights
    /// they hold (asp, ssp and gssp without local steps). The step computed ahead spends
    /// one step of the staleness bound: a server with bound s answers a worker only while
    /// it is at most s - 1 pushes ahead of the slowest, so no step is computed on weights
    /// staler than s allows, as without overlap (module docs of `runtime::worker`).
    pub overlap: bool,
    /// Server ranks per group (asp, ssp, gssp): each holds one contiguous range of the
    /// parameters, takes that range of every push and answers it with that range of the
    /// weights, so a group's server traffic is spread over this many links (ps-lite's key
    /// ranges; module docs of `runtime::shard_links`). 1: one server per group. `"auto"`
    /// (gssp grouped by profile): the count the cost model predicts fastest, up to
    /// `max_shards` ([`crate::protocol::costmodel::choose_shard_count`]).
    pub shards: Shards,
    /// With `shards = "auto"`: the most server ranks per group considered. The world
    /// reserves `groups x max_shards` server ranks; those beyond the chosen count sit idle.
    pub max_shards: usize,
}

impl SyncConfig {
    /// The strategy of this section's mode ([`modes::of`]); its methods that take the
    /// section read the mode's own part of it.
    pub fn strategy(&self) -> &'static dyn modes::Mode {
        modes::of(self.mode)
    }

    /// Server ranks each group reserves: `shards`, or `max_shards` with `"auto"`.
    pub fn shards_reserved(&self) -> usize {
        self.shards.count().unwrap_or(self.max_shards).max(1)
    }
}

/// Server ranks per group: a number, or `"auto"`: the count the cost model predicts
/// fastest after the profile, up to `sync.max_shards`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shards {
    Count(usize),
    Auto,
}

impl Shards {
    /// The fixed count, or `None` for `"auto"`.
    pub fn count(self) -> Option<usize> {
        match self {
            Shards::Count(s) => Some(s),
            Shards::Auto => None,
        }
    }
}

impl std::fmt::Display for Shards {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.count() {
            Some(s) => write!(f, "{s}"),
            None => write!(f, "\"auto\""),
        }
    }
}

impl Serialize for Shards {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        serialize_count_or_auto(self.count(), ser)
    }
}

impl<'de> Deserialize<'de> for Shards {
    fn deserialize<D: serde::Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        Ok(deserialize_count_or_auto(de)?.map_or(Shards::Auto, Shards::Count))
    }
}

/// `[sync.ssp]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct SspConfig {
    /// The staleness bound s: a worker may be at most s pushes ahead of the slowest.
    /// 0 = BSP. The authors' code uses 3.
    pub staleness: usize,
}

/// `[sync.localsgd]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct LocalSgdConfig {
    /// Local steps between two averages (H).
    pub local_steps: usize,
}

/// `[sync.async_localsgd]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct AsyncLocalSgdConfig {
    /// Local steps between two pushes (H) of the fastest worker; every worker's, without
    /// `dynamic_local_steps`.
    pub local_steps: usize,
    /// Dynamic local updates (DyLU, Liu et al. 2024): each worker's local steps in
    /// proportion to its profiled speed, `max(1, round(local_steps * fastest / own))`
    /// seconds per step, so that every worker pushes at about one rhythm.
    pub dynamic_local_steps: bool,
    /// With `dynamic_local_steps`: local iterations each worker times at the start.
    pub profile_iters: usize,
    /// The server's Delayed Nesterov outer optimizer: learning rate, momentum, and the
    /// changes between two momentum updates (0: one per worker).
    pub outer_lr: f64,
    pub outer_momentum: f64,
    pub outer_period: usize,
}

impl AsyncLocalSgdConfig {
    /// The server's outer optimizer: Delayed Nesterov, as the method is defined.
    pub fn outer(&self) -> OuterConfig {
        OuterConfig {
            kind: OuterKind::DelayedNesterov,
            lr: self.outer_lr,
            momentum: self.outer_momentum,
            period: self.outer_period,
        }
    }
}

/// `[sync.gssp]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct GsspConfig {
    /// SSP staleness bound inside each group. 0 = BSP in the group; `"auto"` per group from
    /// the profile (with `grouping = "profile"`).
    pub staleness: Staleness,
    /// Number of groups G (= number of group servers, ranks 0..G-1), or `"auto"`.
    pub groups: Groups,
    /// With `groups = "auto"`: the most groups considered. Ranks 0..max_groups-1 are
    /// reserved as servers; those the chosen count leaves over stay idle.
    pub max_groups: usize,
    pub grouping: Grouping,
    /// With `grouping = "profile"`: local iterations each worker times.
    pub profile_iters: usize,
    /// With `grouping = "static"`: world ranks of the workers of each group.
    pub static_groups: Vec<Vec<usize>>,
    /// A group server exchanges with its peers every this many applied pushes.
    pub inter_group_every: usize,
    /// With top-k: each peer's mailbox holds this many messages of the target ratio's
    /// size; a sender whose message does not fit keeps it unsent until the peer drains.
    pub mailbox_messages: usize,
    /// With top-k: how sparse updates travel (see [`SparseTransport`]).
    pub sparse_transport: SparseTransport,
    /// Also apply peers' updates between this server's own exchanges, at the first push
    /// after they arrive (fresher replicas; costs a drain per arrival).
    pub drain_on_arrival: bool,
    /// Regroup the workers by their measured speed every this many seconds of training
    /// (see [`crate::protocol::regroup`]). 0 = never: the groups formed at the start stay.
    pub regroup_every_s: f64,
    /// With regrouping: the least relative gain in predicted throughput for workers to
    /// move (hysteresis).
    pub regroup_min_gain: f64,
    /// `[sync.gssp.outer]`: how a group server turns its own group's progress into the
    /// steps every replica takes.
    pub outer: OuterConfig,
    /// Work per push, in batches: the fastest worker's local steps between two pushes (H).
    /// 1 = every push is one batch's gradient. Above 1 every worker takes local steps on
    /// its own replica with its own optimizer and pushes the change they made, which its
    /// group server applies scaled by 1/W as it applies a gradient (see
    /// [`crate::runtime::local_worker`]).
    pub local_steps: usize,
    /// With `local_steps` > 1: each worker's local steps in proportion to its profiled
    /// speed, `max(1, round(local_steps * fastest / own))`, so that every worker pushes,
    /// and every group exchanges, at about one wall-clock rhythm; otherwise `local_steps`
    /// each.
    pub dynamic_local_steps: bool,
}

impl GsspConfig {
    /// Whether workers take local steps and push the change they made (`local_steps` > 1).
    pub fn takes_local_steps(&self) -> bool {
        self.local_steps > 1
    }
}

/// The outer optimizer: what a server makes of a delta, a change the inner optimizer made
/// over several steps, before the replicas take it (DiLoCo, Douillard et al. 2023;
/// asynchronous local SGD, Liu et al. 2024). The delta plays the part of a (negative)
/// gradient: with `nesterov` a step is `lr * (delta + momentum * m)` with
/// `m = momentum * m + delta`; `delayed-nesterov` takes `lr / period * delta` at once and
/// the momentum part, from the mean of the last `period` deltas, every `period`-th step.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct OuterConfig {
    pub kind: OuterKind,
    /// The outer learning rate (1 with momentum 0 is `none`).
    pub lr: f64,
    /// The outer momentum, in [0, 1).
    pub momentum: f64,
    /// `delayed-nesterov`: deltas between two momentum updates (N); 0 = one per sender
    /// (the groups in gssp, the workers in async-localsgd).
    pub period: usize,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum OuterKind {
    /// Every delta as it is (outer SGD at rate 1).
    None,
    Nesterov,
    DelayedNesterov,
}

impl Default for OuterConfig {
    fn default() -> Self {
        Self {
            kind: OuterKind::None,
            lr: 0.7,
            momentum: 0.9,
            period: 4,
        }
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum CompressionKind {
    Dense,
    Topk,
    /// Low-rank PowerSGD factors of each weight matrix ([`crate::compress::powersgd`]).
    Powersgd,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum RatioPolicy {
    Uniform,
    Speed,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct CompressionConfig {
    pub kind: CompressionKind,
    /// Target upload ratio rho (fraction of the model sent per exchange), in (0, 1].
    pub ratio: f64,
    pub policy: RatioPolicy,
    /// Lower clamp of every group's ratio, in (0, ratio].
    pub ratio_min: f64,
    /// Ratio decays exponentially from 1 (dense) to its target over this many epochs.
    pub warmup_epochs: f64,
    /// Smoothing factor of the speed moving average, in (0, 1].
    pub speed_ema: f64,
    /// powersgd: the rank r of every weight matrix's factors at the ratio `ratio` (a group
    /// at another ratio under the `speed` policy or the warm-up scales it alike).
    pub rank: usize,
    /// What a worker's push to its server carries (every mode with servers).
    pub push: Precision,
    /// What a server's reply to a worker (the weights it computes on) carries.
    pub reply: Precision,
}

/// The values of a message between a worker and its server.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Precision {
    /// Each value as it was computed.
    #[default]
    F32,
    /// Each value rounded to bfloat16, two a word ([`crate::compress::bf16`]): half the
    /// bytes. A push carries what rounding dropped into the worker's next push; a reply's
    /// weights are rounded as mixed-precision training rounds the weights it computes on.
    Bf16,
}

impl Precision {
    /// Bytes a message of `values` values moves.
    pub fn bytes(self, values: usize) -> f64 {
        match self {
            Precision::F32 => 4.0 * values as f64,
            Precision::Bf16 => 4.0 * values.div_ceil(2) as f64,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SpeedTier {
    /// Slowdown factor (>= 1) of the workers in this tier.
    pub factor: f64,
    /// How many workers (taken in rank order) are in this tier.
    pub workers: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct HeterogeneityConfig {
    /// Slowdown factor per worker (index = worker index, 0-based); empty = use `tiers`
    /// or all 1.0.
    pub slowdown: Vec<f64>,
    /// Speed tiers, assigned to workers in order; mutually exclusive with `slowdown`.
    pub tiers: Vec<SpeedTier>,
    /// Pacing unit in seconds: a worker's compute phase lasts at least factor x unit.
    /// 0 = calibrate the unit from the worker's own uncontended compute time.
    pub unit_s: f64,
    /// Per-iteration probability of a transient straggler.
    pub straggler_prob: f64,
    /// Extra slowdown factor of a transient straggler iteration (>= 1).
    pub straggler_factor: f64,
    /// Speed changes during the run, in ascending `at_s` order: a node that becomes slow
    /// (or recovers) mid-run.
    pub changes: Vec<SpeedChange>,
    /// Emulated network link of every rank, Gbit/s (0 = none: the node's own transport).
    /// Each message holds its sender for its transfer and queues at a busy receiver
    /// ([`crate::comm::link::EmulatedLink`]), so one node can stand in for a cluster whose
    /// network is slow against its compute.
    pub link_gbps: f64,
}

/// From `at_s` seconds after training starts (the run's clock, the CSV `time_s`), worker
/// `worker` (0-based, servers not counted, as in `slowdown`) runs at slowdown `factor`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SpeedChange {
    pub at_s: f64,
    pub worker: usize,
    pub factor: f64,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum DeviceKind {
    Cpu,
    Cuda,
    Auto,
}

/// Where a gssp group server selects its sparse exchanges' top-k
/// ([`crate::compress::mirror`]).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum ExchangeSelect {
    /// On the host.
    Cpu,
    /// On the server's GPU, the peer view mirrored there.
    Cuda,
    /// On the GPU with `device.kind = "cuda"` and a model of at least
    /// [`EXCHANGE_SELECT_GPU_PARAMS`] parameters; else on the host.
    Auto,
}

/// The model size from which `device.exchange_select = "auto"` selects on the GPU: an
/// estimate (a host pass reads weights and view, about 8 bytes per parameter; the GPU pays
/// one 4-byte upload per parameter plus some twenty launches and two small copies, about
/// 0.1 ms), to be replaced by `gssp bench topk --device cuda`'s measured crossover.
pub const EXCHANGE_SELECT_GPU_PARAMS: usize = 1_000_000;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct DeviceConfig {
    pub kind: DeviceKind,
    pub exchange_select: ExchangeSelect,
}

impl DeviceConfig {
    /// Whether a gssp group server of a model of `params` parameters selects on its GPU.
    pub fn exchange_on_gpu(&self, params: usize) -> bool {
        match self.exchange_select {
            ExchangeSelect::Cpu => false,
            ExchangeSelect::Cuda => true,
            ExchangeSelect::Auto => {
                self.kind == DeviceKind::Cuda && params >= EXCHANGE_SELECT_GPU_PARAMS
            }
        }
    }
}

/// The cluster's figures for the timing cost model ([`crate::protocol::costmodel`]): what
/// `sync.gssp.groups = "auto"` and regrouping predict speeds with. The defaults describe one
/// node's shared memory.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct ClusterConfig {
    /// One message's latency, microseconds.
    pub latency_us: f64,
    /// Point-to-point bandwidth between a server and a worker or a peer, Gbit/s.
    pub bandwidth_gbps: f64,
    /// A server's time to apply a push, nanoseconds per parameter.
    pub apply_ns_per_param: f64,
    /// Nodes the job's ranks are placed on (Slurm's `--nodes`); the ranks of a node share
    /// its network link ([`crate::protocol::placement`]). 0: a node for every rank.
    pub nodes: usize,
    /// How ranks are laid over the nodes (Slurm's `--distribution`): `block` keeps the
    /// servers (the first ranks) on nodes of their own, `cyclic` puts them beside workers.
    pub distribution: Distribution,
}

/// How consecutive ranks are laid over the nodes.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Distribution {
    /// Rank r on node r / ceil(ranks / nodes).
    #[default]
    Block,
    /// Rank r on node r mod nodes.
    Cyclic,
}

impl Distribution {
    /// The name Slurm's `--distribution` takes.
    pub fn name(self) -> &'static str {
        match self {
            Distribution::Block => "block",
            Distribution::Cyclic => "cyclic",
        }
    }

    /// mpirun's option that places ranks the same way.
    pub fn mpirun_map_by(self) -> &'static str {
        match self {
            Distribution::Block => "slot",
            Distribution::Cyclic => "node",
        }
    }
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            latency_us: 1.0,
            bandwidth_gbps: 80.0,
            apply_ns_per_param: 0.55,
            nodes: 0,
            distribution: Distribution::Block,
        }
    }
}

/// Most classes a dataset can have: labels are bytes.
pub const MAX_CLASSES: usize = u8::MAX as usize + 1;

/// The input ResNet-18 and VGG-19 are built for: CIFAR-10's 3x32x32 images (channels,
/// height, width).
pub const CIFAR_INPUT: (usize, usize, usize) = (3, 32, 32);

/// The default of `sync.gssp.regroup_min_gain`: the least relative gain in predicted throughput
/// for a regroup to move workers. Below it a difference counts as noise (hysteresis).
pub const REGROUP_MIN_GAIN: f64 = 0.10;

/// Where Fashion-MNIST is looked for when `data.dir` is empty: the folder where Debian/Ubuntu's
/// `dataset-fashion-mnist` package installs its files.
pub const FASHION_MNIST_DEFAULT_DIR: &str = "/usr/share/datasets/fashion-mnist";

impl RunConfig {
    /// How far the run is: the larger of the epochs done over `epochs` and the seconds
    /// spent over `time_budget_s` (of the limits that are set), so 1 where it stops. The
    /// cosine schedule follows it, so a time-budget run ends at learning rate 0 as well.
    pub fn progress(&self, epoch: f64, elapsed_s: f64) -> f64 {
        let share = |done: f64, limit: f64| if limit > 0.0 { done / limit } else { 0.0 };
        share(epoch, self.epochs).max(share(elapsed_s, self.time_budget_s))
    }

    /// Whether the run has used up its epochs or its time budget (a limit of 0 is none).
    pub fn should_stop(&self, epoch: f64, elapsed_s: f64) -> bool {
        (self.epochs > 0.0 && epoch >= self.epochs)
            || (self.time_budget_s > 0.0 && elapsed_s >= self.time_budget_s)
    }
}

impl Default for RunConfig {
    fn default() -> Self {
        Self {
            name: "gssp".to_string(),
            epochs: 1.0,
            time_budget_s: 0.0,
            seed: 42,
            eval_every_epochs: 1.0,
            snapshot_every_s: 0.0,
            checkpoint_every_s: 0.0,
            meeting_timeout_s: 300.0,
            target_accuracy: 0.98,
            log_every: 1,
            progress_every_s: 10.0,
            threads: 1,
        }
    }
}

impl Default for SyntheticConfig {
    fn default() -> Self {
        Self {
            train: 2048,
            test: 512,
            channels: 1,
            height: 28,
            width: 28,
            classes: 10,
            noise: 0.5,
        }
    }
}

impl Default for OptimConfig {
    fn default() -> Self {
        Self {
            kind: OptimizerKind::Sgd,
            lr: 0.05,
            momentum: 0.9,
            weight_decay: 0.0005,
            batch_size: 64,
            lr_schedule: LrSchedule::Cosine,
            lr_decay: 0.1,
            lr_decay_epochs: Vec::new(),
            warmup_epochs: 0.0,
            staleness_lr: StalenessLr::None,
            delay_compensation: 0.0,
            clip_norm: 0.0,
        }
    }
}

impl Default for SyncConfig {
    fn default() -> Self {
        Self {
            mode: SyncMode::Single,
            ssp: SspConfig::default(),
            gssp: GsspConfig::default(),
            localsgd: LocalSgdConfig::default(),
            async_localsgd: AsyncLocalSgdConfig::default(),
            balance: BalanceConfig::default(),
            overlap: false,
            shards: Shards::Count(1),
            max_shards: 4,
        }
    }
}

impl Default for AsyncLocalSgdConfig {
    fn default() -> Self {
        Self {
            local_steps: 8,
            dynamic_local_steps: true,
            profile_iters: 5,
            outer_lr: 1.0,
            outer_momentum: 0.5,
            outer_period: 0,
        }
    }
}

impl Default for SspConfig {
    fn default() -> Self {
        Self { staleness: 3 }
    }
}

impl Default for LocalSgdConfig {
    fn default() -> Self {
        Self { local_steps: 8 }
    }
}

impl Default for GsspConfig {
    fn default() -> Self {
        Self {
            staleness: Staleness::Bound(3),
            groups: Groups::Count(1),
            max_groups: 4,
            grouping: Grouping::Profile,
            profile_iters: 15,
            static_groups: Vec::new(),
            inter_group_every: 8,
            mailbox_messages: 8,
            sparse_transport: SparseTransport::Mailbox,
            drain_on_arrival: false,
            regroup_every_s: 0.0,
            regroup_min_gain: REGROUP_MIN_GAIN,
            outer: OuterConfig::default(),
            local_steps: 1,
            dynamic_local_steps: true,
        }
    }
}

impl Default for CompressionConfig {
    fn default() -> Self {
        Self {
            kind: CompressionKind::Dense,
            ratio: 0.01,
            policy: RatioPolicy::Speed,
            ratio_min: 0.001,
            warmup_epochs: 0.0,
            speed_ema: 0.2,
            rank: 4,
            push: Precision::F32,
            reply: Precision::F32,
        }
    }
}

impl Default for HeterogeneityConfig {
    fn default() -> Self {
        Self {
            slowdown: Vec::new(),
            tiers: Vec::new(),
            unit_s: 0.0,
            straggler_prob: 0.0,
            straggler_factor: 1.0,
            changes: Vec::new(),
            link_gbps: 0.0,
        }
    }
}

impl Default for DeviceConfig {
    fn default() -> Self {
        Self {
            kind: DeviceKind::Auto,
            exchange_select: ExchangeSelect::Auto,
        }
    }
}

impl DataConfig {
    /// The folder to read the dataset from: `dir`, or for Fashion-MNIST with an empty `dir`
    /// the system-wide copy at [`FASHION_MNIST_DEFAULT_DIR`].
    pub fn resolved_dir(&self) -> PathBuf {
        if self.dir.is_empty() && self.dataset == DatasetKind::FashionMnist {
            PathBuf::from(FASHION_MNIST_DEFAULT_DIR)
        } else {
            PathBuf::from(&self.dir)
        }
    }
}

/// A configuration problem. `Display` is the single line the CLI prints.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The cause is in the message, not a `source`, so that `{:#}` prints it once.
    #[error("cannot read config file {}: {cause}", .path.display())]
    Read {
        path: PathBuf,
        cause: std::io::Error,
    },
    /// The text is not TOML; `location` is `source:line:column` (or just `source`).
    #[error("{location}: invalid TOML: {message}")]
    Syntax { location: String, message: String },
    /// A `dotted.key=VALUE` override that cannot be applied.
    #[error("invalid override `{text}`: {reason}")]
    Override { text: String, reason: String },
    /// A key the schema does not have, named by its full dotted path.
    #[error("{origin}: unknown key {key} (allowed there: {allowed})")]
    UnknownKey {
        origin: String,
        key: String,
        allowed: String,
    },
    /// A value of the wrong type (or a missing required key); `key` is empty at the top level.
    #[error("{origin}: {}{message}", if .key.is_empty() { String::new() } else { format!("{}: ", .key) })]
    Type {
        origin: String,
        key: String,
        message: String,
    },
    /// A value outside its allowed range.
    #[error("{key}: must be {requirement}, got {got}")]
    Invalid {
        key: String,
        requirement: String,
        got: String,
    },
}

impl Config {
    /// Reads `path`, applies `overrides` (`dotted.key=VALUE`) and deserialises. Does not run
    /// [`Config::validate`]; callers validate the resolved config once, after all overrides.
    pub fn load(path: &Path, overrides: &[String]) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|cause| ConfigError::Read {
            path: path.to_path_buf(),
            cause,
        })?;
        Self::from_str_with_overrides(&text, &path.display().to_string(), overrides)
    }

    /// Parses TOML `text` (named `source` in errors), applies `overrides` to the parsed tree
    /// and deserialises the result, so an override is checked exactly like a file value.
    ///
    /// An override's VALUE is read as a TOML value (`2`, `0.5`, `true`, `[[2,3],[4]]`,
    /// `{ train = 10 }`, `"quoted"`) when it parses as one, otherwise as a bare string
    /// (`/scratch/mnist`, `ssp`). Intermediate tables are created as needed.
    pub fn from_str_with_overrides(
        text: &str,
        source: &str,
        overrides: &[String],
    ) -> Result<Config, ConfigError> {
        let mut root: Table = toml::from_str(text).map_err(|e| syntax_error(text, source, &e))?;
        let schema = schema();
        // Check the file before the overrides so an unknown key is blamed on the right origin.
        check_known_keys(&root, &schema, "", source)?;
        for text in overrides {
            apply_override(&mut root, text)?;
        }
        if !overrides.is_empty() {
            check_known_keys(&root, &schema, "", "override")?;
        }
        Value::Table(root)
            .try_into()
            .map_err(|e| type_error(source, overrides, &e))
    }

    /// The resolved config as TOML, as written to the run directory. It loads back to an
    /// equal `Config`.
    pub fn to_toml_string(&self) -> String {
        // Every field is a string, number, bool, array or table, all of which TOML can hold.
        toml::to_string_pretty(self).expect("Config fields are all representable in TOML")
    }

    /// Number of server ranks the sync mode reserves (ranks `0..num_servers()`; gssp's
    /// `groups = "auto"` may leave some of them idle).
    pub fn num_servers(&self) -> usize {
        self.sync.strategy().servers(&self.sync).reserved() * self.sync.shards_reserved()
    }

    /// Number of worker ranks in a world of `world_size` ranks (all ranks that are not servers).
    pub fn num_workers(&self, world_size: usize) -> usize {
        world_size.saturating_sub(self.num_servers())
    }
}

/// The name a config file uses for `value`: serde's name of a unit variant (`"fashion-mnist"`
/// for [`DatasetKind::FashionMnist`]), so it cannot drift from what the config accepts.
fn config_name<T: Serialize>(value: &T) -> String {
    match Value::try_from(value) {
        Ok(Value::String(name)) => name,
        other => unreachable!("a config enum serialises to its variant name, got {other:?}"),
    }
}

/// `Display` of the config's enums: the name a config file uses for the value (its serde
/// name), e.g. `sync.mode = "allreduce"` displays as `allreduce`.
macro_rules! display_as_config_name {
    ($($t:ty),* $(,)?) => {$(
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&config_name(self))
            }
        }
    )*};
}

display_as_config_name!(
    OuterKind,
    DatasetKind,
    ModelKind,
    LrSchedule,
    StalenessLr,
    SyncMode,
    Grouping,
    SparseTransport,
    BatchSplit,
    CompressionKind,
    RatioPolicy,
    Precision,
    DeviceKind,
    ExchangeSelect,
    Augment,
);

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) const MINIMAL: &str = "[data]\ndataset = \"synthetic\"\n[model]\nname = \"mlp\"\n";

    /// The minimal config with `overrides` applied.
    pub(super) fn with(overrides: &[&str]) -> Result<Config, ConfigError> {
        let overrides: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
        Config::from_str_with_overrides(MINIMAL, "test.toml", &overrides)
    }

    pub(super) fn example_path() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/example.toml")
    }

    /// Every variant of every config enum displays as the name the config accepts for it.
    #[test]
    fn enum_names_round_trip_through_serde() {
        fn check<T>(all: &[T]) -> Vec<String>
        where
            T: Serialize
                + serde::de::DeserializeOwned
                + std::fmt::Display
                + PartialEq
                + std::fmt::Debug,
        {
            all.iter()
                .map(|v| {
                    let name = v.to_string();
                    let back: T = Value::String(name.clone())
                        .try_into()
                        .unwrap_or_else(|e| panic!("{name} does not load back: {e}"));
                    assert_eq!(&back, v, "{name}");
                    name
                })
                .collect()
        }
        use DatasetKind as D;
        use SyncMode as M;
        assert_eq!(
            check(&[
                M::Single,
                M::Bsp,
                M::Asp,
                M::Ssp,
                M::Gssp,
                M::Allreduce,
                M::Localsgd,
                M::AsyncLocalsgd
            ]),
            [
                "single",
                "bsp",
                "asp",
                "ssp",
                "gssp",
                "allreduce",
                "localsgd",
                "async-localsgd"
            ]
        );
        assert_eq!(
            check(&[D::Mnist, D::FashionMnist, D::Cifar10, D::Synthetic]),
            ["mnist", "fashion-mnist", "cifar10", "synthetic"]
        );
        check(&[
            ModelKind::Lenet5,
            ModelKind::Mlp,
            ModelKind::Resnet18,
            ModelKind::Vgg19,
        ]);
        check(&[LrSchedule::Constant, LrSchedule::Step, LrSchedule::Cosine]);
        assert_eq!(
            check(&[StalenessLr::None, StalenessLr::Inverse]),
            ["none", "inverse"]
        );
        check(&[Grouping::Profile, Grouping::Static]);
        check(&[SparseTransport::Mailbox, SparseTransport::Accumulate]);
        check(&[
            CompressionKind::Dense,
            CompressionKind::Topk,
            CompressionKind::Powersgd,
        ]);
        check(&[RatioPolicy::Uniform, RatioPolicy::Speed]);
        check(&[DeviceKind::Cpu, DeviceKind::Cuda, DeviceKind::Auto]);
        check(&[
            ExchangeSelect::Cpu,
            ExchangeSelect::Cuda,
            ExchangeSelect::Auto,
        ]);
    }

    #[test]
    fn minimal_config_gets_defaults_and_validates() {
        let cfg = with(&[]).unwrap();
        assert_eq!(cfg.run, RunConfig::default());
        assert_eq!(cfg.run.name, "gssp");
        assert_eq!(cfg.optim.lr, 0.05);
        assert_eq!(cfg.sync.mode, SyncMode::Single);
        assert_eq!(cfg.sync.gssp.staleness, Staleness::Bound(3));
        assert_eq!(cfg.sync.ssp.staleness, 3);
        assert_eq!(cfg.compression.policy, RatioPolicy::Speed);
        assert_eq!(cfg.heterogeneity.straggler_factor, 1.0);
        assert_eq!(cfg.device.kind, DeviceKind::Auto);
        assert_eq!(cfg.data.synthetic.noise, 0.5);
        assert_eq!(cfg.model.mlp_hidden, vec![128]);
        cfg.validate().unwrap();
        cfg.validate_for_world(1).unwrap();
    }

    #[test]
    fn example_toml_loads_validates_and_matches_defaults() {
        let cfg = Config::load(&example_path(), &[]).unwrap();
        cfg.validate().unwrap();
        cfg.validate_for_world(1).unwrap();
        // The example documents the defaults, so it must equal a config that sets nothing.
        assert_eq!(cfg, with(&[]).unwrap());
    }

    #[test]
    fn lenet5_mnist_config_loads() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/lenet5_mnist.toml");
        let cfg = Config::load(&path, &[]).unwrap();
        cfg.validate_for_world(1).unwrap();
        assert_eq!(cfg.model.name, ModelKind::Lenet5);
        assert_eq!(cfg.data.dataset, DatasetKind::Mnist);
        assert_eq!(
            cfg.data.resolved_dir(),
            PathBuf::from("../shared/data/mnist")
        );
        assert_eq!(cfg.optim.batch_size, 64);
        assert_eq!(cfg.run.epochs, 2.0);
    }

    #[test]
    fn missing_file_names_path() {
        let msg = Config::load(Path::new("/nonexistent/dir/x.toml"), &[])
            .unwrap_err()
            .to_string();
        assert!(
            msg.starts_with("cannot read config file /nonexistent/dir/x.toml: "),
            "{msg}"
        );
    }

    #[test]
    fn resolved_dir_defaults_only_for_fashion_mnist() {
        let cfg = with(&["data.dataset=fashion-mnist"]).unwrap();
        assert_eq!(
            cfg.data.resolved_dir(),
            PathBuf::from("/usr/share/datasets/fashion-mnist")
        );
        cfg.validate().unwrap();
        let cfg = with(&["data.dataset=fashion-mnist", "data.dir=/x"]).unwrap();
        assert_eq!(cfg.data.resolved_dir(), PathBuf::from("/x"));
        let cfg = with(&["data.dataset=mnist"]).unwrap();
        assert_eq!(cfg.data.resolved_dir(), PathBuf::from(""));
    }

    fn cfg(epochs: f64, budget_s: f64) -> Config {
        let mut c = Config::from_str_with_overrides(
            "[data]\ndataset = \"synthetic\"\n[model]\nname = \"mlp\"\n",
            "test.toml",
            &[],
        )
        .expect("a valid config");
        (c.run.epochs, c.run.time_budget_s) = (epochs, budget_s);
        c
    }

    #[test]
    fn progress_follows_whichever_limit_ends_the_run() {
        assert_eq!(cfg(2.0, 0.0).run.progress(0.5, 100.0), 0.25);
        assert_eq!(cfg(0.0, 40.0).run.progress(5.0, 10.0), 0.25);
        assert_eq!(cfg(2.0, 40.0).run.progress(0.5, 30.0), 0.75);
        assert_eq!(cfg(2.0, 40.0).run.progress(1.5, 10.0), 0.75);
        let c = cfg(2.0, 40.0);
        assert!(!c.run.should_stop(1.99, 39.0) && c.run.progress(1.99, 39.0) < 1.0);
        assert!(c.run.should_stop(2.0, 1.0) && c.run.progress(2.0, 1.0) >= 1.0);
    }

    #[test]
    fn to_toml_string_round_trips() {
        let cfg = with(&[
            "run.name=roundtrip",
            "run.epochs=2.5",
            "data.dataset=mnist",
            "data.dir=/data/mnist",
            "data.synthetic.noise=0.1",
            "model.mlp_hidden=[300, 100]",
            "optim.lr_schedule=step",
            "optim.lr_decay_epochs=[1, 2]",
            "sync.mode=gssp",
            "sync.gssp.groups=2",
            "sync.gssp.grouping=static",
            "sync.gssp.static_groups=[[2,3],[4]]",
            "compression.kind=topk",
            "heterogeneity.tiers=[{factor=1, workers=2}, {factor=2.5, workers=1}]",
            "device.kind=cpu",
        ])
        .unwrap();
        let text = cfg.to_toml_string();
        let back = Config::from_str_with_overrides(&text, "resolved", &[]).unwrap();
        assert_eq!(back, cfg, "resolved TOML:\n{text}");
        assert!(text.contains("name = \"roundtrip\""), "{text}");
    }
}
