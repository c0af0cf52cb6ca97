//! Layers: each a [`Layer`] over the backend's operations, and a [`Module`] that reports
//! the tensors it declared.

use crate::compute::backend::{
    Backend, BatchNormDims, BatchNormMode, Conv2dDims, LinearDims, Span, Window2d,
};

use super::module::{
    shape_len, Allocator, Flat, FlatTensor, Init, Layer, Mode, Module, NamedTensors, Shape,
};

/// A layer's own activation buffers: its output and the gradient of its input, each for
/// the largest batch.
struct Acts<B: Backend> {
    out: B::Buf,
    dinp: B::Buf,
    out_shape: Shape,
    in_len: usize,
    out_len: usize,
    max_batch: usize,
}

impl<B: Backend> Acts<B> {
    fn new(be: &B, alloc: &Allocator, input: Shape, output: Shape) -> Self {
        let (in_len, out_len) = (shape_len(input), shape_len(output));
        Acts {
            out: be.alloc(alloc.max_batch * out_len),
            dinp: be.alloc(alloc.max_batch * in_len),
            out_shape: output,
            in_len,
            out_len,
            max_batch: alloc.max_batch,
        }
    }

    /// Values allocated: output and input gradient.
    fn len(&self) -> usize {
        self.max_batch * (self.in_len + self.out_len)
    }
}

/// The [`Layer`] methods every layer answers from its [`Acts`].
macro_rules! acts_accessors {
    () => {
        fn out_shape(&self) -> Shape {
            self.acts.out_shape
        }
        fn output(&self) -> &B::Buf {
            &self.acts.out
        }
        fn input_grad(&self) -> &B::Buf {
            &self.acts.dinp
        }
    };
}

/// The [`Module`] of a layer whose tensors are its [`WeightBias`] `$tensors`, or of one
/// without tensors: its activations are all it has besides.
macro_rules! acts_module {
    ($layer:ident, $tensors:ident) => {
        impl<B: Backend> Module<B> for $layer<B> {
            fn visit(&self, tensors: &mut NamedTensors) {
                self.$tensors.visit(tensors);
            }
            fn activation_len(&self) -> usize {
                self.acts.len()
            }
        }
    };
    ($($layer:ident),*) => {$(
        impl<B: Backend> Module<B> for $layer<B> {
            fn visit(&self, _: &mut NamedTensors) {}
            fn activation_len(&self) -> usize {
                self.acts.len()
            }
        }
    )*};
}

acts_module!(Conv2d, at);
acts_module!(Linear, at);
acts_module!(Relu, Pool2d, GlobalAvgPool, Dropout, Flatten);

/// A weight and an optional bias, PyTorch's `weight` and `bias` of a module.
struct WeightBias {
    weight: FlatTensor,
    bias: Option<FlatTensor>,
}

impl WeightBias {
    /// PyTorch's default initialisation of a weight of `shape` (`[out, ...]`) and, with
    /// `bias`, its bias `[out]`, for `fan_in` inputs.
    fn default_init(alloc: &mut Allocator, shape: &[usize], bias: bool, fan_in: usize) -> Self {
        let weight = alloc.param(shape, Init::KaimingUniform { fan_in });
        let bound = 1.0 / (fan_in as f32).sqrt();
        let bias = bias.then(|| alloc.param(&shape[..1], Init::Uniform { bound }));
        WeightBias { weight, bias }
    }

    /// Where the backend's operations find them.
    fn span(&self) -> Span {
        Span {
            weight: self.weight.range.clone(),
            bias: self.bias.as_ref().map(|b| b.range.clone()),
        }
    }

    fn visit(&self, tensors: &mut NamedTensors) {
        tensors.param("weight", &self.weight);
        if let Some(bias) = &self.bias {
            tensors.param("bias", bias);
        }
    }
}

/// 2-D convolution with stride and zero padding; weight `[out_c x in_c*k*k]`, optional
/// bias `[out_c]` (none before a batch norm, which would cancel it).
pub struct Conv2d<B: Backend> {
    acts: Acts<B>,
    window: Window2d,
    out_c: usize,
    at: WeightBias,
}

