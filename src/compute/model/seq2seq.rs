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

use crate::compute::backend::cpu::Cpu;
use crate::compute::backend::{Backend, XentStats};
use crate::data::bucket::TextBatch;
use crate::data::text::{EOS_ID, PAD_ID, SOS_ID};

use super::embedding::Embedding;
use super::layers::Linear;
use super::lstm::{Lstm, LstmConfig};
use super::module::{Flat, Init, Mode, Module, Plan, TensorSpec};
use super::zoo::scaled;
use super::{initial_values, mask_hash, ModelError};

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

/// Inverted dropout on an embedding's output `[T x B x E]`, by ranges of rows so that a
/// decoder step drops only its own (each value's draw depends on its index, so the mask
/// is the same as at once).
struct Dropped<B: Backend> {
    out: B::Buf,
    mask: B::Buf,
    /// Gradient of the undropped input.
    dx: B::Buf,
    seed: u64,
}

impl<B: Backend> Dropped<B> {
    fn new(be: &B, plan: &mut Plan, len: usize) -> Self {
        Dropped {
            out: be.alloc(len),
            mask: be.alloc(len),
            dx: be.alloc(len),
            seed: plan.next_seed(),
        }
    }

    /// With `p = 0` (evaluation) a copy, so the LSTMs always read `out`.
    fn forward(&mut self, be: &B, inp: &B::Buf, values: std::ops::Range<usize>, p: f32, step: u64) {
        let seed = self.seed ^ step;
        be.dropout_forward_range(&mut self.out, &mut self.mask, inp, values, p, seed);
    }

    fn backward(&mut self, be: &B, dout: &B::Buf, len: usize) {
        be.dropout_backward(&mut self.dx, dout, &self.mask, len);
    }
}

