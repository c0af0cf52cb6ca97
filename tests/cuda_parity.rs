//! The CUDA backend against the CPU backend: every operation on random inputs, top-k's
//! index set, a group server's exchange selected on the GPU, and one training step of lenet5, resnet18 and seq2seq from the same weights
//! and batch. They run where a GPU is present (scripts/gpu-check.sh) and are skipped with
//! the reason elsewhere (CI has no GPU).
//!
//! Tolerances: element-wise operations, pooling, embeddings, dropout masks and top-k are
//! exact or within 1e-6; GEMM-based layers within 1e-4 relative to the output's scale
//! (cuBLAS sums in another order, in full FP32: no TF32); a whole training step within
//! 1e-3 of the gradient's largest magnitude.
#![cfg(feature = "cuda")]

use std::ops::Range;

use gssp::compress::topk::{Difference, TopK};
use gssp::compress::{CudaMirror, PeerView};
use gssp::compute::backend::cpu::Cpu;
use gssp::compute::backend::cuda::Cuda;
use gssp::compute::backend::{
    AdamStep, Backend, BatchNormDims, BatchNormMode, Conv2dDims, EmbeddingDims, LinearDims,
    LstmDims, LstmSpan, SgdStep, Span, Window2d,
};
use gssp::compute::model::seq2seq::{Seq2Seq, Seq2SeqConfig};
use gssp::compute::model::{zoo, Trainable};
use gssp::data::bucket::TextBatch;
use gssp::data::multi30k::EncodedPairs;

mod skipped;

/// The GPU, or `None` after printing why the test is skipped; with `GSSP_REQUIRE_GPU`
/// set (scripts/gpu-check.sh) a missing GPU fails the test instead.
fn gpu(test: &str) -> Option<Cuda> {
    match Cuda::new(0) {
        Ok(g) => Some(g),
        Err(e) if std::env::var_os("GSSP_REQUIRE_GPU").is_some() => {
            panic!("{test}: GSSP_REQUIRE_GPU is set but the GPU is not usable: {e:#}")
        }
        Err(e) => {
            skipped::skip(test, &format!("{e:#}"));
            None
        }
    }
}

