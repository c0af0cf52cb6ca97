//! GEMM through ndarray on the system OpenBLAS, held to one thread.
//!
//! OpenBLAS's result depends on how many threads it splits a product over (its blocks then
//! end at other places), and its thread count is one setting for the whole process. So
//! OpenBLAS always runs on one thread ([`gemm`]), and a product large enough to share is
//! cut by the pool into blocks of rows fixed by its shape and the pool's thread count
//! ([`gemm_shared`]): the same step on the same thread count gives the same bits, whichever
//! thread computes a block and whatever else runs beside it.

// Links the system OpenBLAS that ndarray's `blas` feature calls.
extern crate blas_src;

use std::sync::Once;

use ndarray::linalg::general_mat_mul;
use ndarray::{ArrayView2, ArrayViewMut2, ShapeBuilder};

use super::threads::{for_parts, threads, Units};
use crate::compute::backend::GemmDims;

extern "C" {
    fn openblas_set_num_threads(n: std::ffi::c_int);
}

/// Products of fewer multiply-adds (`m * n * k`) run on the calling thread: sharing them
/// costs about what it saves (OpenBLAS's own threshold for using its threads).
pub const MIN_SHARED_PRODUCT: usize = 1 << 18;

/// Holds OpenBLAS to one thread, once per process, before its first product.
pub(super) fn one_blas_thread() {
    static ONCE: Once = Once::new();
    // SAFETY: plain setter of OpenBLAS's thread count; no pointers involved.
    ONCE.call_once(|| unsafe { openblas_set_num_threads(1) });
}

/// Row-major `rows x cols` view of `data` whose rows start `ld` values apart (its columns,
/// when `transposed`: stored `cols x rows`).
fn view(
    data: &[f32],
    rows: usize,
    cols: usize,
    transposed: bool,
    ld: usize,
) -> ArrayView2<'_, f32> {
    let (shape, len) = if transposed {
        (
            (rows, cols).strides((1, ld)),
            cols.saturating_sub(1) * ld + rows,
        )
    } else {
        (
            (rows, cols).strides((ld, 1)),
            rows.saturating_sub(1) * ld + cols,
        )
    };
    let len = if rows == 0 || cols == 0 { 0 } else { len };
    ArrayView2::from_shape(shape, &data[..len]).expect("gemm operand shape matches its slice")
}

/// `c = alpha * op(a) * op(b) + beta * c`, shaped as `dims` says, on this thread.
pub fn gemm(dims: GemmDims, alpha: f32, a: &[f32], b: &[f32], beta: f32, c: &mut [f32]) {
    let GemmDims { m, k, trans_a, .. } = dims;
    let lda = if trans_a { m } else { k };
    gemm_rows(dims, (0, m, lda), alpha, a, b, beta, c);
}

/// Rows `first..first + rows` of [`gemm`]'s product into `c` (those rows alone), `op(a)`'s
/// rows `lda` apart in storage.
#[allow(clippy::too_many_arguments)]
fn gemm_rows(
    dims: GemmDims,
    (first, rows, lda): (usize, usize, usize),
    alpha: f32,
    a: &[f32],
    b: &[f32],
    beta: f32,
    c: &mut [f32],
) {
    one_blas_thread();
    let GemmDims {
        n,
        k,
        trans_a,
        trans_b,
        ..
    } = dims;
    let a_from = if trans_a { first } else { first * lda };
    let a = view(&a[a_from..], rows, k, trans_a, lda);
    let b = view(b, k, n, trans_b, if trans_b { k } else { n });
    let mut c = ArrayViewMut2::from_shape((rows, n), &mut c[..rows * n])
        .expect("gemm output shape matches its slice");
    general_mat_mul(alpha, &a, &b, beta, &mut c);
}

/// [`gemm`] shared among the pool's threads by blocks of `c`'s rows, one block a thread,
/// when the product is large enough ([`MIN_SHARED_PRODUCT`]): the blocks depend on the
/// shape and [`threads()`] alone, so the result does too. For the products a step runs
/// outside the pool's tasks (the dense layers', the LSTM's).
pub fn gemm_shared(dims: GemmDims, alpha: f32, a: &[f32], b: &[f32], beta: f32, c: &mut [f32]) {
    let GemmDims {
        m, n, k, trans_a, ..
    } = dims;
    let blocks = threads().min(m);
    if blocks < 2 || m * n * k < MIN_SHARED_PRODUCT {
        return gemm(dims, alpha, a, b, beta, c);
    }
    let lda = if trans_a { m } else { k };
    let per = m.div_ceil(blocks);
    let c = Units::new(&mut c[..m * n], per * n);
    for_parts(m.div_ceil(per), [c], &|units, [c]| {
        for (u, c) in units.zip(c.chunks_mut(per * n)) {
            let (first, rows) = (u * per, per.min(m - u * per));
            gemm_rows(dims, (first, rows, lda), alpha, a, b, beta, c);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemm_matches_naive_for_all_transpositions() {
        matches_naive(3, 4, 5, gemm);
    }

    #[test]
    fn a_shared_gemm_matches_naive_for_all_transpositions() {
        super::super::threads::set_threads(2);
        // 67 rows in two blocks of 34 and 33, above the size from which it is shared.
        let (m, n, k) = (67, 70, 60);
        assert!(m * n * k >= MIN_SHARED_PRODUCT);
        matches_naive(m, n, k, gemm_shared);
    }

    /// A GEMM as [`gemm`] takes its arguments.
    type Product = fn(GemmDims, f32, &[f32], &[f32], f32, &mut [f32]);

    /// `product` against the naive triple loop, for every transposition.
    fn matches_naive(m: usize, n: usize, k: usize, product: Product) {
        let a: Vec<f32> = (0..m * k).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..k * n).map(|i| (i as f32 * 0.71).cos()).collect();
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let at = |r: usize, c: usize| if ta { a[c * m + r] } else { a[r * k + c] };
            let bt = |r: usize, c: usize| if tb { b[c * k + r] } else { b[r * n + c] };
            let mut c = vec![1.0f32; m * n];
            let dims = GemmDims {
                m,
                n,
                k,
                trans_a: ta,
                trans_b: tb,
            };
            product(dims, 2.0, &a, &b, 0.5, &mut c);
            for r in 0..m {
                for col in 0..n {
                    let want: f32 = 0.5 + 2.0 * (0..k).map(|j| at(r, j) * bt(j, col)).sum::<f32>();
                    let tolerance = 1e-5 * (k as f32);
                    assert!((c[r * n + col] - want).abs() < tolerance, "ta={ta} tb={tb}");
                }
            }
        }
    }
}
