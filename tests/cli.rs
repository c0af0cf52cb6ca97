//! The command line of one process: bad input gives one clear line and exit code 2 (no
//! panic, no backtrace), and `gssp train` trains LeNet-5 on real MNIST into a complete run
//! directory, also when started as `mpirun -n 1`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn gssp() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gssp"));
    c.env("RUST_LOG", "warn").env("OPENBLAS_NUM_THREADS", "1");
    c
}

fn mnist() -> PathBuf {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/data/mnist"));
    assert!(
        dir.join("train-images-idx3-ubyte.gz").exists(),
        "real MNIST missing at {}",
        dir.display()
    );
    dir
}

fn write_config(dir: &Path, extra: &str) -> PathBuf {
    let text = format!(
        "[run]\nname = \"t\"\nepochs = 1.0\n[data]\ndataset = \"mnist\"\ndir = \"{}\"\ntrain_limit = 12000\n\
         [model]\nname = \"lenet5\"\n[optim]\nlr = 0.05\nbatch_size = 64\n{extra}",
        mnist().display()
    );
    let p = dir.join("c.toml");
    std::fs::write(&p, text).unwrap();
    p
}

/// Runs `gssp train` and returns its output; asserts nothing.
fn train(config: &Path, sets: &[&str], out: &Path) -> Output {
    let mut c = gssp();
    c.arg("train")
        .arg("--config")
        .arg(config)
        .arg("--out")
        .arg(out);
    for s in sets {
        c.arg("--set").arg(s);
    }
    c.output().unwrap()
}

fn assert_usage_error(o: &Output, expected: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "stderr: {err}");
    assert!(
        err.contains(expected),
        "stderr should contain {expected:?}: {err}"
    );
    assert!(
        !err.contains("panicked") && !err.contains("backtrace"),
        "{err}"
    );
    assert_eq!(
        err.lines().filter(|l| l.starts_with("error:")).count(),
        1,
        "one error line: {err}"
    );
}

#[test]
fn invalid_values_unknown_keys_and_bad_overrides_exit_2_with_the_key_named() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = write_config(tmp.path(), "");
    let out = tmp.path().join("run");
    assert_usage_error(
        &train(&cfg, &["optim.lr=-0.1"], &out),
        "optim.lr: must be > 0, got -0.1",
    );
    assert_usage_error(
        &train(&cfg, &["optim.lrr=0.1"], &out),
        "unknown key optim.lrr",
    );
    assert_usage_error(&train(&cfg, &["run.epochs"], &out), "run.epochs");
    assert_usage_error(
        &train(&tmp.path().join("nope.toml"), &[], &out),
        "nope.toml",
    );
    assert_usage_error(
        &train(&cfg, &["data.dir=/nonexistent/mnist"], &out),
        "/nonexistent/mnist",
    );
    assert_usage_error(&train(&cfg, &["device.kind=cuda"], &out), "device.kind");
    // A CIFAR model on MNIST names both shapes.
    assert_usage_error(
        &train(&cfg, &["model.name=resnet18"], &out),
        "model.name: must be a model for the dataset's 1x28x28 images (resnet18 takes 3x32x32, CIFAR-10's), got resnet18",
    );
    assert!(!out.join("summary.json").exists());
}

#[test]
fn lenet5_learns_real_mnist_and_leaves_a_complete_run_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = write_config(tmp.path(), "");
    let out = tmp.path().join("run");
    let o = train(&cfg, &["run.eval_every_epochs=0.5"], &out);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    for key in [
        "mode",
        "model",
        "dataset",
        "epochs",
        "wall_s",
        "images_per_s",
        "final_test_accuracy",
    ] {
        assert!(!summary[key].is_null(), "summary.json lacks {key}");
    }
    assert_eq!(summary["mode"], "single");
    assert_eq!(summary["model"], "lenet5");
    let acc = summary["final_test_accuracy"].as_f64().unwrap();
    // One epoch over 12,000 real images: LeNet-5 gets about 96-97% on the full test set.
    assert!(acc > 0.94 && acc <= 1.0, "test accuracy {acc}");
    let eval = std::fs::read_to_string(out.join("eval.csv")).unwrap();
    assert!(eval.starts_with("time_s,epoch,iteration,test_loss,test_accuracy"));
    assert_eq!(
        eval.lines().count(),
        1 + 2,
        "an evaluation at 0.5 epochs and at the end"
    );
    let log = std::fs::read_to_string(out.join("rank-0.csv")).unwrap();
    let losses: Vec<f64> = log
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(9).unwrap().parse().unwrap())
        .collect();
    assert_eq!(losses.len(), 12000 / 64, "one row per iteration");
    let head: f64 = losses[..20].iter().sum::<f64>() / 20.0;
    let tail: f64 = losses[losses.len() - 20..].iter().sum::<f64>() / 20.0;
    assert!(tail < head / 4.0, "loss falls: {head} -> {tail}");
    let resolved = std::fs::read_to_string(out.join("config.toml")).unwrap();
    assert!(
        resolved.contains("eval_every_epochs = 0.5"),
        "the resolved config holds the override"
    );
}

