//! Winograd convolution for 3x3 kernels of stride 1 and padding 1 (Lavin and Gray, 2016):
//! forward and both backward products, in two tilings, F(2x2, 3x3)
//! ([`super::winograd_f2`]) and F(4x4, 3x3) ([`super::winograd_f4`]).
//!
//! The output is cut into `m x m` tiles; each reads an `(m + 2) x (m + 2)` input patch. With
//! the transforms `V = Bt d B` of a patch and `U = G g Gt` of a 3x3 filter, a tile is
//! `Y = At M A` where `M[xi] = sum_c U[xi][k, c] V[xi][c, tile]` for each point `xi` of the
//! transformed patch: one GEMM of `out_c x channels x tiles` per point does the multiplying.
//! The backward products are the adjoints of the same linear maps: `dM = A dY At` per tile,
//! then `dU[xi] += dM[xi] V[xi]^T` (the weight gradient, folded back by `Gt dU G` once per
//! call) and `dV[xi] = U[xi]^T dM[xi]` (scattered back to the input gradient by `B dV Bt`).
//! So the gradient is exactly that of the forward computed here.
//!
//! Which tiling ([`Tilings`]): by default F(4x4, 3x3) on planes of at least
//! [`LARGE_TILE_MIN_HEIGHT`] rows, F(2x2, 3x3) below. F(4x4, 3x3) takes 36 products per 16
//! outputs where F(2x2, 3x3) takes 64, and transforms 2.25 values per pixel in place of 4,
//! but its filter transforms are 2.25x larger (`U` and `dU` are read and written whole at
//! every call) and its rounding is larger. On a CIFAR network's deep layers (few pixels, many
//! channels) the filter transforms cost as much as the GEMMs, so there F(2x2, 3x3) is faster;
//! on the wide planes of the first layers F(4x4, 3x3) is (docs/history.md, 2026-12-05). Either tiling
//! can be held for every layer ([`set_tilings`]) to compare them; F(4x4, 3x3) is taken only
//! where it multiplies less ([`choose`]: not on a plane of 2 or 6 pixels, where it pads more
//! than it saves).
//!
//! Images are taken in chunks of about [`TILE_COLUMNS`] F(2x2, 3x3) tiles a thread (fewer on
//! layers wider than [`CHUNK_CHANNELS`], and as many F(4x4, 3x3) tiles as transform to the
//! same size), which bounds the scratch. On several threads a chunk is cut into one piece a
//! thread ([`Pieces`]; a chunk whose pieces would have fewer than [`MIN_PIECE_TILES`] tiles
//! stays whole), and each thread takes its piece through every stage of the pass, so
//! that the transformed buffers a core writes are mostly read by the same core; a thread
//! done with its own stage early takes units of another piece's ([`relay`]). Only the
//! weight gradient's GEMM, a sum over every piece, is shared among the threads by points;
//! its first GEMM writes `dU` (no pass zeroes it first).
//! The filter transform `U` is computed once per call, not per chunk. Every transformed
//! buffer is point-major, and its points' blocks are a cache line more than their length
//! apart ([`SKEW`]), so that a transform writing all `XI` points of a tile at once does not
//! find them in the same cache sets. The tile transforms run compiled for AVX2 and FMA
//! where the CPU has them, portable elsewhere ([`Transforms`]).

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use super::elementwise::fill;
use super::gemm::gemm;
use super::relay::{relay, MAX_PIECES};
use super::threads::{for_parts, for_rows, share, threads, Disjoint, Units};
use super::winograd_avx2::Transforms;
use super::winograd_f2::F2;
use super::winograd_f4::{self as f4, F4};
use super::winograd_tiling::Tiling;
use crate::compute::backend::{Conv2dDims, GemmDims, Window2d};

/// Tiles per chunk of images (the GEMMs' `n`) for each of the pool's threads, at up to
/// [`CHUNK_CHANNELS`] input channels: small enough that the transformed chunk (1 MB a
/// thread at 64 channels, 2 MB at 128, whose GEMMs read their share of it) is still in
/// cache when the GEMMs read it; measured against 512 and 1024 on ResNet-18 and VGG-19
/// (docs/history.md, 2026-12-04 afternoon and 2026-12-05 night).
pub const TILE_COLUMNS: usize = 256;

/// Above this many input channels a chunk has proportionally fewer tiles (down to
/// [`MIN_TILE_COLUMNS`]), so that its transformed input stays about the same size and in
/// the cache the pool's threads share (measured against a fixed chunk at every width, and
/// against 64: docs/history.md, 2026-12-04 evening).
const CHUNK_CHANNELS: usize = 128;

/// The fewest tiles a thread's chunk is cut down to, so the GEMMs keep a useful `n`.
const MIN_TILE_COLUMNS: usize = 16;

/// Fewer input channels than this (a network's first layer) stay on im2col: the GEMMs'
/// inner dimension would be too short to pay for the transforms.
pub const MIN_CHANNELS: usize = 8;

/// Whether Winograd is used where it applies (on by default; tests and benchmarks compare
/// it with im2col by turning it off).
static ENABLED: AtomicBool = AtomicBool::new(true);

/// Which tilings [`choose`] may take, as [`Tilings`]' discriminant.
static TILINGS: AtomicU8 = AtomicU8::new(Tilings::Mixed as u8);

/// The smallest plane height that takes F(4x4, 3x3) under [`Tilings::Mixed`]: 8x8 and wider
/// planes gained over F(2x2, 3x3), 4x4 and smaller lost (docs/history.md, 2026-12-05
/// morning).
pub const LARGE_TILE_MIN_HEIGHT: usize = 8;

/// Which tilings the process's Winograd layers may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tilings {
    /// F(2x2, 3x3) on every layer.
    Two,
    /// F(4x4, 3x3) on planes of at least `LARGE_TILE_MIN_HEIGHT` rows, F(2x2, 3x3) below
    /// (the default).
    Mixed,
    /// F(4x4, 3x3) wherever it multiplies less than F(2x2, 3x3).
    Four,
}

