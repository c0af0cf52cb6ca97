//! Networks: a stack of layers over one flat parameter buffer and one flat gradient buffer.
//!
//! All activation and scratch memory is allocated once for `max_batch` samples, so a
//! training step allocates nothing.

pub mod layers;
pub mod zoo;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::backend::cpu;
use layers::{Layer, LayerScratch, Shape};

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
}

pub struct Network {
    name: String,
    layers: Vec<Layer>,
    input: Shape,
    classes: usize,
    max_batch: usize,
    params: Vec<f32>,
    grads: Vec<f32>,
    /// outs[i]: output of layer i, `max_batch` samples.
    outs: Vec<Vec<f32>>,
    /// out_lens[i]: per-sample length of outs[i].
    out_lens: Vec<usize>,
    /// douts[i]: gradient of the loss w.r.t. outs[i].
    douts: Vec<Vec<f32>>,
    scratch: Vec<LayerScratch>,
}

impl Network {
    /// Builds a network from layers whose parameter ranges tile `0..num_params`,
    /// initialised as PyTorch does: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and biases.
    pub fn from_layers(
        name: &str,
        layers: Vec<Layer>,
        input: Shape,
        max_batch: usize,
        seed: u64,
    ) -> Network {
        let mut shape = input;
        let mut outs = Vec::with_capacity(layers.len());
        let mut scratch = Vec::with_capacity(layers.len());
        let mut num_params = 0;
        for layer in &layers {
            shape = layer.out_shape(shape);
            outs.push(vec![0.0; max_batch * layers::shape_len(shape)]);
            let (cols, dcol, argmax) = layer.scratch_len(max_batch);
            scratch.push(LayerScratch {
                cols: vec![0.0; cols],
                dcol: vec![0.0; dcol],
                argmax: vec![0; argmax],
            });
            if let Some((_, b)) = layer.param_ranges() {
                num_params = num_params.max(b.end);
            }
        }
        let classes = layers::shape_len(shape);
        let mut params = vec![0.0; num_params];
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        for layer in &layers {
            if let (Some((w, b)), Some(fan_in)) = (layer.param_ranges(), layer.fan_in()) {
                let bound = 1.0 / (fan_in as f32).sqrt();
                for p in &mut params[w.start..b.end] {
                    *p = rng.gen_range(-bound..bound);
                }
            }
        }
        let douts = outs.iter().map(|o| vec![0.0; o.len()]).collect();
        let out_lens = outs.iter().map(|o| o.len() / max_batch.max(1)).collect();
        Network {
            name: name.to_string(),
            layers,
            input,
            classes,
            max_batch,
            grads: vec![0.0; num_params],
            params,
            outs,
            out_lens,
            douts,
            scratch,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn input_len(&self) -> usize {
        layers::shape_len(self.input)
    }
    pub fn classes(&self) -> usize {
        self.classes
    }
    pub fn max_batch(&self) -> usize {
        self.max_batch
    }
    pub fn num_params(&self) -> usize {
        self.params.len()
    }
    pub fn params(&self) -> &[f32] {
        &self.params
    }
    pub fn params_mut(&mut self) -> &mut [f32] {
        &mut self.params
    }
    pub fn grads(&self) -> &[f32] {
        &self.grads
    }
    /// Parameters (read) and gradients (write) at once, for an optimizer step.
    pub fn params_and_grads_mut(&mut self) -> (&mut [f32], &mut [f32]) {
        (&mut self.params, &mut self.grads)
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

    /// Forward pass over `n <= max_batch` samples of `x`; returns the logits `[n x classes]`.
    pub fn forward(&mut self, x: &[f32], n: usize) -> &[f32] {
        assert!(
            n <= self.max_batch,
            "batch {n} exceeds the workspace ({})",
            self.max_batch
        );
        assert_eq!(x.len(), n * self.input_len(), "input length");
        for i in 0..self.layers.len() {
            let (before, rest) = self.outs.split_at_mut(i);
            let inp: &[f32] = if i == 0 {
                x
            } else {
                &before[i - 1][..n * self.out_lens[i - 1]]
            };
            layers::forward(
                &self.layers[i],
                &mut rest[0],
                inp,
                &self.params,
                &mut self.scratch[i],
                n,
            );
        }
        let last = self.layers.len() - 1;
        &self.outs[last][..n * self.classes]
    }

    /// Loss and accuracy of `n` samples without touching the gradients.
    pub fn evaluate_batch(&mut self, x: &[f32], labels: &[u8], n: usize) -> BatchStats {
        self.forward(x, n);
        let last = self.layers.len() - 1;
        let (loss, correct) = cpu::softmax_xent_forward_backward(
            &mut self.douts[last],
            &self.outs[last],
            labels,
            n,
            self.classes,
        );
        BatchStats { loss, correct }
    }

    /// Forward and backward over `n` samples: overwrites the gradient buffer with the
    /// gradient of the batch-mean cross-entropy and returns the batch's stats.
    pub fn forward_backward(&mut self, x: &[f32], labels: &[u8], n: usize) -> BatchStats {
        let stats = self.evaluate_batch(x, labels, n);
        self.grads.fill(0.0);
        for i in (0..self.layers.len()).rev() {
            let (dbefore, drest) = self.douts.split_at_mut(i);
            let dinp = if i == 0 {
                None
            } else {
                Some(&mut dbefore[i - 1][..n * self.out_lens[i - 1]])
            };
            let inp: &[f32] = if i == 0 {
                x
            } else {
                &self.outs[i - 1][..n * self.out_lens[i - 1]]
            };
            let len = n * self.out_lens[i];
            let io = layers::BackwardIo {
                dinp,
                dout: &drest[0][..len],
                inp,
                out: &self.outs[i][..len],
            };
            layers::backward(
                &self.layers[i],
                io,
                &self.params,
                &mut self.grads,
                &mut self.scratch[i],
                n,
            );
        }
        stats
    }
}

/// Builds a model from the config for a dataset's sample shape and class count.
pub fn build(
    cfg: &crate::config::ModelConfig,
    input: Shape,
    classes: usize,
    max_batch: usize,
    seed: u64,
) -> Result<Network, ModelError> {
    let net = match cfg.name {
        crate::config::ModelKind::Lenet5 => zoo::lenet5(input, classes, max_batch, seed),
        crate::config::ModelKind::Mlp => zoo::mlp(input, &cfg.mlp_hidden, classes, max_batch, seed),
    };
    net.check_data_shape(input, classes)?;
    Ok(net)
}
