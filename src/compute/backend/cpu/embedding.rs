//! Embedding lookup and its scatter-add backward.

use crate::compute::backend::EmbeddingDims;

/// out rows `first_row..first_row + ids.len()` of `[rows x dim]` = table rows `ids`,
/// table `[vocab x dim]`.
pub fn embedding_forward(
    out: &mut [f32],
    ids: &[u32],
    first_row: usize,
    table: &[f32],
    dims: &EmbeddingDims,
) {
    let d = dims.dim;
    let rows = &mut out[first_row * d..(first_row + ids.len()) * d];
    for (row, &id) in rows.chunks_exact_mut(d).zip(ids) {
        let id = id as usize;
        assert!(
            id < dims.vocab,
            "token id {id} outside a vocabulary of {}",
            dims.vocab
        );
        row.copy_from_slice(&table[id * d..(id + 1) * d]);
    }
}

/// dtable row `ids[r]` += dout row `r`, dtable `[vocab x dim]`, dout `[ids.len() x dim]`.
pub fn embedding_backward(dtable: &mut [f32], dout: &[f32], ids: &[u32], dims: &EmbeddingDims) {
    let d = dims.dim;
    for (row, &id) in dout[..ids.len() * d].chunks_exact(d).zip(ids) {
        let id = id as usize;
        assert!(
            id < dims.vocab,
            "token id {id} outside a vocabulary of {}",
            dims.vocab
        );
        for (g, &x) in dtable[id * d..(id + 1) * d].iter_mut().zip(row) {
            *g += x;
        }
    }
}