#[test]
fn single_mode_runs_the_same_under_mpirun_n_1() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = write_config(tmp.path(), "");
    let out = tmp.path().join("run");
    let o = Command::new("mpirun")
        .args(["-n", "1", "--bind-to", "none"])
        .arg(env!("CARGO_BIN_EXE_gssp"))
        .args(["train", "--config"])
        .arg(&cfg)
        .args(["--set", "data.train_limit=2000", "--out"])
        .arg(&out)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let summary = std::fs::read_to_string(out.join("summary.json")).unwrap();
    assert!(summary.contains("\"mode\": \"single\""), "{summary}");
}

/// Training on real CIFAR-10 with `data.augment = "crop-flip"`: the run completes and learns
/// (well above the 10% of chance on the 1,000 test images after one epoch of data_batch_1).
#[test]
fn training_with_crop_flip_learns_real_cifar10() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/data/cifar10"
    ));
    let text = format!(
        "[run]\nname = \"c\"\nepochs = 1.0\n[data]\ndataset = \"cifar10\"\ndir = \"{}\"\n\
         augment = \"crop-flip\"\n[model]\nname = \"lenet5\"\n[optim]\nlr = 0.05\nbatch_size = 32\n",
        dir.display()
    );
    let cfg = tmp.path().join("c.toml");
    std::fs::write(&cfg, text).unwrap();
    let out = tmp.path().join("run");
    let o = train(&cfg, &[], &out);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let acc = summary["final_test_accuracy"].as_f64().unwrap();
    assert!(acc > 0.25, "test accuracy {acc} after one augmented epoch");
    let resolved = std::fs::read_to_string(out.join("config.toml")).unwrap();
    assert!(resolved.contains("augment = \"crop-flip\""), "{resolved}");
}

