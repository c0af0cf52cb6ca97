//! Winograd F(2x2, 3x3) (Lavin and Gray, 2016): the transforms of [`super::winograd`] for
//! 2x2 output tiles, each read from a 4x4 input patch; 16 products per tile and channel pair
//! in place of the direct 36.
//!
//! A plane is transformed a row of tiles at a time: the transform along the columns is a few
//! whole-row additions, and the one along the rows a loop over the row's tiles the compiler
//! vectorises, with the padding held in zeroed row buffers instead of a test per value. The
//! row buffers live on the stack, sized by the plane's width class (up to [`SMALL_WIDTH`] or
//! [`MAX_WIDTH`] pixels): they are set up for every plane, and a CIFAR network's deep layers
//! have tens of thousands of 4x4 planes a step. Wider planes take a per-tile path.
//!
//! A plane's tiles are `ty * tw + tx` (`tw = ceil(w / 2)` tiles a row); transformed values are
//! 16 slices, one per point `xi = 4 * i + j`, each holding every tile of the plane.

use super::lanes::{copy_row, fill_row};
use super::winograd_tiling::{sandwich, Tiling};

/// The widest plane the row transforms take.
pub const MAX_WIDTH: usize = 256;

/// Row buffer length: a padded input row of the widest plane.
const ROW: usize = MAX_WIDTH + 4;

/// Planes up to this wide use row buffers of [`SMALL_ROW`] values.
const SMALL_WIDTH: usize = 32;
const SMALL_ROW: usize = SMALL_WIDTH + 4;

/// Calls `$f::<R>($args)` with `R`, the row buffers' length, for the width class of `$w`.
macro_rules! by_width {
    ($w:expr, $f:ident($($arg:expr),*)) => {
        if $w <= SMALL_WIDTH {
            $f::<SMALL_ROW>($($arg),*)
        } else {
            $f::<ROW>($($arg),*)
        }
    };
}

/// Tiles along a row, tile rows, of an `h x w` plane.
#[inline(always)]
fn grid(h: usize, w: usize) -> (usize, usize) {
    (h.div_ceil(2), w.div_ceil(2))
}

/// Input row `y` of the plane into `row[1..=w]`, zero elsewhere up to `len` (zero where `y`
/// lies outside the plane).
#[inline(always)]
fn padded_row<const R: usize>(
    row: &mut [f32; R],
    plane: &[f32],
    y: isize,
    h: usize,
    w: usize,
    len: usize,
) {
    fill_row(&mut row[..len], 0.0);
    if y >= 0 && (y as usize) < h {
        let y = y as usize;
        copy_row(&mut row[1..=w], &plane[y * w..(y + 1) * w]);
    }
}

/// `V = Bt d B` for every tile of `plane` (`h x w`): `dst[xi][t]`.
#[inline(always)]
fn rows_input_tiles<const R: usize>(dst: &mut [&mut [f32]; 16], plane: &[f32], h: usize, w: usize) {
    let (th, tw) = grid(h, w);
    let len = 2 * tw + 2;
    let mut p = [[0.0f32; R]; 4];
    let mut u = [[0.0f32; R]; 4];
    for ty in 0..th {
        for (i, row) in p.iter_mut().enumerate() {
            padded_row::<R>(row, plane, 2 * ty as isize - 1 + i as isize, h, w, len);
        }
        // Bt along the columns: whole rows.
        for x in 0..len {
            let (a, b, c, d) = (p[0][x], p[1][x], p[2][x], p[3][x]);
            u[0][x] = a - c;
            u[1][x] = b + c;
            u[2][x] = c - b;
            u[3][x] = b - d;
        }
        // B along the rows: tile tx reads u[i][2tx..2tx + 4].
        for (i, ui) in u.iter().enumerate() {
            let [d0, d1, d2, d3] = four(dst, 4 * i);
            let at = ty * tw;
            let (d0, d1, d2, d3) = (
                &mut d0[at..at + tw],
                &mut d1[at..at + tw],
                &mut d2[at..at + tw],
                &mut d3[at..at + tw],
            );
            for tx in 0..tw {
                let (a, b, c, d) = (ui[2 * tx], ui[2 * tx + 1], ui[2 * tx + 2], ui[2 * tx + 3]);
                d0[tx] = a - c;
                d1[tx] = b + c;
                d2[tx] = c - b;
                d3[tx] = b - d;
            }
        }
    }
}

