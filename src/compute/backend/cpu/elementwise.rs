//! Elementwise operations, the loss and the optimizer step. The passes over whole
//! activations and parameters run on the pool in contiguous parts ([`for_values`]); each
//! value is computed as on one thread, so the results do not depend on the thread count.

use super::threads::for_values;
use crate::compute::backend::{AdamStep, SgdStep, XentStats};

/// Calls `f(part of out, its range)` over `out` in parts on the pool.
fn par_map(out: &mut [f32], f: &(dyn Fn(&mut [f32], std::ops::Range<usize>) + Sync)) {
    for_values([out], &|r, [out]| f(out, r));
}

/// buf = value.
pub fn fill(buf: &mut [f32], value: f32) {
    par_map(buf, &|b, _| b.fill(value));
}

/// dst = src (the first `dst.len()` values).
pub fn copy(dst: &mut [f32], src: &[f32]) {
    par_map(dst, &|d, r| d.copy_from_slice(&src[r]));
}

/// out = a + b.
pub fn add(out: &mut [f32], a: &[f32], b: &[f32]) {
    let len = out.len().min(a.len()).min(b.len());
    par_map(&mut out[..len], &|o, r| {
        for ((o, &x), &y) in o.iter_mut().zip(&a[r.clone()]).zip(&b[r]) {
            *o = x + y;
        }
    });
}

/// out = max(inp, 0).
pub fn relu_forward(out: &mut [f32], inp: &[f32]) {
    let len = out.len().min(inp.len());
    par_map(&mut out[..len], &|o, r| {
        for (o, &x) in o.iter_mut().zip(&inp[r]) {
            *o = x.max(0.0);
        }
    });
}

/// dinp = dout * (out > 0), from the forward's output.
pub fn relu_backward(dinp: &mut [f32], dout: &[f32], out: &[f32]) {
    let len = dinp.len().min(dout.len()).min(out.len());
    par_map(&mut dinp[..len], &|di, r| {
        for ((di, &d), &o) in di.iter_mut().zip(&dout[r.clone()]).zip(&out[r]) {
            *di = if o > 0.0 { d } else { 0.0 };
        }
    });
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
    dropout_forward_from(out, mask, inp, p, seed, 0);
}

/// [`dropout_forward`] over values that start at index `first` of a larger buffer: each
/// value's draw depends on its index in that buffer, not in the slice.
pub fn dropout_forward_from(
    out: &mut [f32],
    mask: &mut [f32],
    inp: &[f32],
    p: f32,
    seed: u64,
    first: usize,
) {
    let keep = 1.0 / (1.0 - p);
    let len = out.len().min(mask.len()).min(inp.len());
    for_values([&mut out[..len], &mut mask[..len]], &|r, [out, mask]| {
        let at = first + r.start;
        for (i, ((o, m), &x)) in out.iter_mut().zip(mask).zip(&inp[r]).enumerate() {
            *m = if mask_uniform(seed, (at + i) as u64) < p {
                0.0
            } else {
                keep
            };
            *o = x * *m;
        }
    });
}

/// dinp = dout * mask.
pub fn dropout_backward(dinp: &mut [f32], dout: &[f32], mask: &[f32]) {
    let len = dinp.len().min(dout.len()).min(mask.len());
    par_map(&mut dinp[..len], &|di, r| {
        for ((di, &d), &m) in di.iter_mut().zip(&dout[r.clone()]).zip(&mask[r]) {
            *di = d * m;
        }
    });
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
        let (l, hit) = xent_row(d, row, labels[i] as usize, inv_n);
        loss += l;
        correct += hit as usize;
    }
    ((loss / n as f64) as f32, correct)
}

/// Softmax cross-entropy over `labels.len()` rows, masked on `pad`: pad rows get a zero
/// gradient and no loss; the loss is the mean over the others. With no other row the
/// loss is 0 and every gradient zero (not 0/0).
pub fn softmax_xent_masked(
    dlogits: &mut [f32],
    logits: &[f32],
    labels: &[u32],
    pad: u32,
    classes: usize,
) -> XentStats {
    let tokens = labels.iter().filter(|&&l| l != pad).count();
    let inv = if tokens == 0 {
        0.0
    } else {
        1.0 / tokens as f32
    };
    let (mut loss, mut correct) = (0.0f64, 0);
    for (i, &label) in labels.iter().enumerate() {
        let d = &mut dlogits[i * classes..(i + 1) * classes];
        if label == pad {
            d.fill(0.0);
            continue;
        }
        let label = label as usize;
        assert!(label < classes, "label {label} outside {classes} classes");
        let (l, hit) = xent_row(d, &logits[i * classes..(i + 1) * classes], label, inv);
        loss += l;
        correct += hit as usize;
    }
    XentStats {
        loss: (loss * inv as f64) as f32,
        correct,
        tokens,
    }
}

