//! The parameter server's update rule, independent of the transport (as in ps-lite):
//! it applies pushes, keeps the SSP clocks and says which workers get weights now.
//!
//! - `Apply::Immediate` (asp, ssp, gssp groups): every push is one optimizer step on the
//!   gradient scaled by 1/W, W counting the workers of all groups, so one round of all W
//!   workers equals one synchronous step on their mean gradient in every mode (in gssp the
//!   groups' changes are summed across servers by the exchange).
//! - `Apply::Round` (bsp): pushes are summed until every active worker has pushed, then
//!   one step on the mean.
//! - `Apply::Delta` (async-localsgd): a push is the change a worker's local steps made to
//!   the weights it received; the server's outer optimizer turns it into a step, applied
//!   at once (no inner optimizer, no 1/W: the outer optimizer's period does the averaging).
//!   gssp with local steps applies a change scaled by 1/W instead ([`ParamServer::with_delta_scale`]),
//!   as it scales a gradient: a change of H local steps at lr is worth H gradient pushes at lr.
//!
//! A push's staleness is the number of optimizer steps applied between the weights its
//! worker received and its arrival. With [`StalenessLr::Inverse`] an immediate push of
//! staleness t is applied at `lr / max(1, t)`, so that old gradients move the model less.
//! With delay compensation lambda > 0 (DC-ASGD, Zheng et al., ICML 2017) an immediate push's
//! gradient g, computed at the weights w_then its worker received, is corrected to the
//! weights w_now it is applied to by a first-order term with the diagonal of g g^T standing
//! in for the Hessian: `g + lambda * g * g * (w_now - w_then)`, elementwise. The server keeps
//! each worker's w_then (one model copy per worker).

use crate::compute::backend::cpu::Cpu;
use crate::compute::optim::{clip_grad_norm, ClipError, HostOptimizer, Outer, Sgd};
use crate::config::StalenessLr;
use crate::protocol::ssp_clock::SspClock;

