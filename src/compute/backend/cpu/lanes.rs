//! Eight `f32` lanes as one value ([`F32x8`]), and the arithmetic a Winograd transform needs
//! from a value ([`Lane`]), so that one transform is written once and runs on a single
//! value or on eight tiles at a time; and short rows copied in moves of eight values
//! ([`copy_row`]). Each operation is a loop over the eight lanes, which
//! the compiler turns into one vector instruction where the caller is compiled for AVX2
//! (two with SSE2); the lanes round exactly as eight separate `f32` operations would.

use std::ops::{Add, Mul, Sub};

/// What a transform's arithmetic takes: sums, differences and products by constants.
pub trait Lane: Copy + Add<Output = Self> + Sub<Output = Self> + Mul<f32, Output = Self> {}

impl Lane for f32 {}

/// Eight `f32` values, operated on lane by lane.
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(transparent)]
pub struct F32x8(pub [f32; 8]);

impl Lane for F32x8 {}

impl Add for F32x8 {
    type Output = Self;
    #[inline(always)]
    fn add(self, other: Self) -> Self {
        Self(std::array::from_fn(|l| self.0[l] + other.0[l]))
    }
}

impl Sub for F32x8 {
    type Output = Self;
    #[inline(always)]
    fn sub(self, other: Self) -> Self {
        Self(std::array::from_fn(|l| self.0[l] - other.0[l]))
    }
}

impl Mul<f32> for F32x8 {
    type Output = Self;
    #[inline(always)]
    fn mul(self, k: f32) -> Self {
        Self(std::array::from_fn(|l| self.0[l] * k))
    }
}

/// `dst = src` for one row, in copies of 8 values (the last one overlapping the one
/// before) that compile to plain vector moves, where a row of 8 or more would otherwise be
/// a call into `memcpy` of a few dozen bytes.
#[inline(always)]
pub fn copy_row(dst: &mut [f32], src: &[f32]) {
    const LANES: usize = 8;
    let n = dst.len();
    if n < LANES {
        return dst.copy_from_slice(&src[..n]);
    }
    let src = &src[..n];
    for at in (0..n - LANES).step_by(LANES) {
        dst[at..at + LANES].copy_from_slice(&src[at..at + LANES]);
    }
    dst[n - LANES..].copy_from_slice(&src[n - LANES..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_lane_is_the_scalar_operation() {
        let a = F32x8(std::array::from_fn(|l| l as f32 * 0.7 - 2.0));
        let b = F32x8(std::array::from_fn(|l| 1.3 - l as f32 * 0.45));
        let got = (a + b) * 3.0 - a * 0.25;
        for l in 0..8 {
            assert_eq!(
                got.0[l],
                (a.0[l] + b.0[l]) * 3.0 - a.0[l] * 0.25,
                "lane {l}"
            );
        }
    }
}
