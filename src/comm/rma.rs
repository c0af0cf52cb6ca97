//! One-sided communication: a window of `f32` or `u32` per rank, inside one passive-target
//! epoch that lasts from creation to free.
//!
//! Every rank opens `MPI_Win_lock_all` on its window right after creating it and closes it
//! just before freeing it, so no operation pays for a lock round trip. Operations on one
//! target go through an [`Access`], which ends with `MPI_Win_flush` on that target: when
//! [`Access::flush`] returns, its operations are complete at the origin and at the target.
//! The borrow checker enforces MPI's buffer rules: values given to [`Access::put`] or an
//! accumulate cannot be modified, and the buffer given to [`Access::get`] or
//! [`Access::fetch`] cannot be read, before that flush.
//!
//! A rank reaches its own window the same way (an [`Access`] to itself), because inside a
//! shared epoch plain loads and stores would race with the peers' operations. Accumulates
//! and [`Access::fetch`] are element-wise atomic with respect to each other (same datatype),
//! so a counter or an inbox that several ranks update is read and changed with them; `put`
//! and `get` are for memory that only one rank writes while the other reads elsewhere.
//! Operations of one [`Access`] are not ordered with each other beyond what MPI guarantees
//! for accumulates to the same location: flush between two that must arrive in order.
//!
//! No call here needs the target to take part.

use super::sealed::CommHandle;
use super::Collectives;
use super::{allreduce_scalar, c_count, c_rank, check, CommError};
use mpi::ffi;
use std::cell::RefCell;
use std::marker::PhantomData;
use std::os::raw::c_int;
use std::rc::Rc;

/// What a window holds: 4-byte numbers MPI can move and sum (`MPI_FLOAT`, `MPI_UINT32_T`).
pub trait Element: Copy + Default + sealed_element::Sealed + 'static {
    /// The MPI datatype of one element.
    fn datatype() -> ffi::MPI_Datatype;
}

mod sealed_element {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for u32 {}
}

impl Element for f32 {
    fn datatype() -> ffi::MPI_Datatype {
        // SAFETY: reading an extern constant.
        unsafe { ffi::RSMPI_FLOAT }
    }
}

impl Element for u32 {
    fn datatype() -> ffi::MPI_Datatype {
        // SAFETY: reading an extern constant.
        unsafe { ffi::RSMPI_UINT32_T }
    }
}

/// The window's memory, allocated by MPI (`MPI_Win_allocate`) and freed by `MPI_Win_free`.
/// A raw pointer, because MPI may write it at any time, so no Rust reference to it may exist
/// (this rank reaches it through MPI operations, like its peers).
struct WinMemory<T> {
    base: *mut T,
    len: usize,
}

/// An RMA window over `len` elements owned by this rank (same `len` on every rank), zero at
/// start, inside its passive-target epoch on every rank until it is freed.
///
/// Creating and dropping are collective over the communicator (`MPI_Win_allocate`/`MPI_Win_free`):
/// all ranks must create and drop their windows together.
pub struct Window<T: Element = f32> {
    win: ffi::MPI_Win,
    comm: Rc<CommHandle>,
    /// Displacements for the indexed datatype, reused between calls.
    displs: RefCell<Vec<c_int>>,
    /// Valid until `MPI_Win_free`.
    mem: WinMemory<T>,
    /// `len` zeros: the origin of [`Access::fetch`] (an atomic read is an accumulate of 0).
    zeros: Vec<T>,
    /// Whether the window's `MPI_Win_lock_all` epoch is open.
    epoch_open: bool,
}