/// Deterministic values in [-1, 1).
fn random(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

fn up<B: Backend>(be: &B, host: &[f32]) -> B::Buf {
    let mut b = be.alloc(host.len());
    be.upload(&mut b, host);
    b
}

fn down<B: Backend>(be: &B, buf: &B::Buf, len: usize) -> Vec<f32> {
    let mut h = vec![0.0; len];
    be.download(&mut h, buf);
    h
}

/// Every value of `gpu` within `rtol` of the largest magnitude of `cpu` (plus 1e-6).
fn close(what: &str, gpu: &[f32], cpu: &[f32], rtol: f32) {
    assert_eq!(gpu.len(), cpu.len(), "{what}: lengths");
    let scale = cpu.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    let tol = rtol * scale + 1e-6;
    let (worst, at) = gpu
        .iter()
        .zip(cpu)
        .enumerate()
        .map(|(i, (g, c))| ((g - c).abs(), i))
        .fold((0.0f32, 0), |a, b| if b.0 > a.0 { b } else { a });
    assert!(
        worst <= tol,
        "{what}: value {at} is {} on the GPU and {} on the CPU (error {worst:e}, tolerance {tol:e})",
        gpu[at],
        cpu[at]
    );
}

#[test]
fn elementwise_operations_and_dropout_match_the_cpu() {
    let n = 10_007;
    let (a, b) = (random(n, 1), random(n, 2));
    fn run<B: Backend>(be: &B, a: &[f32], b: &[f32]) -> Vec<Vec<f32>> {
        let n = a.len();
        let (ba, bb) = (up(be, a), up(be, b));
        let mut out = be.alloc(n);
        be.add(&mut out, &ba, &bb, n);
        let added = down(be, &out, n);
        be.scale(&mut out, n, 0.5);
        let scaled = down(be, &out, n);
        be.fill(&mut out, 10..20, 3.0);
        let filled = down(be, &out, n);
        let mut copied = be.alloc(n);
        be.copy(&mut copied, &out, n - 1);
        let copied = down(be, &copied, n);
        let mut relu = be.alloc(n);
        be.relu_forward(&mut relu, &ba, n);
        let mut drelu = be.alloc(n);
        be.relu_backward(&mut drelu, &bb, &relu, n);
        let (mut dropped, mut mask) = (be.alloc(n), be.alloc(n));
        be.dropout_forward(&mut dropped, &mut mask, &ba, n, 0.3, 42);
        let mut ddrop = be.alloc(n);
        be.dropout_backward(&mut ddrop, &bb, &mask, n);
        let (mut part, mut part_mask) = (be.alloc(n), be.alloc(n));
        be.dropout_forward_range(&mut part, &mut part_mask, &ba, 100..5000, 0.5, 7);
        let ss = vec![be.sum_squares(&ba, n) as f32];
        vec![
            added,
            scaled,
            filled,
            copied,
            down(be, &relu, n),
            down(be, &drelu, n),
            down(be, &dropped, n),
            down(be, &mask, n),
            down(be, &ddrop, n),
            down(be, &part, n)[100..5000].to_vec(),
            down(be, &part_mask, n)[100..5000].to_vec(),
            ss,
        ]
    }
    let on_cpu = run(&Cpu, &a, &b);
    let Some(g) = gpu("elementwise") else {
        return;
    };
    let on_gpu = run(&g, &a, &b);
    for (i, (x, y)) in on_gpu.iter().zip(&on_cpu).enumerate() {
        close(&format!("elementwise result {i}"), x, y, 1e-6);
    }
}

#[test]
fn linear_and_convolution_match_the_cpu() {
    fn linear<B: Backend>(be: &B) -> Vec<Vec<f32>> {
        let dims = LinearDims {
            batch: 37,
            in_f: 300,
            out_f: 70,
        };
        let at = Span {
            weight: 5..5 + 70 * 300,
            bias: Some(5 + 70 * 300..5 + 70 * 300 + 70),
        };
        let np = at.bias.as_ref().map_or(0, |b| b.end);
        let params = up(be, &random(np, 3));
        let inp = up(be, &random(37 * 300, 4));
        let dout = up(be, &random(37 * 70, 5));
        let mut out = be.alloc(37 * 70);
        be.linear_forward(&mut out, &inp, &params, &at, &dims);
        let mut grads = up(be, &random(np, 6));
        let mut dinp = be.alloc(37 * 300);
        be.linear_backward(
            Some(&mut dinp),
            &mut grads,
            &dout,
            &inp,
            &params,
            &at,
            &dims,
        );
        vec![
            down(be, &out, 37 * 70),
            down(be, &grads, np),
            down(be, &dinp, 37 * 300),
        ]
    }
    fn conv<B: Backend>(be: &B, bias: bool, stride: usize, pad: usize) -> Vec<Vec<f32>> {
        let window = Window2d {
            channels: 5,
            height: 11,
            width: 9,
            kernel: 3,
            stride,
            pad,
        };
        let dims = Conv2dDims {
            batch: 4,
            out_c: 6,
            window,
        };
        let wlen = 6 * window.col_rows();
        let at = Span {
            weight: 0..wlen,
            bias: bias.then_some(wlen..wlen + 6),
        };
        let np = wlen + 6;
        let (in_len, out_len) = (4 * window.in_len(), 4 * 6 * window.col_cols());
        let params = up(be, &random(np, 7));
        let inp = up(be, &random(in_len, 8));
        let dout = up(be, &random(out_len, 9));
        let mut scratch = be.alloc(be.conv2d_scratch_len(&dims));
        let mut out = be.alloc(out_len);
        be.conv2d_forward(&mut out, &mut scratch, &inp, &params, &at, &dims);
        let mut grads = up(be, &random(np, 10));
        let mut dinp = up(be, &random(in_len, 11));
        be.conv2d_backward(
            Some(&mut dinp),
            &mut grads,
            &mut scratch,
            &dout,
            &inp,
            &params,
            &at,
            &dims,
        );
        vec![
            down(be, &out, out_len),
            down(be, &grads, np),
            down(be, &dinp, in_len),
        ]
    }
    let cpu_linear = linear(&Cpu);
    let cpu_conv: Vec<_> = [(true, 1, 1), (false, 2, 1), (true, 2, 0)]
        .map(|(b, s, p)| conv(&Cpu, b, s, p))
        .to_vec();
    let Some(g) = gpu("linear_and_convolution") else {
        return;
    };
    for (i, (x, y)) in linear(&g).iter().zip(&cpu_linear).enumerate() {
        close(&format!("linear result {i}"), x, y, 1e-4);
    }
    for (c, (bias, stride, pad)) in [(true, 1, 1), (false, 2, 1), (true, 2, 0)]
        .into_iter()
        .enumerate()
    {
        for (i, (x, y)) in conv(&g, bias, stride, pad)
            .iter()
            .zip(&cpu_conv[c])
            .enumerate()
        {
            close(
                &format!("conv (bias {bias}, stride {stride}, pad {pad}) result {i}"),
                x,
                y,
                1e-4,
            );
        }
    }
}

#[test]
fn batch_norm_matches_the_cpu_in_training_and_evaluation() {
    fn run<B: Backend>(be: &B) -> Vec<Vec<f32>> {
        let dims = BatchNormDims {
            batch: 6,
            channels: 7,
            plane: 25,
            eps: 1e-5,
        };
        let len = 6 * 7 * 25;
        let at = Span {
            weight: 3..10,
            bias: Some(10..17),
        };
        let stats = Span {
            weight: 0..7,
            bias: Some(7..14),
        };
        let params = up(be, &random(17, 12));
        let mut state = up(
            be,
            &random(14, 13)
                .iter()
                .map(|x| x.abs() + 0.5)
                .collect::<Vec<_>>(),
        );
        let inp = up(be, &random(len, 14));
        let dout = up(be, &random(len, 15));
        let (mut out, mut saved) = (be.alloc(len), be.alloc(14));
        be.batchnorm_forward(
            &mut out,
            &mut saved,
            &mut state,
            &inp,
            &params,
            &at,
            &stats,
            &dims,
            BatchNormMode::Train { momentum: 0.1 },
        );
        let train = down(be, &out, len);
        let mut grads = up(be, &random(17, 16));
        let mut dinp = be.alloc(len);
        be.batchnorm_backward(
            &mut dinp, &mut grads, &dout, &inp, &saved, &params, &at, &dims,
        );
        let mut eval_saved = be.alloc(14);
        be.batchnorm_forward(
            &mut out,
            &mut eval_saved,
            &mut state,
            &inp,
            &params,
            &at,
            &stats,
            &dims,
            BatchNormMode::Eval,
        );
        vec![
            train,
            down(be, &saved, 14),
            down(be, &state, 14),
            down(be, &grads, 17),
            down(be, &dinp, len),
            down(be, &out, len),
        ]
    }
    let cpu = run(&Cpu);
    let Some(g) = gpu("batch_norm") else {
        return;
    };
    for (i, (x, y)) in run(&g).iter().zip(&cpu).enumerate() {
        close(&format!("batch norm result {i}"), x, y, 1e-4);
    }
}

#[test]
fn pooling_matches_the_cpu_ties_included() {
    fn run<B: Backend>(be: &B, kernel: usize, stride: usize) -> Vec<Vec<f32>> {
        let w = Window2d {
            channels: 1,
            height: 9,
            width: 11,
            kernel,
            stride,
            pad: 0,
        };
        let planes = 6;
        let (in_len, out_len) = (planes * 9 * 11, planes * w.col_cols());
        // Values on a coarse grid: many ties, which the first maximum must win.
        let x: Vec<f32> = random(in_len, 17)
            .iter()
            .map(|v| (v * 3.0).round())
            .collect();
        let inp = up(be, &x);
        let dout = up(be, &random(out_len, 18));
        let (mut out, mut arg) = (be.alloc(out_len), be.alloc(out_len));
        be.maxpool_forward(&mut out, &mut arg, &inp, planes, &w);
        let mut dinp = up(be, &random(in_len, 19));
        be.maxpool_backward(&mut dinp, &dout, &arg, planes, &w);
        let (mut avg, mut davg) = (be.alloc(out_len), up(be, &random(in_len, 20)));
        be.avgpool_forward(&mut avg, &inp, planes, &w);
        be.avgpool_backward(&mut davg, &dout, planes, &w);
        let (mut gavg, mut dgavg) = (be.alloc(planes), be.alloc(in_len));
        be.global_avgpool_forward(&mut gavg, &inp, planes, 99);
        be.global_avgpool_backward(&mut dgavg, &dout, planes, 99);
        vec![
            down(be, &out, out_len),
            down(be, &arg, out_len),
            down(be, &dinp, in_len),
            down(be, &avg, out_len),
            down(be, &davg, in_len),
            down(be, &gavg, planes),
            down(be, &dgavg, in_len),
        ]
    }
    let shapes = [(2, 2), (3, 2), (3, 1)];
    let cpu: Vec<_> = shapes.map(|(k, s)| run(&Cpu, k, s)).to_vec();
    let Some(g) = gpu("pooling") else {
        return;
    };
    for (c, (k, s)) in shapes.into_iter().enumerate() {
        for (i, (x, y)) in run(&g, k, s).iter().zip(&cpu[c]).enumerate() {
            close(&format!("pool k{k} s{s} result {i}"), x, y, 1e-6);
        }
    }
}

#[test]
fn softmax_cross_entropy_matches_the_cpu_masked_or_not() {
    let (rows, classes) = (33, 1031);
    let labels: Vec<u8> = (0..rows).map(|i| (i * 7 % 256) as u8).collect();
    let ids: Vec<u32> = (0..rows as u32)
        .map(|i| if i % 4 == 0 { 0 } else { i * 31 % 1031 })
        .collect();
    fn run<B: Backend>(
        be: &B,
        labels: &[u8],
        ids: &[u32],
        rows: usize,
        classes: usize,
    ) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let logits = up(
            be,
            &random(rows * classes, 21)
                .iter()
                .map(|x| 4.0 * x)
                .collect::<Vec<_>>(),
        );
        let mut d = be.alloc(rows * classes);
        let (loss, correct) = be.softmax_xent(&mut d, &logits, labels, rows, classes);
        let plain = down(be, &d, rows * classes);
        let stats = be.softmax_xent_masked(&mut d, &logits, ids, 0, classes);
        (
            vec![
                loss,
                correct as f32,
                stats.loss,
                stats.correct as f32,
                stats.tokens as f32,
            ],
            plain,
            down(be, &d, rows * classes),
        )
    }
    let b = run(&Cpu, &labels, &ids, rows, classes);
    let Some(g) = gpu("softmax_cross_entropy") else {
        return;
    };
    let a = run(&g, &labels, &ids, rows, classes);
    close("cross-entropy losses and counts", &a.0, &b.0, 1e-5);
    close("cross-entropy gradient", &a.1, &b.1, 1e-5);
    close("masked cross-entropy gradient", &a.2, &b.2, 1e-5);
}

