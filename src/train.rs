//! Training in one process (`sync.mode = "single"`), and the pieces every mode shares:
//! the compute step a worker runs and test-set evaluation.

use std::time::Instant;

use anyhow::{Context, Result};

use crate::backend::cpu::Cpu;
use crate::checkpoint::{self, RankMeta, Resume, Schedule};
use crate::config::{Augment, Config};
use crate::data::augment::Augmenter;
use crate::data::sampler::ShardSampler;
use crate::data::Dataset;
use crate::hetero::Pacer;
use crate::metrics::{CsvLog, EvalRow, RunDir, RunTotals, Summary, WorkerRow};
use crate::model::{self, Network};
use crate::optim::{self, NetworkOptimizer};

/// A worker's data pipeline and model: fills a batch from its shard and computes the
/// gradient into the network's gradient buffer. Buffers are allocated once.
pub struct ComputeStep {
    pub net: Network<Cpu>,
    sampler: ShardSampler,
    /// `data.augment`: this worker's crop and flip stream; `None` trains on the images as
    /// they are.
    augmenter: Option<Augmenter>,
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
        let augmenter = match cfg.data.augment {
            Augment::None => None,
            Augment::CropFlip => Some(Augmenter::new(cfg.run.seed, shard)),
        };
        Ok(ComputeStep {
            augmenter,
            x: vec![0.0; batch * net.input_len()],
            y: vec![0; batch],
            net,
            sampler,
            batch,
        })
    }

    /// One forward/backward pass on the next batch; returns the batch loss.
    pub fn compute(&mut self, train: &Dataset) -> f32 {
        let batch = self.sampler.served();
        let idx = self.sampler.next_batch();
        match &mut self.augmenter {
            Some(aug) => {
                aug.start_batch(batch);
                aug.fill_batch(train, idx, &mut self.x, &mut self.y);
            }
            None => train.fill_batch(idx, &mut self.x, &mut self.y),
        }
        self.net.forward_backward(&self.x, &self.y, self.batch).loss
    }

    /// [`ComputeStep::compute`], then the pad of the emulated slowdown. Returns the batch
    /// loss and the seconds both took.
    pub fn compute_paced(&mut self, train: &Dataset, pacer: &mut Pacer) -> (f32, f64) {
        let t0 = Instant::now();
        let loss = self.compute(train);
        pacer.sleep_pad(t0.elapsed().as_secs_f64());
        (loss, t0.elapsed().as_secs_f64())
    }

    /// Batches this worker has computed (over all epochs).
    pub fn batches(&self) -> u64 {
        self.sampler.served()
    }

    /// Continues as if `batches` batches had been computed: the sampler, the augmentation
    /// and the dropout masks all follow the batch count (resume from a checkpoint).
    pub fn resume_at(&mut self, batches: u64) {
        self.sampler.skip_to(batches);
        self.net.set_train_steps(batches);
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
pub fn build_model(cfg: &Config, data: &Dataset) -> Result<Network<Cpu>> {
    let shape = (data.channels, data.height, data.width);
    Ok(model::build(
        &cfg.model,
        shape,
        data.classes,
        model::workspace_batch(cfg.model.name, cfg.optim.batch_size),
        cfg.run.seed,
    )?)
}

/// Training images over which the distributed modes re-estimate batch-norm statistics
/// before each evaluation.
pub const BN_CALIBRATION_IMAGES: usize = 1024;

/// Re-estimates batch-norm running statistics for the weights a network holds, from a
/// fixed, seeded sample of training images (PyTorch's `swa_utils.update_bn`: a
/// cumulative average over the batches).
///
/// Why: the distributed modes evaluate weights no worker trained with, a server's replica
/// or the average of the group replicas, while each worker's running statistics belong to
/// its own weights; so batch-norm statistics do not travel with the weights in any mode
/// (the flat parameter buffer every mode sends stays trained values only), and the
/// evaluating rank computes them for the weights it evaluates. The single-process mode
/// evaluates its own weights with the statistics it trained, as PyTorch does.
pub struct BnCalibration {
    batches: Vec<Vec<usize>>,
    x: Vec<f32>,
    y: Vec<u8>,
}

impl BnCalibration {
    pub fn new(train: &Dataset, batch: usize, seed: u64) -> BnCalibration {
        use rand::seq::SliceRandom;
        use rand::SeedableRng;
        let mut order: Vec<usize> = (0..train.len()).collect();
        order.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0xB4));
        order.truncate(BN_CALIBRATION_IMAGES.min(train.len()));
        let batch = batch.max(1);
        BnCalibration {
            batches: order.chunks(batch).map(<[usize]>::to_vec).collect(),
            x: vec![0.0; batch * train.sample_len()],
            y: vec![0; batch],
        }
    }

    /// Replaces `net`'s running statistics with those of the sample under its weights.
    pub fn run(&mut self, net: &mut Network<Cpu>, train: &Dataset) {
        for (k, idx) in self.batches.iter().enumerate() {
            let len = idx.len() * train.sample_len();
            train.fill_batch(idx, &mut self.x[..len], &mut self.y[..idx.len()]);
            net.calibrate_batch(&self.x[..len], idx.len(), k);
        }
    }
}

