//! Elementwise operations, the loss and the optimizer step.

use crate::backend::SgdStep;

/// out = a + b.
pub fn add(out: &mut [f32], a: &[f32], b: &[f32]) {
    for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
        *o = x + y;
    }
}

/// out = max(inp, 0).
pub fn relu_forward(out: &mut [f32], inp: &[f32]) {
    for (o, &x) in out.iter_mut().zip(inp) {
        *o = x.max(0.0);
    }
}

/// dinp = dout * (out > 0), from the forward's output.
pub fn relu_backward(dinp: &mut [f32], dout: &[f32], out: &[f32]) {
    for ((di, &d), &o) in dinp.iter_mut().zip(dout).zip(out) {
        *di = if o > 0.0 { d } else { 0.0 };
    }
}

/// A uniform draw in [0, 1) for element `i` of the mask seeded `seed` (SplitMix64's
/// finaliser over the pair; cheap to compute on any device).
pub fn mask_uniform(seed: u64, i: u64) -> f32 {
    let mut z = seed ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 40) as f32 * (1.0 / (1u64 << 24) as f32)
}

/// Inverted dropout: mask = 0 with probability p, else 1 / (1 - p); out = inp * mask.
pub fn dropout_forward(out: &mut [f32], mask: &mut [f32], inp: &[f32], p: f32, seed: u64) {
    let keep = 1.0 / (1.0 - p);
    for (i, ((o, m), &x)) in out.iter_mut().zip(mask.iter_mut()).zip(inp).enumerate() {
        *m = if mask_uniform(seed, i as u64) < p {
            0.0
        } else {
            keep
        };
        *o = x * *m;
    }
}

/// dinp = dout * mask.
pub fn dropout_backward(dinp: &mut [f32], dout: &[f32], mask: &[f32]) {
    for ((di, &d), &m) in dinp.iter_mut().zip(dout).zip(mask) {
        *di = d * m;
    }
}

/// Softmax cross-entropy over `n` rows of `classes` logits. Writes `dlogits` (gradient of
/// the batch-mean loss) and returns (mean loss, number of rows whose argmax is the label).
pub fn softmax_xent_forward_backward(
    dlogits: &mut [f32],
    logits: &[f32],
    labels: &[u8],
    n: usize,
    classes: usize,
) -> (f32, usize) {
    let mut loss = 0.0f64;
    let mut correct = 0;
    let inv_n = 1.0 / n as f32;
    for i in 0..n {
        let row = &logits[i * classes..(i + 1) * classes];
        let d = &mut dlogits[i * classes..(i + 1) * classes];
        let label = labels[i] as usize;
        let (mut max, mut arg) = (row[0], 0);
        for (c, &v) in row.iter().enumerate().skip(1) {
            if v > max {
                max = v;
                arg = c;
            }
        }
        if arg == label {
            correct += 1;
        }
        let mut sum = 0.0f32;
        for (dv, &v) in d.iter_mut().zip(row) {
            *dv = (v - max).exp();
            sum += *dv;
        }
        loss += (sum.ln() - (row[label] - max)) as f64;
        let inv_sum = 1.0 / sum;
        for dv in d.iter_mut() {
            *dv *= inv_sum * inv_n;
        }
        d[label] -= inv_n;
    }
    ((loss / n as f64) as f32, correct)
}

/// SGD with momentum and weight decay: `g = scale * grad + wd * w; v = momentum * v + g;
/// w -= lr * v`.
pub fn sgd_step(params: &mut [f32], velocity: &mut [f32], grads: &[f32], h: &SgdStep) {
    let SgdStep {
        lr,
        momentum,
        weight_decay,
        scale,
    } = *h;
    for ((w, v), &g) in params.iter_mut().zip(velocity.iter_mut()).zip(grads) {
        let g = scale * g + weight_decay * *w;
        *v = momentum * *v + g;
        *w -= lr * *v;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn softmax_xent_of_uniform_logits_is_log_classes() {
        let logits = vec![0.0f32; 2 * 10];
        let mut d = vec![0.0; 20];
        let (loss, _) = softmax_xent_forward_backward(&mut d, &logits, &[3, 7], 2, 10);
        assert!((loss - 10f32.ln()).abs() < 1e-6);
        assert!((d[3] - (0.1 - 1.0) / 2.0).abs() < 1e-6);
        assert!((d.iter().sum::<f32>()).abs() < 1e-6);
    }

    #[test]
    fn dropout_drops_about_p_and_keeps_the_expected_value() {
        let n = 100_000;
        let (inp, mut out, mut mask) = (vec![1.0; n], vec![0.0; n], vec![0.0; n]);
        dropout_forward(&mut out, &mut mask, &inp, 0.3, 42);
        let dropped = mask.iter().filter(|&&m| m == 0.0).count() as f64 / n as f64;
        assert!((dropped - 0.3).abs() < 0.01, "{dropped}");
        let mean = out.iter().map(|&x| x as f64).sum::<f64>() / n as f64;
        assert!((mean - 1.0).abs() < 0.02, "{mean}");
        // Same seed, same mask; another seed, another mask.
        let mut again = vec![0.0; n];
        dropout_forward(&mut out, &mut again, &inp, 0.3, 42);
        assert_eq!(mask, again);
        dropout_forward(&mut out, &mut again, &inp, 0.3, 43);
        assert_ne!(mask, again);
    }
}
