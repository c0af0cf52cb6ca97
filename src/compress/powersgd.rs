//! PowerSGD (Vogels et al., NeurIPS 2019): a group's unsent change, tensor by tensor, as
//! two thin matrices instead of its largest entries.
//!
//! Each weight tensor is viewed as a matrix M of `[out, everything else]` (a convolution
//! kernel `[out, in, kh, kw]` as `[out, in x kh x kw]`). One power iteration from the
//! previous exchange's Q (warm start) gives P = orth(M Q) and Q' = M^T P, so that
//! P Q'^T = P P^T M is M projected onto a rank-r column space. P (m x r) and Q' (n x r) are
//! sent; the sender counts exactly their product as sent, so the rest of M stays in the
//! error feedback of [`super::PeerView`] and nothing is lost. Orthogonalisation is LAPACK's
//! Householder QR (through ndarray-linalg), which stays finite on zero and rank-deficient
//! inputs where Gram-Schmidt divides by zero.
//!
//! Tensors where the factors would not be smaller than the matrix ((m + n) r >= m n:
//! vectors such as biases and batch-norm parameters, and small matrices) go dense. A
//! [`LowRankLayout`] is this split for one rank; sender and receivers build the same layout
//! from the model's tensor shapes and the rank the message carries, and rebuild the dense
//! change with the same [`reconstruct`], so every replica adds the same values.
//!
//! The warm starts are not checkpointed: a resumed run draws them afresh, which costs one
//! exchange of a rougher approximation (what it misses stays unsent, as always).

use std::collections::HashMap;
use std::ops::Range;

use ndarray::linalg::general_mat_mul;
use ndarray::{s, Array2, ArrayView2, ArrayViewMut2};
use ndarray_linalg::QR;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{find_non_finite, CompressError};

/// One tensor of the flat parameter vector as the compressor sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorShape {
    pub range: Range<usize>,
    /// Rows of the matrix view (the first dimension; 1 for a scalar).
    pub rows: usize,
}

impl TensorShape {
    /// From a tensor's place in the flat vector and its dimensions (`[out, ...]`).
    pub fn new(range: Range<usize>, dims: &[usize]) -> Self {
        let rows = if dims.len() >= 2 { dims[0].max(1) } else { 1 };
        Self { range, rows }
    }

    fn cols(&self) -> usize {
        self.range.len() / self.rows
    }
}

/// How one stretch of the flat vector is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Block {
    /// `rows x cols` values from `offset`, sent as P (rows x rank) and Q (cols x rank).
    LowRank {
        offset: usize,
        rows: usize,
        cols: usize,
    },
    /// `len` values from `offset`, sent as they are.
    Dense { offset: usize, len: usize },
}

impl Block {
    /// Where the block starts in the flat vector, and how many payload values it takes at
    /// `rank`.
    fn span(&self, rank: usize) -> (usize, usize) {
        match *self {
            Block::LowRank { offset, rows, cols } => (offset, (rows + cols) * rank),
            Block::Dense { offset, len } => (offset, len),
        }
    }
}

/// Which tensors go low-rank at one rank, and the message payload's length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LowRankLayout {
    pub rank: usize,
    pub blocks: Vec<Block>,
    payload_len: usize,
}

impl LowRankLayout {
    /// The layout for `rank` over `tensors` (in any order, covering `0..n` without overlap;
    /// stretches no tensor covers go dense, so every value is sent in some form).
    pub fn new(tensors: &[TensorShape], n: usize, rank: usize) -> Self {
        let mut sorted: Vec<&TensorShape> =
            tensors.iter().filter(|t| !t.range.is_empty()).collect();
        sorted.sort_by_key(|t| t.range.start);
        let mut blocks = Vec::with_capacity(sorted.len());
        let mut at = 0;
        for t in sorted {
            let (start, end) = (t.range.start.max(at), t.range.end.min(n));
            if start >= end {
                continue;
            }
            dense(&mut blocks, at, start);
            let (rows, cols) = (t.rows, t.cols());
            let whole = start == t.range.start && end == t.range.end && rows * cols == end - start;
            if whole && rank > 0 && (rows + cols) * rank < rows * cols {
                blocks.push(Block::LowRank {
                    offset: start,
                    rows,
                    cols,
                });
            } else {
                dense(&mut blocks, start, end);
            }
            at = end;
        }
        dense(&mut blocks, at, n);
        let payload_len = blocks.iter().map(|b| b.span(rank).1).sum();
        Self {
            rank,
            blocks,
            payload_len,
        }
    }

    /// Values in a message of this layout.
    pub fn payload_len(&self) -> usize {
        self.payload_len
    }

