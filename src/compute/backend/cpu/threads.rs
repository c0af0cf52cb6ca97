//! The worker's threads: a persistent pool that runs one closure on `run.threads` threads at
//! once (the calling thread is one of them). Every pass of a CNN step runs on it: the
//! convolutions (Winograd's transforms and per-point GEMMs, im2col and its GEMMs per chunk of
//! images), batch norm per channel, pooling per plane, and the elementwise passes and the
//! optimizer's step over contiguous parts.
//!
//! The helper threads start once, in [`set_threads`], and wait for work; a [`run`] hands
//! them a borrowed closure and waits until all have returned, so a dispatch allocates
//! nothing (the step's no-allocation rule holds). Waiting, a thread first polls for a while,
//! yielding its core at each poll ([`spin_until`]), and only then sleeps on a condition
//! variable: a step's dispatches come microseconds apart, and waking a sleeping thread
//! takes longer than that, while the yield leaves the core to any other thread that wants
//! it (ranks or pools sharing the cores lose nothing to the polling).
//!
//! OpenBLAS always runs on one thread (gemm.rs): a product outside the pool's tasks (the
//! LSTM's, the dense layers') is shared by the pool in blocks of rows instead.
//!
//! Ways to share work, all safe to call: [`run`] hands out fixed task indices (for passes
//! that reduce into a buffer per task, so that the sum's order depends on the thread count
//! only); [`for_ranges`] hands out blocks of a range on demand (a thread slowed by other work
//! on the machine then takes fewer blocks), for passes whose blocks write values of their
//! own, so that which thread takes a block changes nothing; [`for_parts`], [`for_rows`], [`for_values`] and
//! the slot variants ([`for_parts_in_slots`], [`for_shares_in_slots`]) do the same and hand
//! each block its own parts of the buffers it writes, cut by the pool from buffers given as
//! [`Units`], so no two tasks can reach the same value. The Winograd passes, whose stages
//! write parts in a layout of their own and then read back what an earlier stage wrote, claim
//! their parts of a [`Disjoint`] buffer at run time instead, where a claim that overlaps a
//! live one panics.
//!
//! # Soundness
//!
//! The crate's thread-sharing `unsafe` is all here, in three places:
//! - [`erase`]: the closure of a [`run`] reaches the helper threads with its lifetime erased;
//!   `run` neither returns nor unwinds before every helper is done with it (a panicking task
//!   is caught, and raised again by `run` once all are done).
//! - [`Units::part`]: a task's [`Rows`] are made from the buffer's pointer; the schedulers
//!   call it only on unit ranges that no other live part shares.
//! - [`Disjoint`]: parts and views are made from the buffer's pointer after a claim that
//!   checks them against every live claim.

use std::any::Any;
use std::cell::Cell;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut, Range};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock, PoisonError, TryLockError};
use std::time::{Duration, Instant};

/// A task: called with the task index, `0..threads`.
type Task<'a> = dyn Fn(usize) + Sync + 'a;

/// A pass over a range of units and the range's parts of `N` buffers ([`for_parts`],
/// [`for_values`]).
type Parts<'a, T, const N: usize> = dyn Fn(Range<usize>, [&mut [T]; N]) + Sync + 'a;

/// [`Parts`] for buffers in rows ([`for_rows`]).
type RowParts<'a, T, const N: usize> = dyn Fn(Range<usize>, [Rows<'_, T>; N]) + Sync + 'a;

/// [`Parts`] with the task's slot first ([`for_parts_in_slots`]).
type SlotParts<'a, T, const N: usize> = dyn Fn(&mut [T], Range<usize>, [&mut [T]; N]) + Sync + 'a;

/// [`SlotParts`] with the task's index first ([`for_shares_in_slots`]).
type ShareParts<'a, T, const N: usize> =
    dyn Fn(usize, &mut [T], Range<usize>, [&mut [T]; N]) + Sync + 'a;

/// What a panicking task left, raised again on the thread that called [`run`].
type Panic = Box<dyn Any + Send + 'static>;

struct State {
    /// The closure of the current generation ([`erase`]); cleared when the generation ends.
    task: Option<*const Task<'static>>,
    /// The first panic of a helper's task in the current generation.
    panic: Option<Panic>,
}

// SAFETY: `State` is shared only through `Pool::state`'s lock, and the task pointer is
// dereferenced only as [`erase`] explains; the rest of it is `Send`.
unsafe impl Send for State {}

