//! `[sync.balance]`: each worker's batch in proportion to its speed, and the rules a
//! balanced config must keep.

use serde::{Deserialize, Serialize};

use super::validate::{at_least, ensure};
use super::{Config, ConfigError, DatasetKind, SyncMode};

/// How the global batch (`optim.batch_size` times the workers) is cut among the workers.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum BatchSplit {
    /// Every worker takes `optim.batch_size`.
    #[default]
    Equal,
    /// In proportion to each worker's measured speed (load-balanced synchronous training,
    /// LB-BSP: Chen et al., SoCC 2020).
    Speed,
    /// The list `sync.balance.static_batches`, one batch per worker in rank order.
    Static,
}

/// `[sync.balance]`: batches in proportion to speed. The global batch stays `optim.batch_size`
/// times the workers whatever the cut, and every worker's gradient is weighted by its share
/// of it, so a balanced synchronous step is one step on the global batch and the learning
/// rate is that of the equal cut (see [`crate::protocol::balance`]).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct BalanceConfig {
    pub batches: BatchSplit,
    /// With `batches = "static"`: each worker's batch, in rank order; they sum to the global
    /// batch.
    pub static_batches: Vec<usize>,
    /// With `batches = "speed"`: iterations each worker times at the equal cut before its
    /// first share (after the pacer's calibration).
    pub measure_iters: usize,
    /// With `batches = "speed"`, in allreduce and localsgd: measure again and re-cut every
    /// this many seconds of training (semi-dynamic balancing). 0 = the first cut stays.
    pub every_s: f64,
    /// A re-cut is taken only when some worker's batch would change by more than this
    /// fraction of it.
    pub hysteresis: f64,
    /// The smallest and the largest batch a worker may get (memory); `max_batch = 0` means
    /// 4 x `optim.batch_size`. Every worker's workspace is sized to the largest.
    pub min_batch: usize,
    pub max_batch: usize,
}

impl BalanceConfig {
    /// Whether the workers' batches may differ.
    pub fn is_balanced(&self) -> bool {
        self.batches != BatchSplit::Equal
    }

    /// The largest batch a worker may get, for a mean batch of `mean` (`mean` itself
    /// with equal batches).
    pub fn ceiling(&self, mean: usize) -> usize {
        if !self.is_balanced() {
            return mean;
        }
        self.balanced_bounds(mean).1
    }

    /// The smallest and the largest batch of a balanced cut, for a mean batch of `mean`,
    /// whether or not this config balances (what `gssp plan` simulates).
    pub fn balanced_bounds(&self, mean: usize) -> (usize, usize) {
        let ceiling = match self.max_batch {
            0 => 4 * mean,
            m => m,
        };
        (self.min_batch, ceiling)
    }
}

impl Default for BalanceConfig {
    fn default() -> Self {
        Self {
            batches: BatchSplit::Equal,
            static_batches: Vec::new(),
            measure_iters: 10,
            every_s: 0.0,
            hysteresis: 0.05,
            min_batch: 1,
            max_batch: 0,
        }
    }
}

impl Config {
    /// `[sync.balance]` on its own and against the rest of the config: the bounds hold the
    /// mean batch, and a balanced cut is asked only of a mode and a dataset that can take it.
    pub(super) fn validate_balance(&self) -> Result<(), ConfigError> {
        let b = &self.sync.balance;
        let mean = self.optim.batch_size;
        ensure(
            b.measure_iters >= 1,
            "sync.balance.measure_iters",
            ">= 1",
            b.measure_iters,
        )?;
        at_least("sync.balance.every_s", b.every_s, 0.0)?;
        at_least("sync.balance.hysteresis", b.hysteresis, 0.0)?;
        ensure(
            b.hysteresis < 1.0,
            "sync.balance.hysteresis",
            "< 1",
            b.hysteresis,
        )?;
        ensure(
            (1..=mean).contains(&b.min_batch),
            "sync.balance.min_batch",
            &format!("in 1..={mean} (optim.batch_size, the mean batch, must fit)"),
            b.min_batch,
        )?;
        ensure(
            b.max_batch == 0 || b.max_batch >= mean,
            "sync.balance.max_batch",
            &format!("0 (4 x optim.batch_size) or >= optim.batch_size = {mean}"),
            b.max_batch,
        )?;
        if !b.is_balanced() {
            return Ok(());
        }
        let key = "sync.balance.batches";
        let mode = self.sync.mode;
        ensure(
            !matches!(mode, SyncMode::Single | SyncMode::AsyncLocalsgd),
            key,
            &format!(
                "\"equal\" with sync.mode = \"{mode}\" (single has one batch; async-localsgd scales each worker's work by its local steps)"
            ),
            b.batches,
        )?;
        ensure(
            self.data.dataset != DatasetKind::Multi30k,
            key,
            "\"equal\" with data.dataset = \"multi30k\" (sentence pairs come in length buckets, which are not cut by shares)",
            b.batches,
        )?;
        ensure(
            !(mode == SyncMode::Gssp && self.sync.gssp.takes_local_steps()),
            key,
            "\"equal\" with sync.gssp.local_steps > 1 (local steps already scale each worker's work by its speed; pick one)",
            b.batches,
        )?;
        ensure(
            b.every_s == 0.0 || matches!(mode, SyncMode::Allreduce | SyncMode::Localsgd),
            "sync.balance.every_s",
            &format!(
                "0 with sync.mode = \"{mode}\" (only allreduce and localsgd cut again during the run; the server modes cut once, from the profile)"
            ),
            b.every_s,
        )
    }

