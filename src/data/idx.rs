//! IDX files (MNIST, Fashion-MNIST): a big-endian header (magic, counts) then raw bytes,
//! optionally gzip-compressed. Compression is detected from the content (gzip magic `1f 8b`),
//! not from the file name, so renamed files still load.

use std::io::Read;
use std::path::{Path, PathBuf};

use flate2::read::MultiGzDecoder;

use super::{read_file, DataError, Dataset, MNIST_MEAN, MNIST_STD};

/// Magic of an unsigned-byte IDX file with 3 dimensions (N x rows x cols).
pub const IMAGES_MAGIC: u32 = 2051;
/// Magic of an unsigned-byte IDX file with 1 dimension (N).
pub const LABELS_MAGIC: u32 = 2049;
/// MNIST and Fashion-MNIST both have 10 classes.
const CLASSES: usize = 10;

/// DEFLATE inflates at most about 1032:1: a header that claims more than that many times
/// the compressed size describes a truncated file, whatever the rest holds.
const MAX_INFLATE_RATIO: u64 = 1032;

fn is_gzip(raw: &[u8]) -> bool {
    raw.len() >= 2 && raw[..2] == [0x1f, 0x8b]
}

/// Inflates at most `limit` bytes of the gzip stream `raw` (of file `path`), so that a
/// small file cannot fill memory (a "gzip bomb"): the caller says how much it can use.
fn inflate(raw: &[u8], path: &Path, limit: u64) -> Result<Vec<u8>, DataError> {
    // MNIST images inflate roughly 5x; a good guess saves reallocations.
    let guess = (raw.len() as u64).saturating_mul(5).min(limit) as usize;
    let mut out = Vec::with_capacity(guess);
    MultiGzDecoder::new(raw)
        .take(limit)
        .read_to_end(&mut out)
        .map_err(|cause| DataError::Gzip {
            path: path.to_path_buf(),
            cause,
        })?;
    Ok(out)
}

/// Reads a file and gunzips it when it starts with the gzip magic; more than `limit`
/// bytes (inflated) is an error naming `what` the limit is.
pub(crate) fn read_maybe_gzip(
    path: &Path,
    limit: u64,
    what: &'static str,
) -> Result<Vec<u8>, DataError> {
    let raw = read_file(path)?;
    let bytes = if is_gzip(&raw) {
        inflate(&raw, path, limit.saturating_add(1))?
    } else {
        raw
    };
    if bytes.len() as u64 > limit {
        return Err(DataError::TooLarge {
            path: path.to_path_buf(),
            limit,
            what,
        });
    }
    Ok(bytes)
}

/// The file length (header included) the header `head` claims, if it is whole and the
/// product does not overflow.
fn claimed_len(head: &[u8], dims: usize) -> Option<u64> {
    if head.len() < 4 * (1 + dims) {
        return None;
    }
    (1..=dims)
        .map(|i| u64::from(be_u32(head, i)))
        .try_fold(1u64, |acc, s| acc.checked_mul(s))?
        .checked_add(4 * (1 + dims) as u64)
}

fn be_u32(b: &[u8], i: usize) -> u32 {
    u32::from_be_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]])
}

/// Checks the header and exact length of an IDX file with `dims` dimensions; returns the
/// dimensions and the file bytes with the header removed.
fn parse_idx(path: &Path, magic: u32, dims: usize) -> Result<(Vec<usize>, Vec<u8>), DataError> {
    let header = 4 * (1 + dims);
    let raw = read_file(path)?;
    let mut bytes = if is_gzip(&raw) {
        // Inflate the header, then no more than the payload it claims (and one byte, to
        // see trailing bytes): what a file may use is what its header says.
        let head = inflate(&raw, path, header as u64)?;
        let claimed = claimed_len(&head, dims).unwrap_or(header as u64);
        if claimed > (raw.len() as u64).saturating_mul(MAX_INFLATE_RATIO) {
            return Err(DataError::Truncated {
                path: path.to_path_buf(),
                part: "payload (the header claims more than the compressed file can hold)",
                expected: claimed,
                got: raw.len() as u64,
            });
        }
        inflate(&raw, path, claimed.saturating_add(1))?
    } else {
        raw
    };
    if bytes.len() < 4 {
        return Err(DataError::Truncated {
            path: path.to_path_buf(),
            part: "header",
            expected: header as u64,
            got: bytes.len() as u64,
        });
    }
    let got = be_u32(&bytes, 0);
    if got != magic {
        return Err(DataError::WrongMagic {
            path: path.to_path_buf(),
            expected: magic,
            got,
        });
    }
    if bytes.len() < header {
        return Err(DataError::Truncated {
            path: path.to_path_buf(),
            part: "header",
            expected: header as u64,
            got: bytes.len() as u64,
        });
    }
    let shape: Vec<usize> = (1..=dims).map(|i| be_u32(&bytes, i) as usize).collect();
    if let Some(d) = shape.iter().position(|&s| s == 0) {
        return Err(DataError::BadHeader {
            path: path.to_path_buf(),
            problem: format!("dimension {d} is 0 (shape {shape:?})"),
        });
    }
    let payload = shape
        .iter()
        .try_fold(1u64, |acc, &s| acc.checked_mul(s as u64))
        .and_then(|p| p.checked_add(header as u64))
        .ok_or_else(|| DataError::BadHeader {
            path: path.to_path_buf(),
            problem: format!("shape {shape:?} is too large"),
        })?;
    let len = bytes.len() as u64;
    if len < payload {
        return Err(DataError::Truncated {
            path: path.to_path_buf(),
            part: "payload",
            expected: payload,
            got: len,
        });
    }
    if len > payload {
        return Err(DataError::TrailingBytes {
            path: path.to_path_buf(),
            expected: payload,
            got: len,
        });
    }
    bytes.drain(..header);
    Ok((shape, bytes))
}