/// Slices `at..at + 4` of `dst`, mutably.
#[inline(always)]
fn four<'a>(dst: &'a mut [&mut [f32]; 16], at: usize) -> [&'a mut [f32]; 4] {
    let [a, b, c, d] = &mut dst[at..at + 4] else {
        unreachable!("four slices")
    };
    [&mut **a, &mut **b, &mut **c, &mut **d]
}

/// `Y = At M A + bias` for every tile, from `src[xi][t]`, into the `h x w` plane `out`.
#[inline(always)]
fn rows_output_tiles<const R: usize>(
    out: &mut [f32],
    src: &[&[f32]; 16],
    h: usize,
    w: usize,
    bias: f32,
) {
    let (th, tw) = grid(h, w);
    let mut rows = [[0.0f32; R]; 2];
    for ty in 0..th {
        let at = ty * tw;
        let m = |xi: usize| &src[xi][at..at + tw];
        let (m0, m1, m2, m3) = (m(0), m(1), m(2), m(3));
        let (m4, m5, m6, m7) = (m(4), m(5), m(6), m(7));
        let (m8, m9, m10, m11) = (m(8), m(9), m(10), m(11));
        let (m12, m13, m14, m15) = (m(12), m(13), m(14), m(15));
        let [r0, r1] = &mut rows;
        for tx in 0..tw {
            // At along the columns: s0 = M0 + M1 + M2, s1 = M1 - M2 - M3 (rows of M).
            let s0 = [
                m0[tx] + m4[tx] + m8[tx],
                m1[tx] + m5[tx] + m9[tx],
                m2[tx] + m6[tx] + m10[tx],
                m3[tx] + m7[tx] + m11[tx],
            ];
            let s1 = [
                m4[tx] - m8[tx] - m12[tx],
                m5[tx] - m9[tx] - m13[tx],
                m6[tx] - m10[tx] - m14[tx],
                m7[tx] - m11[tx] - m15[tx],
            ];
            r0[2 * tx] = s0[0] + s0[1] + s0[2] + bias;
            r0[2 * tx + 1] = s0[1] - s0[2] - s0[3] + bias;
            r1[2 * tx] = s1[0] + s1[1] + s1[2] + bias;
            r1[2 * tx + 1] = s1[1] - s1[2] - s1[3] + bias;
        }
        for (r, row) in rows.iter().enumerate() {
            let y = 2 * ty + r;
            if y < h {
                copy_row(&mut out[y * w..(y + 1) * w], &row[..w]);
            }
        }
    }
}

/// `dM = A dY At` for every tile of the `h x w` plane `dout` (zero outside it): `dst[xi][t]`.
#[inline(always)]
fn rows_output_grad_tiles<const R: usize>(
    dst: &mut [&mut [f32]; 16],
    dout: &[f32],
    h: usize,
    w: usize,
) {
    let (th, tw) = grid(h, w);
    let mut rows = [[0.0f32; R]; 2];
    for ty in 0..th {
        for (r, row) in rows.iter_mut().enumerate() {
            let y = 2 * ty + r;
            fill_row(&mut row[..2 * tw], 0.0);
            if y < h {
                copy_row(&mut row[..w], &dout[y * w..(y + 1) * w]);
            }
        }
        let at = ty * tw;
        let [r0, r1] = &rows;
        for i in 0..4 {
            let [d0, d1, d2, d3] = four(dst, 4 * i);
            let (d0, d1, d2, d3) = (
                &mut d0[at..at + tw],
                &mut d1[at..at + tw],
                &mut d2[at..at + tw],
                &mut d3[at..at + tw],
            );
            for tx in 0..tw {
                let (y00, y01) = (r0[2 * tx], r0[2 * tx + 1]);
                let (y10, y11) = (r1[2 * tx], r1[2 * tx + 1]);
                // A along the columns gives row i of A dY: (c0, c1).
                let (c0, c1) = match i {
                    0 => (y00, y01),
                    1 => (y00 + y10, y01 + y11),
                    2 => (y00 - y10, y01 - y11),
                    _ => (-y10, -y11),
                };
                d0[tx] = c0;
                d1[tx] = c0 + c1;
                d2[tx] = c0 - c1;
                d3[tx] = -c1;
            }
        }
    }
}

