//! Fully connected layer.

use super::gemm::gemm_shared;
use crate::compute::backend::{GemmDims, LinearDims};

/// out: `[n x o]` = inp: `[n x i]` * weight^T + bias, weight `[o x i]`, bias `[o]`.
pub fn linear_forward(
    out: &mut [f32],
    inp: &[f32],
    weight: &[f32],
    bias: &[f32],
    dims: &LinearDims,
) {
    let LinearDims {
        batch: n,
        in_f,
        out_f,
    } = *dims;
    for row in out[..n * out_f].chunks_exact_mut(out_f) {
        row.copy_from_slice(bias);
    }
    let dims = GemmDims::new(n, out_f, in_f).b_transposed();
    gemm_shared(dims, 1.0, inp, weight, 1.0, out);
}

/// Accumulates dweight `[o x i]` and dbias `[o]`; writes dinp: `[n x i]` when given.
pub fn linear_backward(
    dinp: Option<&mut [f32]>,
    dweight: &mut [f32],
    dbias: &mut [f32],
    dout: &[f32],
    inp: &[f32],
    weight: &[f32],
    dims: &LinearDims,
) {
    let LinearDims {
        batch: n,
        in_f,
        out_f,
    } = *dims;
    let gd = GemmDims::new(out_f, in_f, n).a_transposed();
    gemm_shared(gd, 1.0, dout, inp, 1.0, dweight);
    for row in dout[..n * out_f].chunks_exact(out_f) {
        for (b, d) in dbias.iter_mut().zip(row) {
            *b += d;
        }
    }
    if let Some(dinp) = dinp {
        gemm_shared(GemmDims::new(n, in_f, out_f), 1.0, dout, weight, 0.0, dinp);
    }
}
