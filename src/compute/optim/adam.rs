//! Adam (Kingma and Ba; PyTorch's `torch.optim.Adam`): beta1 0.9, beta2 0.999, eps 1e-8
//! by default, bias-corrected.
//!
//! Weight decay is L2 added to the gradient, `g = scale * grad + weight_decay * w`, the
//! same place the SGD path puts it (and PyTorch's `Adam(weight_decay=...)`, not AdamW's
//! decoupled decay). As in [`super::Sgd`], a parameter server applying one of W workers'
//! pushes passes `share = 1/W`, which scales the decay so a round of W pushes decays once.
//! The step count t of the bias corrections counts updates (every push on a server),
//! since each update moves the moment estimates once.

use crate::compute::backend::{cpu, AdamStep, Backend};

/// Adam's constants.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamConfig {
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

impl Default for AdamConfig {
    /// PyTorch's defaults, and the seq2seq reference's.
    fn default() -> Self {
        AdamConfig {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
        }
    }
}

impl AdamConfig {
    /// The kernel's arguments for update number `t` (1-based): the bias corrections are
    /// computed here in f64, once per step rather than per value.
    fn step(&self, t: u64, lr: f64, scale: f32, share: f32) -> AdamStep {
        let t = t.min(i32::MAX as u64) as i32;
        AdamStep {
            lr: lr as f32,
            one_minus_beta1: (1.0 - self.beta1) as f32,
            one_minus_beta2: (1.0 - self.beta2) as f32,
            eps: self.eps as f32,
            weight_decay: (self.weight_decay as f32) * share,
            scale,
            bias_correction1: (1.0 - self.beta1.powi(t)) as f32,
            bias_correction2: (1.0 - self.beta2.powi(t)) as f32,
        }
    }
}

/// Adam over host buffers (a parameter server's replica), running the CPU backend's
/// kernel, the one [`BufAdam`] runs on a backend.
pub struct Adam {
    cfg: AdamConfig,
    m: Vec<f32>,
    v: Vec<f32>,
    t: u64,
}

impl Adam {
    pub fn new(num_params: usize, cfg: AdamConfig) -> Adam {
        Adam {
            cfg,
            m: vec![0.0; num_params],
            v: vec![0.0; num_params],
            t: 0,
        }
    }

    /// Updates so far.
    pub fn steps(&self) -> u64 {
        self.t
    }

    /// The first and second moment estimates (a checkpoint saves them).
    pub fn moments(&self) -> (&[f32], &[f32]) {
        (&self.m, &self.v)
    }

    /// Continues from saved moments after `steps` updates.
    ///
    /// # Panics
    /// If the lengths differ from this optimizer's (the caller checks the file first).
    pub fn restore(&mut self, m: &[f32], v: &[f32], steps: u64) {
        self.m.copy_from_slice(m);
        self.v.copy_from_slice(v);
        self.t = steps;
    }

    /// One update on `params` from `grads` scaled by `scale`, at learning rate `lr`,
    /// worth `share` of a synchronous step (1 for a full step).
    pub fn step(&mut self, params: &mut [f32], grads: &[f32], lr: f64, scale: f32, share: f32) {
        assert_eq!(
            params.len(),
            self.m.len(),
            "optimizer built for another model"
        );
        self.t += 1;
        let h = self.cfg.step(self.t, lr, scale, share);
        cpu::adam_step(params, &mut self.m, &mut self.v, grads, &h);
    }
}

/// Adam whose moments live on a backend, next to the parameters and gradients it updates
/// (a worker that steps its own model).
pub struct BufAdam<B: Backend> {
    cfg: AdamConfig,
    m: B::Buf,
    v: B::Buf,
    len: usize,
    t: u64,
}

impl<B: Backend> BufAdam<B> {
    pub fn new(be: &B, num_params: usize, cfg: AdamConfig) -> Self {
        BufAdam {
            cfg,
            m: be.alloc(num_params),
            v: be.alloc(num_params),
            len: num_params,
            t: 0,
        }
    }

    pub fn steps(&self) -> u64 {
        self.t
    }

    /// The moment estimates, copied to the host (a checkpoint saves them).
    pub fn moments_to_host(&self, be: &B, m: &mut [f32], v: &mut [f32]) {
        be.download(m, &self.m);
        be.download(v, &self.v);
    }

    /// Continues from saved moments after `steps` updates.
    pub fn moments_from_host(&mut self, be: &B, m: &[f32], v: &[f32], steps: u64) {
        be.upload(&mut self.m, m);
        be.upload(&mut self.v, v);
        self.t = steps;
    }

