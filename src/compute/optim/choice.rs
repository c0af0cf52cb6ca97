//! The optimizer a config selects (`optim.kind`), for the two places an optimizer runs:
//! a parameter server's host replica ([`HostOptimizer`]) and a worker's own network
//! ([`NetworkOptimizer`]: single process, allreduce, localsgd). Both clip by global norm
//! first when `optim.clip_norm > 0`; where that happens in each mode: docs/config.md.

use crate::compute::backend::Backend;
use crate::compute::model::Trainable;
use crate::config::{OptimConfig, OptimizerKind};

use super::adam::{Adam, AdamConfig, BufAdam};
use super::clip::{clip_grad_norm, ClipError};
use super::{NetworkSgd, Sgd};

use crate::checkpoint::{ADAM_M, ADAM_V, MOMENTUM};

fn adam_config(cfg: &OptimConfig) -> AdamConfig {
    AdamConfig {
        weight_decay: cfg.weight_decay,
        ..AdamConfig::default()
    }
}

/// SGD with momentum or Adam over host buffers (a parameter server).
pub enum HostOptimizer {
    Sgd(Sgd),
    Adam(Adam),
}

impl HostOptimizer {
    pub fn new(cfg: &OptimConfig, num_params: usize) -> HostOptimizer {
        match cfg.kind {
            OptimizerKind::Sgd => {
                HostOptimizer::Sgd(Sgd::new(num_params, cfg.momentum, cfg.weight_decay))
            }
            OptimizerKind::Adam => HostOptimizer::Adam(Adam::new(num_params, adam_config(cfg))),
        }
    }

    /// One update (see [`Sgd::step`]).
    pub fn step(&mut self, params: &mut [f32], grads: &[f32], lr: f64, scale: f32, share: f32) {
        match self {
            HostOptimizer::Sgd(o) => o.step(params, grads, lr, scale, share),
            HostOptimizer::Adam(o) => o.step(params, grads, lr, scale, share),
        }
    }

    /// The state a checkpoint saves, by tensor name, and the update count (Adam's t).
    pub fn state(&self) -> (Vec<(&'static str, &[f32])>, u64) {
        match self {
            HostOptimizer::Sgd(o) => (vec![(MOMENTUM, o.velocity())], 0),
            HostOptimizer::Adam(o) => {
                let (m, v) = o.moments();
                (vec![(ADAM_M, m), (ADAM_V, v)], o.steps())
            }
        }
    }

    /// Restores [`HostOptimizer::state`]: `take(name)` gives each tensor (of the right
    /// length, or the caller's error).
    pub fn restore<E>(
        &mut self,
        steps: u64,
        mut take: impl FnMut(&str) -> Result<Vec<f32>, E>,
    ) -> Result<(), E> {
        match self {
            HostOptimizer::Sgd(o) => o.velocity_mut().copy_from_slice(&take(MOMENTUM)?),
            HostOptimizer::Adam(o) => {
                let (m, v) = (take(ADAM_M)?, take(ADAM_V)?);
                o.restore(&m, &v, steps);
            }
        }
        Ok(())
    }
}

/// SGD with momentum or Adam over a network's own buffers, with clipping.
pub struct NetworkOptimizer<B: Backend> {
    kind: NetKind<B>,
    clip_norm: f64,
}

enum NetKind<B: Backend> {
    Sgd(NetworkSgd<B>),
    Adam(BufAdam<B>),
}

impl<B: Backend> NetworkOptimizer<B> {
    pub fn new(net: &impl Trainable<B>, cfg: &OptimConfig) -> Self {
        let kind = match cfg.kind {
            OptimizerKind::Sgd => {
                NetKind::Sgd(NetworkSgd::new(net, cfg.momentum, cfg.weight_decay))
            }
            OptimizerKind::Adam => NetKind::Adam(BufAdam::new(
                net.backend(),
                net.num_params(),
                adam_config(cfg),
            )),
        };
        NetworkOptimizer {
            kind,
            clip_norm: cfg.clip_norm,
        }
    }

    /// A full step from the network's gradient buffer scaled by `scale` (1, or 1/W for the
    /// sum of W workers' gradients). With clipping, the scaled gradient's global norm is
    /// first limited to `optim.clip_norm` (PyTorch clips the gradient it steps on; here
    /// that is the mean, so the sum's limit is `clip_norm / scale`).
    pub fn step(
        &mut self,
        net: &mut impl Trainable<B>,
        lr: f64,
        scale: f32,
    ) -> Result<(), ClipError> {
        if self.clip_norm > 0.0 {
            let (be, _, grads) = net.optimizer_buffers();
            let len = grads_len(&self.kind);
            clip_grad_norm(be, grads, len, self.clip_norm / f64::from(scale))?;
        }
        match &mut self.kind {
            NetKind::Sgd(o) => o.step(net, lr, scale),
            NetKind::Adam(o) => {
                let (be, params, grads) = net.optimizer_buffers();
                o.step(be, params, grads, lr, scale);
            }
        }
        Ok(())
    }

