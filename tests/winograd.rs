//! Whole networks' gradients with Winograd's 3x3 convolutions, in each choice of tilings
//! (F(2x2,3x3) everywhere, the default mix, F(4x4,3x3) wherever it multiplies less),
//! against the same networks on im2col and GEMM: narrow VGG-19 and ResNet-18 (every 3x3
//! stride-1 layer of at least 8 input channels on Winograd), same weights, same batch. They
//! differ only in rounding: measured with F(2x2,3x3), the difference of the whole gradient is
//! 5e-6 of its norm in VGG-19 and 1.8e-3 in ResNet-18 (batch norm over 8 images of 4x4 planes
//! amplifies rounding); a wrong transform, index or adjoint is off by the size of the
//! gradient, so 1e-2 tells them apart. The finite-difference checks of tests/gradcheck.rs
//! check the im2col path these are compared with; each Winograd layer is checked against
//! im2col in its unit tests.

use gssp::compute::backend::cpu::{set_winograd, set_winograd_tilings, Cpu, WinogradTilings};
use gssp::compute::model::zoo;
use gssp::compute::model::{Network, Trainable};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The convolutions compared.
#[derive(Debug, Clone, Copy)]
enum Convolution {
    Im2col,
    F2,
    Mixed,
    F4,
}

fn loss_and_grads(build: &dyn Fn() -> Network<Cpu>, conv: Convolution) -> (f32, Vec<f32>) {
    set_winograd(!matches!(conv, Convolution::Im2col));
    set_winograd_tilings(match conv {
        Convolution::F2 => WinogradTilings::Two,
        Convolution::F4 => WinogradTilings::Four,
        Convolution::Im2col | Convolution::Mixed => WinogradTilings::Mixed,
    });
    let mut net = build();
    let n = 8;
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let x: Vec<f32> = (0..n * net.input_len())
        .map(|_| rng.gen_range(-1.0..1.0))
        .collect();
    let y: Vec<u8> = (0..n)
        .map(|_| rng.gen_range(0..net.classes()) as u8)
        .collect();
    let loss = net.forward_backward(&x, &y, n).loss;
    (loss, net.grads().to_vec())
}

#[test]
fn winograd_networks_match_their_im2col_gradients() {
    // Both paths on the worker's pool at two threads (the first call in the process decides).
    gssp::compute::backend::cpu::set_threads(2);
    let vgg = || zoo::vgg19(Cpu, zoo::CIFAR_INPUT, 10, 0.125, 8, 13);
    let resnet = || zoo::resnet18(Cpu, zoo::CIFAR_INPUT, 10, 0.125, 8, 12);
    let nets = [("vgg19", &vgg as &dyn Fn() -> _), ("resnet18", &resnet)];
    for ((name, build), tiling) in nets.into_iter().flat_map(|net| {
        [Convolution::F2, Convolution::Mixed, Convolution::F4].map(|conv| (net, conv))
    }) {
        let (loss_w, grads_w) = loss_and_grads(build, tiling);
        let (loss_d, grads_d) = loss_and_grads(build, Convolution::Im2col);
        set_winograd(true);
        set_winograd_tilings(WinogradTilings::Mixed);
        let name = format!("{name} {tiling:?}");
        assert!(
            (loss_w - loss_d).abs() < 1e-5,
            "{name}: loss {loss_w} vs {loss_d}"
        );
        let diff2: f64 = grads_w
            .iter()
            .zip(&grads_d)
            .map(|(a, b)| f64::from(a - b).powi(2))
            .sum();
        let norm2: f64 = grads_d.iter().map(|&b| f64::from(b).powi(2)).sum();
        let relative = (diff2 / norm2).sqrt();
        println!(
            "{name}: loss off by {:.1e}, gradient by {relative:.1e} of its norm",
            (loss_w - loss_d).abs()
        );
        assert!(
            relative <= 1e-2,
            "{name}: the gradients differ by {relative} of their norm"
        );
    }
}
