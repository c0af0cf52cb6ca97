//! A worker's data pipeline and model: fills the next batch from its shard and computes
//! the gradient into the model's gradient buffer. The sync modes see only
//! [`ComputeStep::compute`], the model's flat buffers and the batch count.
//!
//! The pipeline is a [`Shard`] of its own, so that one process can hold many workers' shards
//! beside one model (the simulated clock, `tools::simulate`): a shard's step sets the
//! model's dropout stream and step count to its own before it computes, so each worker's
//! masks are those its own process would draw.
//!
//! With batches in proportion to speed (`[sync.balance]`) every worker walks one shared
//! order and takes its slice of each global batch ([`ComputeStep::set_share`]); the gradient
//! it leaves is weighted by its batch over the mean batch (the rule of
//! `protocol::balance`, applied here so that every mode's `1 / W` average sees it), and its
//! emulated compute follows its batch ([`Pacer::set_work`]).

use std::time::Instant;

use anyhow::{Context, Result};

use crate::compute::backend::cpu::Cpu;
use crate::compute::backend::Backend;
use crate::compute::model::Trainable;
use crate::compute::pace::Pacer;
use crate::config::{Augment, Config};
use crate::data::augment::Augmenter;
use crate::data::bucket::{BucketStream, TextBatch};
use crate::data::multi30k::EncodedPairs;
use crate::data::sampler::ShardSampler;

use super::corpus::Corpus;
use super::model::Model;

pub struct ComputeStep<B: Backend = Cpu> {
    pub net: Model<B>,
    pub shard: Shard,
}

/// One worker's data pipeline: its shard of the training set, its batch and augmentation.
pub struct Shard {
    feed: Feed,
    /// The worker's index: its shard, and its dropout and teacher-forcing stream.
    index: usize,
    /// This worker's batch: `optim.batch_size`, or its share of the global batch.
    batch: usize,
    /// `optim.batch_size`: the mean batch, which the learning rate and the pacer's unit
    /// are for.
    mean_batch: usize,
}

/// Where batches come from (one per process: its size does not matter).
#[allow(clippy::large_enum_variant)]
enum Feed {
    /// Image batches, buffers allocated once.
    Images {
        sampler: ShardSampler,
        /// `data.augment`: this worker's crop and flip stream; `None` trains on the
        /// images as they are.
        augmenter: Option<Augmenter>,
        x: Vec<f32>,
        y: Vec<u8>,
    },
    /// Length-bucketed sentence-pair batches, refilled into one batch.
    Text {
        stream: BucketStream,
        batch: TextBatch,
    },
}

impl ComputeStep<Cpu> {
    /// [`ComputeStep::new_on`] the CPU backend.
    pub fn new(cfg: &Config, corpus: &Corpus, shards: usize, shard: usize) -> Result<ComputeStep> {
        ComputeStep::new_on(Cpu, cfg, corpus, shards, shard)
    }
}

impl<B: Backend> ComputeStep<B> {
    /// Builds the model for `corpus` on `be` and the sampler for shard `shard` of
    /// `shards`. Every rank builds the same initial weights, from `run.seed` or
    /// `model.init_file` (read again on resume, before the checkpoint replaces them);
    /// dropout draws follow the shard.
    pub fn new_on(
        be: B,
        cfg: &Config,
        corpus: &Corpus,
        shards: usize,
        shard: usize,
    ) -> Result<ComputeStep<B>> {
        let net = build_model(be, cfg, corpus, shard)?;
        let shard = Shard::new(cfg, corpus, &net, shards, shard)?;
        Ok(ComputeStep { net, shard })
    }

    /// [`Shard::set_share`].
    pub fn set_share(&mut self, part: std::ops::Range<usize>) -> Result<()> {
        self.shard.set_share(part)
    }

    /// [`Shard::compute`] on this step's model.
    pub fn compute(&mut self, corpus: &Corpus) -> Result<f32> {
        self.shard.compute(&mut self.net, corpus)
    }

    /// [`ComputeStep::compute`], then the pad of the emulated slowdown. Returns the batch
    /// loss and the seconds both took.
    pub fn compute_paced(&mut self, corpus: &Corpus, pacer: &mut Pacer) -> Result<(f32, f64)> {
        let t0 = Instant::now();
        let loss = self.compute(corpus)?;
        pacer.set_work(self.shard.work());
        pacer.sleep_pad(t0.elapsed().as_secs_f64());
        Ok((loss, t0.elapsed().as_secs_f64()))
    }

    /// [`Shard::batches`].
    pub fn batches(&self) -> u64 {
        self.shard.batches()
    }