/// Loads an IDX image file (magic 2051, N x rows x cols) and its label file (magic 2049, N)
/// into a one-channel dataset with the MNIST normalisation.
pub fn load_idx_pair(images: &Path, labels: &Path) -> Result<Dataset, DataError> {
    let (ishape, pixels) = parse_idx(images, IMAGES_MAGIC, 3)?;
    let (lshape, label_bytes) = parse_idx(labels, LABELS_MAGIC, 1)?;
    if ishape[0] != lshape[0] {
        return Err(DataError::CountMismatch {
            images_path: images.to_path_buf(),
            images: ishape[0] as u64,
            labels_path: labels.to_path_buf(),
            labels: lshape[0] as u64,
        });
    }
    if let Some(record) = label_bytes.iter().position(|&l| l as usize >= CLASSES) {
        return Err(DataError::LabelOutOfRange {
            path: labels.to_path_buf(),
            record,
            label: label_bytes[record],
            classes: CLASSES,
        });
    }
    Ok(Dataset {
        pixels,
        labels: label_bytes,
        channels: 1,
        height: ishape[1],
        width: ishape[2],
        classes: CLASSES,
        mean: vec![MNIST_MEAN],
        std: vec![MNIST_STD],
    })
}

/// The first existing file among `name` and `name.gz` in `dir`.
fn find_idx(dir: &Path, name: &str, what: &str) -> Result<PathBuf, DataError> {
    let candidates = [dir.join(name), dir.join(format!("{name}.gz"))];
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .ok_or_else(|| DataError::Missing {
            what: what.to_string(),
            looked_for: candidates.to_vec(),
        })
}