#[test]
fn bench_paper_names_an_unknown_mode_and_the_variants() {
    let tmp = tempfile::tempdir().unwrap();
    let o = gssp()
        .args(["bench", "paper", "--modes", "asp,nope", "--out"])
        .arg(tmp.path().join("b"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "stderr: {err}");
    assert!(
        err.contains("--modes: no variant \"nope\"; the variants are allreduce, bsp, asp"),
        "{err}"
    );
    assert!(
        !tmp.path().join("b").join("asp").exists(),
        "ran before checking"
    );
}

#[test]
fn bench_step_names_an_unknown_convolution_before_running() {
    let o = gssp()
        .args(["bench", "step", "--model", "resnet18", "--winograd", "f3"])
        .output()
        .unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(!o.status.success(), "stderr: {err}");
    assert!(
        err.contains("--winograd: must be mixed, f2, f4 or off, got f3"),
        "{err}"
    );
    assert!(!out.contains("images_per_s"), "ran before checking: {out}");
}

#[test]
fn plan_predicts_every_mode_and_recommends_a_group_per_tier() {
    let config = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/configs/paper_lenet5_mnist.toml"
    );
    let o = gssp()
        .args(["plan", "--config", config, "--json"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "stderr: {err}");
    let plan: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(plan["workers"], 16);
    assert_eq!(plan["params"], 61_706);
    // One group server per speed tier, as `sync.gssp.groups = "auto"` chooses.
    assert_eq!(plan["recommended_groups"], 4);
    let rows = plan["predictions"].as_array().unwrap();
    let modes: Vec<&str> = rows.iter().map(|r| r["mode"].as_str().unwrap()).collect();
    assert_eq!(
        modes,
        [
            "bsp",
            "asp",
            "asp-dc",
            "ssp",
            "allreduce",
            "localsgd",
            "async-localsgd",
            "bsp-balanced",
            "allreduce-balanced",
            "localsgd-balanced",
            "gssp",
            "gssp",
            "gssp",
            "gssp",
            "gssp-local",
            "gssp-overlap",
            "gssp-sharded",
            "gssp-sharded-overlap",
            "gssp-sharded-local",
            "gssp-sharded-colocated",
            "gssp-sharded-colocated-overlap",
            "gssp-sharded-colocated-local"
        ]
    );
    let rate = |i: usize| rows[i]["images_per_s"].as_f64().unwrap();
    // Batches in proportion to speed free allreduce from the 4x tier: about twice its rate.
    assert!(rate(8) > 1.8 * rate(4), "{} vs {}", rate(8), rate(4));
    // Four groups free the fast tiers from the slowest: about twice bsp's rate.
    assert!(rate(13) > 1.8 * rate(0), "{} vs {}", rate(13), rate(0));
    assert_eq!(rows[13]["bounds"], serde_json::json!([0, 0, 0, 0]));
    // Asynchronous local SGD never waits for a slower worker: about asp's rate.
    assert!(rate(6) > 0.9 * rate(1), "{} vs {}", rate(6), rate(1));
    // gssp with local steps at the recommended 4 groups: gssp's rate (nobody waits in
    // either), at a fraction of the pushes.
    assert_eq!(rows[14]["servers"], 4);
    assert!(rate(14) > 0.95 * rate(13), "{} vs {}", rate(14), rate(13));
    let busy = |i: usize| rows[i]["server_busy"].as_f64().unwrap();
    assert!(busy(14) < 0.8 * busy(13), "{} vs {}", busy(14), busy(13));
    // Computing a step ahead at the recommended 4 groups: their bounds of 0 raised to 1,
    // and at least gssp's rate (it only removes waits).
    assert_eq!(rows[15]["servers"], 4);
    assert_eq!(rows[15]["bounds"], serde_json::json!([1, 1, 1, 1]));
    assert!(rate(15) >= 0.99 * rate(13), "{} vs {}", rate(15), rate(13));
    // LeNet-5's servers are far from saturated here: sharding them does not pay beyond
    // the tolerance, so the fewest shards are chosen, at about gssp's rate.
    assert_eq!(rows[16]["shards"], 2);
    assert!(rate(16) >= 0.95 * rate(13), "{} vs {}", rate(16), rate(13));
    // Every row counts its nodes, a worker to a node: the servers' on top, unless they
    // sit beside the workers.
    let nodes = |i: usize| rows[i]["nodes"].as_u64().unwrap();
    assert_eq!((nodes(0), nodes(4), nodes(13)), (17, 16, 20));
    assert_eq!((nodes(16), nodes(19)), (16 + 8, 16));
    assert_eq!(rows[19]["shards"], 2);
    // The sharded rows with gssp-local's local steps, on the same shards and nodes.
    for (local, sharded) in [(18, 16), (21, 19)] {
        assert_eq!(rows[local]["shards"], rows[sharded]["shards"]);
        assert_eq!(nodes(local), nodes(sharded));
        assert!(busy(local) < busy(sharded), "{local}: {}", busy(local));
    }

    // `sync.gssp.staleness = "auto"` with 5x spells: each group the bound a run would pick.
    let transient = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/configs/paper_lenet5_mnist_transient.toml"
    );
    let o = gssp()
        .args(["plan", "--config", transient, "--json", "--groups", "4"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let plan: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let gssp_row = plan["predictions"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["mode"] == "gssp"))
        .expect("a gssp row");
    assert_eq!(gssp_row["servers"], 4, "{gssp_row}");
    assert_eq!(gssp_row["bounds"], serde_json::json!([4, 4, 4, 4]));

    // Scaled to 1,000 workers, the table names them.
    let o = gssp()
        .args([
            "plan",
            "--config",
            config,
            "--workers",
            "1000",
            "--max-groups",
            "2",
        ])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.starts_with("1000 workers, 61706 parameters"), "{out}");
    assert!(out.contains("| gssp | 2 |"), "{out}");
}

#[test]
fn plan_names_bad_speeds_tiers_and_a_missing_unit() {
    let config = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/configs/paper_lenet5_mnist.toml"
    );
    let run = |args: &[&str]| {
        gssp()
            .args(["plan", "--config", config])
            .args(args)
            .output()
            .unwrap()
    };
    let o = run(&["--tiers", "1:x"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--tiers: workers \"x\" is not a whole number"),
        "{err}"
    );
    assert_usage_error(
        &run(&["--speeds", "0.1,-1"]),
        "--speeds: -1 is not a positive",
    );
    assert_usage_error(&run(&["--workers", "0"]), "--workers must be at least 1");
    assert_usage_error(
        &run(&["--set", "heterogeneity.unit_s=0"]),
        "heterogeneity.unit_s is 0 (calibrated at run time): pass --unit-s",
    );
    assert_usage_error(
        &run(&["--seconds=0"]),
        "--seconds must be a positive number",
    );
}

