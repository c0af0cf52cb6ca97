//! [`Cuda`]: one GPU's context, stream, cuBLAS handle and loaded kernels, and the record
//! of its first failure; opening it, and waiting for it.

use std::sync::Arc;

use cudarc::cublas::CudaBlas;
use cudarc::driver::{CudaContext, CudaFunction, CudaStream};

use super::failure::FirstFailure;
use super::kernels::{self, Kernel};
use super::CudaError;
use crate::compute::backend::BackendError;

struct Inner {
    stream: Arc<CudaStream>,
    blas: CudaBlas,
    /// Every kernel's function, at its [`Kernel::index`].
    functions: Vec<CudaFunction>,
    description: String,
    failure: FirstFailure,
}

/// One GPU: its stream, cuBLAS handle and the loaded kernels. Cloning shares them, and
/// the record of the first failure: a fault leaves the whole context unusable.
#[derive(Clone)]
pub struct Cuda {
    inner: Arc<Inner>,
}

impl Cuda {
    /// The GPU `ordinal`: its context, the kernels compiled for its architecture (from the
    /// PTX cache when there) and a cuBLAS handle. Fails with the reason, a [`CudaError`]
    /// naming what is missing, where the driver, the GPU or NVRTC is not usable.
    pub fn new(ordinal: usize) -> anyhow::Result<Cuda> {
        Ok(Cuda::open(ordinal)?)
    }

    fn open(ordinal: usize) -> Result<Cuda, CudaError> {
        if let Some(why) = super::device::unavailable() {
            return Err(CudaError::Unavailable(why));
        }
        let ctx =
            CudaContext::new(ordinal).map_err(|source| CudaError::Context { ordinal, source })?;
        // SAFETY: the backend queues everything on one stream, so cudarc's events that
        // order buffers between streams have nothing to order.
        unsafe { ctx.disable_event_tracking() };
        let (major, minor) = ctx
            .compute_capability()
            .map_err(|source| CudaError::Query {
                ordinal,
                property: "compute capability",
                source,
            })?;
        let functions = load_kernels(&ctx, &kernels::arch_for(major as u32, minor as u32))?;
        let stream = ctx.default_stream();
        let blas = CudaBlas::new(stream.clone())
            .map_err(|source| CudaError::BlasInit { ordinal, source })?;
        let name = ctx.name().unwrap_or_else(|_| "GPU".to_string());
        Ok(Cuda {
            inner: Arc::new(Inner {
                stream,
                blas,
                functions,
                description: format!("{name} (device {ordinal}, sm_{major}{minor})"),
                failure: FirstFailure::default(),
            }),
        })
    }

    /// The device's name, ordinal and architecture, for logs.
    pub fn describe(&self) -> &str {
        &self.inner.description
    }

    /// Waits for every queued operation (timing, and before reading results elsewhere);
    /// the first failure so far, or the wait's own, is the error.
    pub fn synchronize(&self) -> Result<(), BackendError> {
        self.inner.failure.check()?;
        if let Err(source) = self.inner.stream.synchronize() {
            self.record("synchronize", CudaError::Synchronize { source });
        } else if let Err(source) = self.inner.stream.context().check_err() {
            self.record("synchronize", CudaError::Deferred { source });
        }
        self.inner.failure.check()
    }

    pub(super) fn stream(&self) -> &Arc<CudaStream> {
        &self.inner.stream
    }

    pub(super) fn blas(&self) -> &CudaBlas {
        &self.inner.blas
    }

    /// The loaded function of `kernel`.
    pub(super) fn function(&self, kernel: Kernel) -> Result<&CudaFunction, CudaError> {
        self.inner
            .functions
            .get(kernel.index())
            .ok_or(CudaError::NotLoaded {
                kernel: kernel.name(),
            })
    }

    /// What `run` returns, or `skipped` where an earlier operation failed or this one
    /// does (see failure.rs).
    pub(super) fn run<T>(
        &self,
        op: &'static str,
        skipped: T,
        run: impl FnOnce() -> Result<T, CudaError>,
    ) -> T {
        self.inner.failure.run(op, skipped, run)
    }

    /// Keeps `error` of operation `op` as the failure, unless one is kept already.
    pub(super) fn record(&self, op: &'static str, error: CudaError) {
        self.inner.failure.record(op, error)
    }

    /// Whether an operation has failed (later ones are skipped).
    pub(super) fn failed(&self) -> bool {
        self.inner.failure.happened()
    }
}

/// Every kernel file compiled for `arch` (or its cached PTX) and loaded into `ctx`: the
/// functions in the order of [`kernels::FILES`] and their entries, each at its
/// [`Kernel::index`].
fn load_kernels(ctx: &Arc<CudaContext>, arch: &str) -> Result<Vec<CudaFunction>, CudaError> {
    let cache = kernels::default_cache_dir();
    let mut functions = Vec::with_capacity(kernels::ENTRY_COUNT);
    for file in &kernels::FILES {
        let ptx = kernels::cached_ptx(&cache, file, arch)?;
        let module = ctx
            .load_module(cudarc::nvrtc::Ptx::from_src(ptx))
            .map_err(|source| CudaError::LoadModule {
                file: file.name,
                arch: arch.to_string(),
                source,
            })?;
        for kernel in file.entries {
            let function =
                module
                    .load_function(kernel.name())
                    .map_err(|source| CudaError::LoadFunction {
                        file: file.name,
                        kernel: kernel.name(),
                        source,
                    })?;
            functions.push(function);
        }
    }
    Ok(functions)
}
