//! Networks: a [`Sequential`] of modules over one flat parameter buffer, one flat
//! gradient buffer and one flat state buffer, all owned by the backend.
//!
//! All activation and scratch memory is allocated once for `max_batch` samples, so a
//! training step allocates nothing. The host sees the buffers only through
//! [`Network::params_to_host`], [`Network::params_from_host`],
//! [`Network::grads_to_host`] and the state copies: where gradients leave a worker,
//! weights arrive and snapshots are evaluated. On the CPU backend the buffers are host
//! memory already, and `Network<Cpu>` lends them out without a copy.

pub mod builder;
pub mod compose;
pub mod embedding;
pub mod export;
pub mod layers;
pub mod lstm;
pub mod module;
pub mod seq2seq;
pub mod trainable;
pub mod zoo;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::compute::backend::cpu::Cpu;
use crate::compute::backend::Backend;
pub use builder::Builder;
use compose::Sequential;
pub use module::{shape_len, Flat, Init, Mode, Module, Plan, Shape, TensorSpec};
pub use trainable::Trainable;

/// Loss and accuracy of one forward pass.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchStats {
    /// Mean cross-entropy over the batch.
    pub loss: f32,
    /// Samples whose arg-max logit equals the label.
    pub correct: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(
        "model {model}: needs input {want:?} (channels, height, width), the dataset has {got:?}"
    )]
    InputShape {
        model: String,
        want: Shape,
        got: Shape,
    },
    #[error("model {model}: the last layer has {got} outputs, the dataset has {want} classes")]
    Classes {
        model: String,
        want: usize,
        got: usize,
    },
    #[error("model {model} translates token sequences: it trains on dataset multi30k")]
    NotImage { model: &'static str },
    #[error("embedding: token id {id} is outside the vocabulary of {vocab} tokens")]
    TokenId { id: u32, vocab: usize },
    #[error("{layer}: {what} {got} is below the {min} it needs")]
    TooSmall {
        layer: &'static str,
        what: &'static str,
        got: usize,
        min: usize,
    },
    #[error("{layer}: {what} {got} exceeds the {max} it was built for")]
    TooLarge {
        layer: &'static str,
        what: &'static str,
        got: usize,
        max: usize,
    },
}

pub struct Network<B: Backend> {
    be: B,
    name: String,
    body: Sequential<B>,
    input: Shape,
    classes: usize,
    max_batch: usize,
    flat: Flat<B>,
    params: Vec<TensorSpec>,
    state: Vec<TensorSpec>,
    /// The input batch, uploaded.
    x: B::Buf,
    dlogits: B::Buf,
    /// Training forwards so far and this network's dropout stream (see
    /// [`Network::set_dropout_stream`]).
    steps: u64,
    dropout_stream: u64,
}

/// A standard normal draw (Box-Muller; the crate has no `rand_distr`).
fn normal(rng: &mut ChaCha8Rng) -> f32 {
    // 1 - U(0, 1) lies in (0, 1], so the logarithm is finite.
    let u1 = 1.0 - rng.gen::<f64>();
    let u2 = rng.gen::<f64>();
    ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
}

/// Initial values of the tensors `specs` describe, drawn in order from `seed` (public
/// for models assembled outside [`Network`], such as the recurrent layers' tests).
pub fn initial_values(specs: &[TensorSpec], seed: u64) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut v = vec![0.0; specs.last().map_or(0, |s| s.range.end)];
    for s in specs {
        let dst = &mut v[s.range.clone()];
        match s.init {
            Init::KaimingUniform { fan_in } => {
                let bound = 1.0 / (fan_in as f32).sqrt();
                dst.iter_mut()
                    .for_each(|p| *p = rng.gen_range(-bound..bound));
            }
            Init::Uniform { bound } => dst
                .iter_mut()
                .for_each(|p| *p = rng.gen_range(-bound..bound)),
            Init::Normal { std } => dst.iter_mut().for_each(|p| *p = std * normal(&mut rng)),
            Init::Ones => dst.fill(1.0),
            Init::Zeros => dst.fill(0.0),
        }
    }
    v
}

