//! What a worker computes with: the [`backend`]s (CPU and CUDA) behind one trait, the
//! modules and models built on them ([`model`]), the [`optim`]izers, one worker's step
//! over its data ([`workload`]), the text metrics of evaluation ([`eval`]), and the
//! emulated compute speed of a heterogeneous cluster ([`pace`]).

pub mod backend;
pub mod eval;
pub mod model;
pub mod optim;
pub mod pace;
pub mod workload;