/// The layers, apart from the buffers, so that a step can borrow both.
struct Layers<B: Backend> {
    src_emb: Embedding<B>,
    src_drop: Dropped<B>,
    enc: Lstm<B>,
    tgt_emb: Embedding<B>,
    tgt_drop: Dropped<B>,
    dec: Lstm<B>,
    head: Linear<B>,
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
    be: B,
    cfg: Seq2SeqConfig,
    flat: Flat<B>,
    params: Vec<TensorSpec>,
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
        let (e, h, b) = (cfg.emb_dim(), cfg.hidden_dim(), cfg.max_batch);
        let (ts, s) = (cfg.max_src_len, cfg.max_dec_steps());
        let mut plan = Plan::new(b);
        let lstm = |input| LstmConfig {
            layers: cfg.layers,
            input,
            hidden: h,
            dropout: cfg.dropout,
        };
        plan.enter(Some("encoder"));
        plan.enter(Some("embedding"));
        let src_emb = Embedding::new(&be, &mut plan, cfg.src_vocab, e, ts * b);
        plan.leave();
        let src_drop = Dropped::new(&be, &mut plan, ts * b * e);
        plan.enter(Some("rnn"));
        let enc = Lstm::new(&be, &mut plan, lstm(e), ts);
        plan.leave();
        plan.leave();
        plan.enter(Some("decoder"));
        plan.enter(Some("embedding"));
        let tgt_emb = Embedding::new(&be, &mut plan, cfg.tgt_vocab, e, s * b);
        plan.leave();
        let tgt_drop = Dropped::new(&be, &mut plan, s * b * e);
        plan.enter(Some("rnn"));
        let dec = Lstm::new(&be, &mut plan, lstm(e), s);
        plan.leave();
        // The head sees every (step, column) as a row.
        plan.max_batch = s * b;
        plan.enter(Some("fc_out"));
        let head = Linear::new(&be, &mut plan, (h, 1, 1), cfg.tgt_vocab);
        plan.leave();
        plan.leave();
        for spec in &mut plan.params {
            spec.init = Init::Uniform { bound: INIT_BOUND };
        }
        let n = plan.num_params();
        let mut flat = Flat {
            params: be.alloc(n),
            grads: be.alloc(n),
            state: be.alloc(0),
            scratch: be.alloc(plan.scratch),
            dropout_seed: 0,
        };
        be.upload(&mut flat.params, &initial_values(&plan.params, seed));
        Seq2Seq {
            zeros: be.alloc(ts * b * h),
            dlogits: be.alloc(s * b * cfg.tgt_vocab),
            step_logits: vec![0.0; b * cfg.tgt_vocab],
            inputs: vec![PAD_ID; s * b],
            be,
            cfg,
            flat,
            params: plan.params,
            nets: Layers {
                src_emb,
                src_drop,
                enc,
                tgt_emb,
                tgt_drop,
                dec,
                head,
            },
            stream: 0,
        }
    }

    pub fn config(&self) -> &Seq2SeqConfig {
        &self.cfg
    }
    pub fn backend(&self) -> &B {
        &self.be
    }
    pub fn num_params(&self) -> usize {
        self.params.last().map_or(0, |s| s.range.end)
    }
    /// The trained tensors: PyTorch's names and shapes, ranges in the flat buffer.
    pub fn param_specs(&self) -> &[TensorSpec] {
        &self.params
    }

    /// Bytes of activations and work space allocated for the largest batch.
    pub fn workspace_bytes(&self) -> usize {
        let (cfg, n) = (&self.cfg, &self.nets);
        let (e, b, s) = (cfg.emb_dim(), cfg.max_batch, cfg.max_dec_steps());
        let rows = (cfg.max_src_len + s) * b;
        // Embedding outputs, dropout out/mask/dx, encoder zeros, dlogits.
        let own = rows * e * 4 + cfg.max_src_len * b * cfg.hidden_dim() + s * b * cfg.tgt_vocab;
        let layers = n.enc.activation_len() + n.dec.activation_len() + n.head.activation_len();
        4 * (own + layers + self.step_logits.len())
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

    pub fn params_to_host(&self, host: &mut [f32]) {
        self.be.download(host, &self.flat.params);
    }
    pub fn params_from_host(&mut self, host: &[f32]) {
        assert_eq!(host.len(), self.num_params(), "weights of another model");
        self.be.upload(&mut self.flat.params, host);
    }
    pub fn grads_to_host(&self, host: &mut [f32]) {
        self.be.download(host, &self.flat.grads);
    }
    pub fn grads_from_host(&mut self, host: &[f32]) {
        assert_eq!(host.len(), self.num_params(), "gradients of another model");
        self.be.upload(&mut self.flat.grads, host);
    }

    /// The parameters and the gradients, as the backend holds them.
    pub fn buffers(&self) -> (&B::Buf, &B::Buf) {
        (&self.flat.params, &self.flat.grads)
    }

    /// The backend, the parameters and the gradients, for an optimizer that runs over
    /// the model's own buffers.
    pub fn optimizer_buffers(&mut self) -> (&B, &mut B::Buf, &mut B::Buf) {
        let Flat { params, grads, .. } = &mut self.flat;
        (&self.be, params, grads)
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
        let (be, n, f) = (&self.be, &mut self.nets, &mut self.flat);
        let v = self.cfg.tgt_vocab;
        let rows = d.s * d.b;
        n.tgt_emb.forward(be, f, &batch.tgt[..rows])?;
        n.tgt_drop
            .forward(be, n.tgt_emb.output(), 0..rows * n.tgt_emb.dim(), 0.0, 0);
        let init = Some(n.enc.final_state());
        n.dec
            .forward(be, f, &n.tgt_drop.out, d.s, d.b, init, Mode::Eval)?;
        n.head.forward(be, f, n.dec.output(), rows, Mode::Eval);
        let labels = &batch.tgt[d.b..(d.s + 1) * d.b];
        Ok(be.softmax_xent_masked(&mut self.dlogits, n.head.output(), labels, PAD_ID, v))
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
        let (n, f) = (&mut self.nets, &self.flat);
        n.dec.begin(
            &self.be,
            f,
            max_len,
            d.b,
            Some(n.enc.final_state()),
            Mode::Eval,
        )?;
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
        let (be, n, f) = (&self.be, &mut self.nets, &self.flat);
        n.src_emb.forward(be, f, src)?;
        let len = d.ts * d.b * n.src_emb.dim();
        n.src_drop
            .forward(be, n.src_emb.output(), 0..len, p, f.dropout_seed);
        n.enc
            .forward(be, f, &n.src_drop.out, d.ts, d.b, None, mode)?;
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
        let (be, n, f) = (&self.be, &mut self.nets, &self.flat);
        n.tgt_emb
            .forward_rows(be, f, &self.inputs[first..first + b], t * b)?;
        let row = b * n.tgt_emb.dim();
        n.tgt_drop.forward(
            be,
            n.tgt_emb.output(),
            t * row..(t + 1) * row,
            p,
            f.dropout_seed,
        );
        n.dec.forward_steps(be, f, &n.tgt_drop.out, t..t + 1);
        Ok(())
    }

    /// The arg-max of the last decoder step's prediction for each of `b` columns, into
    /// `inputs[first..first + b]`.
    fn predict(&mut self, first: usize, b: usize) {
        let (be, n, v) = (&self.be, &mut self.nets, self.cfg.tgt_vocab);
        let top = n.dec.final_state().h.last().expect("at least one layer");
        n.head.forward(be, &mut self.flat, top, b, Mode::Eval);
        let host = &mut self.step_logits[..b * v];
        be.download(host, n.head.output());
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
        self.flat.dropout_seed = mask_hash(self.stream, step);
        self.encode(&batch.src, d, Mode::Train)?;
        let n = &mut self.nets;
        let init = Some(n.enc.final_state());
        n.dec
            .begin(&self.be, &self.flat, d.s, d.b, init, Mode::Train)?;
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
        let (be, n) = (&self.be, &mut self.nets);
        let rows = d.s * b;
        n.head
            .forward(be, &mut self.flat, n.dec.output(), rows, Mode::Train);
        let labels = &batch.tgt[b..(d.s + 1) * b];
        let v = self.cfg.tgt_vocab;
        let st = be.softmax_xent_masked(&mut self.dlogits, n.head.output(), labels, PAD_ID, v);
        Ok((st, d))
    }

    /// Steps 3-4 of the module doc, after [`Seq2Seq::train_forward`].
    fn backward(&mut self, src: &[u32], d: Dims) -> Result<(), ModelError> {
        let (be, n, f) = (&self.be, &mut self.nets, &mut self.flat);
        let len = self.params.last().map_or(0, |s| s.range.end);
        be.fill(&mut f.grads, 0..len, 0.0);
        let (rows, e) = (d.s * d.b, n.tgt_emb.dim());
        n.head
            .backward(be, f, n.dec.output(), &self.dlogits, rows, true);
        n.dec
            .backward(be, f, &n.tgt_drop.out, n.head.input_grad(), None, true);
        n.tgt_drop.backward(be, n.dec.input_grad(), rows * e);
        n.tgt_emb
            .backward(be, f, &n.tgt_drop.dx, &self.inputs[..rows])?;
        let dfinal = Some(n.dec.init_grad());
        n.enc
            .backward(be, f, &n.src_drop.out, &self.zeros, dfinal, true);
        n.src_drop.backward(be, n.enc.input_grad(), d.ts * d.b * e);
        n.src_emb.backward(be, f, &n.src_drop.dx, src)
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

/// The CPU buffers are host memory: lent out without copies.
impl Seq2Seq<Cpu> {
    pub fn params(&self) -> &[f32] {
        &self.flat.params
    }
    pub fn params_mut(&mut self) -> &mut [f32] {
        &mut self.flat.params
    }
    pub fn grads(&self) -> &[f32] {
        &self.flat.grads
    }
    /// Parameters (read) and gradients (write) at once, for an optimizer step.
    pub fn params_and_grads_mut(&mut self) -> (&mut [f32], &mut [f32]) {
        (&mut self.flat.params, &mut self.flat.grads)
    }
}
