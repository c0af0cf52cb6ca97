//! Loads the real datasets in their official formats. These tests fail (never skip) when the
//! files are absent: they are the proof that the loaders read what users download.

use std::path::{Path, PathBuf};

use gssp::config::{Augment, DataConfig, DatasetKind, SyntheticConfig, FASHION_MNIST_DEFAULT_DIR};
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
        augment: Augment::None,
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
        augment: Augment::None,
    };
    let (train, test) = data::load(&cfg, 0).unwrap();
    assert_eq!((train.len(), test.len()), (60000, 500));
    assert_eq!(train.mean, [data::FASHION_MNIST_MEAN]);
    check_stats(&train, 1e-3);
}

/// `data.augment = "crop-flip"` on real CIFAR-10 images: the centre crop is the image, the
/// flip mirrors every row, a shift moves rows and fills with black, and every draw of a
/// batch is one of the 162 crops and flips of its image.
#[test]
fn cifar10_crop_flip_on_real_images() {
    use gssp::data::augment::{write_augmented, Augmenter, Draw, CROP_PAD};
    let train = data::load_cifar10_dir(&shared("cifar10"), true).unwrap();
    let (sl, w, plane) = (train.sample_len(), train.width, train.height * train.width);
    let mut plain = vec![0.0; sl];
    let mut out = vec![0.0; sl];
    for i in [0usize, 1, 9999] {
        train.fill_batch(&[i], &mut plain, &mut [0]);
        let centre = Draw {
            dy: CROP_PAD,
            dx: CROP_PAD,
            flip: false,
        };
        write_augmented(&train, i, centre, &mut out);
        assert_eq!(out, plain, "image {i}: centre crop");
        write_augmented(
            &train,
            i,
            Draw {
                flip: true,
                ..centre
            },
            &mut out,
        );
        for (o_row, p_row) in out.chunks_exact(w).zip(plain.chunks_exact(w)) {
            let mirrored: Vec<f32> = p_row.iter().rev().copied().collect();
            assert_eq!(o_row, &mirrored[..], "image {i}: flip");
        }
        // Crop one row lower: output row r is image row r + 1, the last row is padding.
        write_augmented(
            &train,
            i,
            Draw {
                dy: CROP_PAD + 1,
                ..centre
            },
            &mut out,
        );
        for c in 0..3 {
            let (o, p) = (
                &out[c * plane..(c + 1) * plane],
                &plain[c * plane..(c + 1) * plane],
            );
            assert_eq!(&o[..plane - w], &p[w..], "image {i} channel {c}: shift");
            let black = -train.mean[c] / train.std[c];
            assert!(
                o[plane - w..].iter().all(|&v| v == black),
                "image {i}: padding"
            );
        }
    }
    // A batch: each sample equals one of its image's crops and flips.
    let idx = [5usize, 6, 7, 8];
    let mut aug = Augmenter::new(42, 3);
    aug.start_batch(1);
    let mut x = vec![0.0; idx.len() * sl];
    let mut y = vec![0u8; idx.len()];
    aug.fill_batch(&train, &idx, &mut x, &mut y);
    for (k, &i) in idx.iter().enumerate() {
        assert_eq!(y[k], train.labels[i]);
        let found = (0..=2 * CROP_PAD).any(|dy| {
            (0..=2 * CROP_PAD).any(|dx| {
                [false, true].iter().any(|&flip| {
                    write_augmented(&train, i, Draw { dy, dx, flip }, &mut out);
                    out[..] == x[k * sl..(k + 1) * sl]
                })
            })
        });
        assert!(found, "sample {k} is no crop of image {i}");
    }
}
