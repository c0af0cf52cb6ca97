//! Whole networks' gradients with Winograd's 3x3 convolutions, in each choice of tilings
//! (F(2x2,3x3) everywhere, the default mix, F(4x4,3x3) wherever it multiplies less),
//! against the same networks on im2col and GEMM: narrow VGG-19 and ResNet-18 (every 3x3
//! stride-1 layer of at least 8 input channels on Winograd), same weights, same batches.
//!
//! Each parameter tensor's gradient, and the gradient with respect to the input batch, is
//! compared against its own norm, not against the whole network's: a layer that is off by a
//! tenth moves the whole gradient by less than 1% of its norm where its gradient is under a
//! tenth of the network's (VGG-19's last convolution, `49.weight`: 8.8e-3), but its own
//! tensor by 10%.
//!
//! Correct paths differ only in rounding. Measured on the five batches below (two threads,
//! AVX2), the median over the batches of each tensor's relative difference is at most 7.2e-6
//! with F(2x2,3x3) and 2.8e-5 with F(4x4,3x3) in the mix or alone (VGG-19; ResNet-18:
//! 3.0e-6, 1.1e-5), the input gradient's 1.4e-5, and the loss differs by at most 4.8e-6. A
//! batch now and then puts a ReLU or max-pool input within rounding of its kink, and the two
//! paths take different sides of it: the gradients below that layer then differ by far more
//! on that batch (VGG-19 on batch 3 with F(4x4,3x3), alone or in the mix: 3.0e-2 in
//! `4.weight`, 1.1e-2 in the input gradient; ResNet-18 on batch 5: 5.8e-3 in
//! `6.body.1.bias`, 2e-3 in every tensor below it; 3 of 18 batches of a survey of seeds 1-9
//! had such a kink, the others stayed within 3.9e-5). A kink belongs to one batch, a wrong
//! layer is off on every batch: each tensor's difference is the median over the five
//! batches, and it must stay within 1e-3 of its norm, 35 times the rounding measured and a
//! hundredth of a layer off by 10%.
//!
//! The bias of a convolution that batch norm follows (every VGG-19 convolution; ResNet-18's
//! have none) has an exact gradient of 0, the normalisation removes any shift: both paths
//! leave rounding there (1e-7 to 1e-5 in norm), so it is compared against its layer's weight
//! gradient's norm (measured: at most 3.5e-7 of it).
//!
//! The finite-difference checks of tests/gradcheck.rs check the im2col path these are
//! compared with; each Winograd layer is checked against im2col in its unit tests.

use gssp::compute::backend::cpu::{set_winograd, set_winograd_tilings, Cpu, WinogradTilings};
use gssp::compute::model::zoo;
use gssp::compute::model::{Network, Trainable};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The seeds of the random batches (8 images each) every comparison runs on.
const BATCHES: [u64; 5] = [1, 2, 3, 4, 5];

/// The bound on each tensor's median relative difference (module docs).
const TOLERANCE: f64 = 1e-3;

/// The bound on the loss's absolute difference on each batch (the loss is near 2.3).
const LOSS_TOLERANCE: f32 = 1e-5;

/// The convolutions compared.
#[derive(Debug, Clone, Copy)]
enum Convolution {
    Im2col,
    F2,
    Mixed,
    F4,
}

/// One training step's backward pass.
struct Backward {
    loss: f32,
    grads: Vec<f32>,
    /// The gradient with respect to the input batch.
    dx: Vec<f32>,
}

fn backward(build: &dyn Fn() -> Network<Cpu>, conv: Convolution, batch: u64) -> Backward {
    set_winograd(!matches!(conv, Convolution::Im2col));
    set_winograd_tilings(match conv {
        Convolution::F2 => WinogradTilings::Two,
        Convolution::F4 => WinogradTilings::Four,
        Convolution::Im2col | Convolution::Mixed => WinogradTilings::Mixed,
    });
    let mut net = build();
    let n = 8;
    let mut rng = ChaCha8Rng::seed_from_u64(batch);
    let x: Vec<f32> = (0..n * net.input_len())
        .map(|_| rng.gen_range(-1.0..1.0))
        .collect();
    let y: Vec<u8> = (0..n)
        .map(|_| rng.gen_range(0..net.classes()) as u8)
        .collect();
    let mut dx = vec![0.0; x.len()];
    let loss = net.forward_backward_input_grad(&x, &y, n, &mut dx).loss;
    set_winograd(true);
    set_winograd_tilings(WinogradTilings::Mixed);
    Backward {
        loss,
        grads: net.grads().to_vec(),
        dx,
    }
}

