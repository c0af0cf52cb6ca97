//! What a run leaves behind: the run directory, per-rank CSV logs and `summary.json`.
//!
//! CSV files have a header row and plain numbers (pandas' `read_csv` reads them as is);
//! rows are formatted straight into a buffered file, so logging allocates nothing.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;

use crate::config::Config;

/// CPU seconds this thread has run (`CLOCK_THREAD_CPUTIME_ID`): busy time without the
/// time the OS gave other processes meanwhile (many ranks share few cores in tests and
/// benchmarks). NaN if the clock is unavailable.
pub fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer; the clock id is a constant.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return f64::NAN;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// The run directory (`runs/<name>` unless `--out` says otherwise).
#[derive(Debug, Clone)]
pub struct RunDir {
    path: PathBuf,
    /// A resumed run: the checkpoint's training clock; the per-rank logs keep their rows
    /// up to it and continue after them.
    resumed_at_s: Option<f64>,
}

impl RunDir {
    pub fn create(path: &Path) -> Result<RunDir> {
        std::fs::create_dir_all(path)
            .with_context(|| format!("cannot create run directory {}", path.display()))?;
        Ok(RunDir {
            path: path.to_path_buf(),
            resumed_at_s: None,
        })
    }

    /// The existing run directory `path`, resumed from a checkpoint taken at `time_s`.
    pub fn resume(path: &Path, time_s: f64) -> Result<RunDir> {
        let mut run = RunDir::create(path)?;
        run.resumed_at_s = Some(time_s);
        Ok(run)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A per-rank log (`rank-<r>.csv`): a new file, or in a resumed run the existing one
    /// cut to its rows up to the checkpoint's time and continued.
    pub fn csv_continued<R: CsvRow>(&self, name: &str) -> Result<CsvLog<R>> {
        let p = self.file(name);
        let Some(until) = self.resumed_at_s else {
            return self.csv(name);
        };
        let text = match std::fs::read_to_string(&p) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return self.csv(name),
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", p.display())),
        };
        let kept = rows_until(&text, R::HEADER, until)
            .with_context(|| format!("cannot continue {}", p.display()))?;
        std::fs::write(&p, kept).with_context(|| format!("cannot write {}", p.display()))?;
        let f = std::fs::OpenOptions::new()
            .append(true)
            .open(&p)
            .with_context(|| format!("cannot open {}", p.display()))?;
        Ok(CsvLog::over(BufWriter::new(f), p))
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    pub fn write_text(&self, name: &str, text: &str) -> Result<()> {
        let p = self.file(name);
        std::fs::write(&p, text).with_context(|| format!("cannot write {}", p.display()))
    }

    pub fn write_json<T: Serialize>(&self, name: &str, value: &T) -> Result<()> {
        let text = serde_json::to_string_pretty(value).context("cannot serialise JSON")?;
        self.write_text(name, &(text + "\n"))
    }

    /// The per-iteration log of world rank `rank`, a row every `every` iterations.
    pub fn worker_log(&self, rank: usize, every: usize) -> Result<WorkerLog> {
        Ok(WorkerLog {
            csv: self.csv_continued(&format!("rank-{rank}.csv"))?,
            every: every as u64,
        })
    }

    pub fn csv<R: CsvRow>(&self, name: &str) -> Result<CsvLog<R>> {
        let p = self.file(name);
        let f = File::create(&p).with_context(|| format!("cannot create {}", p.display()))?;
        let mut w = BufWriter::new(f);
        writeln!(w, "{}", R::HEADER).with_context(|| format!("cannot write {}", p.display()))?;
        Ok(CsvLog::over(w, p))
    }
}

/// The lines of a CSV log `text` with header `header` whose `time_s` is at most `until`
/// (the header, and every row of a file without a `time_s` column, kept).
fn rows_until(text: &str, header: &str, until: f64) -> Result<String> {
    let mut lines = text.lines();
    let first = lines.next().unwrap_or_default();
    anyhow::ensure!(
        first == header,
        "its header is not this gssp's ({first:?}); move the file away to start it anew"
    );
    let column = header.split(',').position(|c| c == "time_s");
    // The rows print time with 6 decimals: a row at the checkpoint's time may read up to
    // half a microsecond later.
    let until = until + 1e-6;
    let mut out = String::with_capacity(text.len());
    out.push_str(header);
    out.push('\n');
    for line in lines {
        let time = column.and_then(|c| line.split(',').nth(c)?.parse::<f64>().ok());
        if time.is_none_or(|t| t <= until) && !line.is_empty() {
            out.push_str(line);
            out.push('\n');
        }
    }
    Ok(out)
}

/// One row type of a CSV file.
pub trait CsvRow {
    const HEADER: &'static str;
    fn write(&self, w: &mut dyn Write) -> std::io::Result<()>;
}

/// How often a CSV log reaches the file.
const FLUSH_EVERY: Duration = Duration::from_secs(1);

pub struct CsvLog<R> {
    w: BufWriter<File>,
    path: PathBuf,
    flushed: Instant,
    _row: std::marker::PhantomData<R>,
}

impl<R: CsvRow> CsvLog<R> {
    /// Rows go to `w`, the file at `path` (named in errors).
    fn over(w: BufWriter<File>, path: PathBuf) -> Self {
        CsvLog {
            w,
            path,
            flushed: Instant::now(),
            _row: std::marker::PhantomData,
        }
    }

