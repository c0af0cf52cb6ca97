//! One-sided communication: a window of `f32` or `u32` per rank, reached through
//! passive-target epochs, in two flavours.
//!
//! * [`SharedWindow`] ([`Window::lock_all`]): every rank holds `MPI_Win_lock_all` on the
//!   window from then until it is freed, so no operation pays for a lock. Operations on one
//!   target go through an [`Access`] that ends with `MPI_Win_flush` on that target. A rank
//!   reaches its own window the same way, because inside the shared epoch plain loads and
//!   stores would race with the peers' operations. Accumulates and [`Access::fetch`] are
//!   element-wise atomic with respect to each other (same datatype), so words that two ranks
//!   touch at once are written as accumulates and read with `fetch`; `put` and `get` are for
//!   memory that one rank writes while the other reads elsewhere.
//! * [`Window`] itself: each [`Access`] opens `MPI_Win_lock` on its target and ends with
//!   `MPI_Win_unlock`, and [`Window::lock_local`] gives this rank exclusive, direct access to
//!   its own memory. That is what a read-and-zero of memory that peers accumulate into
//!   needs: inside a shared epoch it would take an atomic fetch and a second accumulate,
//!   two more passes over the memory.
//!
//! When [`Access::complete`] returns (or the access is dropped), its operations are complete
//! at the origin and at the target. The borrow checker enforces MPI's buffer rules: values
//! given to [`Access::put`] or an accumulate cannot be modified, and the buffer given to
//! [`Access::get`] or [`Access::fetch`] cannot be read, before that. Operations of one access
//! are not ordered with each other beyond what MPI guarantees for accumulates to the same
//! location: complete one access before starting one whose effect must come after.
//!
//! Only taking a lock may wait for other ranks (as MPI defines passive target); no call here
//! needs the target to take part.

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

/// Lock type of a passive-target epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockKind {
    /// `MPI_LOCK_SHARED`: concurrent with other shared epochs (accumulates stay element-atomic).
    Shared,
    /// `MPI_LOCK_EXCLUSIVE`: no other epoch on the target meanwhile.
    Exclusive,
}

impl LockKind {
    fn raw(self) -> c_int {
        match self {
            LockKind::Shared => ffi::MPI_LOCK_SHARED as c_int,
            LockKind::Exclusive => ffi::MPI_LOCK_EXCLUSIVE as c_int,
        }
    }
}

/// The window's memory, allocated by MPI (`MPI_Win_allocate`) and freed by `MPI_Win_free`.
/// A raw pointer, because MPI may write it at any time and no Rust reference to it may exist
/// outside a [`LocalEpoch`].
struct WinMemory<T> {
    base: *mut T,
    len: usize,
}

