//! Max, average and global average pooling over planes (no padding), the planes shared
//! among the pool's threads.

use super::threads::{for_parts, Units};
use crate::compute::backend::Window2d;

/// Calls `f(plane index, its slice of each of outs)` for planes `0..planes` of `outs` (`len`
/// values each), on the pool.
fn per_plane<const N: usize>(
    outs: [&mut [f32]; N],
    planes: usize,
    len: usize,
    f: &(dyn Fn(usize, [&mut [f32]; N]) + Sync),
) {
    let cuts = outs.map(|out| Units::new(&mut out[..planes * len], len));
    for_parts(planes, cuts, &|range, mut parts| {
        let first = range.start;
        for p in range {
            let at = (p - first) * len;
            f(p, parts.each_mut().map(|part| &mut part[at..at + len]));
        }
    });
}

/// Index (within the plane) of the first maximum of output (oy, ox)'s window.
fn window_argmax(plane: &[f32], oy: usize, ox: usize, g: &Window2d) -> usize {
    let (w, k, s) = (g.width, g.kernel, g.stride);
    let first = oy * s * w + ox * s;
    let mut best = first;
    for ky in 0..k {
        for kx in 0..k {
            let i = first + ky * w + kx;
            if plane[i] > plane[best] {
                best = i;
            }
        }
    }
    best
}

/// out: `[planes x OH x OW]`, the maximum of each window (the first maximum on ties,
/// scanning row by row, as PyTorch does); argmax: the same shape, the index within its
/// plane of each window's maximum, as f32 (exact below 2^24, so any plane an image has),
/// for backward.
pub fn maxpool_forward(
    out: &mut [f32],
    argmax: &mut [f32],
    inp: &[f32],
    planes: usize,
    g: &Window2d,
) {
    let (oh, ow, hw) = (g.out_height(), g.out_width(), g.height * g.width);
    per_plane([out, argmax], planes, oh * ow, &|p, [o, a]| {
        let plane = &inp[p * hw..(p + 1) * hw];
        if g.kernel == 2 && g.stride == 2 {
            return max_of_pairs(o, a, plane, g);
        }
        for oy in 0..oh {
            for ox in 0..ow {
                let best = window_argmax(plane, oy, ox, g);
                o[oy * ow + ox] = plane[best];
                a[oy * ow + ox] = best as f32;
            }
        }
    });
}

/// [`maxpool_forward`] of one plane for 2x2 windows of stride 2, the common case, without
/// the generic window loop: each row's pair, then the second row's winner only if strictly
/// greater (the same as a row-by-row scan). Branch-free, with the index kept as f32, so
/// that an output row vectorizes: which input wins is data, and a branch on it would
/// mispredict half the time.
fn max_of_pairs(out: &mut [f32], argmax: &mut [f32], plane: &[f32], g: &Window2d) {
    let (ow, w) = (g.out_width(), g.width);
    let rows = out.chunks_exact_mut(ow).zip(argmax.chunks_exact_mut(ow));
    for (oy, (o, a)) in rows.enumerate() {
        let (r0, r1) = (2 * oy * w, (2 * oy + 1) * w);
        let (top, bottom) = (&plane[r0..r0 + 2 * ow], &plane[r1..r1 + 2 * ow]);
        let pairs = top.chunks_exact(2).zip(bottom.chunks_exact(2));
        for (ox, ((t, b), (o, a))) in pairs.zip(o.iter_mut().zip(a.iter_mut())).enumerate() {
            let i = (r0 + 2 * ox) as f32;
            let it = i + if t[1] > t[0] { 1.0 } else { 0.0 };
            let ib = i + w as f32 + if b[1] > b[0] { 1.0 } else { 0.0 };
            let (vt, vb) = (t[0].max(t[1]), b[0].max(b[1]));
            *o = vt.max(vb);
            *a = if vb > vt { ib } else { it };
        }
    }
}

