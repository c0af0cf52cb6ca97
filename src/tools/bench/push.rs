//! `gssp bench push`: a parameter server's time per push against the memory traffic a push
//! must cause, measured at a model's size.
//!
//! The bound. A push moves [`PUSH_STREAMS`] model-sized streams of memory (each one read or
//! one write of the whole model): receiving the gradient (the sender's buffer read, the
//! server's written: 2), the SGD step (gradient, weights and momentum read, weights and
//! momentum written: 5), the reply (the weights read, the worker's buffer written: 2). At the
//! copy bandwidth `B` (bytes read plus bytes written per second by a large `memcpy`, as
//! STREAM counts them) a push takes at least `9 * 4 * n / B` seconds for `n` parameters; the
//! in-process step alone [`STEP_STREAMS`] of them.
//!
//! Every round measures, one after the other, so that a loaded machine slows all alike: a
//! copy and a triad (`a = b + s * c`) of model-sized buffers on the pool's threads (and the
//! copy on one thread), the server's apply as it runs it (the push's finiteness check,
//! [`ParamServer::on_push`], the release), the plain pass it replaced (one thread: a summing
//! check, then the SGD kernel) and the reply's copy of the weights into a send buffer on the
//! pool's threads ([`crate::comm::p2p::ServerLink`] copies once per reply). Medians over the
//! rounds.

use std::time::Instant;

use anyhow::Result;

use crate::compute::backend::cpu::{self, threads, Cpu};
use crate::compute::backend::SgdStep;
use crate::compute::model::{zoo, Trainable};
use crate::compute::optim::parallel;
use crate::config::StalenessLr;
use crate::protocol::param_server::{Apply, ParamServer, UpdateRule};
use crate::runtime::messages::PushRef;
use crate::runtime::server::check_push;
use crate::telemetry::stats::median;

/// Model-sized streams of memory one push moves (see the module docs).
pub const PUSH_STREAMS: f64 = 9.0;
/// Those of the SGD step alone.
pub const STEP_STREAMS: f64 = 5.0;

/// The learning rate, momentum and weight decay of the shipped ResNet-18 configs.
const LR: f64 = 0.05;
const MOMENTUM: f64 = 0.9;
const WEIGHT_DECAY: f64 = 5e-4;

/// Parameters of `model` at `width` (ResNet-18 and VGG-19 for CIFAR, 10 classes).
pub fn model_params(model: &str, width: f64) -> Result<usize> {
    if width.is_nan() || width <= 0.0 || width > 4.0 {
        anyhow::bail!("--width: must be in (0, 4], got {width}");
    }
    let input = zoo::CIFAR_INPUT;
    let net = match model {
        "resnet18" => zoo::resnet18(Cpu, input, 10, width, 1, 0),
        "vgg19" => zoo::vgg19(Cpu, input, 10, width, 1, 0),
        other => anyhow::bail!("--model: must be resnet18 or vgg19, got {other}"),
    };
    Ok(net.num_params())
}

/// A parameter server as the resnet18 configs run it: SGD with momentum and weight decay,
/// each push applied at once, worth one of `workers`.
pub fn resnet_server(weights: Vec<f32>, workers: usize) -> ParamServer {
    ParamServer::new(
        weights,
        UpdateRule {
            workers,
            total_workers: workers,
            bound: None,
            apply: Apply::Immediate,
            momentum: MOMENTUM,
            weight_decay: WEIGHT_DECAY,
            staleness_lr: StalenessLr::Inverse,
            delay_compensation: 0.0,
            clip_norm: 0.0,
            reads_ahead: false,
        },
    )
}

/// A gradient-like buffer: small finite values.
pub fn gradient(n: usize) -> Vec<f32> {
    (0..n).map(|i| 1e-3 * ((i as f32) * 0.618).sin()).collect()
}

/// Medians of one `bench push` run, in seconds (bandwidths in bytes per second).
#[derive(Debug, Clone, Copy)]
pub struct PushFigures {
    pub params: usize,
    pub threads: usize,
    pub rounds: usize,
    /// Copy and triad bandwidth on the pool's threads.
    pub copy_bw: f64,
    pub triad_bw: f64,
    /// Copy bandwidth of one thread.
    pub one_thread_copy_bw: f64,
    /// The server's apply: check, step, release.
    pub apply_s: f64,
    /// The pass it replaced: a one-thread summing check, then the one-thread SGD kernel.
    pub plain_apply_s: f64,
    /// Copying the weights into a reply buffer.
    pub reply_copy_s: f64,
}

impl PushFigures {
    /// Bytes of one model-sized stream.
    pub fn stream_bytes(&self) -> f64 {
        4.0 * self.params as f64
    }

    /// The least time of `streams` model-sized streams at the copy bandwidth.
    pub fn bound_s(&self, streams: f64) -> f64 {
        streams * self.stream_bytes() / self.copy_bw
    }
}

