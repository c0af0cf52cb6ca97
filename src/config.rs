//! Run configuration: typed TOML schema, `--set` overrides, validation.
//!
//! Every section rejects unknown keys. Validation runs on the fully resolved
//! config (file + overrides) before any work starts and reports the first
//! problem as `section.key: what is allowed, got VALUE`.

use std::collections::BTreeSet;
use std::fmt::Display;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use toml::{Table, Value};

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

/// How a gssp server sends sparse (top-k) updates to its peers.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum SparseTransport {
    /// One contiguous put per peer into a ring in its mailbox window; k values to apply.
    Mailbox,
    /// `MPI_Accumulate(SUM)` through an indexed-block datatype into the peer's dense inbox,
    /// which the peer then drains densely (the scheme of DESIGN.md).
    Accumulate,
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
    /// gssp with top-k: each peer's mailbox holds this many messages of the target ratio's
    /// size; a sender whose message does not fit keeps it unsent until the peer drains.
    pub mailbox_messages: usize,
    /// gssp with top-k: how sparse updates travel (see [`SparseTransport`]).
    pub sparse_transport: SparseTransport,
    /// gssp: also apply peers' updates between this server's own exchanges, at the first
    /// push after they arrive (fresher replicas; costs a drain per arrival).
    pub drain_on_arrival: bool,
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

/// Where Fashion-MNIST is looked for when `data.dir` is empty (the image ships it there).
pub const FASHION_MNIST_DEFAULT_DIR: &str = "/usr/share/datasets/fashion-mnist";

impl Default for RunConfig {
    fn default() -> Self {
        Self {
            name: "gssp".to_string(),
            epochs: 1.0,
            time_budget_s: 0.0,
            seed: 42,
            eval_every_epochs: 1.0,
            snapshot_every_s: 0.0,
            target_accuracy: 0.98,
            log_every: 1,
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
            lr: 0.05,
            momentum: 0.9,
            weight_decay: 0.0005,
            batch_size: 64,
            lr_schedule: LrSchedule::Constant,
            lr_decay: 0.1,
            lr_decay_epochs: Vec::new(),
            warmup_epochs: 0.0,
        }
    }
}

impl Default for SyncConfig {
    fn default() -> Self {
        Self {
            mode: SyncMode::Single,
            staleness: 3,
            groups: 1,
            grouping: Grouping::Profile,
            profile_iters: 5,
            static_groups: Vec::new(),
            inter_group_every: 8,
            mailbox_messages: 8,
            sparse_transport: SparseTransport::Mailbox,
            drain_on_arrival: false,
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
        }
    }
}

