//! The tools around a run: [`plan`] predicts a cluster's timing before a job, [`placement`]
//! shows where a job's ranks sit, [`bench`](mod@bench) starts comparison jobs, [`report`]
//! reads run directories into tables and plots, [`simulate`] trains a run on a simulated
//! clock in one process. They sit above the runtime: nothing that runs under `mpirun`
//! depends on them.

pub mod bench;
pub mod placement;
pub mod plan;
pub mod report;
pub mod simulate;
