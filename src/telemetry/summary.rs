//! What a run concludes: the snapshots evaluated after training, the evaluation rows, and
//! `summary.json`.

use std::io::Write;

use serde::Serialize;

use super::logs::CsvRow;
use crate::config::Config;

/// Copies of the model taken at fixed wall-clock intervals during training and
/// evaluated afterwards, so evaluation never slows training down.
///
/// One copy per interval passed: where no update came for several intervals, the first
/// update after them is taken once for each (its time on every row). So the i-th copy of
/// every group server is of the same interval, and averaging the servers' copies index by
/// index (`exchange::average_replicas`, the simulated clock's servers) averages models of
/// one moment, however unevenly the servers' pushes came.
pub struct Snapshots {
    every_s: f64,
    next_s: f64,
    pub taken: Vec<(EvalRow, Vec<f32>)>,
}

impl Snapshots {
    /// `every_s == 0` takes none (only the final model is evaluated).
    pub fn new(every_s: f64) -> Snapshots {
        Snapshots {
            every_s,
            next_s: every_s,
            taken: Vec::new(),
        }
    }

    /// Continues from a checkpoint taken at `time_s` with the snapshots `taken`.
    pub fn resume(every_s: f64, time_s: f64, taken: Vec<(EvalRow, Vec<f32>)>) -> Snapshots {
        let mut s = Snapshots::new(every_s);
        while s.every_s > 0.0 && s.next_s <= time_s {
            s.next_s += s.every_s;
        }
        s.taken = taken;
        s
    }

    /// Whether [`Snapshots::maybe_take`] would take one at `time_s` (so that a model on a
    /// GPU is copied to the host only then).
    pub fn due(&self, time_s: f64) -> bool {
        self.every_s > 0.0 && time_s >= self.next_s
    }

    /// Takes a snapshot if `time_s` has passed the next interval boundary.
    pub fn maybe_take(&mut self, time_s: f64, epoch: f64, iteration: u64, weights: &[f32]) {
        while self.due(time_s) {
            self.next_s += self.every_s;
            self.take(time_s, epoch, iteration, weights);
        }
    }

    /// `taken` without the repeats: a copy equal to the one before it is the same model at
    /// the same update, evaluated once.
    pub fn distinct(mut taken: Vec<(EvalRow, Vec<f32>)>) -> Vec<(EvalRow, Vec<f32>)> {
        taken.dedup_by(|later, earlier| later.1 == earlier.1);
        taken
    }

    pub fn take(&mut self, time_s: f64, epoch: f64, iteration: u64, weights: &[f32]) {
        let row = EvalRow {
            time_s,
            epoch,
            iteration,
            ..Default::default()
        };
        self.taken.push((row, weights.to_vec()));
    }
}

/// One test-set evaluation. Image runs leave the text columns empty.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct EvalRow {
    pub time_s: f64,
    pub epoch: f64,
    pub iteration: u64,
    /// Mean cross-entropy: per image, or per target token on test2016.
    pub test_loss: f64,
    /// Accuracy: of the images, or of next-token predictions on test2016.
    pub test_accuracy: f64,
    /// Text: `exp(test_loss)`.
    #[serde(default)]
    pub test_perplexity: Option<f64>,
    /// Text: perplexity on val.
    #[serde(default)]
    pub val_perplexity: Option<f64>,
    /// Text, final evaluation: corpus BLEU-4 of the greedy translations of test2016.
    #[serde(default)]
    pub bleu: Option<f64>,
}

impl CsvRow for EvalRow {
    const HEADER: &'static str =
        "time_s,epoch,iteration,test_loss,test_accuracy,test_perplexity,val_perplexity,bleu";
    fn write(&self, w: &mut dyn Write) -> std::io::Result<()> {
        let opt = |v: Option<f64>| v.map_or_else(String::new, |v| format!("{v:.4}"));
        writeln!(
            w,
            "{:.6},{:.5},{},{:.6},{:.6},{},{},{}",
            self.time_s,
            self.epoch,
            self.iteration,
            self.test_loss,
            self.test_accuracy,
            opt(self.test_perplexity),
            opt(self.val_perplexity),
            opt(self.bleu)
        )
    }
}

