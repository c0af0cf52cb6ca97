//! `gssp bench step`: throughput of the training step.

use std::time::Instant;

use anyhow::Result;

use crate::config::Config;
use crate::optim::Sgd;
use crate::train::ComputeStep;

/// Throughput of the full training step (batch fill, forward, backward, SGD update) of
/// one process on synthetic data of the model's usual input shape.
pub fn step(model: &str, batch: usize, threads: usize, seconds: f64) -> Result<f64> {
    let (c, h, w) = match model {
        "lenet5" | "mlp" => (1, 28, 28),
        other => anyhow::bail!("--model: must be lenet5 or mlp, got {other}"),
    };
    if batch == 0 || threads == 0 {
        anyhow::bail!("--batch and --threads: must be >= 1");
    }
    let text = format!(
        "[data]\ndataset = \"synthetic\"\n[data.synthetic]\ntrain = {n}\ntest = 1\nchannels = {c}\nheight = {h}\nwidth = {w}\n\
         [model]\nname = \"{model}\"\n[optim]\nbatch_size = {batch}\n[run]\nthreads = {threads}\n",
        n = (batch * 16).max(1024)
    );
    let cfg = Config::from_str_with_overrides(&text, "bench step", &[])?;
    cfg.validate()?;
    crate::backend::cpu::set_threads(threads);
    let (train, _) = crate::data::load(&cfg.data, cfg.run.seed)?;
    let mut step = ComputeStep::new(&cfg, &train, 1, 0)?;
    let mut sgd = Sgd::new(step.net.num_params(), 0.9, 5e-4);
    let mut run = |iters: usize| {
        for _ in 0..iters {
            step.compute(&train);
            let (p, g) = step.net.params_and_grads_mut();
            sgd.step(p, g, 0.01, 1.0, 1.0);
        }
    };
    run(10); // warm-up: caches, OpenBLAS buffers
    let t = Instant::now();
    let mut iters = 0;
    while t.elapsed().as_secs_f64() < seconds {
        run(10);
        iters += 10;
    }
    let s = t.elapsed().as_secs_f64();
    println!(
        "model: {model}\nbatch: {batch}\nthreads: {threads}\niterations: {iters}\nseconds: {s:.3}"
    );
    let ips = (iters * batch) as f64 / s;
    println!("images_per_s: {ips:.0}");
    Ok(ips)
}
