//! F(4x4, 3x3)'s four tile transforms for AVX2, eight tiles at a time: the 1-D maps run on
//! eight tiles' values as one vector per value. The forward transforms gather each of a
//! tile's patch values for eight tiles with one AVX2 gather (the input from a zero-bordered
//! copy of the plane, the output gradient from the plane itself where its sides are
//! multiples of 4); the other two load eight tiles' transformed values with one load per
//! point and put each tile's result in place lane by lane. The portable transforms (in
//! [`super::winograd_f4`]) vectorise along a tile row, which leaves most lanes idle on the
//! narrow planes of a CIFAR network's deep layers, and their compiled loops moved values one
//! at a time; here the eight tiles run on through the plane's tile rows.
//!
//! The maps come from the caller as types ([`Map`]), so this module needs nothing of the
//! tiling's, and run in the portable transforms' order (the input gradient's sums
//! included): the same operations on the same values, so the same results bit for bit.
//! Planes up to [`MAX_SIDE`] pixels a side: the bordered copies live on the stack.

use std::arch::x86_64::*;

use super::lanes::{copy_row, F32x8};

/// The widest and tallest plane these transforms take; larger planes take the portable ones.
pub const MAX_SIDE: usize = 64;

/// Whether these transforms take an `h x w` plane (not an empty one).
pub fn takes(h: usize, w: usize) -> bool {
    (1..=MAX_SIDE).contains(&h) && (1..=MAX_SIDE).contains(&w)
}

/// A 1-D map of eight tiles' values, as a type whose `apply` is `#[inline(always)]`: so it
/// is compiled into the AVX2 functions that use it (a function passed as a value would be
/// called, compiled without AVX2).
pub trait Map<const I: usize, const O: usize> {
    /// The map of `x`.
    fn apply(x: [F32x8; I]) -> [F32x8; O];
}

/// Calls `$f::<$map, P>($args)` with `P` values of stack for the bordered copy of a plane of
/// `$side` pixels a side at most (plus 2 for the border).
macro_rules! by_side {
    ($side:expr, $f:ident::<$map:ident>($($arg:expr),*)) => {
        if $side <= 8 {
            $f::<$map, { 10 * 10 }>($($arg),*)
        } else if $side <= 16 {
            $f::<$map, { 18 * 18 }>($($arg),*)
        } else if $side <= 32 {
            $f::<$map, { 34 * 34 }>($($arg),*)
        } else {
            $f::<$map, { (MAX_SIDE + 2) * (MAX_SIDE + 2) }>($($arg),*)
        }
    };
}

/// `V = Bt d B` for every tile of the `h x w` plane (zero outside it): `dst[xi][t]`, with
/// `Bt` the map `Bt`.
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn input_tiles<Bt: Map<6, 6>>(
    dst: &mut [&mut [f32]; 36],
    plane: &[f32],
    (h, w): (usize, usize),
) {
    by_side!(h.max(w), bordered_input_tiles::<Bt>(dst, plane, h, w))
}

/// [`input_tiles`] with a copy of the plane, bordered by a zero row and column on each
/// side, in `P` values.
#[target_feature(enable = "avx2,fma")]
fn bordered_input_tiles<Bt: Map<6, 6>, const P: usize>(
    dst: &mut [&mut [f32]; 36],
    plane: &[f32],
    h: usize,
    w: usize,
) {
    let (th, tw) = (h.div_ceil(4), w.div_ceil(4));
    let pw = 4 * tw + 2;
    let mut padded = [0.0f32; P];
    for (y, row) in plane[..h * w].chunks_exact(w).enumerate() {
        copy_row(&mut padded[(y + 1) * pw + 1..][..w], row);
    }
    let padded = &padded[..(4 * th + 2) * pw];
    gathered_tiles::<6, Bt>(dst, padded, pw, (th, tw));
}

/// `dM = A dY At` for every tile of the `h x w` plane `dout` (zero outside it):
/// `dst[xi][t]`, with `A` the map `A`.
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn output_grad_tiles<A: Map<4, 6>>(
    dst: &mut [&mut [f32]; 36],
    dout: &[f32],
    (h, w): (usize, usize),
) {
    let (th, tw) = (h.div_ceil(4), w.div_ceil(4));
    if h % 4 == 0 && w % 4 == 0 {
        return gathered_tiles::<4, A>(dst, &dout[..h * w], w, (th, tw));
    }
    by_side!(h.max(w), ragged_output_grad_tiles::<A>(dst, dout, h, w))
}

/// [`output_grad_tiles`] for a plane whose sides are not both multiples of 4, through a
/// copy zero-filled up to whole tiles, in `P` values.
#[target_feature(enable = "avx2,fma")]
fn ragged_output_grad_tiles<A: Map<4, 6>, const P: usize>(
    dst: &mut [&mut [f32]; 36],
    dout: &[f32],
    h: usize,
    w: usize,
) {
    let (th, tw) = (h.div_ceil(4), w.div_ceil(4));
    let pw = 4 * tw;
    let mut padded = [0.0f32; P];
    for (y, row) in dout[..h * w].chunks_exact(w).enumerate() {
        copy_row(&mut padded[y * pw..][..w], row);
    }
    gathered_tiles::<4, A>(dst, &padded[..4 * th * pw], pw, (th, tw));
}