/// Turns Winograd on or off for the whole process (im2col and GEMM when off).
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// Sets which tilings `choose` may take, for the whole process.
pub fn set_tilings(tilings: Tilings) {
    TILINGS.store(tilings as u8, Ordering::Relaxed);
}

/// The tilings [`set_tilings`] last set.
fn tilings() -> Tilings {
    match TILINGS.load(Ordering::Relaxed) {
        t if t == Tilings::Two as u8 => Tilings::Two,
        t if t == Tilings::Four as u8 => Tilings::Four,
        _ => Tilings::Mixed,
    }
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

/// The tilings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tile {
    /// F(2x2, 3x3).
    Two,
    /// F(4x4, 3x3).
    Four,
}

/// Points of a plane's tiles: `(side + 2)^2` per tile of `side x side` outputs.
fn points(g: &Window2d, side: usize) -> usize {
    (side + 2).pow(2) * g.height.div_ceil(side) * g.width.div_ceil(side)
}

/// The tiling for this plane under the process's [`Tilings`] ([`choose_under`]).
pub fn choose(g: &Window2d) -> Tile {
    choose_under(tilings(), g)
}

/// The tiling for this plane under `tilings`: F(4x4, 3x3) where they allow it on a plane of
/// this height and [`fewer_products`] says so, else F(2x2, 3x3).
fn choose_under(tilings: Tilings, g: &Window2d) -> Tile {
    let allowed = match tilings {
        Tilings::Two => false,
        Tilings::Mixed => g.height >= LARGE_TILE_MIN_HEIGHT,
        Tilings::Four => true,
    };
    if allowed && fewer_products(g) {
        Tile::Four
    } else {
        Tile::Two
    }
}

/// Whether F(4x4, 3x3) multiplies less than F(2x2, 3x3) on this plane (a tie is no) and the
/// plane fits its row buffers.
fn fewer_products(g: &Window2d) -> bool {
    g.width <= f4::MAX_WIDTH && points(g, 4) < points(g, 2)
}

/// Scratch values forward and backward need, for whichever tiling [`choose`] takes.
pub fn scratch_len(dims: &Conv2dDims) -> usize {
    scratch_for::<F2, 16>(dims).max(scratch_for::<F4, 36>(dims))
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
    match choose(&dims.window) {
        Tile::Two => forward_with::<F2, 16>(out, scratch, inp, weight, bias, dims),
        Tile::Four => forward_with::<F4, 36>(out, scratch, inp, weight, bias, dims),
    }
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
    match choose(&dims.window) {
        Tile::Two => backward_with::<F2, 16>(dinp, grads, scratch, dout, inp, weight, dims),
        Tile::Four => backward_with::<F4, 36>(dinp, grads, scratch, dout, inp, weight, dims),
    }
}

/// The tile grid of one image: (rows, columns) of tiles.
fn grid<T: Tiling<XI>, const XI: usize>(g: &Window2d) -> (usize, usize) {
    (g.height.div_ceil(T::TILE), g.width.div_ceil(T::TILE))
}

/// Images per chunk: about [`tiles_per_thread`] tiles for each of the pool's threads.
fn chunk<T: Tiling<XI>, const XI: usize>(g: &Window2d, batch: usize) -> usize {
    let (th, tw) = grid::<T, XI>(g);
    (tiles_per_thread(g.channels, XI) * threads() / (th * tw).max(1)).clamp(1, batch.max(1))
}

/// [`TILE_COLUMNS`] up to [`CHUNK_CHANNELS`] input channels, proportionally fewer above, for
/// tiles of 16 points; tiles of `points` points proportionally fewer again, so that a
/// chunk's transformed input has the same size in either tiling (F(4x4, 3x3)'s chunks of as
/// many tiles as F(2x2, 3x3)'s measured slower: docs/history.md, 2026-12-05 morning).
fn tiles_per_thread(channels: usize, points: usize) -> usize {
    (TILE_COLUMNS * CHUNK_CHANNELS / channels.max(1) * 16 / points.max(1))
        .clamp(MIN_TILE_COLUMNS, TILE_COLUMNS)
}

/// [`chunk`], but no more images than `scratch` values hold (the scratch was sized when the
/// model was built, possibly before the pool had its threads).
fn chunk_within<T: Tiling<XI>, const XI: usize>(dims: &Conv2dDims, scratch: usize) -> usize {
    let (filters, per_image) = scratch_parts::<T, XI>(dims);
    let fits = scratch.saturating_sub(filters) / per_image.max(1);
    chunk::<T, XI>(&dims.window, dims.batch).min(fits).max(1)
}

/// Scratch of one tiling for a whole chunk ([`scratch_parts`]).
fn scratch_for<T: Tiling<XI>, const XI: usize>(dims: &Conv2dDims) -> usize {
    let (filters, per_image) = scratch_parts::<T, XI>(dims);
    filters + chunk::<T, XI>(&dims.window, dims.batch) * per_image
}

/// The scratch of one tiling in two parts: the filters' `U` and `dU` `[XI x out_c x C]`
/// with the [`SKEW`] of every point-major buffer, and per image of a chunk of `T` tiles,
/// `V` and `dV` `[XI x C x T]` and `M` (or `dM`) `[XI x out_c x T]`.
fn scratch_parts<T: Tiling<XI>, const XI: usize>(dims: &Conv2dDims) -> (usize, usize) {
    let (g, k) = (&dims.window, dims.out_c);
    let (th, tw) = grid::<T, XI>(g);
    (
        2 * XI * point_stride(k * g.channels) + 3 * XI * SKEW,
        XI * th * tw * (2 * g.channels + k),
    )
}

/// Values of padding after each point's block in a point-major buffer (`U`, `dU`, `V`,
/// `M`, `dM`, `dV`), one cache line: on the usual layer widths the blocks' lengths are
/// multiples of 4 KB under F(2x2, 3x3) (a chunk's `V` is [`TILE_COLUMNS`] x
/// [`CHUNK_CHANNELS`] values a point) and often under F(4x4, 3x3), so without it the `XI`
/// rows a plane's transform writes at once would start in the same set of the L1 cache and
/// evict one another.
const SKEW: usize = 16;

