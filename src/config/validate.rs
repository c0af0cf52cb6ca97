//! Validation of a resolved [`Config`]: every rule reports the first problem as
//! `section.key: must be ..., got VALUE`.

use std::collections::BTreeSet;
use std::fmt::Display;

use super::modes::Roles;
use super::MAX_CLASSES;
use super::{
    CompressionKind, Config, ConfigError, DataConfig, DatasetKind, ExchangeSelect, Grouping,
    GsspConfig, OuterConfig, Precision, Shards, SparseTransport, SyncMode,
};

/// Upper bound of `sync.gssp.mailbox_messages`: the ring's size, messages x (1 + 2k) words
/// rounded up to a power of two, must not overflow (wrapped, it gave a tiny or empty ring),
/// and flow control needs nowhere near this many messages in flight (the default is 8).
pub const MAX_MAILBOX_MESSAGES: usize = 1 << 16;

/// Upper bound of `compression.rank`: far above any rank that still compresses, and below
/// the low-rank message's tag bit.
pub const MAX_RANK: usize = 1 << 16;

impl Config {
    /// Checks every value on its own (independent of the number of ranks); reports the first
    /// problem as `section.key: must be ..., got VALUE`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_run()?;
        self.data.validate()?;
        for (i, &w) in self.model.mlp_hidden.iter().enumerate() {
            ensure(w >= 1, &format!("model.mlp_hidden[{i}]"), ">= 1", w)?;
        }
        let width = self.model.width;
        ensure(
            width.is_finite() && width > 0.0 && width <= 4.0,
            "model.width",
            "in (0, 4]",
            width,
        )?;
        self.validate_model_input()?;
        if !matches!(
            self.model.name,
            super::ModelKind::Resnet18 | super::ModelKind::Vgg19 | super::ModelKind::Seq2seq
        ) {
            ensure(
                width == 1.0,
                "model.width",
                "1 for lenet5 and mlp (it scales resnet18, vgg19 and seq2seq)",
                width,
            )?;
        }
        self.validate_optim()?;
        self.sync.gssp.validate()?;
        let local_steps = self.sync.localsgd.local_steps;
        ensure(
            local_steps >= 1,
            "sync.localsgd.local_steps",
            ">= 1",
            local_steps,
        )?;
        self.validate_async_localsgd()?;
        self.validate_gssp_local_steps()?;
        self.validate_balance()?;
        if self.sync.overlap {
            if let Some(why) = self.sync.strategy().overlap_refusal(&self.sync) {
                return Err(invalid("sync.overlap", &why, true));
            }
        }
        self.validate_shards()?;
        let regroup_every_s = self.sync.gssp.regroup_every_s;
        if regroup_every_s > 0.0 && self.sync.mode == SyncMode::Gssp {
            ensure(
                self.run.checkpoint_every_s == 0.0,
                "sync.gssp.regroup_every_s",
                "0 when run.checkpoint_every_s > 0 (a checkpoint does not record moved workers yet; set one of them to 0)",
                regroup_every_s,
            )?;
        }
        at_least("cluster.latency_us", self.cluster.latency_us, 0.0)?;
        positive("cluster.bandwidth_gbps", self.cluster.bandwidth_gbps)?;
        at_least(
            "cluster.apply_ns_per_param",
            self.cluster.apply_ns_per_param,
            0.0,
        )?;
        self.validate_compression()?;
        ensure(
            self.device.exchange_select != ExchangeSelect::Cuda
                || (self.sync.mode == SyncMode::Gssp
                    && self.compression.kind == CompressionKind::Topk),
            "device.exchange_select",
            "\"cpu\" or \"auto\" unless sync.mode = \"gssp\" with compression.kind = \"topk\" (only a gssp group server's top-k selects on a GPU)",
            "\"cuda\"",
        )?;
        self.validate_heterogeneity()
    }

    fn validate_async_localsgd(&self) -> Result<(), ConfigError> {
        let a = &self.sync.async_localsgd;
        ensure(
            a.local_steps >= 1,
            "sync.async_localsgd.local_steps",
            ">= 1",
            a.local_steps,
        )?;
        ensure(
            a.profile_iters >= 1,
            "sync.async_localsgd.profile_iters",
            ">= 1",
            a.profile_iters,
        )?;
        positive("sync.async_localsgd.outer_lr", a.outer_lr)?;
        finite("sync.async_localsgd.outer_momentum", a.outer_momentum)?;
        ensure(
            (0.0..1.0).contains(&a.outer_momentum),
            "sync.async_localsgd.outer_momentum",
            "in [0, 1)",
            a.outer_momentum,
        )?;
        if self.sync.mode == SyncMode::AsyncLocalsgd {
            ensure(
                self.run.checkpoint_every_s == 0.0,
                "run.checkpoint_every_s",
                "0 with sync.mode = \"async-localsgd\" (its workers' replicas are not checkpointed yet)",
                self.run.checkpoint_every_s,
            )?;
        }
        Ok(())
    }

    /// gssp's local steps (`sync.gssp.local_steps` > 1): workers keep replicas and momentum
    /// a checkpoint does not record, a regroup would move them between servers that count
    /// their batches per slot, and a pushed change has no gradient to compensate.
    fn validate_gssp_local_steps(&self) -> Result<(), ConfigError> {
        let g = &self.sync.gssp;
        if self.sync.mode != SyncMode::Gssp || !g.takes_local_steps() {
            return Ok(());
        }
        let why = "with sync.gssp.local_steps > 1";
        ensure(
            self.run.checkpoint_every_s == 0.0,
            "run.checkpoint_every_s",
            &format!("0 {why} (its workers' replicas are not checkpointed yet)"),
            self.run.checkpoint_every_s,
        )?;
        ensure(
            g.regroup_every_s == 0.0,
            "sync.gssp.regroup_every_s",
            &format!("0 {why} (local steps are laid out per worker once)"),
            g.regroup_every_s,
        )?;
        ensure(
            self.optim.delay_compensation == 0.0,
            "optim.delay_compensation",
            &format!("0 {why} (a pushed change is not a gradient to compensate)"),
            self.optim.delay_compensation,
        )?;
        ensure(
            !g.dynamic_local_steps || g.grouping == Grouping::Profile,
            "sync.gssp.dynamic_local_steps",
            "false unless sync.gssp.grouping = \"profile\" (it reads the profile)",
            true,
        )
    }

    /// `sync.shards`: at least 1; more only where the mode shards its servers and without
    /// PowerSGD's exchange (it compresses whole matrices, which a range may cut); `"auto"`
    /// only in gssp grouped by profile (the choice weighs the profiled speeds), with
    /// `sync.max_shards` at least 1.
    fn validate_shards(&self) -> Result<(), ConfigError> {
        let shards = self.sync.shards;
        match shards.count() {
            Some(s) => ensure(s >= 1, "sync.shards", ">= 1", shards)?,
            None => self.validate_auto_shards()?,
        }
        if shards == Shards::Count(1) {
            return Ok(());
        }
        if let Some(why) = self.sync.strategy().shards_refusal(&self.sync) {
            return Err(invalid("sync.shards", &why, shards));
        }
        let powersgd = self.compression.kind == CompressionKind::Powersgd;
        ensure(
            !(powersgd && self.sync.mode == SyncMode::Gssp),
            "sync.shards",
            "1 with compression.kind = \"powersgd\" (its exchange compresses whole matrices, which a shard's range may cut)",
            shards,
        )
    }

    fn validate_auto_shards(&self) -> Result<(), ConfigError> {
        let max = self.sync.max_shards;
        ensure(max >= 1, "sync.max_shards", ">= 1", max)?;
        let mode = self.sync.mode;
        ensure(
            mode == SyncMode::Gssp,
            "sync.shards",
            &format!("a number with sync.mode = \"{mode}\" (\"auto\" chooses from gssp's profile)"),
            "\"auto\"",
        )?;
        ensure(
            self.sync.gssp.grouping == Grouping::Profile,
            "sync.shards",
            "a number with sync.gssp.grouping = \"static\" (\"auto\" chooses from the profile's speeds)",
            "\"auto\"",
        )
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
        at_least("run.checkpoint_every_s", r.checkpoint_every_s, 0.0)?;
        positive("run.meeting_timeout_s", r.meeting_timeout_s)?;
        in_unit_interval("run.target_accuracy", r.target_accuracy)?;
        ensure(r.log_every >= 1, "run.log_every", ">= 1", r.log_every)?;
        ensure(
            r.progress_every_s > 0.0 && r.progress_every_s.is_finite(),
            "run.progress_every_s",
            "> 0",
            r.progress_every_s,
        )?;
        ensure(r.threads >= 1, "run.threads", ">= 1", r.threads)
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
        at_least("optim.clip_norm", o.clip_norm, 0.0)?;
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
        at_least("optim.warmup_epochs", o.warmup_epochs, 0.0)?;
        at_least("optim.delay_compensation", o.delay_compensation, 0.0)
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
        in_unit_interval("compression.speed_ema", c.speed_ema)?;
        ensure(
            (1..=MAX_RANK).contains(&c.rank),
            "compression.rank",
            &format!("in 1..={MAX_RANK}"),
            c.rank,
        )?;
        ensure(
            c.kind != CompressionKind::Powersgd
                || self.sync.gssp.sparse_transport == SparseTransport::Mailbox,
            "sync.gssp.sparse_transport",
            "\"mailbox\" with compression.kind = \"powersgd\" (low-rank factors travel as mailbox messages)",
            "\"accumulate\"",
        )?;
        let mode = self.sync.mode;
        let servers = self.sync.strategy().roles() == Roles::Servers;
        for (key, precision) in [("compression.push", c.push), ("compression.reply", c.reply)] {
            ensure(
                precision == Precision::F32 || servers,
                key,
                &format!("\"f32\" with sync.mode = \"{mode}\" (its workers talk to no server)"),
                format!("\"{precision}\""),
            )?;
        }
        let regroup_every_s = self.sync.gssp.regroup_every_s;
        ensure(
            c.reply == Precision::F32 || mode != SyncMode::Gssp || regroup_every_s == 0.0,
            "compression.reply",
            &format!("\"f32\" with sync.gssp.regroup_every_s = {regroup_every_s} (a regrouped worker's first weights travel in f32)"),
            format!("\"{}\"", c.reply),
        )
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
        at_least("heterogeneity.straggler_factor", h.straggler_factor, 1.0)?;
        at_least("heterogeneity.link_gbps", h.link_gbps, 0.0)?;
        for (i, c) in h.changes.iter().enumerate() {
            at_least(&format!("heterogeneity.changes[{i}].at_s"), c.at_s, 0.0)?;
            at_least(&format!("heterogeneity.changes[{i}].factor"), c.factor, 1.0)?;
            if i > 0 {
                let before = h.changes[i - 1].at_s;
                ensure(
                    c.at_s >= before,
                    &format!("heterogeneity.changes[{i}].at_s"),
                    &format!("in ascending order (>= {before}, the entry before)"),
                    c.at_s,
                )?;
            }
        }
        Ok(())
    }

    /// Runs [`Config::validate`], then checks what depends on the MPI world size: enough
    /// ranks for the mode's servers and workers, a static grouping that covers every worker
    /// exactly once, and one slowdown factor per worker.
    pub fn validate_for_world(&self, world_size: usize) -> Result<(), ConfigError> {
        self.validate()?;
        ensure(world_size >= 1, "world size", ">= 1", world_size)?;
        let mode = self.sync.mode;
        let name = mode;
        match mode {
            SyncMode::Single => ensure(
                world_size == 1,
                "sync.mode",
                &format!(
                    "a distributed mode (bsp, asp, ssp, gssp, allreduce, localsgd or async-localsgd) to run on {world_size} ranks"
                ),
                name,
            )?,
            SyncMode::Bsp
            | SyncMode::Asp
            | SyncMode::Ssp
            | SyncMode::Gssp
            | SyncMode::AsyncLocalsgd => ensure(
                world_size >= 2,
                "sync.mode",
                &format!(
                    "single, allreduce or localsgd on 1 rank ({name} needs server rank 0 plus at least one worker rank)"
                ),
                name,
            )?,
            SyncMode::Allreduce | SyncMode::Localsgd => {}
        }
        if mode == SyncMode::Gssp {
            self.validate_groups(world_size)?;
        }
        let workers = self.num_workers(world_size);
        self.validate_static_batches(workers)?;
        let h = &self.heterogeneity;
        if !h.slowdown.is_empty() {
            ensure(
                h.slowdown.len() == workers,
                "heterogeneity.slowdown",
                &format!("one factor per worker ({workers} workers on {world_size} ranks)"),
                format!("{} factors", h.slowdown.len()),
            )?;
        }
        for (i, c) in h.changes.iter().enumerate() {
            ensure(
                c.worker < workers,
                &format!("heterogeneity.changes[{i}].worker"),
                &format!("a worker index < {workers} ({workers} workers on {world_size} ranks)"),
                c.worker,
            )?;
        }
        if !h.tiers.is_empty() {
            // In u128: worker counts near usize::MAX would wrap a usize sum (release builds
            // do not check overflow), and a sum that wraps onto `workers` would pass.
            let total: u128 = h.tiers.iter().map(|t| t.workers as u128).sum();
            ensure(
                total == workers as u128,
                "heterogeneity.tiers",
                &format!(
                    "tiers whose worker counts sum to {workers} ({workers} workers on {world_size} ranks)"
                ),
                format!("{total} workers in total"),
            )?;
        }
        Ok(())
    }

    /// gssp's groups on `world_size` ranks: every group server (each of its `sync.shards`
    /// ranks) and at least one worker per group; a static grouping of the worker ranks
    /// (those after the servers) holding each exactly once.
    fn validate_groups(&self, world_size: usize) -> Result<(), ConfigError> {
        let servers = self.num_servers();
        let groups = servers / self.sync.shards_reserved();
        let key = match self.sync.gssp.groups {
            super::Groups::Count(_) => "sync.gssp.groups",
            super::Groups::Auto => "sync.gssp.max_groups",
        };
        let shards = self.sync.shards_reserved();
        let why = match shards {
            1 => "each group server needs at least one worker".to_string(),
            s => format!("each group's {s} server ranks need at least one worker"),
        };
        ensure(
            world_size >= (shards + 1) * groups,
            key,
            &format!(
                "<= {} on {world_size} ranks ({why})",
                world_size / (shards + 1)
            ),
            groups,
        )?;
        if self.sync.gssp.grouping != Grouping::Static {
            return Ok(());
        }
        let lists = &self.sync.gssp.static_groups;
        ensure(
            lists.len() == groups,
            "sync.gssp.static_groups",
            &format!("exactly sync.gssp.groups = {groups} lists of worker ranks"),
            format!("{} lists", lists.len()),
        )?;
        let last = world_size - 1;
        let mut seen = BTreeSet::new();
        for (i, list) in lists.iter().enumerate() {
            let key = format!("sync.gssp.static_groups[{i}]");
            ensure(
                !list.is_empty(),
                &key,
                "a non-empty list of worker ranks",
                "[]",
            )?;
            for &rank in list {
                ensure(
                    (servers..world_size).contains(&rank),
                    &key,
                    &format!("worker ranks in {servers}..={last} (ranks 0..{servers} are servers)"),
                    rank,
                )?;
                ensure(
                    seen.insert(rank),
                    "sync.gssp.static_groups",
                    "a list that holds each worker rank exactly once",
                    format!("rank {rank} more than once"),
                )?;
            }
        }
        if let Some(missing) = (servers..world_size).find(|r| !seen.contains(r)) {
            return Err(invalid(
                "sync.gssp.static_groups",
                &format!("a list that holds every worker rank {servers}..={last}"),
                format!("no group for rank {missing}"),
            ));
        }
        Ok(())
    }
}

