//! GEMM through cuBLAS. The layers store row-major matrices and cuBLAS reads column-major
//! ones; a row-major `C = op(A) op(B)` is the column-major `C^T = op(B)^T op(A)^T`, so
//! each call swaps the operands.

use cudarc::cublas::sys::cublasOperation_t;
use cudarc::cublas::{Gemm, GemmConfig};
use cudarc::driver::{DevicePtr, DevicePtrMut};

use super::{Cuda, CudaError};
use crate::compute::backend::GemmDims;

/// Row-major `c[m x n] = alpha * op(a) op(b) + beta * c`, in full FP32.
pub(super) fn gemm<A: DevicePtr<f32>, B: DevicePtr<f32>, C: DevicePtrMut<f32>>(
    cuda: &Cuda,
    d: GemmDims,
    alpha: f32,
    a: &A,
    b: &B,
    beta: f32,
    c: &mut C,
) -> Result<(), CudaError> {
    if d.m == 0 || d.n == 0 {
        return Ok(());
    }
    let op = |t: bool| {
        if t {
            cublasOperation_t::CUBLAS_OP_T
        } else {
            cublasOperation_t::CUBLAS_OP_N
        }
    };
    let cfg = GemmConfig {
        transa: op(d.trans_b),
        transb: op(d.trans_a),
        m: d.n as i32,
        n: d.m as i32,
        k: d.k as i32,
        alpha,
        // cuBLAS wants every leading dimension >= 1, also when k is 0 (an empty batch),
        // where it only scales c by beta.
        lda: (if d.trans_b { d.k } else { d.n }).max(1) as i32,
        ldb: (if d.trans_a { d.m } else { d.k }).max(1) as i32,
        beta,
        ldc: d.n as i32,
    };
    // SAFETY: the layers size every operand for the dimensions they pass.
    unsafe { cuda.blas().gemm(cfg, b, a, c) }.map_err(|source| CudaError::Gemm {
        m: d.m,
        n: d.n,
        k: d.k,
        source,
    })
}
