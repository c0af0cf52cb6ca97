//! Evaluation of a model on the held-out data, with buffers reused across calls.
//!
//! Images: mean loss and accuracy on the test set, batch-norm statistics re-estimated
//! first where the weights are not the ones a worker trained ([`BnCalibration`]).
//!
//! Text: per-token loss, perplexity and next-token accuracy on test2016, each under full
//! teacher forcing (every decoder step reads the true previous word: the usual
//! definition of perplexity), and the perplexity on val; the final evaluation also
//! translates test2016 greedily and scores corpus BLEU-4 against the raw English lines
//! with sacreBLEU's defaults (13a tokenisation, lowercased, since the model's vocabulary
//! is). BLEU is the final evaluation's only: greedy decoding of test2016 costs as much as
//! a few hundred training steps.

use crate::compute::backend::Backend;
use crate::compute::eval::corpus_bleu;
use crate::compute::model::seq2seq::Seq2Seq;
use crate::compute::model::{Network, Trainable};
use crate::data::bucket::TextBatch;
use crate::data::multi30k::EncodedPairs;
use crate::data::text::detokenize;
use crate::data::Dataset;
use crate::telemetry::EvalRow;

use super::corpus::{Corpus, TextCorpus};
use super::model::{Model, TEXT_EVAL_BATCH};

/// Training images over which the distributed modes re-estimate batch-norm statistics
/// before each evaluation.
pub const BN_CALIBRATION_IMAGES: usize = 1024;

/// Longest greedy translation, in words before `<eos>` (test2016's longest reference has
/// 30 words).
pub const MAX_TRANSLATION_WORDS: usize = 50;

/// What one evaluation found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Evaluation {
    /// Images: mean cross-entropy on the test set. Text: mean per-token cross-entropy on
    /// test2016.
    pub loss: f64,
    /// Images: accuracy. Text: next-token accuracy on test2016.
    pub accuracy: f64,
    /// Text: perplexity on val.
    pub val_perplexity: Option<f64>,
    /// Text, final evaluation: corpus BLEU-4 of the greedy translations of test2016.
    pub bleu: Option<f64>,
    /// Text, final evaluation: the translations, one per test2016 sentence.
    pub translations: Option<Vec<String>>,
}

impl Evaluation {
    /// The eval.csv row at (time, epoch, iteration).
    pub fn row(&self, time_s: f64, epoch: f64, iteration: u64) -> EvalRow {
        let text = self.val_perplexity.is_some();
        EvalRow {
            time_s,
            epoch,
            iteration,
            test_loss: self.loss,
            test_accuracy: self.accuracy,
            test_perplexity: text.then(|| self.loss.exp()),
            val_perplexity: self.val_perplexity,
            bleu: self.bleu,
        }
    }
}

/// Re-estimates batch-norm running statistics for the weights a network holds, from a
/// fixed, seeded sample of training images (PyTorch's `swa_utils.update_bn`: a
/// cumulative average over the batches).
///
/// Why: the distributed modes evaluate weights no worker trained with, a server's replica
/// or the average of the group replicas, while each worker's running statistics belong to
/// its own weights; so batch-norm statistics do not travel with the weights in any mode
/// (the flat parameter buffer every mode sends stays trained values only), and the
/// evaluating rank computes them for the weights it evaluates. The single-process mode
/// evaluates its own weights with the statistics it trained, as PyTorch does.
pub struct BnCalibration {
    batches: Vec<Vec<usize>>,
    x: Vec<f32>,
    y: Vec<u8>,
}

impl BnCalibration {
    pub fn new(train: &Dataset, batch: usize, seed: u64) -> BnCalibration {
        use rand::seq::SliceRandom;
        use rand::SeedableRng;
        let mut order: Vec<usize> = (0..train.len()).collect();
        order.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0xB4));
        order.truncate(BN_CALIBRATION_IMAGES.min(train.len()));
        let batch = batch.max(1);
        BnCalibration {
            batches: order.chunks(batch).map(<[usize]>::to_vec).collect(),
            x: vec![0.0; batch * train.sample_len()],
            y: vec![0; batch],
        }
    }

    /// Replaces `net`'s running statistics with those of the sample under its weights.
    pub fn run<B: Backend>(&mut self, net: &mut Network<B>, train: &Dataset) {
        for (k, idx) in self.batches.iter().enumerate() {
            let len = idx.len() * train.sample_len();
            train.fill_batch(idx, &mut self.x[..len], &mut self.y[..idx.len()]);
            net.calibrate_batch(&self.x[..len], idx.len(), k);
        }
    }
}

/// Evaluation of one run's model; see the module doc.
pub struct Evaluator {
    kind: Kind,
}

enum Kind {
    Images {
        indices: Vec<usize>,
        x: Vec<f32>,
        y: Vec<u8>,
        calibration: Option<BnCalibration>,
    },
    Text,
}

impl Evaluator {
    /// An evaluator of `net` (built for `corpus`) that evaluates the statistics the model
    /// holds.
    pub fn new<B: Backend>(corpus: &Corpus, net: &Model<B>) -> Evaluator {
        let kind = match (corpus, net) {
            (Corpus::Images { test, .. }, Model::Image(n)) => Kind::Images {
                indices: (0..test.len()).collect(),
                x: vec![0.0; n.max_batch() * test.sample_len()],
                y: vec![0; n.max_batch()],
                calibration: None,
            },
            _ => Kind::Text,
        };
        Evaluator { kind }
    }