/// `task` as the helpers hold it: a raw pointer with its lifetime erased, since the helper
/// threads outlive any one dispatch.
fn erase(task: &Task<'_>) -> *const Task<'static> {
    // SAFETY (the pool's one lifetime erasure; the cast changes only the trait object's
    // lifetime bound): the pointer is stored only in `State::task`, for the generation that
    // [`run`] publishes, and a helper dereferences it only between taking it for that
    // generation and giving back its share of `pending`, which it does after the call has
    // returned or unwound (helpers run tasks under `catch_unwind`). `run` borrows `task` for
    // its whole call and neither returns nor unwinds before `pending` is 0: it runs its own
    // task under `catch_unwind` too, then waits unconditionally ([`Pool::finish`]), then clears
    // `State::task`. `Pool::dispatch`, held for the whole dispatch, keeps another thread's
    // `run` from replacing the task meanwhile. So every call through the pointer happens
    // while the closure is alive and borrowed shared, which its `Sync` bound allows.
    unsafe { std::mem::transmute::<*const Task<'_>, *const Task<'static>>(task) }
}

struct Pool {
    helpers: usize,
    /// Held for a whole dispatch, so that callers on different threads take turns.
    dispatch: Mutex<()>,
    state: Mutex<State>,
    start: Condvar,
    done: Condvar,
    /// Bumped for each dispatch; a helper runs each generation once. Changed only under
    /// `state`'s lock (the condition variables' predicate), read without it while polling
    /// ([`spin_until`]).
    generation: AtomicU64,
    /// Helpers that have not finished the current generation; as `generation`.
    pending: AtomicUsize,
}

impl Pool {
    fn lock_state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Hands `task` to the helpers as a new generation.
    fn publish(&self, task: &Task<'_>) {
        let mut s = self.lock_state();
        s.task = Some(erase(task));
        self.pending.store(self.helpers, Ordering::Release);
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.start.notify_all();
    }

    /// Waits for the generation after `seen` (polling first, then asleep) and returns its
    /// task, with `seen` moved on to it.
    fn next_task(&self, seen: &mut u64) -> *const Task<'static> {
        spin_until(
            || self.generation.load(Ordering::Acquire) != *seen,
            window(SPIN),
        );
        let mut s = self.lock_state();
        while self.generation.load(Ordering::Acquire) == *seen {
            s = self.start.wait(s).unwrap_or_else(PoisonError::into_inner);
        }
        *seen = self.generation.load(Ordering::Acquire);
        s.task.expect("a dispatched generation has a task")
    }

    /// A helper is done with the current generation (`panic`: what its task left, if it
    /// panicked).
    fn report(&self, panic: Option<Panic>) {
        let mut s = self.lock_state();
        if s.panic.is_none() {
            s.panic = panic;
        }
        if self.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.done.notify_one();
        }
    }

    /// Waits until every helper has finished the current generation (polling first, then
    /// asleep), then forgets its task; the first panic of a helper's task, if any.
    fn finish(&self) -> Option<Panic> {
        spin_until(|| self.pending.load(Ordering::Acquire) == 0, window(SPIN));
        let mut s = self.lock_state();
        while self.pending.load(Ordering::Acquire) > 0 {
            s = self.done.wait(s).unwrap_or_else(PoisonError::into_inner);
        }
        s.task = None;
        s.panic.take()
    }
}

/// How long a thread of the pool polls for the next dispatch (a helper) or for the helpers'
/// end (the caller) before it sleeps on the condition variable. A CNN step makes thousands
/// of dispatches a few microseconds apart; a sleeping thread's wake-up (a futex and, in a
/// virtual machine, an idle virtual CPU woken by the host) costs more than such a gap.
const SPIN: Duration = Duration::from_micros(100);

/// Polls `done` until it holds or `expired` does, yielding the core between polls (so a
/// thread that shares it runs meanwhile); whether `done` came true. `done` is polled before
/// `expired` each round, so a condition that already holds counts even past the window.
/// Callers pass [`window`]`(SPIN)` and check again under the lock: this only saves the
/// sleep. The window is a predicate rather than a deadline so that the tests can count polls
/// without depending on how fast the machine runs them.
fn spin_until(done: impl Fn() -> bool, mut expired: impl FnMut() -> bool) -> bool {
    loop {
        if done() {
            return true;
        }
        if expired() {
            return false;
        }
        std::thread::yield_now();
    }
}

/// A window that closes `length` after this call, on the wall clock: [`spin_until`]'s
/// `expired` in production.
fn window(length: Duration) -> impl FnMut() -> bool {
    let deadline = Instant::now() + length;
    move || Instant::now() >= deadline
}

static POOL: OnceLock<Pool> = OnceLock::new();

thread_local! {
    /// Whether this thread is running a pool task (a nested [`run`] then runs inline).
    static IN_TASK: Cell<bool> = const { Cell::new(false) };
}

/// Values from which an elementwise pass is shared ([`for_values`]): fewer take one thread
/// about as long as a dispatch costs.
pub const MIN_PARALLEL_VALUES: usize = 1 << 15;

/// Blocks per thread that [`for_ranges`] cuts a range into, so that threads that finish
/// early take more.
const BLOCKS_PER_THREAD: usize = 4;

/// How the pool hands out work. On demand is what runs; the two fixed schedules exist so that
/// tests can force opposite ones and show that a step's result does not depend on which
/// thread does what ([`force_schedule`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schedule {
    /// Each task takes the next unit when done with one; [`relay`](super::relay)'s piece `p`
    /// starts on thread `p`.
    OnDemand = 0,
    /// Every dispatch runs on the calling thread, task after task, as when another thread's
    /// dispatch holds the pool: the first task takes every unit handed out on demand.
    OneThread = 1,
    /// Units handed out on demand go round the tasks (task `i` of `T` takes units `i`,
    /// `i + T`, ...), and a relay's piece `p` starts on thread `p - 1` (the first piece on
    /// the last of the relay's threads).
    Alternate = 2,
}

static SCHEDULE: AtomicU8 = AtomicU8::new(Schedule::OnDemand as u8);

/// Makes every later dispatch of this process follow `schedule` (a test hook: only
/// [`Schedule::OnDemand`] balances the load).
pub fn force_schedule(schedule: Schedule) {
    SCHEDULE.store(schedule as u8, Ordering::Relaxed);
}

/// The schedule [`force_schedule`] set last ([`Schedule::OnDemand`] before).
pub fn schedule() -> Schedule {
    match SCHEDULE.load(Ordering::Relaxed) {
        1 => Schedule::OneThread,
        2 => Schedule::Alternate,
        _ => Schedule::OnDemand,
    }
}

/// Task `task`'s next unit of those handed out on demand through `next` to `tasks` tasks,
/// `taken` the units it took before: the next one free, or under [`Schedule::Alternate`]
/// its next turn. A unit past the last means there is no more work for this task.
fn claim(next: &AtomicUsize, task: usize, tasks: usize, taken: &mut usize) -> usize {
    if schedule() == Schedule::Alternate {
        *taken += 1;
        return task + (*taken - 1) * tasks;
    }
    next.fetch_add(1, Ordering::Relaxed)
}

