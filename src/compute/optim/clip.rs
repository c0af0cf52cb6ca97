//! Gradient clipping by global norm (PyTorch's `clip_grad_norm_`), the seq2seq recipe's
//! guard against exploding gradients through time (max norm 1.0).

use crate::compute::backend::Backend;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ClipError {
    /// A NaN or infinite gradient: scaling cannot repair it, and stepping on it would
    /// spread it into every weight. The gradients are left untouched; the caller decides
    /// (skip the step, or stop the run as diverged).
    #[error("gradient clipping: the global gradient norm is {0}, not finite (diverged?)")]
    NonFinite(f64),
    #[error("gradient clipping: max_norm must be positive and finite, got {0}")]
    MaxNorm(f64),
}

/// The L2 norm of `buf[..len]`, summed in f64.
pub fn global_norm<B: Backend>(be: &B, buf: &B::Buf, len: usize) -> f64 {
    be.sum_squares(buf, len).sqrt()
}

/// Scales `grads[..len]` so that their global L2 norm is at most `max_norm`, and returns
/// the norm before clipping. As PyTorch does, the factor is `max_norm / (norm + 1e-6)`
/// when below 1 (so the clipped norm is `max_norm` to 1e-6 relative), and a norm already
/// within `max_norm` leaves the gradients unchanged. A non-finite norm is an error and
/// changes nothing (PyTorch's `error_if_nonfinite=True`).
pub fn clip_grad_norm<B: Backend>(
    be: &B,
    grads: &mut B::Buf,
    len: usize,
    max_norm: f64,
) -> Result<f64, ClipError> {
    if !(max_norm.is_finite() && max_norm > 0.0) {
        return Err(ClipError::MaxNorm(max_norm));
    }
    let norm = global_norm(be, grads, len);
    if !norm.is_finite() {
        return Err(ClipError::NonFinite(norm));
    }
    let factor = max_norm / (norm + 1e-6);
    if factor < 1.0 {
        be.scale(grads, len, factor as f32);
    }
    Ok(norm)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compute::backend::cpu::Cpu;

    #[test]
    fn a_norm_above_max_is_scaled_to_max() {
        let mut g = vec![3.0f32, 4.0, 0.0, 12.0]; // norm 13
        let norm = clip_grad_norm(&Cpu, &mut g, 4, 1.0).unwrap();
        assert!((norm - 13.0).abs() < 1e-9);
        let after = global_norm(&Cpu, &g, 4);
        assert!((after - 1.0).abs() < 1e-6, "{after}");
        assert!((g[1] / g[0] - 4.0 / 3.0).abs() < 1e-6, "direction kept");
    }

    #[test]
    fn a_norm_within_max_is_unchanged() {
        let mut g = vec![0.3f32, -0.4]; // norm 0.5
        let before = g.clone();
        assert!((clip_grad_norm(&Cpu, &mut g, 2, 1.0).unwrap() - 0.5).abs() < 1e-7);
        assert_eq!(g, before);
        // At max (to f32 rounding): the factor max / (norm + 1e-6) moves it by 1e-6 at most.
        let mut g = vec![0.6f32, 0.8];
        clip_grad_norm(&Cpu, &mut g, 2, 1.0).unwrap();
        assert!((global_norm(&Cpu, &g, 2) - 1.0).abs() < 2e-6);
    }

    #[test]
    fn only_len_values_count() {
        let mut g = vec![3.0f32, 4.0, 100.0];
        clip_grad_norm(&Cpu, &mut g, 2, 1.0).unwrap();
        assert_eq!(g[2], 100.0);
        assert!((global_norm(&Cpu, &g, 2) - 1.0).abs() < 1e-6);
    }

    #[test]
    fn nan_or_inf_is_an_error_and_leaves_the_gradients() {
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut g = vec![1.0f32, bad];
            let e = clip_grad_norm(&Cpu, &mut g, 2, 1.0).unwrap_err();
            assert!(matches!(e, ClipError::NonFinite(_)), "{e}");
            assert_eq!(g[0], 1.0);
        }
        let mut g = vec![1.0f32];
        for m in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(matches!(
                clip_grad_norm(&Cpu, &mut g, 1, m),
                Err(ClipError::MaxNorm(_))
            ));
        }
    }
}
