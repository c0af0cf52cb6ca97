//! Batch norm over NCHW: per-channel statistics over the batch and the plane, the channels
//! shared among the pool's threads.

use super::threads::{for_rows, Units};
use crate::compute::backend::{BatchNormDims, BatchNormMode};

/// Lanes of the partial sums: independent accumulators let the compiler vectorise a
/// reduction that strict float order would otherwise keep serial.
const LANES: usize = 16;

/// `sum(f(x))` over a plane, in `LANES` partial sums.
fn lane_sum(x: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut acc = [0.0f32; LANES];
    let chunks = x.chunks_exact(LANES);
    let tail: f32 = chunks.remainder().iter().map(|&v| f(v)).sum();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += f(v);
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// `(sum(d), sum(d * (x - mu)))` over a plane, in `LANES` partial sums.
fn lane_sums2(d: &[f32], x: &[f32], mu: f32) -> (f32, f32) {
    let (mut s, mut sx) = ([0.0f32; LANES], [0.0f32; LANES]);
    let (dc, xc) = (d.chunks_exact(LANES), x.chunks_exact(LANES));
    let (mut ts, mut tsx) = (0.0, 0.0);
    for (&a, &b) in dc.remainder().iter().zip(xc.remainder()) {
        ts += a;
        tsx += a * (b - mu);
    }
    for (a, b) in dc.zip(xc) {
        for i in 0..LANES {
            s[i] += a[i];
            sx[i] += a[i] * (b[i] - mu);
        }
    }
    (s.iter().sum::<f32>() + ts, sx.iter().sum::<f32>() + tsx)
}

/// Asks the CPU to start loading `buf[at..at + len]` into its caches, where it lies in
/// `buf`. A channel's planes are `C x plane` values apart, too far for the hardware's
/// prefetcher to follow, so the loops over a channel fetch the next plane while they read
/// the current one. A hint only: results do not change.
#[inline]
fn prefetch(buf: &[f32], at: usize, len: usize) {
    #[cfg(target_arch = "x86_64")]
    if let Some(x) = buf.get(at..at + len) {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        for line in x.chunks(16) {
            // SAFETY: a prefetch never faults, and SSE is part of x86-64.
            #[allow(unused_unsafe)]
            unsafe {
                _mm_prefetch::<_MM_HINT_T0>(line.as_ptr().cast())
            };
        }
    }
}

/// Forward. out, inp: `[n x C x plane]`; gamma, beta: `[C]`; running mean and variance:
/// `[C]` each; saved: `[2C]` (batch mean, then 1/std) for backward. Each plane is summed
/// in f32 partial sums, the planes in f64, so that large batches do not lose precision.
/// Channels are shared among the pool's threads; each is computed as on one thread.
#[allow(clippy::too_many_arguments)]
pub fn batchnorm_forward(
    out: &mut [f32],
    saved: &mut [f32],
    run_mean: &mut [f32],
    run_var: &mut [f32],
    inp: &[f32],
    gamma: &[f32],
    beta: &[f32],
    dims: &BatchNormDims,
    mode: BatchNormMode,
) {
    let BatchNormDims {
        batch: n,
        channels: ch,
        plane,
        eps,
    } = *dims;
    let (saved_mean, saved_rstd) = saved.split_at_mut(ch);
    let cuts = [
        Units::rows(&mut out[..n * ch * plane], n, ch * plane, plane),
        Units::new(saved_mean, 1),
        Units::new(&mut saved_rstd[..ch], 1),
        Units::new(&mut run_mean[..ch], 1),
        Units::new(&mut run_var[..ch], 1),
    ];
    for_rows(
        ch,
        cuts,
        &|channels, [mut out, mut mean_of, mut rstd_of, mut rm, mut rv]| {
            let first = channels.start;
            for c in channels {
                let j = c - first;
                let planes = (0..n).map(|i| (i * ch + c) * plane);
                let (rm, rv) = (&mut rm.row(0)[j], &mut rv.row(0)[j]);
                let (mean, rstd) = match mode {
                    BatchNormMode::Train { momentum } => {
                        let (mean, rstd) = train_statistics(
                            inp,
                            planes.clone(),
                            ch * plane,
                            plane,
                            eps,
                            momentum,
                            rm,
                            rv,
                        );
                        mean_of.row(0)[j] = mean;
                        rstd_of.row(0)[j] = rstd;
                        (mean, rstd)
                    }
                    BatchNormMode::Eval => (*rm, 1.0 / (*rv + eps).sqrt()),
                };
                let scale = gamma[c] * rstd;
                let shift = beta[c] - mean * scale;
                for (i, s) in planes.enumerate() {
                    prefetch(inp, s + ch * plane, plane);
                    let o = &mut out.row(i)[j * plane..(j + 1) * plane];
                    for (o, &x) in o.iter_mut().zip(&inp[s..s + plane]) {
                        *o = x * scale + shift;
                    }
                }
            }
        },
    );
}

/// One channel's batch mean and 1/std over its `planes` (offsets of `plane` values in
/// `inp`, `stride` apart), updating its running mean `rm` and unbiased variance `rv`.
#[allow(clippy::too_many_arguments)]
fn train_statistics(
    inp: &[f32],
    planes: impl Iterator<Item = usize> + Clone,
    stride: usize,
    plane: usize,
    eps: f32,
    momentum: f32,
    rm: &mut f32,
    rv: &mut f32,
) -> (f32, f32) {
    let count = (planes.clone().count() * plane) as f64;
    let sum: f64 = planes
        .clone()
        .map(|s| {
            prefetch(inp, s + stride, plane);
            lane_sum(&inp[s..s + plane], |x| x) as f64
        })
        .sum();
    let mean = sum / count;
    let m32 = mean as f32;
    let sq: f64 = planes
        .map(|s| lane_sum(&inp[s..s + plane], |x| (x - m32) * (x - m32)) as f64)
        .sum();
    let var = sq / count;
    let unbiased = if count > 1.0 { sq / (count - 1.0) } else { var };
    let m = momentum as f64;
    *rm = ((1.0 - m) * *rm as f64 + m * mean) as f32;
    *rv = ((1.0 - m) * *rv as f64 + m * unbiased) as f32;
    let rstd = 1.0 / (var + eps as f64).sqrt();
    (mean as f32, rstd as f32)
}

/// Backward of a training-mode forward. Accumulates dgamma and dbeta `[C]` and writes
/// dinp: `[n x C x plane]`:
/// `dinp = gamma * rstd / m * (m * dout - sum(dout) - xhat * sum(dout * xhat))`.
/// Channels are shared among the pool's threads, as in [`batchnorm_forward`].
#[allow(clippy::too_many_arguments)]
pub fn batchnorm_backward(
    dinp: &mut [f32],
    dgamma: &mut [f32],
    dbeta: &mut [f32],
    dout: &[f32],
    inp: &[f32],
    saved: &[f32],
    gamma: &[f32],
    dims: &BatchNormDims,
) {
    let BatchNormDims {
        batch: n,
        channels: ch,
        plane,
        ..
    } = *dims;
    let (mean, rstd) = saved.split_at(ch);
    let cuts = [
        Units::rows(&mut dinp[..n * ch * plane], n, ch * plane, plane),
        Units::new(&mut dgamma[..ch], 1),
        Units::new(&mut dbeta[..ch], 1),
    ];
    for_rows(ch, cuts, &|channels, [mut dinp, mut dgamma, mut dbeta]| {
        let first = channels.start;
        for c in channels {
            let j = c - first;
            let planes = (0..n).map(|i| (i * ch + c) * plane);
            let (mu, r) = (mean[c], rstd[c]);
            let (mut sum_d, mut sum_dx) = (0.0f64, 0.0f64);
            for s in planes.clone() {
                prefetch(dout, s + ch * plane, plane);
                prefetch(inp, s + ch * plane, plane);
                let (sd, sdx) = lane_sums2(&dout[s..s + plane], &inp[s..s + plane], mu);
                sum_d += sd as f64;
                sum_dx += sdx as f64 * r as f64;
            }
            dbeta.row(0)[j] += sum_d as f32;
            dgamma.row(0)[j] += sum_dx as f32;
            let m = (n * plane) as f32;
            let (k, mean_d, mean_dx) = (gamma[c] * r, sum_d as f32 / m, sum_dx as f32 / m);
            for (i, s) in planes.enumerate() {
                let di = &mut dinp.row(i)[j * plane..(j + 1) * plane];
                for ((di, &d), &x) in di
                    .iter_mut()
                    .zip(&dout[s..s + plane])
                    .zip(&inp[s..s + plane])
                {
                    *di = k * (d - mean_d - (x - mu) * r * mean_dx);
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn training_normalises_and_updates_running_statistics_as_pytorch_does() {
        // One channel, 2 images of 2 values: 1, 3, 5, 7 -> mean 4, var 5 (unbiased 20/3).
        let dims = BatchNormDims {
            batch: 2,
            channels: 1,
            plane: 2,
            eps: 0.0,
        };
        let inp = [1.0, 3.0, 5.0, 7.0];
        let (mut out, mut saved) = ([0.0; 4], [0.0; 2]);
        let (mut rm, mut rv) = ([0.0], [1.0]);
        let mode = BatchNormMode::Train { momentum: 0.1 };
        batchnorm_forward(
            &mut out,
            &mut saved,
            &mut rm,
            &mut rv,
            &inp,
            &[2.0],
            &[1.0],
            &dims,
            mode,
        );
        let s = 5f32.sqrt();
        for (o, x) in out.iter().zip(inp) {
            assert!((o - (2.0 * (x - 4.0) / s + 1.0)).abs() < 1e-6);
        }
        assert!((rm[0] - 0.4).abs() < 1e-6);
        assert!((rv[0] - (0.9 + 0.1 * 20.0 / 3.0)).abs() < 1e-6);
        // Evaluation uses the running statistics, not the batch's.
        batchnorm_forward(
            &mut out,
            &mut saved,
            &mut rm,
            &mut rv,
            &inp,
            &[1.0],
            &[0.0],
            &dims,
            BatchNormMode::Eval,
        );
        assert!((out[0] - (1.0 - rm[0]) / rv[0].sqrt()).abs() < 1e-6);
    }
}
