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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mpi::ffi;

use super::link::{egress_after, ingress_after, EmulatedLink};
use super::{check, CommError, HasHandle};
use crate::telemetry::clock::sleep_precise;

/// This process's link: its own, or its node's, shared with the node's other ranks.
enum Link {
    Own { start: Instant, link: EmulatedLink },
    Shared(SharedLink),
}

/// A node's link, its two sides' free times kept in memory every rank of the node maps
/// (an MPI shared-memory window), so that what one rank sends holds back the next rank's
/// message as one network card would.
struct SharedLink {
    link: EmulatedLink,
    /// When the outgoing side is free, then when the incoming side is, as `f64` bits in
    /// seconds since the Unix epoch (the one clock the node's processes share).
    sides: *const [AtomicU64; 2],
    /// Ranks on the node: a sum over all ranks crosses the node's link once for them all.
    ranks: usize,
}

// SAFETY: `sides` points into a shared-memory window that is never freed (it lives until
// the process ends), and is only touched through atomics.
unsafe impl Send for SharedLink {}

impl SharedLink {
    /// Moves one side (0 outgoing, 1 incoming) to `next(free, now)`; seconds from now until
    /// then.
    fn advance(&self, side: usize, next: impl Fn(f64, f64) -> f64) -> f64 {
        let now = epoch_s();
        // SAFETY: see `unsafe impl Send`: the window outlives every use.
        let cell = unsafe { &(*self.sides)[side] };
        let mut free = f64::from_bits(cell.load(Ordering::Acquire));
        loop {
            let done = next(free, now);
            match cell.compare_exchange_weak(
                free.to_bits(),
                done.to_bits(),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return done - now,
                Err(seen) => free = f64::from_bits(seen),
            }
        }
    }
}

/// Seconds since the Unix epoch.
fn epoch_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

impl Link {
    fn send(&mut self, bytes: u64) -> f64 {
        match self {
            Link::Own { start, link } => link.send(start.elapsed().as_secs_f64(), bytes),
            Link::Shared(shared) => {
                let t = shared.link.transfer_s(bytes);
                shared.advance(0, |free, now| egress_after(free, now, t))
            }
        }
    }

    fn receive(&mut self, bytes: u64) -> f64 {
        match self {
            Link::Own { start, link } => link.receive(start.elapsed().as_secs_f64(), bytes),
            Link::Shared(shared) => {
                let t = shared.link.transfer_s(bytes);
                shared.advance(1, |free, now| ingress_after(free, now, t))
            }
        }
    }

    /// Ranks whose traffic this link carries.
    fn ranks(&self) -> usize {
        match self {
            Link::Own { .. } => 1,
            Link::Shared(shared) => shared.ranks,
        }
    }
}

static LINK: Mutex<Option<Link>> = Mutex::new(None);

/// Whether [`LINK`] holds a link: every message asks, and without emulation (the usual case)
/// the answer costs one relaxed load instead of a lock.
static EMULATING: AtomicBool = AtomicBool::new(false);

/// Emulates a link of `gbps` gigabits per second from now on (0: none), this rank's own.
pub fn emulate_link(gbps: f64) {
    let link = EmulatedLink::new(gbps).map(|link| Link::Own {
        start: Instant::now(),
        link,
    });
    let mut guard = LINK.lock().unwrap_or_else(|e| e.into_inner());
    EMULATING.store(link.is_some(), Ordering::Release);
    *guard = link;
}

/// Collective over `comm`: the ranks that give the same `node` (and share memory) share
/// one emulated link of `gbps` from now on; a rank alone on its node keeps one of its own.
/// Every rank of `comm` must call it, with the same `gbps`. The shared memory lives until
/// the process ends.
pub fn share_link<C: HasHandle>(comm: &C, gbps: f64, node: usize) -> Result<(), CommError> {
    emulate_link(gbps);
    let Some(link) = EmulatedLink::new(gbps) else {
        return Ok(());
    };
    let color = c_int::try_from(node).map_err(|_| CommError::Invalid {
        what: "share_link",
        detail: format!("node {node} does not fit in a C int"),
    })?;
    let raw = comm.handle().raw;
    // SAFETY: reading extern constants; `host` and `local` are valid out-handles, split from
    // a live communicator and freed below.
    let (mut host, mut local) = unsafe { (ffi::RSMPI_COMM_NULL, ffi::RSMPI_COMM_NULL) };
    check("MPI_Comm_split_type", unsafe {
        ffi::MPI_Comm_split_type(
            raw,
            ffi::RSMPI_COMM_TYPE_SHARED,
            0,
            ffi::RSMPI_INFO_NULL,
            &mut host,
        )
    })?;
    // SAFETY: `host` is live; `local` a valid out-handle.
    let split = check("MPI_Comm_split", unsafe {
        ffi::MPI_Comm_split(host, color, 0, &mut local)
    });
    // SAFETY: `host` is a live communicator this function made and nothing else holds.
    unsafe { ffi::MPI_Comm_free(&mut host) };
    split?;
    let shared = allocate_sides(local);
    // SAFETY: `local` is a live communicator this function made; the window keeps what it
    // needs of it.
    unsafe { ffi::MPI_Comm_free(&mut local) };
    if let Some((sides, ranks)) = shared? {
        let mut guard = LINK.lock().unwrap_or_else(|e| e.into_inner());
        *guard = Some(Link::Shared(SharedLink { link, sides, ranks }));
    }
    Ok(())
}

