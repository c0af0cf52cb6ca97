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
//! While the pool's tasks run, OpenBLAS is held to one thread, so that a GEMM inside a task
//! does not start threads of its own on cores the pool already fills; outside them it keeps
//! `run.threads` (the LSTM's and the dense layer's GEMMs).
//!
//! Two ways to share work: [`run`] hands out fixed task indices (for passes that reduce into
//! a buffer per task, so that the sum's order depends on the thread count only), and
//! [`for_ranges`] hands out blocks of a range on demand (for passes whose parts write
//! disjoint outputs: a thread slowed by other work on the machine then takes fewer blocks).

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, OnceLock, TryLockError};
use std::time::{Duration, Instant};

use super::gemm::set_blas_threads;

/// A task: called with the task index, `0..threads`.
type Task<'a> = dyn Fn(usize) + Sync + 'a;

struct State {
    /// The closure of the current generation; valid until `Pool::pending` reaches 0.
    task: Option<*const Task<'static>>,
}

// SAFETY: the task pointer is only dereferenced while `run`, which borrows the closure, waits
// for every helper to finish it.
unsafe impl Send for State {}

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

/// Threads [`run`] uses: the first [`set_threads`] call's count (1 before it).
pub fn threads() -> usize {
    POOL.get().map_or(1, |p| p.helpers + 1)
}

/// Sets `run.threads`: the threads of the pool and those OpenBLAS uses for one GEMM outside
/// the pool's tasks (one per rank by default, so that ranks sharing a node do not
/// oversubscribe its cores).
pub fn set_threads(n: usize) {
    start(n);
    set_blas_threads(n);
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
            state: Mutex::new(State { task: None }),
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

/// A helper's loop: waits for a generation, runs the task with its index, reports.
fn helper(pool: &'static Pool, index: usize) {
    IN_TASK.with(|t| t.set(true));
    let mut seen = 0;
    loop {
        spin_until(
            || pool.generation.load(Ordering::Acquire) != seen,
            window(SPIN),
        );
        let task = {
            let mut s = pool.state.lock().unwrap_or_else(|e| e.into_inner());
            while pool.generation.load(Ordering::Acquire) == seen {
                s = pool.start.wait(s).unwrap_or_else(|e| e.into_inner());
            }
            seen = pool.generation.load(Ordering::Acquire);
            s.task.expect("a dispatched generation has a task")
        };
        // SAFETY: `run` keeps the closure alive until `pending` is 0, which it is not yet.
        unsafe { (*task)(index) };
        let _s = pool.state.lock().unwrap_or_else(|e| e.into_inner());
        if pool.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            pool.done.notify_one();
        }
    }
}

/// Runs `task(i)` for every `i` in `0..threads()`, `i = 0` on this thread, and returns when
/// all have returned. Called from inside a task, or while another thread's dispatch holds the
/// pool, it runs every index in turn on this thread (the same results, as each index does
/// the same work wherever it runs).
pub fn run(task: &Task<'_>) {
    let Some(pool) = POOL.get().filter(|p| p.helpers > 0) else {
        return task(0);
    };
    let inline = || (0..=pool.helpers).for_each(task);
    if IN_TASK.with(Cell::get) {
        return inline();
    }
    let _turn = match pool.dispatch.try_lock() {
        Ok(turn) => turn,
        Err(TryLockError::Poisoned(e)) => e.into_inner(),
        Err(TryLockError::WouldBlock) => return inline(),
    };
    set_blas_threads(1);
    {
        let mut s = pool.state.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY (of the later dereferences): we wait below until no helper holds it.
        let erased: *const Task<'static> = unsafe { std::mem::transmute(task as *const Task<'_>) };
        s.task = Some(erased);
        pool.pending.store(pool.helpers, Ordering::Release);
        pool.generation.fetch_add(1, Ordering::AcqRel);
        pool.start.notify_all();
    }
    IN_TASK.with(|t| t.set(true));
    task(0);
    IN_TASK.with(|t| t.set(false));
    spin_until(|| pool.pending.load(Ordering::Acquire) == 0, window(SPIN));
    let mut s = pool.state.lock().unwrap_or_else(|e| e.into_inner());
    while pool.pending.load(Ordering::Acquire) > 0 {
        s = pool.done.wait(s).unwrap_or_else(|e| e.into_inner());
    }
    s.task = None;
    drop(s);
    set_blas_threads(threads());
}