/// Test-set evaluation with its own buffers, reused across calls.
pub struct Evaluator {
    indices: Vec<usize>,
    x: Vec<f32>,
    y: Vec<u8>,
    calibration: Option<BnCalibration>,
}

impl Evaluator {
    pub fn new(test: &Dataset, max_batch: usize) -> Evaluator {
        Evaluator {
            indices: (0..test.len()).collect(),
            x: vec![0.0; max_batch * test.sample_len()],
            y: vec![0; max_batch],
            calibration: None,
        }
    }

    /// An evaluator that first re-estimates batch-norm statistics (see
    /// [`BnCalibration`]); the same as [`Evaluator::new`] for a network without them.
    pub fn with_bn_calibration(
        test: &Dataset,
        net: &Network<Cpu>,
        train: &Dataset,
        seed: u64,
    ) -> Evaluator {
        let mut ev = Evaluator::new(test, net.max_batch());
        if net.has_state() {
            ev.calibration = Some(BnCalibration::new(train, net.max_batch(), seed));
        }
        ev
    }

    /// Mean loss and accuracy of `net` on the whole test set (its batch-norm statistics
    /// re-estimated first where the evaluator was built so). `train` feeds the
    /// re-estimation.
    pub fn evaluate_calibrated(
        &mut self,
        net: &mut Network<Cpu>,
        train: &Dataset,
        test: &Dataset,
    ) -> (f64, f64) {
        if let Some(c) = &mut self.calibration {
            c.run(net, train);
        }
        self.evaluate(net, test)
    }

