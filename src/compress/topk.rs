//! Exact top-k by magnitude in linear time, over a buffer or over the difference of two
//! (the unsent part of a group's change, see [`super::feedback`]).
//!
//! Sparse exchange sends the k largest entries of a group's unsent change at every inter-group
//! exchange, over models of tens of millions of parameters, so selection must cost about as
//! much as reading the buffer, not a sort. [`TopK::select`] estimates a threshold from a
//! small seeded sample, collects the entries at or above it in one vectorised pass, and does
//! the exact selection among those few candidates; when the estimate was too high it widens
//! (and finally takes every entry as a candidate), so the result is always exact.

use crate::telemetry::stats::median;
use std::time::Instant;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::ratio::k_for_ratio;

/// Magnitude key: the bits of |x|. For non-negative floats the bit order is the numeric
/// order, so keys compare as magnitudes; +0 and -0 share key 0, and NaN ranks above infinity.
#[inline(always)]
fn key(x: f32) -> u32 {
    x.to_bits() & 0x7fff_ffff
}

/// Values top-k selects from: a slice, or the element-wise difference of two slices computed
/// on the fly (no buffer and no pass to fill one).
pub trait Magnitudes {
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Value `i`.
    fn value(&self, i: usize) -> f32;
    /// Keys of values `start..start + CHUNK` (in bounds), in a form that vectorises.
    fn chunk_keys(&self, start: usize, out: &mut [u32; CHUNK]);
}

impl Magnitudes for [f32] {
    fn len(&self) -> usize {
        <[f32]>::len(self)
    }
    #[inline(always)]
    fn value(&self, i: usize) -> f32 {
        self[i]
    }
    #[inline(always)]
    fn chunk_keys(&self, start: usize, out: &mut [u32; CHUNK]) {
        let c = &self[start..start + CHUNK];
        for j in 0..CHUNK {
            out[j] = key(c[j]);
        }
    }
}

/// `after - before`, element-wise (equal lengths).
pub struct Difference<'a> {
    pub after: &'a [f32],
    pub before: &'a [f32],
}

impl Magnitudes for Difference<'_> {
    fn len(&self) -> usize {
        self.after.len()
    }
    #[inline(always)]
    fn value(&self, i: usize) -> f32 {
        self.after[i] - self.before[i]
    }
    #[inline(always)]
    fn chunk_keys(&self, start: usize, out: &mut [u32; CHUNK]) {
        let a = &self.after[start..start + CHUNK];
        let b = &self.before[start..start + CHUNK];
        for j in 0..CHUNK {
            out[j] = key(a[j] - b[j]);
        }
    }
}

/// Below this length the sample is not worth it: every entry is a candidate.
const SMALL_N: usize = 1 << 14;
/// Sample size for the threshold estimate: `n / SAMPLE_DIV` within `SAMPLE_MIN..=SAMPLE_MAX`,
/// so that sampling stays a small part of the work for models of any size (its selection
/// costs more per value than the scan). Taken as runs of `SAMPLE_RUN` neighbours at random
/// positions: one cache miss per run instead of one per sampled value.
const SAMPLE_MIN: usize = 1 << 10;
const SAMPLE_MAX: usize = 1 << 14;
const SAMPLE_DIV: usize = 32;
const SAMPLE_RUN: usize = 8;
/// Candidate-scan chunk: a vectorised test per chunk, a scalar scan only of chunks with a hit.
pub const CHUNK: usize = 16;
/// Fixed seed: the sample only affects speed, never the result, and a fixed seed keeps the
/// timing reproducible.
const SAMPLE_SEED: u64 = 0x2545_f491_4f6c_dd1d;

/// Reusable top-k selector. Holds its scratch buffers, so that once warmed on a given size,
/// repeated calls do not allocate.
#[derive(Debug, Default)]
pub struct TopK {
    sample: Vec<u32>,
    /// Candidate indices and their keys; only the first `cand_len` are meaningful (the buffers
    /// are kept at their full length so the branch-free scan can write past the count).
    cand: Vec<u32>,
    cand_key: Vec<u32>,
    cand_len: usize,
    /// Keys of the candidates, permuted by the selection.
    work: Vec<u32>,
    /// Candidate scans in the last call (1 unless the threshold estimate was too high).
    scans: usize,
}