    /// An evaluator that first re-estimates batch-norm statistics (see
    /// [`BnCalibration`]); the same as [`Evaluator::new`] for a model without them.
    pub fn with_bn_calibration<B: Backend>(
        corpus: &Corpus,
        net: &Model<B>,
        seed: u64,
    ) -> Evaluator {
        let mut ev = Evaluator::new(corpus, net);
        if let (Kind::Images { calibration, .. }, Corpus::Images { train, .. }, Model::Image(n)) =
            (&mut ev.kind, corpus, net)
        {
            if n.has_state() {
                *calibration = Some(BnCalibration::new(train, n.max_batch(), seed));
            }
        }
        ev
    }

    /// Loss and accuracy (and for text the perplexities) of `net` on the held-out data.
    pub fn evaluate<B: Backend>(&mut self, net: &mut Model<B>, corpus: &Corpus) -> Evaluation {
        match (&mut self.kind, net, corpus) {
            (
                Kind::Images {
                    indices,
                    x,
                    y,
                    calibration,
                },
                Model::Image(n),
                Corpus::Images { train, test },
            ) => {
                if let Some(c) = calibration {
                    c.run(n, train);
                }
                let (loss, accuracy) = evaluate_images(n, test, indices, x, y);
                Evaluation {
                    loss,
                    accuracy,
                    ..Default::default()
                }
            }
            (Kind::Text, Model::Text(n), Corpus::Text(text)) => {
                let (loss, accuracy) = token_loss(n, &text.test);
                let (val_loss, _) = token_loss(n, &text.val);
                Evaluation {
                    loss,
                    accuracy,
                    val_perplexity: Some(val_loss.exp()),
                    ..Default::default()
                }
            }
            _ => unreachable!("an evaluator is built for its corpus and model"),
        }
    }

    /// [`Evaluator::evaluate`], and for text the greedy translations of test2016 and
    /// their BLEU: the evaluation at the end of a run.
    pub fn evaluate_final<B: Backend>(
        &mut self,
        net: &mut Model<B>,
        corpus: &Corpus,
    ) -> Evaluation {
        let mut ev = self.evaluate(net, corpus);
        if let (Model::Text(n), Corpus::Text(text)) = (net, corpus) {
            let hyps = translate(n, text);
            ev.bleu = Some(corpus_bleu(&hyps, &text.test_refs, true).score());
            ev.translations = Some(hyps);
        }
        ev
    }
}

/// Mean loss and accuracy of `net` on the whole test set.
fn evaluate_images<B: Backend>(
    net: &mut Network<B>,
    test: &Dataset,
    indices: &[usize],
    x: &mut [f32],
    y: &mut [u8],
) -> (f64, f64) {
    let (b, sl) = (net.max_batch(), test.sample_len());
    let (mut loss, mut correct) = (0.0f64, 0usize);
    for chunk in indices.chunks(b) {
        let n = chunk.len();
        test.fill_batch(chunk, &mut x[..n * sl], &mut y[..n]);
        let s = net.evaluate_batch(&x[..n * sl], &y[..n], n);
        loss += s.loss as f64 * n as f64;
        correct += s.correct;
    }
    let n = test.len().max(1) as f64;
    (loss / n, correct as f64 / n)
}

/// Mean per-token loss and next-token accuracy of `net` over `pairs`, teacher-forced,
/// in file order (NaN for a set without tokens). A pair the model cannot take (longer than its workspace: the workspace
/// is sized to the longest of every split, so none) is a programming error.
fn token_loss<B: Backend>(net: &mut Seq2Seq<B>, pairs: &EncodedPairs) -> (f64, f64) {
    let (mut nll, mut tokens, mut correct) = (0.0f64, 0u64, 0u64);
    let all: Vec<usize> = (0..pairs.len()).collect();
    for chunk in all.chunks(TEXT_EVAL_BATCH) {
        let batch = TextBatch::new(pairs, chunk);
        let st = net
            .evaluate_batch(&batch)
            .unwrap_or_else(|e| panic!("evaluation batch outside the workspace: {e}"));
        nll += st.loss as f64 * st.tokens as f64;
        tokens += st.tokens as u64;
        correct += st.correct as u64;
    }
    (nll / tokens as f64, correct as f64 / tokens as f64)
}

/// Greedy translations of test2016's sources, detokenized, in file order.
fn translate<B: Backend>(net: &mut Seq2Seq<B>, text: &TextCorpus) -> Vec<String> {
    let max_len = MAX_TRANSLATION_WORDS.min(net.config().max_dec_steps());
    let all: Vec<usize> = (0..text.test.len()).collect();
    let mut out = Vec::with_capacity(all.len());
    for chunk in all.chunks(TEXT_EVAL_BATCH) {
        let batch = TextBatch::new(&text.test, chunk);
        let ids = net
            .greedy_decode(&batch, max_len)
            .unwrap_or_else(|e| panic!("test2016 batch outside the workspace: {e}"));
        out.extend(ids.iter().map(|s| detokenize(&text.vocabs.en.decode(s))));
    }
    out
}
