//! The flat buffers a whole model owns: parameters, gradients, state and scratch on its
//! backend, with the named tensors that map them. Every model (an image [`super::Network`],
//! the translation model [`super::seq2seq::Seq2Seq`]) keeps one, and
//! [`super::Trainable`]'s provided methods move it to and from the host, so that code is
//! written once.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::compute::backend::Backend;

use super::module::{Allocator, Flat, Init, NamedTensors, TensorSpec};

/// One of a model's flat buffers, as the host sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Buffer {
    Params,
    Grads,
    State,
}

impl Buffer {
    /// What its values are, for messages.
    fn what(self) -> &'static str {
        match self {
            Buffer::Params => "weights",
            Buffer::Grads => "gradients",
            Buffer::State => "state",
        }
    }
}

/// A model's backend, its flat buffers and the named tensors in them.
pub struct FlatModel<B: Backend> {
    be: B,
    flat: Flat<B>,
    params: Vec<TensorSpec>,
    state: Vec<TensorSpec>,
}

impl<B: Backend> FlatModel<B> {
    /// Buffers on `be` for the tensors declared through `alloc`, named by `tensors` (a walk
    /// of the model's tree), initialised from `seed` (the same values on every rank).
    ///
    /// Panics when the walk did not report each declared tensor exactly once: a module
    /// whose [`super::Module::visit`] misses or repeats a tensor is a bug.
    pub fn new(be: B, alloc: &Allocator, mut tensors: NamedTensors, seed: u64) -> Self {
        tensors.sort();
        assert_tiles(&tensors.params, alloc.num_params(), "parameters");
        assert_tiles(&tensors.state, alloc.num_state(), "state");
        let mut flat = Flat {
            params: be.alloc(alloc.num_params()),
            grads: be.alloc(alloc.num_params()),
            state: be.alloc(alloc.num_state()),
            scratch: be.alloc(alloc.scratch),
            dropout_seed: 0,
        };
        be.upload(&mut flat.params, &initial_values(&tensors.params, seed));
        be.upload(&mut flat.state, &initial_values(&tensors.state, seed));
        FlatModel {
            be,
            flat,
            params: tensors.params,
            state: tensors.state,
        }
    }

    pub fn backend(&self) -> &B {
        &self.be
    }

    /// The buffers, as the modules read them.
    pub fn flat(&self) -> &Flat<B> {
        &self.flat
    }

    /// The backend and the buffers, for a forward or backward pass.
    pub fn parts_mut(&mut self) -> (&B, &mut Flat<B>) {
        (&self.be, &mut self.flat)
    }

    /// The trained tensors: names, shapes and ranges in the parameter buffer, in its
    /// order.
    pub fn param_specs(&self) -> &[TensorSpec] {
        &self.params
    }

    /// The tensors of non-trained state, in the state buffer's order.
    pub fn state_specs(&self) -> &[TensorSpec] {
        &self.state
    }

    /// Values in the parameter (and gradient) buffer.
    pub fn num_params(&self) -> usize {
        end_of(&self.params)
    }

    /// Values in the state buffer.
    pub fn num_state(&self) -> usize {
        end_of(&self.state)
    }

    fn buffer(&self, which: Buffer) -> &B::Buf {
        match which {
            Buffer::Params => &self.flat.params,
            Buffer::Grads => &self.flat.grads,
            Buffer::State => &self.flat.state,
        }
    }

    /// Values in buffer `which`.
    pub fn len_of(&self, which: Buffer) -> usize {
        match which {
            Buffer::Params | Buffer::Grads => self.num_params(),
            Buffer::State => self.num_state(),
        }
    }

    /// Copies buffer `which` to `host` (of its length).
    pub fn download(&self, which: Buffer, host: &mut [f32]) {
        self.be.download(host, self.buffer(which));
    }

    /// Replaces buffer `which` with `host`, which holds all its values.
    ///
    /// Panics when `host` is of another length: the values of another model.
    pub fn upload(&mut self, which: Buffer, host: &[f32]) {
        let len = self.len_of(which);
        assert_eq!(host.len(), len, "{} of another model", which.what());
        let flat = &mut self.flat;
        let buf = match which {
            Buffer::Params => &mut flat.params,
            Buffer::Grads => &mut flat.grads,
            Buffer::State => &mut flat.state,
        };
        self.be.upload(buf, host);
    }

    /// Sets this step's dropout seed (see [`Flat::dropout_seed`]).
    pub fn set_dropout_seed(&mut self, seed: u64) {
        self.flat.dropout_seed = seed;
    }

    /// Zeroes the gradient buffer (before a backward pass accumulates into it).
    pub fn zero_grads(&mut self) {
        let len = self.num_params();
        self.be.fill(&mut self.flat.grads, 0..len, 0.0);
    }
}

fn end_of(specs: &[TensorSpec]) -> usize {
    specs.last().map_or(0, |s| s.range.end)
}

/// Checks that `specs`, in buffer order, cover `0..len` one after the other.
fn assert_tiles(specs: &[TensorSpec], len: usize, what: &str) {
    let mut end = 0;
    for s in specs {
        assert_eq!(
            s.range.start, end,
            "{what}: tensor {} does not follow the one before it (a module's visit misses \
             or repeats a tensor)",
            s.name
        );
        end = s.range.end;
    }
    assert_eq!(
        end, len,
        "{what}: the module tree reports {end} of {len} values"
    );
}

/// A standard normal draw (Box-Muller; the crate has no `rand_distr`).
fn normal(rng: &mut ChaCha8Rng) -> f32 {
    // 1 - U(0, 1) lies in (0, 1], so the logarithm is finite.
    let u1 = 1.0 - rng.gen::<f64>();
    let u2 = rng.gen::<f64>();
    ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
}

/// Initial values of the tensors `specs` describe, drawn in order from `seed` (public
/// for models assembled outside a [`FlatModel`], such as the recurrent layers' tests).
pub fn initial_values(specs: &[TensorSpec], seed: u64) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut v = vec![0.0; end_of(specs)];
    for s in specs {
        let dst = &mut v[s.range.clone()];
        match s.init {
            Init::KaimingUniform { fan_in } => {
                let bound = 1.0 / (fan_in as f32).sqrt();
                dst.iter_mut()
                    .for_each(|p| *p = rng.gen_range(-bound..bound));
            }
            Init::Uniform { bound } => dst
                .iter_mut()
                .for_each(|p| *p = rng.gen_range(-bound..bound)),
            Init::Normal { std } => dst.iter_mut().for_each(|p| *p = std * normal(&mut rng)),
            Init::Ones => dst.fill(1.0),
            Init::Zeros => dst.fill(0.0),
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normal_init_draws_mean_0_and_the_given_std() {
        let specs = [TensorSpec {
            name: "embedding.weight".into(),
            shape: vec![100, 200],
            range: 0..20_000,
            init: Init::Normal { std: 2.0 },
        }];
        let v = initial_values(&specs, 5);
        let n = v.len() as f64;
        let mean = v.iter().map(|&x| x as f64).sum::<f64>() / n;
        let var = v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n;
        assert!(mean.abs() < 0.05, "{mean}");
        assert!((var.sqrt() - 2.0).abs() < 0.05, "{}", var.sqrt());
        assert!(v.iter().all(|x| x.is_finite()));
    }
}
