//! Run configuration: typed TOML schema, `--set` overrides, validation.
//!
//! Every section rejects unknown keys. Validation runs on the fully resolved
//! config (file + overrides) before any work starts and reports the first
//! problem as `section.key: what is allowed, got VALUE`.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
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
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
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
    /// Accuracy (fraction in 0..1) for `time_to_target_s` in the summary.
    pub target_accuracy: f64,
    /// Write one CSV row every this many iterations.
    pub log_every: usize,
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
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
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
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
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
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    pub name: ModelKind,
    /// Hidden layer widths of the MLP (ignored by other models).
    #[serde(default = "default_mlp_hidden")]
    pub mlp_hidden: Vec<usize>,
}

fn default_mlp_hidden() -> Vec<usize> {
    vec![128]
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum LrSchedule {
    Constant,
    /// Multiply by `lr_decay` at each epoch in `lr_decay_epochs`.
    Step,
    /// Cosine from `lr` down to 0 over `run.epochs`.
    Cosine,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct OptimConfig {
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
}

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
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Grouping {
    Profile,
    Static,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SyncConfig {
    pub mode: SyncMode,
    /// SSP staleness bound s (ssp and inside gssp groups). 0 = BSP.
    pub staleness: usize,
    /// gssp: number of groups G (= number of group servers, ranks 0..G-1).
    pub groups: usize,
    pub grouping: Grouping,
    /// gssp with `grouping = "profile"`: local iterations each worker times.
    pub profile_iters: usize,
    /// gssp with `grouping = "static"`: world ranks of the workers of each group.
    pub static_groups: Vec<Vec<usize>>,
    /// gssp: a group server exchanges with its peers every this many applied pushes.
    pub inter_group_every: usize,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum CompressionKind {
    Dense,
    Topk,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum RatioPolicy {
    Uniform,
    Speed,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
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
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SpeedTier {
    /// Slowdown factor (>= 1) of the workers in this tier.
    pub factor: f64,
    /// How many workers (taken in rank order) are in this tier.
    pub workers: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
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
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum DeviceKind {
    Cpu,
    Cuda,
    Auto,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct DeviceConfig {
    pub kind: DeviceKind,
}
