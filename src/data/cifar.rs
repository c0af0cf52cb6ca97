//! CIFAR-10 binary batches: records of 1 label byte + 1024 R + 1024 G + 1024 B bytes (32x32),
//! which is already the C x H x W layout `Dataset` uses.

use std::path::{Path, PathBuf};

use super::{read_file, DataError, Dataset, CIFAR10_MEAN, CIFAR10_STD};

const SIDE: usize = 32;
const CHANNELS: usize = 3;
const IMAGE_LEN: usize = CHANNELS * SIDE * SIDE;
/// Bytes per record: label + image.
pub const RECORD_LEN: usize = 1 + IMAGE_LEN;
const CLASSES: usize = 10;

/// Loads and concatenates CIFAR-10 binary batch files, in the given order.
pub fn load_cifar10_files(files: &[PathBuf]) -> Result<Dataset, DataError> {
    if files.is_empty() {
        return Err(DataError::Missing {
            what: "CIFAR-10 batch files (the list given is empty)".into(),
            looked_for: Vec::new(),
        });
    }
    let mut pixels = Vec::new();
    let mut labels = Vec::new();
    for path in files {
        let bytes = read_file(path)?;
        if bytes.is_empty() || bytes.len() % RECORD_LEN != 0 {
            return Err(DataError::BadRecordLength {
                path: path.clone(),
                len: bytes.len() as u64,
                record_len: RECORD_LEN,
            });
        }
        let records = bytes.len() / RECORD_LEN;
        pixels.reserve(records * IMAGE_LEN);
        labels.reserve(records);
        for (record, rec) in bytes.chunks_exact(RECORD_LEN).enumerate() {
            if rec[0] as usize >= CLASSES {
                return Err(DataError::LabelOutOfRange {
                    path: path.clone(),
                    record,
                    label: rec[0],
                    classes: CLASSES,
                });
            }
            labels.push(rec[0]);
            pixels.extend_from_slice(&rec[1..]);
        }
    }
    Ok(Dataset {
        pixels,
        labels,
        channels: CHANNELS,
        height: SIDE,
        width: SIDE,
        classes: CLASSES,
        mean: CIFAR10_MEAN.to_vec(),
        std: CIFAR10_STD.to_vec(),
    })
}

/// Sort key that puts `data_batch_2` before `data_batch_10`.
fn batch_key(name: &str) -> (u64, String) {
    let digits: String = name.chars().filter(|c| c.is_ascii_digit()).collect();
    (digits.parse().unwrap_or(u64::MAX), name.to_string())
}

/// File names in `dir` that start with `prefix` and end with `.bin`, in batch-number order.
fn matching(dir: &Path, prefix: &str) -> Result<Vec<PathBuf>, DataError> {
    let io = |cause| DataError::Io {
        path: dir.to_path_buf(),
        cause,
    };
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(prefix) && name.ends_with(".bin") && entry.path().is_file() {
            names.push(name);
        }
    }
    names.sort_by_key(|n| batch_key(n));
    Ok(names.into_iter().map(|n| dir.join(n)).collect())
}

