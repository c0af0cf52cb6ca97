//! How a resumed run is fitted to the world it resumes on: the policy `gssp train --resume`
//! applies to the config a checkpoint recorded, on every rank, before any rank sets up.
//! Pure: no MPI and no files ([`Resume::fit_to_world`](super::Resume::fit_to_world) applies
//! it, then reads what the plan of another rank count needs).
//!
//! - The manifest must hold together with the config it records: the mode it names, one
//!   rank for the single process, and a saved layout for every distributed mode (the
//!   layout's own fields are checked against the config and the world where the run takes
//!   it up, in `runtime::setup`, since the layout's type lives above this layer).
//! - A mode may refuse its settings' resume ([`Mode::resume_refusal`]): gssp with local
//!   steps, since a checkpoint does not record its workers' replicas. A run of sharded
//!   servers (`sync.shards` > 1) resumes on its own rank count with each shard from its own
//!   file (one range of the weights); on another, or laid out anew after regrouping, each
//!   group's ranges are joined into the model and cut anew for the new shards
//!   ([`super::rescale`]).
//! - On another rank count a mode changes the settings that name the old world's ranks
//!   ([`Mode::refit_to_world`]): gssp's `grouping = "static"` becomes grouping by profile
//!   (and the resolved config says so).
//! - Whatever else cannot follow the new count (a list of one slowdown factor per worker,
//!   too few ranks for the mode or the groups) is an error naming the key and both counts.
//! - A run that regrouped (gssp, [`Mode::regrouping`]) saved its workers where they ended,
//!   not where its layout put them: it is laid out again, as on another rank count.
//!
//! [`Mode::resume_refusal`]: crate::config::modes::Mode::resume_refusal
//! [`Mode::refit_to_world`]: crate::config::modes::Mode::refit_to_world
//! [`Mode::regrouping`]: crate::config::modes::Mode::regrouping

use std::path::Path;

use super::store::{self, CheckpointError, Manifest};
use crate::config::modes::Roles;
use crate::config::Config;

/// What fitting a resumed run to its world decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fit {
    /// The resumed run's workers.
    pub workers: usize,
    /// Whether the saved layout no longer says who was where (a gssp run that regrouped), so
    /// the run is laid out again even on the checkpoint's rank count.
    pub relayout: bool,
}

/// Fits `cfg` (the config of the checkpoint in `dir`, whose manifest is `manifest`) to
/// `world_size` ranks, changing what the new count calls for; an error says what cannot
/// follow, naming the manifest's path or the checkpoint's directory.
pub fn fit(
    cfg: &mut Config,
    manifest: &Manifest,
    dir: &Path,
    world_size: usize,
) -> Result<Fit, String> {
    agrees_with_config(manifest, cfg, &store::manifest_path(dir)).map_err(|e| e.to_string())?;
    let mode = cfg.sync.strategy();
    let saved = manifest.world_size;
    let regrouping = mode.regrouping(&cfg.sync).is_some();
    if let Some(reason) = mode.resume_refusal(&cfg.sync) {
        return Err(format!(
            "--resume: {} {reason}; it cannot be resumed",
            dir.display()
        ));
    }
    if world_size != saved {
        mode.refit_to_world(&mut cfg.sync);
    }
    cfg.validate_for_world(world_size).map_err(|e| {
        format!(
            "--resume on {world_size} ranks (the checkpoint in {} was taken on {saved}): {e}",
            dir.display()
        )
    })?;
    Ok(Fit {
        workers: cfg.num_workers(world_size),
        relayout: regrouping,
    })
}

