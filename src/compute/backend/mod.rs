//! Compute backends: one trait, [`Backend`], that owns its buffer type and provides every
//! operation the layers and the optimizer need.
//!
//! Operations come in forward/backward pairs named after the layer (`conv2d_forward`,
//! `conv2d_backward`, ...), in the style of llm.c: outputs first, then inputs, then
//! shapes, with the shapes in each doc comment. Parameters, their gradients and the
//! non-trained state (batch-norm statistics) are three flat buffers per network; an
//! operation receives the whole buffer and the [`Span`] of its layer in it, so pushes,
//! top-k and RMA windows stay one contiguous slice each and a device backend never has to
//! split its allocations. Parameter gradients are accumulated (`+=`); the network zeroes
//! them once per step. Activations are NCHW, batch first; a linear weight is `[out x in]`
//! and a convolution weight `[out_c x in_c*k*k]`, PyTorch's layouts.
//!
//! The CPU backend ([`cpu::Cpu`]) never fails; the CUDA backend ([`cuda`], feature
//! `cuda`) keeps the first failure of its operations and reports it through
//! [`Backend::status`] ([`BackendError`]). docs/architecture.md shows how another backend
//! plugs in.

pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
mod error;

pub use error::BackendError;

use std::ops::Range;

use crate::config::DeviceKind;

/// The device a run computes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device {
    Cpu,
    /// The GPU of this ordinal (this rank's, from its local rank).
    #[cfg(feature = "cuda")]
    Cuda(usize),
}

/// Resolves `device.kind` for this process.
///
/// - `cpu`: the CPU.
/// - `cuda`: this rank's GPU (local rank modulo the GPUs), or an error naming what is
///   missing: the driver, a GPU, or the `cuda` feature.
/// - `auto`: the CPU, saying why once per process. It does not pick the GPU by itself
///   while the GPU training path awaits its first check on hardware
///   (scripts/gpu-check.sh); ask for `cuda` to use it.
pub fn select(kind: DeviceKind) -> anyhow::Result<Device> {
    match kind {
        DeviceKind::Cpu => Ok(Device::Cpu),
        DeviceKind::Auto => {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| {
                let why = cuda_missing().unwrap_or_else(|| {
                    "a GPU is present; set device.kind = \"cuda\" to train on it".to_string()
                });
                log::info!("device: auto -> cpu ({why})")
            });
            Ok(Device::Cpu)
        }
        DeviceKind::Cuda => gpu_for("device.kind"),
    }
}

/// This rank's GPU for the config key `key`, set to `"cuda"`; or an error naming the key
/// and what is missing: the driver, a GPU, or the `cuda` feature.
pub fn gpu_for(key: &str) -> anyhow::Result<Device> {
    if let Some(why) = cuda_missing() {
        anyhow::bail!("{key}: \"cuda\" cannot run here: {why}; use \"cpu\" or \"auto\"");
    }
    cuda_device(key)
}

/// Why this node and build cannot use CUDA, or `None` where they can.
fn cuda_missing() -> Option<String> {
    #[cfg(feature = "cuda")]
    return cuda::device::unavailable();
    #[cfg(not(feature = "cuda"))]
    Some("this build has no CUDA support (built without the `cuda` feature)".to_string())
}

#[cfg(feature = "cuda")]
fn cuda_device(key: &str) -> anyhow::Result<Device> {
    let gpus = cudarc::driver::CudaContext::device_count()
        .map_err(|e| anyhow::anyhow!("{key}: the CUDA driver failed: {e:?}"))?;
    let local = cuda::device::local_rank(|v| std::env::var(v).ok());
    let gpu = cuda::device::gpu_for(local, gpus.max(0) as usize)
        .ok_or_else(|| anyhow::anyhow!("{key}: the CUDA driver sees no GPU"))?;
    Ok(Device::Cuda(gpu))
}

#[cfg(not(feature = "cuda"))]
fn cuda_device(_key: &str) -> anyhow::Result<Device> {
    unreachable!("cuda_missing() refuses CUDA in a build without the `cuda` feature")
}

