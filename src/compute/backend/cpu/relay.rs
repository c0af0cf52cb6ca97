//! Pieces of work that pass through the same stages, one piece a thread, where a thread done
//! with its own stage helps the others finish theirs.
//!
//! A Winograd pass cuts each chunk of images into one piece a thread and takes each piece
//! through its stages (transform, GEMMs, inverse transform) on one core, so that each stage
//! reads what the one before wrote from that core's cache. Equal pieces still finish at
//! different times (the same images cost more or less to read depending on which core last
//! wrote them, and other work on the machine slows one core), and the pass would wait for
//! the slowest. So a stage is cut into units (blocks of planes, the points of a GEMM); the
//! piece's own thread claims them in order, and a thread whose own stage is claimed out
//! takes the units left in any other piece's open stage (one whose earlier stages are
//! complete) instead of waiting. A piece moves to its next stage only when every unit of
//! the current one is done, whoever did it. Which thread does a unit never changes what
//! it computes: units write disjoint outputs.
//!
//! Threads beyond the pieces' count only help, so one piece on several threads shares
//! each of its stages among them.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::threads::{run, schedule, Schedule};

/// The most pieces one [`relay`] takes.
pub const MAX_PIECES: usize = 32;

/// The most stages a piece passes through.
pub const MAX_STAGES: usize = 3;

/// Per piece and stage, the next unit to claim and the units done; and whether a thread's
/// part panicked (its unit will never be done, so the others stop waiting).
struct Progress {
    next: [[AtomicUsize; MAX_STAGES]; MAX_PIECES],
    done: [[AtomicUsize; MAX_STAGES]; MAX_PIECES],
    aborted: AtomicBool,
}

/// Sets `aborted` when the thread that holds it unwinds.
struct Watch<'a>(&'a AtomicBool);

impl Drop for Watch<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::Release);
        }
    }
}

/// Takes `pieces` pieces through `stages` stages: `units(p, s)` units of work in stage `s`
/// of piece `p`, each done by `work(p, s, u)`. Piece `p` starts on the pool's thread `p`;
/// every thread returns once every unit of every piece is done. Stage `s` of a piece starts
/// only after its stage `s - 1` is complete, and its units may run on any thread. A panic in
/// `work` stops every thread and reaches the caller (through [`run`]).
pub fn relay(
    pieces: usize,
    stages: usize,
    units: &(dyn Fn(usize, usize) -> usize + Sync),
    work: &(dyn Fn(usize, usize, usize) + Sync),
) {
    assert!(
        pieces <= MAX_PIECES,
        "{pieces} pieces (at most {MAX_PIECES})"
    );
    assert!(
        stages <= MAX_STAGES,
        "{stages} stages (at most {MAX_STAGES})"
    );
    let progress = Progress {
        next: std::array::from_fn(|_| std::array::from_fn(|_| AtomicUsize::new(0))),
        done: std::array::from_fn(|_| std::array::from_fn(|_| AtomicUsize::new(0))),
        aborted: AtomicBool::new(false),
    };
    let relay = Relay {
        pieces,
        stages,
        units,
        work,
        progress: &progress,
    };
    run(&|thread| relay.drive(thread));
}

struct Relay<'a> {
    pieces: usize,
    stages: usize,
    units: &'a (dyn Fn(usize, usize) -> usize + Sync),
    work: &'a (dyn Fn(usize, usize, usize) + Sync),
    progress: &'a Progress,
}

impl Relay<'_> {
    /// Thread `thread`'s part: its own piece stage by stage (helping the others while a
    /// stage of its own is finished elsewhere), then whatever is left.
    fn drive(&self, thread: usize) {
        let _watch = Watch(&self.progress.aborted);
        if thread < self.pieces {
            let own = match schedule() {
                Schedule::Alternate => (thread + 1) % self.pieces,
                _ => thread,
            };
            for stage in 0..self.stages {
                self.drain(own, stage);
                self.help_until(|| self.complete(own, stage));
                if self.aborted() {
                    return;
                }
            }
        }
        self.help_until(|| self.all_complete());
    }

    fn aborted(&self) -> bool {
        self.progress.aborted.load(Ordering::Acquire)
    }

    /// Helps the other pieces (or yields the core when none has a unit left to claim) until
    /// `done` holds, or another thread's part has panicked.
    fn help_until(&self, done: impl Fn() -> bool) {
        while !done() && !self.aborted() {
            if !self.help_once() {
                std::thread::yield_now();
            }
        }
    }

    /// Does units of stage `stage` of `piece` until none is left to claim.
    fn drain(&self, piece: usize, stage: usize) {
        let total = (self.units)(piece, stage);
        let (next, done) = (
            &self.progress.next[piece][stage],
            &self.progress.done[piece][stage],
        );
        loop {
            let unit = next.fetch_add(1, Ordering::Relaxed);
            if unit >= total {
                return;
            }
            (self.work)(piece, stage, unit);
            done.fetch_add(1, Ordering::Release);
        }
    }

    /// Drains the current stage of the first piece that has units left to claim; whether
    /// there was one.
    fn help_once(&self) -> bool {
        for piece in 0..self.pieces {
            let Some(stage) = self.current(piece) else {
                continue;
            };
            let claimed = self.progress.next[piece][stage].load(Ordering::Relaxed);
            if claimed < (self.units)(piece, stage) {
                self.drain(piece, stage);
                return true;
            }
        }
        false
    }

    /// The first stage of `piece` not yet complete (whose earlier stages are), if any.
    fn current(&self, piece: usize) -> Option<usize> {
        (0..self.stages).find(|&stage| !self.complete(piece, stage))
    }

    fn complete(&self, piece: usize, stage: usize) -> bool {
        self.progress.done[piece][stage].load(Ordering::Acquire) >= (self.units)(piece, stage)
    }

    fn all_complete(&self) -> bool {
        (0..self.pieces).all(|piece| self.current(piece).is_none())
    }
}

