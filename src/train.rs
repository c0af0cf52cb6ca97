//! Training in one process (`sync.mode = "single"`), and the pieces every mode shares:
//! the compute step a worker runs and test-set evaluation.

use std::time::Instant;

use anyhow::{Context, Result};

use crate::config::{Config, SyncMode};
use crate::data::sampler::ShardSampler;
use crate::data::Dataset;
use crate::metrics::{self, EvalRow, RunDir, Summary, WorkerRow};
use crate::model::{self, Network};
use crate::optim::{self, Sgd};

/// A worker's data pipeline and model: fills a batch from its shard and computes the
/// gradient into the network's gradient buffer. Buffers are allocated once.
pub struct ComputeStep {
    pub net: Network,
    sampler: ShardSampler,
    x: Vec<f32>,
    y: Vec<u8>,
    batch: usize,
}

impl ComputeStep {
    /// Builds the model for `train`'s sample shape and the sampler for shard `shard` of
    /// `shards`. Every rank builds the same initial weights from `seed`.
    pub fn new(cfg: &Config, train: &Dataset, shards: usize, shard: usize) -> Result<ComputeStep> {
        let batch = cfg.optim.batch_size;
        let net = build_model(cfg, train)?;
        let sampler = ShardSampler::new(train.len(), shards, shard, batch, cfg.run.seed)?;
        Ok(ComputeStep {
            x: vec![0.0; batch * net.input_len()],
            y: vec![0; batch],
            net,
            sampler,
            batch,
        })
    }

    /// One forward/backward pass on the next batch; returns the batch loss.
    pub fn compute(&mut self, train: &Dataset) -> f32 {
        let idx = self.sampler.next_batch();
        train.fill_batch(idx, &mut self.x, &mut self.y);
        self.net.forward_backward(&self.x, &self.y, self.batch).loss
    }

    /// Fractional epochs of this shard consumed so far.
    pub fn epoch(&self) -> f64 {
        self.sampler.epoch_progress()
    }

    pub fn batch(&self) -> usize {
        self.batch
    }
}

/// Builds the configured model for a dataset (identical weights on every rank).
pub fn build_model(cfg: &Config, data: &Dataset) -> Result<Network> {
    let shape = (data.channels, data.height, data.width);
    Ok(model::build(
        &cfg.model,
        shape,
        data.classes,
        cfg.optim.batch_size.max(256),
        cfg.run.seed,
    )?)
}

/// Test-set evaluation with its own buffers, reused across calls.
pub struct Evaluator {
    indices: Vec<usize>,
    x: Vec<f32>,
    y: Vec<u8>,
}

impl Evaluator {
    pub fn new(test: &Dataset, max_batch: usize) -> Evaluator {
        Evaluator {
            indices: (0..test.len()).collect(),
            x: vec![0.0; max_batch * test.sample_len()],
            y: vec![0; max_batch],
        }
    }

    /// Mean loss and accuracy of `net` on the whole test set.
    pub fn evaluate(&mut self, net: &mut Network, test: &Dataset) -> (f64, f64) {
        let b = net.max_batch();
        let (mut loss, mut correct) = (0.0f64, 0usize);
        for chunk in self.indices.chunks(b) {
            let n = chunk.len();
            test.fill_batch(
                chunk,
                &mut self.x[..n * test.sample_len()],
                &mut self.y[..n],
            );
            let s = net.evaluate_batch(&self.x[..n * test.sample_len()], &self.y[..n], n);
            loss += s.loss as f64 * n as f64;
            correct += s.correct;
        }
        let n = test.len().max(1) as f64;
        (loss / n, correct as f64 / n)
    }
}

/// Whether a run with `epochs` / `budget_s` limits (0 = none) should stop.
pub fn should_stop(cfg: &Config, epoch: f64, elapsed_s: f64) -> bool {
    (cfg.run.epochs > 0.0 && epoch >= cfg.run.epochs)
        || (cfg.run.time_budget_s > 0.0 && elapsed_s >= cfg.run.time_budget_s)
}

