//! A run's workload: its data ([`Corpus`]: images or sentence pairs), its model
//! ([`Model`]: an image network or the translation model), a worker's compute step and
//! evaluation. The sync modes use these types only, so every mode trains every model
//! without a special case.

pub mod corpus;
pub mod evaluate;
pub mod model;
pub mod step;

pub use corpus::{Corpus, TextCorpus};
pub use evaluate::{Evaluation, Evaluator};
pub use model::Model;
pub use step::ComputeStep;
