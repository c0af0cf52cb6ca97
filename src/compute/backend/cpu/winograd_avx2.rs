//! The tile transforms of [`super::winograd`], compiled a second time for AVX2 and FMA.
//!
//! The shipped build is portable x86-64, so its loops use SSE2's 128-bit vectors. Each
//! function here enables AVX2 and FMA and inlines a tiling's AVX2 form of the transform
//! (`Tiling::*_avx2`; every function those call is `#[inline(always)]`): by default the
//! portable transform, compiled again so that its loops take 256-bit vectors, and for
//! F(4x4, 3x3) the transforms of [`super::winograd_f4_avx2`], eight tiles at a time. The
//! Winograd driver calls the transforms through [`Transforms`], which takes these where
//! [`usable`] says the CPU has both features and the portable ones elsewhere. Same
//! operations in the same order, so the same results. Measured gain: docs/history.md,
//! 2026-12-05 morning.

use super::winograd_tiling::Tiling;

/// Whether this CPU runs the AVX2 functions of this module (checked once, then cached by std).
#[inline]
pub fn usable() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// A tiling's four tile transforms, compiled for AVX2 and FMA where this CPU has them and
/// portable elsewhere (chosen once, when made).
#[derive(Debug, Clone, Copy)]
pub struct Transforms {
    avx2: bool,
}

impl Transforms {
    /// The transforms this CPU runs fastest.
    pub fn for_this_cpu() -> Self {
        Self { avx2: usable() }
    }

    /// [`Tiling::input_tiles`].
    #[inline]
    pub fn input_tiles<T: Tiling<XI>, const XI: usize>(
        self,
        dst: &mut [&mut [f32]; XI],
        plane: &[f32],
        h: usize,
        w: usize,
    ) {
        if self.avx2 {
            // SAFETY: `avx2` is set only where the CPU has AVX2 and FMA.
            unsafe { input_tiles::<T, XI>(dst, plane, h, w) }
        } else {
            T::input_tiles(dst, plane, h, w)
        }
    }

    /// [`Tiling::output_tiles`].
    #[inline]
    pub fn output_tiles<T: Tiling<XI>, const XI: usize>(
        self,
        out: &mut [f32],
        src: &[&[f32]; XI],
        h: usize,
        w: usize,
        bias: f32,
    ) {
        if self.avx2 {
            // SAFETY: as in `input_tiles`.
            unsafe { output_tiles::<T, XI>(out, src, h, w, bias) }
        } else {
            T::output_tiles(out, src, h, w, bias)
        }
    }

    /// [`Tiling::output_grad_tiles`].
    #[inline]
    pub fn output_grad_tiles<T: Tiling<XI>, const XI: usize>(
        self,
        dst: &mut [&mut [f32]; XI],
        dout: &[f32],
        h: usize,
        w: usize,
    ) {
        if self.avx2 {
            // SAFETY: as in `input_tiles`.
            unsafe { output_grad_tiles::<T, XI>(dst, dout, h, w) }
        } else {
            T::output_grad_tiles(dst, dout, h, w)
        }
    }

    /// [`Tiling::input_grad_tiles`].
    #[inline]
    pub fn input_grad_tiles<T: Tiling<XI>, const XI: usize>(
        self,
        dinp: &mut [f32],
        src: &[&[f32]; XI],
        h: usize,
        w: usize,
    ) {
        if self.avx2 {
            // SAFETY: as in `input_tiles`.
            unsafe { input_grad_tiles::<T, XI>(dinp, src, h, w) }
        } else {
            T::input_grad_tiles(dinp, src, h, w)
        }
    }
}

/// [`Tiling::input_tiles`] with AVX2 and FMA.
///
/// # Safety
/// The CPU must have AVX2 and FMA ([`usable`]).
#[cfg_attr(target_arch = "x86_64", target_feature(enable = "avx2,fma"))]
unsafe fn input_tiles<T: Tiling<XI>, const XI: usize>(
    dst: &mut [&mut [f32]; XI],
    plane: &[f32],
    h: usize,
    w: usize,
) {
    // SAFETY: this function's caller checked that the CPU has AVX2 and FMA.
    unsafe { T::input_tiles_avx2(dst, plane, h, w) }
}

/// [`Tiling::output_tiles`] with AVX2 and FMA.
///
/// # Safety
/// The CPU must have AVX2 and FMA ([`usable`]).
#[cfg_attr(target_arch = "x86_64", target_feature(enable = "avx2,fma"))]
unsafe fn output_tiles<T: Tiling<XI>, const XI: usize>(
    out: &mut [f32],
    src: &[&[f32]; XI],
    h: usize,
    w: usize,
    bias: f32,
) {
    // SAFETY: this function's caller checked that the CPU has AVX2 and FMA.
    unsafe { T::output_tiles_avx2(out, src, h, w, bias) }
}