#[test]
fn embedding_and_lstm_match_the_cpu() {
    fn run<B: Backend>(be: &B) -> Vec<Vec<f32>> {
        let (vocab, dim) = (50, 12);
        let emb_at = Span {
            weight: 0..vocab * dim,
            bias: None,
        };
        let ed = EmbeddingDims { vocab, dim };
        let ids: Vec<u32> = vec![3, 7, 3, 49, 0, 7, 7, 12];
        let table = up(be, &random(vocab * dim, 22));
        let mut emb = be.alloc(10 * dim);
        be.embedding_forward(&mut emb, &ids, 2, &table, &emb_at, &ed);
        let mut dtable = up(be, &random(vocab * dim, 23));
        let demb = up(be, &random(ids.len() * dim, 24));
        be.embedding_backward(&mut dtable, &demb, &ids, &emb_at, &ed);

        let dims = LstmDims {
            steps: 5,
            batch: 3,
            input: 8,
            hidden: 6,
        };
        let (g4, h, i) = (24, 6, 8);
        let at = LstmSpan {
            weight_ih: 0..g4 * i,
            weight_hh: g4 * i..g4 * i + g4 * h,
            bias_ih: g4 * (i + h)..g4 * (i + h) + g4,
            bias_hh: g4 * (i + h + 1)..g4 * (i + h + 2),
        };
        let np = g4 * (i + h + 2);
        let params = up(be, &random(np, 25));
        let (t, b) = (5, 3);
        let inp = up(be, &random(t * b * i, 26));
        let (h0, c0) = (up(be, &random(b * h, 27)), up(be, &random(b * h, 28)));
        let (mut out, mut cells, mut gates) = (
            be.alloc(t * b * h),
            be.alloc(t * b * h),
            be.alloc(t * b * g4),
        );
        let (mut hn, mut cn) = (be.alloc(b * h), be.alloc(b * h));
        // Steps 0..2 at once, then one at a time: the same as all at once.
        let ranges: [Range<usize>; 4] = [0..2, 2..3, 3..4, 4..5];
        for r in ranges {
            be.lstm_forward(
                &mut out,
                &mut cells,
                &mut gates,
                (&mut hn, &mut cn),
                &inp,
                (&h0, &c0),
                &params,
                &at,
                &dims,
                r,
            );
        }
        let dout = up(be, &random(t * b * h, 29));
        let (dhn, dcn) = (up(be, &random(b * h, 30)), up(be, &random(b * h, 31)));
        let mut grads = up(be, &random(np, 32));
        let (mut dh0, mut dc0, mut dgates, mut dinp) = (
            be.alloc(b * h),
            be.alloc(b * h),
            be.alloc(t * b * g4),
            be.alloc(t * b * i),
        );
        be.lstm_backward(
            Some(&mut dinp),
            (&mut dh0, &mut dc0),
            &mut grads,
            &mut dgates,
            &dout,
            Some((&dhn, &dcn)),
            &inp,
            (&h0, &c0),
            (&out, &cells, &gates),
            &params,
            &at,
            &dims,
        );
        vec![
            down(be, &emb, 10 * dim)[2 * dim..].to_vec(),
            down(be, &dtable, vocab * dim),
            down(be, &out, t * b * h),
            down(be, &cells, t * b * h),
            down(be, &hn, b * h),
            down(be, &grads, np),
            down(be, &dh0, b * h),
            down(be, &dc0, b * h),
            down(be, &dinp, t * b * i),
        ]
    }
    let cpu = run(&Cpu);
    let Some(g) = gpu("embedding_and_lstm") else {
        return;
    };
    for (i, (x, y)) in run(&g).iter().zip(&cpu).enumerate() {
        close(&format!("embedding/LSTM result {i}"), x, y, 1e-4);
    }
}

