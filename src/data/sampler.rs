//! Disjoint per-worker shards and per-epoch reshuffling.
//!
//! All workers apply the same seeded permutation of 0..n and take contiguous slices of it, so
//! shards are disjoint, cover every sample, and do not follow the file order (which may be
//! sorted by class). Each epoch a worker reshuffles its own shard; the order of epoch `e` is a
//! pure function of (seed, shard, e), so runs are reproducible.
//!
//! Workers whose batches differ (batches in proportion to speed) instead walk one shared
//! order, global batch by global batch, each taking its own slice of every global batch
//! ([`ShardSampler::shared`]). The shared order is that of a single shard over the whole set,
//! so the union of the slices of step `t` is the very batch a single process at the global
//! batch size trains on at step `t`; and since the global batch stays the same when the
//! slices are re-cut, an epoch visits every sample once however often they change.

use std::ops::Range;

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::DataError;

const PERMUTATION_TAG: u64 = 0x5045_524d_5554_4521; // "PERMUTE!"
const EPOCH_TAG: u64 = 0x4550_4f43_4853_4846; // "EPOCHSHF"

/// Combines two words into a well-mixed seed (splitmix64 finaliser), so nearby inputs such as
/// consecutive epochs give unrelated RNG streams.
pub(crate) fn mix_seed(a: u64, b: u64) -> u64 {
    let mut z = a
        .wrapping_add(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(b.wrapping_mul(0xbf58_476d_1ce4_e5b9));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The contiguous part of 0..n that shard `shard` of `num_shards` owns: sizes differ by at
/// most one (the first `n % num_shards` shards get one extra), shards are disjoint and cover
/// 0..n.
///
/// # Panics
/// If `num_shards` is 0 or `shard >= num_shards` (`ShardSampler::new` checks both first).
pub fn shard_range(n: usize, num_shards: usize, shard: usize) -> Range<usize> {
    assert!(
        shard < num_shards,
        "shard_range: shard {shard} of {num_shards} shards"
    );
    let base = n / num_shards;
    let extra = n % num_shards;
    let start = shard * base + shard.min(extra);
    let len = base + usize::from(shard < extra);
    start..start + len
}

/// Serves one worker's mini-batches (sample indices) forever, epoch after epoch.
#[derive(Debug, Clone)]
pub struct ShardSampler {
    /// This shard's sample indices in their canonical (permuted, unshuffled) order.
    base: Vec<usize>,
    /// The current epoch's order.
    order: Vec<usize>,
    batch_size: usize,
    seed: u64,
    shard: usize,
    /// Batches handed out so far, over all epochs.
    served: u64,
    batches_per_epoch: usize,
    /// The part of each batch of `batch_size` this worker takes (all of it, but for a shared
    /// order).
    part: Range<usize>,
}

impl ShardSampler {
    /// Shard `shard` of `num_shards` over a dataset of `n` samples, serving `batch_size`
    /// indices per batch. Fails if the shard cannot fill even one batch.
    pub fn new(
        n: usize,
        num_shards: usize,
        shard: usize,
        batch_size: usize,
        seed: u64,
    ) -> Result<Self, DataError> {
        let invalid = |key: &str, problem: String| DataError::InvalidSetting {
            key: key.into(),
            problem,
        };
        if num_shards == 0 || shard >= num_shards {
            return Err(invalid(
                "sampler",
                format!("shard must be < num_shards, got shard {shard} of {num_shards}"),
            ));
        }
        if batch_size == 0 {
            return Err(invalid("optim.batch_size", "must be >= 1, got 0".into()));
        }
        let range = shard_range(n, num_shards, shard);
        if range.len() < batch_size {
            return Err(invalid(
                "optim.batch_size",
                format!(
                    "must be <= the shard size {} ({n} samples over {num_shards} shards), got {batch_size}",
                    range.len()
                ),
            ));
        }
        let mut perm: Vec<usize> = (0..n).collect();
        perm.shuffle(&mut ChaCha8Rng::seed_from_u64(mix_seed(
            seed,
            PERMUTATION_TAG,
        )));
        let base = perm[range].to_vec();
        let mut s = Self {
            order: base.clone(),
            batches_per_epoch: base.len() / batch_size,
            base,
            batch_size,
            seed,
            shard,
            served: 0,
            part: 0..batch_size,
        };
        s.shuffle_for(0);
        Ok(s)
    }

    /// A worker's view of one order shared by every worker: each batch is the slice `part`
    /// of the next global batch of `global` samples over all `n`. Fails if the set cannot
    /// fill one global batch.
    pub fn shared(
        n: usize,
        global: usize,
        seed: u64,
        part: Range<usize>,
    ) -> Result<Self, DataError> {
        if global > n {
            return Err(DataError::InvalidSetting {
                key: "optim.batch_size".into(),
                problem: format!(
                    "the global batch {global} (optim.batch_size x workers) must be <= the {n} training samples"
                ),
            });
        }
        let mut s = Self::new(n, 1, 0, global, seed)?;
        s.set_part(part)?;
        Ok(s)
    }

    /// Takes the slice `part` of every global batch from the next batch on (a re-cut of a
    /// shared order).
    pub fn set_part(&mut self, part: Range<usize>) -> Result<(), DataError> {
        if part.is_empty() || part.end > self.batch_size {
            return Err(DataError::InvalidSetting {
                key: "sync.balance".into(),
                problem: format!(
                    "a worker's slice {part:?} must be non-empty and within the global batch of {}",
                    self.batch_size
                ),
            });
        }
        self.part = part;
        Ok(())
    }

    fn shuffle_for(&mut self, epoch: u64) {
        self.order.copy_from_slice(&self.base);
        let seed = mix_seed(
            mix_seed(mix_seed(self.seed, EPOCH_TAG), self.shard as u64),
            epoch,
        );
        self.order.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
    }

    /// The epoch (0-based) of the batch [`ShardSampler::next_batch`] serves next.
    #[cfg(test)]
    fn upcoming_epoch(&self) -> u64 {
        self.served / self.batches_per_epoch as u64
    }

    /// The next `batch_size` indices (of a shared order: this worker's slice of them); the
    /// last partial batch of an epoch is dropped and the next epoch (freshly shuffled)
    /// starts transparently.
    pub fn next_batch(&mut self) -> &[usize] {
        let bpe = self.batches_per_epoch as u64;
        let pos = (self.served % bpe) as usize;
        if pos == 0 && self.served > 0 {
            self.shuffle_for(self.served / bpe);
        }
        self.served += 1;
        let at = pos * self.batch_size;
        &self.order[at + self.part.start..at + self.part.end]
    }

    /// Batches served so far, over all epochs: the sampler's whole state besides its
    /// configuration (a checkpoint records it).
    pub fn served(&self) -> u64 {
        self.served
    }

    /// Continues as if `served` batches had been served: the next batch is the one an
    /// uninterrupted sampler would serve after them (resume from a checkpoint).
    pub fn skip_to(&mut self, served: u64) {
        self.served = served;
        let bpe = self.batches_per_epoch as u64;
        // The order of the epoch that the next batch falls in; at an epoch boundary
        // `next_batch` reshuffles for the new epoch itself.
        let epoch = if served > 0 && served.is_multiple_of(bpe) {
            served / bpe - 1
        } else {
            served / bpe
        };
        self.shuffle_for(epoch);
    }

    /// Full epochs completed (the floor of `epoch_progress`).
    #[cfg(test)]
    fn epoch(&self) -> usize {
        (self.served / self.batches_per_epoch as u64) as usize
    }

    /// Epochs done so far, fractional (batches served / batches per epoch).
    pub fn epoch_progress(&self) -> f64 {
        self.served as f64 / self.batches_per_epoch as f64
    }

    #[cfg(test)]
    fn batches_per_epoch(&self) -> usize {
        self.batches_per_epoch
    }

    /// This shard's sample indices (unshuffled order).
    #[cfg(test)]
    fn indices(&self) -> &[usize] {
        &self.base
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn skipping_ahead_serves_what_an_uninterrupted_sampler_serves() {
        let mut whole = ShardSampler::new(103, 3, 1, 4, 9).unwrap();
        let batches: Vec<Vec<usize>> = (0..40).map(|_| whole.next_batch().to_vec()).collect();
        // 34 samples, 8 batches an epoch: skip to mid-epoch, to a boundary, to the start.
        for at in [0usize, 3, 8, 16, 21, 39] {
            let mut resumed = ShardSampler::new(103, 3, 1, 4, 9).unwrap();
            resumed.skip_to(at as u64);
            assert_eq!(resumed.served(), at as u64);
            for (k, b) in batches.iter().enumerate().skip(at) {
                assert_eq!(resumed.next_batch(), &b[..], "skip to {at}, batch {k}");
            }
        }
    }

    #[test]
    fn upcoming_epoch_turns_after_a_full_epoch() {
        // 10 samples, 1 shard, batch 3: 3 batches an epoch (the partial one dropped).
        let mut s = ShardSampler::new(10, 1, 0, 3, 1).unwrap();
        let mut epochs = Vec::new();
        for _ in 0..7 {
            epochs.push(s.upcoming_epoch());
            s.next_batch();
        }
        assert_eq!(epochs, vec![0, 0, 0, 1, 1, 1, 2]);
    }

    #[test]
    fn shard_ranges_are_disjoint_balanced_and_cover() {
        for n in [0, 1, 5, 16, 17, 100, 60000, 60001] {
            for w in [1, 2, 3, 7, 16, 17] {
                let ranges: Vec<_> = (0..w).map(|s| shard_range(n, w, s)).collect();
                assert_eq!(ranges[0].start, 0);
                assert_eq!(ranges[w - 1].end, n);
                for pair in ranges.windows(2) {
                    assert_eq!(pair[0].end, pair[1].start, "n={n} w={w}");
                }
                let lens: Vec<_> = ranges.iter().map(|r| r.len()).collect();
                let (min, max) = (lens.iter().min().unwrap(), lens.iter().max().unwrap());
                assert!(max - min <= 1, "n={n} w={w} lens={lens:?}");
                assert_eq!(lens.iter().sum::<usize>(), n);
            }
        }
        assert_eq!(shard_range(10, 3, 0), 0..4);
        assert_eq!(shard_range(10, 3, 1), 4..7);
        assert_eq!(shard_range(10, 3, 2), 7..10);
    }

    #[test]
    fn sampler_shards_partition_a_permutation() {
        for (n, w) in [(100, 3), (17, 17), (1000, 16), (64, 1)] {
            let mut all = Vec::new();
            for s in 0..w {
                let sm = ShardSampler::new(n, w, s, 1, 42).unwrap();
                assert_eq!(sm.indices().len(), shard_range(n, w, s).len());
                all.extend_from_slice(sm.indices());
            }
            let set: HashSet<_> = all.iter().copied().collect();
            assert_eq!((all.len(), set.len()), (n, n));
            assert!(all.iter().all(|&i| i < n));
            if n > 10 {
                assert_ne!(all, (0..n).collect::<Vec<_>>(), "shards not permuted");
            }
        }
    }

    #[test]
    fn epochs_cover_the_shard_and_reshuffle() {
        let mut s = ShardSampler::new(103, 4, 1, 5, 7).unwrap();
        let shard: HashSet<usize> = s.indices().iter().copied().collect();
        assert_eq!(shard.len(), 26);
        assert_eq!(s.batches_per_epoch(), 5);
        let mut epochs = Vec::new();
        for e in 0..3 {
            assert_eq!(s.epoch(), e);
            let mut seen = Vec::new();
            for _ in 0..5 {
                let b = s.next_batch();
                assert_eq!(b.len(), 5);
                seen.extend_from_slice(b);
            }
            let set: HashSet<usize> = seen.iter().copied().collect();
            assert_eq!(set.len(), 25, "no repeats within an epoch");
            assert!(set.is_subset(&shard));
            epochs.push(seen);
        }
        assert_ne!(epochs[0], epochs[1]);
        assert_ne!(epochs[1], epochs[2]);
        assert_eq!(s.epoch(), 3);
        assert_eq!(s.epoch_progress(), 3.0);
        s.next_batch();
        s.next_batch();
        assert!((s.epoch_progress() - 3.4).abs() < 1e-12);
        assert_eq!(s.epoch(), 3);
    }

    #[test]
    fn deterministic_for_a_seed_and_differs_across_seeds_and_shards() {
        let run = |seed, shard| {
            let mut s = ShardSampler::new(200, 2, shard, 8, seed).unwrap();
            (0..40)
                .flat_map(|_| s.next_batch().to_vec())
                .collect::<Vec<_>>()
        };
        assert_eq!(run(1, 0), run(1, 0));
        assert_ne!(run(1, 0), run(2, 0));
        assert_ne!(run(1, 0), run(1, 1));
    }

    #[test]
    fn batches_reuse_one_buffer() {
        let mut s = ShardSampler::new(50, 1, 0, 10, 3).unwrap();
        let first = s.next_batch().as_ptr();
        for _ in 0..20 {
            s.next_batch();
        }
        // Batch 21 is position 1 of an epoch: 10 elements after the start of the same buffer.
        let p = s.next_batch().as_ptr();
        assert_eq!(p, first.wrapping_add(10));
    }

    #[test]
    fn rejects_impossible_settings() {
        // 10 over 4 shards: sizes 3, 3, 2, 2.
        let e = ShardSampler::new(10, 4, 3, 3, 0).unwrap_err().to_string();
        assert!(
            e.contains("optim.batch_size") && e.contains("shard size 2"),
            "{e}"
        );
        assert!(ShardSampler::new(10, 4, 0, 3, 0).is_ok());
        assert!(ShardSampler::new(10, 0, 0, 1, 0).is_err());
        assert!(ShardSampler::new(10, 2, 2, 1, 0).is_err());
        assert!(ShardSampler::new(10, 2, 0, 0, 0).is_err());
    }

    #[test]
    fn slices_of_a_shared_order_cover_each_epoch_once_however_often_they_are_recut() {
        let (n, global) = (103, 10);
        let mut single = ShardSampler::new(n, 1, 0, global, 5).unwrap();
        let cuts: [&[usize]; 3] = [&[5, 5], &[8, 2], &[1, 9]];
        let slices = |cut: &[usize]| -> Vec<Range<usize>> {
            let ends: Vec<usize> = cut
                .iter()
                .scan(0, |e, b| {
                    *e += b;
                    Some(*e)
                })
                .collect();
            ends.iter().zip(cut).map(|(&e, &b)| e - b..e).collect()
        };
        let mut workers: Vec<ShardSampler> = slices(cuts[0])
            .into_iter()
            .map(|p| ShardSampler::shared(n, global, 5, p).unwrap())
            .collect();
        let mut epoch: Vec<usize> = Vec::new();
        for step in 0..30 {
            // A new cut every 7 steps, mid-epoch (10 steps an epoch).
            if step % 7 == 0 {
                let cut = cuts[(step / 7) % cuts.len()];
                for (w, p) in workers.iter_mut().zip(slices(cut)) {
                    w.set_part(p).unwrap();
                }
            }
            let mut union: Vec<usize> = Vec::new();
            for w in &mut workers {
                union.extend_from_slice(w.next_batch());
            }
            assert_eq!(
                union,
                single.next_batch(),
                "step {step}: the single process's batch"
            );
            epoch.extend_from_slice(&union);
            if (step + 1) % 10 == 0 {
                let set: HashSet<usize> = epoch.iter().copied().collect();
                assert_eq!(
                    (epoch.len(), set.len()),
                    (100, 100),
                    "each sample once an epoch"
                );
                epoch.clear();
            }
        }
        assert!(workers.iter().all(|w| w.epoch_progress() == 3.0));
    }

    #[test]
    fn a_shared_order_refuses_a_global_batch_it_cannot_fill_and_a_bad_slice() {
        let e = ShardSampler::shared(50, 64, 0, 0..32)
            .unwrap_err()
            .to_string();
        assert!(e.contains("global batch 64") && e.contains("50"), "{e}");
        assert!(ShardSampler::shared(100, 64, 0, 32..65).is_err());
        assert!(ShardSampler::shared(100, 64, 0, 3..3).is_err());
    }

    #[test]
    fn mix_seed_spreads_neighbours() {
        assert_ne!(mix_seed(0, 0), mix_seed(0, 1));
        assert_ne!(mix_seed(1, 0), mix_seed(0, 1));
    }
}
