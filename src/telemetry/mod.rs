//! What a run leaves behind and how it is timed: the run directory and its CSV logs
//! ([`logs`]), the summary and evaluation rows ([`summary`]), clocks ([`clock`]), small
//! statistics ([`stats`]), atomic file writes ([`files`]), rank 0's progress line
//! ([`progress`]) and the workers' pace it names the slowest worker from ([`pace`]).

pub mod clock;
pub mod files;
pub mod logs;
pub mod pace;
pub mod progress;
pub mod stats;
pub mod summary;

pub use logs::{CsvLog, CsvRow, RunDir, ServerRow, WorkerLog, WorkerRow};
pub use summary::{time_to_target, EvalRow, RunTotals, Snapshots, Summary};
