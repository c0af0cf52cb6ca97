//! One-sided communication: a window of `f32` or `u32` per rank, reached through
//! passive-target epochs, in two flavours.
//!
//! * [`Window`]: each [`Epoch`] locks one target (`MPI_Win_lock` .. `MPI_Win_unlock`), and
//!   [`Window::lock_local`] gives this rank exclusive, direct access to its own memory. That
//!   is what a read-and-zero of memory that peers accumulate into needs.
//! * [`SharedWindow`] ([`Window::lock_all`]): every rank holds `MPI_Win_lock_all` on the
//!   window from then until it is freed, so no operation pays for a lock. Operations go in a
//!   [`Batch`], on any ranks, completed together by one `MPI_Win_flush_all`. A rank reaches
//!   its own window the same way, because inside the shared epoch plain loads and stores
//!   would race with the peers' operations. Accumulates and [`Batch::fetch`] are element-wise
//!   atomic with respect to each other (same datatype), so words that two ranks touch at
//!   once are written as accumulates and read with `fetch`; `put` and `get` are for memory
//!   that one rank writes while the other reads elsewhere.
//!
//! The borrow checker enforces MPI's buffer rules: values given to a put or an accumulate
//! cannot be modified, and the buffer given to a get or fetch cannot be read, before the
//! epoch ends or the batch completes. Operations of one epoch or batch are not ordered with
//! each other beyond what MPI guarantees for accumulates to the same location: complete one
//! batch before starting one whose effect must come after.
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
/// Creating and freeing are collective over the communicator (`MPI_Win_allocate`/
/// `MPI_Win_free`): all ranks must create and [`Window::free`] their windows together.
/// Dropping a window without freeing it leaves it to MPI (see the `Drop` impl).
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
            // SAFETY: the lock_all epoch of `lock_all` is open; no Batch is alive (each
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
    /// Closes this rank's shared epoch but does not free the window: `MPI_Win_free` is
    /// collective, and a window dropped on an error path (its peers elsewhere, perhaps in
    /// another collective) would hang the job there instead of reaching the abort. Free
    /// windows explicitly ([`Window::free`], [`SharedWindow::free`]).
    fn drop(&mut self) {
        // SAFETY: reading an extern constant.
        let null = unsafe { ffi::RSMPI_WIN_NULL };
        if self.all_locked && self.win != null && !mpi::environment::is_finalized() {
            self.all_locked = false;
            // SAFETY: the lock_all epoch is open and no Batch borrows the window.
            unsafe { ffi::MPI_Win_unlock_all(self.win) };
        }
    }
}

/// The operations, checked and started; completing them is the caller's job (an epoch's
/// unlock or a batch's flush), and so is keeping the origin buffers untouched until then.
impl<T: Element> Window<T> {
    /// Charges `bytes` sent to `target` to the emulated link, unless the target is this
    /// rank (nothing crosses a network then).
    fn charge(&self, target: c_int, bytes: usize) {
        if usize::try_from(target).ok() != Some(self.comm.rank) {
            super::emulation::hold_send(bytes as u64);
        }
    }

    /// `MPI_Accumulate(SUM)` of `values` into `target`'s elements at the scatter's indices.
    ///
    /// # Safety
    /// `values` must stay alive and unmodified until the operation is completed.
    unsafe fn start_accumulate_scattered(
        &self,
        target: c_int,
        scatter: &Scatter,
        values: &[T],
    ) -> Result<(), CommError> {
        if scatter.window != self.win {
            return Err(CommError::Invalid {
                what: "accumulate_scattered",
                detail: "the scatter was built for another window".into(),
            });
        }
        if values.len() != scatter.len {
            return Err(CommError::Invalid {
                what: "accumulate_scattered",
                detail: format!("{} indices but {} values", scatter.len, values.len()),
            });
        }
        let Some(dt) = scatter.dt else {
            return Ok(());
        };
        let count = c_count("accumulate_scattered", values.len())?;
        // Each value travels with its 4-byte index.
        self.charge(target, values.len() * (std::mem::size_of::<T>() + 4));
        // dt addresses only elements < len at the target (checked by `scatter`).
        check(
            "MPI_Accumulate",
            ffi::MPI_Accumulate(
                values.as_ptr().cast(),
                count,
                T::datatype(),
                target,
                0,
                1,
                dt,
                ffi::RSMPI_SUM,
                self.win,
            ),
        )
    }