/// First time an evaluation curve reaches `target` accuracy.
pub fn time_to_target(evals: &[EvalRow], target: f64) -> Option<f64> {
    evals
        .iter()
        .find(|e| e.test_accuracy >= target)
        .map(|e| e.time_s)
}

/// The clock a run's times are on: the machine's.
pub const WALL: &str = "wall";

/// The clock a run's times are on: the simulator's (`gssp train --simulate`).
pub const SIMULATED: &str = "simulated";

/// `summary.json`. Keys that do not apply to a mode are null.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    /// The clock its times (`wall_s`, `time_to_target_s`, the logs') are on: [`WALL`] for a
    /// run of processes, [`SIMULATED`] for one on the simulated clock.
    pub clock: String,
    pub mode: String,
    pub model: String,
    pub dataset: String,
    pub ranks: usize,
    pub workers: usize,
    /// `run.seed` of the run.
    pub seed: u64,
    pub epochs: f64,
    pub iterations: u64,
    pub wall_s: f64,
    /// Training samples per second: images, or sentence pairs for text (counted as full
    /// batches: an epoch's last, smaller batch counts whole).
    pub images_per_s: f64,
    pub final_test_loss: f64,
    pub final_test_accuracy: f64,
    /// Text: the final model's perplexity on test2016 and on val, and the BLEU-4 of its
    /// greedy translations of test2016.
    pub final_test_perplexity: Option<f64>,
    pub final_val_perplexity: Option<f64>,
    pub final_bleu: Option<f64>,
    pub target_accuracy: f64,
    pub time_to_target_s: Option<f64>,
    pub mean_wait_fraction: Option<f64>,
    pub worker_wait_fractions: Option<Vec<f64>>,
    pub bytes_sent: Option<u64>,
    pub bytes_inter_group: Option<u64>,
    /// Point-to-point messages sent or received on the world communicator, all ranks
    /// together: 0 in every mode, since each group's traffic travels on its own
    /// communicator (`None` in a single process).
    pub p2p_messages_on_world: Option<u64>,
    /// gssp: after the final flush, max |replica - initial - sum of all groups' sent updates|.
    pub replica_max_error: Option<f64>,
    /// gssp: exchanges (all servers) that sent nothing because a peer's mailbox was full.
    pub exchanges_deferred: Option<u64>,
    /// gssp: drains (all servers) between a server's own exchanges (`sync.gssp.drain_on_arrival`).
    pub arrival_drains: Option<u64>,
    /// gssp: outer-optimizer steps (all servers) on their own progress (`sync.gssp.outer`;
    /// 0 with `kind = "none"`).
    pub outer_steps: Option<u64>,
    /// Parameter-server modes, one per server (layout order): share of the run it was busy
    /// (receiving and applying pushes, answering workers, exchanging).
    pub server_busy_fractions: Option<Vec<f64>>,
    /// Parameter-server modes, one per server: milliseconds of busy time per applied push.
    pub server_busy_ms_per_push: Option<Vec<f64>>,
    /// Parameter-server modes: mean staleness of the applied pushes, all servers together.
    pub mean_push_staleness: Option<f64>,
    /// gssp, one per group server: share of its busy time spent in the inter-group exchange
    /// (top-k, sends, drain).
    pub exchange_shares_of_busy: Option<Vec<f64>>,
    /// The same share in thread CPU time (what the server computed, without the time the
    /// OS ran other processes in the middle of it).
    pub exchange_shares_of_busy_cpu: Option<Vec<f64>>,
    /// gssp, one per group server: mean milliseconds per exchange.
    pub mean_exchange_ms: Option<Vec<f64>>,
    /// The same in thread CPU milliseconds (compression, sends and drains of one exchange,
    /// and any drain on arrival before the next).
    pub mean_exchange_cpu_ms: Option<Vec<f64>>,
}

/// What every mode's summary is computed from.
#[derive(Debug, Clone, Copy)]
pub struct RunTotals {
    pub ranks: usize,
    pub workers: usize,
    pub epochs: f64,
    /// Iterations of all workers together.
    pub iterations: u64,
    /// Seconds of training (throughput is measured over them).
    pub wall_s: f64,
}

