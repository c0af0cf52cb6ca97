//! Winograd F(4x4, 3x3) (Lavin and Gray, 2016): the transforms of [`super::winograd`] for
//! 4x4 output tiles, each read from a 6x6 input patch. 36 products per tile and channel pair
//! in place of the direct 144 (F(2x2, 3x3) takes 64 for the same 16 outputs), and 2.25
//! transformed values per pixel in place of 4, so both the GEMMs and the memory passes
//! shrink; the price is larger constants in the transforms and so a larger rounding error
//! (still well below what training notices, checked against the direct convolution in the
//! tests).
//!
//! A plane is transformed a row of tiles at a time, in buffers laid out by phase: column
//! `4t + q` of a row is `[q][t]`, so that tile `t`'s six columns are `[0..4][t]` and
//! `[0..2][t + 1]` and every stage is a loop over the row's tiles reading and writing
//! contiguous runs, which the compiler vectorises; only the first load and the last store of
//! a row interleave. The buffers live on the stack, sized by the plane's width class (up to
//! 8, 32 or [`MAX_WIDTH`] pixels): they are set up for every plane, and a CIFAR network's
//! deep layers have tens of thousands of 4x4 planes a step.
//!
//! On a CPU with AVX2 and FMA, planes up to [`super::winograd_f4_avx2::MAX_SIDE`] pixels a
//! side take that module's transforms instead, eight tiles at a time whatever the plane's
//! width (the `*_avx2` methods of [`Tiling`]); the 1-D maps here are written once for both,
//! generic over [`Lane`].

use super::lanes::Lane;
#[cfg(target_arch = "x86_64")]
use super::winograd_f4_avx2 as avx2;
use super::winograd_tiling::{sandwich, Tiling};

/// The widest plane these transforms take.
pub const MAX_WIDTH: usize = 256;

/// Calls `$f::<Q>($args)` with `Q`, the phase buffers' length (tiles along a row plus
/// one), for the width class of `$w`.
macro_rules! by_width {
    ($w:expr, $f:ident($($arg:expr),*)) => {
        if $w <= 8 {
            $f::<3>($($arg),*)
        } else if $w <= 32 {
            $f::<9>($($arg),*)
        } else {
            $f::<{ MAX_WIDTH / 4 + 1 }>($($arg),*)
        }
    };
}

/// F(4x4, 3x3): 36 points per tile.
pub struct F4;

/// `Bt x`, of single values or of eight tiles' at once.
#[inline(always)]
fn bt<V: Lane>(x: [V; 6]) -> [V; 6] {
    [
        x[0] * 4.0 - x[2] * 5.0 + x[4],
        (x[1] + x[2]) * -4.0 + x[3] + x[4],
        (x[1] - x[2]) * 4.0 - x[3] + x[4],
        (x[3] - x[1]) * 2.0 - x[2] + x[4],
        (x[1] - x[3]) * 2.0 - x[2] + x[4],
        x[1] * 4.0 - x[3] * 5.0 + x[5],
    ]
}

/// `B y`, the adjoint of [`bt`].
#[inline(always)]
fn b<V: Lane>(y: [V; 6]) -> [V; 6] {
    [
        y[0] * 4.0,
        (y[2] - y[1] + y[5]) * 4.0 + (y[4] - y[3]) * 2.0,
        y[0] * -5.0 - (y[1] + y[2]) * 4.0 - y[3] - y[4],
        y[1] - y[2] + (y[3] - y[4]) * 2.0 - y[5] * 5.0,
        y[0] + y[1] + y[2] + y[3] + y[4],
        y[5],
    ]
}

/// 1/6, 1/12 and 1/24: multiplied, not divided (a division is many times slower, and the
/// filter transforms run on every filter pair twice a step).
const SIXTH: f32 = 1.0 / 6.0;
const TWELFTH: f32 = 1.0 / 12.0;
const TWENTY_FOURTH: f32 = 1.0 / 24.0;

/// `G x`.
#[inline(always)]
fn g(x: [f32; 3]) -> [f32; 6] {
    let (even, odd) = (x[0] + x[2], x[1]);
    let (ends, middle) = (TWENTY_FOURTH * x[0] + SIXTH * x[2], TWELFTH * x[1]);
    [
        0.25 * x[0],
        -SIXTH * (even + odd),
        -SIXTH * (even - odd),
        ends + middle,
        ends - middle,
        x[2],
    ]
}