impl Default for DeviceConfig {
    fn default() -> Self {
        Self {
            kind: DeviceKind::Auto,
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
    #[error("cannot read config file {}: {source}", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
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
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
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

    /// Number of server ranks the sync mode uses (ranks `0..num_servers()`).
    pub fn num_servers(&self) -> usize {
        match self.sync.mode {
            SyncMode::Single | SyncMode::Allreduce => 0,
            SyncMode::Bsp | SyncMode::Asp | SyncMode::Ssp => 1,
            SyncMode::Gssp => self.sync.groups,
        }
    }

    /// Number of worker ranks in a world of `world_size` ranks (all ranks that are not servers).
    pub fn num_workers(&self, world_size: usize) -> usize {
        world_size.saturating_sub(self.num_servers())
    }

    /// Checks every value on its own (independent of the number of ranks); reports the first
    /// problem as `section.key: must be ..., got VALUE`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_run()?;
        self.validate_data()?;
        for (i, &w) in self.model.mlp_hidden.iter().enumerate() {
            ensure(w >= 1, &format!("model.mlp_hidden[{i}]"), ">= 1", w)?;
        }
        self.validate_optim()?;
        let s = &self.sync;
        ensure(s.groups >= 1, "sync.groups", ">= 1", s.groups)?;
        ensure(
            s.profile_iters >= 1,
            "sync.profile_iters",
            ">= 1",
            s.profile_iters,
        )?;
        ensure(
            s.inter_group_every >= 1,
            "sync.inter_group_every",
            ">= 1",
            s.inter_group_every,
        )?;
        ensure(
            s.mailbox_messages >= 1,
            "sync.mailbox_messages",
            ">= 1",
            s.mailbox_messages,
        )?;
        self.validate_compression()?;
        self.validate_heterogeneity()
    }

    fn validate_run(&self) -> Result<(), ConfigError> {
        let r = &self.run;
        ensure(
            !r.name.is_empty() && r.name != "." && r.name != ".." && !r.name.contains(['/', '\\']),
            "run.name",
            "a non-empty name without path separators",
            format!("{:?}", r.name),
        )?;
        at_least("run.epochs", r.epochs, 0.0)?;
        at_least("run.time_budget_s", r.time_budget_s, 0.0)?;
        ensure(
            r.epochs > 0.0 || r.time_budget_s > 0.0,
            "run.epochs",
            "> 0 when run.time_budget_s is 0 (set at least one limit)",
            r.epochs,
        )?;
        at_least("run.eval_every_epochs", r.eval_every_epochs, 0.0)?;
        at_least("run.snapshot_every_s", r.snapshot_every_s, 0.0)?;
        in_unit_interval("run.target_accuracy", r.target_accuracy)?;
        ensure(r.log_every >= 1, "run.log_every", ">= 1", r.log_every)?;
        ensure(r.threads >= 1, "run.threads", ">= 1", r.threads)
    }

    fn validate_data(&self) -> Result<(), ConfigError> {
        let d = &self.data;
        if matches!(d.dataset, DatasetKind::Mnist | DatasetKind::Cifar10) {
            let name = if d.dataset == DatasetKind::Mnist {
                "mnist"
            } else {
                "cifar10"
            };
            ensure(
                !d.dir.trim().is_empty(),
                "data.dir",
                &format!("the dataset folder (required for dataset {name})"),
                format!("{:?}", d.dir),
            )?;
        }
        let s = &d.synthetic;
        for (key, v) in [
            ("data.synthetic.train", s.train),
            ("data.synthetic.test", s.test),
            ("data.synthetic.channels", s.channels),
            ("data.synthetic.height", s.height),
            ("data.synthetic.width", s.width),
            ("data.synthetic.classes", s.classes),
        ] {
            ensure(v >= 1, key, ">= 1", v)?;
        }
        at_least("data.synthetic.noise", f64::from(s.noise), 0.0)
    }

    fn validate_optim(&self) -> Result<(), ConfigError> {
        let o = &self.optim;
        positive("optim.lr", o.lr)?;
        finite("optim.momentum", o.momentum)?;
        ensure(
            (0.0..1.0).contains(&o.momentum),
            "optim.momentum",
            "in [0, 1)",
            o.momentum,
        )?;
        at_least("optim.weight_decay", o.weight_decay, 0.0)?;
        ensure(o.batch_size >= 1, "optim.batch_size", ">= 1", o.batch_size)?;
        in_unit_interval("optim.lr_decay", o.lr_decay)?;
        let mut previous = None;
        for (i, &e) in o.lr_decay_epochs.iter().enumerate() {
            let key = format!("optim.lr_decay_epochs[{i}]");
            at_least(&key, e, 0.0)?;
            if let Some(p) = previous {
                ensure(
                    e > p,
                    &key,
                    &format!("> the previous entry {p} (strictly ascending)"),
                    e,
                )?;
            }
            previous = Some(e);
        }
        at_least("optim.warmup_epochs", o.warmup_epochs, 0.0)
    }

    fn validate_compression(&self) -> Result<(), ConfigError> {
        let c = &self.compression;
        in_unit_interval("compression.ratio", c.ratio)?;
        finite("compression.ratio_min", c.ratio_min)?;
        ensure(
            c.ratio_min > 0.0 && c.ratio_min <= c.ratio,
            "compression.ratio_min",
            &format!("in (0, compression.ratio = {}]", c.ratio),
            c.ratio_min,
        )?;
        at_least("compression.warmup_epochs", c.warmup_epochs, 0.0)?;
        in_unit_interval("compression.speed_ema", c.speed_ema)
    }

    fn validate_heterogeneity(&self) -> Result<(), ConfigError> {
        let h = &self.heterogeneity;
        for (i, &f) in h.slowdown.iter().enumerate() {
            at_least(&format!("heterogeneity.slowdown[{i}]"), f, 1.0)?;
        }
        for (i, t) in h.tiers.iter().enumerate() {
            at_least(&format!("heterogeneity.tiers[{i}].factor"), t.factor, 1.0)?;
            ensure(
                t.workers >= 1,
                &format!("heterogeneity.tiers[{i}].workers"),
                ">= 1",
                t.workers,
            )?;
        }
        ensure(
            h.slowdown.is_empty() || h.tiers.is_empty(),
            "heterogeneity.tiers",
            "empty when heterogeneity.slowdown is set (use one or the other)",
            format!("{} tiers", h.tiers.len()),
        )?;
        at_least("heterogeneity.unit_s", h.unit_s, 0.0)?;
        finite("heterogeneity.straggler_prob", h.straggler_prob)?;
        ensure(
            (0.0..=1.0).contains(&h.straggler_prob),
            "heterogeneity.straggler_prob",
            "in [0, 1]",
            h.straggler_prob,
        )?;
        at_least("heterogeneity.straggler_factor", h.straggler_factor, 1.0)
    }

    /// Runs [`Config::validate`], then checks what depends on the MPI world size: enough
    /// ranks for the mode's servers and workers, a static grouping that covers every worker
    /// exactly once, and one slowdown factor per worker.
    pub fn validate_for_world(&self, world_size: usize) -> Result<(), ConfigError> {
        self.validate()?;
        ensure(world_size >= 1, "world size", ">= 1", world_size)?;
        let mode = self.sync.mode;
        let name = mode_name(mode);
        match mode {
            SyncMode::Single => ensure(
                world_size == 1,
                "sync.mode",
                &format!(
                    "a distributed mode (bsp, asp, ssp, gssp or allreduce) to run on {world_size} ranks"
                ),
                name,
            )?,
            SyncMode::Bsp | SyncMode::Asp | SyncMode::Ssp | SyncMode::Gssp => ensure(
                world_size >= 2,
                "sync.mode",
                &format!(
                    "single or allreduce on 1 rank ({name} needs server rank 0 plus at least one worker rank)"
                ),
                name,
            )?,
            SyncMode::Allreduce => {}
        }
        if mode == SyncMode::Gssp {
            self.validate_groups(world_size)?;
        }
        let workers = self.num_workers(world_size);
        let h = &self.heterogeneity;
        if !h.slowdown.is_empty() {
            ensure(
                h.slowdown.len() == workers,
                "heterogeneity.slowdown",
                &format!("one factor per worker ({workers} workers on {world_size} ranks)"),
                format!("{} factors", h.slowdown.len()),
            )?;
        }
        if !h.tiers.is_empty() {
            let total: usize = h.tiers.iter().map(|t| t.workers).sum();
            ensure(
                total == workers,
                "heterogeneity.tiers",
                &format!(
                    "tiers whose worker counts sum to {workers} ({workers} workers on {world_size} ranks)"
                ),
                format!("{total} workers in total"),
            )?;
        }
        Ok(())
    }

    fn validate_groups(&self, world_size: usize) -> Result<(), ConfigError> {
        let groups = self.sync.groups;
        ensure(
            world_size >= 2 * groups,
            "sync.groups",
            &format!(
                "<= {} on {world_size} ranks (each group server needs at least one worker)",
                world_size / 2
            ),
            groups,
        )?;
        if self.sync.grouping != Grouping::Static {
            return Ok(());
        }
        let lists = &self.sync.static_groups;
        ensure(
            lists.len() == groups,
            "sync.static_groups",
            &format!("exactly sync.groups = {groups} lists of worker ranks"),
            format!("{} lists", lists.len()),
        )?;
        let last = world_size - 1;
        let mut seen = BTreeSet::new();
        for (i, list) in lists.iter().enumerate() {
            let key = format!("sync.static_groups[{i}]");
            ensure(
                !list.is_empty(),
                &key,
                "a non-empty list of worker ranks",
                "[]",
            )?;
            for &rank in list {
                ensure(
                    (groups..world_size).contains(&rank),
                    &key,
                    &format!("worker ranks in {groups}..={last} (ranks 0..{groups} are servers)"),
                    rank,
                )?;
                ensure(
                    seen.insert(rank),
                    "sync.static_groups",
                    "a list that holds each worker rank exactly once",
                    format!("rank {rank} more than once"),
                )?;
            }
        }
        if let Some(missing) = (groups..world_size).find(|r| !seen.contains(r)) {
            return Err(invalid(
                "sync.static_groups",
                &format!("a list that holds every worker rank {groups}..={last}"),
                format!("no group for rank {missing}"),
            ));
        }
        Ok(())
    }
}

/// The mode as the config spells it.
pub fn mode_name(mode: SyncMode) -> &'static str {
    match mode {
        SyncMode::Single => "single",
        SyncMode::Bsp => "bsp",
        SyncMode::Asp => "asp",
        SyncMode::Ssp => "ssp",
        SyncMode::Gssp => "gssp",
        SyncMode::Allreduce => "allreduce",
    }
}

