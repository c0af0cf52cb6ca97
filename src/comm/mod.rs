//! All MPI in gssp lives here; no other module names the `mpi` crate.
//!
//! rsmpi (`mpi` 0.8) provides initialisation/finalisation ([`mpi::environment::Universe`]);
//! everything else goes through `mpi::ffi` in small checked wrappers, because rsmpi ignores MPI
//! return codes and has no RMA. World runs with `MPI_ERRORS_RETURN`, so a failing call comes back
//! as a [`CommError`] naming the call instead of killing the job behind our back.
//!
//! * [`Comm`]: the MPI environment and the world communicator.
//! * [`SubComm`]: a communicator from [`Collectives::split`]; [`SubComm::arrive`] comes to a
//!   meeting of its ranks with a deadline (`arrival`).
//! * [`Collectives`]: collectives shared by both (import the trait to call them).
//! * [`p2p`]: the links between a server and its workers (nonblocking, reused buffers),
//!   moving words whose meaning is the runtime's.
//! * [`rma`]: one-sided windows (passive target, indexed accumulate).
//! * [`emulate_link`]: every message above charged to an emulated network link.
//!
//! Handles are reference counted: a [`SubComm`] stays valid while a link made from it lives.
//! Objects that outlive the [`Comm`] skip their MPI clean-up (MPI is finalized by then).

mod arrival;
mod emulation;
mod idle;
pub mod link;
pub mod p2p;
pub mod rma;

pub use arrival::Votes;
pub use emulation::{emulate_link, share_link};
pub use idle::IdleWaitError;

