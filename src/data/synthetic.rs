//! A seeded, learnable image classification set for tests and benchmarks that need no files:
//! each class has one random prototype image and each sample is its class prototype plus
//! gaussian pixel noise, quantised to `u8`.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::sampler::mix_seed;
use super::{Dataset, MAX_CLASSES};
use crate::config::SyntheticConfig;

const PROTOTYPE_TAG: u64 = 0x5052_4f54_4f54_5950; // "PROTOTYP"
const SAMPLE_TAG: u64 = 0x5341_4d50_4c45_5321; // "SAMPLES!"

/// Standard normal draws by Box-Muller (rand 0.8 has no normal distribution without
/// `rand_distr`); the spare value of each pair is kept.
struct Gaussian {
    spare: Option<f32>,
}

impl Gaussian {
    fn sample(&mut self, rng: &mut ChaCha8Rng) -> f32 {
        if let Some(z) = self.spare.take() {
            return z;
        }
        // u1 in (0, 1] so ln(u1) is finite.
        let u1: f32 = 1.0 - rng.gen::<f32>();
        let u2: f32 = rng.gen();
        let r = (-2.0 * u1.ln()).sqrt();
        let theta = std::f32::consts::TAU * u2;
        self.spare = Some(r * theta.sin());
        r * theta.cos()
    }
}

