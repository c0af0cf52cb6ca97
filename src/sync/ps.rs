//! The parameter server's update rule, independent of the transport (as in ps-lite):
//! it applies pushes, keeps the SSP clocks and says which workers get weights now.
//!
//! - `Apply::Immediate` (asp, ssp, gssp groups): every push is one optimizer step on the
//!   gradient scaled by 1/W, W counting the workers of all groups, so one round of all W
//!   workers equals one synchronous step on their mean gradient in every mode (in gssp the
//!   groups' changes are summed across servers by the exchange).
//! - `Apply::Round` (bsp): pushes are summed until every active worker has pushed, then
//!   one step on the mean.

use crate::optim::Sgd;
use crate::sync::staleness::SspClock;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Apply {
    Immediate,
    Round,
}

pub struct ParamServer {
    weights: Vec<f32>,
    sgd: Sgd,
    clock: SspClock,
    apply: Apply,
    round_sum: Vec<f32>,
    round_pushes: usize,
    /// Active (not retired) workers.
    active: usize,
    scale: f32,
    /// Optimizer steps applied so far: the model version.
    version: u64,
    /// Version each worker last received: the staleness of its next push is measured from it.
    sent_version: Vec<u64>,
    /// Staleness of each worker's latest push, returned to it with its next weights.
    last_staleness: Vec<u64>,
}

impl ParamServer {
    /// A server for `workers` workers of its own, out of `total_workers` in the run.
    pub fn new(
        weights: Vec<f32>,
        workers: usize,
        total_workers: usize,
        bound: Option<usize>,
        apply: Apply,
        momentum: f64,
        weight_decay: f64,
    ) -> Self {
        let n = weights.len();
        let round_sum = if apply == Apply::Round {
            vec![0.0; n]
        } else {
            Vec::new()
        };
        ParamServer {
            sgd: Sgd::new(n, momentum, weight_decay),
            weights,
            clock: SspClock::new(workers, bound),
            apply,
            round_sum,
            round_pushes: 0,
            active: workers,
            scale: 1.0 / total_workers.max(1) as f32,
            version: 0,
            sent_version: vec![0; workers],
            last_staleness: vec![0; workers],
        }
    }

    pub fn weights(&self) -> &[f32] {
        &self.weights
    }

    /// Direct access for the inter-group exchange (gssp), which adds peers' updates.
    pub fn weights_mut(&mut self) -> &mut [f32] {
        &mut self.weights
    }

    pub fn version(&self) -> u64 {
        self.version
    }

    pub fn clock(&self) -> &SspClock {
        &self.clock
    }

    /// Handles worker `w`'s gradient at learning rate `lr`; returns its staleness: the
    /// optimizer steps applied since `w` received the weights it computed on.
    pub fn on_push(&mut self, w: usize, grad: &[f32], lr: f64) -> u64 {
        let staleness = self.version - self.sent_version[w];
        self.last_staleness[w] = staleness;
        self.clock.on_push(w);
        match self.apply {
            Apply::Immediate => {
                self.sgd
                    .step(&mut self.weights, grad, lr, self.scale, self.scale);
                self.version += 1;
            }
            Apply::Round => {
                for (s, g) in self.round_sum.iter_mut().zip(grad) {
                    *s += g;
                }
                self.round_pushes += 1;
                if self.round_pushes >= self.active {
                    let scale = 1.0 / self.round_pushes as f32;
                    self.sgd
                        .step(&mut self.weights, &self.round_sum, lr, scale, 1.0);
                    self.round_sum.fill(0.0);
                    self.round_pushes = 0;
                    self.version += 1;
                }
            }
        }
        staleness
    }

    /// Staleness of worker `w`'s latest push.
    pub fn last_staleness(&self, w: usize) -> u64 {
        self.last_staleness[w]
    }

    /// Appends the workers that may receive the current weights now (SSP rule) and
    /// records the version they get.
    pub fn release(&mut self, out: &mut Vec<usize>) {
        let from = out.len();
        self.clock.release_ready(out);
        for &w in &out[from..] {
            self.sent_version[w] = self.version;
        }
    }

    /// Worker `w` has been told to stop; it no longer holds the others back.
    pub fn retire(&mut self, w: usize) {
        if !self.clock.is_retired(w) {
            self.clock.retire(w);
            self.active = self.active.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_mode_steps_once_on_the_mean_of_all_pushes() {
        let mut ps = ParamServer::new(vec![0.0; 2], 2, 2, Some(0), Apply::Round, 0.0, 0.0);
        let mut out = Vec::new();
        assert_eq!(ps.on_push(0, &[1.0, 2.0], 1.0), 0);
        ps.release(&mut out);
        assert!(out.is_empty(), "bsp waits for everyone");
        assert_eq!(ps.weights(), &[0.0, 0.0]);
        ps.on_push(1, &[3.0, 4.0], 1.0);
        ps.release(&mut out);
        assert_eq!(out, vec![0, 1]);
        assert_eq!(ps.weights(), &[-2.0, -3.0]);
        assert_eq!(ps.version(), 1);
    }

    #[test]
    fn immediate_mode_scales_each_push_by_one_over_w_and_counts_staleness() {
        let mut ps = ParamServer::new(vec![0.0], 4, 4, None, Apply::Immediate, 0.0, 0.0);
        let mut out = Vec::new();
        ps.on_push(0, &[4.0], 1.0);
        assert_eq!(ps.weights(), &[-1.0]);
        ps.release(&mut out);
        assert_eq!(out, vec![0], "asp answers at once");
        // Worker 1 computed on version 0; one step has been applied since.
        assert_eq!(ps.on_push(1, &[4.0], 1.0), 1);
        assert_eq!(
            ps.on_push(0, &[4.0], 1.0),
            1,
            "worker 0 got version 1, now 2"
        );
    }

    #[test]
    fn a_group_server_scales_by_the_workers_of_all_groups() {
        let mut ps = ParamServer::new(vec![0.0], 2, 8, Some(3), Apply::Immediate, 0.0, 0.0);
        ps.on_push(0, &[8.0], 1.0);
        assert_eq!(ps.weights(), &[-1.0]);
    }

    #[test]
    fn retiring_a_worker_completes_a_bsp_round_without_it() {
        let mut ps = ParamServer::new(vec![0.0], 2, 2, Some(0), Apply::Round, 0.0, 0.0);
        ps.retire(1);
        ps.on_push(0, &[2.0], 1.0);
        assert_eq!(ps.weights(), &[-2.0]);
    }
}
