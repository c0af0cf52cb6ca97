//! Checkpoints and resume: what each role saves, when, and how a run continues from it.
//!
//! A checkpoint is taken at a quiet point, the same in every mode: no update is in flight.
//! - single: between two iterations.
//! - bsp, asp, ssp (one server): between two pushes the server applied (bsp: after a
//!   completed round). The server saves its weights, momentum, model version and each
//!   worker's clock; pushes still in flight are lost (at most one per worker).
//! - gssp: the group servers meet (an agreement over their communicator, see
//!   [`crate::runtime::exchange`]), flush their unsent change densely, drain, and meet again: every
//!   update has then reached every replica and every mailbox is empty, so each server saves
//!   its replica, momentum, version, clocks and what it knows of the other groups, and the
//!   exchange restarts from empty mailboxes.
//! - allreduce, localsgd: all ranks agree in the reduction they run anyway (localsgd right
//!   after an averaging round, so the replicas are equal); each saves its weights and
//!   momentum.
//!
//! Workers of the server modes save nothing: a worker's sampler position, augmentation and
//! dropout streams are pure functions of (run seed, shard, batch count), and its server's
//! checkpoint holds its clock; resumed, it continues at the batch after its last applied
//! push. Emulated heterogeneity (`heterogeneity.*`) restarts its straggler draws from the
//! same seed; its tier changes follow the resumed training clock.
//!
//! The training clock continues: a resumed run starts its clock at the checkpoint's time,
//! so `run.time_budget_s` and `run.epochs` count the whole run, and the CSV logs keep the
//! rows up to the checkpoint's time (rows written after it by the attempt that died are
//! dropped: the resumed run does that work again).
//!
//! A run may resume on another number of ranks (a requeued job on fewer or more nodes):
//! the workers are laid out anew, the saved replicas merge or split, and the work done is
//! split over the new workers ([`rescale`], where the invariant is stated).
//!
//! Every rank checks the manifest when it reads it ([`Manifest::check`]), fits the run's
//! config to the world it resumes on ([`fit`]: what the new rank count changes or refuses),
//! and, on the same rank count, checks the saved layout against both before it takes it up
//! (`runtime::setup`): a hand-edited manifest is refused by its path and field.

pub mod fit;
pub mod rescale;
pub mod store;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::telemetry::EvalRow;
pub use fit::Fit;
pub use rescale::Rescale;
pub use store::{CheckpointError, FileEntry, Manifest, RankFile};

/// Tensor names in a rank file.
pub const WEIGHTS: &str = "weights";
/// The optimizer's state: `momentum` (SGD) or `adam.m` and `adam.v` (Adam).
/// Checkpoint tensor names of the optimizer state: SGD's momentum, Adam's moments.
pub const MOMENTUM: &str = "momentum";
pub const ADAM_M: &str = "adam.m";
pub const ADAM_V: &str = "adam.v";
/// Batch-norm running statistics (single, allreduce, localsgd: the ranks that evaluate
/// or train with their own).
pub const STATE: &str = "state";

/// The tensor name of snapshot `i`.
pub fn snapshot_name(i: usize) -> String {
    format!("snapshot.{i}")
}

/// What a rank records besides its tensors.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RankMeta {
    /// The training clock (seconds) and epoch when the checkpoint was taken.
    pub time_s: f64,
    pub epoch: f64,
    /// Iterations of this rank (single, allreduce, localsgd) or pushes it applied (a
    /// server).
    pub steps: u64,
    /// A server's model version (optimizer steps applied).
    pub version: u64,
    /// A server's workers' clocks (applied pushes), in group order.
    pub worker_clocks: Vec<u64>,
    /// A gssp server: the pushes of every group as it knows them (its own included), and
    /// its measured speed (pushes per second).
    pub group_pushes: Vec<u64>,
    pub speed: f64,
    /// Evaluations so far (single) or the rows of the `snapshot.I` tensors (distributed).
    pub evals: Vec<EvalRow>,
    /// The optimizer's update count (Adam's bias corrections need it; 0 for SGD).
    #[serde(default)]
    pub optimizer_steps: u64,
    /// A gssp server's outer optimizer: the deltas it took (its buffers are tensors).
    #[serde(default)]
    pub outer_steps: u64,
    /// allreduce and localsgd with batches by speed: every rank's batch in the cut in force
    /// (empty: the equal cut).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub batches: Vec<usize>,
}

/// When the next checkpoint is due.
#[derive(Debug, Clone)]
pub struct Schedule {
    every_s: f64,
    next_s: f64,
    /// The sequence number the next checkpoint gets.
    pub sequence: u64,
}

impl Schedule {
    /// Every `every_s` seconds of the training clock (0: none but the final one), from
    /// `time_s` on; `sequence` of the checkpoint resumed from (0 for a fresh run).
    pub fn new(every_s: f64, time_s: f64, sequence: u64) -> Schedule {
        let mut s = Schedule {
            every_s,
            next_s: f64::INFINITY,
            sequence: sequence + 1,
        };
        s.advance(time_s);
        s
    }

    /// Whether a checkpoint is due at `time_s`.
    pub fn due(&self, time_s: f64) -> bool {
        time_s >= self.next_s
    }

    /// When the next periodic checkpoint is due (`None`: no periodic checkpoints).
    pub fn next_due_s(&self) -> Option<f64> {
        self.next_s.is_finite().then_some(self.next_s)
    }

    /// A checkpoint was taken at `time_s`: the next is due at the following multiple of
    /// the interval (the same on every rank that agrees on `time_s`).
    pub fn advance(&mut self, time_s: f64) {
        if self.every_s > 0.0 {
            self.next_s = ((time_s / self.every_s).floor() + 1.0) * self.every_s;
        }
    }