/// `Y = At M A + bias` for every tile, from `src[xi][t]`, into the `h x w` plane `out`, with
/// `At` the map `At`.
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn output_tiles<At: Map<6, 4>>(
    out: &mut [f32],
    src: &[&[f32]; 36],
    (h, w): (usize, usize),
    bias: f32,
) {
    let (th, tw) = (h.div_ceil(4), w.div_ceil(4));
    let tiles = th * tw;
    let out = &mut out[..h * w];
    let mut at_tile = Tiles::new(tw);
    for first in (0..tiles).step_by(8) {
        let count = (tiles - first).min(8);
        // SAFETY: this function runs with AVX2.
        let y = sandwich::<6, 4, At>(|i, j| unsafe { load(src[6 * i + j], first, count) });
        // The eight tiles' outputs, lane by lane, into the plane.
        for l in 0..count {
            let (ty, tx) = at_tile.next();
            for (r, yr) in y.iter().enumerate() {
                let oy = 4 * ty + r;
                if oy >= h {
                    break;
                }
                let row = &mut out[oy * w..(oy + 1) * w];
                for (c, v) in yr.iter().enumerate() {
                    if let Some(o) = row.get_mut(4 * tx + c) {
                        *o = v.0[l] + bias;
                    }
                }
            }
        }
    }
}

/// `dX = B dV Bt` summed over every tile, from `src[xi][t]`, written into the `h x w` plane
/// `dinp` (every value), with `B` the map `B`.
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn input_grad_tiles<B: Map<6, 6>>(
    dinp: &mut [f32],
    src: &[&[f32]; 36],
    (h, w): (usize, usize),
) {
    by_side!(h.max(w), summed_input_grads::<B>(dinp, src, h, w))
}

/// [`input_grad_tiles`] through sums by tile row in `2 P` values: the six padded rows each
/// tile row adds to, `rows[ty][i]`, are summed first (tile by tile, along the row), and
/// the two rows each tile row shares with the next are added last. That is the portable
/// transform's order of additions, so the result is the same bit for bit.
#[target_feature(enable = "avx2,fma")]
fn summed_input_grads<B: Map<6, 6>, const P: usize>(
    dinp: &mut [f32],
    src: &[&[f32]; 36],
    h: usize,
    w: usize,
) {
    let (th, tw) = (h.div_ceil(4), w.div_ceil(4));
    let (tiles, pw) = (th * tw, 4 * tw + 2);
    // 6 rows of pw a tile row: 1.5 s (s + 2) values for a side of s, within the 2 (s + 2)^2
    // of two bordered copies.
    let mut rows = [[0.0f32; P]; 2];
    let rows = &mut rows.as_flattened_mut()[..6 * th * pw];
    let mut at_tile = Tiles::new(tw);
    for first in (0..tiles).step_by(8) {
        let count = (tiles - first).min(8);
        // r[i][j] is patch value (i, j).
        // SAFETY: this function runs with AVX2.
        let r = sandwich::<6, 6, B>(|i, j| unsafe { load(src[6 * i + j], first, count) });
        for l in 0..count {
            let (ty, tx) = at_tile.next();
            for (i, ri) in r.iter().enumerate() {
                let row = &mut rows[(6 * ty + i) * pw + 4 * tx..][..6];
                for (sum, v) in row.iter_mut().zip(ri) {
                    *sum += v.0[l];
                }
            }
        }
    }
    // Plane row y is padded row y + 1: row i = (y + 1) % 4 of tile row (y + 1) / 4, plus
    // row i + 4 of the tile row above where i < 2; plane column x is padded column x + 1.
    let rows = &*rows;
    for (y, out) in dinp[..h * w].chunks_exact_mut(w).enumerate() {
        let (ty, i) = ((y + 1) / 4, (y + 1) % 4);
        let own = (ty < th).then(|| &rows[(6 * ty + i) * pw + 1..][..w]);
        let above = (ty > 0 && i < 2).then(|| &rows[(6 * (ty - 1) + i + 4) * pw + 1..][..w]);
        match (own, above) {
            (Some(own), Some(above)) => {
                for ((o, a), b) in out.iter_mut().zip(own).zip(above) {
                    *o = a + b;
                }
            }
            (Some(only), None) | (None, Some(only)) => copy_row(out, only),
            (None, None) => unreachable!("every plane row lies in a tile row"),
        }
    }
}

/// Tile positions (row, column) in the order of a plane's tiles, `tw` a row.
struct Tiles {
    tw: usize,
    ty: usize,
    tx: usize,
}

impl Tiles {
    fn new(tw: usize) -> Self {
        Self { tw, ty: 0, tx: 0 }
    }

    /// The next tile's (row, column).
    #[inline(always)]
    fn next(&mut self) -> (usize, usize) {
        let here = (self.ty, self.tx);
        self.tx += 1;
        if self.tx == self.tw {
            (self.ty, self.tx) = (self.ty + 1, 0);
        }
        here
    }
}

