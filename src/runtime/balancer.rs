//! Batches in proportion to speed in allreduce and localsgd (`[sync.balance]`): the ranks
//! start at the equal cut (or the static one), and with `batches = "speed"` each reduction
//! carries every rank's measured samples per second in slots after the model's, one per
//! rank. When rank 0 calls for a cut (after `measure_iters` paced iterations, then every
//! `every_s` seconds), every rank computes the same new cut from the same summed slots
//! ([`balance::cut`]) and takes its slice of the shared order from the next step on. The
//! global batch never changes, so an epoch still visits every sample once; a cut that would
//! move no batch by more than the hysteresis is not taken.

use anyhow::Result;

use crate::compute::pace::CALIBRATION_ITERATIONS;
use crate::compute::workload::step::Shard;
use crate::config::{BatchSplit, Config};
use crate::protocol::balance::{self, Meter};

/// One rank's part in balancing a collective mode's batches.
pub struct Balancer {
    rank: usize,
    /// Every rank's batch now, in rank order.
    batches: Vec<usize>,
    global: usize,
    bounds: (usize, usize),
    hysteresis: f64,
    /// Whether rates ride in the reductions (`batches = "speed"`).
    measures: bool,
    /// Iterations of this process before its first cut (the pacer's calibration and the
    /// measured ones).
    first_cut_after: u64,
    every_s: f64,
    meter: Meter,
    /// Iterations this process computed, for [`Balancer::first_cut_after`].
    seen: u64,
    /// Rank 0's training clock at the last decision (`None`: none yet).
    decided_at: Option<f64>,
}

impl Balancer {
    /// The balancer of rank `rank` of `ranks`, its shard set to its first slice (`None`
    /// with equal batches: nothing to do).
    pub fn new(
        cfg: &Config,
        ranks: usize,
        rank: usize,
        step: &mut Shard,
    ) -> Result<Option<Balancer>> {
        let b = &cfg.sync.balance;
        let mean = cfg.optim.batch_size;
        let batches = match b.batches {
            BatchSplit::Equal => return Ok(None),
            BatchSplit::Speed => vec![mean; ranks],
            BatchSplit::Static => b.static_batches.clone(),
        };
        let balancer = Balancer {
            rank,
            global: mean * ranks,
            bounds: (b.min_batch, b.ceiling(mean)),
            hysteresis: b.hysteresis,
            measures: b.batches == BatchSplit::Speed,
            first_cut_after: (CALIBRATION_ITERATIONS + b.measure_iters) as u64,
            every_s: b.every_s,
            meter: Meter::default(),
            seen: 0,
            decided_at: None,
            batches,
        };
        balancer.take_slice(step)?;
        Ok(Some(balancer))
    }

    /// Slots this balancer adds to each reduction: one rate per rank, when it measures.
    pub fn slots(&self) -> usize {
        if self.measures {
            self.batches.len()
        } else {
            0
        }
    }

    /// Counts an iteration of `batch` samples that took `compute_s` (paced), once the
    /// pacer has calibrated.
    pub fn record(&mut self, compute_s: f64, batch: usize) {
        self.seen += 1;
        if self.seen > CALIBRATION_ITERATIONS as u64 {
            self.meter.record(compute_s, batch);
        }
    }

    /// Writes this rank's rate into its slot of `slots` ([`Balancer::slots`] long), the
    /// others 0 (the reduction sums them).
    pub fn fill(&mut self, slots: &mut [f32]) {
        slots.fill(0.0);
        if let Some(slot) = slots.get_mut(self.rank) {
            *slot = self.meter.rate().unwrap_or(0.0) as f32;
        }
    }

    /// On rank 0: whether the ranks cut again after this reduction, at `time_s`.
    pub fn due(&self, time_s: f64) -> bool {
        if !self.measures || self.seen < self.first_cut_after {
            return false;
        }
        match self.decided_at {
            None => true,
            Some(at) => self.every_s > 0.0 && time_s - at >= self.every_s,
        }
    }

    /// A cut was called at `time_s`: cuts the global batch by the summed `rates` and, where
    /// it is worth it, takes this rank's new slice. Returns the new cut if it was taken.
    /// Every rank computes the same from the same sums, so they agree; a rank that has not
    /// measured yet (rate 0) leaves the cut as it is.
    pub fn decide(
        &mut self,
        rates: &[f32],
        time_s: f64,
        step: &mut Shard,
    ) -> Result<Option<&[usize]>> {
        self.decided_at = Some(time_s);
        self.meter.clear();
        let rates: Vec<f64> = rates.iter().map(|&r| f64::from(r)).collect();
        if rates.iter().any(|&r| r <= 0.0) {
            return Ok(None);
        }
        let ranks: Vec<usize> = (0..rates.len()).collect();
        let next = balance::cut(&rates, &ranks, self.global, self.bounds)?;
        if !balance::worth_recutting(&self.batches, &next, self.hysteresis) {
            return Ok(None);
        }
        self.batches = next;
        self.take_slice(step)?;
        Ok(Some(&self.batches))
    }

    /// Every rank's batch now.
    pub fn batches(&self) -> &[usize] {
        &self.batches
    }

    /// Continues a run resumed at `time_s` with the cut `batches` it had in force (on the
    /// same ranks): that cut, measured again `every_s` later. An empty or unfitting cut (a
    /// checkpoint of another rank count, or of equal batches) starts from the equal cut and
    /// measures first, as a fresh run does.
    pub fn resume(&mut self, batches: &[usize], time_s: f64, step: &mut Shard) -> Result<()> {
        let fits =
            batches.len() == self.batches.len() && batches.iter().sum::<usize>() == self.global;
        if !self.measures || !fits {
            return Ok(());
        }
        // Measured again once the pacer has calibrated and `every_s` has passed.
        self.batches = batches.to_vec();
        self.decided_at = Some(time_s);
        self.take_slice(step)
    }

    fn take_slice(&self, step: &mut Shard) -> Result<()> {
        let slice = balance::slices(&self.batches).swap_remove(self.rank);
        step.set_share(slice)
    }
}

/// The server modes' cut, taken once: each world rank's batch (0 for the servers) in a world
/// of `world` ranks, from `sync.balance.static_batches` (the workers in rank order) or in
/// proportion to `profiled[i]`, the seconds per iteration at the mean batch of `workers[i]`.
pub fn batches_by_rank(
    cfg: &Config,
    world: usize,
    workers: &[usize],
    profiled: Option<&[f64]>,
) -> Result<Vec<usize>> {
    let b = &cfg.sync.balance;
    let mean = cfg.optim.batch_size;
    let mut by_rank = vec![0; world];
    match profiled {
        None => {
            let mut ranks = workers.to_vec();
            ranks.sort_unstable();
            for (&r, &batch) in ranks.iter().zip(&b.static_batches) {
                by_rank[r] = batch;
            }
        }
        Some(seconds) => {
            let rates: Vec<f64> = seconds.iter().map(|&s| mean as f64 / s).collect();
            let global = mean * workers.len();
            let cut = balance::cut(&rates, workers, global, (b.min_batch, b.ceiling(mean)))?;
            for (&r, batch) in workers.iter().zip(cut) {
                by_rank[r] = batch;
            }
        }
    }
    Ok(by_rank)
}
