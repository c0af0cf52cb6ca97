//! The run directory and its CSV logs: one `rank-<r>.csv` per rank and `eval.csv`.
//!
//! CSV files have a header row and plain numbers (pandas' `read_csv` reads them as is);
//! rows are formatted into a buffer that reaches the file in whole lines only, so a rank
//! killed mid-run leaves a file whose every line is a complete row.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;

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
        Ok(CsvLog::over(f, p))
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
        let mut log = CsvLog::over(f, p);
        writeln!(log.pending, "{}", R::HEADER)
            .and_then(|()| log.write_pending())
            .with_context(|| format!("cannot write {}", log.path.display()))?;
        Ok(log)
    }
}

/// The lines of a CSV log `text` with header `header` whose `time_s` is at most `until`
/// (the header, and every row of a file without a `time_s` column, kept). A line without
/// its newline or with another field count than the header is the torn tail of a killed
/// run (a file written by an older gssp may end in one) and is dropped.
fn rows_until(text: &str, header: &str, until: f64) -> Result<String> {
    let complete = text.rfind('\n').map_or("", |end| &text[..end]);
    let mut lines = complete.lines();
    let first = lines.next().unwrap_or_default();
    anyhow::ensure!(
        first == header,
        "its header is not this gssp's ({first:?}); move the file away to start it anew"
    );
    let column = header.split(',').position(|c| c == "time_s");
    let fields = header.split(',').count();
    // The rows print time with 6 decimals: a row at the checkpoint's time may read up to
    // half a microsecond later.
    let until = until + 1e-6;
    let mut out = String::with_capacity(text.len());
    out.push_str(header);
    out.push('\n');
    for line in lines {
        let time = column.and_then(|c| line.split(',').nth(c)?.parse::<f64>().ok());
        let whole = line.split(',').count() == fields;
        if whole && time.is_none_or(|t| t <= until) {
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

/// A buffer this large goes to the file before its second is up.
const PENDING_BYTES: usize = 64 * 1024;

pub struct CsvLog<R> {
    file: File,
    /// Whole rows not yet in the file.
    pending: Vec<u8>,
    path: PathBuf,
    flushed: Instant,
    _row: std::marker::PhantomData<R>,
}

impl<R: CsvRow> CsvLog<R> {
    /// Rows go to `w`, the file at `path` (named in errors).
    fn over(file: File, path: PathBuf) -> Self {
        CsvLog {
            file,
            pending: Vec::with_capacity(PENDING_BYTES),
            path,
            flushed: Instant::now(),
            _row: std::marker::PhantomData,
        }
    }

    /// Appends `row`; the file is flushed at most a second after a row, so a job that dies
    /// loses at most its last second of rows.
    pub fn push(&mut self, row: &R) -> Result<()> {
        row.write(&mut self.pending)
            .with_context(|| format!("cannot write {}", self.path.display()))?;
        if self.pending.len() >= PENDING_BYTES || self.flushed.elapsed() >= FLUSH_EVERY {
            self.flush()?;
        }
        Ok(())
    }
    pub fn flush(&mut self) -> Result<()> {
        self.flushed = Instant::now();
        self.write_pending()
            .with_context(|| format!("cannot write {}", self.path.display()))
    }

    /// The pending rows, whole, to the file in one write.
    fn write_pending(&mut self) -> std::io::Result<()> {
        self.file.write_all(&self.pending)?;
        self.pending.clear();
        Ok(())
    }
}

impl<R> Drop for CsvLog<R> {
    /// The last rows reach the file also when a run ends on an error.
    fn drop(&mut self) {
        let _ = self.file.write_all(&self.pending);
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
    /// Samples in this iteration's batch (`optim.batch_size` unless batches follow speed).
    pub batch: usize,
}

impl CsvRow for WorkerRow {
    const HEADER: &'static str =
        "time_s,epoch,iteration,compute_s,wait_s,comm_s,bytes_sent,bytes_recv,staleness,loss,lr,batch";
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
        if let Some(lr) = self.lr {
            write!(w, "{lr:.6e}")?;
        }
        writeln!(w, ",{}", self.batch)
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
    /// Bytes this push's exchange put into the peers' windows (gssp; 0 when it sent
    /// nothing: no exchange, or deferred by a full mailbox).
    pub sent_bytes: u64,
    /// The groups whose updates this push's exchange or drain applied, one bit per group
    /// (bit g: group g; gssp, else 0): the receiving end of `gssp report --trace`'s arrows.
    pub drained_from: u64,
    /// Seconds in a meeting of the group servers after this push (a checkpoint or a
    /// regroup), else 0. A row with a meeting is always logged, whatever `log_every` says.
    pub meet_s: f64,
}

impl CsvRow for ServerRow {
    const HEADER: &'static str = "time_s,epoch,pushes,version,worker,staleness,clock_spread,recv_wait_s,receive_s,apply_s,send_s,exchange_s,loss,lr,ratio,sent_bytes,drained_from,meet_s";
    fn write(&self, w: &mut dyn Write) -> std::io::Result<()> {
        writeln!(
            w,
            "{:.6},{:.5},{},{},{},{},{},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6e},{:.6},{},{},{:.6}",
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
            self.ratio,
            self.sent_bytes,
            self.drained_from,
            self.meet_s
        )
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

    #[test]
    fn a_torn_last_line_of_a_killed_run_is_dropped() {
        let text = "time_s,loss\n0.500000,1\n0.9";
        let kept = super::rows_until(text, "time_s,loss", 2.0).unwrap();
        assert_eq!(kept, "time_s,loss\n0.500000,1\n");
        let short = "time_s,loss\n0.500000,1\n0.9\n0.700000,2\n";
        let kept = super::rows_until(short, "time_s,loss", 2.0).unwrap();
        assert_eq!(kept, "time_s,loss\n0.500000,1\n0.700000,2\n");
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
}