impl TopK {
    pub fn new() -> Self {
        Self::default()
    }

    /// Writes into `out_indices` the indices of the `min(k, n)` entries of largest magnitude,
    /// ascending and unique. Every selected |value| is >= every unselected one; among equal
    /// magnitudes the lower index is selected first. NaN counts as larger than infinity
    /// (so if any value is not finite, some selected one is not: callers that must not send
    /// NaN check only the k selected values).
    ///
    /// # Panics
    /// If `values.len()` does not fit in `u32` (indices are sent as `u32`).
    pub fn select(&mut self, values: &[f32], k: usize, out_indices: &mut Vec<u32>) {
        self.select_from(values, k, out_indices)
    }

    /// [`TopK::select`] over any [`Magnitudes`].
    pub fn select_from<M: Magnitudes + ?Sized>(
        &mut self,
        values: &M,
        k: usize,
        out_indices: &mut Vec<u32>,
    ) {
        out_indices.clear();
        let n = values.len();
        assert!(
            u32::try_from(n).is_ok(),
            "top-k over {n} values: indices must fit in u32"
        );
        let k = k.min(n);
        if k == 0 {
            return;
        }
        out_indices.reserve(k);
        if k == n {
            out_indices.extend(0..n as u32);
            return;
        }

        // Threshold candidates: sampled estimate, then a wider one, then everything.
        let mut rng = SplitMix64(SAMPLE_SEED);
        let mut attempt = 0;
        self.scans = 0;
        loop {
            let thr = if n < SMALL_N || attempt >= 2 {
                0
            } else {
                let widen = if attempt == 0 { 1.0 } else { 4.0 };
                self.estimate_threshold(values, k, widen, &mut rng)
            };
            self.collect(values, thr);
            self.scans += 1;
            if self.cand_len >= k {
                break;
            }
            attempt += 1;
        }

        // Exact k-th largest key t among the candidates (which hold every entry >= it).
        let m = self.cand_len;
        let cand = &self.cand[..m];
        let cand_key = &self.cand_key[..m];
        self.work.clear();
        self.work.extend_from_slice(cand_key);
        let (_, &mut t, above) = self.work.select_nth_unstable(m - k);
        let greater = above.iter().filter(|&&x| x > t).count();
        // Candidates are in index order, so the first `ties` keys equal to t are the
        // lowest-index ties, and the output comes out sorted.
        let mut ties = k - greater;
        for (&i, &kx) in cand.iter().zip(cand_key) {
            if kx > t {
                out_indices.push(i);
            } else if kx == t && ties > 0 {
                ties -= 1;
                out_indices.push(i);
            }
        }
        debug_assert_eq!(out_indices.len(), k);
    }

    /// A key threshold such that, by a sample, somewhat more than k entries have a key >= it.
    /// `widen` multiplies the expected count (used after an estimate turned out too high).
    fn estimate_threshold<M: Magnitudes + ?Sized>(
        &mut self,
        values: &M,
        k: usize,
        widen: f64,
        rng: &mut SplitMix64,
    ) -> u32 {
        let n = values.len();
        let sample = sample_size(n);
        self.sample.clear();
        for _ in 0..sample / SAMPLE_RUN {
            let start = rng.below(n - SAMPLE_RUN + 1);
            self.sample
                .extend((start..start + SAMPLE_RUN).map(|i| key(values.value(i))));
        }
        let expected = k as f64 / n as f64 * sample as f64 * widen;
        // Margin of three standard deviations of the binomial count (an estimate too high
        // costs one more pass, about one time in a thousand), plus a constant for tiny k.
        let rank = (expected + 3.0 * expected.sqrt() + 8.0).ceil() as usize;
        if rank >= sample {
            return 0;
        }
        // The (rank+1)-th largest sample key.
        let (_, &mut t, _) = self.sample.select_nth_unstable(sample - 1 - rank);
        t
    }