#[test]
fn optimizer_steps_match_the_cpu() {
    fn run<B: Backend>(be: &B) -> Vec<Vec<f32>> {
        let n = 4099;
        let (mut w, mut v) = (up(be, &random(n, 33)), up(be, &random(n, 34)));
        let grads = up(be, &random(n, 35));
        be.sgd_step(
            &mut w,
            &mut v,
            &grads,
            &SgdStep {
                lr: 0.05,
                momentum: 0.9,
                weight_decay: 5e-4,
                scale: 0.5,
            },
        );
        let (mut w2, mut m) = (up(be, &random(n, 36)), up(be, &random(n, 37)));
        let mut v2 = up(be, &random(n, 38).iter().map(|x| x * x).collect::<Vec<_>>());
        be.adam_step(
            &mut w2,
            &mut m,
            &mut v2,
            &grads,
            &AdamStep {
                lr: 1e-3,
                one_minus_beta1: 0.1,
                one_minus_beta2: 0.001,
                eps: 1e-8,
                weight_decay: 0.0,
                scale: 1.0,
                bias_correction1: 0.271,
                bias_correction2: 0.002999,
            },
        );
        vec![
            down(be, &w, n),
            down(be, &v, n),
            down(be, &w2, n),
            down(be, &m, n),
            down(be, &v2, n),
        ]
    }
    let cpu = run(&Cpu);
    let Some(g) = gpu("optimizer_steps") else {
        return;
    };
    for (i, (x, y)) in run(&g).iter().zip(&cpu).enumerate() {
        close(&format!("optimizer result {i}"), x, y, 1e-6);
    }
}

