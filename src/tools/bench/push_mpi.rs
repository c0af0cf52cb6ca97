//! `mpirun -n 2 gssp bench push --mpi`: a whole push between two ranks through the
//! parameter-server link ([`crate::comm::p2p`], its messages [`crate::runtime::messages`]):
//! rank 1 pushes a model-sized gradient and waits for the weights, rank 0 receives it,
//! checks and applies it as the server loop does and replies. Rank 0 times its work per push (receive, apply, reply; not the wait for the
//! push), rank 1 the round trip (its copy into the send buffer, the server's work, the
//! reply's copy and its own copy out of the receive buffer).

use std::time::Instant;

use anyhow::Result;

use crate::comm::p2p::{ServerLink, WorkerLink};
use crate::comm::{Collectives, Comm};
use crate::compute::backend::cpu;
use crate::compute::optim::parallel;
use crate::protocol::wire::HEADER_WORDS;
use crate::runtime::messages::{ServerMessages, WorkerMessages};
use crate::runtime::server::check_push;
use crate::telemetry::stats::median;

use super::push::{gradient, resnet_server, PushFigures, PUSH_STREAMS};

const LR: f64 = 0.05;

/// Runs both ranks' parts on `comm` (of exactly 2 ranks) for `seconds`; rank 0 prints its
/// figures against `bound` (the in-process figures of the same run).
pub fn two_ranks(
    comm: &Comm,
    bound: Option<&PushFigures>,
    params: usize,
    seconds: f64,
) -> Result<()> {
    if comm.size() != 2 {
        anyhow::bail!("--mpi: run under `mpirun -n 2` (got {} ranks)", comm.size());
    }
    comm.barrier()?;
    if comm.rank() == 1 {
        let trips = worker(comm, params)?;
        comm.barrier()?;
        println!("rank1_round_trip_ms: {:.2}", 1e3 * trips);
        return Ok(());
    }
    let (busy, receive, pushes) = server(comm, params, seconds)?;
    comm.barrier()?;
    println!(
        "mpi_pushes: {pushes}\nserver_push_ms: {:.2}  (receive {:.2} ms; check, step, release and reply)",
        1e3 * busy,
        1e3 * receive
    );
    if let Some(f) = bound {
        println!(
            "server_push_over_bound: {:.2}  ({PUSH_STREAMS} model streams at {:.2} GB/s)",
            busy / f.bound_s(PUSH_STREAMS),
            f.copy_bw / 1e9
        );
    }
    Ok(())
}

/// The server's loop for `seconds`: median busy seconds per push, median receive seconds,
/// pushes.
fn server(comm: &Comm, params: usize, seconds: f64) -> Result<(f64, f64, usize)> {
    let mut link =
        ServerLink::new(comm, &[Some(1)], HEADER_WORDS, params)?.with_copy(parallel::copy);
    let mut ps = resnet_server(gradient(params), 1);
    link.send_weights(&[0], ps.version(), ps.weights(), |_| 0)?;
    let (mut busy, mut receive) = (Vec::new(), Vec::new());
    let mut ready = Vec::with_capacity(1);
    let start = Instant::now();
    loop {
        let push = link
            .wait_push()?
            .ok_or_else(|| anyhow::anyhow!("the worker stopped"))?;
        let t = Instant::now();
        check_push(&push, 1, 0, LR)?;
        ps.on_push(push.worker, push.payload, LR)?;
        let receive_s = push.receive_s;
        ready.clear();
        ps.release(&mut ready);
        if busy.len() >= 3 && start.elapsed().as_secs_f64() >= seconds {
            link.send_stop(0, ps.version(), 0)?;
            ps.retire(0);
            break;
        }
        link.send_weights(&ready, ps.version(), ps.weights(), |w| ps.last_staleness(w))?;
        busy.push(receive_s + t.elapsed().as_secs_f64());
        receive.push(receive_s);
    }
    link.finish()?;
    Ok((median(&mut busy), median(&mut receive), busy.len()))
}

/// The worker's loop until told to stop: median seconds from a push to its answer.
fn worker(comm: &Comm, params: usize) -> Result<f64> {
    let mut link = WorkerLink::new(comm, 0, HEADER_WORDS, params)?;
    let grad = gradient(params);
    let mut weights = vec![0.0f32; params];
    link.recv_weights(&mut weights)?;
    let mut trips = Vec::new();
    for clock in 1.. {
        let t = Instant::now();
        link.push(clock, 1.0, &grad)?;
        let header = link.recv_weights(&mut weights)?;
        if header.stop {
            break;
        }
        trips.push(t.elapsed().as_secs_f64());
    }
    link.finish()?;
    Ok(median(&mut trips))
}

/// `bench push --mpi`: MPI up, rank 0's in-process figures (rank 1 waits), then the two
/// ranks' push.
pub fn run(params: usize, threads: usize, seconds: f64) -> Result<()> {
    let comm = Comm::init()?;
    comm.install_panic_abort();
    cpu::set_threads(threads);
    let figures = if comm.rank() == 0 {
        let f = super::push::measure(params, threads, seconds)?;
        super::push::print(&f);
        Some(f)
    } else {
        None
    };
    two_ranks(&comm, figures.as_ref(), params, seconds)
}
