//! Convolution by im2col and one GEMM per chunk of images; 3x3 stride-1 convolutions go to
//! Winograd ([`super::winograd`]).
//!
//! Planes of at least [`WIDE_PLANE`] output pixels make a wide enough GEMM alone: one image
//! per GEMM, which then reads and writes the NCHW tensors in place. Smaller planes (the
//! late stages of a CNN, 4x4 planes of 512 channels) are unfolded side by side, enough
//! images for [`GEMM_COLUMNS`] output pixels, and the GEMM's output is scattered back to
//! NCHW. The scratch (the unfolded chunk and one output chunk) stays a few MB. The
//! unfolded input is not kept for backward: it is unfolded again from the layer's input,
//! which every layer keeps anyway.
//!
//! Chunks of images go to the pool's threads, each with its own part of the scratch (a
//! [`Slot`]), so that every GEMM runs on one thread next to the others.

use std::sync::{Mutex, PoisonError};

use super::gemm::gemm;
use super::lanes::{copy_row, fill_row};
use super::threads::{for_parts_in_slots, for_shares_in_slots, for_values, threads, Units};
use super::winograd;
use crate::compute::backend::{Conv2dDims, GemmDims, Window2d};

/// Output pixels per GEMM (the GEMM's `n`).
pub const GEMM_COLUMNS: usize = 4096;

/// Output pixels from which one image makes a GEMM of its own.
pub const WIDE_PLANE: usize = 256;

/// Images per GEMM for planes of `pix` output pixels, with `slots` threads to keep busy
/// (no more than a thread's share of the batch).
fn chunk(pix: usize, batch: usize, slots: usize) -> usize {
    if pix >= WIDE_PLANE {
        return 1;
    }
    (GEMM_COLUMNS / pix.max(1)).clamp(1, batch.div_ceil(slots.max(1)).max(1))
}

/// Scratch values a convolution needs: for im2col [`direct_scratch_len`]; where Winograd
/// [`winograd::fits`], enough for either (it may be turned off after the model is built).
pub fn scratch_len(dims: &Conv2dDims) -> usize {
    if winograd::fits(&dims.window) {
        return winograd::scratch_len(dims).max(direct_scratch_len(dims));
    }
    direct_scratch_len(dims)
}

/// Scratch values of the im2col path: a [`Slot`] for each of the pool's threads.
pub(super) fn direct_scratch_len(dims: &Conv2dDims) -> usize {
    threads() * Slot::len(dims)
}

/// One thread's part of the im2col scratch: the unfolded chunk `[C*k*k x cols]`, one output
/// chunk `[out_c x cols]`, and (for backward, on threads after the first) a weight and a bias
/// gradient of its own, summed into the layer's after all chunks.
struct Slot<'a> {
    col: &'a mut [f32],
    tmp: &'a mut [f32],
    dweight: &'a mut [f32],
    dbias: &'a mut [f32],
}

impl<'a> Slot<'a> {
    /// Values of one slot: enough for the largest chunk, that of one thread.
    fn len(dims: &Conv2dDims) -> usize {
        let (g, out_c) = (&dims.window, dims.out_c);
        let cols = chunk(g.col_cols(), dims.batch, 1) * g.col_cols();
        (g.col_rows() + out_c) * cols + out_c * g.col_rows() + out_c
    }

    /// Cuts a slot's values (of [`Slot::len`]) into its parts, for chunks of `cols` columns.
    fn new(values: &'a mut [f32], dims: &Conv2dDims, cols: usize) -> Self {
        let (rows, out_c) = (dims.window.col_rows(), dims.out_c);
        let (grads, work) = values.split_at_mut(out_c * rows + out_c);
        let (dweight, dbias) = grads.split_at_mut(out_c * rows);
        let (col, rest) = work.split_at_mut(rows * cols);
        Slot {
            col,
            tmp: &mut rest[..out_c * cols],
            dweight,
            dbias,
        }
    }
}

