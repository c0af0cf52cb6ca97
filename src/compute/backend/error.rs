//! [`BackendError`]: why a backend's operations stopped, as [`super::Backend::status`]
//! reports it. The CPU backend never fails; a device backend keeps its first failure and
//! reports it at the next check (see [`super::cuda`] for why).

/// A failed operation of a device backend, naming the operation and the cause.
#[derive(Debug, Clone, thiserror::Error)]
pub enum BackendError {
    /// An operation of the CUDA backend failed. `op` is the [`super::Backend`] operation
    /// (or the backend's own call) that found the failure: for a fault of an asynchronous
    /// kernel, the first one that waited for the device after it.
    #[cfg(feature = "cuda")]
    #[error("CUDA backend: {op}: {source}")]
    Cuda {
        op: &'static str,
        source: super::cuda::CudaError,
    },
}