impl DataConfig {
    /// The `[data]` rules of [`Config::validate`]: a folder for the datasets that need one, and
    /// a synthetic set the generator can make (at most [`MAX_CLASSES`] classes, since labels
    /// are bytes). [`crate::data::load`] runs this too, for callers that did not validate.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if matches!(
            self.dataset,
            DatasetKind::Mnist | DatasetKind::Cifar10 | DatasetKind::Multi30k
        ) {
            ensure(
                !self.dir.trim().is_empty(),
                "data.dir",
                &format!("the dataset folder (required for dataset {})", self.dataset),
                format!("{:?}", self.dir),
            )?;
        }
        let s = &self.synthetic;
        for (key, v) in [
            ("data.synthetic.train", s.train),
            ("data.synthetic.test", s.test),
            ("data.synthetic.channels", s.channels),
            ("data.synthetic.height", s.height),
            ("data.synthetic.width", s.width),
        ] {
            ensure(v >= 1, key, ">= 1", v)?;
        }
        ensure(
            (1..=MAX_CLASSES).contains(&s.classes),
            "data.synthetic.classes",
            &format!("in 1..={MAX_CLASSES}"),
            s.classes,
        )?;
        at_least("data.synthetic.noise", f64::from(s.noise), 0.0)
    }
}