impl<T: Element> Window<T> {
    /// Collectively creates a window of `n` zeros on every rank of `comm` (displacement unit 4
    /// bytes). Fails on every rank if the ranks disagree on `n`.
    pub fn create<C: Collectives>(comm: &C, n: usize) -> Result<Window<T>, CommError> {
        let comm = Rc::clone(comm.handle());
        // SAFETY: reading extern constants.
        let (u64t, max, min) = unsafe { (ffi::RSMPI_UINT64_T, ffi::RSMPI_MAX, ffi::RSMPI_MIN) };
        let hi: u64 = allreduce_scalar(&comm, n as u64, u64t, max)?;
        let lo: u64 = allreduce_scalar(&comm, n as u64, u64t, min)?;
        if hi != lo {
            return Err(CommError::Invalid {
                what: "Window::create",
                detail: format!("ranks disagree on the window length ({lo} to {hi})"),
            });
        }
        let bytes = n
            .checked_mul(std::mem::size_of::<T>())
            .and_then(|b| ffi::MPI_Aint::try_from(b).ok())
            .ok_or(CommError::Invalid {
                what: "Window::create",
                detail: format!("window of {n} elements is too large"),
            })?;
        c_count("Window::create length", n)?;
        // SAFETY: reading extern constants.
        let mut win = unsafe { ffi::RSMPI_WIN_NULL };
        let mut base: *mut T = std::ptr::null_mut();
        // MPI allocates the memory (rather than MPI_Win_create over ours) so that it can place
        // it where peers reach it fastest: shared memory for ranks on one node (osc/sm does an
        // accumulate as a plain memory operation, no message to the target), registered
        // memory for RDMA networks.
        // SAFETY: base is an out-pointer for the allocation's address; win an out-handle.
        check("MPI_Win_allocate", unsafe {
            ffi::MPI_Win_allocate(
                bytes,
                std::mem::size_of::<T>() as c_int,
                ffi::RSMPI_INFO_NULL,
                comm.raw,
                (&mut base as *mut *mut T).cast(),
                &mut win,
            )
        })?;
        let mut window = Window {
            win,
            comm,
            displs: RefCell::new(Vec::new()),
            mem: WinMemory { base, len: n },
            zeros: vec![T::default(); n],
            epoch_open: false,
        };
        // SAFETY: win is live; ERRORS_RETURN is predefined.
        check("MPI_Win_set_errhandler", unsafe {
            ffi::MPI_Win_set_errhandler(window.win, ffi::RSMPI_ERRORS_RETURN)
        })?;
        // MPI does not zero the allocation: zero it under an exclusive lock on this rank (the
        // only time the memory is touched directly), then let no rank use the window before
        // every rank has, then open the epoch that lasts until the window is freed.
        let me = c_count("Window::create", window.comm.rank)?;
        // SAFETY: win is live; no epoch is open yet.
        check("MPI_Win_lock", unsafe {
            ffi::MPI_Win_lock(ffi::MPI_LOCK_EXCLUSIVE as c_int, me, 0, window.win)
        })?;
        // SAFETY: the exclusive lock keeps every other rank out of this memory, which is
        // `n` elements long and not referenced anywhere else.
        unsafe { std::slice::from_raw_parts_mut(base, n) }.fill(T::default());
        // SAFETY: the lock above is open.
        check("MPI_Win_unlock", unsafe {
            ffi::MPI_Win_unlock(me, window.win)
        })?;
        // SAFETY: live communicator.
        check("MPI_Barrier", unsafe { ffi::MPI_Barrier(window.comm.raw) })?;
        // SAFETY: win is live and no epoch is open on it.
        check("MPI_Win_lock_all", unsafe {
            ffi::MPI_Win_lock_all(0, window.win)
        })?;
        window.epoch_open = true;
        Ok(window)
    }