/// Threads [`run`] uses: the first [`set_threads`] call's count (1 before it).
pub fn threads() -> usize {
    POOL.get().map_or(1, |p| p.helpers + 1)
}

/// Sets `run.threads`: the threads of the pool (one per rank by default, so that ranks
/// sharing a node do not oversubscribe its cores).
pub fn set_threads(n: usize) {
    start(n);
}

/// Starts the pool with `n` threads in all (the caller and `n - 1` helpers). The first call
/// decides; later calls with another count keep the pool as it is (one process runs one
/// `run.threads`).
fn start(n: usize) {
    let helpers = n.max(1) - 1;
    let mut fresh = false;
    let pool = POOL.get_or_init(|| {
        fresh = true;
        Pool {
            helpers,
            dispatch: Mutex::new(()),
            state: Mutex::new(State {
                task: None,
                panic: None,
            }),
            start: Condvar::new(),
            done: Condvar::new(),
            generation: AtomicU64::new(0),
            pending: AtomicUsize::new(0),
        }
    });
    if fresh {
        for i in 1..=pool.helpers {
            std::thread::Builder::new()
                .name(format!("gssp-pool-{i}"))
                .spawn(move || helper(pool, i))
                .expect("starting a pool thread");
        }
    }
}

/// A helper's loop: waits for a generation, runs the task with its index, reports. A task
/// that panics is caught here, so the helper lives on and `run` raises the panic.
fn helper(pool: &'static Pool, index: usize) {
    IN_TASK.with(|t| t.set(true));
    let mut seen = 0;
    loop {
        let task = pool.next_task(&mut seen);
        // SAFETY: as [`erase`] explains: this generation's `run` keeps the closure borrowed
        // until this helper reports, below, after the call.
        let outcome = catch_unwind(AssertUnwindSafe(|| unsafe { (*task)(index) }));
        pool.report(outcome.err());
    }
}

/// Runs `task(i)` for every `i` in `0..threads()`, `i = 0` on this thread, and returns when
/// all have returned. Called from inside a task, or while another thread's dispatch holds the
/// pool, it runs every index in turn on this thread (the same results, as each index does
/// the same work wherever it runs). Each index runs once per call, so a task may own what its
/// index names.
///
/// # Panics
/// If a task panics: once every task has returned or unwound, with the first panic (this
/// thread's before a helper's).
pub fn run(task: &Task<'_>) {
    let Some(pool) = POOL.get().filter(|p| p.helpers > 0) else {
        return task(0);
    };
    let inline = || (0..=pool.helpers).for_each(task);
    if IN_TASK.with(Cell::get) || schedule() == Schedule::OneThread {
        return inline();
    }
    let turn = match pool.dispatch.try_lock() {
        Ok(turn) => turn,
        Err(TryLockError::Poisoned(e)) => e.into_inner(),
        Err(TryLockError::WouldBlock) => return inline(),
    };
    pool.publish(task);
    IN_TASK.with(|t| t.set(true));
    let own = catch_unwind(AssertUnwindSafe(|| task(0)));
    IN_TASK.with(|t| t.set(false));
    let helpers = pool.finish();
    drop(turn);
    if let Some(panic) = own.err().or(helpers) {
        resume_unwind(panic);
    }
}

/// Whether this thread runs a task of a dispatch that the pool's helpers share (not one run
/// inline): tests that hold a task until another thread acts need the other thread there.
#[cfg(test)]
pub(super) fn dispatched() -> bool {
    IN_TASK.with(Cell::get)
}

/// The part `i` of `parts` gets of `0..len`: contiguous, sizes differing by at most one.
pub fn share(len: usize, i: usize, parts: usize) -> Range<usize> {
    let parts = parts.max(1);
    (len * i / parts)..(len * (i + 1) / parts)
}

/// Calls `f` on disjoint blocks that cover `0..len`, on all [`threads()`] at once, each
/// thread taking the next block when done with one (one call on this thread with one
/// thread or fewer than two units). Which thread takes a block changes nothing in the
/// result of a pass whose blocks write disjoint outputs, which [`for_parts`] and
/// [`for_rows`] hand out on top of it; `f` alone can only read what it borrows, or write
/// through what is `Sync` (an atomic counter), and never a sum whose order would then
/// follow the scheduler.
pub fn for_ranges(len: usize, f: &(dyn Fn(Range<usize>) + Sync)) {
    let n = threads();
    if n == 1 || len < 2 {
        return f(0..len);
    }
    let blocks = len.min(n * BLOCKS_PER_THREAD);
    let next = AtomicUsize::new(0);
    run(&|i| {
        let mut taken = 0;
        loop {
            let b = claim(&next, i, n, &mut taken);
            if b >= blocks {
                break;
            }
            f(share(len, b, blocks));
        }
    });
}

/// A buffer cut into units, for the pool's tasks to write at once: `rows` rows of equal
/// length (one, unless made by [`Units::rows`]), each row's first `row_len` values cut into
/// consecutive units of `unit` values (the last may be shorter; units past the row's end are
/// empty). A range of units is one span of each row, and disjoint ranges are disjoint spans:
/// the schedulers ([`for_parts`], [`for_rows`], ...) hand each task a range no other task
/// has, and the task reaches the buffer only through that range's [`Rows`].
pub struct Units<'a, T> {
    ptr: *mut T,
    rows: usize,
    stride: usize,
    row_len: usize,
    unit: usize,
    _borrow: PhantomData<&'a mut [T]>,
}

// SAFETY: shared, a `Units` only makes parts ([`Units::part`]), on unit ranges that no other
// live part shares, so every value is reached by one thread at a time, as through `&mut`.
unsafe impl<T: Send> Sync for Units<'_, T> {}

