//! The paper's third workload: an LSTM encoder-decoder (bentrevett's pytorch-seq2seq,
//! tutorial 1) over time-major [`TextBatch`]es, with its own flat parameter and gradient
//! buffers, laid out and named as the PyTorch module's `state_dict`.
//!
//! A training step (`forward_backward`), for a source `[Ts x B]` and a target `[Tt x B]`
//! whose row 0 is `<sos>`:
//!
//! 1. encoder: embedding, dropout, LSTM over all `Ts` steps at once, from zeros;
//! 2. decoder: `S = Tt - 1` steps a step at a time, from the encoder's final `(h, c)` of
//!    every layer: embedding of the step's input ids, dropout, one LSTM step. Step 0 reads
//!    target row 0; step `t + 1` reads target row `t + 1` when teacher-forced, else the
//!    arg-max of step `t`'s prediction, which only then is computed (the head over that
//!    step's `B` rows, whose top-layer `h` is the decoder's final state);
//! 3. the head `fc_out` over all `S * B` decoder outputs at once, and the cross-entropy
//!    against target rows `1..Tt`, the mean over non-`<pad>` tokens;
//! 4. backward in reverse; the encoder's outputs feed no loss, so its whole gradient comes
//!    from the decoder's initial state. An arg-max input is a constant: its embedding row
//!    gets the gradient, as in PyTorch.
//!
//! Dropout (training only) sits where the reference puts it: on both embeddings' outputs
//! and between LSTM layers, not on the head's input. The masks and the teacher-forcing
//! draws are pure functions of (stream, step), so a step can be replayed exactly (a
//! finite-difference check, a worker recomputing a step). Padding is computed through and
//! masked in the loss, as in `lstm.rs`: the encoder's final state has read the pads after a
//! short sentence, as the unpacked reference does.
//!
//! All buffers are allocated once for the largest batch and lengths of the config; a
//! training step allocates nothing.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::compute::backend::{Backend, XentStats};
use crate::data::bucket::TextBatch;
use crate::data::text::{EOS_ID, PAD_ID, SOS_ID};

use super::embedding::Embedding;
use super::flat::FlatModel;
use super::layers::Linear;
use super::lstm::{Lstm, LstmConfig};
use super::module::{Allocator, Init, Layer, Mode, Module, NamedTensors};
use super::row_dropout::RowDropout;
use super::trainable::Trainable;
use super::zoo::scaled;
use super::{mask_hash, ModelError};

/// Sentences per evaluation batch of `seq2seq` (at least the training batch): wide
/// enough for efficient GEMMs, small enough for its logits (64 decoder steps x 128
/// sentences x 6k words = 200 MB).
pub const TEXT_EVAL_BATCH: usize = 128;

/// Teacher-forcing draws use their own stream, apart from the dropout masks.
const TEACHER_TAG: u64 = 0x7EAC_4E52_F0C1_0A5E;

/// The reference initialises every tensor U(-0.08, 0.08) (`init_weights`).
const INIT_BOUND: f32 = 0.08;

/// Sizes of a [`Seq2Seq`] and of its workspace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Seq2SeqConfig {
    /// Source (German) and target (English) vocabularies, specials included.
    pub src_vocab: usize,
    pub tgt_vocab: usize,
    /// Embedding and hidden sizes at width 1.
    pub embedding: usize,
    pub hidden: usize,
    /// LSTM layers of the encoder and of the decoder each.
    pub layers: usize,
    /// Dropout on the embeddings and between LSTM layers, in training.
    pub dropout: f32,
    /// Probability that a decoder step after the first reads the true previous token.
    pub teacher_forcing: f32,
    /// Factor on `embedding` and `hidden` (each rounded, at least 1): small for fast tests.
    pub width: f64,
    /// The workspace: the longest source and target (with `<sos>`, `<eos>`) and the most
    /// sentences a batch may have.
    pub max_src_len: usize,
    pub max_tgt_len: usize,
    pub max_batch: usize,
}