/// `dX = B dV Bt` summed over every tile, from `src[xi][t]`, written into the `h x w` plane
/// `dinp` (what falls in the padding dropped). Tile row `ty` adds to the padded rows
/// `2ty..2ty + 4`, of which the last two are the next tile row's first two: they carry over
/// in the row buffers, so each plane row is written once, when it is complete.
#[inline(always)]
fn rows_input_grad_tiles<const R: usize>(dinp: &mut [f32], src: &[&[f32]; 16], h: usize, w: usize) {
    let (th, tw) = grid(h, w);
    let len = 2 * tw + 2;
    let mut acc = [[0.0f32; R]; 4];
    // Padded row `2ty + i` of the plane, if it lies inside it, gets buffer row `i`.
    let mut write = |acc: &[f32; R], padded: usize| {
        if (1..=h).contains(&padded) {
            let y = padded - 1;
            copy_row(&mut dinp[y * w..(y + 1) * w], &acc[1..=w]);
        }
    };
    for ty in 0..th {
        let at = ty * tw;
        let v: [&[f32]; 16] = std::array::from_fn(|xi| &src[xi][at..at + tw]);
        for tx in 0..tw {
            let d: [[f32; 4]; 4] =
                std::array::from_fn(|i| std::array::from_fn(|j| v[4 * i + j][tx]));
            // B along the columns, then Bt along the rows, added at padded columns 2tx..2tx+4.
            let s: [[f32; 4]; 4] = std::array::from_fn(|j| {
                [
                    d[0][j],
                    d[1][j] - d[2][j] + d[3][j],
                    d[1][j] + d[2][j] - d[0][j],
                    -d[3][j],
                ]
            });
            for (i, row) in acc.iter_mut().enumerate() {
                let (s0, s1, s2, s3) = (s[0][i], s[1][i], s[2][i], s[3][i]);
                row[2 * tx] += s0;
                row[2 * tx + 1] += s1 - s2 + s3;
                row[2 * tx + 2] += s1 + s2 - s0;
                row[2 * tx + 3] -= s3;
            }
        }
        write(&acc[0], 2 * ty);
        write(&acc[1], 2 * ty + 1);
        let (done, next) = acc.split_at_mut(2);
        for (row, carried) in done.iter_mut().zip(next.iter_mut()) {
            copy_row(&mut row[..len], &carried[..len]);
            fill_row(&mut carried[..len], 0.0);
        }
    }
    write(&acc[0], 2 * th);
    write(&acc[1], 2 * th + 1);
}

/// F(2x2, 3x3): 16 points per tile.
pub struct F2;

// The 1-D transforms; each 2-D one applies its 1-D map to the columns, then to the rows.

/// `Bt x`.
#[inline(always)]
fn bt(x: [f32; 4]) -> [f32; 4] {
    [x[0] - x[2], x[1] + x[2], x[2] - x[1], x[1] - x[3]]
}

/// `B x`, the adjoint of [`bt`].
#[inline(always)]
fn b(x: [f32; 4]) -> [f32; 4] {
    [x[0], x[1] - x[2] + x[3], x[1] + x[2] - x[0], -x[3]]
}

/// `G x`.
#[inline(always)]
fn g(x: [f32; 3]) -> [f32; 4] {
    [
        x[0],
        0.5 * (x[0] + x[1] + x[2]),
        0.5 * (x[0] - x[1] + x[2]),
        x[2],
    ]
}

/// `Gt x`, the adjoint of [`g`].
#[inline(always)]
fn gt(x: [f32; 4]) -> [f32; 3] {
    [
        x[0] + 0.5 * (x[1] + x[2]),
        0.5 * (x[1] - x[2]),
        0.5 * (x[1] + x[2]) + x[3],
    ]
}

/// `At x`.
#[inline(always)]
fn at(x: [f32; 4]) -> [f32; 2] {
    [x[0] + x[1] + x[2], x[1] - x[2] - x[3]]
}

/// `A x`, the adjoint of [`at`].
#[inline(always)]
fn a(x: [f32; 2]) -> [f32; 4] {
    [x[0], x[0] + x[1], x[0] - x[1], -x[1]]
}

impl Tiling<16> for F2 {
    const TILE: usize = 2;

