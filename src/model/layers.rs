//! Layers: shapes and parameter offsets, with forward and backward over the CPU backend.
//!
//! A layer owns no memory. Its parameters are ranges of the network's flat parameter
//! buffer (gradients use the same ranges of the flat gradient buffer), and its
//! activations live in the network's workspace. That keeps pushes, top-k and RMA
//! windows one contiguous slice each.

use std::ops::Range;

use crate::backend::cpu::{self, Conv2dDims, LinearDims, ParamGrads, Window2d};

/// Per-sample activation shape (channels, height, width); a flat vector is (n, 1, 1).
pub type Shape = (usize, usize, usize);

pub fn shape_len(s: Shape) -> usize {
    s.0 * s.1 * s.2
}

#[derive(Debug, Clone, PartialEq)]
pub enum Layer {
    /// 2-D convolution, weight `[out_c x in_c*k*k]`, bias `[out_c]`.
    Conv2d {
        geom: Window2d,
        out_c: usize,
        weight: Range<usize>,
        bias: Range<usize>,
    },
    /// Fully connected, weight `[out x in]`, bias `[out]`.
    Linear {
        in_f: usize,
        out_f: usize,
        weight: Range<usize>,
        bias: Range<usize>,
    },
    Relu,
    /// Max pooling with kernel == stride.
    MaxPool {
        geom: Window2d,
    },
    /// NCHW -> flat features; a copy, so every layer has its own output buffer.
    Flatten,
}

impl Layer {
    /// Output shape for a given input shape.
    pub fn out_shape(&self, input: Shape) -> Shape {
        match self {
            Layer::Conv2d { geom, out_c, .. } => (*out_c, geom.out_height(), geom.out_width()),
            Layer::Linear { out_f, .. } => (*out_f, 1, 1),
            Layer::Relu => input,
            Layer::MaxPool { geom } => (geom.channels, geom.out_height(), geom.out_width()),
            Layer::Flatten => (shape_len(input), 1, 1),
        }
    }

    /// Fan-in used to initialise this layer's parameters (PyTorch's default).
    pub fn fan_in(&self) -> Option<usize> {
        match self {
            Layer::Conv2d { geom, .. } => Some(geom.col_rows()),
            Layer::Linear { in_f, .. } => Some(*in_f),
            _ => None,
        }
    }

    /// Parameter ranges (weight, bias), if any.
    pub fn param_ranges(&self) -> Option<(Range<usize>, Range<usize>)> {
        match self {
            Layer::Conv2d { weight, bias, .. } | Layer::Linear { weight, bias, .. } => {
                Some((weight.clone(), bias.clone()))
            }
            _ => None,
        }
    }

    /// Per-batch scratch this layer needs: (saved im2col columns, one dcol, argmax).
    pub fn scratch_len(&self, batch: usize) -> (usize, usize, usize) {
        match self {
            Layer::Conv2d { geom, .. } => {
                let c = geom.col_rows() * geom.col_cols();
                (batch * c, c, 0)
            }
            Layer::MaxPool { geom } => (0, 0, batch * geom.channels * geom.col_cols()),
            _ => (0, 0, 0),
        }
    }
}

/// Scratch owned by one layer, sized once for the largest batch.
#[derive(Debug, Default, Clone)]
pub struct LayerScratch {
    pub cols: Vec<f32>,
    pub dcol: Vec<f32>,
    pub argmax: Vec<u32>,
}

/// Forward of one layer over `n` samples.
pub fn forward(
    layer: &Layer,
    out: &mut [f32],
    inp: &[f32],
    params: &[f32],
    s: &mut LayerScratch,
    n: usize,
) {
    match layer {
        Layer::Conv2d {
            geom,
            out_c,
            weight,
            bias,
        } => cpu::conv2d_forward(
            out,
            &mut s.cols,
            inp,
            &params[weight.clone()],
            &params[bias.clone()],
            &Conv2dDims {
                batch: n,
                out_c: *out_c,
                window: *geom,
            },
        ),
        Layer::Linear {
            in_f,
            out_f,
            weight,
            bias,
        } => cpu::linear_forward(
            out,
            inp,
            &params[weight.clone()],
            &params[bias.clone()],
            &LinearDims {
                batch: n,
                in_f: *in_f,
                out_f: *out_f,
            },
        ),
        Layer::Relu => cpu::relu_forward(&mut out[..inp.len()], inp),
        Layer::MaxPool { geom } => {
            cpu::maxpool_forward(out, &mut s.argmax, inp, n * geom.channels, geom)
        }
        Layer::Flatten => out[..inp.len()].copy_from_slice(inp),
    }
}

/// One layer's activations over a batch, as its backward pass uses them.
pub struct BackwardIo<'a> {
    /// The gradient with respect to the layer's input, written when given (the first layer
    /// of a network does not need it).
    pub dinp: Option<&'a mut [f32]>,
    /// The gradient with respect to its output.
    pub dout: &'a [f32],
    /// Its forward pass's input and output.
    pub inp: &'a [f32],
    pub out: &'a [f32],
}

/// Backward of one layer over `n` samples: accumulates parameter gradients into `grads`
/// and writes the input gradient when `io.dinp` is given.
pub fn backward(
    layer: &Layer,
    io: BackwardIo<'_>,
    params: &[f32],
    grads: &mut [f32],
    s: &mut LayerScratch,
    n: usize,
) {
    let BackwardIo {
        dinp,
        dout,
        inp,
        out,
    } = io;
    match layer {
        Layer::Conv2d {
            geom,
            out_c,
            weight,
            bias,
        } => cpu::conv2d_backward(
            dinp,
            weight_and_bias_mut(grads, weight, bias),
            &mut s.dcol,
            dout,
            &s.cols,
            &params[weight.clone()],
            &Conv2dDims {
                batch: n,
                out_c: *out_c,
                window: *geom,
            },
        ),
        Layer::Linear {
            in_f,
            out_f,
            weight,
            bias,
        } => cpu::linear_backward(
            dinp,
            weight_and_bias_mut(grads, weight, bias),
            dout,
            inp,
            &params[weight.clone()],
            &LinearDims {
                batch: n,
                in_f: *in_f,
                out_f: *out_f,
            },
        ),
        Layer::Relu => {
            if let Some(d) = dinp {
                cpu::relu_backward(&mut d[..dout.len()], dout, out)
            }
        }
        Layer::MaxPool { geom } => {
            if let Some(d) = dinp {
                cpu::maxpool_backward(d, dout, &s.argmax, n * geom.channels, geom)
            }
        }
        Layer::Flatten => {
            if let Some(d) = dinp {
                d[..dout.len()].copy_from_slice(dout)
            }
        }
    }
}

/// Disjoint mutable slices of a weight range and the bias range that follows it.
fn weight_and_bias_mut<'a>(
    grads: &'a mut [f32],
    weight: &Range<usize>,
    bias: &Range<usize>,
) -> ParamGrads<'a> {
    debug_assert_eq!(weight.end, bias.start, "bias follows its weight");
    let (weight, bias) = grads[weight.start..bias.end].split_at_mut(weight.len());
    ParamGrads { weight, bias }
}
