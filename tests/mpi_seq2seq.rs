//! The translation workload under every sync mode and `mpirun`, on real Multi30k: the
//! shipped config `configs/seq2seq_multi30k.toml` narrowed (width 1/8, 1,920 training
//! pairs, 200 val and test2016 pairs) so that each job takes seconds. Each run must lower
//! every worker's loss, reach a test perplexity far below the untrained model's (about
//! the English vocabulary, 5,927), score BLEU, and leave its vocabularies and
//! translations in the run directory. The bounds were measured on a 2-core machine with
//! oversubscribed ranks (the untrained model: perplexity ~5,900).

mod common;

use std::path::Path;
use std::time::Duration;

use common::{job_lock, mean, multi30k_dir, num, Run, Scratch};

/// Hang guard of every job: minutes, against the seconds a job takes.
const DEADLINE: Duration = Duration::from_secs(600);

fn config() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/seq2seq_multi30k.toml")
}

/// The narrowing every run here shares.
fn narrow(dir: &str) -> Vec<String> {
    [
        "model.width=0.125",
        "data.train_limit=1920",
        "data.test_limit=200",
        "run.epochs=4",
        "run.eval_every_epochs=0",
        "run.seed=3",
        "device.kind=\"cpu\"",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([format!("data.dir=\"{dir}\"")])
    .collect()
}

fn train(scratch: &Scratch, name: &str, ranks: usize, extra: &[&str]) -> Run {
    let dir = multi30k_dir().display().to_string();
    let mut sets = narrow(&dir);
    sets.extend(extra.iter().map(|s| s.to_string()));
    let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
    scratch.train_config_ok(name, &config(), ranks, &sets, DEADLINE)
}

/// What every seq2seq run must show; returns the final test perplexity.
fn assert_translation_run(run: &Run, mode: &str, workers: &[usize], max_perplexity: f64) -> f64 {
    let s = run.summary();
    assert_eq!(
        (s["mode"].as_str(), s["model"].as_str()),
        (Some(mode), Some("seq2seq"))
    );
    assert_eq!(s["dataset"], "multi30k");
    let ppl = num(&s, "final_test_perplexity");
    let val = num(&s, "final_val_perplexity");
    let bleu = num(&s, "final_bleu");
    eprintln!("{mode}: test perplexity {ppl:.1}, val {val:.1}, BLEU {bleu:.2}");
    assert!(
        ppl.is_finite() && ppl > 1.0 && ppl < max_perplexity,
        "{mode}: perplexity {ppl}"
    );
    assert!(
        val.is_finite() && val > 1.0 && val < 1.5 * max_perplexity,
        "{mode}: val {val}"
    );
    assert!((0.0..=100.0).contains(&bleu), "{mode}: BLEU {bleu}");
    let loss = num(&s, "final_test_loss");
    assert!(
        (loss.exp() - ppl).abs() < 1e-6 * ppl,
        "perplexity is exp(loss)"
    );
    // The last eval.csv row is the final model's, with every text column.
    let eval = run.eval();
    assert!((eval.last("bleu") - bleu).abs() < 1e-3, "eval.csv BLEU");
    assert!((eval.last("test_perplexity") - ppl).abs() < 1e-3 * ppl);
    for rank in workers {
        let loss = run.rank_csv(*rank).col("loss");
        assert!(loss.len() >= 8, "rank {rank}: {} rows", loss.len());
        let k = loss.len() / 4;
        let (first, last) = (mean(&loss[..k]), mean(&loss[loss.len() - k..]));
        assert!(
            last < first - 0.5,
            "{mode} rank {rank}: loss {first:.3} -> {last:.3}"
        );
    }
    let translations = std::fs::read_to_string(run.dir.join("translations.test2016.en"))
        .expect("the run writes its translations");
    assert_eq!(
        translations.lines().count(),
        200,
        "one line per test2016 sentence"
    );
    let vocab = std::fs::read_to_string(run.dir.join("vocab.en.txt")).expect("vocab.en.txt");
    assert_eq!(
        vocab.lines().count(),
        5927,
        "the vocabulary of the full training split"
    );
    ppl
}

#[test]
fn every_sync_mode_trains_seq2seq_on_multi30k() {
    let _lock = job_lock();
    let scratch = Scratch::new();
    // A server and 3 workers; gssp: 2 group servers of 2 workers each; the serverless
    // modes: 3 workers.
    let cases: [(&str, usize, &[&str], Vec<usize>); 6] = [
        ("bsp", 4, &[], vec![1, 2, 3]),
        ("asp", 4, &[], vec![1, 2, 3]),
        ("ssp", 4, &["sync.ssp.staleness=2"], vec![1, 2, 3]),
        (
            "gssp",
            6,
            &["sync.gssp.groups=2", "sync.gssp.staleness=1"],
            vec![2, 3, 4, 5],
        ),
        ("allreduce", 3, &[], vec![0, 1, 2]),
        (
            "localsgd",
            3,
            &["sync.localsgd.local_steps=2"],
            vec![0, 1, 2],
        ),
    ];
    for (mode, ranks, extra, workers) in cases {
        let mut sets = vec![format!("sync.mode=\"{mode}\"")];
        sets.extend(extra.iter().map(|s| s.to_string()));
        let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
        let run = train(&scratch, mode, ranks, &sets);
        assert_translation_run(&run, mode, &workers, 400.0);
        if mode == "gssp" {
            let err = num(&run.summary(), "replica_max_error");
            assert!(err < 1e-4, "gssp replicas differ by {err}");
        }
    }
}

#[test]
fn one_process_seq2seq_learns_and_its_exported_model_evaluates_to_the_same_perplexity() {
    let _lock = job_lock();
    let scratch = Scratch::new();
    let run = train(&scratch, "single", 1, &["sync.mode=\"single\""]);
    let ppl = assert_translation_run(&run, "single", &[0], 400.0);
    // `gssp eval` of the exported model gives the run's final test perplexity.
    let dir = multi30k_dir().display().to_string();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_gssp"));
    cmd.args(["eval", "--json", "--model"])
        .arg(run.dir.join("model.safetensors"))
        .arg("--config")
        .arg(config());
    for s in narrow(&dir) {
        cmd.args(["--set", &s]);
    }
    let out = cmd.output().expect("gssp eval runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let got = num(&r, "test_perplexity");
    assert!((got - ppl).abs() < 1e-3 * ppl, "eval {got} vs run {ppl}");
    let bleu = num(&run.summary(), "final_bleu");
    assert!(
        (num(&r, "bleu") - bleu).abs() < 1e-9,
        "eval BLEU vs the run's"
    );
}