    /// Values of the matrices sent low-rank (the rest goes dense).
    pub fn low_rank_values(&self) -> usize {
        self.blocks
            .iter()
            .map(|b| match *b {
                Block::LowRank { rows, cols, .. } => rows * cols,
                Block::Dense { .. } => 0,
            })
            .sum()
    }
}

/// Appends `offset..end` as dense, merged with a dense block just before it.
fn dense(blocks: &mut Vec<Block>, offset: usize, end: usize) {
    if end <= offset {
        return;
    }
    match blocks.last_mut() {
        Some(Block::Dense { offset: o, len }) if *o + *len == offset => *len += end - offset,
        _ => blocks.push(Block::Dense {
            offset,
            len: end - offset,
        }),
    }
}

/// The sender's state: each matrix's Q from its last exchange (the warm start).
#[derive(Debug)]
pub struct PowerSgd {
    warm: HashMap<usize, Array2<f32>>,
    rng: ChaCha8Rng,
}

impl PowerSgd {
    /// `seed` draws the first Q of every matrix (and any column that dies out).
    pub fn new(seed: u64) -> Self {
        Self {
            warm: HashMap::new(),
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }

    /// Compresses `unsent` (the whole flat vector) by `layout` into `payload`: per block in
    /// order, P then Q (row-major) or the dense values. A NaN or infinity in `unsent`, or in
    /// the factors, is an error and `payload` is left empty.
    pub fn compress(
        &mut self,
        unsent: &[f32],
        layout: &LowRankLayout,
        payload: &mut Vec<f32>,
    ) -> Result<(), CompressError> {
        payload.clear();
        if let Some((index, value)) = find_non_finite(unsent) {
            return Err(CompressError::NonFinite { index, value });
        }
        let r = layout.rank;
        for block in &layout.blocks {
            match *block {
                Block::Dense { offset, len } => {
                    payload.extend_from_slice(&unsent[offset..offset + len])
                }
                Block::LowRank { offset, rows, cols } => {
                    let m =
                        ArrayView2::from_shape((rows, cols), &unsent[offset..offset + rows * cols])
                            .map_err(|e| CompressError::Factorization(e.to_string()))?;
                    let q = self.warm_q(offset, cols, r);
                    let p = m.dot(&q);
                    let p = orthonormal_columns(p)?;
                    let q = m.t().dot(&p);
                    payload.extend(p.iter());
                    payload.extend(q.iter());
                    self.warm.insert(offset, q);
                }
            }
        }
        if let Some((j, value)) = find_non_finite(payload) {
            let index = block_start(layout, j);
            payload.clear();
            return Err(CompressError::NonFinite { index, value });
        }
        Ok(())
    }

    /// The matrix at `offset`'s Q of `cols x r`: the last one sent, its columns cut or
    /// extended to `r`, and any column that is zero (nothing to iterate from) drawn afresh.
    fn warm_q(&mut self, offset: usize, cols: usize, r: usize) -> Array2<f32> {
        let mut q = Array2::<f32>::zeros((cols, r));
        if let Some(old) = self.warm.get(&offset).filter(|o| o.nrows() == cols) {
            let keep = old.ncols().min(r);
            q.slice_mut(s![.., ..keep])
                .assign(&old.slice(s![.., ..keep]));
        }
        for mut column in q.columns_mut() {
            if column.iter().all(|&x| x == 0.0) {
                column.mapv_inplace(|_| self.rng.gen_range(-1.0f32..1.0));
            }
        }
        q
    }
}

/// Orthonormal columns spanning `p`'s column space (reduced QR's Q); zero columns of `p`
/// give unit columns, never NaN.
fn orthonormal_columns(p: Array2<f32>) -> Result<Array2<f32>, CompressError> {
    let (rows, r) = p.dim();
    let (q, _) = p
        .qr()
        .map_err(|e| CompressError::Factorization(e.to_string()))?;
    if q.dim() != (rows, r) {
        return Err(CompressError::Factorization(format!(
            "QR of a {rows} x {r} matrix gave Q of {:?}",
            q.dim()
        )));
    }
    Ok(q)
}

/// Start of the tensor that holds payload position `j` (for an error message).
fn block_start(layout: &LowRankLayout, mut j: usize) -> usize {
    for b in &layout.blocks {
        let (offset, len) = b.span(layout.rank);
        if j < len {
            return offset;
        }
        j -= len;
    }
    0
}

/// Rebuilds the dense change a payload of `layout` stands for, calling `apply(offset,
/// values)` once per block with the values to add from `offset`. `scratch` holds one
/// reconstructed matrix at a time.
pub fn reconstruct(
    layout: &LowRankLayout,
    payload: &[f32],
    scratch: &mut Vec<f32>,
    mut apply: impl FnMut(usize, &[f32]),
) -> Result<(), CompressError> {
    if payload.len() != layout.payload_len() {
        return Err(CompressError::LengthMismatch {
            expected: layout.payload_len(),
            got: payload.len(),
        });
    }
    let r = layout.rank;
    let mut at = 0;
    for block in &layout.blocks {
        match *block {
            Block::Dense { offset, len } => {
                apply(offset, &payload[at..at + len]);
                at += len;
            }
            Block::LowRank { offset, rows, cols } => {
                let shape_err =
                    |e: ndarray::ShapeError| CompressError::Factorization(e.to_string());
                let p = ArrayView2::from_shape((rows, r), &payload[at..at + rows * r])
                    .map_err(shape_err)?;
                at += rows * r;
                let q = ArrayView2::from_shape((cols, r), &payload[at..at + cols * r])
                    .map_err(shape_err)?;
                at += cols * r;
                scratch.clear();
                scratch.resize(rows * cols, 0.0);
                let mut m =
                    ArrayViewMut2::from_shape((rows, cols), &mut scratch[..]).map_err(shape_err)?;
                general_mat_mul(1.0, &p, &q.t(), 0.0, &mut m);
                apply(offset, scratch);
            }
        }
    }
    Ok(())
}

/// The rank a group uses at upload ratio `ratio` when `rank` stands for `target`: the same
/// proportion GDTopK applies to k (the `speed` policy's fastest group sends least, the
/// warm-up starts dense), at least 1.
pub fn rank_for_ratio(rank: usize, ratio: f64, target: f64) -> usize {
    let scaled = rank as f64 * ratio / target;
    if scaled.is_finite() {
        (scaled.round() as usize).max(1)
    } else {
        rank.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shapes() -> Vec<TensorShape> {
        vec![
            TensorShape::new(0..120, &[6, 4, 5]),  // matrix 6 x 20
            TensorShape::new(120..126, &[6]),      // bias
            TensorShape::new(126..426, &[30, 10]), // matrix 30 x 10
            TensorShape::new(426..430, &[2, 2]),   // too small to gain
        ]
    }

    /// `rows x cols` of rank `rank` (a sum of `rank` random outer products).
    fn low_rank_matrix(rng: &mut ChaCha8Rng, rows: usize, cols: usize, rank: usize) -> Vec<f32> {
        let mut m = vec![0.0f32; rows * cols];
        for _ in 0..rank {
            let u: Vec<f32> = (0..rows).map(|_| rng.gen_range(-1.0..1.0)).collect();
            let v: Vec<f32> = (0..cols).map(|_| rng.gen_range(-1.0..1.0)).collect();
            for i in 0..rows {
                for j in 0..cols {
                    m[i * cols + j] += u[i] * v[j];
                }
            }
        }
        m
    }

    fn round_trip(psgd: &mut PowerSgd, layout: &LowRankLayout, unsent: &[f32]) -> Vec<f32> {
        let mut payload = Vec::new();
        psgd.compress(unsent, layout, &mut payload).unwrap();
        assert_eq!(payload.len(), layout.payload_len());
        let mut out = vec![0.0f32; unsent.len()];
        let mut scratch = Vec::new();
        reconstruct(layout, &payload, &mut scratch, |offset, vals| {
            out[offset..offset + vals.len()].copy_from_slice(vals)
        })
        .unwrap();
        out
    }

    #[test]
    fn plan_sends_matrices_low_rank_and_the_rest_dense() {
        let layout = LowRankLayout::new(&shapes(), 432, 2);
        assert_eq!(
            layout.blocks,
            vec![
                Block::LowRank {
                    offset: 0,
                    rows: 6,
                    cols: 20
                },
                Block::Dense {
                    offset: 120,
                    len: 6
                },
                Block::LowRank {
                    offset: 126,
                    rows: 30,
                    cols: 10
                },
                // The 2 x 2 matrix and the 2 values no tensor covers, merged.
                Block::Dense {
                    offset: 426,
                    len: 6
                },
            ]
        );
        assert_eq!(layout.payload_len(), 26 * 2 + 6 + 40 * 2 + 6);
        assert_eq!(layout.low_rank_values(), 420);
        // At rank 5 the 6 x 20 matrix gains nothing ((6 + 20) * 5 > 120): dense.
        let layout = LowRankLayout::new(&shapes(), 430, 5);
        assert_eq!(
            layout.blocks[0],
            Block::Dense {
                offset: 0,
                len: 126
            }
        );
        assert_eq!(layout.payload_len(), 126 + 40 * 5 + 4);
    }

    #[test]
    fn reconstructs_matrices_of_rank_at_most_r_exactly() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        for (r, true_rank) in [(1, 1), (2, 1), (2, 2), (3, 3), (3, 2)] {
            let mut unsent = low_rank_matrix(&mut rng, 6, 20, true_rank);
            unsent.extend((0..6).map(|i| i as f32 * 0.5));
            unsent.extend(low_rank_matrix(&mut rng, 30, 10, true_rank));
            unsent.extend([1.0, -2.0, 3.0, 0.25]);
            let layout = LowRankLayout::new(&shapes(), 430, r);
            let mut psgd = PowerSgd::new(r as u64);
            let got = round_trip(&mut psgd, &layout, &unsent);
            for (i, (a, b)) in got.iter().zip(&unsent).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                    "r {r} rank {true_rank} index {i}: {a} vs {b}"
                );
            }
        }
    }

    #[test]
    fn warm_start_converges_on_a_fixed_matrix_and_survives_rank_changes() {
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        // A full-rank matrix: each exchange projects it on a better rank-2 subspace.
        let unsent: Vec<f32> = (0..430).map(|_| rng.gen_range(-1.0..1.0)).collect();
        let mut psgd = PowerSgd::new(1);
        let error = |psgd: &mut PowerSgd, r: usize| {
            let layout = LowRankLayout::new(&shapes(), 430, r);
            let got = round_trip(psgd, &layout, &unsent);
            got[126..426]
                .iter()
                .zip(&unsent[126..426])
                .map(|(a, b)| (a - b).powi(2))
                .sum::<f32>()
        };
        let first = error(&mut psgd, 2);
        let mut last = first;
        for _ in 0..10 {
            last = error(&mut psgd, 2);
        }
        assert!(
            last <= first,
            "power iterations made it worse: {first} -> {last}"
        );
        // A larger then a smaller rank reuse the warm columns they can.
        assert!(error(&mut psgd, 3) <= last + 1e-4);
        assert!(error(&mut psgd, 1).is_finite());
    }

    #[test]
    fn degenerate_inputs_stay_finite() {
        let layout = LowRankLayout::new(&shapes(), 430, 2);
        let mut psgd = PowerSgd::new(5);
        // Zero: nothing to send, and the next non-zero change is still found.
        let zero = vec![0.0f32; 430];
        assert_eq!(round_trip(&mut psgd, &layout, &zero), zero);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut rank_one = low_rank_matrix(&mut rng, 6, 20, 1);
        rank_one.resize(430, 0.0);
        let got = round_trip(&mut psgd, &layout, &rank_one);
        for (a, b) in got.iter().zip(&rank_one) {
            assert!((a - b).abs() < 1e-5);
        }
        // Rank-deficient: identical rows, and a single non-zero entry.
        let mut same_rows = vec![0.0f32; 430];
        for i in 0..6 {
            for j in 0..20 {
                same_rows[i * 20 + j] = j as f32;
            }
        }
        same_rows[200] = 7.0;
        let got = round_trip(&mut psgd, &layout, &same_rows);
        assert!(got.iter().all(|x| x.is_finite()));
        for (a, b) in got.iter().zip(&same_rows) {
            assert!((a - b).abs() < 1e-4, "{a} vs {b}");
        }
    }

    #[test]
    fn non_finite_input_is_an_error_with_its_index() {
        let layout = LowRankLayout::new(&shapes(), 430, 2);
        let mut psgd = PowerSgd::new(5);
        let mut unsent = vec![0.5f32; 430];
        unsent[200] = f32::NAN;
        let mut payload = vec![1.0];
        let err = psgd.compress(&unsent, &layout, &mut payload).unwrap_err();
        assert!(matches!(err, CompressError::NonFinite { index: 200, .. }));
        assert!(payload.is_empty());
        // Finite input whose factors overflow: named by the tensor it came from.
        let mut unsent = vec![0.0f32; 430];
        unsent[126..426].iter_mut().for_each(|x| *x = 3e38);
        let err = psgd.compress(&unsent, &layout, &mut payload).unwrap_err();
        assert!(
            matches!(err, CompressError::NonFinite { index: 126, .. }),
            "{err:?}"
        );
        // A payload of the wrong length is refused.
        let mut scratch = Vec::new();
        assert!(reconstruct(&layout, &[0.0; 3], &mut scratch, |_, _| {}).is_err());
    }

    #[test]
    fn rank_follows_the_ratio_like_k() {
        assert_eq!(rank_for_ratio(4, 0.015, 0.015), 4);
        assert_eq!(rank_for_ratio(4, 0.0075, 0.015), 2);
        assert_eq!(rank_for_ratio(4, 0.001, 0.015), 1);
        assert_eq!(rank_for_ratio(4, 1.0, 0.015), 267);
        assert_eq!(rank_for_ratio(4, f64::NAN, 0.015), 4);
    }
}