    /// Appends `row`; the file is flushed at most a second after a row, so a job that dies
    /// loses at most its last second of rows.
    pub fn push(&mut self, row: &R) -> Result<()> {
        row.write(&mut self.w)
            .with_context(|| format!("cannot write {}", self.path.display()))?;
        if self.flushed.elapsed() >= FLUSH_EVERY {
            self.flush()?;
        }
        Ok(())
    }
    pub fn flush(&mut self) -> Result<()> {
        self.flushed = Instant::now();
        self.w
            .flush()
            .with_context(|| format!("cannot write {}", self.path.display()))
    }
}

/// The per-iteration log of a worker (or of the single process), `rank-<r>.csv`: one row
/// every `every` iterations.
pub struct WorkerLog {
    csv: CsvLog<WorkerRow>,
    every: u64,
}

impl WorkerLog {
    /// Logs `row` when its iteration is a multiple of `every` (`run.log_every`).
    pub fn record(&mut self, row: &WorkerRow) -> Result<()> {
        if row.iteration.is_multiple_of(self.every) {
            self.csv.push(row)?;
        }
        Ok(())
    }

    pub fn flush(&mut self) -> Result<()> {
        self.csv.flush()
    }
}

/// Per-iteration row of a worker (or of the single process).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct WorkerRow {
    pub time_s: f64,
    pub epoch: f64,
    pub iteration: u64,
    pub compute_s: f64,
    pub wait_s: f64,
    pub comm_s: f64,
    pub bytes_sent: u64,
    pub bytes_recv: u64,
    /// Server updates between the weights this gradient was computed on and its arrival.
    pub staleness: u64,
    pub loss: f32,
    /// Learning rate of the step, where this rank applies it (empty on PS workers: their
    /// server's rows carry it).
    pub lr: Option<f64>,
}

impl CsvRow for WorkerRow {
    const HEADER: &'static str =
        "time_s,epoch,iteration,compute_s,wait_s,comm_s,bytes_sent,bytes_recv,staleness,loss,lr";
    fn write(&self, w: &mut dyn Write) -> std::io::Result<()> {
        write!(
            w,
            "{:.6},{:.5},{},{:.6},{:.6},{:.6},{},{},{},{:.6},",
            self.time_s,
            self.epoch,
            self.iteration,
            self.compute_s,
            self.wait_s,
            self.comm_s,
            self.bytes_sent,
            self.bytes_recv,
            self.staleness,
            self.loss,
        )?;
        match self.lr {
            Some(lr) => writeln!(w, "{lr:.6e}"),
            None => writeln!(w),
        }
    }
}

/// Per-push row of a parameter server (or group server).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ServerRow {
    pub time_s: f64,
    pub epoch: f64,
    /// Pushes applied by this server so far.
    pub pushes: u64,
    /// Optimizer steps applied (the model version).
    pub version: u64,
    /// Index of the pushing worker within its group.
    pub worker: usize,
    pub staleness: u64,
    /// Max minus min worker clock after this push.
    pub clock_spread: u64,
    /// Seconds blocked waiting for this push to arrive.
    pub recv_wait_s: f64,
    /// Seconds copying it into the server's buffer (`MPI_Mrecv`).
    pub receive_s: f64,
    /// Seconds applying it (optimizer step or round accumulation).
    pub apply_s: f64,
    /// Seconds answering workers (copies into send buffers, Isend).
    pub send_s: f64,
    /// Seconds in the inter-group exchange (gssp), drain included.
    pub exchange_s: f64,
    pub loss: f32,
    pub lr: f64,
    /// Upload ratio used by the exchange after this push (gssp), else 0.
    pub ratio: f64,
}