#[test]
fn topk_returns_the_cpu_index_set_with_exact_ties() {
    let n = 1_000_003;
    // Few distinct magnitudes of both signs: the threshold lands on heavy ties.
    let after: Vec<f32> = random(n, 39)
        .iter()
        .map(|x| (x * 20.0).round() / 4.0)
        .collect();
    let before: Vec<f32> = random(n, 40)
        .iter()
        .map(|x| (x * 8.0).round() / 4.0)
        .collect();
    let mut topk = TopK::new();
    let ks = [1, 10, 1000, 10_000, n / 3];
    let want: Vec<(Vec<u32>, Vec<u32>)> = ks
        .iter()
        .map(|&k| {
            let (mut plain, mut diff) = (Vec::new(), Vec::new());
            topk.select(&after, k, &mut plain);
            let d = Difference {
                after: &after,
                before: &before,
            };
            topk.select_from(&d, k, &mut diff);
            assert_eq!(plain.len(), k);
            (plain, diff)
        })
        .collect();
    let Some(g) = gpu("topk") else {
        return;
    };
    let (dev_after, dev_before) = (up(&g, &after), up(&g, &before));
    for (&k, (plain, diff)) in ks.iter().zip(&want) {
        let (idx, val) = g.topk(&dev_after, None, n, k).expect("top-k");
        assert_eq!(&idx, plain, "top-{k} of one buffer");
        let want_vals: Vec<f32> = plain.iter().map(|&i| after[i as usize]).collect();
        assert_eq!(val, want_vals, "top-{k} values");
        let (idx, _) = g
            .topk(&dev_after, Some(&dev_before), n, k)
            .expect("top-k of a difference");
        assert_eq!(&idx, diff, "top-{k} of a difference");
    }
    let mut dense = up(&g, &[1.0; 100]);
    g.scatter_add(&mut dense, &[3, 50, 99], &[1.0, 2.0, 3.0], 0.5)
        .expect("scatter-add");
    let host = down(&g, &dense, 100);
    assert_eq!((host[3], host[50], host[99], host[4]), (1.5, 2.0, 2.5, 1.0));
}

