//! CPU backend: buffers are host `Vec<f32>`, GEMM is the system OpenBLAS (through
//! ndarray), everything else plain loops the compiler vectorises.

pub mod blas_core;
mod conv;
mod dense;
mod elementwise;
mod gemm;
mod norm;
mod pool;

use std::ops::Range;

pub use conv::{col2im, conv2d_backward, conv2d_forward, im2col, ConvGrads, GEMM_COLUMNS};
pub use dense::{linear_backward, linear_forward};
pub use elementwise::{
    add, dropout_backward, dropout_forward, mask_uniform, relu_backward, relu_forward, sgd_step,
    softmax_xent_forward_backward,
};
pub use gemm::{gemm, set_threads};
pub use norm::{batchnorm_backward, batchnorm_forward};
pub use pool::{
    avgpool_backward, avgpool_forward, global_avgpool_backward, global_avgpool_forward,
    maxpool_backward, maxpool_forward,
};

use super::{
    Backend, BatchNormDims, BatchNormMode, Conv2dDims, LinearDims, SgdStep, Span, Window2d,
};

/// The CPU backend. It holds no state: OpenBLAS keeps its own.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cpu;

/// Disjoint mutable slices of a span's weight and its bias (which follows the weight).
fn span_mut<'a>(buf: &'a mut [f32], at: &Span) -> (&'a mut [f32], Option<&'a mut [f32]>) {
    match &at.bias {
        None => (&mut buf[at.weight.clone()], None),
        Some(b) => {
            assert!(b.start >= at.weight.end, "a bias follows its weight");
            let (head, tail) = buf.split_at_mut(b.start);
            (
                &mut head[at.weight.clone()],
                Some(&mut tail[..b.end - b.start]),
            )
        }
    }
}

fn bias<'a>(buf: &'a [f32], at: &Span) -> Option<&'a [f32]> {
    at.bias.as_ref().map(|b| &buf[b.clone()])
}

impl Backend for Cpu {
    type Buf = Vec<f32>;

    fn alloc(&self, len: usize) -> Vec<f32> {
        vec![0.0; len]
    }
    fn upload(&self, dst: &mut Vec<f32>, src: &[f32]) {
        dst[..src.len()].copy_from_slice(src);
    }
    fn download(&self, dst: &mut [f32], src: &Vec<f32>) {
        dst.copy_from_slice(&src[..dst.len()]);
    }
    fn fill(&self, buf: &mut Vec<f32>, range: Range<usize>, value: f32) {
        buf[range].fill(value);
    }
    fn copy(&self, dst: &mut Vec<f32>, src: &Vec<f32>, len: usize) {
        dst[..len].copy_from_slice(&src[..len]);
    }
    fn add(&self, out: &mut Vec<f32>, a: &Vec<f32>, b: &Vec<f32>, len: usize) {
        add(&mut out[..len], &a[..len], &b[..len]);
    }
    fn sum_squares(&self, buf: &Vec<f32>, len: usize) -> f64 {
        buf[..len].iter().map(|&x| x as f64 * x as f64).sum()
    }

    fn linear_forward(
        &self,
        out: &mut Vec<f32>,
        inp: &Vec<f32>,
        params: &Vec<f32>,
        at: &Span,
        dims: &LinearDims,
    ) {
        let b = bias(params, at).expect("a linear layer has a bias");
        linear_forward(out, inp, &params[at.weight.clone()], b, dims);
    }
    fn linear_backward(
        &self,
        dinp: Option<&mut Vec<f32>>,
        grads: &mut Vec<f32>,
        dout: &Vec<f32>,
        inp: &Vec<f32>,
        params: &Vec<f32>,
        at: &Span,
        dims: &LinearDims,
    ) {
        let (dw, db) = span_mut(grads, at);
        let db = db.expect("a linear layer has a bias");
        let dinp = dinp.map(|d| &mut d[..dims.batch * dims.in_f]);
        linear_backward(dinp, dw, db, dout, inp, &params[at.weight.clone()], dims);
    }

    fn conv2d_scratch_len(&self, dims: &Conv2dDims) -> usize {
        conv::scratch_len(dims)
    }
    fn conv2d_forward(
        &self,
        out: &mut Vec<f32>,
        scratch: &mut Vec<f32>,
        inp: &Vec<f32>,
        params: &Vec<f32>,
        at: &Span,
        dims: &Conv2dDims,
    ) {
        let w = &params[at.weight.clone()];
        conv2d_forward(out, scratch, inp, w, bias(params, at), dims);
    }
    fn conv2d_backward(
        &self,
        dinp: Option<&mut Vec<f32>>,
        grads: &mut Vec<f32>,
        scratch: &mut Vec<f32>,
        dout: &Vec<f32>,
        inp: &Vec<f32>,
        params: &Vec<f32>,
        at: &Span,
        dims: &Conv2dDims,
    ) {
        let (weight, bias) = span_mut(grads, at);
        let g = ConvGrads { weight, bias };
        let w = &params[at.weight.clone()];
        conv2d_backward(
            dinp.map(|d| d.as_mut_slice()),
            g,
            scratch,
            dout,
            inp,
            w,
            dims,
        );
    }

