//! Training-time augmentation: the random crop of the zero-padded image and the horizontal
//! flip of the standard CIFAR-10 recipe (torchvision's `RandomCrop(32, padding=4)` then
//! `RandomHorizontalFlip()`), written straight into the normalised batch buffer.
//!
//! The draws of a worker's batch are a pure function of (seed, worker's shard, batch index),
//! so a run is reproducible, workers do not draw the same crops, and a run resumed from a
//! checkpoint draws what it would have drawn (the batch index is its whole state).
//! Evaluation never augments.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::sampler::mix_seed;
use super::Dataset;

/// Zero pixels added on each side before the crop (the crop keeps the original size).
pub const CROP_PAD: usize = 4;

const AUGMENT_TAG: u64 = 0x4155_474d_454e_5421; // "AUGMENT!"

/// One sample's draw: where the crop starts in the padded image, and whether it is mirrored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Draw {
    /// Row offset in the padded image, 0..=2 * CROP_PAD.
    pub dy: usize,
    /// Column offset in the padded image, 0..=2 * CROP_PAD.
    pub dx: usize,
    pub flip: bool,
}

/// A worker's augmentation stream, reseeded at every batch.
#[derive(Debug, Clone)]
pub struct Augmenter {
    seed: u64,
    shard: usize,
    rng: ChaCha8Rng,
}

impl Augmenter {
    /// The stream of worker shard `shard` under run seed `seed`, at batch 0.
    pub fn new(seed: u64, shard: usize) -> Augmenter {
        Augmenter {
            seed,
            shard,
            rng: ChaCha8Rng::seed_from_u64(Self::batch_seed(seed, shard, 0)),
        }
    }

    fn batch_seed(seed: u64, shard: usize, batch: u64) -> u64 {
        mix_seed(mix_seed(mix_seed(seed, AUGMENT_TAG), shard as u64), batch)
    }

    /// Restarts the stream for the worker's batch number `batch` (0-based, over all
    /// epochs). Seeding ChaCha8 costs well under a microsecond, once a batch.
    pub fn start_batch(&mut self, batch: u64) {
        self.rng = ChaCha8Rng::seed_from_u64(Self::batch_seed(self.seed, self.shard, batch));
    }

    /// The next sample's crop offset and flip.
    pub fn draw(&mut self) -> Draw {
        Draw {
            dy: self.rng.gen_range(0..=2 * CROP_PAD),
            dx: self.rng.gen_range(0..=2 * CROP_PAD),
            flip: self.rng.gen_bool(0.5),
        }
    }

    /// Like [`Dataset::fill_batch`], with every sample cropped and flipped by its own draw.
    /// Allocates nothing.
    ///
    /// # Panics
    /// If `x` or `y` has the wrong length or an index is `>= len()` (caller bugs, not data).
    pub fn fill_batch(&mut self, data: &Dataset, indices: &[usize], x: &mut [f32], y: &mut [u8]) {
        let sl = data.sample_len();
        assert_eq!(
            x.len(),
            indices.len() * sl,
            "augment: x has the wrong length"
        );
        assert_eq!(y.len(), indices.len(), "augment: y has the wrong length");
        for ((&i, xs), ys) in indices.iter().zip(x.chunks_exact_mut(sl)).zip(y.iter_mut()) {
            let draw = self.draw();
            write_augmented(data, i, draw, xs);
            *ys = data.labels[i];
        }
    }
}