/// dinp: `[planes x H x W]`; each output gradient goes to its window's maximum, as the
/// forward's argmax recorded.
pub fn maxpool_backward(
    dinp: &mut [f32],
    dout: &[f32],
    argmax: &[f32],
    planes: usize,
    g: &Window2d,
) {
    let (ohw, hw) = (g.out_height() * g.out_width(), g.height * g.width);
    per_plane([dinp], planes, hw, &|p, [di]| {
        di.fill(0.0);
        let d = &dout[p * ohw..(p + 1) * ohw];
        for (&g, &a) in d.iter().zip(&argmax[p * ohw..(p + 1) * ohw]) {
            di[a as usize] += g;
        }
    });
}

/// out: `[planes x OH x OW]`, the mean of each window.
pub fn avgpool_forward(out: &mut [f32], inp: &[f32], planes: usize, g: &Window2d) {
    let (oh, ow, hw, w) = (g.out_height(), g.out_width(), g.height * g.width, g.width);
    let inv = 1.0 / (g.kernel * g.kernel) as f32;
    per_plane([out], planes, oh * ow, &|p, [out]| {
        let plane = &inp[p * hw..(p + 1) * hw];
        for oy in 0..oh {
            for ox in 0..ow {
                let first = oy * g.stride * w + ox * g.stride;
                let s: f32 = (0..g.kernel)
                    .map(|ky| {
                        plane[first + ky * w..first + ky * w + g.kernel]
                            .iter()
                            .sum::<f32>()
                    })
                    .sum();
                out[oy * ow + ox] = s * inv;
            }
        }
    });
}

/// dinp: `[planes x H x W]`; each input gets dout / k^2 from every window it lies in.
pub fn avgpool_backward(dinp: &mut [f32], dout: &[f32], planes: usize, g: &Window2d) {
    let (oh, ow, hw, w) = (g.out_height(), g.out_width(), g.height * g.width, g.width);
    let inv = 1.0 / (g.kernel * g.kernel) as f32;
    per_plane([dinp], planes, hw, &|p, [di]| {
        di.fill(0.0);
        for oy in 0..oh {
            for ox in 0..ow {
                let d = dout[(p * oh + oy) * ow + ox] * inv;
                let first = oy * g.stride * w + ox * g.stride;
                for ky in 0..g.kernel {
                    for v in &mut di[first + ky * w..first + ky * w + g.kernel] {
                        *v += d;
                    }
                }
            }
        }
    });
}

/// out: `[planes]`, the mean of each plane of inp: `[planes x plane]`.
pub fn global_avgpool_forward(out: &mut [f32], inp: &[f32], planes: usize, plane: usize) {
    let inv = 1.0 / plane as f32;
    per_plane([out], planes, 1, &|p, [o]| {
        o[0] = inp[p * plane..(p + 1) * plane].iter().sum::<f32>() * inv;
    });
}

/// dinp: `[planes x plane]` = dout / plane.
pub fn global_avgpool_backward(dinp: &mut [f32], dout: &[f32], planes: usize, plane: usize) {
    let inv = 1.0 / plane as f32;
    per_plane([dinp], planes, plane, &|p, [d]| d.fill(dout[p] * inv));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fast_and_the_generic_max_pool_agree_and_ties_go_to_the_first() {
        let g = Window2d {
            channels: 1,
            height: 4,
            width: 4,
            kernel: 2,
            stride: 2,
            pad: 0,
        };
        let inp: Vec<f32> = (0..16).map(|i| (i * 7 % 5) as f32).collect();
        let (mut fast, mut argmax) = (vec![0.0; 4], vec![0.0; 4]);
        maxpool_forward(&mut fast, &mut argmax, &inp, 1, &g);
        for (i, &v) in fast.iter().enumerate() {
            let best = window_argmax(&inp, i / 2, i % 2, &g);
            assert_eq!((v, argmax[i]), (inp[best], best as f32));
        }
        let ties = [1.0; 16];
        maxpool_forward(&mut fast, &mut argmax, &ties, 1, &g);
        let mut d = vec![0.0; 16];
        maxpool_backward(&mut d, &[1.0; 4], &argmax, 1, &g);
        assert_eq!(d.iter().sum::<f32>(), 4.0);
        assert_eq!((d[0], d[1], d[4], d[5]), (1.0, 0.0, 0.0, 0.0));
    }
}
