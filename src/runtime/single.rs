//! Training in one process (`sync.mode = "single"`), and the pieces every mode shares:
//! the learning-rate progress, the stopping rule, evaluation rows and model export.

use std::time::Instant;

use anyhow::{Context, Result};

use crate::checkpoint::{self, RankMeta, Resume, Schedule};
use crate::compute::backend::cpu::Cpu;
use crate::compute::backend::Backend;
use crate::compute::model;
use crate::compute::model::Trainable;
use crate::compute::optim::{self, NetworkOptimizer};
use crate::compute::workload::{ComputeStep, Corpus, Evaluation, Evaluator, Model};
use crate::config::Config;
use crate::telemetry::progress::Progress;
use crate::telemetry::{CsvLog, EvalRow, RunDir, RunTotals, Summary, WorkerLog, WorkerRow};

/// Trains in this process alone and writes the run directory; continues from `resume`'s
/// checkpoint when given.
pub fn run_single(cfg: &Config, run: &RunDir, resume: Option<&Resume>) -> Result<Summary> {
    match crate::compute::backend::select(cfg.device.kind)? {
        crate::compute::backend::Device::Cpu => run_single_on(Cpu, cfg, run, resume),
        #[cfg(feature = "cuda")]
        crate::compute::backend::Device::Cuda(gpu) => {
            let cuda = crate::compute::backend::cuda::Cuda::new(gpu)?;
            log::info!("device: {}", cuda.describe());
            run_single_on(cuda, cfg, run, resume)
        }
    }
}

/// [`run_single`] on the backend `be`.
fn run_single_on<B: Backend>(
    be: B,
    cfg: &Config,
    run: &RunDir,
    resume: Option<&Resume>,
) -> Result<Summary> {
    crate::compute::backend::cpu::set_threads(cfg.run.threads);
    let corpus = Corpus::load(&cfg.data, cfg.run.seed)?;
    log::info!("data: {} from {}", corpus.describe(), cfg.data.dataset);
    corpus.save_to(run.path())?;
    let step = ComputeStep::new_on(be, cfg, &corpus, 1, 0)?;
    log::info!(
        "model {}: {} parameters",
        step.net.name(),
        step.net.num_params()
    );
    let mut single = Single::new(cfg, run, &corpus, step, resume)?;
    let mut shown = Progress::new(cfg, corpus.train_len(), true);
    while !cfg.run.should_stop(single.step.epoch(), single.train_s) {
        let loss = single.train_one()?;
        shown.tick(single.step.epoch(), single.train_s, loss);
        single.checkpoint_if_due()?;
        single.evaluate_if_due()?;
    }
    shown.finish();
    single.finish()
}

/// One process's training: its step, optimizer and evaluator, its logs, and where it is.
struct Single<'a, B: Backend> {
    cfg: &'a Config,
    run: &'a RunDir,
    corpus: &'a Corpus,
    step: ComputeStep<B>,
    optimizer: NetworkOptimizer<B>,
    evaluator: Evaluator,
    log: WorkerLog,
    eval_log: CsvLog<EvalRow>,
    /// The training clock: it excludes evaluation and checkpoints, so throughput and
    /// time-to-accuracy measure training alone.
    train_s: f64,
    iteration: u64,
    evals: Vec<EvalRow>,
    /// The epoch of the next evaluation (`run.eval_every_epochs`).
    next_eval: f64,
    checkpoints: Schedule,
}

impl<'a, B: Backend> Single<'a, B> {
    /// A fresh run, or one continued from `resume`.
    fn new(
        cfg: &'a Config,
        run: &'a RunDir,
        corpus: &'a Corpus,
        mut step: ComputeStep<B>,
        resume: Option<&Resume>,
    ) -> Result<Self> {
        let mut optimizer = NetworkOptimizer::new(&step.net, &cfg.optim);
        let evaluator = Evaluator::new(corpus, &step.net);
        let (train_s, iteration, evals) = match resume {
            Some(r) => restore_single(r, &mut step, &mut optimizer)?,
            None => (0.0, 0, Vec::new()),
        };
        let mut eval_log = run.csv::<EvalRow>("eval.csv")?;
        for row in &evals {
            eval_log.push(row)?;
        }
        let every = cfg.run.eval_every_epochs;
        let next_eval = if every > 0.0 {
            ((step.epoch() / every + 1e-9).floor() + 1.0) * every
        } else {
            0.0
        };
        let sequence = resume.map_or(0, |r| r.manifest.sequence);
        Ok(Single {
            cfg,
            run,
            corpus,
            optimizer,
            evaluator,
            log: run.worker_log(0, cfg.run.log_every)?,
            eval_log,
            train_s,
            iteration,
            evals,
            next_eval,
            checkpoints: Schedule::new(cfg.run.checkpoint_every_s, train_s, sequence),
            step,
        })
    }

