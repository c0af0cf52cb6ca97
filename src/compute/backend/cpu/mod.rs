//! CPU backend: buffers are host `Vec<f32>`, GEMM is the system OpenBLAS (through
//! ndarray), everything else plain loops the compiler vectorises.

pub mod blas_core;
mod conv;
mod dense;
mod elementwise;
mod embedding;
mod gemm;
mod lanes;
mod lstm;
mod norm;
mod pool;
mod relay;
pub(crate) mod threads;
mod winograd;
mod winograd_avx2;
mod winograd_f2;
mod winograd_f4;
#[cfg(target_arch = "x86_64")]
mod winograd_f4_avx2;
mod winograd_tiling;

use std::ops::Range;

pub use conv::{col2im, conv2d_backward, conv2d_forward, im2col, ConvGrads, GEMM_COLUMNS};
pub use dense::{linear_backward, linear_forward};
pub use elementwise::{
    adam_step, add, copy, dropout_backward, dropout_forward, dropout_forward_from, fill,
    mask_uniform, relu_backward, relu_forward, scale, sgd_step, softmax_xent_forward_backward,
    softmax_xent_masked,
};
pub use embedding::{embedding_backward, embedding_forward};
pub use gemm::{gemm, gemm_shared};
pub use lstm::{lstm_backward, lstm_forward, LstmGrads, LstmParams, LstmSaved};
pub use norm::{batchnorm_backward, batchnorm_forward};
pub use pool::{
    avgpool_backward, avgpool_forward, global_avgpool_backward, global_avgpool_forward,
    maxpool_backward, maxpool_forward,
};
pub use threads::{force_schedule, Schedule};
pub use winograd::{
    set_enabled as set_winograd, set_tilings as set_winograd_tilings, Tilings as WinogradTilings,
};

use super::{
    AdamStep, Backend, BatchNormDims, BatchNormMode, Conv2dDims, EmbeddingDims, LinearDims,
    LstmDims, LstmSpan, SgdStep, Span, Window2d, XentStats,
};

/// Sets `run.threads`, the threads of the pool that runs a step's passes (the first call
/// in a process decides), and holds OpenBLAS to one thread (gemm.rs says why).
pub fn set_threads(n: usize) {
    threads::set_threads(n);
    gemm::one_blas_thread();
}

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

fn lstm_params<'a>(buf: &'a [f32], at: &LstmSpan) -> LstmParams<'a> {
    LstmParams {
        weight_ih: &buf[at.weight_ih.clone()],
        weight_hh: &buf[at.weight_hh.clone()],
        bias_ih: &buf[at.bias_ih.clone()],
        bias_hh: &buf[at.bias_hh.clone()],
    }
}

