//! `gssp plan`'s simulator against the scale study's configs as measured (`gssp bench
//! scale --budget-s 20 --seeds 42,43,44`, every mode and size, each seed's run stored by
//! `gssp bench plan --save`): from each run's measured worker speeds, first starts,
//! profiling time and server time per push, averaged over the three seeds, the predicted
//! images per second and mean wait fraction must both lie within 15% of what the runs
//! measured, for every mode and size. The machine's two fitted figures, its message
//! latency and the spacing of workers released at once, are stored with the runs.
//!
//! The same holds for batches in proportion to speed: the paper scenario's balanced
//! allreduce, bsp and local SGD and plain allreduce (`gssp bench paper --budget-s 60 --seeds
//! 42,2,7`, on another machine, whose two figures are fitted on those runs and stored with
//! them in `plan_validation_balanced.json`).

use gssp::tools::plan::measured::{check, Machine, MeasuredRun};
use serde::Deserialize;

#[derive(Deserialize)]
struct Fixture {
    machine: Machine,
    runs: Vec<MeasuredRun>,
}

const TOLERANCE: f64 = 0.15;

/// The fixture `name` of tests/fixtures, its runs averaged over their seeds.
fn fixture(name: &str) -> (Machine, Vec<MeasuredRun>) {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(path).expect("the fixture is in the repository");
    let fixture: Fixture = serde_json::from_str(&text).expect("the fixture parses");
    let runs = MeasuredRun::means(&fixture.runs).expect("the seeds of a variant agree");
    (fixture.machine, runs)
}

/// Each run whose predicted images/s or wait fraction lies more than 15% from its measured.
fn outside_tolerance(runs: &[MeasuredRun], machine: &Machine) -> Vec<String> {
    let mut failures = Vec::new();
    for run in runs {
        let c = check(run, machine);
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
    failures
}

#[test]
fn predictions_match_the_measured_scale_study() {
    let (machine, runs) = fixture("plan_validation.json");
    let sizes: std::collections::BTreeSet<usize> = runs.iter().map(|r| r.times.len()).collect();
    assert_eq!(sizes.into_iter().collect::<Vec<_>>(), [8, 16, 32, 64]);
    assert_eq!(runs.len(), 4 * 9, "every variant at every size");
    assert!(
        runs.iter().all(|r| r.seeds == 3),
        "three seeds behind every figure"
    );
    let failures = outside_tolerance(&runs, &machine);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn predictions_match_the_measured_balanced_runs() {
    let (machine, runs) = fixture("plan_validation_balanced.json");
    let mut names: Vec<&str> = runs.iter().map(|r| r.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "16-workers/allreduce",
            "16-workers/allreduce-balanced",
            "16-workers/bsp-balanced",
            "16-workers/localsgd-balanced"
        ]
    );
    assert!(
        runs.iter().all(|r| r.seeds == 3),
        "three seeds behind every figure"
    );
    assert!(
        runs.iter()
            .filter(|r| r.name.ends_with("-balanced"))
            .all(|r| r.balance_bounds.is_some()),
        "the balanced runs are simulated balanced"
    );
    let failures = outside_tolerance(&runs, &machine);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
