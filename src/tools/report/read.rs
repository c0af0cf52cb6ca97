//! Reads what a run left behind (`summary.json`, `eval.csv`, `layout.json`, `rank-*.csv`)
//! into plain rows. Columns are found by header name, so a file with extra or reordered
//! columns still reads; a missing or malformed file is an error that names it.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::Deserialize;

/// The `summary.json` keys the report uses (the file has more). Keys a mode does not have
/// are null there and `None` here.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct RunSummary {
    /// The clock the run's times are on (`wall`, or `simulated`: `gssp train --simulate`).
    #[serde(default = "wall_clock")]
    pub clock: String,
    pub mode: String,
    pub model: String,
    pub dataset: String,
    pub workers: usize,
    pub wall_s: f64,
    pub images_per_s: f64,
    pub final_test_accuracy: f64,
    pub target_accuracy: f64,
    pub time_to_target_s: Option<f64>,
    pub mean_wait_fraction: Option<f64>,
    pub bytes_inter_group: Option<u64>,
    /// Text runs: the final model's test2016 perplexity and BLEU.
    #[serde(default)]
    pub final_test_perplexity: Option<f64>,
    #[serde(default)]
    pub final_bleu: Option<f64>,
}

/// A summary written before summaries said their clock: the machine's.
fn wall_clock() -> String {
    crate::telemetry::WALL.to_string()
}

/// The `layout.json` keys the report uses: which world ranks serve and which work in
/// which group, the mode, and each group server's SSP bound.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
pub struct RunLayout {
    pub servers: Vec<usize>,
    pub groups: Vec<Vec<usize>>,
    /// `sync.mode` (`asp` has no bound whatever `staleness` says).
    #[serde(default)]
    pub mode: String,
    #[serde(default)]
    pub staleness: Vec<usize>,
    /// With `grouping = "profile"`: the longest any worker spent profiling, seconds.
    #[serde(default)]
    pub profile_cost_s: Option<f64>,
}

impl RunLayout {
    /// The SSP bound of group `g`'s server; `None` where its workers are never held (asp,
    /// or no server).
    pub fn bound(&self, g: usize) -> Option<usize> {
        if self.mode == "asp" || self.servers.is_empty() {
            return None;
        }
        self.staleness.get(g).or(self.staleness.first()).copied()
    }
}

/// The `regroups.json` keys the report uses: one meeting of the group servers.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq)]
pub struct Regroup {
    pub time_s: f64,
    /// Whether the meeting moved workers.
    pub regrouped: bool,
}

/// One `eval.csv` row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Eval {
    pub time_s: f64,
    pub test_accuracy: f64,
    /// Text runs: perplexity on val (an empty field or no column: `None`).
    pub val_perplexity: Option<f64>,
}

/// One worker row of a `rank-<r>.csv` (time at the end of the iteration).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct WorkerIter {
    pub time_s: f64,
    pub iteration: u64,
    pub compute_s: f64,
    pub wait_s: f64,
    pub comm_s: f64,
    pub bytes_sent: u64,
    pub staleness: u64,
    /// Samples in the iteration's batch (0 in a log that predates the column).
    pub batch: u64,
}

/// One server row of a `rank-<r>.csv` (one applied push; `time_s` is the end of its
/// exchange, before the answers to the workers). Columns an older log lacks read as 0.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ServerPush {
    pub time_s: f64,
    pub staleness: u64,
    /// Upload ratio of the exchange after this push; 0 where there was none.
    pub ratio: f64,
    pub clock_spread: u64,
    pub recv_wait_s: f64,
    pub receive_s: f64,
    pub apply_s: f64,
    pub send_s: f64,
    pub exchange_s: f64,
    /// Bytes the exchange put into the peers' windows.
    pub sent_bytes: u64,
    /// Groups whose updates the exchange applied, bit g for group g.
    pub drained_from: u64,
    /// Seconds the servers met after this push (checkpoint or regroup).
    pub meet_s: f64,
}

/// The log of one rank: a worker's iterations or a server's pushes.
#[derive(Debug, Clone, PartialEq)]
pub enum RankLog {
    Worker(Vec<WorkerIter>),
    Server(Vec<ServerPush>),
}

/// Everything the report reads from one run directory.
#[derive(Debug, Clone)]
pub struct Run {
    /// Short name for tables and legends (the directory's name, made unique).
    pub name: String,
    pub dir: PathBuf,
    pub summary: RunSummary,
    pub evals: Vec<Eval>,
    /// Absent for `single` runs.
    pub layout: Option<RunLayout>,
    /// `(world rank, log)`, by rank.
    pub ranks: Vec<(usize, RankLog)>,
    /// gssp regrouping's meetings (`regroups.json`; empty without one).
    pub regroups: Vec<Regroup>,
}

