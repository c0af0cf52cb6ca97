//! `gssp report --trace`: a run as a Chrome trace-event file (the JSON that Perfetto and
//! chrome://tracing open), in the manner of Horovod's timeline (`HOROVOD_TIMELINE`).
//!
//! Built from the logs alone (pure, unit-tested): a process per group (`pid` = group) and a
//! thread per rank (`tid` = world rank), named by metadata events; a run-wide process
//! after the groups carries the evaluations, the profiling, the regroups and the
//! checkpoints as instant events.
//!
//! - A worker row is its iteration: `compute`, `comm` (posting the push) and `wait`
//!   (for fresh weights), ending at the row's `time_s`.
//! - A server row is one push: `wait` (for it to arrive), `receive`, `apply`, then
//!   `exchange` (gssp, an exchange with the other groups) or `drain` (applying their
//!   updates between exchanges), all ending at `time_s`; then the meeting after it
//!   (`checkpoint` or `regroup`, `meet_s`) and `send` (the answers to the workers).
//! - Where batches follow speed, each worker's batch is a counter (`ph` `C`, `batch rank
//!   <r>`), one event where it changes.
//! - An update a group server sent reaches a peer as a flow arrow (`ph` `s`/`f`) from the
//!   sender's exchange to the exchange or drain that applied it (`sent_bytes` and
//!   `drained_from` in the server rows; the latest logged send before the drain).
//!
//! Spans are complete events (`ph` `X`) in whole microseconds; a span never starts before
//! the previous span of its rank ends, so the spans of one rank never overlap and each
//! differs from its CSV column by at most a microsecond of rounding.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use serde::Serialize;
use serde_json::{json, Value};

use super::read::{RankLog, Run, ServerPush, WorkerIter};

/// One trace event. `ts` and `dur` are microseconds since the run's start.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cat: Option<&'static str>,
    pub ph: &'static str,
    pub ts: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dur: Option<i64>,
    pub pid: usize,
    pub tid: usize,
    /// Flow events: the arrow's id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
    /// Flow ends: bind to the enclosing slice (`e`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bp: Option<&'static str>,
    /// Instant events: scope (`g` the whole trace, `t` the thread).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub s: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub args: Option<Value>,
}

impl Event {
    fn new(name: &str, ph: &'static str, ts: i64, (pid, tid): (usize, usize)) -> Event {
        Event {
            name: name.to_string(),
            cat: None,
            ph,
            ts,
            dur: None,
            pid,
            tid,
            id: None,
            bp: None,
            s: None,
            args: None,
        }
    }

    fn with_args(mut self, args: Value) -> Event {
        self.args = Some(args);
        self
    }
}

/// Seconds to whole microseconds.
fn us(seconds: f64) -> i64 {
    (seconds * 1e6).round() as i64
}

/// A span of one rank, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Span {
    name: &'static str,
    start: i64,
    dur: i64,
}

/// One rank's spans, laid end to end: each log row is a run of phases `(name, seconds)`,
/// those of `before` ending at its `anchor_s` and those of `after` starting there.
#[derive(Debug, Default)]
struct Track {
    spans: Vec<Span>,
    /// Where the last span ended: no span starts before it.
    end: i64,
}