/// Loads CIFAR-10 from the official binary folder. Train: every `data_batch_*.bin` (at least
/// one). Test: `test_batch.bin`, or else the single file matching `test_batch*.bin` (e.g. a
/// partial test set).
pub fn load_cifar10_dir(dir: &Path, train: bool) -> Result<Dataset, DataError> {
    if train {
        let files = matching(dir, "data_batch_")?;
        if files.is_empty() {
            return Err(DataError::Missing {
                what: "CIFAR-10 training batches".into(),
                looked_for: vec![dir.join("data_batch_*.bin")],
            });
        }
        return load_cifar10_files(&files);
    }
    let exact = dir.join("test_batch.bin");
    if exact.is_file() {
        return load_cifar10_files(&[exact]);
    }
    let files = matching(dir, "test_batch")?;
    match files.len() {
        0 => Err(DataError::Missing {
            what: "CIFAR-10 test batch".into(),
            looked_for: vec![exact, dir.join("test_batch*.bin")],
        }),
        1 => load_cifar10_files(&files),
        _ => Err(DataError::Ambiguous {
            what: "CIFAR-10 test batch".into(),
            dir: dir.to_path_buf(),
            candidates: files,
        }),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Record i has label (i + label_offset) % 10 and pixels derived from (i, label_offset).
    pub(crate) fn batch_bytes(n: usize, label_offset: usize) -> Vec<u8> {
        let mut b = Vec::with_capacity(n * RECORD_LEN);
        for i in 0..n {
            b.push(((i + label_offset) % 10) as u8);
            b.extend((0..IMAGE_LEN).map(|j| ((j + 3 * i + 11 * label_offset) % 251) as u8));
        }
        b
    }

    pub(crate) fn write_batch(path: &Path, n: usize, label_offset: usize) {
        std::fs::write(path, batch_bytes(n, label_offset)).unwrap();
    }

    #[test]
    fn loads_files_in_order_as_chw() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.bin"), dir.path().join("b.bin"));
        write_batch(&a, 3, 0);
        write_batch(&b, 2, 5);
        let d = load_cifar10_files(&[a, b]).unwrap();
        assert_eq!((d.len(), d.channels, d.height, d.width), (5, 3, 32, 32));
        assert_eq!(d.labels, [0, 1, 2, 5, 6]);
        let raw = batch_bytes(2, 5);
        assert_eq!(d.pixels[3 * IMAGE_LEN..4 * IMAGE_LEN], raw[1..RECORD_LEN]);
        assert_eq!(d.mean, CIFAR10_MEAN);
        assert_eq!(d.std, CIFAR10_STD);
    }

    #[test]
    fn train_dir_takes_all_batches_in_numeric_order() {
        let dir = tempfile::tempdir().unwrap();
        write_batch(&dir.path().join("data_batch_10.bin"), 1, 9);
        write_batch(&dir.path().join("data_batch_2.bin"), 1, 2);
        write_batch(&dir.path().join("data_batch_1.bin"), 2, 0);
        write_batch(&dir.path().join("test_batch.bin"), 1, 7);
        std::fs::write(dir.path().join("batches.meta.txt"), "x").unwrap();
        let d = load_cifar10_dir(dir.path(), true).unwrap();
        assert_eq!(d.labels, [0, 1, 2, 9]);
    }

    #[test]
    fn test_dir_prefers_exact_name_then_single_partial() {
        let dir = tempfile::tempdir().unwrap();
        write_batch(&dir.path().join("test_batch_first1000.bin"), 2, 4);
        assert_eq!(load_cifar10_dir(dir.path(), false).unwrap().labels, [4, 5]);
        write_batch(&dir.path().join("test_batch.bin"), 3, 1);
        assert_eq!(
            load_cifar10_dir(dir.path(), false).unwrap().labels,
            [1, 2, 3]
        );
    }

    #[test]
    fn test_dir_ambiguous_or_missing() {
        let dir = tempfile::tempdir().unwrap();
        let e = load_cifar10_dir(dir.path(), false).unwrap_err().to_string();
        assert!(e.contains("CIFAR-10 test batch not found"), "{e}");
        assert!(e.contains("test_batch.bin"), "{e}");
        let e = load_cifar10_dir(dir.path(), true).unwrap_err().to_string();
        assert!(e.contains("CIFAR-10 training batches not found"), "{e}");
        assert!(e.contains("data_batch_*.bin"), "{e}");

        write_batch(&dir.path().join("test_batch_a.bin"), 1, 0);
        write_batch(&dir.path().join("test_batch_b.bin"), 1, 0);
        let e = load_cifar10_dir(dir.path(), false).unwrap_err().to_string();
        assert!(e.contains("ambiguous"), "{e}");
        assert!(
            e.contains("test_batch_a.bin") && e.contains("test_batch_b.bin"),
            "{e}"
        );
    }

    #[test]
    fn missing_dir_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let gone = dir.path().join("no-such-dir");
        let e = load_cifar10_dir(&gone, true).unwrap_err().to_string();
        assert!(e.contains("no-such-dir: cannot read"), "{e}");
    }

    #[test]
    fn bad_length_names_file_and_length() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("data_batch_1.bin");
        let mut b = batch_bytes(2, 0);
        b.pop();
        std::fs::write(&p, b).unwrap();
        let e = load_cifar10_dir(dir.path(), true).unwrap_err().to_string();
        assert!(e.contains(&p.display().to_string()), "{e}");
        assert!(
            e.contains("length 6145 bytes is not a positive multiple of the 3073-byte record"),
            "{e}"
        );
        std::fs::write(&p, b"").unwrap();
        let e = load_cifar10_dir(dir.path(), true).unwrap_err().to_string();
        assert!(e.contains("length 0 bytes"), "{e}");
    }

    #[test]
    fn label_out_of_range_names_record() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("data_batch_1.bin");
        let mut b = batch_bytes(3, 0);
        b[2 * RECORD_LEN] = 10;
        std::fs::write(&p, b).unwrap();
        let e = load_cifar10_files(std::slice::from_ref(&p))
            .unwrap_err()
            .to_string();
        assert!(e.contains(&p.display().to_string()), "{e}");
        assert!(e.contains("label out of range at record 2: got 10"), "{e}");
    }

    #[test]
    fn no_files_is_an_error() {
        assert!(load_cifar10_files(&[]).is_err());
    }
}