impl Seq2SeqConfig {
    /// The reference recipe: embeddings 256, hidden 512, 2 layers, dropout 0.5, teacher
    /// forcing 0.5; a workspace for batches of 128 sentences of up to 64 tokens.
    pub fn paper(src_vocab: usize, tgt_vocab: usize) -> Self {
        Seq2SeqConfig {
            src_vocab,
            tgt_vocab,
            embedding: 256,
            hidden: 512,
            layers: 2,
            dropout: 0.5,
            teacher_forcing: 0.5,
            width: 1.0,
            max_src_len: 64,
            max_tgt_len: 64,
            max_batch: 128,
        }
    }

    /// E, the embedding size after `width`.
    pub fn emb_dim(&self) -> usize {
        scaled(self.embedding, self.width)
    }

    /// H, the hidden size after `width`.
    pub fn hidden_dim(&self) -> usize {
        scaled(self.hidden, self.width)
    }

    /// Decoder steps the workspace holds: a target of `max_tgt_len` tokens predicts all
    /// but its first.
    pub fn max_dec_steps(&self) -> usize {
        self.max_tgt_len.saturating_sub(1).max(1)
    }

    /// `(Vs + Vt) E + 2 [4H (E + H + 2) + (L - 1) 4H (2H + 2)] + (H + 1) Vt`: the two
    /// embedding tables, two L-layer LSTMs with both biases (PyTorch's `bias_ih` and
    /// `bias_hh`), and the head. At paper size with 7,859 German and 5,927 English tokens:
    /// 13,926,183 (the tutorial's 13,898,501 at its 7,853 and 5,893).
    pub fn num_params(&self) -> usize {
        let (e, h, l) = (self.emb_dim(), self.hidden_dim(), self.layers);
        let lstm = 4 * h * (e + h + 2) + (l - 1) * 4 * h * (2 * h + 2);
        (self.src_vocab + self.tgt_vocab) * e + 2 * lstm + (h + 1) * self.tgt_vocab
    }

    /// Programmer errors: the config module validates what users write.
    fn assert_valid(&self) {
        assert!(self.layers > 0, "seq2seq: at least one LSTM layer");
        assert!(
            self.width.is_finite() && self.width > 0.0,
            "seq2seq: width {} must be positive",
            self.width
        );
        assert!(
            (0.0..1.0).contains(&self.dropout),
            "seq2seq: dropout {} outside [0, 1)",
            self.dropout
        );
        assert!(
            (0.0..=1.0).contains(&self.teacher_forcing),
            "seq2seq: teacher forcing {} outside [0, 1]",
            self.teacher_forcing
        );
        let specials = EOS_ID.max(SOS_ID) as usize;
        assert!(
            self.src_vocab > specials && self.tgt_vocab > specials,
            "seq2seq: vocabularies hold the special tokens"
        );
        assert!(
            self.max_src_len > 0 && self.max_tgt_len > 1 && self.max_batch > 0,
            "seq2seq: an empty workspace"
        );
    }
}

/// `encoder`: the source embedding, dropout on it, the LSTM.
struct Encoder<B: Backend> {
    embedding: Embedding<B>,
    dropout: RowDropout<B>,
    rnn: Lstm<B>,
}

/// `decoder`: the target embedding, dropout on it, the LSTM, the output head.
struct Decoder<B: Backend> {
    embedding: Embedding<B>,
    dropout: RowDropout<B>,
    rnn: Lstm<B>,
    fc_out: Linear<B>,
}

/// The layers, apart from the buffers, so that a step can borrow both.
struct Layers<B: Backend> {
    encoder: Encoder<B>,
    decoder: Decoder<B>,
}

impl<B: Backend> Layers<B> {
    /// Declares the tensors in the reference's order (encoder, then decoder) and
    /// allocates the activations for `cfg`'s workspace.
    fn new(be: &B, alloc: &mut Allocator, cfg: &Seq2SeqConfig) -> Self {
        let (e, h, b) = (cfg.emb_dim(), cfg.hidden_dim(), cfg.max_batch);
        let (ts, s) = (cfg.max_src_len, cfg.max_dec_steps());
        let lstm = LstmConfig {
            layers: cfg.layers,
            input: e,
            hidden: h,
            dropout: cfg.dropout,
        };
        let encoder = Encoder {
            embedding: Embedding::new(be, alloc, cfg.src_vocab, e, ts * b),
            dropout: RowDropout::new(be, alloc, ts * b * e),
            rnn: Lstm::new(be, alloc, lstm, ts),
        };
        let embedding = Embedding::new(be, alloc, cfg.tgt_vocab, e, s * b);
        let dropout = RowDropout::new(be, alloc, s * b * e);
        let rnn = Lstm::new(be, alloc, lstm, s);
        // The head sees every (step, column) as a row.
        alloc.max_batch = s * b;
        let decoder = Decoder {
            embedding,
            dropout,
            rnn,
            fc_out: Linear::new(be, alloc, (h, 1, 1), cfg.tgt_vocab),
        };
        Layers { encoder, decoder }
    }
}

