//! Winograd F(2x2, 3x3) for 3x3 convolutions of stride 1 and padding 1 (Lavin and Gray,
//! 2016): forward and both backward products.
//!
//! The output is cut into 2x2 tiles; each reads a 4x4 input patch. With the 4x4 transforms
//! `V = Bt d B` of a patch and `U = G g Gt` of a 3x3 filter, a tile is `Y = At M A` where
//! `M[xi] = sum_c U[xi][k, c] V[xi][c, tile]` for each of the 16 points `xi`: 16 GEMMs of
//! `out_c x channels x tiles` do the multiplying, 16 products per tile and channel pair in
//! place of the direct 36. The backward products are the adjoints of the same linear maps:
//! `dM = A dY At` per tile, then `dU[xi] += dM[xi] V[xi]^T` (the weight gradient, folded back
//! by `Gt dU G` once per call) and `dV[xi] = U[xi]^T dM[xi]` (scattered back to the input
//! gradient by `B dV Bt`). So the gradient is exactly that of the forward computed here.
//!
//! Images are taken in chunks of about [`TILE_COLUMNS`] tiles, which bounds the scratch.
//! The filter transform `U` is computed once per call, not per chunk.

use std::sync::atomic::{AtomicBool, Ordering};

use super::elementwise::fill;
use super::gemm::gemm;
use super::threads::{for_ranges, Shared};
use super::winograd_rows as rows;
use crate::compute::backend::{Conv2dDims, GemmDims, Window2d};

/// Tiles per chunk of images (the GEMMs' `n`).
pub const TILE_COLUMNS: usize = 1024;

/// Fewer input channels than this (a network's first layer) stay on im2col: the GEMMs'
/// inner dimension would be too short to pay for the transforms.
pub const MIN_CHANNELS: usize = 8;

/// Points of the transformed tile.
const XI: usize = 16;

/// Whether Winograd is used where it applies (on by default; tests and benchmarks compare
/// it with im2col by turning it off).
static ENABLED: AtomicBool = AtomicBool::new(true);

/// Turns Winograd on or off for the whole process (im2col and GEMM when off).
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// Whether Winograd suits this window: 3x3, stride 1, padding 1, at least
/// [`MIN_CHANNELS`] input channels.
pub fn fits(g: &Window2d) -> bool {
    g.kernel == 3 && g.stride == 1 && g.pad == 1 && g.channels >= MIN_CHANNELS
}

/// Whether Winograd computes this convolution: it [`fits`] and is not turned off.
pub fn applies(g: &Window2d) -> bool {
    fits(g) && ENABLED.load(Ordering::Relaxed)
}

/// The tile grid of one image: (rows, columns) of 2x2 output tiles.
fn grid(g: &Window2d) -> (usize, usize) {
    (g.height.div_ceil(2), g.width.div_ceil(2))
}

/// Images per chunk.
fn chunk(g: &Window2d, batch: usize) -> usize {
    let (th, tw) = grid(g);
    (TILE_COLUMNS / (th * tw).max(1)).clamp(1, batch.max(1))
}

/// Scratch values forward and backward need: `U` and `dU` `[16 x out_c x C]`, then for one
/// chunk of `T` tiles `V` and `dV` `[16 x C x T]` and `M` (or `dM`) `[16 x out_c x T]`.
pub fn scratch_len(dims: &Conv2dDims) -> usize {
    let (g, k) = (&dims.window, dims.out_c);
    let (th, tw) = grid(g);
    let t = chunk(g, dims.batch) * th * tw;
    2 * XI * k * g.channels + XI * t * (2 * g.channels + k)
}

// The 1-D transforms; each 2-D one applies its 1-D map to the columns, then to the rows.

/// `Bt x`.
fn bt(x: [f32; 4]) -> [f32; 4] {
    [x[0] - x[2], x[1] + x[2], x[2] - x[1], x[1] - x[3]]
}

