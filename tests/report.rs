//! `gssp report` on real runs: a gssp run with top-k between two groups and a bsp run,
//! each trained under `mpirun`. The report's table must carry the summaries' figures, its
//! pictures must be real PNG and SVG files with their axis titles, and a plot a run has no
//! data for must be named as skipped.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use common::{job_lock, num, Run, Scratch};

/// Hang guard of every job: minutes, against the seconds each takes.
const DEADLINE: Duration = Duration::from_secs(300);

fn gssp() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gssp"));
    c.env("RUST_LOG", "warn");
    c
}

fn report(args: &[&str]) -> Output {
    gssp()
        .arg("report")
        .args(args)
        .output()
        .expect("run gssp report")
}

/// Width and height from a PNG's IHDR chunk (bytes 16..24, big-endian).
fn png_size(path: &Path) -> (u32, u32) {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    assert!(
        b.len() > 24 && b[..8] == *b"\x89PNG\r\n\x1a\n",
        "{} is not a PNG",
        path.display()
    );
    let be = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    (be(16), be(20))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// The text of every `<text>` element of an SVG file, trimmed.
fn svg_texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .filter_map(|t| {
            let body = &t[t.find('>')? + 1..];
            Some(body[..body.find("</text>")?].trim().to_string())
        })
        .collect()
}

/// The table row of run `name` in report.md, split into its cells.
fn table_row(md: &str, name: &str) -> Vec<String> {
    let prefix = format!("| {name} |");
    let line = md
        .lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no table row for {name} in:\n{md}"));
    line.trim_matches('|')
        .split('|')
        .map(|c| c.trim().to_string())
        .collect()
}

/// The cell must equal the summary's value at the table's precision.
fn assert_cell(row: &[String], col: usize, value: f64, scale: f64, what: &str) {
    assert_eq!(
        row[col],
        format!("{:.2}", scale * value),
        "{what}: table cell against summary.json"
    );
}

fn check_row(md: &str, name: &str, run: &Run) {
    let s = run.summary();
    let row = table_row(md, name);
    assert_eq!(
        row[1],
        s["mode"].as_str().unwrap_or_default(),
        "{name}: mode"
    );
    match s["time_to_target_s"].as_f64() {
        Some(t) => assert_cell(&row, 2, t, 1.0, "time to target"),
        None => assert_eq!(row[2], "–", "{name}: never reached the target"),
    }
    assert_cell(
        &row,
        4,
        num(&s, "final_test_accuracy"),
        100.0,
        "final accuracy",
    );
    assert_cell(
        &row,
        5,
        num(&s, "mean_wait_fraction"),
        100.0,
        "wait fraction",
    );
    assert_eq!(
        row[7],
        format!("{:.0}", num(&s, "images_per_s")),
        "{name}: images/s"
    );
}

