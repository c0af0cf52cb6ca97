//! Shows that a panic on one rank ends the whole MPI job at once: rank `--rank R` panics after
//! a barrier while every other rank blocks in a receive that nothing will match. With
//! [`Comm::install_panic_abort`] the job ends with one `error: rank R panicked: ...` line
//! instead of hanging. A `--rank` outside the job is an error every rank detects; they agree
//! through [`Collectives::fatal_on_all`] and all exit 2 without `MPI_Abort`.
//! `tests/comm_mpi.rs` runs both cases:
//!
//! ```sh
//! cargo build --release --examples
//! mpirun -n 3 --oversubscribe target/release/examples/panic_on_rank --rank 1
//! ```

use std::process::ExitCode;

use clap::Parser;
use gssp::comm::p2p::WorkerLink;
use gssp::comm::{Collectives, Comm, CommError};

#[derive(Parser)]
struct Args {
    /// The rank that panics.
    #[arg(long)]
    rank: usize,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let comm = match Comm::init() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    comm.install_panic_abort();
    ExitCode::from(panic_on(&comm, args.rank))
}

/// Panics on `rank` after a barrier; the others wait for a message that never comes. Returns
/// the exit code: 2 when `rank` is outside the job, 1 if a receive unexpectedly completed.
fn panic_on(comm: &Comm, rank: usize) -> u8 {
    let check = if rank < comm.size() {
        Ok(())
    } else {
        Err(format!(
            "--rank {rank} is outside 0..{} (the job's ranks)",
            comm.size()
        ))
    };
    if let Err(f) = comm.fatal_on_all(check) {
        if let Some(m) = f.local {
            eprintln!("error: {m}");
        }
        return 2;
    }
    or_abort(comm, "barrier", comm.barrier());
    if comm.rank() == rank {
        panic!("injected panic (panic_on_rank example)");
    }
    let mut link = or_abort(comm, "WorkerLink::new", WorkerLink::new(comm, rank, 0, 1));
    or_abort(comm, "recv", link.recv().map(<[f32]>::len));
    eprintln!("error: rank {} received a message nobody sent", comm.rank());
    1
}

/// Unwraps an MPI result or aborts the job with a message naming the step.
fn or_abort<T>(comm: &Comm, step: &str, r: Result<T, CommError>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => {
            eprintln!("error: rank {}: panic_on_rank {step}: {e}", comm.rank());
            comm.abort(1)
        }
    }
}