/// A group server's sparse exchanges selected on the GPU (`CudaMirror`, the peer view
/// mirrored there) send exactly what the host's selection sends, exchange after exchange,
/// with other groups' updates arriving in between.
#[test]
fn a_peer_view_mirrored_on_the_gpu_sends_what_the_host_sends() {
    let n = 300_007;
    let initial = random(n, 50);
    let mut updates = random(4 * n, 51).into_iter();
    let (mut w_host, mut w_gpu) = (initial.clone(), initial.clone());
    let (mut host, mut mirrored) = (PeerView::new(&initial), PeerView::new(&initial));
    let Some(g) = gpu("peer view mirror") else {
        return;
    };
    let mut device = CudaMirror::new(g);
    mirrored.mirror_on(&mut device);
    let mut topk = TopK::new();
    let (mut idx_h, mut vals_h, mut idx_g, mut vals_g) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for exchange in 0..12 {
        // The group's own pushes, then a peer's sparse update.
        for (i, u) in (0..n).step_by(7).zip(updates.by_ref()) {
            w_host[i] += 0.01 * u;
            w_gpu[i] += 0.01 * u;
        }
        for (j, u) in (0..2000).zip(updates.by_ref()) {
            let i = (j * 149 + exchange * 13) % n;
            host.receive(&mut w_host, i, 0.02 * u);
            mirrored.receive(&mut w_gpu, i, 0.02 * u);
        }
        let k = 1 + exchange * 1500;
        host.take_sparse(&w_host, k, &mut topk, &mut idx_h, &mut vals_h)
            .expect("finite");
        mirrored
            .take_sparse_on(&mut device, &w_gpu, k, &mut idx_g, &mut vals_g)
            .expect("finite");
        assert_eq!(idx_g, idx_h, "exchange {exchange}: indices");
        assert_eq!(vals_g, vals_h, "exchange {exchange}: values");
    }
}

