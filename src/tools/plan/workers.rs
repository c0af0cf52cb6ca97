//! The workers a plan simulates: seconds per iteration of each, from a config's
//! `[heterogeneity]` (factors x `unit_s`), from `--tiers FACTOR:WORKERS,...` (x the unit),
//! or from `--speeds` (seconds, one per worker); `--workers N` scales the tiers to N
//! workers in the same proportions.

use crate::config::Config;
use crate::protocol::balance;

/// Seconds per iteration of each worker, and what a run adds to them.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    pub times: Vec<f64>,
    pub straggler_prob: f64,
    pub straggler_factor: f64,
    /// Samples per iteration of one worker.
    pub batch: usize,
    /// Seconds between the starts of workers released at the same moment (a server's
    /// round, a group's SSP release, the end of an allreduce): the k-th of them starts
    /// k x `burst_s` late. Zero where every rank has its own cores, the case `gssp plan`
    /// predicts; on a node with many more ranks than cores the released ranks queue for
    /// the cores, and the validation fits it ([`crate::tools::plan::measured::Machine`]).
    pub burst_s: f64,
    /// When each worker starts its first iteration, seconds (empty: all at once, at 0).
    /// A measured run's workers get their first weights one after another, a start-up
    /// that is not the protocol's steady state; the validation takes it from the logs.
    pub start_s: Vec<f64>,
}

impl Workload {
    /// Worker `w`'s first start (0 unless `start_s` says otherwise).
    pub fn start(&self, w: usize) -> f64 {
        self.start_s.get(w).copied().unwrap_or(0.0)
    }

    /// The same workers with batches in proportion to their speed within `bounds` (the cut
    /// a run makes, [`balance::cut`]): each one's iteration takes its time per sample times
    /// its batch, compute in proportion to the samples. `batch` stays the mean, so images
    /// per second still count `batch` per iteration.
    pub fn balanced(&self, bounds: (usize, usize)) -> Result<Workload, balance::BalanceError> {
        let rates: Vec<f64> = self.times.iter().map(|t| self.batch as f64 / t).collect();
        let global = self.batch * self.times.len();
        let cut = balance::cut(&rates, &[], global, bounds)?;
        let times = self
            .times
            .iter()
            .zip(cut)
            .map(|(t, b)| t * b as f64 / self.batch as f64)
            .collect();
        Ok(Workload {
            times,
            ..self.clone()
        })
    }
}

/// Where the workers' speeds come from (at most one of `speeds` and `tiers`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpeedSource {
    /// Seconds per iteration, one per worker.
    pub speeds: Option<Vec<f64>>,
    /// (factor, workers) of each tier, in units of `unit_s`.
    pub tiers: Option<Vec<(f64, usize)>>,
    /// Total workers: the tiers (given or the config's) scaled to it.
    pub workers: Option<usize>,
    /// A 1x worker's seconds per iteration (default: the config's `heterogeneity.unit_s`).
    pub unit_s: Option<f64>,
}

/// `--tiers` as the command line holds it (one value, not a list of values).
#[derive(Debug, Clone, PartialEq)]
pub struct Tiers(pub Vec<(f64, usize)>);

impl Tiers {
    pub fn parse(text: &str) -> Result<Tiers, String> {
        parse_tiers(text).map(Tiers)
    }
}

/// `--tiers 1:250,2:250,...`: FACTOR:WORKERS pairs.
pub fn parse_tiers(text: &str) -> Result<Vec<(f64, usize)>, String> {
    text.split(',')
        .map(|pair| {
            let (f, n) = pair
                .split_once(':')
                .ok_or_else(|| format!("--tiers: {pair:?} is not FACTOR:WORKERS"))?;
            let factor: f64 = f
                .trim()
                .parse()
                .map_err(|_| format!("--tiers: factor {f:?} is not a number"))?;
            let workers: usize = n
                .trim()
                .parse()
                .map_err(|_| format!("--tiers: workers {n:?} is not a whole number"))?;
            if !(factor.is_finite() && factor > 0.0) || workers == 0 {
                return Err(format!(
                    "--tiers: {pair:?} needs a factor > 0 and at least one worker"
                ));
            }
            Ok((factor, workers))
        })
        .collect()
}

/// `counts` scaled to sum to `total`, in the same proportions (largest remainders first).
pub fn scale_counts(counts: &[usize], total: usize) -> Vec<usize> {
    let sum: usize = counts.iter().sum();
    if sum == 0 {
        return counts.to_vec();
    }
    let exact: Vec<f64> = counts
        .iter()
        .map(|&c| c as f64 * total as f64 / sum as f64)
        .collect();
    let mut out: Vec<usize> = exact.iter().map(|x| x.floor() as usize).collect();
    let mut order: Vec<usize> = (0..counts.len()).collect();
    order.sort_by(|&a, &b| (exact[b] - exact[b].floor()).total_cmp(&(exact[a] - exact[a].floor())));
    let mut left = total - out.iter().sum::<usize>();
    for &i in order.iter().cycle().take(counts.len() * 2) {
        if left == 0 {
            break;
        }
        out[i] += 1;
        left -= 1;
    }
    out
}