impl<'a, T> Units<'a, T> {
    /// `buf` as one row cut into units of `unit` values.
    pub fn new(buf: &'a mut [T], unit: usize) -> Self {
        let len = buf.len();
        Self::rows(buf, 1, len, unit)
    }

    /// `buf` as `rows` rows of `buf.len() / rows` values, the first `row_len` of each cut into
    /// units of `unit` values: unit `u` is then a span of every row (a channel of each image
    /// of an NCHW tensor, a block of each point of a point-major buffer).
    ///
    /// # Panics
    /// If `rows` does not divide `buf.len()`, or `row_len` is longer than a row.
    pub fn rows(buf: &'a mut [T], rows: usize, row_len: usize, unit: usize) -> Self {
        let len = buf.len();
        let stride = len.checked_div(rows).unwrap_or(0);
        assert!(
            stride * rows == len && (rows == 0 || row_len <= stride),
            "{len} values are not {rows} rows of at least {row_len}"
        );
        Units {
            ptr: buf.as_mut_ptr(),
            rows,
            stride,
            row_len: if rows == 0 { 0 } else { row_len },
            unit,
            _borrow: PhantomData,
        }
    }

    /// Units in a row (the last may be shorter than the others).
    pub fn count(&self) -> usize {
        self.row_len.checked_div(self.unit).map_or(0, |whole| {
            whole + usize::from(whole * self.unit < self.row_len)
        })
    }

    /// The values of units `range`: one span of each row.
    ///
    /// # Safety
    /// No other live part of this `Units` has a unit in `range`.
    unsafe fn part(&self, range: Range<usize>) -> Rows<'_, T> {
        let at = |u: usize| u.saturating_mul(self.unit).min(self.row_len);
        let (start, end) = (at(range.start), at(range.end.max(range.start)));
        // SAFETY: `start <= end <= row_len <= stride`, so each row's span lies in its row
        // (row r at `r * stride`, r < rows, `rows * stride` the buffer's length) and the rows'
        // spans do not overlap; units outside `range` are outside these spans, and the
        // caller promises no other live part has a unit inside it.
        unsafe { Rows::new(self.ptr.add(start), self.rows, self.stride, end - start) }
    }
}

/// A task's part of a buffer: `rows` spans of `len` values, `stride` apart, that nothing
/// else reaches while the part lives. Its rows are lent out one at a time ([`Rows::row`]) or
/// all at once ([`Rows::each`]), always borrowed from the part.
pub struct Rows<'s, T> {
    ptr: *mut T,
    rows: usize,
    stride: usize,
    len: usize,
    _borrow: PhantomData<&'s mut [T]>,
}

impl<'s, T> Rows<'s, T> {
    /// # Safety
    /// For `'s`, the spans `ptr + r * stride .. + len` (`r < rows`) lie in one allocation, do
    /// not overlap one another, and nothing else reads or writes them.
    unsafe fn new(ptr: *mut T, rows: usize, stride: usize, len: usize) -> Self {
        Rows {
            ptr,
            rows,
            stride,
            len,
            _borrow: PhantomData,
        }
    }

    /// Row `r`'s span.
    pub fn row(&mut self, r: usize) -> &mut [T] {
        assert!(r < self.rows, "row {r} of {}", self.rows);
        // SAFETY: `new`'s contract, for as long as `self` is borrowed.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(r * self.stride), self.len) }
    }

    /// Every row's span at once.
    ///
    /// # Panics
    /// If the part has other than `R` rows.
    pub fn each<const R: usize>(&mut self) -> [&mut [T]; R] {
        assert_eq!(R, self.rows, "{} rows, not {R}", self.rows);
        // SAFETY: as `row`; the rows do not overlap one another (`new`'s contract).
        std::array::from_fn(|r| unsafe {
            std::slice::from_raw_parts_mut(self.ptr.add(r * self.stride), self.len)
        })
    }