    fn batchnorm_forward(
        &self,
        out: &mut Vec<f32>,
        saved: &mut Vec<f32>,
        state: &mut Vec<f32>,
        inp: &Vec<f32>,
        params: &Vec<f32>,
        at: &Span,
        stats: &Span,
        dims: &BatchNormDims,
        mode: BatchNormMode,
    ) {
        let (mean, var) = span_mut(state, stats);
        let var = var.expect("batch norm keeps a running variance");
        let beta = bias(params, at).expect("batch norm has a shift");
        let gamma = &params[at.weight.clone()];
        batchnorm_forward(out, saved, mean, var, inp, gamma, beta, dims, mode);
    }
    fn batchnorm_backward(
        &self,
        dinp: &mut Vec<f32>,
        grads: &mut Vec<f32>,
        dout: &Vec<f32>,
        inp: &Vec<f32>,
        saved: &Vec<f32>,
        params: &Vec<f32>,
        at: &Span,
        dims: &BatchNormDims,
    ) {
        let (dgamma, dbeta) = span_mut(grads, at);
        let dbeta = dbeta.expect("batch norm has a shift");
        let gamma = &params[at.weight.clone()];
        batchnorm_backward(dinp, dgamma, dbeta, dout, inp, saved, gamma, dims);
    }

    fn relu_forward(&self, out: &mut Vec<f32>, inp: &Vec<f32>, len: usize) {
        relu_forward(&mut out[..len], &inp[..len]);
    }
    fn relu_backward(&self, dinp: &mut Vec<f32>, dout: &Vec<f32>, out: &Vec<f32>, len: usize) {
        relu_backward(&mut dinp[..len], &dout[..len], &out[..len]);
    }

    fn maxpool_forward(
        &self,
        out: &mut Vec<f32>,
        argmax: &mut Vec<f32>,
        inp: &Vec<f32>,
        planes: usize,
        g: &Window2d,
    ) {
        maxpool_forward(out, argmax, inp, planes, g);
    }
    fn maxpool_backward(
        &self,
        dinp: &mut Vec<f32>,
        dout: &Vec<f32>,
        argmax: &Vec<f32>,
        planes: usize,
        g: &Window2d,
    ) {
        maxpool_backward(dinp, dout, argmax, planes, g);
    }
    fn avgpool_forward(&self, out: &mut Vec<f32>, inp: &Vec<f32>, planes: usize, g: &Window2d) {
        avgpool_forward(out, inp, planes, g);
    }
    fn avgpool_backward(&self, dinp: &mut Vec<f32>, dout: &Vec<f32>, planes: usize, g: &Window2d) {
        avgpool_backward(dinp, dout, planes, g);
    }
    fn global_avgpool_forward(
        &self,
        out: &mut Vec<f32>,
        inp: &Vec<f32>,
        planes: usize,
        plane: usize,
    ) {
        global_avgpool_forward(out, inp, planes, plane);
    }
    fn global_avgpool_backward(
        &self,
        dinp: &mut Vec<f32>,
        dout: &Vec<f32>,
        planes: usize,
        plane: usize,
    ) {
        global_avgpool_backward(dinp, dout, planes, plane);
    }

    fn dropout_forward(
        &self,
        out: &mut Vec<f32>,
        mask: &mut Vec<f32>,
        inp: &Vec<f32>,
        len: usize,
        p: f32,
        seed: u64,
    ) {
        dropout_forward(&mut out[..len], &mut mask[..len], &inp[..len], p, seed);
    }
    fn dropout_backward(&self, dinp: &mut Vec<f32>, dout: &Vec<f32>, mask: &Vec<f32>, len: usize) {
        dropout_backward(&mut dinp[..len], &dout[..len], &mask[..len]);
    }

    fn softmax_xent(
        &self,
        dlogits: &mut Vec<f32>,
        logits: &Vec<f32>,
        labels: &[u8],
        n: usize,
        classes: usize,
    ) -> (f32, usize) {
        softmax_xent_forward_backward(dlogits, logits, labels, n, classes)
    }

    fn sgd_step(
        &self,
        params: &mut Vec<f32>,
        velocity: &mut Vec<f32>,
        grads: &Vec<f32>,
        h: &SgdStep,
    ) {
        sgd_step(params, velocity, grads, h);
    }
}