impl Summary {
    /// The keys every mode has, from the run's totals and its test-set evaluations in time
    /// order (the last one is the final model's). The keys of the distributed modes stay
    /// null; their path fills them in.
    pub fn new(cfg: &Config, model: &str, totals: RunTotals, evals: &[EvalRow]) -> Summary {
        let last = evals.last().copied().unwrap_or_default();
        Summary {
            clock: WALL.to_string(),
            mode: cfg.sync.mode.to_string(),
            model: model.into(),
            dataset: cfg.data.dataset.to_string(),
            ranks: totals.ranks,
            workers: totals.workers,
            seed: cfg.run.seed,
            epochs: totals.epochs,
            iterations: totals.iterations,
            wall_s: totals.wall_s,
            images_per_s: totals.iterations as f64 * cfg.optim.batch_size as f64
                / totals.wall_s.max(1e-9),
            final_test_loss: last.test_loss,
            final_test_accuracy: last.test_accuracy,
            final_test_perplexity: last.test_perplexity,
            final_val_perplexity: last.val_perplexity,
            final_bleu: last.bleu,
            target_accuracy: cfg.run.target_accuracy,
            time_to_target_s: time_to_target(evals, cfg.run.target_accuracy),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn summary_takes_the_common_keys_from_the_totals_and_the_last_evaluation() {
        let text = "[data]\ndataset = \"synthetic\"\n[model]\nname = \"mlp\"\n\
                    [optim]\nbatch_size = 8\n[run]\ntarget_accuracy = 0.5\n";
        let cfg = Config::from_str_with_overrides(text, "test", &[]).unwrap();
        let e = |t, a| EvalRow {
            time_s: t,
            test_loss: 1.0 - a,
            test_accuracy: a,
            ..Default::default()
        };
        let totals = RunTotals {
            ranks: 1,
            workers: 1,
            epochs: 2.0,
            iterations: 100,
            wall_s: 4.0,
        };
        let s = Summary::new(
            &cfg,
            "mlp",
            totals,
            &[e(1.0, 0.3), e(2.0, 0.6), e(4.0, 0.7)],
        );
        assert_eq!(
            (s.mode.as_str(), s.dataset.as_str()),
            ("single", "synthetic")
        );
        assert_eq!((s.iterations, s.epochs, s.wall_s), (100, 2.0, 4.0));
        assert_eq!(s.images_per_s, 200.0);
        assert_eq!(
            (s.final_test_accuracy, s.time_to_target_s),
            (0.7, Some(2.0))
        );
        assert_eq!(s.bytes_sent, None);
    }

    #[test]
    fn time_to_target_is_the_first_crossing() {
        let e = |t, a| EvalRow {
            time_s: t,
            test_accuracy: a,
            ..Default::default()
        };
        let evals = [e(1.0, 0.5), e(2.0, 0.97), e(3.0, 0.99), e(4.0, 0.98)];
        assert_eq!(time_to_target(&evals, 0.98), Some(3.0));
        assert_eq!(time_to_target(&evals, 0.995), None);
    }
}

#[cfg(test)]
mod snapshot_tests {
    use super::Snapshots;

    /// A copy per interval passed, so that two servers' i-th copies are of one interval.
    #[test]
    fn an_update_after_several_intervals_is_taken_once_for_each() {
        let mut steady = Snapshots::new(0.1);
        let mut sparse = Snapshots::new(0.1);
        for k in 1..=10 {
            steady.maybe_take(0.1 * k as f64 + 0.01, 0.0, k, &[k as f32]);
        }
        sparse.maybe_take(0.12, 0.0, 1, &[1.0]);
        sparse.maybe_take(0.75, 0.0, 2, &[2.0]);
        sparse.maybe_take(1.02, 0.0, 3, &[3.0]);
        let values = |s: &Snapshots| s.taken.iter().map(|(_, w)| w[0]).collect::<Vec<_>>();
        assert_eq!(steady.taken.len(), 10);
        assert_eq!(
            values(&sparse),
            [1.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 3.0, 3.0, 3.0]
        );
        let times: Vec<f64> = sparse.taken.iter().map(|(r, _)| r.time_s).collect();
        assert!(times.windows(2).all(|t| t[0] <= t[1]), "{times:?}");
        assert!(!sparse.due(1.05));
        let distinct = Snapshots::distinct(sparse.taken);
        let values: Vec<f32> = distinct.iter().map(|(_, w)| w[0]).collect();
        assert_eq!(values, [1.0, 2.0, 3.0]);
    }
}