/// Where one layer's tensors sit in a flat buffer: a weight (or scale) and an optional
/// bias (or shift) right after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    pub weight: Range<usize>,
    pub bias: Option<Range<usize>>,
}

/// Shapes of `c[m x n] = op(a) * op(b)` with `op(a)` `m x k` and `op(b)` `k x n`.
/// `trans_a` means `a` is stored `k x m`; `trans_b` means `b` is stored `n x k`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmDims {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub trans_a: bool,
    pub trans_b: bool,
}

impl GemmDims {
    /// `a` stored `m x k` and `b` stored `k x n`.
    pub fn new(m: usize, n: usize, k: usize) -> Self {
        Self {
            m,
            n,
            k,
            trans_a: false,
            trans_b: false,
        }
    }

    /// `a` stored `k x m`.
    pub fn a_transposed(self) -> Self {
        Self {
            trans_a: true,
            ..self
        }
    }

    /// `b` stored `n x k`.
    pub fn b_transposed(self) -> Self {
        Self {
            trans_b: true,
            ..self
        }
    }
}

/// Shape of a 2-D convolution or pooling window over one image plane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window2d {
    pub channels: usize,
    pub height: usize,
    pub width: usize,
    pub kernel: usize,
    pub stride: usize,
    pub pad: usize,
}

impl Window2d {
    pub fn out_height(&self) -> usize {
        (self.height + 2 * self.pad - self.kernel) / self.stride + 1
    }
    pub fn out_width(&self) -> usize {
        (self.width + 2 * self.pad - self.kernel) / self.stride + 1
    }
    /// Rows of the im2col matrix: `channels * kernel * kernel`.
    pub fn col_rows(&self) -> usize {
        self.channels * self.kernel * self.kernel
    }
    /// Columns of the im2col matrix: output pixels per channel.
    pub fn col_cols(&self) -> usize {
        self.out_height() * self.out_width()
    }
    /// Input values per image.
    pub fn in_len(&self) -> usize {
        self.channels * self.height * self.width
    }
}

/// A convolution over a batch: `batch` images shaped as `window` says, through `out_c`
/// filters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conv2dDims {
    pub batch: usize,
    pub out_c: usize,
    pub window: Window2d,
}

/// A fully connected layer over a batch: `batch` rows of `in_f` features to `out_f`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinearDims {
    pub batch: usize,
    pub in_f: usize,
    pub out_f: usize,
}

/// Batch norm over `batch` images of `channels` planes of `plane` values each.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchNormDims {
    pub batch: usize,
    pub channels: usize,
    pub plane: usize,
    pub eps: f32,
}

/// How a batch-norm forward normalises.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BatchNormMode {
    /// With the batch's statistics, folding them into the running ones with weight
    /// `momentum` (PyTorch's rule: `run = (1 - momentum) * run + momentum * batch`, the
    /// variance unbiased).
    Train { momentum: f32 },
    /// With the running statistics.
    Eval,
}

/// One SGD step's hyper-parameters (PyTorch's rule, see [`crate::compute::optim`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SgdStep {
    pub lr: f32,
    pub momentum: f32,
    /// Already multiplied by the step's share of a synchronous step.
    pub weight_decay: f32,
    /// Factor on the gradient.
    pub scale: f32,
}

/// An embedding table `[vocab x dim]`: row `id` is token `id`'s vector (PyTorch's
/// `nn.Embedding.weight`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EmbeddingDims {
    pub vocab: usize,
    pub dim: usize,
}

/// One LSTM layer over a time-major sequence `[steps x batch x input]` to hidden states
/// `[steps x batch x hidden]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LstmDims {
    /// T, the sequence length the buffers are laid out for.
    pub steps: usize,
    pub batch: usize,
    pub input: usize,
    pub hidden: usize,
}