    /// The common part of a one-sided operation `name` on `target`'s elements
    /// `offset..offset + len` (`what` in errors): checks the range, skips an empty one,
    /// charges a transfer towards the target to the emulated link when it `sends`, and
    /// makes the call `mpi(count, displacement)`.
    ///
    /// # Safety
    /// The buffers `mpi` passes must stay alive (and, for a read, unread) until the
    /// operation is completed.
    unsafe fn contiguous(
        &self,
        (what, name): (&'static str, &'static str),
        (target, offset, len): (c_int, usize, usize),
        sends: bool,
        mpi: impl FnOnce(c_int, ffi::MPI_Aint) -> c_int,
    ) -> Result<(), CommError> {
        self.check_range(what, offset, len)?;
        if len == 0 {
            return Ok(());
        }
        let count = c_count(what, len)?;
        if sends {
            self.charge(target, len * std::mem::size_of::<T>());
        }
        check(name, mpi(count, offset as ffi::MPI_Aint))
    }

    /// `MPI_Accumulate(SUM)` of `values` into `target`'s elements from `offset` on
    /// (element-wise atomic).
    ///
    /// # Safety
    /// As for [`Window::start_accumulate_scattered`].
    unsafe fn start_accumulate_sum(
        &self,
        target: c_int,
        offset: usize,
        values: &[T],
    ) -> Result<(), CommError> {
        let at = (target, offset, values.len());
        self.contiguous(
            ("accumulate_sum", "MPI_Accumulate"),
            at,
            true,
            |count, disp| {
                let (dt, op) = (T::datatype(), ffi::RSMPI_SUM);
                let origin = values.as_ptr().cast();
                ffi::MPI_Accumulate(origin, count, dt, target, disp, count, dt, op, self.win)
            },
        )
    }

    /// `MPI_Put` of `values` into `target`'s elements from `offset` on.
    ///
    /// # Safety
    /// As for [`Window::start_accumulate_scattered`].
    unsafe fn start_put(
        &self,
        target: c_int,
        offset: usize,
        values: &[T],
    ) -> Result<(), CommError> {
        let at = (target, offset, values.len());
        self.contiguous(("put", "MPI_Put"), at, true, |count, disp| {
            let (dt, origin) = (T::datatype(), values.as_ptr().cast());
            ffi::MPI_Put(origin, count, dt, target, disp, count, dt, self.win)
        })
    }

    /// `MPI_Get` of `target`'s elements from `offset` on into `out`.
    ///
    /// # Safety
    /// `out` must stay alive and unread until the operation is completed.
    unsafe fn start_get(
        &self,
        target: c_int,
        offset: usize,
        out: &mut [T],
    ) -> Result<(), CommError> {
        let at = (target, offset, out.len());
        self.contiguous(("get", "MPI_Get"), at, false, |count, disp| {
            let (dt, origin) = (T::datatype(), out.as_mut_ptr().cast());
            ffi::MPI_Get(origin, count, dt, target, disp, count, dt, self.win)
        })
    }

    /// An atomic read (`MPI_Get_accumulate` of `zeros`) of `target`'s elements from
    /// `offset` on into `out`.
    ///
    /// # Safety
    /// As for [`Window::start_get`]; `zeros` (at least `out.len()` zeros) must stay alive
    /// until the operation is completed.
    unsafe fn start_fetch(
        &self,
        target: c_int,
        offset: usize,
        zeros: &[T],
        out: &mut [T],
    ) -> Result<(), CommError> {
        let at = (target, offset, out.len());
        let zeros = zeros.get(..out.len()).ok_or(CommError::Invalid {
            what: "fetch",
            detail: format!("{} zeros for {} values", zeros.len(), out.len()),
        })?;
        self.contiguous(("fetch", "MPI_Get_accumulate"), at, false, |count, disp| {
            let (dt, op, result) = (T::datatype(), ffi::RSMPI_SUM, out.as_mut_ptr().cast());
            let origin = zeros.as_ptr().cast();
            ffi::MPI_Get_accumulate(
                origin, count, dt, result, count, dt, target, disp, count, dt, op, self.win,
            )
        })
    }
}

/// A passive-target epoch on one target ([`Window::lock`]). `'b` is the lifetime of every
/// origin buffer used in it: they stay borrowed until the epoch ends, when MPI has completed
/// the operations.
pub struct Epoch<'w, 'b, T: Element = f32> {
    window: &'w Window<T>,
    target: c_int,
    open: bool,
    _origin: PhantomData<&'b mut [T]>,
}

impl<'w, 'b, T: Element> Epoch<'w, 'b, T> {
    /// Adds `values[i]` to the target's element at the `i`-th index of `scatter`, with one
    /// `MPI_Accumulate(SUM)` whose target datatype is the scatter's indexed block.
    pub fn accumulate_scattered(
        &mut self,
        scatter: &Scatter,
        values: &'b [T],
    ) -> Result<(), CommError> {
        // SAFETY: values is borrowed until the epoch ends ('b).
        unsafe {
            self.window
                .start_accumulate_scattered(self.target, scatter, values)
        }
    }

    /// Adds `values` to the target's elements `offset..offset + values.len()`.
    pub fn accumulate_sum(&mut self, offset: usize, values: &'b [T]) -> Result<(), CommError> {
        // SAFETY: values is borrowed until the epoch ends ('b).
        unsafe {
            self.window
                .start_accumulate_sum(self.target, offset, values)
        }
    }

