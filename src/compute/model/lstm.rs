//! Multi-layer LSTM over time-major sequences, PyTorch's `nn.LSTM` (gates i, f, g, o;
//! tensors `weight_ih_l{k}` `[4H, I]`, `weight_hh_l{k}` `[4H, H]`, `bias_ih_l{k}` and
//! `bias_hh_l{k}` `[4H]`, all initialised U(-1/sqrt(H), 1/sqrt(H))), with dropout on the
//! outputs of every layer but the last while training.
//!
//! A [`Module`] (it names its tensors as `nn.LSTM` does) but not a [`super::Layer`]: it
//! carries a state in and out, so its forward and backward are its own. A sequence is run
//! in three moves, so that an encoder can hand its state to a decoder
//! and a decoder can run a step at a time:
//!
//! 1. [`Lstm::begin`]: the sequence's length T and batch B, the initial state (zeros, or
//!    an [`LstmState`] such as an encoder's [`Lstm::final_state`], copied in) and the mode
//!    (dropout in [`Mode::Train`] only);
//! 2. [`Lstm::forward_steps`] over consecutive ranges of `0..T` (all at once for an
//!    encoder or full teacher forcing; one step at a time for a decoder that feeds back
//!    its own predictions), reading the input `[T x B x I]` and writing
//!    [`Lstm::output`] `[T x B x H]` for those rows; [`Lstm::final_state`] is the state
//!    after the last step run;
//! 3. [`Lstm::backward`] through time over all T steps, from the gradient of every output
//!    and, optionally, of the final state (what the decoder's [`Lstm::init_grad`] hands
//!    back to the encoder); it accumulates the parameter gradients and writes
//!    [`Lstm::input_grad`] and [`Lstm::init_grad`].
//!
//! Padding: every position is computed, pads included, and a pad position's output is
//! kept out of the loss by the masked cross-entropy (`softmax_xent_masked`). So an
//! encoder's final state has also read the pads after a short sentence, as the reference
//! PyTorch model (no packed sequences) does.

use std::ops::Range;

use crate::compute::backend::{Backend, LstmDims, LstmSpan};

use super::module::{Allocator, Flat, FlatTensor, Init, Mode, Module, NamedTensors};
use super::row_dropout::RowDropout;
use super::ModelError;

/// Sizes of a stack of LSTM layers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LstmConfig {
    pub layers: usize,
    /// I, the features of each input step.
    pub input: usize,
    /// H, the features of h and c.
    pub hidden: usize,
    /// Dropout probability on each layer's output but the last's, in training.
    pub dropout: f32,
}

/// (h, c) of every layer, `[B x H]` each: PyTorch's `(h_n, c_n)`, `[layers, B, H]`, one
/// buffer per layer.
pub struct LstmState<B: Backend> {
    pub h: Vec<B::Buf>,
    pub c: Vec<B::Buf>,
}

impl<B: Backend> LstmState<B> {
    /// Zeros for `layers` layers of `batch x hidden`.
    pub fn zeros(be: &B, layers: usize, batch: usize, hidden: usize) -> Self {
        LstmState {
            h: (0..layers).map(|_| be.alloc(batch * hidden)).collect(),
            c: (0..layers).map(|_| be.alloc(batch * hidden)).collect(),
        }
    }

    fn layer(&self, l: usize) -> (&B::Buf, &B::Buf) {
        (&self.h[l], &self.c[l])
    }

    fn layer_mut(&mut self, l: usize) -> (&mut B::Buf, &mut B::Buf) {
        (&mut self.h[l], &mut self.c[l])
    }
}

/// One layer's tensors, PyTorch's `weight_ih_l{k}`, `weight_hh_l{k}`, `bias_ih_l{k}`,
/// `bias_hh_l{k}`.
struct LayerTensors {
    weight_ih: FlatTensor,
    weight_hh: FlatTensor,
    bias_ih: FlatTensor,
    bias_hh: FlatTensor,
}

impl LayerTensors {
    /// Where the backend's operations find them.
    fn span(&self) -> LstmSpan {
        LstmSpan {
            weight_ih: self.weight_ih.range.clone(),
            weight_hh: self.weight_hh.range.clone(),
            bias_ih: self.bias_ih.range.clone(),
            bias_hh: self.bias_hh.range.clone(),
        }
    }

    fn visit(&self, tensors: &mut NamedTensors, layer: usize) {
        tensors.param(&format!("weight_ih_l{layer}"), &self.weight_ih);
        tensors.param(&format!("weight_hh_l{layer}"), &self.weight_hh);
        tensors.param(&format!("bias_ih_l{layer}"), &self.bias_ih);
        tensors.param(&format!("bias_hh_l{layer}"), &self.bias_hh);
    }
}