    /// Collects the index and key of every entry with key >= `thr`, in index order, into
    /// `cand[..cand_len]` and `cand_key[..cand_len]`. Each chunk costs one vectorised
    /// compare and a bit mask; only its set bits (a few percent of entries) are visited.
    fn collect<M: Magnitudes + ?Sized>(&mut self, values: &M, thr: u32) {
        // Keys are < 2^31, so signed compares (native on every SIMD level) are exact.
        let thr_i = thr as i32;
        let n = values.len();
        let mut len = 0usize;
        let mut keys = [0u32; CHUNK];
        let full = n - n % CHUNK;
        for start in (0..full).step_by(CHUNK) {
            values.chunk_keys(start, &mut keys);
            let mut hits = hit_mask(&keys, thr_i);
            if hits != 0 {
                if self.cand.len() < len + CHUNK {
                    self.grow(len + CHUNK, n);
                }
                // Hits are sparse (a few percent of entries): visit only the set bits.
                while hits != 0 {
                    let j = hits.trailing_zeros() as usize;
                    self.cand[len] = (start + j) as u32;
                    self.cand_key[len] = keys[j];
                    len += 1;
                    hits &= hits - 1;
                }
            }
        }
        for i in full..n {
            let kx = key(values.value(i));
            if kx >= thr {
                if self.cand.len() <= len {
                    self.grow(len + 1, n);
                }
                self.cand[len] = i as u32;
                self.cand_key[len] = kx;
                len += 1;
            }
        }
        self.cand_len = len;
    }

    /// Grows both candidate buffers to at least `need` (doubling, capped near `n`).
    fn grow(&mut self, need: usize, n: usize) {
        let len = need.max(2 * self.cand.len()).min(n + CHUNK).max(need);
        self.cand.resize(len, 0);
        self.cand_key.resize(len, 0);
    }
}

/// Bit j set when `keys[j] >= thr` (keys < 2^31, so signed compares are exact): four SSE2
/// compares and movemasks on x86-64, where SSE2 is always present.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn hit_mask(keys: &[u32; CHUNK], thr: i32) -> u32 {
    use std::arch::x86_64::{
        _mm_castsi128_ps, _mm_cmpgt_epi32, _mm_loadu_si128, _mm_movemask_ps, _mm_set1_epi32,
    };
    // SAFETY: SSE2 is part of x86-64; the loads read 4 u32 each inside `keys`.
    unsafe {
        let below = _mm_set1_epi32(thr.wrapping_sub(1));
        let mut mask = 0u32;
        for q in 0..CHUNK / 4 {
            let v = _mm_loadu_si128(keys.as_ptr().add(4 * q).cast());
            let ge = _mm_castsi128_ps(_mm_cmpgt_epi32(v, below));
            mask |= (_mm_movemask_ps(ge) as u32) << (4 * q);
        }
        mask
    }
}

/// Bit j set when `keys[j] >= thr` (portable form).
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn hit_mask(keys: &[u32; CHUNK], thr: i32) -> u32 {
    let mut mask = 0u32;
    for (j, &kx) in keys.iter().enumerate() {
        mask |= ((kx as i32 >= thr) as u32) << j;
    }
    mask
}

/// Values sampled for the threshold estimate over `n` values (a multiple of `SAMPLE_RUN`).
fn sample_size(n: usize) -> usize {
    (n / SAMPLE_DIV).clamp(SAMPLE_MIN, SAMPLE_MAX) / SAMPLE_RUN * SAMPLE_RUN
}

/// Tiny seeded generator for the sample positions (the sample only steers speed).
struct SplitMix64(u64);

impl SplitMix64 {
    /// Uniform in 0..n (multiply-high; the bias is far below what matters for a sample).
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        ((z as u128 * n as u128) >> 64) as usize
    }
}

/// Sum of `values` with 8 independent accumulators, so it vectorises: the cost of one
/// streaming pass over the buffer, the honest baseline for [`TopK::select`].
pub fn sum_pass(values: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let mut chunks = values.chunks_exact(8);
    for c in chunks.by_ref() {
        for j in 0..8 {
            acc[j] += c[j];
        }
    }
    let mut s = acc.iter().sum::<f32>();
    for &x in chunks.remainder() {
        s += x;
    }
    s
}