/// Threads that get a slot of `scratch` (the pool's, fewer if the scratch was sized for
/// fewer), and the values of one slot.
fn slots(scratch: &[f32], dims: &Conv2dDims) -> (usize, usize) {
    let len = Slot::len(dims);
    (threads().min(scratch.len() / len).max(1), len)
}

/// Valid output columns `lo..hi` of kernel column `kx`: those with
/// `0 <= ox*stride + kx - pad < width`.
fn valid_cols(kx: usize, ow: usize, g: &Window2d) -> (usize, usize) {
    let lo = g.pad.saturating_sub(kx).div_ceil(g.stride).min(ow);
    let hi = if g.width + g.pad > kx {
        ((g.width + g.pad - kx - 1) / g.stride + 1).min(ow)
    } else {
        0
    };
    (lo, hi.max(lo))
}

/// Unfolds one image `inp[C x H x W]` into `col[C*k*k x OH*OW]` (zero padding), row `r`
/// starting at `col[r * ld]`.
pub fn im2col(col: &mut [f32], ld: usize, inp: &[f32], g: &Window2d) {
    if g.stride == 1 && g.out_width() == g.width {
        return im2col_same(col, ld, inp, g);
    }
    let (oh, ow) = (g.out_height(), g.out_width());
    let (h, w) = (g.height, g.width);
    for row in 0..g.col_rows() {
        let dst = &mut col[row * ld..row * ld + oh * ow];
        let (c, ky, kx) = (
            row / (g.kernel * g.kernel),
            row / g.kernel % g.kernel,
            row % g.kernel,
        );
        let plane = &inp[c * h * w..(c + 1) * h * w];
        if g.stride == 1 && g.pad == 0 {
            // Every window inside the plane (LeNet-5's second convolution): plain row copies.
            for (oy, out) in dst.chunks_exact_mut(ow).enumerate() {
                let at = (oy + ky) * w + kx;
                copy_row(out, &plane[at..at + ow]);
            }
            continue;
        }
        let (lo, hi) = valid_cols(kx, ow, g);
        for (oy, out) in dst.chunks_exact_mut(ow).enumerate() {
            let iy = (oy * g.stride + ky) as isize - g.pad as isize;
            if iy < 0 || iy >= h as isize {
                out.fill(0.0);
                continue;
            }
            let src = &plane[iy as usize * w..(iy as usize + 1) * w];
            fill_row(&mut out[..lo], 0.0);
            fill_row(&mut out[hi..], 0.0);
            if g.stride == 1 {
                let start = lo + kx - g.pad;
                copy_row(&mut out[lo..hi], &src[start..start + hi - lo]);
            } else if lo < hi {
                let start = lo * g.stride + kx - g.pad;
                gather(&mut out[lo..hi], &src[start..], g.stride);
            }
        }
    }
}

/// [`im2col`] for stride 1 with the output as wide as the input (3x3 pad 1 and the like):
/// a row of `col` is then the input plane shifted by `(ky - pad) * W + (kx - pad)`, so it
/// is one block copy, after which the rows and columns that fall in the padding are zeroed
/// (the copy wrapped neighbouring pixels into them).
fn im2col_same(col: &mut [f32], ld: usize, inp: &[f32], g: &Window2d) {
    let (oh, ow) = (g.out_height(), g.out_width());
    let (h, w, pad) = (g.height, g.width, g.pad as isize);
    let hw = (h * w) as isize;
    for row in 0..g.col_rows() {
        let dst = &mut col[row * ld..row * ld + oh * ow];
        let (c, ky, kx) = (
            row / (g.kernel * g.kernel),
            (row / g.kernel % g.kernel) as isize,
            (row % g.kernel) as isize,
        );
        let plane = &inp[c * h * w..(c + 1) * h * w];
        let off = (ky - pad) * w as isize + (kx - pad);
        // Output rows whose input row lies inside the image.
        let oy_lo = (pad - ky).clamp(0, oh as isize) as usize;
        let oy_hi = (h as isize + pad - ky).clamp(oy_lo as isize, oh as isize) as usize;
        dst[..oy_lo * ow].fill(0.0);
        dst[oy_hi * ow..].fill(0.0);
        let (j0, j1) = ((oy_lo * ow) as isize, (oy_hi * ow) as isize);
        let (s0, s1) = ((j0 + off).max(0), (j1 + off).min(hw));
        if s1 > s0 {
            let d0 = (s0 - off) as usize;
            dst[d0..d0 + (s1 - s0) as usize].copy_from_slice(&plane[s0 as usize..s1 as usize]);
        }
        let (lo, hi) = valid_cols(kx as usize, ow, g);
        if lo > 0 || hi < ow {
            for out in dst[oy_lo * ow..oy_hi * ow].chunks_exact_mut(ow) {
                fill_row(&mut out[..lo], 0.0);
                fill_row(&mut out[hi..], 0.0);
            }
        }
    }
}