    #[inline(always)]
    fn filter(w: [[f32; 3]; 3]) -> [f32; 16] {
        let t = sandwich(w, g);
        std::array::from_fn(|xi| t[xi / 4][xi % 4])
    }

    #[inline(always)]
    fn fold_filter(d: [f32; 16]) -> [[f32; 3]; 3] {
        sandwich(
            std::array::from_fn(|i| std::array::from_fn(|j| d[4 * i + j])),
            gt,
        )
    }

    #[inline(always)]
    fn input_tiles(dst: &mut [&mut [f32]; 16], plane: &[f32], h: usize, w: usize) {
        if w <= MAX_WIDTH {
            return by_width!(w, rows_input_tiles(dst, plane, h, w));
        }
        let (th, tw) = grid(h, w);
        for ty in 0..th {
            for tx in 0..tw {
                let vt = sandwich(patch(plane, h, w, ty, tx), bt);
                for (xi, d) in dst.iter_mut().enumerate() {
                    d[ty * tw + tx] = vt[xi / 4][xi % 4];
                }
            }
        }
    }

    #[inline(always)]
    fn output_tiles(out: &mut [f32], src: &[&[f32]; 16], h: usize, w: usize, bias: f32) {
        if w <= MAX_WIDTH {
            return by_width!(w, rows_output_tiles(out, src, h, w, bias));
        }
        let (th, tw) = grid(h, w);
        for ty in 0..th {
            for tx in 0..tw {
                let t = ty * tw + tx;
                let mt: [[f32; 4]; 4] =
                    std::array::from_fn(|i| std::array::from_fn(|j| src[4 * i + j][t]));
                for (dy, row) in sandwich(mt, at).iter().enumerate() {
                    for (dx, &val) in row.iter().enumerate() {
                        let (oy, ox) = (2 * ty + dy, 2 * tx + dx);
                        if oy < h && ox < w {
                            out[oy * w + ox] = val + bias;
                        }
                    }
                }
            }
        }
    }

    #[inline(always)]
    fn output_grad_tiles(dst: &mut [&mut [f32]; 16], dout: &[f32], h: usize, w: usize) {
        if w <= MAX_WIDTH {
            return by_width!(w, rows_output_grad_tiles(dst, dout, h, w));
        }
        let (th, tw) = grid(h, w);
        for ty in 0..th {
            for tx in 0..tw {
                let dy: [[f32; 2]; 2] = std::array::from_fn(|i| {
                    std::array::from_fn(|j| {
                        let (oy, ox) = (2 * ty + i, 2 * tx + j);
                        if oy < h && ox < w {
                            dout[oy * w + ox]
                        } else {
                            0.0
                        }
                    })
                });
                let d = sandwich(dy, a);
                for (xi, dm) in dst.iter_mut().enumerate() {
                    dm[ty * tw + tx] = d[xi / 4][xi % 4];
                }
            }
        }
    }

    #[inline(always)]
    fn input_grad_tiles(dinp: &mut [f32], src: &[&[f32]; 16], h: usize, w: usize) {
        if w <= MAX_WIDTH {
            return by_width!(w, rows_input_grad_tiles(dinp, src, h, w));
        }
        let (th, tw) = grid(h, w);
        let (hi, wi) = (h as isize, w as isize);
        dinp[..h * w].fill(0.0);
        for ty in 0..th {
            for tx in 0..tw {
                let t = ty * tw + tx;
                let vt: [[f32; 4]; 4] =
                    std::array::from_fn(|i| std::array::from_fn(|j| src[4 * i + j][t]));
                let (y0, x0) = (2 * ty as isize - 1, 2 * tx as isize - 1);
                for (i, row) in sandwich(vt, b).iter().enumerate() {
                    let y = y0 + i as isize;
                    if y < 0 || y >= hi {
                        continue;
                    }
                    for (j, &val) in row.iter().enumerate() {
                        let x = x0 + j as isize;
                        if x >= 0 && x < wi {
                            dinp[(y * wi + x) as usize] += val;
                        }
                    }
                }
            }
        }
    }
}

/// The 4x4 input patch of tile `(ty, tx)` of an `h x w` plane, zero outside it.
#[inline(always)]
fn patch(plane: &[f32], h: usize, w: usize, ty: usize, tx: usize) -> [[f32; 4]; 4] {
    let (h, w) = (h as isize, w as isize);
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

#[cfg(test)]
mod tests {
    use super::*;

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
