//! One-sided communication: a window of `f32` or `u32` per rank with passive-target epochs.
//!
//! The borrow checker enforces MPI's rules:
//! * An [`Epoch`] (`MPI_Win_lock` .. `MPI_Win_unlock` on one target) borrows every origin buffer
//!   given to it until it ends: values passed to [`Epoch::put`]/[`Epoch::accumulate_sum`] cannot be
//!   modified, and the buffer given to [`Epoch::get`] cannot be read, before the unlock that
//!   completes the operations.
//! * Own memory is reachable only through [`Window::lock_local`], which holds an exclusive lock on
//!   this rank and borrows the window mutably, so no epoch and no second view can coexist with it.
//!
//! Only `lock`/`unlock` may wait for other ranks (as MPI defines passive target); no call here
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
/// start.
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

    /// Opens a passive-target epoch on `target` (`MPI_Win_lock`); it ends when the returned
    /// guard is dropped or [`Epoch::unlock`]ed. Several epochs on different targets may be open.
    pub fn lock<'b>(&self, target: usize, kind: LockKind) -> Result<Epoch<'_, 'b, T>, CommError> {
        let t = c_rank("Window::lock target", target, self.comm.size)?;
        // SAFETY: win is live.
        check("MPI_Win_lock", unsafe {
            ffi::MPI_Win_lock(kind.raw(), t, 0, self.win)
        })?;
        Ok(Epoch {
            window: self,
            target: t,
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

    /// Element `at` of this rank's own window, read without an epoch: only a hint that peers
    /// wrote something, for deciding whether to lock at all. It may be stale (a remote write
    /// becomes visible to plain loads eventually in MPI's unified memory model, e.g. osc/sm,
    /// and perhaps only at the next synchronisation otherwise), so act on values only after
    /// reading them again under [`Window::lock_local`]. `None` when `at` is out of range.
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
        // SAFETY: win is live and no epoch is open (epochs borrow the window).
        let r = check("MPI_Win_free", unsafe { ffi::MPI_Win_free(&mut self.win) });
        self.win = null;
        r
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

/// A passive-target access epoch on one target. `'b` is the lifetime of every origin buffer
/// used in it: they stay borrowed until the epoch ends, when MPI has completed the operations.
pub struct Epoch<'w, 'b, T: Element = f32> {
    window: &'w Window<T>,
    target: c_int,
    open: bool,
    _origin: PhantomData<&'b mut [T]>,
}

impl<'w, 'b, T: Element> Epoch<'w, 'b, T> {
    /// Adds `values[i]` to the target's element `indices[i]` with ONE `MPI_Accumulate(SUM)`
    /// whose target datatype is an indexed block (block length 1) over `indices`, which must be
    /// unique. To send the same indices to several targets, build the [`Scatter`] once with
    /// [`Window::scatter`] and use [`Epoch::accumulate_scattered`].
    pub fn accumulate_sum(&mut self, indices: &[u32], values: &'b [T]) -> Result<(), CommError> {
        let scatter = self.window.scatter(indices)?;
        // Dropping `scatter` right after is fine: MPI frees a datatype only once the
        // operations using it are complete.
        self.accumulate_scattered(&scatter, values)
    }

    /// Adds `values[i]` to the target's element at the `i`-th index of `scatter`, with one
    /// `MPI_Accumulate(SUM)`.
    pub fn accumulate_scattered(
        &mut self,
        scatter: &Scatter,
        values: &'b [T],
    ) -> Result<(), CommError> {
        if scatter.window != self.window.win {
            return Err(CommError::Invalid {
                what: "Epoch::accumulate_scattered",
                detail: "the scatter was built for another window".into(),
            });
        }
        if values.len() != scatter.len {
            return Err(CommError::Invalid {
                what: "Epoch::accumulate_scattered",
                detail: format!("{} indices but {} values", scatter.len, values.len()),
            });
        }
        let Some(dt) = scatter.dt else {
            return Ok(());
        };
        let count = c_count("Epoch::accumulate_scattered", values.len())?;
        // SAFETY: values outlives the epoch ('b); dt addresses only elements < len at target.
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

    /// Adds `values` to the target's elements `offset..offset + values.len()`.
    pub fn accumulate_sum_dense(
        &mut self,
        offset: usize,
        values: &'b [T],
    ) -> Result<(), CommError> {
        self.window
            .check_range("Epoch::accumulate_sum_dense", offset, values.len())?;
        if values.is_empty() {
            return Ok(());
        }
        let count = c_count("Epoch::accumulate_sum_dense", values.len())?;
        // SAFETY: values outlives the epoch ('b); the target range is inside the window.
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

    /// Writes `values` to the target's elements `offset..offset + values.len()`.
    pub fn put(&mut self, offset: usize, values: &'b [T]) -> Result<(), CommError> {
        self.window
            .check_range("Epoch::put", offset, values.len())?;
        if values.is_empty() {
            return Ok(());
        }
        let count = c_count("Epoch::put", values.len())?;
        // SAFETY: values outlives the epoch ('b); the target range is inside the window.
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

    /// Reads the target's elements `offset..offset + out.len()` into `out`, which is filled when
    /// the epoch ends (it stays mutably borrowed until then).
    pub fn get(&mut self, offset: usize, out: &'b mut [T]) -> Result<(), CommError> {
        self.window.check_range("Epoch::get", offset, out.len())?;
        if out.is_empty() {
            return Ok(());
        }
        let count = c_count("Epoch::get", out.len())?;
        // SAFETY: out is exclusively borrowed for 'b, i.e. until the unlock completes the get.
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

    /// Ends the epoch (`MPI_Win_unlock`): all its operations are complete at the origin and the
    /// target.
    pub fn unlock(mut self) -> Result<(), CommError> {
        self.close()
    }

    fn close(&mut self) -> Result<(), CommError> {
        if !self.open {
            return Ok(());
        }
        self.open = false;
        // SAFETY: an epoch on target is open on win.
        check("MPI_Win_unlock", unsafe {
            ffi::MPI_Win_unlock(self.target, self.window.win)
        })
    }
}

impl<T: Element> Drop for Epoch<'_, '_, T> {
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