/// `out[i] = src[i * stride]` for every `i` of `out`; stride 2 (the strided convolutions of
/// a ResNet) written out so that it vectorizes.
#[inline(always)]
fn gather(out: &mut [f32], src: &[f32], stride: usize) {
    if stride == 2 {
        // Whole pairs, then a last lone value where the source ends there.
        let (last, most) = out
            .split_last_mut()
            .expect("a gather of at least one value");
        for (o, pair) in most.iter_mut().zip(src.chunks_exact(2)) {
            *o = pair[0];
        }
        *last = src[2 * most.len()];
    } else {
        for (o, &v) in out.iter_mut().zip(src.iter().step_by(stride)) {
            *o = v;
        }
    }
}

/// `dst[i * stride] += s[i]` for every `i` of `s`, the adjoint of [`gather`].
#[inline(always)]
fn scatter_add(dst: &mut [f32], s: &[f32], stride: usize) {
    if stride == 2 {
        let (last, most) = s.split_last().expect("a scatter of at least one value");
        for (pair, &v) in dst.chunks_exact_mut(2).zip(most) {
            pair[0] += v;
        }
        dst[2 * most.len()] += last;
    } else {
        for (d, &v) in dst.iter_mut().step_by(stride).zip(s) {
            *d += v;
        }
    }
}

/// Folds `col[C*k*k x OH*OW]` (row `r` at `col[r * ld]`) back into one image,
/// accumulating into `dinp[C x H x W]`.
pub fn col2im(dinp: &mut [f32], col: &[f32], ld: usize, g: &Window2d) {
    let (oh, ow) = (g.out_height(), g.out_width());
    let (h, w) = (g.height, g.width);
    for row in 0..g.col_rows() {
        let src = &col[row * ld..row * ld + oh * ow];
        let (c, ky, kx) = (
            row / (g.kernel * g.kernel),
            row / g.kernel % g.kernel,
            row % g.kernel,
        );
        let plane = &mut dinp[c * h * w..(c + 1) * h * w];
        let (lo, hi) = valid_cols(kx, ow, g);
        for (oy, s) in src.chunks_exact(ow).enumerate() {
            let iy = (oy * g.stride + ky) as isize - g.pad as isize;
            if iy < 0 || iy >= h as isize {
                continue;
            }
            let dst = &mut plane[iy as usize * w..(iy as usize + 1) * w];
            if g.stride == 1 {
                let start = lo + kx - g.pad;
                for (d, &v) in dst[start..start + hi - lo].iter_mut().zip(&s[lo..hi]) {
                    *d += v;
                }
            } else if lo < hi {
                let start = lo * g.stride + kx - g.pad;
                scatter_add(&mut dst[start..], &s[lo..hi], g.stride);
            }
        }
    }
}

/// Unfolds images `first..first + m` of `inp` side by side into `col[rows x m*pix]`.
fn unfold_chunk(col: &mut [f32], inp: &[f32], first: usize, m: usize, g: &Window2d) {
    let (pix, in_len) = (g.col_cols(), g.in_len());
    let ld = m * pix;
    for j in 0..m {
        let img = &inp[(first + j) * in_len..(first + j + 1) * in_len];
        im2col(&mut col[j * pix..], ld, img, g);
    }
}