/// Times [`TopK::select`] at `k = k_for_ratio(n, ratio)` and [`sum_pass`] on the same seeded
/// gradient-like vector (normal values); returns the medians over `reps` runs (at least 1), in
/// seconds, as (top-k, sum). Both are warmed once first.
pub fn topk_vs_sum_bench(n: usize, ratio: f64, reps: usize, seed: u64) -> (f64, f64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let values: Vec<f32> = (0..n)
        .map(|_| {
            // Box-Muller: a normal draw without extra dependencies.
            let u1: f64 = rng.gen_range(f64::MIN_POSITIVE..1.0);
            let u2: f64 = rng.gen();
            ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
        })
        .collect();
    let k = k_for_ratio(n, ratio);
    let mut topk = TopK::new();
    let mut idx = Vec::with_capacity(k);
    topk.select(&values, k, &mut idx);
    std::hint::black_box(sum_pass(&values));

    let reps = reps.max(1);
    let mut t_topk = Vec::with_capacity(reps);
    let mut t_sum = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t0 = Instant::now();
        topk.select(std::hint::black_box(&values), k, &mut idx);
        std::hint::black_box(&idx);
        t_topk.push(t0.elapsed().as_secs_f64());
        let t0 = Instant::now();
        std::hint::black_box(sum_pass(std::hint::black_box(&values)));
        t_sum.push(t0.elapsed().as_secs_f64());
    }
    (median(&mut t_topk), median(&mut t_sum))
}

