//! Inverted dropout on a time-major sequence buffer `[T x B x F]`, by ranges of values:
//! a step run alone drops only its own rows, and since each value's draw depends on its
//! index and the seed, a sequence run a step at a time gets the mask a whole-sequence run
//! gets. Used on the seq2seq embeddings' outputs and between LSTM layers.

use std::ops::Range;

use crate::compute::backend::Backend;

use super::module::{Allocator, Module, NamedTensors};

/// Dropout's output, its mask and the gradient of its input, for `len` values.
pub struct RowDropout<B: Backend> {
    out: B::Buf,
    mask: B::Buf,
    dx: B::Buf,
    seed: u64,
    len: usize,
}

impl<B: Backend> RowDropout<B> {
    /// Buffers for `len` values and this layer's seed (the next of `alloc`'s).
    pub fn new(be: &B, alloc: &mut Allocator, len: usize) -> Self {
        RowDropout {
            out: be.alloc(len),
            mask: be.alloc(len),
            dx: be.alloc(len),
            seed: alloc.next_seed(),
            len,
        }
    }

    /// Drops `values` of `inp` into [`RowDropout::output`] with probability `p` and the
    /// step's seed `step_seed`; with `p = 0` (evaluation) a copy, so a reader always
    /// reads the output.
    pub fn forward(&mut self, be: &B, inp: &B::Buf, values: Range<usize>, p: f32, step_seed: u64) {
        let seed = self.seed ^ step_seed;
        be.dropout_forward_range(&mut self.out, &mut self.mask, inp, values, p, seed);
    }

    /// The gradient of the input's first `len` values from the output's, `dout`, into
    /// [`RowDropout::input_grad`].
    pub fn backward(&mut self, be: &B, dout: &B::Buf, len: usize) {
        be.dropout_backward(&mut self.dx, dout, &self.mask, len);
    }

    pub fn output(&self) -> &B::Buf {
        &self.out
    }

    pub fn input_grad(&self) -> &B::Buf {
        &self.dx
    }
}

impl<B: Backend> Module<B> for RowDropout<B> {
    fn visit(&self, _: &mut NamedTensors) {}

    fn activation_len(&self) -> usize {
        3 * self.len
    }
}