/// Convolution forward over `dims.batch` images: Winograd where it `winograd::applies`
/// (3x3, stride 1, padding 1), else im2col and GEMM.
/// out: `[n x out_c x OH*OW]`, inp: `[n x C x H x W]`, weight: `[out_c x C*k*k]`,
/// bias: `[out_c]` or none, scratch: `scratch_len`.
pub fn conv2d_forward(
    out: &mut [f32],
    scratch: &mut [f32],
    inp: &[f32],
    weight: &[f32],
    bias: Option<&[f32]>,
    dims: &Conv2dDims,
) {
    if winograd::applies(&dims.window) {
        return winograd::forward(out, scratch, inp, weight, bias, dims);
    }
    direct_forward(out, scratch, inp, weight, bias, dims);
}

/// Convolution forward by im2col and GEMM, arguments as [`conv2d_forward`]'s (scratch:
/// [`direct_scratch_len`]). Chunks of images go to the pool's threads as they come free,
/// each thread unfolding into its own slot (OpenBLAS held to one thread inside).
pub(super) fn direct_forward(
    out: &mut [f32],
    scratch: &mut [f32],
    inp: &[f32],
    weight: &[f32],
    bias: Option<&[f32]>,
    dims: &Conv2dDims,
) {
    let (n, out_c, pix) = (dims.batch, dims.out_c, dims.window.col_cols());
    let (slots, slot_len) = slots(scratch, dims);
    let per = chunk(pix, n, slots);
    let chunks = n.div_ceil(per);
    let slots = Units::new(&mut scratch[..slots * slot_len], slot_len);
    let out = Units::new(&mut out[..n * out_c * pix], per * out_c * pix);
    for_parts_in_slots(chunks, slots, [out], &|slot, c, [o]| {
        let slot = Slot::new(slot, dims, per * pix);
        let (first, m) = (c.start * per, per.min(n - c.start * per));
        forward_chunk(o, slot.col, slot.tmp, inp, weight, bias, first, m, dims);
    });
}

/// Images `first..first + m` of the forward into `out` (their output, `[m x out_c x pix]`):
/// one GEMM over the chunk unfolded into `col`, through `tmp` when `m > 1`.
#[allow(clippy::too_many_arguments)]
fn forward_chunk(
    out: &mut [f32],
    col: &mut [f32],
    tmp: &mut [f32],
    inp: &[f32],
    weight: &[f32],
    bias: Option<&[f32]>,
    first: usize,
    m: usize,
    dims: &Conv2dDims,
) {
    let (out_c, g) = (dims.out_c, &dims.window);
    let (rows, pix) = (g.col_rows(), g.col_cols());
    let cols = m * pix;
    unfold_chunk(col, inp, first, m, g);
    if m == 1 {
        // out_i[out_c x pix] = W[out_c x rows] * col[rows x pix] + bias
        let beta = match bias {
            Some(b) => {
                for (oc, dst) in out.chunks_exact_mut(pix).enumerate() {
                    dst.fill(b[oc]);
                }
                1.0
            }
            None => 0.0,
        };
        return gemm(GemmDims::new(out_c, pix, rows), 1.0, weight, col, beta, out);
    }
    // tmp[out_c x cols] = W[out_c x rows] * col[rows x cols]
    gemm(GemmDims::new(out_c, cols, rows), 1.0, weight, col, 0.0, tmp);
    for (j, o) in out.chunks_exact_mut(out_c * pix).enumerate() {
        for (oc, dst) in o.chunks_exact_mut(pix).enumerate() {
            let src = &tmp[oc * cols + j * pix..oc * cols + (j + 1) * pix];
            match bias {
                Some(b) => {
                    for (d, &s) in dst.iter_mut().zip(src) {
                        *d = s + b[oc];
                    }
                }
                None => dst.copy_from_slice(src),
            }
        }
    }
}