/// An RMA window over `len` elements owned by this rank (same `len` on every rank), zero at
/// start, reached through per-target lock epochs (or, after [`Window::lock_all`], as a
/// [`SharedWindow`]).
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
    /// Whether this rank holds `MPI_Win_lock_all` on the window (a [`SharedWindow`]).
    all_locked: bool,
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
            all_locked: false,
        };
        // SAFETY: win is live; ERRORS_RETURN is predefined.
        check("MPI_Win_set_errhandler", unsafe {
            ffi::MPI_Win_set_errhandler(window.win, ffi::RSMPI_ERRORS_RETURN)
        })?;
        // MPI does not zero the allocation: zero it, then let no rank use the window before
        // every rank has.
        let mut own = window.lock_local()?;
        own.fill(T::default());
        own.unlock()?;
        // SAFETY: live communicator.
        check("MPI_Barrier", unsafe { ffi::MPI_Barrier(window.comm.raw) })?;
        Ok(window)
    }

    /// Opens a passive-target epoch on `target` (`MPI_Win_lock`); the returned [`Access`]
    /// ends it (`MPI_Win_unlock`). Several epochs on different targets may be open.
    pub fn lock<'b>(&self, target: usize, kind: LockKind) -> Result<Access<'_, 'b, T>, CommError> {
        let t = c_rank("Window::lock target", target, self.comm.size)?;
        // SAFETY: win is live.
        check("MPI_Win_lock", unsafe {
            ffi::MPI_Win_lock(kind.raw(), t, 0, self.win)
        })?;
        Ok(Access {
            window: self,
            zeros: None,
            target: t,
            end: End::Unlock,
            open: true,
            _origin: PhantomData,
        })
    }

    /// Locks this rank's own window exclusively and gives access to its memory.
    pub fn lock_local(&mut self) -> Result<LocalEpoch<'_, T>, CommError> {
        let me = c_count("Window::lock_local", self.comm.rank)?;
        // SAFETY: win is live.
        check("MPI_Win_lock", unsafe {
            ffi::MPI_Win_lock(LockKind::Exclusive.raw(), me, 0, self.win)
        })?;
        Ok(LocalEpoch {
            window: self,
            me,
            open: true,
        })
    }

    /// Opens `MPI_Win_lock_all` on the window for as long as the returned [`SharedWindow`]
    /// lives (every rank calls it; it does not synchronise them).
    pub fn lock_all(mut self) -> Result<SharedWindow<T>, CommError> {
        // SAFETY: win is live and no epoch is open (epochs borrow the window).
        check("MPI_Win_lock_all", unsafe {
            ffi::MPI_Win_lock_all(0, self.win)
        })?;
        self.all_locked = true;
        let zeros = vec![T::default(); self.mem.len];
        Ok(SharedWindow {
            window: self,
            zeros,
        })
    }

    /// Element `at` of this rank's own window, read without an epoch: only a hint that peers
    /// wrote something, for deciding whether to lock at all. It may be stale (a remote write
    /// becomes visible to plain loads eventually in MPI's unified memory model, e.g. osc/sm,
    /// and perhaps only at the next synchronisation otherwise), so act on values only after
    /// reading them again through MPI. `None` when `at` is out of range.
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
        let unlocked = if self.all_locked {
            self.all_locked = false;
            // SAFETY: the lock_all epoch of `lock_all` is open; no Access is alive (each
            // borrows the window).
            check("MPI_Win_unlock_all", unsafe {
                ffi::MPI_Win_unlock_all(self.win)
            })
        } else {
            Ok(())
        };
        // SAFETY: win is live and no epoch is open.
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

/// How an [`Access`] ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// `MPI_Win_flush` on the target, inside a [`SharedWindow`]'s epoch (only if operations
    /// were started).
    Flush,
    /// `MPI_Win_unlock` of the epoch [`Window::lock`] opened.
    Unlock,
}

