//! Builds a [`Sequential`] while tracking the shape. The layers are numbered and the
//! residual blocks' branches named (`body`, `skip`) as in PyTorch's reference, so their
//! tensors get PyTorch's names (`0.weight`, `3.body.1.running_mean`, ...) from the tree.

use crate::compute::backend::Backend;

use super::compose::{Residual, Sequential};
use super::layers::{
    BatchNorm2d, Conv2d, Dropout, Flatten, GlobalAvgPool, Linear, Pool2d, PoolKind, Relu,
};
use super::module::{Allocator, Layer, Shape};

/// Fills a branch of a residual block (its body or its skip path).
pub type Branch<'f, B> = &'f dyn Fn(&mut Builder<B>);

pub struct Builder<'p, B: Backend> {
    be: &'p B,
    alloc: &'p mut Allocator,
    input: Shape,
    shape: Shape,
    modules: Vec<Box<dyn Layer<B>>>,
}

impl<'p, B: Backend> Builder<'p, B> {
    pub fn new(be: &'p B, alloc: &'p mut Allocator, input: Shape) -> Self {
        Builder {
            be,
            alloc,
            input,
            shape: input,
            modules: Vec::new(),
        }
    }

    /// The current output shape.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    pub fn finish(self) -> Sequential<B> {
        Sequential::new(self.input, self.modules)
    }

    /// Appends the layer `make` builds for the current shape, as the next numbered child.
    pub fn push<M: Layer<B> + 'static>(
        &mut self,
        make: impl FnOnce(&B, &mut Allocator, Shape) -> M,
    ) -> &mut Self {
        let m = make(self.be, self.alloc, self.shape);
        self.shape = m.out_shape();
        self.modules.push(Box::new(m));
        self
    }

    /// Convolution with a bias, stride 1.
    pub fn conv(&mut self, out_c: usize, kernel: usize, pad: usize) -> &mut Self {
        self.push(|be, p, s| Conv2d::new(be, p, s, out_c, kernel, 1, pad, true))
    }

    /// Convolution with the given stride; `bias = false` before a batch norm.
    pub fn conv_with(
        &mut self,
        out_c: usize,
        kernel: usize,
        stride: usize,
        pad: usize,
        bias: bool,
    ) -> &mut Self {
        self.push(|be, p, s| Conv2d::new(be, p, s, out_c, kernel, stride, pad, bias))
    }

    pub fn batchnorm(&mut self) -> &mut Self {
        self.push(|be, p, s| BatchNorm2d::new(be, p, s))
    }

    pub fn relu(&mut self) -> &mut Self {
        self.push(|be, p, s| Relu::new(be, p, s))
    }

    /// Max pooling with kernel == stride.
    pub fn maxpool(&mut self, k: usize) -> &mut Self {
        self.push(|be, p, s| Pool2d::new(be, p, s, PoolKind::Max, k, k))
    }

    /// Average pooling with kernel == stride.
    pub fn avgpool(&mut self, k: usize) -> &mut Self {
        self.push(|be, p, s| Pool2d::new(be, p, s, PoolKind::Average, k, k))
    }

    pub fn global_avgpool(&mut self) -> &mut Self {
        self.push(|be, p, s| GlobalAvgPool::new(be, p, s))
    }

    pub fn dropout(&mut self, prob: f32) -> &mut Self {
        self.push(|be, p, s| Dropout::new(be, p, s, prob))
    }

    pub fn flatten(&mut self) -> &mut Self {
        self.push(|be, p, s| Flatten::new(be, p, s))
    }

    pub fn linear(&mut self, out_f: usize) -> &mut Self {
        self.push(|be, p, s| Linear::new(be, p, s, out_f))
    }

    /// A residual block: `relu(body(x) + skip(x))` when `relu`, else without it; `skip`
    /// `None` is the identity.
    pub fn residual(
        &mut self,
        body: impl FnOnce(&mut Builder<B>),
        skip: Option<Branch<'_, B>>,
        relu: bool,
    ) -> &mut Self {
        let input = self.shape;
        self.push(|be, alloc, _| {
            let body = Self::branch(be, alloc, input, body);
            let skip = skip.map(|f| Self::branch(be, alloc, input, f));
            Residual::new(be, alloc, body, skip, relu)
        })
    }

    fn branch(
        be: &B,
        alloc: &mut Allocator,
        input: Shape,
        fill: impl FnOnce(&mut Builder<B>),
    ) -> Sequential<B> {
        let mut b = Builder::new(be, alloc, input);
        fill(&mut b);
        b.finish()
    }
}
