//! The optimizers' update rules (kernels/optim.cu): SGD with momentum and Adam, over a
//! whole parameter buffer in one launch.

use cudarc::driver::CudaSlice;

use super::kernels::entry;
use super::launch::{elements, launch};
use super::{Cuda, CudaError};
use crate::compute::backend::{AdamStep, SgdStep};

type Buf = CudaSlice<f32>;

pub(super) fn sgd_step(
    cuda: &Cuda,
    params: &mut Buf,
    velocity: &mut Buf,
    grads: &Buf,
    h: &SgdStep,
) -> Result<(), CudaError> {
    let n = params.len() as u64;
    let SgdStep {
        lr,
        momentum,
        weight_decay,
        scale,
    } = *h;
    launch!(
        cuda,
        entry::SGD_STEP,
        elements(n as usize),
        params,
        velocity,
        grads,
        &lr,
        &momentum,
        &weight_decay,
        &scale,
        &n
    )
}

pub(super) fn adam_step(
    cuda: &Cuda,
    params: &mut Buf,
    m: &mut Buf,
    v: &mut Buf,
    grads: &Buf,
    h: &AdamStep,
) -> Result<(), CudaError> {
    let n = params.len() as u64;
    let AdamStep {
        lr,
        one_minus_beta1,
        one_minus_beta2,
        eps,
        weight_decay,
        scale,
        bias_correction1,
        bias_correction2,
    } = *h;
    launch!(
        cuda,
        entry::ADAM_STEP,
        elements(n as usize),
        params,
        m,
        v,
        grads,
        &lr,
        &one_minus_beta1,
        &one_minus_beta2,
        &eps,
        &weight_decay,
        &scale,
        &bias_correction1,
        &bias_correction2,
        &n
    )
}