impl Run {
    /// The group of world rank `rank` (0 where the run has no layout).
    pub fn group_of(&self, rank: usize) -> usize {
        let Some(l) = &self.layout else { return 0 };
        if let Some(g) = l.servers.iter().position(|&s| s == rank) {
            return g;
        }
        l.groups
            .iter()
            .position(|ws| ws.contains(&rank))
            .unwrap_or(0)
    }

    /// Number of worker groups (1 without a layout).
    pub fn group_count(&self) -> usize {
        self.layout.as_ref().map_or(1, |l| l.groups.len().max(1))
    }

    pub fn workers(&self) -> impl Iterator<Item = (usize, &[WorkerIter])> {
        self.ranks.iter().filter_map(|(r, log)| match log {
            RankLog::Worker(rows) => Some((*r, rows.as_slice())),
            RankLog::Server(_) => None,
        })
    }

    pub fn servers(&self) -> impl Iterator<Item = (usize, &[ServerPush])> {
        self.ranks.iter().filter_map(|(r, log)| match log {
            RankLog::Server(rows) => Some((*r, rows.as_slice())),
            RankLog::Worker(_) => None,
        })
    }
}

/// Reads the run directory `dir`, calling it `name`.
pub fn read_run(dir: &Path, name: &str) -> Result<Run> {
    if !dir.is_dir() {
        bail!("{}: not a run directory", dir.display());
    }
    let summary: RunSummary = read_json(&dir.join("summary.json"))?;
    let evals = parse_evals(&read_text(&dir.join("eval.csv"))?)
        .with_context(|| format!("{}", dir.join("eval.csv").display()))?;
    let layout_path = dir.join("layout.json");
    let layout = if layout_path.exists() {
        Some(read_json(&layout_path)?)
    } else {
        None
    };
    let regroups_path = dir.join("regroups.json");
    let regroups = if regroups_path.exists() {
        read_json(&regroups_path)?
    } else {
        Vec::new()
    };
    let mut ranks = Vec::new();
    for (rank, path) in rank_files(dir)? {
        let log =
            parse_rank_log(&read_text(&path)?).with_context(|| format!("{}", path.display()))?;
        ranks.push((rank, log));
    }
    Ok(Run {
        name: name.to_string(),
        dir: dir.to_path_buf(),
        summary,
        evals,
        layout,
        ranks,
        regroups,
    })
}

/// Names for the runs: each directory's own name, or with its parent's
/// (`seed-7/gssp`) where two runs share a name.
pub fn run_names(dirs: &[PathBuf]) -> Vec<String> {
    let last = |d: &Path| {
        d.file_name()
            .map_or_else(|| d.display().to_string(), |n| n.to_string_lossy().into())
    };
    let short: Vec<String> = dirs.iter().map(|d| last(d)).collect();
    dirs.iter()
        .zip(&short)
        .map(|(d, s)| {
            if short.iter().filter(|o| *o == s).count() > 1 {
                match d.parent().map(last) {
                    Some(p) if !p.is_empty() => format!("{p}/{s}"),
                    _ => d.display().to_string(),
                }
            } else {
                s.clone()
            }
        })
        .collect()
}

fn read_text(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T> {
    serde_json::from_str(&read_text(path)?)
        .with_context(|| format!("{}: not a valid run file", path.display()))
}

/// `rank-<r>.csv` files of `dir`, by rank.
fn rank_files(dir: &Path) -> Result<Vec<(usize, PathBuf)>> {
    let mut out = Vec::new();
    let entries =
        std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))?;
    for e in entries {
        let path = e
            .with_context(|| format!("cannot list {}", dir.display()))?
            .path();
        let name = path.file_name().map(|n| n.to_string_lossy().to_string());
        let rank = name
            .as_deref()
            .and_then(|n| n.strip_prefix("rank-"))
            .and_then(|n| n.strip_suffix(".csv"))
            .and_then(|r| r.parse::<usize>().ok());
        if let Some(r) = rank {
            out.push((r, path));
        }
    }
    out.sort();
    Ok(out)
}

/// A CSV text with a header row: the column index of each wanted name.
struct Table<'a> {
    header: Vec<&'a str>,
    body: std::iter::Enumerate<std::str::Lines<'a>>,
}

