use gssp::model::zoo;
use gssp::optim::Sgd;
use std::time::Instant;
fn main() {
    let b = 64;
    let mut net = zoo::lenet5((1, 28, 28), 10, b, 1);
    let x: Vec<f32> = (0..b * 784)
        .map(|i| ((i * 7919 % 255) as f32) / 255.0)
        .collect();
    let y: Vec<u8> = (0..b).map(|i| (i % 10) as u8).collect();
    gssp::backend::cpu::set_threads(1);
    let mut sgd = Sgd::new(net.num_params(), 0.9, 5e-4);
    for _ in 0..20 {
        net.forward_backward(&x, &y, b);
    }
    let iters = 200;
    let t = Instant::now();
    for _ in 0..iters {
        net.forward_backward(&x, &y, b);
        let (p, g) = net.params_and_grads_mut();
        sgd.step(p, g, 0.01, 1.0);
    }
    let s = t.elapsed().as_secs_f64();
    println!(
        "params {} images_per_s: {:.0}",
        net.num_params(),
        (iters * b) as f64 / s
    );
}