pub(super) fn invalid(key: &str, requirement: &str, got: impl Display) -> ConfigError {
    ConfigError::Invalid {
        key: key.to_string(),
        requirement: requirement.to_string(),
        got: got.to_string(),
    }
}

pub(super) fn ensure(
    ok: bool,
    key: &str,
    requirement: &str,
    got: impl Display,
) -> Result<(), ConfigError> {
    if ok {
        Ok(())
    } else {
        Err(invalid(key, requirement, got))
    }
}

impl Config {
    /// ResNet-18 and VGG-19 take CIFAR-10's 3x32x32 images: a dataset of another shape
    /// is refused here, naming both shapes, rather than after the data has loaded.
    fn validate_model_input(&self) -> Result<(), ConfigError> {
        use super::ModelKind;
        let text_model = self.model.name == ModelKind::Seq2seq;
        let text_data = self.data.dataset == DatasetKind::Multi30k;
        if text_model || text_data {
            ensure(
                text_model && text_data,
                "model.name",
                "seq2seq with dataset multi30k, and an image model with an image dataset",
                format!(
                    "model {} with dataset {}",
                    self.model.name, self.data.dataset
                ),
            )?;
            return ensure(
                self.data.augment == super::Augment::None,
                "data.augment",
                "\"none\" for text (crop-flip is an image augmentation)",
                self.data.augment,
            );
        }
        let model = match self.model.name {
            ModelKind::Resnet18 => "resnet18",
            ModelKind::Vgg19 => "vgg19",
            ModelKind::Lenet5 | ModelKind::Mlp | ModelKind::Seq2seq => return Ok(()),
        };
        let s = &self.data.synthetic;
        let shape = match self.data.dataset {
            DatasetKind::Mnist | DatasetKind::FashionMnist => (1, 28, 28),
            DatasetKind::Cifar10 => (3, 32, 32),
            DatasetKind::Synthetic => (s.channels, s.height, s.width),
            DatasetKind::Multi30k => unreachable!("text data returned above"),
        };
        ensure(
            shape == super::CIFAR_INPUT,
            "model.name",
            &format!(
                "a model for the dataset's {}x{}x{} images ({model} takes 3x32x32, CIFAR-10's)",
                shape.0, shape.1, shape.2
            ),
            model,
        )
    }
}

