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

use super::gemm::gemm;
use super::winograd;
use crate::compute::backend::{Conv2dDims, GemmDims, Window2d};

/// Output pixels per GEMM (the GEMM's `n`).
pub const GEMM_COLUMNS: usize = 4096;

/// Output pixels from which one image makes a GEMM of its own.
pub const WIDE_PLANE: usize = 256;

/// Images per GEMM for planes of `pix` output pixels.
fn chunk(pix: usize, batch: usize) -> usize {
    if pix >= WIDE_PLANE {
        return 1;
    }
    (GEMM_COLUMNS / pix.max(1)).clamp(1, batch.max(1))
}

/// Scratch values a convolution needs: for im2col the unfolded chunk `[C*k*k x cols]` and
/// one output chunk `[out_c x cols]`; where Winograd [`winograd::fits`], enough for either
/// (it may be turned off after the model is built).
pub fn scratch_len(dims: &Conv2dDims) -> usize {
    if winograd::fits(&dims.window) {
        return winograd::scratch_len(dims).max(direct_scratch_len(dims));
    }
    direct_scratch_len(dims)
}

/// Scratch values of the im2col path.
pub(super) fn direct_scratch_len(dims: &Conv2dDims) -> usize {
    let g = &dims.window;
    let cols = chunk(g.col_cols(), dims.batch) * g.col_cols();
    (g.col_rows() + dims.out_c) * cols
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
        let (lo, hi) = valid_cols(kx, ow, g);
        for (oy, out) in dst.chunks_exact_mut(ow).enumerate() {
            let iy = (oy * g.stride + ky) as isize - g.pad as isize;
            if iy < 0 || iy >= h as isize {
                out.fill(0.0);
                continue;
            }
            let src = &plane[iy as usize * w..(iy as usize + 1) * w];
            out[..lo].fill(0.0);
            out[hi..].fill(0.0);
            if g.stride == 1 {
                let start = lo + kx - g.pad;
                out[lo..hi].copy_from_slice(&src[start..start + hi - lo]);
            } else {
                for (ox, o) in (lo..hi).zip(&mut out[lo..hi]) {
                    *o = src[ox * g.stride + kx - g.pad];
                }
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
                out[..lo].fill(0.0);
                out[hi..].fill(0.0);
            }
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
            } else {
                for ox in lo..hi {
                    dst[ox * g.stride + kx - g.pad] += s[ox];
                }
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

/// Convolution forward over `dims.batch` images: Winograd where it [`winograd::applies`]
/// (3x3, stride 1, padding 1), else im2col and GEMM.
/// out: `[n x out_c x OH*OW]`, inp: `[n x C x H x W]`, weight: `[out_c x C*k*k]`,
/// bias: `[out_c]` or none, scratch: [`scratch_len`].
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
/// [`direct_scratch_len`]).
pub(super) fn direct_forward(
    out: &mut [f32],
    scratch: &mut [f32],
    inp: &[f32],
    weight: &[f32],
    bias: Option<&[f32]>,
    dims: &Conv2dDims,
) {
    let (n, out_c, g) = (dims.batch, dims.out_c, &dims.window);
    let (rows, pix) = (g.col_rows(), g.col_cols());
    let per = chunk(pix, n);
    let mut first = 0;
    while first < n {
        let m = per.min(n - first);
        let cols = m * pix;
        let (col, tmp) = scratch.split_at_mut(rows * cols);
        unfold_chunk(col, inp, first, m, g);
        if m == 1 {
            // out_i[out_c x pix] = W[out_c x rows] * col[rows x pix] + bias
            let o = &mut out[first * out_c * pix..(first + 1) * out_c * pix];
            match bias {
                Some(b) => {
                    for (oc, dst) in o.chunks_exact_mut(pix).enumerate() {
                        dst.fill(b[oc]);
                    }
                    gemm(GemmDims::new(out_c, pix, rows), 1.0, weight, col, 1.0, o);
                }
                None => gemm(GemmDims::new(out_c, pix, rows), 1.0, weight, col, 0.0, o),
            }
            first += 1;
            continue;
        }
        // tmp[out_c x cols] = W[out_c x rows] * col[rows x cols]
        gemm(GemmDims::new(out_c, cols, rows), 1.0, weight, col, 0.0, tmp);
        for j in 0..m {
            let o = &mut out[(first + j) * out_c * pix..(first + j + 1) * out_c * pix];
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
        first += m;
    }
}

/// Gradients of one convolution: weight `[out_c x C*k*k]` and bias `[out_c]`, accumulated.
pub struct ConvGrads<'a> {
    pub weight: &'a mut [f32],
    pub bias: Option<&'a mut [f32]>,
}

/// Convolution backward. Accumulates `grads`; writes dinp: `[n x C x H x W]` when given.
/// Winograd where it [`winograd::applies`], else im2col and GEMM.
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

/// Convolution backward by im2col and GEMM, arguments as [`conv2d_backward`]'s.
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
    let ConvGrads {
        weight: dweight,
        mut bias,
    } = grads;
    let mut dinp = dinp;
    if let Some(d) = dinp.as_deref_mut() {
        d[..n * in_len].fill(0.0);
    }
    let per = chunk(pix, n);
    let mut first = 0;
    while first < n {
        let m = per.min(n - first);
        let cols = m * pix;
        let (col, gathered) = scratch.split_at_mut(rows * cols);
        // dtmp[out_c x cols]: this chunk's output gradient, images side by side (one
        // image's is its NCHW slice as it is).
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
        if let Some(db) = bias.as_deref_mut() {
            for (oc, b) in db.iter_mut().enumerate() {
                *b += dtmp[oc * cols..(oc + 1) * cols].iter().sum::<f32>();
            }
        }
        unfold_chunk(col, inp, first, m, g);
        // dW[out_c x rows] += dtmp[out_c x cols] * col^T[cols x rows]
        let dims = GemmDims::new(out_c, rows, cols).b_transposed();
        gemm(dims, 1.0, dtmp, col, 1.0, dweight);
        if let Some(d) = dinp.as_deref_mut() {
            // dcol[rows x cols] = W^T[rows x out_c] * dtmp[out_c x cols], over col.
            let dims = GemmDims::new(rows, cols, out_c).a_transposed();
            gemm(dims, 1.0, weight, dtmp, 0.0, col);
            for j in 0..m {
                let img = &mut d[(first + j) * in_len..(first + j + 1) * in_len];
                col2im(img, &col[j * pix..], cols, g);
            }
        }
        first += m;
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
        for (pad, stride, kernel) in [(0, 1, 3), (2, 1, 3), (1, 2, 3), (1, 1, 3), (2, 1, 5)] {
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