/// Measures for `seconds` (at least 3 rounds) at `threads` threads.
pub fn measure(params: usize, threads_n: usize, seconds: f64) -> Result<PushFigures> {
    if threads_n == 0 || seconds.is_nan() || seconds <= 0.0 {
        anyhow::bail!("--threads must be >= 1 and --seconds > 0");
    }
    cpu::set_threads(threads_n);
    let g = gradient(params);
    let mut ps = resnet_server(g.iter().map(|v| 10.0 * v).collect(), 1);
    let mut plain = (ps.weights().to_vec(), vec![0.0f32; params]);
    let (mut a, b, c) = (vec![0.0f32; params], vec![1.0f32; params], g.clone());
    let mut reply = vec![0.0f32; params];
    let mut ready = Vec::with_capacity(1);
    let mut times: [Vec<f64>; 6] = Default::default();
    let start = Instant::now();
    while times[0].len() < 3 || start.elapsed().as_secs_f64() < seconds {
        times[0].push(timed(|| parallel::copy(&mut a, &b)));
        times[1].push(timed(|| triad(&mut a, &b, &c)));
        let push = PushRef {
            worker: 0,
            clock: 0,
            loss: 1.0,
            payload: &g,
            receive_s: 0.0,
            receive_cpu_s: 0.0,
        };
        times[2].push(timed(|| {
            let checked = check_push(&push, 1, 0, LR).and_then(|()| Ok(ps.on_push(0, &g, LR)?));
            ready.clear();
            ps.release(&mut ready);
            checked.map(|_| ())
        }));
        times[3].push(timed(|| plain_apply(&mut plain, &g)));
        times[4].push(timed(|| parallel::copy(&mut reply, ps.weights())));
        times[5].push(timed(|| a.copy_from_slice(&b)));
    }
    let rounds = times[0].len();
    let [copy_s, triad_s, apply_s, plain_apply_s, reply_copy_s, one_thread_copy_s] =
        times.map(|mut t| median(&mut t));
    let bytes = 4.0 * params as f64;
    Ok(PushFigures {
        params,
        threads: threads::threads(),
        rounds,
        copy_bw: 2.0 * bytes / copy_s,
        one_thread_copy_bw: 2.0 * bytes / one_thread_copy_s,
        triad_bw: 3.0 * bytes / triad_s,
        apply_s,
        plain_apply_s,
        reply_copy_s,
    })
}

/// Seconds `f` took.
fn timed<T>(f: impl FnOnce() -> T) -> f64 {
    let t = Instant::now();
    std::hint::black_box(f());
    t.elapsed().as_secs_f64()
}

/// `a = b + 0.5 * c`, each of the pool's threads on its share.
fn triad(a: &mut [f32], b: &[f32], c: &[f32]) {
    let len = b.len();
    threads::for_parts(len, [threads::Units::new(a, 1)], &|r, [a]| {
        for ((a, &b), &c) in a.iter_mut().zip(&b[r.clone()]).zip(&c[r]) {
            *a = b + 0.5 * c;
        }
    });
}

/// The server's apply before its passes were threaded: one summing pass, one SGD pass.
fn plain_apply((w, v): &mut (Vec<f32>, Vec<f32>), g: &[f32]) -> f32 {
    let sum: f32 = g.iter().sum();
    let h = SgdStep {
        lr: LR as f32,
        momentum: MOMENTUM as f32,
        weight_decay: WEIGHT_DECAY as f32,
        scale: 1.0,
    };
    cpu::sgd_step(w, v, g, &h);
    sum
}

/// Prints the figures and their ratios to the bounds.
pub fn print(f: &PushFigures) {
    let gbs = |bw: f64| bw / 1e9;
    let ms = |s: f64| 1e3 * s;
    let push_bound = f.bound_s(PUSH_STREAMS);
    let step_bound = f.bound_s(STEP_STREAMS);
    println!(
        "params: {}\nthreads: {}\nrounds: {}",
        f.params, f.threads, f.rounds
    );
    println!(
        "copy_gb_s: {:.2}\ntriad_gb_s: {:.2}\none_thread_copy_gb_s: {:.2}",
        gbs(f.copy_bw),
        gbs(f.triad_bw),
        gbs(f.one_thread_copy_bw)
    );
    println!(
        "push_bound_ms: {:.2}  ({PUSH_STREAMS} model streams)\nstep_bound_ms: {:.2}  ({STEP_STREAMS} model streams)",
        ms(push_bound),
        ms(step_bound)
    );
    println!(
        "apply_ms: {:.2}  (check, step, release; {:.2}x the step bound)",
        ms(f.apply_s),
        f.apply_s / step_bound
    );
    println!(
        "plain_apply_ms: {:.2}  (one-thread check and step; {:.2}x the step bound)",
        ms(f.plain_apply_s),
        f.plain_apply_s / step_bound
    );
    println!("reply_copy_ms: {:.2}", ms(f.reply_copy_s));
}
