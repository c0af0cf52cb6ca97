//! A training step gives the same bits whatever the scheduler does: the CPU pool's work is
//! forced into two opposite schedules (one thread takes every unit; units alternate between
//! the threads, and Winograd's pieces start on each other's threads) beside the on-demand
//! one that runs, and LeNet-5, ResNet-18 and VGG-19 (narrow) must end three training steps
//! (augmented batches, forward, backward, SGD with momentum) with bit-identical losses and
//! weights, with Winograd on and off.
//!
//! No test of this suite may depend on how the scheduler runs its threads or on the
//! machine's load; this one proves the step's part of that without relying on load: it
//! forces the schedules a loaded machine might produce.

use std::sync::Mutex;

use gssp::compute::backend::cpu::{force_schedule, set_threads, set_winograd, Schedule};
use gssp::compute::model::Trainable;

/// The schedule and Winograd's switch are process-wide: the tests take turns.
static SERIAL: Mutex<()> = Mutex::new(());

/// The losses and final weights of three training steps of `model` at `width` on a
/// synthetic dataset shaped like its real one, under `schedule`.
fn three_steps(model: &str, width: f64, batch: usize, schedule: Schedule) -> (Vec<f32>, Vec<f32>) {
    set_threads(2);
    force_schedule(schedule);
    let (c, h, w) = if model == "lenet5" {
        (1, 28, 28)
    } else {
        (3, 32, 32)
    };
    let text = format!(
        "[data]\ndataset = \"synthetic\"\naugment = \"crop-flip\"\n[data.synthetic]\n\
         train = {train}\ntest = 8\nchannels = {c}\nheight = {h}\nwidth = {w}\n\
         [model]\nname = \"{model}\"\nwidth = {width}\n[optim]\nbatch_size = {batch}\n",
        train = 4 * batch
    );
    let cfg = gssp::config::Config::from_str_with_overrides(&text, "test", &[])
        .expect("the test's config parses");
    cfg.validate().expect("the test's config is valid");
    let corpus = gssp::compute::workload::Corpus::load(&cfg.data, cfg.run.seed)
        .expect("the synthetic corpus");
    let mut step =
        gssp::compute::workload::ComputeStep::new(&cfg, &corpus, 1, 0).expect("the model builds");
    let mut sgd = gssp::compute::optim::NetworkSgd::new(&step.net, 0.9, 5e-4);
    let losses = (0..3)
        .map(|_| {
            let loss = step.compute(&corpus).expect("a CPU step");
            sgd.step(&mut step.net, 0.05, 1.0);
            loss
        })
        .collect();
    force_schedule(Schedule::OnDemand);
    (losses, step.net.params().to_vec())
}

/// The first index at which two buffers differ in their bits.
fn first_difference(a: &[f32], b: &[f32]) -> Option<usize> {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .position(|(x, y)| x.to_bits() != y.to_bits())
}

fn same_bits_under_every_schedule(model: &str, width: f64, batch: usize) {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for winograd in [true, false] {
        set_winograd(winograd);
        let (loss, weights) = three_steps(model, width, batch, Schedule::OnDemand);
        assert!(
            loss.iter().all(|l| l.is_finite()),
            "{model}: losses {loss:?}"
        );
        for schedule in [Schedule::OneThread, Schedule::Alternate] {
            let (l, w) = three_steps(model, width, batch, schedule);
            assert_eq!(
                first_difference(&loss, &l),
                None,
                "{model} (winograd {winograd}) under {schedule:?}: losses {l:?} against {loss:?}"
            );
            if let Some(i) = first_difference(&weights, &w) {
                panic!(
                    "{model} (winograd {winograd}) under {schedule:?}: weight {i} is {} against {}",
                    w[i], weights[i]
                );
            }
        }
    }
    set_winograd(true);
}

#[test]
fn lenet5_steps_are_bit_identical_under_opposite_schedules() {
    same_bits_under_every_schedule("lenet5", 1.0, 64);
}

#[test]
fn narrow_resnet18_steps_are_bit_identical_under_opposite_schedules() {
    same_bits_under_every_schedule("resnet18", 0.125, 16);
}

#[test]
fn narrow_vgg19_steps_are_bit_identical_under_opposite_schedules() {
    same_bits_under_every_schedule("vgg19", 0.125, 16);
}
