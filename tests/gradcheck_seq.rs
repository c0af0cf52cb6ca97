//! The recurrent layers' backward against central finite differences of the training
//! loss, in the style of tests/gradcheck.rs (same eps and tolerance, f32): embedding,
//! multi-layer LSTM through time (parameters, inputs and initial state), the masked
//! cross-entropy, an encoder handing its final state to a decoder run a step at a time,
//! and the whole `Seq2Seq` training loss (teacher forcing mixed with fed-back
//! predictions).
//!
//! The models here are smooth (sigmoid, tanh, softmax; the dropout mask is fixed by the
//! step's seed), so no coordinate sits on a kink: every one is checked. Linear on
//! `[T*B, H]` rows is the existing `Linear`, checked in tests/gradcheck.rs; here it is the
//! output head.

use gssp::compute::backend::cpu::Cpu;
use gssp::compute::backend::Backend;
use gssp::compute::model::embedding::Embedding;
use gssp::compute::model::layers::Linear;
use gssp::compute::model::lstm::{Lstm, LstmConfig, LstmState};
use gssp::compute::model::seq2seq::{Seq2Seq, Seq2SeqConfig};
use gssp::compute::model::{
    initial_values, Allocator, Flat, Layer, Mode, Module, NamedTensors, Trainable,
};
use gssp::data::bucket::TextBatch;
use gssp::data::text::{EOS_ID, SOS_ID};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const EPS: f32 = 1e-3;
const RELATIVE: f32 = 1e-2;
const PAD: u32 = 0;
/// Fixed dropout mask for every run of a check.
const DROPOUT_SEED: u64 = 0x5EED;

fn tolerance(numeric: f32) -> f32 {
    1e-3 + RELATIVE * numeric.abs()
}

/// A small model whose loss depends on some groups of values (parameters, inputs,
/// initial states).
trait Model {
    /// The training loss; with `backward`, the gradients too.
    fn run(&mut self, backward: bool) -> f32;
    /// One group (the parameters) unless a model checks more.
    fn groups(&self) -> usize {
        1
    }
    fn name(&self, _group: usize) -> String {
        "params".into()
    }
    fn values(&mut self, group: usize) -> &mut [f32];
    fn grad(&self, group: usize) -> Vec<f32>;
}

/// Compares every analytic gradient of every group with a central difference, and
/// returns the analytic gradients (for extra assertions).
fn check(m: &mut dyn Model) -> Vec<Vec<f32>> {
    m.run(true);
    let analytic: Vec<Vec<f32>> = (0..m.groups()).map(|g| m.grad(g)).collect();
    let mut large = 0;
    for (g, grad) in analytic.iter().enumerate() {
        let len = m.values(g).len();
        assert_eq!(grad.len(), len, "{}: gradient length", m.name(g));
        for (i, &a) in grad.iter().enumerate() {
            let w = m.values(g)[i];
            m.values(g)[i] = w + EPS;
            let plus = m.run(false);
            m.values(g)[i] = w - EPS;
            let minus = m.run(false);
            m.values(g)[i] = w;
            let numeric = (plus - minus) / (2.0 * EPS);
            assert!(
                (a - numeric).abs() <= tolerance(numeric),
                "{}[{i}]: analytic {a} vs numeric {numeric}",
                m.name(g),
            );
            large += (numeric.abs() > 1e-2) as usize;
        }
    }
    // The absolute floor of the tolerance must not be all that is checked.
    assert!(large > 0, "no gradient above 1e-2: the check says nothing");
    analytic
}

fn random(len: usize, seed: u64) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..len).map(|_| rng.gen_range(-1.0..1.0)).collect()
}

/// The tensors of a test model's `children`, each under its name, as a module tree
/// names them.
fn named(children: &[(&str, &dyn Module<Cpu>)]) -> NamedTensors {
    let mut tensors = NamedTensors::default();
    for (name, child) in children {
        tensors.child(name, *child);
    }
    tensors.sort();
    tensors
}

fn flat(alloc: &Allocator, tensors: &NamedTensors, seed: u64) -> Flat<Cpu> {
    let n = alloc.num_params();
    Flat {
        params: initial_values(&tensors.params, seed),
        grads: vec![0.0; n],
        state: vec![],
        scratch: vec![0.0; alloc.scratch],
        dropout_seed: DROPOUT_SEED,
    }
}