/// Where one LSTM layer's four tensors sit in the flat parameter (or gradient) buffer,
/// PyTorch's `nn.LSTM` layout: `weight_ih` `[4H x I]`, `weight_hh` `[4H x H]`, `bias_ih`
/// `[4H]`, `bias_hh` `[4H]`, the 4H rows being the gates in the order i, f, g, o.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LstmSpan {
    pub weight_ih: Range<usize>,
    pub weight_hh: Range<usize>,
    pub bias_ih: Range<usize>,
    pub bias_hh: Range<usize>,
}

/// Loss of a masked softmax cross-entropy (see [`Backend::softmax_xent_masked`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct XentStats {
    /// Mean cross-entropy over the rows whose label is not the pad id (0 when none is).
    pub loss: f32,
    /// Counted rows whose arg-max is the label.
    pub correct: usize,
    /// Rows whose label is not the pad id: the loss's denominator.
    pub tokens: usize,
}

/// One Adam step's hyper-parameters (PyTorch's `torch.optim.Adam`, see
/// [`crate::compute::optim::adam`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamStep {
    pub lr: f32,
    /// 1 - beta1 and 1 - beta2, computed in f64: in f32, 1 - 0.999f32 is off by 1.3e-5
    /// relative, which a long run's second moments would carry.
    pub one_minus_beta1: f32,
    pub one_minus_beta2: f32,
    pub eps: f32,
    /// L2 weight decay added to the gradient, already multiplied by the step's share.
    pub weight_decay: f32,
    /// Factor on the gradient.
    pub scale: f32,
    /// 1 - beta1^t and 1 - beta2^t for this step t (1-based), the bias corrections.
    pub bias_correction1: f32,
    pub bias_correction2: f32,
}

