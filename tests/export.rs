//! Model export: a run leaves `model.safetensors`, and `gssp eval` of it on the run's
//! config gives the run's own final test accuracy and loss, in single mode and in a
//! distributed mode whose final evaluation re-estimates batch-norm statistics. A damaged
//! file, a missing one and a file of another model are each one error line naming the
//! file. (That PyTorch loads the same files is checked by hand with
//! `scripts/pytorch_reference.py --load`; see docs/results.md.)

mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use common::{cifar10_dir, job_lock, mnist_dir, spawn_mpirun, Run, Scratch};

fn gssp() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gssp"));
    c.env("RUST_LOG", "warn").env("OPENBLAS_NUM_THREADS", "1");
    c
}

/// `gssp eval --model <model> --config <config> <extra...>`.
fn eval(model: &Path, config: &Path, extra: &[&str]) -> Output {
    gssp()
        .arg("eval")
        .arg("--model")
        .arg(model)
        .arg("--config")
        .arg(config)
        .args(extra)
        .output()
        .expect("run gssp eval")
}

/// `gssp eval --json` of the run's model on the run's resolved config.
fn eval_json(run: &Path) -> serde_json::Value {
    let o = eval(
        &run.join("model.safetensors"),
        &run.join("config.toml"),
        &["--json"],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("gssp eval --json prints one JSON object")
}

/// Asserts that `gssp eval` reports the run's final accuracy and loss.
fn assert_eval_matches_summary(run: &Run) {
    let summary = run.summary();
    let got = eval_json(&run.dir);
    assert_eq!(
        got["test_accuracy"].as_f64(),
        summary["final_test_accuracy"].as_f64(),
        "eval {got} vs summary {summary}"
    );
    let (a, b) = (
        got["test_loss"].as_f64().unwrap(),
        summary["final_test_loss"].as_f64().unwrap(),
    );
    assert!((a - b).abs() < 1e-9, "loss {a} vs {b}");
    assert_eq!(got["model"], summary["model"]);
    assert_eq!(got["metadata"]["gssp_version"], env!("CARGO_PKG_VERSION"));
    // The atomic write leaves no temporary file behind.
    let stray: Vec<_> = std::fs::read_dir(&run.dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp-"))
        .collect();
    assert!(stray.is_empty(), "{stray:?}");
}

fn assert_usage_error(o: &Output, expected: &[&str]) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "stderr: {err}");
    for e in expected {
        assert!(err.contains(e), "stderr should contain {e:?}: {err}");
    }
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(
        err.lines().filter(|l| l.starts_with("error:")).count(),
        1,
        "one error line: {err}"
    );
}

#[test]
fn single_mode_exports_a_model_that_gssp_eval_scores_as_the_run_did() {
    let _lock = job_lock();
    let s = Scratch::new();
    let config = s.config(
        "lenet",
        &format!(
            "[run]\nepochs = 1.0\nseed = 3\n[data]\ndataset = \"mnist\"\ndir = \"{}\"\n\
             train_limit = 3000\ntest_limit = 2000\n[model]\nname = \"lenet5\"\n\
             [optim]\nlr = 0.05\nbatch_size = 64\n",
            mnist_dir().display()
        ),
    );
    let out = s.out("lenet");
    let o = gssp()
        .args(["train", "--config"])
        .arg(&config)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let run = Run { dir: out, ranks: 1 };
    assert_eval_matches_summary(&run);
    let acc = run.summary()["final_test_accuracy"].as_f64().unwrap();
    assert!(acc > 0.3, "well above the 10% of chance: {acc}");

    // The sentence form names the file, the model and the accuracy.
    let model = run.dir.join("model.safetensors");
    let resolved = run.dir.join("config.toml");
    let o = eval(&model, &resolved, &[]);
    let line = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        line.contains(&format!(
            "{} lenet5 on mnist: test accuracy {:.2}% (2000 images)",
            model.display(),
            100.0 * acc
        )),
        "{line}"
    );

    // Another model in the config: named, with both sides.
    assert_usage_error(
        &eval(&model, &resolved, &["--set", "model.name=mlp"]),
        &[
            &model.display().to_string(),
            "holds model lenet5, the config has model mlp",
        ],
    );
    // A truncated file, a file of garbage, a missing file.
    let bytes = std::fs::read(&model).unwrap();
    let cut = s.tmp.path().join("cut.safetensors");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    assert_usage_error(
        &eval(&cut, &resolved, &[]),
        &[&cut.display().to_string(), "truncated or corrupt"],
    );
    let junk = s.tmp.path().join("junk.safetensors");
    std::fs::write(&junk, b"not a model at all").unwrap();
    assert_usage_error(
        &eval(&junk, &resolved, &[]),
        &[&junk.display().to_string(), "truncated or corrupt"],
    );
    let none = s.tmp.path().join("none.safetensors");
    assert_usage_error(
        &eval(&none, &resolved, &[]),
        &["cannot read model file", &none.display().to_string()],
    );
    // A bad config is the config's error, as for `gssp train`.
    assert_usage_error(
        &eval(&model, &resolved, &["--set", "optim.lr=-1"]),
        &["optim.lr"],
    );
}

/// The distributed modes evaluate the final weights after re-estimating batch-norm
/// statistics on rank 0; the exported file holds those statistics, so `gssp eval`
/// (which does not re-estimate) gives the same figures.
#[test]
fn allreduce_exports_the_calibrated_model_it_evaluated() {
    let _lock = job_lock();
    let s = Scratch::new();
    let config = s.config(
        "resnet",
        &format!(
            "[run]\nepochs = 1.0\nseed = 5\n[data]\ndataset = \"cifar10\"\ndir = \"{}\"\n\
             train_limit = 256\ntest_limit = 200\n[model]\nname = \"resnet18\"\nwidth = 0.125\n\
             [optim]\nlr = 0.05\nbatch_size = 32\n[sync]\nmode = \"allreduce\"\n",
            cifar10_dir().display()
        ),
    );
    let out = s.out("resnet");
    let args = s.train_args(&config, &[], &out);
    spawn_mpirun(2, &args, &out.display().to_string())
        .wait(Duration::from_secs(240))
        .assert_ok("allreduce resnet18");
    assert_eval_matches_summary(&Run { dir: out, ranks: 2 });
}
