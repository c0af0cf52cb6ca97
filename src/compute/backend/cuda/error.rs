//! [`CudaError`]: why the CUDA backend could not start on a GPU, or why one of its
//! operations failed, one variant per kind of failure (the driver, NVRTC, cuBLAS, or an
//! input the kernels cannot take), each naming what failed: the kernel, the kernel file,
//! the transfer or the GEMM's shape.

use std::sync::Arc;

use cudarc::cublas::result::CublasError;
use cudarc::driver::DriverError;

use super::kernels::KernelError;

/// A failure of the CUDA backend. Cloneable, so that the first failure of an operation can
/// be kept and reported at every later check (see failure.rs).
#[derive(Debug, Clone, thiserror::Error)]
pub enum CudaError {
    /// No usable driver or GPU on this node ([`super::device::unavailable`]'s reason).
    #[error("{0}")]
    Unavailable(String),
    /// The driver refused a context on the GPU.
    #[error("CUDA device {ordinal}: cannot create a context: {source}")]
    Context { ordinal: usize, source: DriverError },
    /// A property of the GPU could not be read.
    #[error("CUDA device {ordinal}: cannot read its {property}: {source}")]
    Query {
        ordinal: usize,
        property: &'static str,
        source: DriverError,
    },
    /// NVRTC is missing or refused a kernel file, or the PTX cache failed.
    #[error(transparent)]
    Kernels(Arc<KernelError>),
    /// The driver refused a kernel file's PTX.
    #[error("kernels/{file}.cu: the driver refused its PTX for {arch}: {source}")]
    LoadModule {
        file: &'static str,
        arch: String,
        source: DriverError,
    },
    /// A kernel of a file is missing from its loaded module.
    #[error("kernels/{file}.cu: no kernel {kernel} in its module: {source}")]
    LoadFunction {
        file: &'static str,
        kernel: &'static str,
        source: DriverError,
    },
    /// cuBLAS could not start.
    #[error("cuBLAS: cannot start on CUDA device {ordinal}: {source}")]
    BlasInit { ordinal: usize, source: CublasError },
    /// A kernel was launched that the backend did not load (the table and the generated
    /// list disagree: a bug, which the kernels' unit tests guard against).
    #[error("kernel {kernel} is not loaded")]
    NotLoaded { kernel: &'static str },
    /// The driver refused a kernel launch (or reported an earlier asynchronous fault).
    #[error("kernel {kernel}: launch failed: {source}")]
    Launch {
        kernel: &'static str,
        source: DriverError,
    },
    /// cuBLAS refused a GEMM of `[m x k]` by `[k x n]`.
    #[error("cuBLAS SGEMM of [{m} x {k}] by [{k} x {n}] failed: {source}")]
    Gemm {
        m: usize,
        n: usize,
        k: usize,
        source: CublasError,
    },
    /// Device memory could not be allocated (typically: the GPU's memory is full).
    #[error("allocation of {bytes} bytes of device memory failed: {source}")]
    Alloc { bytes: usize, source: DriverError },
    /// A copy between host and device, or within the device, failed.
    #[error("{transfer} of {len} values failed: {source}")]
    Transfer {
        transfer: &'static str,
        len: usize,
        source: DriverError,
    },
    /// Waiting for the queued work failed: one of the operations since the last wait
    /// faulted on the device.
    #[error("waiting for the device failed: {source}")]
    Synchronize { source: DriverError },
    /// A driver call that cudarc could not report when it ran (freeing device memory)
    /// failed.
    #[error("a deferred driver call (freeing device memory) failed: {source}")]
    Deferred { source: DriverError },
    /// A host value an operation hands to its kernels is outside what they can index: a
    /// label, a token id or a sparse index (checked before the launch, which would read or
    /// write outside a buffer).
    #[error("{what} {value} is outside 0..{bound}")]
    OutOfRange {
        what: &'static str,
        value: u64,
        bound: u64,
    },
    /// A layer's span lacks the second range after its weight that the operation reads
    /// (a bias, a shift, a running variance): a bug in the layer that declared it.
    #[error("{what}: the span has no range after its weight")]
    NoBias { what: &'static str },
    /// An LSTM forward was asked for steps outside the sequence its buffers hold.
    #[error("LSTM steps {first}..{end} are not a non-empty range within 0..{total}")]
    LstmSteps {
        first: usize,
        end: usize,
        total: usize,
    },
    /// An operation was given fewer (or, for one value per index, other) values than it
    /// needs.
    #[error("{what}: {wanted} values needed, {len} given")]
    Length {
        what: &'static str,
        wanted: usize,
        len: usize,
    },
}

impl From<KernelError> for CudaError {
    fn from(e: KernelError) -> Self {
        CudaError::Kernels(Arc::new(e))
    }
}

/// The first of `values` at or above `bound`, as [`CudaError::OutOfRange`].
pub(super) fn check_below<T: Copy + Into<u64>>(
    what: &'static str,
    values: &[T],
    bound: usize,
) -> Result<(), CudaError> {
    match values
        .iter()
        .map(|&v| v.into())
        .find(|&v| v >= bound as u64)
    {
        Some(value) => Err(CudaError::OutOfRange {
            what,
            value,
            bound: bound as u64,
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_input_out_of_range_is_named_with_its_bound() {
        assert!(check_below("label", &[0u8, 9], 10).is_ok());
        let e = check_below("label", &[3u8, 12, 40], 10).unwrap_err();
        assert_eq!(e.to_string(), "label 12 is outside 0..10");
        let e = check_below("token id", &[7u32], 0).unwrap_err();
        assert_eq!(e.to_string(), "token id 7 is outside 0..0");
    }

    #[test]
    fn an_nvrtc_failure_reads_as_the_kernel_error() {
        let e = CudaError::from(KernelError::NoNvrtc);
        assert_eq!(e.to_string(), KernelError::NoNvrtc.to_string());
    }
}
