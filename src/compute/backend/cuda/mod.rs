//! The CUDA side of the compute layer (cargo feature `cuda`, on by default): finding a
//! GPU for a rank, and the project's own kernels (`kernels/*.cu`) compiled with NVRTC for
//! the device's architecture and cached as PTX.
//!
//! Everything CUDA is loaded at run time (cudarc's `dynamic-loading`): the binary builds
//! and runs on machines without CUDA, and `device.kind = "auto"` checks for the driver
//! library before creating a context (creating one without it would panic).
//!
//! [`Cuda`] is the [`super::Backend`] on one GPU: the kernels for every layer, both
//! optimizers, top-k and the sparse gather/scatter, with cuBLAS for the GEMMs. CI compiles
//! every kernel for sm_80 and sm_90 (no GPU needed). With `device.kind = "cuda"` (see
//! [`super::select`]) single-process training runs on it, and so do the workers of every
//! distributed mode (`crate::runtime::run`); parameter and group servers keep their replicas on
//! the host, and a gssp group server may select its sparse exchanges on its GPU
//! ([`CudaMirror`], `device.exchange_select`).

pub mod backend;
pub mod device;
pub mod kernels;

pub use backend::{Cuda, CudaMirror};
