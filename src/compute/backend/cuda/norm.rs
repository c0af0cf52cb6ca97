//! Batch norm (kernels/norm.cu): per-channel statistics in f64, one block per channel,
//! then the element-wise affine map; the backward pass likewise reduces per channel,
//! then maps every input.

use cudarc::driver::{CudaSlice, CudaView, CudaViewMut};

use super::kernels::entry;
use super::launch::{elements, launch, per_row};
use super::{Cuda, CudaError};
use crate::compute::backend::{BatchNormDims, BatchNormMode, Span};

type Buf = CudaSlice<f32>;

/// The view of `buf` from a span's weight on, and the offset of its bias in that view:
/// kernels that update both (batch norm's running mean and variance, its gradients)
/// take one pointer and the offset, as two mutable views of one buffer cannot coexist.
fn from_weight<'a>(
    buf: &'a mut Buf,
    at: &Span,
    what: &'static str,
) -> Result<(CudaViewMut<'a, f32>, u64), CudaError> {
    match &at.bias {
        Some(bias) if bias.start >= at.weight.end => {
            let offset = (bias.start - at.weight.start) as u64;
            Ok((buf.slice_mut(at.weight.start..bias.end), offset))
        }
        _ => Err(CudaError::NoBias { what }),
    }
}

/// The views of a span's weight and of the range after it.
fn weight_and_bias<'a>(
    buf: &'a Buf,
    at: &Span,
    what: &'static str,
) -> Result<(CudaView<'a, f32>, CudaView<'a, f32>), CudaError> {
    let bias = at.bias.clone().ok_or(CudaError::NoBias { what })?;
    Ok((buf.slice(at.weight.clone()), buf.slice(bias)))
}

/// Normalises with the batch's statistics (training: saved gets the batch mean and
/// 1/std, the running ones are updated) or with the running ones (evaluation).
#[allow(clippy::too_many_arguments)]
pub(super) fn batchnorm_forward(
    cuda: &Cuda,
    out: &mut Buf,
    saved: &mut Buf,
    state: &mut Buf,
    inp: &Buf,
    params: &Buf,
    at: &Span,
    stats: &Span,
    dims: &BatchNormDims,
    mode: BatchNormMode,
) -> Result<(), CudaError> {
    let BatchNormDims {
        batch: n,
        channels: ch,
        plane,
        eps,
    } = *dims;
    let (n64, c64, p64) = (n as u64, ch as u64, plane as u64);
    let (gamma, beta) = weight_and_bias(params, at, "batch norm's scale and shift")?;
    let values = elements(n * ch * plane);
    match mode {
        BatchNormMode::Train { momentum } => {
            let (mut running, var_at) = from_weight(state, stats, "batch norm's statistics")?;
            launch!(
                cuda,
                entry::BATCHNORM_STATS,
                per_row(ch),
                &mut *saved,
                &mut running,
                &var_at,
                inp,
                &n64,
                &c64,
                &p64,
                &eps,
                &momentum
            )?;
            let saved = &*saved;
            launch!(
                cuda,
                entry::BATCHNORM_APPLY,
                values,
                out,
                inp,
                saved,
                &gamma,
                &beta,
                &n64,
                &c64,
                &p64
            )
        }
        BatchNormMode::Eval => {
            let (mean, var) = weight_and_bias(state, stats, "batch norm's statistics")?;
            launch!(
                cuda,
                entry::BATCHNORM_APPLY_EVAL,
                values,
                out,
                inp,
                &mean,
                &var,
                &gamma,
                &beta,
                &n64,
                &c64,
                &p64,
                &eps
            )
        }
    }
}

/// Accumulates gamma's and beta's gradients (per-channel sums) and writes dinp.
#[allow(clippy::too_many_arguments)]
pub(super) fn batchnorm_backward(
    cuda: &Cuda,
    dinp: &mut Buf,
    grads: &mut Buf,
    dout: &Buf,
    inp: &Buf,
    saved: &Buf,
    params: &Buf,
    at: &Span,
    dims: &BatchNormDims,
) -> Result<(), CudaError> {
    let BatchNormDims {
        batch: n,
        channels: ch,
        plane,
        ..
    } = *dims;
    let (n64, c64, p64) = (n as u64, ch as u64, plane as u64);
    let mut sums = cuda.zeros::<f32>(2 * ch)?;
    {
        let (mut dparams, beta_at) = from_weight(grads, at, "batch norm's gradients")?;
        launch!(
            cuda,
            entry::BATCHNORM_BACKWARD_SUMS,
            per_row(ch),
            &mut sums,
            &mut dparams,
            &beta_at,
            dout,
            inp,
            saved,
            &n64,
            &c64,
            &p64
        )?;
    }
    let gamma = params.slice(at.weight.clone());
    launch!(
        cuda,
        entry::BATCHNORM_BACKWARD_INPUT,
        elements(n * ch * plane),
        dinp,
        dout,
        inp,
        saved,
        &sums,
        &gamma,
        &n64,
        &c64,
        &p64
    )
}
