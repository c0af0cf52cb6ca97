//! The module API: what a layer or a block declares and does.
//!
//! A module owns its activations (its output and the gradient of its input, sized once
//! for the network's largest batch) and declares, through a [`Plan`], its ranges in the
//! network's flat buffers: trained parameters (with their initialisation), non-trained
//! state (batch-norm running statistics) and the shared scratch it needs. The flat
//! parameter and gradient buffers are what every sync mode sends, so a module never
//! owns parameters of its own.

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

/// One named tensor in a flat buffer.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorSpec {
    /// Dotted path, as PyTorch names the same tensor (`4.body.0.weight`).
    pub name: String,
    /// Dimensions as PyTorch lays the same tensor out (`[out, in, kh, kw]` for a
    /// convolution weight, `[out, in]` for a linear one, `[c]` for batch norm), row-major
    /// over `range`: an exported model carries them, so PyTorch loads it as it is.
    pub shape: Vec<usize>,
    pub range: Range<usize>,
    pub init: Init,
}

/// The network's flat buffers, shared by all modules.
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

/// Hands out ranges in the flat buffers while a network is built.
#[derive(Debug, Default)]
pub struct Plan {
    pub params: Vec<TensorSpec>,
    pub state: Vec<TensorSpec>,
    pub scratch: usize,
    pub max_batch: usize,
    seeds: u64,
    path: Vec<String>,
    counters: Vec<usize>,
}

impl Plan {
    pub fn new(max_batch: usize) -> Plan {
        Plan {
            max_batch,
            counters: vec![0],
            ..Default::default()
        }
    }

    fn name(&self, leaf: &str) -> String {
        let mut parts = self.path.clone();
        parts.push(leaf.to_string());
        parts.join(".")
    }

    fn take(
        specs: &mut Vec<TensorSpec>,
        name: String,
        shape: &[usize],
        init: Init,
    ) -> Range<usize> {
        let start = specs.last().map_or(0, |s| s.range.end);
        let len = shape.iter().product::<usize>();
        specs.push(TensorSpec {
            name,
            shape: shape.to_vec(),
            range: start..start + len,
            init,
        });
        start..start + len
    }

    /// The next parameters, a tensor of `shape` named `leaf` inside the current module.
    pub fn param(&mut self, leaf: &str, shape: &[usize], init: Init) -> Range<usize> {
        let name = self.name(leaf);
        Self::take(&mut self.params, name, shape, init)
    }

    /// The next values of non-trained state, a tensor of `shape`.
    pub fn state(&mut self, leaf: &str, shape: &[usize], init: Init) -> Range<usize> {
        let name = self.name(leaf);
        Self::take(&mut self.state, name, shape, init)
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

    /// Enters the next child of the current container (`0`, `1`, ... as PyTorch's
    /// `nn.Sequential` numbers them, or a named field).
    pub fn enter(&mut self, field: Option<&str>) {
        let index = self.counters.last_mut().expect("a root counter");
        let name = match field {
            Some(f) => f.to_string(),
            None => {
                *index += 1;
                (*index - 1).to_string()
            }
        };
        self.path.push(name);
        self.counters.push(0);
    }

    pub fn leave(&mut self) {
        self.path.pop();
        self.counters.pop();
    }

    pub fn num_params(&self) -> usize {
        self.params.last().map_or(0, |s| s.range.end)
    }

    pub fn num_state(&self) -> usize {
        self.state.last().map_or(0, |s| s.range.end)
    }
}

/// A layer or a block of layers.
pub trait Module<B: Backend> {
    /// Per-sample output shape.
    fn out_shape(&self) -> Shape;
    /// Forward over `n` samples of `inp`, into [`Module::output`].
    fn forward(&mut self, be: &B, flat: &mut Flat<B>, inp: &B::Buf, n: usize, mode: Mode);
    fn output(&self) -> &B::Buf;
    /// Backward of the last training forward: accumulates parameter gradients into
    /// `flat.grads` and, when `need_dinp`, writes [`Module::input_grad`]. `inp` is the
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
    /// Values this module allocated for activations (memory reports).
    fn activation_len(&self) -> usize;
}
