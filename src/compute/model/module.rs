//! The module API: what every building block, composite and whole model declares, and
//! how the tree of them names its tensors.
//!
//! A module owns its activations (its output and the gradient of its input, sized once
//! for the model's largest batch) and declares, through a [`Allocator`] while it is built, its
//! tensors in the model's flat buffers: trained parameters and non-trained state (batch
//! norm's running statistics), each a [`FlatTensor`] with PyTorch's shape and its
//! initialisation, and the shared scratch it needs. The flat parameter and gradient
//! buffers are what every sync mode sends, so a module never owns parameters of its own.
//!
//! Names come from the tree, as in burn's `Module` and PyTorch's `state_dict`: a module
//! reports its own tensors under leaf names (`weight`, `running_var`) and each child under
//! its name (`0`, `body`, `encoder`) in [`Module::visit`], and [`NamedTensors`] joins the
//! names from the root down (`3.body.0.weight`, `encoder.rnn.weight_ih_l0`).
//!
//! [`Module`] is what every piece has. How a piece runs depends on its input: [`Layer`]
//! is the forward and backward of a module over activation buffers of a per-sample
//! [`Shape`] (the image layers, `Sequential`, `Residual`, and the linear head of the
//! translation model); the recurrent pieces (`Embedding`, `Lstm`) read token ids or carry
//! a state and have forward and backward methods of their own.

use std::ops::Range;

use crate::compute::backend::Backend;

/// Per-sample activation shape (channels, height, width); a flat vector is (n, 1, 1).
pub type Shape = (usize, usize, usize);

pub fn shape_len(s: Shape) -> usize {
    s.0 * s.1 * s.2
}

/// Training (batch statistics, dropout on) or evaluation (running statistics, dropout
/// off).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Train,
    /// Training statistics without training: batch norm folds batch number `batch` of a
    /// re-estimation into a cumulative average of its running statistics.
    Calibrate {
        batch: usize,
    },
    Eval,
}

/// How a tensor in a flat buffer starts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Init {
    /// PyTorch's default for conv and linear weights, `kaiming_uniform_(a = sqrt(5))`:
    /// U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
    KaimingUniform {
        fan_in: usize,
    },
    /// U(-bound, bound): PyTorch's default for conv and linear biases, bound
    /// 1/sqrt(fan_in).
    Uniform {
        bound: f32,
    },
    /// N(0, std^2): PyTorch's default for an embedding table (std 1).
    Normal {
        std: f32,
    },
    Ones,
    Zeros,
}

/// A tensor a module declared in a flat buffer: where it lies, its shape and how it
/// starts. Its name is not its own: the module tree gives it (see [`Module::visit`]).
#[derive(Debug, Clone, PartialEq)]
pub struct FlatTensor {
    /// Dimensions as PyTorch lays the same tensor out (`[out, in, kh, kw]` for a
    /// convolution weight, `[out, in]` for a linear one, `[c]` for batch norm), row-major
    /// over `range`: an exported model carries them, so PyTorch loads it as it is.
    pub shape: Vec<usize>,
    pub range: Range<usize>,
    pub init: Init,
}

/// One named tensor in a flat buffer.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorSpec {
    /// Dotted path, as PyTorch names the same tensor (`4.body.0.weight`).
    pub name: String,
    /// See [`FlatTensor::shape`].
    pub shape: Vec<usize>,
    pub range: Range<usize>,
    pub init: Init,
}

/// A model's flat buffers, shared by all its modules.
pub struct Flat<B: Backend> {
    /// Trained parameters: what every sync mode sends.
    pub params: B::Buf,
    /// Their gradients, same ranges.
    pub grads: B::Buf,
    /// Non-trained state (batch-norm running mean and variance).
    pub state: B::Buf,
    /// Scratch shared by all modules (the largest need decides its size).
    pub scratch: B::Buf,
    /// This step's dropout seed: a hash of the network's dropout stream and its step.
    pub dropout_seed: u64,
}

/// Hands out ranges in the flat buffers, dropout seeds and scratch while a model is
/// built, in build order.
#[derive(Debug, Default)]
pub struct Allocator {
    pub scratch: usize,
    /// Samples (rows) the activations being allocated must hold.
    pub max_batch: usize,
    params: usize,
    state: usize,
    seeds: u64,
    /// The initialisation of every parameter declared from now on, where a model sets one
    /// for all its tensors.
    params_init: Option<Init>,
}

impl Allocator {
    pub fn new(max_batch: usize) -> Allocator {
        Allocator {
            max_batch,
            ..Default::default()
        }
    }

    fn take(end: &mut usize, shape: &[usize], init: Init) -> FlatTensor {
        let start = *end;
        *end += shape.iter().product::<usize>();
        FlatTensor {
            shape: shape.to_vec(),
            range: start..*end,
            init,
        }
    }

