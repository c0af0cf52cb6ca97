//! `gssp plan`'s simulator against the scale study's measured runs (`gssp bench scale`,
//! stored by `gssp bench plan --save`): from each run's measured worker speeds and server
//! time per push, the predicted images per second must lie within 15% of what the run
//! measured for every mode and size, and so must the mean wait fraction wherever the
//! spread of speeds sets it (a fifth of the time or more: bsp, ssp, allreduce, local SGD).
//! The waits of a few milliseconds per iteration left in asp and gssp are the operating
//! system's, waking ranks that share two cores; the simulator does not model them, and
//! docs/scaling.md gives them. The machine's one fitted figure, its message latency, is
//! stored with the runs.

use gssp::plan::measured::{check, Machine, MeasuredRun};
use serde::Deserialize;

#[derive(Deserialize)]
struct Fixture {
    machine: Machine,
    runs: Vec<MeasuredRun>,
}

const TOLERANCE: f64 = 0.15;

/// Waits at least this share of the time come from the spread of speeds, not the OS.
const SPREAD_WAIT: f64 = 0.2;

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
    let spread_bound = fixture
        .runs
        .iter()
        .filter(|r| r.mean_wait_fraction >= SPREAD_WAIT)
        .count();
    assert_eq!(
        spread_bound,
        4 * 4,
        "bsp, ssp, allreduce and localsgd at every size"
    );
    let mut failures = Vec::new();
    for run in &fixture.runs {
        let c = check(run, &fixture.machine);
        let wait_off = run.mean_wait_fraction >= SPREAD_WAIT && c.wait_error() > TOLERANCE;
        if c.images_error() > TOLERANCE || wait_off {
            failures.push(format!(
                "{}: images/s {:.0} measured, {:.0} predicted; wait {:.3} measured, {:.3} predicted",
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
