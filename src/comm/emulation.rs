//! This process's emulated network link (`heterogeneity.link_gbps`,
//! [`super::link::EmulatedLink`]): the links and windows of this module charge every
//! message they move to it, so that a run on one node's shared memory behaves as on a
//! network of that rate. Point-to-point messages hold their sender for their transfer and
//! queue at a busy receiver; one-sided puts and accumulates hold their origin (the target
//! is not involved in a one-sided transfer, so nothing queues there); a sum over all ranks
//! holds every rank for a ring allreduce's share, 2 (n - 1) / n of the data.
//! A held rank keeps entering MPI's progress engine ([`wait_progressing`]), as a network
//! card keeps moving what it was given. Off unless [`emulate_link`] was called with a
//! positive rate.

use std::os::raw::c_int;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use mpi::ffi;

use super::link::EmulatedLink;
use crate::telemetry::clock::sleep_precise;

static LINK: Mutex<Option<(Instant, EmulatedLink)>> = Mutex::new(None);

/// Whether [`LINK`] holds a link: every message asks, and without emulation (the usual case)
/// the answer costs one relaxed load instead of a lock.
static EMULATING: AtomicBool = AtomicBool::new(false);

/// Emulates a link of `gbps` gigabits per second from now on (0: none).
pub fn emulate_link(gbps: f64) {
    let link = EmulatedLink::new(gbps).map(|l| (Instant::now(), l));
    let mut guard = LINK.lock().unwrap_or_else(|e| e.into_inner());
    EMULATING.store(link.is_some(), Ordering::Release);
    *guard = link;
}

/// Applies `rule` to the link, if one is emulated, and sleeps for what it returns.
fn hold(rule: impl FnOnce(&mut EmulatedLink, f64) -> f64) {
    if !EMULATING.load(Ordering::Acquire) {
        return;
    }
    let seconds = {
        let mut guard = LINK.lock().unwrap_or_else(|e| e.into_inner());
        match guard.as_mut() {
            Some((start, link)) => rule(link, start.elapsed().as_secs_f64()),
            None => return,
        }
    };
    wait_progressing(seconds);
}

/// How long a held rank sleeps between two entries into MPI.
const SLICE: Duration = Duration::from_micros(200);

/// Waits `seconds`, entering MPI's progress engine every [`SLICE`]. A network card moves
/// the messages already handed to it while its host does other work; the shared-memory
/// transport moves the fragments of a large message only while its sender is inside MPI.
/// A server held for its next reply's transfer would otherwise stall the reply before it:
/// a group's replies would all arrive after the last one's hold.
fn wait_progressing(seconds: f64) {
    let Ok(total) = Duration::try_from_secs_f64(seconds) else {
        return;
    };
    let deadline = Instant::now() + total;
    loop {
        progress();
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        if left > SLICE {
            std::thread::sleep(SLICE);
        } else {
            sleep_precise(left.as_secs_f64());
        }
    }
}

/// One pass of MPI's progress engine: a probe that matches nothing it takes.
fn progress() {
    let mut flag: c_int = 0;
    let mut status = super::empty_status();
    // SAFETY: MPI is initialised while a link is emulated (from `sync::run` on, before
    // finalisation); flag and status are valid for the call, and a probe consumes nothing.
    // Its return code carries nothing to act on: a failure shows in the next real call.
    unsafe {
        ffi::MPI_Iprobe(
            ffi::RSMPI_ANY_SOURCE,
            ffi::RSMPI_ANY_TAG,
            ffi::RSMPI_COMM_WORLD,
            &mut flag,
            &mut status,
        );
    }
}

/// Before handing `bytes` to MPI: waits for this rank's outgoing side to carry them.
pub(crate) fn hold_send(bytes: u64) {
    hold(|link, now| link.send(now, bytes));
}

/// After MPI delivered `bytes`: waits until they are in behind earlier messages.
pub(crate) fn hold_receive(bytes: u64) {
    hold(|link, now| link.receive(now, bytes));
}

/// A ring allreduce of `bytes` over `ranks` ranks: each sends 2 (ranks - 1) / ranks of it.
pub(crate) fn hold_allreduce(bytes: u64, ranks: usize) {
    if ranks > 1 {
        let share = 2 * (ranks as u64 - 1) * bytes / ranks as u64;
        hold_send(share);
    }
}