/// `B x`, the adjoint of [`bt`].
fn b(x: [f32; 4]) -> [f32; 4] {
    [x[0], x[1] - x[2] + x[3], x[1] + x[2] - x[0], -x[3]]
}

/// `G x`.
fn g(x: [f32; 3]) -> [f32; 4] {
    [
        x[0],
        0.5 * (x[0] + x[1] + x[2]),
        0.5 * (x[0] - x[1] + x[2]),
        x[2],
    ]
}

/// `Gt x`, the adjoint of [`g`].
fn gt(x: [f32; 4]) -> [f32; 3] {
    [
        x[0] + 0.5 * (x[1] + x[2]),
        0.5 * (x[1] - x[2]),
        0.5 * (x[1] + x[2]) + x[3],
    ]
}

/// `At x`.
fn at(x: [f32; 4]) -> [f32; 2] {
    [x[0] + x[1] + x[2], x[1] - x[2] - x[3]]
}

/// `A x`, the adjoint of [`at`].
fn a(x: [f32; 2]) -> [f32; 4] {
    [x[0], x[0] + x[1], x[0] - x[1], -x[1]]
}

/// `L x Lt` for the 1-D map `f` of `L`: `f` over each column, then over each row.
#[inline(always)]
fn sandwich<const I: usize, const O: usize>(
    x: [[f32; I]; I],
    f: impl Fn([f32; I]) -> [f32; O],
) -> [[f32; O]; O] {
    let cols: [[f32; O]; I] = std::array::from_fn(|j| f(std::array::from_fn(|i| x[i][j])));
    std::array::from_fn(|i| f(std::array::from_fn(|j| cols[j][i])))
}

/// `U[xi][k, c] = (G w[k, c] Gt)[xi]` for weights `[out_c x C x 3 x 3]`.
fn transform_filters(u: &mut [f32], weight: &[f32], k: usize, c: usize) {
    let u = Shared::new(&mut u[..XI * k * c]);
    for_ranges(k * c, &|pairs| {
        for kc in pairs {
            let w = &weight[kc * 9..][..9];
            let w3: [[f32; 3]; 3] = std::array::from_fn(|i| [w[3 * i], w[3 * i + 1], w[3 * i + 2]]);
            let t = sandwich(w3, g);
            for xi in 0..XI {
                // SAFETY: pair kc is this task's alone.
                unsafe { u.set(xi * k * c + kc, t[xi / 4][xi % 4]) };
            }
        }
    });
}

/// `dw[k, c] += Gt dU[.][k, c] G`, the adjoint of [`transform_filters`].
fn fold_filter_grads(dw: &mut [f32], du: &[f32], k: usize, c: usize) {
    let dw = Shared::new(&mut dw[..k * c * 9]);
    for_ranges(k * c, &|pairs| {
        // SAFETY: these pairs' filters are this task's alone.
        let part = unsafe { dw.part(pairs.start * 9..pairs.end * 9) };
        for (w, kc) in part.chunks_exact_mut(9).zip(pairs) {
            let d: [[f32; 4]; 4] =
                std::array::from_fn(|i| std::array::from_fn(|j| du[(4 * i + j) * k * c + kc]));
            let t = sandwich(d, gt);
            for (i, row) in t.iter().enumerate() {
                for (j, v) in row.iter().enumerate() {
                    w[3 * i + j] += v;
                }
            }
        }
    });
}

/// The 4x4 input patch of tile `(ty, tx)` of one plane, zero outside it.
#[inline(always)]
fn patch(plane: &[f32], g: &Window2d, ty: usize, tx: usize) -> [[f32; 4]; 4] {
    let (h, w) = (g.height as isize, g.width as isize);
    let (y0, x0) = (2 * ty as isize - 1, 2 * tx as isize - 1);
    std::array::from_fn(|i| {
        let y = y0 + i as isize;
        std::array::from_fn(|j| {
            let x = x0 + j as isize;
            if y < 0 || y >= h || x < 0 || x >= w {
                0.0
            } else {
                plane[(y * w + x) as usize]
            }
        })
    })
}