#[cfg(test)]
mod tests {
    use super::super::threads::{dispatched, set_threads};
    use super::*;
    use std::sync::atomic::AtomicU32;
    use std::sync::Mutex;
    use std::thread::ThreadId;

    /// Every unit runs once, and no unit of a stage runs before every unit of the stage
    /// before it in the same piece is done; a piece with no units in a stage passes it.
    #[test]
    fn every_unit_runs_once_after_its_piece_s_earlier_stages() {
        set_threads(2);
        for pieces in [1, 2, 3, 5] {
            let units = |p: usize, s: usize| if p == 1 && s == 1 { 0 } else { 3 + p + 2 * s };
            let runs: Vec<AtomicU32> = (0..pieces * MAX_STAGES * 16)
                .map(|_| AtomicU32::new(0))
                .collect();
            let at = |p: usize, s: usize, u: usize| (p * MAX_STAGES + s) * 16 + u;
            // Checked after the relay: a panic on a pool thread would leave the caller waiting.
            let early = AtomicU32::new(0);
            relay(pieces, 3, &units, &|p, s, u| {
                if s > 0 {
                    for before in 0..units(p, s - 1) {
                        if runs[at(p, s - 1, before)].load(Ordering::SeqCst) != 1 {
                            early.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                }
                runs[at(p, s, u)].fetch_add(1, Ordering::SeqCst);
            });
            assert_eq!(
                early.into_inner(),
                0,
                "units ran before their earlier stage's end"
            );
            for p in 0..pieces {
                for s in 0..3 {
                    for u in 0..16 {
                        let want = u32::from(u < units(p, s));
                        assert_eq!(
                            runs[at(p, s, u)].load(Ordering::SeqCst),
                            want,
                            "{p} {s} {u}"
                        );
                    }
                }
            }
        }
    }

    /// A unit that panics stops the relay: the others stop waiting for it, and the panic
    /// reaches the caller instead of a hang.
    #[test]
    fn a_panicking_unit_reaches_the_caller() {
        set_threads(2);
        for pieces in [1, 2] {
            let outcome = std::panic::catch_unwind(|| {
                relay(pieces, 3, &|_, _| 4, &|p, s, u| {
                    if (p, s, u) == (pieces - 1, 1, 2) {
                        panic!("unit fails");
                    }
                });
            });
            let panic = outcome.expect_err("the panic came through");
            assert_eq!(panic.downcast_ref::<&str>(), Some(&"unit fails"));
        }
    }

    /// A piece held up in its first unit gets its other units done by the other thread. The
    /// unit is held until another thread has done one of the piece's units (a condition,
    /// not a sleep: how soon the other thread gets a core does not matter), and gives up
    /// after a hang guard, leaving the assertion to fail. A dispatch made while another test
    /// holds the pool runs inline on one thread, where nobody can help, and the other thread
    /// may claim the first unit itself: such a try is made again, until one runs as meant
    /// (a condition too, under the same guard, not a count of tries).
    #[test]
    fn a_slow_piece_is_helped() {
        set_threads(2);
        let guard = std::time::Instant::now();
        while guard.elapsed() < std::time::Duration::from_secs(60) {
            let threads: Vec<Mutex<Option<ThreadId>>> = (0..41).map(|_| Mutex::new(None)).collect();
            let ran = |i: usize| *threads[i].lock().unwrap();
            let inline = AtomicU32::new(0);
            relay(2, 1, &|p, _| if p == 0 { 40 } else { 1 }, &|p, _, u| {
                if p == 0 && u == 0 {
                    if dispatched() {
                        let held = std::time::Instant::now();
                        while !(1..40).any(|v| ran(v).is_some())
                            && held.elapsed() < std::time::Duration::from_secs(60)
                        {
                            std::thread::yield_now();
                        }
                    } else {
                        inline.fetch_add(1, Ordering::SeqCst);
                    }
                }
                *threads[p * 40 + u].lock().unwrap() = Some(std::thread::current().id());
            });
            if inline.into_inner() > 0 {
                std::thread::yield_now();
                continue;
            }
            let ran = |i: usize| ran(i).expect("every unit ran");
            // The helper claimed piece 0's first unit before piece 0's own thread did.
            if ran(40) == ran(0) {
                continue;
            }
            let helped = (1..40).filter(|&u| ran(u) == ran(40)).count();
            assert!(
                helped > 0,
                "piece 0's other units all waited for its own thread"
            );
            return;
        }
        panic!("no dispatch ran on two threads within the hang guard");
    }
}