    /// Operations on `target` (this rank included) inside the window's epoch; they are
    /// complete when the returned [`Access`] is flushed (or dropped).
    pub fn at<'b>(&self, target: usize) -> Result<Access<'_, 'b, T>, CommError> {
        let target = c_rank("Window::at target", target, self.comm.size)?;
        Ok(Access {
            window: self,
            target,
            pending: false,
            _origin: PhantomData,
        })
    }

    /// Element `at` of this rank's own window, read without an epoch: only a hint that peers
    /// wrote something, for deciding whether to lock at all. It may be stale (a remote write
    /// becomes visible to plain loads eventually in MPI's unified memory model, e.g. osc/sm,
    /// and perhaps only at the next synchronisation otherwise), so act on values only after
    /// reading them again with [`Access::fetch`]. `None` when `at` is out of range.
    pub fn peek_local(&self, at: usize) -> Option<T> {
        if at >= self.mem.len {
            return None;
        }
        // SAFETY: `at` is inside the live allocation; a volatile read of memory that another
        // process may be writing yields some value of it and creates no reference to it.
        Some(unsafe { std::ptr::read_volatile(self.mem.base.add(at)) })
    }

    /// The target layout of a sparse accumulate over `indices` (unique, each below
    /// the window length): an indexed-block datatype, committed once and usable on every target.
    pub fn scatter(&self, indices: &[u32]) -> Result<Scatter, CommError> {
        let mut scatter = Scatter {
            dt: None,
            len: indices.len(),
            window: self.win,
        };
        if indices.is_empty() {
            return Ok(scatter);
        }
        let count = c_count("Window::scatter", indices.len())?;
        if let Some(&bad) = indices.iter().find(|&&i| i as usize >= self.mem.len) {
            return Err(CommError::Invalid {
                what: "Window::scatter",
                detail: format!("index {bad} exceeds the window length {}", self.mem.len),
            });
        }
        debug_assert!(
            {
                let mut s = indices.to_vec();
                s.sort_unstable();
                s.windows(2).all(|p| p[0] != p[1])
            },
            "Window::scatter: indices must be unique"
        );
        let mut displs = self.displs.borrow_mut();
        displs.clear();
        // Indices are < len, which fits a C int (checked at creation).
        displs.extend(indices.iter().map(|&i| i as c_int));
        // SAFETY: reading an extern constant.
        let mut dt = unsafe { ffi::RSMPI_DATATYPE_NULL };
        // SAFETY: displs holds `count` displacements; dt is a valid out-pointer.
        check("MPI_Type_create_indexed_block", unsafe {
            ffi::MPI_Type_create_indexed_block(count, 1, displs.as_ptr(), T::datatype(), &mut dt)
        })?;
        // Owned from here: freed on drop, also if the commit fails.
        scatter.dt = Some(dt);
        // SAFETY: dt was just created.
        check("MPI_Type_commit", unsafe {
            ffi::MPI_Type_commit(scatter.dt.as_mut().expect("set above"))
        })?;
        Ok(scatter)
    }

    /// Collectively frees the window, reporting an MPI error (dropping ignores it).
    pub fn free(mut self) -> Result<(), CommError> {
        self.free_win()
    }

    fn free_win(&mut self) -> Result<(), CommError> {
        // SAFETY: reading an extern constant.
        let null = unsafe { ffi::RSMPI_WIN_NULL };
        if self.win == null || mpi::environment::is_finalized() {
            return Ok(());
        }
        let unlocked = if self.epoch_open {
            self.epoch_open = false;
            // SAFETY: the lock_all epoch opened in `create` is open; no Access is alive
            // (each borrows the window).
            check("MPI_Win_unlock_all", unsafe {
                ffi::MPI_Win_unlock_all(self.win)
            })
        } else {
            Ok(())
        };
        // SAFETY: win is live and its epoch is closed.
        let r = check("MPI_Win_free", unsafe { ffi::MPI_Win_free(&mut self.win) });
        self.win = null;
        unlocked.and(r)
    }

    fn check_range(&self, what: &'static str, offset: usize, len: usize) -> Result<(), CommError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.mem.len => Ok(()),
            _ => Err(CommError::Invalid {
                what,
                detail: format!(
                    "range {offset}..{offset}+{len} exceeds the window length {}",
                    self.mem.len
                ),
            }),
        }
    }
}

impl<T: Element> Drop for Window<T> {
    fn drop(&mut self) {
        if let Err(e) = self.free_win() {
            eprintln!("error: rank {}: {e}", self.comm.rank);
        }
    }
}

/// Operations on one target inside the window's epoch. `'b` is the lifetime of every origin
/// buffer used: they stay borrowed until [`Access::flush`] (or the drop, which flushes) has
/// completed the operations.
pub struct Access<'w, 'b, T: Element = f32> {
    window: &'w Window<T>,
    target: c_int,
    /// Whether operations were started since the last flush.
    pending: bool,
    _origin: PhantomData<&'b mut [T]>,
}

impl<'w, 'b, T: Element> Access<'w, 'b, T> {
    /// Adds `values[i]` to the target's element at the `i`-th index of `scatter`, with one
    /// `MPI_Accumulate(SUM)` whose target datatype is the scatter's indexed block.
    pub fn accumulate_scattered(
        &mut self,
        scatter: &Scatter,
        values: &'b [T],
    ) -> Result<(), CommError> {
        if scatter.window != self.window.win {
            return Err(CommError::Invalid {
                what: "Access::accumulate_scattered",
                detail: "the scatter was built for another window".into(),
            });
        }
        if values.len() != scatter.len {
            return Err(CommError::Invalid {
                what: "Access::accumulate_scattered",
                detail: format!("{} indices but {} values", scatter.len, values.len()),
            });
        }
        let Some(dt) = scatter.dt else {
            return Ok(());
        };
        let count = c_count("Access::accumulate_scattered", values.len())?;
        self.pending = true;
        // SAFETY: values outlives the flush ('b); dt addresses only elements < len at target.
        check("MPI_Accumulate", unsafe {
            ffi::MPI_Accumulate(
                values.as_ptr().cast(),
                count,
                T::datatype(),
                self.target,
                0,
                1,
                dt,
                ffi::RSMPI_SUM,
                self.window.win,
            )
        })
    }

