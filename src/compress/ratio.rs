//! GDTopK: each group server chooses its own upload ratio.
//!
//! With the `speed` policy the fastest group, which exchanges most often, sends the smallest
//! fraction each time (rho_g = rho * v_min / v_g), so every group sends about the same number
//! of values per second. A Deep-Gradient-Compression style warm-up starts dense and shrinks the
//! ratio exponentially to its target, because early updates are large and dense.

use thiserror::Error;

use crate::config::{CompressionConfig, RatioPolicy};

/// Invalid speed-meter settings.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum RatioError {
    #[error("compression.speed_ema must be in (0, 1], got {0}")]
    BadAlpha(f64),
}

/// Exponential moving average of a group's applied pushes per second.
#[derive(Debug, Clone, PartialEq)]
pub struct SpeedMeter {
    alpha: f64,
    speed: f64,
    started: bool,
}

impl SpeedMeter {
    /// `alpha` is the weight of the newest measurement (`compression.speed_ema`), in (0, 1].
    pub fn new(alpha: f64) -> Result<Self, RatioError> {
        if !(alpha > 0.0 && alpha <= 1.0) {
            return Err(RatioError::BadAlpha(alpha));
        }
        Ok(Self {
            alpha,
            speed: 0.0,
            started: false,
        })
    }

    /// Records `pushes` applied over the last `dt_s` seconds. The first measurement sets the
    /// speed directly; an interval that is not a positive finite length is ignored (a clock
    /// that did not advance says nothing about speed).
    pub fn update(&mut self, pushes: u64, dt_s: f64) {
        if !(dt_s > 0.0 && dt_s.is_finite()) {
            return;
        }
        let now = pushes as f64 / dt_s;
        if self.started {
            self.speed += self.alpha * (now - self.speed);
        } else {
            self.speed = now;
            self.started = true;
        }
    }

    /// Continues from a speed a checkpoint saved (0: none measured yet).
    pub fn resume(&mut self, speed: f64) {
        if speed > 0.0 && speed.is_finite() {
            self.speed = speed;
            self.started = true;
        }
    }

    /// Smoothed pushes per second; 0 before the first update.
    pub fn speed(&self) -> f64 {
        self.speed
    }
}

/// How a group chooses its upload ratio (the `[compression]` keys GDTopK reads).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RatioSettings {
    pub policy: RatioPolicy,
    /// The target ratio rho.
    pub target: f64,
    /// Lower clamp of every ratio.
    pub min: f64,
    /// Epochs of the warm-up from dense (1) to `target`; none when `<= 0`.
    pub warmup_epochs: f64,
}

impl RatioSettings {
    pub fn from_config(c: &CompressionConfig) -> Self {
        Self {
            policy: c.policy,
            target: c.ratio,
            min: c.ratio_min,
            warmup_epochs: c.warmup_epochs,
        }
    }

    /// The upload ratio of one group for the exchange happening at `epoch` (fractional
    /// epochs).
    ///
    /// Warm-up: rho_w = target^(min(epoch / warmup_epochs, 1)), from 1 (dense) at epoch 0 to
    /// `target`; no warm-up when `warmup_epochs <= 0`. `Uniform` uses rho_w; `Speed` uses
    /// rho_w * v_min / v_own, where v_min is the smallest positive speed among `all_speeds` and
    /// `own_speed`; while either speed is unknown (<= 0) it falls back to rho_w. The result is
    /// clamped to [min, 1].
    pub fn ratio(&self, epoch: f64, own_speed: f64, all_speeds: &[f64]) -> f64 {
        let progress = if self.warmup_epochs > 0.0 {
            (epoch / self.warmup_epochs).clamp(0.0, 1.0)
        } else {
            1.0
        };
        let rho_w = self.target.powf(progress);
        let rho = match self.policy {
            RatioPolicy::Uniform => rho_w,
            RatioPolicy::Speed => {
                let v_min = all_speeds
                    .iter()
                    .copied()
                    .chain(std::iter::once(own_speed))
                    .filter(|v| *v > 0.0 && v.is_finite())
                    .fold(f64::INFINITY, f64::min);
                if own_speed > 0.0 && own_speed.is_finite() && v_min.is_finite() {
                    rho_w * v_min / own_speed
                } else {
                    rho_w
                }
            }
        };
        rho.max(self.min).min(1.0)
    }
}

