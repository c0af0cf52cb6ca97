//! Distributed checkpoints: the ranks that hold state (the servers; every rank of
//! allreduce and localsgd) each write their file, the file entries are gathered on the
//! first of them, and it commits the checkpoint. The modes decide when and bring their
//! state to a quiet point first (see [`crate::checkpoint`]).

use anyhow::{Context, Result};

use crate::checkpoint::rescale::{self, Rescale};
use crate::checkpoint::store::{self, FileEntry};
use crate::checkpoint::{self, RankFile, RankMeta, Resume, Schedule};
use crate::comm::Collectives;
use crate::compute::backend::Backend;
use crate::compute::model::Trainable;
use crate::compute::optim::NetworkOptimizer;
use crate::config::Config;
use crate::protocol::param_server::ParamServer;
use crate::telemetry::{EvalRow, RunDir, Snapshots};

/// What a group of saving ranks needs to write a checkpoint together.
pub struct Saver<'a, C: Collectives> {
    /// The ranks that save together; its rank 0 commits.
    pub comm: &'a C,
    pub cfg: &'a Config,
    pub run: &'a RunDir,
    pub world_rank: usize,
    pub world_size: usize,
    pub layout: Option<serde_json::Value>,
    pub schedule: Schedule,
}

impl<C: Collectives> Saver<'_, C> {
    /// Whether a periodic checkpoint is due at `time_s`.
    pub fn due(&self, time_s: f64) -> bool {
        self.schedule.due(time_s)
    }

    /// What a run that stops early can be resumed from: the newest checkpoint, if this run
    /// took one or was resumed from one.
    pub fn resume_hint(&self) -> Option<String> {
        let newest = self.schedule.sequence.checked_sub(1).filter(|&s| s > 0)?;
        Some(format!(
            "checkpoint {} stays the newest: `gssp train --resume {}` continues from it",
            store::checkpoint_dir(self.run.path(), newest).display(),
            self.run.path().display()
        ))
    }

    /// Writes this rank's file of the next checkpoint and, on the committing rank, the
    /// manifest and `latest` (collective over `comm`). A rank that cannot write its file
    /// fails with the file named; the committing rank then fails too, naming the rank, and
    /// the previous checkpoint stays the newest.
    pub fn save(
        &mut self,
        (time_s, epoch): (f64, f64),
        tensors: &[(&str, &[f32])],
        meta: &RankMeta,
    ) -> Result<()> {
        let sequence = self.schedule.sequence;
        let dir = store::checkpoint_dir(self.run.path(), sequence);
        let written = store::write_rank_file(&dir, self.world_rank, tensors, meta);
        let row = match &written {
            Ok(e) => [
                1.0,
                self.world_rank as f64,
                e.bytes as f64,
                f64::from(e.crc32),
            ],
            Err(_) => [0.0, self.world_rank as f64, 0.0, 0.0],
        };
        let rows = self.comm.gather_f64s(0, &row)?;
        written?;
        if let Some(rows) = rows {
            let mut files = Vec::with_capacity(rows.len());
            for r in rows {
                let rank = r[1] as usize;
                anyhow::ensure!(
                    r[0] > 0.0,
                    "rank {rank} could not write its file of checkpoint {}; the previous checkpoint stays the newest",
                    dir.display()
                );
                files.push(FileEntry {
                    name: store::rank_file_name(rank),
                    bytes: r[2] as u64,
                    crc32: r[3] as u32,
                });
            }
            let manifest = checkpoint::manifest(
                self.cfg,
                sequence,
                (time_s, epoch),
                self.world_size,
                self.layout.clone(),
                files,
            );
            store::commit(self.run.path(), &manifest)?;
            log::info!(
                "checkpoint {} at {time_s:.1} s, epoch {epoch:.3}",
                dir.display()
            );
        }
        self.schedule.taken(time_s);
        Ok(())
    }
}