/// One row of softmax cross-entropy: writes `d = weight * (softmax(row) - onehot(label))`
/// and returns (the row's loss, whether its arg-max, the first maximum, is the label).
fn xent_row(d: &mut [f32], row: &[f32], label: usize, weight: f32) -> (f64, bool) {
    let (mut max, mut arg) = (row[0], 0);
    for (c, &v) in row.iter().enumerate().skip(1) {
        if v > max {
            max = v;
            arg = c;
        }
    }
    let mut sum = 0.0f32;
    for (dv, &v) in d.iter_mut().zip(row) {
        *dv = (v - max).exp();
        sum += *dv;
    }
    let loss = (sum.ln() - (row[label] - max)) as f64;
    let inv_sum = 1.0 / sum;
    for dv in d.iter_mut() {
        *dv *= inv_sum * weight;
    }
    d[label] -= weight;
    (loss, arg == label)
}

/// buf *= factor.
pub fn scale(buf: &mut [f32], factor: f32) {
    par_map(buf, &|b, _| b.iter_mut().for_each(|x| *x *= factor));
}

/// Adam with L2 weight decay (PyTorch's `torch.optim.Adam` with `weight_decay`):
/// `g = scale * grad + wd * w; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;`
/// `w -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)` (the moments updated as
/// `m += (1 - b1) (g - m)`, the same value, PyTorch's `lerp_`), PyTorch's arrangement of the bias
/// corrections (eps is added after correcting v, as PyTorch does).
pub fn adam_step(params: &mut [f32], m: &mut [f32], v: &mut [f32], grads: &[f32], h: &AdamStep) {
    let AdamStep {
        lr,
        one_minus_beta1: d1,
        one_minus_beta2: d2,
        eps,
        weight_decay,
        scale,
        bias_correction1,
        bias_correction2,
    } = *h;
    let step_size = lr / bias_correction1;
    let sqrt_bc2 = bias_correction2.sqrt();
    let len = params.len().min(m.len()).min(v.len()).min(grads.len());
    let bufs = [&mut params[..len], &mut m[..len], &mut v[..len]];
    for_values(bufs, &|r, [params, m, v]| {
        for (((w, m), v), &g) in params.iter_mut().zip(m).zip(v).zip(&grads[r]) {
            let g = scale * g + weight_decay * *w;
            *m += d1 * (g - *m);
            *v += d2 * (g * g - *v);
            *w -= step_size * *m / (v.sqrt() / sqrt_bc2 + eps);
        }
    });
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
    let len = params.len().min(velocity.len()).min(grads.len());
    let bufs = [&mut params[..len], &mut velocity[..len]];
    for_values(bufs, &|r, [params, velocity]| {
        for ((w, v), &g) in params.iter_mut().zip(velocity).zip(&grads[r]) {
            let g = scale * g + weight_decay * *w;
            *v = momentum * *v + g;
            *w -= lr * *v;
        }
    });
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
    fn masked_xent_ignores_pad_rows_and_averages_over_tokens() {
        let logits = vec![0.0f32; 3 * 4];
        let mut d = vec![9.0; 12];
        let s = softmax_xent_masked(&mut d, &logits, &[2, 0, 1], 0, 4);
        assert_eq!(s.tokens, 2);
        assert!((s.loss - 4f32.ln()).abs() < 1e-6);
        assert!(d[4..8].iter().all(|&x| x == 0.0), "pad row: no gradient");
        assert!(
            (d[2] - (0.25 - 1.0) / 2.0).abs() < 1e-6,
            "mean over 2 tokens"
        );
        let none = softmax_xent_masked(&mut d, &logits, &[0, 0, 0], 0, 4);
        assert_eq!((none.loss, none.tokens), (0.0, 0));
        assert!(d.iter().all(|&x| x == 0.0));
    }

    #[test]
    fn dropout_by_ranges_draws_the_mask_of_the_whole_buffer() {
        let n = 1000;
        let inp: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let (mut out, mut mask) = (vec![0.0; n], vec![0.0; n]);
        dropout_forward(&mut out, &mut mask, &inp, 0.5, 7);
        let (mut out2, mut mask2) = (vec![0.0; n], vec![0.0; n]);
        for r in [0..300, 300..301, 301..n] {
            let (o, m) = (&mut out2[r.clone()], &mut mask2[r.clone()]);
            dropout_forward_from(o, m, &inp[r.clone()], 0.5, 7, r.start);
        }
        assert_eq!((mask, out), (mask2, out2));
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