/// Gradients of one convolution: weight `[out_c x C*k*k]` and bias `[out_c]`, accumulated.
pub struct ConvGrads<'a> {
    pub weight: &'a mut [f32],
    pub bias: Option<&'a mut [f32]>,
}

/// Convolution backward. Accumulates `grads`; writes dinp: `[n x C x H x W]` when given.
/// Winograd where it `winograd::applies`, else im2col and GEMM.
pub fn conv2d_backward(
    dinp: Option<&mut [f32]>,
    grads: ConvGrads<'_>,
    scratch: &mut [f32],
    dout: &[f32],
    inp: &[f32],
    weight: &[f32],
    dims: &Conv2dDims,
) {
    if winograd::applies(&dims.window) {
        return winograd::backward(dinp, grads, scratch, dout, inp, weight, dims);
    }
    direct_backward(dinp, grads, scratch, dout, inp, weight, dims);
}

/// Convolution backward by im2col and GEMM, arguments as [`conv2d_backward`]'s. The
/// pool's threads take fixed shares of the chunks; the first accumulates into `grads`, the
/// others into their slots' gradients, which are then added to `grads` in thread order (so
/// the sum's order depends on the thread count only).
pub(super) fn direct_backward(
    dinp: Option<&mut [f32]>,
    grads: ConvGrads<'_>,
    scratch: &mut [f32],
    dout: &[f32],
    inp: &[f32],
    weight: &[f32],
    dims: &Conv2dDims,
) {
    let (n, out_c, g) = (dims.batch, dims.out_c, &dims.window);
    let (rows, pix, in_len) = (g.col_rows(), g.col_cols(), g.in_len());
    let (slots, slot_len) = slots(scratch, dims);
    let per = chunk(pix, n, slots);
    let chunks = n.div_ceil(per);
    let has_dinp = dinp.is_some();
    let mut no_dinp = [0.0f32; 0];
    let dinp = dinp.map_or(&mut no_dinp[..], |d| &mut d[..n * in_len]);
    let has_bias = grads.bias.is_some();
    let mut no_bias = [0.0f32; 0];
    let dbias = grads.bias.unwrap_or(&mut no_bias[..]);
    let dweight = &mut grads.weight[..out_c * rows];
    {
        // Task 0 takes the layer's gradients, the others accumulate in their slots.
        let layer = Mutex::new(Some((&mut *dweight, &mut *dbias)));
        let slots = Units::new(&mut scratch[..slots * slot_len], slot_len);
        let dinp = Units::new(dinp, per * in_len);
        for_shares_in_slots(chunks, slots, [dinp], &|i, slot, range, [mut di]| {
            let slot = Slot::new(slot, dims, per * pix);
            let (col, tmp) = (slot.col, slot.tmp);
            let (dw, db) = if i == 0 {
                let mut layer = layer.lock().unwrap_or_else(PoisonError::into_inner);
                layer
                    .take()
                    .expect("task 0 takes the layer's gradients once")
            } else {
                slot.dweight.fill(0.0);
                slot.dbias.fill(0.0);
                (slot.dweight, slot.dbias)
            };
            for c in range {
                let (first, m) = (c * per, per.min(n - c * per));
                let len = if has_dinp { m * in_len } else { 0 };
                let (this, rest) = std::mem::take(&mut di).split_at_mut(len);
                di = rest;
                let this = has_dinp.then_some(this);
                let db = has_bias.then_some(&mut *db);
                backward_chunk(
                    this, &mut *dw, db, &mut *col, &mut *tmp, dout, inp, weight, first, m, dims,
                );
            }
        });
    }
    for i in 1..slots {
        let s = Slot::new(
            &mut scratch[i * slot_len..(i + 1) * slot_len],
            dims,
            per * pix,
        );
        add_into(dweight, s.dweight);
        if has_bias {
            add_into(dbias, s.dbias);
        }
    }
}