    /// The one row, for the part's whole lifetime.
    fn into_slice(self) -> &'s mut [T] {
        assert_eq!(self.rows, 1, "a one-row part");
        // SAFETY: `new`'s contract; the part is consumed, so nothing else lends this row.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

/// Panics unless every buffer of `cuts` has one row.
fn assert_one_row<T>(cuts: &[Units<'_, T>]) {
    assert!(
        cuts.iter().all(|c| c.rows == 1),
        "a pass over slices takes one-row buffers"
    );
}

/// Calls `f(range, parts)` on disjoint ranges of units that cover `0..units`, taken on demand
/// as in [`for_ranges`], with `parts` the range's span of each buffer of `cuts` (one row
/// each).
///
/// # Panics
/// If a buffer of `cuts` has other than one row.
pub fn for_parts<T: Send, const N: usize>(
    units: usize,
    cuts: [Units<'_, T>; N],
    f: &Parts<'_, T, N>,
) {
    assert_one_row(&cuts);
    for_rows(units, cuts, &|r, parts| f(r, parts.map(Rows::into_slice)));
}

/// [`for_parts`] for buffers of several rows: `parts` holds the range's [`Rows`] of each
/// buffer of `cuts`.
pub fn for_rows<T: Send, const N: usize>(
    units: usize,
    cuts: [Units<'_, T>; N],
    f: &RowParts<'_, T, N>,
) {
    for_ranges(units, &|r| {
        // SAFETY: `for_ranges` hands out disjoint ranges, each once, and `cuts` is this
        // call's alone.
        let parts = cuts.each_ref().map(|c| unsafe { c.part(r.clone()) });
        f(r, parts)
    });
}

/// [`for_parts`] over buffers of equal length, value by value (an elementwise pass), on this
/// thread alone below [`MIN_PARALLEL_VALUES`] values.
///
/// # Panics
/// If the buffers differ in length.
pub fn for_values<T: Send, const N: usize>(bufs: [&mut [T]; N], f: &Parts<'_, T, N>) {
    let len = bufs.first().map_or(0, |b| b.len());
    assert!(
        bufs.iter().all(|b| b.len() == len),
        "an elementwise pass over buffers of different lengths"
    );
    if len < MIN_PARALLEL_VALUES {
        return f(0..len, bufs);
    }
    for_parts(len, bufs.map(|b| Units::new(b, 1)), f);
}

/// Tasks that get a slot of `slots`: one a unit, no more than the pool's threads.
fn slot_tasks<T>(slots: &Units<'_, T>, units: usize) -> usize {
    let tasks = slots.count().min(threads());
    assert!(tasks > 0 || units == 0, "work for the pool without a slot");
    tasks
}

/// Calls `f(slot, range, parts)` on every unit of `0..units`, one unit a call, taken on
/// demand; each task with a slot (a unit of `slots`: the first `slots.count()` tasks) works
/// in its own slot, `parts` the unit's span of each buffer of `cuts` (one row each). Which
/// units a slot sees follows the scheduler: the slot is scratch, each unit's result goes to
/// its own parts (a sum over units belongs in [`for_shares_in_slots`]).
///
/// # Panics
/// If a buffer has other than one row, or there is work and `slots` has no unit.
pub fn for_parts_in_slots<T: Send, const N: usize>(
    units: usize,
    slots: Units<'_, T>,
    cuts: [Units<'_, T>; N],
    f: &SlotParts<'_, T, N>,
) {
    assert_one_row(&cuts);
    assert_one_row(std::slice::from_ref(&slots));
    let tasks = slot_tasks(&slots, units);
    let next = AtomicUsize::new(0);
    run(&|i| {
        if i >= tasks {
            return;
        }
        // SAFETY: `run` calls each task index once, so slot i is this task's alone.
        let slot = unsafe { slots.part(i..i + 1) }.into_slice();
        let mut taken = 0;
        loop {
            let u = claim(&next, i, tasks, &mut taken);
            if u >= units {
                break;
            }
            // SAFETY: `claim` hands out each unit once.
            let parts = cuts
                .each_ref()
                .map(|c| unsafe { c.part(u..u + 1) }.into_slice());
            f(&mut *slot, u..u + 1, parts);
        }
    });
}

/// Calls `f(i, slot, range, parts)` once for each task `i` with a slot (as in
/// [`for_parts_in_slots`]), `range` its fixed share of `0..units` ([`share`]) and `parts`
/// that range's span of each buffer of `cuts`: for passes that sum per task and then add
/// the tasks' sums in task order, so that the result depends on the thread count only.
///
/// # Panics
/// As [`for_parts_in_slots`].
pub fn for_shares_in_slots<T: Send, const N: usize>(
    units: usize,
    slots: Units<'_, T>,
    cuts: [Units<'_, T>; N],
    f: &ShareParts<'_, T, N>,
) {
    assert_one_row(&cuts);
    assert_one_row(std::slice::from_ref(&slots));
    let tasks = slot_tasks(&slots, units);
    run(&|i| {
        if i >= tasks {
            return;
        }
        let range = share(units, i, tasks);
        // SAFETY: `run` calls each task index once, so slot i and share i (the shares of
        // distinct tasks are disjoint) are this task's alone.
        let (slot, parts) = unsafe {
            let parts = cuts.each_ref().map(|c| c.part(range.clone()).into_slice());
            (slots.part(i..i + 1).into_slice(), parts)
        };
        f(i, slot, range, parts);
    });
}

/// Claims one [`Disjoint`] buffer holds at most at once: the Winograd passes hold two a
/// thread (a view and a part), so 64 threads fit.
const MAX_HELD: usize = 128;

/// A buffer whose parts the pool's tasks claim at run time, for passes whose layout the pool
/// cannot cut for them (the Winograd passes: a stage's units write spans of a piece's
/// transformed tiles, and the next stage reads what the last one wrote). A part claimed to
/// write ([`Disjoint::part`], [`Disjoint::rows`]) may not overlap any live claim, and a view
/// claimed to read ([`Disjoint::view`]) may not overlap a live part; a claim that would
/// panics. A claim ends when its part or view drops. Claims are meant to be coarse (a unit's
/// whole output, not each plane's): each takes a lock and a look at the live ones.
pub struct Disjoint<'a, T> {
    ptr: *mut T,
    len: usize,
    claims: Mutex<Claims>,
    _borrow: PhantomData<&'a mut [T]>,
}

// SAFETY: shared, a `Disjoint` reaches its values only through parts (`&mut`, hence
// `T: Send`) and views (`&`, hence `T: Sync`) whose claims `Disjoint::claim` has checked
// against every live claim: a part overlaps no other claim while it lives.
unsafe impl<T: Send + Sync> Sync for Disjoint<'_, T> {}

/// `rows` runs of `len` values, the first at `start`, `stride` apart.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Span {
    start: usize,
    len: usize,
    rows: usize,
    stride: usize,
}

impl Span {
    fn range(range: &Range<usize>) -> Self {
        Span {
            start: range.start,
            len: range.len(),
            rows: 1,
            stride: range.len(),
        }
    }

    fn is_empty(&self) -> bool {
        self.rows == 0 || self.len == 0
    }

    /// Row `r`'s values.
    fn row(&self, r: usize) -> Range<usize> {
        let at = self.start + r * self.stride;
        at..at + self.len
    }

    /// Where the span's last row ends, if its rows keep apart and that fits a `usize`.
    fn end(&self) -> Option<usize> {
        if self.rows > 1 && self.len > self.stride {
            return None;
        }
        let last = self.rows.saturating_sub(1).checked_mul(self.stride)?;
        self.start.checked_add(last)?.checked_add(self.len)
    }

    /// Whether a row of the span meets `x`. The rows end in order, so of those that start
    /// before `x` ends only the last can reach into it.
    fn meets(&self, x: &Range<usize>) -> bool {
        if self.is_empty() || x.is_empty() || x.end <= self.start {
            return false;
        }
        let last = match self.rows {
            1 => 0,
            rows => ((x.end - 1 - self.start) / self.stride).min(rows - 1),
        };
        self.row(last).end > x.start
    }

    /// Whether the two spans share a value: each row of the one with fewer rows against
    /// the other.
    fn overlaps(&self, other: &Span) -> bool {
        let (few, many) = if self.rows <= other.rows {
            (self, other)
        } else {
            (other, self)
        };
        !few.is_empty() && (0..few.rows).any(|r| many.meets(&few.row(r)))
    }
}

#[derive(Clone, Copy, Debug)]
struct Claim {
    span: Span,
    write: bool,
}

/// The live claims of a [`Disjoint`], in slots; `high` is one past the last slot in use.
struct Claims {
    held: [Option<Claim>; MAX_HELD],
    high: usize,
}

impl Claims {
    /// A live claim that `claim` may not be held beside: two that overlap where either writes.
    fn conflict(&self, claim: &Claim) -> Option<Claim> {
        self.held[..self.high]
            .iter()
            .flatten()
            .find(|c| (claim.write || c.write) && c.span.overlaps(&claim.span))
            .copied()
    }

    /// Holds `claim` in a free slot; which.
    fn insert(&mut self, claim: Claim) -> Option<usize> {
        let slot = self.held.iter().position(Option::is_none)?;
        self.held[slot] = Some(claim);
        self.high = self.high.max(slot + 1);
        Some(slot)
    }

    fn remove(&mut self, slot: usize) {
        self.held[slot] = None;
        while self.high > 0 && self.held[self.high - 1].is_none() {
            self.high -= 1;
        }
    }
}

/// A live claim on a [`Disjoint`]; it ends when this drops.
struct Held<'d> {
    claims: &'d Mutex<Claims>,
    slot: usize,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let mut claims = self.claims.lock().unwrap_or_else(PoisonError::into_inner);
        claims.remove(self.slot);
    }
}

impl<'a, T> Disjoint<'a, T> {
    /// `buf`, with no part claimed yet.
    pub fn new(buf: &'a mut [T]) -> Self {
        Disjoint {
            ptr: buf.as_mut_ptr(),
            len: buf.len(),
            claims: Mutex::new(Claims {
                held: [None; MAX_HELD],
                high: 0,
            }),
            _borrow: PhantomData,
        }
    }

    /// Values `range`, to write.
    ///
    /// # Panics
    /// If `range` is out of bounds or meets a live claim.
    pub fn part(&self, range: Range<usize>) -> Part<'_, T> {
        let span = Span::range(&range);
        let held = self.claim(span, true);
        // SAFETY: `claim` checked that the span lies in the buffer and meets no live claim,
        // and keeps others off it until `held` drops; the slice lives in the `Part` beside
        // `held` and is only lent out from it.
        let slice = unsafe { std::slice::from_raw_parts_mut(self.ptr.add(span.start), span.len) };
        Part { slice, _held: held }
    }

    /// `rows` runs of `len` values, `stride` apart from `start`, to write.
    ///
    /// # Panics
    /// If the runs overlap one another, leave the buffer or meet a live claim.
    pub fn rows(&self, start: usize, len: usize, rows: usize, stride: usize) -> PartRows<'_, T> {
        let span = Span {
            start,
            len,
            rows,
            stride,
        };
        let held = self.claim(span, true);
        // SAFETY: as in `part`; `claim` also checked that the rows keep apart.
        let rows = unsafe { Rows::new(self.ptr.add(start), rows, stride, len) };
        PartRows { rows, _held: held }
    }