/// A small synthetic-data config (MLP): trains in a second.
fn write_synthetic_config(dir: &Path) -> PathBuf {
    let p = dir.join("s.toml");
    std::fs::write(
        &p,
        "[run]\nname = \"s\"\nepochs = 1.0\n[data]\ndataset = \"synthetic\"\n\
         [data.synthetic]\ntrain = 200\ntest = 100\n[model]\nname = \"mlp\"\n\
         [optim]\nbatch_size = 20\nlr = 0.05\n",
    )
    .unwrap();
    p
}

#[test]
fn batches_lists_every_sample_once_per_epoch_in_the_runs_order() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_synthetic_config(dir.path());
    let order = |args: &[&str]| -> Vec<Vec<usize>> {
        let out = dir.path().join("b.txt");
        let o = gssp()
            .args(["batches", "--config"])
            .arg(&config)
            .args(args)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        std::fs::read_to_string(&out)
            .unwrap()
            .lines()
            .map(|l| l.split(' ').map(|i| i.parse().unwrap()).collect())
            .collect()
    };
    let two = order(&["--epochs", "2"]);
    assert_eq!(two.len(), 20, "200 samples in batches of 20, two epochs");
    for epoch in two.chunks(10) {
        let mut seen: Vec<usize> = epoch.iter().flatten().copied().collect();
        assert!(epoch.iter().all(|b| b.len() == 20));
        seen.sort_unstable();
        assert_eq!(seen, (0..200).collect::<Vec<_>>());
    }
    assert_ne!(two[..10], two[10..], "each epoch is reshuffled");
    assert_eq!(
        order(&[]),
        two[..10].to_vec(),
        "run.epochs by default, the same order"
    );
    assert_ne!(order(&["--set", "run.seed=7"]), two[..10].to_vec());
    assert_usage_error(
        &gssp()
            .args(["batches", "--config"])
            .arg(&config)
            .args(["--epochs", "0"])
            .output()
            .unwrap(),
        "--epochs: must be > 0",
    );
}

#[test]
fn a_run_starts_from_model_init_file_and_names_a_file_that_does_not_fit() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_synthetic_config(dir.path());
    let run = |sets: &[&str], out: &str| {
        let mut c = gssp();
        c.arg("train").arg("--config").arg(&config);
        for s in sets {
            c.args(["--set", s]);
        }
        c.arg("--out").arg(dir.path().join(out)).output().unwrap()
    };
    let first = run(&["run.seed=3"], "first");
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let model = dir.path().join("first/model.safetensors");
    let accuracy = |out: &str| {
        let s = std::fs::read_to_string(dir.path().join(out).join("summary.json")).unwrap();
        let v: serde_json::Value = serde_json::from_str(&s).unwrap();
        v["final_test_accuracy"].as_f64().unwrap()
    };
    // A learning rate too small to move the weights: the run scores what the file scored,
    // so it started from the file, not from its seed (the same seed, so the same data).
    let init = format!("model.init_file={}", model.display());
    let second = run(
        &[&init, "run.seed=3", "optim.lr=1e-12", "run.epochs=0.1"],
        "second",
    );
    assert!(
        second.status.success(),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    assert_eq!(accuracy("second"), accuracy("first"));
    let fresh = run(&["run.seed=3", "optim.lr=1e-12", "run.epochs=0.1"], "fresh");
    assert!(fresh.status.success());
    assert_ne!(accuracy("fresh"), accuracy("first"));
    // A file of another model is refused, naming the key, the file and the difference.
    let bad = run(&[&init, "model.mlp_hidden=[64]"], "bad");
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success());
    assert!(
        err.contains("model.init_file") && err.contains("model.safetensors"),
        "{err}"
    );
    let missing = run(&["model.init_file=/nonexistent/m.safetensors"], "missing");
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(
        err.contains("model.init_file: cannot read model file /nonexistent/m.safetensors"),
        "{err}"
    );
}

#[test]
fn bench_plan_names_the_missing_file_of_a_run_directory() {
    let dir = std::env::temp_dir().join(format!("gssp-bench-plan-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let missing = dir.join("no-such-run");
    let o = gssp()
        .args(["bench", "plan"])
        .arg(&missing)
        .output()
        .unwrap();
    let expected = format!(
        "cannot read config file {}: No such file or directory (os error 2)\n",
        missing.join("config.toml").display()
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.ends_with(&expected), "{err}");
    // A run directory with its config but no summary (a run that never finished).
    let config = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/configs/scale_lenet5_mnist_8.toml"
    );
    std::fs::copy(config, dir.join("config.toml")).unwrap();
    let o = gssp().args(["bench", "plan"]).arg(&dir).output().unwrap();
    assert_usage_error(
        &o,
        &format!("cannot read {}", dir.join("summary.json").display()),
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