impl GsspConfig {
    /// Checks `[sync.gssp]` on its own: `"auto"` reads the profile, so it needs
    /// `grouping = "profile"`.
    fn validate(&self) -> Result<(), ConfigError> {
        let reads_profile = self.grouping == Grouping::Profile;
        match self.groups {
            super::Groups::Count(g) => ensure(g >= 1, "sync.gssp.groups", ">= 1", g)?,
            super::Groups::Auto => ensure(
                reads_profile,
                "sync.gssp.groups",
                "an integer >= 1 unless sync.gssp.grouping = \"profile\" (\"auto\" reads the profile)",
                "\"auto\"",
            )?,
        }
        ensure(
            self.staleness != super::Staleness::Auto || reads_profile,
            "sync.gssp.staleness",
            "an integer >= 0 unless sync.gssp.grouping = \"profile\" (\"auto\" reads the profile)",
            "\"auto\"",
        )?;
        ensure(
            self.max_groups >= 1,
            "sync.gssp.max_groups",
            ">= 1",
            self.max_groups,
        )?;
        let iters = self.profile_iters;
        ensure(iters >= 1, "sync.gssp.profile_iters", ">= 1", iters)?;
        let every = self.inter_group_every;
        ensure(every >= 1, "sync.gssp.inter_group_every", ">= 1", every)?;
        let steps = self.local_steps;
        ensure(steps >= 1, "sync.gssp.local_steps", ">= 1", steps)?;
        at_least("sync.gssp.regroup_every_s", self.regroup_every_s, 0.0)?;
        at_least("sync.gssp.regroup_min_gain", self.regroup_min_gain, 0.0)?;
        ensure(
            (1..=MAX_MAILBOX_MESSAGES).contains(&self.mailbox_messages),
            "sync.gssp.mailbox_messages",
            &format!("in 1..={MAX_MAILBOX_MESSAGES}"),
            self.mailbox_messages,
        )?;
        self.outer.validate("sync.gssp.outer")
    }
}

impl OuterConfig {
    /// Checks an outer optimizer's section, named `at` in messages.
    pub(super) fn validate(&self, at: &str) -> Result<(), ConfigError> {
        positive(&format!("{at}.lr"), self.lr)?;
        finite(&format!("{at}.momentum"), self.momentum)?;
        ensure(
            (0.0..1.0).contains(&self.momentum),
            &format!("{at}.momentum"),
            "in [0, 1)",
            self.momentum,
        )?;
        Ok(())
    }
}

/// NaN and infinities slip through range comparisons, so every float is checked first.
fn finite(key: &str, v: f64) -> Result<(), ConfigError> {
    ensure(v.is_finite(), key, "a finite number", v)
}