/// Number of entries to send for a ratio: ceil(n * ratio), at least 1 when n > 0 and
/// ratio > 0, at most n. A relative slack of 1e-12 keeps products such as 100 * 0.07
/// (7.000000000000001 in floating point) from rounding up to an extra entry.
pub fn k_for_ratio(n: usize, ratio: f64) -> usize {
    if n == 0 || ratio.is_nan() || ratio <= 0.0 {
        return 0;
    }
    let k = (n as f64 * ratio * (1.0 - 1e-12)).ceil();
    (k as usize).clamp(1, n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upload_ratio(
        policy: RatioPolicy,
        target: f64,
        min: f64,
        warmup_epochs: f64,
        epoch: f64,
        own_speed: f64,
        all_speeds: &[f64],
    ) -> f64 {
        let settings = RatioSettings {
            policy,
            target,
            min,
            warmup_epochs,
        };
        settings.ratio(epoch, own_speed, all_speeds)
    }

    #[test]
    fn speed_meter_starts_direct_then_smooths() {
        let mut m = SpeedMeter::new(0.5).unwrap();
        assert_eq!(m.speed(), 0.0);
        m.update(10, 2.0);
        assert_eq!(m.speed(), 5.0);
        m.update(30, 2.0);
        assert_eq!(m.speed(), 10.0);
        m.update(1, 0.0); // ignored
        m.update(1, f64::NAN); // ignored
        assert_eq!(m.speed(), 10.0);
        let mut one = SpeedMeter::new(1.0).unwrap();
        one.update(4, 1.0);
        one.update(8, 1.0);
        assert_eq!(one.speed(), 8.0);
        assert_eq!(SpeedMeter::new(0.0), Err(RatioError::BadAlpha(0.0)));
        assert!(SpeedMeter::new(1.5).is_err());
        assert!(SpeedMeter::new(f64::NAN).is_err());
    }

    #[test]
    fn warmup_endpoints_and_monotonic_decay() {
        let r = |e: f64| upload_ratio(RatioPolicy::Uniform, 0.01, 0.001, 4.0, e, 0.0, &[]);
        assert!((r(0.0) - 1.0).abs() < 1e-12);
        assert!((r(4.0) - 0.01).abs() < 1e-12);
        assert!((r(10.0) - 0.01).abs() < 1e-12);
        assert!((r(2.0) - 0.1).abs() < 1e-12); // halfway in log space
        let mut prev = f64::INFINITY;
        for i in 0..=40 {
            let x = r(i as f64 * 0.1);
            assert!(x < prev, "not decreasing at epoch {}", i as f64 * 0.1);
            prev = x;
        }
        // No warm-up: the target at once.
        let no = upload_ratio(RatioPolicy::Uniform, 0.05, 0.001, 0.0, 0.0, 0.0, &[]);
        assert!((no - 0.05).abs() < 1e-12);
    }

    #[test]
    fn speed_policy_equalises_ratio_times_speed() {
        let speeds = [4.0, 1.0, 2.0, 8.0];
        let ratios: Vec<f64> = speeds
            .iter()
            .map(|&v| upload_ratio(RatioPolicy::Speed, 0.1, 0.001, 0.0, 5.0, v, &speeds))
            .collect();
        // The fastest group (speed 8) gets the smallest ratio, the slowest the target.
        let fastest = ratios.iter().copied().fold(f64::INFINITY, f64::min);
        assert_eq!(fastest, ratios[3]);
        assert!((ratios[1] - 0.1).abs() < 1e-12);
        for (r, v) in ratios.iter().zip(&speeds) {
            assert!((r * v - 0.1).abs() < 1e-12, "ratio*speed {}", r * v);
        }
        // Uniform ignores speeds.
        let u = upload_ratio(RatioPolicy::Uniform, 0.1, 0.001, 0.0, 5.0, 8.0, &speeds);
        assert!((u - 0.1).abs() < 1e-12);
    }

    #[test]
    fn speed_policy_falls_back_when_unknown() {
        let target = 0.1;
        let f = |own: f64, all: &[f64]| {
            upload_ratio(RatioPolicy::Speed, target, 0.001, 0.0, 1.0, own, all)
        };
        assert!((f(0.0, &[1.0, 2.0]) - target).abs() < 1e-12);
        // Peers not yet measured (0): own is the only known speed, so v_min = own.
        assert!((f(3.0, &[0.0, 0.0]) - target).abs() < 1e-12);
        assert!((f(4.0, &[0.0, 2.0]) - 0.05).abs() < 1e-12);
    }

    #[test]
    fn clamped_to_min_and_one() {
        let r = upload_ratio(RatioPolicy::Speed, 0.01, 0.005, 0.0, 1.0, 100.0, &[1.0]);
        assert_eq!(r, 0.005);
        let r = upload_ratio(RatioPolicy::Uniform, 1.5, 0.005, 0.0, 1.0, 0.0, &[]);
        assert_eq!(r, 1.0);
    }

    #[test]
    fn k_for_ratio_rounds_up_within_bounds() {
        assert_eq!(k_for_ratio(0, 0.5), 0);
        assert_eq!(k_for_ratio(10, 0.0), 0);
        assert_eq!(k_for_ratio(10, f64::NAN), 0);
        assert_eq!(k_for_ratio(1000, 1e-9), 1);
        assert_eq!(k_for_ratio(1000, 0.0101), 11);
        assert_eq!(k_for_ratio(100, 0.07), 7);
        assert_eq!(k_for_ratio(11_200_000, 0.01), 112_000);
        assert_eq!(k_for_ratio(10, 1.0), 10);
        assert_eq!(k_for_ratio(10, 3.0), 10);
    }
}
