//! The checkpoint files, without MPI: one safetensors file per rank that holds state, a
//! manifest with every file's size and CRC-32, and a `latest` pointer, each written
//! atomically (temporary file, fsync, rename), so a crash or a full disk at any moment
//! leaves the previous checkpoint whole and named by `latest`.
//!
//! ```text
//! RUN_DIR/checkpoints/latest                 "000003": the newest complete checkpoint
//! RUN_DIR/checkpoints/000003/manifest.json   config, time, files with sizes and CRC-32
//! RUN_DIR/checkpoints/000003/rank-R.safetensors
//! ```
//!
//! A checkpoint is complete once its manifest exists; `latest` moves to it only then, and
//! older checkpoints are removed after that.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use safetensors::tensor::{Dtype, TensorView};
use safetensors::SafeTensors;
use serde::{de::DeserializeOwned, Deserialize, Serialize};

use crate::telemetry::files::write_atomic;

/// The checkpoints directory inside a run directory.
pub const DIR: &str = "checkpoints";
const LATEST: &str = "latest";
const MANIFEST: &str = "manifest.json";
/// The header metadata key that holds a rank file's state (JSON).
const STATE_KEY: &str = "gssp.state";
/// Bumped when the files change incompatibly.
pub const FORMAT: u32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    // The I/O error is part of the message, not a `source`: printed once either way.
    #[error("cannot write checkpoint file {path}: {cause}")]
    Write {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("cannot read checkpoint file {path}: {cause}")]
    Read {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("{path}: no checkpoint to resume from (the run wrote none: set run.checkpoint_every_s, or let it reach its end)")]
    None { path: PathBuf },
    #[error("checkpoint file {path} is corrupt: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    /// A manifest field that does not hold together with the rest of the manifest, the
    /// run's config or the world it resumes on (a hand-edited manifest): named by the
    /// manifest's path and the field, as `section.key` names a config value.
    #[error("{path}: {field}: {reason}")]
    Field {
        path: PathBuf,
        field: String,
        reason: String,
    },
}

impl CheckpointError {
    fn corrupt(path: &Path, reason: impl Into<String>) -> Self {
        CheckpointError::Corrupt {
            path: path.to_path_buf(),
            reason: reason.into(),
        }
    }

    /// Field `field` of the manifest at `path` is wrong for `reason`.
    pub fn field(path: &Path, field: impl Into<String>, reason: impl Into<String>) -> Self {
        CheckpointError::Field {
            path: path.to_path_buf(),
            field: field.into(),
            reason: reason.into(),
        }
    }
}

/// One rank file as the manifest lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    pub name: String,
    pub bytes: u64,
    pub crc32: u32,
}

impl FileEntry {
    /// The world rank whose file this is (`rank-R.safetensors`), or `None` for another name.
    pub fn rank(&self) -> Option<usize> {
        let digits = self
            .name
            .strip_prefix("rank-")?
            .strip_suffix(".safetensors")?;
        let rank = digits.parse::<usize>().ok()?;
        // Only the name gssp writes: not "rank-+3" or "rank-03", which it would never find.
        (rank_file_name(rank) == self.name).then_some(rank)
    }
}

/// What a complete checkpoint holds besides the rank files.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    pub sequence: u64,
    /// The run's training clock when it was taken (seconds).
    pub time_s: f64,
    pub epoch: f64,
    pub world_size: usize,
    pub mode: String,
    /// The run's config (TOML) as it trained.
    pub config: String,
    /// Distributed runs: who does what (`layout.json`), so that a resumed run keeps its
    /// groups rather than profiling anew.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<serde_json::Value>,
    pub files: Vec<FileEntry>,
}

/// A rank's state: named f32 tensors and its metadata `M`.
#[derive(Debug, Clone, PartialEq)]
pub struct RankFile<M> {
    pub tensors: BTreeMap<String, Vec<f32>>,
    pub meta: M,
}

/// Where checkpoint `sequence` of the run in `run_dir` lives.
pub fn checkpoint_dir(run_dir: &Path, sequence: u64) -> PathBuf {
    run_dir.join(DIR).join(format!("{sequence:06}"))
}

/// The rank file name of world rank `rank`.
pub fn rank_file_name(rank: usize) -> String {
    format!("rank-{rank}.safetensors")
}