/// Operations on one target: inside a [`SharedWindow`]'s epoch, or in an epoch of their own
/// ([`Window::lock`]). `'b` is the lifetime of every origin buffer used: they stay borrowed
/// until [`Access::complete`] (or the drop, which completes) has completed the operations.
pub struct Access<'w, 'b, T: Element = f32> {
    window: &'w Window<T>,
    /// The shared window's zeros, the origin of [`Access::fetch`] (`None`: a lock epoch).
    zeros: Option<&'w [T]>,
    target: c_int,
    end: End,
    /// Flush: operations were started since the last completion. Unlock: the lock is held.
    open: bool,
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
        self.started();
        // SAFETY: values outlives the completion ('b); dt addresses only elements < len at target.
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
        self.started();
        // SAFETY: values outlives the completion ('b); the target range is inside the window.
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
    /// respect to accumulates (`MPI_Get_accumulate` of zeros); `out` is filled at the
    /// completion. Only inside a [`SharedWindow`].
    pub fn fetch(&mut self, offset: usize, out: &'b mut [T]) -> Result<(), CommError> {
        self.window
            .check_range("Access::fetch", offset, out.len())?;
        let zeros = self.zeros.ok_or(CommError::Invalid {
            what: "Access::fetch",
            detail: "only a SharedWindow's accesses fetch".into(),
        })?;
        if out.is_empty() {
            return Ok(());
        }
        let count = c_count("Access::fetch", out.len())?;
        self.started();
        // SAFETY: the origin is `count` zeros owned by the window, which outlives this
        // access; out is exclusively borrowed until the completion.
        check("MPI_Get_accumulate", unsafe {
            ffi::MPI_Get_accumulate(
                zeros.as_ptr().cast(),
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
        self.started();
        // SAFETY: values outlives the completion ('b); the target range is inside the window.
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
    /// the completion (it stays mutably borrowed until then).
    pub fn get(&mut self, offset: usize, out: &'b mut [T]) -> Result<(), CommError> {
        self.window.check_range("Access::get", offset, out.len())?;
        if out.is_empty() {
            return Ok(());
        }
        let count = c_count("Access::get", out.len())?;
        self.started();
        // SAFETY: out is exclusively borrowed for 'b, i.e. until the completion.
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
    /// (`MPI_Win_flush` in a shared window, `MPI_Win_unlock` of a lock epoch).
    pub fn complete(mut self) -> Result<(), CommError> {
        self.close()
    }

    fn started(&mut self) {
        self.open = true;
    }

    fn close(&mut self) -> Result<(), CommError> {
        if !self.open {
            return Ok(());
        }
        self.open = false;
        match self.end {
            // SAFETY: the window's lock_all epoch is open while its SharedWindow lives,
            // which this borrow guarantees.
            End::Flush => check("MPI_Win_flush", unsafe {
                ffi::MPI_Win_flush(self.target, self.window.win)
            }),
            // SAFETY: an epoch on target is open on win (taken by Window::lock).
            End::Unlock => check("MPI_Win_unlock", unsafe {
                ffi::MPI_Win_unlock(self.target, self.window.win)
            }),
        }
    }
}

impl<T: Element> Drop for Access<'_, '_, T> {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
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

/// A window inside this rank's `MPI_Win_lock_all` epoch until it is freed (see the module
/// docs). Dropping it is collective, like dropping a [`Window`].
pub struct SharedWindow<T: Element = f32> {
    window: Window<T>,
    /// `len` zeros: the origin of [`Access::fetch`] (an atomic read is an accumulate of 0).
    zeros: Vec<T>,
}

impl<T: Element> SharedWindow<T> {
    /// Operations on `target` (this rank included); they are complete when the returned
    /// [`Access`] completes (`MPI_Win_flush`).
    pub fn at<'b>(&self, target: usize) -> Result<Access<'_, 'b, T>, CommError> {
        let target = c_rank("SharedWindow::at target", target, self.window.comm.size)?;
        Ok(Access {
            window: &self.window,
            zeros: Some(&self.zeros),
            target,
            end: End::Flush,
            open: false,
            _origin: PhantomData,
        })
    }

    /// See [`Window::peek_local`].
    pub fn peek_local(&self, at: usize) -> Option<T> {
        self.window.peek_local(at)
    }

    /// See [`Window::scatter`].
    pub fn scatter(&self, indices: &[u32]) -> Result<Scatter, CommError> {
        self.window.scatter(indices)
    }

    /// Collectively closes the epoch and frees the window, reporting an MPI error.
    pub fn free(self) -> Result<(), CommError> {
        self.window.free()
    }
}

/// Exclusive access to this rank's own window memory (derefs to `[T]`); unlocks on drop.
pub struct LocalEpoch<'w, T: Element = f32> {
    window: &'w mut Window<T>,
    me: c_int,
    open: bool,
}

impl<T: Element> LocalEpoch<'_, T> {
    /// Ends the exclusive epoch, reporting an MPI error (dropping ignores it).
    pub fn unlock(mut self) -> Result<(), CommError> {
        self.close()
    }

    fn close(&mut self) -> Result<(), CommError> {
        if !self.open {
            return Ok(());
        }
        self.open = false;
        // SAFETY: an exclusive epoch on this rank is open on win.
        check("MPI_Win_unlock", unsafe {
            ffi::MPI_Win_unlock(self.me, self.window.win)
        })
    }
}

impl<T: Element> std::ops::Deref for LocalEpoch<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: the exclusive lock on this rank keeps other ranks out of this memory, and the
        // window is mutably borrowed, so this is the only view.
        unsafe { std::slice::from_raw_parts(self.window.mem.base, self.window.mem.len) }
    }
}

impl<T: Element> std::ops::DerefMut for LocalEpoch<'_, T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as for Deref.
        unsafe { std::slice::from_raw_parts_mut(self.window.mem.base, self.window.mem.len) }
    }
}

impl<T: Element> Drop for LocalEpoch<'_, T> {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            eprintln!("error: rank {}: {e}", self.window.comm.rank);
        }
    }
}