/// `Gt y`, the adjoint of [`g`].
#[inline(always)]
fn gt(y: [f32; 6]) -> [f32; 3] {
    let (p12, p34) = (y[1] + y[2], y[3] + y[4]);
    [
        0.25 * y[0] - SIXTH * p12 + TWENTY_FOURTH * p34,
        SIXTH * (y[2] - y[1]) + TWELFTH * (y[3] - y[4]),
        SIXTH * (p34 - p12) + y[5],
    ]
}

/// `At x`.
#[inline(always)]
fn at<V: Lane>(x: [V; 6]) -> [V; 4] {
    let (p1, m1) = (x[1] + x[2], x[1] - x[2]);
    let (p2, m2) = (x[3] + x[4], x[3] - x[4]);
    [
        x[0] + p1 + p2,
        m1 + m2 * 2.0,
        p1 + p2 * 4.0,
        m1 + m2 * 8.0 + x[5],
    ]
}

/// `A y`, the adjoint of [`at`].
#[inline(always)]
fn a<V: Lane>(y: [V; 4]) -> [V; 6] {
    let (even, odd) = (y[0] + y[2], y[1] + y[3]);
    let (even4, odd2) = (y[0] + y[2] * 4.0, y[1] * 2.0 + y[3] * 8.0);
    [
        y[0],
        even + odd,
        even - odd,
        even4 + odd2,
        even4 - odd2,
        y[3],
    ]
}

/// [`bt`], [`at`], [`a`] and [`b`] on eight tiles' values, as the types [`avx2`] takes.
#[cfg(target_arch = "x86_64")]
mod maps {
    use super::super::lanes::F32x8;
    use super::avx2::Map;

    pub struct Bt;
    pub struct At;
    pub struct A;
    pub struct B;

    impl Map<6, 6> for Bt {
        #[inline(always)]
        fn apply(x: [F32x8; 6]) -> [F32x8; 6] {
            super::bt(x)
        }
    }

    impl Map<6, 4> for At {
        #[inline(always)]
        fn apply(x: [F32x8; 6]) -> [F32x8; 4] {
            super::at(x)
        }
    }

    impl Map<4, 6> for A {
        #[inline(always)]
        fn apply(y: [F32x8; 4]) -> [F32x8; 6] {
            super::a(y)
        }
    }

    impl Map<6, 6> for B {
        #[inline(always)]
        fn apply(y: [F32x8; 6]) -> [F32x8; 6] {
            super::b(y)
        }
    }
}

/// Tiles along a row, tile rows, of an `h x w` plane.
#[inline(always)]
fn grid(h: usize, w: usize) -> (usize, usize) {
    (h.div_ceil(4), w.div_ceil(4))
}

impl Tiling<36> for F4 {
    const TILE: usize = 4;

    #[inline(always)]
    fn filter(w: [[f32; 3]; 3]) -> [f32; 36] {
        let t = sandwich(w, g);
        std::array::from_fn(|xi| t[xi / 6][xi % 6])
    }

    #[inline(always)]
    fn fold_filter(d: [f32; 36]) -> [[f32; 3]; 3] {
        sandwich(
            std::array::from_fn(|i| std::array::from_fn(|j| d[6 * i + j])),
            gt,
        )
    }

    #[inline(always)]
    fn input_tiles(dst: &mut [&mut [f32]; 36], plane: &[f32], h: usize, w: usize) {
        debug_assert!(w <= MAX_WIDTH);
        by_width!(w, input_rows(dst, plane, h, w))
    }

    #[inline(always)]
    unsafe fn input_tiles_avx2(dst: &mut [&mut [f32]; 36], plane: &[f32], h: usize, w: usize) {
        #[cfg(target_arch = "x86_64")]
        if avx2::takes(h, w) {
            // SAFETY: the caller's CPU has AVX2 and FMA.
            return unsafe { avx2::input_tiles::<maps::Bt>(dst, plane, (h, w)) };
        }
        Self::input_tiles(dst, plane, h, w)
    }

    #[inline(always)]
    unsafe fn output_tiles_avx2(
        out: &mut [f32],
        src: &[&[f32]; 36],
        h: usize,
        w: usize,
        bias: f32,
    ) {
        #[cfg(target_arch = "x86_64")]
        if avx2::takes(h, w) {
            // SAFETY: as in `input_tiles_avx2`.
            return unsafe { avx2::output_tiles::<maps::At>(out, src, (h, w), bias) };
        }
        Self::output_tiles(out, src, h, w, bias)
    }