/// The manifest's path in checkpoint directory `dir`.
pub fn manifest_path(dir: &Path) -> PathBuf {
    dir.join(MANIFEST)
}

/// The safetensors bytes of `tensors` (1-D f32) with `meta` as JSON in the header.
pub fn to_bytes<M: Serialize>(
    tensors: &[(&str, &[f32])],
    meta: &M,
) -> Result<Vec<u8>, CheckpointError> {
    let other = |e: String| CheckpointError::Write {
        path: PathBuf::from("(checkpoint in memory)"),
        cause: std::io::Error::other(e),
    };
    let bytes: Vec<Vec<u8>> = tensors
        .iter()
        .map(|(_, v)| v.iter().flat_map(|x| x.to_le_bytes()).collect())
        .collect();
    let mut views = Vec::with_capacity(tensors.len());
    for ((name, values), data) in tensors.iter().zip(&bytes) {
        let view = TensorView::new(Dtype::F32, vec![values.len()], data)
            .map_err(|e| other(e.to_string()))?;
        views.push((name.to_string(), view));
    }
    let json = serde_json::to_string(meta).map_err(|e| other(e.to_string()))?;
    let header = HashMap::from([(STATE_KEY.to_string(), json)]);
    safetensors::serialize(views, Some(header)).map_err(|e| other(e.to_string()))
}

/// Writes world rank `rank`'s file into checkpoint `dir` (created if missing), atomically;
/// returns its manifest entry.
pub fn write_rank_file<M: Serialize>(
    dir: &Path,
    rank: usize,
    tensors: &[(&str, &[f32])],
    meta: &M,
) -> Result<FileEntry, CheckpointError> {
    let name = rank_file_name(rank);
    let path = dir.join(&name);
    let write = |cause| CheckpointError::Write {
        path: path.clone(),
        cause,
    };
    std::fs::create_dir_all(dir).map_err(write)?;
    let bytes = to_bytes(tensors, meta)?;
    write_atomic(&path, &bytes).map_err(write)?;
    Ok(FileEntry {
        name,
        bytes: bytes.len() as u64,
        crc32: crc32fast::hash(&bytes),
    })
}

/// Completes checkpoint `manifest.sequence` of `run_dir`: writes its manifest, points
/// `latest` at it, then removes older checkpoints. Each step is atomic; until `latest`
/// moves, a resume uses the previous checkpoint.
pub fn commit(run_dir: &Path, manifest: &Manifest) -> Result<(), CheckpointError> {
    let dir = checkpoint_dir(run_dir, manifest.sequence);
    let path = manifest_path(&dir);
    let json = serde_json::to_string_pretty(manifest).map_err(|e| CheckpointError::Write {
        path: path.clone(),
        cause: std::io::Error::other(e),
    })?;
    write_atomic(&path, json.as_bytes()).map_err(|cause| CheckpointError::Write {
        path: path.clone(),
        cause,
    })?;
    let latest = run_dir.join(DIR).join(LATEST);
    let name = format!("{:06}\n", manifest.sequence);
    write_atomic(&latest, name.as_bytes()).map_err(|cause| CheckpointError::Write {
        path: latest.clone(),
        cause,
    })?;
    remove_older(run_dir, manifest.sequence);
    Ok(())
}