/// The manifest (read from `path`) and the config it records agree: the same mode, one
/// rank for a single-process run, a saved layout for a distributed one.
fn agrees_with_config(
    manifest: &Manifest,
    cfg: &Config,
    path: &Path,
) -> Result<(), CheckpointError> {
    let mode = cfg.sync.mode;
    if manifest.mode != mode.to_string() {
        let reason = format!(
            "{:?}, the config it holds says sync.mode = {mode}",
            manifest.mode
        );
        return Err(CheckpointError::field(path, "mode", reason));
    }
    let single = mode.strategy().roles() == Roles::Single;
    if single && manifest.world_size != 1 {
        let reason = format!("{} ranks for a single-process run", manifest.world_size);
        return Err(CheckpointError::field(path, "world_size", reason));
    }
    if !single && manifest.layout.is_none() {
        let reason = format!("missing: a {mode} run's checkpoint records who did what");
        return Err(CheckpointError::field(path, "layout", reason));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Grouping, SyncMode};

    /// The config of `sets`, and a manifest of it taken on `world` ranks.
    fn saved(sets: &[&str], world: usize) -> (Config, Manifest) {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        let minimal = "[data]\ndataset = \"synthetic\"\n[model]\nname = \"mlp\"\n";
        let cfg = Config::from_str_with_overrides(minimal, "t", &sets).expect("a valid config");
        let layout = (cfg.sync.mode != SyncMode::Single).then(|| serde_json::json!({}));
        let manifest = super::super::manifest(&cfg, 3, (1.0, 0.5), world, layout, Vec::new());
        (cfg, manifest)
    }

    const STATIC_GSSP: [&str; 4] = [
        "sync.mode=gssp",
        "sync.gssp.groups=2",
        "sync.gssp.grouping=static",
        "sync.gssp.static_groups=[[2,3],[4,5]]",
    ];

    fn dir() -> &'static Path {
        Path::new("RUN/checkpoints/000003")
    }

    #[test]
    fn another_rank_count_groups_by_profile_instead_of_static_groups() {
        let (mut cfg, manifest) = saved(&STATIC_GSSP, 6);
        let fit = fit(&mut cfg, &manifest, dir(), 8).unwrap();
        assert_eq!(cfg.sync.gssp.grouping, Grouping::Profile);
        assert!(cfg.sync.gssp.static_groups.is_empty());
        assert_eq!(
            fit,
            Fit {
                workers: 6,
                relayout: false
            }
        );
    }

    #[test]
    fn the_same_rank_count_keeps_the_static_groups() {
        let (mut cfg, manifest) = saved(&STATIC_GSSP, 6);
        let before = cfg.clone();
        let fit = fit(&mut cfg, &manifest, dir(), 6).unwrap();
        assert_eq!(cfg, before);
        assert_eq!(fit.workers, 4);
        assert!(!fit.relayout);
    }

    #[test]
    fn a_run_that_regrouped_is_laid_out_again_on_the_same_count() {
        let sets = ["sync.mode=gssp", "sync.gssp.regroup_every_s=5"];
        let (mut cfg, manifest) = saved(&sets, 6);
        assert!(fit(&mut cfg, &manifest, dir(), 6).unwrap().relayout);
        let (mut cfg, manifest) = saved(&["sync.mode=asp"], 3);
        assert!(!fit(&mut cfg, &manifest, dir(), 3).unwrap().relayout);
    }

    #[test]
    fn a_count_the_mode_cannot_run_on_names_both_counts() {
        let (mut cfg, manifest) = saved(&["sync.mode=asp"], 3);
        let err = fit(&mut cfg, &manifest, dir(), 1).unwrap_err();
        assert!(
            err.contains("--resume on 1 ranks")
                && err.contains("taken on 3")
                && err.contains("RUN/checkpoints/000003")
                && err.contains("sync.mode"),
            "{err}"
        );
        let sets = ["sync.mode=bsp", "heterogeneity.slowdown=[1.0, 2.0]"];
        let (mut cfg, manifest) = saved(&sets, 3);
        let err = fit(&mut cfg, &manifest, dir(), 4).unwrap_err();
        assert!(err.contains("heterogeneity.slowdown"), "{err}");
    }

    #[test]
    fn gssp_with_local_steps_is_refused() {
        let sets = ["sync.mode=gssp", "sync.gssp.local_steps=4"];
        let (mut cfg, manifest) = saved(&sets, 6);
        let err = fit(&mut cfg, &manifest, dir(), 6).unwrap_err();
        assert!(
            err.contains("sync.gssp.local_steps = 4") && err.contains("cannot be resumed"),
            "{err}"
        );
    }

    #[test]
    fn a_run_of_sharded_servers_resumes_on_another_rank_count_and_after_regrouping() {
        let (mut cfg, manifest) = saved(&["sync.mode=ssp", "sync.shards=2"], 6);
        let fitted = fit(&mut cfg.clone(), &manifest, dir(), 6).unwrap();
        assert_eq!(fitted.workers, 4);
        let fitted = fit(&mut cfg, &manifest, dir(), 7).unwrap();
        assert_eq!((fitted.workers, fitted.relayout), (5, false));
        let sets = [
            "sync.mode=gssp",
            "sync.gssp.groups=2",
            "sync.shards=2",
            "sync.gssp.regroup_every_s=5",
        ];
        let (mut cfg, manifest) = saved(&sets, 8);
        let fitted = fit(&mut cfg, &manifest, dir(), 8).unwrap();
        assert!(fitted.relayout, "a regrouped run is laid out anew");
    }

    #[test]
    fn a_manifest_that_disagrees_with_its_config_names_the_field() {
        let manifest_path = "RUN/checkpoints/000003/manifest.json";
        let (mut cfg, mut manifest) = saved(&["sync.mode=ssp"], 3);
        manifest.mode = "bsp".into();
        let err = fit(&mut cfg, &manifest, dir(), 3).unwrap_err();
        assert!(
            err.starts_with(&format!("{manifest_path}: mode: \"bsp\"")) && err.contains("ssp"),
            "{err}"
        );
        let (mut cfg, mut manifest) = saved(&["sync.mode=ssp"], 3);
        manifest.layout = None;
        let err = fit(&mut cfg, &manifest, dir(), 3).unwrap_err();
        assert!(
            err.starts_with(&format!("{manifest_path}: layout: missing")),
            "{err}"
        );
        let (mut cfg, mut manifest) = saved(&["sync.mode=single"], 1);
        manifest.world_size = 2;
        let err = fit(&mut cfg, &manifest, dir(), 1).unwrap_err();
        assert!(
            err.starts_with(&format!("{manifest_path}: world_size: 2")),
            "{err}"
        );
        let (mut cfg, manifest) = saved(&["sync.mode=single"], 1);
        assert_eq!(fit(&mut cfg, &manifest, dir(), 1).unwrap().workers, 1);
    }
}
