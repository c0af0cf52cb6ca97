//! `Seq2Seq` beyond its gradient (tests/gradcheck_seq.rs): size and names against the
//! PyTorch reference, its loss against the reference equations in plain loops,
//! reproducible steps, teacher forcing, greedy decoding, padding, the evaluation loss and
//! refusals of bad batches. All at a tiny size: milliseconds each.

use gssp::compute::backend::cpu::Cpu;
use gssp::compute::model::seq2seq::{Seq2Seq, Seq2SeqConfig};
use gssp::compute::model::Trainable;
use gssp::data::bucket::TextBatch;
use gssp::data::text::{EOS_ID, PAD_ID as PAD, SOS_ID};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const VOCAB: usize = 7;

fn tiny(dropout: f32, teacher_forcing: f32) -> Seq2SeqConfig {
    Seq2SeqConfig {
        embedding: 3,
        hidden: 4,
        dropout,
        teacher_forcing,
        max_src_len: 4,
        max_tgt_len: 6,
        max_batch: 2,
        ..Seq2SeqConfig::paper(VOCAB, VOCAB)
    }
}

/// A tiny model with weights U(-2, 2) from a seed picked for varied greedy translations
/// of [`pairs`]: `[0, 0, 5, 6, 6]` (the max length, 5) and `[0, 0, 5, 6]` (then `<eos>`).
fn tiny_net(cfg: Seq2SeqConfig) -> Seq2Seq<Cpu> {
    let mut net = Seq2Seq::new(Cpu, cfg, 5);
    let mut rng = ChaCha8Rng::seed_from_u64(192);
    net.params_mut()
        .iter_mut()
        .for_each(|w| *w = rng.gen_range(-2.0..2.0));
    net
}

/// Time-major `[rows x 2]` from two columns, padded.
fn column_major(cols: [&[u32]; 2]) -> (Vec<u32>, usize, Vec<usize>) {
    let rows = cols[0].len().max(cols[1].len());
    let mut ids = vec![PAD; rows * 2];
    for (c, col) in cols.iter().enumerate() {
        for (t, &id) in col.iter().enumerate() {
            ids[t * 2 + c] = id;
        }
    }
    (ids, rows, cols.iter().map(|c| c.len()).collect())
}

fn batch(src: [&[u32]; 2], tgt: [&[u32]; 2]) -> TextBatch {
    let (src, src_len, src_lengths) = column_major(src);
    let (tgt, tgt_len, tgt_lengths) = column_major(tgt);
    TextBatch {
        src,
        tgt,
        src_len,
        tgt_len,
        src_lengths,
        tgt_lengths,
        indices: vec![0, 1],
    }
}

fn pairs() -> TextBatch {
    batch(
        [&[SOS_ID, 4, 5, EOS_ID], &[SOS_ID, 6, EOS_ID]],
        [&[SOS_ID, 5, 4, 6, EOS_ID], &[SOS_ID, 6, 4, EOS_ID]],
    )
}

#[test]
fn paper_size_has_the_reference_parameter_count() {
    // Embeddings 7,859 x 256 + 5,927 x 256; each 2-layer LSTM 2,048 x (256 + 512 + 2) +
    // 2,048 x (512 + 512 + 2); head 5,927 x 512 + 5,927.
    let by_hand = 7_859 * 256 + 5_927 * 256 + 2 * (2_048 * 770 + 2_048 * 1_026) + 5_927 * 513;
    assert_eq!(by_hand, 13_926_183);
    let cfg = Seq2SeqConfig {
        max_src_len: 1,
        max_tgt_len: 2,
        max_batch: 1,
        ..Seq2SeqConfig::paper(7_859, 5_927)
    };
    assert_eq!(cfg.num_params(), by_hand);
    assert_eq!(Seq2Seq::new(Cpu, cfg, 0).num_params(), by_hand);
    // The tutorial's printed count, at its own vocabularies.
    assert_eq!(Seq2SeqConfig::paper(7_853, 5_893).num_params(), 13_898_501);
}