/// Removes checkpoint directories (complete or not) older than `sequence`; best effort: a
/// leftover costs disk space, never correctness.
fn remove_older(run_dir: &Path, sequence: u64) {
    let Ok(entries) = std::fs::read_dir(run_dir.join(DIR)) else {
        return;
    };
    for e in entries.flatten() {
        let older = e
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u64>().ok())
            .is_some_and(|s| s < sequence);
        if older {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// The sequence number `latest` names in `run_dir`, if any checkpoint completed.
pub fn latest_sequence(run_dir: &Path) -> Result<Option<u64>, CheckpointError> {
    let path = run_dir.join(DIR).join(LATEST);
    match std::fs::read_to_string(&path) {
        Ok(text) => text.trim().parse::<u64>().map(Some).map_err(|_| {
            CheckpointError::corrupt(&path, format!("names no checkpoint: {:?}", text.trim()))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(cause) => Err(CheckpointError::Read { path, cause }),
    }
}

/// Reads and checks the manifest of the newest complete checkpoint of `run_dir`.
pub fn open_latest(run_dir: &Path) -> Result<(PathBuf, Manifest), CheckpointError> {
    let sequence = latest_sequence(run_dir)?.ok_or_else(|| CheckpointError::None {
        path: run_dir.to_path_buf(),
    })?;
    let dir = checkpoint_dir(run_dir, sequence);
    let path = manifest_path(&dir);
    let text = std::fs::read_to_string(&path).map_err(|cause| CheckpointError::Read {
        path: path.clone(),
        cause,
    })?;
    let manifest: Manifest =
        serde_json::from_str(&text).map_err(|e| CheckpointError::corrupt(&path, e.to_string()))?;
    manifest.check(sequence, &path)?;
    Ok((dir, manifest))
}

impl Manifest {
    /// Checks the manifest read from `path` (in the directory of checkpoint `sequence`) on
    /// its own, before anything uses it: its format and sequence, a training clock and epoch
    /// that are finite and not negative (the resumed clock starts there), a world of at
    /// least one rank, and rank files named `rank-R.safetensors`, each rank of that world
    /// once. What it must agree with in the config and the world it resumes on is checked
    /// by [`super::fit::fit`].
    pub fn check(&self, sequence: u64, path: &Path) -> Result<(), CheckpointError> {
        let field = |name: &str, reason: String| Err(CheckpointError::field(path, name, reason));
        if self.format != FORMAT {
            let reason = format!("{} (this gssp reads format {FORMAT})", self.format);
            return field("format", reason);
        }
        if self.sequence != sequence {
            return field(
                "sequence",
                format!("{} in directory {sequence:06}", self.sequence),
            );
        }
        for (name, value) in [("time_s", self.time_s), ("epoch", self.epoch)] {
            if !(value.is_finite() && value >= 0.0) {
                return field(name, format!("{value}, must be a finite number >= 0"));
            }
        }
        if self.world_size == 0 {
            return field("world_size", "0 ranks, must be at least 1".into());
        }
        self.check_files(path)
    }

    /// Every listed file is world rank R's `rank-R.safetensors`, R in the world, each once;
    /// at least one.
    fn check_files(&self, path: &Path) -> Result<(), CheckpointError> {
        if self.files.is_empty() {
            return Err(CheckpointError::field(path, "files", "lists no rank file"));
        }
        // A set, not a flag per rank: the world size is the manifest's word, not yet trusted.
        let mut seen = std::collections::BTreeSet::new();
        for (i, f) in self.files.iter().enumerate() {
            let bad =
                |reason: String| CheckpointError::field(path, format!("files[{i}].name"), reason);
            let rank = f
                .rank()
                .ok_or_else(|| bad(format!("{:?}, not rank-R.safetensors", f.name)))?;
            if rank >= self.world_size {
                let world = self.world_size;
                return Err(bad(format!("rank {rank} in a world of {world} ranks")));
            }
            if !seen.insert(rank) {
                return Err(bad(format!("rank {rank} listed twice")));
            }
        }
        Ok(())
    }
}

/// The path of world rank `rank`'s file in checkpoint `dir` and its entry in `manifest`,
/// or an error naming the manifest where it does not list the file.
fn listed_file<'m>(
    dir: &Path,
    manifest: &'m Manifest,
    rank: usize,
) -> Result<(PathBuf, &'m FileEntry), CheckpointError> {
    let name = rank_file_name(rank);
    let entry = manifest
        .files
        .iter()
        .find(|f| f.name == name)
        .ok_or_else(|| {
            CheckpointError::corrupt(&manifest_path(dir), format!("lists no file {name}"))
        })?;
    Ok((dir.join(name), entry))
}

/// Reads world rank `rank`'s file of the checkpoint in `dir`, checking its size and
/// CRC-32 against `manifest` first.
pub fn read_rank_file<M: DeserializeOwned>(
    dir: &Path,
    manifest: &Manifest,
    rank: usize,
) -> Result<RankFile<M>, CheckpointError> {
    let (path, entry) = listed_file(dir, manifest, rank)?;
    let bytes = std::fs::read(&path).map_err(|cause| CheckpointError::Read {
        path: path.clone(),
        cause,
    })?;
    if bytes.len() as u64 != entry.bytes {
        return Err(CheckpointError::corrupt(
            &path,
            format!(
                "{} bytes, the manifest says {} (truncated?)",
                bytes.len(),
                entry.bytes
            ),
        ));
    }
    let crc = crc32fast::hash(&bytes);
    if crc != entry.crc32 {
        return Err(CheckpointError::corrupt(
            &path,
            format!("CRC-32 {crc:08x}, the manifest says {:08x}", entry.crc32),
        ));
    }
    from_bytes(&bytes, &path)
}

/// The metadata of world rank `rank`'s file of the checkpoint in `dir`, read from the
/// header alone (a run resumed on another rank count needs every file's counts, not their
/// tensors). The size is checked against `manifest`; the CRC-32 is checked when the file
/// itself is read ([`read_rank_file`]).
pub fn read_rank_meta<M: DeserializeOwned>(
    dir: &Path,
    manifest: &Manifest,
    rank: usize,
) -> Result<M, CheckpointError> {
    use std::io::Read;
    let (path, entry) = listed_file(dir, manifest, rank)?;
    let read = |cause| CheckpointError::Read {
        path: path.clone(),
        cause,
    };
    let mut file = std::fs::File::open(&path).map_err(read)?;
    let bytes = file.metadata().map_err(read)?.len();
    if bytes != entry.bytes {
        return Err(CheckpointError::corrupt(
            &path,
            format!(
                "{bytes} bytes, the manifest says {} (truncated?)",
                entry.bytes
            ),
        ));
    }
    let mut len = [0u8; 8];
    file.read_exact(&mut len).map_err(read)?;
    let len = u64::from_le_bytes(len);
    if len.saturating_add(8) > bytes {
        return Err(CheckpointError::corrupt(
            &path,
            format!("a header of {len} bytes in a file of {bytes}"),
        ));
    }
    let mut header = vec![0u8; len as usize];
    file.read_exact(&mut header).map_err(read)?;
    meta_of_header(&header, &path)
}

/// The metadata in a safetensors JSON header (`path` names the file in errors).
fn meta_of_header<M: DeserializeOwned>(header: &[u8], path: &Path) -> Result<M, CheckpointError> {
    let value: serde_json::Value = serde_json::from_slice(header)
        .map_err(|e| CheckpointError::corrupt(path, format!("header: {e}")))?;
    let json = value
        .get("__metadata__")
        .and_then(|m| m.get(STATE_KEY))
        .and_then(serde_json::Value::as_str)
        .ok_or_else(|| CheckpointError::corrupt(path, format!("no {STATE_KEY} metadata")))?;
    serde_json::from_str(json)
        .map_err(|e| CheckpointError::corrupt(path, format!("{STATE_KEY}: {e}")))
}

/// Parses a rank file's bytes (`path` names it in errors).
pub fn from_bytes<M: DeserializeOwned>(
    bytes: &[u8],
    path: &Path,
) -> Result<RankFile<M>, CheckpointError> {
    let bad = |e: safetensors::SafeTensorError| CheckpointError::corrupt(path, e.to_string());
    let file = SafeTensors::deserialize(bytes).map_err(bad)?;
    let (_, header) = SafeTensors::read_metadata(bytes).map_err(bad)?;
    let json = header
        .metadata()
        .as_ref()
        .and_then(|m| m.get(STATE_KEY))
        .ok_or_else(|| CheckpointError::corrupt(path, format!("no {STATE_KEY} metadata")))?;
    let meta = serde_json::from_str(json)
        .map_err(|e| CheckpointError::corrupt(path, format!("{STATE_KEY}: {e}")))?;
    let mut tensors = BTreeMap::new();
    for (name, view) in file.tensors() {
        if view.dtype() != Dtype::F32 {
            return Err(CheckpointError::corrupt(
                path,
                format!("tensor {name} is {:?}, not F32", view.dtype()),
            ));
        }
        let values = view
            .data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        tensors.insert(name, values);
    }
    Ok(RankFile { tensors, meta })
}

impl<M> RankFile<M> {
    /// Tensor `name` of `len` values, or an error naming the file.
    pub fn take(
        &mut self,
        name: &str,
        len: usize,
        path: &Path,
    ) -> Result<Vec<f32>, CheckpointError> {
        let values = self
            .tensors
            .remove(name)
            .ok_or_else(|| CheckpointError::corrupt(path, format!("no tensor {name}")))?;
        if values.len() != len {
            return Err(CheckpointError::corrupt(
                path,
                format!(
                    "tensor {name} has {} values, this model needs {len}",
                    values.len()
                ),
            ));
        }
        Ok(values)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Meta {
        clock: u64,
        speeds: Vec<f64>,
    }

    fn manifest(sequence: u64, files: Vec<FileEntry>) -> Manifest {
        Manifest {
            format: FORMAT,
            sequence,
            time_s: 12.5,
            epoch: 0.25,
            world_size: 2,
            mode: "gssp".into(),
            config: "[run]\n".into(),
            layout: None,
            files,
        }
    }

    fn write(run: &Path, sequence: u64, value: f32) -> Manifest {
        let dir = checkpoint_dir(run, sequence);
        let meta = Meta {
            clock: sequence,
            speeds: vec![1.5, 2.0],
        };
        let weights = [value, -1.0, 3.25];
        let entry = write_rank_file(&dir, 0, &[("weights", &weights)], &meta).unwrap();
        let m = manifest(sequence, vec![entry]);
        commit(run, &m).unwrap();
        m
    }

    #[test]
    fn a_committed_checkpoint_reads_back_exactly_and_replaces_the_older_one() {
        let run = tempfile::tempdir().unwrap();
        assert_eq!(latest_sequence(run.path()).unwrap(), None);
        assert!(matches!(
            open_latest(run.path()),
            Err(CheckpointError::None { .. })
        ));
        write(run.path(), 1, 0.5);
        let m = write(run.path(), 2, 7.0);
        let (dir, read) = open_latest(run.path()).unwrap();
        assert_eq!(read, m);
        assert!(!checkpoint_dir(run.path(), 1).exists(), "older removed");
        let mut f: RankFile<Meta> = read_rank_file(&dir, &read, 0).unwrap();
        assert_eq!(f.meta.clock, 2);
        assert_eq!(f.meta.speeds, vec![1.5, 2.0]);
        let path = dir.join("rank-0.safetensors");
        assert_eq!(f.take("weights", 3, &path).unwrap(), vec![7.0, -1.0, 3.25]);
        let err = f.take("momentum", 3, &path).unwrap_err().to_string();
        assert!(
            err.contains("rank-0.safetensors") && err.contains("no tensor momentum"),
            "{err}"
        );
    }

    #[test]
    fn the_metadata_reads_from_the_header_alone() {
        let run = tempfile::tempdir().unwrap();
        let m = write(run.path(), 4, 2.0);
        let dir = checkpoint_dir(run.path(), 4);
        let meta: Meta = read_rank_meta(&dir, &m, 0).unwrap();
        assert_eq!(meta.clock, 4);
        let path = dir.join("rank-0.safetensors");
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 1]).unwrap();
        let err = read_rank_meta::<Meta>(&dir, &m, 0).unwrap_err().to_string();
        assert!(err.contains("truncated"), "{err}");
    }

    #[test]
    fn an_uncommitted_checkpoint_is_not_used() {
        let run = tempfile::tempdir().unwrap();
        write(run.path(), 1, 0.5);
        // Rank files of checkpoint 2 written, the job died before the manifest.
        let dir = checkpoint_dir(run.path(), 2);
        write_rank_file(&dir, 0, &[("weights", &[9.0])], &0u8).unwrap();
        let (_, m) = open_latest(run.path()).unwrap();
        assert_eq!(m.sequence, 1);
    }

    #[test]
    fn truncated_or_corrupted_files_are_errors_naming_the_file() {
        let run = tempfile::tempdir().unwrap();
        write(run.path(), 3, 1.0);
        let (dir, m) = open_latest(run.path()).unwrap();
        let path = dir.join("rank-0.safetensors");
        let bytes = std::fs::read(&path).unwrap();

        std::fs::write(&path, &bytes[..bytes.len() - 5]).unwrap();
        let err = read_rank_file::<Meta>(&dir, &m, 0).unwrap_err().to_string();
        assert!(
            err.contains(&path.display().to_string()) && err.contains("truncated"),
            "{err}"
        );

        let mut flipped = bytes.clone();
        let last = flipped.len() - 2;
        flipped[last] ^= 0x40;
        std::fs::write(&path, &flipped).unwrap();
        let err = read_rank_file::<Meta>(&dir, &m, 0).unwrap_err().to_string();
        assert!(
            err.contains(&path.display().to_string()) && err.contains("CRC-32"),
            "{err}"
        );

        std::fs::remove_file(&path).unwrap();
        let err = read_rank_file::<Meta>(&dir, &m, 0).unwrap_err().to_string();
        assert!(err.contains(&path.display().to_string()), "{err}");
        let err = read_rank_file::<Meta>(&dir, &m, 1).unwrap_err().to_string();
        assert!(
            err.contains("manifest.json") && err.contains("rank-1"),
            "{err}"
        );

        let manifest_path = dir.join("manifest.json");
        std::fs::write(&manifest_path, "{\"format\": 1, \"seq").unwrap();
        let err = open_latest(run.path()).unwrap_err().to_string();
        assert!(err.contains(&manifest_path.display().to_string()), "{err}");

        std::fs::write(run.path().join(DIR).join(LATEST), "banana").unwrap();
        let err = open_latest(run.path()).unwrap_err().to_string();
        assert!(err.contains("latest") && err.contains("banana"), "{err}");
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let path = Path::new("x.safetensors");
        for bytes in [
            &b""[..],
            b"\x08\0\0\0\0\0\0\0{}",
            b"\xff\xff\xff\xff\xff\xff\xff\xff",
        ] {
            assert!(from_bytes::<Meta>(bytes, path).is_err());
        }
        // Valid safetensors without our metadata.
        let plain = safetensors::serialize(
            vec![(
                "w",
                TensorView::new(Dtype::F32, vec![1], &[0u8; 4]).unwrap(),
            )],
            None,
        )
        .unwrap();
        let err = from_bytes::<Meta>(&plain, path).unwrap_err().to_string();
        assert!(err.contains("gssp.state"), "{err}");
    }
    #[test]
    fn a_manifest_is_checked_on_its_own_naming_the_field() {
        let path = Path::new("RUN/checkpoints/000003/manifest.json");
        let entry = |name: &str| FileEntry {
            name: name.into(),
            bytes: 8,
            crc32: 0,
        };
        let good = manifest(
            3,
            vec![entry("rank-0.safetensors"), entry("rank-1.safetensors")],
        );
        assert!(good.check(3, path).is_ok());
        let refused = |edit: fn(&mut Manifest), says: &str| {
            let mut m = good.clone();
            edit(&mut m);
            let err = m.check(3, path).unwrap_err().to_string();
            let expected = format!("RUN/checkpoints/000003/manifest.json: {says}");
            assert!(err.starts_with(&expected), "{err}");
        };
        refused(|m| m.format = 2, "format: 2");
        refused(|m| m.sequence = 4, "sequence: 4 in directory 000003");
        refused(|m| m.time_s = -1.0, "time_s: -1, must be");
        refused(|m| m.epoch = f64::NAN, "epoch: NaN, must be");
        refused(|m| m.world_size = 0, "world_size: 0 ranks");
        refused(|m| m.files.clear(), "files: lists no rank file");
        refused(
            |m| m.files[1].name = "rank-01.safetensors".into(),
            "files[1].name: \"rank-01.safetensors\", not rank-R.safetensors",
        );
        refused(
            |m| m.files[1].name = "rank-2.safetensors".into(),
            "files[1].name: rank 2 in a world of 2 ranks",
        );
        refused(
            |m| m.files[1].name = "rank-0.safetensors".into(),
            "files[1].name: rank 0 listed twice",
        );
    }

    #[test]
    fn only_the_rank_file_names_gssp_writes_name_a_rank() {
        let rank = |name: &str| {
            FileEntry {
                name: name.into(),
                bytes: 0,
                crc32: 0,
            }
            .rank()
        };
        assert_eq!(rank("rank-12.safetensors"), Some(12));
        for name in [
            "rank-+1.safetensors",
            "rank-01.safetensors",
            "rank-.safetensors",
            "r-1",
        ] {
            assert_eq!(rank(name), None, "{name}");
        }
    }
}
