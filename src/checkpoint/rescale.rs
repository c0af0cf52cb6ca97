//! A checkpoint resumed on another rank count: how the work done is split over the new
//! workers, which saved file a new rank restores from, and how the saved replicas merge.
//! Pure file and arithmetic work, no MPI; the roles apply it (see
//! [`crate::runtime::saver`]).
//!
//! The invariant: a checkpoint is taken at a quiet point where no update is in flight and
//! the saved replicas agree (gssp: after the flush and drain every replica holds the initial
//! weights plus every group's updates, each within `replica_max_error` of that sum;
//! allreduce: always equal; localsgd: right after an average; bsp, asp, ssp: there is one).
//! So the resumed run may start every new replica from one model, the mean of the saved
//! ones, and lose no update: the mean is as close to that sum as the worst saved replica,
//! and every new replica is the same, so the new exchange starts from equal replicas and
//! empty mailboxes, and its end-of-run check counts from there.
//!
//! The work done (pushes applied, summed over the servers; or iterations, summed over the
//! ranks of allreduce and localsgd) is split evenly over the new workers: each continues at
//! batch `floor(work / workers)` of its new shard, so the epoch count, the learning-rate
//! schedule and `run.epochs` continue (less than one batch per worker is done again).
//!
//! Sharded servers (`sync.shards`) saved one range of the model each: a group's files are
//! first joined into the whole model ([`join_shards`], every tensor laid end to end in
//! shard order), the groups' wholes merged, and each new server or shard takes its range of
//! the result ([`cut`]); only a group's first shard counts its pushes as work done.

use std::path::PathBuf;

use super::store::{self, CheckpointError, RankFile};
use super::{RankMeta, Resume};

/// How a checkpoint taken on `from_world` ranks continues on `to_world`.
#[derive(Debug, Clone, PartialEq)]
pub struct Rescale {
    pub from_world: usize,
    pub to_world: usize,
    /// Pushes applied (server modes, summed over the servers) or iterations summed over the
    /// ranks (allreduce, localsgd) at the checkpoint.
    pub work: u64,
    /// The resumed run's workers, and the batches each has done: `work / workers`.
    pub workers: usize,
    pub per_worker: u64,
    /// The world ranks that saved a file, in rank order.
    pub saved_ranks: Vec<usize>,
}

impl Rescale {
    /// The plan for `resume` continuing on `to_world` ranks of which `workers` train: reads
    /// every saved file's header for its count.
    pub fn plan(
        resume: &Resume,
        to_world: usize,
        workers: usize,
    ) -> Result<Rescale, CheckpointError> {
        let saved_ranks = saved_ranks(resume)?;
        let counted = counted_ranks(resume, &saved_ranks);
        let mut work = 0u64;
        for &rank in &counted {
            let meta: RankMeta = store::read_rank_meta(&resume.dir, &resume.manifest, rank)?;
            work = work.saturating_add(meta.steps);
        }
        Ok(Rescale {
            from_world: resume.manifest.world_size,
            to_world,
            work,
            workers,
            per_worker: work / workers.max(1) as u64,
            saved_ranks,
        })
    }

    /// The saved file new world rank `rank` restores from when each rank keeps a replica of
    /// its own (allreduce, localsgd): the saved ranks in turn.
    pub fn source(&self, rank: usize) -> usize {
        self.saved_ranks[rank % self.saved_ranks.len()]
    }
}

/// The saved ranks whose pushes count as work done: a sharded group's first shard alone
/// (the saved layout's `servers`, where it names any of `saved`), else every saved rank.
fn counted_ranks(resume: &Resume, saved: &[usize]) -> Vec<usize> {
    let first_shards: Vec<usize> = resume
        .manifest
        .layout
        .as_ref()
        .filter(|l| {
            l.get("shards")
                .and_then(|s| s.as_array())
                .is_some_and(|s| !s.is_empty())
        })
        .and_then(|l| l.get("servers"))
        .and_then(|s| s.as_array())
        .map(|s| {
            s.iter()
                .filter_map(|r| r.as_u64())
                .map(|r| r as usize)
                .collect()
        })
        .unwrap_or_default();
    match first_shards.iter().any(|r| saved.contains(r)) {
        true => first_shards,
        false => saved.to_vec(),
    }
}

/// The world ranks whose files the checkpoint's manifest lists, in rank order (the
/// manifest was checked when it was read, [`Manifest::check`](super::Manifest::check); an
/// error here names it all the same).
fn saved_ranks(resume: &Resume) -> Result<Vec<usize>, CheckpointError> {
    let manifest_path = resume.manifest_path();
    let mut ranks = Vec::with_capacity(resume.manifest.files.len());
    for f in &resume.manifest.files {
        let rank = f.rank().ok_or_else(|| CheckpointError::Corrupt {
            path: manifest_path.clone(),
            reason: format!("a file named {:?}, not rank-R.safetensors", f.name),
        })?;
        ranks.push(rank);
    }
    ranks.sort_unstable();
    if ranks.is_empty() {
        return Err(CheckpointError::Corrupt {
            path: manifest_path,
            reason: "lists no rank file".into(),
        });
    }
    Ok(ranks)
}