#[test]
fn tensors_follow_the_pytorch_module() {
    let net = Seq2Seq::new(Cpu, tiny(0.5, 0.5), 0);
    let lstm = |m: &str, input: usize| -> Vec<(String, Vec<usize>)> {
        (0..2)
            .flat_map(|l| {
                let i = if l == 0 { input } else { 4 };
                [
                    (format!("{m}.rnn.weight_ih_l{l}"), vec![16, i]),
                    (format!("{m}.rnn.weight_hh_l{l}"), vec![16, 4]),
                    (format!("{m}.rnn.bias_ih_l{l}"), vec![16]),
                    (format!("{m}.rnn.bias_hh_l{l}"), vec![16]),
                ]
            })
            .collect()
    };
    let mut want = vec![("encoder.embedding.weight".to_string(), vec![VOCAB, 3])];
    want.extend(lstm("encoder", 3));
    want.push(("decoder.embedding.weight".into(), vec![VOCAB, 3]));
    want.extend(lstm("decoder", 3));
    want.push(("decoder.fc_out.weight".into(), vec![VOCAB, 4]));
    want.push(("decoder.fc_out.bias".into(), vec![VOCAB]));
    let got: Vec<(String, Vec<usize>)> = net
        .param_specs()
        .iter()
        .map(|s| (s.name.clone(), s.shape.clone()))
        .collect();
    assert_eq!(got, want);
    assert_eq!(net.num_params(), net.config().num_params());
    // The reference's init_weights: U(-0.08, 0.08) everywhere.
    assert!(net.params().iter().all(|w| w.abs() < 0.08));
    assert!(net.params().iter().any(|w| w.abs() > 0.07));
}

#[test]
fn width_scales_embedding_and_hidden() {
    let cfg = Seq2SeqConfig {
        width: 0.25,
        ..Seq2SeqConfig::paper(10, 10)
    };
    assert_eq!((cfg.emb_dim(), cfg.hidden_dim()), (64, 128));
    let cfg = Seq2SeqConfig {
        width: 0.001,
        ..cfg
    };
    assert_eq!((cfg.emb_dim(), cfg.hidden_dim()), (1, 1));
}

#[test]
fn a_step_is_a_pure_function_of_stream_and_step() {
    let mut net = tiny_net(tiny(0.5, 0.5));
    let b = pairs();
    let first = net.forward_backward(&b, 7).unwrap();
    let grads = net.grads().to_vec();
    let inputs = net.decoder_inputs().to_vec();
    assert_eq!(net.forward_backward(&b, 8).unwrap().tokens, first.tokens);
    assert_eq!(net.forward_backward(&b, 7).unwrap(), first);
    assert_eq!(net.grads(), &grads[..]);
    assert_eq!(net.decoder_inputs(), &inputs[..]);
    assert_eq!(net.training_loss(&b, 7).unwrap(), first.loss);
    assert_ne!(net.training_loss(&b, 8).unwrap(), first.loss);
    // The draws: fixed per (stream, step), another step or stream draws anew.
    let draws = |net: &Seq2Seq<Cpu>, step| -> Vec<bool> {
        (1..64).map(|t| net.teacher_forced(step, t)).collect()
    };
    let at7 = draws(&net, 7);
    assert_eq!(draws(&net, 7), at7);
    assert_ne!(draws(&net, 8), at7);
    net.set_stream(1);
    assert_ne!(draws(&net, 7), at7);
    assert_ne!(net.training_loss(&b, 7).unwrap(), first.loss);
}

#[test]
fn teacher_forcing_draws_follow_the_ratio() {
    let share = |ratio| {
        let net = Seq2Seq::new(Cpu, tiny(0.0, ratio), 0);
        let n = (0..500)
            .flat_map(|s| (1..9).map(move |t| (s, t)))
            .filter(|&(s, t)| net.teacher_forced(s, t))
            .count();
        n as f64 / 4000.0
    };
    assert_eq!(share(0.0), 0.0);
    assert_eq!(share(1.0), 1.0);
    assert!((share(0.5) - 0.5).abs() < 0.03, "{}", share(0.5));
}

#[test]
fn the_decoder_reads_the_target_when_forced_and_its_prediction_otherwise() {
    let mut net = tiny_net(tiny(0.0, 0.5));
    let b = pairs();
    let s = b.tgt_len - 1;
    let step = (0..100)
        .find(|&st| {
            (1..s).any(|t| net.teacher_forced(st, t)) && (1..s).any(|t| !net.teacher_forced(st, t))
        })
        .expect("a mixed step");
    net.forward_backward(&b, step).unwrap();
    let inputs = net.decoder_inputs()[..s * 2].to_vec();
    assert_eq!(inputs[..2], b.tgt[..2], "step 0 reads <sos>");
    for t in 1..s {
        let row = &inputs[t * 2..t * 2 + 2];
        if net.teacher_forced(step, t) {
            assert_eq!(row, &b.tgt[t * 2..t * 2 + 2], "step {t}");
        }
    }
    // With no teacher forcing every input after the first is the previous arg-max, which
    // is greedy decoding's output until <eos>.
    let mut forced = Seq2Seq::new(Cpu, tiny(0.0, 0.0), 0);
    forced.params_mut().copy_from_slice(net.params());
    forced.forward_backward(&b, 0).unwrap();
    let fed = forced.decoder_inputs()[..s * 2].to_vec();
    let greedy = forced.greedy_decode(&b, s - 1).unwrap();
    assert!(greedy[0].windows(2).any(|w| w[0] != w[1]), "{greedy:?}");
    for (c, sentence) in greedy.iter().enumerate() {
        let column: Vec<u32> = (1..s).map(|t| fed[t * 2 + c]).collect();
        let until_eos: Vec<u32> = column.into_iter().take_while(|&id| id != EOS_ID).collect();
        assert_eq!(sentence, &until_eos, "column {c}");
    }
}

