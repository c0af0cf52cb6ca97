//! Softmax cross-entropy (kernels/loss.cu), plain and masked on padding: one block per
//! row writes the row's gradient, loss and hit; the host sums the rows it reads back,
//! which is the step's one wait for the device.

use cudarc::driver::CudaSlice;

use super::error::check_below;
use super::kernels::entry;
use super::launch::{launch, per_row};
use super::{Cuda, CudaError};
use crate::compute::backend::XentStats;

type Buf = CudaSlice<f32>;

/// Writes `dlogits` for the mean loss over `n` rows and returns (mean loss, rows whose
/// arg-max is the label).
pub(super) fn softmax_xent(
    cuda: &Cuda,
    dlogits: &mut Buf,
    logits: &Buf,
    labels: &[u8],
    n: usize,
    classes: usize,
) -> Result<(f32, usize), CudaError> {
    let labels = labels.get(..n).ok_or(CudaError::Length {
        what: "softmax_xent labels",
        wanted: n,
        len: labels.len(),
    })?;
    check_below("label", labels, classes)?;
    let labels32: Vec<u32> = labels.iter().map(|&l| l as u32).collect();
    let dev = cuda.upload_new(&labels32)?;
    let (mut loss, mut hit) = (cuda.zeros::<f32>(n)?, cuda.zeros::<f32>(n)?);
    let (rows, cls, weight) = (n as u64, classes as u64, 1.0 / n as f32);
    launch!(
        cuda,
        entry::SOFTMAX_XENT,
        per_row(n),
        dlogits,
        &mut loss,
        &mut hit,
        logits,
        &dev,
        &rows,
        &cls,
        &weight
    )?;
    let (total, correct) = row_totals(cuda, &loss, &hit, n)?;
    Ok(((total / n as f64) as f32, correct))
}

/// Writes `dlogits` for the mean loss over the rows not labelled `pad` (zero gradient on
/// those) and returns the loss, the hits and the counted rows.
pub(super) fn softmax_xent_masked(
    cuda: &Cuda,
    dlogits: &mut Buf,
    logits: &Buf,
    labels: &[u32],
    pad: u32,
    classes: usize,
) -> Result<XentStats, CudaError> {
    let n = labels.len();
    let counted: Vec<u32> = labels.iter().copied().filter(|&l| l != pad).collect();
    check_below("label", &counted, classes)?;
    let tokens = counted.len();
    let inv = if tokens == 0 {
        0.0
    } else {
        1.0 / tokens as f32
    };
    let dev = cuda.upload_new(labels)?;
    let (mut loss, mut hit) = (cuda.zeros::<f32>(n)?, cuda.zeros::<f32>(n)?);
    let (rows, cls) = (n as u64, classes as u64);
    launch!(
        cuda,
        entry::SOFTMAX_XENT_MASKED,
        per_row(n),
        dlogits,
        &mut loss,
        &mut hit,
        logits,
        &dev,
        &pad,
        &rows,
        &cls,
        &inv
    )?;
    let (total, correct) = row_totals(cuda, &loss, &hit, n)?;
    Ok(XentStats {
        loss: (total * inv as f64) as f32,
        correct,
        tokens,
    })
}

/// The sum of the first `n` row losses (in f64) and the count of rows hit.
fn row_totals(cuda: &Cuda, loss: &Buf, hit: &Buf, n: usize) -> Result<(f64, usize), CudaError> {
    let loss = cuda.download_vec(loss, n)?;
    let hit = cuda.download_vec(hit, n)?;
    let total = loss.iter().map(|&l| l as f64).sum();
    Ok((total, hit.iter().filter(|&&h| h > 0.5).count()))
}