/// Disjoint mutable slices of `ranges` of `buf`, which must not overlap.
fn disjoint_mut<'a, const N: usize>(
    buf: &'a mut [f32],
    ranges: [&Range<usize>; N],
) -> [&'a mut [f32]; N] {
    let mut order: [usize; N] = std::array::from_fn(|i| i);
    order.sort_by_key(|&i| ranges[i].start);
    let mut out: [&'a mut [f32]; N] = std::array::from_fn(|_| Default::default());
    let (mut rest, mut offset) = (buf, 0);
    for &i in &order {
        let r = ranges[i];
        assert!(r.start >= offset, "overlapping ranges");
        let (_, tail) = std::mem::take(&mut rest).split_at_mut(r.start - offset);
        let (slice, tail) = tail.split_at_mut(r.end - r.start);
        out[i] = slice;
        rest = tail;
        offset = r.end;
    }
    out
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
    fn host_view(buf: &Vec<f32>) -> Option<&[f32]> {
        Some(buf)
    }
    fn host_view_mut(buf: &mut Vec<f32>) -> Option<&mut [f32]> {
        Some(buf)
    }
    fn fill(&self, buf: &mut Vec<f32>, range: Range<usize>, value: f32) {
        fill(&mut buf[range], value);
    }
    fn copy(&self, dst: &mut Vec<f32>, src: &Vec<f32>, len: usize) {
        copy(&mut dst[..len], &src[..len]);
    }
    fn add(&self, out: &mut Vec<f32>, a: &Vec<f32>, b: &Vec<f32>, len: usize) {
        add(&mut out[..len], &a[..len], &b[..len]);
    }
    fn sum_squares(&self, buf: &Vec<f32>, len: usize) -> f64 {
        buf[..len].iter().map(|&x| x as f64 * x as f64).sum()
    }

    fn scale(&self, buf: &mut Vec<f32>, len: usize, factor: f32) {
        scale(&mut buf[..len], factor);
    }

    fn embedding_forward(
        &self,
        out: &mut Vec<f32>,
        ids: &[u32],
        first_row: usize,
        params: &Vec<f32>,
        at: &Span,
        dims: &EmbeddingDims,
    ) {
        embedding_forward(out, ids, first_row, &params[at.weight.clone()], dims);
    }
    fn embedding_backward(
        &self,
        grads: &mut Vec<f32>,
        dout: &Vec<f32>,
        ids: &[u32],
        at: &Span,
        dims: &EmbeddingDims,
    ) {
        embedding_backward(&mut grads[at.weight.clone()], dout, ids, dims);
    }

    fn lstm_forward(
        &self,
        out: &mut Vec<f32>,
        cells: &mut Vec<f32>,
        gates: &mut Vec<f32>,
        final_state: (&mut Vec<f32>, &mut Vec<f32>),
        inp: &Vec<f32>,
        init: (&Vec<f32>, &Vec<f32>),
        params: &Vec<f32>,
        at: &LstmSpan,
        dims: &LstmDims,
        steps: Range<usize>,
    ) {
        let p = lstm_params(params, at);
        let (h_n, c_n) = final_state;
        lstm_forward(
            out, cells, gates, h_n, c_n, inp, init.0, init.1, &p, dims, steps,
        );
    }
    fn lstm_backward(
        &self,
        dinp: Option<&mut Vec<f32>>,
        dinit: (&mut Vec<f32>, &mut Vec<f32>),
        grads: &mut Vec<f32>,
        dgates: &mut Vec<f32>,
        dout: &Vec<f32>,
        dfinal: Option<(&Vec<f32>, &Vec<f32>)>,
        inp: &Vec<f32>,
        init: (&Vec<f32>, &Vec<f32>),
        saved: (&Vec<f32>, &Vec<f32>, &Vec<f32>),
        params: &Vec<f32>,
        at: &LstmSpan,
        dims: &LstmDims,
    ) {
        let [dweight_ih, dweight_hh, dbias_ih, dbias_hh] = disjoint_mut(
            grads,
            [&at.weight_ih, &at.weight_hh, &at.bias_ih, &at.bias_hh],
        );
        let d = LstmGrads {
            dinp: dinp.map(|d| d.as_mut_slice()),
            dh0: dinit.0,
            dc0: dinit.1,
            dgates,
            dweight_ih,
            dweight_hh,
            dbias_ih,
            dbias_hh,
        };
        let saved = LstmSaved {
            out: saved.0,
            cells: saved.1,
            gates: saved.2,
        };
        let dfinal = dfinal.map(|(h, c)| (h.as_slice(), c.as_slice()));
        let p = lstm_params(params, at);
        lstm_backward(d, dout, dfinal, inp, init.0, init.1, &saved, &p, dims);
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
    fn dropout_forward_range(
        &self,
        out: &mut Vec<f32>,
        mask: &mut Vec<f32>,
        inp: &Vec<f32>,
        range: Range<usize>,
        p: f32,
        seed: u64,
    ) {
        let first = range.start;
        let (o, m, x) = (
            &mut out[range.clone()],
            &mut mask[range.clone()],
            &inp[range],
        );
        dropout_forward_from(o, m, x, p, seed, first);
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

    fn softmax_xent_masked(
        &self,
        dlogits: &mut Vec<f32>,
        logits: &Vec<f32>,
        labels: &[u32],
        pad: u32,
        classes: usize,
    ) -> XentStats {
        softmax_xent_masked(dlogits, logits, labels, pad, classes)
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

    fn adam_step(
        &self,
        params: &mut Vec<f32>,
        m: &mut Vec<f32>,
        v: &mut Vec<f32>,
        grads: &Vec<f32>,
        h: &AdamStep,
    ) {
        adam_step(params, m, v, grads, h);
    }
}