impl<B: Backend> Module<B> for Encoder<B> {
    fn visit(&self, tensors: &mut NamedTensors) {
        tensors.child("embedding", &self.embedding);
        tensors.child("rnn", &self.rnn);
    }

    fn activation_len(&self) -> usize {
        self.embedding.activation_len() + self.dropout.activation_len() + self.rnn.activation_len()
    }
}

impl<B: Backend> Module<B> for Decoder<B> {
    fn visit(&self, tensors: &mut NamedTensors) {
        tensors.child("embedding", &self.embedding);
        tensors.child("rnn", &self.rnn);
        tensors.child("fc_out", &self.fc_out);
    }

    fn activation_len(&self) -> usize {
        let emb = self.embedding.activation_len() + self.dropout.activation_len();
        emb + self.rnn.activation_len() + self.fc_out.activation_len()
    }
}

impl<B: Backend> Module<B> for Layers<B> {
    fn visit(&self, tensors: &mut NamedTensors) {
        tensors.child("encoder", &self.encoder);
        tensors.child("decoder", &self.decoder);
    }

    fn activation_len(&self) -> usize {
        self.encoder.activation_len() + self.decoder.activation_len()
    }
}

/// Sizes of one batch: source rows, columns, decoder steps.
#[derive(Debug, Clone, Copy)]
struct Dims {
    ts: usize,
    b: usize,
    s: usize,
}

/// An LSTM encoder-decoder; see the module doc for a step.
pub struct Seq2Seq<B: Backend> {
    cfg: Seq2SeqConfig,
    model: FlatModel<B>,
    nets: Layers<B>,
    /// The encoder's output gradient: its outputs feed no loss.
    zeros: B::Buf,
    dlogits: B::Buf,
    /// One decoder step's logits `[B x Vt]`, on the host for the arg-max.
    step_logits: Vec<f32>,
    /// The ids the decoder read, `[S x B]`: its embedding's backward scatters into them.
    inputs: Vec<u32>,
    /// Dropout and teacher-forcing stream (each worker its own).
    stream: u64,
}

impl<B: Backend> Seq2Seq<B> {
    /// The model of `cfg` on `be`, initialised from `seed` (the same weights on every rank).
    pub fn new(be: B, cfg: Seq2SeqConfig, seed: u64) -> Self {
        cfg.assert_valid();
        let (h, b) = (cfg.hidden_dim(), cfg.max_batch);
        let (ts, s) = (cfg.max_src_len, cfg.max_dec_steps());
        let mut alloc = Allocator::new(b);
        alloc.init_params_as(Init::Uniform { bound: INIT_BOUND });
        let nets = Layers::new(&be, &mut alloc, &cfg);
        let zeros = be.alloc(ts * b * h);
        let dlogits = be.alloc(s * b * cfg.tgt_vocab);
        Seq2Seq {
            model: FlatModel::new(be, &alloc, NamedTensors::of(&nets), seed),
            zeros,
            dlogits,
            step_logits: vec![0.0; b * cfg.tgt_vocab],
            inputs: vec![PAD_ID; s * b],
            cfg,
            nets,
            stream: 0,
        }
    }

    pub fn config(&self) -> &Seq2SeqConfig {
        &self.cfg
    }

    /// The ids the decoder read in the last training step (teacher-forced or predicted):
    /// the first `S * B`, time-major, are that batch's.
    pub fn decoder_inputs(&self) -> &[u32] {
        &self.inputs
    }

    /// Draws dropout masks and teacher forcing from `stream` (each worker its own).
    pub fn set_stream(&mut self, stream: u64) {
        self.stream = stream;
    }

