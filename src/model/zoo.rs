//! Model definitions: LeNet-5 and a small MLP.

use super::layers::{shape_len, Layer, Shape};
use super::Network;
use crate::backend::cpu::Window2d;

/// Appends layers while handing out consecutive parameter ranges and tracking the shape.
pub struct Builder {
    layers: Vec<Layer>,
    shape: Shape,
    next_param: usize,
    input: Shape,
}

impl Builder {
    pub fn new(input: Shape) -> Self {
        Builder {
            layers: Vec::new(),
            shape: input,
            next_param: 0,
            input,
        }
    }

    /// The network with PyTorch's default initialisation from `seed`.
    pub fn finish(self, name: &str, max_batch: usize, seed: u64) -> Network {
        Network::from_layers(name, self.layers, self.input, max_batch, seed)
    }

    fn push(&mut self, layer: Layer) -> &mut Self {
        self.shape = layer.out_shape(self.shape);
        self.layers.push(layer);
        self
    }

    fn params(&mut self, len: usize) -> std::ops::Range<usize> {
        let r = self.next_param..self.next_param + len;
        self.next_param += len;
        r
    }

    pub fn conv(&mut self, out_c: usize, kernel: usize, pad: usize) -> &mut Self {
        self.conv_strided(out_c, kernel, 1, pad)
    }

    pub fn conv_strided(
        &mut self,
        out_c: usize,
        kernel: usize,
        stride: usize,
        pad: usize,
    ) -> &mut Self {
        let (c, h, w) = self.shape;
        let geom = Window2d {
            channels: c,
            height: h,
            width: w,
            kernel,
            stride,
            pad,
        };
        let weight = self.params(out_c * geom.col_rows());
        let bias = self.params(out_c);
        self.push(Layer::Conv2d {
            geom,
            out_c,
            weight,
            bias,
        })
    }

    pub fn maxpool(&mut self, k: usize) -> &mut Self {
        let (c, h, w) = self.shape;
        let geom = Window2d {
            channels: c,
            height: h,
            width: w,
            kernel: k,
            stride: k,
            pad: 0,
        };
        self.push(Layer::MaxPool { geom })
    }

    pub fn linear(&mut self, out_f: usize) -> &mut Self {
        let in_f = shape_len(self.shape);
        let weight = self.params(out_f * in_f);
        let bias = self.params(out_f);
        self.push(Layer::Linear {
            in_f,
            out_f,
            weight,
            bias,
        })
    }

    pub fn relu(&mut self) -> &mut Self {
        self.push(Layer::Relu)
    }

    pub fn flatten(&mut self) -> &mut Self {
        self.push(Layer::Flatten)
    }
}

/// LeNet-5 as in the paper's experiments (for 1x28x28: conv 6@5x5 pad 2, relu, maxpool 2,
/// conv 16@5x5, relu, maxpool 2, fc 120, relu, fc 84, relu, fc classes): 61,706 parameters
/// for MNIST. Other input sizes (CIFAR-10's 3x32x32) get the same stack.
pub fn lenet5(input: Shape, classes: usize, max_batch: usize, seed: u64) -> Network {
    let mut b = Builder::new(input);
    b.conv(6, 5, 2).relu().maxpool(2);
    b.conv(16, 5, 0).relu().maxpool(2);
    b.flatten()
        .linear(120)
        .relu()
        .linear(84)
        .relu()
        .linear(classes);
    b.finish("lenet5", max_batch, seed)
}

/// Multi-layer perceptron: flatten, then `hidden` widths with ReLU, then `classes` logits.
pub fn mlp(input: Shape, hidden: &[usize], classes: usize, max_batch: usize, seed: u64) -> Network {
    let mut b = Builder::new(input);
    b.flatten();
    for &h in hidden {
        b.linear(h).relu();
    }
    b.linear(classes);
    b.finish("mlp", max_batch, seed)
}
