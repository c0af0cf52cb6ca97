//! What a Winograd tiling provides to the driver in [`super::winograd`]: the filter and the
//! four tile transforms of a whole plane ([`Tiling`]), and the 2-D sandwich the 1-D maps
//! build them from. Its own module so that the driver and the tilings import it, not each
//! other.

/// One tiling's transforms for a whole plane: `XI` points per tile of `TILE x TILE`
/// outputs. A plane's tiles are numbered `ty * tw + tx` (`tw = ceil(w / TILE)` a row);
/// transformed values are `XI` slices, one per point, each holding every tile of the plane.
pub trait Tiling<const XI: usize> {
    /// Outputs along a tile's side.
    const TILE: usize;
    /// `G w Gt`, the point values of a 3x3 filter.
    fn filter(w: [[f32; 3]; 3]) -> [f32; XI];
    /// `Gt d G`, the adjoint of [`Tiling::filter`].
    fn fold_filter(d: [f32; XI]) -> [[f32; 3]; 3];
    /// `V = Bt d B` for every tile of the `h x w` plane (zero outside it): `dst[xi][t]`.
    fn input_tiles(dst: &mut [&mut [f32]; XI], plane: &[f32], h: usize, w: usize);
    /// [`Tiling::input_tiles`], inlined into a caller compiled for AVX2 and FMA
    /// ([`super::winograd_avx2`]); a tiling with a faster AVX2 form of it takes that here.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA.
    #[inline(always)]
    unsafe fn input_tiles_avx2(dst: &mut [&mut [f32]; XI], plane: &[f32], h: usize, w: usize) {
        Self::input_tiles(dst, plane, h, w)
    }
    /// `Y = At M A + bias` for every tile, from `src[xi][t]`, into the plane `out`.
    fn output_tiles(out: &mut [f32], src: &[&[f32]; XI], h: usize, w: usize, bias: f32);
    /// [`Tiling::output_tiles`] for a caller compiled for AVX2 and FMA, as
    /// [`Tiling::input_tiles_avx2`].
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA.
    #[inline(always)]
    unsafe fn output_tiles_avx2(
        out: &mut [f32],
        src: &[&[f32]; XI],
        h: usize,
        w: usize,
        bias: f32,
    ) {
        Self::output_tiles(out, src, h, w, bias)
    }
    /// `dM = A dY At` for every tile of the plane `dout` (zero outside it): `dst[xi][t]`.
    fn output_grad_tiles(dst: &mut [&mut [f32]; XI], dout: &[f32], h: usize, w: usize);
    /// [`Tiling::output_grad_tiles`] for a caller compiled for AVX2 and FMA, as
    /// [`Tiling::input_tiles_avx2`].
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA.
    #[inline(always)]
    unsafe fn output_grad_tiles_avx2(dst: &mut [&mut [f32]; XI], dout: &[f32], h: usize, w: usize) {
        Self::output_grad_tiles(dst, dout, h, w)
    }
    /// `dX = B dV Bt` summed over every tile, from `src[xi][t]`, written into the plane
    /// `dinp` (what falls in the padding dropped): every value of the plane is written, so
    /// `dinp` need not be zeroed first.
    fn input_grad_tiles(dinp: &mut [f32], src: &[&[f32]; XI], h: usize, w: usize);
    /// [`Tiling::input_grad_tiles`] for a caller compiled for AVX2 and FMA, as
    /// [`Tiling::input_tiles_avx2`].
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA.
    #[inline(always)]
    unsafe fn input_grad_tiles_avx2(dinp: &mut [f32], src: &[&[f32]; XI], h: usize, w: usize) {
        Self::input_grad_tiles(dinp, src, h, w)
    }
}

/// `L x Lt` for the 1-D map `f` of `L`: `f` over each column, then over each row.
#[inline(always)]
pub fn sandwich<const I: usize, const O: usize>(
    x: [[f32; I]; I],
    f: impl Fn([f32; I]) -> [f32; O],
) -> [[f32; O]; O] {
    let cols: [[f32; O]; I] = std::array::from_fn(|j| f(std::array::from_fn(|i| x[i][j])));
    std::array::from_fn(|i| f(std::array::from_fn(|j| cols[j][i])))
}
