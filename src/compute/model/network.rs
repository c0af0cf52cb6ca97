//! An image classifier: a [`Sequential`] of layers over one flat parameter buffer, one
//! flat gradient buffer and one flat state buffer, all owned by the backend (its
//! [`FlatModel`]).
//!
//! All activation and scratch memory is allocated once for `max_batch` samples, so a
//! training step allocates nothing. The host sees the buffers only through
//! [`Trainable`]'s transfers: where gradients leave a worker, weights arrive and
//! snapshots are evaluated. On the CPU backend the buffers are host memory already, and
//! they are lent out without a copy.

use crate::compute::backend::Backend;

use super::compose::Sequential;
use super::flat::FlatModel;
use super::module::{shape_len, Allocator, Layer, Mode, Module, NamedTensors, Shape};
use super::trainable::Trainable;
use super::{mask_hash, BatchStats, ModelError};

/// An image classifier: a [`Sequential`] of layers over its [`FlatModel`], the input
/// batch and the loss.
pub struct Network<B: Backend> {
    name: String,
    body: Sequential<B>,
    input: Shape,
    classes: usize,
    max_batch: usize,
    model: FlatModel<B>,
    /// The input batch, uploaded.
    x: B::Buf,
    dlogits: B::Buf,
    /// Training forwards so far and this network's dropout stream (see
    /// [`Network::set_dropout_stream`]).
    steps: u64,
    dropout_stream: u64,
}

impl<B: Backend> Network<B> {
    /// The network `body` (built with `alloc`) on `be`, initialised from `seed` (the same
    /// weights on every rank).
    pub fn new(
        be: B,
        name: &str,
        alloc: Allocator,
        body: Sequential<B>,
        input: Shape,
        seed: u64,
    ) -> Self {
        let classes = shape_len(body.out_shape());
        let max_batch = alloc.max_batch;
        let x = be.alloc(max_batch * shape_len(input));
        let dlogits = be.alloc(max_batch * classes);
        let tensors = NamedTensors::of(&body);
        Network {
            model: FlatModel::new(be, &alloc, tensors, seed),
            x,
            dlogits,
            name: name.to_string(),
            body,
            input,
            classes,
            max_batch,
            steps: 0,
            dropout_stream: 0,
        }
    }

    pub fn input_shape(&self) -> Shape {
        self.input
    }
    pub fn input_len(&self) -> usize {
        shape_len(self.input)
    }
    pub fn classes(&self) -> usize {
        self.classes
    }
    pub fn max_batch(&self) -> usize {
        self.max_batch
    }
    /// Sets the count of training steps taken (dropout masks follow it), for a run resumed
    /// from a checkpoint.
    pub fn set_train_steps(&mut self, steps: u64) {
        self.steps = steps;
    }

    /// Draws dropout masks from `stream` from now on (each worker its own).
    pub fn set_dropout_stream(&mut self, stream: u64) {
        self.dropout_stream = stream;
    }

    /// Checks that a dataset's sample shape and class count fit this network.
    pub fn check_data_shape(&self, input: Shape, classes: usize) -> Result<(), ModelError> {
        if input != self.input {
            return Err(ModelError::InputShape {
                model: self.name.clone(),
                want: self.input,
                got: input,
            });
        }
        if classes > self.classes {
            return Err(ModelError::Classes {
                model: self.name.clone(),
                want: classes,
                got: self.classes,
            });
        }
        Ok(())
    }

    /// Forward pass over `n <= max_batch` samples of `x` (host) in `mode`; a training
    /// forward starts a new step (fresh dropout masks).
    fn forward(&mut self, x: &[f32], n: usize, mode: Mode) {
        if mode == Mode::Train {
            self.steps += 1;
        }
        self.run_forward(x, n, mode);
    }

    /// Forward pass within the current step.
    fn run_forward(&mut self, x: &[f32], n: usize, mode: Mode) {
        assert!(
            n <= self.max_batch,
            "batch {n} exceeds the workspace ({})",
            self.max_batch
        );
        assert_eq!(x.len(), n * self.input_len(), "input length");
        self.model
            .set_dropout_seed(mask_hash(self.dropout_stream, self.steps));
        let (be, flat) = self.model.parts_mut();
        be.upload(&mut self.x, x);
        self.body.forward(be, flat, &self.x, n, mode);
    }

