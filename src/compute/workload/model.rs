//! The model of a run, an image network or the translation model, behind one type that
//! the sync modes, checkpoints and export use without knowing which.

use anyhow::Result;

use crate::compute::backend::cpu::Cpu;
use crate::compute::backend::Backend;
use crate::compute::model::seq2seq::{Seq2Seq, Seq2SeqConfig};
use crate::compute::model::{self, Network, TensorSpec, Trainable};
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

/// Building, and the rest beyond [`Trainable`] (whose methods `Model` has too).
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
                    model::workspace_batch(cfg.model.name, cfg.optim.batch_size),
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
                    max_batch: model::workspace_batch(cfg.model.name, cfg.optim.batch_size),
                    ..Seq2SeqConfig::paper(text.vocabs.de.len(), text.vocabs.en.len())
                };
                let mut net = Seq2Seq::new(be, sizes, cfg.run.seed);
                net.set_stream(stream);
                Model::Text(net)
            }
        })
    }

    fn inner(&self) -> &dyn Trainable<B> {
        match self {
            Model::Image(n) => n,
            Model::Text(n) => n,
        }
    }

    fn inner_mut(&mut self) -> &mut dyn Trainable<B> {
        match self {
            Model::Image(n) => n,
            Model::Text(n) => n,
        }
    }

    /// Whether the model keeps running statistics (batch norm).
    pub fn has_state(&self) -> bool {
        self.num_state() > 0
    }
    pub fn grads_to_host(&self, host: &mut [f32]) {
        match self {
            Model::Image(n) => n.grads_to_host(host),
            Model::Text(n) => n.grads_to_host(host),
        }
    }
    pub fn grads_from_host(&mut self, host: &[f32]) {
        match self {
            Model::Image(n) => n.grads_from_host(host),
            Model::Text(n) => n.grads_from_host(host),
        }
    }
}

/// Host access for the distributed modes, whose messages carry the model's buffers: the
/// buffers themselves where they are host memory (the CPU backend), otherwise a copy
/// through `stage`, one host buffer the caller keeps from step to step (a worker on a GPU
/// copies its gradient out and the next weights in once per iteration).
impl<B: Backend> Model<B> {
    /// The gradients on the host.
    pub fn grads_on_host<'a>(&'a self, stage: &'a mut Vec<f32>) -> &'a [f32] {
        self.on_host(self.buffers().1, |m, h| m.grads_to_host(h), stage)
    }

    /// The parameters on the host.
    pub fn params_on_host<'a>(&'a self, stage: &'a mut Vec<f32>) -> &'a [f32] {
        self.on_host(self.buffers().0, |m, h| m.params_to_host(h), stage)
    }

    /// `buf` as host memory, or `copy` of it into `stage`.
    fn on_host<'a>(
        &'a self,
        buf: &'a B::Buf,
        copy: fn(&Self, &mut [f32]),
        stage: &'a mut Vec<f32>,
    ) -> &'a [f32] {
        match B::host_view(buf) {
            Some(host) => host,
            None => {
                stage.resize(self.num_params(), 0.0);
                copy(self, stage);
                stage
            }
        }
    }

    /// Lets `write` fill the parameters on the host (a message received into them), and
    /// returns what it returns.
    pub fn write_params_on_host<R>(
        &mut self,
        stage: &mut Vec<f32>,
        write: impl FnOnce(&mut [f32]) -> R,
    ) -> R {
        let n = self.num_params();
        if let Some(host) = B::host_view_mut(self.optimizer_buffers().1) {
            return write(host);
        }
        stage.resize(n, 0.0);
        let out = write(stage);
        self.params_from_host(stage);
        out
    }

    /// The parameters on the host, copied (a role's start and end, not every step).
    pub fn params_host_copy(&self) -> Vec<f32> {
        let mut params = vec![0.0; self.num_params()];
        self.params_to_host(&mut params);
        params
    }

    /// The batch-norm state on the host, copied (checkpoints only).
    pub fn state_host_copy(&self) -> Vec<f32> {
        let mut state = vec![0.0; self.num_state()];
        self.state_to_host(&mut state);
        state
    }
}

/// The CPU buffers are host memory: lent out as slices.
impl Model<Cpu> {
    pub fn params(&self) -> &[f32] {
        match self {
            Model::Image(n) => n.params(),
            Model::Text(n) => n.params(),
        }
    }
    pub fn params_mut(&mut self) -> &mut [f32] {
        match self {
            Model::Image(n) => n.params_mut(),
            Model::Text(n) => n.params_mut(),
        }
    }
    pub fn grads(&self) -> &[f32] {
        match self {
            Model::Image(n) => n.grads(),
            Model::Text(n) => n.grads(),
        }
    }
    /// The non-trained state on the host (empty without).
    pub fn state(&self) -> &[f32] {
        match self {
            Model::Image(n) => n.state(),
            Model::Text(_) => &[],
        }
    }
}

impl<B: Backend> Trainable<B> for Model<B> {
    fn name(&self) -> &str {
        self.inner().name()
    }
    fn backend(&self) -> &B {
        self.inner().backend()
    }
    fn num_params(&self) -> usize {
        self.inner().num_params()
    }
    fn param_specs(&self) -> &[TensorSpec] {
        self.inner().param_specs()
    }
    fn state_specs(&self) -> &[TensorSpec] {
        self.inner().state_specs()
    }
    fn optimizer_buffers(&mut self) -> (&B, &mut B::Buf, &mut B::Buf) {
        self.inner_mut().optimizer_buffers()
    }
    fn buffers(&self) -> (&B::Buf, &B::Buf) {
        self.inner().buffers()
    }
    fn params_to_host(&self, host: &mut [f32]) {
        self.inner().params_to_host(host)
    }
    fn params_from_host(&mut self, host: &[f32]) {
        self.inner_mut().params_from_host(host)
    }
    fn state_to_host(&self, host: &mut [f32]) {
        self.inner().state_to_host(host)
    }
    fn state_from_host(&mut self, host: &[f32]) {
        self.inner_mut().state_from_host(host)
    }
    fn data_metadata(&self) -> Vec<(String, String)> {
        self.inner().data_metadata()
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