/// The snapshot tensors' names, in order.
pub fn snapshot_names(snapshots: &Snapshots) -> Vec<String> {
    (0..snapshots.taken.len())
        .map(checkpoint::snapshot_name)
        .collect()
}

/// The snapshots' rows, for [`RankMeta::evals`].
pub fn snapshot_rows(snapshots: &Snapshots) -> Vec<EvalRow> {
    snapshots.taken.iter().map(|(row, _)| *row).collect()
}

/// The snapshots a checkpoint saved (its `evals` rows and `snapshot.I` tensors).
pub fn restore_snapshots(
    file: &mut RankFile<RankMeta>,
    every_s: f64,
    n: usize,
    path: &std::path::Path,
) -> Result<Snapshots> {
    let mut taken = Vec::with_capacity(file.meta.evals.len());
    for (i, row) in file.meta.evals.clone().into_iter().enumerate() {
        taken.push((row, file.take(&checkpoint::snapshot_name(i), n, path)?));
    }
    Ok(Snapshots::resume(every_s, file.meta.time_s, taken))
}

/// World rank `rank`'s file of `resume`, or an error naming it.
pub fn load(resume: &Resume, rank: usize) -> Result<RankFile<RankMeta>> {
    Ok(resume.load(rank)?)
}

/// Restores a rank that trains its own replica (allreduce, localsgd) from its file:
/// weights, batch-norm statistics, momentum, and its batch count; returns the iterations
/// done and, for rank 0, the snapshots it had taken. On another rank count a rank restores
/// the saved ranks' files in turn ([`Rescale::source`](checkpoint::Rescale::source)): the
/// replicas are equal at a checkpoint (allreduce always, localsgd right after an average),
/// and each keeps a saved rank's momentum, as localsgd keeps its own; its batch count is its
/// share of the work done. Also returns the cut of the batches in force (empty: equal, or
/// saved on another rank count, whose cut does not fit).
pub fn restore_replica<B: Backend>(
    resume: &Resume,
    rank: usize,
    step: &mut crate::compute::workload::ComputeStep<B>,
    optimizer: &mut NetworkOptimizer<B>,
    snapshot_every_s: f64,
) -> Result<(u64, Snapshots, Vec<usize>)> {
    let source = resume.rescale.as_ref().map_or(rank, |rs| rs.source(rank));
    let path = resume.path(source);
    let mut file = load(resume, source)?;
    if let Some(rs) = &resume.rescale {
        file.meta.steps = rs.per_worker;
        if source != rank {
            // Snapshots stay with the rank that took them (rank 0).
            file.meta.evals.clear();
        }
    }
    let n = step.net.num_params();
    let weights = file.take(checkpoint::WEIGHTS, n, &path)?;
    step.net.params_from_host(&weights);
    let state = file.take(checkpoint::STATE, step.net.num_state(), &path)?;
    step.net.state_from_host(&state);
    let steps = file.meta.optimizer_steps;
    optimizer.state_from_host(&step.net, steps, |name| file.take(name, n, &path))?;
    step.resume_at(file.meta.steps);
    let snapshots = restore_snapshots(&mut file, snapshot_every_s, n, &path)?;
    let batches = match resume.rescale {
        None => std::mem::take(&mut file.meta.batches),
        Some(_) => Vec::new(),
    };
    Ok((file.meta.steps, snapshots, batches))
}