    #[inline(always)]
    unsafe fn output_grad_tiles_avx2(dst: &mut [&mut [f32]; 36], dout: &[f32], h: usize, w: usize) {
        #[cfg(target_arch = "x86_64")]
        if avx2::takes(h, w) {
            // SAFETY: as in `input_tiles_avx2`.
            return unsafe { avx2::output_grad_tiles::<maps::A>(dst, dout, (h, w)) };
        }
        Self::output_grad_tiles(dst, dout, h, w)
    }

    #[inline(always)]
    fn output_tiles(out: &mut [f32], src: &[&[f32]; 36], h: usize, w: usize, bias: f32) {
        debug_assert!(w <= MAX_WIDTH);
        by_width!(w, output_rows(out, src, h, w, bias))
    }

    #[inline(always)]
    fn output_grad_tiles(dst: &mut [&mut [f32]; 36], dout: &[f32], h: usize, w: usize) {
        debug_assert!(w <= MAX_WIDTH);
        by_width!(w, output_grad_rows(dst, dout, h, w))
    }

    #[inline(always)]
    fn input_grad_tiles(dinp: &mut [f32], src: &[&[f32]; 36], h: usize, w: usize) {
        debug_assert!(w <= MAX_WIDTH);
        by_width!(w, input_grad_rows(dinp, src, h, w))
    }

    #[inline(always)]
    unsafe fn input_grad_tiles_avx2(dinp: &mut [f32], src: &[&[f32]; 36], h: usize, w: usize) {
        #[cfg(target_arch = "x86_64")]
        if avx2::takes(h, w) {
            // SAFETY: as in `input_tiles_avx2`.
            return unsafe { avx2::input_grad_tiles::<maps::B>(dinp, src, (h, w)) };
        }
        Self::input_grad_tiles(dinp, src, h, w)
    }
}

/// Row `y` of the `h x w` plane (zero outside it) shifted right by `shift` zero columns,
/// into phase buffers: column `x` of the shifted row at `[x % 4][x / 4]`, zero up to
/// `[.][len]`.
#[inline(always)]
fn load_phases<const Q: usize>(
    row: &mut [[f32; Q]; 4],
    plane: &[f32],
    y: isize,
    (h, w): (usize, usize),
    shift: usize,
    len: usize,
) {
    for phase in row.iter_mut() {
        phase[..len].fill(0.0);
    }
    if y >= 0 && (y as usize) < h {
        let y = y as usize;
        for (x, &v) in (shift..).zip(&plane[y * w..(y + 1) * w]) {
            row[x % 4][x / 4] = v;
        }
    }
}

/// [`Tiling::input_tiles`] with phase buffers of `Q` tiles.
#[inline(always)]
fn input_rows<const Q: usize>(dst: &mut [&mut [f32]; 36], plane: &[f32], h: usize, w: usize) {
    let (th, tw) = grid(h, w);
    let mut p = [[[0.0f32; Q]; 4]; 6];
    let mut u = [[[0.0f32; Q]; 4]; 6];
    for ty in 0..th {
        for (i, row) in p.iter_mut().enumerate() {
            load_phases(row, plane, (4 * ty + i) as isize - 1, (h, w), 1, tw + 1);
        }
        // Bt along the columns: whole rows, phase by phase.
        for q in 0..4 {
            for t in 0..=tw {
                let col = bt(std::array::from_fn(|i| p[i][q][t]));
                for (ui, v) in u.iter_mut().zip(col) {
                    ui[q][t] = v;
                }
            }
        }
        // B along the rows: tile t reads phases 0-3 of t and 0-1 of t + 1.
        let at = ty * tw;
        for (i, [u0, u1, u2, u3]) in u.iter().enumerate() {
            let [d0, d1, d2, d3, d4, d5] = six(dst, 6 * i);
            for t in 0..tw {
                let r = bt([u0[t], u1[t], u2[t], u3[t], u0[t + 1], u1[t + 1]]);
                let k = at + t;
                (d0[k], d1[k], d2[k], d3[k], d4[k], d5[k]) = (r[0], r[1], r[2], r[3], r[4], r[5]);
            }
        }
    }
}

