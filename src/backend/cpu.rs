//! CPU backend: ndarray GEMM (the system OpenBLAS underneath) plus plain loops.
//!
//! Layout conventions: activations are NCHW, row-major, batch first; a linear layer's
//! weight is `[out x in]` and a convolution's weight is `[out_c x in_c*k*k]` (PyTorch's
//! layouts, so checkpoints map one to one). Gradient outputs named `d*` for parameters
//! are accumulated (`+=`); the caller zeroes them once per step.

// Links the system OpenBLAS that ndarray's `blas` feature calls.
extern crate blas_src;

use ndarray::linalg::general_mat_mul;
use ndarray::{ArrayView2, ArrayViewMut2, ShapeBuilder};

extern "C" {
    fn openblas_set_num_threads(n: std::ffi::c_int);
}

/// Sets the number of threads OpenBLAS uses for one GEMM (one per rank by default, so
/// that ranks sharing a node do not oversubscribe its cores).
pub fn set_threads(n: usize) {
    let n = n.clamp(1, 1024) as std::ffi::c_int;
    // SAFETY: plain setter of OpenBLAS's thread count; no pointers involved.
    unsafe { openblas_set_num_threads(n) }
}

/// Row-major `rows x cols` view of `data`, optionally transposed.
fn view(data: &[f32], rows: usize, cols: usize, transposed: bool) -> ArrayView2<'_, f32> {
    if transposed {
        // Stored as cols x rows; read it as its transpose.
        ArrayView2::from_shape((rows, cols).strides((1, rows)), &data[..rows * cols])
            .expect("gemm operand shape matches its slice")
    } else {
        ArrayView2::from_shape((rows, cols), &data[..rows * cols])
            .expect("gemm operand shape matches its slice")
    }
}

/// Shapes of `c[m x n] = op(a) * op(b)` with `op(a)` `m x k` and `op(b)` `k x n`.
/// `trans_a` means `a` is stored `k x m`; `trans_b` means `b` is stored `n x k`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmDims {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub trans_a: bool,
    pub trans_b: bool,
}

impl GemmDims {
    /// `a` stored `m x k` and `b` stored `k x n`.
    pub fn new(m: usize, n: usize, k: usize) -> Self {
        Self {
            m,
            n,
            k,
            trans_a: false,
            trans_b: false,
        }
    }

    /// `a` stored `k x m`.
    pub fn a_transposed(self) -> Self {
        Self {
            trans_a: true,
            ..self
        }
    }

    /// `b` stored `n x k`.
    pub fn b_transposed(self) -> Self {
        Self {
            trans_b: true,
            ..self
        }
    }
}

/// `c = alpha * op(a) * op(b) + beta * c`, shaped as `dims` says.
pub fn gemm(dims: GemmDims, alpha: f32, a: &[f32], b: &[f32], beta: f32, c: &mut [f32]) {
    let GemmDims {
        m,
        n,
        k,
        trans_a,
        trans_b,
    } = dims;
    let a = view(a, m, k, trans_a);
    let b = view(b, k, n, trans_b);
    let mut c = ArrayViewMut2::from_shape((m, n), &mut c[..m * n])
        .expect("gemm output shape matches its slice");
    general_mat_mul(alpha, &a, &b, beta, &mut c);
}

/// Shape of a 2-D convolution or pooling window over one image plane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window2d {
    pub channels: usize,
    pub height: usize,
    pub width: usize,
    pub kernel: usize,
    pub stride: usize,
    pub pad: usize,
}

impl Window2d {
    pub fn out_height(&self) -> usize {
        (self.height + 2 * self.pad - self.kernel) / self.stride + 1
    }
    pub fn out_width(&self) -> usize {
        (self.width + 2 * self.pad - self.kernel) / self.stride + 1
    }
    /// Rows of the im2col matrix: `channels * kernel * kernel`.
    pub fn col_rows(&self) -> usize {
        self.channels * self.kernel * self.kernel
    }
    /// Columns of the im2col matrix: output pixels per channel.
    pub fn col_cols(&self) -> usize {
        self.out_height() * self.out_width()
    }
}

/// A convolution over a batch: `batch` images shaped as `window` says, through `out_c`
/// filters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conv2dDims {
    pub batch: usize,
    pub out_c: usize,
    pub window: Window2d,
}

/// A fully connected layer over a batch: `batch` rows of `in_f` features to `out_f`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinearDims {
    pub batch: usize,
    pub in_f: usize,
    pub out_f: usize,
}

/// The gradients of a layer's weight and bias, accumulated (`+=`) by its backward pass.
pub struct ParamGrads<'a> {
    pub weight: &'a mut [f32],
    pub bias: &'a mut [f32],
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

