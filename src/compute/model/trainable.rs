//! What the optimizers, the sync modes, checkpoints and export need of a whole model,
//! whatever its inputs: its [`FlatModel`] (flat parameter, gradient and state buffers on a
//! backend and the named tensors in them) and a few facts about it. [`super::Network`]
//! (images), [`super::seq2seq::Seq2Seq`] (token sequences) and the workload's `Model`
//! (either) implement the four required methods; everything else, the host transfers
//! included, is provided here once, so nothing downstream special-cases the workload.

use crate::compute::backend::Backend;

use super::flat::{Buffer, FlatModel};
use super::module::{Module, TensorSpec};

/// A whole model: a root [`Module`] that owns its flat buffers.
pub trait Trainable<B: Backend>: Module<B> {
    /// The config name of the model (`lenet5`, `seq2seq`, ...).
    fn name(&self) -> &str;
    fn flat_model(&self) -> &FlatModel<B>;
    fn flat_model_mut(&mut self) -> &mut FlatModel<B>;
    /// Header metadata that a saved model must match beyond its tensors (the input shape
    /// and classes of an image model, the vocabulary sizes of a translation model).
    fn data_metadata(&self) -> Vec<(String, String)>;

    fn backend(&self) -> &B {
        self.flat_model().backend()
    }
    /// Trained values in the flat buffer.
    fn num_params(&self) -> usize {
        self.flat_model().num_params()
    }
    /// Values of non-trained state (batch-norm running statistics).
    fn num_state(&self) -> usize {
        self.flat_model().num_state()
    }
    /// Whether any module keeps running statistics.
    fn has_state(&self) -> bool {
        self.num_state() > 0
    }
    /// The trained tensors: names, shapes and ranges in the flat buffer.
    fn param_specs(&self) -> &[TensorSpec] {
        self.flat_model().param_specs()
    }
    /// The tensors of non-trained state (none for most models).
    fn state_specs(&self) -> &[TensorSpec] {
        self.flat_model().state_specs()
    }
    /// Bytes of activations and work space allocated for the largest batch.
    fn workspace_bytes(&self) -> usize {
        4 * self.activation_len()
    }

    /// The parameters and the gradients, as the backend holds them.
    fn buffers(&self) -> (&B::Buf, &B::Buf) {
        let flat = self.flat_model().flat();
        (&flat.params, &flat.grads)
    }
    /// The backend, the parameters and the gradients, for an optimizer that runs over the
    /// model's own buffers.
    fn optimizer_buffers(&mut self) -> (&B, &mut B::Buf, &mut B::Buf) {
        let (be, flat) = self.flat_model_mut().parts_mut();
        (be, &mut flat.params, &mut flat.grads)
    }

    fn params_to_host(&self, host: &mut [f32]) {
        self.flat_model().download(Buffer::Params, host);
    }
    fn params_from_host(&mut self, host: &[f32]) {
        self.flat_model_mut().upload(Buffer::Params, host);
    }
    fn grads_to_host(&self, host: &mut [f32]) {
        self.flat_model().download(Buffer::Grads, host);
    }
    fn grads_from_host(&mut self, host: &[f32]) {
        self.flat_model_mut().upload(Buffer::Grads, host);
    }
    fn state_to_host(&self, host: &mut [f32]) {
        self.flat_model().download(Buffer::State, host);
    }
    fn state_from_host(&mut self, host: &[f32]) {
        self.flat_model_mut().upload(Buffer::State, host);
    }

    /// The parameters on the host, copied (a role's start and end, not every step).
    fn params_host_copy(&self) -> Vec<f32> {
        let mut params = vec![0.0; self.num_params()];
        self.params_to_host(&mut params);
        params
    }
    /// The batch-norm state on the host, copied (checkpoints only).
    fn state_host_copy(&self) -> Vec<f32> {
        let mut state = vec![0.0; self.num_state()];
        self.state_to_host(&mut state);
        state
    }

    // Host access for the distributed modes, whose messages carry the model's buffers: the
    // buffers themselves where they are host memory (the CPU backend), otherwise a copy
    // through `stage`, one host buffer the caller keeps from step to step (a worker on a
    // GPU copies its gradient out and the next weights in once per iteration).

    /// The gradients on the host.
    fn grads_on_host<'a>(&'a self, stage: &'a mut Vec<f32>) -> &'a [f32] {
        let n = self.num_params();
        host_or_staged::<B>(self.buffers().1, n, stage, |h| self.grads_to_host(h))
    }
    /// The parameters on the host.
    fn params_on_host<'a>(&'a self, stage: &'a mut Vec<f32>) -> &'a [f32] {
        let n = self.num_params();
        host_or_staged::<B>(self.buffers().0, n, stage, |h| self.params_to_host(h))
    }
    /// Lets `write` fill the parameters on the host (a message received into them), and
    /// returns what it returns.
    fn write_params_on_host<R>(
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

    // Where the buffers are host memory (the CPU backend) they are lent out as slices,
    // without a copy.

    fn params(&self) -> &[f32]
    where
        B: Backend<Buf = Vec<f32>>,
    {
        &self.flat_model().flat().params
    }
    fn params_mut(&mut self) -> &mut [f32]
    where
        B: Backend<Buf = Vec<f32>>,
    {
        &mut self.flat_model_mut().parts_mut().1.params
    }
    fn grads(&self) -> &[f32]
    where
        B: Backend<Buf = Vec<f32>>,
    {
        &self.flat_model().flat().grads
    }
    /// The non-trained state (empty without).
    fn state(&self) -> &[f32]
    where
        B: Backend<Buf = Vec<f32>>,
    {
        &self.flat_model().flat().state
    }
    /// Parameters (read) and gradients (write) at once, for an optimizer step.
    fn params_and_grads_mut(&mut self) -> (&mut [f32], &mut [f32])
    where
        B: Backend<Buf = Vec<f32>>,
    {
        let flat = self.flat_model_mut().parts_mut().1;
        (&mut flat.params, &mut flat.grads)
    }
}

/// `buf` itself where it is host memory, else `copy` of its `len` values into `stage`.
fn host_or_staged<'a, B: Backend>(
    buf: &'a B::Buf,
    len: usize,
    stage: &'a mut Vec<f32>,
    copy: impl FnOnce(&mut [f32]),
) -> &'a [f32] {
    match B::host_view(buf) {
        Some(host) => host,
        None => {
            stage.resize(len, 0.0);
            copy(stage);
            stage
        }
    }
}
