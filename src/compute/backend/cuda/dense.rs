//! Fully connected layers: one cuBLAS GEMM per product, the bias broadcast and reduced
//! over rows by kernels/elementwise.cu.

use cudarc::driver::CudaSlice;

use super::gemm::gemm;
use super::kernels::entry;
use super::launch::{elements, launch, per_row};
use super::{Cuda, CudaError};
use crate::compute::backend::{GemmDims, LinearDims, Span};

type Buf = CudaSlice<f32>;

/// out: `[n x out_f]` = inp weight^T + bias.
pub(super) fn linear_forward(
    cuda: &Cuda,
    out: &mut Buf,
    inp: &Buf,
    params: &Buf,
    at: &Span,
    dims: &LinearDims,
) -> Result<(), CudaError> {
    let LinearDims {
        batch: n,
        in_f,
        out_f,
    } = *dims;
    let w = params.slice(at.weight.clone());
    let product = GemmDims::new(n, out_f, in_f).b_transposed();
    gemm(cuda, product, 1.0, inp, &w, 0.0, out)?;
    if let Some(bias) = &at.bias {
        let b = params.slice(bias.clone());
        let (rows, cols) = (n as u64, out_f as u64);
        launch!(
            cuda,
            entry::BIAS_ADD_ROWS,
            elements(n * out_f),
            out,
            &b,
            &rows,
            &cols
        )?;
    }
    Ok(())
}

/// Accumulates the weight (`dout^T inp`) and bias (column sums of dout) gradients; writes
/// dinp = dout weight when given.
#[allow(clippy::too_many_arguments)]
pub(super) fn linear_backward(
    cuda: &Cuda,
    dinp: Option<&mut Buf>,
    grads: &mut Buf,
    dout: &Buf,
    inp: &Buf,
    params: &Buf,
    at: &Span,
    dims: &LinearDims,
) -> Result<(), CudaError> {
    let LinearDims {
        batch: n,
        in_f,
        out_f,
    } = *dims;
    {
        let mut dw = grads.slice_mut(at.weight.clone());
        let product = GemmDims::new(out_f, in_f, n).a_transposed();
        gemm(cuda, product, 1.0, dout, inp, 1.0, &mut dw)?;
    }
    if let Some(bias) = &at.bias {
        let mut db = grads.slice_mut(bias.clone());
        let (rows, cols) = (n as u64, out_f as u64);
        launch!(
            cuda,
            entry::BIAS_GRAD_ROWS,
            per_row(out_f),
            &mut db,
            dout,
            &rows,
            &cols
        )?;
    }
    if let Some(dinp) = dinp {
        let w = params.slice(at.weight.clone());
        gemm(
            cuda,
            GemmDims::new(n, in_f, out_f),
            1.0,
            dout,
            &w,
            0.0,
            dinp,
        )?;
    }
    Ok(())
}