    /// Values `range`, to read.
    ///
    /// # Panics
    /// If `range` is out of bounds or meets a live part.
    pub fn view(&self, range: Range<usize>) -> View<'_, T> {
        let span = Span::range(&range);
        let held = self.claim(span, false);
        // SAFETY: as in `part`, for reading: no part meets the span while `held` lives.
        let slice = unsafe { std::slice::from_raw_parts(self.ptr.add(span.start), span.len) };
        View { slice, _held: held }
    }

    /// Checks `span` against the buffer and the live claims and holds it.
    fn claim(&self, span: Span, write: bool) -> Held<'_> {
        let fits = span.end().is_some_and(|end| end <= self.len) && span.start <= self.len;
        assert!(fits, "{span:?} does not fit {} values", self.len);
        let claim = Claim { span, write };
        let mut claims = self.claims.lock().unwrap_or_else(PoisonError::into_inner);
        let conflict = claims.conflict(&claim);
        let slot = conflict.is_none().then(|| claims.insert(claim)).flatten();
        drop(claims);
        if let Some(other) = conflict {
            panic!("{claim:?} overlaps a live {other:?}");
        }
        let slot = slot.unwrap_or_else(|| panic!("more than {MAX_HELD} claims held at once"));
        Held {
            claims: &self.claims,
            slot,
        }
    }
}

/// A claimed part of a [`Disjoint`], to write (as a slice).
pub struct Part<'d, T> {
    slice: &'d mut [T],
    _held: Held<'d>,
}

impl<T> Deref for Part<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        self.slice
    }
}

impl<T> DerefMut for Part<'_, T> {
    fn deref_mut(&mut self) -> &mut [T] {
        self.slice
    }
}