/// The dataset as the config spells it.
pub fn dataset_name(dataset: DatasetKind) -> &'static str {
    match dataset {
        DatasetKind::Mnist => "mnist",
        DatasetKind::FashionMnist => "fashion-mnist",
        DatasetKind::Cifar10 => "cifar10",
        DatasetKind::Synthetic => "synthetic",
    }
}

fn invalid(key: &str, requirement: &str, got: impl Display) -> ConfigError {
    ConfigError::Invalid {
        key: key.to_string(),
        requirement: requirement.to_string(),
        got: got.to_string(),
    }
}

fn ensure(ok: bool, key: &str, requirement: &str, got: impl Display) -> Result<(), ConfigError> {
    if ok {
        Ok(())
    } else {
        Err(invalid(key, requirement, got))
    }
}

/// NaN and infinities slip through range comparisons, so every float is checked first.
fn finite(key: &str, v: f64) -> Result<(), ConfigError> {
    ensure(v.is_finite(), key, "a finite number", v)
}

fn at_least(key: &str, v: f64, min: f64) -> Result<(), ConfigError> {
    finite(key, v)?;
    ensure(v >= min, key, &format!(">= {min}"), v)
}

fn positive(key: &str, v: f64) -> Result<(), ConfigError> {
    finite(key, v)?;
    ensure(v > 0.0, key, "> 0", v)
}

fn in_unit_interval(key: &str, v: f64) -> Result<(), ConfigError> {
    finite(key, v)?;
    ensure(v > 0.0 && v <= 1.0, key, "in (0, 1]", v)
}