/// Saves a rank that trains its own replica (allreduce, localsgd): weights, batch-norm
/// statistics, momentum, iterations, and rank 0's snapshots (collective over `saver.comm`).
pub fn save_replica<C: Collectives, B: Backend>(
    saver: &mut Saver<'_, C>,
    step: &crate::compute::workload::ComputeStep<B>,
    optimizer: &NetworkOptimizer<B>,
    (iteration, epoch, time_s): (u64, f64, f64),
    (snapshots, batches): (&Snapshots, &[usize]),
) -> Result<()> {
    let net = &step.net;
    let (state, optimizer_steps) = optimizer.state_to_host(net);
    let meta = RankMeta {
        time_s,
        epoch,
        steps: iteration,
        evals: snapshot_rows(snapshots),
        optimizer_steps,
        batches: batches.to_vec(),
        ..Default::default()
    };
    let names = snapshot_names(snapshots);
    let (mut stage, state_now) = (Vec::new(), net.state_host_copy());
    let mut tensors = vec![
        (checkpoint::WEIGHTS, net.params_on_host(&mut stage)),
        (checkpoint::STATE, state_now.as_slice()),
    ];
    tensors.extend(state.iter().map(|(name, v)| (*name, v.as_slice())));
    for (name, (_, w)) in names.iter().zip(&snapshots.taken) {
        tensors.push((name.as_str(), w.as_slice()));
    }
    saver.save((time_s, epoch), &tensors, &meta)
}

/// Restores group server world rank `rank` from its file: replica, optimizer state, model
/// version and its workers' clocks; returns the file with what else it holds (its meta:
/// pushes, what it knew of the other groups; the exchange's tensors) and its snapshots.
/// On another rank count it restores the saved servers' merged file instead, cut to
/// `range`, the part of the model it serves (`rescaled_server_file`); `group_sizes` are the
/// workers of each group of the new layout, `group_sizes.0` the index of this server's.
pub fn restore_server(
    resume: &Resume,
    (rank, range): (usize, std::ops::Range<usize>),
    ps: &mut ParamServer,
    snapshot_every_s: f64,
    group_sizes: (usize, &[usize]),
) -> Result<(RankFile<RankMeta>, Snapshots)> {
    let path = resume.path(rank);
    let workers = ps.clock().clocks().len();
    let mut file = match &resume.rescale {
        Some(rs) => rescaled_server_file(resume, rs, (group_sizes, range), workers)?,
        None => load(resume, rank)?,
    };
    let n = ps.weights().len();
    let weights = file.take(checkpoint::WEIGHTS, n, &path)?;
    let steps = file.meta.optimizer_steps;
    ps.optimizer_mut()
        .restore(steps, |name| file.take(name, n, &path))?;
    anyhow::ensure!(
        file.meta.worker_clocks.len() == workers,
        "{}: clocks of {} workers, this server has {workers}",
        path.display(),
        file.meta.worker_clocks.len()
    );
    ps.restore(&weights, file.meta.version, &file.meta.worker_clocks);
    let snapshots = restore_snapshots(&mut file, snapshot_every_s, n, &path)?;
    Ok((file, snapshots))
}

/// Checks that a shard's saved state (`mine`, from the file at `paths.0`) is at the point
/// of its group's first shard's (`first`, at `paths.1`): every worker at the same clock and
/// the same pushes applied. A group's shards save at the end of a run, once every push has
/// reached every shard; files that differ were not saved so, and resuming them would apply
/// some pushes to one range of the model and not to another.
pub fn shards_agree(
    mine: &RankMeta,
    first: &RankMeta,
    paths: (std::path::PathBuf, std::path::PathBuf),
) -> Result<()> {
    let (a, b) = (&mine.worker_clocks, &first.worker_clocks);
    let differs = |what: String, theirs: String| {
        anyhow::anyhow!(
            "{}: {what}, {} {theirs}: the shards of a group were not saved at one point; it cannot be resumed",
            paths.0.display(),
            paths.1.display()
        )
    };
    if a.len() != b.len() {
        return Err(differs(
            format!("clocks of {} workers", a.len()),
            format!("of {}", b.len()),
        ));
    }
    if let Some(w) = (0..a.len()).find(|&w| a[w] != b[w]) {
        return Err(differs(
            format!("worker {w} at clock {}", a[w]),
            format!("at {}", b[w]),
        ));
    }
    if mine.steps != first.steps {
        return Err(differs(
            format!("{} pushes applied", mine.steps),
            format!("{}", first.steps),
        ));
    }
    Ok(())
}