    /// Whether decoder step `t` (from 1; step 0 always reads `<sos>`) of training step
    /// `step` reads the true target token rather than its own previous prediction.
    pub fn teacher_forced(&self, step: u64, t: usize) -> bool {
        assert!(t > 0, "decoder step 0 reads <sos>");
        let mut draws = self.teacher_draws(step);
        (1..t).for_each(|_| {
            draws.gen::<f32>();
        });
        draws.gen::<f32>() < self.cfg.teacher_forcing
    }

    /// Step `step`'s draws, one per decoder step from 1, in order.
    fn teacher_draws(&self, step: u64) -> ChaCha8Rng {
        ChaCha8Rng::seed_from_u64(mask_hash(self.stream, step) ^ TEACHER_TAG)
    }

    /// Training step `step`: overwrites the gradient buffer with the gradient of the
    /// masked mean cross-entropy of `batch` and returns its stats.
    pub fn forward_backward(
        &mut self,
        batch: &TextBatch,
        step: u64,
    ) -> Result<XentStats, ModelError> {
        let (stats, d) = self.train_forward(batch, step)?;
        self.backward(&batch.src, d)?;
        Ok(stats)
    }

    /// The training loss of step `step` (its dropout masks and teacher forcing), touching
    /// no gradient: finite-difference checks.
    pub fn training_loss(&mut self, batch: &TextBatch, step: u64) -> Result<f32, ModelError> {
        Ok(self.train_forward(batch, step)?.0.loss)
    }

    /// Mean token loss, tokens and correctly predicted tokens of `batch` in evaluation: no
    /// dropout, full teacher forcing, so the decoder runs all its steps at once.
    /// Perplexity over a set is `exp(sum of loss x tokens / sum of tokens)`.
    pub fn evaluate_batch(&mut self, batch: &TextBatch) -> Result<XentStats, ModelError> {
        let d = self.check_batch(batch)?;
        self.encode(&batch.src, d, Mode::Eval)?;
        let (be, f) = self.model.parts_mut();
        let Layers { encoder, decoder } = &mut self.nets;
        let v = self.cfg.tgt_vocab;
        let rows = d.s * d.b;
        let emb = &mut decoder.embedding;
        emb.forward(be, f, &batch.tgt[..rows])?;
        let values = 0..rows * emb.dim();
        decoder.dropout.forward(be, emb.output(), values, 0.0, 0);
        let init = Some(encoder.rnn.final_state());
        let x = decoder.dropout.output();
        decoder.rnn.forward(be, f, x, d.s, d.b, init, Mode::Eval)?;
        let head = &mut decoder.fc_out;
        head.forward(be, f, decoder.rnn.output(), rows, Mode::Eval);
        let labels = &batch.tgt[d.b..(d.s + 1) * d.b];
        Ok(be.softmax_xent_masked(&mut self.dlogits, head.output(), labels, PAD_ID, v))
    }

    /// Greedy translations of `batch`'s sources (its targets are not read): from `<sos>`,
    /// each step feeds back its arg-max, until every sentence has produced `<eos>` or
    /// `max_len` tokens. Returns each sentence's tokens before its `<eos>`.
    pub fn greedy_decode(
        &mut self,
        batch: &TextBatch,
        max_len: usize,
    ) -> Result<Vec<Vec<u32>>, ModelError> {
        let d = self.check_source(batch)?;
        check_size("max length", max_len, 1, self.cfg.max_dec_steps())?;
        self.encode(&batch.src, d, Mode::Eval)?;
        let (be, f) = self.model.parts_mut();
        let Layers { encoder, decoder } = &mut self.nets;
        let init = Some(encoder.rnn.final_state());
        decoder.rnn.begin(be, f, max_len, d.b, init, Mode::Eval)?;
        let mut out = vec![Vec::new(); d.b];
        let mut done = vec![false; d.b];
        // Each step reads the ids the last one predicted, in the same place.
        self.inputs[..d.b].fill(SOS_ID);
        for t in 0..max_len {
            self.decoder_step(t, d.b, 0, 0.0)?;
            self.predict(0, d.b);
            let ids = &self.inputs[..d.b];
            for ((sent, fin), &id) in out.iter_mut().zip(&mut done).zip(ids) {
                *fin |= id == EOS_ID;
                if !*fin {
                    sent.push(id);
                }
            }
            if done.iter().all(|&x| x) {
                break;
            }
        }
        Ok(out)
    }

