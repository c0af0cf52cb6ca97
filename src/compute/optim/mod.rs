//! SGD with momentum and weight decay over flat buffers (PyTorch's update rule).
//!
//! A full step (`share = 1`) is PyTorch's rule:
//! `g = scale * grad + weight_decay * w; v = momentum * v + g; w -= lr * v`.
//!
//! A parameter server that applies each of W workers' gradients as it arrives makes every
//! push worth `share = 1/W` of a synchronous step: it passes `scale = share = 1/W`, and the
//! rule scales the weight decay by `share` too, so that one round of W pushes decays the
//! weights once, as one synchronous step does (not W times):
//! `g = scale * grad + share * weight_decay * w; v = momentum * v + g; w -= lr * v`.
//! Momentum stays per update: stretched to one decay per round of W pushes, it would
//! carry each stale gradient W times longer, and the asynchronous modes oscillate.

pub mod adam;
pub mod choice;
pub mod clip;
pub mod outer;
pub mod parallel;

pub use adam::{Adam, AdamConfig, BufAdam};
pub use choice::{HostOptimizer, NetworkOptimizer};
pub use clip::{clip_grad_norm, global_norm, ClipError};
pub use outer::Outer;

use crate::compute::backend::{Backend, SgdStep};
use crate::compute::model::Trainable;

/// SGD over host buffers: the parameter servers' replicas. It runs the CPU backend's
/// `sgd_step` kernel, the one [`NetworkSgd`] runs on a network's own backend, split over the
/// pool's threads ([`parallel::sgd_step`]): a server's step is bound by memory traffic.
pub struct Sgd {
    momentum: f32,
    weight_decay: f32,
    velocity: Vec<f32>,
}

impl Sgd {
    pub fn new(num_params: usize, momentum: f64, weight_decay: f64) -> Sgd {
        Sgd {
            momentum: momentum as f32,
            weight_decay: weight_decay as f32,
            velocity: vec![0.0; num_params],
        }
    }

    /// The momentum buffer (a checkpoint saves it).
    pub fn velocity(&self) -> &[f32] {
        &self.velocity
    }

    pub fn velocity_mut(&mut self) -> &mut [f32] {
        &mut self.velocity
    }

    /// One update on `params` from `grads` scaled by `scale`, at learning rate `lr`,
    /// worth `share` of a synchronous step (1 for a full step).
    pub fn step(&mut self, params: &mut [f32], grads: &[f32], lr: f64, scale: f32, share: f32) {
        assert_eq!(
            params.len(),
            self.velocity.len(),
            "optimizer built for another model"
        );
        let h = SgdStep {
            lr: lr as f32,
            momentum: self.momentum,
            weight_decay: self.weight_decay * share,
            scale,
        };
        parallel::sgd_step(params, &mut self.velocity, grads, &h);
    }
}

/// SGD of a worker that updates its own network (single process, allreduce): the
/// velocity lives on the network's backend, next to its parameters and gradients.
pub struct NetworkSgd<B: Backend> {
    momentum: f32,
    weight_decay: f32,
    velocity: B::Buf,
    len: usize,
}

impl<B: Backend> NetworkSgd<B> {
    pub fn new(net: &impl Trainable<B>, momentum: f64, weight_decay: f64) -> Self {
        NetworkSgd {
            momentum: momentum as f32,
            weight_decay: weight_decay as f32,
            velocity: net.backend().alloc(net.num_params()),
            len: net.num_params(),
        }
    }

    /// Values it updates.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The momentum buffer on the host (a checkpoint saves it).
    pub fn velocity_to_host(&self, net: &impl Trainable<B>, host: &mut [f32]) {
        net.backend().download(host, &self.velocity);
    }

    pub fn velocity_from_host(&mut self, net: &impl Trainable<B>, host: &[f32]) {
        net.backend().upload(&mut self.velocity, host);
    }