    /// Writes `values` to the target's elements `offset..offset + values.len()`.
    pub fn put(&mut self, offset: usize, values: &'b [T]) -> Result<(), CommError> {
        // SAFETY: values is borrowed until the epoch ends ('b).
        unsafe { self.window.start_put(self.target, offset, values) }
    }

    /// Reads the target's elements `offset..offset + out.len()` into `out`, filled when the
    /// epoch ends (it stays mutably borrowed until then).
    pub fn get(&mut self, offset: usize, out: &'b mut [T]) -> Result<(), CommError> {
        // SAFETY: out is borrowed until the epoch ends ('b).
        unsafe { self.window.start_get(self.target, offset, out) }
    }

    /// Ends the epoch (`MPI_Win_unlock`): all its operations are complete at the origin and
    /// the target.
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

/// Operations on any ranks of a [`SharedWindow`] (this rank included), completed together
/// by one `MPI_Win_flush_all` ([`Batch::complete`], or the drop), so that operations on
/// several peers wait for them in parallel. `'b` is the lifetime of every origin buffer used:
/// they stay borrowed until the completion.
pub struct Batch<'w, 'b, T: Element = f32> {
    shared: &'w SharedWindow<T>,
    started: bool,
    _origin: PhantomData<&'b mut [T]>,
}

impl<'w, 'b, T: Element> Batch<'w, 'b, T> {
    fn rank(&mut self, what: &'static str, target: usize) -> Result<c_int, CommError> {
        let t = c_rank(what, target, self.shared.window.comm.size)?;
        self.started = true;
        Ok(t)
    }

    /// Adds `values` to `target`'s elements `offset..offset + values.len()` (element-wise
    /// atomic).
    pub fn accumulate_sum(
        &mut self,
        target: usize,
        offset: usize,
        values: &'b [T],
    ) -> Result<(), CommError> {
        let t = self.rank("Batch::accumulate_sum target", target)?;
        // SAFETY: values is borrowed until the batch completes ('b).
        unsafe { self.shared.window.start_accumulate_sum(t, offset, values) }
    }

    /// Writes `values` to `target`'s elements `offset..offset + values.len()`.
    pub fn put(&mut self, target: usize, offset: usize, values: &'b [T]) -> Result<(), CommError> {
        let t = self.rank("Batch::put target", target)?;
        // SAFETY: values is borrowed until the batch completes ('b).
        unsafe { self.shared.window.start_put(t, offset, values) }
    }

    /// Reads `target`'s elements `offset..offset + out.len()` into `out`, filled at the
    /// completion.
    pub fn get(&mut self, target: usize, offset: usize, out: &'b mut [T]) -> Result<(), CommError> {
        let t = self.rank("Batch::get target", target)?;
        // SAFETY: out is borrowed until the batch completes ('b).
        unsafe { self.shared.window.start_get(t, offset, out) }
    }

    /// Reads `target`'s elements `offset..offset + out.len()` into `out` atomically with
    /// respect to accumulates (`MPI_Get_accumulate` of zeros); filled at the completion.
    pub fn fetch(
        &mut self,
        target: usize,
        offset: usize,
        out: &'b mut [T],
    ) -> Result<(), CommError> {
        let t = self.rank("Batch::fetch target", target)?;
        // SAFETY: out is borrowed until the batch completes ('b); the zeros belong to the
        // shared window, which outlives the batch, and cover the whole window.
        unsafe {
            self.shared
                .window
                .start_fetch(t, offset, &self.shared.zeros, out)
        }
    }

    /// Completes every operation of the batch at the origin and the targets
    /// (`MPI_Win_flush_all`; nothing to do when none was started).
    pub fn complete(mut self) -> Result<(), CommError> {
        self.close()
    }

    fn close(&mut self) -> Result<(), CommError> {
        if !self.started {
            return Ok(());
        }
        self.started = false;
        // SAFETY: the window's lock_all epoch is open while the SharedWindow lives, which
        // this borrow guarantees.
        check("MPI_Win_flush_all", unsafe {
            ffi::MPI_Win_flush_all(self.shared.window.win)
        })
    }
}

impl<T: Element> Drop for Batch<'_, '_, T> {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            eprintln!("error: rank {}: {e}", self.shared.window.comm.rank);
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
/// docs). Free it like a [`Window`].
pub struct SharedWindow<T: Element = f32> {
    window: Window<T>,
    /// `len` zeros: the origin of [`Batch::fetch`] (an atomic read is an accumulate of 0).
    zeros: Vec<T>,
}

impl<T: Element> SharedWindow<T> {
    /// A batch of operations on any ranks, completed together (`MPI_Win_flush_all`).
    pub fn batch<'b>(&self) -> Batch<'_, 'b, T> {
        Batch {
            shared: self,
            started: false,
            _origin: PhantomData,
        }
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