/// The index of `decoder.fc_out.bias` for token `id`.
fn head_bias(net: &Seq2Seq<Cpu>, id: u32) -> usize {
    let spec = net
        .param_specs()
        .iter()
        .find(|s| s.name == "decoder.fc_out.bias")
        .expect("the head's bias");
    spec.range.start + id as usize
}

#[test]
fn greedy_decoding_stops_at_eos_and_within_the_max_length() {
    let mut net = tiny_net(tiny(0.5, 0.5));
    let b = pairs();
    let max = net.config().max_dec_steps();
    // Each sentence stops at its own <eos>; the other runs on to the max length.
    let out = net.greedy_decode(&b, max).unwrap();
    assert_eq!(out, [vec![0, 0, 5, 6, 6], vec![0, 0, 5, 6]]);
    assert_eq!(net.greedy_decode(&b, 4).unwrap(), vec![vec![0, 0, 5, 6]; 2]);
    for len in 1..=max {
        let out = net.greedy_decode(&b, len).unwrap();
        assert_eq!(out.len(), 2);
        assert!(out.iter().all(|s| s.len() <= len && !s.contains(&EOS_ID)));
    }
    // <eos> always wins: nothing before it.
    let eos = head_bias(&net, EOS_ID);
    net.params_mut()[eos] = 100.0;
    let none: Vec<Vec<u32>> = vec![vec![]; 2];
    assert_eq!(net.greedy_decode(&b, max).unwrap(), none);
    // <eos> never wins: every sentence runs to the max length.
    net.params_mut()[eos] = -100.0;
    let out = net.greedy_decode(&b, 3).unwrap();
    assert!(out.iter().all(|s| s.len() == 3), "{out:?}");
    let e = net.greedy_decode(&b, max + 1).unwrap_err().to_string();
    assert!(e.contains("max length"), "{e}");
}

#[test]
fn a_pad_only_target_position_contributes_nothing() {
    let mut net = tiny_net(tiny(0.5, 0.5));
    let short = pairs();
    // The same pairs with one more target row, all <pad>.
    let mut long = short.clone();
    long.tgt.extend([PAD, PAD]);
    long.tgt_len += 1;
    for step in 0..4 {
        let a = net.forward_backward(&short, step).unwrap();
        let ga = net.grads().to_vec();
        let b = net.forward_backward(&long, step).unwrap();
        assert_eq!(a.tokens, b.tokens);
        assert!((a.loss - b.loss).abs() < 1e-6, "{} vs {}", a.loss, b.loss);
        for (x, y) in ga.iter().zip(net.grads()) {
            assert!((x - y).abs() < 1e-6, "{x} vs {y}");
        }
    }
    // Tokens: targets after <sos>, without pads: 4 + 3.
    assert_eq!(net.evaluate_batch(&long).unwrap().tokens, 7);
}

#[test]
fn evaluation_is_the_training_loss_without_dropout_under_full_teacher_forcing() {
    let b = pairs();
    let mut train = tiny_net(tiny(0.0, 1.0));
    let mut eval = tiny_net(tiny(0.5, 0.0));
    let first = eval.evaluate_batch(&b).unwrap();
    assert_eq!(eval.evaluate_batch(&b).unwrap(), first);
    let loss = train.training_loss(&b, 3).unwrap();
    assert!((first.loss - loss).abs() < 1e-5, "{first:?} vs {loss}");
    assert!(first.correct <= first.tokens);
}

#[test]
fn bad_batches_are_errors_not_panics() {
    let mut net = tiny_net(tiny(0.5, 0.5));
    let unknown = batch([&[SOS_ID, 7], &[SOS_ID]], [&[SOS_ID, 4], &[SOS_ID, 4]]);
    let e = net.forward_backward(&unknown, 0).unwrap_err().to_string();
    assert!(e.contains("token id 7"), "{e}");
    let long = batch(
        [&[SOS_ID, 4, 4, 4, EOS_ID], &[SOS_ID]],
        [&[SOS_ID, 4], &[SOS_ID, 4]],
    );
    let e = net.evaluate_batch(&long).unwrap_err().to_string();
    assert!(e.contains("source length 5 exceeds the 4"), "{e}");
    let only_sos = batch([&[SOS_ID], &[SOS_ID]], [&[SOS_ID], &[SOS_ID]]);
    let e = net.training_loss(&only_sos, 0).unwrap_err().to_string();
    assert!(e.contains("target length 1 is below the 2"), "{e}");
}