    /// The state a checkpoint saves, copied to the host, and the update count.
    pub fn state_to_host(&self, net: &impl Trainable<B>) -> (Vec<(&'static str, Vec<f32>)>, u64) {
        let n = net.num_params();
        match &self.kind {
            NetKind::Sgd(o) => {
                let mut v = vec![0.0; n];
                o.velocity_to_host(net, &mut v);
                (vec![(MOMENTUM, v)], 0)
            }
            NetKind::Adam(o) => {
                let (mut m, mut v) = (vec![0.0; n], vec![0.0; n]);
                o.moments_to_host(net.backend(), &mut m, &mut v);
                (vec![(ADAM_M, m), (ADAM_V, v)], o.steps())
            }
        }
    }

    /// Restores [`NetworkOptimizer::state_to_host`] (see [`HostOptimizer::restore`]).
    pub fn state_from_host<E>(
        &mut self,
        net: &impl Trainable<B>,
        steps: u64,
        mut take: impl FnMut(&str) -> Result<Vec<f32>, E>,
    ) -> Result<(), E> {
        match &mut self.kind {
            NetKind::Sgd(o) => o.velocity_from_host(net, &take(MOMENTUM)?),
            NetKind::Adam(o) => {
                let (m, v) = (take(ADAM_M)?, take(ADAM_V)?);
                o.moments_from_host(net.backend(), &m, &v, steps);
            }
        }
        Ok(())
    }
}

fn grads_len<B: Backend>(kind: &NetKind<B>) -> usize {
    match kind {
        NetKind::Sgd(o) => o.len(),
        NetKind::Adam(o) => o.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compute::backend::cpu::Cpu;
    use crate::compute::model::zoo;

    fn cfg(kind: OptimizerKind, clip_norm: f64) -> OptimConfig {
        OptimConfig {
            kind,
            clip_norm,
            momentum: 0.9,
            weight_decay: 0.0,
            ..OptimConfig::default()
        }
    }

    #[test]
    fn the_host_optimizer_is_the_configured_one() {
        let mut w = vec![1.0f32; 3];
        let mut a = HostOptimizer::new(&cfg(OptimizerKind::Adam, 0.0), 3);
        a.step(&mut w, &[10.0, -10.0, 0.0], 0.1, 1.0, 1.0);
        // Adam's first step moves each value by lr * sign(g) (bias-corrected), whatever |g|.
        assert!(
            (w[0] - 0.9).abs() < 1e-5 && (w[1] - 1.1).abs() < 1e-5,
            "{w:?}"
        );
        assert_eq!(w[2], 1.0);
        let (state, steps) = a.state();
        assert_eq!((state[0].0, state[1].0, steps), (ADAM_M, ADAM_V, 1));

        let mut b = HostOptimizer::new(&cfg(OptimizerKind::Adam, 0.0), 3);
        let saved: Vec<(String, Vec<f32>)> = state
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_vec()))
            .collect();
        b.restore::<()>(steps, |name| {
            Ok(saved
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
                .unwrap_or_default())
        })
        .unwrap();
        let (mut w1, mut w2) = (w.clone(), w.clone());
        a.step(&mut w1, &[1.0, 2.0, 3.0], 0.1, 1.0, 1.0);
        b.step(&mut w2, &[1.0, 2.0, 3.0], 0.1, 1.0, 1.0);
        assert_eq!(w1, w2, "a restored Adam continues exactly");

        let mut s = HostOptimizer::new(&cfg(OptimizerKind::Sgd, 0.0), 1);
        let mut x = [1.0f32];
        s.step(&mut x, &[0.5], 0.1, 1.0, 1.0);
        assert!((x[0] - 0.95).abs() < 1e-6);
        assert_eq!(s.state().0[0].0, MOMENTUM);
    }

    #[test]
    fn a_network_step_clips_the_mean_gradient() {
        for kind in [OptimizerKind::Sgd, OptimizerKind::Adam] {
            let mut net = zoo::mlp(Cpu, (1, 2, 2), &[3], 2, 1, 1);
            let n = net.num_params();
            let mut c = cfg(kind, 1.0);
            c.momentum = 0.0;
            let mut opt = NetworkOptimizer::new(&net, &c);
            // The sum of 4 workers' gradients, each of norm 3: the mean has norm 3.
            let g: Vec<f32> = (0..n).map(|i| if i == 0 { 12.0 } else { 0.0 }).collect();
            net.grads_from_host(&g);
            let before = net.params().to_vec();
            opt.step(&mut net, 0.5, 0.25).unwrap();
            let moved = before[0] - net.params()[0];
            // SGD: lr * clipped mean = 0.5 * 1.0; Adam's first step: lr * sign = 0.5.
            assert!((moved - 0.5).abs() < 1e-4, "{kind:?}: moved {moved}");
            let (state, _) = opt.state_to_host(&net);
            assert_eq!(state.len(), if kind == OptimizerKind::Sgd { 1 } else { 2 });
        }
    }

    #[test]
    fn a_non_finite_gradient_is_refused_by_clipping() {
        let mut net = zoo::mlp(Cpu, (1, 2, 2), &[3], 2, 1, 1);
        let mut g = vec![0.0f32; net.num_params()];
        g[1] = f32::NAN;
        net.grads_from_host(&g);
        let mut opt = NetworkOptimizer::new(&net, &cfg(OptimizerKind::Sgd, 1.0));
        assert!(matches!(
            opt.step(&mut net, 0.1, 1.0),
            Err(ClipError::NonFinite(_))
        ));
    }
}