/// The operations a compute device provides. `Buf` is a buffer of `f32` the backend
/// owns (host memory for the CPU, device memory for an accelerator); the only ways in and
/// out of it are [`Backend::upload`] and [`Backend::download`], used where gradients
/// leave a worker, weights arrive and snapshots are evaluated.
pub trait Backend: Sized + 'static {
    type Buf;

    /// The first failure of an operation so far, after waiting for the queued ones; `Ok`
    /// on a backend that cannot fail (the default). A device backend skips every
    /// operation after a failure (leaving its outputs as they are, returning NaN for a
    /// loss or a norm), so the callers check this once per step, where its results are
    /// about to be used: after a training or evaluation step.
    fn status(&self) -> Result<(), BackendError> {
        Ok(())
    }

    /// A zeroed buffer of `len` values.
    fn alloc(&self, len: usize) -> Self::Buf;
    /// `dst[..src.len()] = src`, host to device.
    fn upload(&self, dst: &mut Self::Buf, src: &[f32]);
    /// `dst = src[..dst.len()]`, device to host.
    fn download(&self, dst: &mut [f32], src: &Self::Buf);
    /// `buf` itself where it is host memory (the CPU backend), so that the distributed
    /// modes send and receive a model's buffers without copying them; `None` on a device.
    fn host_view(buf: &Self::Buf) -> Option<&[f32]> {
        let _ = buf;
        None
    }
    /// [`Backend::host_view`], writable.
    fn host_view_mut(buf: &mut Self::Buf) -> Option<&mut [f32]> {
        let _ = buf;
        None
    }
    /// `buf[range] = value`.
    fn fill(&self, buf: &mut Self::Buf, range: Range<usize>, value: f32);
    /// `dst[..len] = src[..len]`.
    fn copy(&self, dst: &mut Self::Buf, src: &Self::Buf, len: usize);
    /// Residual add. out: `[len]` = a: `[len]` + b: `[len]`. Its backward hands `dout`
    /// to both inputs, so it needs no op of its own.
    fn add(&self, out: &mut Self::Buf, a: &Self::Buf, b: &Self::Buf, len: usize);
    /// Sum of squares of `buf[..len]`, in f64 (norms, divergence checks).
    fn sum_squares(&self, buf: &Self::Buf, len: usize) -> f64;

    /// `buf[..len] *= factor` (gradient clipping).
    fn scale(&self, buf: &mut Self::Buf, len: usize, factor: f32);

    /// Embedding lookup: out rows `first_row..first_row + ids.len()` of `[rows x dim]` =
    /// rows `ids` of the table at `at.weight` (`[vocab x dim]`). `ids` are host token ids,
    /// all below `vocab` (the caller checks). `first_row` lets a decoder embed one time
    /// step at a time into a whole-sequence buffer.
    fn embedding_forward(
        &self,
        out: &mut Self::Buf,
        ids: &[u32],
        first_row: usize,
        params: &Self::Buf,
        at: &Span,
        dims: &EmbeddingDims,
    );
    /// Scatter-add: table row `ids[r]` of the gradient += dout row `r`, for every row of
    /// `ids`; rows no id names are left as they are (a repeated id sums its rows).
    fn embedding_backward(
        &self,
        grads: &mut Self::Buf,
        dout: &Self::Buf,
        ids: &[u32],
        at: &Span,
        dims: &EmbeddingDims,
    );

    /// One LSTM layer (PyTorch's equations, gates i, f, g, o) over the time steps `steps`
    /// (within `0..dims.steps`) of inp: `[T x B x I]`:
    /// `gates = x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh`, `c_t = f * c_{t-1} + i * g`,
    /// `h_t = o * tanh(c_t)`. Writes out: `[T x B x H]` (h_t), cells: `[T x B x H]` (c_t)
    /// and gates: `[T x B x 4H]` (after their activations), the rows of `steps` only, and
    /// the state after the last of them into h_n, c_n: `[B x H]`. Step 0 starts from
    /// h0, c0: `[B x H]`; a later first step from rows `steps.start - 1` of out and
    /// cells, so a sequence can be run a step at a time (a decoder feeding back its own
    /// predictions) or all at once (an encoder, or teacher forcing), with the same
    /// result. The input projection is one GEMM over all the steps of the call.
    #[allow(clippy::too_many_arguments)]
    fn lstm_forward(
        &self,
        out: &mut Self::Buf,
        cells: &mut Self::Buf,
        gates: &mut Self::Buf,
        final_state: (&mut Self::Buf, &mut Self::Buf),
        inp: &Self::Buf,
        init: (&Self::Buf, &Self::Buf),
        params: &Self::Buf,
        at: &LstmSpan,
        dims: &LstmDims,
        steps: Range<usize>,
    );
    /// Backpropagation through time over all `dims.steps` steps of the last forward:
    /// dout: `[T x B x H]` is the loss's gradient w.r.t. every h_t, dfinal (dh_n, dc_n):
    /// `[B x H]` each, when given, w.r.t. the final state (a decoder started from it).
    /// Accumulates the four parameter gradients; writes dinit (dh0, dc0): `[B x H]`,
    /// dgates: `[T x B x 4H]` (the pre-activation gate gradients, work space) and, when
    /// given, dinp: `[T x B x I]`.
    #[allow(clippy::too_many_arguments)]
    fn lstm_backward(
        &self,
        dinp: Option<&mut Self::Buf>,
        dinit: (&mut Self::Buf, &mut Self::Buf),
        grads: &mut Self::Buf,
        dgates: &mut Self::Buf,
        dout: &Self::Buf,
        dfinal: Option<(&Self::Buf, &Self::Buf)>,
        inp: &Self::Buf,
        init: (&Self::Buf, &Self::Buf),
        saved: (&Self::Buf, &Self::Buf, &Self::Buf),
        params: &Self::Buf,
        at: &LstmSpan,
        dims: &LstmDims,
    );

    /// out: `[n x out_f]` = inp: `[n x in_f]` * weight^T + bias, weight `[out_f x in_f]`.
    fn linear_forward(
        &self,
        out: &mut Self::Buf,
        inp: &Self::Buf,
        params: &Self::Buf,
        at: &Span,
        dims: &LinearDims,
    );
    /// Accumulates the weight and bias gradients; writes dinp: `[n x in_f]` when given.
    #[allow(clippy::too_many_arguments)]
    fn linear_backward(
        &self,
        dinp: Option<&mut Self::Buf>,
        grads: &mut Self::Buf,
        dout: &Self::Buf,
        inp: &Self::Buf,
        params: &Self::Buf,
        at: &Span,
        dims: &LinearDims,
    );

    /// Scratch values a convolution of `dims` needs (shared by all layers, so the
    /// largest one decides).
    fn conv2d_scratch_len(&self, dims: &Conv2dDims) -> usize;
    /// out: `[n x out_c x OH x OW]` = conv(inp: `[n x C x H x W]`, weight
    /// `[out_c x C*k*k]`) + bias `[out_c]` (if any), zero padding.
    #[allow(clippy::too_many_arguments)]
    fn conv2d_forward(
        &self,
        out: &mut Self::Buf,
        scratch: &mut Self::Buf,
        inp: &Self::Buf,
        params: &Self::Buf,
        at: &Span,
        dims: &Conv2dDims,
    );
    /// Accumulates the weight (and bias) gradients; writes dinp: `[n x C x H x W]` when
    /// given.
    #[allow(clippy::too_many_arguments)]
    fn conv2d_backward(
        &self,
        dinp: Option<&mut Self::Buf>,
        grads: &mut Self::Buf,
        scratch: &mut Self::Buf,
        dout: &Self::Buf,
        inp: &Self::Buf,
        params: &Self::Buf,
        at: &Span,
        dims: &Conv2dDims,
    );

    /// out: `[n x C x plane]` = gamma * (inp - mean) / sqrt(var + eps) + beta, with
    /// gamma and beta `[C]` at `at` in `params`, the running mean and variance `[C]` each
    /// at `stats` in `state`; saved: `[2C]`, the batch mean and 1/std for backward.
    #[allow(clippy::too_many_arguments)]
    fn batchnorm_forward(
        &self,
        out: &mut Self::Buf,
        saved: &mut Self::Buf,
        state: &mut Self::Buf,
        inp: &Self::Buf,
        params: &Self::Buf,
        at: &Span,
        stats: &Span,
        dims: &BatchNormDims,
        mode: BatchNormMode,
    );
    /// Backward of a training-mode forward: accumulates gamma's and beta's gradients and
    /// writes dinp: `[n x C x plane]`.
    #[allow(clippy::too_many_arguments)]
    fn batchnorm_backward(
        &self,
        dinp: &mut Self::Buf,
        grads: &mut Self::Buf,
        dout: &Self::Buf,
        inp: &Self::Buf,
        saved: &Self::Buf,
        params: &Self::Buf,
        at: &Span,
        dims: &BatchNormDims,
    );

    /// out = max(inp, 0) over `len` values.
    fn relu_forward(&self, out: &mut Self::Buf, inp: &Self::Buf, len: usize);
    /// dinp = dout * (out > 0), from the forward's output.
    fn relu_backward(&self, dinp: &mut Self::Buf, dout: &Self::Buf, out: &Self::Buf, len: usize);

    /// Max pooling, no padding, over `planes` planes shaped as `window` says
    /// (its `channels` is ignored). out, argmax: `[planes x OH x OW]`; the first maximum
    /// wins, and argmax records its index within the plane (as f32, exact below 2^24).
    fn maxpool_forward(
        &self,
        out: &mut Self::Buf,
        argmax: &mut Self::Buf,
        inp: &Self::Buf,
        planes: usize,
        g: &Window2d,
    );
    /// Routes each output gradient to the input the forward's argmax recorded.
    fn maxpool_backward(
        &self,
        dinp: &mut Self::Buf,
        dout: &Self::Buf,
        argmax: &Self::Buf,
        planes: usize,
        g: &Window2d,
    );
    /// Average pooling, no padding. out: `[planes x OH x OW]`.
    fn avgpool_forward(&self, out: &mut Self::Buf, inp: &Self::Buf, planes: usize, g: &Window2d);
    /// dinp: `[planes x H x W]`, each input gets its windows' dout / k^2.
    fn avgpool_backward(&self, dinp: &mut Self::Buf, dout: &Self::Buf, planes: usize, g: &Window2d);
    /// out: `[planes]` = mean of each plane of inp: `[planes x plane]`.
    fn global_avgpool_forward(
        &self,
        out: &mut Self::Buf,
        inp: &Self::Buf,
        planes: usize,
        plane: usize,
    );
    /// dinp: `[planes x plane]` = dout / plane.
    fn global_avgpool_backward(
        &self,
        dinp: &mut Self::Buf,
        dout: &Self::Buf,
        planes: usize,
        plane: usize,
    );

    /// Inverted dropout: mask: `[len]` = 0 with probability `p`, else 1 / (1 - p), drawn
    /// from a counter-based hash of (`seed`, index) so every backend draws the same mask;
    /// out = inp * mask.
    fn dropout_forward(
        &self,
        out: &mut Self::Buf,
        mask: &mut Self::Buf,
        inp: &Self::Buf,
        len: usize,
        p: f32,
        seed: u64,
    );
    /// [`Backend::dropout_forward`] over the values `range` only, each drawn from its
    /// index in the whole buffer, so a sequence dropped a step at a time gets the mask it
    /// would get at once. With `p = 0` the mask is all ones and out = inp.
    fn dropout_forward_range(
        &self,
        out: &mut Self::Buf,
        mask: &mut Self::Buf,
        inp: &Self::Buf,
        range: Range<usize>,
        p: f32,
        seed: u64,
    );
    /// dinp = dout * mask.
    fn dropout_backward(
        &self,
        dinp: &mut Self::Buf,
        dout: &Self::Buf,
        mask: &Self::Buf,
        len: usize,
    );

    /// Softmax cross-entropy over `n` rows of `classes` logits with host `labels`: writes
    /// dlogits (the gradient of the batch-mean loss) and returns (mean loss, rows whose
    /// arg-max is the label).
    fn softmax_xent(
        &self,
        dlogits: &mut Self::Buf,
        logits: &Self::Buf,
        labels: &[u8],
        n: usize,
        classes: usize,
    ) -> (f32, usize);

    /// Softmax cross-entropy over `labels.len()` rows of `classes` logits, masked on
    /// `pad`: rows labelled `pad` add nothing to the loss and get a zero gradient; the
    /// loss is the mean over the other rows (the `tokens`), and dlogits its gradient.
    /// Labels are host ids below `classes` (the caller checks).
    fn softmax_xent_masked(
        &self,
        dlogits: &mut Self::Buf,
        logits: &Self::Buf,
        labels: &[u32],
        pad: u32,
        classes: usize,
    ) -> XentStats;

    /// SGD with momentum and weight decay over `params.len()` values:
    /// `g = scale * grad + wd * w; v = momentum * v + g; w -= lr * v`.
    fn sgd_step(
        &self,
        params: &mut Self::Buf,
        velocity: &mut Self::Buf,
        grads: &Self::Buf,
        h: &SgdStep,
    );

    /// Adam with L2 weight decay over `params.len()` values (PyTorch's rule):
    /// `g = scale * grad + wd * w; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;`
    /// `w -= lr * (m / bc1) / (sqrt(v / bc2) + eps)`.
    fn adam_step(
        &self,
        params: &mut Self::Buf,
        m: &mut Self::Buf,
        v: &mut Self::Buf,
        grads: &Self::Buf,
        h: &AdamStep,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_is_refused_where_it_cannot_run_and_auto_stays_on_the_cpu() {
        assert_eq!(select(DeviceKind::Auto).unwrap(), Device::Cpu);
        assert_eq!(select(DeviceKind::Cpu).unwrap(), Device::Cpu);
        match cuda_missing() {
            // This machine's reason: no driver (CI, most laptops), no GPU, or no feature.
            Some(why) => {
                let e = select(DeviceKind::Cuda).unwrap_err().to_string();
                let want = format!(
                    "device.kind: \"cuda\" cannot run here: {why}; use \"cpu\" or \"auto\""
                );
                assert_eq!(e, want);
            }
            None => assert!(matches!(select(DeviceKind::Cuda), Ok(d) if d != Device::Cpu)),
        }
    }
}