struct Layer<B: Backend> {
    at: LayerTensors,
    input: usize,
    /// h_t and c_t `[T x B x H]`, the activated gates `[T x B x 4H]`.
    out: B::Buf,
    cells: B::Buf,
    gates: B::Buf,
    dgates: B::Buf,
    /// Gradient of this layer's input `[T x B x I_l]`.
    dinp: B::Buf,
    /// A layer above the first reads the output of the one below through dropout.
    dropped: Option<RowDropout<B>>,
}

/// The sequence being run.
#[derive(Debug, Clone, Copy)]
struct Run {
    steps: usize,
    batch: usize,
    /// Steps run so far: the next range starts here.
    done: usize,
    dropout: f32,
    seed: u64,
}

/// A stack of LSTM layers; see the module doc for how a sequence is run.
pub struct Lstm<B: Backend> {
    cfg: LstmConfig,
    layers: Vec<Layer<B>>,
    max_steps: usize,
    max_batch: usize,
    init: LstmState<B>,
    final_state: LstmState<B>,
    dinit: LstmState<B>,
    run: Option<Run>,
}

impl<B: Backend> Lstm<B> {
    /// Declares the layers' tensors through `alloc` and allocates activations for
    /// `max_steps` steps of `alloc.max_batch` sequences.
    pub fn new(be: &B, alloc: &mut Allocator, cfg: LstmConfig, max_steps: usize) -> Self {
        let LstmConfig {
            layers,
            input,
            hidden: h,
            ..
        } = cfg;
        assert!(layers > 0, "an LSTM has at least one layer");
        let max_batch = alloc.max_batch;
        let rows = max_steps * max_batch;
        let init = Init::Uniform {
            bound: 1.0 / (h as f32).sqrt(),
        };
        let layers = (0..layers)
            .map(|l| {
                let in_l = if l == 0 { input } else { h };
                let at = LayerTensors {
                    weight_ih: alloc.param(&[4 * h, in_l], init),
                    weight_hh: alloc.param(&[4 * h, h], init),
                    bias_ih: alloc.param(&[4 * h], init),
                    bias_hh: alloc.param(&[4 * h], init),
                };
                let dropped = (l > 0).then(|| RowDropout::new(be, alloc, rows * h));
                Layer {
                    at,
                    input: in_l,
                    out: be.alloc(rows * h),
                    cells: be.alloc(rows * h),
                    gates: be.alloc(rows * 4 * h),
                    dgates: be.alloc(rows * 4 * h),
                    dinp: be.alloc(rows * in_l),
                    dropped,
                }
            })
            .collect();
        let state = || LstmState::zeros(be, cfg.layers, max_batch, h);
        Lstm {
            cfg,
            layers,
            max_steps,
            max_batch,
            init: state(),
            final_state: state(),
            dinit: state(),
            run: None,
        }
    }

    pub fn config(&self) -> LstmConfig {
        self.cfg
    }

    /// Starts a sequence of `steps` steps of `batch` columns from `init` (copied; zeros
    /// when `None`). Dropout is on in [`Mode::Train`] only, with this step's mask
    /// (`flat.dropout_seed`).
    pub fn begin(
        &mut self,
        be: &B,
        flat: &Flat<B>,
        steps: usize,
        batch: usize,
        init: Option<&LstmState<B>>,
        mode: Mode,
    ) -> Result<(), ModelError> {
        for (what, got, max) in [
            ("steps", steps, self.max_steps),
            ("batch", batch, self.max_batch),
        ] {
            if got > max || got == 0 {
                return Err(ModelError::TooLarge {
                    layer: "lstm",
                    what,
                    got,
                    max,
                });
            }
        }
        let bh = batch * self.cfg.hidden;
        for l in 0..self.cfg.layers {
            let (h, c) = self.init.layer_mut(l);
            match init {
                Some(s) => {
                    be.copy(h, &s.h[l], bh);
                    be.copy(c, &s.c[l], bh);
                }
                None => {
                    be.fill(h, 0..bh, 0.0);
                    be.fill(c, 0..bh, 0.0);
                }
            }
        }
        let train = mode == Mode::Train;
        self.run = Some(Run {
            steps,
            batch,
            done: 0,
            dropout: if train { self.cfg.dropout } else { 0.0 },
            seed: flat.dropout_seed,
        });
        Ok(())
    }