/// A config with every optional list non-empty, serialised: the tree of allowed keys.
/// Derived from the types themselves so it cannot drift from them.
fn schema() -> Table {
    let sample = Config {
        run: RunConfig::default(),
        data: DataConfig {
            dataset: DatasetKind::Synthetic,
            dir: String::new(),
            train_limit: 0,
            test_limit: 0,
            synthetic: SyntheticConfig::default(),
        },
        model: ModelConfig {
            name: ModelKind::Mlp,
            mlp_hidden: default_mlp_hidden(),
        },
        optim: OptimConfig::default(),
        sync: SyncConfig::default(),
        compression: CompressionConfig::default(),
        heterogeneity: HeterogeneityConfig {
            tiers: vec![SpeedTier {
                factor: 1.0,
                workers: 1,
            }],
            ..HeterogeneityConfig::default()
        },
        device: DeviceConfig::default(),
    };
    // A fixed, valid sample: serialising it cannot fail.
    Table::try_from(&sample).expect("the schema sample serialises to a TOML table")
}

/// Rejects any key of `user` that `schema` lacks, naming it by its full dotted path.
fn check_known_keys(
    user: &Table,
    schema: &Table,
    prefix: &str,
    origin: &str,
) -> Result<(), ConfigError> {
    for (k, v) in user {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        let Some(allowed) = schema.get(k) else {
            return Err(ConfigError::UnknownKey {
                origin: origin.to_string(),
                key,
                allowed: schema.keys().cloned().collect::<Vec<_>>().join(", "),
            });
        };
        match (v, allowed) {
            (Value::Table(u), Value::Table(s)) => check_known_keys(u, s, &key, origin)?,
            (Value::Array(items), Value::Array(sample)) => {
                if let Some(Value::Table(s)) = sample.first() {
                    for (i, item) in items.iter().enumerate() {
                        if let Value::Table(u) = item {
                            check_known_keys(u, s, &format!("{key}[{i}]"), origin)?;
                        }
                    }
                }
            }
            // Type mismatches are left to the deserialiser, which names the expected type.
            _ => {}
        }
    }
    Ok(())
}

/// Sets one `dotted.key=VALUE` override into the parsed tree.
fn apply_override(root: &mut Table, text: &str) -> Result<(), ConfigError> {
    let fail = |reason: &str| ConfigError::Override {
        text: text.to_string(),
        reason: reason.to_string(),
    };
    let Some((key, raw)) = text.split_once('=') else {
        return Err(fail("expected dotted.key=VALUE"));
    };
    let key = key.trim();
    if key.is_empty() {
        return Err(fail("the key before `=` is empty"));
    }
    let parts: Vec<&str> = key.split('.').map(str::trim).collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(fail("the key has an empty segment"));
    }
    let value = parse_override_value(raw.trim());
    let (last, parents) = parts.split_last().ok_or_else(|| fail("empty key"))?;
    let mut table = root;
    let mut path = String::new();
    for part in parents {
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(part);
        let entry = table
            .entry(part.to_string())
            .or_insert_with(|| Value::Table(Table::new()));
        table = match entry {
            Value::Table(t) => t,
            _ => return Err(fail(&format!("{path} is not a table"))),
        };
    }
    table.insert(last.to_string(), value);
    Ok(())
}

/// A TOML value when `raw` is exactly one, otherwise the raw text as a string.
fn parse_override_value(raw: &str) -> Value {
    match toml::from_str::<Table>(&format!("v = {raw}")) {
        Ok(mut t) if t.len() == 1 => t.remove("v").unwrap_or_else(|| Value::String(raw.into())),
        _ => Value::String(raw.to_string()),
    }
}

fn syntax_error(text: &str, source: &str, e: &toml::de::Error) -> ConfigError {
    let location = match e.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            format!("{source}:{line}:{column}")
        }
        None => source.to_string(),
    };
    ConfigError::Syntax {
        location,
        message: one_line(e.message()),
    }
}

