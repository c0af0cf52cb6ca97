//! Every layer's backward against central finite differences of the training loss.
//!
//! Each check builds a small network around the layer under test (a parameterised layer
//! in front of it, so its input gradient is checked too) ending in softmax
//! cross-entropy, and compares every analytic gradient with
//! `(L(w + eps) - L(w - eps)) / (2 eps)` on the training-mode loss (batch statistics in
//! batch norm, the step's dropout mask).
//!
//! Rounding. The checker reduces the network's f32 logits to the mean cross-entropy in
//! f64 ([`loss`]) and divides by the step the f32 weight actually took, so the only
//! rounding left in a difference is the network's own f32 arithmetic, which the same step
//! repeats bit for bit (tests/determinism.rs): a check's outcome does not depend on the
//! machine's load or on the scheduler. With eps = 1e-3 the truncation error is
//! O(eps^2 * L''') ~ 1e-7, and the logits' rounding moves a loss near 2.3 by a few 1e-7,
//! about 1e-6 / (2 eps) = 5e-4 in the quotient at most; so
//! `|analytic - numeric| <= 1e-3 + 1e-2 * |numeric|` holds for a correct backward, yet a
//! wrong factor, sign, transposition or index fails it (those errors are of the size of
//! the gradient, ~1e-2..1e-1). A larger eps would cross ReLU kinks and max-pooling
//! switches (seen at 1e-2); inputs are random with fixed seeds. A coordinate whose
//! one-sided differences disagree (a kink lies within eps) says nothing about the backward
//! and is skipped; at most 10% may be, so a wrong backward, which disagrees on smooth
//! coordinates too, still fails.
//!
//! Convolutions run on im2col and GEMM here (Winograd off): Winograd's own rounding moves
//! the loss by a few ulps, which at the whole networks' eps = 3e-4 is already the size of
//! the absolute tolerance. tests/winograd.rs checks Winograd's gradients against these.

use gssp::compute::backend::cpu::Cpu;
use gssp::compute::model::zoo::{self, custom};
use gssp::compute::model::{Builder, Network, Trainable};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const EPS: f32 = 1e-3;

/// Starts the pool at two threads before a network is built (its scratch is sized for the
/// pool's threads); the first call in the process decides.
fn pool() {
    gssp::compute::backend::cpu::set_threads(2);
}

/// The training-mode mean cross-entropy of `n` samples, reduced in f64 from the network's
/// f32 logits (the checker's loss: see the module doc).
fn loss(net: &mut Network<Cpu>, x: &[f32], y: &[u8], n: usize) -> f64 {
    let classes = net.classes();
    let mut logits = vec![0.0f32; n * classes];
    net.training_logits(x, n, &mut logits);
    let total: f64 = logits
        .chunks_exact(classes)
        .zip(y)
        .map(|(row, &label)| {
            let max = row.iter().fold(f32::MIN, |m, &v| m.max(v)) as f64;
            let sum: f64 = row.iter().map(|&v| (v as f64 - max).exp()).sum();
            sum.ln() + max - row[label as usize] as f64
        })
        .sum();
    total / n as f64
}

/// The central difference of [`loss`] in parameter `i` with step `eps`, and its two
/// one-sided differences, each divided by the step the f32 weight actually took;
/// `center` is the loss at the weights as they are.
fn differences(
    net: &mut Network<Cpu>,
    i: usize,
    eps: f32,
    (x, y): (&[f32], &[u8]),
    center: f64,
) -> [f64; 3] {
    let n = y.len();
    let w = net.params()[i];
    let (up, down) = (w + eps, w - eps);
    net.params_mut()[i] = up;
    let plus = loss(net, x, y, n);
    net.params_mut()[i] = down;
    let minus = loss(net, x, y, n);
    net.params_mut()[i] = w;
    [
        (plus - minus) / (up - down) as f64,
        (plus - center) / (up - w) as f64,
        (center - minus) / (w - down) as f64,
    ]
}

fn random_batch(net: &Network<Cpu>, n: usize, seed: u64) -> (Vec<f32>, Vec<u8>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let x = (0..n * net.input_len())
        .map(|_| rng.gen_range(-1.0..1.0))
        .collect();
    let y = (0..n)
        .map(|_| rng.gen_range(0..net.classes()) as u8)
        .collect();
    (x, y)
}

