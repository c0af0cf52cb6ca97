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
pub use summary::{time_to_target, EvalRow, RunTotals, Snapshots, Summary, SIMULATED, WALL};

/// Writes `line` and a newline to stderr in one write: the ranks of a job share mpirun's
/// stderr, and a line written piece by piece (as `eprintln!` formats it) can interleave
/// with another rank's.
pub fn stderr_line(line: &str) {
    use std::io::Write;
    let mut text = String::with_capacity(line.len() + 1);
    text.push_str(line);
    text.push('\n');
    // Nothing better to do when stderr itself fails.
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}