    /// Runs `steps` (the next steps of the sequence [`Lstm::begin`] started) over inp:
    /// `[T x B x I]`, of which rows `steps` are read.
    ///
    /// Panics when no sequence was begun or `steps` does not continue it: that is a bug in
    /// the caller, not bad data.
    pub fn forward_steps(&mut self, be: &B, flat: &Flat<B>, inp: &B::Buf, steps: Range<usize>) {
        let run = self.run.as_mut().expect("Lstm::begin before forward_steps");
        assert!(
            steps.start == run.done && steps.start < steps.end && steps.end <= run.steps,
            "LSTM steps {steps:?} do not continue 0..{} of 0..{}",
            run.done,
            run.steps
        );
        run.done = steps.end;
        let run = *run;
        let h = self.cfg.hidden;
        for l in 0..self.layers.len() {
            let (below, rest) = self.layers.split_at_mut(l);
            let layer = &mut rest[0];
            let dims = LstmDims {
                steps: run.steps,
                batch: run.batch,
                input: layer.input,
                hidden: h,
            };
            let x = match (&mut layer.dropped, below.last()) {
                (Some(d), Some(prev)) => {
                    let rows = run.batch * h;
                    let range = steps.start * rows..steps.end * rows;
                    d.forward(be, &prev.out, range, run.dropout, run.seed);
                    d.output()
                }
                _ => inp,
            };
            be.lstm_forward(
                &mut layer.out,
                &mut layer.cells,
                &mut layer.gates,
                self.final_state.layer_mut(l),
                x,
                self.init.layer(l),
                &flat.params,
                &layer.at.span(),
                &dims,
                steps.clone(),
            );
        }
    }

    /// [`Lstm::begin`] and [`Lstm::forward_steps`] over all `steps` steps at once.
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &mut self,
        be: &B,
        flat: &Flat<B>,
        inp: &B::Buf,
        steps: usize,
        batch: usize,
        init: Option<&LstmState<B>>,
        mode: Mode,
    ) -> Result<(), ModelError> {
        self.begin(be, flat, steps, batch, init, mode)?;
        self.forward_steps(be, flat, inp, 0..steps);
        Ok(())
    }

    /// Backpropagation through time over the whole sequence, which must have been run to
    /// its end. dout: `[T x B x H]`, the gradient of every top-layer output (zero rows
    /// where an output feeds no loss); `dfinal`, when given, the gradient of
    /// [`Lstm::final_state`]. `inp` is the forward's input. Accumulates the parameter
    /// gradients into `flat.grads`, writes [`Lstm::init_grad`] and, when `need_dinp`,
    /// [`Lstm::input_grad`].
    pub fn backward(
        &mut self,
        be: &B,
        flat: &mut Flat<B>,
        inp: &B::Buf,
        dout: &B::Buf,
        dfinal: Option<&LstmState<B>>,
        need_dinp: bool,
    ) {
        let run = self.run.expect("Lstm::backward after a forward");
        assert_eq!(
            run.done, run.steps,
            "Lstm::backward before the sequence's last step was run"
        );
        let h = self.cfg.hidden;
        for l in (0..self.layers.len()).rev() {
            let (lower, rest) = self.layers.split_at_mut(l + 1);
            let layer = &mut lower[l];
            let dims = LstmDims {
                steps: run.steps,
                batch: run.batch,
                input: layer.input,
                hidden: h,
            };
            let d = match rest.first() {
                Some(above) => above
                    .dropped
                    .as_ref()
                    .expect("layers above 0 drop")
                    .input_grad(),
                None => dout,
            };
            let x = layer.dropped.as_ref().map_or(inp, |dr| dr.output());
            let dinp = (l > 0 || need_dinp).then_some(&mut layer.dinp);
            be.lstm_backward(
                dinp,
                self.dinit.layer_mut(l),
                &mut flat.grads,
                &mut layer.dgates,
                d,
                dfinal.map(|s| s.layer(l)),
                x,
                self.init.layer(l),
                (&layer.out, &layer.cells, &layer.gates),
                &flat.params,
                &layer.at.span(),
                &dims,
            );
            if let Some(dr) = &mut layer.dropped {
                dr.backward(be, &layer.dinp, run.steps * run.batch * h);
            }
        }
    }

    /// Top layer's h_t, `[T x B x H]` (no dropout on it).
    pub fn output(&self) -> &B::Buf {
        &self.layers.last().expect("at least one layer").out
    }

    /// (h, c) of every layer after the last step run.
    pub fn final_state(&self) -> &LstmState<B> {
        &self.final_state
    }

    /// Gradient of the first layer's input, `[T x B x I]`, from the last
    /// [`Lstm::backward`] with `need_dinp`.
    pub fn input_grad(&self) -> &B::Buf {
        &self.layers[0].dinp
    }

    /// Gradient of the initial state (what the encoder gets as its `dfinal`), from the last
    /// [`Lstm::backward`].
    pub fn init_grad(&self) -> &LstmState<B> {
        &self.dinit
    }
}

impl<B: Backend> Module<B> for Lstm<B> {
    fn visit(&self, tensors: &mut NamedTensors) {
        for (l, layer) in self.layers.iter().enumerate() {
            layer.at.visit(tensors, l);
        }
    }

    /// Values allocated for activations and state (memory reports).
    fn activation_len(&self) -> usize {
        let rows = self.max_steps * self.max_batch;
        let h = self.cfg.hidden;
        let dropped = |l: &Layer<B>| l.dropped.as_ref().map_or(0, |d| d.activation_len());
        let per_layer: usize = self
            .layers
            .iter()
            .map(|l| rows * (10 * h + l.input) + dropped(l))
            .sum();
        per_layer + 6 * self.cfg.layers * self.max_batch * h
    }
}
