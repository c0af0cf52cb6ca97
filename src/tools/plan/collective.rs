//! The collective engine of the simulator: allreduce (an average every step) and local SGD
//! (an average every H steps). Every rank waits for the slowest, then the ring allreduce
//! runs; rounds follow each other, so no event queue is needed.

use super::{Outcome, Workload};
use crate::protocol::costmodel::CostModel;

/// Runs rounds of `local_steps` steps and one allreduce on `work` for `horizon_s` seconds.
pub fn simulate(
    local_steps: usize,
    work: &Workload,
    cost: &CostModel,
    horizon_s: f64,
    seed: u64,
) -> Outcome {
    let n = work.times.len();
    let allreduce = cost.allreduce_s(n);
    let mut sampler = work.sampler(seed);
    let mut wait_s = vec![0.0f64; n];
    let mut arrive = vec![0.0f64; n];
    let mut iterations = 0u64;
    // Rank w starts each round w x burst_s after the previous allreduce ends (its wait
    // runs until then; workload.rs); the first round at its first start, waited for too.
    let starts = |end: f64, w: usize| end + w as f64 * work.burst_s;
    let mut begin: Vec<f64> = (0..n).map(|w| work.start(w)).collect();
    for (wait, &b) in wait_s.iter_mut().zip(&begin) {
        *wait += b.min(horizon_s);
    }
    let mut end = 0.0;
    while end < horizon_s && n > 0 {
        for (w, a) in arrive.iter_mut().enumerate() {
            *a = begin[w]
                + (0..local_steps.max(1))
                    .map(|_| sampler.next(w))
                    .sum::<f64>();
        }
        let slowest = arrive.iter().cloned().fold(0.0, f64::max);
        end = slowest + allreduce;
        for (w, &a) in arrive.iter().enumerate() {
            if a <= horizon_s {
                iterations += local_steps.max(1) as u64;
            }
            begin[w] = starts(end, w);
            wait_s[w] += begin[w].min(horizon_s) - a.min(horizon_s);
        }
    }
    let bytes = 2.0 * (n.saturating_sub(1)) as f64 / n.max(1) as f64 * 4.0 * cost.params as f64;
    let rounds_per_s = iterations as f64 / (n.max(1) * local_steps.max(1)) as f64 / horizon_s;
    Outcome {
        iterations,
        images_per_s: iterations as f64 * work.batch as f64 / horizon_s,
        wait_fractions: wait_s.iter().map(|w| w / horizon_s).collect(),
        staleness: None,
        server_busy: Vec::new(),
        server_out_bytes_per_s: Vec::new(),
        worker_pushes_per_s: Vec::new(),
        // Each rank sends (and receives) this much per round.
        server_bytes_per_s: vec![bytes * rounds_per_s],
        exchange_bytes_per_s: Vec::new(),
    }
}
