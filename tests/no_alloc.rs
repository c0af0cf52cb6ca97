//! The training step allocates nothing once warmed up: batch fill (augmented or not), forward,
//! backward and the optimizer step reuse the buffers built with the model (OpenBLAS keeps its own
//! buffer pool, outside Rust's allocator). Rank 0's progress display, ticked once per step, is
//! checked in the same test. Only allocations on a measuring test's own thread count: the
//! test harness's other threads (printing other tests' results) allocate meanwhile.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Counts allocations made through Rust's global allocator.
struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Whether allocations on this thread count (set by [`turn`]). A const-initialised
    /// `Cell` needs no allocation of its own, so the allocator may read it.
    static COUNTED: Cell<bool> = const { Cell::new(false) };
}

fn counted_here() -> bool {
    COUNTED.try_with(Cell::get).unwrap_or(false)
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if counted_here() {
            ALLOCATIONS.fetch_add(1, Ordering::SeqCst);
        }
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if counted_here() {
            ALLOCATIONS.fetch_add(1, Ordering::SeqCst);
        }
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The allocation counter is global: the tests take turns.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Waits for this test's turn and counts this thread's allocations from now on.
fn turn() -> std::sync::MutexGuard<'static, ()> {
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    COUNTED.with(|c| c.set(true));
    guard
}

/// Allocations in `steps` training steps (forward, backward, SGD) after 3 warm-up
/// steps, for a synthetic dataset shaped for the model, on the worker's pool at two
/// threads (its dispatches and the calling thread's share of every pass counted).
fn allocations_in_steps(
    model: &str,
    extra: &str,
    augment: &str,
    batch: usize,
    steps: usize,
) -> usize {
    gssp::compute::backend::cpu::set_threads(2);
    let text = format!(
        "[data]\ndataset = \"synthetic\"\naugment = \"{augment}\"\n[data.synthetic]\n\
         train = {train}\ntest = 8\n{extra}[model]\nname = \"{model}\"\n[optim]\nbatch_size = {batch}\n",
        train = 8 * batch
    );
    let cfg = gssp::config::Config::from_str_with_overrides(&text, "test", &[]).unwrap();
    cfg.validate().unwrap();
    let corpus = gssp::compute::workload::Corpus::load(&cfg.data, cfg.run.seed).unwrap();
    let mut step = gssp::compute::workload::ComputeStep::new(&cfg, &corpus, 1, 0).unwrap();
    let mut sgd = gssp::compute::optim::NetworkSgd::new(&step.net, 0.9, 5e-4);
    let mut run = |iters: usize| {
        for _ in 0..iters {
            step.compute(&corpus).expect("a CPU step");
            sgd.step(&mut step.net, 0.01, 1.0);
        }
    };
    run(3);
    let before = ALLOCATIONS.load(Ordering::SeqCst);
    run(steps);
    ALLOCATIONS.load(Ordering::SeqCst) - before
}

#[test]
fn lenet5_training_step_allocates_nothing_after_warm_up() {
    let _turn = turn();
    for augment in ["none", "crop-flip"] {
        // 20 steps of 64 cross an epoch boundary (8 batches per epoch): reshuffles (and
        // reseeded augmentation) too.
        let n = allocations_in_steps("lenet5", "", augment, 64, 20);
        assert_eq!(n, 0, "augment {augment}: allocations in 20 training steps");
    }
    // Rank 0's progress display, ticked once per step, allocates nothing between refreshes.
    let text = "[data]\ndataset = \"synthetic\"\n[model]\nname = \"mlp\"\n";
    let cfg = gssp::config::Config::from_str_with_overrides(text, "test", &[]).unwrap();
    let mut progress = gssp::telemetry::progress::Progress::plain(&cfg, 1000);
    progress.tick(0.0, 0.0, 1.0);
    let before = ALLOCATIONS.load(Ordering::SeqCst);
    for i in 0..1000 {
        progress.tick(i as f64 * 1e-3, i as f64 * 1e-3, 0.5);
    }
    let after = ALLOCATIONS.load(Ordering::SeqCst);
    assert_eq!(after - before, 0, "allocations in 1000 progress ticks");
    // The counter works: an allocation is seen.
    let before = ALLOCATIONS.load(Ordering::SeqCst);
    let v = vec![1u8; 10];
    assert!(ALLOCATIONS.load(Ordering::SeqCst) > before, "{v:?}");
}

#[test]
fn resnet18_training_step_allocates_nothing_after_warm_up() {
    let _turn = turn();
    // The full-width network at batch 2: batch norm, residual blocks, projections and the
    // chunked convolutions of the late stages, 10 steps across an epoch boundary.
    let cifar = "channels = 3\nheight = 32\nwidth = 32\n";
    let n = allocations_in_steps("resnet18", cifar, "crop-flip", 2, 10);
    assert_eq!(n, 0, "allocations in 10 resnet18 training steps");
}

#[test]
fn seq2seq_training_step_allocates_nothing_after_warm_up() {
    use gssp::compute::model::seq2seq::{Seq2Seq, Seq2SeqConfig};
    use gssp::data::bucket::TextBatch;
    let _turn = turn();
    let cfg = Seq2SeqConfig {
        width: 1.0 / 16.0,
        max_src_len: 6,
        max_tgt_len: 6,
        max_batch: 3,
        ..Seq2SeqConfig::paper(30, 20)
    };
    let mut net = Seq2Seq::new(gssp::compute::backend::cpu::Cpu, cfg, 1);
    // Time-major [6 x 3] and [5 x 3], pads (0) at the ends of short sentences.
    let batch = TextBatch {
        src: vec![1, 1, 1, 4, 9, 29, 5, 2, 7, 6, 0, 8, 2, 0, 2, 0, 0, 0],
        tgt: vec![1, 1, 1, 4, 19, 5, 6, 2, 7, 2, 0, 2, 0, 0, 0],
        src_len: 6,
        tgt_len: 5,
        src_lengths: vec![5, 3, 5],
        tgt_lengths: vec![4, 3, 4],
        indices: vec![0, 1, 2],
    };
    // Every step draws its own teacher forcing: both kinds of decoder input are seen.
    net.forward_backward(&batch, 0).unwrap();
    let before = ALLOCATIONS.load(Ordering::SeqCst);
    for step in 1..20 {
        net.forward_backward(&batch, step).unwrap();
    }
    let n = ALLOCATIONS.load(Ordering::SeqCst) - before;
    assert_eq!(n, 0, "allocations in 19 seq2seq training steps");
}

#[test]
fn a_server_push_allocates_nothing_after_warm_up() {
    let _turn = turn();
    // The group server's apply as it runs it (check, SGD step, release) on two threads,
    // over a model large enough that the passes are split.
    gssp::compute::backend::cpu::set_threads(2);
    let n = 200_000;
    let grad = gssp::tools::bench::push::gradient(n);
    let mut ps = gssp::tools::bench::push::resnet_server(grad.clone(), 1);
    let mut ready = Vec::with_capacity(1);
    let mut push = |ps: &mut gssp::protocol::param_server::ParamServer| {
        let sum = gssp::compute::optim::parallel::sum(&grad);
        assert!(sum.is_finite());
        ps.on_push(0, &grad, 0.05).expect("a finite push");
        ready.clear();
        ps.release(&mut ready);
    };
    push(&mut ps);
    let before = ALLOCATIONS.load(Ordering::SeqCst);
    for _ in 0..20 {
        push(&mut ps);
    }
    let after = ALLOCATIONS.load(Ordering::SeqCst);
    assert_eq!(after - before, 0, "allocations in 20 server pushes");
}