/// Builds `n` samples of the shape, classes and noise `s` gives (`s.train` and `s.test` are
/// not read: the caller passes the count as `n`).
///
/// Prototypes (pixel values uniform in [0, 1]) depend only on `seed`, so a train set
/// (`stream` 0) and a test set (`stream` 1) built with the same seed share them while their
/// noise differs. Labels cycle `0, 1, .., classes-1` so every prefix is balanced. Pixel noise
/// has std `noise` on the [0, 1] scale; values are clamped to [0, 1] before quantising. The
/// normalisation is mean 0.5, std sqrt(1/12 + noise^2) (the unclamped pixel distribution) for
/// every channel, a function of the arguments only so train and test agree.
///
/// # Panics
/// If `classes` is 0 or above [`MAX_CLASSES`] (`load` validates the config first).
pub fn synthetic(s: &SyntheticConfig, n: usize, seed: u64, stream: u64) -> Dataset {
    let (channels, height, width) = (s.channels, s.height, s.width);
    let (classes, noise) = (s.classes, s.noise);
    assert!(
        (1..=MAX_CLASSES).contains(&classes),
        "synthetic: classes must be in 1..={MAX_CLASSES}, got {classes}"
    );
    let sl = channels * height * width;
    let mut proto_rng = ChaCha8Rng::seed_from_u64(mix_seed(seed, PROTOTYPE_TAG));
    let prototypes: Vec<f32> = (0..classes * sl).map(|_| proto_rng.gen::<f32>()).collect();

    let mut rng = ChaCha8Rng::seed_from_u64(mix_seed(mix_seed(seed, SAMPLE_TAG), stream));
    let mut gauss = Gaussian { spare: None };
    let mut pixels = Vec::with_capacity(n * sl);
    let mut labels = Vec::with_capacity(n);
    for i in 0..n {
        let class = i % classes;
        labels.push(class as u8);
        for &p in &prototypes[class * sl..(class + 1) * sl] {
            let v = (p + noise * gauss.sample(&mut rng)).clamp(0.0, 1.0);
            pixels.push((v * 255.0).round() as u8);
        }
    }
    let std = (1.0f32 / 12.0 + noise * noise).sqrt();
    Dataset {
        pixels,
        labels,
        channels,
        height,
        width,
        classes,
        mean: vec![0.5; channels],
        std: vec![std; channels],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `[data.synthetic]` section with this shape, classes and noise.
    fn shape(
        channels: usize,
        height: usize,
        width: usize,
        classes: usize,
        noise: f32,
    ) -> SyntheticConfig {
        SyntheticConfig {
            channels,
            height,
            width,
            classes,
            noise,
            ..SyntheticConfig::default()
        }
    }

    /// Per-class mean image of a dataset, on the [0, 1] scale.
    fn class_means(d: &Dataset) -> Vec<Vec<f32>> {
        let sl = d.sample_len();
        let mut sums = vec![vec![0f32; sl]; d.classes];
        let counts = d.class_counts();
        for (i, &l) in d.labels.iter().enumerate() {
            for (s, &p) in sums[l as usize]
                .iter_mut()
                .zip(&d.pixels[i * sl..(i + 1) * sl])
            {
                *s += p as f32 / 255.0;
            }
        }
        for (s, &c) in sums.iter_mut().zip(&counts) {
            s.iter_mut().for_each(|v| *v /= c.max(1) as f32);
        }
        sums
    }

    fn sq_dist(a: &[f32], b: &[u8]) -> f32 {
        a.iter()
            .zip(b)
            .map(|(x, &p)| (x - p as f32 / 255.0).powi(2))
            .sum()
    }

    #[test]
    fn deterministic_and_shaped() {
        let a = synthetic(&shape(3, 4, 5, 6, 0.2), 30, 9, 0);
        let b = synthetic(&shape(3, 4, 5, 6, 0.2), 30, 9, 0);
        assert_eq!(a, b);
        assert_eq!((a.len(), a.sample_len(), a.pixels.len()), (30, 60, 1800));
        assert_eq!(a.class_counts(), vec![5; 6]);
        assert_eq!((a.mean.len(), a.std.len()), (3, 3));
    }

    #[test]
    fn streams_differ_and_seeds_differ() {
        let train = synthetic(&shape(1, 4, 4, 2, 0.2), 20, 9, 0);
        let test = synthetic(&shape(1, 4, 4, 2, 0.2), 20, 9, 1);
        assert_ne!(train.pixels, test.pixels);
        let other = synthetic(&shape(1, 4, 4, 2, 0.2), 20, 10, 0);
        assert_ne!(train.pixels, other.pixels);
        // Without noise the samples are the prototypes themselves: equal across streams.
        let a = synthetic(&shape(1, 4, 4, 2, 0.0), 4, 9, 0);
        let b = synthetic(&shape(1, 4, 4, 2, 0.0), 4, 9, 1);
        assert_eq!(a.pixels, b.pixels);
    }

    #[test]
    fn noise_has_the_requested_spread() {
        let noise = 0.1;
        let clean = synthetic(&shape(1, 16, 16, 10, 0.0), 10, 3, 0);
        let noisy = synthetic(&shape(1, 16, 16, 10, noise), 10, 3, 0);
        let (mut sum, mut count) = (0f64, 0usize);
        for (&c, &n) in clean.pixels.iter().zip(&noisy.pixels) {
            // Skip pixels near the clamp, where the spread is cut.
            if (64..192).contains(&c) {
                sum += ((n as f64 - c as f64) / 255.0).powi(2);
                count += 1;
            }
        }
        let sd = (sum / count as f64).sqrt();
        assert!((sd - noise as f64).abs() < 0.02, "measured noise std {sd}");
    }

    #[test]
    fn test_set_is_learnable_from_train_set() {
        // Nearest class mean learned on train classifies the test stream well.
        let train = synthetic(&shape(1, 8, 8, 10, 0.4), 400, 5, 0);
        let test = synthetic(&shape(1, 8, 8, 10, 0.4), 200, 5, 1);
        let means = class_means(&train);
        let sl = test.sample_len();
        let correct = (0..test.len())
            .filter(|&i| {
                let x = &test.pixels[i * sl..(i + 1) * sl];
                let best = (0..test.classes)
                    .min_by(|&a, &b| sq_dist(&means[a], x).total_cmp(&sq_dist(&means[b], x)))
                    .unwrap();
                best == test.labels[i] as usize
            })
            .count();
        assert!(correct >= 190, "nearest-mean accuracy {correct}/200");
    }
}
