//! `gssp bench step --device cuda` and `gssp bench topk --device cuda`: the CUDA backend's
//! training step and top-k on this node's GPU (the rank's GPU under a launcher).
//!
//! The image step trains on one fixed random batch uploaded at every step (so the
//! figure includes the host-to-device copy a real step has), SGD with momentum; seq2seq
//! trains on real Multi30k batches with gradient clipping and Adam, the reference's
//! recipe. Both wait for the device before reading the clock.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};

use crate::compute::backend::cuda::Cuda;
use crate::compute::backend::{AdamStep, Backend, SgdStep};
use crate::compute::model::seq2seq::Seq2Seq;
use crate::compute::model::{zoo, Trainable};

/// `n` deterministic values in [-0.5, 0.5) (xorshift from `seed`).
fn random_values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        })
        .collect()
}

/// This process's GPU: the one its launcher's local rank picks.
fn open_gpu() -> Result<Cuda> {
    let gpu = match crate::compute::backend::select(crate::config::DeviceKind::Cuda)? {
        crate::compute::backend::Device::Cuda(gpu) => gpu,
        crate::compute::backend::Device::Cpu => anyhow::bail!("--device cuda: no GPU was selected"),
    };
    let cuda = Cuda::new(gpu).context("--device cuda")?;
    println!("device: {}", cuda.describe());
    Ok(cuda)
}

/// Runs `step(i)` for warm-up, then for `seconds` in rounds, waiting for the device at
/// the end of each round; returns (steps, seconds).
fn timed(
    cuda: &Cuda,
    seconds: f64,
    mut step: impl FnMut(usize) -> Result<()>,
) -> Result<(usize, f64)> {
    for i in 0..3 {
        step(i)?;
    }
    cuda.synchronize()?;
    let t = Instant::now();
    let mut done = 0;
    while t.elapsed().as_secs_f64() < seconds {
        for _ in 0..10 {
            step(3 + done)?;
            done += 1;
        }
        cuda.synchronize()?;
    }
    Ok((done, t.elapsed().as_secs_f64()))
}

/// Images per second of `model`'s training step at `batch` on the GPU.
pub fn image_step(model: &str, batch: usize, seconds: f64) -> Result<f64> {
    let cuda = open_gpu()?;
    let mut net = match model {
        "lenet5" => zoo::lenet5(cuda.clone(), (1, 28, 28), 10, batch, 0),
        "resnet18" => zoo::resnet18(cuda.clone(), zoo::CIFAR_INPUT, 10, 1.0, batch, 0),
        "vgg19" => zoo::vgg19(cuda.clone(), zoo::CIFAR_INPUT, 10, 1.0, batch, 0),
        other => anyhow::bail!(
            "--device cuda: --model must be lenet5, resnet18, vgg19 or seq2seq, got {other}"
        ),
    };
    let x = random_values(batch * net.input_len(), 0x2545_F491_4F6C_DD1D);
    let labels: Vec<u8> = (0..batch).map(|i| (i % 10) as u8).collect();
    let mut velocity = cuda.alloc(net.num_params());
    let sgd = SgdStep {
        lr: 0.01,
        momentum: 0.9,
        weight_decay: 5e-4,
        scale: 1.0,
    };
    let (steps, s) = timed(&cuda, seconds, |_| {
        net.forward_backward(&x, &labels, batch);
        let (be, params, grads) = net.optimizer_buffers();
        be.sgd_step(params, &mut velocity, grads, &sgd);
        Ok(())
    })?;
    println!("model: {model}\nbatch: {batch}\niterations: {steps}\nseconds: {s:.3}");
    let ips = (steps * batch) as f64 / s;
    println!("images_per_s: {ips:.1}");
    Ok(ips)
}

