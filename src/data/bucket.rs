//! Padded, length-bucketed batches of sentence pairs.
//!
//! A batch is time-major: row `t` holds token `t` of every sentence in the batch, so an LSTM
//! step reads one contiguous row of `batch` ids. Each side is padded with `<pad>` (id 0) to the
//! batch's longest sentence on that side; the per-column lengths are kept for masking.
//!
//! Sorting the whole set by length would give the least padding but near-identical batches
//! every epoch; a plain shuffle gives random batches with much padding (Multi30k sentences
//! run from 4 to 40+ tokens). [`BucketSampler`] does what torchtext's `BucketIterator` does:
//! shuffle with a seed, cut the order into windows of `window_batches * batch_size` pairs,
//! sort each window by (source length, target length), cut it into batches and shuffle the
//! batches. Every pair is served exactly once per epoch, and an epoch's batches are a pure
//! function of (seed, epoch).

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::multi30k::EncodedPairs;
use super::sampler::mix_seed;
use super::text::PAD_ID;
use super::DataError;

const BUCKET_TAG: u64 = 0x4255_434b_4554_5321; // "BUCKETS!"

/// One batch of pairs, padded, time-major.
#[derive(Debug, Clone, PartialEq)]
pub struct TextBatch {
    /// `[src_len, size]`: `src[t * size + b]` is token `t` of source sentence `b`.
    pub src: Vec<u32>,
    /// `[tgt_len, size]`, laid out like `src`.
    pub tgt: Vec<u32>,
    /// Rows of `src`: the longest source sentence of the batch.
    pub src_len: usize,
    /// Rows of `tgt`: the longest target sentence of the batch.
    pub tgt_len: usize,
    /// Tokens (with `<sos>`/`<eos>`) of each source sentence, by column.
    pub src_lengths: Vec<usize>,
    /// Tokens (with `<sos>`/`<eos>`) of each target sentence, by column.
    pub tgt_lengths: Vec<usize>,
    /// The pairs in the batch, by column.
    pub indices: Vec<usize>,
}

/// `seqs[i]` for `i` in `indices`, padded to the longest, time-major, into `out` and
/// their lengths into `lengths` (both reused: no allocation once they are large enough);
/// returns the rows.
fn pad_time_major(
    seqs: &[Vec<u32>],
    indices: &[usize],
    out: &mut Vec<u32>,
    lengths: &mut Vec<usize>,
) -> usize {
    lengths.clear();
    lengths.extend(indices.iter().map(|&i| seqs[i].len()));
    let rows = lengths.iter().copied().max().unwrap_or(0);
    let b = indices.len();
    out.clear();
    out.resize(rows * b, PAD_ID);
    for (col, &i) in indices.iter().enumerate() {
        for (t, &id) in seqs[i].iter().enumerate() {
            out[t * b + col] = id;
        }
    }
    rows
}

impl TextBatch {
    /// The pairs `indices` of `pairs`, padded.
    ///
    /// # Panics
    /// If an index is `>= pairs.len()` (a caller bug; [`BucketSampler`] checks its indices).
    pub fn new(pairs: &EncodedPairs, indices: &[usize]) -> TextBatch {
        let mut batch = TextBatch {
            src: Vec::new(),
            tgt: Vec::new(),
            src_len: 0,
            tgt_len: 0,
            src_lengths: Vec::new(),
            tgt_lengths: Vec::new(),
            indices: Vec::new(),
        };
        batch.refill(pairs, indices);
        batch
    }

    /// Makes this batch the pairs `indices` of `pairs`, reusing its buffers (a worker's
    /// training step refills one batch rather than allocating a new one).
    ///
    /// # Panics
    /// As [`TextBatch::new`].
    pub fn refill(&mut self, pairs: &EncodedPairs, indices: &[usize]) {
        self.src_len = pad_time_major(&pairs.src, indices, &mut self.src, &mut self.src_lengths);
        self.tgt_len = pad_time_major(&pairs.tgt, indices, &mut self.tgt, &mut self.tgt_lengths);
        self.indices.clear();
        self.indices.extend_from_slice(indices);
    }