/// The distance between the starts of two points' blocks of `len` values in a point-major
/// buffer.
fn point_stride(len: usize) -> usize {
    len + SKEW
}

/// Filter pairs transformed together: each point's values of a block are written (and
/// read back, for the gradients) as one contiguous run, not one value per point and pair
/// scattered over `XI` rows of `out_c x C` values.
const PAIR_BLOCK: usize = 64;

/// `U[xi][k, c] = (G w[k, c] Gt)[xi]` for weights `[out_c x C x 3 x 3]`.
fn transform_filters<T: Tiling<XI>, const XI: usize>(
    u: &mut [f32],
    weight: &[f32],
    k: usize,
    c: usize,
) {
    let pairs_n = k * c;
    let u = Units::rows(
        &mut u[..XI * point_stride(pairs_n)],
        XI,
        pairs_n,
        PAIR_BLOCK,
    );
    for_rows(pairs_n.div_ceil(PAIR_BLOCK), [u], &|blocks, [mut u]| {
        let mut block = [[0.0f32; PAIR_BLOCK]; XI];
        let part_start = blocks.start * PAIR_BLOCK;
        for first in blocks.map(|b| b * PAIR_BLOCK) {
            let len = PAIR_BLOCK.min(pairs_n - first);
            for (p, w) in weight[first * 9..(first + len) * 9]
                .chunks_exact(9)
                .enumerate()
            {
                let t = T::filter(std::array::from_fn(|i| {
                    [w[3 * i], w[3 * i + 1], w[3 * i + 2]]
                }));
                for (row, v) in block.iter_mut().zip(t) {
                    row[p] = v;
                }
            }
            let at = first - part_start;
            for (xi, row) in block.iter().enumerate() {
                u.row(xi)[at..at + len].copy_from_slice(&row[..len]);
            }
        }
    });
}

/// `dw[k, c] += Gt dU[.][k, c] G`, the adjoint of [`transform_filters`].
fn fold_filter_grads<T: Tiling<XI>, const XI: usize>(
    dw: &mut [f32],
    du: &[f32],
    k: usize,
    c: usize,
) {
    let pairs_n = k * c;
    let dw = Units::new(&mut dw[..pairs_n * 9], PAIR_BLOCK * 9);
    for_parts(pairs_n.div_ceil(PAIR_BLOCK), [dw], &|blocks, [dw]| {
        let mut block = [[0.0f32; PAIR_BLOCK]; XI];
        let part_start = blocks.start * PAIR_BLOCK;
        for first in blocks.map(|b| b * PAIR_BLOCK) {
            let len = PAIR_BLOCK.min(pairs_n - first);
            for (xi, row) in block.iter_mut().enumerate() {
                let at = xi * point_stride(pairs_n) + first;
                row[..len].copy_from_slice(&du[at..at + len]);
            }
            let at = (first - part_start) * 9;
            for (p, w) in dw[at..at + len * 9].chunks_exact_mut(9).enumerate() {
                let t = T::fold_filter(std::array::from_fn(|xi| block[xi][p]));
                for (i, row) in t.iter().enumerate() {
                    for (j, v) in row.iter().enumerate() {
                        w[3 * i + j] += v;
                    }
                }
            }
        }
    });
}

/// Where plane `(j, ch)` of a chunk of `t_n` tiles (`per` a plane) starts in point `xi`'s
/// rows of a `[XI x channels x t_n]` buffer (points [`point_stride`] apart).
fn plane_at(xi: usize, ch: usize, channels: usize, t_n: usize, j: usize, per: usize) -> usize {
    xi * point_stride(channels * t_n) + ch * t_n + j * per
}

/// `V[xi][c, t] = (Bt d B)[xi]` for every tile `t` of planes `planes` (counted channel by
/// channel, [`Cut::tile_planes`]) of images `first..first + m` of `inp`, into the piece's `V`
/// (`XI x C x T` values from `at` in `buf`, `T` the piece's tiles).
fn transform_inputs<T: Tiling<XI>, const XI: usize>(
    buf: &Disjoint<f32>,
    at: usize,
    inp: &[f32],
    (first, m): (usize, usize),
    g: &Window2d,
    planes: Range<usize>,
) {
    let transforms = Transforms::for_this_cpu();
    let tiles = |dst: &mut [&mut [f32]; XI], plane: &[f32], h: usize, w: usize| {
        transforms.input_tiles::<T, XI>(dst, plane, h, w)
    };
    let cut = Cut {
        buf,
        at,
        images: (first, m),
        planes: g.channels,
    };
    cut.tile_planes::<T, XI, _>(inp, g, planes, tiles);
}

/// Where a piece's planes go when cut into tiles: its point-major buffer (`[XI x planes x
/// T]` values from `at` in `buf`, `T` the piece's tiles) and its images `(first, m)` of
/// `planes` planes each.
struct Cut<'a, 'b> {
    buf: &'a Disjoint<'b, f32>,
    at: usize,
    images: (usize, usize),
    planes: usize,
}

impl Cut<'_, '_> {
    /// Cuts planes `range` of the piece's images of `src` into the tiles of grid `g` with
    /// `tiles`, which writes each point's values to its row of the buffer. The planes are
    /// counted channel by channel (plane `q` is channel `q / m` of the piece's image `q % m`),
    /// so that a unit of consecutive planes writes whole rows of each point's matrix, one
    /// after the other: on small planes a row's cache line holds several images' tiles, and
    /// a unit that took its planes image by image shared it with the units of the next
    /// images, on the other core (docs/history.md, 2026-12-05 late night).
    fn tile_planes<T: Tiling<XI>, const XI: usize, F>(
        &self,
        src: &[f32],
        g: &Window2d,
        range: Range<usize>,
        tiles: F,
    ) where
        F: Fn(&mut [&mut [f32]; XI], &[f32], usize, usize),
    {
        let (th, tw) = grid::<T, XI>(g);
        let (h, w, per) = (g.height, g.width, th * tw);
        let ((first, m), planes) = (self.images, self.planes);
        let t_n = m * per;
        // Plane q's tiles lie `q * per` into each point's row ([`plane_at`]), so the unit's
        // planes are one run of each row, taken plane by plane.
        let start = self.at + range.start * per;
        let stride = point_stride(planes * t_n);
        let mut part = self.buf.rows(start, range.len() * per, XI, stride);
        let mut rows: [&mut [f32]; XI] = part.each();
        // Made once, filled in place for each plane (see `point_slices`).
        let mut dst: [&mut [f32]; XI] = std::array::from_fn(|_| Default::default());
        for q in range {
            let (j, p) = (q % m, q / m);
            let plane = &src[((first + j) * planes + p) * h * w..][..h * w];
            for (d, row) in dst.iter_mut().zip(rows.iter_mut()) {
                (*d, *row) = std::mem::take(row).split_at_mut(per);
            }
            tiles(&mut dst, plane, h, w);
        }
    }
}