    /// One training iteration: gradient, optimizer step, log row; returns its loss.
    fn train_one(&mut self) -> Result<f32> {
        let cfg = self.cfg;
        let t0 = Instant::now();
        let progress = cfg.run.progress(self.step.epoch(), self.train_s);
        let lr = optim::lr_at(&cfg.optim, self.step.epoch(), progress);
        let loss = self.step.compute(self.corpus)?;
        if !loss.is_finite() {
            anyhow::bail!(
                "training diverged: loss is {loss} at iteration {}; lower optim.lr (now {})",
                self.iteration,
                cfg.optim.lr
            );
        }
        let compute_s = t0.elapsed().as_secs_f64();
        self.optimizer
            .step(&mut self.step.net, lr, 1.0)
            .map_err(|e| anyhow::anyhow!("iteration {}: {e}", self.iteration + 1))?;
        self.train_s += t0.elapsed().as_secs_f64();
        self.iteration += 1;
        self.log.record(&WorkerRow {
            time_s: self.train_s,
            epoch: self.step.epoch(),
            iteration: self.iteration,
            compute_s,
            loss,
            lr: Some(lr),
            batch: self.step.batch(),
            ..Default::default()
        })?;
        Ok(loss)
    }

    fn save(&self) -> Result<()> {
        let at = (self.train_s, self.iteration);
        let (step, optimizer) = (&self.step, &self.optimizer);
        save_single(
            self.cfg,
            self.run,
            &self.checkpoints,
            step,
            optimizer,
            at,
            &self.evals,
        )
    }

    fn checkpoint_if_due(&mut self) -> Result<()> {
        if self.checkpoints.due(self.train_s) {
            self.log.flush()?;
            self.save()?;
            self.checkpoints.taken(self.train_s);
        }
        Ok(())
    }

    /// Evaluates every `run.eval_every_epochs` (not at the end: [`Single::finish`] does).
    fn evaluate_if_due(&mut self) -> Result<()> {
        let every = self.cfg.run.eval_every_epochs;
        if every <= 0.0 || self.step.epoch() < self.next_eval - 1e-9 {
            return Ok(());
        }
        self.next_eval += every;
        if !self.cfg.run.should_stop(self.step.epoch(), self.train_s) {
            let ev = self.evaluator.evaluate(&mut self.step.net, self.corpus)?;
            let row = ev.row(self.train_s, self.step.epoch(), self.iteration);
            record_eval(&row, &mut self.eval_log, &mut self.evals)?;
        }
        Ok(())
    }

    /// The final evaluation, translations, export and checkpoint, and the summary.
    fn finish(mut self) -> Result<Summary> {
        let ev = self
            .evaluator
            .evaluate_final(&mut self.step.net, self.corpus)?;
        let row = ev.row(self.train_s, self.step.epoch(), self.iteration);
        record_eval(&row, &mut self.eval_log, &mut self.evals)?;
        write_translations(self.run, &ev)?;
        self.log.flush()?;
        self.eval_log.flush()?;
        export_model(self.cfg, self.run, &self.step.net)?;
        self.save()?;
        let totals = RunTotals {
            ranks: 1,
            workers: 1,
            epochs: self.step.epoch(),
            iterations: self.iteration,
            wall_s: self.train_s,
        };
        let summary = Summary::new(self.cfg, self.step.net.name(), totals, &self.evals);
        self.run
            .write_json("summary.json", &summary)
            .context("summary")?;
        Ok(summary)
    }
}