/// What a server of a run resumed on another rank count starts from: the saved servers'
/// files, a sharded group's joined into the whole model first ([`rescale::join_shards`]),
/// merged ([`rescale::merge`]: the mean replica, the mean optimizer and outer-optimizer
/// state, the snapshots all took) and cut to `range`, the part this server serves
/// ([`rescale::cut`]), with the counts of the new layout: every worker at the same clock,
/// its share of the work done (so the SSP bound holds from the start); each group's pushes
/// its workers' clocks summed; this group's speed its workers' share of the saved groups'
/// speeds together. `(group, sizes)`: this server's group and the workers of every group of
/// the new layout; `slots`: the server's worker slots (a regrouping server has one for
/// every worker of the run, the others' absent).
fn rescaled_server_file(
    resume: &Resume,
    rs: &Rescale,
    ((group, sizes), range): ((usize, &[usize]), std::ops::Range<usize>),
    slots: usize,
) -> Result<RankFile<RankMeta>> {
    let mut wholes = Vec::new();
    for ranks in saved_groups(resume, &rs.saved_ranks)? {
        let mut files = Vec::with_capacity(ranks.len());
        for r in ranks {
            files.push((resume.path(r), load(resume, r)?));
        }
        wholes.push(rescale::join_shards(files)?);
    }
    let mut file = rescale::cut(rescale::merge(wholes)?, range)?;
    let clock = rs.per_worker;
    let mine = sizes.get(group).copied().unwrap_or(0);
    let m = &mut file.meta;
    m.worker_clocks = vec![clock; slots];
    m.steps = clock * mine as u64;
    m.group_pushes = sizes.iter().map(|&w| clock * w as u64).collect();
    m.speed *= mine as f64 / rs.workers.max(1) as f64;
    Ok(file)
}

/// The saved servers' ranks by group, each group's shards in shard order (the saved
/// layout's `servers` and `shards`); without shards, each saved rank on its own.
fn saved_groups(resume: &Resume, saved: &[usize]) -> Result<Vec<Vec<usize>>> {
    let layout: Option<crate::protocol::layout::Layout> = match &resume.manifest.layout {
        Some(l) => Some(
            serde_json::from_value(l.clone())
                .with_context(|| format!("{}: layout", resume.manifest_path().display()))?,
        ),
        None => None,
    };
    let Some(layout) = layout.filter(|l| !l.shards.is_empty()) else {
        return Ok(saved.iter().map(|&r| vec![r]).collect());
    };
    Ok(layout
        .servers
        .iter()
        .zip(&layout.shards)
        .map(|(&first, rest)| std::iter::once(first).chain(rest.iter().copied()).collect())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(clocks: &[u64], steps: u64) -> RankMeta {
        RankMeta {
            worker_clocks: clocks.to_vec(),
            steps,
            ..RankMeta::default()
        }
    }

    #[test]
    fn shards_agree_only_at_one_point_and_a_difference_names_both_files() {
        let paths = || ("C/rank-00002.bin".into(), "C/rank-00000.bin".into());
        let first = meta(&[6, 7], 13);
        assert!(shards_agree(&meta(&[6, 7], 13), &first, paths()).is_ok());
        let err = shards_agree(&meta(&[6, 8], 14), &first, paths()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "C/rank-00002.bin: worker 1 at clock 8, C/rank-00000.bin at 7: the shards of a group were not saved at one point; it cannot be resumed"
        );
        let err = shards_agree(&meta(&[6], 6), &first, paths()).unwrap_err();
        assert!(
            err.to_string()
                .contains("clocks of 1 workers, C/rank-00000.bin of 2"),
            "{err}"
        );
        let err = shards_agree(&meta(&[6, 7], 12), &first, paths()).unwrap_err();
        assert!(
            err.to_string()
                .contains("12 pushes applied, C/rank-00000.bin 13"),
            "{err}"
        );
    }
}
