//! Clocks the roles time themselves with: a thread's CPU time, and sleeps precise to
//! tens of microseconds.

use std::time::{Duration, Instant};

/// The last stretch of [`sleep_precise`], spun rather than slept: `thread::sleep` overshoots
/// by up to this much.
const SPIN: Duration = Duration::from_micros(200);

/// CPU seconds this thread has run (`CLOCK_THREAD_CPUTIME_ID`): busy time without the
/// time the OS gave other processes meanwhile (many ranks share few cores in tests and
/// benchmarks). NaN if the clock is unavailable.
pub fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer; the clock id is a constant.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return f64::NAN;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// Sleeps `seconds` precisely: `thread::sleep` for all but the last ~200 us, then spins
/// until the deadline. Non-positive or non-finite durations return at once.
pub fn sleep_precise(seconds: f64) {
    let Some(total) = sleep_length(seconds) else {
        return;
    };
    let start = Instant::now();
    if let Some(bulk) = total.checked_sub(SPIN) {
        std::thread::sleep(bulk);
    }
    while start.elapsed() < total {
        std::hint::spin_loop();
    }
}

/// How long [`sleep_precise`] sleeps for `seconds`: `None` (no sleep at all) for a
/// non-positive or non-finite time, the longest `Duration` for one beyond it. Kept apart
/// from the sleep, so that tests check it without timing a sleep.
fn sleep_length(seconds: f64) -> Option<Duration> {
    (seconds.is_finite() && seconds > 0.0)
        .then(|| Duration::try_from_secs_f64(seconds).unwrap_or(Duration::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sleeps_last_their_time_and_bad_times_none() {
        assert_eq!(sleep_length(0.004), Some(Duration::from_millis(4)));
        assert_eq!(sleep_length(2.5), Some(Duration::from_millis(2500)));
        assert_eq!(sleep_length(1e300), Some(Duration::MAX));
        for bad in [0.0, -0.0, -1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert_eq!(sleep_length(bad), None, "{bad}");
        }
    }

    /// A sleep lasts at least its time (a lower bound: a loaded machine only lengthens it).
    #[test]
    fn a_sleep_lasts_at_least_its_time() {
        let start = Instant::now();
        sleep_precise(0.002);
        assert!(start.elapsed() >= Duration::from_millis(2));
    }
}
