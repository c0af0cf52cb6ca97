//! 2-D convolution as one GEMM per pass over the whole batch: im2col unfolds the batch
//! into `[C*k*k x n*OH*OW]` (kernels/conv.cu), and the GEMM's channel-major rows are
//! permuted to and from the NCHW layout around it.

use cudarc::driver::{CudaSlice, CudaViewMut};

use super::gemm::gemm;
use super::kernels::entry;
use super::launch::{elements, launch, per_row};
use super::{Cuda, CudaError};
use crate::compute::backend::{Conv2dDims, GemmDims, Span, Window2d};

type Buf = CudaSlice<f32>;

/// The unfolded batch `[C*k*k x n*OH*OW]`, then the GEMM's output (forward) or the
/// output gradient (backward) as `[out_c x n*OH*OW]`.
pub(super) fn conv2d_scratch_len(dims: &Conv2dDims) -> usize {
    let g = &dims.window;
    let cols = dims.batch * g.col_cols();
    g.col_rows() * cols + dims.out_c * cols
}

/// The geometry arguments of conv.cu's kernels: channels, height, width, kernel, stride,
/// padding.
fn window_args(g: &Window2d) -> (u64, u64, u64, u64, u64, u64) {
    (
        g.channels as u64,
        g.height as u64,
        g.width as u64,
        g.kernel as u64,
        g.stride as u64,
        g.pad as u64,
    )
}

/// Unfolds the `n` images of `inp` side by side into `col`.
fn im2col(
    cuda: &Cuda,
    col: &mut CudaViewMut<'_, f32>,
    inp: &Buf,
    n: usize,
    g: &Window2d,
) -> Result<(), CudaError> {
    let ld = (n * g.col_cols()) as u64;
    let m = n as u64;
    let (c, h, w, k, s, p) = window_args(g);
    let values = elements(g.col_rows() * n * g.col_cols());
    launch!(
        cuda,
        entry::IM2COL,
        values,
        col,
        &ld,
        inp,
        &m,
        &c,
        &h,
        &w,
        &k,
        &s,
        &p
    )
}

/// out: `[n x out_c x OH x OW]` = weight `[out_c x C*k*k]` im2col(inp) + bias.
pub(super) fn conv2d_forward(
    cuda: &Cuda,
    out: &mut Buf,
    scratch: &mut Buf,
    inp: &Buf,
    params: &Buf,
    at: &Span,
    dims: &Conv2dDims,
) -> Result<(), CudaError> {
    let (n, out_c, g) = (dims.batch, dims.out_c, &dims.window);
    let (rows, pix) = (g.col_rows(), g.col_cols());
    let cols = n * pix;
    let (mut col, mut tmp) = scratch.split_at_mut(rows * cols);
    im2col(cuda, &mut col, inp, n, g)?;
    let w = params.slice(at.weight.clone());
    gemm(
        cuda,
        GemmDims::new(out_c, cols, rows),
        1.0,
        &w,
        &col,
        0.0,
        &mut tmp,
    )?;
    let (n64, c64, p64) = (n as u64, out_c as u64, pix as u64);
    let values = elements(n * out_c * pix);
    launch!(
        cuda,
        entry::ROWS_TO_PLANES,
        values,
        &mut *out,
        &mut tmp,
        &n64,
        &c64,
        &p64
    )?;
    if let Some(bias) = &at.bias {
        let b = params.slice(bias.clone());
        launch!(
            cuda,
            entry::BIAS_ADD_PLANES,
            values,
            out,
            &b,
            &n64,
            &c64,
            &p64
        )?;
    }
    Ok(())
}

/// Accumulates the bias and weight gradients; writes dinp when given (col2im of
/// weight^T times the output gradient).
#[allow(clippy::too_many_arguments)]
pub(super) fn conv2d_backward(
    cuda: &Cuda,
    dinp: Option<&mut Buf>,
    grads: &mut Buf,
    scratch: &mut Buf,
    dout: &Buf,
    inp: &Buf,
    params: &Buf,
    at: &Span,
    dims: &Conv2dDims,
) -> Result<(), CudaError> {
    let (n, out_c, g) = (dims.batch, dims.out_c, &dims.window);
    let (rows, pix) = (g.col_rows(), g.col_cols());
    let cols = n * pix;
    let (n64, c64, p64) = (n as u64, out_c as u64, pix as u64);
    if let Some(bias) = &at.bias {
        let mut db = grads.slice_mut(bias.clone());
        launch!(
            cuda,
            entry::BIAS_GRAD_PLANES,
            per_row(out_c),
            &mut db,
            dout,
            &n64,
            &c64,
            &p64
        )?;
    }
    let (mut col, mut gathered) = scratch.split_at_mut(rows * cols);
    let values = elements(n * out_c * pix);
    launch!(
        cuda,
        entry::PLANES_TO_ROWS,
        values,
        &mut gathered,
        dout,
        &n64,
        &c64,
        &p64
    )?;
    im2col(cuda, &mut col, inp, n, g)?;
    {
        let mut dw = grads.slice_mut(at.weight.clone());
        let product = GemmDims::new(out_c, rows, cols).b_transposed();
        gemm(cuda, product, 1.0, &gathered, &col, 1.0, &mut dw)?;
    }
    let Some(dinp) = dinp else {
        return Ok(());
    };
    let w = params.slice(at.weight.clone());
    let product = GemmDims::new(rows, cols, out_c).a_transposed();
    gemm(cuda, product, 1.0, &w, &gathered, 0.0, &mut col)?;
    col2im(cuda, dinp, &mut col, n, g)
}

/// dinp: `[n x C x H x W]` = the sum of the unfolded gradients `col` over the windows
/// each input falls in.
fn col2im(
    cuda: &Cuda,
    dinp: &mut Buf,
    col: &mut CudaViewMut<'_, f32>,
    n: usize,
    g: &Window2d,
) -> Result<(), CudaError> {
    super::elementwise::fill(cuda, dinp, 0..n * g.in_len(), 0.0)?;
    let (ld, m) = ((n * g.col_cols()) as u64, n as u64);
    let (c, h, wd, k, s, p) = window_args(g);
    let values = elements(n * g.in_len());
    launch!(
        cuda,
        entry::COL2IM,
        values,
        dinp,
        col,
        &ld,
        &m,
        &c,
        &h,
        &wd,
        &k,
        &s,
        &p
    )
}