/// Loads the official MNIST-style file pair from `dir`: `train-{images-idx3,labels-idx1}-ubyte`
/// or `t10k-...`, each with or without `.gz`.
pub fn load_mnist_dir(dir: &Path, train: bool) -> Result<Dataset, DataError> {
    let (prefix, split) = if train {
        ("train", "training")
    } else {
        ("t10k", "test")
    };
    let images = find_idx(
        dir,
        &format!("{prefix}-images-idx3-ubyte"),
        &format!("IDX {split} images"),
    )?;
    let labels = find_idx(
        dir,
        &format!("{prefix}-labels-idx1-ubyte"),
        &format!("IDX {split} labels"),
    )?;
    load_idx_pair(&images, &labels)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use flate2::write::GzEncoder;
    use flate2::Compression;
    use std::io::Write;

    pub(crate) fn idx_images(n: usize, rows: usize, cols: usize) -> Vec<u8> {
        let mut b = Vec::new();
        for v in [IMAGES_MAGIC, n as u32, rows as u32, cols as u32] {
            b.extend_from_slice(&v.to_be_bytes());
        }
        b.extend((0..n * rows * cols).map(|i| (i * 7 % 256) as u8));
        b
    }

    pub(crate) fn idx_labels(labels: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        for v in [LABELS_MAGIC, labels.len() as u32] {
            b.extend_from_slice(&v.to_be_bytes());
        }
        b.extend_from_slice(labels);
        b
    }

    pub(crate) fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = GzEncoder::new(Vec::new(), Compression::fast());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn labels_for(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i % 10) as u8).collect()
    }

    /// Writes a 4x3 MNIST-style dir: gzip train files, raw test files.
    pub(crate) fn write_mnist_dir(dir: &Path, n_train: usize, n_test: usize) {
        let w = |name: &str, data: Vec<u8>| std::fs::write(dir.join(name), data).unwrap();
        w(
            "train-images-idx3-ubyte.gz",
            gzip(&idx_images(n_train, 4, 3)),
        );
        w(
            "train-labels-idx1-ubyte.gz",
            gzip(&idx_labels(&labels_for(n_train))),
        );
        w("t10k-images-idx3-ubyte", idx_images(n_test, 4, 3));
        w("t10k-labels-idx1-ubyte", idx_labels(&labels_for(n_test)));
    }

    struct Pair {
        _dir: tempfile::TempDir,
        images: PathBuf,
        labels: PathBuf,
    }

    fn pair(images: Vec<u8>, labels: Vec<u8>, img_name: &str, lbl_name: &str) -> Pair {
        let dir = tempfile::tempdir().unwrap();
        let (ip, lp) = (dir.path().join(img_name), dir.path().join(lbl_name));
        std::fs::write(&ip, images).unwrap();
        std::fs::write(&lp, labels).unwrap();
        Pair {
            _dir: dir,
            images: ip,
            labels: lp,
        }
    }

    fn load_err(p: &Pair) -> String {
        load_idx_pair(&p.images, &p.labels).unwrap_err().to_string()
    }

    #[test]
    fn loads_raw_pair() {
        let p = pair(idx_images(5, 2, 3), idx_labels(&[0, 1, 2, 9, 4]), "i", "l");
        let d = load_idx_pair(&p.images, &p.labels).unwrap();
        assert_eq!((d.len(), d.channels, d.height, d.width), (5, 1, 2, 3));
        assert_eq!(d.labels, [0, 1, 2, 9, 4]);
        assert_eq!(d.pixels, idx_images(5, 2, 3)[16..]);
        assert_eq!(
            (d.mean.clone(), d.std.clone()),
            (vec![MNIST_MEAN], vec![MNIST_STD])
        );
    }

    #[test]
    fn gzip_is_detected_by_content_not_name() {
        let imgs = idx_images(4, 3, 3);
        let lbls = idx_labels(&[3, 1, 4, 1]);
        // gzip without .gz, and raw bytes named .gz.
        let p = pair(gzip(&imgs), lbls.clone(), "images.bin", "labels.gz");
        let d = load_idx_pair(&p.images, &p.labels).unwrap();
        assert_eq!(d.pixels, imgs[16..]);
        assert_eq!(d.labels, [3, 1, 4, 1]);
    }

    #[test]
    fn a_gzip_bomb_is_inflated_no_further_than_its_header_claims() {
        // A valid 2-image header followed by 64 MiB of zeros: about 64 KiB compressed.
        let mut imgs = idx_images(2, 2, 2);
        imgs.resize(imgs.len() + (64 << 20), 0);
        let p = pair(gzip(&imgs), idx_labels(&[1, 2]), "i.gz", "l");
        let err = load_err(&p);
        // Inflated to the claimed 24 bytes and one more, not to 64 MiB.
        assert!(
            err.contains("trailing bytes") && err.contains("got 25"),
            "{err}"
        );
        // A header that claims more than the compressed bytes can hold.
        let mut huge = idx_images(1, 1, 1);
        huge[4..8].copy_from_slice(&u32::MAX.to_be_bytes());
        huge[8..12].copy_from_slice(&u32::MAX.to_be_bytes());
        let p = pair(gzip(&huge), idx_labels(&[1]), "i.gz", "l");
        assert!(
            load_err(&p).contains("claims more than"),
            "{}",
            load_err(&p)
        );
    }

    #[test]
    fn a_text_file_over_the_limit_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.gz");
        std::fs::write(&path, gzip(&[b'a'; 100])).unwrap();
        let err = read_maybe_gzip(&path, 64, "the test allows")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("big.gz") && err.contains("more than 64 bytes"),
            "{err}"
        );
        assert_eq!(read_maybe_gzip(&path, 100, "").unwrap().len(), 100);
    }

    #[test]
    fn swapped_files_report_wrong_magic() {
        let p = pair(
            idx_labels(&[1, 2]),
            idx_images(2, 2, 2),
            "labels-as-images",
            "l",
        );
        let e = load_err(&p);
        assert!(
            e.contains("wrong magic number: expected 2051 got 2049"),
            "{e}"
        );
        assert!(e.contains(&p.images.display().to_string()), "{e}");
        let p = pair(
            idx_images(2, 2, 2),
            idx_images(2, 2, 2),
            "i",
            "images-as-labels",
        );
        let e = load_err(&p);
        assert!(e.contains("expected 2049 got 2051"), "{e}");
        assert!(e.contains("images-as-labels"), "{e}");
    }

    #[test]
    fn truncated_payload_and_header() {
        let mut imgs = idx_images(3, 4, 4);
        imgs.truncate(imgs.len() - 5);
        let p = pair(imgs, idx_labels(&[1, 2, 3]), "short", "l");
        let e = load_err(&p);
        assert!(
            e.contains("truncated payload: expected 64 bytes got 59"),
            "{e}"
        );
        assert!(e.contains("short"), "{e}");

        let p = pair(
            idx_images(3, 4, 4)[..10].to_vec(),
            idx_labels(&[1]),
            "hdr",
            "l",
        );
        let e = load_err(&p);
        assert!(
            e.contains("truncated header: expected 16 bytes got 10"),
            "{e}"
        );

        let p = pair(vec![0, 0], idx_labels(&[1]), "tiny", "l");
        let e = load_err(&p);
        assert!(
            e.contains("truncated header: expected 16 bytes got 2"),
            "{e}"
        );

        let p = pair(
            idx_images(1, 1, 1),
            idx_labels(&[1])[..6].to_vec(),
            "i",
            "lhdr",
        );
        let e = load_err(&p);
        assert!(
            e.contains("lhdr: truncated header: expected 8 bytes got 6"),
            "{e}"
        );
    }

    #[test]
    fn trailing_bytes_are_an_error() {
        let mut lbls = idx_labels(&[1, 2]);
        lbls.push(0);
        let p = pair(idx_images(2, 2, 2), lbls, "i", "long-labels");
        let e = load_err(&p);
        assert!(e.contains("long-labels: trailing bytes"), "{e}");
        assert!(e.contains("expected 10 bytes got 11"), "{e}");
    }

    #[test]
    fn count_mismatch() {
        let p = pair(idx_images(3, 2, 2), idx_labels(&[1, 2]), "imgs", "lbls");
        let e = load_err(&p);
        assert!(e.contains("count mismatch"), "{e}");
        assert!(e.contains("imgs holds 3 images"), "{e}");
        assert!(e.contains("lbls holds 2 labels"), "{e}");
    }

    #[test]
    fn label_out_of_range_names_record() {
        let p = pair(idx_images(3, 2, 2), idx_labels(&[1, 10, 2]), "i", "lbls");
        let e = load_err(&p);
        assert!(
            e.contains("lbls: label out of range at record 1: got 10"),
            "{e}"
        );
    }

    #[test]
    fn zero_dimension_is_rejected() {
        let p = pair(idx_images(0, 2, 2), idx_labels(&[]), "empty", "l");
        let e = load_err(&p);
        assert!(
            e.contains("empty: header is invalid: dimension 0 is 0"),
            "{e}"
        );
    }

    #[test]
    fn corrupt_gzip_is_reported() {
        let mut gz = gzip(&idx_images(20, 5, 5));
        gz.truncate(gz.len() / 2);
        let p = pair(gz, idx_labels(&[1]), "cut.gz", "l");
        let e = load_err(&p);
        assert!(
            e.contains("cut.gz: gzip stream is corrupt or truncated"),
            "{e}"
        );
    }

    #[test]
    fn missing_file_names_path() {
        let dir = tempfile::tempdir().unwrap();
        let ip = dir.path().join("absent-images");
        let e = load_idx_pair(&ip, &ip).unwrap_err().to_string();
        assert!(e.contains("absent-images: cannot read"), "{e}");
    }

    #[test]
    fn mnist_dir_finds_raw_and_gz() {
        let dir = tempfile::tempdir().unwrap();
        write_mnist_dir(dir.path(), 7, 3);
        let train = load_mnist_dir(dir.path(), true).unwrap();
        let test = load_mnist_dir(dir.path(), false).unwrap();
        assert_eq!((train.len(), test.len()), (7, 3));
        assert_eq!((train.height, train.width), (4, 3));
        assert_eq!(train.labels, [0, 1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn mnist_dir_missing_lists_candidates() {
        let dir = tempfile::tempdir().unwrap();
        write_mnist_dir(dir.path(), 2, 2);
        std::fs::remove_file(dir.path().join("t10k-labels-idx1-ubyte")).unwrap();
        let e = load_mnist_dir(dir.path(), false).unwrap_err().to_string();
        assert!(e.contains("IDX test labels not found"), "{e}");
        let want_raw = dir.path().join("t10k-labels-idx1-ubyte");
        let want_gz = dir.path().join("t10k-labels-idx1-ubyte.gz");
        assert!(e.contains(&want_raw.display().to_string()), "{e}");
        assert!(e.contains(&want_gz.display().to_string()), "{e}");
        // The training pair is still complete.
        assert!(load_mnist_dir(dir.path(), true).is_ok());
    }
}