/// Writes checkpoint `schedule.sequence` of a single-process run: weights, batch-norm
/// statistics, the optimizer's state, iteration (the sampler's position and every random stream follow
/// it), training clock and the evaluations so far.
fn save_single<B: Backend>(
    cfg: &Config,
    run: &RunDir,
    schedule: &Schedule,
    step: &ComputeStep<B>,
    optimizer: &NetworkOptimizer<B>,
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
    let mut weights = vec![0.0; net.num_params()];
    net.params_to_host(&mut weights);
    let mut stats = vec![0.0; net.num_state()];
    net.state_to_host(&mut stats);
    let mut tensors = vec![
        (checkpoint::WEIGHTS, weights.as_slice()),
        (checkpoint::STATE, stats.as_slice()),
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
fn restore_single<B: Backend>(
    resume: &Resume,
    step: &mut ComputeStep<B>,
    optimizer: &mut NetworkOptimizer<B>,
) -> Result<(f64, u64, Vec<EvalRow>)> {
    let path = resume.path(0);
    let mut file = resume.load(0)?;
    let n = step.net.num_params();
    step.net
        .params_from_host(&file.take(checkpoint::WEIGHTS, n, &path)?);
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
pub fn export_model<B: Backend>(cfg: &Config, run: &RunDir, net: &Model<B>) -> Result<()> {
    let path = run.file(model::export::MODEL_FILE);
    model::export::save::<B>(net, &model::export::metadata(cfg, net), &path)?;
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
    /// Text: perplexity on test2016 (`test_loss` is per token, `test_accuracy` of the
    /// next token).
    pub test_perplexity: Option<f64>,
    /// Text: corpus BLEU-4 of the model's greedy translations of test2016.
    pub bleu: Option<f64>,
    /// The file's header metadata (gssp version, width, ...); empty for a file without.
    pub metadata: std::collections::BTreeMap<String, String>,
}

/// Evaluates the exported model in `path` on the test set of `cfg`, in this process:
/// the model `cfg` describes is built, the file's tensors replace its weights and
/// batch-norm statistics (after the file's metadata is checked against `cfg`), and the
/// test set is evaluated as a run's final evaluation does (same batch size, no
/// re-calibration: the file holds the statistics the run evaluated with; a translation
/// model also translates test2016 for BLEU).
pub fn evaluate_exported(cfg: &Config, path: &std::path::Path) -> Result<ExportedEval> {
    crate::compute::backend::cpu::set_threads(cfg.run.threads);
    let corpus = Corpus::load_for_eval(&cfg.data, cfg.run.seed)?;
    let mut net = Model::build(cfg, &corpus, 0)?;
    let expected = model::export::metadata::<Cpu>(cfg, &net);
    let metadata = model::export::load_into::<Cpu>(&mut net, &expected, path)?;
    let ev = Evaluator::new(&corpus, &net).evaluate_final(&mut net, &corpus)?;
    Ok(ExportedEval {
        model_file: path.display().to_string(),
        model: net.name().to_string(),
        dataset: cfg.data.dataset.to_string(),
        test_samples: corpus.test_len(),
        test_loss: ev.loss,
        test_accuracy: ev.accuracy,
        test_perplexity: ev.val_perplexity.map(|_| ev.loss.exp()),
        bleu: ev.bleu,
        metadata,
    })
}

/// An evaluation's figures for the log: loss and accuracy, and a text run's perplexities
/// and BLEU where the row has them.
pub fn eval_figures(row: &EvalRow) -> String {
    let mut s = format!(
        "test loss {:.4}, accuracy {:.2}%",
        row.test_loss,
        100.0 * row.test_accuracy
    );
    if let (Some(t), Some(v)) = (row.test_perplexity, row.val_perplexity) {
        s += &format!(", perplexity {t:.2} (val {v:.2})");
    }
    if let Some(b) = row.bleu {
        s += &format!(", BLEU {b:.2}");
    }
    s
}

/// Logs an evaluation and keeps its row.
fn record_eval(
    row: &EvalRow,
    eval_log: &mut CsvLog<EvalRow>,
    evals: &mut Vec<EvalRow>,
) -> Result<()> {
    log::info!(
        "epoch {:.2} iteration {}: {}",
        row.epoch,
        row.iteration,
        eval_figures(row)
    );
    eval_log.push(row)?;
    evals.push(*row);
    Ok(())
}

/// File of a text run's greedy translations of test2016, one per line, in file order.
pub const TRANSLATIONS_FILE: &str = "translations.test2016.en";

/// Writes a final evaluation's translations (text runs) into the run directory.
pub fn write_translations(run: &RunDir, ev: &Evaluation) -> Result<()> {
    if let Some(lines) = &ev.translations {
        let mut text = lines.join("\n");
        text.push('\n');
        let path = run.file(TRANSLATIONS_FILE);
        crate::telemetry::files::write_atomic(&path, text.as_bytes())
            .with_context(|| format!("{}", path.display()))?;
        log::info!("translations: {}", path.display());
    }
    Ok(())
}