/// On the ranks of `node_comm`, more than one: a shared window of the node link's two
/// free times (both "never busy"), and how many ranks map it; `None` for a rank alone.
fn allocate_sides(
    node_comm: ffi::MPI_Comm,
) -> Result<Option<(*const [AtomicU64; 2], usize)>, CommError> {
    let (mut rank, mut size): (c_int, c_int) = (0, 0);
    // SAFETY: live communicator, valid out-pointers.
    check("MPI_Comm_rank", unsafe {
        ffi::MPI_Comm_rank(node_comm, &mut rank)
    })?;
    check("MPI_Comm_size", unsafe {
        ffi::MPI_Comm_size(node_comm, &mut size)
    })?;
    if size <= 1 {
        return Ok(None);
    }
    let bytes = std::mem::size_of::<[AtomicU64; 2]>();
    let mine = if rank == 0 { bytes } else { 0 };
    let mut base: *mut std::ffi::c_void = std::ptr::null_mut();
    // SAFETY: reading an extern constant; `win` is an out-handle.
    let mut win = unsafe { ffi::RSMPI_WIN_NULL };
    // SAFETY: valid sizes and out-pointers on a live communicator. The window is never
    // freed: it lives until MPI is finalised with the process.
    check("MPI_Win_allocate_shared", unsafe {
        ffi::MPI_Win_allocate_shared(
            mine as ffi::MPI_Aint,
            1,
            ffi::RSMPI_INFO_NULL,
            node_comm,
            (&mut base as *mut *mut std::ffi::c_void).cast(),
            &mut win,
        )
    })?;
    let (mut len, mut unit): (ffi::MPI_Aint, c_int) = (0, 0);
    let mut first: *mut std::ffi::c_void = std::ptr::null_mut();
    // SAFETY: `win` is live; rank 0 of the window holds the memory.
    check("MPI_Win_shared_query", unsafe {
        ffi::MPI_Win_shared_query(
            win,
            0,
            &mut len,
            &mut unit,
            (&mut first as *mut *mut std::ffi::c_void).cast(),
        )
    })?;
    let sides = first as *const [AtomicU64; 2];
    if rank == 0 {
        // SAFETY: rank 0's segment holds `bytes` bytes, aligned for u64 (a page).
        for side in unsafe { &*sides } {
            side.store(f64::NEG_INFINITY.to_bits(), Ordering::Release);
        }
    }
    // SAFETY: live communicator.
    check("MPI_Barrier", unsafe { ffi::MPI_Barrier(node_comm) })?;
    Ok(Some((sides, usize::try_from(size).unwrap_or(1))))
}

/// Applies `rule` to the link, if one is emulated, and sleeps for what it returns.
fn hold(rule: impl FnOnce(&mut Link) -> f64) {
    if !EMULATING.load(Ordering::Acquire) {
        return;
    }
    let seconds = {
        let mut guard = LINK.lock().unwrap_or_else(|e| e.into_inner());
        match guard.as_mut() {
            Some(link) => rule(link),
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
    hold(|link| link.send(bytes));
}

/// After MPI delivered `bytes`: waits until they are in behind earlier messages.
pub(crate) fn hold_receive(bytes: u64) {
    hold(|link| link.receive(bytes));
}

/// A ring allreduce of `bytes` over `ranks` ranks: each sends 2 (ranks - 1) / ranks of it.
/// Ranks that share a node's link each send their part of the node's share (a
/// hierarchical allreduce: summed on the node, the ring between nodes).
pub(crate) fn hold_allreduce(bytes: u64, ranks: usize) {
    if ranks > 1 {
        hold(|link| {
            let on_node = link.ranks().clamp(1, ranks) as u64;
            let nodes = (ranks as u64).div_ceil(on_node);
            let share = 2 * nodes.saturating_sub(1) * bytes / nodes.max(1) / on_node;
            link.send(share)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_sharing_a_link_queue_behind_each_other() {
        // Two ranks' views of one node's link (as two processes map the same window): what
        // the first sends holds back the second's message; the incoming side apart.
        let sides = [
            AtomicU64::new(f64::NEG_INFINITY.to_bits()),
            AtomicU64::new(f64::NEG_INFINITY.to_bits()),
        ];
        let view = || {
            Link::Shared(SharedLink {
                // 1 Gbit/s: 125 MB take one second.
                link: EmulatedLink::new(1.0).expect("a link"),
                sides: &sides,
                ranks: 2,
            })
        };
        let (mut a, mut b) = (view(), view());
        let first = a.send(12_500_000_000);
        let second = b.send(12_500_000_000);
        assert!((99.0..=100.0).contains(&first), "first {first}");
        // 200 s after the first began, less the moments between the two calls.
        assert!((199.0..=200.0).contains(&second), "second {second}");
        assert!(b.receive(125_000_000) <= 1.0);
        assert_eq!(a.ranks(), 2);
        // A link of its own does not see them.
        let mut own = Link::Own {
            start: Instant::now(),
            link: EmulatedLink::new(1.0).expect("a link"),
        };
        assert!(own.send(12_500_000_000) <= 100.0);
    }
}