/// Euclidean norm, in f64.
fn norm(x: &[f32]) -> f64 {
    x.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>().sqrt()
}

/// Euclidean norm of `a - b`, in f64.
fn distance(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| f64::from(x - y).powi(2))
        .sum::<f64>()
        .sqrt()
}

fn median(mut x: Vec<f64>) -> f64 {
    x.sort_by(f64::total_cmp);
    x[x.len() / 2]
}

/// One compared tensor: a name, where it lies in the gradient (`None`: the input
/// gradient), and where the norm it is measured against lies.
struct Compared {
    name: String,
    range: Option<std::ops::Range<usize>>,
    against: Option<std::ops::Range<usize>>,
}

/// Every parameter tensor of `net` (a convolution's bias against its weight, module docs)
/// and the input gradient.
fn compared(net: &Network<Cpu>) -> Vec<Compared> {
    let specs = net.param_specs();
    let mut out: Vec<Compared> = specs
        .iter()
        .map(|s| {
            let conv_weight = s.name.strip_suffix(".bias").and_then(|layer| {
                specs
                    .iter()
                    .find(|w| w.name == format!("{layer}.weight") && w.shape.len() == 4)
            });
            Compared {
                name: s.name.clone(),
                range: Some(s.range.clone()),
                against: Some(conv_weight.unwrap_or(s).range.clone()),
            }
        })
        .collect();
    out.push(Compared {
        name: "input".into(),
        range: None,
        against: None,
    });
    out
}

impl Backward {
    fn part(&self, range: &Option<std::ops::Range<usize>>) -> &[f32] {
        match range {
            Some(r) => &self.grads[r.clone()],
            None => &self.dx,
        }
    }
}

#[test]
fn winograd_networks_match_their_im2col_gradients_tensor_by_tensor() {
    // Both paths on the worker's pool at two threads (the first call in the process decides).
    gssp::compute::backend::cpu::set_threads(2);
    let vgg = || zoo::vgg19(Cpu, zoo::CIFAR_INPUT, 10, 0.125, 8, 13);
    let resnet = || zoo::resnet18(Cpu, zoo::CIFAR_INPUT, 10, 0.125, 8, 12);
    let nets = [("vgg19", &vgg as &dyn Fn() -> _), ("resnet18", &resnet)];
    for (name, build) in nets {
        let tensors = compared(&build());
        let reference: Vec<Backward> = BATCHES
            .iter()
            .map(|&b| backward(build, Convolution::Im2col, b))
            .collect();
        for tiling in [Convolution::F2, Convolution::Mixed, Convolution::F4] {
            let name = format!("{name} {tiling:?}");
            // relative[t][b]: tensor t's difference on batch b, over its reference norm.
            let mut relative = vec![Vec::new(); tensors.len()];
            for (&batch, d) in BATCHES.iter().zip(&reference) {
                let w = backward(build, tiling, batch);
                assert!(
                    (w.loss - d.loss).abs() <= LOSS_TOLERANCE,
                    "{name}, batch {batch}: loss {} vs {}",
                    w.loss,
                    d.loss
                );
                for (t, rel) in tensors.iter().zip(&mut relative) {
                    let scale = norm(d.part(&t.against));
                    rel.push(distance(w.part(&t.range), d.part(&t.range)) / scale);
                }
            }
            let medians: Vec<f64> = relative.iter().map(|r| median(r.clone())).collect();
            let (worst, &worst_median) = medians
                .iter()
                .enumerate()
                .max_by(|a, b| a.1.total_cmp(b.1))
                .expect("a network has tensors");
            let largest = relative.iter().flatten().fold(0.0, |m: f64, &r| m.max(r));
            println!(
                "{name}: worst median {worst_median:.1e} ({}), largest on one batch {largest:.1e}",
                tensors[worst].name
            );
            for ((t, rel), &m) in tensors.iter().zip(&relative).zip(&medians) {
                let each: Vec<String> = rel.iter().map(|r| format!("{r:.1e}")).collect();
                assert!(
                    m <= TOLERANCE,
                    "{name}: the gradient of {} differs from im2col's by {m:.2e} of its norm \
                     (the median over batches {BATCHES:?}: {}), above {TOLERANCE:e}",
                    t.name,
                    each.join(", ")
                );
            }
        }
    }
}