    /// Sentences in the batch (columns).
    pub fn size(&self) -> usize {
        self.indices.len()
    }

    /// Cells of both matrices.
    pub fn cells(&self) -> usize {
        self.src.len() + self.tgt.len()
    }

    /// Cells of both matrices that are padding.
    pub fn pad_cells(&self) -> usize {
        let used: usize = self.src_lengths.iter().chain(&self.tgt_lengths).sum();
        self.cells() - used
    }
}

/// Fraction of the cells of `batches` (source and target together) that are padding.
pub fn padding_fraction(pairs: &EncodedPairs, batches: &[Vec<usize>]) -> f64 {
    let (mut pad, mut cells) = (0usize, 0usize);
    for b in batches {
        let batch = TextBatch::new(pairs, b);
        pad += batch.pad_cells();
        cells += batch.cells();
    }
    if cells == 0 {
        0.0
    } else {
        pad as f64 / cells as f64
    }
}

/// Serves the batches of an epoch over a set of pairs, bucketed by length (module doc).
#[derive(Debug, Clone)]
pub struct BucketSampler {
    /// The pairs this sampler serves (e.g. one worker's shard).
    indices: Vec<usize>,
    /// (source length, target length) of every pair, indexed by pair.
    lengths: Vec<(usize, usize)>,
    batch_size: usize,
    window_batches: usize,
    seed: u64,
}

impl BucketSampler {
    /// Serves the pairs `indices` of `pairs` in batches of `batch_size` (the last batch of an
    /// epoch may be smaller), bucketed in windows of `window_batches` batches; a window of 1
    /// batch is a plain shuffle.
    pub fn new(
        pairs: &EncodedPairs,
        indices: Vec<usize>,
        batch_size: usize,
        window_batches: usize,
        seed: u64,
    ) -> Result<BucketSampler, DataError> {
        let invalid = |key: &str, problem: String| DataError::InvalidSetting {
            key: key.into(),
            problem,
        };
        if batch_size == 0 {
            return Err(invalid("optim.batch_size", "must be >= 1, got 0".into()));
        }
        if window_batches == 0 {
            return Err(invalid("bucket window", "must be >= 1 batch, got 0".into()));
        }
        if let Some(&bad) = indices.iter().find(|&&i| i >= pairs.len()) {
            return Err(invalid(
                "bucket indices",
                format!("pair {bad} is out of range: the set holds {}", pairs.len()),
            ));
        }
        let lengths = pairs
            .src
            .iter()
            .zip(&pairs.tgt)
            .map(|(s, t)| (s.len(), t.len()))
            .collect();
        Ok(BucketSampler {
            indices,
            lengths,
            batch_size,
            window_batches,
            seed,
        })
    }

    /// Batches per epoch.
    pub fn batches_per_epoch(&self) -> usize {
        self.indices.len().div_ceil(self.batch_size)
    }

    /// The batches (pair indices, in column order) of epoch `epoch`.
    pub fn epoch(&self, epoch: u64) -> Vec<Vec<usize>> {
        let mut rng = ChaCha8Rng::seed_from_u64(mix_seed(mix_seed(self.seed, BUCKET_TAG), epoch));
        let mut order = self.indices.clone();
        order.shuffle(&mut rng);
        let mut batches = Vec::with_capacity(self.batches_per_epoch());
        for window in order.chunks_mut(self.window_batches * self.batch_size) {
            // Stable: equal lengths keep their shuffled order.
            window.sort_by_key(|&i| self.lengths[i]);
            batches.extend(window.chunks(self.batch_size).map(<[usize]>::to_vec));
        }
        batches.shuffle(&mut rng);
        batches
    }
}

/// One worker's endless stream of bucketed batches over its shard of the pairs: the
/// text counterpart of [`super::sampler::ShardSampler`]. Shard `k` of `n` is the `k`-th
/// contiguous range of one seeded permutation of all pairs (so every shard holds pairs of
/// every length), and epoch `e`'s batches are [`BucketSampler::epoch`]`(e)` over it, a
/// pure function of (seed, shard, e): a resumed worker continues where it stopped.
#[derive(Debug, Clone)]
pub struct BucketStream {
    sampler: BucketSampler,
    /// The batches of epoch `epoch`.
    batches: Vec<Vec<usize>>,
    epoch: u64,
    served: u64,
}

