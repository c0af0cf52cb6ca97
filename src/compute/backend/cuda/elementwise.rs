//! Element-wise operations (kernels/elementwise.cu): fill, add, scale, the sum of
//! squares, ReLU and dropout.

use std::ops::Range;

use cudarc::driver::CudaSlice;

use super::kernels::entry;
use super::launch::{elements, launch};
use super::{Cuda, CudaError};

type Buf = CudaSlice<f32>;

/// `buf[range] = value`.
pub(super) fn fill(
    cuda: &Cuda,
    buf: &mut Buf,
    range: Range<usize>,
    value: f32,
) -> Result<(), CudaError> {
    let n = range.len() as u64;
    if n == 0 {
        return Ok(());
    }
    let mut v = buf.slice_mut(range);
    launch!(
        cuda,
        entry::FILL_F32,
        elements(n as usize),
        &mut v,
        &value,
        &n
    )
}

/// `out[..len] = a[..len] + b[..len]`.
pub(super) fn add(
    cuda: &Cuda,
    out: &mut Buf,
    a: &Buf,
    b: &Buf,
    len: usize,
) -> Result<(), CudaError> {
    let n = len as u64;
    launch!(cuda, entry::ADD_F32, elements(len), out, a, b, &n)
}

/// `buf[..len] *= factor`.
pub(super) fn scale(cuda: &Cuda, buf: &mut Buf, len: usize, factor: f32) -> Result<(), CudaError> {
    let n = len as u64;
    launch!(cuda, entry::SCALE_F32, elements(len), buf, &factor, &n)
}

/// The sum of squares of `buf[..len]`, accumulated in f64 on the device.
pub(super) fn sum_squares(cuda: &Cuda, buf: &Buf, len: usize) -> Result<f64, CudaError> {
    let mut total = cuda.zeros::<f64>(1)?;
    let n = len as u64;
    if len > 0 {
        launch!(cuda, entry::SUM_SQUARES, elements(len), &mut total, buf, &n)?;
    }
    Ok(cuda.download_vec(&total, 1)?[0])
}

pub(super) fn relu_forward(
    cuda: &Cuda,
    out: &mut Buf,
    inp: &Buf,
    len: usize,
) -> Result<(), CudaError> {
    let n = len as u64;
    launch!(cuda, entry::RELU_FORWARD, elements(len), out, inp, &n)
}

pub(super) fn relu_backward(
    cuda: &Cuda,
    dinp: &mut Buf,
    dout: &Buf,
    out: &Buf,
    len: usize,
) -> Result<(), CudaError> {
    let n = len as u64;
    launch!(
        cuda,
        entry::RELU_BACKWARD,
        elements(len),
        dinp,
        dout,
        out,
        &n
    )
}

/// Dropout over the values `range`, each drawn from its index in the whole buffer.
pub(super) fn dropout_forward(
    cuda: &Cuda,
    out: &mut Buf,
    mask: &mut Buf,
    inp: &Buf,
    range: Range<usize>,
    p: f32,
    seed: u64,
) -> Result<(), CudaError> {
    let (first, n) = (range.start as u64, range.len() as u64);
    if n == 0 {
        return Ok(());
    }
    launch!(
        cuda,
        entry::DROPOUT_FORWARD,
        elements(range.len()),
        out,
        mask,
        inp,
        &p,
        &seed,
        &first,
        &n
    )
}

pub(super) fn dropout_backward(
    cuda: &Cuda,
    dinp: &mut Buf,
    dout: &Buf,
    mask: &Buf,
    len: usize,
) -> Result<(), CudaError> {
    let n = len as u64;
    launch!(
        cuda,
        entry::DROPOUT_BACKWARD,
        elements(len),
        dinp,
        dout,
        mask,
        &n
    )
}
