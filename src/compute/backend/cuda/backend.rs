//! [`Backend`] for [`Cuda`]: every operation runs its family's function (conv.rs,
//! dense.rs, ...) unless an earlier one failed, and keeps its failure (see
//! failure.rs); [`Backend::status`] waits for the device and reports it.

use std::ops::Range;

use cudarc::driver::CudaSlice;

use super::Cuda;
use super::{conv, dense, elementwise, embedding, loss, lstm, norm, optim, pool};
use crate::compute::backend::{
    AdamStep, Backend, BackendError, BatchNormDims, BatchNormMode, Conv2dDims, EmbeddingDims,
    LinearDims, LstmDims, LstmSpan, SgdStep, Span, Window2d, XentStats,
};

type Buf = CudaSlice<f32>;

impl Backend for Cuda {
    type Buf = CudaSlice<f32>;

    fn status(&self) -> Result<(), BackendError> {
        self.synchronize()
    }

    fn alloc(&self, len: usize) -> Buf {
        if self.failed() {
            return self.placeholder();
        }
        self.zeros(len).unwrap_or_else(|e| {
            self.record("alloc", e);
            self.placeholder()
        })
    }
    fn upload(&self, dst: &mut Buf, src: &[f32]) {
        self.run("upload", (), || self.upload_into(dst, src));
    }
    fn download(&self, dst: &mut [f32], src: &Buf) {
        self.run("download", (), || self.download_into(dst, src));
    }
    fn fill(&self, buf: &mut Buf, range: Range<usize>, value: f32) {
        self.run("fill", (), || elementwise::fill(self, buf, range, value));
    }
    fn copy(&self, dst: &mut Buf, src: &Buf, len: usize) {
        self.run("copy", (), || self.copy_range(dst, src, 0, len));
    }
    fn add(&self, out: &mut Buf, a: &Buf, b: &Buf, len: usize) {
        self.run("add", (), || elementwise::add(self, out, a, b, len));
    }
    /// NaN once an operation has failed: a norm that is no number stops what reads it.
    fn sum_squares(&self, buf: &Buf, len: usize) -> f64 {
        self.run("sum_squares", f64::NAN, || {
            elementwise::sum_squares(self, buf, len)
        })
    }
    fn scale(&self, buf: &mut Buf, len: usize, factor: f32) {
        self.run("scale", (), || elementwise::scale(self, buf, len, factor));
    }

    fn embedding_forward(
        &self,
        out: &mut Buf,
        ids: &[u32],
        first_row: usize,
        params: &Buf,
        at: &Span,
        dims: &EmbeddingDims,
    ) {
        self.run("embedding_forward", (), || {
            embedding::embedding_forward(self, out, ids, first_row, params, at, dims)
        });
    }
    fn embedding_backward(
        &self,
        grads: &mut Buf,
        dout: &Buf,
        ids: &[u32],
        at: &Span,
        dims: &EmbeddingDims,
    ) {
        self.run("embedding_backward", (), || {
            embedding::embedding_backward(self, grads, dout, ids, at, dims)
        });
    }

    fn lstm_forward(
        &self,
        out: &mut Buf,
        cells: &mut Buf,
        gates: &mut Buf,
        final_state: (&mut Buf, &mut Buf),
        inp: &Buf,
        init: (&Buf, &Buf),
        params: &Buf,
        at: &LstmSpan,
        dims: &LstmDims,
        steps: Range<usize>,
    ) {
        self.run("lstm_forward", (), || {
            lstm::lstm_forward(
                self,
                out,
                cells,
                gates,
                final_state,
                inp,
                init,
                params,
                at,
                dims,
                steps,
            )
        });
    }
    fn lstm_backward(
        &self,
        dinp: Option<&mut Buf>,
        dinit: (&mut Buf, &mut Buf),
        grads: &mut Buf,
        dgates: &mut Buf,
        dout: &Buf,
        dfinal: Option<(&Buf, &Buf)>,
        inp: &Buf,
        init: (&Buf, &Buf),
        saved: (&Buf, &Buf, &Buf),
        params: &Buf,
        at: &LstmSpan,
        dims: &LstmDims,
    ) {
        self.run("lstm_backward", (), || {
            lstm::lstm_backward(
                self, dinp, dinit, grads, dgates, dout, dfinal, inp, init, saved, params, at, dims,
            )
        });
    }

    fn linear_forward(&self, out: &mut Buf, inp: &Buf, params: &Buf, at: &Span, dims: &LinearDims) {
        self.run("linear_forward", (), || {
            dense::linear_forward(self, out, inp, params, at, dims)
        });
    }
    fn linear_backward(
        &self,
        dinp: Option<&mut Buf>,
        grads: &mut Buf,
        dout: &Buf,
        inp: &Buf,
        params: &Buf,
        at: &Span,
        dims: &LinearDims,
    ) {
        self.run("linear_backward", (), || {
            dense::linear_backward(self, dinp, grads, dout, inp, params, at, dims)
        });
    }

    fn conv2d_scratch_len(&self, dims: &Conv2dDims) -> usize {
        conv::conv2d_scratch_len(dims)
    }
    fn conv2d_forward(
        &self,
        out: &mut Buf,
        scratch: &mut Buf,
        inp: &Buf,
        params: &Buf,
        at: &Span,
        dims: &Conv2dDims,
    ) {
        self.run("conv2d_forward", (), || {
            conv::conv2d_forward(self, out, scratch, inp, params, at, dims)
        });
    }
    fn conv2d_backward(
        &self,
        dinp: Option<&mut Buf>,
        grads: &mut Buf,
        scratch: &mut Buf,
        dout: &Buf,
        inp: &Buf,
        params: &Buf,
        at: &Span,
        dims: &Conv2dDims,
    ) {
        self.run("conv2d_backward", (), || {
            conv::conv2d_backward(self, dinp, grads, scratch, dout, inp, params, at, dims)
        });
    }

