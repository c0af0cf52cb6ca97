//! gssp: Grouping Stale Synchronous Parallel training with GDTopK sparsification over MPI.
//!
//! The modules form layers; each imports only from its own layer's modules below it and
//! from lower layers, and no import circle exists at any level (tests/layers.rs checks it;
//! docs/architecture.md draws it):
//!
//! 1. [`tools`]: `gssp plan`, `gssp bench`, `gssp report`. They read runs and configs and
//!    start jobs; nothing that runs under `mpirun` depends on them.
//! 2. [`runtime`]: a run's set-up and the roles' loops (worker, parameter or group server,
//!    collective worker, single process).
//! 3. [`protocol`] and [`compress`]: pure logic. The update rule, SSP clocks, mailbox
//!    format, the messages between a worker and its server, layout, grouping, regroup
//!    decisions and cost model; top-k, PowerSGD, error feedback and ratio control.
//! 4. [`comm`] (the only MPI code, with the emulated network link) and [`compute`]
//!    (backends, modules and models, optimizers, the workload of a step, compute pacing).
//! 5. Ground: [`config`] (with each sync mode's strategy, [`config::modes`]), [`data`],
//!    [`checkpoint`] files, and [`telemetry`] (clocks, logs, the summary, progress).

pub mod tools;

pub mod runtime;

pub mod compress;
pub mod protocol;

pub mod comm;
pub mod compute;

pub mod checkpoint;
pub mod config;
pub mod data;
pub mod telemetry;
