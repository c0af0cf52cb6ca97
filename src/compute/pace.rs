//! Heterogeneity emulation: per-worker slowdown factors and the pacer that enforces them.
//!
//! A slowed worker is emulated by padding its compute phase with a sleep. The emulated
//! compute phase of an iteration lasts `max(real_compute_s, f_eff x unit)`, where
//! `f_eff = factor x straggler_factor` with probability `straggler_prob` (a transient
//! straggler) and `f_eff = factor` otherwise; `heterogeneity.changes` replace a worker's
//! `factor` from a given second of the training clock on (a node that becomes slow mid-run).
//! The pad is absolute (a multiple of a fixed unit), not proportional to the measured compute
//! time, so the factors still hold when several ranks share (oversubscribe) the cores of one
//! machine and every rank's real compute is inflated by contention.
//!
//! The unit is either given (`heterogeneity.unit_s`) or calibrated as the median real compute
//! time of the worker's first iterations; no padding happens while calibrating. Calibrate when
//! ranks are not yet contending (or give `unit_s`) so that the unit is the uncontended time.
//!
//! The unit is the time of one batch of `optim.batch_size`. A worker whose batch differs
//! (batches in proportion to speed) says so with [`Pacer::set_work`]: its emulated compute
//! then lasts `f_eff x unit x work`, compute in proportion to the samples, and calibration
//! divides what it measures by the work, so the unit stays that of the mean batch.
//!
//! Pure logic apart from the sleep ([`crate::telemetry::clock::sleep_precise`]); nothing here
//! talks to MPI.

use std::time::Instant;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::config::HeterogeneityConfig;
use crate::telemetry::clock::sleep_precise;
use crate::telemetry::stats::median;

/// The slowdown factor of each of `num_workers` workers (worker index = position): the
/// `slowdown` list if set, else the `tiers` expanded in order, else all 1.0.
///
/// `Config::validate_for_world` makes the lengths match; should they not, the list is cut or
/// padded with 1.0 so that the result always has exactly `num_workers` entries.
pub fn worker_factors(cfg: &HeterogeneityConfig, num_workers: usize) -> Vec<f64> {
    let mut factors: Vec<f64> = if !cfg.slowdown.is_empty() {
        cfg.slowdown.clone()
    } else {
        cfg.tiers
            .iter()
            .flat_map(|t| std::iter::repeat_n(t.factor, t.workers))
            .collect()
    };
    factors.resize(num_workers, 1.0);
    factors
}

/// Iterations on which a worker's pacer calibrates its unit (when `heterogeneity.unit_s`
/// is 0); profiling for gssp's grouping runs this many untimed iterations first, so that
/// every timed one is paced.
pub const CALIBRATION_ITERATIONS: usize = 5;

/// Enforces one worker's slowdown, iteration by iteration (see the module docs).
#[derive(Debug, Clone)]
pub struct Pacer {
    factor: f64,
    /// This worker's `heterogeneity.changes`: (seconds after the training clock starts,
    /// factor from then on), ascending.
    changes: Vec<(f64, f64)>,
    /// The training clock; `None` until [`Pacer::start_clock`] (changes do not apply before).
    clock: Option<Instant>,
    unit_s: Option<f64>,
    straggler_prob: f64,
    straggler_factor: f64,
    rng: ChaCha8Rng,
    calibration: usize,
    samples: Vec<f64>,
    last_straggler: bool,
    /// This iteration's batch over the mean batch ([`Pacer::set_work`]).
    work: f64,
}

impl Pacer {
    /// A pacer for a worker with slowdown `factor`.
    ///
    /// `unit_s > 0` fixes the unit; `unit_s == 0` (or negative / not finite) calibrates it as
    /// the median real compute time of the first `calibration` iterations (at least 1).
    /// Straggler draws come from a ChaCha8 generator seeded with `seed`: one draw per
    /// iteration, calibration included, so whether iteration k straggles depends only on
    /// the seed.
    pub fn new(
        factor: f64,
        unit_s: f64,
        straggler_prob: f64,
        straggler_factor: f64,
        seed: u64,
        calibration: usize,
    ) -> Self {
        let calibrated = unit_s.is_finite() && unit_s > 0.0;
        Self {
            factor,
            changes: Vec::new(),
            clock: None,
            unit_s: calibrated.then_some(unit_s),
            straggler_prob,
            straggler_factor,
            rng: ChaCha8Rng::seed_from_u64(seed),
            calibration: calibration.max(1),
            samples: Vec::new(),
            last_straggler: false,
            work: 1.0,
        }
    }