/// `acc += x`, on the pool.
fn add_into(acc: &mut [f32], x: &[f32]) {
    for_values([acc], &|r, [acc]| {
        for (a, &v) in acc.iter_mut().zip(&x[r]) {
            *a += v;
        }
    });
}

/// Images `first..first + m` of the backward: accumulates `dweight` and `dbias`, writes
/// their input gradient `dinp` (`[m x C x H x W]`) when given.
#[allow(clippy::too_many_arguments)]
fn backward_chunk(
    dinp: Option<&mut [f32]>,
    dweight: &mut [f32],
    dbias: Option<&mut [f32]>,
    col: &mut [f32],
    gathered: &mut [f32],
    dout: &[f32],
    inp: &[f32],
    weight: &[f32],
    first: usize,
    m: usize,
    dims: &Conv2dDims,
) {
    let (out_c, g) = (dims.out_c, &dims.window);
    let (rows, pix, in_len) = (g.col_rows(), g.col_cols(), g.in_len());
    let cols = m * pix;
    // dtmp[out_c x cols]: this chunk's output gradient, images side by side (one image's is
    // its NCHW slice as it is).
    let dtmp: &[f32] = if m == 1 {
        &dout[first * out_c * pix..(first + 1) * out_c * pix]
    } else {
        for j in 0..m {
            let d = &dout[(first + j) * out_c * pix..(first + j + 1) * out_c * pix];
            for (oc, src) in d.chunks_exact(pix).enumerate() {
                gathered[oc * cols + j * pix..oc * cols + (j + 1) * pix].copy_from_slice(src);
            }
        }
        gathered
    };
    if let Some(db) = dbias {
        for (oc, b) in db.iter_mut().enumerate() {
            *b += dtmp[oc * cols..(oc + 1) * cols].iter().sum::<f32>();
        }
    }
    unfold_chunk(col, inp, first, m, g);
    // dW[out_c x rows] += dtmp[out_c x cols] * col^T[cols x rows]
    let gd = GemmDims::new(out_c, rows, cols).b_transposed();
    gemm(gd, 1.0, dtmp, col, 1.0, dweight);
    if let Some(d) = dinp {
        // dcol[rows x cols] = W^T[rows x out_c] * dtmp[out_c x cols], over col.
        let gd = GemmDims::new(rows, cols, out_c).a_transposed();
        gemm(gd, 1.0, weight, dtmp, 0.0, col);
        d.fill(0.0);
        for (j, img) in d.chunks_exact_mut(in_len).enumerate() {
            col2im(img, &col[j * pix..], cols, g);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive_conv(inp: &[f32], w: &[f32], dims: &Conv2dDims) -> Vec<f32> {
        let g = &dims.window;
        let (oh, ow) = (g.out_height(), g.out_width());
        let mut out = vec![0.0; dims.batch * dims.out_c * oh * ow];
        for i in 0..dims.batch {
            for oc in 0..dims.out_c {
                for oy in 0..oh {
                    for ox in 0..ow {
                        let mut s = 0.0;
                        for c in 0..g.channels {
                            for ky in 0..g.kernel {
                                for kx in 0..g.kernel {
                                    let iy = (oy * g.stride + ky) as isize - g.pad as isize;
                                    let ix = (ox * g.stride + kx) as isize - g.pad as isize;
                                    if iy < 0
                                        || ix < 0
                                        || iy >= g.height as isize
                                        || ix >= g.width as isize
                                    {
                                        continue;
                                    }
                                    let x = inp[i * g.in_len()
                                        + c * g.height * g.width
                                        + iy as usize * g.width
                                        + ix as usize];
                                    s += x * w
                                        [oc * g.col_rows() + (c * g.kernel + ky) * g.kernel + kx];
                                }
                            }
                        }
                        out[((i * dims.out_c + oc) * oh + oy) * ow + ox] = s;
                    }
                }
            }
        }
        out
    }

    #[test]
    fn chunked_conv_matches_the_definition_across_chunk_boundaries() {
        // 70 images of 8x8 output pixels: chunks of 64 images, the last one partial; and
        // 2 images of 16x16 pixels, one GEMM each.
        for (pad, stride, side, batch) in
            [(1, 1, 8, 70), (0, 2, 8, 70), (2, 1, 8, 70), (1, 1, 16, 2)]
        {
            let window = Window2d {
                channels: 2,
                height: side,
                width: side,
                kernel: 3,
                stride,
                pad,
            };
            let dims = Conv2dDims {
                batch,
                out_c: 3,
                window,
            };
            let inp: Vec<f32> = (0..batch * window.in_len())
                .map(|i| ((i * 13 % 17) as f32) - 8.0)
                .collect();
            let w: Vec<f32> = (0..3 * window.col_rows())
                .map(|i| ((i * 7 % 5) as f32) - 2.0)
                .collect();
            let bias = [0.5, -1.0, 2.0];
            let mut want = naive_conv(&inp, &w, &dims);
            let pix = window.col_cols();
            for (i, v) in want.iter_mut().enumerate() {
                *v += bias[i / pix % 3];
            }
            let mut out = vec![f32::NAN; want.len()];
            let mut scratch = vec![0.0; scratch_len(&dims)];
            conv2d_forward(&mut out, &mut scratch, &inp, &w, Some(&bias), &dims);
            assert_eq!(out, want, "pad {pad} stride {stride} side {side}");
        }
    }

    #[test]
    fn im2col_matches_direct_indexing_with_padding_and_stride() {
        // (1, 1) and (2, 1) with kernel 3 and 5 take the block-copy path.
        for (pad, stride, kernel) in [
            (0, 1, 3),
            (2, 1, 3),
            (1, 2, 3),
            (1, 3, 3),
            (1, 1, 3),
            (2, 1, 5),
        ] {
            let g = Window2d {
                channels: 2,
                height: 5,
                width: 6,
                kernel,
                stride,
                pad,
            };
            let inp: Vec<f32> = (0..2 * 5 * 6).map(|i| i as f32 + 1.0).collect();
            let ld = g.col_cols() + 3;
            let mut col = vec![f32::NAN; g.col_rows() * ld];
            im2col(&mut col, ld, &inp, &g);
            let (oh, ow) = (g.out_height(), g.out_width());
            for c in 0..2 {
                for ky in 0..kernel {
                    for kx in 0..kernel {
                        for oy in 0..oh {
                            for ox in 0..ow {
                                let iy = (oy * stride + ky) as isize - pad as isize;
                                let ix = (ox * stride + kx) as isize - pad as isize;
                                let want = if iy < 0 || ix < 0 || iy >= 5 || ix >= 6 {
                                    0.0
                                } else {
                                    inp[c * 30 + iy as usize * 6 + ix as usize]
                                };
                                let row = (c * kernel + ky) * kernel + kx;
                                assert_eq!(
                                    col[row * ld + oy * ow + ox],
                                    want,
                                    "pad {pad} stride {stride} k {kernel}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn col2im_is_the_adjoint_of_im2col() {
        // <im2col(x), y> == <x, col2im(y)> for random x, y.
        let g = Window2d {
            channels: 2,
            height: 7,
            width: 5,
            kernel: 3,
            stride: 2,
            pad: 1,
        };
        let ld = g.col_cols();
        let x: Vec<f32> = (0..2 * 35).map(|i| ((i * 7 % 11) as f32) - 5.0).collect();
        let y: Vec<f32> = (0..g.col_rows() * ld)
            .map(|i| ((i * 5 % 13) as f32) - 6.0)
            .collect();
        let mut col = vec![0.0; y.len()];
        im2col(&mut col, ld, &x, &g);
        let lhs: f32 = col.iter().zip(&y).map(|(a, b)| a * b).sum();
        let mut back = vec![0.0; x.len()];
        col2im(&mut back, &y, ld, &g);
        let rhs: f32 = back.iter().zip(&x).map(|(a, b)| a * b).sum();
        assert_eq!(lhs, rhs);
    }
}
