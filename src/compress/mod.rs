//! Update compression between group servers: exact top-k selection ([`topk`]), low-rank
//! PowerSGD ([`powersgd`]), error feedback ([`feedback`]), the device its selection may run on ([`mirror`]) and the per-group upload ratio of
//! GDTopK ([`ratio`]); and between a worker and its server, 16-bit pushes ([`bf16`]).
//!
//! Everything here is pure: the inter-group exchange in [`crate::runtime::exchange`] sends the
//! index/value pairs and low-rank factors this module produces, through the RMA windows of
//! `comm`.

pub mod bf16;
pub mod feedback;
pub mod mirror;
pub mod powersgd;
pub mod ratio;
pub mod topk;

pub use feedback::PeerView;
#[cfg(feature = "cuda")]
pub use mirror::CudaMirror;
pub use mirror::{HostMirror, MirrorDevice};
pub use ratio::{k_for_ratio, RatioError, RatioSettings, SpeedMeter};
pub use topk::{sum_pass, topk_vs_sum_bench, TopK};

use thiserror::Error;

/// Why an update cannot be compressed or sent.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum CompressError {
    /// A NaN or infinity in a buffer; the caller knows which group and iteration it belongs to
    /// and adds them with [`CompressError::in_context`].
    #[error("non-finite value {value} at parameter index {index}")]
    NonFinite { index: usize, value: f32 },
    /// A NaN or infinity in group `group`'s update at its exchange `exchange` (after
    /// `iteration` applied pushes): training has diverged there, and sending it would poison
    /// every other group's replica.
    #[error(
        "group {group}, exchange {exchange} (iteration {iteration}): non-finite update value \
         {value} at parameter index {index} (training diverged; try a lower learning rate)"
    )]
    NonFiniteUpdate {
        group: usize,
        exchange: u64,
        iteration: u64,
        index: usize,
        value: f32,
    },
    /// LAPACK or a shape check refused a low-rank factorisation (a bug, not bad input).
    #[error("low-rank factorisation failed: {0}")]
    Factorization(String),
    /// The device that selects a group server's exchanges failed (see [`mirror`]); the
    /// device's own error, as text, so that this type stays comparable.
    #[error("{0}")]
    Device(String),
    /// A delta whose length differs from the model's.
    #[error("length mismatch: the model has {expected} values but the buffer has {got}")]
    LengthMismatch { expected: usize, got: usize },
}

impl CompressError {
    /// Attaches the group, its exchange count and its iteration to a
    /// [`CompressError::NonFinite`]; other variants are returned unchanged.
    pub fn in_context(self, group: usize, exchange: u64, iteration: u64) -> Self {
        match self {
            CompressError::NonFinite { index, value } => CompressError::NonFiniteUpdate {
                group,
                exchange,
                iteration,
                index,
                value,
            },
            other => other,
        }
    }
}

/// First NaN or infinity in `values`, with its index. One vectorisable pass; the scalar search
/// only runs inside the chunk that holds a bad value.
pub fn find_non_finite(values: &[f32]) -> Option<(usize, f32)> {
    const EXP: u32 = 0x7f80_0000;
    const CH: usize = 64;
    let mut chunks = values.chunks_exact(CH);
    for (c, chunk) in chunks.by_ref().enumerate() {
        let mut bad = 0u32;
        for &x in chunk {
            bad |= ((x.to_bits() & EXP) == EXP) as u32;
        }
        if bad != 0 {
            let j = chunk.iter().position(|x| !x.is_finite())?;
            return Some((c * CH + j, chunk[j]));
        }
    }
    let base = values.len() - chunks.remainder().len();
    chunks
        .remainder()
        .iter()
        .position(|x| !x.is_finite())
        .map(|j| (base + j, values[base + j]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_first_non_finite_anywhere() {
        for n in [0usize, 1, 63, 64, 65, 200] {
            let clean = vec![1.5f32; n];
            assert_eq!(find_non_finite(&clean), None);
            for pos in [0, n / 2, n.saturating_sub(1)] {
                if pos >= n {
                    continue;
                }
                for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
                    let mut v = clean.clone();
                    v[pos] = bad;
                    if pos + 1 < n {
                        v[n - 1] = f32::NAN; // a later bad value must not win
                    }
                    let (i, x) = find_non_finite(&v).unwrap();
                    assert_eq!(i, pos, "n={n}");
                    assert!(!x.is_finite());
                }
            }
        }
        // Largest finite values and subnormals are fine.
        assert_eq!(find_non_finite(&[f32::MAX, -f32::MAX, 1e-45, -0.0]), None);
    }

    #[test]
    fn non_finite_update_names_group_iteration_index_value() {
        let mut v = vec![0.0f32; 100];
        assert_eq!(find_non_finite(&v), None);
        v[70] = f32::INFINITY;
        let (index, value) = find_non_finite(&v).unwrap();
        let err = CompressError::NonFinite { index, value }.in_context(3, 7, 41);
        assert_eq!(
            err,
            CompressError::NonFiniteUpdate {
                group: 3,
                exchange: 7,
                iteration: 41,
                index: 70,
                value: f32::INFINITY
            }
        );
        let msg = err.to_string();
        assert!(msg.contains("group 3, exchange 7 (iteration 41)"), "{msg}");
        assert!(msg.contains("index 70") && msg.contains("inf"));
    }

    #[test]
    fn in_context_wraps_only_non_finite() {
        let e = CompressError::NonFinite {
            index: 5,
            value: f32::NEG_INFINITY,
        }
        .in_context(2, 1, 9);
        assert_eq!(
            e,
            CompressError::NonFiniteUpdate {
                group: 2,
                exchange: 1,
                iteration: 9,
                index: 5,
                value: f32::NEG_INFINITY
            }
        );
        let m = CompressError::LengthMismatch {
            expected: 3,
            got: 4,
        };
        assert_eq!(m.clone().in_context(1, 1, 1), m);
    }
}