/// Masked cross-entropy of `logits` against `labels` into `dlogits`.
fn xent(dlogits: &mut Vec<f32>, logits: &Vec<f32>, labels: &[u32], classes: usize) -> f32 {
    Cpu.softmax_xent_masked(dlogits, logits, labels, PAD, classes)
        .loss
}

/// Labels for `rows` positions in `1..classes`, every third one `<pad>`.
fn labels(rows: usize, classes: usize, seed: u64) -> Vec<u32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..rows)
        .map(|i| {
            if i % 3 == 2 {
                PAD
            } else {
                rng.gen_range(1..classes as u32)
            }
        })
        .collect()
}

/// x `[T x B x I]` -> LSTM (initial state given) -> linear head on `[T*B, H]` -> masked
/// cross-entropy.
struct LstmModel {
    flat: Flat<Cpu>,
    lstm: Lstm<Cpu>,
    head: Linear<Cpu>,
    x: Vec<f32>,
    init: LstmState<Cpu>,
    labels: Vec<u32>,
    dlogits: Vec<f32>,
    steps: usize,
    batch: usize,
    classes: usize,
}

impl LstmModel {
    fn new(layers: usize, dropout: f32) -> Self {
        let (steps, batch, input, hidden, classes) = (4, 3, 3, 4, 5);
        let mut alloc = Allocator::new(batch);
        let cfg = LstmConfig {
            layers,
            input,
            hidden,
            dropout,
        };
        let lstm = Lstm::new(&Cpu, &mut alloc, cfg, steps);
        // The head sees every (step, column) as a row.
        alloc.max_batch = steps * batch;
        let head = Linear::new(&Cpu, &mut alloc, (hidden, 1, 1), classes);
        let tensors = named(&[("rnn", &lstm as &dyn Module<Cpu>), ("fc", &head)]);
        let mut init = LstmState::zeros(&Cpu, layers, batch, hidden);
        for l in 0..layers {
            init.h[l] = random(batch * hidden, 10 + l as u64);
            init.c[l] = random(batch * hidden, 20 + l as u64);
        }
        LstmModel {
            flat: flat(&alloc, &tensors, 3),
            lstm,
            head,
            x: random(steps * batch * input, 4),
            init,
            labels: labels(steps * batch, classes, 5),
            dlogits: vec![0.0; steps * batch * classes],
            steps,
            batch,
            classes,
        }
    }

    fn layers(&self) -> usize {
        self.init.h.len()
    }
}

impl Model for LstmModel {
    fn run(&mut self, backward: bool) -> f32 {
        let (be, t, b) = (&Cpu, self.steps, self.batch);
        self.flat.grads.fill(0.0);
        self.lstm
            .forward(be, &self.flat, &self.x, t, b, Some(&self.init), Mode::Train)
            .unwrap();
        self.head
            .forward(be, &mut self.flat, self.lstm.output(), t * b, Mode::Train);
        let loss = xent(
            &mut self.dlogits,
            self.head.output(),
            &self.labels,
            self.classes,
        );
        if backward {
            let f = &mut self.flat;
            self.head
                .backward(be, f, self.lstm.output(), &self.dlogits, t * b, true);
            self.lstm
                .backward(be, f, &self.x, self.head.input_grad(), None, true);
        }
        loss
    }
    fn groups(&self) -> usize {
        2 + 2 * self.layers()
    }
    fn name(&self, g: usize) -> String {
        match g {
            0 => "params".into(),
            1 => "input".into(),
            g => format!("{}0 of layer {}", ["h", "c"][(g - 2) % 2], (g - 2) / 2),
        }
    }
    fn values(&mut self, g: usize) -> &mut [f32] {
        match g {
            0 => &mut self.flat.params,
            1 => &mut self.x,
            g if g % 2 == 0 => &mut self.init.h[(g - 2) / 2],
            g => &mut self.init.c[(g - 2) / 2],
        }
    }
    fn grad(&self, g: usize) -> Vec<f32> {
        match g {
            0 => self.flat.grads.clone(),
            1 => self.lstm.input_grad()[..self.x.len()].to_vec(),
            g if g % 2 == 0 => self.lstm.init_grad().h[(g - 2) / 2].clone(),
            g => self.lstm.init_grad().c[(g - 2) / 2].clone(),
        }
    }
}