impl<'a> Table<'a> {
    fn new(text: &'a str) -> Result<Table<'a>> {
        let mut lines = text.lines();
        let Some(h) = lines.next() else {
            bail!("empty file, no header row")
        };
        Ok(Table {
            header: h.split(',').map(str::trim).collect(),
            body: lines.enumerate(),
        })
    }

    fn has(&self, name: &str) -> bool {
        self.header.contains(&name)
    }

    /// The column `name`, where the header has it.
    fn opt_col(&self, name: &str) -> Option<usize> {
        self.header.iter().position(|&h| h == name)
    }

    fn col(&self, name: &str) -> Result<usize> {
        self.header
            .iter()
            .position(|&h| h == name)
            .with_context(|| format!("no column `{name}` in the header"))
    }

    /// Next non-empty row: its line number (1-based, header = 1) and fields.
    fn next_row(&mut self) -> Option<(usize, Vec<&'a str>)> {
        for (i, line) in self.body.by_ref() {
            if !line.trim().is_empty() {
                return Some((i + 2, line.split(',').map(str::trim).collect()));
            }
        }
        None
    }
}

/// Field `col` of `fields` (line `line`) as a number.
fn field<T: std::str::FromStr>(fields: &[&str], col: usize, line: usize, name: &str) -> Result<T> {
    let s = fields
        .get(col)
        .with_context(|| format!("line {line}: too few fields, no `{name}`"))?;
    s.parse()
        .ok()
        .with_context(|| format!("line {line}: `{name}` is not a number: {s:?}"))
}

/// Parses `eval.csv`.
pub fn parse_evals(text: &str) -> Result<Vec<Eval>> {
    let mut t = Table::new(text)?;
    let (ct, ca) = (t.col("time_s")?, t.col("test_accuracy")?);
    let cv = t
        .has("val_perplexity")
        .then(|| t.col("val_perplexity"))
        .transpose()?;
    let mut out = Vec::new();
    while let Some((line, f)) = t.next_row() {
        let val_perplexity = match cv {
            Some(c) if f.get(c).is_some_and(|v| !v.is_empty()) => {
                Some(field(&f, c, line, "val_perplexity")?)
            }
            _ => None,
        };
        out.push(Eval {
            time_s: field(&f, ct, line, "time_s")?,
            test_accuracy: field(&f, ca, line, "test_accuracy")?,
            val_perplexity,
        });
    }
    Ok(out)
}

/// Field `name` of `fields` as a number where the header has its column `col`, else 0.
fn opt_field<T: std::str::FromStr + Default>(
    fields: &[&str],
    col: Option<usize>,
    line: usize,
    name: &str,
) -> Result<T> {
    col.map_or(Ok(T::default()), |c| field(fields, c, line, name))
}

/// Parses the rows of a server's `rank-<r>.csv`.
fn parse_server_rows(mut t: Table<'_>) -> Result<RankLog> {
    let (ct, cs, cr) = (t.col("time_s")?, t.col("staleness")?, t.col("ratio")?);
    const OPTIONAL: [&str; 9] = [
        "clock_spread",
        "recv_wait_s",
        "receive_s",
        "apply_s",
        "send_s",
        "exchange_s",
        "sent_bytes",
        "drained_from",
        "meet_s",
    ];
    let c = OPTIONAL.map(|n| t.opt_col(n));
    let mut rows = Vec::new();
    while let Some((line, f)) = t.next_row() {
        let num = |i: usize| opt_field::<f64>(&f, c[i], line, OPTIONAL[i]);
        let int = |i: usize| opt_field::<u64>(&f, c[i], line, OPTIONAL[i]);
        rows.push(ServerPush {
            time_s: field(&f, ct, line, "time_s")?,
            staleness: field(&f, cs, line, "staleness")?,
            ratio: field(&f, cr, line, "ratio")?,
            clock_spread: int(0)?,
            recv_wait_s: num(1)?,
            receive_s: num(2)?,
            apply_s: num(3)?,
            send_s: num(4)?,
            exchange_s: num(5)?,
            sent_bytes: int(6)?,
            drained_from: int(7)?,
            meet_s: num(8)?,
        });
    }
    Ok(RankLog::Server(rows))
}

/// Parses a `rank-<r>.csv`: server rows when the header has `pushes`, else worker rows.
pub fn parse_rank_log(text: &str) -> Result<RankLog> {
    let mut t = Table::new(text)?;
    if t.has("pushes") {
        return parse_server_rows(t);
    }
    let names = [
        "time_s",
        "iteration",
        "compute_s",
        "wait_s",
        "comm_s",
        "bytes_sent",
        "staleness",
    ];
    let mut c = [0usize; 7];
    for (i, n) in names.iter().enumerate() {
        c[i] = t.col(n)?;
    }
    let batch = t.opt_col("batch");
    let mut rows = Vec::new();
    while let Some((line, f)) = t.next_row() {
        rows.push(WorkerIter {
            time_s: field(&f, c[0], line, names[0])?,
            iteration: field(&f, c[1], line, names[1])?,
            compute_s: field(&f, c[2], line, names[2])?,
            wait_s: field(&f, c[3], line, names[3])?,
            comm_s: field(&f, c[4], line, names[4])?,
            bytes_sent: field(&f, c[5], line, names[5])?,
            staleness: field(&f, c[6], line, names[6])?,
            batch: opt_field(&f, batch, line, "batch")?,
        });
    }
    Ok(RankLog::Worker(rows))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eval_rows_are_read_by_column_name() {
        let e = parse_evals("epoch,test_accuracy,time_s\n0.5,0.8,2.0\n\n1.0,0.9,4.0\n").unwrap();
        assert_eq!(
            e,
            [
                Eval {
                    time_s: 2.0,
                    test_accuracy: 0.8,
                    val_perplexity: None,
                },
                Eval {
                    time_s: 4.0,
                    test_accuracy: 0.9,
                    val_perplexity: None,
                }
            ]
        );
        let text = "time_s,test_accuracy,val_perplexity,bleu\n1.0,0.2,80.5,\n2.0,0.3,40.25,12.5\n3.0,0.1,,\n";
        let e = parse_evals(text).unwrap();
        let v: Vec<Option<f64>> = e.iter().map(|e| e.val_perplexity).collect();
        assert_eq!(v, [Some(80.5), Some(40.25), None]);
        let bad = parse_evals("time_s,test_accuracy,val_perplexity\n1.0,0.2,x\n").unwrap_err();
        assert!(
            format!("{bad:#}").contains("line 2: `val_perplexity` is not a number"),
            "{bad:#}"
        );
    }

    #[test]
    fn a_malformed_field_names_its_line_and_column() {
        let err = parse_evals("time_s,test_accuracy\n1.0,0.5\n2.0,x\n").unwrap_err();
        let msg = format!("{err:#}");
        assert!(
            msg.contains("line 3") && msg.contains("test_accuracy"),
            "{msg}"
        );
        let err = parse_evals("time_s\n1.0\n").unwrap_err();
        assert!(format!("{err:#}").contains("no column `test_accuracy`"));
        assert!(parse_evals("").is_err());
    }

    #[test]
    fn rank_logs_are_told_apart_by_their_header() {
        let worker = "time_s,epoch,iteration,compute_s,wait_s,comm_s,bytes_sent,bytes_recv,staleness,loss,lr\n\
                      0.5,0.1,3,0.2,0.1,0.01,1000,1000,2,2.3,\n";
        let RankLog::Worker(w) = parse_rank_log(worker).unwrap() else {
            panic!("worker log read as a server log")
        };
        assert_eq!(
            w[0],
            WorkerIter {
                time_s: 0.5,
                iteration: 3,
                compute_s: 0.2,
                wait_s: 0.1,
                comm_s: 0.01,
                bytes_sent: 1000,
                staleness: 2,
                batch: 0,
            }
        );
        let server = "time_s,epoch,pushes,version,worker,staleness,clock_spread,recv_wait_s,receive_s,apply_s,send_s,exchange_s,loss,lr,ratio\n\
                      1.5,0.1,1,1,0,4,1,0.0,0.0,0.0,0.0,0.0,2.3,5e-2,0.01\n";
        assert_eq!(
            parse_rank_log(server).unwrap(),
            RankLog::Server(vec![ServerPush {
                time_s: 1.5,
                staleness: 4,
                ratio: 0.01,
                clock_spread: 1,
                ..ServerPush::default()
            }])
        );
        let now = "time_s,epoch,pushes,version,worker,staleness,clock_spread,recv_wait_s,receive_s,apply_s,send_s,exchange_s,loss,lr,ratio,sent_bytes,drained_from,meet_s\n\
                   1.5,0.1,1,1,0,4,1,0.1,0.2,0.3,0.4,0.5,2.3,5e-2,0.01,800,6,0.25\n";
        let RankLog::Server(s) = parse_rank_log(now).unwrap() else {
            panic!("server log read as a worker log")
        };
        assert_eq!((s[0].sent_bytes, s[0].drained_from), (800, 6));
        assert_eq!(
            (s[0].recv_wait_s, s[0].send_s, s[0].meet_s),
            (0.1, 0.4, 0.25)
        );
        let bad = now.replace(",800,", ",x,");
        let err = format!("{:#}", parse_rank_log(&bad).unwrap_err());
        assert!(err.contains("line 2: `sent_bytes`"), "{err}");
    }

    #[test]
    fn run_names_are_the_directory_names_made_unique() {
        let dirs: Vec<PathBuf> = ["a/seed-1/gssp", "a/seed-2/gssp", "b/asp"]
            .iter()
            .map(PathBuf::from)
            .collect();
        assert_eq!(run_names(&dirs), ["seed-1/gssp", "seed-2/gssp", "asp"]);
    }

    #[test]
    fn a_missing_summary_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let err = read_run(dir.path(), "x").unwrap_err();
        assert!(format!("{err:#}").contains("summary.json"), "{err:#}");
        std::fs::write(dir.path().join("summary.json"), "{\"mode\": 3}").unwrap();
        let err = read_run(dir.path(), "x").unwrap_err();
        assert!(format!("{err:#}").contains("summary.json"), "{err:#}");
    }
}