#[test]
fn report_compares_a_gssp_and_a_bsp_run_in_a_table_and_pictures() {
    let _lock = job_lock();
    let scratch = Scratch::new();
    let gssp_run = scratch.train_ok(
        "gssp",
        4,
        &[
            "sync.mode=gssp",
            "sync.gssp.groups=2",
            "sync.gssp.grouping=static",
            "sync.gssp.static_groups=[[2],[3]]",
            "sync.gssp.inter_group_every=2",
            "compression.kind=topk",
            "compression.ratio=0.05",
            "run.epochs=1",
            "run.snapshot_every_s=0.5",
            "run.target_accuracy=0.5",
        ],
        DEADLINE,
    );
    let bsp_run = scratch.train_ok(
        "bsp",
        3,
        &[
            "sync.mode=bsp",
            "run.epochs=1",
            "run.snapshot_every_s=0.5",
            "run.target_accuracy=0.5",
        ],
        DEADLINE,
    );
    let out = scratch.tmp.path().join("report");
    let o = report(&[
        &gssp_run.dir.display().to_string(),
        &bsp_run.dir.display().to_string(),
        "--baseline",
        "run-bsp",
        "--out",
        &out.display().to_string(),
    ]);
    assert!(
        o.status.success(),
        "gssp report failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let md = read(&out.join("report.md"));
    check_row(&md, "run-gssp", &gssp_run);
    check_row(&md, "run-bsp", &bsp_run);
    assert!(md.contains("Speed-up vs run-bsp"), "{md}");
    let gssp_bytes = num(&gssp_run.summary(), "bytes_inter_group");
    assert!(gssp_bytes > 0.0, "gssp sent nothing between groups");
    assert_eq!(
        table_row(&md, "run-gssp")[6],
        format!("{:.2}", gssp_bytes / 1e6)
    );
    assert_eq!(table_row(&md, "run-bsp")[8], "1.00x");

    // Every picture a run has data for, in both formats, at the documented size.
    let mut pictures = vec!["accuracy".to_string()];
    for run in ["run-gssp", "run-bsp"] {
        for kind in ["timeline", "wait", "staleness", "bytes"] {
            pictures.push(format!("{kind}-{run}"));
        }
    }
    pictures.push("ratio-run-gssp".into());
    for p in &pictures {
        assert_eq!(
            png_size(&out.join(format!("{p}.png"))),
            (1280, 800),
            "{p}.png"
        );
        let svg = read(&out.join(format!("{p}.svg")));
        assert!(svg.starts_with("<svg"), "{p}.svg is not an SVG");
        assert!(
            md.contains(&format!("({p}.png)")),
            "report.md does not show {p}.png"
        );
    }
    let titles = [
        (
            "accuracy",
            &["Wall time (s)", "Test accuracy (%)", "run-gssp", "run-bsp"][..],
        ),
        (
            "timeline-run-gssp",
            &["Wall time (s)", "Worker", "rank 2 (g0)", "rank 3 (g1)"],
        ),
        (
            "wait-run-gssp",
            &["Worker (world rank)", "Wait fraction (%)"],
        ),
        (
            "ratio-run-gssp",
            &["Wall time (s)", "Upload ratio (% of the model)"],
        ),
        (
            "staleness-run-bsp",
            &["Staleness (optimizer steps)", "Share of pushes (%)"],
        ),
        ("bytes-run-gssp", &["Group", "Bytes sent (MB)", "group 1"]),
    ];
    for (p, want) in titles {
        let texts = svg_texts(&read(&out.join(format!("{p}.svg"))));
        for w in want {
            assert!(
                texts.iter().any(|t| t == w),
                "{p}.svg lacks the text {w:?}: {texts:?}"
            );
        }
    }
    // bsp has no exchange between groups: its ratio plot is skipped, and the report says so.
    assert!(!out.join("ratio-run-bsp.png").exists());
    let bsp_part = &md[md.find("## run-bsp").expect("a section for run-bsp")..];
    assert!(bsp_part.contains("Upload ratio: not drawn"), "{bsp_part}");
}

#[test]
fn report_errors_name_the_file_or_option_at_fault() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-run");
    let o = report(&[&missing.display().to_string()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no-such-run"));

    let run = dir.path().join("broken");
    std::fs::create_dir(&run).unwrap();
    std::fs::write(run.join("summary.json"), "{not json").unwrap();
    let o = report(&[&run.display().to_string()]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(err.contains("summary.json"), "{err}");

    let o = report(&[&run.display().to_string(), "--window", "5:1"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--window"));
}

#[test]
fn report_help_lists_its_options() {
    let o = report(&["--help"]);
    assert!(o.status.success());
    let help = String::from_utf8_lossy(&o.stdout);
    for opt in ["--out", "--baseline", "--window", "--budget-s", "RUN_DIR"] {
        assert!(help.contains(opt), "--help lacks {opt}:\n{help}");
    }
}

/// The `(name, ts, dur)` spans of each `(pid, tid)` track of a trace.
type Tracks = BTreeMap<(u64, u64), Vec<(String, i64, i64)>>;

/// The X spans of every (pid, tid) track of a trace, by track, sorted by start.
fn spans_by_track(events: &[serde_json::Value]) -> Tracks {
    let mut tracks = Tracks::new();
    for e in events.iter().filter(|e| e["ph"] == "X") {
        let (pid, tid) = (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap());
        let name = e["name"].as_str().unwrap().to_string();
        let (ts, dur) = (e["ts"].as_i64().unwrap(), e["dur"].as_i64().unwrap());
        assert!(dur > 0, "empty span {e}");
        tracks.entry((pid, tid)).or_default().push((name, ts, dur));
    }
    for spans in tracks.values_mut() {
        spans.sort_by_key(|s| s.1);
        for w in spans.windows(2) {
            assert!(w[0].1 + w[0].2 <= w[1].1, "overlapping spans {:?}", w);
        }
    }
    tracks
}

/// Seconds of the spans named one of `names` on rank `tid`'s track.
fn span_total(tracks: &Tracks, tid: u64, names: &[&str]) -> f64 {
    let spans = tracks
        .iter()
        .filter(|((_, t), _)| *t == tid)
        .flat_map(|(_, s)| s);
    spans
        .filter(|s| names.contains(&s.0.as_str()))
        .map(|s| s.2 as f64 * 1e-6)
        .sum()
}

/// The trace's spans must add up to the CSV column: a microsecond of rounding per row.
fn assert_total(trace_s: f64, csv: &[f64], what: &str) {
    let want: f64 = csv.iter().sum();
    let tol = 1.5e-6 * csv.len() as f64 + 1e-3 * want;
    assert!(
        (trace_s - want).abs() <= tol,
        "{what}: trace {trace_s} s, CSV {want} s"
    );
}

#[test]
fn trace_and_straggler_report_of_a_run_with_one_slow_worker() {
    let _lock = job_lock();
    let scratch = Scratch::new();
    // Group 1's rank 5 is 3x slower than everyone; transient spells on every worker. The run
    // ends on its epochs, 15 (1,406 pushes): the pads alone (3 workers at 10 ms, one at 30 ms:
    // at most 333 pushes a second) make that 4 s or more, time for checkpoints and progress
    // lines whatever the machine's speed.
    let (run, job) = scratch.train_ok_env(
        "slow",
        6,
        &[
            "sync.mode=gssp",
            "sync.gssp.groups=2",
            "sync.gssp.grouping=static",
            "sync.gssp.static_groups=[[2,3],[4,5]]",
            "sync.gssp.staleness=1",
            "sync.gssp.inter_group_every=2",
            "compression.kind=topk",
            "compression.ratio=0.05",
            "run.epochs=15",
            "run.snapshot_every_s=1",
            "run.checkpoint_every_s=1.5",
            "run.progress_every_s=1",
            "heterogeneity.tiers=[{factor=1.0,workers=3},{factor=3.0,workers=1}]",
            "heterogeneity.unit_s=0.01",
            "heterogeneity.straggler_prob=0.1",
            "heterogeneity.straggler_factor=2.0",
        ],
        &[("RUST_LOG", "gssp=info")],
        DEADLINE,
    );
    // Rank 0 serves group 0, yet its progress line names group 1's straggler: the group
    // servers tell each other their slowest worker.
    let last_progress = job
        .stderr
        .lines()
        .rfind(|l| l.contains("progress:"))
        .unwrap_or_else(|| panic!("no progress line:\n{}", job.stderr));
    assert!(last_progress.contains("slowest rank 5 "), "{last_progress}");
    let out = scratch.tmp.path().join("report");
    let o = report(&[
        &run.dir.display().to_string(),
        "--trace",
        "--out",
        &out.display().to_string(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    // The straggler report names rank 5 and the worker it holds back.
    let md = read(&out.join("report.md"));
    let g1 = table_row(&md, "group 1");
    assert!(
        g1[1].starts_with("rank 5 ") && g1[2] == "slow compute",
        "{md}"
    );
    assert!(g1[3].starts_with("rank 4 "), "{md}");
    assert_eq!(
        g1[4], "its group held at its staleness bound (1) by rank 5",
        "{md}"
    );
    let all = table_row(&md, "all workers");
    assert!(
        all[1].starts_with("rank 5 ") && all[3].starts_with("rank 4 "),
        "{md}"
    );

    // The trace: JSON, well-formed events, named tracks, spans that never overlap.
    let path = out.join("trace-run-slow.json");
    let text = read(&path);
    let trace: serde_json::Value = serde_json::from_str(&text).expect("the trace is JSON");
    let events = trace["traceEvents"].as_array().expect("traceEvents");
    for e in events {
        for key in ["ph", "ts", "pid", "tid", "name"] {
            assert!(!e[key].is_null(), "{key} missing from {e}");
        }
        assert!(
            e["ph"] != "X" || e["dur"].is_i64(),
            "a span without dur: {e}"
        );
    }
    for rank in 0..6u64 {
        let named = events.iter().any(|e| {
            e["name"] == "thread_name" && e["tid"] == rank && e["args"]["name"].as_str().is_some()
        });
        assert!(named, "rank {rank} has no thread_name");
    }
    let tracks = spans_by_track(events);

    // Totals agree with the CSV columns.
    for rank in 2..6u64 {
        let csv = run.rank_csv(rank as usize);
        for (span, col) in [
            ("compute", "compute_s"),
            ("comm", "comm_s"),
            ("wait", "wait_s"),
        ] {
            let what = format!("rank {rank} {span}");
            assert_total(span_total(&tracks, rank, &[span]), &csv.col(col), &what);
        }
    }
    for rank in 0..2u64 {
        let csv = run.rank_csv(rank as usize);
        for (spans, col) in [
            (&["wait"][..], "recv_wait_s"),
            (&["receive"], "receive_s"),
            (&["apply"], "apply_s"),
            (&["exchange", "drain"], "exchange_s"),
            (&["checkpoint"], "meet_s"),
            (&["send"], "send_s"),
        ] {
            let what = format!("rank {rank} {col}");
            assert_total(span_total(&tracks, rank, spans), &csv.col(col), &what);
        }
    }
    // The straggler's compute spans are the longest (medians: a spike of a preempted rank
    // does not count).
    let median_compute = |rank: u64| {
        let spans = tracks
            .iter()
            .filter(|((_, t), _)| *t == rank)
            .flat_map(|(_, s)| s);
        let c: Vec<f64> = spans
            .filter(|s| s.0 == "compute")
            .map(|s| s.2 as f64)
            .collect();
        common::median(&c)
    };
    // 3x as emulated; half that leaves room for a loaded machine's overshoots.
    for rank in 2..5 {
        assert!(
            median_compute(5) > 1.5 * median_compute(rank),
            "rank 5 against {rank}"
        );
    }
    // Arrows between the group servers, both ways, each from a send to a later receipt.
    let flow = |ph: &str| -> BTreeMap<u64, (u64, i64)> {
        events
            .iter()
            .filter(|e| e["ph"] == ph)
            .map(|e| {
                (
                    e["id"].as_u64().unwrap(),
                    (e["tid"].as_u64().unwrap(), e["ts"].as_i64().unwrap()),
                )
            })
            .collect()
    };
    let (starts, ends) = (flow("s"), flow("f"));
    assert_eq!(starts.len(), ends.len());
    for (id, (from, ts)) in &starts {
        let (to, te) = ends[id];
        assert!(
            from != &to && ts <= &te,
            "arrow {id}: {from}@{ts} -> {to}@{te}"
        );
    }
    for (a, b) in [(0, 1), (1, 0)] {
        assert!(
            starts.iter().any(|(id, s)| s.0 == a && ends[id].0 == b),
            "no arrow {a} -> {b}"
        );
    }
    // Instants: every evaluation, and the checkpoints.
    let instants = |name: &str| {
        events
            .iter()
            .filter(|e| e["ph"] == "i" && e["name"] == name)
            .count()
    };
    assert_eq!(instants("evaluation"), run.eval().rows.len());
    assert!(instants("checkpoint") >= 1);
    let rows: usize = (0..6).map(|r| run.rank_csv(r).rows.len()).sum();
    eprintln!(
        "trace: {} bytes, {} events, {rows} CSV rows: {:.0} bytes a row",
        text.len(),
        events.len(),
        text.len() as f64 / rows as f64
    );
}
