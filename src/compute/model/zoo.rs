//! The models: LeNet-5, an MLP, and the CIFAR forms of ResNet-18 and VGG-19 (with batch
//! norm), each with the layer order and tensor names of `scripts/pytorch_reference.py`.

use crate::compute::backend::Backend;

use super::builder::{Branch, Builder};
use super::module::{Allocator, Shape};
use super::{ModelError, Network};

pub use crate::config::CIFAR_INPUT;

/// ResNet-18 and VGG-19 are built for 32x32 colour images.
pub fn check_cifar_input(model: &str, input: Shape) -> Result<(), ModelError> {
    if input != CIFAR_INPUT {
        return Err(ModelError::InputShape {
            model: model.to_string(),
            want: CIFAR_INPUT,
            got: input,
        });
    }
    Ok(())
}

/// `channels * width`, at least 1 (PyTorch reference: `round(c * width)`).
pub fn scaled(channels: usize, width: f64) -> usize {
    ((channels as f64 * width).round() as usize).max(1)
}

/// A network from a builder closure (the zoo's models, and custom stacks in tests).
pub fn custom<B: Backend>(
    be: B,
    name: &str,
    input: Shape,
    max_batch: usize,
    seed: u64,
    fill: impl FnOnce(&mut Builder<B>),
) -> Network<B> {
    let mut alloc = Allocator::new(max_batch);
    let body = {
        let mut b = Builder::new(&be, &mut alloc, input);
        fill(&mut b);
        b.finish()
    };
    Network::new(be, name, alloc, body, input, seed)
}

/// LeNet-5 as in the paper's experiments (for 1x28x28: conv 6@5x5 pad 2, relu, maxpool 2,
/// conv 16@5x5, relu, maxpool 2, fc 120, relu, fc 84, relu, fc classes): 61,706 parameters
/// for MNIST. Other input sizes (CIFAR-10's 3x32x32) get the same stack.
pub fn lenet5<B: Backend>(
    be: B,
    input: Shape,
    classes: usize,
    max_batch: usize,
    seed: u64,
) -> Network<B> {
    custom(be, "lenet5", input, max_batch, seed, |b| {
        b.conv(6, 5, 2).relu().maxpool(2);
        b.conv(16, 5, 0).relu().maxpool(2);
        b.flatten()
            .linear(120)
            .relu()
            .linear(84)
            .relu()
            .linear(classes);
    })
}

/// Multi-layer perceptron: flatten, then `hidden` widths with ReLU, then `classes` logits.
pub fn mlp<B: Backend>(
    be: B,
    input: Shape,
    hidden: &[usize],
    classes: usize,
    max_batch: usize,
    seed: u64,
) -> Network<B> {
    custom(be, "mlp", input, max_batch, seed, |b| {
        b.flatten();
        for &h in hidden {
            b.linear(h).relu();
        }
        b.linear(classes);
    })
}

/// ResNet-18 for CIFAR: a 3x3 stem (conv, batch norm, ReLU; no max pool), four stages of
/// two basic blocks at 64-128-256-512 channels (times `width`), the first block of
/// stages 2-4 striding 2 with a 1x1 projection (and batch norm) on its skip, global
/// average pooling, linear. Convolutions have no bias (batch norm follows each). At
/// width 1 and 10 classes: 11,173,962 parameters.
pub fn resnet18<B: Backend>(
    be: B,
    input: Shape,
    classes: usize,
    width: f64,
    max_batch: usize,
    seed: u64,
) -> Network<B> {
    custom(be, "resnet18", input, max_batch, seed, |b| {
        let widths = [64, 128, 256, 512].map(|c| scaled(c, width));
        b.conv_with(widths[0], 3, 1, 1, false).batchnorm().relu();
        let mut cin = widths[0];
        for (stage, &cout) in widths.iter().enumerate() {
            for block in 0..2 {
                let stride = if block == 0 && stage > 0 { 2 } else { 1 };
                let project = stride != 1 || cin != cout;
                let skip = move |s: &mut Builder<B>| {
                    s.conv_with(cout, 1, stride, 0, false).batchnorm();
                };
                b.residual(
                    |m| {
                        m.conv_with(cout, 3, stride, 1, false).batchnorm().relu();
                        m.conv_with(cout, 3, 1, 1, false).batchnorm();
                    },
                    project.then_some(&skip as Branch<B>),
                    true,
                );
                cin = cout;
            }
        }
        b.global_avgpool().flatten().linear(classes);
    })
}

/// VGG-19 with batch norm for CIFAR: 16 3x3 convolutions (with bias, then batch norm and
/// ReLU) in five stages of 64, 128, 256, 512, 512 channels (times `width`), each stage
/// ending in a 2x2 max pool, then one linear layer from the 1x1x512 map. At width 1 and
/// 10 classes: 20,040,522 parameters.
pub fn vgg19<B: Backend>(
    be: B,
    input: Shape,
    classes: usize,
    width: f64,
    max_batch: usize,
    seed: u64,
) -> Network<B> {
    custom(be, "vgg19", input, max_batch, seed, |b| {
        for (channels, convs) in [(64, 2), (128, 2), (256, 4), (512, 4), (512, 4)] {
            for _ in 0..convs {
                b.conv(scaled(channels, width), 3, 1).batchnorm().relu();
            }
            b.maxpool(2);
        }
        b.flatten().linear(classes);
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compute::backend::cpu::Cpu;
    use crate::compute::model::Trainable;

    #[test]
    fn parameter_counts_match_pytorch() {
        assert_eq!(lenet5(Cpu, (1, 28, 28), 10, 1, 0).num_params(), 61_706);
        assert_eq!(
            resnet18(Cpu, CIFAR_INPUT, 10, 1.0, 1, 0).num_params(),
            11_173_962
        );
        assert_eq!(
            vgg19(Cpu, CIFAR_INPUT, 10, 1.0, 1, 0).num_params(),
            20_040_522
        );
    }

    #[test]
    fn tensors_are_named_as_in_the_pytorch_reference() {
        let net = resnet18(Cpu, CIFAR_INPUT, 10, 0.125, 1, 0);
        let names: Vec<&str> = net.param_specs().iter().map(|s| s.name.as_str()).collect();
        assert_eq!(&names[..3], ["0.weight", "1.weight", "1.bias"]);
        assert!(names.contains(&"3.body.0.weight"), "{names:?}");
        assert!(names.contains(&"5.skip.1.bias"), "{names:?}");
        assert_eq!(names.last(), Some(&"13.bias"));
        let state: Vec<&str> = net.state_specs().iter().map(|s| s.name.as_str()).collect();
        assert_eq!(&state[..2], ["1.running_mean", "1.running_var"]);
    }
}