    /// Moves on after checkpoint `sequence` was taken at `time_s`.
    pub fn taken(&mut self, time_s: f64) {
        self.sequence += 1;
        self.advance(time_s);
    }
}

/// The checkpoint a run resumes from.
#[derive(Debug, Clone)]
pub struct Resume {
    /// The run directory, and the checkpoint's directory in it.
    pub run_dir: PathBuf,
    pub dir: PathBuf,
    pub manifest: Manifest,
    /// Set when the run continues on another rank count than the checkpoint's
    /// ([`Resume::for_world`]).
    pub rescale: Option<Rescale>,
}

impl Resume {
    /// The newest complete checkpoint of the run in `run_dir`.
    pub fn open(run_dir: &Path) -> Result<Resume, CheckpointError> {
        let (dir, manifest) = store::open_latest(run_dir)?;
        Ok(Resume {
            run_dir: run_dir.to_path_buf(),
            dir,
            manifest,
            rescale: None,
        })
    }

    /// The path of the checkpoint's manifest (for error messages).
    pub fn manifest_path(&self) -> PathBuf {
        store::manifest_path(&self.dir)
    }

    /// Fits `cfg`, the run's config as this checkpoint recorded it, to `world_size` ranks
    /// ([`fit::fit`]: the manifest checked against both, gssp's static groups given up on
    /// another rank count, what cannot follow refused), then plans how the saved state is
    /// shared out where it must be ([`Resume::for_world`]).
    pub fn fit_to_world(&mut self, cfg: &mut Config, world_size: usize) -> Result<(), String> {
        let fit = fit::fit(cfg, &self.manifest, &self.dir, world_size)?;
        self.for_world(world_size, fit.workers, fit.relayout)
            .map_err(|e| e.to_string())
    }

    /// Continues on `world_size` ranks, of which `workers` train: on another rank count than
    /// the checkpoint's, or with `relayout` (the saved layout no longer says who was where:
    /// a gssp run that regrouped), plans how the saved state is shared out
    /// ([`Rescale::plan`], which reads every saved file's header).
    pub fn for_world(
        &mut self,
        world_size: usize,
        workers: usize,
        relayout: bool,
    ) -> Result<(), CheckpointError> {
        self.rescale = if world_size == self.manifest.world_size && !relayout {
            None
        } else {
            Some(Rescale::plan(self, world_size, workers)?)
        };
        Ok(())
    }

    /// World rank `rank`'s file, checked against the manifest.
    pub fn load(&self, rank: usize) -> Result<RankFile<RankMeta>, CheckpointError> {
        store::read_rank_file(&self.dir, &self.manifest, rank)
    }

    /// The path of world rank `rank`'s file (for error messages).
    pub fn path(&self, rank: usize) -> PathBuf {
        self.dir.join(store::rank_file_name(rank))
    }
}

/// The manifest of checkpoint `sequence` of a run with `cfg` on `world_size` ranks.
pub fn manifest(
    cfg: &Config,
    sequence: u64,
    (time_s, epoch): (f64, f64),
    world_size: usize,
    layout: Option<serde_json::Value>,
    files: Vec<FileEntry>,
) -> Manifest {
    Manifest {
        format: store::FORMAT,
        sequence,
        time_s,
        epoch,
        world_size,
        mode: cfg.sync.mode.to_string(),
        config: cfg.to_toml_string(),
        layout,
        files,
    }
}

/// The `--set` keys a resumed run may change: how long it runs and how it checkpoints
/// and logs, nothing that shapes the state it resumes.
pub const RESUMABLE_KEYS: &[&str] = &[
    "run.epochs",
    "run.time_budget_s",
    "run.checkpoint_every_s",
    "run.snapshot_every_s",
    "run.log_every",
    "run.threads",
    "data.dir",
];

/// Checks `--set` overrides given with `--resume`.
pub fn check_resume_overrides(overrides: &[String]) -> Result<(), String> {
    for o in overrides {
        let key = o.split_once('=').map_or(o.as_str(), |(k, _)| k).trim();
        if !RESUMABLE_KEYS.contains(&key) {
            return Err(format!(
                "--resume: --set {key} would change the run being resumed; a resumed run may change only {}",
                RESUMABLE_KEYS.join(", ")
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_falls_on_multiples_of_the_interval() {
        let mut s = Schedule::new(10.0, 0.0, 0);
        assert_eq!(s.sequence, 1);
        assert!(!s.due(9.9) && s.due(10.0));
        s.taken(13.0);
        assert_eq!(s.sequence, 2);
        assert!(!s.due(19.9) && s.due(20.0));
        // Resumed at 47 s from checkpoint 4: the next at 50 s, numbered 5.
        let s = Schedule::new(10.0, 47.0, 4);
        assert!(!s.due(49.0) && s.due(50.0));
        assert_eq!(s.sequence, 5);
        assert_eq!(s.next_due_s(), Some(50.0));
        let s = Schedule::new(0.0, 0.0, 0);
        assert!(!s.due(1e12), "0 = only at the end");
        assert_eq!(s.next_due_s(), None);
    }

    #[test]
    fn a_resumed_run_may_change_only_its_length_and_logging() {
        assert!(check_resume_overrides(&["run.epochs=3".into(), "data.dir=/x".into()]).is_ok());
        let err = check_resume_overrides(&["model.width=0.5".into()]).unwrap_err();
        assert!(
            err.contains("model.width") && err.contains("run.epochs"),
            "{err}"
        );
        assert!(check_resume_overrides(&["run.seed=1".into()]).is_err());
    }
}