impl BucketStream {
    pub fn new(
        pairs: &EncodedPairs,
        shards: usize,
        shard: usize,
        batch_size: usize,
        seed: u64,
    ) -> Result<BucketStream, DataError> {
        if shards == 0 || shard >= shards {
            return Err(DataError::InvalidSetting {
                key: "sampler".into(),
                problem: format!("shard must be < shards, got shard {shard} of {shards}"),
            });
        }
        let range = super::sampler::shard_range(pairs.len(), shards, shard);
        if range.len() < batch_size.max(1) {
            return Err(DataError::InvalidSetting {
                key: "optim.batch_size".into(),
                problem: format!(
                    "must be <= the shard size {} ({} sentence pairs over {shards} shards), got {batch_size}",
                    range.len(),
                    pairs.len()
                ),
            });
        }
        let mut perm: Vec<usize> = (0..pairs.len()).collect();
        perm.shuffle(&mut ChaCha8Rng::seed_from_u64(mix_seed(seed, BUCKET_TAG)));
        let mine = perm[range].to_vec();
        let sampler = BucketSampler::new(
            pairs,
            mine,
            batch_size,
            BUCKET_WINDOW_BATCHES,
            mix_seed(seed, shard as u64),
        )?;
        Ok(BucketStream {
            batches: sampler.epoch(0),
            sampler,
            epoch: 0,
            served: 0,
        })
    }

    /// The pair indices of the next batch (the last of an epoch may be smaller).
    pub fn next_batch(&mut self) -> &[usize] {
        let bpe = self.sampler.batches_per_epoch() as u64;
        let (epoch, pos) = (self.served / bpe, (self.served % bpe) as usize);
        if epoch != self.epoch {
            self.epoch = epoch;
            self.batches = self.sampler.epoch(epoch);
        }
        self.served += 1;
        &self.batches[pos]
    }

    /// Batches served so far, over all epochs.
    pub fn served(&self) -> u64 {
        self.served
    }

    /// Continues as if `served` batches had been served (resume from a checkpoint).
    pub fn skip_to(&mut self, served: u64) {
        self.served = served;
    }

    /// Epochs done so far, fractional.
    pub fn epoch_progress(&self) -> f64 {
        self.served as f64 / self.sampler.batches_per_epoch() as f64
    }
}