/// The `k` largest `|weights - view|`: their indices (ascending) into `idx` and their
/// differences into `vals`.
pub fn select_unsent(
    topk: &mut TopK,
    weights: &[f32],
    view: &[f32],
    k: usize,
    idx: &mut Vec<u32>,
    vals: &mut Vec<f32>,
) {
    let unsent = Difference {
        after: weights,
        before: view,
    };
    topk.select_from(&unsent, k, idx);
    vals.clear();
    vals.extend(idx.iter().map(|&i| weights[i as usize] - view[i as usize]));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reference: sort indices by (|x| descending, index ascending), take k, sort ascending.
    fn reference(values: &[f32], k: usize) -> Vec<u32> {
        let mut order: Vec<u32> = (0..values.len() as u32).collect();
        order.sort_by(|&a, &b| {
            key(values[b as usize])
                .cmp(&key(values[a as usize]))
                .then(a.cmp(&b))
        });
        order.truncate(k.min(values.len()));
        order.sort_unstable();
        order
    }

    fn random_values(rng: &mut ChaCha8Rng, n: usize, levels: Option<usize>) -> Vec<f32> {
        (0..n)
            .map(|_| match levels {
                // Few distinct magnitudes, both signs, and zeros: many ties.
                Some(l) => {
                    let m = rng.gen_range(0..l) as f32 * 0.25;
                    if rng.gen_bool(0.5) {
                        m
                    } else {
                        -m
                    }
                }
                None => rng.gen_range(-1.0f32..1.0),
            })
            .collect()
    }

    #[test]
    fn matches_sort_reference_with_many_ties() {
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let mut topk = TopK::new();
        let mut out = Vec::new();
        // Small sizes take the all-candidates path; the large ones the sampled threshold
        // (including thresholds landing on a heavily tied level).
        for &n in &[1usize, 2, 7, 100, 1000, 20_000, 70_000] {
            for levels in [Some(2), Some(3), Some(5), Some(50), None] {
                let values = random_values(&mut rng, n, levels);
                for k in [1, 2, n / 100, n / 10, n / 2, n - 1, n] {
                    topk.select(&values, k, &mut out);
                    assert_eq!(out, reference(&values, k), "n={n} k={k} levels={levels:?}");
                }
            }
        }
    }

    #[test]
    fn skewed_data_stays_exact() {
        // A sample sees mostly zeros: the large entries sit in one contiguous block, so the
        // first threshold estimate is often wrong in either direction.
        let n = 100_000;
        let mut values = vec![0.0f32; n];
        for (i, v) in values.iter_mut().enumerate().skip(50_000).take(3_000) {
            *v = if i % 2 == 0 { 1.0 } else { -(i as f32) };
        }
        let mut topk = TopK::new();
        let mut out = Vec::new();
        for k in [10, 1_000, 2_999, 3_000, 3_001, 10_000] {
            topk.select(&values, k, &mut out);
            assert_eq!(out, reference(&values, k), "k={k}");
        }
    }

    #[test]
    fn widens_when_the_sample_overestimates() {
        // Mark exactly the sampled positions of the first two estimates as large: both
        // thresholds then admit fewer than k candidates, and only the third scan (every entry
        // a candidate) can be exact.
        let n = 1_000_000;
        let k = 40_000;
        let mut values = vec![0.0f32; n];
        let mut rng = SplitMix64(SAMPLE_SEED);
        for _ in 0..2 * sample_size(n) / SAMPLE_RUN {
            let start = rng.below(n - SAMPLE_RUN + 1);
            for v in &mut values[start..start + SAMPLE_RUN] {
                *v = -1.0;
            }
        }
        // Below the marked ones, distinct magnitudes so the answer is unique by value.
        for (i, v) in values.iter_mut().enumerate() {
            if *v == 0.0 {
                *v = (i % 1000) as f32 * 1e-4;
            }
        }
        let mut topk = TopK::new();
        let mut out = Vec::new();
        topk.select(&values, k, &mut out);
        assert_eq!(topk.scans, 3);
        assert_eq!(out, reference(&values, k));
        // Ordinary data needs one scan.
        let mut r = ChaCha8Rng::seed_from_u64(2);
        let plain = random_values(&mut r, n, None);
        topk.select(&plain, k / 4, &mut out);
        assert_eq!(topk.scans, 1);
        assert_eq!(out, reference(&plain, k / 4));
    }

    #[test]
    fn edge_sizes() {
        let mut topk = TopK::new();
        let mut out = vec![99];
        topk.select(&[], 5, &mut out);
        assert!(out.is_empty());
        let v = [3.0f32, -1.0, 2.0];
        topk.select(&v, 0, &mut out);
        assert!(out.is_empty());
        topk.select(&v, 3, &mut out);
        assert_eq!(out, vec![0, 1, 2]);
        topk.select(&v, 10, &mut out);
        assert_eq!(out, vec![0, 1, 2]);
        topk.select(&v, 1, &mut out);
        assert_eq!(out, vec![0]);
        topk.select(&v, 2, &mut out);
        assert_eq!(out, vec![0, 2]);
        // Ties on magnitude across signs: the lower index wins.
        topk.select(&[-2.0, 1.0, 2.0, -2.0], 2, &mut out);
        assert_eq!(out, vec![0, 2]);
    }

    #[test]
    fn no_allocation_once_warmed() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let values = random_values(&mut rng, 200_000, None);
        let mut topk = TopK::new();
        let mut out = Vec::new();
        topk.select(&values, 2_000, &mut out);
        let caps = (
            topk.sample.capacity(),
            topk.cand.capacity(),
            topk.cand_key.capacity(),
            topk.work.capacity(),
            out.capacity(),
        );
        let ptr = topk.cand.as_ptr();
        for _ in 0..3 {
            topk.select(&values, 2_000, &mut out);
        }
        assert_eq!(
            caps,
            (
                topk.sample.capacity(),
                topk.cand.capacity(),
                topk.cand_key.capacity(),
                topk.work.capacity(),
                out.capacity()
            )
        );
        assert_eq!(ptr, topk.cand.as_ptr());
    }

    #[test]
    fn sum_pass_matches_plain_sum_on_exact_values() {
        for n in [0usize, 1, 7, 8, 9, 1001] {
            // Small integers: every partial sum is exact, so any summation order agrees.
            let v: Vec<f32> = (0..n).map(|i| (i % 13) as f32 - 6.0).collect();
            let plain: f32 = v.iter().sum();
            assert_eq!(sum_pass(&v), plain, "n={n}");
        }
    }
}