/// [`Tiling::output_tiles`] with phase buffers of `Q` tiles.
#[inline(always)]
fn output_rows<const Q: usize>(out: &mut [f32], src: &[&[f32]; 36], h: usize, w: usize, bias: f32) {
    let (th, tw) = grid(h, w);
    let mut s = [[[0.0f32; Q]; 6]; 4];
    let mut y = [[[0.0f32; Q]; 4]; 4];
    for ty in 0..th {
        let at_ = ty * tw;
        let m: [&[f32]; 36] = std::array::from_fn(|xi| &src[xi][at_..at_ + tw]);
        // At along the columns: s[r][j][t].
        for j in 0..6 {
            for t in 0..tw {
                let col = at(std::array::from_fn(|i| m[6 * i + j][t]));
                for (sr, v) in s.iter_mut().zip(col) {
                    sr[j][t] = v;
                }
            }
        }
        // A along the rows: y[r][c][t], output column 4t + c.
        for (sr, yr) in s.iter().zip(y.iter_mut()) {
            for t in 0..tw {
                let row = at(std::array::from_fn(|j| sr[j][t]));
                for (yc, v) in yr.iter_mut().zip(row) {
                    yc[t] = v + bias;
                }
            }
        }
        for (r, yr) in y.iter().enumerate() {
            let oy = 4 * ty + r;
            if oy < h {
                for (x, o) in out[oy * w..(oy + 1) * w].iter_mut().enumerate() {
                    *o = yr[x % 4][x / 4];
                }
            }
        }
    }
}

/// [`Tiling::output_grad_tiles`] with phase buffers of `Q` tiles.
#[inline(always)]
fn output_grad_rows<const Q: usize>(dst: &mut [&mut [f32]; 36], dout: &[f32], h: usize, w: usize) {
    let (th, tw) = grid(h, w);
    let mut d = [[[0.0f32; Q]; 4]; 4];
    let mut s = [[[0.0f32; Q]; 4]; 6];
    for ty in 0..th {
        // dY's rows of this tile row, column 4t + c at d[r][c][t], zero outside the plane.
        for (r, dr) in d.iter_mut().enumerate() {
            load_phases(dr, dout, (4 * ty + r) as isize, (h, w), 0, tw);
        }
        // A along the columns: s[i][c][t].
        for c in 0..4 {
            for t in 0..tw {
                let col = a(std::array::from_fn(|r| d[r][c][t]));
                for (si, v) in s.iter_mut().zip(col) {
                    si[c][t] = v;
                }
            }
        }
        // A along the rows.
        let at_ = ty * tw;
        for (i, [s0, s1, s2, s3]) in s.iter().enumerate() {
            let [d0, d1, d2, d3, d4, d5] = six(dst, 6 * i);
            for t in 0..tw {
                let r = a([s0[t], s1[t], s2[t], s3[t]]);
                let k = at_ + t;
                (d0[k], d1[k], d2[k], d3[k], d4[k], d5[k]) = (r[0], r[1], r[2], r[3], r[4], r[5]);
            }
        }
    }
}