/// Writes sample `i` of `data`, cropped and flipped as `draw` says and normalised, into `out`
/// (C x H x W). Pixels that fall in the padding are black (raw 0) before normalisation.
pub fn write_augmented(data: &Dataset, i: usize, draw: Draw, out: &mut [f32]) {
    let (h, w) = (data.height, data.width);
    let plane = h * w;
    let src = &data.pixels[i * data.sample_len()..(i + 1) * data.sample_len()];
    for c in 0..data.channels {
        let (scale, offset) = data.channel_affine(c);
        let src = &src[c * plane..(c + 1) * plane];
        let dst = &mut out[c * plane..(c + 1) * plane];
        for (r, row) in dst.chunks_exact_mut(w).enumerate() {
            // Output row r reads padded row r + dy, i.e. source row r + dy - PAD.
            let sr = (r + draw.dy).checked_sub(CROP_PAD).filter(|&sr| sr < h);
            for (col, d) in row.iter_mut().enumerate() {
                let crop_col = if draw.flip { w - 1 - col } else { col };
                let sc = (crop_col + draw.dx)
                    .checked_sub(CROP_PAD)
                    .filter(|&sc| sc < w);
                let raw = match (sr, sc) {
                    (Some(sr), Some(sc)) => src[sr * w + sc],
                    _ => 0,
                };
                *d = raw as f32 * scale + offset;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2 images of 2 x 6 x 5 with distinct raw values, normalised with mean 0 and std 1.
    fn tiny() -> Dataset {
        let (c, h, w) = (2usize, 6usize, 5usize);
        let n = 2;
        Dataset {
            pixels: (0..n * c * h * w).map(|v| (v % 250 + 1) as u8).collect(),
            labels: vec![3, 7],
            channels: c,
            height: h,
            width: w,
            classes: 10,
            mean: vec![0.0; c],
            std: vec![1.0; c],
        }
    }

    /// The reference: pad the raw image by CROP_PAD zeros, crop, flip, normalise.
    fn reference(data: &Dataset, i: usize, d: Draw) -> Vec<f32> {
        let (c, h, w) = (data.channels, data.height, data.width);
        let (ph, pw) = (h + 2 * CROP_PAD, w + 2 * CROP_PAD);
        let src = &data.pixels[i * c * h * w..(i + 1) * c * h * w];
        let mut out = Vec::new();
        for ch in 0..c {
            let (scale, offset) = data.channel_affine(ch);
            let mut padded = vec![0u8; ph * pw];
            for r in 0..h {
                for col in 0..w {
                    padded[(r + CROP_PAD) * pw + col + CROP_PAD] = src[ch * h * w + r * w + col];
                }
            }
            for r in 0..h {
                let crop: Vec<u8> = (0..w)
                    .map(|col| padded[(r + d.dy) * pw + col + d.dx])
                    .collect();
                for col in 0..w {
                    let v = if d.flip { crop[w - 1 - col] } else { crop[col] };
                    out.push(v as f32 * scale + offset);
                }
            }
        }
        out
    }

    #[test]
    fn every_crop_and_flip_matches_pad_crop_flip() {
        let data = tiny();
        let mut out = vec![0.0; data.sample_len()];
        for dy in 0..=2 * CROP_PAD {
            for dx in 0..=2 * CROP_PAD {
                for flip in [false, true] {
                    let d = Draw { dy, dx, flip };
                    write_augmented(&data, 1, d, &mut out);
                    assert_eq!(out, reference(&data, 1, d), "{d:?}");
                }
            }
        }
        // The centre crop without a flip is the image itself.
        let centre = Draw {
            dy: CROP_PAD,
            dx: CROP_PAD,
            flip: false,
        };
        write_augmented(&data, 0, centre, &mut out);
        let mut plain = vec![0.0; data.sample_len()];
        data.fill_batch(&[0], &mut plain, &mut [0]);
        assert_eq!(out, plain);
    }

    #[test]
    fn padding_is_black_before_normalisation() {
        let mut data = tiny();
        data.mean = vec![0.5, 0.25];
        data.std = vec![0.2, 0.4];
        let mut out = vec![0.0; data.sample_len()];
        // Shifted fully down-right: the first CROP_PAD rows and columns are padding.
        write_augmented(
            &data,
            0,
            Draw {
                dy: 0,
                dx: 0,
                flip: false,
            },
            &mut out,
        );
        let plane = data.height * data.width;
        for c in 0..data.channels {
            let black = -data.mean[c] / data.std[c];
            assert!((out[c * plane] - black).abs() < 1e-6, "channel {c}");
        }
    }

    #[test]
    fn draws_are_a_function_of_seed_shard_and_batch() {
        let draws = |seed, shard, batch| {
            let mut a = Augmenter::new(seed, shard);
            a.start_batch(batch);
            (0..64).map(|_| a.draw()).collect::<Vec<_>>()
        };
        assert_eq!(draws(1, 0, 2), draws(1, 0, 2));
        assert_ne!(draws(1, 0, 2), draws(1, 0, 3));
        assert_ne!(draws(1, 0, 2), draws(1, 1, 2));
        assert_ne!(draws(1, 0, 2), draws(2, 0, 2));
        // Going back to a batch replays it (what a resumed run relies on).
        let mut a = Augmenter::new(1, 0);
        a.start_batch(2);
        let first: Vec<Draw> = (0..8).map(|_| a.draw()).collect();
        a.start_batch(3);
        a.start_batch(2);
        let again: Vec<Draw> = (0..8).map(|_| a.draw()).collect();
        assert_eq!(first, again);
    }

    #[test]
    fn draws_cover_every_offset_and_both_flips() {
        let mut a = Augmenter::new(7, 0);
        let draws: Vec<Draw> = (0..4000).map(|_| a.draw()).collect();
        for off in 0..=2 * CROP_PAD {
            assert!(draws.iter().any(|d| d.dy == off), "dy {off} never drawn");
            assert!(draws.iter().any(|d| d.dx == off), "dx {off} never drawn");
        }
        let flips = draws.iter().filter(|d| d.flip).count();
        assert!((1800..2200).contains(&flips), "{flips} flips of 4000");
    }

    #[test]
    fn batch_carries_labels_and_draws_per_sample() {
        let data = tiny();
        let sl = data.sample_len();
        let mut a = Augmenter::new(3, 0);
        let mut x = vec![0.0; 4 * sl];
        let mut y = vec![0u8; 4];
        a.fill_batch(&data, &[1, 0, 1, 0], &mut x, &mut y);
        assert_eq!(y, vec![7, 3, 7, 3]);
        let mut b = Augmenter::new(3, 0);
        for (k, &i) in [1usize, 0, 1, 0].iter().enumerate() {
            let d = b.draw();
            assert_eq!(
                &x[k * sl..(k + 1) * sl],
                &reference(&data, i, d)[..],
                "sample {k}"
            );
        }
    }
}