    /// Loss and accuracy of `n` samples in evaluation mode, without touching the
    /// gradients.
    pub fn evaluate_batch(&mut self, x: &[f32], labels: &[u8], n: usize) -> BatchStats {
        self.forward(x, n, Mode::Eval);
        self.loss(labels, n)
    }

    fn loss(&mut self, labels: &[u8], n: usize) -> BatchStats {
        let (loss, correct) = self.model.backend().softmax_xent(
            &mut self.dlogits,
            self.body.output(),
            labels,
            n,
            self.classes,
        );
        BatchStats { loss, correct }
    }

    /// The training-mode loss of `n` samples with the dropout masks of the last
    /// [`Network::forward_backward`], touching neither gradients nor the step count
    /// (finite-difference checks). Batch norm still folds the batch into its running
    /// statistics, which training-mode outputs do not read.
    pub fn training_loss(&mut self, x: &[f32], labels: &[u8], n: usize) -> BatchStats {
        self.run_forward(x, n, Mode::Train);
        self.loss(labels, n)
    }

    /// The training-mode logits of `n` samples (`n x classes`, into `out`), as
    /// [`Network::training_loss`] computes them: for checks that reduce them to a loss at a
    /// higher precision than the step's f32 (finite differences).
    pub fn training_logits(&mut self, x: &[f32], n: usize, out: &mut [f32]) {
        assert_eq!(out.len(), n * self.classes, "logits length");
        self.run_forward(x, n, Mode::Train);
        self.model.backend().download(out, self.body.output());
    }

    /// Forward and backward over `n` samples in training mode: overwrites the gradient
    /// buffer with the gradient of the batch-mean cross-entropy and returns the batch's
    /// stats.
    pub fn forward_backward(&mut self, x: &[f32], labels: &[u8], n: usize) -> BatchStats {
        self.train_step(x, labels, n, false)
    }

    /// [`Network::forward_backward`], and also the gradient of the loss with respect to the
    /// input batch, into `dx` (`n * input_len()` values), which training never needs: the
    /// first layer's input gradient, for tests that compare whole backward passes.
    pub fn forward_backward_input_grad(
        &mut self,
        x: &[f32],
        labels: &[u8],
        n: usize,
        dx: &mut [f32],
    ) -> BatchStats {
        assert_eq!(dx.len(), n * self.input_len(), "input gradient length");
        let stats = self.train_step(x, labels, n, true);
        self.model.backend().download(dx, self.body.input_grad());
        stats
    }

    fn train_step(&mut self, x: &[f32], labels: &[u8], n: usize, need_dinp: bool) -> BatchStats {
        self.forward(x, n, Mode::Train);
        let stats = self.loss(labels, n);
        self.model.zero_grads();
        let (be, flat) = self.model.parts_mut();
        self.body
            .backward(be, flat, &self.x, &self.dlogits, n, need_dinp);
        stats
    }

    /// Folds batch number `batch` (from 0) of a re-estimation into a cumulative average
    /// of the batch-norm running statistics (PyTorch's `swa_utils.update_bn`).
    pub fn calibrate_batch(&mut self, x: &[f32], n: usize, batch: usize) {
        self.forward(x, n, Mode::Calibrate { batch });
    }
}

impl<B: Backend> Module<B> for Network<B> {
    /// The body's layers are the root's children: `0.weight`, as PyTorch's
    /// `nn.Sequential` names them.
    fn visit(&self, tensors: &mut NamedTensors) {
        self.body.visit(tensors);
    }

    /// The uploaded input, the logits' gradient and the layers' activations.
    fn activation_len(&self) -> usize {
        let own = self.max_batch * (shape_len(self.input) + 2 * self.classes);
        own + self.body.activation_len()
    }
}

