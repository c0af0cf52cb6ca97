//! Eight `f32` lanes as one value ([`F32x8`]), and the arithmetic a Winograd transform needs
//! from a value ([`Lane`]), so that one transform is written once and runs on a single
//! value or on eight tiles at a time; and short rows copied or filled in fixed moves
//! ([`copy_row`], [`fill_row`]). Each operation is a loop over the eight lanes, which
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
/// before), or of 4 or fewer on a row shorter than 8, that compile to plain vector moves,
/// where a row of a few values would otherwise be a call into `memcpy` of a few dozen bytes.
#[inline(always)]
pub fn copy_row(dst: &mut [f32], src: &[f32]) {
    let n = dst.len();
    let src = &src[..n];
    match n {
        // Each length its own constant-size move (a loop would become a `memcpy` call).
        0 => {}
        1 => dst[0] = src[0],
        2 => dst[..2].copy_from_slice(&src[..2]),
        3 => dst[..3].copy_from_slice(&src[..3]),
        4..=7 => {
            dst[..4].copy_from_slice(&src[..4]);
            dst[n - 4..n].copy_from_slice(&src[n - 4..n]);
        }
        _ => {
            for at in (0..n - 8).step_by(8) {
                dst[at..at + 8].copy_from_slice(&src[at..at + 8]);
            }
            dst[n - 8..n].copy_from_slice(&src[n - 8..n]);
        }
    }
}

/// `dst = value` for one row, in the moves of [`copy_row`].
#[inline(always)]
pub fn fill_row(dst: &mut [f32], value: f32) {
    let n = dst.len();
    match n {
        0 => {}
        1 => dst[0] = value,
        2 => dst[..2].fill(value),
        3 => dst[..3].fill(value),
        4..=7 => {
            dst[..4].fill(value);
            dst[n - 4..n].fill(value);
        }
        _ => {
            for at in (0..n - 8).step_by(8) {
                dst[at..at + 8].fill(value);
            }
            dst[n - 8..n].fill(value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_of_every_length_are_copied_and_filled_exactly() {
        for n in 0..40 {
            let src: Vec<f32> = (0..n).map(|i| i as f32 + 1.0).collect();
            let mut dst = vec![-1.0; n + 2];
            copy_row(&mut dst[1..=n], &src);
            assert_eq!(dst[1..=n], src[..], "copy of {n}");
            assert_eq!(
                (dst[0], dst[n + 1]),
                (-1.0, -1.0),
                "copy of {n} stays inside"
            );
            fill_row(&mut dst[1..=n], 0.5);
            assert!(dst[1..=n].iter().all(|&v| v == 0.5), "fill of {n}");
            assert_eq!(
                (dst[0], dst[n + 1]),
                (-1.0, -1.0),
                "fill of {n} stays inside"
            );
        }
    }

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
