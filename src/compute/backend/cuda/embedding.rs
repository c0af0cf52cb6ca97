//! Embedding lookup and its scatter-add backward (kernels/embedding.cu); the token ids
//! are checked against the vocabulary on the host and copied to the device per call.

use cudarc::driver::CudaSlice;

use super::error::check_below;
use super::kernels::entry;
use super::launch::{elements, launch};
use super::{Cuda, CudaError};
use crate::compute::backend::{EmbeddingDims, Span};

type Buf = CudaSlice<f32>;

/// Rows `first_row..first_row + ids.len()` of `out` = the table's rows `ids`.
pub(super) fn embedding_forward(
    cuda: &Cuda,
    out: &mut Buf,
    ids: &[u32],
    first_row: usize,
    params: &Buf,
    at: &Span,
    dims: &EmbeddingDims,
) -> Result<(), CudaError> {
    check_below("token id", ids, dims.vocab)?;
    let dev_ids = cuda.upload_new(ids)?;
    let table = params.slice(at.weight.clone());
    let (first, count, dim) = (first_row as u64, ids.len() as u64, dims.dim as u64);
    launch!(
        cuda,
        entry::EMBEDDING_FORWARD,
        elements(ids.len() * dims.dim),
        out,
        &dev_ids,
        &first,
        &count,
        &table,
        &dim
    )
}

/// The table's gradient row `ids[r]` += `dout` row `r`.
pub(super) fn embedding_backward(
    cuda: &Cuda,
    grads: &mut Buf,
    dout: &Buf,
    ids: &[u32],
    at: &Span,
    dims: &EmbeddingDims,
) -> Result<(), CudaError> {
    check_below("token id", ids, dims.vocab)?;
    let dev_ids = cuda.upload_new(ids)?;
    let mut table = grads.slice_mut(at.weight.clone());
    let (count, dim) = (ids.len() as u64, dims.dim as u64);
    launch!(
        cuda,
        entry::EMBEDDING_BACKWARD,
        elements(ids.len() * dims.dim),
        &mut table,
        dout,
        &dev_ids,
        &count,
        &dim
    )
}
