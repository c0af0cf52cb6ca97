//! gssp: Grouping Stale Synchronous Parallel training with GDTopK sparsification over MPI.
//!
//! Module map (see README.md): pure logic (config, data, model, optim, staleness,
//! grouping, compression) has no MPI in it; `comm` is the only module that names `mpi`.

pub mod backend;
pub mod bench;
pub mod checkpoint;
pub mod comm;
pub mod compress;
pub mod config;
pub mod costmodel;
pub mod data;
pub mod eval;
pub mod grouping;
pub mod hetero;
pub mod metrics;
pub mod model;
pub mod optim;
pub mod plan;
pub mod progress;
pub mod regroup;
pub mod report;
pub mod sync;
pub mod train;
pub mod workload;
