//! The worker's threads: a persistent pool that runs one closure on `run.threads` threads at
//! once (the calling thread is one of them), for the passes of a step that OpenBLAS does not
//! thread (the Winograd transforms and per-point GEMMs, batch norm, elementwise passes).
//!
//! The helper threads start once, in [`set_threads`], and wait on a condition variable; a
//! [`run`] hands them a borrowed closure and waits until all have returned, so a dispatch
//! allocates nothing (the step's no-allocation rule holds). While the pool's tasks run,
//! OpenBLAS is held to one thread, so that a GEMM inside a task does not start threads of its
//! own on cores the pool already fills; outside them it keeps `run.threads`.

use std::sync::{Condvar, Mutex, OnceLock};

use super::gemm::set_blas_threads;

/// A task: called with the task index, `0..threads`.
type Task<'a> = dyn Fn(usize) + Sync + 'a;

struct State {
    /// Bumped for each dispatch; a helper runs each generation once.
    generation: u64,
    /// The closure of the current generation; valid until `pending` reaches 0.
    task: Option<*const Task<'static>>,
    /// Helpers that have not finished the current generation.
    pending: usize,
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
}

static POOL: OnceLock<Pool> = OnceLock::new();

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
            state: Mutex::new(State {
                generation: 0,
                task: None,
                pending: 0,
            }),
            start: Condvar::new(),
            done: Condvar::new(),
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
    let mut seen = 0;
    loop {
        let task = {
            let mut s = pool.state.lock().unwrap_or_else(|e| e.into_inner());
            while s.generation == seen {
                s = pool.start.wait(s).unwrap_or_else(|e| e.into_inner());
            }
            seen = s.generation;
            s.task.expect("a dispatched generation has a task")
        };
        // SAFETY: `run` keeps the closure alive until `pending` is 0, which it is not yet.
        unsafe { (*task)(index) };
        let mut s = pool.state.lock().unwrap_or_else(|e| e.into_inner());
        s.pending -= 1;
        if s.pending == 0 {
            pool.done.notify_one();
        }
    }
}

/// Runs `task(i)` for every `i` in `0..threads()`, `i = 0` on this thread, and returns when
/// all have returned. Callers on different threads take turns; a task must not call `run`.
pub fn run(task: &Task<'_>) {
    let Some(pool) = POOL.get().filter(|p| p.helpers > 0) else {
        return task(0);
    };
    let _turn = pool.dispatch.lock().unwrap_or_else(|e| e.into_inner());
    set_blas_threads(1);
    {
        let mut s = pool.state.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY (of the later dereferences): we wait below until no helper holds it.
        let erased: *const Task<'static> = unsafe { std::mem::transmute(task as *const Task<'_>) };
        s.task = Some(erased);
        s.pending = pool.helpers;
        s.generation += 1;
        pool.start.notify_all();
    }
    task(0);
    let mut s = pool.state.lock().unwrap_or_else(|e| e.into_inner());
    while s.pending > 0 {
        s = pool.done.wait(s).unwrap_or_else(|e| e.into_inner());
    }
    s.task = None;
    drop(s);
    set_blas_threads(threads());
}

/// The part `i` of `parts` gets of `0..len`: contiguous, sizes differing by at most one.
pub fn share(len: usize, i: usize, parts: usize) -> std::ops::Range<usize> {
    let parts = parts.max(1);
    (len * i / parts)..(len * (i + 1) / parts)
}

/// Calls `f` on [`threads()`] disjoint parts of `0..len` at once (one part, on this thread,
/// with one thread or fewer than two units).
pub fn for_ranges(len: usize, f: &(dyn Fn(std::ops::Range<usize>) + Sync)) {
    let n = threads();
    if n == 1 || len < 2 {
        return f(0..len);
    }
    run(&|i| f(share(len, i, n)));
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

    #[test]
    fn shares_cover_the_range_once() {
        for (len, parts) in [(10, 3), (2, 4), (0, 2), (7, 1)] {
            let covered: Vec<usize> = (0..parts).flat_map(|i| share(len, i, parts)).collect();
            assert_eq!(covered, (0..len).collect::<Vec<_>>());
        }
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