    /// The next iterations compute `work` times the mean batch (its batch over
    /// `optim.batch_size`; 1 unless batches follow speed).
    pub fn set_work(&mut self, work: f64) {
        self.work = if work.is_finite() && work > 0.0 {
            work
        } else {
            1.0
        };
    }

    /// A pacer from the `[heterogeneity]` section for a worker with slowdown `factor` (see
    /// [`worker_factors`]); `worker` is its worker index (`None` for a server), which picks
    /// its `changes`; `seed` should differ between workers.
    pub fn from_config(
        cfg: &HeterogeneityConfig,
        factor: f64,
        worker: Option<usize>,
        seed: u64,
        calibration: usize,
    ) -> Self {
        let mut pacer = Self::new(
            factor,
            cfg.unit_s,
            cfg.straggler_prob,
            cfg.straggler_factor,
            seed,
            calibration,
        );
        pacer.changes = cfg
            .changes
            .iter()
            .filter(|c| Some(c.worker) == worker)
            .map(|c| (c.at_s, c.factor))
            .collect();
        pacer
    }

    /// Starts the clock that `heterogeneity.changes` count from (the run's training clock).
    pub fn start_clock(&mut self) {
        self.clock = Some(Instant::now());
    }

    /// Starts the training clock at `start` (a resumed run's lies in the past).
    pub fn start_clock_at(&mut self, start: Instant) {
        self.clock = Some(start);
    }

    /// The base factor `elapsed_s` seconds after the clock started (`None`: not started):
    /// the last change at or before then, else the configured factor.
    fn factor_at(&self, elapsed_s: Option<f64>) -> f64 {
        let Some(t) = elapsed_s else {
            return self.factor;
        };
        self.changes
            .iter()
            .take_while(|&&(at, _)| at <= t)
            .last()
            .map_or(self.factor, |&(_, f)| f)
    }

    /// Records an iteration's real compute time and returns how many seconds to sleep now so
    /// that the compute phase lasts `max(real_compute_s, f_eff x unit)`. Returns 0 while the
    /// unit is being calibrated. A negative or non-finite time counts as 0.
    pub fn pad_after_compute(&mut self, real_compute_s: f64) -> f64 {
        let elapsed = self.clock.map(|c| c.elapsed().as_secs_f64());
        self.pad_at(real_compute_s, elapsed)
    }

    /// [`Pacer::pad_after_compute`] at `elapsed_s` on the training clock.
    fn pad_at(&mut self, real_compute_s: f64, elapsed_s: Option<f64>) -> f64 {
        let factor = self.factor_at(elapsed_s);
        let real = if real_compute_s.is_finite() && real_compute_s > 0.0 {
            real_compute_s
        } else {
            0.0
        };
        self.last_straggler = self.rng.gen::<f64>() < self.straggler_prob;
        let f_eff = if self.last_straggler {
            factor * self.straggler_factor
        } else {
            factor
        };
        match self.unit_s {
            Some(unit) => (f_eff * unit * self.work - real).max(0.0),
            None => {
                self.samples.push(real / self.work);
                if self.samples.len() >= self.calibration {
                    self.unit_s = Some(median(&mut self.samples));
                    self.samples = Vec::new();
                }
                0.0
            }
        }
    }

    /// How long an iteration's compute phase lasts on a simulated clock, at `elapsed_s` on
    /// the training clock (`None` before training starts: profiling): `f_eff x unit x work`,
    /// the transient straggler drawn as [`Pacer::pad_after_compute`] draws it, so a worker's
    /// iterations straggle as its process's would. The real compute is taken to fit in its
    /// pad (the emulation's premise), so it does not count. 0 while the unit is
    /// calibrating: a simulated run fixes `heterogeneity.unit_s`.
    pub fn emulated_s(&mut self, elapsed_s: Option<f64>) -> f64 {
        self.pad_at(0.0, elapsed_s)
    }

    /// [`Pacer::pad_after_compute`], then sleeps for the pad (see [`sleep_precise`]).
    /// Returns the pad in seconds.
    pub fn sleep_pad(&mut self, real_compute_s: f64) -> f64 {
        let pad = self.pad_after_compute(real_compute_s);
        sleep_precise(pad);
        pad
    }

    /// The pacing unit in seconds; `None` while it is still being calibrated.
    #[cfg(test)]
    fn unit_s(&self) -> Option<f64> {
        self.unit_s
    }

    /// The worker's base slowdown factor.
    #[cfg(test)]
    fn factor(&self) -> f64 {
        self.factor
    }