impl<B: Backend> Conv2d<B> {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        be: &B,
        alloc: &mut Allocator,
        input: Shape,
        out_c: usize,
        kernel: usize,
        stride: usize,
        pad: usize,
        bias: bool,
    ) -> Self {
        let window = Window2d {
            channels: input.0,
            height: input.1,
            width: input.2,
            kernel,
            stride,
            pad,
        };
        let fan_in = window.col_rows();
        // The weight's columns are im2col rows: (input channel, kernel row, kernel column).
        let shape = [out_c, input.0, kernel, kernel];
        let at = WeightBias::default_init(alloc, &shape, bias, fan_in);
        let dims = Conv2dDims {
            batch: alloc.max_batch,
            out_c,
            window,
        };
        alloc.scratch(be.conv2d_scratch_len(&dims));
        let output = (out_c, window.out_height(), window.out_width());
        Conv2d {
            acts: Acts::new(be, alloc, input, output),
            window,
            out_c,
            at,
        }
    }

    fn dims(&self, n: usize) -> Conv2dDims {
        Conv2dDims {
            batch: n,
            out_c: self.out_c,
            window: self.window,
        }
    }
}

impl<B: Backend> Layer<B> for Conv2d<B> {
    acts_accessors!();
    fn forward(&mut self, be: &B, flat: &mut Flat<B>, inp: &B::Buf, n: usize, _: Mode) {
        let dims = self.dims(n);
        be.conv2d_forward(
            &mut self.acts.out,
            &mut flat.scratch,
            inp,
            &flat.params,
            &self.at.span(),
            &dims,
        );
    }
    fn backward(
        &mut self,
        be: &B,
        flat: &mut Flat<B>,
        inp: &B::Buf,
        dout: &B::Buf,
        n: usize,
        need_dinp: bool,
    ) {
        let dims = self.dims(n);
        let dinp = need_dinp.then_some(&mut self.acts.dinp);
        be.conv2d_backward(
            dinp,
            &mut flat.grads,
            &mut flat.scratch,
            dout,
            inp,
            &flat.params,
            &self.at.span(),
            &dims,
        );
    }
}

/// Fully connected: weight `[out x in]`, bias `[out]`, over the flattened input.
pub struct Linear<B: Backend> {
    acts: Acts<B>,
    in_f: usize,
    out_f: usize,
    at: WeightBias,
}

impl<B: Backend> Linear<B> {
    pub fn new(be: &B, alloc: &mut Allocator, input: Shape, out_f: usize) -> Self {
        let in_f = shape_len(input);
        let at = WeightBias::default_init(alloc, &[out_f, in_f], true, in_f);
        Linear {
            acts: Acts::new(be, alloc, input, (out_f, 1, 1)),
            in_f,
            out_f,
            at,
        }
    }

    fn dims(&self, n: usize) -> LinearDims {
        LinearDims {
            batch: n,
            in_f: self.in_f,
            out_f: self.out_f,
        }
    }
}

impl<B: Backend> Layer<B> for Linear<B> {
    acts_accessors!();
    fn forward(&mut self, be: &B, flat: &mut Flat<B>, inp: &B::Buf, n: usize, _: Mode) {
        let dims = self.dims(n);
        let at = self.at.span();
        be.linear_forward(&mut self.acts.out, inp, &flat.params, &at, &dims);
    }
    fn backward(
        &mut self,
        be: &B,
        flat: &mut Flat<B>,
        inp: &B::Buf,
        dout: &B::Buf,
        n: usize,
        need_dinp: bool,
    ) {
        let dims = self.dims(n);
        let dinp = need_dinp.then_some(&mut self.acts.dinp);
        be.linear_backward(
            dinp,
            &mut flat.grads,
            dout,
            inp,
            &flat.params,
            &self.at.span(),
            &dims,
        );
    }
}

/// PyTorch's `BatchNorm2d` defaults.
pub const BATCH_NORM_MOMENTUM: f32 = 0.1;
pub const BATCH_NORM_EPS: f32 = 1e-5;

/// Batch norm over channels: scale `weight` (ones) and shift `bias` (zeros) are trained;
/// `running_mean` (zeros) and `running_var` (ones) are state.
pub struct BatchNorm2d<B: Backend> {
    acts: Acts<B>,
    /// Batch mean and 1/std of the last training forward.
    saved: B::Buf,
    at: WeightBias,
    running_mean: FlatTensor,
    running_var: FlatTensor,
    channels: usize,
    plane: usize,
}

impl<B: Backend> BatchNorm2d<B> {
    pub fn new(be: &B, alloc: &mut Allocator, input: Shape) -> Self {
        let c = input.0;
        let at = WeightBias {
            weight: alloc.param(&[c], Init::Ones),
            bias: Some(alloc.param(&[c], Init::Zeros)),
        };
        BatchNorm2d {
            running_mean: alloc.state(&[c], Init::Zeros),
            running_var: alloc.state(&[c], Init::Ones),
            acts: Acts::new(be, alloc, input, input),
            saved: be.alloc(2 * c),
            at,
            channels: c,
            plane: input.1 * input.2,
        }
    }

    fn dims(&self, n: usize) -> BatchNormDims {
        BatchNormDims {
            batch: n,
            channels: self.channels,
            plane: self.plane,
            eps: BATCH_NORM_EPS,
        }
    }
}