/// A claimed part of a [`Disjoint`] in rows, to write (as [`Rows::each`] lends them).
pub struct PartRows<'d, T> {
    rows: Rows<'d, T>,
    _held: Held<'d>,
}

impl<T> PartRows<'_, T> {
    /// Every row at once, as [`Rows::each`].
    pub fn each<const R: usize>(&mut self) -> [&mut [T]; R] {
        self.rows.each()
    }
}

/// A claimed view of a [`Disjoint`], to read.
pub struct View<'d, T> {
    slice: &'d [T],
    _held: Held<'d>,
}

impl<T> Deref for View<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        self.slice
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    /// Polls counted against a window that closes on the test's say, not the wall clock's:
    /// the counts hold however slowly the machine runs them.
    #[test]
    fn polling_returns_when_the_condition_holds_and_gives_up_when_the_window_closes() {
        // Polled until the condition held, never past it.
        let polls = AtomicUsize::new(0);
        assert!(spin_until(
            || polls.fetch_add(1, Ordering::Relaxed) == 3,
            || false
        ));
        assert_eq!(polls.into_inner(), 4, "polled until the condition held");
        // Given up at the first check that finds the window closed, after one poll per check.
        let (polls, checks) = (AtomicUsize::new(0), Cell::new(0));
        let closes_at_third_check = || {
            checks.set(checks.get() + 1);
            checks.get() == 3
        };
        assert!(!spin_until(
            || {
                polls.fetch_add(1, Ordering::Relaxed);
                false
            },
            closes_at_third_check
        ));
        assert_eq!((polls.into_inner(), checks.get()), (3, 3));
        // A condition that holds counts even when the window has closed.
        assert!(spin_until(|| true, || true));
    }

    /// The production window: closed at once when empty, open at first when long (an hour:
    /// no machine is that slow between two lines).
    #[test]
    fn a_wall_clock_window_closes_after_its_length() {
        assert!(window(Duration::ZERO)());
        assert!(!window(Duration::from_secs(3600))());
        assert!(!spin_until(|| false, window(Duration::ZERO)));
    }

    #[test]
    fn shares_cover_the_range_once() {
        for (len, parts) in [(10, 3), (2, 4), (0, 2), (7, 1)] {
            let covered: Vec<usize> = (0..parts).flat_map(|i| share(len, i, parts)).collect();
            assert_eq!(covered, (0..len).collect::<Vec<_>>());
        }
    }

    #[test]
    fn blocks_cover_the_range_once_and_nested_dispatches_run_inline() {
        set_threads(2);
        let len = 1000;
        let mut hits = vec![0.0f32; len];
        for_parts(len, [Units::new(&mut hits, 1)], &|_, [part]| {
            let inner = AtomicUsize::new(0);
            run(&|_| {
                inner.fetch_add(1, Ordering::SeqCst);
            });
            assert_eq!(
                inner.into_inner(),
                threads(),
                "a nested run runs every index"
            );
            part.iter_mut().for_each(|h| *h += 1.0);
        });
        assert!(hits.iter().all(|&h| h == 1.0));
    }

    #[test]
    fn every_task_index_runs_once() {
        set_threads(2);
        let hits = AtomicUsize::new(0);
        for _ in 0..100 {
            run(&|i| {
                hits.fetch_add(1 << (8 * i), Ordering::SeqCst);
            });
        }
        let n = threads();
        let h = hits.into_inner();
        for i in 0..n {
            assert_eq!((h >> (8 * i)) & 0xff, 100, "task {i}");
        }
    }

    /// A panic in a helper's task reaches the caller of `run`, and the pool works on.
    #[test]
    fn a_helper_s_panic_reaches_the_caller_and_the_pool_survives() {
        set_threads(2);
        let outcome = catch_unwind(|| {
            run(&|i| {
                if i == 1 {
                    panic!("task 1 fails");
                }
            })
        });
        let message = outcome.expect_err("the panic came through");
        assert_eq!(message.downcast_ref::<&str>(), Some(&"task 1 fails"));
        let hits = AtomicUsize::new(0);
        run(&|_| {
            hits.fetch_add(1, Ordering::SeqCst);
        });
        assert_eq!(hits.into_inner(), threads());
    }

    /// When the caller's own task panics, `run` still waits for the helpers' before it
    /// unwinds (they borrow what the caller's frame holds). The helper's task is held until
    /// the caller's has panicked and then yields its core a while, so that a `run` that did
    /// not wait would return first. A dispatch made while another test holds the pool runs
    /// inline, where the order is fixed: such a try is made again, until one runs as meant
    /// (under a hang guard).
    #[test]
    fn a_caller_s_panic_waits_for_the_helpers() {
        set_threads(2);
        let guard = Instant::now();
        while guard.elapsed() < Duration::from_secs(60) {
            let (panicking, helper_done, shared) = (
                AtomicBool::new(false),
                AtomicBool::new(false),
                AtomicBool::new(false),
            );
            let outcome = catch_unwind(AssertUnwindSafe(|| {
                run(&|i| {
                    if i == 0 {
                        shared.store(dispatched(), Ordering::SeqCst);
                        panicking.store(true, Ordering::SeqCst);
                        panic!("task 0 fails");
                    }
                    let held = Instant::now();
                    while !panicking.load(Ordering::SeqCst)
                        && held.elapsed() < Duration::from_secs(60)
                    {
                        std::thread::yield_now();
                    }
                    (0..1000).for_each(|_| std::thread::yield_now());
                    helper_done.store(true, Ordering::SeqCst);
                })
            }));
            assert!(outcome.is_err(), "the caller's panic came through");
            if !shared.load(Ordering::SeqCst) {
                continue;
            }
            assert!(
                helper_done.load(Ordering::SeqCst),
                "run unwound while a helper still ran"
            );
            return;
        }
        panic!("no dispatch ran on two threads within the hang guard");
    }

    /// Every unit of a buffer in rows is reached once, through its own span of each row, and
    /// the values past a row's `row_len` not at all.
    #[test]
    fn parts_of_rows_cover_each_unit_once() {
        set_threads(2);
        let (rows, row_len, stride, unit) = (3, 50, 54, 4);
        let mut buf = vec![0u32; rows * stride];
        let units = Units::rows(&mut buf, rows, row_len, unit);
        assert_eq!(units.count(), 13);
        for_rows(13, [units], &|range, [mut part]| {
            for r in 0..rows {
                let row = part.row(r);
                let want = (range.end * unit).min(row_len) - range.start * unit;
                assert_eq!(row.len(), want);
                row.iter_mut().for_each(|v| *v += 1);
            }
        });
        for (i, &v) in buf.iter().enumerate() {
            assert_eq!(v, u32::from(i % stride < row_len), "value {i}");
        }
    }

    /// Each unit runs once, in the slot of the task that took it; with fixed shares, task i
    /// takes share i.
    #[test]
    fn slots_are_their_tasks_alone_and_units_run_once() {
        set_threads(2);
        let (units, slot_len) = (37, 3);
        let tasks = threads();
        let mut slots = vec![0u32; tasks * slot_len];
        let mut out = vec![0u32; units];
        for_parts_in_slots(
            units,
            Units::new(&mut slots, slot_len),
            [Units::new(&mut out, 1)],
            &|slot, _, [o]| {
                slot[0] += 1;
                o[0] += 1;
            },
        );
        assert!(out.iter().all(|&v| v == 1));
        assert_eq!(slots.iter().step_by(slot_len).sum::<u32>(), units as u32);
        let mut owner = vec![u32::MAX; units];
        for_shares_in_slots(
            units,
            Units::new(&mut slots, slot_len),
            [Units::new(&mut owner, 1)],
            &|i, slot, range, [o]| {
                assert_eq!(range, share(units, i, tasks));
                slot.fill(i as u32);
                o.fill(i as u32);
            },
        );
        for (u, &o) in owner.iter().enumerate() {
            assert!(share(units, o as usize, tasks).contains(&u), "unit {u}");
        }
    }

    #[test]
    fn an_elementwise_pass_splits_above_its_threshold_only() {
        set_threads(2);
        for len in [10, 3 * MIN_PARALLEL_VALUES + 1] {
            let (mut a, mut b) = (vec![1.0f32; len], vec![0.0f32; len]);
            let calls = AtomicUsize::new(0);
            for_values([&mut a, &mut b], &|range, [a, b]| {
                calls.fetch_add(1, Ordering::SeqCst);
                for ((a, b), i) in a.iter_mut().zip(b).zip(range) {
                    *b = *a + i as f32;
                    *a = 0.0;
                }
            });
            assert!(a.iter().all(|&v| v == 0.0));
            assert!(b.iter().enumerate().all(|(i, &v)| v == 1.0 + i as f32));
            let split = calls.into_inner() > 1;
            assert_eq!(split, len >= MIN_PARALLEL_VALUES && threads() > 1);
        }
    }

    /// The overlap test against the sets of values, on every small span pair.
    #[test]
    fn spans_overlap_exactly_when_they_share_a_value() {
        let values = |s: &Span| -> std::collections::BTreeSet<usize> {
            (0..s.rows).flat_map(|r| s.row(r)).collect()
        };
        let mut spans = Vec::new();
        for start in 0..6 {
            for len in 0..4 {
                for rows in 0..4 {
                    for stride in len.max(1)..6 {
                        spans.push(Span {
                            start,
                            len,
                            rows,
                            stride,
                        });
                    }
                }
            }
        }
        for a in &spans {
            for b in &spans {
                let shared = !values(a).is_disjoint(&values(b));
                assert_eq!(a.overlaps(b), shared, "{a:?} {b:?}");
            }
        }
    }

    /// Parts of a `Disjoint` in rows interleave, views share, and a claim ends with its part.
    #[test]
    fn disjoint_claims_that_keep_apart_are_held_together() {
        let mut buf = vec![0.0f32; 40];
        {
            let d = Disjoint::new(&mut buf);
            {
                // Two interleaved parts of 4 rows, 10 apart.
                let mut a = d.rows(0, 3, 4, 10);
                let mut b = d.rows(3, 7, 4, 10);
                a.each::<4>().iter_mut().for_each(|r| r.fill(1.0));
                b.each::<4>().iter_mut().for_each(|r| r.fill(2.0));
            }
            let (v, w) = (d.view(0..20), d.view(10..40));
            assert_eq!((v[0], v[3], w[0]), (1.0, 2.0, 1.0));
            drop((v, w));
            d.part(0..40).fill(3.0);
        }
        assert!(buf.iter().all(|&v| v == 3.0));
    }

    #[test]
    #[should_panic(expected = "overlaps a live")]
    fn overlapping_parts_of_a_disjoint_panic() {
        let mut buf = vec![0.0f32; 40];
        let d = Disjoint::new(&mut buf);
        let _a = d.rows(0, 3, 4, 10);
        let _b = d.part(32..33);
    }

    #[test]
    #[should_panic(expected = "overlaps a live")]
    fn a_view_of_a_live_part_panics() {
        let mut buf = vec![0.0f32; 40];
        let d = Disjoint::new(&mut buf);
        let _a = d.part(5..10);
        let _v = d.view(0..6);
    }

    #[test]
    #[should_panic(expected = "does not fit")]
    fn rows_that_overlap_one_another_panic() {
        let mut buf = vec![0.0f32; 40];
        let d = Disjoint::new(&mut buf);
        let _a = d.rows(0, 5, 2, 4);
    }
}