use mpi::ffi;
use std::cell::{Cell, RefCell};
use std::fmt;
use std::os::raw::{c_int, c_void};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Exit code passed to `MPI_Abort` by the panic hook (Rust's own panic exit code).
pub const PANIC_EXIT_CODE: i32 = 101;

/// Everything that can go wrong in the communication layer.
#[derive(Debug, thiserror::Error)]
pub enum CommError {
    /// `MPI_Init` was not performed (MPI was already initialised in this process).
    #[error("MPI initialisation failed: MPI was already initialised in this process")]
    Init,
    /// An MPI call returned an error code.
    #[error("{call} failed: {message} (MPI error code {code})")]
    Mpi {
        /// The MPI function that failed.
        call: &'static str,
        /// Its return code.
        code: i32,
        /// `MPI_Error_string` of the code.
        message: String,
    },
    /// A rank outside the communicator.
    #[error("{what}: rank {rank} is outside a communicator of size {size}")]
    Rank {
        /// Which argument.
        what: &'static str,
        /// The rank given.
        rank: usize,
        /// The communicator size.
        size: usize,
    },
    /// A buffer longer than the capacity fixed at construction.
    #[error("{what}: length {len} exceeds the capacity {capacity}")]
    TooLong {
        /// Which buffer.
        what: &'static str,
        /// Its length.
        len: usize,
        /// The capacity.
        capacity: usize,
    },
    /// An argument that MPI cannot express or that violates a documented precondition.
    #[error("{what}: {detail}")]
    Invalid {
        /// Which operation.
        what: &'static str,
        /// What is wrong.
        detail: String,
    },
    /// `GSSP_IDLE_WAIT` names no way of waiting.
    #[error(transparent)]
    IdleWait(#[from] IdleWaitError),
}

/// Converts an MPI return code into a `Result`, naming the call on failure.
fn check(call: &'static str, code: c_int) -> Result<(), CommError> {
    if code == ffi::MPI_SUCCESS as c_int {
        return Ok(());
    }
    let mut buf = vec![0u8; ffi::MPI_MAX_ERROR_STRING as usize + 1];
    let mut len: c_int = 0;
    // SAFETY: buf holds MPI_MAX_ERROR_STRING bytes as MPI_Error_string requires.
    let rc = unsafe { ffi::MPI_Error_string(code, buf.as_mut_ptr().cast(), &mut len) };
    let message = if rc == ffi::MPI_SUCCESS as c_int {
        buf.truncate(usize::try_from(len).unwrap_or(0).min(buf.len()));
        String::from_utf8_lossy(&buf).into_owned()
    } else {
        "unknown error".to_string()
    };
    Err(CommError::Mpi {
        call,
        code,
        message,
    })
}

/// Converts a count to `c_int`, the type MPI counts have.
fn c_count(what: &'static str, n: usize) -> Result<c_int, CommError> {
    c_int::try_from(n).map_err(|_| CommError::Invalid {
        what,
        detail: format!("count {n} does not fit in a C int"),
    })
}

/// Checks a rank against a communicator size and converts it to `c_int`.
fn c_rank(what: &'static str, rank: usize, size: usize) -> Result<c_int, CommError> {
    if rank >= size {
        return Err(CommError::Rank { what, rank, size });
    }
    c_count(what, rank)
}

/// An all-bits-zero status for MPI to fill in.
fn empty_status() -> ffi::MPI_Status {
    // SAFETY: MPI_Status is a plain C struct of integers; all-zero is a valid value.
    unsafe { std::mem::zeroed() }
}

mod sealed {
    use super::*;

    /// A communicator handle shared by everything built on it; frees user communicators last.
    pub struct CommHandle {
        pub(super) raw: ffi::MPI_Comm,
        pub(super) owned: bool,
        pub(super) rank: usize,
        pub(super) size: usize,
        /// Receive side of allreduce (MPI_IN_PLACE is not portable through the bindings).
        pub(super) scratch: RefCell<Vec<f32>>,
        /// Send side of a bounded allreduce, which MPI may still read after it is given up.
        pub(super) sent: RefCell<Vec<f32>>,
        /// Point-to-point messages this process sent or received on the communicator.
        pub(super) p2p_messages: Cell<u64>,
    }

    impl Drop for CommHandle {
        fn drop(&mut self) {
            if self.owned && !mpi::environment::is_finalized() {
                // SAFETY: raw is a live user communicator that nothing else references any more.
                unsafe {
                    ffi::MPI_Comm_free(&mut self.raw);
                }
            }
        }
    }

    /// Gives the collective methods access to the handle without exposing it.
    pub trait HasHandle {
        fn handle(&self) -> &Rc<CommHandle>;
    }
}
use sealed::{CommHandle, HasHandle};

impl CommHandle {
    /// Wraps a raw communicator, caching rank and size.
    fn new(raw: ffi::MPI_Comm, owned: bool) -> Result<Rc<CommHandle>, CommError> {
        let mut rank: c_int = 0;
        let mut size: c_int = 0;
        // SAFETY: raw is a live communicator; the out-pointers are valid.
        check("MPI_Comm_rank", unsafe {
            ffi::MPI_Comm_rank(raw, &mut rank)
        })?;
        check("MPI_Comm_size", unsafe {
            ffi::MPI_Comm_size(raw, &mut size)
        })?;
        Ok(Rc::new(CommHandle {
            raw,
            owned,
            rank: usize::try_from(rank).unwrap_or(0),
            size: usize::try_from(size).unwrap_or(0),
            scratch: RefCell::new(Vec::new()),
            sent: RefCell::new(Vec::new()),
            p2p_messages: Cell::new(0),
        }))
    }
}

/// The result of [`Collectives::fatal_on_all`] when at least one rank failed.
///
/// Every rank gets one; only the ranks that failed carry their own message, so that printing
/// [`FatalOnAll::local`] (when present) reports each error exactly once.
#[derive(Debug, Clone, PartialEq)]
pub struct FatalOnAll {
    /// This rank's own error message, `None` if this rank was fine.
    pub local: Option<String>,
    /// How many ranks of the communicator failed.
    pub failed_ranks: u64,
}

impl fmt::Display for FatalOnAll {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.local {
            Some(m) => write!(f, "{m}"),
            None => write!(f, "{} other rank(s) failed", self.failed_ranks),
        }
    }
}

impl std::error::Error for FatalOnAll {}

/// Collectives over a communicator ([`Comm`] for world, [`SubComm`] for a split).
///
/// All methods are collective: every rank of the communicator must call them in the same order.
pub trait Collectives: HasHandle {
    /// This process's rank in the communicator.
    fn rank(&self) -> usize {
        self.handle().rank
    }

    /// Number of ranks in the communicator.
    fn size(&self) -> usize {
        self.handle().size
    }

    /// `MPI_Barrier`.
    fn barrier(&self) -> Result<(), CommError> {
        // SAFETY: live communicator.
        check("MPI_Barrier", unsafe {
            ffi::MPI_Barrier(self.handle().raw)
        })
    }

    /// `MPI_Comm_split`: ranks with the same `Some(color)` form a new communicator ordered by
    /// `key` (ties by old rank); `None` (MPI_UNDEFINED) joins none and gets `None` back.
    fn split(&self, color: Option<u32>, key: i32) -> Result<Option<SubComm>, CommError> {
        let c = match color {
            Some(c) => c_int::try_from(c).map_err(|_| CommError::Invalid {
                what: "split",
                detail: format!("color {c} does not fit in a C int"),
            })?,
            // SAFETY: reading an extern constant.
            None => unsafe { ffi::RSMPI_UNDEFINED },
        };
        // SAFETY: reading an extern constant.
        let mut new = unsafe { ffi::RSMPI_COMM_NULL };
        // SAFETY: live communicator; `new` is a valid out-pointer.
        check("MPI_Comm_split", unsafe {
            ffi::MPI_Comm_split(self.handle().raw, c, key, &mut new)
        })?;
        // SAFETY: reading an extern constant.
        if new == unsafe { ffi::RSMPI_COMM_NULL } {
            return Ok(None);
        }
        Ok(Some(SubComm {
            handle: CommHandle::new(new, true)?,
        }))
    }

    /// `MPI_Comm_create_group`: a new communicator of the ranks `ranks` of this one (in that
    /// order: `ranks[i]` is rank `i` there). Collective over those ranks only, so groups of
    /// ranks can each form theirs while the others go on; `tag` tells apart creations that
    /// may be under way at once on this communicator.
    fn create_group(&self, ranks: &[usize], tag: u16) -> Result<SubComm, CommError> {
        let h = self.handle();
        let mut members = Vec::with_capacity(ranks.len());
        for &r in ranks {
            members.push(c_rank("create_group member", r, h.size)?);
        }
        if !ranks.contains(&h.rank) {
            return Err(CommError::Invalid {
                what: "create_group",
                detail: format!("rank {} is not among the members {ranks:?}", h.rank),
            });
        }
        let count = c_count("create_group", members.len())?;
        // SAFETY: reading extern constants.
        let (mut all, mut some) = unsafe { (ffi::RSMPI_GROUP_NULL, ffi::RSMPI_GROUP_NULL) };
        // SAFETY: live communicator; `all` is a valid out-pointer.
        check("MPI_Comm_group", unsafe {
            ffi::MPI_Comm_group(h.raw, &mut all)
        })?;
        // SAFETY: `all` was just created; `members` holds `count` valid ranks of it.
        let included = check("MPI_Group_incl", unsafe {
            ffi::MPI_Group_incl(all, count, members.as_ptr(), &mut some)
        });
        // SAFETY: `all` is a group created above, freed once.
        unsafe { ffi::MPI_Group_free(&mut all) };
        included?;
        // SAFETY: reading an extern constant.
        let mut new = unsafe { ffi::RSMPI_COMM_NULL };
        // SAFETY: live communicator, a group of its ranks, a valid out-pointer.
        let created = check("MPI_Comm_create_group", unsafe {
            ffi::MPI_Comm_create_group(h.raw, some, c_int::from(tag), &mut new)
        });
        // SAFETY: `some` is a group created above, freed once.
        unsafe { ffi::MPI_Group_free(&mut some) };
        created?;
        Ok(SubComm {
            handle: CommHandle::new(new, true)?,
        })
    }

    /// Point-to-point messages this process has sent or received on this communicator
    /// (the links of [`p2p`] count them; the collectives do not).
    fn p2p_messages(&self) -> u64 {
        self.handle().p2p_messages.get()
    }

    /// Broadcasts a byte buffer from `root` (length first, then bytes); on other ranks `buf` is
    /// replaced. Used to broadcast JSON.
    fn broadcast_bytes(&self, root: usize, buf: &mut Vec<u8>) -> Result<(), CommError> {
        let h = self.handle();
        let r = c_rank("broadcast_bytes root", root, h.size)?;
        let mut len = buf.len() as u64;
        // SAFETY: one u64 at a valid address.
        check("MPI_Bcast", unsafe {
            ffi::MPI_Bcast(
                (&mut len as *mut u64).cast(),
                1,
                ffi::RSMPI_UINT64_T,
                r,
                h.raw,
            )
        })?;
        let n = usize::try_from(len).map_err(|_| CommError::Invalid {
            what: "broadcast_bytes",
            detail: format!("length {len} does not fit in memory"),
        })?;
        if h.rank != root {
            buf.clear();
            buf.resize(n, 0);
        }
        let count = c_count("broadcast_bytes", n)?;
        // SAFETY: buf holds n bytes on every rank.
        check("MPI_Bcast", unsafe {
            ffi::MPI_Bcast(buf.as_mut_ptr().cast(), count, ffi::RSMPI_UINT8_T, r, h.raw)
        })
    }

    /// Gathers one `f64` per rank at `root`, in rank order (`None` on other ranks).
    fn gather_f64(&self, root: usize, value: f64) -> Result<Option<Vec<f64>>, CommError> {
        let rows = self.gather_f64s(root, &[value])?;
        Ok(rows.map(|rows| rows.into_iter().map(|r| r[0]).collect()))
    }

    /// Gathers `values` (the same length on every rank) at `root`: one row per rank, in rank
    /// order (`None` on other ranks). Fails on every rank if the lengths differ.
    fn gather_f64s(&self, root: usize, values: &[f64]) -> Result<Option<Vec<Vec<f64>>>, CommError> {
        let h = self.handle();
        let r = c_rank("gather_f64s root", root, h.size)?;
        let len = values.len();
        // SAFETY: reading extern constants.
        let (u64t, max, min) = unsafe { (ffi::RSMPI_UINT64_T, ffi::RSMPI_MAX, ffi::RSMPI_MIN) };
        let hi: u64 = allreduce_scalar(h, len as u64, u64t, max)?;
        let lo: u64 = allreduce_scalar(h, len as u64, u64t, min)?;
        if hi != lo {
            return Err(CommError::Invalid {
                what: "gather_f64s",
                detail: format!("ranks disagree on the row length ({lo} to {hi})"),
            });
        }
        if len == 0 {
            return Ok((h.rank == root).then(|| vec![Vec::new(); h.size]));
        }
        let count = c_count("gather_f64s", len)?;
        let mut out = if h.rank == root {
            vec![0.0f64; h.size * len]
        } else {
            Vec::new()
        };
        let recv: *mut c_void = if h.rank == root {
            out.as_mut_ptr().cast()
        } else {
            std::ptr::null_mut()
        };
        // SAFETY: the root's receive buffer holds size x len f64; others' is ignored by MPI.
        check("MPI_Gather", unsafe {
            ffi::MPI_Gather(
                values.as_ptr().cast(),
                count,
                ffi::RSMPI_DOUBLE,
                recv,
                count,
                ffi::RSMPI_DOUBLE,
                r,
                h.raw,
            )
        })?;
        Ok((h.rank == root).then(|| out.chunks(len).map(<[f64]>::to_vec).collect()))
    }

    /// Every rank's `values` (the same length on every rank) on every rank, one row per
    /// rank in rank order: gathered at rank 0, then broadcast as little-endian bytes.
    fn allgather_f64s(&self, values: &[f64]) -> Result<Vec<Vec<f64>>, CommError> {
        let rows = self.gather_f64s(0, values)?;
        let mut bytes: Vec<u8> = rows
            .iter()
            .flatten()
            .flatten()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        self.broadcast_bytes(0, &mut bytes)?;
        let words: Vec<f64> = bytes
            .chunks_exact(8)
            .map(|b| f64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
            .collect();
        let size = self.size();
        if words.len() != values.len() * size {
            return Err(CommError::Invalid {
                what: "allgather_f64s",
                detail: format!(
                    "{} values came, expected {size} rows of {}",
                    words.len(),
                    values.len()
                ),
            });
        }
        Ok(match values.is_empty() {
            true => vec![Vec::new(); size],
            false => words.chunks(values.len()).map(<[f64]>::to_vec).collect(),
        })
    }

    /// Element-wise sum of `data` over all ranks, result in `data` on every rank.
    fn allreduce_sum_f32_in_place(&self, data: &mut [f32]) -> Result<(), CommError> {
        let h = self.handle();
        let count = c_count("allreduce_sum_f32_in_place", data.len())?;
        emulation::hold_allreduce(4 * data.len() as u64, h.size);
        let mut scratch = h.scratch.borrow_mut();
        if scratch.len() < data.len() {
            scratch.resize(data.len(), 0.0);
        }
        // SAFETY: both buffers hold data.len() f32 and do not overlap.
        check("MPI_Allreduce", unsafe {
            ffi::MPI_Allreduce(
                data.as_ptr().cast(),
                scratch.as_mut_ptr().cast(),
                count,
                ffi::RSMPI_FLOAT,
                ffi::RSMPI_SUM,
                h.raw,
            )
        })?;
        data.copy_from_slice(&scratch[..data.len()]);
        Ok(())
    }

    /// [`Collectives::allreduce_sum_f32_in_place`] that gives up at `deadline`:
    /// `MPI_Iallreduce`, polled as a meeting's arrival is, until it completes (`true`) or
    /// the deadline passes (`false`: some rank did not come; [`SubComm::arrive`] on another
    /// communicator finds which). A collective cannot be cancelled, so a reduction given up
    /// on stays posted on buffers of the communicator's own that are then leaked rather
    /// than freed under MPI: the caller ends the job.
    fn allreduce_sum_f32_in_place_until(
        &self,
        data: &mut [f32],
        deadline: std::time::Instant,
    ) -> Result<bool, CommError> {
        let h = self.handle();
        let count = c_count("allreduce_sum_f32_in_place_until", data.len())?;
        emulation::hold_allreduce(4 * data.len() as u64, h.size);
        let (mut sent, mut scratch) = (h.sent.borrow_mut(), h.scratch.borrow_mut());
        for buf in [&mut *sent, &mut *scratch] {
            if buf.len() < data.len() {
                buf.resize(data.len(), 0.0);
            }
        }
        sent[..data.len()].copy_from_slice(data);
        let mut request = p2p::null_request();
        // SAFETY: both buffers hold data.len() f32, do not overlap, and belong to the
        // handle, which outlives the request (or leaks them, below).
        check("MPI_Iallreduce", unsafe {
            ffi::MPI_Iallreduce(
                sent.as_ptr().cast(),
                scratch.as_mut_ptr().cast(),
                count,
                ffi::RSMPI_FLOAT,
                ffi::RSMPI_SUM,
                h.raw,
                &mut request,
            )
        })?;
        while p2p::test(&mut request)?.is_none() {
            if std::time::Instant::now() >= deadline {
                std::mem::forget(std::mem::take(&mut *sent));
                std::mem::forget(std::mem::take(&mut *scratch));
                return Ok(false);
            }
            idle::pause_or_yield();
        }
        data.copy_from_slice(&scratch[..data.len()]);
        Ok(true)
    }

    /// Element-wise maximum of `values` over all ranks (each rank the same length).
    fn allreduce_max_u64s(&self, values: &[u64]) -> Result<Vec<u64>, CommError> {
        let count = c_count("allreduce_max_u64s", values.len())?;
        let mut out = vec![0u64; values.len()];
        // SAFETY: both buffers hold values.len() u64 and do not overlap; reading extern
        // constants.
        check("MPI_Allreduce", unsafe {
            ffi::MPI_Allreduce(
                values.as_ptr().cast(),
                out.as_mut_ptr().cast(),
                count,
                ffi::RSMPI_UINT64_T,
                ffi::RSMPI_MAX,
                self.handle().raw,
            )
        })?;
        Ok(out)
    }

    /// Maximum of `x` over all ranks.
    fn allreduce_max_f64(&self, x: f64) -> Result<f64, CommError> {
        // SAFETY: reading extern constants.
        let (t, op) = unsafe { (ffi::RSMPI_DOUBLE, ffi::RSMPI_MAX) };
        allreduce_scalar(self.handle(), x, t, op)
    }

    /// Minimum of `x` over all ranks.
    fn allreduce_min_f64(&self, x: f64) -> Result<f64, CommError> {
        // SAFETY: reading extern constants.
        let (t, op) = unsafe { (ffi::RSMPI_DOUBLE, ffi::RSMPI_MIN) };
        allreduce_scalar(self.handle(), x, t, op)
    }

    /// Sum of `x` over all ranks.
    fn allreduce_sum_u64(&self, x: u64) -> Result<u64, CommError> {
        // SAFETY: reading extern constants.
        let (t, op) = unsafe { (ffi::RSMPI_UINT64_T, ffi::RSMPI_SUM) };
        allreduce_scalar(self.handle(), x, t, op)
    }

    /// Makes a locally detected error fatal on every rank together.
    ///
    /// Every rank says whether it failed (one allreduce); if any did, all return
    /// `Err(FatalOnAll)`, the failing ranks with their message in `local`. The caller prints
    /// `local` when present and exits with the same code everywhere: no rank is left waiting
    /// and no `MPI_Abort` is needed. If the allreduce itself fails MPI is unusable and the job
    /// is aborted.
    fn fatal_on_all<T, E: fmt::Display>(&self, local: Result<T, E>) -> Result<T, FatalOnAll> {
        let failed = u64::from(local.is_err());
        let total = match self.allreduce_sum_u64(failed) {
            Ok(t) => t,
            Err(e) => {
                let rank = self.handle().rank;
                crate::telemetry::stderr_line(&format!("error: rank {rank}: {e}"));
                abort_world(2)
            }
        };
        match local {
            Err(e) => Err(FatalOnAll {
                local: Some(e.to_string()),
                failed_ranks: total,
            }),
            Ok(_) if total > 0 => Err(FatalOnAll {
                local: None,
                failed_ranks: total,
            }),
            Ok(v) => Ok(v),
        }
    }
}

/// One-element allreduce of a plain value.
fn allreduce_scalar<T: Copy + Default>(
    h: &CommHandle,
    x: T,
    datatype: ffi::MPI_Datatype,
    op: ffi::MPI_Op,
) -> Result<T, CommError> {
    let mut out = T::default();
    // SAFETY: one element of the type matching `datatype` on each side.
    check("MPI_Allreduce", unsafe {
        ffi::MPI_Allreduce(
            (&x as *const T).cast(),
            (&mut out as *mut T).cast(),
            1,
            datatype,
            op,
            h.raw,
        )
    })?;
    Ok(out)
}

/// `MPI_Abort` on world; never returns.
fn abort_world(code: i32) -> ! {
    // SAFETY: MPI_Abort may be called at any time after MPI_Init.
    unsafe {
        ffi::MPI_Abort(ffi::RSMPI_COMM_WORLD, code);
    }
    std::process::abort()
}

/// The MPI environment plus the world communicator. Dropping it finalizes MPI.
pub struct Comm {
    handle: Rc<CommHandle>,
    // Dropped after `handle`: finalize last.
    _universe: mpi::environment::Universe,
}

impl Comm {
    /// Initialises MPI (threading level "funneled": only the main thread calls MPI) and sets
    /// `MPI_ERRORS_RETURN` on world so every failure is reported as a [`CommError`].
    pub fn init() -> Result<Comm, CommError> {
        let (universe, _level) =
            mpi::environment::initialize_with_threading(mpi::environment::Threading::Funneled)
                .ok_or(CommError::Init)?;
        // SAFETY: world is live after init; ERRORS_RETURN is a predefined handler.
        check("MPI_Comm_set_errhandler", unsafe {
            ffi::MPI_Comm_set_errhandler(ffi::RSMPI_COMM_WORLD, ffi::RSMPI_ERRORS_RETURN)
        })?;
        // SAFETY: reading an extern constant.
        let handle = CommHandle::new(unsafe { ffi::RSMPI_COMM_WORLD }, false)?;
        let sleeps = idle::choose_from_env()?;
        if sleeps && handle.rank == 0 {
            log::info!("more ranks than cores on this node: waiting ranks sleep between polls");
        }
        Ok(Comm {
            handle,
            _universe: universe,
        })
    }

    /// Kills the whole job with `code` (`MPI_Abort` on world).
    pub fn abort(&self, code: i32) -> ! {
        abort_world(code)
    }

    /// Installs a panic hook that prints `error: rank R panicked: MSG (at FILE:LINE:COL)` once
    /// to stderr and aborts the whole job, so that no other rank waits forever on this one.
    pub fn install_panic_abort(&self) {
        static PRINTED: AtomicBool = AtomicBool::new(false);
        let rank = self.handle.rank;
        std::panic::set_hook(Box::new(move |info| {
            if !PRINTED.swap(true, Ordering::SeqCst) {
                let payload = info.payload();
                let msg = payload
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "(non-string panic payload)".to_string());
                let at = info
                    .location()
                    .map(|l| format!(" (at {}:{}:{})", l.file(), l.line(), l.column()))
                    .unwrap_or_default();
                eprintln!("error: rank {rank} panicked: {msg}{at}");
            }
            abort_world(PANIC_EXIT_CODE)
        }));
    }
}

impl HasHandle for Comm {
    fn handle(&self) -> &Rc<CommHandle> {
        &self.handle
    }
}
impl Collectives for Comm {}

/// A communicator produced by [`Collectives::split`]; freed when it and every link or window
/// made from it are dropped.
pub struct SubComm {
    handle: Rc<CommHandle>,
}

impl HasHandle for SubComm {
    fn handle(&self) -> &Rc<CommHandle> {
        &self.handle
    }
}
impl Collectives for SubComm {}