    /// `sync.balance.static_batches` against the world: one batch per worker, within the
    /// bounds, summing to the global batch.
    pub(super) fn validate_static_batches(&self, workers: usize) -> Result<(), ConfigError> {
        let b = &self.sync.balance;
        if b.batches != BatchSplit::Static {
            return Ok(());
        }
        let key = "sync.balance.static_batches";
        ensure(
            b.static_batches.len() == workers,
            key,
            &format!("one batch per worker ({workers} workers)"),
            format!("{} batches", b.static_batches.len()),
        )?;
        let (low, high) = (b.min_batch, b.ceiling(self.optim.batch_size));
        for (i, &batch) in b.static_batches.iter().enumerate() {
            ensure(
                (low..=high).contains(&batch),
                &format!("{key}[{i}]"),
                &format!("in {low}..={high} (sync.balance.min_batch and max_batch)"),
                batch,
            )?;
        }
        let global = workers as u128 * self.optim.batch_size as u128;
        let sum: u128 = b.static_batches.iter().map(|&x| x as u128).sum();
        ensure(
            sum == global,
            key,
            &format!(
                "batches summing to the global batch {global} ({workers} workers x optim.batch_size {})",
                self.optim.batch_size
            ),
            format!("a sum of {sum}"),
        )
    }
}

#[cfg(test)]
mod tests {
    use crate::config::tests::with;

    fn error(sets: &[&str]) -> String {
        with(sets).unwrap().validate().unwrap_err().to_string()
    }

    #[test]
    fn a_balanced_cut_is_refused_where_it_cannot_apply() {
        let e = error(&["sync.mode=async-localsgd", "sync.balance.batches=speed"]);
        assert!(
            e.starts_with(
                "sync.balance.batches: must be \"equal\" with sync.mode = \"async-localsgd\""
            ),
            "{e}"
        );
        let e = error(&[
            "sync.mode=gssp",
            "sync.gssp.local_steps=4",
            "sync.balance.batches=speed",
        ]);
        assert!(e.contains("sync.gssp.local_steps > 1"), "{e}");
        let e = error(&[
            "sync.mode=bsp",
            "sync.balance.batches=speed",
            "sync.balance.every_s=5",
        ]);
        assert!(
            e.starts_with("sync.balance.every_s: must be 0 with sync.mode = \"bsp\""),
            "{e}"
        );
        with(&[
            "sync.mode=allreduce",
            "sync.balance.batches=speed",
            "sync.balance.every_s=5",
        ])
        .unwrap()
        .validate()
        .unwrap();
    }

    #[test]
    fn the_bounds_must_hold_the_mean_batch() {
        let e = error(&["optim.batch_size=8", "sync.balance.min_batch=9"]);
        assert!(
            e.starts_with("sync.balance.min_batch: must be in 1..=8"),
            "{e}"
        );
        let e = error(&["optim.batch_size=8", "sync.balance.max_batch=4"]);
        assert!(e.starts_with("sync.balance.max_batch"), "{e}");
        let e = error(&["sync.balance.hysteresis=1.0"]);
        assert!(e.starts_with("sync.balance.hysteresis: must be < 1"), "{e}");
        let c = with(&["optim.batch_size=8", "sync.balance.batches=speed"]).unwrap();
        assert_eq!(c.sync.balance.ceiling(8), 32);
        let equal = with(&["optim.batch_size=8", "sync.balance.max_batch=64"]).unwrap();
        assert_eq!(
            equal.sync.balance.ceiling(8),
            8,
            "an equal cut needs no more room"
        );
    }

    #[test]
    fn static_batches_cover_every_worker_and_sum_to_the_global_batch() {
        let base = [
            "sync.mode=allreduce",
            "optim.batch_size=8",
            "sync.balance.batches=static",
        ];
        let check = |list: &str| {
            let mut sets = base.to_vec();
            let set = format!("sync.balance.static_batches={list}");
            sets.push(&set);
            with(&sets)
                .unwrap()
                .validate_for_world(3)
                .map_err(|e| e.to_string())
        };
        assert!(check("[8, 8]")
            .unwrap_err()
            .contains("one batch per worker (3 workers)"));
        assert!(check("[8, 8, 9]")
            .unwrap_err()
            .contains("summing to the global batch 24"));
        assert!(check("[0, 12, 12]")
            .unwrap_err()
            .starts_with("sync.balance.static_batches[0]"));
        assert!(check("[33, 1, 1]").unwrap_err().contains("in 1..=32"));
        check("[4, 8, 12]").unwrap();
    }
}