    /// Checks a batch against the vocabularies and the workspace (it comes from data).
    fn check_batch(&self, batch: &TextBatch) -> Result<Dims, ModelError> {
        let mut d = self.check_source(batch)?;
        let cfg = &self.cfg;
        check_size("target length", batch.tgt_len, 2, cfg.max_tgt_len)?;
        assert_eq!(
            batch.tgt.len(),
            batch.tgt_len * d.b,
            "target ids are [Tt x B]"
        );
        check_ids(&batch.tgt, cfg.tgt_vocab)?;
        d.s = batch.tgt_len - 1;
        Ok(d)
    }

    fn check_source(&self, batch: &TextBatch) -> Result<Dims, ModelError> {
        let cfg = &self.cfg;
        let b = batch.size();
        check_size("batch", b, 1, cfg.max_batch)?;
        check_size("source length", batch.src_len, 1, cfg.max_src_len)?;
        assert_eq!(
            batch.src.len(),
            batch.src_len * b,
            "source ids are [Ts x B]"
        );
        check_ids(&batch.src, cfg.src_vocab)?;
        Ok(Dims {
            ts: batch.src_len,
            b,
            s: 0,
        })
    }

    /// Encoder forward over the whole source.
    fn encode(&mut self, src: &[u32], d: Dims, mode: Mode) -> Result<(), ModelError> {
        let p = self.dropout(mode);
        let (be, f) = self.model.parts_mut();
        let enc = &mut self.nets.encoder;
        enc.embedding.forward(be, f, src)?;
        let len = d.ts * d.b * enc.embedding.dim();
        let emb = enc.embedding.output();
        enc.dropout.forward(be, emb, 0..len, p, f.dropout_seed);
        let x = enc.dropout.output();
        enc.rnn.forward(be, f, x, d.ts, d.b, None, mode)?;
        Ok(())
    }

    fn dropout(&self, mode: Mode) -> f32 {
        if mode == Mode::Train {
            self.cfg.dropout
        } else {
            0.0
        }
    }

    /// Decoder step `t`, reading the ids at `inputs[first..first + b]`.
    fn decoder_step(&mut self, t: usize, b: usize, first: usize, p: f32) -> Result<(), ModelError> {
        let (be, f) = self.model.parts_mut();
        let dec = &mut self.nets.decoder;
        let ids = &self.inputs[first..first + b];
        dec.embedding.forward_rows(be, f, ids, t * b)?;
        let row = b * dec.embedding.dim();
        let emb = dec.embedding.output();
        let values = t * row..(t + 1) * row;
        dec.dropout.forward(be, emb, values, p, f.dropout_seed);
        dec.rnn.forward_steps(be, f, dec.dropout.output(), t..t + 1);
        Ok(())
    }

    /// The arg-max of the last decoder step's prediction for each of `b` columns, into
    /// `inputs[first..first + b]`.
    fn predict(&mut self, first: usize, b: usize) {
        let (be, f) = self.model.parts_mut();
        let (dec, v) = (&mut self.nets.decoder, self.cfg.tgt_vocab);
        let top = dec.rnn.final_state().h.last().expect("at least one layer");
        dec.fc_out.forward(be, f, top, b, Mode::Eval);
        let host = &mut self.step_logits[..b * v];
        be.download(host, dec.fc_out.output());
        let ids = &mut self.inputs[first..first + b];
        for (id, row) in ids.iter_mut().zip(host.chunks_exact(v)) {
            *id = argmax(row);
        }
    }