/// `V[xi][c, t] = (Bt d B)[xi]` for every tile `t` of images `first..first + m` of `inp`
/// (`V` holds `16 x C x T` values, `T` the chunk's tiles).
fn transform_inputs(v: &mut [f32], inp: &[f32], first: usize, m: usize, g: &Window2d) {
    let (th, tw) = grid(g);
    let (c_n, per, hw) = (g.channels, th * tw, g.height * g.width);
    let t_n = m * per;
    let v = Shared::new(&mut v[..XI * c_n * t_n]);
    for_ranges(m * c_n, &|planes| {
        for jc in planes {
            let (j, c) = (jc / c_n, jc % c_n);
            let plane = &inp[(first * c_n + jc) * hw..][..hw];
            if g.width <= rows::MAX_WIDTH {
                // SAFETY: plane (j, c)'s tiles are this task's alone.
                let mut dst = std::array::from_fn(|xi| unsafe {
                    v.part((xi * c_n + c) * t_n + j * per..(xi * c_n + c) * t_n + (j + 1) * per)
                });
                rows::input_tiles(&mut dst, plane, g.height, g.width);
                continue;
            }
            for ty in 0..th {
                for tx in 0..tw {
                    let t = j * per + ty * tw + tx;
                    let vt = sandwich(patch(plane, g, ty, tx), bt);
                    for xi in 0..XI {
                        // SAFETY: plane (j, c) is this task's alone.
                        unsafe { v.set((xi * c_n + c) * t_n + t, vt[xi / 4][xi % 4]) };
                    }
                }
            }
        }
    });
}

/// The 16 GEMMs `out[xi] = op(lhs[xi]) op(rhs[xi])` (+ `out[xi]` when `beta` is 1), the
/// points shared among the pool's threads.
fn batched_gemm(dims: GemmDims, lhs: &[f32], rhs: &[f32], beta: f32, out: &mut [f32]) {
    let (ls, rs, os) = (dims.m * dims.k, dims.k * dims.n, dims.m * dims.n);
    let out = Shared::new(&mut out[..XI * os]);
    for_ranges(XI, &|points| {
        for xi in points {
            let (l, r) = (&lhs[xi * ls..][..ls], &rhs[xi * rs..][..rs]);
            // SAFETY: point xi's output is this task's alone.
            let o = unsafe { out.part(xi * os..(xi + 1) * os) };
            gemm(dims, 1.0, l, r, beta, o);
        }
    });
}

/// Convolution forward, as [`super::conv2d_forward`] (whose arguments these are), for a
/// window [`applies`] accepts.
pub fn forward(
    out: &mut [f32],
    scratch: &mut [f32],
    inp: &[f32],
    weight: &[f32],
    bias: Option<&[f32]>,
    dims: &Conv2dDims,
) {
    let (n, k, g) = (dims.batch, dims.out_c, &dims.window);
    let c = g.channels;
    let (th, tw) = grid(g);
    let per = th * tw;
    let (u, rest) = scratch.split_at_mut(XI * k * c);
    transform_filters(u, weight, k, c);
    let step = chunk(g, n);
    let mut first = 0;
    while first < n {
        let m = step.min(n - first);
        let t_n = m * per;
        let (v, rest) = rest.split_at_mut(XI * c * t_n);
        let mm = &mut rest[..XI * k * t_n];
        transform_inputs(v, inp, first, m, g);
        batched_gemm(GemmDims::new(k, t_n, c), u, v, 0.0, mm);
        write_outputs(out, mm, bias, first, m, k, g);
        first += m;
    }
}

