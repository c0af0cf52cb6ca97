//! Kernel launches: the grid shapes the kernels are written for, and [`launch!`], which
//! launches one of them with its arguments and names it in a failure.

use cudarc::driver::LaunchConfig;

/// Threads per block: the block reductions in kernels/common.cuh assume it.
pub(super) const BLOCK: u32 = 256;
/// Blocks of a grid-stride launch at most: enough to fill any current GPU.
pub(super) const MAX_BLOCKS: usize = 16_384;

/// A grid-stride launch over `n` elements.
pub(super) fn elements(n: usize) -> LaunchConfig {
    let blocks = n.div_ceil(BLOCK as usize).clamp(1, MAX_BLOCKS) as u32;
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// One block per row (channel, plane, segment) of a reduction.
pub(super) fn per_row(rows: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (rows.max(1) as u32, 1, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// A single thread (the sequential steps of top-k).
pub(super) fn single() -> LaunchConfig {
    LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (1, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Launches `$kernel` (a [`super::kernels::entry`] constant) on `$cuda`'s stream with
/// `$cfg` and the arguments in order; evaluates to `Result<(), CudaError>`, the error
/// naming the kernel. Every scalar argument must be a local that outlives the launch (the
/// driver reads it through a pointer).
macro_rules! launch {
    ($cuda:expr, $kernel:expr, $cfg:expr, $($arg:expr),+ $(,)?) => {{
        let kernel: $crate::compute::backend::cuda::kernels::Kernel = $kernel;
        match $cuda.function(kernel) {
            Ok(function) => {
                let mut builder = $cuda.stream().launch_builder(function);
                $( cudarc::driver::PushKernelArg::arg(&mut builder, $arg); )+
                // SAFETY: the arguments match the kernel's parameters in kernels/ in
                // number, order and type (device pointers, u64 sizes, f32 and u32 scalars).
                unsafe { builder.launch($cfg) }.map(drop).map_err(|source| {
                    $crate::compute::backend::cuda::CudaError::Launch {
                        kernel: kernel.name(),
                        source,
                    }
                })
            }
            Err(e) => Err(e),
        }
    }};
}

pub(super) use launch;