/// One file of several replicas that agree (gssp's group servers at a quiet point): each
/// tensor is the element-wise mean of the files' (optimizer and outer-optimizer state
/// included, so the new servers start with the old ones' mean momentum); the snapshots kept
/// are those every file has (rows from the first). Of the counts: `steps` is the sum,
/// `version`, `optimizer_steps` and `outer_steps` the largest, `speed` the sum (the groups'
/// pushes per second together); clocks and group counts are the caller's to set.
pub fn merge(
    files: Vec<(PathBuf, RankFile<RankMeta>)>,
) -> Result<RankFile<RankMeta>, CheckpointError> {
    let mut files = files.into_iter();
    let Some((first_path, mut merged)) = files.next() else {
        return Err(CheckpointError::Corrupt {
            path: PathBuf::from("(checkpoint)"),
            reason: "no rank file to resume from".into(),
        });
    };
    let mut count = 1usize;
    for (path, file) in files {
        add_into(&mut merged, file, (&first_path, &path))?;
        count += 1;
    }
    let scale = 1.0 / count as f32;
    for values in merged.tensors.values_mut() {
        values.iter_mut().for_each(|x| *x *= scale);
    }
    Ok(merged)
}

/// The files of one group's shards (shard order), joined into one file of the whole model:
/// every tensor the shards' ranges laid end to end, the counts and snapshot rows the first
/// shard's (a group's shards save at one point, each with the same clocks and pushes).
pub fn join_shards(
    files: Vec<(PathBuf, RankFile<RankMeta>)>,
) -> Result<(PathBuf, RankFile<RankMeta>), CheckpointError> {
    let mut files = files.into_iter();
    let Some((first_path, mut joined)) = files.next() else {
        return Err(CheckpointError::Corrupt {
            path: PathBuf::from("(checkpoint)"),
            reason: "a group without a shard's file".into(),
        });
    };
    for (path, mut file) in files {
        if file.tensors.len() != joined.tensors.len() {
            return Err(CheckpointError::Corrupt {
                path,
                reason: format!(
                    "{} tensors, {} has {}",
                    file.tensors.len(),
                    first_path.display(),
                    joined.tensors.len()
                ),
            });
        }
        for (name, values) in joined.tensors.iter_mut() {
            values.extend(take_tensor(&mut file, name, (&first_path, &path))?);
        }
    }
    Ok((first_path, joined))
}

/// Tensor `name` taken out of `file` (read from `path`), which the file read from `first`
/// has too.
fn take_tensor(
    file: &mut RankFile<RankMeta>,
    name: &str,
    (first, path): (&PathBuf, &PathBuf),
) -> Result<Vec<f32>, CheckpointError> {
    file.tensors
        .remove(name)
        .ok_or_else(|| CheckpointError::Corrupt {
            path: path.clone(),
            reason: format!("no tensor {name}, which {} has", first.display()),
        })
}

/// `file`, a whole model's, cut to `range`: every tensor's values there.
pub fn cut(
    mut file: RankFile<RankMeta>,
    range: std::ops::Range<usize>,
) -> Result<RankFile<RankMeta>, CheckpointError> {
    for (name, values) in file.tensors.iter_mut() {
        let part = values
            .get(range.clone())
            .ok_or_else(|| CheckpointError::Corrupt {
                path: PathBuf::from("(the merged checkpoint)"),
                reason: format!(
                    "tensor {name} has {} values, the range {range:?} is past them",
                    values.len()
                ),
            })?;
        *values = part.to_vec();
    }
    Ok(file)
}

/// Adds `file` (read from `path`) into `sum` (the first file, read from `first`).
fn add_into(
    sum: &mut RankFile<RankMeta>,
    mut file: RankFile<RankMeta>,
    (first, path): (&PathBuf, &PathBuf),
) -> Result<(), CheckpointError> {
    let snapshots = sum.meta.evals.len().min(file.meta.evals.len());
    sum.meta.evals.truncate(snapshots);
    sum.tensors
        .retain(|name, _| !is_snapshot_beyond(name, snapshots));
    for (name, values) in sum.tensors.iter_mut() {
        let other = take_tensor(&mut file, name, (first, path))?;
        if other.len() != values.len() {
            return Err(CheckpointError::Corrupt {
                path: path.clone(),
                reason: format!(
                    "tensor {name} has {} values, {} has {}",
                    other.len(),
                    first.display(),
                    values.len()
                ),
            });
        }
        values.iter_mut().zip(&other).for_each(|(s, x)| *s += x);
    }
    let m = &mut sum.meta;
    m.steps = m.steps.saturating_add(file.meta.steps);
    m.version = m.version.max(file.meta.version);
    m.optimizer_steps = m.optimizer_steps.max(file.meta.optimizer_steps);
    m.outer_steps = m.outer_steps.max(file.meta.outer_steps);
    m.speed += file.meta.speed;
    Ok(())
}

