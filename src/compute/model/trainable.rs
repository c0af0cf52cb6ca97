//! What the optimizers, the sync modes, checkpoints and export need of a model, whatever
//! its inputs: flat parameter and gradient buffers on a backend, their host copies, the
//! named tensors, and any non-trained state. [`super::Network`] (images) and
//! [`super::seq2seq::Seq2Seq`] (token sequences) both provide it, so nothing downstream
//! special-cases the workload. The implementations delegate to the models' inherent
//! methods of the same names.

use crate::compute::backend::Backend;

use super::module::TensorSpec;

pub trait Trainable<B: Backend> {
    /// The config name of the model (`lenet5`, `seq2seq`, ...).
    fn name(&self) -> &str;
    fn backend(&self) -> &B;
    /// Trained values in the flat buffer.
    fn num_params(&self) -> usize;
    /// The trained tensors: names, shapes and ranges in the flat buffer.
    fn param_specs(&self) -> &[TensorSpec];
    /// Non-trained state (batch-norm running statistics): none by default.
    fn state_specs(&self) -> &[TensorSpec] {
        &[]
    }
    fn num_state(&self) -> usize {
        self.state_specs().last().map_or(0, |s| s.range.end)
    }
    /// The backend, the parameters and the gradients, for an optimizer that runs over the
    /// model's own buffers.
    fn optimizer_buffers(&mut self) -> (&B, &mut B::Buf, &mut B::Buf);
    /// The parameters and the gradients, as the backend holds them.
    fn buffers(&self) -> (&B::Buf, &B::Buf);
    fn params_to_host(&self, host: &mut [f32]);
    fn params_from_host(&mut self, host: &[f32]);
    fn state_to_host(&self, _host: &mut [f32]) {}
    fn state_from_host(&mut self, _host: &[f32]) {}
    /// Header metadata that a saved model must match beyond its tensors (the input shape
    /// and classes of an image model, the vocabulary sizes of a translation model).
    fn data_metadata(&self) -> Vec<(String, String)>;
}

impl<B: Backend> Trainable<B> for super::Network<B> {
    fn name(&self) -> &str {
        super::Network::name(self)
    }
    fn backend(&self) -> &B {
        super::Network::backend(self)
    }
    fn num_params(&self) -> usize {
        super::Network::num_params(self)
    }
    fn param_specs(&self) -> &[TensorSpec] {
        super::Network::param_specs(self)
    }
    fn state_specs(&self) -> &[TensorSpec] {
        super::Network::state_specs(self)
    }
    fn optimizer_buffers(&mut self) -> (&B, &mut B::Buf, &mut B::Buf) {
        super::Network::optimizer_buffers(self)
    }
    fn buffers(&self) -> (&B::Buf, &B::Buf) {
        super::Network::buffers(self)
    }
    fn params_to_host(&self, host: &mut [f32]) {
        super::Network::params_to_host(self, host)
    }
    fn params_from_host(&mut self, host: &[f32]) {
        super::Network::params_from_host(self, host)
    }
    fn state_to_host(&self, host: &mut [f32]) {
        super::Network::state_to_host(self, host)
    }
    fn state_from_host(&mut self, host: &[f32]) {
        super::Network::state_from_host(self, host)
    }
    fn data_metadata(&self) -> Vec<(String, String)> {
        let (c, h, w) = self.input_shape();
        vec![
            ("input".to_string(), format!("{c}x{h}x{w}")),
            ("classes".to_string(), self.classes().to_string()),
        ]
    }
}

impl<B: Backend> Trainable<B> for super::seq2seq::Seq2Seq<B> {
    fn name(&self) -> &str {
        "seq2seq"
    }
    fn backend(&self) -> &B {
        super::seq2seq::Seq2Seq::backend(self)
    }
    fn num_params(&self) -> usize {
        super::seq2seq::Seq2Seq::num_params(self)
    }
    fn param_specs(&self) -> &[TensorSpec] {
        super::seq2seq::Seq2Seq::param_specs(self)
    }
    fn optimizer_buffers(&mut self) -> (&B, &mut B::Buf, &mut B::Buf) {
        super::seq2seq::Seq2Seq::optimizer_buffers(self)
    }
    fn buffers(&self) -> (&B::Buf, &B::Buf) {
        super::seq2seq::Seq2Seq::buffers(self)
    }
    fn params_to_host(&self, host: &mut [f32]) {
        super::seq2seq::Seq2Seq::params_to_host(self, host)
    }
    fn params_from_host(&mut self, host: &[f32]) {
        super::seq2seq::Seq2Seq::params_from_host(self, host)
    }
    fn data_metadata(&self) -> Vec<(String, String)> {
        let c = self.config();
        vec![
            ("src_vocab".to_string(), c.src_vocab.to_string()),
            ("tgt_vocab".to_string(), c.tgt_vocab.to_string()),
        ]
    }
}