/// `buf[at(xi)..at(xi) + len]` for each point `xi`, built in place (an array from
/// `std::array::from_fn` is built aside and copied: a call into `memcpy` for every plane).
#[inline(always)]
fn point_slices<const XI: usize>(
    buf: &[f32],
    at: impl Fn(usize) -> usize,
    len: usize,
) -> [&[f32]; XI] {
    let mut slices: [&[f32]; XI] = [&[]; XI];
    for (xi, slice) in slices.iter_mut().enumerate() {
        *slice = &buf[at(xi)..at(xi) + len];
    }
    slices
}

/// Point `xi`'s GEMM `out = op(lhs[xi]) op(rhs[xi])` (+ `out` when `beta` is 1), each
/// operand point-major ([`point_stride`]); `out` is point `xi`'s `m x n` output.
fn point_gemm(dims: GemmDims, (lhs, rhs): (&[f32], &[f32]), beta: f32, out: &mut [f32], xi: usize) {
    let (ls, rs) = (dims.m * dims.k, dims.k * dims.n);
    let (l, r) = (
        &lhs[xi * point_stride(ls)..][..ls],
        &rhs[xi * point_stride(rs)..][..rs],
    );
    gemm(dims, 1.0, l, r, beta, out);
}

/// [`point_gemm`] into point `xi` of a point-major output whose points start at `at` in
/// `buf`.
fn point_gemm_into(
    dims: GemmDims,
    operands: (&[f32], &[f32]),
    (buf, at): (&Disjoint<f32>, usize),
    xi: usize,
) {
    let (os, start) = (dims.m * dims.n, at + xi * point_stride(dims.m * dims.n));
    point_gemm(dims, operands, 0.0, &mut buf.part(start..start + os), xi);
}

/// The `XI` GEMMs of [`point_gemm`] for a whole `out`, the points shared among the pool's
/// threads.
fn batched_gemm<const XI: usize>(
    dims: GemmDims,
    lhs: &[f32],
    rhs: &[f32],
    beta: f32,
    out: &mut [f32],
) {
    let os = dims.m * dims.n;
    let out = Units::new(&mut out[..XI * point_stride(os)], point_stride(os));
    for_parts(XI, [out], &|points, [out]| {
        for (xi, o) in points.zip(out.chunks_mut(point_stride(os))) {
            point_gemm(dims, (lhs, rhs), beta, &mut o[..os], xi);
        }
    });
}

/// Blocks a piece's pass over its planes is cut into ([`relay`]'s units): enough that a
/// thread done early takes a useful part of another piece's.
const PLANE_BLOCKS: usize = 8;

/// Units of a stage over `planes` planes.
fn plane_blocks(planes: usize) -> usize {
    planes.min(PLANE_BLOCKS)
}

/// The planes of unit `unit` of a stage over `planes` planes.
fn plane_block(planes: usize, unit: usize) -> Range<usize> {
    share(planes, unit, plane_blocks(planes))
}

/// The fewest tiles a piece of a chunk takes; with fewer (at two threads, VGG-19's 2x2 planes
/// take 16 a piece, and the 8x8 planes of 256 channels 56) the chunk stays whole and its
/// stages are shared among the threads. A piece's GEMMs have its tiles as their columns,
/// and OpenBLAS packs all of a point's `U` at every call, so on few columns each piece's
/// packing costs about as much as its multiplying; sharing the whole chunk's GEMMs by points
/// packs `U` once. Measured against 0, 32, 65 and 129 (docs/history.md, 2026-12-05 late
/// night).
const MIN_PIECE_TILES: usize = 64;

/// How each chunk of images is cut among the pool's threads: into `count` pieces of
/// `images` images, each taken through every stage of a pass in scratch of its own (`len`
/// values; a whole chunk has all the scratch there is), by its own thread where it can, so
/// that each stage reads what the one before it wrote from the same core's cache; a thread
/// done early helps the others' stages ([`relay`]). With one piece the chunk is whole and
/// each stage is shared among the threads instead (by planes for the transforms, by points
/// for the GEMMs).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Pieces {
    count: usize,
    images: usize,
    len: usize,
}

impl Pieces {
    /// The pieces of a layer whose chunks have `step` images, in `scratch` values (after
    /// the filters'), on `threads` threads: one a thread (up to [`MAX_PIECES`]) where the
    /// chunk and the scratch allow and each piece has at least [`MIN_PIECE_TILES`] tiles.
    /// Each piece reads the filters' `U` whole, so on the deep layers (many channels, few
    /// tiles) the threads read it twice where sharing the points read it once; that still
    /// measured faster than moving the transformed tiles between cores, except on pieces of
    /// fewer tiles (docs/history.md, 2026-12-05 late morning and late night).
    fn of<T: Tiling<XI>, const XI: usize>(
        dims: &Conv2dDims,
        step: usize,
        scratch: usize,
        threads: usize,
    ) -> Self {
        let (c, k) = (dims.window.channels, dims.out_c);
        let (th, tw) = grid::<T, XI>(&dims.window);
        let len = |images: usize| {
            let tiles = images * th * tw;
            XI * (2 * point_stride(c * tiles) + point_stride(k * tiles))
        };
        let count = threads.min(step).clamp(1, MAX_PIECES);
        let images = step / count;
        let count = if images * th * tw < MIN_PIECE_TILES {
            1
        } else {
            count.min(scratch / len(images))
        };
        match count {
            0 | 1 => Self {
                count: 1,
                images: step,
                len: scratch,
            },
            count => Self {
                count,
                images,
                len: len(images),
            },
        }
    }