/// Deserialising from a value tree reports the key as a trailing "in `a.b`" line.
fn type_error(source: &str, overrides: &[String], e: &toml::de::Error) -> ConfigError {
    let text = e.to_string();
    let key = text
        .rfind("\nin `")
        .map(|i| text[i + 5..].trim_end().trim_end_matches('`').to_string())
        .unwrap_or_default();
    let origin = if overrides.is_empty() {
        source.to_string()
    } else {
        format!("{source} (with overrides)")
    };
    ConfigError::Type {
        origin,
        key,
        message: one_line(e.message()),
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "[data]\ndataset = \"synthetic\"\n[model]\nname = \"mlp\"\n";

    fn with(overrides: &[&str]) -> Result<Config, ConfigError> {
        let overrides: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
        Config::from_str_with_overrides(MINIMAL, "test.toml", &overrides)
    }

    fn example_path() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/example.toml")
    }

    #[test]
    fn minimal_config_gets_defaults_and_validates() {
        let cfg = with(&[]).unwrap();
        assert_eq!(cfg.run, RunConfig::default());
        assert_eq!(cfg.run.name, "gssp");
        assert_eq!(cfg.optim.lr, 0.05);
        assert_eq!(cfg.sync.mode, SyncMode::Single);
        assert_eq!(cfg.sync.staleness, 3);
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
    fn example_toml_sets_every_key() {
        let text = std::fs::read_to_string(example_path()).unwrap();
        let file: Table = toml::from_str(&text).unwrap();
        fn missing(file: &Table, schema: &Table, prefix: &str, out: &mut Vec<String>) {
            for (k, v) in schema {
                let key = format!("{prefix}{k}");
                match (file.get(k), v) {
                    (None, _) if key != "heterogeneity.tiers" => out.push(key),
                    (Some(Value::Table(f)), Value::Table(s)) => {
                        missing(f, s, &format!("{key}."), out)
                    }
                    _ => {}
                }
            }
        }
        let mut out = Vec::new();
        missing(&file, &schema(), "", &mut out);
        assert!(out.is_empty(), "example.toml lacks {out:?}");
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
    fn syntax_error_names_source_line_and_column() {
        let text = "[run]\nepochs = = 2\n";
        let msg = Config::from_str_with_overrides(text, "bad.toml", &[])
            .unwrap_err()
            .to_string();
        assert!(msg.starts_with("bad.toml:2:"), "{msg}");
        assert!(msg.contains("invalid TOML"), "{msg}");
        assert!(!msg.contains('\n'), "{msg}");
    }

    #[test]
    fn missing_required_section_is_reported() {
        let msg = Config::from_str_with_overrides("[data]\ndataset = \"mnist\"\n", "t.toml", &[])
            .unwrap_err()
            .to_string();
        assert_eq!(msg, "t.toml: missing field `model`");
    }

    #[test]
    fn unknown_keys_are_named_with_full_path() {
        let text = format!("{MINIMAL}[optim]\nlrr = 0.1\n");
        let msg = Config::from_str_with_overrides(&text, "f.toml", &[])
            .unwrap_err()
            .to_string();
        assert!(
            msg.starts_with("f.toml: unknown key optim.lrr (allowed there: "),
            "{msg}"
        );
        assert!(msg.contains("lr, lr_decay"), "{msg}");

        let text = format!("{MINIMAL}[data.synthetic]\ntrian = 3\n");
        let msg = Config::from_str_with_overrides(&text, "f.toml", &[])
            .unwrap_err()
            .to_string();
        assert!(msg.contains("unknown key data.synthetic.trian"), "{msg}");

        let text = format!("{MINIMAL}[[heterogeneity.tiers]]\nfactor = 2.0\nworkerz = 1\n");
        let msg = Config::from_str_with_overrides(&text, "f.toml", &[])
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("unknown key heterogeneity.tiers[0].workerz"),
            "{msg}"
        );

        let msg = Config::from_str_with_overrides(&format!("{MINIMAL}[optimizer]\n"), "f", &[])
            .unwrap_err()
            .to_string();
        assert!(msg.starts_with("f: unknown key optimizer "), "{msg}");
    }

    #[test]
    fn type_errors_name_key_and_expected_type() {
        let text = format!("{MINIMAL}[optim]\nlr = \"fast\"\n");
        let msg = Config::from_str_with_overrides(&text, "f.toml", &[])
            .unwrap_err()
            .to_string();
        assert_eq!(
            msg,
            "f.toml: optim.lr: invalid type: string \"fast\", expected f64"
        );

        let msg = with(&["optim.batch_size=-1"]).unwrap_err().to_string();
        assert_eq!(
            msg,
            "test.toml (with overrides): optim.batch_size: invalid value: integer `-1`, expected usize"
        );

        let msg = with(&["sync.mode=sspp"]).unwrap_err().to_string();
        assert!(msg.contains("sync.mode: unknown variant `sspp`"), "{msg}");
        assert!(msg.contains("`gssp`"), "{msg}");

        let msg = with(&["sync.sparse_transport=put"])
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("sync.sparse_transport: unknown variant `put`"),
            "{msg}"
        );
        assert!(
            msg.contains("`mailbox`") && msg.contains("`accumulate`"),
            "{msg}"
        );
    }

    #[test]
    fn overrides_set_numbers_strings_arrays_and_tables() {
        let cfg = with(&[
            "run.epochs=2",
            "optim.lr=0.1",
            "run.seed = 7",
            "data.dir=/scratch/mnist",
            "sync.mode=ssp",
            "run.name=\"quoted name\"",
            "sync.static_groups=[[2,3],[4]]",
            "optim.lr_decay_epochs=[1.5, 3]",
            "data.synthetic.train=100",
            "heterogeneity.tiers=[{factor = 2.0, workers = 3}]",
            "model.mlp_hidden=[]",
        ])
        .unwrap();
        assert_eq!(cfg.run.epochs, 2.0);
        assert_eq!(cfg.optim.lr, 0.1);
        assert_eq!(cfg.run.seed, 7);
        assert_eq!(cfg.data.dir, "/scratch/mnist");
        assert_eq!(cfg.sync.mode, SyncMode::Ssp);
        assert_eq!(cfg.run.name, "quoted name");
        assert_eq!(cfg.sync.static_groups, vec![vec![2, 3], vec![4]]);
        assert_eq!(cfg.optim.lr_decay_epochs, vec![1.5, 3.0]);
        assert_eq!(cfg.data.synthetic.train, 100);
        // Keys of the table not overridden keep their defaults.
        assert_eq!(cfg.data.synthetic.test, 512);
        assert_eq!(
            cfg.heterogeneity.tiers,
            vec![SpeedTier {
                factor: 2.0,
                workers: 3
            }]
        );
        assert!(cfg.model.mlp_hidden.is_empty());
    }

    #[test]
    fn overrides_replace_file_values_and_inline_tables() {
        let text = format!("{MINIMAL}[optim]\nlr = 0.3\n");
        let cfg = Config::from_str_with_overrides(
            &text,
            "f",
            &["optim.lr=0.2".into(), "data.synthetic={ train = 9 }".into()],
        )
        .unwrap();
        assert_eq!(cfg.optim.lr, 0.2);
        assert_eq!(cfg.data.synthetic.train, 9);
        assert_eq!(cfg.data.synthetic.classes, 10);
        // Later overrides win.
        let cfg = with(&["run.seed=1", "run.seed=2"]).unwrap();
        assert_eq!(cfg.run.seed, 2);
    }

    #[test]
    fn bad_overrides_are_rejected_by_name() {
        let msg = with(&["run.epochs"]).unwrap_err().to_string();
        assert_eq!(
            msg,
            "invalid override `run.epochs`: expected dotted.key=VALUE"
        );
        let msg = with(&["=3"]).unwrap_err().to_string();
        assert_eq!(msg, "invalid override `=3`: the key before `=` is empty");
        let msg = with(&["run..epochs=3"]).unwrap_err().to_string();
        assert_eq!(
            msg,
            "invalid override `run..epochs=3`: the key has an empty segment"
        );
        let msg = with(&["run.epochs=2", "run.epochs.x=3"])
            .unwrap_err()
            .to_string();
        assert_eq!(
            msg,
            "invalid override `run.epochs.x=3`: run.epochs is not a table"
        );
        // A table where a number belongs is a type error naming the key.
        let msg = with(&["run.epochs.x=3"]).unwrap_err().to_string();
        assert_eq!(
            msg,
            "test.toml (with overrides): run.epochs: invalid type: map, expected f64"
        );
        let msg = with(&["optim.lrr=0.1"]).unwrap_err().to_string();
        assert!(msg.starts_with("override: unknown key optim.lrr "), "{msg}");
        let msg = with(&["nosuch.section.key=1"]).unwrap_err().to_string();
        assert!(msg.starts_with("override: unknown key nosuch "), "{msg}");
    }

    #[test]
    fn override_values_parse_as_toml_or_fall_back_to_string() {
        assert_eq!(parse_override_value("2"), Value::Integer(2));
        assert_eq!(parse_override_value("2.5"), Value::Float(2.5));
        assert_eq!(parse_override_value("true"), Value::Boolean(true));
        assert_eq!(parse_override_value("ssp"), Value::String("ssp".into()));
        assert_eq!(parse_override_value("\"2\""), Value::String("2".into()));
        assert_eq!(parse_override_value(""), Value::String(String::new()));
        assert_eq!(
            parse_override_value("1\nx = 2"),
            Value::String("1\nx = 2".into())
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

    /// Every rule of `validate`, each broken once, with the exact message.
    #[test]
    fn each_validation_rule_has_its_message() {
        let cases: &[(&[&str], &str)] = &[
            (&["run.name=\"\""], "run.name: must be a non-empty name without path separators, got \"\""),
            (&["run.name=\"a/b\""], "run.name: must be a non-empty name without path separators, got \"a/b\""),
            (&["run.epochs=-1"], "run.epochs: must be >= 0, got -1"),
            (&["run.epochs=nan"], "run.epochs: must be a finite number, got NaN"),
            (&["run.time_budget_s=-5"], "run.time_budget_s: must be >= 0, got -5"),
            (&["run.epochs=0"], "run.epochs: must be > 0 when run.time_budget_s is 0 (set at least one limit), got 0"),
            (&["run.eval_every_epochs=-1"], "run.eval_every_epochs: must be >= 0, got -1"),
            (&["run.snapshot_every_s=-1"], "run.snapshot_every_s: must be >= 0, got -1"),
            (&["run.target_accuracy=0"], "run.target_accuracy: must be in (0, 1], got 0"),
            (&["run.target_accuracy=1.5"], "run.target_accuracy: must be in (0, 1], got 1.5"),
            (&["run.log_every=0"], "run.log_every: must be >= 1, got 0"),
            (&["run.threads=0"], "run.threads: must be >= 1, got 0"),
            (&["data.dataset=mnist"], "data.dir: must be the dataset folder (required for dataset mnist), got \"\""),
            (&["data.dataset=cifar10", "data.dir=' '"], "data.dir: must be the dataset folder (required for dataset cifar10), got \" \""),
            (&["data.synthetic.train=0"], "data.synthetic.train: must be >= 1, got 0"),
            (&["data.synthetic.test=0"], "data.synthetic.test: must be >= 1, got 0"),
            (&["data.synthetic.channels=0"], "data.synthetic.channels: must be >= 1, got 0"),
            (&["data.synthetic.height=0"], "data.synthetic.height: must be >= 1, got 0"),
            (&["data.synthetic.width=0"], "data.synthetic.width: must be >= 1, got 0"),
            (&["data.synthetic.classes=0"], "data.synthetic.classes: must be >= 1, got 0"),
            (&["data.synthetic.noise=-0.5"], "data.synthetic.noise: must be >= 0, got -0.5"),
            (&["model.mlp_hidden=[64, 0]"], "model.mlp_hidden[1]: must be >= 1, got 0"),
            (&["optim.lr=-0.1"], "optim.lr: must be > 0, got -0.1"),
            (&["optim.lr=0"], "optim.lr: must be > 0, got 0"),
            (&["optim.lr=inf"], "optim.lr: must be a finite number, got inf"),
            (&["optim.momentum=1"], "optim.momentum: must be in [0, 1), got 1"),
            (&["optim.momentum=-0.1"], "optim.momentum: must be in [0, 1), got -0.1"),
            (&["optim.weight_decay=-1e-4"], "optim.weight_decay: must be >= 0, got -0.0001"),
            (&["optim.batch_size=0"], "optim.batch_size: must be >= 1, got 0"),
            (&["optim.lr_decay=0"], "optim.lr_decay: must be in (0, 1], got 0"),
            (&["optim.lr_decay=2"], "optim.lr_decay: must be in (0, 1], got 2"),
            (&["optim.lr_decay_epochs=[-1]"], "optim.lr_decay_epochs[0]: must be >= 0, got -1"),
            (&["optim.lr_decay_epochs=[5, 3]"], "optim.lr_decay_epochs[1]: must be > the previous entry 5 (strictly ascending), got 3"),
            (&["optim.warmup_epochs=-1"], "optim.warmup_epochs: must be >= 0, got -1"),
            (&["sync.groups=0"], "sync.groups: must be >= 1, got 0"),
            (&["sync.profile_iters=0"], "sync.profile_iters: must be >= 1, got 0"),
            (&["sync.inter_group_every=0"], "sync.inter_group_every: must be >= 1, got 0"),
            (&["sync.mailbox_messages=0"], "sync.mailbox_messages: must be >= 1, got 0"),
            (&["compression.ratio=0"], "compression.ratio: must be in (0, 1], got 0"),
            (&["compression.ratio=1.01"], "compression.ratio: must be in (0, 1], got 1.01"),
            (&["compression.ratio_min=0.5"], "compression.ratio_min: must be in (0, compression.ratio = 0.01], got 0.5"),
            (&["compression.ratio_min=0"], "compression.ratio_min: must be in (0, compression.ratio = 0.01], got 0"),
            (&["compression.warmup_epochs=-2"], "compression.warmup_epochs: must be >= 0, got -2"),
            (&["compression.speed_ema=0"], "compression.speed_ema: must be in (0, 1], got 0"),
            (&["heterogeneity.slowdown=[1, 0.5]"], "heterogeneity.slowdown[1]: must be >= 1, got 0.5"),
            (&["heterogeneity.slowdown=[inf]"], "heterogeneity.slowdown[0]: must be a finite number, got inf"),
            (&["heterogeneity.tiers=[{factor=0.9, workers=1}]"], "heterogeneity.tiers[0].factor: must be >= 1, got 0.9"),
            (&["heterogeneity.tiers=[{factor=2, workers=0}]"], "heterogeneity.tiers[0].workers: must be >= 1, got 0"),
            (&["heterogeneity.slowdown=[1]", "heterogeneity.tiers=[{factor=2, workers=1}]"], "heterogeneity.tiers: must be empty when heterogeneity.slowdown is set (use one or the other), got 1 tiers"),
            (&["heterogeneity.unit_s=-1"], "heterogeneity.unit_s: must be >= 0, got -1"),
            (&["heterogeneity.straggler_prob=1.5"], "heterogeneity.straggler_prob: must be in [0, 1], got 1.5"),
            (&["heterogeneity.straggler_factor=0.5"], "heterogeneity.straggler_factor: must be >= 1, got 0.5"),
        ];
        for (overrides, expected) in cases {
            let cfg = with(overrides).unwrap_or_else(|e| panic!("{overrides:?}: {e}"));
            match cfg.validate() {
                Ok(()) => panic!("{overrides:?} validated, expected `{expected}`"),
                Err(e) => assert_eq!(e.to_string(), *expected, "case {overrides:?}"),
            }
        }
    }

    #[test]
    fn valid_edge_values_pass() {
        let cfg = with(&[
            "run.epochs=0",
            "run.time_budget_s=60",
            "run.target_accuracy=1",
            "optim.momentum=0",
            "optim.lr_decay=1",
            "optim.lr_decay_epochs=[0, 2.5]",
            "sync.staleness=0",
            "compression.ratio=1",
            "compression.ratio_min=1",
            "heterogeneity.straggler_prob=1",
            "heterogeneity.slowdown=[1, 3.5]",
        ])
        .unwrap();
        cfg.validate().unwrap();
    }

    fn world_error(overrides: &[&str], world: usize) -> String {
        let cfg = with(overrides).unwrap();
        cfg.validate().unwrap();
        cfg.validate_for_world(world).unwrap_err().to_string()
    }

    #[test]
    fn world_rules_have_their_messages() {
        let cases: &[(&[&str], usize, &str)] = &[
            (&[], 4, "sync.mode: must be a distributed mode (bsp, asp, ssp, gssp or allreduce) to run on 4 ranks, got single"),
            (&["sync.mode=bsp"], 1, "sync.mode: must be single or allreduce on 1 rank (bsp needs server rank 0 plus at least one worker rank), got bsp"),
            (&["sync.mode=ssp"], 1, "sync.mode: must be single or allreduce on 1 rank (ssp needs server rank 0 plus at least one worker rank), got ssp"),
            (&["sync.mode=gssp", "sync.groups=3"], 5, "sync.groups: must be <= 2 on 5 ranks (each group server needs at least one worker), got 3"),
            (&["sync.mode=gssp", "sync.groups=2", "sync.grouping=static", "sync.static_groups=[[2,3]]"], 5, "sync.static_groups: must be exactly sync.groups = 2 lists of worker ranks, got 1 lists"),
            (&["sync.mode=gssp", "sync.groups=2", "sync.grouping=static", "sync.static_groups=[[2,3,4],[]]"], 5, "sync.static_groups[1]: must be a non-empty list of worker ranks, got []"),
            (&["sync.mode=gssp", "sync.groups=2", "sync.grouping=static", "sync.static_groups=[[1,3],[4]]"], 5, "sync.static_groups[0]: must be worker ranks in 2..=4 (ranks 0..2 are servers), got 1"),
            (&["sync.mode=gssp", "sync.groups=2", "sync.grouping=static", "sync.static_groups=[[2,3],[4,5]]"], 5, "sync.static_groups[1]: must be worker ranks in 2..=4 (ranks 0..2 are servers), got 5"),
            (&["sync.mode=gssp", "sync.groups=2", "sync.grouping=static", "sync.static_groups=[[2,3],[3,4]]"], 5, "sync.static_groups: must be a list that holds each worker rank exactly once, got rank 3 more than once"),
            (&["sync.mode=gssp", "sync.groups=2", "sync.grouping=static", "sync.static_groups=[[2],[4]]"], 5, "sync.static_groups: must be a list that holds every worker rank 2..=4, got no group for rank 3"),
            (&["sync.mode=bsp", "heterogeneity.slowdown=[1, 2]"], 4, "heterogeneity.slowdown: must be one factor per worker (3 workers on 4 ranks), got 2 factors"),
            (&["sync.mode=allreduce", "heterogeneity.tiers=[{factor=1, workers=2}, {factor=3, workers=1}]"], 4, "heterogeneity.tiers: must be tiers whose worker counts sum to 4 (4 workers on 4 ranks), got 3 workers in total"),
        ];
        for (overrides, world, expected) in cases {
            assert_eq!(
                world_error(overrides, *world),
                *expected,
                "case {overrides:?} on {world}"
            );
        }
    }

    #[test]
    fn valid_worlds_pass_and_count_ranks() {
        let cfg = with(&[]).unwrap();
        assert_eq!((cfg.num_servers(), cfg.num_workers(1)), (0, 1));
        let cfg = with(&["sync.mode=allreduce"]).unwrap();
        cfg.validate_for_world(1).unwrap();
        cfg.validate_for_world(3).unwrap();
        assert_eq!((cfg.num_servers(), cfg.num_workers(3)), (0, 3));
        for mode in ["bsp", "asp", "ssp"] {
            let cfg = with(&[
                &format!("sync.mode={mode}"),
                "heterogeneity.slowdown=[1, 2, 4]",
            ])
            .unwrap();
            cfg.validate_for_world(4).unwrap();
            assert_eq!((cfg.num_servers(), cfg.num_workers(4)), (1, 3));
        }
        let cfg = with(&[
            "sync.mode=gssp",
            "sync.groups=2",
            "sync.grouping=static",
            "sync.static_groups=[[2,4],[3]]",
            "heterogeneity.tiers=[{factor=1, workers=2}, {factor=3, workers=1}]",
        ])
        .unwrap();
        cfg.validate_for_world(5).unwrap();
        assert_eq!((cfg.num_servers(), cfg.num_workers(5)), (2, 3));
        // Profile grouping ignores static_groups; 2 groups need at least 4 ranks.
        let cfg = with(&["sync.mode=gssp", "sync.groups=2"]).unwrap();
        cfg.validate_for_world(4).unwrap();
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
            "sync.groups=2",
            "sync.grouping=static",
            "sync.static_groups=[[2,3],[4]]",
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