impl<B: Backend> Module<B> for BatchNorm2d<B> {
    fn visit(&self, tensors: &mut NamedTensors) {
        self.at.visit(tensors);
        tensors.state("running_mean", &self.running_mean);
        tensors.state("running_var", &self.running_var);
    }
    fn activation_len(&self) -> usize {
        self.acts.len()
    }
}

impl<B: Backend> Layer<B> for BatchNorm2d<B> {
    acts_accessors!();
    fn forward(&mut self, be: &B, flat: &mut Flat<B>, inp: &B::Buf, n: usize, mode: Mode) {
        let mode = match mode {
            Mode::Train => BatchNormMode::Train {
                momentum: BATCH_NORM_MOMENTUM,
            },
            // The k-th batch of a re-estimation weighs 1/(k+1): a cumulative average.
            Mode::Calibrate { batch } => BatchNormMode::Train {
                momentum: 1.0 / (batch as f32 + 1.0),
            },
            Mode::Eval => BatchNormMode::Eval,
        };
        let dims = self.dims(n);
        let stats = Span {
            weight: self.running_mean.range.clone(),
            bias: Some(self.running_var.range.clone()),
        };
        let Flat { params, state, .. } = flat;
        be.batchnorm_forward(
            &mut self.acts.out,
            &mut self.saved,
            state,
            inp,
            params,
            &self.at.span(),
            &stats,
            &dims,
            mode,
        );
    }
    fn backward(
        &mut self,
        be: &B,
        flat: &mut Flat<B>,
        inp: &B::Buf,
        dout: &B::Buf,
        n: usize,
        _need_dinp: bool,
    ) {
        let dims = self.dims(n);
        let Flat { params, grads, .. } = flat;
        be.batchnorm_backward(
            &mut self.acts.dinp,
            grads,
            dout,
            inp,
            &self.saved,
            params,
            &self.at.span(),
            &dims,
        );
    }
}

/// max(x, 0).
pub struct Relu<B: Backend> {
    acts: Acts<B>,
}

impl<B: Backend> Relu<B> {
    pub fn new(be: &B, alloc: &Allocator, input: Shape) -> Self {
        Relu {
            acts: Acts::new(be, alloc, input, input),
        }
    }
}

impl<B: Backend> Layer<B> for Relu<B> {
    acts_accessors!();
    fn forward(&mut self, be: &B, _: &mut Flat<B>, inp: &B::Buf, n: usize, _: Mode) {
        be.relu_forward(&mut self.acts.out, inp, n * self.acts.in_len);
    }
    fn backward(
        &mut self,
        be: &B,
        _: &mut Flat<B>,
        _: &B::Buf,
        dout: &B::Buf,
        n: usize,
        need_dinp: bool,
    ) {
        if need_dinp {
            be.relu_backward(
                &mut self.acts.dinp,
                dout,
                &self.acts.out,
                n * self.acts.in_len,
            );
        }
    }
}

/// Which statistic a pooling window takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolKind {
    Max,
    Average,
}

/// Max or average pooling over `kernel x kernel` windows every `stride`, no padding.
pub struct Pool2d<B: Backend> {
    acts: Acts<B>,
    /// Max pooling's argmax, for backward (empty for average pooling).
    argmax: B::Buf,
    window: Window2d,
    kind: PoolKind,
}

impl<B: Backend> Pool2d<B> {
    pub fn new(
        be: &B,
        alloc: &Allocator,
        input: Shape,
        kind: PoolKind,
        kernel: usize,
        stride: usize,
    ) -> Self {
        let window = Window2d {
            channels: input.0,
            height: input.1,
            width: input.2,
            kernel,
            stride,
            pad: 0,
        };
        let output = (input.0, window.out_height(), window.out_width());
        let argmax_len = match kind {
            PoolKind::Max => alloc.max_batch * shape_len(output),
            PoolKind::Average => 0,
        };
        Pool2d {
            acts: Acts::new(be, alloc, input, output),
            argmax: be.alloc(argmax_len),
            window,
            kind,
        }
    }
}