pub(super) fn at_least(key: &str, v: f64, min: f64) -> Result<(), ConfigError> {
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

#[cfg(test)]
mod tests {
    use crate::config::tests::with;

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
            (&["run.checkpoint_every_s=-2"], "run.checkpoint_every_s: must be >= 0, got -2"),
            (&["run.meeting_timeout_s=0"], "run.meeting_timeout_s: must be > 0, got 0"),
            (&["run.target_accuracy=0"], "run.target_accuracy: must be in (0, 1], got 0"),
            (&["run.target_accuracy=1.5"], "run.target_accuracy: must be in (0, 1], got 1.5"),
            (&["run.log_every=0"], "run.log_every: must be >= 1, got 0"),
            (
                &["run.progress_every_s=0"],
                "run.progress_every_s: must be > 0, got 0",
            ),
            (&["run.threads=0"], "run.threads: must be >= 1, got 0"),
            (&["data.dataset=mnist"], "data.dir: must be the dataset folder (required for dataset mnist), got \"\""),
            (&["data.dataset=cifar10", "data.dir=' '"], "data.dir: must be the dataset folder (required for dataset cifar10), got \" \""),
            (&["data.synthetic.train=0"], "data.synthetic.train: must be >= 1, got 0"),
            (
                &["model.name=resnet18", "data.dataset=mnist", "data.dir=/data/mnist"],
                "model.name: must be a model for the dataset's 1x28x28 images (resnet18 takes 3x32x32, CIFAR-10's), got resnet18",
            ),
            (&["model.width=0.5"], "model.width: must be 1 for lenet5 and mlp (it scales resnet18, vgg19 and seq2seq), got 0.5"),
            (&["model.name=seq2seq"], "model.name: must be seq2seq with dataset multi30k, and an image model with an image dataset, got model seq2seq with dataset synthetic"),
            (&["data.dataset=multi30k", "data.dir=/d"], "model.name: must be seq2seq with dataset multi30k, and an image model with an image dataset, got model mlp with dataset multi30k"),
            (&["data.dataset=multi30k", "model.name=seq2seq"], "data.dir: must be the dataset folder (required for dataset multi30k), got \"\""),
            (&["data.dataset=multi30k", "data.dir=/d", "model.name=seq2seq", "data.augment=crop-flip"], "data.augment: must be \"none\" for text (crop-flip is an image augmentation), got crop-flip"),
            (&["model.name=vgg19", "data.dataset=synthetic", "data.synthetic.channels=3", "data.synthetic.height=32", "data.synthetic.width=32", "model.width=0"], "model.width: must be in (0, 4], got 0"),
            (&["data.synthetic.test=0"], "data.synthetic.test: must be >= 1, got 0"),
            (&["data.synthetic.channels=0"], "data.synthetic.channels: must be >= 1, got 0"),
            (&["data.synthetic.height=0"], "data.synthetic.height: must be >= 1, got 0"),
            (&["data.synthetic.width=0"], "data.synthetic.width: must be >= 1, got 0"),
            (&["data.synthetic.classes=0"], "data.synthetic.classes: must be in 1..=256, got 0"),
            (&["data.synthetic.classes=257"], "data.synthetic.classes: must be in 1..=256, got 257"),
            (&["data.synthetic.noise=-0.5"], "data.synthetic.noise: must be >= 0, got -0.5"),
            (&["model.mlp_hidden=[64, 0]"], "model.mlp_hidden[1]: must be >= 1, got 0"),
            (&["optim.lr=-0.1"], "optim.lr: must be > 0, got -0.1"),
            (&["optim.lr=0"], "optim.lr: must be > 0, got 0"),
            (&["optim.lr=inf"], "optim.lr: must be a finite number, got inf"),
            (&["optim.momentum=1"], "optim.momentum: must be in [0, 1), got 1"),
            (&["optim.clip_norm=-1"], "optim.clip_norm: must be >= 0, got -1"),
            (&["optim.momentum=-0.1"], "optim.momentum: must be in [0, 1), got -0.1"),
            (&["optim.weight_decay=-1e-4"], "optim.weight_decay: must be >= 0, got -0.0001"),
            (&["optim.batch_size=0"], "optim.batch_size: must be >= 1, got 0"),
            (&["optim.lr_decay=0"], "optim.lr_decay: must be in (0, 1], got 0"),
            (&["optim.lr_decay=2"], "optim.lr_decay: must be in (0, 1], got 2"),
            (&["optim.lr_decay_epochs=[-1]"], "optim.lr_decay_epochs[0]: must be >= 0, got -1"),
            (&["optim.lr_decay_epochs=[5, 3]"], "optim.lr_decay_epochs[1]: must be > the previous entry 5 (strictly ascending), got 3"),
            (&["optim.warmup_epochs=-1"], "optim.warmup_epochs: must be >= 0, got -1"),
            (&["optim.delay_compensation=-0.5"], "optim.delay_compensation: must be >= 0, got -0.5"),
            (&["sync.gssp.groups=0"], "sync.gssp.groups: must be >= 1, got 0"),
            (&["sync.gssp.max_groups=0"], "sync.gssp.max_groups: must be >= 1, got 0"),
            (&["cluster.latency_us=-1"], "cluster.latency_us: must be >= 0, got -1"),
            (&["cluster.bandwidth_gbps=0"], "cluster.bandwidth_gbps: must be > 0, got 0"),
            (&["cluster.apply_ns_per_param=-0.5"], "cluster.apply_ns_per_param: must be >= 0, got -0.5"),
            // The section is checked on its own, whatever mode runs: "auto" reads a profile.
            (&["sync.gssp.grouping=static", "sync.gssp.groups=auto"], "sync.gssp.groups: must be an integer >= 1 unless sync.gssp.grouping = \"profile\" (\"auto\" reads the profile), got \"auto\""),
            (&["sync.mode=ssp", "sync.gssp.grouping=static", "sync.gssp.staleness=auto"], "sync.gssp.staleness: must be an integer >= 0 unless sync.gssp.grouping = \"profile\" (\"auto\" reads the profile), got \"auto\""),
            (&["sync.gssp.profile_iters=0"], "sync.gssp.profile_iters: must be >= 1, got 0"),
            (&["sync.gssp.inter_group_every=0"], "sync.gssp.inter_group_every: must be >= 1, got 0"),
            (&["sync.gssp.regroup_every_s=-1"], "sync.gssp.regroup_every_s: must be >= 0, got -1"),
            (&["sync.gssp.regroup_min_gain=-0.5"], "sync.gssp.regroup_min_gain: must be >= 0, got -0.5"),
            (
                &["sync.mode=gssp", "sync.gssp.groups=2", "sync.gssp.regroup_every_s=10", "run.checkpoint_every_s=5"],
                "sync.gssp.regroup_every_s: must be 0 when run.checkpoint_every_s > 0 (a checkpoint does not record moved workers yet; set one of them to 0), got 10",
            ),
            (&["sync.localsgd.local_steps=0"], "sync.localsgd.local_steps: must be >= 1, got 0"),
            (&["sync.gssp.local_steps=0"], "sync.gssp.local_steps: must be >= 1, got 0"),
            (&["sync.mode=gssp", "sync.gssp.local_steps=4", "run.checkpoint_every_s=5"], "run.checkpoint_every_s: must be 0 with sync.gssp.local_steps > 1 (its workers' replicas are not checkpointed yet), got 5"),
            (&["sync.mode=gssp", "sync.gssp.local_steps=4", "sync.gssp.regroup_every_s=5"], "sync.gssp.regroup_every_s: must be 0 with sync.gssp.local_steps > 1 (local steps are laid out per worker once), got 5"),
            (&["sync.mode=gssp", "sync.gssp.local_steps=4", "optim.delay_compensation=2"], "optim.delay_compensation: must be 0 with sync.gssp.local_steps > 1 (a pushed change is not a gradient to compensate), got 2"),
            (&["sync.mode=gssp", "sync.gssp.local_steps=4", "sync.gssp.grouping=static", "sync.gssp.static_groups=[[1]]"], "sync.gssp.dynamic_local_steps: must be false unless sync.gssp.grouping = \"profile\" (it reads the profile), got true"),
            (&["sync.gssp.mailbox_messages=0"], "sync.gssp.mailbox_messages: must be in 1..=65536, got 0"),
            // Fuzzing finding: a huge ring overflowed MailboxLayout::new's size arithmetic.
            (&["sync.gssp.mailbox_messages=9223372036854775807"], "sync.gssp.mailbox_messages: must be in 1..=65536, got 9223372036854775807"),
            (&["compression.ratio=0"], "compression.ratio: must be in (0, 1], got 0"),
            (&["compression.ratio=1.01"], "compression.ratio: must be in (0, 1], got 1.01"),
            (&["compression.ratio_min=0.5"], "compression.ratio_min: must be in (0, compression.ratio = 0.01], got 0.5"),
            (&["compression.ratio_min=0"], "compression.ratio_min: must be in (0, compression.ratio = 0.01], got 0"),
            (&["compression.warmup_epochs=-2"], "compression.warmup_epochs: must be >= 0, got -2"),
            (&["compression.speed_ema=0"], "compression.speed_ema: must be in (0, 1], got 0"),
            (&["compression.rank=0"], "compression.rank: must be in 1..=65536, got 0"),
            (&["compression.rank=70000"], "compression.rank: must be in 1..=65536, got 70000"),
            (&["sync.mode=allreduce", "compression.push=bf16"], "compression.push: must be \"f32\" with sync.mode = \"allreduce\" (its workers talk to no server), got \"bf16\""),
            (&["sync.mode=single", "compression.push=bf16"], "compression.push: must be \"f32\" with sync.mode = \"single\" (its workers talk to no server), got \"bf16\""),
            (&["sync.mode=localsgd", "compression.reply=bf16"], "compression.reply: must be \"f32\" with sync.mode = \"localsgd\" (its workers talk to no server), got \"bf16\""),
            (&["sync.mode=gssp", "sync.gssp.regroup_every_s=5", "compression.reply=bf16"], "compression.reply: must be \"f32\" with sync.gssp.regroup_every_s = 5 (a regrouped worker's first weights travel in f32), got \"bf16\""),
            (&["compression.kind=powersgd", "sync.gssp.sparse_transport=accumulate"], "sync.gssp.sparse_transport: must be \"mailbox\" with compression.kind = \"powersgd\" (low-rank factors travel as mailbox messages), got \"accumulate\""),
            (&["device.exchange_select=cuda"], "device.exchange_select: must be \"cpu\" or \"auto\" unless sync.mode = \"gssp\" with compression.kind = \"topk\" (only a gssp group server's top-k selects on a GPU), got \"cuda\""),
            (&["sync.mode=gssp", "compression.kind=dense", "device.exchange_select=cuda"], "device.exchange_select: must be \"cpu\" or \"auto\" unless sync.mode = \"gssp\" with compression.kind = \"topk\" (only a gssp group server's top-k selects on a GPU), got \"cuda\""),
            (&["sync.mode=ssp", "sync.shards=0"], "sync.shards: must be >= 1, got 0"),
            (&["sync.mode=bsp", "sync.shards=2"], "sync.shards: must be 1 with sync.mode = \"bsp\" (only asp, ssp and gssp shard their servers), got 2"),
            (&["sync.mode=gssp", "sync.gssp.groups=auto", "sync.shards=2"], "sync.shards: must be 1 with sync.gssp.groups = \"auto\" (sharded servers need a fixed group count), got 2"),
            (&["sync.mode=asp", "sync.shards=auto"], "sync.shards: must be a number with sync.mode = \"asp\" (\"auto\" chooses from gssp's profile), got \"auto\""),
            (&["sync.mode=gssp", "sync.gssp.grouping=static", "sync.shards=auto"], "sync.shards: must be a number with sync.gssp.grouping = \"static\" (\"auto\" chooses from the profile's speeds), got \"auto\""),
            (&["sync.mode=gssp", "sync.shards=auto", "sync.max_shards=0"], "sync.max_shards: must be >= 1, got 0"),
            (&["sync.mode=gssp", "sync.gssp.groups=auto", "sync.shards=auto"], "sync.shards: must be 1 with sync.gssp.groups = \"auto\" (sharded servers need a fixed group count), got \"auto\""),
            (&["sync.mode=gssp", "compression.kind=powersgd", "sync.shards=2"], "sync.shards: must be 1 with compression.kind = \"powersgd\" (its exchange compresses whole matrices, which a shard's range may cut), got 2"),
            (&["sync.overlap=true"], "sync.overlap: must be false with sync.mode = \"single\" (workers compute a step ahead only in asp, ssp and gssp without local steps), got true"),
            (&["sync.mode=bsp", "sync.overlap=true"], "sync.overlap: must be false with sync.mode = \"bsp\" (workers compute a step ahead only in asp, ssp and gssp without local steps), got true"),
            (&["sync.mode=ssp", "sync.ssp.staleness=0", "sync.overlap=true"], "sync.overlap: must be false with sync.ssp.staleness = 0 (the step a worker computes ahead needs a bound of at least 1), got true"),
            (&["sync.mode=gssp", "sync.gssp.staleness=0", "sync.overlap=true"], "sync.overlap: must be false with sync.gssp.staleness = 0 (the step a worker computes ahead needs a bound of at least 1), got true"),
            (&["sync.mode=gssp", "sync.gssp.local_steps=4", "sync.overlap=true"], "sync.overlap: must be false with sync.gssp.local_steps = 4 (workers that take local steps push a change, not a gradient), got true"),
            (&["heterogeneity.slowdown=[1, 0.5]"], "heterogeneity.slowdown[1]: must be >= 1, got 0.5"),
            (&["heterogeneity.slowdown=[inf]"], "heterogeneity.slowdown[0]: must be a finite number, got inf"),
            (&["heterogeneity.tiers=[{factor=0.9, workers=1}]"], "heterogeneity.tiers[0].factor: must be >= 1, got 0.9"),
            (&["heterogeneity.tiers=[{factor=2, workers=0}]"], "heterogeneity.tiers[0].workers: must be >= 1, got 0"),
            (&["heterogeneity.slowdown=[1]", "heterogeneity.tiers=[{factor=2, workers=1}]"], "heterogeneity.tiers: must be empty when heterogeneity.slowdown is set (use one or the other), got 1 tiers"),
            (&["heterogeneity.unit_s=-1"], "heterogeneity.unit_s: must be >= 0, got -1"),
            (&["heterogeneity.straggler_prob=1.5"], "heterogeneity.straggler_prob: must be in [0, 1], got 1.5"),
            (&["heterogeneity.link_gbps=-1"], "heterogeneity.link_gbps: must be >= 0, got -1"),
            (&["heterogeneity.straggler_factor=0.5"], "heterogeneity.straggler_factor: must be >= 1, got 0.5"),
            (&["heterogeneity.changes=[{at_s=-1, worker=0, factor=2}]"], "heterogeneity.changes[0].at_s: must be >= 0, got -1"),
            (&["heterogeneity.changes=[{at_s=1, worker=0, factor=0.5}]"], "heterogeneity.changes[0].factor: must be >= 1, got 0.5"),
            (&["heterogeneity.changes=[{at_s=5, worker=0, factor=2}, {at_s=3, worker=1, factor=2}]"], "heterogeneity.changes[1].at_s: must be in ascending order (>= 5, the entry before), got 3"),
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
            "sync.gssp.staleness=0",
            "compression.ratio=1",
            "compression.ratio_min=1",
            "heterogeneity.straggler_prob=1",
            "heterogeneity.slowdown=[1, 3.5]",
        ])
        .unwrap();
        cfg.validate().unwrap();
    }

    #[test]
    fn bf16_pushes_and_replies_pass_in_every_mode_with_servers() {
        for mode in ["bsp", "asp", "ssp", "gssp", "async-localsgd"] {
            let mode = format!("sync.mode={mode}");
            let sets = [
                mode.as_str(),
                "compression.push=bf16",
                "compression.reply=bf16",
            ];
            let cfg = with(&sets).unwrap();
            cfg.validate().unwrap_or_else(|e| panic!("{mode}: {e}"));
            assert_eq!(cfg.compression.push, super::Precision::Bf16);
            assert_eq!(cfg.compression.reply, super::Precision::Bf16);
        }
    }

    #[test]
    fn overlap_passes_where_workers_push_gradients_under_a_bound_of_one_or_more() {
        for sets in [
            &["sync.mode=asp"][..],
            &["sync.mode=asp", "optim.delay_compensation=0.5"],
            &["sync.mode=ssp", "sync.ssp.staleness=1"],
            &["sync.mode=gssp", "sync.gssp.staleness=1"],
            &["sync.mode=gssp", "sync.gssp.staleness=auto"],
        ] {
            let mut all = sets.to_vec();
            all.push("sync.overlap=true");
            let cfg = with(&all).unwrap();
            cfg.validate().unwrap_or_else(|e| panic!("{all:?}: {e}"));
        }
    }

    fn world_error(overrides: &[&str], world: usize) -> String {
        let cfg = with(overrides).unwrap();
        cfg.validate().unwrap();
        cfg.validate_for_world(world).unwrap_err().to_string()
    }

    #[test]
    fn world_rules_have_their_messages() {
        let cases: &[(&[&str], usize, &str)] = &[
            (&[], 4, "sync.mode: must be a distributed mode (bsp, asp, ssp, gssp, allreduce, localsgd or async-localsgd) to run on 4 ranks, got single"),
            (&["sync.mode=bsp"], 1, "sync.mode: must be single, allreduce or localsgd on 1 rank (bsp needs server rank 0 plus at least one worker rank), got bsp"),
            (&["sync.mode=ssp"], 1, "sync.mode: must be single, allreduce or localsgd on 1 rank (ssp needs server rank 0 plus at least one worker rank), got ssp"),
            (&["sync.mode=gssp", "sync.gssp.groups=3"], 5, "sync.gssp.groups: must be <= 2 on 5 ranks (each group server needs at least one worker), got 3"),
            (&["sync.mode=gssp", "sync.gssp.groups=auto"], 7, "sync.gssp.max_groups: must be <= 3 on 7 ranks (each group server needs at least one worker), got 4"),
            (&["sync.mode=gssp", "sync.gssp.groups=2", "sync.shards=3"], 7, "sync.gssp.groups: must be <= 1 on 7 ranks (each group's 3 server ranks need at least one worker), got 2"),
            (&["sync.mode=gssp", "sync.gssp.groups=2", "sync.shards=2", "sync.gssp.grouping=static", "sync.gssp.static_groups=[[3,4],[5,6]]"], 7, "sync.gssp.static_groups[0]: must be worker ranks in 4..=6 (ranks 0..4 are servers), got 3"),
            (&["sync.mode=gssp", "sync.gssp.groups=2", "sync.gssp.grouping=static", "sync.gssp.static_groups=[[2,3]]"], 5, "sync.gssp.static_groups: must be exactly sync.gssp.groups = 2 lists of worker ranks, got 1 lists"),
            (&["sync.mode=gssp", "sync.gssp.groups=2", "sync.gssp.grouping=static", "sync.gssp.static_groups=[[2,3,4],[]]"], 5, "sync.gssp.static_groups[1]: must be a non-empty list of worker ranks, got []"),
            (&["sync.mode=gssp", "sync.gssp.groups=2", "sync.gssp.grouping=static", "sync.gssp.static_groups=[[1,3],[4]]"], 5, "sync.gssp.static_groups[0]: must be worker ranks in 2..=4 (ranks 0..2 are servers), got 1"),
            (&["sync.mode=gssp", "sync.gssp.groups=2", "sync.gssp.grouping=static", "sync.gssp.static_groups=[[2,3],[4,5]]"], 5, "sync.gssp.static_groups[1]: must be worker ranks in 2..=4 (ranks 0..2 are servers), got 5"),
            (&["sync.mode=gssp", "sync.gssp.groups=2", "sync.gssp.grouping=static", "sync.gssp.static_groups=[[2,3],[3,4]]"], 5, "sync.gssp.static_groups: must be a list that holds each worker rank exactly once, got rank 3 more than once"),
            (&["sync.mode=gssp", "sync.gssp.groups=2", "sync.gssp.grouping=static", "sync.gssp.static_groups=[[2],[4]]"], 5, "sync.gssp.static_groups: must be a list that holds every worker rank 2..=4, got no group for rank 3"),
            (&["sync.mode=asp", "heterogeneity.changes=[{at_s=1, worker=3, factor=2}]"], 4, "heterogeneity.changes[0].worker: must be a worker index < 3 (3 workers on 4 ranks), got 3"),
            (&["sync.mode=bsp", "heterogeneity.slowdown=[1, 2]"], 4, "heterogeneity.slowdown: must be one factor per worker (3 workers on 4 ranks), got 2 factors"),
            (&["sync.mode=allreduce", "heterogeneity.tiers=[{factor=1, workers=2}, {factor=3, workers=1}]"], 4, "heterogeneity.tiers: must be tiers whose worker counts sum to 4 (4 workers on 4 ranks), got 3 workers in total"),
            // Fuzzing finding: the usize sum wrapped, to 1 here, and the config passed.
            (&["sync.mode=allreduce", "heterogeneity.tiers=[{factor=1, workers=9223372036854775807}, {factor=1, workers=9223372036854775807}, {factor=1, workers=3}]"], 1, "heterogeneity.tiers: must be tiers whose worker counts sum to 1 (1 workers on 1 ranks), got 18446744073709551617 workers in total"),
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
            "sync.gssp.groups=2",
            "sync.gssp.grouping=static",
            "sync.gssp.static_groups=[[2,4],[3]]",
            "heterogeneity.tiers=[{factor=1, workers=2}, {factor=3, workers=1}]",
        ])
        .unwrap();
        cfg.validate_for_world(5).unwrap();
        assert_eq!((cfg.num_servers(), cfg.num_workers(5)), (2, 3));
        // Profile grouping ignores static_groups; 2 groups need at least 4 ranks.
        let cfg = with(&["sync.mode=gssp", "sync.gssp.groups=2"]).unwrap();
        cfg.validate_for_world(4).unwrap();
    }
}
