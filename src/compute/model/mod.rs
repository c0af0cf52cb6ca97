//! The models: every building block, composite and whole model is a [`Module`] (see
//! `module.rs`); a whole model owns its flat buffers ([`FlatModel`]) and is
//! [`Trainable`]. [`Network`] classifies images, [`seq2seq::Seq2Seq`] translates.

pub mod builder;
pub mod compose;
pub mod embedding;
pub mod export;
pub mod flat;
pub mod layers;
pub mod lstm;
pub mod module;
pub mod network;
pub mod row_dropout;
pub mod seq2seq;
pub mod trainable;
pub mod zoo;

use crate::compute::backend::cpu::Cpu;
use crate::compute::backend::Backend;
pub use builder::Builder;
pub use flat::{initial_values, FlatModel};
pub use module::{
    shape_len, Allocator, Flat, FlatTensor, Init, Layer, Mode, Module, NamedTensors, Shape,
    TensorSpec,
};
pub use network::Network;
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

/// The dropout seed of step `step` of stream `stream` (the mask kernel hashes it with
/// each element's index).
pub(crate) fn mask_hash(stream: u64, step: u64) -> u64 {
    stream.wrapping_mul(0xD6E8_FEB8_6659_FD93) ^ step.wrapping_mul(0xC2B2_AE3D_27D4_EB4F)
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