/// How a push is applied: each mode's strategy says which
/// ([`crate::config::modes::Mode::apply`]).
pub use crate::config::modes::Apply;

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
    /// DC-ASGD's lambda (0: no compensation); immediate pushes only.
    pub delay_compensation: f64,
    /// Global-norm limit of the gradient each optimizer step uses (0: none): a push's
    /// gradient (immediate), or the round's mean (bsp).
    pub clip_norm: f64,
    /// Workers compute a step ahead (`sync.overlap`): each push was computed on the reply
    /// before the worker's latest, which its staleness and DC-ASGD's correction count
    /// from. The caller's `bound` is already the release gate.
    pub reads_ahead: bool,
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
    optimizer: HostOptimizer,
    clip_norm: f64,
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
    /// What each worker's next push is computed on.
    reads: Reads,
    /// Staleness of each worker's latest push, returned to it with its next weights.
    last_staleness: Vec<u64>,
    /// DC-ASGD's lambda (the weights it corrects from are in `reads`).
    compensation: f32,
    /// The compensated gradient of the push being applied (`Apply::Delta`: the step).
    corrected: Vec<f32>,
    /// `Apply::Delta`: the outer optimizer (`None`: each change as it is).
    outer: Option<Outer>,
    /// `Apply::Delta`: the factor each change is taken at before the outer optimizer.
    delta_scale: f32,
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
        let kept = compensates(&rule).then_some(&weights[..]);
        let reads = Reads::new(rule.workers, rule.reads_ahead, kept);
        let rewrites = compensates(&rule)
            || (rule.clip_norm > 0.0 && rule.apply == Apply::Immediate)
            || rule.apply == Apply::Delta;
        ParamServer {
            optimizer: HostOptimizer::Sgd(Sgd::new(n, rule.momentum, rule.weight_decay)),
            clip_norm: rule.clip_norm,
            corrected: if rewrites { vec![0.0; n] } else { Vec::new() },
            weights,
            clock: SspClock::new(rule.workers, rule.bound),
            apply: rule.apply,
            staleness_lr: rule.staleness_lr,
            round_sum,
            round_pushes: 0,
            active: rule.workers,
            scale: 1.0 / rule.total_workers.max(1) as f32,
            version: 0,
            reads,
            last_staleness: vec![0; rule.workers],
            compensation: rule.delay_compensation as f32,
            outer: None,
            delta_scale: 1.0,
        }
    }

    /// `Apply::Delta`: steps on each pushed change through `outer`.
    pub fn with_outer(mut self, outer: Option<Outer>) -> Self {
        self.outer = outer;
        self
    }

    /// `Apply::Delta`: takes each pushed change at `scale` (gssp's local steps: 1/W, as a
    /// gradient push is, so that a round of every worker's change is their mean).
    pub fn with_delta_scale(mut self, scale: f32) -> Self {
        self.delta_scale = scale;
        self
    }

    /// The outer optimizer, if any (its steps are counted in the summary).
    pub fn outer(&self) -> Option<&Outer> {
        self.outer.as_ref()
    }

    /// Replaces the default optimizer (SGD from the rule's momentum and weight decay).
    pub fn with_optimizer(mut self, optimizer: HostOptimizer) -> Self {
        self.optimizer = optimizer;
        self
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

    /// The optimizer (a checkpoint saves its state).
    pub fn optimizer(&self) -> &HostOptimizer {
        &self.optimizer
    }

    pub fn optimizer_mut(&mut self) -> &mut HostOptimizer {
        &mut self.optimizer
    }

    /// Continues from a checkpoint taken at a quiet point: `weights`, model `version` and
    /// each worker's clock (the optimizer's state through [`ParamServer::optimizer_mut`]).
    /// Every worker is then waiting for weights (its in-flight push, if any, was lost with
    /// the job) and gets the current version.
    ///
    /// # Panics
    /// If the lengths do not match this server (the caller checks the file first).
    pub fn restore(&mut self, weights: &[f32], version: u64, clocks: &[u64]) {
        self.weights.copy_from_slice(weights);
        self.version = version;
        self.clock = SspClock::restore(clocks, self.clock.bound());
        self.reads.reset_all(version, weights);
    }

    /// Handles worker `w`'s gradient at the schedule's learning rate `lr`. Fails, with
    /// nothing applied, when the gradient to step on is not finite (a delay-compensated
    /// push can overflow where its gradient did not).
    pub fn on_push(&mut self, w: usize, grad: &[f32], lr: f64) -> Result<Applied, ClipError> {
        let staleness = self.version - self.reads.version(w);
        self.last_staleness[w] = staleness;
        self.clock.on_push(w);
        let mut applied = Applied { staleness, lr };
        match self.apply {
            Apply::Immediate => {
                applied.lr = push_lr(self.staleness_lr, lr, staleness);
                let grad = if self.corrected.is_empty() {
                    grad
                } else {
                    match self.reads.weights(w) {
                        None => self.corrected.copy_from_slice(grad),
                        Some(then) => delay_compensate(
                            &mut self.corrected,
                            grad,
                            &self.weights,
                            then,
                            self.compensation,
                        ),
                    }
                    // A worker's batch gradient, clipped as PyTorch clips the gradient of
                    // its step.
                    if self.clip_norm > 0.0 {
                        let n = self.weights.len();
                        clip_grad_norm(&Cpu, &mut self.corrected, n, self.clip_norm)?;
                    }
                    &self.corrected
                };
                self.optimizer
                    .step(&mut self.weights, grad, applied.lr, self.scale, self.scale);
                self.version += 1;
            }
            Apply::Delta => {
                let scale = self.delta_scale;
                for (c, g) in self.corrected.iter_mut().zip(grad) {
                    *c = scale * g;
                }
                if let Some(outer) = self.outer.as_mut() {
                    outer.step(&mut self.corrected);
                }
                for (w, s) in self.weights.iter_mut().zip(&self.corrected) {
                    *w += s;
                }
                self.version += 1;
            }
            Apply::Round => {
                for (s, g) in self.round_sum.iter_mut().zip(grad) {
                    *s += g;
                }
                self.round_pushes += 1;
                if self.round_pushes >= self.active {
                    let scale = 1.0 / self.round_pushes as f32;
                    if self.clip_norm > 0.0 {
                        // The round's mean gradient to the limit: its sum to limit / scale.
                        let limit = self.clip_norm / f64::from(scale);
                        let n = self.weights.len();
                        clip_grad_norm(&Cpu, &mut self.round_sum, n, limit)?;
                    }
                    self.optimizer
                        .step(&mut self.weights, &self.round_sum, lr, scale, 1.0);
                    self.round_sum.fill(0.0);
                    self.round_pushes = 0;
                    self.version += 1;
                }
            }
        }
        Ok(applied)
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
            self.reads.sent(w, self.version, &self.weights);
        }
    }

    /// Worker `w` moved to another group's server (regrouping): it no longer holds the others
    /// back, and pushes from it are no longer expected.
    pub fn leave(&mut self, w: usize) {
        self.clock.leave(w);
    }

    /// Worker `w` joined from another group and is sent the current weights now: its
    /// staleness counts from this version, its clock from the slowest present worker's.
    pub fn join(&mut self, w: usize) {
        self.clock.join(w);
        self.reads.reset(w, self.version, &self.weights);
    }

    /// Worker `w`, released already, waits again for weights at its clock
    /// ([`SspClock::wait_again`]).
    pub fn wait_again(&mut self, w: usize) {
        self.clock.wait_again(w);
    }

    /// Worker `w` has been told to stop; it no longer holds the others back.
    pub fn retire(&mut self, w: usize) {
        if !self.clock.is_retired(w) {
            self.clock.retire(w);
            self.active = self.active.saturating_sub(1);
        }
    }
}