/// Trains in this process alone and writes the run directory.
pub fn run_single(cfg: &Config, run: &RunDir) -> Result<Summary> {
    crate::backend::select(cfg.device.kind)?;
    crate::backend::cpu::set_threads(cfg.run.threads);
    let (train, test) = crate::data::load(&cfg.data, cfg.run.seed)?;
    log::info!(
        "data: {} train / {} test samples of {}x{}x{} from {:?}",
        train.len(),
        test.len(),
        train.channels,
        train.height,
        train.width,
        cfg.data.dataset
    );
    let mut step = ComputeStep::new(cfg, &train, 1, 0)?;
    log::info!(
        "model {}: {} parameters",
        step.net.name(),
        step.net.num_params()
    );
    let mut sgd = Sgd::new(
        step.net.num_params(),
        cfg.optim.momentum,
        cfg.optim.weight_decay,
    );
    let mut evaluator = Evaluator::new(&test, step.net.max_batch());
    let mut log = run.csv::<WorkerRow>("rank-0.csv")?;
    let mut eval_log = run.csv::<EvalRow>("eval.csv")?;
    let mut evals = Vec::new();

    // The training clock excludes evaluation, so throughput and time-to-accuracy measure
    // training alone.
    let mut train_s = 0.0;
    let mut iteration = 0u64;
    let mut next_eval = cfg.run.eval_every_epochs;
    while !should_stop(cfg, step.epoch(), train_s) {
        let t0 = Instant::now();
        let lr = optim::lr_at(&cfg.optim, cfg.run.epochs, step.epoch());
        let loss = step.compute(&train);
        if !loss.is_finite() {
            anyhow::bail!("training diverged: loss is {loss} at iteration {iteration}; lower optim.lr (now {})", cfg.optim.lr);
        }
        let compute_s = t0.elapsed().as_secs_f64();
        let (params, grads) = step.net.params_and_grads_mut();
        sgd.step(params, grads, lr, 1.0, 1.0);
        train_s += t0.elapsed().as_secs_f64();
        iteration += 1;
        if iteration.is_multiple_of(cfg.run.log_every as u64) {
            log.push(&WorkerRow {
                time_s: train_s,
                epoch: step.epoch(),
                iteration,
                compute_s,
                loss,
                lr: Some(lr),
                ..Default::default()
            })?;
        }
        if cfg.run.eval_every_epochs > 0.0 && step.epoch() >= next_eval - 1e-9 {
            next_eval += cfg.run.eval_every_epochs;
            if !should_stop(cfg, step.epoch(), train_s) {
                let epoch = step.epoch();
                let at = (train_s, epoch, iteration);
                record_eval(
                    &mut evaluator,
                    &mut step.net,
                    &test,
                    at,
                    &mut eval_log,
                    &mut evals,
                )?;
            }
        }
    }
    let epoch = step.epoch();
    let at = (train_s, epoch, iteration);
    let row = record_eval(
        &mut evaluator,
        &mut step.net,
        &test,
        at,
        &mut eval_log,
        &mut evals,
    )?;
    log.flush()?;
    eval_log.flush()?;

    let summary = Summary {
        mode: SyncMode::Single.to_string(),
        model: step.net.name().into(),
        dataset: cfg.data.dataset.to_string(),
        ranks: 1,
        workers: 1,
        seed: cfg.run.seed,
        epochs: step.epoch(),
        iterations: iteration,
        wall_s: train_s,
        images_per_s: iteration as f64 * step.batch() as f64 / train_s.max(1e-9),
        final_test_loss: row.test_loss,
        final_test_accuracy: row.test_accuracy,
        target_accuracy: cfg.run.target_accuracy,
        time_to_target_s: metrics::time_to_target(&evals, cfg.run.target_accuracy),
        ..Default::default()
    };
    run.write_json("summary.json", &summary)
        .context("summary")?;
    Ok(summary)
}

/// Evaluates `net` on the test set at (time, epoch, iteration), logs and keeps the row.
fn record_eval(
    ev: &mut Evaluator,
    net: &mut Network,
    test: &Dataset,
    (time_s, epoch, iteration): (f64, f64, u64),
    eval_log: &mut crate::metrics::CsvLog<EvalRow>,
    evals: &mut Vec<EvalRow>,
) -> Result<EvalRow> {
    let (test_loss, test_accuracy) = ev.evaluate(net, test);
    log::info!(
        "epoch {epoch:.2} iteration {iteration}: test loss {test_loss:.4}, accuracy {:.2}%",
        100.0 * test_accuracy
    );
    let row = EvalRow {
        time_s,
        epoch,
        iteration,
        test_loss,
        test_accuracy,
    };
    eval_log.push(&row)?;
    evals.push(row);
    Ok(row)
}