impl CsvRow for ServerRow {
    const HEADER: &'static str = "time_s,epoch,pushes,version,worker,staleness,clock_spread,recv_wait_s,receive_s,apply_s,send_s,exchange_s,loss,lr,ratio";
    fn write(&self, w: &mut dyn Write) -> std::io::Result<()> {
        writeln!(
            w,
            "{:.6},{:.5},{},{},{},{},{},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6e},{:.6}",
            self.time_s,
            self.epoch,
            self.pushes,
            self.version,
            self.worker,
            self.staleness,
            self.clock_spread,
            self.recv_wait_s,
            self.receive_s,
            self.apply_s,
            self.send_s,
            self.exchange_s,
            self.loss,
            self.lr,
            self.ratio
        )
    }
}

/// Copies of the model taken at fixed wall-clock intervals during training and
/// evaluated afterwards, so evaluation never slows training down.
pub struct Snapshots {
    every_s: f64,
    next_s: f64,
    pub taken: Vec<(EvalRow, Vec<f32>)>,
}

impl Snapshots {
    /// `every_s == 0` takes none (only the final model is evaluated).
    pub fn new(every_s: f64) -> Snapshots {
        Snapshots {
            every_s,
            next_s: every_s,
            taken: Vec::new(),
        }
    }

    /// Continues from a checkpoint taken at `time_s` with the snapshots `taken`.
    pub fn resume(every_s: f64, time_s: f64, taken: Vec<(EvalRow, Vec<f32>)>) -> Snapshots {
        let mut s = Snapshots::new(every_s);
        while s.every_s > 0.0 && s.next_s <= time_s {
            s.next_s += s.every_s;
        }
        s.taken = taken;
        s
    }

    /// Whether [`Snapshots::maybe_take`] would take one at `time_s` (so that a model on a
    /// GPU is copied to the host only then).
    pub fn due(&self, time_s: f64) -> bool {
        self.every_s > 0.0 && time_s >= self.next_s
    }

    /// Takes a snapshot if `time_s` has passed the next interval boundary.
    pub fn maybe_take(&mut self, time_s: f64, epoch: f64, iteration: u64, weights: &[f32]) {
        if !self.due(time_s) {
            return;
        }
        while self.next_s <= time_s {
            self.next_s += self.every_s;
        }
        self.take(time_s, epoch, iteration, weights);
    }

    pub fn take(&mut self, time_s: f64, epoch: f64, iteration: u64, weights: &[f32]) {
        let row = EvalRow {
            time_s,
            epoch,
            iteration,
            ..Default::default()
        };
        self.taken.push((row, weights.to_vec()));
    }
}

/// One test-set evaluation. Image runs leave the text columns empty.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct EvalRow {
    pub time_s: f64,
    pub epoch: f64,
    pub iteration: u64,
    /// Mean cross-entropy: per image, or per target token on test2016.
    pub test_loss: f64,
    /// Accuracy: of the images, or of next-token predictions on test2016.
    pub test_accuracy: f64,
    /// Text: `exp(test_loss)`.
    #[serde(default)]
    pub test_perplexity: Option<f64>,
    /// Text: perplexity on val.
    #[serde(default)]
    pub val_perplexity: Option<f64>,
    /// Text, final evaluation: corpus BLEU-4 of the greedy translations of test2016.
    #[serde(default)]
    pub bleu: Option<f64>,
}

impl CsvRow for EvalRow {
    const HEADER: &'static str =
        "time_s,epoch,iteration,test_loss,test_accuracy,test_perplexity,val_perplexity,bleu";
    fn write(&self, w: &mut dyn Write) -> std::io::Result<()> {
        let opt = |v: Option<f64>| v.map_or_else(String::new, |v| format!("{v:.4}"));
        writeln!(
            w,
            "{:.6},{:.5},{},{:.6},{:.6},{},{},{}",
            self.time_s,
            self.epoch,
            self.iteration,
            self.test_loss,
            self.test_accuracy,
            opt(self.test_perplexity),
            opt(self.val_perplexity),
            opt(self.bleu)
        )
    }
}