/// `Y = At M A` per tile, plus the bias, into the valid pixels of images `first..first + m`.
fn write_outputs(
    out: &mut [f32],
    mm: &[f32],
    bias: Option<&[f32]>,
    first: usize,
    m: usize,
    k_n: usize,
    g: &Window2d,
) {
    let (th, tw) = grid(g);
    let (h, w, per) = (g.height, g.width, th * tw);
    let t_n = m * per;
    let out = Shared::new(&mut out[first * k_n * h * w..(first + m) * k_n * h * w]);
    for_ranges(m * k_n, &|planes| {
        for jk in planes {
            let (j, k) = (jk / k_n, jk % k_n);
            // SAFETY: plane (j, k) is this task's alone.
            let plane = unsafe { out.part(jk * h * w..(jk + 1) * h * w) };
            let b0 = bias.map_or(0.0, |b| b[k]);
            if w <= rows::MAX_WIDTH {
                let base = |xi: usize| ((xi * k_n + k) * t_n) + j * per;
                let src = std::array::from_fn(|xi| &mm[base(xi)..base(xi) + per]);
                rows::output_tiles(plane, &src, h, w, b0);
                continue;
            }
            for ty in 0..th {
                for tx in 0..tw {
                    let t = j * per + ty * tw + tx;
                    let mt: [[f32; 4]; 4] = std::array::from_fn(|i| {
                        std::array::from_fn(|jj| mm[((4 * i + jj) * k_n + k) * t_n + t])
                    });
                    let y = sandwich(mt, at);
                    for (dy, row) in y.iter().enumerate() {
                        for (dx, &val) in row.iter().enumerate() {
                            let (oy, ox) = (2 * ty + dy, 2 * tx + dx);
                            if oy < h && ox < w {
                                plane[oy * w + ox] = val + b0;
                            }
                        }
                    }
                }
            }
        }
    });
}

/// `dM[xi][k, t] = (A dY At)[xi]` for every tile of images `first..first + m` of `dout`,
/// pixels outside the plane counting as zero.
fn transform_output_grads(
    dm: &mut [f32],
    dout: &[f32],
    first: usize,
    m: usize,
    k_n: usize,
    g: &Window2d,
) {
    let (th, tw) = grid(g);
    let (h, w, per) = (g.height, g.width, th * tw);
    let t_n = m * per;
    let dm = Shared::new(&mut dm[..XI * k_n * t_n]);
    for_ranges(m * k_n, &|planes| {
        for jk in planes {
            let (j, k) = (jk / k_n, jk % k_n);
            let plane = &dout[(first * k_n + jk) * h * w..][..h * w];
            if w <= rows::MAX_WIDTH {
                let base = |xi: usize| ((xi * k_n + k) * t_n) + j * per;
                // SAFETY: plane (j, k)'s tiles are this task's alone.
                let mut dst =
                    std::array::from_fn(|xi| unsafe { dm.part(base(xi)..base(xi) + per) });
                rows::output_grad_tiles(&mut dst, plane, h, w);
                continue;
            }
            for ty in 0..th {
                for tx in 0..tw {
                    let t = j * per + ty * tw + tx;
                    let dy: [[f32; 2]; 2] = std::array::from_fn(|i| {
                        std::array::from_fn(|jj| {
                            let (oy, ox) = (2 * ty + i, 2 * tx + jj);
                            if oy < h && ox < w {
                                plane[oy * w + ox]
                            } else {
                                0.0
                            }
                        })
                    });
                    let d = sandwich(dy, a);
                    for xi in 0..XI {
                        // SAFETY: plane (j, k) is this task's alone.
                        unsafe { dm.set((xi * k_n + k) * t_n + t, d[xi / 4][xi % 4]) };
                    }
                }
            }
        }
    });
}