    /// Images per chunk.
    fn chunk(&self) -> usize {
        self.count * self.images
    }

    /// The first image and the number of images of piece `p` of the chunk that starts at
    /// image `chunk` of `n`: the chunk's images shared evenly among its pieces, so that a
    /// last chunk with fewer images still keeps every thread busy.
    fn images_of(&self, chunk: usize, p: usize, n: usize) -> (usize, usize) {
        let images = share(self.chunk().min(n - chunk), p, self.count);
        (chunk + images.start, images.len())
    }
}

/// Where a piece's buffers lie in the pieces' scratch: its images `(first, m)` and the
/// ranges of its buffers, laid out one after the other from the piece's start, each
/// `XI x rows x T` values (`T` the piece's tiles) for the `rows` given.
fn piece_layout<const XI: usize, const B: usize>(
    pieces: &Pieces,
    (chunk, n, per): (usize, usize, usize),
    p: usize,
    rows: [usize; B],
) -> ((usize, usize), [Range<usize>; B]) {
    let (first, m) = pieces.images_of(chunk, p, n);
    let mut at = p * pieces.len;
    let ranges = rows.map(|rows| {
        let len = XI * point_stride(rows * m * per);
        at += len;
        at - len..at
    });
    ((first, m), ranges)
}

/// [`forward`] in tiling `T`: per piece, the input transform by blocks of planes, the
/// GEMMs by points, the output transform by blocks of planes.
fn forward_with<T: Tiling<XI>, const XI: usize>(
    out: &mut [f32],
    scratch: &mut [f32],
    inp: &[f32],
    weight: &[f32],
    bias: Option<&[f32]>,
    dims: &Conv2dDims,
) {
    let (n, k, g) = (dims.batch, dims.out_c, &dims.window);
    let (c, hw) = (g.channels, g.height * g.width);
    let (th, tw) = grid::<T, XI>(g);
    let per = th * tw;
    let step = chunk_within::<T, XI>(dims, scratch.len());
    let (u, rest) = scratch.split_at_mut(XI * point_stride(k * c));
    transform_filters::<T, XI>(u, weight, k, c);
    let u = &*u;
    let pieces = Pieces::of::<T, XI>(dims, step, rest.len(), threads());
    let rest = Disjoint::new(&mut rest[..pieces.count * pieces.len]);
    let out = Disjoint::new(&mut out[..n * k * hw]);
    for chunk in (0..n).step_by(pieces.chunk()) {
        let layout = |p| piece_layout::<XI, 2>(&pieces, (chunk, n, per), p, [c, k]);
        let units = |p, stage| {
            let ((_, m), _) = layout(p);
            match (m, stage) {
                (0, _) => 0,
                (_, 0) => plane_blocks(m * c),
                (_, 1) => XI,
                _ => plane_blocks(m * k),
            }
        };
        relay(pieces.count, 3, &units, &|p, stage, unit| {
            let ((first, m), [v, mm]) = layout(p);
            match stage {
                0 => {
                    let planes = plane_block(m * c, unit);
                    transform_inputs::<T, XI>(&rest, v.start, inp, (first, m), g, planes);
                }
                1 => {
                    // The piece's `V` is complete (the relay's order), and read by all now.
                    let v = rest.view(v);
                    let dims = GemmDims::new(k, m * per, c);
                    point_gemm_into(dims, (u, &v), (&rest, mm.start), unit);
                }
                _ => {
                    // The piece's `M` is complete, and read by all now.
                    let mm = rest.view(mm);
                    let planes = plane_block(m * k, unit);
                    write_outputs::<T, XI>(&out, &mm, bias, (first, m), k, g, planes);
                }
            }
        });
    }
}

/// `Y = At M A` per tile, plus the bias, into the valid pixels of planes `planes` (counted
/// from image `first`'s first plane) of images `first..first + m` of `out`.
fn write_outputs<T: Tiling<XI>, const XI: usize>(
    out: &Disjoint<f32>,
    mm: &[f32],
    bias: Option<&[f32]>,
    (first, m): (usize, usize),
    k_n: usize,
    g: &Window2d,
    planes: Range<usize>,
) {
    let (th, tw) = grid::<T, XI>(g);
    let (h, w, per) = (g.height, g.width, th * tw);
    let t_n = m * per;
    let transforms = Transforms::for_this_cpu();
    let at = (first * k_n + planes.start) * h * w;
    let mut part = out.part(at..at + planes.len() * h * w);
    for (jk, plane) in planes.zip(part.chunks_exact_mut(h * w)) {
        let (j, k) = (jk / k_n, jk % k_n);
        let base = |xi: usize| plane_at(xi, k, k_n, t_n, j, per);
        let src = point_slices::<XI>(mm, base, per);
        let bias = bias.map_or(0.0, |b| b[k]);
        transforms.output_tiles::<T, XI>(plane, &src, h, w, bias);
    }
}

/// `dM[xi][k, t] = (A dY At)[xi]` for every tile of planes `planes` of images
/// `first..first + m` of `dout` (as [`transform_inputs`]), pixels outside the plane counting
/// as zero.
fn transform_output_grads<T: Tiling<XI>, const XI: usize>(
    buf: &Disjoint<f32>,
    at: usize,
    dout: &[f32],
    (first, m): (usize, usize),
    k_n: usize,
    g: &Window2d,
    planes: Range<usize>,
) {
    let transforms = Transforms::for_this_cpu();
    let tiles = |dst: &mut [&mut [f32]; XI], dout: &[f32], h: usize, w: usize| {
        transforms.output_grad_tiles::<T, XI>(dst, dout, h, w)
    };
    let cut = Cut {
        buf,
        at,
        images: (first, m),
        planes: k_n,
    };
    cut.tile_planes::<T, XI, _>(dout, g, planes, tiles);
}

