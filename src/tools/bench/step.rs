//! `gssp bench step`: throughput of the training step.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};

use crate::compute::backend::cpu::Cpu;
use crate::compute::model::seq2seq::{Seq2Seq, Seq2SeqConfig};
use crate::compute::model::Trainable;
use crate::compute::optim::{Adam, AdamConfig, NetworkSgd};
use crate::compute::workload::{ComputeStep, Corpus};
use crate::config::Config;
use crate::data::bucket::{BucketSampler, TextBatch, BUCKET_WINDOW_BATCHES};
use crate::data::multi30k::{load_split, Direction, EncodedPairs, Split, Vocabs};

/// Throughput of the full training step of one process: for the image models (batch
/// fill, forward, backward, SGD update) on synthetic data of the model's usual input
/// shape; for `seq2seq` on real Multi30k batches read from `data` ([`seq2seq_step`]).
pub fn step(
    model: &str,
    batch: usize,
    threads: usize,
    seconds: f64,
    data: Option<&Path>,
    batches_out: Option<&Path>,
) -> Result<f64> {
    if batch == 0 || threads == 0 {
        anyhow::bail!("--batch and --threads: must be >= 1");
    }
    if model == "seq2seq" {
        let data = data.unwrap_or(Path::new(DEFAULT_MULTI30K));
        return seq2seq_step(data, batch, threads, seconds, batches_out);
    }
    if data.is_some() || batches_out.is_some() {
        anyhow::bail!("--data and --batches-out: only for --model seq2seq");
    }
    let (c, h, w) = match model {
        "lenet5" | "mlp" => (1, 28, 28),
        "resnet18" | "vgg19" => crate::compute::model::zoo::CIFAR_INPUT,
        other => {
            anyhow::bail!("--model: must be lenet5, mlp, resnet18, vgg19 or seq2seq, got {other}")
        }
    };
    // The CIFAR models train with crop-flip, as the PyTorch reference's step does.
    let augment = if c == 3 { "crop-flip" } else { "none" };
    let text = format!(
        "[data]\ndataset = \"synthetic\"\naugment = \"{augment}\"\n[data.synthetic]\ntrain = {n}\ntest = 1\nchannels = {c}\nheight = {h}\nwidth = {w}\n\
         [model]\nname = \"{model}\"\n[optim]\nbatch_size = {batch}\n[run]\nthreads = {threads}\n",
        n = (batch * 16).max(1024)
    );
    let cfg = Config::from_str_with_overrides(&text, "bench step", &[])?;
    cfg.validate()?;
    crate::compute::backend::cpu::set_threads(threads);
    let corpus = Corpus::load(&cfg.data, cfg.run.seed)?;
    let mut step = ComputeStep::new(&cfg, &corpus, 1, 0)?;
    let mut sgd = NetworkSgd::new(&step.net, 0.9, 5e-4);
    let mut run = |iters: usize| -> Result<()> {
        for _ in 0..iters {
            step.compute(&corpus)?;
            sgd.step(&mut step.net, 0.01, 1.0);
        }
        Ok(())
    };
    // Warm-up (caches, OpenBLAS buffers), then rounds of a tenth of a second or more.
    let t = Instant::now();
    run(1)?;
    let per_round = ((0.1 / t.elapsed().as_secs_f64().max(1e-6)) as usize).clamp(1, 10);
    run(per_round)?;
    let t = Instant::now();
    let mut iters = 0;
    while t.elapsed().as_secs_f64() < seconds {
        run(per_round)?;
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

/// Multi30k's training pairs in `data`, encoded with vocabularies built from them (the
/// pairs every seq2seq step benchmark trains on).
pub fn train_pairs(data: &Path) -> Result<(EncodedPairs, Vocabs)> {
    let train = load_split(data, Split::Train).with_context(|| {
        format!(
            "--data {}: reading Multi30k's train.de and train.en",
            data.display()
        )
    })?;
    let vocabs = Vocabs::build(&train);
    let pairs = EncodedPairs::encode(&train, &vocabs, Direction::DeEn);
    if pairs.is_empty() {
        anyhow::bail!(
            "--data {}: train.de and train.en hold no pairs",
            data.display()
        );
    }
    Ok((pairs, vocabs))
}

/// Where `gssp bench step --model seq2seq` looks for Multi30k without `--data`.
pub const DEFAULT_MULTI30K: &str = "../shared/data/multi30k";

/// The paper-size model for `pairs` (vocabularies `src_vocab`, `tgt_vocab`), its workspace
/// sized to the longest sentences and to `batch`, and epoch 0 of the bucket sampler over
/// every pair (seed 0) as padded batches, in order.
pub fn seq2seq_setup(
    pairs: &EncodedPairs,
    src_vocab: usize,
    tgt_vocab: usize,
    batch: usize,
) -> Result<(Seq2SeqConfig, Vec<TextBatch>)> {
    let longest = |seqs: &[Vec<u32>]| seqs.iter().map(Vec::len).max().unwrap_or(0);
    let cfg = Seq2SeqConfig {
        max_src_len: longest(&pairs.src).max(1),
        max_tgt_len: longest(&pairs.tgt).max(2),
        max_batch: batch,
        ..Seq2SeqConfig::paper(src_vocab, tgt_vocab)
    };
    let sampler = BucketSampler::new(
        pairs,
        (0..pairs.len()).collect(),
        batch,
        BUCKET_WINDOW_BATCHES,
        0,
    )?;
    let batches = sampler
        .epoch(0)
        .iter()
        .map(|idx| TextBatch::new(pairs, idx))
        .collect();
    Ok((cfg, batches))
}

/// Sentences per second of the seq2seq training step on Multi30k's training pairs (German
/// to English, vocabularies of min frequency 2): forward and backward over one bucketed
/// batch, gradient clipping to norm 1 and an Adam update (lr 1e-3), the reference's recipe.
/// Batches are served in epoch-0 order, cycling; `batches_out` receives the pair indices of
/// every batch served (one line per batch), so that the PyTorch reference can time the same.
pub fn seq2seq_step(
    data: &Path,
    batch: usize,
    threads: usize,
    seconds: f64,
    batches_out: Option<&Path>,
) -> Result<f64> {
    let (pairs, vocabs) = train_pairs(data)?;
    // Created before the timing, so that a bad path fails at once.
    let out = batches_out
        .map(|p| {
            std::fs::File::create(p)
                .with_context(|| format!("--batches-out {}: cannot create", p.display()))
                .map(|f| (p, f))
        })
        .transpose()?;
    let (cfg, batches) = seq2seq_setup(&pairs, vocabs.de.len(), vocabs.en.len(), batch)?;
    crate::compute::backend::cpu::set_threads(threads);
    let mut net = Seq2Seq::new(Cpu, cfg, 0);
    let mut adam = Adam::new(net.num_params(), AdamConfig::default());
    let mut run = |i: usize| -> Result<usize> {
        let k = i % batches.len();
        net.forward_backward(&batches[k], i as u64)?;
        // The reference's `clip_grad_norm_(model.parameters(), 1)`.
        let n = net.num_params();
        let (be, _, grads) = net.optimizer_buffers();
        crate::compute::optim::clip_grad_norm(be, grads, n, 1.0)?;
        let (params, grads) = net.params_and_grads_mut();
        adam.step(params, grads, 1e-3, 1.0, 1.0);
        Ok(k)
    };
    // One warm-up step (OpenBLAS buffers, page faults), then whole steps for `seconds`.
    run(0)?;
    let mut timed = Vec::new();
    let t = Instant::now();
    while t.elapsed().as_secs_f64() < seconds {
        timed.push(run(timed.len() + 1)?);
    }
    let s = t.elapsed().as_secs_f64();
    let timed: Vec<&TextBatch> = timed.iter().map(|&k| &batches[k]).collect();
    let sentences: usize = timed.iter().map(|b| b.size()).sum();
    let tokens: usize = timed
        .iter()
        .map(|b| b.src_lengths.iter().chain(&b.tgt_lengths).sum::<usize>())
        .sum();
    println!(
        "model: seq2seq ({} parameters, vocab de {} en {})\nbatch: {batch}\nthreads: {threads}\n\
         iterations: {}\nseconds: {s:.3}",
        net.num_params(),
        vocabs.de.len(),
        vocabs.en.len(),
        timed.len()
    );
    let sps = sentences as f64 / s;
    println!("sentences_per_s: {sps:.1}");
    println!("tokens_per_s: {:.1}", tokens as f64 / s);
    if let Some((path, mut file)) = out {
        let mut text = String::new();
        for b in timed {
            let ids: Vec<String> = b.indices.iter().map(usize::to_string).collect();
            text.push_str(&ids.join(" "));
            text.push('\n');
        }
        file.write_all(text.as_bytes())
            .with_context(|| format!("--batches-out {}: cannot write", path.display()))?;
    }
    Ok(sps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seq2seq_setup_sizes_the_workspace_to_the_data_and_serves_every_pair_once() {
        // Sources of 3..=9 tokens, targets of 4..=11: the longest are pairs 6 and 13.
        let seq = |len: usize| -> Vec<u32> { (0..len as u32).map(|t| 4 + t).collect() };
        let pairs = EncodedPairs {
            src: (0..14).map(|i| seq(3 + i % 7)).collect(),
            tgt: (0..14).map(|i| seq(4 + i % 8)).collect(),
        };
        let (cfg, batches) = seq2seq_setup(&pairs, 20, 30, 4).unwrap();
        assert_eq!((cfg.src_vocab, cfg.tgt_vocab), (20, 30));
        assert_eq!(
            (cfg.max_src_len, cfg.max_tgt_len, cfg.max_batch),
            (9, 11, 4)
        );
        assert_eq!((cfg.hidden, cfg.embedding, cfg.layers), (512, 256, 2));
        assert_eq!(batches.len(), 4);
        let mut seen: Vec<usize> = batches.iter().flat_map(|b| b.indices.clone()).collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..14).collect::<Vec<_>>());
        for b in &batches {
            assert!(b.size() <= 4);
            assert!(b.src_len <= cfg.max_src_len && b.tgt_len <= cfg.max_tgt_len);
            assert_eq!(b.src.len(), b.src_len * b.size());
        }
    }
}