/// `dX += B dV Bt` per tile, inside the plane, for images `first..first + m` of `dinp`.
fn scatter_input_grads(dinp: &mut [f32], dv: &[f32], first: usize, m: usize, g: &Window2d) {
    let (th, tw) = grid(g);
    let (c_n, h, w, per) = (g.channels, g.height as isize, g.width as isize, th * tw);
    let (t_n, hw) = (m * per, (h * w) as usize);
    let dinp = Shared::new(&mut dinp[first * c_n * hw..(first + m) * c_n * hw]);
    for_ranges(m * c_n, &|planes| {
        for jc in planes {
            let (j, c) = (jc / c_n, jc % c_n);
            // SAFETY: plane (j, c) is this task's alone.
            let plane = unsafe { dinp.part(jc * hw..(jc + 1) * hw) };
            if g.width <= rows::MAX_WIDTH {
                let base = |xi: usize| ((xi * c_n + c) * t_n) + j * per;
                let src = std::array::from_fn(|xi| &dv[base(xi)..base(xi) + per]);
                rows::input_grad_tiles(plane, &src, g.height, g.width);
                continue;
            }
            for ty in 0..th {
                for tx in 0..tw {
                    let t = j * per + ty * tw + tx;
                    let vt: [[f32; 4]; 4] = std::array::from_fn(|i| {
                        std::array::from_fn(|jj| dv[((4 * i + jj) * c_n + c) * t_n + t])
                    });
                    let d = sandwich(vt, b);
                    let (y0, x0) = (2 * ty as isize - 1, 2 * tx as isize - 1);
                    for (i, row) in d.iter().enumerate() {
                        let y = y0 + i as isize;
                        if y < 0 || y >= h {
                            continue;
                        }
                        for (jj, &val) in row.iter().enumerate() {
                            let x = x0 + jj as isize;
                            if x >= 0 && x < w {
                                plane[(y * w + x) as usize] += val;
                            }
                        }
                    }
                }
            }
        }
    });
}

/// Convolution backward, as [`super::conv2d_backward`] (whose arguments these are), for a
/// window [`applies`] accepts: accumulates the weight and bias gradients, writes `dinp`.
pub fn backward(
    dinp: Option<&mut [f32]>,
    grads: super::ConvGrads<'_>,
    scratch: &mut [f32],
    dout: &[f32],
    inp: &[f32],
    weight: &[f32],
    dims: &Conv2dDims,
) {
    let (n, k, g) = (dims.batch, dims.out_c, &dims.window);
    let (c, hw) = (g.channels, g.height * g.width);
    let (th, tw) = grid(g);
    let per = th * tw;
    if let Some(db) = grads.bias {
        let db = Shared::new(&mut db[..k]);
        for_ranges(k, &|channels| {
            for ch in channels {
                let sum = (0..n)
                    .map(|i| dout[(i * k + ch) * hw..][..hw].iter().sum::<f32>())
                    .sum::<f32>();
                // SAFETY: channel ch is this task's alone.
                unsafe { db.part(ch..ch + 1)[0] += sum };
            }
        });
    }
    let mut dinp = dinp;
    if let Some(d) = dinp.as_deref_mut() {
        fill(&mut d[..n * c * hw], 0.0);
    }
    let (u, rest) = scratch.split_at_mut(XI * k * c);
    let (du, rest) = rest.split_at_mut(XI * k * c);
    transform_filters(u, weight, k, c);
    fill(du, 0.0);
    let step = chunk(g, n);
    let mut first = 0;
    while first < n {
        let m = step.min(n - first);
        let t_n = m * per;
        let (v, rest) = rest.split_at_mut(XI * c * t_n);
        let (dm, rest) = rest.split_at_mut(XI * k * t_n);
        let dv = &mut rest[..XI * c * t_n];
        transform_output_grads(dm, dout, first, m, k, g);
        transform_inputs(v, inp, first, m, g);
        batched_gemm(GemmDims::new(k, c, t_n).b_transposed(), dm, v, 1.0, du);
        if let Some(d) = dinp.as_deref_mut() {
            batched_gemm(GemmDims::new(c, t_n, k).a_transposed(), u, dm, 0.0, dv);
            scatter_input_grads(d, dv, first, m, g);
        }
        first += m;
    }
    fold_filter_grads(grads.weight, du, k, c);
}

#[cfg(test)]
mod tests {
    use super::super::conv::{direct_backward, direct_forward, direct_scratch_len as direct_len};
    use super::*;