/// Whether this thread runs a task of a dispatch that the pool's helpers share (not one run
/// inline): tests that hold a task until another thread acts need the other thread there.
#[cfg(test)]
pub(super) fn dispatched() -> bool {
    IN_TASK.with(Cell::get)
}

/// The part `i` of `parts` gets of `0..len`: contiguous, sizes differing by at most one.
pub fn share(len: usize, i: usize, parts: usize) -> std::ops::Range<usize> {
    let parts = parts.max(1);
    (len * i / parts)..(len * (i + 1) / parts)
}

/// Calls `f` on disjoint blocks that cover `0..len`, on all [`threads()`] at once, each
/// thread taking the next block when done with one (one call on this thread with one
/// thread or fewer than two units). For passes whose blocks write disjoint outputs: which
/// thread takes a block changes nothing in the result.
pub fn for_ranges(len: usize, f: &(dyn Fn(std::ops::Range<usize>) + Sync)) {
    let n = threads();
    if n == 1 || len < 2 {
        return f(0..len);
    }
    let blocks = len.min(n * BLOCKS_PER_THREAD);
    let next = AtomicUsize::new(0);
    run(&|_| loop {
        let b = next.fetch_add(1, Ordering::Relaxed);
        if b >= blocks {
            break;
        }
        f(share(len, b, blocks));
    });
}

/// [`for_ranges`] over `len` values of an elementwise pass: on this thread alone below
/// [`MIN_PARALLEL_VALUES`].
pub fn for_values(len: usize, f: &(dyn Fn(std::ops::Range<usize>) + Sync)) {
    if len < MIN_PARALLEL_VALUES {
        return f(0..len);
    }
    for_ranges(len, f);
}

/// A mutable slice that pool tasks write in disjoint parts.
pub struct Shared<'a> {
    ptr: *mut f32,
    len: usize,
    _borrow: std::marker::PhantomData<&'a mut [f32]>,
}

// SAFETY: tasks only reach the slice through `part`, whose callers promise disjoint ranges.
unsafe impl Sync for Shared<'_> {}

impl<'a> Shared<'a> {
    pub fn new(slice: &'a mut [f32]) -> Self {
        Shared {
            ptr: slice.as_mut_ptr(),
            len: slice.len(),
            _borrow: std::marker::PhantomData,
        }
    }

    /// Writes `v` at `i`.
    ///
    /// # Safety
    /// No other task reads or writes `i` meanwhile.
    pub unsafe fn set(&self, i: usize, v: f32) {
        assert!(i < self.len);
        // SAFETY: in bounds (checked); exclusive access is the caller's promise.
        unsafe { *self.ptr.add(i) = v }
    }

    /// The values in `range`, to read.
    ///
    /// # Safety
    /// No live result of [`Shared::part`] overlaps `range`.
    pub unsafe fn view(&self, range: std::ops::Range<usize>) -> &[f32] {
        assert!(range.start <= range.end && range.end <= self.len);
        // SAFETY: in bounds (checked); that nobody writes it is the caller's promise.
        unsafe { std::slice::from_raw_parts(self.ptr.add(range.start), range.len()) }
    }

    /// The values in `range`.
    ///
    /// # Safety
    /// No two live results of `part` may overlap.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn part(&self, range: std::ops::Range<usize>) -> &mut [f32] {
        assert!(range.start <= range.end && range.end <= self.len);
        // SAFETY: in bounds (checked); disjointness is the caller's promise.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(range.start), range.len()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let shared = Shared::new(&mut hits);
        for_ranges(len, &|r| {
            // SAFETY: the blocks are disjoint.
            let part = unsafe { shared.part(r) };
            let inner = std::sync::atomic::AtomicUsize::new(0);
            run(&|_| {
                inner.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
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
        let hits = std::sync::atomic::AtomicUsize::new(0);
        for _ in 0..100 {
            run(&|i| {
                hits.fetch_add(1 << (8 * i), std::sync::atomic::Ordering::SeqCst);
            });
        }
        let n = threads();
        let h = hits.into_inner();
        for i in 0..n {
            assert_eq!((h >> (8 * i)) & 0xff, 100, "task {i}");
        }
    }
}