/// `L x Lt` for eight tiles at once, `value(i, j)` giving value `(i, j)` of their `N x N`
/// inputs: the map `L` along the columns, each column fetched as its transform needs it
/// (fewer live vectors than fetching all first), then along the rows; the portable
/// transforms' order.
#[inline(always)]
fn sandwich<const N: usize, const O: usize, L: Map<N, O>>(
    value: impl Fn(usize, usize) -> F32x8,
) -> [[F32x8; O]; O] {
    let cols: [[F32x8; O]; N] =
        std::array::from_fn(|j| L::apply(std::array::from_fn(|i| value(i, j))));
    std::array::from_fn(|i| L::apply(std::array::from_fn(|j| cols[j][i])))
}

/// The transform `L x Lt` (`f` the map `L`, patches of `N x N` values) of every tile of a
/// plane whose tile `(ty, tx)` reads the patch at row `4 ty`, column `4 tx` of `src`
/// (`pw` values a row): `dst[6 i + j][t]` is value `(i, j)` of tile `t`'s result.
#[target_feature(enable = "avx2,fma")]
fn gathered_tiles<const N: usize, L: Map<N, 6>>(
    dst: &mut [&mut [f32]; 36],
    src: &[f32],
    pw: usize,
    (th, tw): (usize, usize),
) {
    let tiles = th * tw;
    // Every patch lies inside `src`, and its offsets fit an i32: the gathers stay in bounds.
    assert!(
        th > 0
            && (4 * (th - 1) + N - 1) * pw + 4 * (tw - 1) + N <= src.len()
            && src.len() < 1 << 30,
        "{th}x{tw} tiles of {N}x{N} in {} values, {pw} a row",
        src.len()
    );
    let mut at_tile = Tiles::new(tw);
    for first in (0..tiles).step_by(8) {
        let count = (tiles - first).min(8);
        // Where each lane's patch starts in `src` (lanes past the last tile read tile 0's).
        let mut starts = [0i32; 8];
        for start in &mut starts[..count] {
            let (ty, tx) = at_tile.next();
            *start = (4 * ty * pw + 4 * tx) as i32;
        }
        // SAFETY: eight i32 from an [i32; 8].
        let starts = unsafe { _mm256_loadu_si256(starts.as_ptr().cast()) };
        let result = sandwich::<N, 6, L>(|i, j| {
            // SAFETY: every lane's value (i, j) lies inside `src` (asserted above).
            F32x8::from(unsafe { _mm256_i32gather_ps::<4>(src.as_ptr().add(i * pw + j), starts) })
        });
        for (i, row) in result.into_iter().enumerate() {
            for (j, v) in row.into_iter().enumerate() {
                // SAFETY: this function runs with AVX2.
                unsafe { store(&mut *dst[6 * i + j], first, count, v) };
            }
        }
    }
}

/// Values `first..first + count` of `src` (`count` at most 8) as lanes, zero past `count`.
///
/// # Safety
/// The CPU must have AVX2.
#[inline(always)]
unsafe fn load(src: &[f32], first: usize, count: usize) -> F32x8 {
    let src = &src[first..first + count];
    // SAFETY: the lanes read lie in `src` (all eight, or those `first_lanes` keeps).
    F32x8::from(unsafe {
        if count == 8 {
            _mm256_loadu_ps(src.as_ptr())
        } else {
            _mm256_maskload_ps(src.as_ptr(), first_lanes(count))
        }
    })
}

/// The first `count` lanes of `v` (at most 8) into `dst[first..first + count]`.
///
/// # Safety
/// The CPU must have AVX2.
#[inline(always)]
unsafe fn store(dst: &mut [f32], first: usize, count: usize, v: F32x8) {
    let dst = &mut dst[first..first + count];
    // SAFETY: the lanes written lie in `dst` (all eight, or those `first_lanes` keeps).
    unsafe {
        if count == 8 {
            _mm256_storeu_ps(dst.as_mut_ptr(), v.into())
        } else {
            _mm256_maskstore_ps(dst.as_mut_ptr(), first_lanes(count), v.into())
        }
    }
}

/// A mask of lanes `0..count`.
///
/// # Safety
/// The CPU must have AVX2.
#[inline(always)]
unsafe fn first_lanes(count: usize) -> __m256i {
    // SAFETY: AVX2 (the caller's promise).
    unsafe {
        _mm256_cmpgt_epi32(
            _mm256_set1_epi32(count as i32),
            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
        )
    }
}

impl From<__m256> for F32x8 {
    #[inline(always)]
    fn from(v: __m256) -> Self {
        // SAFETY: both are eight f32, any bits valid.
        Self(unsafe { std::mem::transmute::<__m256, [f32; 8]>(v) })
    }
}

impl From<F32x8> for __m256 {
    #[inline(always)]
    fn from(v: F32x8) -> Self {
        // SAFETY: as above.
        unsafe { std::mem::transmute::<[f32; 8], __m256>(v.0) }
    }
}
