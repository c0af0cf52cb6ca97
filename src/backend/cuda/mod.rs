//! The CUDA side of the compute layer (cargo feature `cuda`, on by default): finding a
//! GPU for a rank, and the project's own kernels (`kernels/*.cu`) compiled with NVRTC for
//! the device's architecture and cached as PTX.
//!
//! Everything CUDA is loaded at run time (cudarc's `dynamic-loading`): the binary builds
//! and runs on machines without CUDA, and `device.kind = "auto"` checks for the driver
//! library before creating a context (creating one without it would panic).
//!
//! State of the backend: the kernels for every layer, both optimizers, top-k and the
//! sparse gather/scatter are written and compile for sm_80 and sm_90 in CI (no GPU
//! needed); the [`super::Backend`] implementation that launches them, with cuBLAS for the
//! GEMMs, is not built yet, so training runs on the CPU (see [`super::select`]).

pub mod backend;
pub mod device;
pub mod kernels;

pub use backend::Cuda;
