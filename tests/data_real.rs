//! Loads the real datasets in their official formats. These tests fail (never skip) when the
//! files are absent: they are the proof that the loaders read what users download.

use std::path::{Path, PathBuf};

use gssp::config::{DataConfig, DatasetKind, SyntheticConfig, FASHION_MNIST_DEFAULT_DIR};
use gssp::data::{self, Dataset};

fn shared(sub: &str) -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/data")).join(sub)
}

fn check_mnist_like(train: &Dataset, test: &Dataset) {
    assert_eq!((train.len(), test.len()), (60000, 10000));
    for d in [train, test] {
        assert_eq!((d.channels, d.height, d.width, d.classes), (1, 28, 28, 10));
        assert_eq!(d.pixels.len(), d.len() * 784);
        // Every class present, none dominating.
        for (c, &k) in d.class_counts().iter().enumerate() {
            assert!(
                k > d.len() / 20 && k < d.len() / 5,
                "class {c} has {k} of {}",
                d.len()
            );
        }
    }
}

/// The stored normalisation matches the data it is applied to.
fn check_stats(d: &Dataset, tol: f64) {
    let (mean, std) = d.pixel_stats();
    assert!((mean[0] - d.mean[0] as f64).abs() < tol, "mean {mean:?}");
    assert!((std[0] - d.std[0] as f64).abs() < tol, "std {std:?}");
}

#[test]
fn mnist_real() {
    let dir = shared("mnist");
    let train = data::load_mnist_dir(&dir, true).unwrap();
    let test = data::load_mnist_dir(&dir, false).unwrap();
    check_mnist_like(&train, &test);
    // First labels of the official files.
    assert_eq!(train.labels[..5], [5, 0, 4, 1, 9]);
    assert_eq!(test.labels[..3], [7, 2, 1]);
    assert_eq!(train.class_counts()[1], 6742);
    check_stats(&train, 1e-3);
    // Border pixels of a digit image are background.
    assert_eq!(train.pixels[0], 0);
    assert!(train.pixels[..784].contains(&255));
}

#[test]
fn mnist_via_config_with_limits() {
    let cfg = DataConfig {
        dataset: DatasetKind::Mnist,
        dir: shared("mnist").display().to_string(),
        train_limit: 1000,
        test_limit: 0,
        synthetic: SyntheticConfig::default(),
    };
    let (train, test) = data::load(&cfg, 0).unwrap();
    assert_eq!((train.len(), test.len()), (1000, 10000));
    let mut x = vec![0f32; 2 * 784];
    let mut y = [0u8; 2];
    train.fill_batch(&[0, 999], &mut x, &mut y);
    assert_eq!(y[0], 5);
    let bg = (0.0 - data::MNIST_MEAN) / data::MNIST_STD;
    assert!((x[0] - bg).abs() < 1e-6);
    let max = x.iter().copied().fold(f32::MIN, f32::max);
    assert!((max - (1.0 - data::MNIST_MEAN) / data::MNIST_STD).abs() < 1e-5);
}

#[test]
fn cifar10_real() {
    let dir = shared("cifar10");
    let train = data::load_cifar10_dir(&dir, true).unwrap();
    let test = data::load_cifar10_dir(&dir, false).unwrap();
    assert_eq!((train.len(), test.len()), (10000, 1000));
    for d in [&train, &test] {
        assert_eq!((d.channels, d.height, d.width, d.classes), (3, 32, 32, 10));
        assert_eq!(d.pixels.len(), d.len() * 3072);
    }
    // The official data_batch_1 is only roughly balanced (the five batches together hold 5,000
    // per class); these are its exact class counts.
    assert_eq!(
        train.class_counts(),
        [1005, 974, 1032, 1016, 999, 937, 1030, 1001, 1025, 981]
    );
    // First records of the official data_batch_1 (frog, truck) and test_batch (cat, ship).
    assert_eq!(train.labels[..2], [6, 9]);
    assert_eq!(test.labels[..2], [3, 8]);
    let (mean, std) = train.pixel_stats();
    for c in 0..3 {
        assert!(
            (mean[c] - train.mean[c] as f64).abs() < 0.01,
            "mean {mean:?}"
        );
        assert!((std[c] - train.std[c] as f64).abs() < 0.01, "std {std:?}");
    }
}

#[test]
fn fashion_mnist_real() {
    let dir = Path::new(FASHION_MNIST_DEFAULT_DIR);
    let train = data::load_mnist_dir(dir, true).unwrap();
    let test = data::load_mnist_dir(dir, false).unwrap();
    check_mnist_like(&train, &test);
    // Fashion-MNIST is exactly balanced.
    assert_eq!(train.class_counts(), vec![6000; 10]);
    assert_eq!(test.class_counts(), vec![1000; 10]);
    // `load` uses the system folder by default and the Fashion-MNIST normalisation.
    let cfg = DataConfig {
        dataset: DatasetKind::FashionMnist,
        dir: String::new(),
        train_limit: 0,
        test_limit: 500,
        synthetic: SyntheticConfig::default(),
    };
    let (train, test) = data::load(&cfg, 0).unwrap();
    assert_eq!((train.len(), test.len()), (60000, 500));
    assert_eq!(train.mean, [data::FASHION_MNIST_MEAN]);
    check_stats(&train, 1e-3);
}