    /// Continues as if `batches` batches had been computed: the sampler, the augmentation,
    /// the dropout masks and teacher forcing all follow the batch count (resume from a
    /// checkpoint).
    pub fn resume_at(&mut self, batches: u64) {
        self.shard.resume_at(batches);
    }

    /// [`Shard::epoch`].
    pub fn epoch(&self) -> f64 {
        self.shard.epoch()
    }

    /// [`Shard::batch`].
    pub fn batch(&self) -> usize {
        self.shard.batch()
    }
}

/// The model of `cfg` for `corpus` on `be`, every rank's the same initial weights from
/// `run.seed` or `model.init_file`; its dropout draws follow `stream`.
pub fn build_model<B: Backend>(
    be: B,
    cfg: &Config,
    corpus: &Corpus,
    stream: usize,
) -> Result<Model<B>> {
    let mut net = Model::build_on(be, cfg, corpus, stream as u64)?;
    if !cfg.model.init_file.is_empty() {
        let path = std::path::Path::new(&cfg.model.init_file);
        let expected = crate::compute::model::export::metadata::<B>(cfg, &net);
        crate::compute::model::export::load_into::<B>(&mut net, &expected, path)
            .context("model.init_file")?;
    }
    Ok(net)
}

impl Shard {
    /// The pipeline of shard `shard` of `shards` for `net`'s input (the corpus paired with
    /// its model: an image network with images, the translation model with sentence pairs).
    pub fn new<B: Backend>(
        cfg: &Config,
        corpus: &Corpus,
        net: &Model<B>,
        shards: usize,
        shard: usize,
    ) -> Result<Shard> {
        let batch = cfg.optim.batch_size;
        let ceiling = cfg.sync.balance.ceiling(batch);
        let feed = match (corpus, net) {
            (Corpus::Images { train, .. }, Model::Image(n)) => Feed::Images {
                sampler: image_sampler(cfg, train.len(), shards, shard)?,
                augmenter: match cfg.data.augment {
                    Augment::None => None,
                    Augment::CropFlip => Some(Augmenter::new(cfg.run.seed, shard)),
                },
                x: vec![0.0; ceiling * n.input_len()],
                y: vec![0; ceiling],
            },
            (Corpus::Text(text), _) => Feed::Text {
                stream: text_stream(cfg, &text.train, shards, shard)?,
                batch: TextBatch::new(&text.train, &[]),
            },
            (Corpus::Images { .. }, Model::Text(_)) => {
                anyhow::bail!("model seq2seq needs dataset multi30k")
            }
        };
        Ok(Shard {
            feed,
            index: shard,
            batch,
            mean_batch: batch,
        })
    }

    /// Takes the slice `part` of every global batch of a shared order from the next batch
    /// on (batches in proportion to speed; the sampler was built for it by
    /// `sync.balance`). Fails for a slice past the workspace or the global batch.
    pub fn set_share(&mut self, part: std::ops::Range<usize>) -> Result<()> {
        let Feed::Images { sampler, y, .. } = &mut self.feed else {
            anyhow::bail!("sync.balance: batches in proportion to speed need an image dataset");
        };
        anyhow::ensure!(
            part.len() <= y.len(),
            "sync.balance: a batch of {} is past the workspace of {} (sync.balance.max_batch)",
            part.len(),
            y.len()
        );
        sampler.set_part(part.clone())?;
        self.batch = part.len();
        Ok(())
    }

    /// One forward/backward pass of `net` on this shard's next batch, the gradient left in
    /// `net`'s gradient buffer; returns the batch loss (NaN where the model refused the
    /// batch: the sync modes stop on a non-finite loss, naming it), or the backend's
    /// failure ([`Backend::status`]), naming the step.
    pub fn compute<B: Backend>(&mut self, net: &mut Model<B>, corpus: &Corpus) -> Result<f32> {
        let step = self.batches();
        let loss = self.forward_backward(net, corpus);
        net.backend()
            .status()
            .with_context(|| format!("training step {}", step + 1))?;
        Ok(loss)
    }

    /// This shard's batch over the mean batch: the work of its step against a mean one's
    /// (the pacer's unit is the mean batch's).
    pub fn work(&self) -> f64 {
        self.batch as f64 / self.mean_batch as f64
    }

