//! Max, average and global average pooling (kernels/pool.cu), no padding (a window's
//! `pad` is not read, as on the CPU). The backward passes gather per input, so no two
//! threads write one value.

use cudarc::driver::CudaSlice;

use super::kernels::entry;
use super::launch::{elements, launch, per_row};
use super::{Cuda, CudaError};
use crate::compute::backend::Window2d;

type Buf = CudaSlice<f32>;

/// The arguments of pool.cu's windowed kernels: planes, height, width, kernel, stride.
fn pool_args(planes: usize, g: &Window2d) -> (u64, u64, u64, u64, u64) {
    (
        planes as u64,
        g.height as u64,
        g.width as u64,
        g.kernel as u64,
        g.stride as u64,
    )
}

pub(super) fn maxpool_forward(
    cuda: &Cuda,
    out: &mut Buf,
    argmax: &mut Buf,
    inp: &Buf,
    planes: usize,
    g: &Window2d,
) -> Result<(), CudaError> {
    let (p, h, w, k, s) = pool_args(planes, g);
    let n = planes * g.out_height() * g.out_width();
    launch!(
        cuda,
        entry::MAXPOOL_FORWARD,
        elements(n),
        out,
        argmax,
        inp,
        &p,
        &h,
        &w,
        &k,
        &s
    )
}

pub(super) fn maxpool_backward(
    cuda: &Cuda,
    dinp: &mut Buf,
    dout: &Buf,
    argmax: &Buf,
    planes: usize,
    g: &Window2d,
) -> Result<(), CudaError> {
    let (p, h, w, k, s) = pool_args(planes, g);
    let n = planes * g.height * g.width;
    launch!(
        cuda,
        entry::MAXPOOL_BACKWARD,
        elements(n),
        dinp,
        dout,
        argmax,
        &p,
        &h,
        &w,
        &k,
        &s
    )
}

pub(super) fn avgpool_forward(
    cuda: &Cuda,
    out: &mut Buf,
    inp: &Buf,
    planes: usize,
    g: &Window2d,
) -> Result<(), CudaError> {
    let (p, h, w, k, s) = pool_args(planes, g);
    let n = planes * g.out_height() * g.out_width();
    launch!(
        cuda,
        entry::AVGPOOL_FORWARD,
        elements(n),
        out,
        inp,
        &p,
        &h,
        &w,
        &k,
        &s
    )
}

pub(super) fn avgpool_backward(
    cuda: &Cuda,
    dinp: &mut Buf,
    dout: &Buf,
    planes: usize,
    g: &Window2d,
) -> Result<(), CudaError> {
    let (p, h, w, k, s) = pool_args(planes, g);
    let n = planes * g.height * g.width;
    launch!(
        cuda,
        entry::AVGPOOL_BACKWARD,
        elements(n),
        dinp,
        dout,
        &p,
        &h,
        &w,
        &k,
        &s
    )
}

/// One block per plane averages it.
pub(super) fn global_avgpool_forward(
    cuda: &Cuda,
    out: &mut Buf,
    inp: &Buf,
    planes: usize,
    plane: usize,
) -> Result<(), CudaError> {
    let (p, l) = (planes as u64, plane as u64);
    launch!(
        cuda,
        entry::GLOBAL_AVGPOOL_FORWARD,
        per_row(planes),
        out,
        inp,
        &p,
        &l
    )
}

pub(super) fn global_avgpool_backward(
    cuda: &Cuda,
    dinp: &mut Buf,
    dout: &Buf,
    planes: usize,
    plane: usize,
) -> Result<(), CudaError> {
    let (p, l) = (planes as u64, plane as u64);
    let n = planes * plane;
    launch!(
        cuda,
        entry::GLOBAL_AVGPOOL_BACKWARD,
        elements(n),
        dinp,
        dout,
        &p,
        &l
    )
}