    /// Whether the last iteration drew a transient straggler (its pad, once calibrated, used
    /// `factor x straggler_factor`).
    #[cfg(test)]
    fn last_straggler(&self) -> bool {
        self.last_straggler
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SpeedTier;

    fn tiers(list: &[(f64, usize)]) -> HeterogeneityConfig {
        HeterogeneityConfig {
            tiers: list
                .iter()
                .map(|&(factor, workers)| SpeedTier { factor, workers })
                .collect(),
            ..HeterogeneityConfig::default()
        }
    }

    #[test]
    fn the_pad_follows_the_work_and_calibration_measures_the_mean_batch() {
        let mut p = Pacer::new(3.0, 0.0, 0.0, 1.0, 1, 2);
        p.set_work(2.0);
        // Calibrating on twice the mean batch: 0.02 s measured is a unit of 0.01 s.
        p.pad_after_compute(0.02);
        p.pad_after_compute(0.02);
        assert_eq!(p.unit_s(), Some(0.01));
        assert!((p.pad_after_compute(0.02) - 0.04).abs() < 1e-12);
        p.set_work(0.5);
        assert!((p.pad_after_compute(0.005) - 0.01).abs() < 1e-12);
        p.set_work(f64::NAN);
        assert!((p.pad_after_compute(0.0) - 0.03).abs() < 1e-12);
    }

    #[test]
    fn factors_come_from_slowdown_then_tiers_then_ones() {
        let cfg = HeterogeneityConfig {
            slowdown: vec![1.0, 2.0, 4.0],
            ..HeterogeneityConfig::default()
        };
        assert_eq!(worker_factors(&cfg, 3), vec![1.0, 2.0, 4.0]);
        let cfg = tiers(&[(1.0, 2), (3.0, 1), (1.5, 2)]);
        assert_eq!(worker_factors(&cfg, 5), vec![1.0, 1.0, 3.0, 1.5, 1.5]);
        assert_eq!(
            worker_factors(&HeterogeneityConfig::default(), 4),
            vec![1.0; 4]
        );
    }

    #[test]
    fn factors_always_have_one_entry_per_worker() {
        let cfg = tiers(&[(2.0, 1)]);
        assert_eq!(worker_factors(&cfg, 3), vec![2.0, 1.0, 1.0]);
        let cfg = tiers(&[(2.0, 3), (5.0, 3)]);
        assert_eq!(worker_factors(&cfg, 4), vec![2.0, 2.0, 2.0, 5.0]);
    }

    #[test]
    fn pad_fills_compute_up_to_factor_times_unit() {
        let mut p = Pacer::new(3.0, 0.01, 0.0, 1.0, 1, 5);
        assert_eq!(p.unit_s(), Some(0.01));
        assert!((p.pad_after_compute(0.004) - 0.026).abs() < 1e-12);
        assert_eq!(p.pad_after_compute(0.05), 0.0);
        assert!((p.pad_after_compute(0.0) - 0.03).abs() < 1e-12);
        // Bad measurements count as zero compute.
        assert!((p.pad_after_compute(-1.0) - 0.03).abs() < 1e-12);
        assert!((p.pad_after_compute(f64::NAN) - 0.03).abs() < 1e-12);
        // Factor 1: compute at least one unit long is never padded.
        let mut p = Pacer::new(1.0, 0.01, 0.0, 1.0, 1, 5);
        assert_eq!(p.pad_after_compute(0.02), 0.0);
        assert!((p.pad_after_compute(0.006) - 0.004).abs() < 1e-12);
    }

    #[test]
    fn stragglers_multiply_the_factor_at_the_configured_rate() {
        let (prob, n) = (0.1, 100_000);
        let mut p = Pacer::new(2.0, 1.0, prob, 5.0, 7, 1);
        let mut stragglers = 0;
        for _ in 0..n {
            let pad = p.pad_after_compute(0.0);
            if p.last_straggler() {
                stragglers += 1;
                assert_eq!(pad, 10.0);
            } else {
                assert_eq!(pad, 2.0);
            }
        }
        let rate = stragglers as f64 / n as f64;
        // Standard deviation of the rate is about 0.00095; allow 5 sigma.
        assert!((rate - prob).abs() < 0.005, "straggler rate {rate}");
    }

    #[test]
    fn straggler_draws_are_deterministic_per_seed() {
        let draws = |seed| {
            let mut p = Pacer::new(1.0, 1.0, 0.3, 4.0, seed, 1);
            (0..200)
                .map(|_| p.pad_after_compute(0.0))
                .collect::<Vec<_>>()
        };
        assert_eq!(draws(11), draws(11));
        assert_ne!(draws(11), draws(12));
    }

    #[test]
    fn straggler_probability_extremes() {
        let mut never = Pacer::new(1.0, 1.0, 0.0, 9.0, 3, 1);
        let mut always = Pacer::new(1.0, 1.0, 1.0, 9.0, 3, 1);
        for _ in 0..1000 {
            assert_eq!(never.pad_after_compute(0.0), 1.0);
            assert_eq!(always.pad_after_compute(0.0), 9.0);
        }
    }

    #[test]
    fn unit_is_calibrated_as_median_without_padding() {
        let mut p = Pacer::new(2.0, 0.0, 0.0, 1.0, 5, 5);
        for t in [0.5, 0.1, 0.3, 0.9, 0.2] {
            assert_eq!(p.unit_s(), None);
            assert_eq!(p.pad_after_compute(t), 0.0);
        }
        assert_eq!(p.unit_s(), Some(0.3));
        assert!((p.pad_after_compute(0.1) - 0.5).abs() < 1e-12);
        // Even count: mean of the two middle values; calibration 0 means 1 iteration.
        let mut p = Pacer::new(1.0, 0.0, 0.0, 1.0, 5, 4);
        for t in [1.0, 4.0, 2.0, 3.0] {
            p.pad_after_compute(t);
        }
        assert_eq!(p.unit_s(), Some(2.5));
        let mut p = Pacer::new(1.0, 0.0, 0.0, 1.0, 5, 0);
        assert_eq!(p.pad_after_compute(0.25), 0.0);
        assert_eq!(p.unit_s(), Some(0.25));
    }

    #[test]
    fn from_config_uses_the_section() {
        let cfg = HeterogeneityConfig {
            unit_s: 0.002,
            straggler_prob: 1.0,
            straggler_factor: 3.0,
            ..HeterogeneityConfig::default()
        };
        let mut p = Pacer::from_config(&cfg, 2.0, Some(0), 1, 5);
        assert_eq!(p.unit_s(), Some(0.002));
        assert_eq!(p.factor(), 2.0);
        assert!((p.pad_after_compute(0.0) - 0.012).abs() < 1e-12);
    }

    /// The pad is slept in full: a lower bound, which a loaded machine only lengthens. Which
    /// times are slept at all, `telemetry::clock`'s unit tests check without a clock; how
    /// little longer than the pad the sleep lasts is the benchmarks' business.
    #[test]
    fn sleep_pad_sleeps_at_least_the_pad() {
        let mut p = Pacer::new(1.0, 0.005, 0.0, 1.0, 1, 1);
        let start = Instant::now();
        let pad = p.sleep_pad(0.001);
        let slept = start.elapsed().as_secs_f64();
        assert!((pad - 0.004).abs() < 1e-12);
        assert!(slept >= pad, "slept {slept} < pad {pad}");
        // Real compute beyond factor x unit: no pad.
        assert_eq!(p.sleep_pad(0.02), 0.0);
    }

    #[test]
    fn speed_changes_apply_from_their_second_on_the_training_clock() {
        let cfg = HeterogeneityConfig {
            unit_s: 1.0,
            changes: vec![
                crate::config::SpeedChange {
                    at_s: 10.0,
                    worker: 1,
                    factor: 4.0,
                },
                crate::config::SpeedChange {
                    at_s: 20.0,
                    worker: 0,
                    factor: 3.0,
                },
                crate::config::SpeedChange {
                    at_s: 30.0,
                    worker: 1,
                    factor: 1.0,
                },
            ],
            ..HeterogeneityConfig::default()
        };
        let mut p = Pacer::from_config(&cfg, 2.0, Some(1), 1, 1);
        // Before the clock starts (calibration, profiling) the configured factor holds.
        assert_eq!(p.pad_at(0.0, None), 2.0);
        assert_eq!(p.pad_at(0.0, Some(9.99)), 2.0);
        assert_eq!(p.pad_at(0.0, Some(10.0)), 4.0);
        assert_eq!(p.pad_at(0.5, Some(25.0)), 3.5);
        assert_eq!(p.pad_at(0.0, Some(30.0)), 1.0);
        // Worker 0 sees only its own change; a server sees none.
        let mut w0 = Pacer::from_config(&cfg, 1.0, Some(0), 1, 1);
        assert_eq!(w0.pad_at(0.0, Some(15.0)), 1.0);
        assert_eq!(w0.pad_at(0.0, Some(20.0)), 3.0);
        let mut server = Pacer::from_config(&cfg, 1.0, None, 1, 1);
        assert_eq!(server.pad_at(0.0, Some(40.0)), 1.0);
        // The real clock: not started, then started (no change is due yet).
        let mut live = Pacer::from_config(&cfg, 2.0, Some(1), 1, 1);
        assert_eq!(live.pad_after_compute(0.0), 2.0);
        live.start_clock();
        assert_eq!(live.pad_after_compute(0.0), 2.0);
    }
}