/// Whether tensor `name` is snapshot `i >= kept`.
fn is_snapshot_beyond(name: &str, kept: usize) -> bool {
    name.strip_prefix("snapshot.")
        .and_then(|i| i.parse::<usize>().ok())
        .is_some_and(|i| i >= kept)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::EvalRow;

    fn file(weights: Vec<f32>, steps: u64, snapshots: usize) -> (PathBuf, RankFile<RankMeta>) {
        let mut tensors = std::collections::BTreeMap::new();
        tensors.insert("weights".to_string(), weights.clone());
        tensors.insert("momentum".to_string(), vec![steps as f32; weights.len()]);
        for i in 0..snapshots {
            tensors.insert(
                super::super::snapshot_name(i),
                vec![i as f32; weights.len()],
            );
        }
        let meta = RankMeta {
            steps,
            version: steps,
            speed: 2.0,
            evals: vec![EvalRow::default(); snapshots],
            optimizer_steps: steps,
            ..Default::default()
        };
        (
            PathBuf::from(format!("rank-{steps}")),
            RankFile { tensors, meta },
        )
    }

    #[test]
    fn replicas_merge_into_their_mean_and_counts_add_up() {
        let merged = merge(vec![
            file(vec![1.0, 2.0], 10, 3),
            file(vec![3.0, 2.0], 30, 2),
        ])
        .unwrap();
        assert_eq!(merged.tensors["weights"], [2.0, 2.0]);
        assert_eq!(merged.tensors["momentum"], [20.0, 20.0]);
        assert_eq!(merged.meta.evals.len(), 2, "the snapshots both took");
        assert!(merged.tensors.contains_key("snapshot.1"));
        assert!(!merged.tensors.contains_key("snapshot.2"));
        assert_eq!(merged.meta.steps, 40);
        assert_eq!(merged.meta.version, 30);
        assert_eq!(merged.meta.optimizer_steps, 30);
        assert_eq!(merged.meta.speed, 4.0);
    }

    #[test]
    fn replicas_that_do_not_match_are_an_error_naming_the_file() {
        let (p, mut f) = file(vec![1.0, 2.0], 10, 0);
        f.tensors.remove("momentum");
        let err = merge(vec![file(vec![1.0, 2.0], 3, 0), (p, f)])
            .unwrap_err()
            .to_string();
        assert!(err.contains("rank-10") && err.contains("momentum"), "{err}");
        let err = merge(vec![file(vec![1.0], 3, 0), file(vec![1.0, 2.0], 4, 0)])
            .unwrap_err()
            .to_string();
        assert!(err.contains("rank-4") && err.contains("2 values"), "{err}");
    }

    #[test]
    fn a_groups_shards_join_into_the_whole_model_and_a_range_is_cut_from_it() {
        let (p0, mut a) = file(vec![1.0, 2.0], 5, 1);
        let (p1, mut b) = file(vec![3.0], 5, 1);
        a.tensors.insert("momentum".into(), vec![0.1, 0.2]);
        b.tensors.insert("momentum".into(), vec![0.3]);
        b.tensors.insert("snapshot.0".into(), vec![9.0]);
        let (path, joined) = join_shards(vec![(p0.clone(), a), (p1, b)]).unwrap();
        assert_eq!(path, p0);
        assert_eq!(joined.tensors["weights"], [1.0, 2.0, 3.0]);
        assert_eq!(joined.tensors["momentum"], [0.1, 0.2, 0.3]);
        assert_eq!(joined.tensors["snapshot.0"], [0.0, 0.0, 9.0]);
        assert_eq!(
            joined.meta.steps, 5,
            "a group's pushes, not its shards' sum"
        );
        let part = cut(joined, 1..3).unwrap();
        assert_eq!(part.tensors["weights"], [2.0, 3.0]);
        assert_eq!(part.tensors["momentum"], [0.2, 0.3]);
        let err = cut(part, 1..5).unwrap_err().to_string();
        assert!(err.contains("range 1..5"), "{err}");
    }

    #[test]
    fn a_shard_missing_a_tensor_is_named() {
        let (p0, a) = file(vec![1.0], 5, 0);
        let (p1, mut b) = file(vec![2.0], 5, 0);
        b.tensors.remove("momentum");
        b.tensors.insert("other".into(), vec![1.0]);
        let err = join_shards(vec![(p0, a), (p1, b)]).unwrap_err().to_string();
        assert!(err.contains("rank-5") && err.contains("momentum"), "{err}");
    }

    #[test]
    fn the_saved_ranks_take_turns_as_sources() {
        let r = Rescale {
            from_world: 3,
            to_world: 5,
            work: 30,
            workers: 5,
            per_worker: 6,
            saved_ranks: vec![0, 1, 2],
        };
        let sources: Vec<usize> = (0..5).map(|i| r.source(i)).collect();
        assert_eq!(sources, [0, 1, 2, 0, 1]);
    }
}
