//! `gssp report` on real runs: a gssp run with top-k between two groups and a bsp run,
//! each trained under `mpirun`. The report's table must carry the summaries' figures, its
//! pictures must be real PNG and SVG files with their axis titles, and a plot a run has no
//! data for must be named as skipped.

mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use common::{job_lock, num, Run, Scratch};

const DEADLINE: Duration = Duration::from_secs(90);

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
