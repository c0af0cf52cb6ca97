//! Max, average and global average pooling over planes (no padding).

use crate::backend::Window2d;

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
/// scanning row by row, as PyTorch does).
pub fn maxpool_forward(out: &mut [f32], inp: &[f32], planes: usize, g: &Window2d) {
    let (oh, ow, hw) = (g.out_height(), g.out_width(), g.height * g.width);
    for p in 0..planes {
        let plane = &inp[p * hw..(p + 1) * hw];
        let o = &mut out[p * oh * ow..(p + 1) * oh * ow];
        if g.kernel == 2 && g.stride == 2 {
            // The common case without the generic window loop.
            let w = g.width;
            for (oy, row) in o.chunks_exact_mut(ow).enumerate() {
                let (r0, r1) = (&plane[2 * oy * w..], &plane[(2 * oy + 1) * w..]);
                for (ox, v) in row.iter_mut().enumerate() {
                    let (i, j) = (2 * ox, 2 * ox + 1);
                    *v = r0[i].max(r0[j]).max(r1[i].max(r1[j]));
                }
            }
            continue;
        }
        for oy in 0..oh {
            for ox in 0..ow {
                o[oy * ow + ox] = plane[window_argmax(plane, oy, ox, g)];
            }
        }
    }
}

/// dinp: `[planes x H x W]`; each output gradient goes to its window's first maximum.
pub fn maxpool_backward(dinp: &mut [f32], dout: &[f32], inp: &[f32], planes: usize, g: &Window2d) {
    let (oh, ow, hw) = (g.out_height(), g.out_width(), g.height * g.width);
    dinp[..planes * hw].fill(0.0);
    for p in 0..planes {
        let plane = &inp[p * hw..(p + 1) * hw];
        let di = &mut dinp[p * hw..(p + 1) * hw];
        let d = &dout[p * oh * ow..(p + 1) * oh * ow];
        if g.kernel == 2 && g.stride == 2 {
            // The common case: the first maximum of four, scanned row by row.
            let w = g.width;
            for oy in 0..oh {
                let (r0, r1) = (2 * oy * w, (2 * oy + 1) * w);
                for ox in 0..ow {
                    let mut best = r0 + 2 * ox;
                    for i in [r0 + 2 * ox + 1, r1 + 2 * ox, r1 + 2 * ox + 1] {
                        if plane[i] > plane[best] {
                            best = i;
                        }
                    }
                    di[best] += d[oy * ow + ox];
                }
            }
            continue;
        }
        for oy in 0..oh {
            for ox in 0..ow {
                di[window_argmax(plane, oy, ox, g)] += d[oy * ow + ox];
            }
        }
    }
}

/// out: `[planes x OH x OW]`, the mean of each window.
pub fn avgpool_forward(out: &mut [f32], inp: &[f32], planes: usize, g: &Window2d) {
    let (oh, ow, hw, w) = (g.out_height(), g.out_width(), g.height * g.width, g.width);
    let inv = 1.0 / (g.kernel * g.kernel) as f32;
    for p in 0..planes {
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
                out[(p * oh + oy) * ow + ox] = s * inv;
            }
        }
    }
}

/// dinp: `[planes x H x W]`; each input gets dout / k^2 from every window it lies in.
pub fn avgpool_backward(dinp: &mut [f32], dout: &[f32], planes: usize, g: &Window2d) {
    let (oh, ow, hw, w) = (g.out_height(), g.out_width(), g.height * g.width, g.width);
    let inv = 1.0 / (g.kernel * g.kernel) as f32;
    dinp[..planes * hw].fill(0.0);
    for p in 0..planes {
        let di = &mut dinp[p * hw..(p + 1) * hw];
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
    }
}

/// out: `[planes]`, the mean of each plane of inp: `[planes x plane]`.
pub fn global_avgpool_forward(out: &mut [f32], inp: &[f32], planes: usize, plane: usize) {
    let inv = 1.0 / plane as f32;
    for (o, x) in out[..planes].iter_mut().zip(inp.chunks_exact(plane)) {
        *o = x.iter().sum::<f32>() * inv;
    }
}

/// dinp: `[planes x plane]` = dout / plane.
pub fn global_avgpool_backward(dinp: &mut [f32], dout: &[f32], planes: usize, plane: usize) {
    let inv = 1.0 / plane as f32;
    for (d, &g) in dinp[..planes * plane].chunks_exact_mut(plane).zip(dout) {
        d.fill(g * inv);
    }
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
        let mut fast = vec![0.0; 4];
        maxpool_forward(&mut fast, &inp, 1, &g);
        for (i, &v) in fast.iter().enumerate() {
            assert_eq!(v, inp[window_argmax(&inp, i / 2, i % 2, &g)]);
        }
        let ties = [1.0; 16];
        let mut d = vec![0.0; 16];
        maxpool_backward(&mut d, &[1.0; 4], &ties, 1, &g);
        assert_eq!(d.iter().sum::<f32>(), 4.0);
        assert_eq!((d[0], d[1], d[4], d[5]), (1.0, 0.0, 0.0, 0.0));
    }
}