    fn values(len: usize, seed: usize) -> Vec<f32> {
        (0..len)
            .map(|i| (((i * 7919 + seed * 104_729) % 2003) as f32 / 1001.5) - 1.0)
            .collect()
    }

    fn max_diff(a: &[f32], b: &[f32]) -> f32 {
        assert_eq!(a.len(), b.len());
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max)
    }

    /// Odd and even planes, from one tile to several chunks (3 images of 21x20 tiles), with
    /// and without bias, row by row and (wider than the row transforms take) tile by tile,
    /// against im2col and GEMM.
    #[test]
    fn winograd_matches_the_direct_convolution_forward_and_backward() {
        let cases = [
            (3, 8, 5, 40, 41),
            (2, 9, 4, 8, 9),
            (70, 8, 3, 4, 5),
            (1, 16, 8, 1, 2),
            (8, 64, 64, 4, 4),
            (1, 8, 3, 3, rows::MAX_WIDTH + 3),
        ];
        for (batch, c, k, height, width) in cases {
            let window = Window2d {
                channels: c,
                height,
                width,
                kernel: 3,
                stride: 1,
                pad: 1,
            };
            assert!(fits(&window));
            let dims = Conv2dDims {
                batch,
                out_c: k,
                window,
            };
            let inp = values(batch * window.in_len(), 1);
            let w = values(k * window.col_rows(), 2);
            let b = values(k, 3);
            let bias = (k % 2 == 1).then_some(b.as_slice());
            let out_len = batch * k * window.col_cols();
            let dout = values(out_len, 4);
            let mut s_w = vec![0.0; scratch_len(&dims)];
            let mut s_d = vec![0.0; direct_len(&dims)];
            let (mut y_w, mut y_d) = (vec![f32::NAN; out_len], vec![f32::NAN; out_len]);
            forward(&mut y_w, &mut s_w, &inp, &w, bias, &dims);
            direct_forward(&mut y_d, &mut s_d, &inp, &w, bias, &dims);
            assert!(max_diff(&y_w, &y_d) < 1e-4, "forward {dims:?}");

            let grads = |winograd: bool| {
                let (mut dw, mut db) = (vec![0.5; w.len()], vec![0.25; k]);
                let mut dx = vec![f32::NAN; inp.len()];
                let g = super::super::ConvGrads {
                    weight: &mut dw,
                    bias: bias.is_some().then_some(&mut db),
                };
                if winograd {
                    backward(Some(&mut dx), g, &mut s_w.clone(), &dout, &inp, &w, &dims);
                } else {
                    direct_backward(Some(&mut dx), g, &mut s_d.clone(), &dout, &inp, &w, &dims);
                }
                (dw, db, dx)
            };
            let (want, got) = (grads(false), grads(true));
            assert!(max_diff(&got.0, &want.0) < 1e-3, "dW {dims:?}");
            assert!(max_diff(&got.1, &want.1) < 1e-3, "db {dims:?}");
            assert!(max_diff(&got.2, &want.2) < 1e-4, "dX {dims:?}");
        }
    }

    #[test]
    fn each_transform_is_the_adjoint_of_its_partner() {
        // <f(x), y> == <x, f*(y)> for the three pairs.
        let x4 = [0.3, -1.2, 2.0, 0.7];
        let y4 = [1.1, 0.4, -0.9, 2.5];
        let dot = |p: &[f32], q: &[f32]| p.iter().zip(q).map(|(a, b)| a * b).sum::<f32>();
        assert!((dot(&bt(x4), &y4) - dot(&x4, &b(y4))).abs() < 1e-6);
        let x3 = [0.3, -1.2, 2.0];
        assert!((dot(&g(x3), &y4) - dot(&x3, &gt(y4))).abs() < 1e-6);
        let y2 = [0.6, -1.7];
        assert!((dot(&at(x4), &y2) - dot(&x4, &a(y2))).abs() < 1e-6);
    }
}
