//! Datasets in their official formats (MNIST / Fashion-MNIST IDX, CIFAR-10 binary, Multi30k
//! text), a seeded synthetic set, per-worker sharding with per-epoch reshuffling, and for
//! text a tokenizer, vocabularies and length-bucketed padded batches.
//!
//! Images are kept as raw `u8` (N x C x H x W, row-major) because every MPI rank holds its own
//! copy; normalisation to `f32` happens only when a batch is filled.

pub mod augment;
pub mod bucket;
pub mod cifar;
pub mod idx;
pub mod lines;
pub mod multi30k;
pub mod sampler;
pub mod synthetic;
pub mod text;

use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::config::{ConfigError, DataConfig, DatasetKind};

pub use cifar::{load_cifar10_dir, load_cifar10_files};
pub use idx::{load_idx_pair, load_mnist_dir};
pub use sampler::{shard_range, ShardSampler};
pub use synthetic::synthetic;

/// Per-channel mean / std of MNIST pixels scaled to [0, 1] (the usual published values).
pub const MNIST_MEAN: f32 = 0.1307;
pub const MNIST_STD: f32 = 0.3081;
/// Per-channel mean / std of Fashion-MNIST pixels scaled to [0, 1].
pub const FASHION_MNIST_MEAN: f32 = 0.2860;
pub const FASHION_MNIST_STD: f32 = 0.3530;
/// Per-channel (R, G, B) mean / std of CIFAR-10 pixels scaled to [0, 1].
pub const CIFAR10_MEAN: [f32; 3] = [0.4914, 0.4822, 0.4465];
pub const CIFAR10_STD: [f32; 3] = [0.2470, 0.2435, 0.2616];
pub use crate::config::MAX_CLASSES;

/// Every way loading or sharding data can fail; each message names the file (or setting) and
/// the problem so a user can fix it without reading code.
#[derive(Debug, Error)]
pub enum DataError {
    // The I/O error is part of the message, not a `source`: printed once with `{:#}`.
    #[error("{}: cannot read: {cause}", path.display())]
    Io {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("{}: gzip stream is corrupt or truncated: {cause}", path.display())]
    Gzip {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("{}: inflates to more than {limit} bytes, more than {what}", path.display())]
    TooLarge {
        path: PathBuf,
        limit: u64,
        what: &'static str,
    },
    #[error("{what} not found; looked for: {}", list_paths(looked_for))]
    Missing {
        what: String,
        looked_for: Vec<PathBuf>,
    },
    #[error("{what} is ambiguous in {}: {}; keep only one", dir.display(), list_paths(candidates))]
    Ambiguous {
        what: String,
        dir: PathBuf,
        candidates: Vec<PathBuf>,
    },
    #[error("{}: wrong magic number: expected {expected} got {got}", path.display())]
    WrongMagic {
        path: PathBuf,
        expected: u32,
        got: u32,
    },
    #[error("{}: truncated {part}: expected {expected} bytes got {got}", path.display())]
    Truncated {
        path: PathBuf,
        part: &'static str,
        expected: u64,
        got: u64,
    },
    #[error("{}: trailing bytes after the payload: expected {expected} bytes got {got}", path.display())]
    TrailingBytes {
        path: PathBuf,
        expected: u64,
        got: u64,
    },
    #[error("{}: header is invalid: {problem}", path.display())]
    BadHeader { path: PathBuf, problem: String },
    #[error(
        "count mismatch: {} holds {images} images but {} holds {labels} labels",
        images_path.display(),
        labels_path.display()
    )]
    CountMismatch {
        images_path: PathBuf,
        images: u64,
        labels_path: PathBuf,
        labels: u64,
    },
    #[error("{}: label out of range at record {record}: got {label}, expected < {classes}", path.display())]
    LabelOutOfRange {
        path: PathBuf,
        record: usize,
        label: u8,
        classes: usize,
    },
    #[error(
        "{}: length {len} bytes is not a positive multiple of the {record_len}-byte record",
        path.display()
    )]
    BadRecordLength {
        path: PathBuf,
        len: u64,
        record_len: usize,
    },
    #[error("{}: line {line} is not valid UTF-8", path.display())]
    BadUtf8 { path: PathBuf, line: usize },
    #[error("{}: line {line}: {problem}", path.display())]
    BadLine {
        path: PathBuf,
        line: usize,
        problem: String,
    },
    #[error(
        "line count mismatch: {} holds {long_lines} lines but {} holds {short_lines}; line {} has no counterpart",
        long_path.display(),
        short_path.display(),
        short_lines + 1
    )]
    LineCountMismatch {
        long_path: PathBuf,
        long_lines: usize,
        short_path: PathBuf,
        short_lines: usize,
    },
    #[error("{key}: {problem}")]
    InvalidSetting { key: String, problem: String },
    /// A `[data]` setting that config validation rejects ([`DataConfig::validate`]), for a
    /// config that was not validated before loading.
    #[error(transparent)]
    Config(#[from] ConfigError),
}