/// First time an evaluation curve reaches `target` accuracy.
pub fn time_to_target(evals: &[EvalRow], target: f64) -> Option<f64> {
    evals
        .iter()
        .find(|e| e.test_accuracy >= target)
        .map(|e| e.time_s)
}

/// `summary.json`. Keys that do not apply to a mode are null.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    pub mode: String,
    pub model: String,
    pub dataset: String,
    pub ranks: usize,
    pub workers: usize,
    /// `run.seed` of the run.
    pub seed: u64,
    pub epochs: f64,
    pub iterations: u64,
    pub wall_s: f64,
    /// Training samples per second: images, or sentence pairs for text (counted as full
    /// batches: an epoch's last, smaller batch counts whole).
    pub images_per_s: f64,
    pub final_test_loss: f64,
    pub final_test_accuracy: f64,
    /// Text: the final model's perplexity on test2016 and on val, and the BLEU-4 of its
    /// greedy translations of test2016.
    pub final_test_perplexity: Option<f64>,
    pub final_val_perplexity: Option<f64>,
    pub final_bleu: Option<f64>,
    pub target_accuracy: f64,
    pub time_to_target_s: Option<f64>,
    pub mean_wait_fraction: Option<f64>,
    pub worker_wait_fractions: Option<Vec<f64>>,
    pub bytes_sent: Option<u64>,
    pub bytes_inter_group: Option<u64>,
    /// gssp: after the final flush, max |replica - initial - sum of all groups' sent updates|.
    pub replica_max_error: Option<f64>,
    /// gssp: exchanges (all servers) that sent nothing because a peer's mailbox was full.
    pub exchanges_deferred: Option<u64>,
    /// gssp: drains (all servers) between a server's own exchanges (`sync.drain_on_arrival`).
    pub arrival_drains: Option<u64>,
    /// Parameter-server modes, one per server (layout order): share of the run it was busy
    /// (receiving and applying pushes, answering workers, exchanging).
    pub server_busy_fractions: Option<Vec<f64>>,
    /// Parameter-server modes, one per server: milliseconds of busy time per applied push.
    pub server_busy_ms_per_push: Option<Vec<f64>>,
    /// Parameter-server modes: mean staleness of the applied pushes, all servers together.
    pub mean_push_staleness: Option<f64>,
    /// gssp, one per group server: share of its busy time spent in the inter-group exchange
    /// (top-k, sends, drain).
    pub exchange_shares_of_busy: Option<Vec<f64>>,
    /// The same share in thread CPU time (what the server computed, without the time the
    /// OS ran other processes in the middle of it).
    pub exchange_shares_of_busy_cpu: Option<Vec<f64>>,
    /// gssp, one per group server: mean milliseconds per exchange.
    pub mean_exchange_ms: Option<Vec<f64>>,
    /// The same in thread CPU milliseconds (compression, sends and drains of one exchange,
    /// and any drain on arrival before the next).
    pub mean_exchange_cpu_ms: Option<Vec<f64>>,
}

/// What every mode's summary is computed from.
#[derive(Debug, Clone, Copy)]
pub struct RunTotals {
    pub ranks: usize,
    pub workers: usize,
    pub epochs: f64,
    /// Iterations of all workers together.
    pub iterations: u64,
    /// Seconds of training (throughput is measured over them).
    pub wall_s: f64,
}

