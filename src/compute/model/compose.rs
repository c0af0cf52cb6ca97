//! Composition: a sequence of modules, and a residual block (a body and a skip path,
//! summed).

use crate::compute::backend::Backend;

use super::module::{shape_len, Allocator, Flat, Layer, Mode, Module, NamedTensors, Shape};

/// Layers applied one after the other, named `0`, `1`, ... as PyTorch's `nn.Sequential`
/// names its children.
pub struct Sequential<B: Backend> {
    modules: Vec<Box<dyn Layer<B>>>,
    input: Shape,
}

impl<B: Backend> Sequential<B> {
    pub fn new(input: Shape, modules: Vec<Box<dyn Layer<B>>>) -> Self {
        Sequential { modules, input }
    }

    pub fn is_empty(&self) -> bool {
        self.modules.is_empty()
    }
}

impl<B: Backend> Module<B> for Sequential<B> {
    fn visit(&self, tensors: &mut NamedTensors) {
        for (i, m) in self.modules.iter().enumerate() {
            tensors.child(&i.to_string(), m.as_ref());
        }
    }

    fn activation_len(&self) -> usize {
        self.modules.iter().map(|m| m.activation_len()).sum()
    }
}

impl<B: Backend> Layer<B> for Sequential<B> {
    fn out_shape(&self) -> Shape {
        self.modules.last().map_or(self.input, |m| m.out_shape())
    }

    fn forward(&mut self, be: &B, flat: &mut Flat<B>, inp: &B::Buf, n: usize, mode: Mode) {
        for i in 0..self.modules.len() {
            let (before, rest) = self.modules.split_at_mut(i);
            let x = before.last().map_or(inp, |m| m.output());
            rest[0].forward(be, flat, x, n, mode);
        }
    }

    fn output(&self) -> &B::Buf {
        self.modules
            .last()
            .expect("an empty sequence is never run")
            .output()
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
        for i in (0..self.modules.len()).rev() {
            let (before, rest) = self.modules.split_at_mut(i);
            let (current, after) = rest.split_first_mut().expect("i < len");
            let x = before.last().map_or(inp, |m| m.output());
            let d = after.first().map_or(dout, |m| m.input_grad());
            current.backward(be, flat, x, d, n, need_dinp || i > 0);
        }
    }

    fn input_grad(&self) -> &B::Buf {
        self.modules
            .first()
            .expect("an empty sequence is never run")
            .input_grad()
    }
}

/// `body(x) + skip(x)`, then a ReLU if asked (ResNet's basic block), where the skip is the
/// identity or a projection (a 1x1 convolution and a batch norm where the shape changes).
/// Its backward hands the output gradient to both paths and sums their input gradients.
pub struct Residual<B: Backend> {
    body: Sequential<B>,
    skip: Option<Sequential<B>>,
    /// body + skip, and its gradient; with `relu` off, `out` holds the sum itself.
    sum: B::Buf,
    dsum: B::Buf,
    relu: bool,
    out: B::Buf,
    dinp: B::Buf,
    in_len: usize,
    out_shape: Shape,
    max_batch: usize,
}

impl<B: Backend> Residual<B> {
    /// A block over `body` and `skip` (`None`: the identity, so the body must keep the
    /// shape).
    pub fn new(
        be: &B,
        alloc: &Allocator,
        body: Sequential<B>,
        skip: Option<Sequential<B>>,
        relu: bool,
    ) -> Self {
        let out_shape = body.out_shape();
        let input = body.input;
        let skip_shape = skip.as_ref().map_or(input, |s| s.out_shape());
        assert_eq!(
            out_shape, skip_shape,
            "a residual block's body and skip must agree in shape"
        );
        let sum_len = if relu {
            alloc.max_batch * shape_len(out_shape)
        } else {
            0
        };
        Residual {
            sum: be.alloc(sum_len),
            dsum: be.alloc(sum_len),
            relu,
            out: be.alloc(alloc.max_batch * shape_len(out_shape)),
            dinp: be.alloc(alloc.max_batch * shape_len(input)),
            in_len: shape_len(input),
            body,
            skip,
            out_shape,
            max_batch: alloc.max_batch,
        }
    }
}

impl<B: Backend> Module<B> for Residual<B> {
    fn visit(&self, tensors: &mut NamedTensors) {
        tensors.child("body", &self.body);
        if let Some(skip) = &self.skip {
            tensors.child("skip", skip);
        }
    }

    fn activation_len(&self) -> usize {
        let own = self.max_batch * (self.in_len + shape_len(self.out_shape));
        let own = own
            + 2 * if self.relu {
                self.max_batch * shape_len(self.out_shape)
            } else {
                0
            };
        own + self.body.activation_len() + self.skip.as_ref().map_or(0, |s| s.activation_len())
    }
}

impl<B: Backend> Layer<B> for Residual<B> {
    fn out_shape(&self) -> Shape {
        self.out_shape
    }

    fn forward(&mut self, be: &B, flat: &mut Flat<B>, inp: &B::Buf, n: usize, mode: Mode) {
        self.body.forward(be, flat, inp, n, mode);
        let len = n * shape_len(self.out_shape);
        let target = if self.relu {
            &mut self.sum
        } else {
            &mut self.out
        };
        match &mut self.skip {
            Some(skip) => {
                skip.forward(be, flat, inp, n, mode);
                be.add(target, self.body.output(), skip.output(), len);
            }
            None => be.add(target, self.body.output(), inp, len),
        }
        if self.relu {
            be.relu_forward(&mut self.out, &self.sum, len);
        }
    }

    fn output(&self) -> &B::Buf {
        &self.out
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
        let dout = if self.relu {
            let len = n * shape_len(self.out_shape);
            be.relu_backward(&mut self.dsum, dout, &self.out, len);
            &self.dsum
        } else {
            dout
        };
        self.body.backward(be, flat, inp, dout, n, need_dinp);
        let len = n * self.in_len;
        match &mut self.skip {
            Some(skip) => {
                skip.backward(be, flat, inp, dout, n, need_dinp);
                if need_dinp {
                    be.add(
                        &mut self.dinp,
                        self.body.input_grad(),
                        skip.input_grad(),
                        len,
                    );
                }
            }
            None if need_dinp => be.add(&mut self.dinp, self.body.input_grad(), dout, len),
            None => {}
        }
    }

    fn input_grad(&self) -> &B::Buf {
        &self.dinp
    }
}