fn list_paths(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A labelled image classification set held as raw bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct Dataset {
    /// N x C x H x W bytes, row-major.
    pub pixels: Vec<u8>,
    /// N class indices, each < `classes`.
    pub labels: Vec<u8>,
    pub channels: usize,
    pub height: usize,
    pub width: usize,
    pub classes: usize,
    /// Per-channel mean of pixels scaled to [0, 1], subtracted when a batch is filled.
    pub mean: Vec<f32>,
    /// Per-channel std of pixels scaled to [0, 1], divided out when a batch is filled.
    pub std: Vec<f32>,
}

impl Dataset {
    /// Number of samples.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Values per sample (C * H * W).
    pub fn sample_len(&self) -> usize {
        self.channels * self.height * self.width
    }

    /// Keeps only the first `n` samples (no-op when `n >= len()`) and releases the memory of
    /// the rest, since every rank keeps its own copy.
    pub fn truncate(&mut self, n: usize) {
        if n >= self.len() {
            return;
        }
        let sl = self.sample_len();
        self.labels.truncate(n);
        self.labels.shrink_to_fit();
        self.pixels.truncate(n * sl);
        self.pixels.shrink_to_fit();
    }

    /// Samples per class, indexed by label.
    pub fn class_counts(&self) -> Vec<usize> {
        let mut counts = vec![0usize; self.classes];
        for &l in &self.labels {
            if let Some(c) = counts.get_mut(l as usize) {
                *c += 1;
            }
        }
        counts
    }

    /// Per-channel (mean, std) of the pixels scaled to [0, 1], computed over the whole set; used
    /// to check the published normalisation constants.
    pub fn pixel_stats(&self) -> (Vec<f64>, Vec<f64>) {
        let plane = self.height * self.width;
        let mut sum = vec![0f64; self.channels];
        let mut sq = vec![0f64; self.channels];
        for sample in self.pixels.chunks_exact(self.sample_len().max(1)) {
            for (c, chan) in sample.chunks_exact(plane.max(1)).enumerate() {
                let (mut s, mut q) = (0u64, 0u64);
                for &p in chan {
                    s += p as u64;
                    q += (p as u64) * (p as u64);
                }
                sum[c] += s as f64;
                sq[c] += q as f64;
            }
        }
        let count = (self.len() * plane).max(1) as f64;
        let mean: Vec<f64> = sum.iter().map(|s| s / count / 255.0).collect();
        let std = sq
            .iter()
            .zip(&mean)
            .map(|(q, m)| (q / count / (255.0 * 255.0) - m * m).max(0.0).sqrt())
            .collect();
        (mean, std)
    }

    /// Channel `c`'s normalisation as `raw * scale + offset`: (raw / 255 - mean) / std.
    pub fn channel_affine(&self, c: usize) -> (f32, f32) {
        (1.0 / (255.0 * self.std[c]), -self.mean[c] / self.std[c])
    }

    /// Writes the normalised samples `indices` into `x` (`indices.len() * sample_len()` values,
    /// sample-major, C x H x W each) and their labels into `y`. Allocates nothing.
    ///
    /// # Panics
    /// If `x` or `y` has the wrong length or an index is `>= len()` (caller bugs, not data).
    pub fn fill_batch(&self, indices: &[usize], x: &mut [f32], y: &mut [u8]) {
        let sl = self.sample_len();
        let plane = self.height * self.width;
        assert_eq!(
            x.len(),
            indices.len() * sl,
            "fill_batch: x has the wrong length"
        );
        assert_eq!(y.len(), indices.len(), "fill_batch: y has the wrong length");
        for ((&i, xs), ys) in indices.iter().zip(x.chunks_exact_mut(sl)).zip(y.iter_mut()) {
            let src = &self.pixels[i * sl..(i + 1) * sl];
            for c in 0..self.channels {
                let (scale, offset) = self.channel_affine(c);
                let range = c * plane..(c + 1) * plane;
                for (d, &p) in xs[range.clone()].iter_mut().zip(&src[range]) {
                    *d = p as f32 * scale + offset;
                }
            }
            *ys = self.labels[i];
        }
    }
}

/// The error of asking the image loaders for a text dataset (a caller bug: text loads
/// through `workload::Corpus`).
fn not_images() -> DataError {
    DataError::InvalidSetting {
        key: "data.dataset".into(),
        problem: "multi30k holds sentence pairs, not images".into(),
    }
}

/// Loads (train, test) as the config says and applies `train_limit` / `test_limit` (0 = all).
/// `seed` only matters for the synthetic set (its class prototypes). Checks `cfg` with
/// [`DataConfig::validate`] first, so an unvalidated config fails with the same message as
/// config validation gives; real datasets are read from [`DataConfig::resolved_dir`].
pub fn load(cfg: &DataConfig, seed: u64) -> Result<(Dataset, Dataset), DataError> {
    cfg.validate()?;
    let (mut train, mut test) = match cfg.dataset {
        DatasetKind::Mnist | DatasetKind::FashionMnist => {
            let dir = cfg.resolved_dir();
            let mut train = load_mnist_dir(&dir, true)?;
            let mut test = load_mnist_dir(&dir, false)?;
            if cfg.dataset == DatasetKind::FashionMnist {
                for d in [&mut train, &mut test] {
                    d.mean = vec![FASHION_MNIST_MEAN];
                    d.std = vec![FASHION_MNIST_STD];
                }
            }
            (train, test)
        }
        DatasetKind::Cifar10 => {
            let dir = cfg.resolved_dir();
            (
                load_cifar10_dir(&dir, true)?,
                load_cifar10_dir(&dir, false)?,
            )
        }
        DatasetKind::Synthetic => {
            let s = &cfg.synthetic;
            let make = |n, stream| synthetic(s, n, seed, stream);
            (make(s.train, 0), make(s.test, 1))
        }
        DatasetKind::Multi30k => return Err(not_images()),
    };
    if cfg.train_limit > 0 {
        train.truncate(cfg.train_limit);
    }
    if cfg.test_limit > 0 {
        test.truncate(cfg.test_limit);
    }
    Ok((train, test))
}

/// The test set alone, as [`load`] gives it (`test_limit` applied): evaluating a saved
/// model needs no training images (CIFAR-10's are 150 MB).
pub fn load_test(cfg: &DataConfig, seed: u64) -> Result<Dataset, DataError> {
    cfg.validate()?;
    let mut test = match cfg.dataset {
        DatasetKind::Mnist | DatasetKind::FashionMnist => {
            let mut test = load_mnist_dir(&cfg.resolved_dir(), false)?;
            if cfg.dataset == DatasetKind::FashionMnist {
                test.mean = vec![FASHION_MNIST_MEAN];
                test.std = vec![FASHION_MNIST_STD];
            }
            test
        }
        DatasetKind::Cifar10 => load_cifar10_dir(&cfg.resolved_dir(), false)?,
        DatasetKind::Synthetic => synthetic(&cfg.synthetic, cfg.synthetic.test, seed, 1),
        DatasetKind::Multi30k => return Err(not_images()),
    };
    if cfg.test_limit > 0 {
        test.truncate(cfg.test_limit);
    }
    Ok(test)
}

/// Reads a whole file, naming it in the error.
pub(crate) fn read_file(path: &Path) -> Result<Vec<u8>, DataError> {
    std::fs::read(path).map_err(|cause| DataError::Io {
        path: path.to_path_buf(),
        cause,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Augment, SyntheticConfig};

    fn tiny() -> Dataset {
        Dataset {
            // 2 samples, 2 channels, 1x2 pixels.
            pixels: vec![0, 255, 51, 102, 10, 20, 30, 40],
            labels: vec![3, 7],
            channels: 2,
            height: 1,
            width: 2,
            classes: 10,
            mean: vec![0.5, 0.1],
            std: vec![0.25, 0.2],
        }
    }

    #[test]
    fn fill_batch_normalises_per_channel_and_follows_indices() {
        let d = tiny();
        let mut x = vec![0f32; 8];
        let mut y = vec![0u8; 2];
        d.fill_batch(&[1, 0], &mut x, &mut y);
        let f = |p: f32, c: usize| (p / 255.0 - d.mean[c]) / d.std[c];
        let want = [
            f(10.0, 0),
            f(20.0, 0),
            f(30.0, 1),
            f(40.0, 1),
            f(0.0, 0),
            f(255.0, 0),
            f(51.0, 1),
            f(102.0, 1),
        ];
        for (a, b) in x.iter().zip(want) {
            assert!((a - b).abs() < 1e-5, "{a} vs {b}");
        }
        assert_eq!(y, [7, 3]);
        assert_eq!(x[4], -2.0);
    }

    #[test]
    #[should_panic(expected = "x has the wrong length")]
    fn fill_batch_rejects_wrong_buffer() {
        let d = tiny();
        d.fill_batch(&[0], &mut [0f32; 3], &mut [0u8; 1]);
    }

    #[test]
    fn truncate_keeps_prefix() {
        let mut d = tiny();
        d.truncate(5);
        assert_eq!(d.len(), 2);
        d.truncate(1);
        assert_eq!(d.len(), 1);
        assert_eq!(d.pixels, [0, 255, 51, 102]);
        assert_eq!(d.labels, [3]);
        assert_eq!(d.sample_len(), 4);
        assert!(!d.is_empty());
        d.truncate(0);
        assert!(d.is_empty() && d.pixels.is_empty());
    }

    #[test]
    fn pixel_stats_and_class_counts() {
        let d = tiny();
        let (m, s) = d.pixel_stats();
        let m0 = (0.0 + 255.0 + 10.0 + 20.0) / 4.0 / 255.0;
        assert!((m[0] - m0).abs() < 1e-9);
        let m1: f64 = (51.0 + 102.0 + 30.0 + 40.0) / 4.0 / 255.0;
        assert!((m[1] - m1).abs() < 1e-9);
        let v1 = [51.0, 102.0, 30.0, 40.0]
            .iter()
            .map(|p: &f64| (p / 255.0 - m1).powi(2))
            .sum::<f64>()
            / 4.0;
        assert!((s[1] - v1.sqrt()).abs() < 1e-9);
        let counts = d.class_counts();
        assert_eq!(counts[3], 1);
        assert_eq!(counts[7], 1);
        assert_eq!(counts.iter().sum::<usize>(), 2);
    }

    fn synth_cfg() -> DataConfig {
        DataConfig {
            dataset: DatasetKind::Synthetic,
            dir: String::new(),
            train_limit: 0,
            test_limit: 0,
            synthetic: SyntheticConfig {
                train: 50,
                test: 20,
                channels: 1,
                height: 4,
                width: 4,
                classes: 5,
                noise: 0.1,
            },
            augment: Augment::None,
        }
    }

    #[test]
    fn load_synthetic_applies_limits_and_streams() {
        let mut cfg = synth_cfg();
        let (train, test) = load(&cfg, 7).unwrap();
        assert_eq!((train.len(), test.len()), (50, 20));
        assert_ne!(train.pixels[..16], test.pixels[..16]);
        cfg.train_limit = 30;
        cfg.test_limit = 100;
        let (train2, test2) = load(&cfg, 7).unwrap();
        assert_eq!((train2.len(), test2.len()), (30, 20));
        assert_eq!(train2.pixels[..], train.pixels[..30 * 16]);
        assert_eq!(test2, test);
    }

    #[test]
    fn load_test_gives_the_test_set_of_load() {
        let mut cfg = synth_cfg();
        cfg.test_limit = 12;
        let (_, test) = load(&cfg, 7).unwrap();
        assert_eq!(load_test(&cfg, 7).unwrap(), test);
        assert_eq!(test.len(), 12);
    }

    /// `load` refuses what config validation refuses, with the same message.
    #[test]
    fn load_checks_the_config_rules() {
        type Break = fn(&mut DataConfig);
        let cases: [(Break, &str); 5] = [
            (|c| c.synthetic.classes = 0, "data.synthetic.classes"),
            (|c| c.synthetic.classes = 257, "data.synthetic.classes"),
            (|c| c.synthetic.height = 0, "data.synthetic.height"),
            (|c| c.synthetic.noise = f32::NAN, "data.synthetic.noise"),
            (|c| c.dataset = DatasetKind::Mnist, "data.dir"),
        ];
        for (breaks, key) in cases {
            let mut cfg = synth_cfg();
            breaks(&mut cfg);
            let e = load(&cfg, 1).unwrap_err().to_string();
            assert!(e.starts_with(&format!("{key}: must be ")), "{e}");
            assert_eq!(e, cfg.validate().unwrap_err().to_string());
        }
    }

    #[test]
    fn load_real_formats_from_fixture_dirs() {
        let tmp = tempfile::tempdir().unwrap();
        idx::tests::write_mnist_dir(tmp.path(), 12, 5);
        let mut cfg = synth_cfg();
        cfg.dataset = DatasetKind::FashionMnist;
        cfg.dir = tmp.path().display().to_string();
        cfg.train_limit = 4;
        let (train, test) = load(&cfg, 0).unwrap();
        assert_eq!((train.len(), test.len()), (4, 5));
        assert_eq!(train.mean, [FASHION_MNIST_MEAN]);
        cfg.dataset = DatasetKind::Mnist;
        let (train, _) = load(&cfg, 0).unwrap();
        assert_eq!(train.mean, [MNIST_MEAN]);

        let tmp = tempfile::tempdir().unwrap();
        cifar::tests::write_batch(&tmp.path().join("data_batch_1.bin"), 6, 0);
        cifar::tests::write_batch(&tmp.path().join("test_batch.bin"), 3, 1);
        cfg.dataset = DatasetKind::Cifar10;
        cfg.dir = tmp.path().display().to_string();
        let (train, test) = load(&cfg, 0).unwrap();
        assert_eq!((train.len(), test.len(), train.channels), (4, 3, 3));

        cfg.dir = tmp.path().join("nope").display().to_string();
        let e = load(&cfg, 0).unwrap_err().to_string();
        assert!(e.contains("nope"), "{e}");
    }
}