/// Batches per bucketing window, as torchtext's `BucketIterator` pools 100 batches.
pub const BUCKET_WINDOW_BATCHES: usize = 100;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::text::{EOS_ID, SOS_ID};

    fn pairs(n: usize) -> EncodedPairs {
        // Source lengths cycle through 3..=20, targets are 0-2 longer (translations correlate
        // in length); ids = 10 + position.
        let seq = |len: usize| -> Vec<u32> { (0..len as u32).map(|t| 10 + t).collect() };
        EncodedPairs {
            src: (0..n).map(|i| seq(3 + (i * 7) % 18)).collect(),
            tgt: (0..n).map(|i| seq(3 + (i * 7) % 18 + i % 3)).collect(),
        }
    }

    #[test]
    fn batch_is_time_major_and_padded() {
        let p = EncodedPairs {
            src: vec![vec![SOS_ID, 7, EOS_ID], vec![SOS_ID, 8, 9, 5, EOS_ID]],
            tgt: vec![vec![SOS_ID, 4, 6, EOS_ID], vec![SOS_ID, EOS_ID]],
        };
        let b = TextBatch::new(&p, &[1, 0]);
        let mut reused = TextBatch::new(&p, &[0, 1, 0, 1, 0]);
        reused.refill(&p, &[1, 0]);
        assert_eq!(reused, b, "a refilled batch is the new one");
        assert_eq!((b.size(), b.src_len, b.tgt_len), (2, 5, 4));
        #[rustfmt::skip]
        assert_eq!(b.src, [
            SOS_ID, SOS_ID,
            8, 7,
            9, EOS_ID,
            5, PAD_ID,
            EOS_ID, PAD_ID,
        ]);
        #[rustfmt::skip]
        assert_eq!(b.tgt, [
            SOS_ID, SOS_ID,
            EOS_ID, 4,
            PAD_ID, 6,
            PAD_ID, EOS_ID,
        ]);
        assert_eq!(
            (b.src_lengths.clone(), b.tgt_lengths.clone()),
            (vec![5, 3], vec![2, 4])
        );
        assert_eq!((b.cells(), b.pad_cells()), (18, 4));
        assert_eq!(b.indices, [1, 0]);
    }

    #[test]
    fn every_pair_once_deterministic_and_less_padding() {
        let p = pairs(1000);
        let all: Vec<usize> = (0..1000).collect();
        let s = BucketSampler::new(&p, all.clone(), 32, 10, 5).unwrap();
        assert_eq!(s.batches_per_epoch(), 32);
        let e0 = s.epoch(0);
        assert_eq!(e0.len(), 32);
        let mut seen: Vec<usize> = e0.concat();
        seen.sort_unstable();
        assert_eq!(seen, all);
        assert_eq!(e0.iter().filter(|b| b.len() != 32).count(), 1);
        assert_eq!(e0, s.epoch(0));
        assert_ne!(e0, s.epoch(1));
        let other = BucketSampler::new(&p, all.clone(), 32, 10, 6).unwrap();
        assert_ne!(e0, other.epoch(0));

        let plain = BucketSampler::new(&p, all.clone(), 32, 1, 5).unwrap();
        let (bucketed, unbucketed) = (
            padding_fraction(&p, &e0),
            padding_fraction(&p, &plain.epoch(0)),
        );
        assert!(bucketed < 0.5 * unbucketed, "{bucketed} vs {unbucketed}");
    }

    #[test]
    fn serves_a_subset_and_rejects_bad_settings() {
        let p = pairs(50);
        let shard: Vec<usize> = (10..30).collect();
        let s = BucketSampler::new(&p, shard.clone(), 8, 2, 1).unwrap();
        let mut seen = s.epoch(3).concat();
        seen.sort_unstable();
        assert_eq!(seen, shard);
        let e = |r: Result<BucketSampler, DataError>| r.unwrap_err().to_string();
        assert!(e(BucketSampler::new(&p, shard.clone(), 0, 2, 1)).contains("batch_size"));
        assert!(e(BucketSampler::new(&p, shard.clone(), 8, 0, 1)).contains("window"));
        assert!(e(BucketSampler::new(&p, vec![3, 50], 8, 1, 1)).contains("pair 50"));
        assert_eq!(padding_fraction(&p, &[]), 0.0);
    }

    #[test]
    fn bucket_streams_of_all_shards_serve_every_pair_once_per_epoch_and_resume_exactly() {
        let p = pairs(203);
        let mut seen = Vec::new();
        for shard in 0..3 {
            let mut s = BucketStream::new(&p, 3, shard, 8, 5).unwrap();
            let bpe = s.sampler.batches_per_epoch();
            for _ in 0..bpe {
                seen.extend_from_slice(s.next_batch());
            }
            assert!((s.epoch_progress() - 1.0).abs() < 1e-12);
            // A stream resumed at batch 2 of epoch 1 serves what this one serves next.
            let (a, b) = (s.next_batch().to_vec(), s.next_batch().to_vec());
            let mut r = BucketStream::new(&p, 3, shard, 8, 5).unwrap();
            r.skip_to(bpe as u64 + 1);
            assert_eq!(r.next_batch(), b.as_slice());
            assert_ne!(a, b);
        }
        seen.sort_unstable();
        assert_eq!(seen, (0..203).collect::<Vec<_>>());
        let e = BucketStream::new(&p, 30, 0, 8, 5).unwrap_err().to_string();
        assert!(
            e.contains("optim.batch_size") && e.contains("size 7 (203"),
            "{e}"
        );
    }
}