/// [`Tiling::input_grad_tiles`] with phase buffers of `Q` tiles. Tile row `ty` adds to the
/// padded rows `4ty..4ty + 6`, of which the last two are the next tile row's first two: they
/// carry over (`carry`), so each plane row is written once, when it is complete.
#[inline(always)]
fn input_grad_rows<const Q: usize>(dinp: &mut [f32], src: &[&[f32]; 36], h: usize, w: usize) {
    let (th, tw) = grid(h, w);
    let mut s = [[[0.0f32; Q]; 6]; 6];
    let mut acc = [[0.0f32; Q]; 4];
    let mut spill = [[0.0f32; Q]; 2];
    let mut carry = [[[0.0f32; Q]; 4]; 2];
    // Padded row `padded` of the plane, if it lies inside it, from phase buffers `acc`.
    let mut write = |acc: &[[f32; Q]; 4], padded: usize| {
        if (1..=h).contains(&padded) {
            let y = padded - 1;
            // Plane column x is padded column x + 1.
            for (px, d) in (1..).zip(dinp[y * w..(y + 1) * w].iter_mut()) {
                *d = acc[px % 4][px / 4];
            }
        }
    };
    for ty in 0..th {
        let at_ = ty * tw;
        let v: [&[f32]; 36] = std::array::from_fn(|xi| &src[xi][at_..at_ + tw]);
        // B along the columns: s[i][j][t].
        for j in 0..6 {
            for t in 0..tw {
                let col = b(std::array::from_fn(|i| v[6 * i + j][t]));
                for (si, val) in s.iter_mut().zip(col) {
                    si[j][t] = val;
                }
            }
        }
        for (i, si) in s.iter().enumerate() {
            // Bt along the rows: tile t's padded columns 4t..4t + 4 are phases 0-3 of t; its
            // columns 4t + 4 and 4t + 5 spill into phases 0 and 1 of t + 1.
            for t in 0..tw {
                let r = b(std::array::from_fn(|j| si[j][t]));
                (acc[0][t], acc[1][t], acc[2][t], acc[3][t]) = (r[0], r[1], r[2], r[3]);
                (spill[0][t], spill[1][t]) = (r[4], r[5]);
            }
            for phase in acc.iter_mut() {
                phase[tw] = 0.0;
            }
            for t in 0..tw {
                acc[0][t + 1] += spill[0][t];
                acc[1][t + 1] += spill[1][t];
            }
            match i {
                // What the tile row above left in these rows.
                0 | 1 if ty > 0 => {
                    for (phase, carried) in acc.iter_mut().zip(&carry[i]) {
                        for (a, c) in phase[..=tw].iter_mut().zip(&carried[..=tw]) {
                            *a += c;
                        }
                    }
                }
                4 | 5 => {
                    for (carried, phase) in carry[i - 4].iter_mut().zip(&acc) {
                        carried[..=tw].copy_from_slice(&phase[..=tw]);
                    }
                    continue;
                }
                _ => {}
            }
            write(&acc, 4 * ty + i);
        }
    }
    write(&carry[0], 4 * th);
    write(&carry[1], 4 * th + 1);
}

/// Slices `at..at + 6` of `dst`, mutably.
#[inline(always)]
fn six<'a>(dst: &'a mut [&mut [f32]; 36], at: usize) -> [&'a mut [f32]; 6] {
    let [a, b, c, d, e, f] = &mut dst[at..at + 6] else {
        unreachable!("six slices")
    };
    [&mut **a, &mut **b, &mut **c, &mut **d, &mut **e, &mut **f]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_transform_is_the_adjoint_of_its_partner() {
        // <f(x), y> == <x, f*(y)> for the three pairs.
        let dot = |p: &[f32], q: &[f32]| p.iter().zip(q).map(|(a, b)| a * b).sum::<f32>();
        let x6 = [0.3, -1.2, 2.0, 0.7, -0.4, 1.6];
        let y6 = [1.1, 0.4, -0.9, 2.5, 0.2, -1.3];
        assert!((dot(&bt(x6), &y6) - dot(&x6, &b(y6))).abs() < 1e-5);
        let x3 = [0.3, -1.2, 2.0];
        assert!((dot(&g(x3), &y6) - dot(&x3, &gt(y6))).abs() < 1e-5);
        let y4 = [0.6, -1.7, 0.9, 0.35];
        assert!((dot(&at(x6), &y4) - dot(&x6, &a(y4))).abs() < 1e-5);
    }

    #[test]
    fn one_tile_is_the_direct_correlation() {
        // At ((G w Gt) . (Bt d B)) A is the 3x3 correlation of the 6x6 patch d.
        let d: [[f32; 6]; 6] =
            std::array::from_fn(|i| std::array::from_fn(|j| ((i * 7 + j * 3) % 11) as f32 - 5.0));
        let w: [[f32; 3]; 3] =
            std::array::from_fn(|i| std::array::from_fn(|j| ((i * 5 + j) % 7) as f32 * 0.25 - 0.5));
        let (u, v) = (sandwich(w, g), sandwich(d, bt));
        let m: [[f32; 6]; 6] = std::array::from_fn(|i| std::array::from_fn(|j| u[i][j] * v[i][j]));
        let y = sandwich(m, at);
        for (r, row) in y.iter().enumerate() {
            for (c, &got) in row.iter().enumerate() {
                let want: f32 = (0..9)
                    .map(|k| w[k / 3][k % 3] * d[r + k / 3][c + k % 3])
                    .sum();
                assert!(
                    (got - want).abs() < 1e-4,
                    "({r}, {c}): {got} against {want}"
                );
            }
        }
    }
}
