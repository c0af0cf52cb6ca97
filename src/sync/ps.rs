//! The parameter server's update rule, independent of the transport (as in ps-lite):
//! it applies pushes, keeps the SSP clocks and says which workers get weights now.
//!
//! - `Apply::Immediate` (asp, ssp, gssp groups): every push is one optimizer step on the
//!   gradient scaled by 1/W, W counting the workers of all groups, so one round of all W
//!   workers equals one synchronous step on their mean gradient in every mode (in gssp the
//!   groups' changes are summed across servers by the exchange).
//! - `Apply::Round` (bsp): pushes are summed until every active worker has pushed, then
//!   one step on the mean.
//!
//! A push's staleness is the number of optimizer steps applied between the weights its
//! worker received and its arrival. With [`StalenessLr::Inverse`] an immediate push of
//! staleness t is applied at `lr / max(1, t)`, so that old gradients move the model less.

use crate::config::StalenessLr;
use crate::optim::Sgd;
use crate::sync::staleness::SspClock;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Apply {
    Immediate,
    Round,
}

/// How a server applies pushes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UpdateRule {
    /// This server's own workers.
    pub workers: usize,
    /// Workers in the whole run (all groups): each immediate push is worth 1/total.
    pub total_workers: usize,
    /// SSP staleness bound (`None`: asp, no bound).
    pub bound: Option<usize>,
    pub apply: Apply,
    pub momentum: f64,
    pub weight_decay: f64,
    pub staleness_lr: StalenessLr,
}

/// What applying one push did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Applied {
    /// Optimizer steps applied since the worker received the weights it computed on.
    pub staleness: u64,
    /// The learning rate the push was applied at (the round's, in bsp).
    pub lr: f64,
}

pub struct ParamServer {
    weights: Vec<f32>,
    sgd: Sgd,
    clock: SspClock,
    apply: Apply,
    staleness_lr: StalenessLr,
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
    /// A server starting from `weights` that applies pushes as `rule` says.
    pub fn new(weights: Vec<f32>, rule: UpdateRule) -> Self {
        let n = weights.len();
        let round_sum = if rule.apply == Apply::Round {
            vec![0.0; n]
        } else {
            Vec::new()
        };
        ParamServer {
            sgd: Sgd::new(n, rule.momentum, rule.weight_decay),
            weights,
            clock: SspClock::new(rule.workers, rule.bound),
            apply: rule.apply,
            staleness_lr: rule.staleness_lr,
            round_sum,
            round_pushes: 0,
            active: rule.workers,
            scale: 1.0 / rule.total_workers.max(1) as f32,
            version: 0,
            sent_version: vec![0; rule.workers],
            last_staleness: vec![0; rule.workers],
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

    /// Handles worker `w`'s gradient at the schedule's learning rate `lr`.
    pub fn on_push(&mut self, w: usize, grad: &[f32], lr: f64) -> Applied {
        let staleness = self.version - self.sent_version[w];
        self.last_staleness[w] = staleness;
        self.clock.on_push(w);
        let mut applied = Applied { staleness, lr };
        match self.apply {
            Apply::Immediate => {
                applied.lr = push_lr(self.staleness_lr, lr, staleness);
                self.sgd
                    .step(&mut self.weights, grad, applied.lr, self.scale, self.scale);
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
        applied
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

/// The learning rate of an immediate push of `staleness` under `rule`.
pub fn push_lr(rule: StalenessLr, lr: f64, staleness: u64) -> f64 {
    match rule {
        StalenessLr::None => lr,
        StalenessLr::Inverse => lr / staleness.max(1) as f64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(workers: usize, total: usize, bound: Option<usize>, apply: Apply) -> UpdateRule {
        UpdateRule {
            workers,
            total_workers: total,
            bound,
            apply,
            momentum: 0.0,
            weight_decay: 0.0,
            staleness_lr: StalenessLr::None,
        }
    }

    #[test]
    fn inverse_rule_divides_the_learning_rate_by_the_staleness() {
        assert_eq!(push_lr(StalenessLr::None, 0.4, 5), 0.4);
        assert_eq!(push_lr(StalenessLr::Inverse, 0.4, 0), 0.4);
        assert_eq!(push_lr(StalenessLr::Inverse, 0.4, 1), 0.4);
        assert_eq!(push_lr(StalenessLr::Inverse, 0.4, 4), 0.1);
    }

    #[test]
    fn a_stale_push_moves_the_weights_less_under_the_inverse_rule() {
        let mut r = rule(2, 2, None, Apply::Immediate);
        r.staleness_lr = StalenessLr::Inverse;
        let mut ps = ParamServer::new(vec![0.0], r);
        let mut out = Vec::new();
        ps.release(&mut out); // both workers hold version 0
                              // Worker 0: fresh, full step: w = 0 - 1.0 * 4 / 2.
        assert_eq!(
            ps.on_push(0, &[4.0], 1.0),
            Applied {
                staleness: 0,
                lr: 1.0
            }
        );
        assert_eq!(ps.weights(), &[-2.0]);
        ps.release(&mut out);
        ps.on_push(0, &[4.0], 1.0); // version 2, worker 1 still on version 0
        assert_eq!(ps.weights(), &[-4.0]);
        // Worker 1 computed on version 0, two steps ago: half the step.
        assert_eq!(
            ps.on_push(1, &[4.0], 1.0),
            Applied {
                staleness: 2,
                lr: 0.5
            }
        );
        assert_eq!(ps.weights(), &[-5.0]);
    }

    #[test]
    fn bsp_rounds_ignore_the_staleness_rule() {
        let mut r = rule(2, 2, Some(0), Apply::Round);
        r.staleness_lr = StalenessLr::Inverse;
        let mut ps = ParamServer::new(vec![0.0], r);
        ps.on_push(0, &[1.0], 1.0);
        assert_eq!(ps.on_push(1, &[3.0], 1.0).lr, 1.0);
        assert_eq!(ps.weights(), &[-2.0]);
    }

    #[test]
    fn round_mode_steps_once_on_the_mean_of_all_pushes() {
        let mut ps = ParamServer::new(vec![0.0; 2], rule(2, 2, Some(0), Apply::Round));
        let mut out = Vec::new();
        assert_eq!(ps.on_push(0, &[1.0, 2.0], 1.0).staleness, 0);
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
        let mut ps = ParamServer::new(vec![0.0], rule(4, 4, None, Apply::Immediate));
        let mut out = Vec::new();
        ps.on_push(0, &[4.0], 1.0);
        assert_eq!(ps.weights(), &[-1.0]);
        ps.release(&mut out);
        assert_eq!(out, vec![0], "asp answers at once");
        // Worker 1 computed on version 0; one step has been applied since.
        assert_eq!(ps.on_push(1, &[4.0], 1.0).staleness, 1);
        assert_eq!(
            ps.on_push(0, &[4.0], 1.0).staleness,
            1,
            "worker 0 got version 1, now 2"
        );
    }

    #[test]
    fn a_group_server_scales_by_the_workers_of_all_groups() {
        let mut ps = ParamServer::new(vec![0.0], rule(2, 8, Some(3), Apply::Immediate));
        ps.on_push(0, &[8.0], 1.0);
        assert_eq!(ps.weights(), &[-1.0]);
    }

    #[test]
    fn retiring_a_worker_completes_a_bsp_round_without_it() {
        let mut ps = ParamServer::new(vec![0.0], rule(2, 2, Some(0), Apply::Round));
        ps.retire(1);
        ps.on_push(0, &[2.0], 1.0);
        assert_eq!(ps.weights(), &[-2.0]);
    }
}