/// Finite-difference step and relative tolerance.
#[derive(Clone, Copy)]
struct Tolerance {
    eps: f32,
    relative: f32,
}

/// Single layers and shallow stacks: see the module doc.
const LAYER: Tolerance = Tolerance {
    eps: EPS,
    relative: 1e-2,
};

/// Whole CNNs (20 layers of batch norm and ReLU at batch 8): the loss is so curved that
/// the central difference still moves by 5-15% between eps = 1e-3 and 3e-4, converging
/// on the analytic value as eps shrinks (measured on both networks). A wiring error (a
/// lost skip path, a stage's gradient missing) is off by the size of the gradient itself,
/// so 25% still tells them apart; every layer type has its own tight check above.
const DEEP: Tolerance = Tolerance {
    eps: 3e-4,
    relative: 0.25,
};

/// Checks `count` parameters spread over the whole buffer (all of them when count >= len).
fn check(net: Network<Cpu>, n: usize, count: usize) {
    check_with(net, n, count, LAYER)
}

fn check_with(mut net: Network<Cpu>, n: usize, count: usize, tol: Tolerance) {
    gssp::compute::backend::cpu::set_winograd(false);
    let Tolerance { eps, relative } = tol;
    let (x, y) = random_batch(&net, n, 7);
    net.forward_backward(&x, &y, n);
    let analytic = net.grads().to_vec();
    let center = loss(&mut net, &x, &y, n);
    let len = net.num_params();
    let step = (len / count.min(len)).max(1);
    let (mut checked, mut kinks) = (0, 0);
    let tolerance = |numeric: f64| 1e-3 + relative as f64 * numeric.abs();
    for i in (0..len).step_by(step) {
        let [numeric, forward, backward] = differences(&mut net, i, eps, (&x, &y), center);
        checked += 1;
        if (forward - backward).abs() > 2.0 * tolerance(numeric) {
            kinks += 1;
            continue;
        }
        let diff = (analytic[i] as f64 - numeric).abs();
        assert!(
            diff <= tolerance(numeric),
            "{}: param {i}: analytic {} vs numeric {numeric}",
            net.name(),
            analytic[i]
        );
    }
    assert!(checked >= count.min(len), "checked {checked}");
    assert!(
        kinks * 10 <= checked,
        "{}: {kinks} of {checked} coordinates sit on kinks",
        net.name()
    );
}

fn net(
    name: &str,
    input: (usize, usize, usize),
    n: usize,
    seed: u64,
    fill: impl FnOnce(&mut Builder<Cpu>),
) -> Network<Cpu> {
    pool();
    custom(Cpu, name, input, n, seed, fill)
}

#[test]
fn linear_and_relu() {
    check(
        net("linear-relu", (12, 1, 1), 4, 1, |b| {
            b.linear(9).relu().linear(5);
        }),
        4,
        usize::MAX,
    );
}

#[test]
fn conv2d_with_padding_feeding_a_conv2d() {
    // The first conv's gradient depends on the second conv's input gradient (col2im).
    check(
        net("conv-conv", (2, 7, 7), 3, 2, |b| {
            b.conv(3, 3, 1).conv(4, 3, 0).flatten().linear(5);
        }),
        3,
        usize::MAX,
    );
}

#[test]
fn conv2d_with_stride_and_without_bias() {
    check(
        net("conv-stride", (2, 8, 7), 2, 3, |b| {
            b.conv(3, 3, 1)
                .conv_with(4, 3, 2, 1, false)
                .flatten()
                .linear(4);
        }),
        2,
        usize::MAX,
    );
}

#[test]
fn maxpool() {
    check(
        net("conv-pool", (1, 8, 8), 3, 4, |b| {
            b.conv(3, 3, 1).maxpool(2).flatten().linear(4);
        }),
        3,
        usize::MAX,
    );
}

#[test]
fn maxpool_with_window_3() {
    check(
        net("conv-pool3", (1, 9, 9), 2, 5, |b| {
            b.conv(2, 3, 1).maxpool(3).flatten().linear(3);
        }),
        2,
        usize::MAX,
    );
}