/// Unfold one image `inp[C x H x W]` into `col[C*k*k x OH*OW]` (zero padding).
pub fn im2col(col: &mut [f32], inp: &[f32], g: &Window2d) {
    let (oh, ow) = (g.out_height(), g.out_width());
    let (h, w) = (g.height, g.width);
    for (row, dst) in col[..g.col_rows() * oh * ow]
        .chunks_exact_mut(oh * ow)
        .enumerate()
    {
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

/// Fold `col[C*k*k x OH*OW]` back into one image, accumulating into `dinp[C x H x W]`.
pub fn col2im(dinp: &mut [f32], col: &[f32], g: &Window2d) {
    let (oh, ow) = (g.out_height(), g.out_width());
    let (h, w) = (g.height, g.width);
    for (row, src) in col[..g.col_rows() * oh * ow]
        .chunks_exact(oh * ow)
        .enumerate()
    {
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

/// Convolution forward over a batch of `n` images.
/// out: `[n x out_c x OH*OW]`, cols: `[n x C*k*k x OH*OW]` (kept for backward),
/// inp: `[n x C x H x W]`, weight: `[out_c x C*k*k]`, bias: `[out_c]`.
pub fn conv2d_forward(
    out: &mut [f32],
    cols: &mut [f32],
    inp: &[f32],
    weight: &[f32],
    bias: &[f32],
    dims: &Conv2dDims,
) {
    let (n, out_c, g) = (dims.batch, dims.out_c, &dims.window);
    let (rows, pix) = (g.col_rows(), g.col_cols());
    let in_len = g.channels * g.height * g.width;
    for i in 0..n {
        let col = &mut cols[i * rows * pix..(i + 1) * rows * pix];
        im2col(col, &inp[i * in_len..(i + 1) * in_len], g);
        let o = &mut out[i * out_c * pix..(i + 1) * out_c * pix];
        for (oc, chunk) in o.chunks_exact_mut(pix).enumerate() {
            chunk.fill(bias[oc]);
        }
        gemm(GemmDims::new(out_c, pix, rows), 1.0, weight, col, 1.0, o);
    }
}

/// Convolution backward. Accumulates `grads`; writes `dinp` when given (the first layer of
/// a network does not need it).
pub fn conv2d_backward(
    dinp: Option<&mut [f32]>,
    grads: ParamGrads<'_>,
    dcol: &mut [f32],
    dout: &[f32],
    cols: &[f32],
    weight: &[f32],
    dims: &Conv2dDims,
) {
    let (n, out_c, g) = (dims.batch, dims.out_c, &dims.window);
    let ParamGrads {
        weight: dweight,
        bias: dbias,
    } = grads;
    let (rows, pix) = (g.col_rows(), g.col_cols());
    let in_len = g.channels * g.height * g.width;
    for i in 0..n {
        let d = &dout[i * out_c * pix..(i + 1) * out_c * pix];
        let col = &cols[i * rows * pix..(i + 1) * rows * pix];
        // dW[out_c x rows] += dout_i[out_c x pix] * col_i^T[pix x rows]
        let dims = GemmDims::new(out_c, rows, pix).b_transposed();
        gemm(dims, 1.0, d, col, 1.0, dweight);
        for (oc, chunk) in d.chunks_exact(pix).enumerate() {
            dbias[oc] += chunk.iter().sum::<f32>();
        }
    }
    if let Some(dinp) = dinp {
        dinp[..n * in_len].fill(0.0);
        for i in 0..n {
            let d = &dout[i * out_c * pix..(i + 1) * out_c * pix];
            // dcol[rows x pix] = W^T[rows x out_c] * dout_i[out_c x pix]
            let dims = GemmDims::new(rows, pix, out_c).a_transposed();
            gemm(dims, 1.0, weight, d, 0.0, dcol);
            col2im(&mut dinp[i * in_len..(i + 1) * in_len], dcol, g);
        }
    }
}

/// Linear forward: `out[n x o] = inp[n x i] * weight^T + bias`, weight `[o x i]`.
pub fn linear_forward(
    out: &mut [f32],
    inp: &[f32],
    weight: &[f32],
    bias: &[f32],
    dims: &LinearDims,
) {
    let LinearDims {
        batch: n,
        in_f,
        out_f,
    } = *dims;
    for row in out[..n * out_f].chunks_exact_mut(out_f) {
        row.copy_from_slice(bias);
    }
    let dims = GemmDims::new(n, out_f, in_f).b_transposed();
    gemm(dims, 1.0, inp, weight, 1.0, out);
}

/// Linear backward: accumulates `grads` (weight `[o x i]`, bias `[o]`); writes `dinp[n x i]`
/// when given.
pub fn linear_backward(
    dinp: Option<&mut [f32]>,
    grads: ParamGrads<'_>,
    dout: &[f32],
    inp: &[f32],
    weight: &[f32],
    dims: &LinearDims,
) {
    let LinearDims {
        batch: n,
        in_f,
        out_f,
    } = *dims;
    let dims = GemmDims::new(out_f, in_f, n).a_transposed();
    gemm(dims, 1.0, dout, inp, 1.0, grads.weight);
    for row in dout[..n * out_f].chunks_exact(out_f) {
        for (b, d) in grads.bias.iter_mut().zip(row) {
            *b += d;
        }
    }
    if let Some(dinp) = dinp {
        gemm(GemmDims::new(n, in_f, out_f), 1.0, dout, weight, 0.0, dinp);
    }
}

/// ReLU forward: `out = max(inp, 0)`.
pub fn relu_forward(out: &mut [f32], inp: &[f32]) {
    for (o, &x) in out.iter_mut().zip(inp) {
        *o = x.max(0.0);
    }
}

/// ReLU backward from the forward output: `dinp = dout * (out > 0)`.
pub fn relu_backward(dinp: &mut [f32], dout: &[f32], out: &[f32]) {
    for ((di, &d), &o) in dinp.iter_mut().zip(dout).zip(out) {
        *di = if o > 0.0 { d } else { 0.0 };
    }
}

/// Max pooling forward with `kernel == stride`, no padding, over `planes` = n*C planes.
/// `argmax` records, per output, the flat index of the winning input within its plane
/// (the first maximum wins, as in PyTorch).
pub fn maxpool_forward(
    out: &mut [f32],
    argmax: &mut [u32],
    inp: &[f32],
    planes: usize,
    g: &Window2d,
) {
    let (oh, ow) = (g.out_height(), g.out_width());
    let (h, w, k) = (g.height, g.width, g.kernel);
    for p in 0..planes {
        let plane = &inp[p * h * w..(p + 1) * h * w];
        let o = &mut out[p * oh * ow..(p + 1) * oh * ow];
        let a = &mut argmax[p * oh * ow..(p + 1) * oh * ow];
        for oy in 0..oh {
            let (o, a) = (
                &mut o[oy * ow..(oy + 1) * ow],
                &mut a[oy * ow..(oy + 1) * ow],
            );
            if k == 2 {
                // The common case, without the generic window loop.
                let base = 2 * oy * w;
                let (r0, r1) = (&plane[base..base + w], &plane[base + w..base + 2 * w]);
                for ox in 0..ow {
                    let (i, j) = (2 * ox, 2 * ox + 1);
                    let (m0, i0) = if r0[j] > r0[i] {
                        (r0[j], j)
                    } else {
                        (r0[i], i)
                    };
                    let (m1, i1) = if r1[j] > r1[i] {
                        (r1[j], j + w)
                    } else {
                        (r1[i], i + w)
                    };
                    let (m, idx) = if m1 > m0 { (m1, i1) } else { (m0, i0) };
                    o[ox] = m;
                    a[ox] = (base + idx) as u32;
                }
                continue;
            }
            for ox in 0..ow {
                let first = oy * k * w + ox * k;
                let (mut best, mut best_i) = (plane[first], first);
                for ky in 0..k {
                    for kx in 0..k {
                        let i = first + ky * w + kx;
                        if plane[i] > best {
                            best = plane[i];
                            best_i = i;
                        }
                    }
                }
                o[ox] = best;
                a[ox] = best_i as u32;
            }
        }
    }
}

/// Max pooling backward: routes each output gradient to its argmax input.
pub fn maxpool_backward(
    dinp: &mut [f32],
    dout: &[f32],
    argmax: &[u32],
    planes: usize,
    g: &Window2d,
) {
    let (hw, ohw) = (g.height * g.width, g.out_height() * g.out_width());
    dinp[..planes * hw].fill(0.0);
    for p in 0..planes {
        let di = &mut dinp[p * hw..(p + 1) * hw];
        for (&d, &a) in dout[p * ohw..(p + 1) * ohw]
            .iter()
            .zip(&argmax[p * ohw..(p + 1) * ohw])
        {
            di[a as usize] += d;
        }
    }
}

/// Softmax cross-entropy over `n` rows of `classes` logits. Writes `dlogits` (gradient of
/// the batch-mean loss) and returns (mean loss, number of rows whose argmax is the label).
pub fn softmax_xent_forward_backward(
    dlogits: &mut [f32],
    logits: &[f32],
    labels: &[u8],
    n: usize,
    classes: usize,
) -> (f32, usize) {
    let mut loss = 0.0f64;
    let mut correct = 0;
    let inv_n = 1.0 / n as f32;
    for i in 0..n {
        let row = &logits[i * classes..(i + 1) * classes];
        let d = &mut dlogits[i * classes..(i + 1) * classes];
        let label = labels[i] as usize;
        let (mut max, mut arg) = (row[0], 0);
        for (c, &v) in row.iter().enumerate().skip(1) {
            if v > max {
                max = v;
                arg = c;
            }
        }
        if arg == label {
            correct += 1;
        }
        let mut sum = 0.0f32;
        for (dv, &v) in d.iter_mut().zip(row) {
            *dv = (v - max).exp();
            sum += *dv;
        }
        loss += (sum.ln() - (row[label] - max)) as f64;
        let inv_sum = 1.0 / sum;
        for dv in d.iter_mut() {
            *dv *= inv_sum * inv_n;
        }
        d[label] -= inv_n;
    }
    ((loss / n as f64) as f32, correct)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemm_matches_naive_for_all_transpositions() {
        let (m, n, k) = (3, 4, 5);
        let a: Vec<f32> = (0..m * k).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..k * n).map(|i| (i as f32 * 0.71).cos()).collect();
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let at = |r: usize, c: usize| if ta { a[c * m + r] } else { a[r * k + c] };
            let bt = |r: usize, c: usize| if tb { b[c * k + r] } else { b[r * n + c] };
            let mut c = vec![1.0f32; m * n];
            let dims = GemmDims {
                m,
                n,
                k,
                trans_a: ta,
                trans_b: tb,
            };
            gemm(dims, 2.0, &a, &b, 0.5, &mut c);
            for r in 0..m {
                for col in 0..n {
                    let want: f32 = 0.5 + 2.0 * (0..k).map(|j| at(r, j) * bt(j, col)).sum::<f32>();
                    assert!((c[r * n + col] - want).abs() < 1e-5, "ta={ta} tb={tb}");
                }
            }
        }
    }

    #[test]
    fn im2col_matches_direct_indexing_with_padding_and_stride() {
        for (pad, stride) in [(0, 1), (2, 1), (1, 2)] {
            let g = Window2d {
                channels: 2,
                height: 5,
                width: 6,
                kernel: 3,
                stride,
                pad,
            };
            let inp: Vec<f32> = (0..2 * 5 * 6).map(|i| i as f32 + 1.0).collect();
            let mut col = vec![f32::NAN; g.col_rows() * g.col_cols()];
            im2col(&mut col, &inp, &g);
            let (oh, ow) = (g.out_height(), g.out_width());
            for c in 0..2 {
                for ky in 0..3 {
                    for kx in 0..3 {
                        for oy in 0..oh {
                            for ox in 0..ow {
                                let iy = (oy * stride + ky) as isize - pad as isize;
                                let ix = (ox * stride + kx) as isize - pad as isize;
                                let want = if iy < 0 || ix < 0 || iy >= 5 || ix >= 6 {
                                    0.0
                                } else {
                                    inp[c * 30 + iy as usize * 6 + ix as usize]
                                };
                                let row = c * 9 + ky * 3 + kx;
                                assert_eq!(col[row * oh * ow + oy * ow + ox], want);
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
        let x: Vec<f32> = (0..2 * 35).map(|i| ((i * 7 % 11) as f32) - 5.0).collect();
        let y: Vec<f32> = (0..g.col_rows() * g.col_cols())
            .map(|i| ((i * 5 % 13) as f32) - 6.0)
            .collect();
        let mut col = vec![0.0; y.len()];
        im2col(&mut col, &x, &g);
        let lhs: f32 = col.iter().zip(&y).map(|(a, b)| a * b).sum();
        let mut back = vec![0.0; x.len()];
        col2im(&mut back, &y, &g);
        let rhs: f32 = back.iter().zip(&x).map(|(a, b)| a * b).sum();
        assert_eq!(lhs, rhs);
    }

    #[test]
    fn softmax_xent_of_uniform_logits_is_log_classes() {
        let logits = vec![0.0f32; 2 * 10];
        let mut d = vec![0.0; 20];
        let (loss, _) = softmax_xent_forward_backward(&mut d, &logits, &[3, 7], 2, 10);
        assert!((loss - 10f32.ln()).abs() < 1e-6);
        assert!((d[3] - (0.1 - 1.0) / 2.0).abs() < 1e-6);
        assert!((d.iter().sum::<f32>()).abs() < 1e-6);
    }
}