/// `dX = B dV Bt` summed over the tiles, inside the plane, for planes `planes` of images
/// `first..first + m` of `dinp` (as [`write_outputs`]; every value written).
fn scatter_input_grads<T: Tiling<XI>, const XI: usize>(
    dinp: &Disjoint<f32>,
    dv: &[f32],
    (first, m): (usize, usize),
    g: &Window2d,
    planes: Range<usize>,
) {
    let (th, tw) = grid::<T, XI>(g);
    let (c_n, per) = (g.channels, th * tw);
    let (t_n, hw) = (m * per, g.height * g.width);
    let transforms = Transforms::for_this_cpu();
    let at = (first * c_n + planes.start) * hw;
    let mut part = dinp.part(at..at + planes.len() * hw);
    for (jc, plane) in planes.zip(part.chunks_exact_mut(hw)) {
        let (j, c) = (jc / c_n, jc % c_n);
        let base = |xi: usize| plane_at(xi, c, c_n, t_n, j, per);
        let src = point_slices::<XI>(dv, base, per);
        transforms.input_grad_tiles::<T, XI>(plane, &src, g.height, g.width);
    }
}

/// [`backward`] in tiling `T`: per piece, the output gradient's and the input's transforms
/// by blocks of planes; the weight gradient's GEMMs (a sum over the pieces) by points; per
/// piece again, the input gradient's GEMMs by points and its transform by blocks of planes.
fn backward_with<T: Tiling<XI>, const XI: usize>(
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
    let (th, tw) = grid::<T, XI>(g);
    let per = th * tw;
    if let Some(db) = grads.bias {
        bias_grads(db, dout, n, k, hw);
    }
    let dinp = dinp.map(|d| Disjoint::new(&mut d[..n * c * hw]));
    let step = chunk_within::<T, XI>(dims, scratch.len());
    let (u, rest) = scratch.split_at_mut(XI * point_stride(k * c));
    let (du, rest) = rest.split_at_mut(XI * point_stride(k * c));
    transform_filters::<T, XI>(u, weight, k, c);
    let u = &*u;
    // The first GEMM into `dU` overwrites it (no separate pass zeroes all of it first).
    let mut du_written = false;
    let pieces = Pieces::of::<T, XI>(dims, step, rest.len(), threads());
    let rest = Disjoint::new(&mut rest[..pieces.count * pieces.len]);
    for chunk in (0..n).step_by(pieces.chunk()) {
        // Piece p's images and its `V`, `dM` and `dV`.
        let layout = |p| piece_layout::<XI, 3>(&pieces, (chunk, n, per), p, [c, k, c]);
        let units = |p, _| {
            let ((_, m), _) = layout(p);
            plane_blocks(m * k) + plane_blocks(m * c)
        };
        relay(pieces.count, 1, &units, &|p, _, unit| {
            let ((first, m), [v, dm, _]) = layout(p);
            let grad_units = plane_blocks(m * k);
            if unit < grad_units {
                let planes = plane_block(m * k, unit);
                transform_output_grads::<T, XI>(&rest, dm.start, dout, (first, m), k, g, planes);
            } else {
                let planes = plane_block(m * c, unit - grad_units);
                transform_inputs::<T, XI>(&rest, v.start, inp, (first, m), g, planes);
            }
        });
        for p in 0..pieces.count {
            let ((_, m), [v, dm, _]) = layout(p);
            if m > 0 {
                // Every piece's `V` and `dM` are complete (the relay has returned).
                let (v, dm) = (rest.view(v), rest.view(dm));
                let dims = GemmDims::new(k, c, m * per).b_transposed();
                let beta = if du_written { 1.0 } else { 0.0 };
                batched_gemm::<XI>(dims, &dm, &v, beta, du);
                du_written = true;
            }
        }
        let Some(dinp) = &dinp else { continue };
        let units = |p, stage| {
            let ((_, m), _) = layout(p);
            match (m, stage) {
                (0, _) => 0,
                (_, 0) => XI,
                _ => plane_blocks(m * c),
            }
        };
        relay(pieces.count, 2, &units, &|p, stage, unit| {
            let ((first, m), [_, dm, dv]) = layout(p);
            if stage == 0 {
                // The piece's `dM` is complete, and read by all now.
                let dm = rest.view(dm);
                let dims = GemmDims::new(c, m * per, k).a_transposed();
                point_gemm_into(dims, (u, &dm), (&rest, dv.start), unit);
            } else {
                // The piece's `dV` is complete, and read by all now.
                let dv = rest.view(dv);
                let planes = plane_block(m * c, unit);
                scatter_input_grads::<T, XI>(dinp, &dv, (first, m), g, planes);
            }
        });
    }
    if !du_written {
        fill(du, 0.0); // an empty batch
    }
    fold_filter_grads::<T, XI>(grads.weight, du, k, c);
}