    /// A full step from the network's gradient buffer scaled by `scale` (1, or 1/W for
    /// the sum of W workers' gradients).
    pub fn step(&mut self, net: &mut impl Trainable<B>, lr: f64, scale: f32) {
        assert_eq!(
            net.num_params(),
            self.len,
            "optimizer built for another model"
        );
        let h = SgdStep {
            lr: lr as f32,
            momentum: self.momentum,
            weight_decay: self.weight_decay,
            scale,
        };
        let (be, params, grads) = net.optimizer_buffers();
        be.sgd_step(params, &mut self.velocity, grads, &h);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_hand_computed_momentum_steps() {
        let mut sgd = Sgd::new(1, 0.9, 0.1);
        let mut w = [1.0f32];
        sgd.step(&mut w, &[0.5], 0.1, 1.0, 1.0); // g = 0.5 + 0.1 = 0.6; v = 0.6; w = 0.94
        assert!((w[0] - 0.94).abs() < 1e-6);
        sgd.step(&mut w, &[0.5], 0.1, 1.0, 1.0); // g = 0.5 + 0.094 = 0.594; v = 0.54 + 0.594 = 1.134
        assert!((w[0] - (0.94 - 0.1134)).abs() < 1e-6);
    }

    #[test]
    fn scale_divides_the_gradient_only() {
        let mut a = Sgd::new(1, 0.0, 0.0);
        let mut w = [0.0f32];
        a.step(&mut w, &[4.0], 1.0, 0.25, 0.25);
        assert_eq!(w[0], -1.0);
    }

    #[test]
    fn w_pushes_worth_one_over_w_decay_the_weights_like_one_step() {
        let mut one = Sgd::new(1, 0.0, 0.5);
        let mut w1 = [1.0f32];
        one.step(&mut w1, &[0.0], 0.1, 1.0, 1.0);
        let mut four = Sgd::new(1, 0.0, 0.5);
        let mut w4 = [1.0f32];
        for _ in 0..4 {
            four.step(&mut w4, &[0.0], 0.1, 0.25, 0.25);
        }
        // 1 - 0.05 = 0.95 vs (1 - 0.0125)^4 = 0.9509: the same to first order.
        assert!((w1[0] - w4[0]).abs() < 1e-3, "{} vs {}", w1[0], w4[0]);
    }
}

/// Learning rate at a (fractional) epoch, `progress` of the way through the run (see
/// [`crate::config::RunConfig::progress`]): linear warm-up, then the configured schedule.
pub fn lr_at(cfg: &crate::config::OptimConfig, epoch: f64, progress: f64) -> f64 {
    use crate::config::LrSchedule;
    let base = match cfg.lr_schedule {
        LrSchedule::Constant => cfg.lr,
        LrSchedule::Step => {
            let passed = cfg.lr_decay_epochs.iter().filter(|&&e| epoch >= e).count();
            cfg.lr * cfg.lr_decay.powi(passed as i32)
        }
        LrSchedule::Cosine => {
            let t = progress.clamp(0.0, 1.0);
            cfg.lr * 0.5 * (1.0 + (std::f64::consts::PI * t).cos())
        }
    };
    if cfg.warmup_epochs > 0.0 && epoch < cfg.warmup_epochs {
        base * (epoch / cfg.warmup_epochs).max(0.01)
    } else {
        base
    }
}

#[cfg(test)]
mod schedule_tests {
    use super::lr_at;
    use crate::config::{LrSchedule, OptimConfig};

    #[test]
    fn step_cosine_and_warmup() {
        let mut c = OptimConfig {
            lr: 0.1,
            lr_schedule: LrSchedule::Constant,
            ..OptimConfig::default()
        };
        assert_eq!(lr_at(&c, 3.0, 0.3), 0.1);
        c.lr_schedule = LrSchedule::Step;
        c.lr_decay = 0.5;
        c.lr_decay_epochs = vec![2.0, 4.0];
        assert_eq!(lr_at(&c, 1.9, 0.19), 0.1);
        assert_eq!(lr_at(&c, 2.0, 0.2), 0.05);
        assert_eq!(lr_at(&c, 5.0, 0.5), 0.025);
        c.lr_schedule = LrSchedule::Cosine;
        assert!((lr_at(&c, 5.0, 0.5) - 0.05).abs() < 1e-12);
        assert!(lr_at(&c, 10.0, 1.0).abs() < 1e-12);
        assert!(lr_at(&c, 12.0, 1.2).abs() < 1e-12, "past the end: 0");
        c.warmup_epochs = 1.0;
        assert!(
            (lr_at(&c, 0.5, 0.05)
                - 0.5
                    * lr_at(
                        &OptimConfig {
                            warmup_epochs: 0.0,
                            ..c.clone()
                        },
                        0.5,
                        0.05
                    ))
            .abs()
                < 1e-12
        );
    }
}