    fn batchnorm_forward(
        &self,
        out: &mut Buf,
        saved: &mut Buf,
        state: &mut Buf,
        inp: &Buf,
        params: &Buf,
        at: &Span,
        stats: &Span,
        dims: &BatchNormDims,
        mode: BatchNormMode,
    ) {
        self.run("batchnorm_forward", (), || {
            norm::batchnorm_forward(self, out, saved, state, inp, params, at, stats, dims, mode)
        });
    }
    fn batchnorm_backward(
        &self,
        dinp: &mut Buf,
        grads: &mut Buf,
        dout: &Buf,
        inp: &Buf,
        saved: &Buf,
        params: &Buf,
        at: &Span,
        dims: &BatchNormDims,
    ) {
        self.run("batchnorm_backward", (), || {
            norm::batchnorm_backward(self, dinp, grads, dout, inp, saved, params, at, dims)
        });
    }

    fn relu_forward(&self, out: &mut Buf, inp: &Buf, len: usize) {
        self.run("relu_forward", (), || {
            elementwise::relu_forward(self, out, inp, len)
        });
    }
    fn relu_backward(&self, dinp: &mut Buf, dout: &Buf, out: &Buf, len: usize) {
        self.run("relu_backward", (), || {
            elementwise::relu_backward(self, dinp, dout, out, len)
        });
    }

    fn maxpool_forward(
        &self,
        out: &mut Buf,
        argmax: &mut Buf,
        inp: &Buf,
        planes: usize,
        g: &Window2d,
    ) {
        self.run("maxpool_forward", (), || {
            pool::maxpool_forward(self, out, argmax, inp, planes, g)
        });
    }
    fn maxpool_backward(
        &self,
        dinp: &mut Buf,
        dout: &Buf,
        argmax: &Buf,
        planes: usize,
        g: &Window2d,
    ) {
        self.run("maxpool_backward", (), || {
            pool::maxpool_backward(self, dinp, dout, argmax, planes, g)
        });
    }
    fn avgpool_forward(&self, out: &mut Buf, inp: &Buf, planes: usize, g: &Window2d) {
        self.run("avgpool_forward", (), || {
            pool::avgpool_forward(self, out, inp, planes, g)
        });
    }
    fn avgpool_backward(&self, dinp: &mut Buf, dout: &Buf, planes: usize, g: &Window2d) {
        self.run("avgpool_backward", (), || {
            pool::avgpool_backward(self, dinp, dout, planes, g)
        });
    }
    fn global_avgpool_forward(&self, out: &mut Buf, inp: &Buf, planes: usize, plane: usize) {
        self.run("global_avgpool_forward", (), || {
            pool::global_avgpool_forward(self, out, inp, planes, plane)
        });
    }
    fn global_avgpool_backward(&self, dinp: &mut Buf, dout: &Buf, planes: usize, plane: usize) {
        self.run("global_avgpool_backward", (), || {
            pool::global_avgpool_backward(self, dinp, dout, planes, plane)
        });
    }

    fn dropout_forward(
        &self,
        out: &mut Buf,
        mask: &mut Buf,
        inp: &Buf,
        len: usize,
        p: f32,
        seed: u64,
    ) {
        self.run("dropout_forward", (), || {
            elementwise::dropout_forward(self, out, mask, inp, 0..len, p, seed)
        });
    }
    fn dropout_forward_range(
        &self,
        out: &mut Buf,
        mask: &mut Buf,
        inp: &Buf,
        range: Range<usize>,
        p: f32,
        seed: u64,
    ) {
        self.run("dropout_forward_range", (), || {
            elementwise::dropout_forward(self, out, mask, inp, range, p, seed)
        });
    }
    fn dropout_backward(&self, dinp: &mut Buf, dout: &Buf, mask: &Buf, len: usize) {
        self.run("dropout_backward", (), || {
            elementwise::dropout_backward(self, dinp, dout, mask, len)
        });
    }

    /// A NaN loss once an operation has failed.
    fn softmax_xent(
        &self,
        dlogits: &mut Buf,
        logits: &Buf,
        labels: &[u8],
        n: usize,
        classes: usize,
    ) -> (f32, usize) {
        self.run("softmax_xent", (f32::NAN, 0), || {
            loss::softmax_xent(self, dlogits, logits, labels, n, classes)
        })
    }
    /// A NaN loss once an operation has failed.
    fn softmax_xent_masked(
        &self,
        dlogits: &mut Buf,
        logits: &Buf,
        labels: &[u32],
        pad: u32,
        classes: usize,
    ) -> XentStats {
        let skipped = XentStats {
            loss: f32::NAN,
            correct: 0,
            tokens: labels.iter().filter(|&&l| l != pad).count(),
        };
        self.run("softmax_xent_masked", skipped, || {
            loss::softmax_xent_masked(self, dlogits, logits, labels, pad, classes)
        })
    }

    fn sgd_step(&self, params: &mut Buf, velocity: &mut Buf, grads: &Buf, h: &SgdStep) {
        self.run("sgd_step", (), || {
            optim::sgd_step(self, params, velocity, grads, h)
        });
    }
    fn adam_step(&self, params: &mut Buf, m: &mut Buf, v: &mut Buf, grads: &Buf, h: &AdamStep) {
        self.run("adam_step", (), || {
            optim::adam_step(self, params, m, v, grads, h)
        });
    }
}
