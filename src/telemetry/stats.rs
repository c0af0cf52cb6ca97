//! Small statistics over samples of seconds.

/// Median of a sample, sorted in place (mean of the two middle values for an even count);
/// NaN for an empty one.
pub fn median(samples: &mut [f64]) -> f64 {
    samples.sort_by(f64::total_cmp);
    let n = samples.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => samples[n / 2],
        _ => 0.5 * (samples[n / 2 - 1] + samples[n / 2]),
    }
}