    /// Mean loss and accuracy of `net` on the whole test set.
    pub fn evaluate(&mut self, net: &mut Network<Cpu>, test: &Dataset) -> (f64, f64) {
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

/// How far the run is: the larger of the epochs done over `run.epochs` and the seconds
/// spent over `run.time_budget_s` (of the limits that are set), so 1 where it stops. The
/// cosine schedule follows it, so a time-budget run ends at learning rate 0 as well.
pub fn run_progress(cfg: &Config, epoch: f64, elapsed_s: f64) -> f64 {
    let share = |done: f64, limit: f64| if limit > 0.0 { done / limit } else { 0.0 };
    share(epoch, cfg.run.epochs).max(share(elapsed_s, cfg.run.time_budget_s))
}

/// Whether a run with `epochs` / `budget_s` limits (0 = none) should stop.
pub fn should_stop(cfg: &Config, epoch: f64, elapsed_s: f64) -> bool {
    (cfg.run.epochs > 0.0 && epoch >= cfg.run.epochs)
        || (cfg.run.time_budget_s > 0.0 && elapsed_s >= cfg.run.time_budget_s)
}

/// Trains in this process alone and writes the run directory; continues from `resume`'s
/// checkpoint when given.
pub fn run_single(cfg: &Config, run: &RunDir, resume: Option<&Resume>) -> Result<Summary> {
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
    let mut optimizer = NetworkOptimizer::new(&step.net, &cfg.optim);
    let mut evaluator = Evaluator::new(&test, step.net.max_batch());
    let mut log = run.worker_log(0, cfg.run.log_every)?;
    let mut eval_log = run.csv::<EvalRow>("eval.csv")?;

    // The training clock excludes evaluation and checkpoints, so throughput and
    // time-to-accuracy measure training alone.
    let (mut train_s, mut iteration, mut evals) = match resume {
        Some(r) => restore_single(r, &mut step, &mut optimizer)?,
        None => (0.0, 0, Vec::new()),
    };
    for row in &evals {
        eval_log.push(row)?;
    }
    let every = cfg.run.eval_every_epochs;
    let mut next_eval = if every > 0.0 {
        ((step.epoch() / every + 1e-9).floor() + 1.0) * every
    } else {
        0.0
    };
    let mut checkpoints = Schedule::new(
        cfg.run.checkpoint_every_s,
        train_s,
        resume.map_or(0, |r| r.manifest.sequence),
    );
    let mut shown = crate::progress::Progress::new(cfg, train.len(), true);
    while !should_stop(cfg, step.epoch(), train_s) {
        let t0 = Instant::now();
        let progress = run_progress(cfg, step.epoch(), train_s);
        let lr = optim::lr_at(&cfg.optim, step.epoch(), progress);
        let loss = step.compute(&train);
        if !loss.is_finite() {
            anyhow::bail!("training diverged: loss is {loss} at iteration {iteration}; lower optim.lr (now {})", cfg.optim.lr);
        }
        let compute_s = t0.elapsed().as_secs_f64();
        optimizer
            .step(&mut step.net, lr, 1.0)
            .map_err(|e| anyhow::anyhow!("iteration {}: {e}", iteration + 1))?;
        train_s += t0.elapsed().as_secs_f64();
        iteration += 1;
        log.record(&WorkerRow {
            time_s: train_s,
            epoch: step.epoch(),
            iteration,
            compute_s,
            loss,
            lr: Some(lr),
            ..Default::default()
        })?;
        shown.tick(step.epoch(), train_s, loss);
        if checkpoints.due(train_s) {
            log.flush()?;
            save_single(
                cfg,
                run,
                &checkpoints,
                &step,
                &optimizer,
                (train_s, iteration),
                &evals,
            )?;
            checkpoints.taken(train_s);
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
    shown.finish();
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
    log.flush()?;
    eval_log.flush()?;
    export_model(cfg, run, &step.net)?;
    save_single(
        cfg,
        run,
        &checkpoints,
        &step,
        &optimizer,
        (train_s, iteration),
        &evals,
    )?;

    let totals = RunTotals {
        ranks: 1,
        workers: 1,
        epochs: step.epoch(),
        iterations: iteration,
        wall_s: train_s,
    };
    let summary = Summary::new(cfg, step.net.name(), totals, &evals);
    run.write_json("summary.json", &summary)
        .context("summary")?;
    Ok(summary)
}

/// Writes checkpoint `schedule.sequence` of a single-process run: weights, batch-norm
/// statistics, the optimizer's state, iteration (the sampler's position and every random stream follow
/// it), training clock and the evaluations so far.
fn save_single(
    cfg: &Config,
    run: &RunDir,
    schedule: &Schedule,
    step: &ComputeStep,
    optimizer: &NetworkOptimizer<Cpu>,
    (time_s, iteration): (f64, u64),
    evals: &[EvalRow],
) -> Result<()> {
    let net = &step.net;
    let (state, optimizer_steps) = optimizer.state_to_host(net);
    let meta = RankMeta {
        time_s,
        epoch: step.epoch(),
        steps: iteration,
        evals: evals.to_vec(),
        optimizer_steps,
        ..Default::default()
    };
    let mut tensors = vec![
        (checkpoint::WEIGHTS, net.params()),
        (checkpoint::STATE, net.state()),
    ];
    tensors.extend(state.iter().map(|(name, v)| (*name, v.as_slice())));
    let dir = checkpoint::store::checkpoint_dir(run.path(), schedule.sequence);
    let entry = checkpoint::store::write_rank_file(&dir, 0, &tensors, &meta)?;
    let at = (time_s, step.epoch());
    let manifest = checkpoint::manifest(cfg, schedule.sequence, at, 1, None, vec![entry]);
    checkpoint::store::commit(run.path(), &manifest)?;
    log::debug!("checkpoint {} at {time_s:.1} s", dir.display());
    Ok(())
}

/// Loads a single-process run's checkpoint into `step` and `sgd`; returns its training
/// clock, iteration and evaluations.
fn restore_single(
    resume: &Resume,
    step: &mut ComputeStep,
    optimizer: &mut NetworkOptimizer<Cpu>,
) -> Result<(f64, u64, Vec<EvalRow>)> {
    let path = resume.path(0);
    let mut file = resume.load(0)?;
    let n = step.net.num_params();
    step.net
        .params_mut()
        .copy_from_slice(&file.take(checkpoint::WEIGHTS, n, &path)?);
    let state = file.take(checkpoint::STATE, step.net.num_state(), &path)?;
    step.net.state_from_host(&state);
    let steps = file.meta.optimizer_steps;
    optimizer.state_from_host(&step.net, steps, |name| file.take(name, n, &path))?;
    step.resume_at(file.meta.steps);
    Ok((file.meta.time_s, file.meta.steps, file.meta.evals))
}

/// Writes the model a run evaluated last to `model.safetensors` in the run directory
/// (see [`model::export`]): its weights and the batch-norm statistics it was evaluated
/// with, so that `gssp eval` of the file gives the run's final test accuracy.
pub fn export_model(cfg: &Config, run: &RunDir, net: &Network<Cpu>) -> Result<()> {
    let path = run.file(model::export::MODEL_FILE);
    model::export::save(net, &model::export::metadata(cfg, net), &path)?;
    log::info!("model: {}", path.display());
    Ok(())
}

/// What `gssp eval` found.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ExportedEval {
    pub model_file: String,
    pub model: String,
    pub dataset: String,
    pub test_samples: usize,
    pub test_loss: f64,
    pub test_accuracy: f64,
    /// The file's header metadata (gssp version, width, ...); empty for a file without.
    pub metadata: std::collections::BTreeMap<String, String>,
}

/// Evaluates the exported model in `path` on the test set of `cfg`, in this process:
/// the model `cfg` describes is built, the file's tensors replace its weights and
/// batch-norm statistics (after the file's metadata is checked against `cfg`), and the
/// test set is evaluated as a run's final evaluation does (same batch size, no
/// re-calibration: the file holds the statistics the run evaluated with).
pub fn evaluate_exported(cfg: &Config, path: &std::path::Path) -> Result<ExportedEval> {
    crate::backend::select(cfg.device.kind)?;
    crate::backend::cpu::set_threads(cfg.run.threads);
    let test = crate::data::load_test(&cfg.data, cfg.run.seed)?;
    let mut net = build_model(cfg, &test)?;
    let expected = model::export::metadata(cfg, &net);
    let metadata = model::export::load_into(&mut net, &expected, path)?;
    let (test_loss, test_accuracy) =
        Evaluator::new(&test, net.max_batch()).evaluate(&mut net, &test);
    Ok(ExportedEval {
        model_file: path.display().to_string(),
        model: net.name().to_string(),
        dataset: cfg.data.dataset.to_string(),
        test_samples: test.len(),
        test_loss,
        test_accuracy,
        metadata,
    })
}

/// Evaluates `net` on the test set at (time, epoch, iteration), logs and keeps the row.
fn record_eval(
    ev: &mut Evaluator,
    net: &mut Network<Cpu>,
    test: &Dataset,
    (time_s, epoch, iteration): (f64, f64, u64),
    eval_log: &mut CsvLog<EvalRow>,
    evals: &mut Vec<EvalRow>,
) -> Result<()> {
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
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(epochs: f64, budget_s: f64) -> Config {
        let mut c = Config::from_str_with_overrides(
            "[data]\ndataset = \"synthetic\"\n[model]\nname = \"mlp\"\n",
            "test.toml",
            &[],
        )
        .expect("a valid config");
        (c.run.epochs, c.run.time_budget_s) = (epochs, budget_s);
        c
    }

    #[test]
    fn progress_follows_whichever_limit_ends_the_run() {
        assert_eq!(run_progress(&cfg(2.0, 0.0), 0.5, 100.0), 0.25);
        assert_eq!(run_progress(&cfg(0.0, 40.0), 5.0, 10.0), 0.25);
        assert_eq!(run_progress(&cfg(2.0, 40.0), 0.5, 30.0), 0.75);
        assert_eq!(run_progress(&cfg(2.0, 40.0), 1.5, 10.0), 0.75);
        let c = cfg(2.0, 40.0);
        assert!(!should_stop(&c, 1.99, 39.0) && run_progress(&c, 1.99, 39.0) < 1.0);
        assert!(should_stop(&c, 2.0, 1.0) && run_progress(&c, 2.0, 1.0) >= 1.0);
    }
}