/// The version, and for DC-ASGD the weights, each worker's next push is computed on: the
/// reply it got last, or with workers that compute a step ahead the one before (a worker
/// pushes step c + 1 once reply c arrived, having computed it on reply c - 1).
struct Reads {
    ahead: bool,
    /// Each worker's latest reply's version, and the one before.
    versions: Vec<[u64; 2]>,
    /// DC-ASGD: each worker's latest reply's weights, and the one before (`ahead` only).
    latest: Vec<Vec<f32>>,
    before: Vec<Vec<f32>>,
}

impl Reads {
    /// `workers` that all got version 0, `weights` (kept only where given: DC-ASGD).
    fn new(workers: usize, ahead: bool, weights: Option<&[f32]>) -> Reads {
        let keep = |on: bool| match (on, weights) {
            (true, Some(w)) => vec![w.to_vec(); workers],
            _ => Vec::new(),
        };
        Reads {
            ahead,
            versions: vec![[0, 0]; workers],
            latest: keep(true),
            before: keep(ahead),
        }
    }

    /// Worker `w` was sent `version`, `weights`: its latest reply, and with `ahead` the
    /// one it computes its next push on becomes the reply it had.
    fn sent(&mut self, w: usize, version: u64, weights: &[f32]) {
        let v = &mut self.versions[w];
        v[1] = if self.ahead { v[0] } else { version };
        v[0] = version;
        if let Some(latest) = self.latest.get_mut(w) {
            if let Some(before) = self.before.get_mut(w) {
                std::mem::swap(latest, before);
            }
            latest.copy_from_slice(weights);
        }
    }

    /// Worker `w` starts from `version`, `weights` with nothing computed ahead (a join, a
    /// restored checkpoint).
    fn reset(&mut self, w: usize, version: u64, weights: &[f32]) {
        self.versions[w] = [version, version];
        for kept in [&mut self.latest, &mut self.before] {
            if let Some(k) = kept.get_mut(w) {
                k.copy_from_slice(weights);
            }
        }
    }

    /// Every worker starts from `version`, `weights` ([`Reads::reset`]).
    fn reset_all(&mut self, version: u64, weights: &[f32]) {
        for w in 0..self.versions.len() {
            self.reset(w, version, weights);
        }
    }

    /// The version worker `w`'s next push is computed on.
    fn version(&self, w: usize) -> u64 {
        self.versions[w][1]
    }

    /// DC-ASGD: the weights worker `w`'s next push is computed on (`None`: not kept).
    fn weights(&self, w: usize) -> Option<&[f32]> {
        let kept = if self.ahead {
            &self.before
        } else {
            &self.latest
        };
        kept.get(w).map(Vec::as_slice)
    }
}

/// Whether `rule` keeps per-worker weights for DC-ASGD.
fn compensates(rule: &UpdateRule) -> bool {
    rule.apply == Apply::Immediate && rule.delay_compensation > 0.0
}