    /// A full step on the `num_params` values of `params` from `grads` scaled by `scale`.
    ///
    /// The backend's kernel runs over its whole moment buffers, so `params` and `grads`
    /// must hold at least [`BufAdam::len`] values.
    pub fn step(&mut self, be: &B, params: &mut B::Buf, grads: &B::Buf, lr: f64, scale: f32) {
        self.t += 1;
        let h = self.cfg.step(self.t, lr, scale, 1.0);
        be.adam_step(params, &mut self.m, &mut self.v, grads, &h);
    }

    /// Values it updates.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compute::backend::cpu::Cpu;

    #[test]
    fn matches_a_hand_computed_two_step_example() {
        // w = 1, lr 0.1, g = 0.5 then 0.25, defaults.
        // t=1: m = 0.05, v = 0.00025; m^ = 0.5, v^ = 0.25; w = 1 - 0.1 * 0.5 / (0.5 + 1e-8).
        // t=2: m = 0.045 + 0.025 = 0.07, v = 0.00024975 + 0.0000625 = 0.00031225;
        //      m^ = 0.07 / 0.19 = 0.368421, v^ = 0.00031225 / 0.001999 = 0.156203;
        //      w -= 0.1 * 0.368421 / (0.395225 + 1e-8) = 0.0932182.
        let mut adam = Adam::new(1, AdamConfig::default());
        let mut w = [1.0f32];
        adam.step(&mut w, &[0.5], 0.1, 1.0, 1.0);
        assert!((w[0] - 0.9).abs() < 1e-6, "{}", w[0]);
        adam.step(&mut w, &[0.25], 0.1, 1.0, 1.0);
        let want = 0.9 - 0.1 * (0.07 / 0.19) / ((0.00031225f64 / 0.001999).sqrt() + 1e-8);
        assert!((w[0] as f64 - want).abs() < 1e-6, "{} vs {want}", w[0]);
        assert_eq!(adam.steps(), 2);
    }

    #[test]
    fn bias_correction_makes_the_first_steps_lr_sized() {
        // Without bias correction the first step would be lr * 0.1 / sqrt(0.001) = 3.16 lr;
        // with it, every first step moves by lr whatever the gradient's size.
        for g in [1e-3f32, 1.0, 1e3] {
            let mut adam = Adam::new(2, AdamConfig::default());
            let mut w = [0.0f32, 0.0];
            adam.step(&mut w, &[g, -g], 0.01, 1.0, 1.0);
            assert!(
                (w[0] + 0.01).abs() < 1e-6 && (w[1] - 0.01).abs() < 1e-6,
                "{w:?}"
            );
        }
        // A constant gradient keeps moving by lr per step (m^ = g, v^ = g^2).
        let mut adam = Adam::new(1, AdamConfig::default());
        let mut w = [0.0f32];
        for _ in 0..50 {
            adam.step(&mut w, &[0.3], 0.01, 1.0, 1.0);
        }
        assert!((w[0] + 0.5).abs() < 1e-4, "{}", w[0]);
    }

    #[test]
    fn weight_decay_is_l2_on_the_gradient_and_scale_divides_the_gradient_only() {
        // g = 0.25 * 4 + 0.5 * 2 = 2: the first step moves by lr against it.
        let cfg = AdamConfig {
            weight_decay: 0.5,
            ..AdamConfig::default()
        };
        let mut adam = Adam::new(1, cfg);
        let mut w = [2.0f32];
        adam.step(&mut w, &[4.0], 0.1, 0.25, 1.0);
        assert!((w[0] - 1.9).abs() < 1e-6);
        // Zero gradient: decay alone still moves the weight towards 0.
        let mut adam = Adam::new(1, cfg);
        let mut w = [-2.0f32];
        adam.step(&mut w, &[0.0], 0.1, 1.0, 1.0);
        assert!((w[0] + 1.9).abs() < 1e-6);
    }

    #[test]
    fn the_backend_optimizer_matches_the_host_one() {
        let grads = [0.3f32, -1.2, 0.0, 4.0];
        let mut host = Adam::new(4, AdamConfig::default());
        let mut dev = BufAdam::new(&Cpu, 4, AdamConfig::default());
        let mut w_host = vec![0.5f32, -0.5, 1.0, 2.0];
        let mut w_dev = w_host.clone();
        for _ in 0..3 {
            host.step(&mut w_host, &grads, 0.01, 0.5, 1.0);
            dev.step(&Cpu, &mut w_dev, &grads.to_vec(), 0.01, 0.5);
        }
        assert_eq!(w_host, w_dev);
        assert_eq!(dev.steps(), 3);
    }
}