impl Workload {
    /// The workers of `cfg` as `source` changes them.
    pub fn from_config(cfg: &Config, source: &SpeedSource) -> Result<Workload, String> {
        let h = &cfg.heterogeneity;
        let times = if let Some(speeds) = &source.speeds {
            if source.tiers.is_some() || source.workers.is_some() {
                return Err("--speeds lists every worker: drop --tiers and --workers".into());
            }
            if let Some(bad) = speeds.iter().find(|t| !(t.is_finite() && **t > 0.0)) {
                return Err(format!(
                    "--speeds: {bad} is not a positive number of seconds"
                ));
            }
            speeds.clone()
        } else {
            let unit = source.unit_s.unwrap_or(h.unit_s);
            if !(unit.is_finite() && unit > 0.0) {
                return Err(format!(
                    "heterogeneity.unit_s is {unit} (calibrated at run time): pass --unit-s, a 1x worker's seconds per iteration"
                ));
            }
            let tiers: Vec<(f64, usize)> = match &source.tiers {
                Some(t) => t.clone(),
                None if !h.slowdown.is_empty() => h.slowdown.iter().map(|&f| (f, 1)).collect(),
                None => h.tiers.iter().map(|t| (t.factor, t.workers)).collect(),
            };
            if tiers.is_empty() {
                return Err(
                    "no workers: the config has no heterogeneity.tiers or .slowdown; pass --tiers or --speeds".into(),
                );
            }
            let counts: Vec<usize> = tiers.iter().map(|t| t.1).collect();
            let counts = match source.workers {
                Some(0) => return Err("--workers must be at least 1".into()),
                Some(n) => scale_counts(&counts, n),
                None => counts,
            };
            tiers
                .iter()
                .zip(counts)
                .flat_map(|(&(f, _), c)| std::iter::repeat_n(f * unit, c))
                .collect()
        };
        if times.is_empty() {
            return Err("no workers to simulate".into());
        }
        Ok(Workload {
            times,
            straggler_prob: h.straggler_prob,
            straggler_factor: h.straggler_factor,
            batch: cfg.optim.batch_size,
            burst_s: 0.0,
            start_s: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiers_parse_and_name_what_is_wrong() {
        assert_eq!(parse_tiers("1:4, 2.5:3"), Ok(vec![(1.0, 4), (2.5, 3)]));
        for (bad, says) in [
            ("1", "FACTOR:WORKERS"),
            ("x:2", "factor"),
            ("1:two", "workers"),
            ("0:2", "factor > 0"),
            ("1:0", "at least one"),
        ] {
            let err = parse_tiers(bad).unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }

    #[test]
    fn counts_scale_in_proportion_and_sum_to_the_total() {
        assert_eq!(scale_counts(&[4, 4, 4, 4], 10_000), vec![2500; 4]);
        assert_eq!(scale_counts(&[4, 4, 4, 4], 10), vec![3, 3, 2, 2]);
        assert_eq!(scale_counts(&[1, 3], 8), vec![2, 6]);
        assert_eq!(scale_counts(&[4, 4, 4, 4], 2).iter().sum::<usize>(), 2);
    }

    fn cfg(extra: &str) -> Config {
        Config::from_str_with_overrides(
            &format!("[data]\ndataset = \"synthetic\"\n[model]\nname = \"mlp\"\n{extra}"),
            "test",
            &[],
        )
        .unwrap()
    }

    #[test]
    fn workload_comes_from_the_config_tiers_scaled_or_given_speeds() {
        let c = cfg("[heterogeneity]\ntiers = [{ factor = 1.0, workers = 2 }, { factor = 3.0, workers = 2 }]\nunit_s = 0.01\n");
        let w = Workload::from_config(&c, &SpeedSource::default()).unwrap();
        assert_eq!(w.times, vec![0.01, 0.01, 0.03, 0.03]);
        let source = SpeedSource {
            workers: Some(6),
            unit_s: Some(0.02),
            ..Default::default()
        };
        let w = Workload::from_config(&c, &source).unwrap();
        assert_eq!(w.times, vec![0.02, 0.02, 0.02, 0.06, 0.06, 0.06]);
        let source = SpeedSource {
            speeds: Some(vec![0.5, 0.25]),
            ..Default::default()
        };
        assert_eq!(
            Workload::from_config(&c, &source).unwrap().times,
            vec![0.5, 0.25]
        );
    }

    #[test]
    fn workload_errors_name_the_missing_input() {
        let calibrated = cfg("[heterogeneity]\ntiers = [{ factor = 1.0, workers = 2 }]\n");
        let err = Workload::from_config(&calibrated, &SpeedSource::default()).unwrap_err();
        assert!(err.contains("--unit-s"), "{err}");
        let both = SpeedSource {
            speeds: Some(vec![1.0]),
            workers: Some(3),
            ..Default::default()
        };
        let err = Workload::from_config(&calibrated, &both).unwrap_err();
        assert!(err.contains("drop --tiers and --workers"), "{err}");
        let bad = SpeedSource {
            speeds: Some(vec![1.0, -2.0]),
            ..Default::default()
        };
        let err = Workload::from_config(&calibrated, &bad).unwrap_err();
        assert!(err.contains("-2"), "{err}");
    }
}
