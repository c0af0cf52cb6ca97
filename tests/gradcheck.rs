//! Every layer's backward against central finite differences of the loss.
//!
//! Each check builds a small network around the layer under test (a parameterised layer
//! in front of it, so its input gradient is checked too) ending in softmax
//! cross-entropy, and compares every analytic gradient with
//! `(L(w + eps) - L(w - eps)) / (2 eps)`, computed in f32.
//!
//! Tolerance: with eps = 1e-3 the truncation error is O(eps^2 * L''') ~ 1e-7, and the f32
//! rounding of a loss near 2.3 (ulp ~2.4e-7, a few ulps after the reductions) adds at
//! most about 1e-6 / (2 eps) = 5e-4; so `|analytic - numeric| <= 1e-3 + 1e-2 * |numeric|`
//! holds for a correct backward, yet a wrong factor, sign, transposition or index fails it
//! (those errors are of the size of the gradient, ~1e-2..1e-1). A larger eps would cross
//! ReLU kinks and max-pooling switches (seen at 1e-2); inputs are random with fixed seeds.
//! A coordinate whose one-sided differences disagree (a kink lies within eps) says
//! nothing about the backward and is skipped; at most 10% may be, so a wrong backward,
//! which disagrees on smooth coordinates too, still fails.

use gssp::model::zoo::Builder;
use gssp::model::Network;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const EPS: f32 = 1e-3;

fn random_batch(net: &Network, n: usize, seed: u64) -> (Vec<f32>, Vec<u8>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let x = (0..n * net.input_len())
        .map(|_| rng.gen_range(-1.0..1.0))
        .collect();
    let y = (0..n)
        .map(|_| rng.gen_range(0..net.classes()) as u8)
        .collect();
    (x, y)
}

/// Checks `count` parameters spread over the whole buffer (all of them when count >= len).
fn check(mut net: Network, n: usize, count: usize) {
    let (x, y) = random_batch(&net, n, 7);
    net.forward_backward(&x, &y, n);
    let analytic = net.grads().to_vec();
    let center = net.evaluate_batch(&x, &y, n).loss;
    let len = net.num_params();
    let step = (len / count.min(len)).max(1);
    let (mut checked, mut kinks) = (0, 0);
    let tolerance = |numeric: f32| 1e-3 + 1e-2 * numeric.abs();
    for i in (0..len).step_by(step) {
        let w = net.params()[i];
        net.params_mut()[i] = w + EPS;
        let plus = net.evaluate_batch(&x, &y, n).loss;
        net.params_mut()[i] = w - EPS;
        let minus = net.evaluate_batch(&x, &y, n).loss;
        net.params_mut()[i] = w;
        let numeric = (plus - minus) / (2.0 * EPS);
        let (forward, backward) = ((plus - center) / EPS, (center - minus) / EPS);
        checked += 1;
        if (forward - backward).abs() > 2.0 * tolerance(numeric) {
            kinks += 1;
            continue;
        }
        let diff = (analytic[i] - numeric).abs();
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

#[test]
fn linear_and_relu() {
    let mut b = Builder::new((12, 1, 1));
    b.linear(9).relu().linear(5);
    check(b.finish("linear-relu", 4, 1), 4, usize::MAX);
}

#[test]
fn conv2d_with_padding_feeding_a_conv2d() {
    // The first conv's gradient depends on the second conv's input gradient (col2im).
    let mut b = Builder::new((2, 7, 7));
    b.conv(3, 3, 1).conv(4, 3, 0).flatten().linear(5);
    check(b.finish("conv-conv", 3, 2), 3, usize::MAX);
}

#[test]
fn conv2d_with_stride() {
    let mut b = Builder::new((2, 8, 7));
    b.conv(3, 3, 1).conv_strided(4, 3, 2, 1).flatten().linear(4);
    check(b.finish("conv-stride", 2, 3), 2, usize::MAX);
}

#[test]
fn maxpool() {
    let mut b = Builder::new((1, 8, 8));
    b.conv(3, 3, 1).maxpool(2).flatten().linear(4);
    check(b.finish("conv-pool", 3, 4), 3, usize::MAX);
}

#[test]
fn maxpool_with_window_3() {
    let mut b = Builder::new((1, 9, 9));
    b.conv(2, 3, 1).maxpool(3).flatten().linear(3);
    check(b.finish("conv-pool3", 2, 5), 2, usize::MAX);
}

#[test]
fn lenet5_end_to_end() {
    let net = gssp::model::zoo::lenet5((1, 28, 28), 10, 4, 6);
    assert_eq!(net.num_params(), 61_706, "LeNet-5 parameter count");
    check(net, 4, 400);
}

#[test]
fn mlp_end_to_end() {
    let net = gssp::model::zoo::mlp((1, 6, 6), &[16, 8], 10, 5, 8);
    check(net, 5, usize::MAX);
}

#[test]
fn a_wrong_gradient_is_caught() {
    // The checker itself must be able to fail: corrupt one gradient entry.
    let mut b = Builder::new((6, 1, 1));
    b.linear(3);
    let mut net = b.finish("tamper", 2, 9);
    let (x, y) = random_batch(&net, 2, 7);
    net.forward_backward(&x, &y, 2);
    let g0 = net.grads()[0];
    let w = net.params()[0];
    net.params_mut()[0] = w + EPS;
    let plus = net.evaluate_batch(&x, &y, 2).loss;
    net.params_mut()[0] = w - EPS;
    let minus = net.evaluate_batch(&x, &y, 2).loss;
    let numeric = (plus - minus) / (2.0 * EPS);
    assert!((g0 - numeric).abs() <= 1e-3 + 1e-2 * numeric.abs());
    let tampered = g0 * 1.1 + 0.01;
    assert!((tampered - numeric).abs() > 1e-3 + 1e-2 * numeric.abs());
}