impl<B: Backend> Layer<B> for Pool2d<B> {
    acts_accessors!();
    fn forward(&mut self, be: &B, _: &mut Flat<B>, inp: &B::Buf, n: usize, _: Mode) {
        let planes = n * self.window.channels;
        match self.kind {
            PoolKind::Max => be.maxpool_forward(
                &mut self.acts.out,
                &mut self.argmax,
                inp,
                planes,
                &self.window,
            ),
            PoolKind::Average => be.avgpool_forward(&mut self.acts.out, inp, planes, &self.window),
        }
    }
    fn backward(
        &mut self,
        be: &B,
        _: &mut Flat<B>,
        _: &B::Buf,
        dout: &B::Buf,
        n: usize,
        need_dinp: bool,
    ) {
        if !need_dinp {
            return;
        }
        let planes = n * self.window.channels;
        let dinp = &mut self.acts.dinp;
        match self.kind {
            PoolKind::Max => be.maxpool_backward(dinp, dout, &self.argmax, planes, &self.window),
            PoolKind::Average => be.avgpool_backward(dinp, dout, planes, &self.window),
        }
    }
}

/// Mean of each channel's plane: `(C, H, W)` to `(C, 1, 1)`.
pub struct GlobalAvgPool<B: Backend> {
    acts: Acts<B>,
    channels: usize,
    plane: usize,
}

impl<B: Backend> GlobalAvgPool<B> {
    pub fn new(be: &B, alloc: &Allocator, input: Shape) -> Self {
        GlobalAvgPool {
            acts: Acts::new(be, alloc, input, (input.0, 1, 1)),
            channels: input.0,
            plane: input.1 * input.2,
        }
    }
}

impl<B: Backend> Layer<B> for GlobalAvgPool<B> {
    acts_accessors!();
    fn forward(&mut self, be: &B, _: &mut Flat<B>, inp: &B::Buf, n: usize, _: Mode) {
        be.global_avgpool_forward(&mut self.acts.out, inp, n * self.channels, self.plane);
    }
    fn backward(
        &mut self,
        be: &B,
        _: &mut Flat<B>,
        _: &B::Buf,
        dout: &B::Buf,
        n: usize,
        need_dinp: bool,
    ) {
        if need_dinp {
            be.global_avgpool_backward(&mut self.acts.dinp, dout, n * self.channels, self.plane);
        }
    }
}

/// Inverted dropout with probability `p`, identity at evaluation. Each training forward
/// draws a fresh mask from (the layer's seed, the network's dropout stream, the step).
pub struct Dropout<B: Backend> {
    acts: Acts<B>,
    mask: B::Buf,
    p: f32,
    seed: u64,
    active: bool,
}

impl<B: Backend> Dropout<B> {
    pub fn new(be: &B, alloc: &mut Allocator, input: Shape, p: f32) -> Self {
        let seed = alloc.next_seed();
        Dropout {
            mask: be.alloc(alloc.max_batch * shape_len(input)),
            acts: Acts::new(be, alloc, input, input),
            p,
            seed,
            active: false,
        }
    }
}

impl<B: Backend> Layer<B> for Dropout<B> {
    acts_accessors!();
    fn forward(&mut self, be: &B, flat: &mut Flat<B>, inp: &B::Buf, n: usize, mode: Mode) {
        let len = n * self.acts.in_len;
        self.active = mode != Mode::Eval && self.p > 0.0;
        if self.active {
            let seed = self.seed ^ flat.dropout_seed;
            be.dropout_forward(&mut self.acts.out, &mut self.mask, inp, len, self.p, seed);
        } else {
            be.copy(&mut self.acts.out, inp, len);
        }
    }
    fn backward(
        &mut self,
        be: &B,
        _: &mut Flat<B>,
        _: &B::Buf,
        dout: &B::Buf,
        n: usize,
        need_dinp: bool,
    ) {
        let len = n * self.acts.in_len;
        if need_dinp {
            if self.active {
                be.dropout_backward(&mut self.acts.dinp, dout, &self.mask, len);
            } else {
                be.copy(&mut self.acts.dinp, dout, len);
            }
        }
    }
}

/// `(C, H, W)` to `(C*H*W, 1, 1)`: the memory layout does not change, so this is a copy
/// (every module owns its output).
pub struct Flatten<B: Backend> {
    acts: Acts<B>,
}

impl<B: Backend> Flatten<B> {
    pub fn new(be: &B, alloc: &Allocator, input: Shape) -> Self {
        Flatten {
            acts: Acts::new(be, alloc, input, (shape_len(input), 1, 1)),
        }
    }
}

impl<B: Backend> Layer<B> for Flatten<B> {
    acts_accessors!();
    fn forward(&mut self, be: &B, _: &mut Flat<B>, inp: &B::Buf, n: usize, _: Mode) {
        be.copy(&mut self.acts.out, inp, n * self.acts.in_len);
    }
    fn backward(
        &mut self,
        be: &B,
        _: &mut Flat<B>,
        _: &B::Buf,
        dout: &B::Buf,
        n: usize,
        need_dinp: bool,
    ) {
        if need_dinp {
            be.copy(&mut self.acts.dinp, dout, n * self.acts.in_len);
        }
    }
}
