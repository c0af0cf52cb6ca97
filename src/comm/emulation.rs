//! This process's emulated network link (`heterogeneity.link_gbps`,
//! [`crate::hetero::EmulatedLink`]): the links and windows of this module charge every
//! message they move to it, so that a run on one node's shared memory behaves as on a
//! network of that rate. Point-to-point messages hold their sender for their transfer and
//! queue at a busy receiver; one-sided puts and accumulates hold their origin (the target
//! is not involved in a one-sided transfer, so nothing queues there); a sum over all ranks
//! holds every rank for a ring allreduce's share, 2 (n - 1) / n of the data.
//! Off unless [`emulate_link`] was called with a positive rate.

use std::sync::Mutex;
use std::time::Instant;

use crate::hetero::{sleep_precise, EmulatedLink};

static LINK: Mutex<Option<(Instant, EmulatedLink)>> = Mutex::new(None);

/// Emulates a link of `gbps` gigabits per second from now on (0: none).
pub fn emulate_link(gbps: f64) {
    let link = EmulatedLink::new(gbps).map(|l| (Instant::now(), l));
    *LINK.lock().unwrap_or_else(|e| e.into_inner()) = link;
}

/// Applies `rule` to the link, if one is emulated, and sleeps for what it returns.
fn hold(rule: impl FnOnce(&mut EmulatedLink, f64) -> f64) {
    let seconds = {
        let mut guard = LINK.lock().unwrap_or_else(|e| e.into_inner());
        match guard.as_mut() {
            Some((start, link)) => rule(link, start.elapsed().as_secs_f64()),
            None => return,
        }
    };
    sleep_precise(seconds);
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
