//! The model of a run, an image network or the translation model, behind one type that
//! the sync modes, checkpoints and export use without knowing which.

use anyhow::Result;

use crate::compute::backend::cpu::Cpu;
use crate::compute::backend::Backend;
use crate::compute::model::seq2seq::{Seq2Seq, Seq2SeqConfig};
use crate::compute::model::{self, FlatModel, Module, NamedTensors, Network, Trainable};
use crate::config::{Config, ModelKind};

use super::corpus::Corpus;

pub use crate::compute::model::seq2seq::TEXT_EVAL_BATCH;

// One per process, never moved in a loop: the size difference costs nothing.
#[allow(clippy::large_enum_variant)]
pub enum Model<B: Backend = Cpu> {
    Image(Network<B>),
    Text(Seq2Seq<B>),
}

impl Model<Cpu> {
    /// [`Model::build_on`] the CPU backend.
    pub fn build(cfg: &Config, corpus: &Corpus, stream: u64) -> Result<Model> {
        Model::build_on(Cpu, cfg, corpus, stream)
    }
}

impl<B: Backend> Model<B> {
    /// Builds the configured model for `corpus` on `be` (identical weights on every rank
    /// from `run.seed`); `stream` picks the dropout (and teacher-forcing) draws: each
    /// worker its own.
    pub fn build_on(be: B, cfg: &Config, corpus: &Corpus, stream: u64) -> Result<Model<B>> {
        Ok(match corpus {
            Corpus::Images { train, .. } => {
                let shape = (train.channels, train.height, train.width);
                let mut net = model::build_on(
                    be,
                    &cfg.model,
                    shape,
                    train.classes,
                    model::workspace_batch(
                        cfg.model.name,
                        cfg.sync.balance.ceiling(cfg.optim.batch_size),
                    ),
                    cfg.run.seed,
                )?;
                net.set_dropout_stream(stream);
                Model::Image(net)
            }
            Corpus::Text(text) => {
                if cfg.model.name != ModelKind::Seq2seq {
                    anyhow::bail!("model {}: multi30k needs model seq2seq", cfg.model.name);
                }
                let (src, tgt) = text.longest();
                let sizes = Seq2SeqConfig {
                    width: cfg.model.width,
                    max_src_len: src.max(1),
                    max_tgt_len: tgt.max(2),
                    max_batch: model::workspace_batch(
                        cfg.model.name,
                        cfg.sync.balance.ceiling(cfg.optim.batch_size),
                    ),
                    ..Seq2SeqConfig::paper(text.vocabs.de.len(), text.vocabs.en.len())
                };
                let mut net = Seq2Seq::new(be, sizes, cfg.run.seed);
                net.set_stream(stream);
                Model::Text(net)
            }
        })
    }
}

/// `$body` with `$n` bound to whichever model `$model` holds.
macro_rules! either {
    ($model:expr, $n:ident => $body:expr) => {
        match $model {
            Model::Image($n) => $body,
            Model::Text($n) => $body,
        }
    };
}

/// Either model's tensors, as if it were the only kind.
impl<B: Backend> Module<B> for Model<B> {
    fn visit(&self, tensors: &mut NamedTensors) {
        either!(self, n => n.visit(tensors))
    }
    fn activation_len(&self) -> usize {
        either!(self, n => n.activation_len())
    }
}

/// Either model's buffers: the host transfers and the rest are [`Trainable`]'s.
impl<B: Backend> Trainable<B> for Model<B> {
    fn name(&self) -> &str {
        either!(self, n => n.name())
    }
    fn flat_model(&self) -> &FlatModel<B> {
        either!(self, n => n.flat_model())
    }
    fn flat_model_mut(&mut self) -> &mut FlatModel<B> {
        either!(self, n => n.flat_model_mut())
    }
    fn data_metadata(&self) -> Vec<(String, String)> {
        either!(self, n => n.data_metadata())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compute::model::zoo;

    /// On the CPU the distributed modes read and write the model's own buffers: nothing is
    /// staged, and what `write` receives lands in the parameters.
    #[test]
    fn host_access_lends_the_cpu_buffers_without_staging() {
        let mut net = Model::Image(zoo::mlp(Cpu, (1, 2, 2), &[3], 2, 1, 1));
        let mut stage = Vec::new();
        let n = net.num_params();
        assert_eq!(
            net.params_on_host(&mut stage).as_ptr(),
            net.params().as_ptr()
        );
        assert_eq!(net.grads_on_host(&mut stage).as_ptr(), net.grads().as_ptr());
        let wrote = net.write_params_on_host(&mut stage, |w| {
            for (i, x) in w.iter_mut().enumerate() {
                *x = i as f32;
            }
            w.len()
        });
        assert_eq!(wrote, n);
        assert!(
            stage.is_empty(),
            "the CPU path staged {} values",
            stage.len()
        );
        let expected: Vec<f32> = (0..n).map(|i| i as f32).collect();
        assert_eq!(net.params(), expected.as_slice());
    }
}