/// [`Tiling::output_grad_tiles`] with AVX2 and FMA.
///
/// # Safety
/// The CPU must have AVX2 and FMA ([`usable`]).
#[cfg_attr(target_arch = "x86_64", target_feature(enable = "avx2,fma"))]
unsafe fn output_grad_tiles<T: Tiling<XI>, const XI: usize>(
    dst: &mut [&mut [f32]; XI],
    dout: &[f32],
    h: usize,
    w: usize,
) {
    // SAFETY: this function's caller checked that the CPU has AVX2 and FMA.
    unsafe { T::output_grad_tiles_avx2(dst, dout, h, w) }
}

/// [`Tiling::input_grad_tiles`] with AVX2 and FMA.
///
/// # Safety
/// The CPU must have AVX2 and FMA ([`usable`]).
#[cfg_attr(target_arch = "x86_64", target_feature(enable = "avx2,fma"))]
unsafe fn input_grad_tiles<T: Tiling<XI>, const XI: usize>(
    dinp: &mut [f32],
    src: &[&[f32]; XI],
    h: usize,
    w: usize,
) {
    // SAFETY: this function's caller checked that the CPU has AVX2 and FMA.
    unsafe { T::input_grad_tiles_avx2(dinp, src, h, w) }
}

#[cfg(test)]
mod tests {
    use super::super::winograd::tests::values;
    use super::super::winograd_f2::F2;
    use super::super::winograd_f4::F4;
    use super::*;

    /// Runs `f` on `XI` fresh slices of `len` values each and returns them.
    fn points<const XI: usize>(len: usize, f: impl FnOnce(&mut [&mut [f32]; XI])) -> Vec<f32> {
        let mut all = vec![f32::NAN; XI * len];
        let mut parts = all.chunks_mut(len);
        let mut dst: [&mut [f32]; XI] = std::array::from_fn(|_| parts.next().unwrap_or_default());
        f(&mut dst);
        all
    }

    /// Every transform gives bit for bit what the portable build gives, on planes of
    /// several widths (each width class of the row buffers and of the gathering
    /// transforms' bordered copies, ragged edges included, and planes too large for those).
    fn same_as_portable<T: Tiling<XI>, const XI: usize>() {
        for (h, w) in [
            (4usize, 4usize),
            (7, 5),
            (8, 8),
            (13, 30),
            (32, 32),
            (37, 61),
            (64, 64),
            (16, 100),
            (70, 12),
        ] {
            let at = format!("{h}x{w}");
            let tiles = h.div_ceil(T::TILE) * w.div_ceil(T::TILE);
            let plane = values(h * w, 1);
            let point_values = values(XI * tiles, 2);
            let src: Vec<&[f32]> = point_values.chunks(tiles).collect();
            let src: [&[f32]; XI] = std::array::from_fn(|xi| src[xi]);

            let portable = points::<XI>(tiles, |d| T::input_tiles(d, &plane, h, w));
            // SAFETY: the caller checked `usable`.
            let fast = points::<XI>(tiles, |d| unsafe { input_tiles::<T, XI>(d, &plane, h, w) });
            assert_eq!(portable, fast, "input {at}");

            let portable = points::<XI>(tiles, |d| T::output_grad_tiles(d, &plane, h, w));
            // SAFETY: as above.
            let fast = points::<XI>(tiles, |d| unsafe {
                output_grad_tiles::<T, XI>(d, &plane, h, w)
            });
            assert_eq!(portable, fast, "output gradient {at}");

            let (mut portable, mut fast) = (vec![0.5; h * w], vec![0.5; h * w]);
            T::output_tiles(&mut portable, &src, h, w, 0.25);
            // SAFETY: as above.
            unsafe { output_tiles::<T, XI>(&mut fast, &src, h, w, 0.25) };
            assert_eq!(portable, fast, "output {at}");

            let (mut portable, mut fast) = (vec![f32::NAN; h * w], vec![f32::NAN; h * w]);
            T::input_grad_tiles(&mut portable, &src, h, w);
            // SAFETY: as above.
            unsafe { input_grad_tiles::<T, XI>(&mut fast, &src, h, w) };
            assert_eq!(portable, fast, "input gradient {at}");
        }
    }

    #[test]
    fn the_avx2_transforms_match_the_portable_ones_bit_for_bit() {
        if !usable() {
            eprintln!("this CPU has no AVX2 and FMA: nothing to compare");
            return;
        }
        same_as_portable::<F2, 16>();
        same_as_portable::<F4, 36>();
    }
}
