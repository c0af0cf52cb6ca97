//! `gssp plan`'s simulator against the scale study's configs as measured (`gssp bench
//! scale --budget-s 20 --seeds 42,43,44`, every mode and size, each seed's run stored by
//! `gssp bench plan --save`): from each run's measured worker speeds, first starts,
//! profiling time and server time per push, averaged over the three seeds, the predicted
//! images per second and mean wait fraction must both lie within 15% of what the runs
//! measured, for every mode and size. The machine's two fitted figures, its message
//! latency and the spacing of workers released at once, are stored with the runs.

use gssp::tools::plan::measured::{check, Machine, MeasuredRun};
use serde::Deserialize;

#[derive(Deserialize)]
struct Fixture {
    machine: Machine,
    runs: Vec<MeasuredRun>,
}

const TOLERANCE: f64 = 0.15;

#[test]
fn predictions_match_the_measured_scale_study() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/plan_validation.json"
    );
    let text = std::fs::read_to_string(path).expect("the fixture is in the repository");
    let fixture: Fixture = serde_json::from_str(&text).expect("the fixture parses");
    let runs = MeasuredRun::means(&fixture.runs).expect("the seeds of a variant agree");
    let sizes: std::collections::BTreeSet<usize> = runs.iter().map(|r| r.times.len()).collect();
    assert_eq!(sizes.into_iter().collect::<Vec<_>>(), [8, 16, 32, 64]);
    assert_eq!(runs.len(), 4 * 9, "every variant at every size");
    assert!(
        runs.iter().all(|r| r.seeds == 3),
        "three seeds behind every figure"
    );
    let mut failures = Vec::new();
    for run in &runs {
        let c = check(run, &fixture.machine);
        if c.images_error() > TOLERANCE || c.wait_error() > TOLERANCE {
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