impl<B: Backend> Network<B> {
    /// The network `body` (built with `plan`) on `be`, initialised from `seed` (the same
    /// weights on every rank).
    pub fn new(
        be: B,
        name: &str,
        plan: Plan,
        body: Sequential<B>,
        input: Shape,
        seed: u64,
    ) -> Self {
        let classes = shape_len(body.out_shape());
        let max_batch = plan.max_batch;
        let mut flat = Flat {
            params: be.alloc(plan.num_params()),
            grads: be.alloc(plan.num_params()),
            state: be.alloc(plan.num_state()),
            scratch: be.alloc(plan.scratch),
            dropout_seed: 0,
        };
        be.upload(&mut flat.params, &initial_values(&plan.params, seed));
        be.upload(&mut flat.state, &initial_values(&plan.state, seed));
        Network {
            x: be.alloc(max_batch * shape_len(input)),
            dlogits: be.alloc(max_batch * classes),
            be,
            name: name.to_string(),
            body,
            input,
            classes,
            max_batch,
            flat,
            params: plan.params,
            state: plan.state,
            steps: 0,
            dropout_stream: 0,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn backend(&self) -> &B {
        &self.be
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
    pub fn num_params(&self) -> usize {
        self.params.last().map_or(0, |s| s.range.end)
    }
    /// Values of non-trained state (batch-norm running statistics).
    pub fn num_state(&self) -> usize {
        self.state.last().map_or(0, |s| s.range.end)
    }
    /// The trained tensors: names, ranges in the flat buffer, initialisation.
    pub fn param_specs(&self) -> &[TensorSpec] {
        &self.params
    }
    pub fn state_specs(&self) -> &[TensorSpec] {
        &self.state
    }
    /// Bytes of activations and scratch the network allocated.
    pub fn workspace_bytes(&self) -> usize {
        let own = self.max_batch * (shape_len(self.input) + 2 * self.classes);
        4 * (own + self.body.activation_len())
    }

    /// Draws dropout masks from `stream` from now on (each worker its own).
    /// Sets the count of training steps taken (dropout masks follow it), for a run resumed
    /// from a checkpoint.
    pub fn set_train_steps(&mut self, steps: u64) {
        self.steps = steps;
    }

    pub fn set_dropout_stream(&mut self, stream: u64) {
        self.dropout_stream = stream;
    }

    pub fn params_to_host(&self, host: &mut [f32]) {
        self.be.download(host, &self.flat.params);
    }
    pub fn params_from_host(&mut self, host: &[f32]) {
        assert_eq!(host.len(), self.num_params(), "weights of another model");
        self.be.upload(&mut self.flat.params, host);
    }
    pub fn grads_to_host(&self, host: &mut [f32]) {
        self.be.download(host, &self.flat.grads);
    }
    pub fn grads_from_host(&mut self, host: &[f32]) {
        assert_eq!(host.len(), self.num_params(), "gradients of another model");
        self.be.upload(&mut self.flat.grads, host);
    }
    pub fn state_to_host(&self, host: &mut [f32]) {
        self.be.download(host, &self.flat.state);
    }
    pub fn state_from_host(&mut self, host: &[f32]) {
        assert_eq!(host.len(), self.num_state(), "state of another model");
        self.be.upload(&mut self.flat.state, host);
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
        self.be.upload(&mut self.x, x);
        self.flat.dropout_seed = mask_hash(self.dropout_stream, self.steps);
        self.body
            .forward(&self.be, &mut self.flat, &self.x, n, mode);
    }

    /// Loss and accuracy of `n` samples in evaluation mode, without touching the
    /// gradients.
    pub fn evaluate_batch(&mut self, x: &[f32], labels: &[u8], n: usize) -> BatchStats {
        self.forward(x, n, Mode::Eval);
        self.loss(labels, n)
    }

    fn loss(&mut self, labels: &[u8], n: usize) -> BatchStats {
        let (loss, correct) = self.be.softmax_xent(
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

    /// Forward and backward over `n` samples in training mode: overwrites the gradient
    /// buffer with the gradient of the batch-mean cross-entropy and returns the batch's
    /// stats.
    pub fn forward_backward(&mut self, x: &[f32], labels: &[u8], n: usize) -> BatchStats {
        self.forward(x, n, Mode::Train);
        let stats = self.loss(labels, n);
        let len = self.num_params();
        self.be.fill(&mut self.flat.grads, 0..len, 0.0);
        self.body
            .backward(&self.be, &mut self.flat, &self.x, &self.dlogits, n, false);
        stats
    }

    /// Folds batch number `batch` (from 0) of a re-estimation into a cumulative average
    /// of the batch-norm running statistics (PyTorch's `swa_utils.update_bn`).
    pub fn calibrate_batch(&mut self, x: &[f32], n: usize, batch: usize) {
        self.forward(x, n, Mode::Calibrate { batch });
    }

    /// Whether any layer keeps running statistics.
    pub fn has_state(&self) -> bool {
        self.num_state() > 0
    }

    /// The parameters and the gradients, as the backend holds them.
    pub fn buffers(&self) -> (&B::Buf, &B::Buf) {
        (&self.flat.params, &self.flat.grads)
    }

    /// The backend, the parameters and the gradients, for an optimizer that runs over
    /// the network's own buffers.
    pub fn optimizer_buffers(&mut self) -> (&B, &mut B::Buf, &mut B::Buf) {
        let Flat { params, grads, .. } = &mut self.flat;
        (&self.be, params, grads)
    }

    /// One SGD step over the network's own buffers.
    pub fn sgd_step(&mut self, velocity: &mut B::Buf, h: &crate::compute::backend::SgdStep) {
        let Flat { params, grads, .. } = &mut self.flat;
        self.be.sgd_step(params, velocity, grads, h);
    }
}

/// The dropout seed of step `step` of stream `stream` (the mask kernel hashes it with
/// each element's index).
pub(crate) fn mask_hash(stream: u64, step: u64) -> u64 {
    stream.wrapping_mul(0xD6E8_FEB8_6659_FD93) ^ step.wrapping_mul(0xC2B2_AE3D_27D4_EB4F)
}

/// The CPU buffers are host memory: lent out without copies.
impl Network<Cpu> {
    pub fn params(&self) -> &[f32] {
        &self.flat.params
    }
    pub fn params_mut(&mut self) -> &mut [f32] {
        &mut self.flat.params
    }
    pub fn grads(&self) -> &[f32] {
        &self.flat.grads
    }
    pub fn state(&self) -> &[f32] {
        &self.flat.state
    }
    /// Parameters (read) and gradients (write) at once, for an optimizer step.
    pub fn params_and_grads_mut(&mut self) -> (&mut [f32], &mut [f32]) {
        (&mut self.flat.params, &mut self.flat.grads)
    }
}

/// Samples the workspace holds: the training batch, and for the small models at least 256
/// so that evaluation runs in wide GEMMs (the CNNs evaluate in training-sized chunks:
/// their activations at 256 images would take GBs).
pub fn workspace_batch(model: crate::config::ModelKind, batch: usize) -> usize {
    use crate::config::ModelKind;
    match model {
        ModelKind::Lenet5 | ModelKind::Mlp => batch.max(256),
        ModelKind::Resnet18 | ModelKind::Vgg19 => batch,
        ModelKind::Seq2seq => batch.max(seq2seq::TEXT_EVAL_BATCH),
    }
}

/// Builds a model from the config for a dataset's sample shape and class count, on the
/// CPU backend.
pub fn build(
    cfg: &crate::config::ModelConfig,
    input: Shape,
    classes: usize,
    max_batch: usize,
    seed: u64,
) -> Result<Network<Cpu>, ModelError> {
    build_on(Cpu, cfg, input, classes, max_batch, seed)
}

/// [`build`] on the backend `be`.
pub fn build_on<B: Backend>(
    be: B,
    cfg: &crate::config::ModelConfig,
    input: Shape,
    classes: usize,
    max_batch: usize,
    seed: u64,
) -> Result<Network<B>, ModelError> {
    use crate::config::ModelKind;
    let width = cfg.width;
    let net = match cfg.name {
        ModelKind::Lenet5 => zoo::lenet5(be, input, classes, max_batch, seed),
        ModelKind::Mlp => zoo::mlp(be, input, &cfg.mlp_hidden, classes, max_batch, seed),
        ModelKind::Resnet18 => {
            zoo::check_cifar_input("resnet18", input)?;
            zoo::resnet18(be, input, classes, width, max_batch, seed)
        }
        ModelKind::Vgg19 => {
            zoo::check_cifar_input("vgg19", input)?;
            zoo::vgg19(be, input, classes, width, max_batch, seed)
        }
        ModelKind::Seq2seq => return Err(ModelError::NotImage { model: "seq2seq" }),
    };
    net.check_data_shape(input, classes)?;
    Ok(net)
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn normal_init_draws_mean_0_and_the_given_std() {
        let specs = [TensorSpec {
            name: "embedding.weight".into(),
            shape: vec![100, 200],
            range: 0..20_000,
            init: Init::Normal { std: 2.0 },
        }];
        let v = initial_values(&specs, 5);
        let n = v.len() as f64;
        let mean = v.iter().map(|&x| x as f64).sum::<f64>() / n;
        let var = v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n;
        assert!(mean.abs() < 0.05, "{mean}");
        assert!((var.sqrt() - 2.0).abs() < 0.05, "{}", var.sqrt());
        assert!(v.iter().all(|x| x.is_finite()));
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
