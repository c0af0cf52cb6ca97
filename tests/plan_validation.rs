//! `gssp plan`'s simulator against the scale study's measured runs (`gssp bench scale`,
//! three seeds per mode and size, averaged and stored by `gssp bench plan --save`): from
//! each run's measured worker speeds and server time per push, the predicted images per
//! second must lie within 15% of what the runs measured for every mode and size, and so
//! must the mean wait fraction, or, where the wait is a few percent of the time, within
//! 1.5 points of it: asp's waits of 0.3-1.5% differ by 20-165% between seeds of one
//! setup, so a relative bound on them would test the scheduler's noise (docs/scaling.md).
//! The machine's two fitted figures, its message latency and the spacing of workers
//! released at once, are stored with the runs.

use gssp::plan::measured::{check, Machine, MeasuredRun};
use serde::Deserialize;

#[derive(Deserialize)]
struct Fixture {
    machine: Machine,
    runs: Vec<MeasuredRun>,
}

const TOLERANCE: f64 = 0.15;

/// Wait fractions may instead be this close in absolute terms (a share of the time).
const WAIT_POINTS: f64 = 0.015;

#[test]
fn predictions_match_the_measured_scale_study() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/plan_validation.json"
    );
    let text = std::fs::read_to_string(path).expect("the fixture is in the repository");
    let fixture: Fixture = serde_json::from_str(&text).expect("the fixture parses");
    let sizes: std::collections::BTreeSet<usize> =
        fixture.runs.iter().map(|r| r.times.len()).collect();
    assert_eq!(sizes.into_iter().collect::<Vec<_>>(), [8, 16, 32, 64]);
    assert_eq!(fixture.runs.len(), 4 * 9, "every variant at every size");
    assert!(
        fixture.runs.iter().all(|r| r.seeds == 3),
        "three seeds behind every figure"
    );
    let mut failures = Vec::new();
    for run in &fixture.runs {
        let c = check(run, &fixture.machine);
        let wait_close = c.wait_error() <= TOLERANCE
            || (c.predicted_wait_fraction - c.measured_wait_fraction).abs() <= WAIT_POINTS;
        if c.images_error() > TOLERANCE || !wait_close {
            failures.push(format!(
                "{}: images/s {:.0} measured, {:.0} predicted; wait {:.4} measured, {:.4} predicted",
                c.name,
                c.measured_images_per_s,
                c.predicted_images_per_s,
                c.measured_wait_fraction,
                c.predicted_wait_fraction
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