    /// Step 1-2 of the module doc: the loss with step `step`'s masks and draws.
    fn train_forward(
        &mut self,
        batch: &TextBatch,
        step: u64,
    ) -> Result<(XentStats, Dims), ModelError> {
        let d = self.check_batch(batch)?;
        self.model.set_dropout_seed(mask_hash(self.stream, step));
        self.encode(&batch.src, d, Mode::Train)?;
        let (be, f) = self.model.parts_mut();
        let Layers { encoder, decoder } = &mut self.nets;
        let init = Some(encoder.rnn.final_state());
        decoder.rnn.begin(be, f, d.s, d.b, init, Mode::Train)?;
        let b = d.b;
        self.inputs[..b].copy_from_slice(&batch.tgt[..b]);
        let mut draws = self.teacher_draws(step);
        let p = self.cfg.dropout;
        for t in 0..d.s {
            self.decoder_step(t, b, t * b, p)?;
            if t + 1 == d.s {
                break;
            }
            let next = (t + 1) * b..(t + 2) * b;
            if draws.gen::<f32>() < self.cfg.teacher_forcing {
                self.inputs[next.clone()].copy_from_slice(&batch.tgt[next]);
            } else {
                self.predict(next.start, b);
            }
        }
        let (be, f) = self.model.parts_mut();
        let dec = &mut self.nets.decoder;
        let rows = d.s * b;
        dec.fc_out
            .forward(be, f, dec.rnn.output(), rows, Mode::Train);
        let labels = &batch.tgt[b..(d.s + 1) * b];
        let v = self.cfg.tgt_vocab;
        let logits = dec.fc_out.output();
        let st = be.softmax_xent_masked(&mut self.dlogits, logits, labels, PAD_ID, v);
        Ok((st, d))
    }

    /// Steps 3-4 of the module doc, after [`Seq2Seq::train_forward`].
    fn backward(&mut self, src: &[u32], d: Dims) -> Result<(), ModelError> {
        self.model.zero_grads();
        let (be, f) = self.model.parts_mut();
        let Layers { encoder, decoder } = &mut self.nets;
        let (rows, e) = (d.s * d.b, decoder.embedding.dim());
        let dec = decoder;
        dec.fc_out
            .backward(be, f, dec.rnn.output(), &self.dlogits, rows, true);
        let x = dec.dropout.output();
        dec.rnn
            .backward(be, f, x, dec.fc_out.input_grad(), None, true);
        dec.dropout.backward(be, dec.rnn.input_grad(), rows * e);
        let dx = dec.dropout.input_grad();
        dec.embedding.backward(be, f, dx, &self.inputs[..rows])?;
        let dfinal = Some(dec.rnn.init_grad());
        let enc = encoder;
        let x = enc.dropout.output();
        enc.rnn.backward(be, f, x, &self.zeros, dfinal, true);
        enc.dropout
            .backward(be, enc.rnn.input_grad(), d.ts * d.b * e);
        enc.embedding.backward(be, f, enc.dropout.input_grad(), src)
    }
}

/// The first maximum (PyTorch's `argmax` on ties).
fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in row.iter().enumerate() {
        if x > row[best] {
            best = i;
        }
    }
    best as u32
}

fn check_ids(ids: &[u32], vocab: usize) -> Result<(), ModelError> {
    match ids.iter().find(|&&id| id as usize >= vocab) {
        Some(&id) => Err(ModelError::TokenId { id, vocab }),
        None => Ok(()),
    }
}

fn check_size(what: &'static str, got: usize, min: usize, max: usize) -> Result<(), ModelError> {
    if got < min {
        return Err(ModelError::TooSmall {
            layer: "seq2seq",
            what,
            got,
            min,
        });
    }
    if got > max {
        return Err(ModelError::TooLarge {
            layer: "seq2seq",
            what,
            got,
            max,
        });
    }
    Ok(())
}

impl<B: Backend> Module<B> for Seq2Seq<B> {
    fn visit(&self, tensors: &mut NamedTensors) {
        self.nets.visit(tensors);
    }

    /// The layers' activations, the encoder's zero output gradient, the logits' gradient
    /// and a decoder step's logits on the host.
    fn activation_len(&self) -> usize {
        let (cfg, b, s) = (&self.cfg, self.cfg.max_batch, self.cfg.max_dec_steps());
        let own = cfg.max_src_len * b * cfg.hidden_dim() + s * b * cfg.tgt_vocab;
        own + self.nets.activation_len() + self.step_logits.len()
    }
}

impl<B: Backend> Trainable<B> for Seq2Seq<B> {
    fn name(&self) -> &str {
        "seq2seq"
    }
    fn flat_model(&self) -> &FlatModel<B> {
        &self.model
    }
    fn flat_model_mut(&mut self) -> &mut FlatModel<B> {
        &mut self.model
    }
    fn data_metadata(&self) -> Vec<(String, String)> {
        vec![
            ("src_vocab".to_string(), self.cfg.src_vocab.to_string()),
            ("tgt_vocab".to_string(), self.cfg.tgt_vocab.to_string()),
        ]
    }
}