/// DC-ASGD's corrected gradient: `out = g + lambda * g * g * (now - then)`, elementwise.
pub fn delay_compensate(out: &mut [f32], g: &[f32], now: &[f32], then: &[f32], lambda: f32) {
    for (((o, &g), &a), &b) in out.iter_mut().zip(g).zip(now).zip(then) {
        *o = g + lambda * g * g * (a - b);
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
            delay_compensation: 0.0,
            clip_norm: 0.0,
            reads_ahead: false,
        }
    }

    #[test]
    fn a_pushed_change_is_stepped_on_by_the_outer_optimizer_at_once() {
        use crate::config::{OuterConfig, OuterKind};
        // Delayed Nesterov over 2 workers (period 0), lr 1, momentum 0.5: changes 2 and 4
        // move the weight by 2 / 2 = 1, then 4 / 2 + 0.5 * (2 + 4) / 2 = 3.5.
        let cfg = OuterConfig {
            kind: OuterKind::DelayedNesterov,
            lr: 1.0,
            momentum: 0.5,
            period: 0,
        };
        let outer = Outer::new(&cfg, 1, 2);
        let mut ps = ParamServer::new(vec![10.0], rule(2, 2, None, Apply::Delta)).with_outer(outer);
        let applied = ps.on_push(0, &[2.0], 0.1).unwrap();
        assert_eq!((ps.weights(), applied.staleness), (&[11.0][..], 0));
        ps.on_push(1, &[4.0], 0.1).unwrap();
        assert_eq!(ps.weights(), [14.5]);
        assert_eq!((ps.version(), ps.outer().map(Outer::steps)), (2, Some(2)));
        // Without an outer optimizer a change is added as it is.
        let mut ps = ParamServer::new(vec![1.0], rule(1, 1, None, Apply::Delta));
        ps.on_push(0, &[0.5], 0.1).unwrap();
        assert_eq!(ps.weights(), [1.5]);
        // gssp's local steps: each change at 1/W of 4 workers, whatever the lr.
        let mut ps =
            ParamServer::new(vec![1.0], rule(2, 4, Some(1), Apply::Delta)).with_delta_scale(0.25);
        ps.on_push(0, &[2.0], 0.1).unwrap();
        ps.on_push(1, &[-4.0], 0.1).unwrap();
        assert_eq!((ps.weights(), ps.version()), (&[0.5][..], 2));
    }

    #[test]
    fn delay_compensation_corrects_a_stale_gradient_to_the_current_weights() {
        // Hand-computed: two workers, lr 1, lambda 0.5, weights start at [1, 2].
        let mut r = rule(2, 2, None, Apply::Immediate);
        r.delay_compensation = 0.5;
        let mut ps = ParamServer::new(vec![1.0, 2.0], r);
        let mut out = Vec::new();
        // Both hold [1, 2]. Worker 0, fresh (w_now = w_then): no correction;
        // w = [1, 2] - [2, 4] / 2 = [0, 0].
        ps.release(&mut out);
        ps.on_push(0, &[2.0, 4.0], 1.0).unwrap();
        assert_eq!(ps.weights(), &[0.0, 0.0]);
        // Worker 1 computed g = [2, -1] at [1, 2]; now w = [0, 0], w_now - w_then = [-1, -2].
        // Corrected: [2 + 0.5 * 4 * -1, -1 + 0.5 * 1 * -2] = [0, -2]; w = [0, 0] - [0, -2] / 2.
        ps.on_push(1, &[2.0, -1.0], 1.0).unwrap();
        assert_eq!(ps.weights(), &[0.0, 1.0]);
        // Both released now, at [0, 1]: a push from either right away is uncorrected.
        ps.release(&mut out);
        assert_eq!(out, vec![0, 1]);
        ps.on_push(1, &[2.0, 2.0], 1.0).unwrap();
        assert_eq!(ps.weights(), &[-1.0, 0.0]);
        // Worker 0 computed at [0, 1]; w_now - w_then = [-1, -1]:
        // corrected [4 + 0.5 * 16 * -1, 2 + 0.5 * 4 * -1] = [-4, 0]; w = [-1, 0] - [-4, 0] / 2.
        ps.on_push(0, &[4.0, 2.0], 1.0).unwrap();
        assert_eq!(ps.weights(), &[1.0, 0.0]);
    }

    /// `sync.overlap`: a worker's push c + 1 was computed on reply c - 1, so its staleness
    /// counts the worker's own push c, and DC-ASGD corrects from reply c - 1's weights.
    #[test]
    fn a_push_computed_ahead_counts_from_the_reply_before_the_latest() {
        let mut r = rule(1, 1, Some(0), Apply::Immediate);
        r.reads_ahead = true;
        let mut ps = ParamServer::new(vec![0.0], r);
        let mut out = Vec::new();
        // Push 1 and push 2 were both computed on the first weights (version 0).
        assert_eq!(ps.on_push(0, &[1.0], 1.0).unwrap().staleness, 0);
        ps.release(&mut out);
        assert_eq!(ps.on_push(0, &[1.0], 1.0).unwrap().staleness, 1);
        ps.release(&mut out);
        // From then on each push misses exactly the worker's own push before it.
        for _ in 0..3 {
            assert_eq!(ps.on_push(0, &[1.0], 1.0).unwrap().staleness, 1);
            ps.release(&mut out);
        }
        // A joining worker computed nothing ahead on this server's weights.
        ps.join(0);
        assert_eq!(ps.on_push(0, &[1.0], 1.0).unwrap().staleness, 0);
    }

    #[test]
    fn delay_compensation_of_a_push_computed_ahead_uses_the_weights_it_was_computed_on() {
        let mut r = rule(1, 1, None, Apply::Immediate);
        (r.delay_compensation, r.reads_ahead) = (0.5, true);
        let mut ps = ParamServer::new(vec![0.0], r);
        let mut out = Vec::new();
        // w: 0 -> -1 (push 1 at 0, uncorrected: nothing moved since reply 0).
        ps.on_push(0, &[1.0], 1.0).unwrap();
        ps.release(&mut out);
        assert_eq!(ps.weights(), &[-1.0]);
        // Push 2 was computed at reply 0 (w = 0): corrected 2 + 0.5 * 4 * (-1 - 0) = 0.
        ps.on_push(0, &[2.0], 1.0).unwrap();
        assert_eq!(ps.weights(), &[-1.0]);
        ps.release(&mut out);
        // Push 3 was computed at reply 1 (w = -1), now -1: uncorrected, w = -1 - 2 = -3.
        ps.on_push(0, &[2.0], 1.0).unwrap();
        assert_eq!(ps.weights(), &[-3.0]);
    }

    #[test]
    fn a_compensated_gradient_that_overflows_is_refused_with_nothing_applied() {
        let mut r = rule(2, 2, None, Apply::Immediate);
        (r.delay_compensation, r.clip_norm) = (1e30, 1.0);
        let mut ps = ParamServer::new(vec![1.0], r);
        let mut out = Vec::new();
        ps.release(&mut out);
        ps.on_push(0, &[2.0], 1.0).unwrap();
        let before = (ps.weights().to_vec(), ps.version());
        // lambda g^2 (w_now - w_then) = 1e30 * 1e20 * -1: beyond f32.
        let err = ps.on_push(1, &[1e10], 1.0).unwrap_err();
        assert!(matches!(err, ClipError::NonFinite(_)), "{err}");
        assert_eq!((ps.weights().to_vec(), ps.version()), before);
    }

    #[test]
    fn delay_compensation_formula() {
        let mut out = [0.0f32; 3];
        delay_compensate(
            &mut out,
            &[1.0, -2.0, 0.0],
            &[3.0, 1.0, 5.0],
            &[1.0, 2.0, -5.0],
            0.25,
        );
        // [1 + 0.25 * 1 * 2, -2 + 0.25 * 4 * -1, 0 + 0] = [1.5, -3, 0]
        assert_eq!(out, [1.5, -3.0, 0.0]);
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
            ps.on_push(0, &[4.0], 1.0).unwrap(),
            Applied {
                staleness: 0,
                lr: 1.0
            }
        );
        assert_eq!(ps.weights(), &[-2.0]);
        ps.release(&mut out);
        ps.on_push(0, &[4.0], 1.0).unwrap(); // version 2, worker 1 still on version 0
        assert_eq!(ps.weights(), &[-4.0]);
        // Worker 1 computed on version 0, two steps ago: half the step.
        assert_eq!(
            ps.on_push(1, &[4.0], 1.0).unwrap(),
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
        ps.on_push(0, &[1.0], 1.0).unwrap();
        assert_eq!(ps.on_push(1, &[3.0], 1.0).unwrap().lr, 1.0);
        assert_eq!(ps.weights(), &[-2.0]);
    }

    #[test]
    fn round_mode_steps_once_on_the_mean_of_all_pushes() {
        let mut ps = ParamServer::new(vec![0.0; 2], rule(2, 2, Some(0), Apply::Round));
        let mut out = Vec::new();
        assert_eq!(ps.on_push(0, &[1.0, 2.0], 1.0).unwrap().staleness, 0);
        ps.release(&mut out);
        assert!(out.is_empty(), "bsp waits for everyone");
        assert_eq!(ps.weights(), &[0.0, 0.0]);
        ps.on_push(1, &[3.0, 4.0], 1.0).unwrap();
        ps.release(&mut out);
        assert_eq!(out, vec![0, 1]);
        assert_eq!(ps.weights(), &[-2.0, -3.0]);
        assert_eq!(ps.version(), 1);
    }

    #[test]
    fn immediate_mode_scales_each_push_by_one_over_w_and_counts_staleness() {
        let mut ps = ParamServer::new(vec![0.0], rule(4, 4, None, Apply::Immediate));
        let mut out = Vec::new();
        ps.on_push(0, &[4.0], 1.0).unwrap();
        assert_eq!(ps.weights(), &[-1.0]);
        ps.release(&mut out);
        assert_eq!(out, vec![0], "asp answers at once");
        // Worker 1 computed on version 0; one step has been applied since.
        assert_eq!(ps.on_push(1, &[4.0], 1.0).unwrap().staleness, 1);
        assert_eq!(
            ps.on_push(0, &[4.0], 1.0).unwrap().staleness,
            1,
            "worker 0 got version 1, now 2"
        );
    }

    #[test]
    fn a_group_server_scales_by_the_workers_of_all_groups() {
        let mut ps = ParamServer::new(vec![0.0], rule(2, 8, Some(3), Apply::Immediate));
        ps.on_push(0, &[8.0], 1.0).unwrap();
        assert_eq!(ps.weights(), &[-1.0]);
    }

    #[test]
    fn a_restored_server_releases_only_the_workers_the_bound_allows() {
        let mut ps = ParamServer::new(vec![0.0; 2], rule(3, 3, Some(1), Apply::Immediate));
        ps.restore(&[1.0, 2.0], 9, &[5, 3, 4]);
        assert_eq!((ps.weights(), ps.version()), (&[1.0, 2.0][..], 9));
        let mut out = Vec::new();
        ps.release(&mut out);
        assert_eq!(
            out,
            vec![1, 2],
            "worker 0 is 2 ahead of worker 1, over the bound"
        );
        assert_eq!(
            ps.on_push(1, &[0.0, 0.0], 0.1).unwrap().staleness,
            0,
            "got version 9"
        );
        ps.release(&mut out);
        assert_eq!(out, vec![1, 2, 0, 1]);
    }

    #[test]
    fn clipping_limits_each_push_and_each_round_mean() {
        let mut r = rule(2, 2, None, Apply::Immediate);
        r.clip_norm = 1.0;
        let mut ps = ParamServer::new(vec![0.0; 2], r);
        // g = [3, 4] (norm 5) clipped to [0.6, 0.8], scaled by 1/2.
        ps.on_push(0, &[3.0, 4.0], 1.0).unwrap();
        assert!((ps.weights()[0] + 0.3).abs() < 1e-5 && (ps.weights()[1] + 0.4).abs() < 1e-5);
        let mut r = rule(2, 2, Some(0), Apply::Round);
        r.clip_norm = 1.0;
        let mut ps = ParamServer::new(vec![0.0; 2], r);
        ps.on_push(0, &[6.0, 0.0], 1.0).unwrap();
        ps.on_push(1, &[0.0, 8.0], 1.0).unwrap();
        // Mean [3, 4], norm 5, clipped to [0.6, 0.8].
        assert!((ps.weights()[0] + 0.6).abs() < 1e-5 && (ps.weights()[1] + 0.8).abs() < 1e-5);
    }

    #[test]
    fn retiring_a_worker_completes_a_bsp_round_without_it() {
        let mut ps = ParamServer::new(vec![0.0], rule(2, 2, Some(0), Apply::Round));
        ps.retire(1);
        ps.on_push(0, &[2.0], 1.0).unwrap();
        assert_eq!(ps.weights(), &[-2.0]);
    }
}