/// Sentences per second of the seq2seq training step (batch `batch`, real Multi30k
/// batches in the bucketed order of `gssp bench step`'s CPU figure) on the GPU.
pub fn seq2seq_step(data: &Path, batch: usize, seconds: f64) -> Result<f64> {
    let (pairs, vocabs) = super::step::train_pairs(data)?;
    let (cfg, batches) =
        super::step::seq2seq_setup(&pairs, vocabs.de.len(), vocabs.en.len(), batch)?;
    let cuda = open_gpu()?;
    let mut net = Seq2Seq::new(cuda.clone(), cfg, 0);
    let n = net.num_params();
    let (mut m, mut v) = (cuda.alloc(n), cuda.alloc(n));
    let mut sentences = 0;
    let (steps, s) = timed(&cuda, seconds, |i| {
        let b = &batches[i % batches.len()];
        net.forward_backward(b, i as u64)?;
        // The reference's `clip_grad_norm_(model.parameters(), 1)`.
        let n = net.num_params();
        let (be, _, grads) = net.optimizer_buffers();
        crate::compute::optim::clip_grad_norm(be, grads, n, 1.0)?;
        let t = (i + 1) as i32;
        let adam = AdamStep {
            lr: 1e-3,
            one_minus_beta1: 0.1,
            one_minus_beta2: 0.001,
            eps: 1e-8,
            weight_decay: 0.0,
            scale: 1.0,
            bias_correction1: 1.0 - 0.9f32.powi(t),
            bias_correction2: 1.0 - 0.999f32.powi(t),
        };
        let (be, params, grads) = net.optimizer_buffers();
        be.adam_step(params, &mut m, &mut v, grads, &adam);
        if i >= 3 {
            sentences += b.size();
        }
        Ok(())
    })?;
    println!(
        "model: seq2seq ({n} parameters)\nbatch: {batch}\niterations: {steps}\nseconds: {s:.3}"
    );
    let sps = sentences as f64 / s;
    println!("sentences_per_s: {sps:.1}");
    Ok(sps)
}

/// Top-k of `n` random floats at `ratio` on the GPU (indices and values copied back)
/// against a device-to-device copy of the same array; medians of `reps`.
pub fn topk(n: usize, ratio: f64, reps: usize) -> Result<(f64, f64)> {
    if n == 0 || !(ratio > 0.0 && ratio <= 1.0) || reps == 0 {
        anyhow::bail!("--n must be >= 1, --ratio in (0, 1], --reps >= 1");
    }
    let cuda = open_gpu()?;
    let k = crate::compress::ratio::k_for_ratio(n, ratio);
    let host = random_values(n, 42);
    let mut values = cuda.alloc(n);
    cuda.upload(&mut values, &host);
    let mut copy = cuda.alloc(n);
    let time = |f: &mut dyn FnMut() -> Result<()>| -> Result<f64> {
        f()?;
        cuda.synchronize()?;
        let mut runs = Vec::with_capacity(reps);
        for _ in 0..reps {
            let t = Instant::now();
            f()?;
            cuda.synchronize()?;
            runs.push(t.elapsed().as_secs_f64());
        }
        Ok(crate::telemetry::stats::median(&mut runs))
    };
    let topk_s = time(&mut || {
        let (idx, _) = cuda.topk(&values, None, n, k)?;
        assert_eq!(idx.len(), k);
        Ok(())
    })?;
    let copy_s = time(&mut || {
        cuda.copy(&mut copy, &values, n);
        Ok(())
    })?;
    println!("n: {n}\nratio: {ratio}\nk: {k}\nreps: {reps}");
    println!(
        "topk_s: {topk_s:.6}\ncopy_s: {copy_s:.6}\ntopk_over_copy: {:.2}",
        topk_s / copy_s
    );
    exchange_selection(&cuda, &host, k, time)?;
    Ok((topk_s, copy_s))
}

/// What one sparse exchange of a group server with its replica in host memory costs to
/// select on the host (today's path: [`PeerView::take_sparse`], one fused pass) and on the
/// GPU with the peer view mirrored there ([`PeerView::take_sparse_on`] with a
/// [`CudaMirror`], what `device.exchange_select = "cuda"` runs: the last take's k entries
/// set on the device, the weights uploaded, the top-k of weights - view selected there and
/// the k pairs copied back). Their ratio over model sizes says where a GPU group server
/// starts to pay.
fn exchange_selection(
    cuda: &Cuda,
    weights: &[f32],
    k: usize,
    mut time: impl FnMut(&mut dyn FnMut() -> Result<()>) -> Result<f64>,
) -> Result<()> {
    use crate::compress::feedback::PeerView;
    use crate::compress::topk::TopK;
    use crate::compress::CudaMirror;
    let n = weights.len();
    let (mut topk, mut idx, mut vals) = (TopK::new(), Vec::new(), Vec::new());
    let mut view = PeerView::new(&vec![0.0; n]);
    let host_s = time(&mut || {
        // Selecting again from the view the last call left costs the same pass as from a
        // fresh one, without copying the model.
        view.take_sparse(weights, k, &mut topk, &mut idx, &mut vals)?;
        Ok(())
    })?;
    let mut mirrored = PeerView::new(&vec![0.0; n]);
    let mut device = CudaMirror::new(cuda.clone());
    mirrored.mirror_on(&mut device);
    let device_s = time(&mut || {
        mirrored.take_sparse_on(&mut device, weights, k, &mut idx, &mut vals)?;
        Ok(())
    })?;
    println!(
        "exchange_host_s: {host_s:.6}\nexchange_device_s: {device_s:.6}\nexchange_device_over_host: {:.2}",
        device_s / host_s
    );
    Ok(())
}