    /// Adds `values` to the target's elements `offset..offset + values.len()`
    /// (`MPI_Accumulate(SUM)`, element-wise atomic).
    pub fn accumulate_sum(&mut self, offset: usize, values: &'b [T]) -> Result<(), CommError> {
        self.window
            .check_range("Access::accumulate_sum", offset, values.len())?;
        if values.is_empty() {
            return Ok(());
        }
        let count = c_count("Access::accumulate_sum", values.len())?;
        self.pending = true;
        // SAFETY: values outlives the flush ('b); the target range is inside the window.
        check("MPI_Accumulate", unsafe {
            ffi::MPI_Accumulate(
                values.as_ptr().cast(),
                count,
                T::datatype(),
                self.target,
                offset as ffi::MPI_Aint,
                count,
                T::datatype(),
                ffi::RSMPI_SUM,
                self.window.win,
            )
        })
    }

    /// Reads the target's elements `offset..offset + out.len()` into `out` atomically with
    /// respect to accumulates (`MPI_Get_accumulate` of zeros); `out` is filled at the flush.
    pub fn fetch(&mut self, offset: usize, out: &'b mut [T]) -> Result<(), CommError> {
        self.window
            .check_range("Access::fetch", offset, out.len())?;
        if out.is_empty() {
            return Ok(());
        }
        let count = c_count("Access::fetch", out.len())?;
        self.pending = true;
        // SAFETY: the origin is `count` zeros owned by the window, which outlives this
        // access; out is exclusively borrowed until the flush completes the operation.
        check("MPI_Get_accumulate", unsafe {
            ffi::MPI_Get_accumulate(
                self.window.zeros.as_ptr().cast(),
                count,
                T::datatype(),
                out.as_mut_ptr().cast(),
                count,
                T::datatype(),
                self.target,
                offset as ffi::MPI_Aint,
                count,
                T::datatype(),
                ffi::RSMPI_SUM,
                self.window.win,
            )
        })
    }

    /// Writes `values` to the target's elements `offset..offset + values.len()`.
    pub fn put(&mut self, offset: usize, values: &'b [T]) -> Result<(), CommError> {
        self.window
            .check_range("Access::put", offset, values.len())?;
        if values.is_empty() {
            return Ok(());
        }
        let count = c_count("Access::put", values.len())?;
        self.pending = true;
        // SAFETY: values outlives the flush ('b); the target range is inside the window.
        check("MPI_Put", unsafe {
            ffi::MPI_Put(
                values.as_ptr().cast(),
                count,
                T::datatype(),
                self.target,
                offset as ffi::MPI_Aint,
                count,
                T::datatype(),
                self.window.win,
            )
        })
    }

    /// Reads the target's elements `offset..offset + out.len()` into `out`, which is filled at
    /// the flush (it stays mutably borrowed until then).
    pub fn get(&mut self, offset: usize, out: &'b mut [T]) -> Result<(), CommError> {
        self.window.check_range("Access::get", offset, out.len())?;
        if out.is_empty() {
            return Ok(());
        }
        let count = c_count("Access::get", out.len())?;
        self.pending = true;
        // SAFETY: out is exclusively borrowed for 'b, i.e. until the flush completes the get.
        check("MPI_Get", unsafe {
            ffi::MPI_Get(
                out.as_mut_ptr().cast(),
                count,
                T::datatype(),
                self.target,
                offset as ffi::MPI_Aint,
                count,
                T::datatype(),
                self.window.win,
            )
        })
    }

    /// Completes every operation of this access at the origin and the target
    /// (`MPI_Win_flush`; nothing to do when none was started).
    pub fn flush(mut self) -> Result<(), CommError> {
        self.complete()
    }

    fn complete(&mut self) -> Result<(), CommError> {
        if !self.pending {
            return Ok(());
        }
        self.pending = false;
        // SAFETY: the window's lock_all epoch is open (from `create` until it is freed,
        // which this borrow prevents).
        check("MPI_Win_flush", unsafe {
            ffi::MPI_Win_flush(self.target, self.window.win)
        })
    }
}

impl<T: Element> Drop for Access<'_, '_, T> {
    fn drop(&mut self) {
        if let Err(e) = self.complete() {
            eprintln!("error: rank {}: {e}", self.window.comm.rank);
        }
    }
}

/// Target layout of a sparse accumulate (see [`Window::scatter`]): an indexed-block
/// datatype over unique indices. Dropping it is allowed while accumulates using it are still
/// pending: `MPI_Type_free` only marks the type, and MPI frees it once they complete.
pub struct Scatter {
    /// None for no indices (nothing to send).
    dt: Option<ffi::MPI_Datatype>,
    /// Number of target indices.
    len: usize,
    window: ffi::MPI_Win,
}

impl Drop for Scatter {
    fn drop(&mut self) {
        if let Some(mut dt) = self.dt.take() {
            if !mpi::environment::is_finalized() {
                // SAFETY: dt is a datatype created here and freed once.
                unsafe { ffi::MPI_Type_free(&mut dt) };
            }
        }
    }
}
