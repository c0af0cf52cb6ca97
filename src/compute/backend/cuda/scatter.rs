//! Sparse updates of a device buffer from host (index, value) pairs
//! (kernels/sparse.cu): the pairs are checked, copied up, and applied in one launch.

use cudarc::driver::CudaSlice;

use super::error::check_below;
use super::kernels::entry;
use super::launch::{elements, launch};
use super::{Cuda, CudaError};

type Buf = CudaSlice<f32>;

impl Cuda {
    /// `dense[index[j]] = values[j]` (distinct indices).
    pub fn scatter_set(
        &self,
        dense: &mut Buf,
        index: &[u32],
        values: &[f32],
    ) -> Result<(), CudaError> {
        if index.is_empty() {
            return Ok(());
        }
        let (idx, vals, k) = self.upload_pairs(dense.len(), index, values)?;
        launch!(
            self,
            entry::SCATTER_SET,
            elements(index.len()),
            dense,
            &idx,
            &vals,
            &k
        )
    }

    /// `dense[index[j]] += factor * values[j]`.
    pub fn scatter_add(
        &self,
        dense: &mut Buf,
        index: &[u32],
        values: &[f32],
        factor: f32,
    ) -> Result<(), CudaError> {
        if index.is_empty() {
            return Ok(());
        }
        let (idx, vals, k) = self.upload_pairs(dense.len(), index, values)?;
        launch!(
            self,
            entry::SCATTER_ADD,
            elements(index.len()),
            dense,
            &idx,
            &vals,
            &factor,
            &k
        )
    }

    /// The pairs of a sparse update of a buffer of `bound` values on the device, after
    /// checking them, and their count.
    fn upload_pairs(
        &self,
        bound: usize,
        index: &[u32],
        values: &[f32],
    ) -> Result<(CudaSlice<u32>, Buf, u64), CudaError> {
        if values.len() != index.len() {
            return Err(CudaError::Length {
                what: "sparse update values, one per index",
                wanted: index.len(),
                len: values.len(),
            });
        }
        check_below("sparse index", index, bound)?;
        let idx = self.upload_new(index)?;
        let vals = self.upload_new(values)?;
        Ok((idx, vals, index.len() as u64))
    }
}