#[test]
fn one_training_step_matches_on_lenet5_resnet18_and_seq2seq() {
    fn grads<B: Backend, T: Trainable<B>>(net: &mut T) -> Vec<f32> {
        let n = net.num_params();
        let (be, _, grads) = net.optimizer_buffers();
        down(be, grads, n)
    }
    /// Loss and gradient of one step of `name` on `be` from seed 5's weights.
    fn image_step<B: Backend>(be: B, name: &str) -> (f32, Vec<f32>) {
        let batch = 8;
        let labels: Vec<u8> = (0..batch as u8).map(|i| i * 3 % 10).collect();
        // lenet5 on 1x28x28; resnet18 at width 0.25 (every layer kind, a quick CPU side).
        let mut net = if name == "lenet5" {
            zoo::lenet5(be, (1, 28, 28), 10, batch, 5)
        } else {
            zoo::resnet18(be, (3, 32, 32), 10, 0.25, batch, 5)
        };
        let x = random(batch * net.input_len(), 41);
        let stats = net.forward_backward(&x, &labels, batch);
        (stats.loss, grads(&mut net))
    }
    /// seq2seq at width 0.125 on a padded batch of made-up sentences.
    fn text_step<B: Backend>(be: B) -> (f32, usize, Vec<f32>) {
        let pairs = EncodedPairs {
            src: (0..6)
                .map(|i| {
                    (0..5 + i)
                        .map(|j| 4 + ((i * 7 + j * 3) % 40) as u32)
                        .collect()
                })
                .collect(),
            tgt: (0..6)
                .map(|i| {
                    (0..4 + 2 * i)
                        .map(|j| 4 + ((i * 5 + j * 11) % 30) as u32)
                        .collect()
                })
                .collect(),
        };
        let batch = TextBatch::new(&pairs, &[0, 1, 2, 3, 4, 5]);
        let cfg = Seq2SeqConfig {
            width: 0.125,
            max_src_len: 12,
            max_tgt_len: 16,
            max_batch: 6,
            ..Seq2SeqConfig::paper(50, 40)
        };
        let mut net = Seq2Seq::new(be, cfg, 9);
        let stats = net.forward_backward(&batch, 3).expect("a training step");
        (stats.loss, stats.tokens, grads(&mut net))
    }
    let cpu_images: Vec<_> = ["lenet5", "resnet18"].map(|m| image_step(Cpu, m)).to_vec();
    let cpu_text = text_step(Cpu);
    let Some(g) = gpu("one_training_step") else {
        return;
    };
    for (name, (loss, grad)) in ["lenet5", "resnet18"].into_iter().zip(&cpu_images) {
        let (gpu_loss, gpu_grad) = image_step(g.clone(), name);
        assert!(
            (gpu_loss - loss).abs() <= 1e-4 * loss.abs().max(1.0),
            "{name}: loss {gpu_loss} on the GPU, {loss} on the CPU"
        );
        close(&format!("{name} gradient"), &gpu_grad, grad, 1e-3);
    }
    let (loss, tokens, grad) = text_step(g.clone());
    assert_eq!(tokens, cpu_text.1);
    assert!(
        (loss - cpu_text.0).abs() <= 1e-4 * cpu_text.0.abs(),
        "seq2seq: loss {loss} on the GPU, {} on the CPU",
        cpu_text.0
    );
    close("seq2seq gradient", &grad, &cpu_text.2, 1e-3);
}