/// `db[k] += sum of dout's plane k over the batch`.
fn bias_grads(db: &mut [f32], dout: &[f32], n: usize, k: usize, hw: usize) {
    for_parts(k, [Units::new(&mut db[..k], 1)], &|channels, [db]| {
        for (d, ch) in db.iter_mut().zip(channels) {
            let sum = (0..n)
                .map(|i| dout[(i * k + ch) * hw..][..hw].iter().sum::<f32>())
                .sum::<f32>();
            *d += sum;
        }
    });
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::conv::{direct_backward, direct_forward, direct_scratch_len as direct_len};
    use super::super::winograd_f2 as f2;
    use super::*;

    /// `len` values in -1..1, different for each `seed` (shared with the AVX2 tests).
    pub(in super::super) fn values(len: usize, seed: usize) -> Vec<f32> {
        (0..len)
            .map(|i| (((i * 7919 + seed * 104_729) % 2003) as f32 / 1001.5) - 1.0)
            .collect()
    }

    /// The largest difference; NaN where any value is (an output left unwritten).
    fn max_diff(a: &[f32], b: &[f32]) -> f32 {
        assert_eq!(a.len(), b.len());
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, |most: f32, d| {
                if most.is_nan() || d.is_nan() {
                    f32::NAN
                } else {
                    most.max(d)
                }
            })
    }

    /// Tiling `T` against im2col and GEMM, forward and backward: outputs within `fwd`,
    /// gradients within `bwd` (absolute; the values are in -1..1).
    fn check_tiling<T: Tiling<XI>, const XI: usize>(dims: &Conv2dDims, fwd: f32, bwd: f32) {
        let (window, k) = (dims.window, dims.out_c);
        let inp = values(dims.batch * window.in_len(), 1);
        let w = values(k * window.col_rows(), 2);
        let b = values(k, 3);
        let bias = (k % 2 == 1).then_some(b.as_slice());
        let out_len = dims.batch * k * window.col_cols();
        let dout = values(out_len, 4);
        let mut s_w = vec![0.0; scratch_len(dims)];
        let mut s_d = vec![0.0; direct_len(dims)];
        let (mut y_w, mut y_d) = (vec![f32::NAN; out_len], vec![f32::NAN; out_len]);
        forward_with::<T, XI>(&mut y_w, &mut s_w, &inp, &w, bias, dims);
        direct_forward(&mut y_d, &mut s_d, &inp, &w, bias, dims);
        let tiling = T::TILE;
        assert!(max_diff(&y_w, &y_d) < fwd, "F{tiling} forward {dims:?}");

        let grads = |winograd: bool| {
            let (mut dw, mut db) = (vec![0.5; w.len()], vec![0.25; k]);
            let mut dx = vec![f32::NAN; inp.len()];
            let g = super::super::ConvGrads {
                weight: &mut dw,
                bias: bias.is_some().then_some(&mut db),
            };
            if winograd {
                backward_with::<T, XI>(Some(&mut dx), g, &mut s_w.clone(), &dout, &inp, &w, dims);
            } else {
                direct_backward(Some(&mut dx), g, &mut s_d.clone(), &dout, &inp, &w, dims);
            }
            (dw, db, dx)
        };
        let (want, got) = (grads(false), grads(true));
        assert!(max_diff(&got.0, &want.0) < bwd, "F{tiling} dW {dims:?}");
        assert!(max_diff(&got.1, &want.1) < bwd, "F{tiling} db {dims:?}");
        assert!(max_diff(&got.2, &want.2) < fwd, "F{tiling} dX {dims:?}");
    }

    /// Both tilings on odd and even planes, from one tile to several chunks (3 images of 21x20
    /// tiles), with and without bias; F(2x2, 3x3) also wider than its row transforms take
    /// (tile by tile). F(4x4, 3x3)'s larger constants round more: its gradients, sums over
    /// thousands of tiles, are held to a looser bound.
    #[test]
    fn winograd_matches_the_direct_convolution_forward_and_backward() {
        let cases = [
            (3, 8, 5, 40, 41),
            (2, 9, 4, 8, 9),
            (70, 8, 3, 4, 5),
            (1, 16, 8, 1, 2),
            (8, 64, 64, 4, 4),
            (2, 32, 16, 16, 16),
            (1, 8, 3, 3, f2::MAX_WIDTH + 3),
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
            check_tiling::<F2, 16>(&dims, 1e-4, 1e-3);
            if width <= f4::MAX_WIDTH {
                check_tiling::<F4, 36>(&dims, 1e-3, 1e-2);
            }
        }
    }

    /// A pass whose chunks are cut into pieces, one a thread, against the direct convolution:
    /// a batch of 5 in chunks of two pieces (of 1 image under F(2x2, 3x3), of 2 under
    /// F(4x4, 3x3)), so the last chunk's one image goes to one piece and the other is empty.
    #[test]
    fn pieces_on_their_own_threads_match_the_direct_convolution() {
        super::super::threads::set_threads(2);
        let dims = Conv2dDims {
            batch: 5,
            out_c: 8,
            window: Window2d {
                channels: 8,
                height: 32,
                width: 32,
                kernel: 3,
                stride: 1,
                pad: 1,
            },
        };
        // The scratch the backward pass leaves after `U` and `dU`.
        let rest = |points: usize| scratch_len(&dims) - 2 * points * point_stride(8 * 8);
        let step2 = chunk_within::<F2, 16>(&dims, scratch_len(&dims));
        let step4 = chunk_within::<F4, 36>(&dims, scratch_len(&dims));
        let two = Pieces::of::<F2, 16>(&dims, step2, rest(16), threads());
        let four = Pieces::of::<F4, 36>(&dims, step4, rest(36), threads());
        assert_eq!((two.count, two.images), (2, 1));
        assert_eq!((four.count, four.images), (2, 2));
        // The last chunk has one image: one piece takes it, the other is empty.
        assert_eq!((5 % two.chunk(), 5 % four.chunk()), (1, 1));
        // The weight gradient sums 5 x 1024 pixels: a looser bound than the other cases'.
        check_tiling::<F2, 16>(&dims, 1e-4, 1e-2);
        check_tiling::<F4, 36>(&dims, 1e-3, 1e-1);
    }

    #[test]
    fn each_thread_takes_a_piece_of_a_chunk_where_the_scratch_allows() {
        let layer = |channels, side| Conv2dDims {
            batch: 32,
            out_c: channels,
            window: Window2d {
                channels,
                ..plane(side)
            },
        };
        let of = |dims: &Conv2dDims, step, threads| {
            let p = Pieces::of::<F2, 16>(dims, step, 1 << 30, threads);
            (p.count, p.images)
        };
        assert_eq!(of(&layer(64, 32), 2, 2), (2, 1));
        assert_eq!(of(&layer(512, 4), 32, 2), (2, 16));
        assert_eq!(of(&layer(64, 32), 5, 4), (4, 1));
        // Pieces of fewer than `MIN_PIECE_TILES` tiles: the chunk is whole.
        assert_eq!(of(&layer(512, 2), 32, 2), (1, 32));
        assert_eq!(of(&layer(512, 4), 5, 4), (1, 5));
        // One thread, or a chunk of one image: the chunk is whole.
        assert_eq!(of(&layer(64, 32), 2, 1), (1, 2));
        assert_eq!(of(&layer(64, 32), 1, 2), (1, 1));
        // A last chunk of fewer images is shared evenly; one of one image leaves a piece empty.
        let four = Pieces::of::<F2, 16>(&layer(64, 32), 8, 1 << 30, 4);
        let split = |chunk, n| {
            (0..4)
                .map(|p| four.images_of(chunk, p, n))
                .collect::<Vec<_>>()
        };
        assert_eq!(split(0, 32), [(0, 2), (2, 2), (4, 2), (6, 2)]);
        assert_eq!(split(24, 30), [(24, 1), (25, 2), (27, 1), (28, 2)]);
        assert_eq!(split(8, 9), [(8, 0), (8, 0), (8, 0), (8, 1)]);
        // Scratch for one piece only: the chunk is whole, in all the scratch.
        let one = Pieces::of::<F2, 16>(&layer(64, 32), 2, 1 << 30, 2).len;
        let tight = Pieces::of::<F2, 16>(&layer(64, 32), 2, one, 2);
        assert_eq!((tight.count, tight.images, tight.len), (1, 2, one));
    }

    /// A 3x3 window of 64 channels on a `side x side` plane.
    fn plane(side: usize) -> Window2d {
        Window2d {
            channels: 64,
            height: side,
            width: side,
            kernel: 3,
            stride: 1,
            pad: 1,
        }
    }

    #[test]
    fn large_tiles_go_where_they_multiply_less() {
        // 32, 16, 8 and 4 pixels: 36 points per 16 outputs against 64.
        for side in [32, 16, 8, 4] {
            assert!(fewer_products(&plane(side)), "{side}");
        }
        // 2 pixels: one F(4x4) tile pads 4 outputs to 16; 6 pixels: 4 x 36 = 9 x 16, a tie.
        for side in [2, 6, 1] {
            assert!(!fewer_products(&plane(side)), "{side}");
        }
        let wide = Window2d {
            height: 4,
            width: f4::MAX_WIDTH + 4,
            ..plane(4)
        };
        assert!(!fewer_products(&wide));
    }

    #[test]
    fn the_default_takes_large_tiles_on_planes_of_eight_rows_and_more() {
        for side in [32, 16, 8] {
            assert_eq!(choose_under(Tilings::Mixed, &plane(side)), Tile::Four);
            assert_eq!(choose_under(Tilings::Two, &plane(side)), Tile::Two);
        }
        assert_eq!(choose_under(Tilings::Mixed, &plane(4)), Tile::Two);
        assert_eq!(choose_under(Tilings::Four, &plane(4)), Tile::Four);
        // Where F(4x4, 3x3) multiplies no less, no choice takes it.
        for tilings in [Tilings::Two, Tilings::Mixed, Tilings::Four] {
            assert_eq!(choose_under(tilings, &plane(2)), Tile::Two);
        }
    }

    /// The points' blocks of a transformed chunk start in different sets of a 4 KB-indexed
    /// cache (64 sets of 64 bytes) at every usual layer width, where unskewed blocks of a
    /// power-of-two length would all start in one.
    #[test]
    fn point_blocks_start_in_different_cache_sets() {
        let set = |at: usize| (at * 4 / 64) % 64;
        for (channels, points) in [64, 128, 256, 512]
            .into_iter()
            .flat_map(|c| [(c, 16), (c, 36)])
        {
            let len = channels * tiles_per_thread(channels, points);
            let sets = |stride: usize| {
                let starts = (0..points).map(|xi| set(xi * stride));
                starts.collect::<std::collections::HashSet<usize>>().len()
            };
            let at = format!("{channels} channels, {points} points");
            assert_eq!(sets(point_stride(len)), points, "{at}");
            if points == 16 {
                assert_eq!(sets(len), 1, "{at} without the skew");
            }
        }
    }

    /// Wider layers and larger tiles take fewer tiles a chunk, in proportion, within the
    /// bounds.
    #[test]
    fn wide_layers_and_large_tiles_take_proportionally_fewer_tiles() {
        assert_eq!(tiles_per_thread(3, 16), TILE_COLUMNS);
        assert_eq!(tiles_per_thread(CHUNK_CHANNELS, 16), TILE_COLUMNS);
        assert_eq!(tiles_per_thread(2 * CHUNK_CHANNELS, 16), TILE_COLUMNS / 2);
        assert_eq!(
            tiles_per_thread(512, 16),
            TILE_COLUMNS * CHUNK_CHANNELS / 512
        );
        assert_eq!(tiles_per_thread(1 << 20, 16), MIN_TILE_COLUMNS);
        // F(4x4, 3x3): 16/36 as many tiles, so the chunk's transformed input keeps its size.
        assert_eq!(tiles_per_thread(CHUNK_CHANNELS, 36), TILE_COLUMNS * 16 / 36);
        assert_eq!(
            tiles_per_thread(512, 36),
            TILE_COLUMNS * CHUNK_CHANNELS / 512 * 16 / 36
        );
        assert_eq!(tiles_per_thread(1 << 20, 36), MIN_TILE_COLUMNS);
    }

    /// A scratch sized for fewer images than a chunk (a model built before the pool had its
    /// threads) gets smaller chunks, with the same result.
    #[test]
    fn a_scratch_smaller_than_a_chunk_takes_fewer_images_at_a_time() {
        let window = Window2d {
            channels: 8,
            height: 16,
            width: 16,
            kernel: 3,
            stride: 1,
            pad: 1,
        };
        let dims = Conv2dDims {
            batch: 6,
            out_c: 4,
            window,
        };
        let one_image = 2 * 16 * 4 * 8 + 16 * 64 * (2 * 8 + 4);
        assert!(scratch_len(&dims) > one_image);
        assert_eq!(chunk_within::<F2, 16>(&dims, one_image), 1);
        let inp = values(6 * window.in_len(), 1);
        let w = values(4 * window.col_rows(), 2);
        let out_len = 6 * 4 * window.col_cols();
        let (mut small, mut full) = (vec![f32::NAN; out_len], vec![f32::NAN; out_len]);
        forward_with::<F2, 16>(&mut small, &mut vec![0.0; one_image], &inp, &w, None, &dims);
        let mut scratch = vec![0.0; scratch_len(&dims)];
        forward_with::<F2, 16>(&mut full, &mut scratch, &inp, &w, None, &dims);
        assert_eq!(small, full);
    }
}
