//! Token embedding: a `[vocab x dim]` table whose rows are looked up by token id.
//!
//! A [`Module`] but not a [`super::Layer`]: its input is host token ids, not an activation
//! buffer, so its forward and backward are its own. The gradient goes only into the rows
//! a batch used (a scatter-add; a repeated id sums), so every other row's gradient stays
//! zero, as in PyTorch's dense `nn.Embedding` gradient.
//! `<pad>` has an ordinary row (no `padding_idx`), as in the reference seq2seq model;
//! pad positions are masked in the loss, so their rows get no gradient through it.

use crate::compute::backend::{Backend, EmbeddingDims, Span};

use super::module::{Allocator, Flat, FlatTensor, Init, Module, NamedTensors};
use super::ModelError;

/// An embedding table, `weight` `[vocab, dim]` initialised N(0, 1) as PyTorch's
/// `nn.Embedding`, and its output `[rows x dim]` for up to `max_rows` ids.
pub struct Embedding<B: Backend> {
    weight: FlatTensor,
    dims: EmbeddingDims,
    out: B::Buf,
    max_rows: usize,
}

impl<B: Backend> Embedding<B> {
    /// Declares `weight` through `alloc`; the output holds `max_rows` rows (for a
    /// time-major batch, longest sequence times batch size).
    pub fn new(be: &B, alloc: &mut Allocator, vocab: usize, dim: usize, max_rows: usize) -> Self {
        Embedding {
            weight: alloc.param(&[vocab, dim], Init::Normal { std: 1.0 }),
            dims: EmbeddingDims { vocab, dim },
            out: be.alloc(max_rows * dim),
            max_rows,
        }
    }

    pub fn dim(&self) -> usize {
        self.dims.dim
    }

    pub fn vocab(&self) -> usize {
        self.dims.vocab
    }

    /// Output rows `0..ids.len()` = the vectors of `ids` (a `[T x B]` batch gives
    /// `[T x B x dim]`).
    pub fn forward(&mut self, be: &B, flat: &Flat<B>, ids: &[u32]) -> Result<(), ModelError> {
        self.forward_rows(be, flat, ids, 0)
    }

    /// Output rows `first_row..first_row + ids.len()` = the vectors of `ids`, the rest
    /// left as they are: a decoder embeds step t's tokens (row `t * B`) once it has chosen
    /// them.
    pub fn forward_rows(
        &mut self,
        be: &B,
        flat: &Flat<B>,
        ids: &[u32],
        first_row: usize,
    ) -> Result<(), ModelError> {
        self.check(ids, first_row)?;
        let at = self.span();
        be.embedding_forward(&mut self.out, ids, first_row, &flat.params, &at, &self.dims);
        Ok(())
    }

    /// Accumulates the gradient of the rows `ids` (all the ids embedded, rows `0..`) from
    /// dout: `[ids.len() x dim]`.
    pub fn backward(
        &self,
        be: &B,
        flat: &mut Flat<B>,
        dout: &B::Buf,
        ids: &[u32],
    ) -> Result<(), ModelError> {
        self.check(ids, 0)?;
        be.embedding_backward(&mut flat.grads, dout, ids, &self.span(), &self.dims);
        Ok(())
    }

    /// Where the backend's operations find the table.
    fn span(&self) -> Span {
        Span {
            weight: self.weight.range.clone(),
            bias: None,
        }
    }

    /// `[rows x dim]`.
    pub fn output(&self) -> &B::Buf {
        &self.out
    }

    /// Token ids come from data: out-of-vocabulary ids and overlong batches are errors,
    /// not panics in the backend.
    fn check(&self, ids: &[u32], first_row: usize) -> Result<(), ModelError> {
        if let Some(&id) = ids.iter().find(|&&id| id as usize >= self.dims.vocab) {
            return Err(ModelError::TokenId {
                id,
                vocab: self.dims.vocab,
            });
        }
        let rows = first_row + ids.len();
        if rows > self.max_rows {
            return Err(ModelError::TooLarge {
                layer: "embedding",
                what: "rows",
                got: rows,
                max: self.max_rows,
            });
        }
        Ok(())
    }
}

impl<B: Backend> Module<B> for Embedding<B> {
    fn visit(&self, tensors: &mut NamedTensors) {
        tensors.param("weight", &self.weight);
    }

    fn activation_len(&self) -> usize {
        self.max_rows * self.dims.dim
    }
}