    /// The next parameters, a tensor of `shape` that starts as `init` (unless
    /// [`Allocator::init_params_as`] said otherwise).
    pub fn param(&mut self, shape: &[usize], init: Init) -> FlatTensor {
        let init = self.params_init.unwrap_or(init);
        Self::take(&mut self.params, shape, init)
    }

    /// The next values of non-trained state, a tensor of `shape`.
    pub fn state(&mut self, shape: &[usize], init: Init) -> FlatTensor {
        Self::take(&mut self.state, shape, init)
    }

    /// Every parameter declared from now on starts as `init`, whatever its module asks
    /// (a model that initialises all its weights alike, as the seq2seq reference's
    /// `init_weights` does).
    pub fn init_params_as(&mut self, init: Init) {
        self.params_init = Some(init);
    }

    /// A distinct seed for each random layer, in build order.
    pub fn next_seed(&mut self) -> u64 {
        self.seeds += 1;
        self.seeds.wrapping_mul(0xD1B5_4A32_D192_ED03)
    }

    /// Reserves `len` values of shared scratch.
    pub fn scratch(&mut self, len: usize) {
        self.scratch = self.scratch.max(len);
    }

    pub fn num_params(&self) -> usize {
        self.params
    }

    pub fn num_state(&self) -> usize {
        self.state
    }
}

/// The tensors of a module tree, each under its path from the root, in the order of the
/// flat buffers: what a walk of [`Module::visit`] collects.
#[derive(Debug, Default)]
pub struct NamedTensors {
    pub params: Vec<TensorSpec>,
    pub state: Vec<TensorSpec>,
    path: Vec<String>,
}

impl NamedTensors {
    /// The tensors of `root` (its children named from the root: `0.weight`, not
    /// `root.0.weight`).
    pub fn of<B: Backend>(root: &(impl Module<B> + ?Sized)) -> Self {
        let mut tensors = NamedTensors::default();
        root.visit(&mut tensors);
        tensors.sort();
        tensors
    }

    /// Puts both lists in flat-buffer order (the order the tensors were declared in).
    pub fn sort(&mut self) {
        self.params.sort_by_key(|s| s.range.start);
        self.state.sort_by_key(|s| s.range.start);
    }

    fn named(&self, leaf: &str, t: &FlatTensor) -> TensorSpec {
        let mut name = self.path.join(".");
        if !name.is_empty() {
            name.push('.');
        }
        name.push_str(leaf);
        TensorSpec {
            name,
            shape: t.shape.clone(),
            range: t.range.clone(),
            init: t.init,
        }
    }

    /// A trained tensor of the current module, named `leaf` in it.
    pub fn param(&mut self, leaf: &str, t: &FlatTensor) {
        let spec = self.named(leaf, t);
        self.params.push(spec);
    }

    /// A tensor of non-trained state of the current module, named `leaf` in it.
    pub fn state(&mut self, leaf: &str, t: &FlatTensor) {
        let spec = self.named(leaf, t);
        self.state.push(spec);
    }

    /// Enters a child named `name` (an index, as PyTorch's `nn.Sequential` numbers its
    /// children, or a field); [`NamedTensors::leave`] returns to its parent.
    pub fn enter(&mut self, name: &str) {
        self.path.push(name.to_string());
    }

    pub fn leave(&mut self) {
        self.path.pop();
    }

    /// The tensors of the child `module`, named `name` in the current module.
    pub fn child<B: Backend>(&mut self, name: &str, module: &(impl Module<B> + ?Sized)) {
        self.enter(name);
        module.visit(self);
        self.leave();
    }
}

/// What every building block, composite and whole model is: tensors in the flat buffers
/// that the tree names, and activations of its own.
pub trait Module<B: Backend> {
    /// Reports this module's own tensors under their leaf names
    /// ([`NamedTensors::param`], [`NamedTensors::state`]) and each child under its name
    /// ([`NamedTensors::child`]).
    fn visit(&self, tensors: &mut NamedTensors);
    /// Values this module allocated for activations (memory reports).
    fn activation_len(&self) -> usize;
}

/// A module over activation buffers: `n` samples of a per-sample [`Shape`] in, `n`
/// samples of [`Layer::out_shape`] out.
pub trait Layer<B: Backend>: Module<B> {
    /// Per-sample output shape.
    fn out_shape(&self) -> Shape;
    /// Forward over `n` samples of `inp`, into [`Layer::output`].
    fn forward(&mut self, be: &B, flat: &mut Flat<B>, inp: &B::Buf, n: usize, mode: Mode);
    fn output(&self) -> &B::Buf;
    /// Backward of the last training forward: accumulates parameter gradients into
    /// `flat.grads` and, when `need_dinp`, writes [`Layer::input_grad`]. `inp` is the
    /// forward's input.
    fn backward(
        &mut self,
        be: &B,
        flat: &mut Flat<B>,
        inp: &B::Buf,
        dout: &B::Buf,
        n: usize,
        need_dinp: bool,
    );
    fn input_grad(&self) -> &B::Buf;
}