impl<B: Backend> Trainable<B> for Network<B> {
    fn name(&self) -> &str {
        &self.name
    }
    fn flat_model(&self) -> &FlatModel<B> {
        &self.model
    }
    fn flat_model_mut(&mut self) -> &mut FlatModel<B> {
        &mut self.model
    }
    fn data_metadata(&self) -> Vec<(String, String)> {
        let (c, h, w) = self.input;
        vec![
            ("input".to_string(), format!("{c}x{h}x{w}")),
            ("classes".to_string(), self.classes.to_string()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compute::backend::cpu::Cpu;
    use crate::compute::model::zoo;

    /// Batch norm straight on a 2-channel input, then a linear classifier.
    fn bn_net() -> Network<Cpu> {
        zoo::custom(Cpu, "bn", (2, 2, 2), 4, 1, |b| {
            b.batchnorm().flatten().linear(3);
        })
    }

    fn batch(shift: f32) -> Vec<f32> {
        (0..4 * 8)
            .map(|i| ((i * 7 % 11) as f32) * 0.3 + shift)
            .collect()
    }

    /// Per channel of a `[4 x 2 x 2 x 2]` batch: (mean, unbiased variance).
    fn channel_stats(x: &[f32]) -> Vec<(f32, f32)> {
        (0..2)
            .map(|c| {
                let v: Vec<f32> = (0..4)
                    .flat_map(|i| x[i * 8 + c * 4..i * 8 + c * 4 + 4].to_vec())
                    .collect();
                let m = v.iter().sum::<f32>() / 16.0;
                let var = v.iter().map(|x| (x - m).powi(2)).sum::<f32>() / 15.0;
                (m, var)
            })
            .collect()
    }

    #[test]
    fn training_folds_batch_statistics_into_the_running_ones_and_evaluation_uses_them() {
        let mut net = bn_net();
        let (x, y) = (batch(1.0), [0u8, 1, 2, 0]);
        assert_eq!(
            net.state(),
            &[0.0, 0.0, 1.0, 1.0],
            "initial mean 0, variance 1"
        );
        for _ in 0..3 {
            net.forward_backward(&x, &y, 4);
        }
        let stats = channel_stats(&x);
        let kept = 1.0 - 0.9f32.powi(3);
        for (c, (mean, var)) in stats.iter().enumerate() {
            assert!((net.state()[c] - kept * mean).abs() < 1e-5);
            assert!((net.state()[2 + c] - (0.9f32.powi(3) + kept * var)).abs() < 1e-4);
        }
        // Evaluation normalises with the running statistics: a sample's loss does not
        // depend on the rest of its batch; in training mode it does.
        let alone = net.evaluate_batch(&x[..8], &y[..1], 1).loss;
        let mut other = batch(5.0);
        other[..8].copy_from_slice(&x[..8]);
        let eval_in = |net: &mut Network<Cpu>, xs: &[f32]| {
            net.evaluate_batch(xs, &[0, 0, 0, 0], 4);
            let logits = net.body.output()[..3].to_vec();
            logits
        };
        let a = eval_in(&mut net, &x);
        let b = eval_in(&mut net, &other);
        assert_eq!(a, b);
        assert!(alone.is_finite());
        let ta = net.training_loss(&x, &y, 4).loss;
        let tb = net.training_loss(&other, &y, 4).loss;
        assert_ne!(ta, tb);
    }

    #[test]
    fn calibration_replaces_running_statistics_with_the_sample_average() {
        let mut net = bn_net();
        let (a, b) = (batch(1.0), batch(-2.0));
        net.forward_backward(&batch(9.0), &[0, 1, 2, 0], 4);
        net.calibrate_batch(&a, 4, 0);
        net.calibrate_batch(&b, 4, 1);
        let (sa, sb) = (channel_stats(&a), channel_stats(&b));
        for c in 0..2 {
            let mean = (sa[c].0 + sb[c].0) / 2.0;
            let var = (sa[c].1 + sb[c].1) / 2.0;
            assert!((net.state()[c] - mean).abs() < 1e-5, "{:?}", net.state());
            assert!((net.state()[2 + c] - var).abs() < 1e-4, "{:?}", net.state());
        }
    }
}
