//! GEMM through ndarray on the system OpenBLAS, and its thread count.

// Links the system OpenBLAS that ndarray's `blas` feature calls.
extern crate blas_src;

use ndarray::linalg::general_mat_mul;
use ndarray::{ArrayView2, ArrayViewMut2, ShapeBuilder};

use crate::compute::backend::GemmDims;

extern "C" {
    fn openblas_set_num_threads(n: std::ffi::c_int);
}

/// Sets the number of threads OpenBLAS uses for one GEMM.
pub(super) fn set_blas_threads(n: usize) {
    let n = n.clamp(1, 1024) as std::ffi::c_int;
    // SAFETY: plain setter of OpenBLAS's thread count; no pointers involved.
    unsafe { openblas_set_num_threads(n) }
}

/// Row-major `rows x cols` view of `data`, optionally transposed.
fn view(data: &[f32], rows: usize, cols: usize, transposed: bool) -> ArrayView2<'_, f32> {
    if transposed {
        // Stored as cols x rows; read it as its transpose.
        ArrayView2::from_shape((rows, cols).strides((1, rows)), &data[..rows * cols])
            .expect("gemm operand shape matches its slice")
    } else {
        ArrayView2::from_shape((rows, cols), &data[..rows * cols])
            .expect("gemm operand shape matches its slice")
    }
}

/// `c = alpha * op(a) * op(b) + beta * c`, shaped as `dims` says.
pub fn gemm(dims: GemmDims, alpha: f32, a: &[f32], b: &[f32], beta: f32, c: &mut [f32]) {
    let GemmDims {
        m,
        n,
        k,
        trans_a,
        trans_b,
    } = dims;
    let a = view(a, m, k, trans_a);
    let b = view(b, k, n, trans_b);
    let mut c = ArrayViewMut2::from_shape((m, n), &mut c[..m * n])
        .expect("gemm output shape matches its slice");
    general_mat_mul(alpha, &a, &b, beta, &mut c);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemm_matches_naive_for_all_transpositions() {
        let (m, n, k) = (3, 4, 5);
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
            gemm(dims, 2.0, &a, &b, 0.5, &mut c);
            for r in 0..m {
                for col in 0..n {
                    let want: f32 = 0.5 + 2.0 * (0..k).map(|j| at(r, j) * bt(j, col)).sum::<f32>();
                    assert!((c[r * n + col] - want).abs() < 1e-5, "ta={ta} tb={tb}");
                }
            }
        }
    }
}
