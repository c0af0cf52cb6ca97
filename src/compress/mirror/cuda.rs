//! [`CudaMirror`]: the peer view mirrored on a GPU, selected from with the CUDA backend's
//! device top-k.

use cudarc::driver::CudaSlice;

use super::MirrorDevice;
use crate::compress::CompressError;
use crate::compute::backend::cuda::{Cuda, CudaError};
use crate::compute::backend::{Backend, BackendError};

/// A group server's peer view mirrored on the GPU: the view, and room for the weights
/// uploaded per exchange, both sized by the last `load`. Selection is [`Cuda::topk`] of
/// `weights - view`; only the k pairs come back, and changed entries go up as (index,
/// value) pairs ([`Cuda::scatter_set`]).
pub struct CudaMirror {
    cuda: Cuda,
    /// `None` until the first `load`.
    buffers: Option<Buffers>,
    /// The first failure of a `set`, which the next `select` returns. (`load` goes through
    /// the backend's operations, which keep theirs in `cuda`.)
    failure: Option<CudaError>,
}

struct Buffers {
    view: CudaSlice<f32>,
    weights: CudaSlice<f32>,
    /// Values of the view (the buffers hold one at least).
    len: usize,
}

impl CudaMirror {
    /// A mirror on `cuda`, empty until the first `load`.
    pub fn new(cuda: Cuda) -> CudaMirror {
        CudaMirror {
            cuda,
            buffers: None,
            failure: None,
        }
    }
}

/// The first failure so far: a `set`'s, or that of an operation on the device (found
/// after waiting for it).
fn first_failure(cuda: &Cuda, failure: &Option<CudaError>) -> Result<(), CompressError> {
    if let Some(e) = failure {
        return Err(device_error(e));
    }
    cuda.status().map_err(|e: BackendError| device_error(&e))
}

/// A CUDA failure as the exchange reports it.
fn device_error(e: &dyn std::error::Error) -> CompressError {
    CompressError::Device(format!("the exchange's GPU selection: {e}"))
}

impl MirrorDevice for CudaMirror {
    fn load(&mut self, view: &[f32]) {
        let len = view.len();
        let buffers = match self.buffers.take() {
            Some(b) if b.len == len => b,
            _ => Buffers {
                view: self.cuda.alloc(len),
                weights: self.cuda.alloc(len),
                len,
            },
        };
        let buffers = self.buffers.insert(buffers);
        self.cuda.upload(&mut buffers.view, view);
    }

    /// Entries set before the first `load` are dropped: the load replaces them all.
    fn set(&mut self, index: &[u32], values: &[f32]) {
        let (Some(buffers), None) = (&mut self.buffers, &self.failure) else {
            return;
        };
        if let Err(e) = self.cuda.scatter_set(&mut buffers.view, index, values) {
            self.failure = Some(e);
        }
    }

    fn select(
        &mut self,
        weights: &[f32],
        k: usize,
        idx: &mut Vec<u32>,
        vals: &mut Vec<f32>,
    ) -> Result<(), CompressError> {
        let CudaMirror {
            cuda,
            buffers,
            failure,
        } = self;
        let expected = buffers.as_ref().map_or(0, |b| b.len);
        let buffers = match buffers {
            Some(b) if weights.len() == expected => b,
            _ => {
                return Err(CompressError::LengthMismatch {
                    expected,
                    got: weights.len(),
                })
            }
        };
        cuda.upload(&mut buffers.weights, weights);
        first_failure(cuda, failure)?;
        (*idx, *vals) = cuda
            .topk(&buffers.weights, Some(&buffers.view), expected, k)
            .map_err(|e| device_error(&e))?;
        Ok(())
    }
}
