//! Outer optimizers over deltas (see [`crate::config::OuterConfig`]): a delta is the
//! change an inner optimizer made over several steps, and the outer optimizer turns it into
//! the step the model takes. The arithmetic alone, over host slices: where deltas come from
//! and where steps go is the caller's (a gssp group server's exchange, an asynchronous
//! local-SGD server).

use crate::config::{OuterConfig, OuterKind};

/// Checkpoint tensor names of an outer optimizer's state.
pub const OUTER_MOMENTUM: &str = "outer.momentum";
pub const OUTER_ACCUMULATED: &str = "outer.accumulated";

/// One outer optimizer's state over a model of `n` values.
#[derive(Debug, Clone, PartialEq)]
pub struct Outer {
    kind: OuterKind,
    lr: f32,
    momentum: f32,
    period: u64,
    /// The momentum buffer.
    m: Vec<f32>,
    /// delayed-nesterov: the deltas since the last momentum update.
    acc: Vec<f32>,
    /// Deltas taken so far.
    steps: u64,
}

impl Outer {
    /// The optimizer `cfg` over `n` values for deltas from `senders` sources (what
    /// `period = 0` stands for); `None` for `kind = "none"` (every delta taken as it is,
    /// which needs no state).
    pub fn new(cfg: &OuterConfig, n: usize, senders: usize) -> Option<Outer> {
        if cfg.kind == OuterKind::None {
            return None;
        }
        let delayed = cfg.kind == OuterKind::DelayedNesterov;
        Some(Outer {
            kind: cfg.kind,
            lr: cfg.lr as f32,
            momentum: cfg.momentum as f32,
            period: match (delayed, cfg.period) {
                (false, _) => 1,
                (true, 0) => senders.max(1) as u64,
                (true, p) => p as u64,
            },
            m: vec![0.0; n],
            acc: if delayed { vec![0.0; n] } else { Vec::new() },
            steps: 0,
        })
    }

    /// Replaces `delta` (the model's length) by the step to take for it.
    pub fn step(&mut self, delta: &mut [f32]) {
        self.steps += 1;
        let (lr, beta) = (self.lr, self.momentum);
        match self.kind {
            OuterKind::None => {}
            OuterKind::Nesterov => {
                for (d, m) in delta.iter_mut().zip(&mut self.m) {
                    *m = beta * *m + *d;
                    *d = lr * (*d + beta * *m);
                }
            }
            OuterKind::DelayedNesterov => {
                let n = self.period as f32;
                for (d, a) in delta.iter_mut().zip(&mut self.acc) {
                    *a += *d;
                    *d *= lr / n;
                }
                if self.steps.is_multiple_of(self.period) {
                    let parts = delta.iter_mut().zip(&mut self.m).zip(&mut self.acc);
                    for ((d, m), a) in parts {
                        *m = beta * *m + *a / n;
                        *d += lr * beta * *m;
                        *a = 0.0;
                    }
                }
            }
        }
    }

    /// Deltas taken so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// What a checkpoint saves: the deltas taken, and the buffers by name.
    pub fn state(&self) -> (u64, Vec<(&'static str, &[f32])>) {
        let mut tensors = vec![(OUTER_MOMENTUM, self.m.as_slice())];
        if !self.acc.is_empty() {
            tensors.push((OUTER_ACCUMULATED, self.acc.as_slice()));
        }
        (self.steps, tensors)
    }

    /// Continues from a checkpoint's state: `steps` deltas taken, the buffers from `take`.
    pub fn restore<E>(
        &mut self,
        steps: u64,
        mut take: impl FnMut(&str) -> Result<Vec<f32>, E>,
    ) -> Result<(), E> {
        self.m = take(OUTER_MOMENTUM)?;
        if !self.acc.is_empty() {
            self.acc = take(OUTER_ACCUMULATED)?;
        }
        self.steps = steps;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outer(kind: OuterKind, lr: f64, momentum: f64, period: usize) -> Outer {
        let cfg = OuterConfig {
            kind,
            lr,
            momentum,
            period,
        };
        Outer::new(&cfg, 1, 1).expect("an outer optimizer")
    }

    #[test]
    fn none_needs_no_state_and_nesterov_at_rate_1_without_momentum_is_none() {
        let cfg = OuterConfig {
            kind: OuterKind::None,
            ..OuterConfig::default()
        };
        assert!(Outer::new(&cfg, 3, 2).is_none());
        let mut o = outer(OuterKind::Nesterov, 1.0, 0.0, 1);
        for d in [0.5f32, -2.0, 3.0] {
            let mut step = [d];
            o.step(&mut step);
            assert_eq!(step, [d]);
        }
    }

    #[test]
    fn nesterov_steps_by_hand() {
        // lr 0.5, momentum 0.5: m = 1, step 0.5 * (1 + 0.5) = 0.75; then m = 0.5 + 1 = 1.5,
        // step 0.5 * (1 + 0.75) = 0.875.
        let mut o = outer(OuterKind::Nesterov, 0.5, 0.5, 1);
        let mut step = [1.0f32];
        o.step(&mut step);
        assert_eq!(step, [0.75]);
        let mut step = [1.0f32];
        o.step(&mut step);
        assert_eq!(step, [0.875]);
    }

    #[test]
    fn delayed_nesterov_takes_lr_over_n_at_once_and_the_momentum_every_nth() {
        // lr 1, momentum 0.5, N = 2; deltas 2 and 4: the first step 2 / 2 = 1; the second
        // 4 / 2 = 2 plus, with m = 0.5 * 0 + (2 + 4) / 2 = 3, 1 * 0.5 * 3 = 1.5: 3.5.
        let mut o = outer(OuterKind::DelayedNesterov, 1.0, 0.5, 2);
        let mut step = [2.0f32];
        o.step(&mut step);
        assert_eq!(step, [1.0]);
        let mut step = [4.0f32];
        o.step(&mut step);
        assert_eq!(step, [3.5]);
        // Over N deltas it moves as far as one Nesterov step on their mean: 1 + 3.5.
        let mut n = outer(OuterKind::Nesterov, 1.0, 0.5, 1);
        let mut mean = [3.0f32];
        n.step(&mut mean);
        assert_eq!(mean, [1.0 + 3.5]);
    }

    #[test]
    fn a_restored_optimizer_continues_as_the_saved_one() {
        let mut a = outer(OuterKind::DelayedNesterov, 0.7, 0.9, 3);
        for d in [1.0f32, -0.5, 2.0, 0.25] {
            a.step(&mut [d]);
        }
        let (steps, tensors) = a.state();
        let saved: Vec<(String, Vec<f32>)> = tensors
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_vec()))
            .collect();
        let mut b = outer(OuterKind::DelayedNesterov, 0.7, 0.9, 3);
        b.restore(steps, |name| {
            saved
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
                .ok_or(())
        })
        .unwrap();
        for d in [0.5f32, 1.5, -1.0] {
            let (mut x, mut y) = ([d], [d]);
            a.step(&mut x);
            b.step(&mut y);
            assert_eq!(x, y);
        }
    }
}