impl Summary {
    /// The keys every mode has, from the run's totals and its test-set evaluations in time
    /// order (the last one is the final model's). The keys of the distributed modes stay
    /// null; their path fills them in.
    pub fn new(cfg: &Config, model: &str, totals: RunTotals, evals: &[EvalRow]) -> Summary {
        let last = evals.last().copied().unwrap_or_default();
        Summary {
            mode: cfg.sync.mode.to_string(),
            model: model.into(),
            dataset: cfg.data.dataset.to_string(),
            ranks: totals.ranks,
            workers: totals.workers,
            seed: cfg.run.seed,
            epochs: totals.epochs,
            iterations: totals.iterations,
            wall_s: totals.wall_s,
            images_per_s: totals.iterations as f64 * cfg.optim.batch_size as f64
                / totals.wall_s.max(1e-9),
            final_test_loss: last.test_loss,
            final_test_accuracy: last.test_accuracy,
            final_test_perplexity: last.test_perplexity,
            final_val_perplexity: last.val_perplexity,
            final_bleu: last.bleu,
            target_accuracy: cfg.run.target_accuracy,
            time_to_target_s: time_to_target(evals, cfg.run.target_accuracy),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_resumed_log_keeps_its_rows_up_to_the_checkpoint() {
        let text = "time_s,loss\n0.500000,1\n1.000000,2\n1.000001,3\n1.500000,4\n";
        let kept = super::rows_until(text, "time_s,loss", 1.0000004).unwrap();
        assert_eq!(kept, "time_s,loss\n0.500000,1\n1.000000,2\n1.000001,3\n");
        assert!(super::rows_until("a,b\n", "time_s,loss", 1.0).is_err());
        let no_time = super::rows_until("x\n1\n2\n", "x", 0.0).unwrap();
        assert_eq!(no_time, "x\n1\n2\n");
    }

    use super::*;

    #[test]
    fn csv_rows_match_their_header() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunDir::create(dir.path()).unwrap();
        let mut log = run.csv::<WorkerRow>("w.csv").unwrap();
        log.push(&WorkerRow {
            iteration: 3,
            loss: 0.5,
            ..Default::default()
        })
        .unwrap();
        log.flush().unwrap();
        let text = std::fs::read_to_string(run.file("w.csv")).unwrap();
        let lines: Vec<_> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].split(',').count(), lines[1].split(',').count());
        assert_eq!(lines[1].split(',').nth(2), Some("3"));
    }

    #[test]
    fn worker_log_keeps_every_nth_iteration() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunDir::create(dir.path()).unwrap();
        let mut log = run.worker_log(3, 2).unwrap();
        for iteration in 1..=5 {
            log.record(&WorkerRow {
                iteration,
                ..Default::default()
            })
            .unwrap();
        }
        log.flush().unwrap();
        let text = std::fs::read_to_string(run.file("rank-3.csv")).unwrap();
        let iterations: Vec<&str> = text
            .lines()
            .skip(1)
            .map(|l| l.split(',').nth(2).unwrap())
            .collect();
        assert_eq!(iterations, ["2", "4"]);
    }

    #[test]
    fn summary_takes_the_common_keys_from_the_totals_and_the_last_evaluation() {
        let text = "[data]\ndataset = \"synthetic\"\n[model]\nname = \"mlp\"\n\
                    [optim]\nbatch_size = 8\n[run]\ntarget_accuracy = 0.5\n";
        let cfg = Config::from_str_with_overrides(text, "test", &[]).unwrap();
        let e = |t, a| EvalRow {
            time_s: t,
            test_loss: 1.0 - a,
            test_accuracy: a,
            ..Default::default()
        };
        let totals = RunTotals {
            ranks: 1,
            workers: 1,
            epochs: 2.0,
            iterations: 100,
            wall_s: 4.0,
        };
        let s = Summary::new(
            &cfg,
            "mlp",
            totals,
            &[e(1.0, 0.3), e(2.0, 0.6), e(4.0, 0.7)],
        );
        assert_eq!(
            (s.mode.as_str(), s.dataset.as_str()),
            ("single", "synthetic")
        );
        assert_eq!((s.iterations, s.epochs, s.wall_s), (100, 2.0, 4.0));
        assert_eq!(s.images_per_s, 200.0);
        assert_eq!(
            (s.final_test_accuracy, s.time_to_target_s),
            (0.7, Some(2.0))
        );
        assert_eq!(s.bytes_sent, None);
    }

    #[test]
    fn time_to_target_is_the_first_crossing() {
        let e = |t, a| EvalRow {
            time_s: t,
            test_accuracy: a,
            ..Default::default()
        };
        let evals = [e(1.0, 0.5), e(2.0, 0.97), e(3.0, 0.99), e(4.0, 0.98)];
        assert_eq!(time_to_target(&evals, 0.98), Some(3.0));
        assert_eq!(time_to_target(&evals, 0.995), None);
    }
}