#[test]
fn average_pool() {
    check(
        net("conv-avgpool", (2, 6, 6), 3, 6, |b| {
            b.conv(3, 3, 1).avgpool(2).flatten().linear(4);
        }),
        3,
        usize::MAX,
    );
}

#[test]
fn global_average_pool() {
    check(
        net("conv-gap", (2, 5, 5), 3, 7, |b| {
            b.conv(4, 3, 1).global_avgpool().flatten().linear(3);
        }),
        3,
        usize::MAX,
    );
}

#[test]
fn batch_norm_with_batch_statistics() {
    // A conv (no bias), batch norm, ReLU: gamma, beta and the conv's input-side weights
    // all go through the batch mean and variance.
    check(
        net("conv-bn", (2, 5, 5), 4, 8, |b| {
            b.conv_with(3, 3, 1, 1, false)
                .batchnorm()
                .relu()
                .flatten()
                .linear(4);
        }),
        4,
        usize::MAX,
    );
}

#[test]
fn dropout_with_the_steps_mask() {
    check(
        net("linear-dropout", (10, 1, 1), 6, 9, |b| {
            b.linear(16).dropout(0.4).linear(4);
        }),
        6,
        usize::MAX,
    );
}

#[test]
fn residual_block_with_identity_skip() {
    check(
        net("res-identity", (3, 5, 5), 3, 10, |b| {
            b.conv(3, 3, 1).residual(
                |m| {
                    m.conv(3, 3, 1).relu().conv(3, 3, 1);
                },
                None,
                true,
            );
            b.flatten().linear(3);
        }),
        3,
        usize::MAX,
    );
}

#[test]
fn residual_block_with_projection() {
    check(
        net("res-projection", (2, 6, 6), 3, 11, |b| {
            b.conv(2, 3, 1);
            let skip = |s: &mut Builder<Cpu>| {
                s.conv_with(4, 1, 2, 0, false).batchnorm();
            };
            b.residual(
                |m| {
                    m.conv_with(4, 3, 2, 1, false).batchnorm().relu();
                    m.conv_with(4, 3, 1, 1, false).batchnorm();
                },
                Some(&skip),
                false,
            );
            b.flatten().linear(3);
        }),
        3,
        usize::MAX,
    );
}

#[test]
fn lenet5_end_to_end() {
    pool();
    let net = zoo::lenet5(Cpu, (1, 28, 28), 10, 4, 6);
    assert_eq!(net.num_params(), 61_706, "LeNet-5 parameter count");
    check(net, 4, 400);
}

#[test]
fn mlp_end_to_end() {
    pool();
    let net = zoo::mlp(Cpu, (1, 6, 6), &[16, 8], 10, 5, 8);
    check(net, 5, usize::MAX);
}

#[test]
fn narrow_resnet18_end_to_end() {
    pool();
    let net = zoo::resnet18(Cpu, zoo::CIFAR_INPUT, 10, 0.125, 8, 12);
    check_with(net, 8, 300, DEEP);
}

#[test]
fn narrow_vgg19_end_to_end() {
    pool();
    let net = zoo::vgg19(Cpu, zoo::CIFAR_INPUT, 10, 0.125, 8, 13);
    check_with(net, 8, 300, DEEP);
}

#[test]
fn a_wrong_gradient_is_caught() {
    // The checker itself must be able to fail: corrupt one gradient entry.
    let mut net = net("tamper", (6, 1, 1), 2, 9, |b| {
        b.linear(3);
    });
    let (x, y) = random_batch(&net, 2, 7);
    net.forward_backward(&x, &y, 2);
    let g0 = net.grads()[0] as f64;
    let center = loss(&mut net, &x, &y, 2);
    let [numeric, _, _] = differences(&mut net, 0, EPS, (&x, &y), center);
    let tolerance = 1e-3 + 1e-2 * numeric.abs();
    assert!((g0 - numeric).abs() <= tolerance);
    let tampered = g0 * 1.1 + 0.01;
    assert!((tampered - numeric).abs() > tolerance);
}