#[test]
fn lstm_one_layer_through_time_with_initial_state() {
    check(&mut LstmModel::new(1, 0.0));
}

#[test]
fn lstm_two_layers_with_dropout_between_them() {
    check(&mut LstmModel::new(2, 0.3));
}

#[test]
fn lstm_tensors_are_named_and_shaped_as_pytorch_lays_them_out() {
    let mut alloc = Allocator::new(2);
    let cfg = LstmConfig {
        layers: 2,
        input: 3,
        hidden: 5,
        dropout: 0.5,
    };
    let lstm = Lstm::new(&Cpu, &mut alloc, cfg, 4);
    let got: Vec<(String, Vec<usize>)> = named(&[("rnn", &lstm)])
        .params
        .iter()
        .map(|s| (s.name.clone(), s.shape.clone()))
        .collect();
    let want = [
        ("rnn.weight_ih_l0", vec![20, 3]),
        ("rnn.weight_hh_l0", vec![20, 5]),
        ("rnn.bias_ih_l0", vec![20]),
        ("rnn.bias_hh_l0", vec![20]),
        ("rnn.weight_ih_l1", vec![20, 5]),
        ("rnn.weight_hh_l1", vec![20, 5]),
        ("rnn.bias_ih_l1", vec![20]),
        ("rnn.bias_hh_l1", vec![20]),
    ];
    let want: Vec<(String, Vec<usize>)> = want
        .iter()
        .map(|(n, s)| (n.to_string(), s.clone()))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn lstm_run_a_step_at_a_time_matches_the_whole_sequence() {
    let mut m = LstmModel::new(2, 0.3);
    let (t, b) = (m.steps, m.batch);
    m.lstm
        .forward(&Cpu, &m.flat, &m.x, t, b, Some(&m.init), Mode::Train)
        .unwrap();
    let whole = m.lstm.output()[..t * b * 4].to_vec();
    let final_h: Vec<Vec<f32>> = m.lstm.final_state().h.clone();
    m.lstm
        .begin(&Cpu, &m.flat, t, b, Some(&m.init), Mode::Train)
        .unwrap();
    for s in 0..t {
        m.lstm.forward_steps(&Cpu, &m.flat, &m.x, s..s + 1);
    }
    assert_eq!(m.lstm.output()[..t * b * 4], whole[..]);
    assert_eq!(m.lstm.final_state().h, final_h);
    // Evaluation turns dropout off: the outputs change, deterministically.
    m.lstm
        .forward(&Cpu, &m.flat, &m.x, t, b, Some(&m.init), Mode::Eval)
        .unwrap();
    assert_ne!(m.lstm.output()[..t * b * 4], whole[..]);
}

#[test]
fn lstm_refuses_a_sequence_longer_than_it_was_built_for() {
    let mut m = LstmModel::new(1, 0.0);
    let e = m
        .lstm
        .forward(&Cpu, &m.flat, &m.x, 5, 3, None, Mode::Train)
        .unwrap_err();
    assert!(e.to_string().contains("steps 5 exceeds the 4"), "{e}");
}

/// ids `[T x B]` -> embedding -> linear head -> masked cross-entropy.
struct EmbeddingModel {
    flat: Flat<Cpu>,
    emb: Embedding<Cpu>,
    head: Linear<Cpu>,
    ids: Vec<u32>,
    labels: Vec<u32>,
    dlogits: Vec<f32>,
    classes: usize,
}

impl Model for EmbeddingModel {
    fn run(&mut self, backward: bool) -> f32 {
        let be = &Cpu;
        let n = self.ids.len();
        self.flat.grads.fill(0.0);
        self.emb.forward(be, &self.flat, &self.ids).unwrap();
        self.head
            .forward(be, &mut self.flat, self.emb.output(), n, Mode::Train);
        let loss = xent(
            &mut self.dlogits,
            self.head.output(),
            &self.labels,
            self.classes,
        );
        if backward {
            let f = &mut self.flat;
            self.head
                .backward(be, f, self.emb.output(), &self.dlogits, n, true);
            self.emb
                .backward(be, f, self.head.input_grad(), &self.ids)
                .unwrap();
        }
        loss
    }
    fn values(&mut self, _: usize) -> &mut [f32] {
        &mut self.flat.params
    }
    fn grad(&self, _: usize) -> Vec<f32> {
        self.flat.grads.clone()
    }
}

#[test]
fn embedding_gradient_goes_into_the_rows_used() {
    let (vocab, dim, classes) = (7, 4, 5);
    // [T = 3, B = 2]: id 1 three times, ids 5 and 6 never.
    let ids = vec![1, 2, 1, 3, 4, 1];
    let mut alloc = Allocator::new(ids.len());
    let emb = Embedding::new(&Cpu, &mut alloc, vocab, dim, ids.len());
    let head = Linear::new(&Cpu, &mut alloc, (dim, 1, 1), classes);
    let tensors = named(&[("embedding", &emb as &dyn Module<Cpu>), ("fc", &head)]);
    let mut m = EmbeddingModel {
        flat: flat(&alloc, &tensors, 8),
        emb,
        head,
        labels: vec![3, 1, PAD, 4, 2, 1],
        ids,
        dlogits: vec![0.0; 6 * classes],
        classes,
    };
    let grads = check(&mut m);
    let table = &grads[0][..vocab * dim];
    let row = |id: usize| &table[id * dim..(id + 1) * dim];
    for unused in [0, 5, 6] {
        assert!(row(unused).iter().all(|&g| g == 0.0), "row {unused}");
    }
    for used in [1, 2, 3, 4] {
        assert!(row(used).iter().any(|&g| g != 0.0), "row {used}");
    }
    assert_eq!(tensors.params[0].name, "embedding.weight");
    assert_eq!(tensors.params[0].shape, vec![vocab, dim]);
}

#[test]
fn embedding_refuses_an_id_outside_the_vocabulary() {
    let mut alloc = Allocator::new(4);
    let mut emb = Embedding::new(&Cpu, &mut alloc, 5, 2, 4);
    let f = flat(&alloc, &named(&[("embedding", &emb)]), 1);
    let e = emb.forward(&Cpu, &f, &[1, 5]).unwrap_err();
    assert!(e.to_string().contains("token id 5"), "{e}");
    let e = emb.forward_rows(&Cpu, &f, &[1, 2], 3).unwrap_err();
    assert!(e.to_string().contains("rows 5 exceeds the 4"), "{e}");
}

/// The loss as a function of the logits themselves.
struct XentModel {
    logits: Vec<f32>,
    dlogits: Vec<f32>,
    labels: Vec<u32>,
    classes: usize,
}

impl Model for XentModel {
    fn run(&mut self, _: bool) -> f32 {
        xent(&mut self.dlogits, &self.logits, &self.labels, self.classes)
    }
    fn name(&self, _: usize) -> String {
        "logits".into()
    }
    fn values(&mut self, _: usize) -> &mut [f32] {
        &mut self.logits
    }
    fn grad(&self, _: usize) -> Vec<f32> {
        self.dlogits.clone()
    }
}

#[test]
fn masked_cross_entropy_pad_positions_contribute_nothing() {
    let (rows, classes) = (6, 4);
    let labels = vec![2, PAD, 1, 3, PAD, 3];
    let mut m = XentModel {
        logits: random(rows * classes, 9).iter().map(|x| 3.0 * x).collect(),
        dlogits: vec![0.0; rows * classes],
        labels: labels.clone(),
        classes,
    };
    let loss = m.run(false);
    let grads = check(&mut m);
    for (r, &l) in labels.iter().enumerate() {
        let g = &grads[0][r * classes..(r + 1) * classes];
        if l == PAD {
            assert!(g.iter().all(|&x| x == 0.0), "pad row {r}");
        } else {
            assert!(g.iter().sum::<f32>().abs() < 1e-6, "softmax rows sum to 0");
        }
    }
    // Pad rows' logits do not move the loss at all.
    for v in &mut m.logits[classes..2 * classes] {
        *v += 100.0;
    }
    assert_eq!(m.run(false), loss);
}

/// src ids -> embedding -> 2-layer encoder LSTM; its final state starts a 2-layer decoder
/// LSTM over embedded target ids, run a step at a time; linear head; masked
/// cross-entropy. The encoder's outputs feed no loss: all its gradient arrives through
/// its final state.
struct Seq2SeqModel {
    flat: Flat<Cpu>,
    src_emb: Embedding<Cpu>,
    tgt_emb: Embedding<Cpu>,
    enc: Lstm<Cpu>,
    dec: Lstm<Cpu>,
    head: Linear<Cpu>,
    src: Vec<u32>,
    tgt: Vec<u32>,
    labels: Vec<u32>,
    dlogits: Vec<f32>,
    zeros: Vec<f32>,
    batch: usize,
    vocab: usize,
}

impl Model for Seq2SeqModel {
    fn run(&mut self, backward: bool) -> f32 {
        let (be, b) = (&Cpu, self.batch);
        let (ts, tt) = (self.src.len() / b, self.tgt.len() / b);
        self.flat.grads.fill(0.0);
        let f = &mut self.flat;
        self.src_emb.forward(be, f, &self.src).unwrap();
        self.enc
            .forward(be, f, self.src_emb.output(), ts, b, None, Mode::Train)
            .unwrap();
        self.dec
            .begin(be, f, tt, b, Some(self.enc.final_state()), Mode::Train)
            .unwrap();
        for t in 0..tt {
            let ids = &self.tgt[t * b..(t + 1) * b];
            self.tgt_emb.forward_rows(be, f, ids, t * b).unwrap();
            self.dec
                .forward_steps(be, f, self.tgt_emb.output(), t..t + 1);
        }
        self.head
            .forward(be, f, self.dec.output(), tt * b, Mode::Train);
        let loss = xent(
            &mut self.dlogits,
            self.head.output(),
            &self.labels,
            self.vocab,
        );
        if backward {
            self.head
                .backward(be, f, self.dec.output(), &self.dlogits, tt * b, true);
            let x = self.tgt_emb.output();
            self.dec
                .backward(be, f, x, self.head.input_grad(), None, true);
            self.tgt_emb
                .backward(be, f, self.dec.input_grad(), &self.tgt)
                .unwrap();
            let dfinal = Some(self.dec.init_grad());
            let x = self.src_emb.output();
            self.enc.backward(be, f, x, &self.zeros, dfinal, true);
            self.src_emb
                .backward(be, f, self.enc.input_grad(), &self.src)
                .unwrap();
        }
        loss
    }
    fn values(&mut self, _: usize) -> &mut [f32] {
        &mut self.flat.params
    }
    fn grad(&self, _: usize) -> Vec<f32> {
        self.flat.grads.clone()
    }
}

#[test]
fn encoder_final_state_feeds_a_decoder_run_a_step_at_a_time() {
    let (vocab, emb, hidden, batch, ts, tt) = (6, 3, 4, 2, 4, 3);
    let mut alloc = Allocator::new(batch);
    let cfg = LstmConfig {
        layers: 2,
        input: emb,
        hidden,
        dropout: 0.25,
    };
    let src_emb = Embedding::new(&Cpu, &mut alloc, vocab, emb, ts * batch);
    let enc = Lstm::new(&Cpu, &mut alloc, cfg, ts);
    let tgt_emb = Embedding::new(&Cpu, &mut alloc, vocab, emb, tt * batch);
    let dec = Lstm::new(&Cpu, &mut alloc, cfg, tt);
    alloc.max_batch = tt * batch;
    let head = Linear::new(&Cpu, &mut alloc, (hidden, 1, 1), vocab);
    let mut tensors = NamedTensors::default();
    tensors.enter("encoder");
    tensors.child("embedding", &src_emb);
    tensors.child("rnn", &enc);
    tensors.leave();
    tensors.enter("decoder");
    tensors.child("embedding", &tgt_emb);
    tensors.child("rnn", &dec);
    tensors.child("fc_out", &head);
    tensors.leave();
    // Time-major; column 1's source ends in pads.
    let src = vec![2, 3, 4, 5, 1, PAD, 5, PAD];
    let tgt = vec![2, 2, 3, 4, 5, 1];
    let labels = vec![3, 4, 5, 1, 1, PAD];
    let mut m = Seq2SeqModel {
        flat: flat(&alloc, &tensors, 11),
        src_emb,
        tgt_emb,
        enc,
        dec,
        head,
        src,
        tgt,
        labels,
        dlogits: vec![0.0; tt * batch * vocab],
        zeros: vec![0.0; ts * batch * hidden],
        batch,
        vocab,
    };
    let grads = check(&mut m);
    // The encoder learns through the decoder's initial state.
    let enc_range = tensors
        .params
        .iter()
        .find(|s| s.name == "encoder.rnn.weight_hh_l1")
        .expect("the encoder's top recurrent weight")
        .range
        .clone();
    assert!(grads[0][enc_range].iter().any(|&g| g.abs() > 1e-4));
}

/// The whole `Seq2Seq` training loss at one fixed step: its dropout masks and
/// teacher-forcing draws are fixed, and the perturbations are too small to move an
/// arg-max fed back to the decoder (a constant, as in PyTorch).
struct FullSeq2Seq {
    net: Seq2Seq<Cpu>,
    batch: TextBatch,
    step: u64,
}

impl Model for FullSeq2Seq {
    fn run(&mut self, backward: bool) -> f32 {
        if backward {
            self.net
                .forward_backward(&self.batch, self.step)
                .unwrap()
                .loss
        } else {
            self.net.training_loss(&self.batch, self.step).unwrap()
        }
    }
    fn values(&mut self, _: usize) -> &mut [f32] {
        self.net.params_mut()
    }
    fn grad(&self, _: usize) -> Vec<f32> {
        self.net.grads().to_vec()
    }
}

/// vocab 7, embeddings 3, hidden 4, 2 layers, dropout 0.25, teacher forcing 0.5; sources
/// of up to 4 tokens, targets of up to 5, 2 sentences.
fn tiny_seq2seq() -> Seq2SeqConfig {
    Seq2SeqConfig {
        embedding: 3,
        hidden: 4,
        dropout: 0.25,
        max_src_len: 4,
        max_tgt_len: 5,
        max_batch: 2,
        ..Seq2SeqConfig::paper(7, 7)
    }
}

/// Two pairs, time-major; column 1 is shorter on both sides (pads).
fn tiny_batch() -> TextBatch {
    TextBatch {
        src: vec![SOS_ID, SOS_ID, 4, 5, 6, EOS_ID, EOS_ID, PAD],
        tgt: vec![SOS_ID, SOS_ID, 5, 4, 6, 6, 4, EOS_ID, EOS_ID, PAD],
        src_len: 4,
        tgt_len: 5,
        src_lengths: vec![4, 3],
        tgt_lengths: vec![5, 4],
        indices: vec![0, 1],
    }
}

#[test]
fn seq2seq_training_loss_with_teacher_forcing_and_fed_back_predictions() {
    let mut net = Seq2Seq::new(Cpu, tiny_seq2seq(), 21);
    // Larger weights than the reference's U(-0.08, 0.08): gradients well above the
    // tolerance's floor, and wide arg-max margins.
    let w = random(net.num_params(), 22);
    net.params_mut().copy_from_slice(&w);
    // A step whose decoder steps 1..4 read both the true token and a prediction.
    let step = (0..100)
        .find(|&s| {
            let tf: Vec<bool> = (1..4).map(|t| net.teacher_forced(s, t)).collect();
            tf.contains(&true) && tf.contains(&false)
        })
        .expect("a step mixing both kinds of input");
    let mut m = FullSeq2Seq {
        net,
        batch: tiny_batch(),
        step,
    };
    let grads = check(&mut m);
    let specs = m.net.param_specs();
    let range = |name: &str| {
        let s = specs.iter().find(|s| s.name == name).expect(name);
        s.range.clone()
    };
    // Every part learns: the encoder only through the decoder's initial state.
    for name in [
        "encoder.embedding.weight",
        "encoder.rnn.weight_hh_l1",
        "decoder.embedding.weight",
        "decoder.rnn.weight_ih_l0",
        "decoder.fc_out.bias",
    ] {
        assert!(
            grads[0][range(name)].iter().any(|&g| g.abs() > 1e-4),
            "{name}"
        );
    }
}