/// The reference model's loss in plain f64 loops, one column at a time (PyTorch's
/// equations: gates i, f, g, o; encoder final state of every layer into the decoder;
/// targets 1.. against the decoder's predictions from the target 0..), for full teacher
/// forcing and no dropout.
fn reference_loss(net: &Seq2Seq<Cpu>, b: &TextBatch) -> (f64, usize) {
    let p = |name: &str| -> Vec<f64> {
        let s = net
            .param_specs()
            .iter()
            .find(|s| s.name == name)
            .expect(name);
        net.params()[s.range.clone()]
            .iter()
            .map(|&x| x as f64)
            .collect()
    };
    let (e, h, layers) = (3, 4, 2);
    let sig = |x: f64| 1.0 / (1.0 + (-x).exp());
    // One step of every layer of `m` (encoder or decoder) from token `id`.
    let step = |m: &str, id: u32, state: &mut Vec<(Vec<f64>, Vec<f64>)>| -> Vec<f64> {
        let emb = p(&format!("{m}.embedding.weight"));
        let mut x = emb[id as usize * e..(id as usize + 1) * e].to_vec();
        for (l, (hs, cs)) in state.iter_mut().enumerate() {
            let w_ih = p(&format!("{m}.rnn.weight_ih_l{l}"));
            let w_hh = p(&format!("{m}.rnn.weight_hh_l{l}"));
            let (b_ih, b_hh) = (
                p(&format!("{m}.rnn.bias_ih_l{l}")),
                p(&format!("{m}.rnn.bias_hh_l{l}")),
            );
            let i_len = x.len();
            let gate = |r: usize| {
                let a: f64 = (0..i_len).map(|k| w_ih[r * i_len + k] * x[k]).sum();
                let b: f64 = (0..h).map(|k| w_hh[r * h + k] * hs[k]).sum();
                a + b + b_ih[r] + b_hh[r]
            };
            let g: Vec<f64> = (0..4 * h).map(gate).collect();
            for k in 0..h {
                let (i, f, gg, o) = (
                    sig(g[k]),
                    sig(g[h + k]),
                    g[2 * h + k].tanh(),
                    sig(g[3 * h + k]),
                );
                cs[k] = f * cs[k] + i * gg;
                hs[k] = o * cs[k].tanh();
            }
            x = hs.clone();
        }
        x
    };
    let (w, bias) = (p("decoder.fc_out.weight"), p("decoder.fc_out.bias"));
    let (cols, mut sum, mut tokens) = (b.size(), 0.0, 0);
    for c in 0..cols {
        let mut state = vec![(vec![0.0; h], vec![0.0; h]); layers];
        for t in 0..b.src_len {
            step("encoder", b.src[t * cols + c], &mut state);
        }
        for t in 0..b.tgt_len - 1 {
            let top = step("decoder", b.tgt[t * cols + c], &mut state);
            let label = b.tgt[(t + 1) * cols + c] as usize;
            if label == PAD as usize {
                continue;
            }
            let logits: Vec<f64> = (0..VOCAB)
                .map(|v| bias[v] + (0..h).map(|k| w[v * h + k] * top[k]).sum::<f64>())
                .collect();
            let max = logits.iter().cloned().fold(f64::MIN, f64::max);
            let lse = max + logits.iter().map(|l| (l - max).exp()).sum::<f64>().ln();
            sum += lse - logits[label];
            tokens += 1;
        }
    }
    (sum, tokens)
}

#[test]
fn the_loss_is_the_reference_models() {
    let b = pairs();
    let mut net = tiny_net(tiny(0.0, 1.0));
    let (sum, tokens) = reference_loss(&net, &b);
    assert_eq!(tokens, 7);
    let st = net.evaluate_batch(&b).unwrap();
    let (got, n) = (st.loss as f64 * st.tokens as f64, st.tokens);
    assert_eq!(n, tokens);
    assert!((got - sum).abs() < 1e-4 * sum, "{got} vs {sum}");
    let train = net.training_loss(&b, 0).unwrap() as f64;
    assert!(
        (train - sum / 7.0).abs() < 1e-4 * sum,
        "{train} vs {}",
        sum / 7.0
    );
}
