//! `gssp bench step`: throughput of the training step.

use std::time::Instant;

use anyhow::Result;

use crate::config::Config;
use crate::optim::NetworkSgd;
use crate::train::ComputeStep;

/// Throughput of the full training step (batch fill, forward, backward, SGD update) of
/// one process on synthetic data of the model's usual input shape.
pub fn step(model: &str, batch: usize, threads: usize, seconds: f64) -> Result<f64> {
    let (c, h, w) = match model {
        "lenet5" | "mlp" => (1, 28, 28),
        "resnet18" | "vgg19" => crate::model::zoo::CIFAR_INPUT,
        other => anyhow::bail!("--model: must be lenet5, mlp, resnet18 or vgg19, got {other}"),
    };
    if batch == 0 || threads == 0 {
        anyhow::bail!("--batch and --threads: must be >= 1");
    }
    // The CIFAR models train with crop-flip, as the PyTorch reference's step does.
    let augment = if c == 3 { "crop-flip" } else { "none" };
    let text = format!(
        "[data]\ndataset = \"synthetic\"\naugment = \"{augment}\"\n[data.synthetic]\ntrain = {n}\ntest = 1\nchannels = {c}\nheight = {h}\nwidth = {w}\n\
         [model]\nname = \"{model}\"\n[optim]\nbatch_size = {batch}\n[run]\nthreads = {threads}\n",
        n = (batch * 16).max(1024)
    );
    let cfg = Config::from_str_with_overrides(&text, "bench step", &[])?;
    cfg.validate()?;
    crate::backend::cpu::set_threads(threads);
    let (train, _) = crate::data::load(&cfg.data, cfg.run.seed)?;
    let mut step = ComputeStep::new(&cfg, &train, 1, 0)?;
    let mut sgd = NetworkSgd::new(&step.net, 0.9, 5e-4);
    let mut run = |iters: usize| {
        for _ in 0..iters {
            step.compute(&train);
            sgd.step(&mut step.net, 0.01, 1.0);
        }
    };
    // Warm-up (caches, OpenBLAS buffers), then rounds of a tenth of a second or more.
    let t = Instant::now();
    run(1);
    let per_round = ((0.1 / t.elapsed().as_secs_f64().max(1e-6)) as usize).clamp(1, 10);
    run(per_round);
    let t = Instant::now();
    let mut iters = 0;
    while t.elapsed().as_secs_f64() < seconds {
        run(per_round);
        iters += per_round;
    }
    let s = t.elapsed().as_secs_f64();
    println!(
        "model: {model}\nbatch: {batch}\nthreads: {threads}\niterations: {iters}\nseconds: {s:.3}"
    );
    let ips = (iters * batch) as f64 / s;
    println!("images_per_s: {ips:.1}");
    Ok(ips)
}