impl Track {
    /// Lays out one row; returns the index in `spans` of each phase laid (None: empty).
    fn row(
        &mut self,
        anchor_s: f64,
        before: &[(&'static str, f64)],
        after: &[(&'static str, f64)],
    ) -> Vec<Option<usize>> {
        let total: f64 = before.iter().map(|p| p.1.max(0.0)).sum();
        let mut at = anchor_s - total;
        let mut placed = Vec::with_capacity(before.len() + after.len());
        for &(name, seconds) in before.iter().chain(after) {
            let seconds = seconds.max(0.0);
            placed.push(self.lay(name, us(at), us(at + seconds)));
            at += seconds;
        }
        placed
    }

    /// Adds the span `[a, b)` clipped to start where the last one ended; None when empty.
    fn lay(&mut self, name: &'static str, a: i64, b: i64) -> Option<usize> {
        let a = a.max(self.end);
        if b <= a {
            return None;
        }
        self.end = b;
        self.spans.push(Span {
            name,
            start: a,
            dur: b - a,
        });
        Some(self.spans.len() - 1)
    }

    fn events(&self, track: (usize, usize), out: &mut Vec<Event>) {
        for s in &self.spans {
            let mut e = Event::new(s.name, "X", s.start, track);
            e.dur = Some(s.dur);
            out.push(e);
        }
    }
}

/// A worker's iterations as spans.
fn worker_track(rows: &[WorkerIter]) -> Track {
    let mut t = Track::default();
    for r in rows {
        t.row(
            r.time_s,
            &[
                ("compute", r.compute_s),
                ("comm", r.comm_s),
                ("wait", r.wait_s),
            ],
            &[],
        );
    }
    t
}

/// A worker's batch as a counter: an event at its first row and where it changes.
fn batch_counter(rows: &[WorkerIter], track: (usize, usize), out: &mut Vec<Event>) {
    let name = format!("batch rank {}", track.1);
    let mut last = None;
    for r in rows.iter().filter(|r| r.batch > 0) {
        if last != Some(r.batch) {
            let start = r.time_s - r.compute_s - r.comm_s - r.wait_s;
            out.push(
                Event::new(&name, "C", us(start.max(0.0)), track)
                    .with_args(json!({ "batch": r.batch })),
            );
            last = Some(r.batch);
        }
    }
}

/// A server's pushes as spans, and for each row the span of its exchange or drain.
fn server_track(rows: &[ServerPush], meeting: &'static str) -> (Track, Vec<Option<Span>>) {
    let mut t = Track::default();
    let mut exchanges = Vec::with_capacity(rows.len());
    for r in rows {
        let exchange = if r.ratio > 0.0 { "exchange" } else { "drain" };
        let placed = t.row(
            r.time_s,
            &[
                ("wait", r.recv_wait_s),
                ("receive", r.receive_s),
                ("apply", r.apply_s),
                (exchange, r.exchange_s),
            ],
            &[(meeting, r.meet_s), ("send", r.send_s)],
        );
        exchanges.push(placed[3].map(|i| t.spans[i]));
    }
    (t, exchanges)
}

/// A group server's exchange spans, by row, for the arrows.
struct ServerExchanges<'a> {
    group: usize,
    rank: usize,
    rows: &'a [ServerPush],
    spans: Vec<Option<Span>>,
}

/// The arrows from each update sent to the exchange or drain that applied it at a peer:
/// for every receiving row with bit `g` in `drained_from`, the latest of group g's logged
/// sends that started before the receiving span ended (each send linked to a peer once).
fn flows(servers: &[ServerExchanges<'_>], pid_of: impl Fn(usize) -> usize) -> Vec<Event> {
    let mut out = Vec::new();
    let mut id = 0u64;
    for recv in servers {
        for sender in servers.iter().filter(|s| s.group != recv.group) {
            if sender.group >= 64 {
                continue;
            }
            let sends: Vec<Span> = sender
                .rows
                .iter()
                .zip(&sender.spans)
                .filter(|(r, _)| r.sent_bytes > 0)
                .filter_map(|(_, s)| *s)
                .collect();
            let mut linked: Option<usize> = None;
            for (row, span) in recv.rows.iter().zip(&recv.spans) {
                let Some(span) = span else { continue };
                if row.drained_from & (1 << sender.group) == 0 {
                    continue;
                }
                let end = span.start + span.dur;
                let k = sends.partition_point(|s| s.start < end);
                if k == 0 || linked.is_some_and(|l| l >= k - 1) {
                    continue;
                }
                linked = Some(k - 1);
                id += 1;
                let from = (pid_of(sender.group), sender.rank);
                let to = (pid_of(recv.group), recv.rank);
                // Each end inside its slice (mid-send, the receipt's last microsecond), the
                // start never after the end.
                let sent = sends[k - 1];
                let at = (sent.start + sent.dur / 2).min(end - 1);
                let mut s = Event::new("update", "s", at, from);
                let mut f = Event::new("update", "f", end - 1, to);
                s.cat = Some("exchange");
                s.id = Some(id);
                f.cat = Some("exchange");
                f.id = Some(id);
                f.bp = Some("e");
                out.extend([s, f]);
            }
        }
    }
    out
}

/// A metadata event naming the process (`what` = `process_name`) or thread
/// (`thread_name`) of `track`.
fn name(what: &str, track: (usize, usize), name: &str) -> Event {
    Event::new(what, "M", 0, track).with_args(json!({ "name": name }))
}

/// The run-wide instant events: profiling, evaluations, regroups, checkpoints.
fn instants(run: &Run, track: (usize, usize), checkpoints: &[f64], out: &mut Vec<Event>) {
    let global = |name: &str, ts: i64, args: Value| {
        let mut e = Event::new(name, "i", ts, track).with_args(args);
        e.s = Some("g");
        e
    };
    if let Some(cost) = run.layout.as_ref().and_then(|l| l.profile_cost_s) {
        let mut p = Event::new("profiling", "X", 0, track);
        p.dur = Some(us(cost));
        out.push(p);
        out.push(global("profiling", 0, json!({ "seconds": cost })));
    }
    for e in &run.evals {
        let args = json!({ "test_accuracy": e.test_accuracy });
        out.push(global("evaluation", us(e.time_s), args));
    }
    for r in &run.regroups {
        let args = json!({ "regrouped": r.regrouped });
        out.push(global("regroup", us(r.time_s), args));
    }
    for &t in checkpoints {
        out.push(global("checkpoint", us(t), json!({})));
    }
}

/// A process name per group: `group g (server rank s)`.
fn group_names(run: &Run, out: &mut Vec<Event>) {
    for g in 0..run.group_count() {
        let server = run.layout.as_ref().and_then(|l| l.servers.get(g).copied());
        let process = match server {
            Some(s) => format!("group {g} (server rank {s})"),
            None => format!("group {g}"),
        };
        out.push(name("process_name", (g, server.unwrap_or(0)), &process));
    }
}

/// Every rank's named track and spans; returns the group servers' exchanges, for the
/// arrows.
fn rank_tracks<'a>(
    run: &'a Run,
    meeting: &'static str,
    out: &mut Vec<Event>,
) -> Vec<ServerExchanges<'a>> {
    let mut exchanges = Vec::new();
    let balanced = !super::series::batches(run).is_empty();
    for (rank, log) in &run.ranks {
        let (g, rank) = (run.group_of(*rank), *rank);
        match log {
            RankLog::Worker(rows) => {
                out.push(name(
                    "thread_name",
                    (g, rank),
                    &format!("rank {rank} worker"),
                ));
                worker_track(rows).events((g, rank), out);
                if balanced {
                    batch_counter(rows, (g, rank), out);
                }
            }
            RankLog::Server(rows) => {
                out.push(name(
                    "thread_name",
                    (g, rank),
                    &format!("rank {rank} server"),
                ));
                let (track, spans) = server_track(rows, meeting);
                track.events((g, rank), out);
                exchanges.push(ServerExchanges {
                    group: g,
                    rank,
                    rows,
                    spans,
                });
            }
        }
    }
    exchanges
}

/// The checkpoints' times: the meetings of the first server that logged any (every
/// server meets, and logs the push before each meeting).
fn checkpoint_times(run: &Run) -> Vec<f64> {
    run.servers()
        .map(|(_, rows)| {
            let met = rows.iter().filter(|r| r.meet_s > 0.0);
            met.map(|r| r.time_s).collect::<Vec<f64>>()
        })
        .find(|times| !times.is_empty())
        .unwrap_or_default()
}

/// The trace of `run`: metadata, every rank's spans, the arrows and the instants.
pub fn build(run: &Run) -> Vec<Event> {
    // Checkpoints and regrouping do not mix: a run's meetings are one or the other.
    let (meeting, checkpoints) = if run.regroups.is_empty() {
        ("checkpoint", checkpoint_times(run))
    } else {
        ("regroup", Vec::new())
    };
    let mut out = Vec::new();
    group_names(run, &mut out);
    let exchanges = rank_tracks(run, meeting, &mut out);
    out.extend(flows(&exchanges, |g| g));
    let track = (run.group_count(), 0);
    out.push(name("process_name", track, "run"));
    out.push(name("thread_name", track, "events"));
    instants(run, track, &checkpoints, &mut out);
    out
}

/// Writes `events` as a trace file at `path`, one event a line; returns its size in bytes.
pub fn write(run: &Run, events: &[Event], path: &Path) -> Result<u64> {
    let err = || format!("cannot write {}", path.display());
    let f = std::fs::File::create(path).with_context(err)?;
    let mut w = std::io::BufWriter::new(f);
    let other = json!({ "run": run.name, "dir": run.dir.display().to_string(), "by": "gssp report --trace" });
    write!(
        w,
        "{{\"displayTimeUnit\":\"ms\",\"otherData\":{other},\"traceEvents\":["
    )
    .with_context(err)?;
    for (i, e) in events.iter().enumerate() {
        w.write_all(if i == 0 { b"\n" } else { b",\n" })
            .with_context(err)?;
        serde_json::to_writer(&mut w, e).with_context(err)?;
    }
    w.write_all(b"\n]}\n").with_context(err)?;
    w.flush().with_context(err)?;
    Ok(std::fs::metadata(path).with_context(err)?.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::report::read::Regroup;
    use crate::tools::report::series::tests::sample_run;

    fn spans(events: &[Event], tid: usize) -> Vec<&Event> {
        events
            .iter()
            .filter(|e| e.ph == "X" && e.tid == tid)
            .collect()
    }

    fn total(events: &[Event], tid: usize, name: &str) -> i64 {
        spans(events, tid)
            .iter()
            .filter(|e| e.name == name)
            .filter_map(|e| e.dur)
            .sum()
    }

    /// A gssp exchange row of a server: `exchange_s` 0.1 s ending at `time_s`.
    fn push(time_s: f64, sent_bytes: u64, drained_from: u64) -> ServerPush {
        ServerPush {
            time_s,
            ratio: 0.05,
            recv_wait_s: 0.2,
            receive_s: 0.01,
            apply_s: 0.02,
            exchange_s: 0.1,
            send_s: 0.03,
            sent_bytes,
            drained_from,
            ..ServerPush::default()
        }
    }

    #[test]
    fn iterations_become_compute_comm_and_wait_spans_that_add_up() {
        let events = build(&sample_run());
        let w: Vec<(&str, i64, Option<i64>)> = spans(&events, 2)
            .iter()
            .map(|e| (e.name.as_str(), e.ts, e.dur))
            .collect();
        // Worker 2's iterations end at 1.0 and 2.0 s: compute 0.5, comm 0.1, wait 0.4.
        assert_eq!(
            w[..3],
            [
                ("compute", 0, Some(500_000)),
                ("comm", 500_000, Some(100_000)),
                ("wait", 600_000, Some(400_000))
            ]
        );
        assert_eq!(total(&events, 2, "compute"), 1_000_000);
        assert_eq!(total(&events, 2, "wait"), 800_000);
        // Worker 3 never waited: no empty span.
        assert_eq!(spans(&events, 3).len(), 2);
        assert!(events.iter().all(|e| e.pid <= 2));
    }

    #[test]
    fn a_rank_s_spans_never_overlap_even_where_rounding_would_make_them() {
        let mut t = Track::default();
        t.row(1.0, &[("compute", 0.5), ("wait", 0.5)], &[]);
        // Logged a microsecond too early for its phases: clipped to start at 1.0 s.
        t.row(1.499_999, &[("compute", 0.5)], &[("send", 0.1)]);
        let s = &t.spans;
        assert_eq!(s.len(), 4);
        for w in s.windows(2) {
            assert!(w[0].start + w[0].dur <= w[1].start, "{s:?}");
        }
        assert_eq!((s[2].start, s[2].dur), (1_000_000, 499_999));
        assert_eq!((s[3].start, s[3].dur), (1_499_999, 100_000));
    }

    #[test]
    fn server_pushes_become_their_phases_and_arrows_join_send_and_receipt() {
        let mut run = sample_run();
        run.ranks[0].1 = RankLog::Server(vec![push(1.0, 800, 0), push(2.0, 0, 0b10)]);
        // Server 1 applies group 0's update twice in a row: one arrow, to the first.
        run.ranks[1].1 = RankLog::Server(vec![
            push(1.2, 800, 0b01),
            push(1.5, 0, 0b01),
            ServerPush {
                meet_s: 0.25,
                ..push(1.8, 0, 0)
            },
        ]);
        let events = build(&run);
        let names: Vec<&str> = spans(&events, 0).iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names[..5], ["wait", "receive", "apply", "exchange", "send"]);
        assert_eq!(total(&events, 1, "checkpoint"), 250_000);
        assert_eq!(total(&events, 1, "apply"), 60_000);
        let flows: Vec<&Event> = events
            .iter()
            .filter(|e| e.ph == "s" || e.ph == "f")
            .collect();
        assert_eq!(flows.len(), 4, "{flows:?}");
        let (s, f) = (flows[0], flows[1]);
        assert_eq!(
            (s.ph, s.tid, f.ph, f.tid, f.bp),
            ("s", 1, "f", 0, Some("e"))
        );
        assert_eq!(s.id, f.id);
        // Server 1's exchange 1.1-1.2 s sent it; server 0's exchange 1.9-2.0 s applied it.
        assert_eq!((s.ts, f.ts), (1_150_000, 1_999_999));
        assert_eq!((flows[2].tid, flows[2].ts, flows[3].tid), (0, 950_000, 1));
        let checkpoints = events
            .iter()
            .filter(|e| e.ph == "i" && e.name == "checkpoint");
        assert_eq!(checkpoints.map(|e| e.ts).collect::<Vec<_>>(), [1_800_000]);
    }

    #[test]
    fn tracks_are_named_and_run_events_are_instants() {
        let mut run = sample_run();
        if let Some(l) = run.layout.as_mut() {
            l.profile_cost_s = Some(0.5);
        }
        run.regroups = vec![Regroup {
            time_s: 3.0,
            regrouped: true,
        }];
        let events = build(&run);
        let meta = |name: &str| {
            events
                .iter()
                .filter(|e| e.ph == "M" && e.name == name)
                .count()
        };
        assert_eq!((meta("process_name"), meta("thread_name")), (3, 5));
        let instants: Vec<(&str, i64)> = events
            .iter()
            .filter(|e| e.ph == "i")
            .map(|e| (e.name.as_str(), e.ts))
            .collect();
        assert_eq!(
            instants,
            [
                ("profiling", 0),
                ("evaluation", 2_000_000),
                ("evaluation", 5_000_000),
                ("evaluation", 10_000_000),
                ("regroup", 3_000_000)
            ]
        );
        assert!(events
            .iter()
            .filter(|e| e.ph == "i")
            .all(|e| e.s == Some("g")));
    }

    #[test]
    fn the_written_trace_is_json_with_every_event() {
        let run = sample_run();
        let events = build(&run);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.json");
        let bytes = write(&run, &events, &path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(bytes, text.len() as u64);
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["traceEvents"].as_array().unwrap().len(), events.len());
        assert_eq!(v["displayTimeUnit"], "ms");
        let err = write(&run, &events, &dir.path().join("no/such/dir.json")).unwrap_err();
        assert!(format!("{err:#}").contains("no/such/dir.json"), "{err:#}");
    }

    #[test]
    fn a_balanced_workers_batch_is_a_counter_that_steps_where_it_changes() {
        let mut run = sample_run();
        let row = |time_s, batch| WorkerIter {
            time_s,
            compute_s: 0.5,
            batch,
            ..WorkerIter::default()
        };
        run.ranks = vec![
            (
                2,
                RankLog::Worker(vec![row(1.0, 8), row(2.0, 8), row(3.0, 12), row(4.0, 12)]),
            ),
            (
                3,
                RankLog::Worker(vec![row(1.0, 8), row(2.0, 8), row(3.0, 4), row(4.0, 4)]),
            ),
        ];
        let events = build(&run);
        let counters: Vec<(&str, i64, &Value)> = events
            .iter()
            .filter(|e| e.ph == "C")
            .map(|e| (e.name.as_str(), e.ts, &e.args.as_ref().unwrap()["batch"]))
            .collect();
        assert_eq!(
            counters,
            [
                ("batch rank 2", 500_000, &json!(8)),
                ("batch rank 2", 2_500_000, &json!(12)),
                ("batch rank 3", 500_000, &json!(8)),
                ("batch rank 3", 2_500_000, &json!(4)),
            ]
        );
        // Equal batches throughout: no counter.
        run.ranks[1].1 = RankLog::Worker(vec![row(1.0, 8), row(2.0, 8)]);
        run.ranks[0].1 = RankLog::Worker(vec![row(1.0, 8), row(2.0, 8)]);
        assert!(build(&run).iter().all(|e| e.ph != "C"));
    }
}