    fn forward_backward<B: Backend>(&mut self, net: &mut Model<B>, corpus: &Corpus) -> f32 {
        let (stream, served) = (self.index as u64, self.batches());
        match (&mut self.feed, net, corpus) {
            (
                Feed::Images {
                    sampler,
                    augmenter,
                    x,
                    y,
                },
                Model::Image(net),
                Corpus::Images { train, .. },
            ) => {
                let batch = sampler.served();
                net.set_dropout_stream(stream);
                net.set_train_steps(served);
                let idx = sampler.next_batch();
                let n = idx.len();
                let (x, y) = (&mut x[..n * net.input_len()], &mut y[..n]);
                match augmenter {
                    Some(aug) => {
                        aug.start_batch(batch);
                        aug.fill_batch(train, idx, x, y);
                    }
                    None => train.fill_batch(idx, x, y),
                }
                let loss = net.forward_backward(x, y, n).loss;
                if n != self.mean_batch {
                    // Its share of the global batch: every sample weighs 1 / B after the
                    // mode's 1 / W average.
                    let weight = n as f32 / self.mean_batch as f32;
                    let len = net.num_params();
                    let (be, _, grads) = net.optimizer_buffers();
                    be.scale(grads, len, weight);
                }
                loss
            }
            (
                Feed::Text {
                    stream: pairs,
                    batch,
                },
                Model::Text(net),
                Corpus::Text(text),
            ) => {
                net.set_stream(stream);
                let step = pairs.served();
                batch.refill(&text.train, pairs.next_batch());
                match net.forward_backward(batch, step) {
                    Ok(stats) => stats.loss,
                    Err(e) => {
                        log::error!("training step {step}: {e}");
                        f32::NAN
                    }
                }
            }
            _ => unreachable!("Shard::new pairs the feed with its corpus and model"),
        }
    }

    /// Batches this worker has computed (over all epochs).
    pub fn batches(&self) -> u64 {
        match &self.feed {
            Feed::Images { sampler, .. } => sampler.served(),
            Feed::Text { stream, .. } => stream.served(),
        }
    }

    /// Continues as if `batches` batches had been computed: the sampler and the
    /// augmentation follow the batch count, and the dropout masks and teacher forcing with
    /// it ([`Shard::compute`] hands the count to the model).
    pub fn resume_at(&mut self, batches: u64) {
        match &mut self.feed {
            Feed::Images { sampler, .. } => sampler.skip_to(batches),
            Feed::Text { stream, .. } => stream.skip_to(batches),
        }
    }

    /// Fractional epochs of this shard consumed so far.
    pub fn epoch(&self) -> f64 {
        match &self.feed {
            Feed::Images { sampler, .. } => sampler.epoch_progress(),
            Feed::Text { stream, .. } => stream.epoch_progress(),
        }
    }

    /// Samples per batch (images, or sentence pairs: the last batch of a text epoch may
    /// hold fewer).
    pub fn batch(&self) -> usize {
        self.batch
    }
}

/// Shard `shard` of `shards`; with batches in proportion to speed, the shared order with the
/// worker's slice of an equal cut (until [`ComputeStep::set_share`] re-cuts it).
fn image_sampler(cfg: &Config, n: usize, shards: usize, shard: usize) -> Result<ShardSampler> {
    let mean = cfg.optim.batch_size;
    if cfg.sync.balance.is_balanced() {
        let part = shard * mean..(shard + 1) * mean;
        return Ok(ShardSampler::shared(n, shards * mean, cfg.run.seed, part)?);
    }
    Ok(ShardSampler::new(
        n,
        shards,
        shard,
        cfg.optim.batch_size,
        cfg.run.seed,
    )?)
}

fn text_stream(
    cfg: &Config,
    pairs: &EncodedPairs,
    shards: usize,
    shard: usize,
) -> Result<BucketStream> {
    Ok(BucketStream::new(
        pairs,
        shards,
        shard,
        cfg.optim.batch_size,
        cfg.run.seed,
    )?)
}

/// The training-set indices (images, or sentence pairs) of every batch a single-process
/// run of `cfg` trains on in its first `epochs` epochs, in order: what `gssp batches`
/// writes, so that another framework can train on the very same sequence. Augmentation,
/// where configured, is not part of it.
pub fn batch_order(cfg: &Config, corpus: &Corpus, epochs: f64) -> Result<Vec<Vec<usize>>> {
    let mut order = Vec::new();
    match corpus {
        Corpus::Images { train, .. } => {
            let mut sampler = image_sampler(cfg, train.len(), 1, 0)?;
            while sampler.epoch_progress() < epochs {
                order.push(sampler.next_batch().to_vec());
            }
        }
        Corpus::Text(text) => {
            let mut stream = text_stream(cfg, &text.train, 1, 0)?;
            while stream.epoch_progress() < epochs {
                order.push(stream.next_batch().to_vec());
            }
        }
    }
    Ok(order)
}
