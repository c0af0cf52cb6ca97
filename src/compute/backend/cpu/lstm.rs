//! One LSTM layer over a time-major sequence: forward over a range of steps, and
//! backpropagation through time over the whole sequence.
//!
//! Per step the gate pre-activations are `x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh`
//! (`[B x 4H]`, gates i, f, g, o as PyTorch lays them out). The input part of every step
//! of a call is one GEMM over `steps * B` rows; only the recurrent part is a GEMM per
//! step. Backward likewise runs one small GEMM per step (the gradient into h_{t-1}) and
//! leaves the weight gradients and the input gradient to three GEMMs over the whole
//! sequence, from the saved pre-activation gradients.

use std::ops::Range;

use super::gemm::gemm_shared;
use crate::compute::backend::{GemmDims, LstmDims};

/// The four tensors of one layer (weights or their gradients).
pub struct LstmParams<'a> {
    pub weight_ih: &'a [f32],
    pub weight_hh: &'a [f32],
    pub bias_ih: &'a [f32],
    pub bias_hh: &'a [f32],
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// Saved tensors of a forward: out (h_t) and cells (c_t) `[T x B x H]`, gates (after
/// their activations) `[T x B x 4H]`.
pub struct LstmSaved<'a> {
    pub out: &'a [f32],
    pub cells: &'a [f32],
    pub gates: &'a [f32],
}

/// Forward over `steps`; see [`crate::compute::backend::Backend::lstm_forward`].
#[allow(clippy::too_many_arguments)]
pub fn lstm_forward(
    out: &mut [f32],
    cells: &mut [f32],
    gates: &mut [f32],
    h_n: &mut [f32],
    c_n: &mut [f32],
    inp: &[f32],
    h0: &[f32],
    c0: &[f32],
    p: &LstmParams,
    dims: &LstmDims,
    steps: Range<usize>,
) {
    let LstmDims {
        steps: total,
        batch: b,
        input: i_len,
        hidden: h,
    } = *dims;
    assert!(
        steps.start < steps.end && steps.end <= total,
        "LSTM steps {steps:?} outside 0..{total}"
    );
    let (g4, bh) = (4 * h, b * h);
    let rows = (steps.end - steps.start) * b;
    let gx = &mut gates[steps.start * b * g4..steps.end * b * g4];
    for row in gx.chunks_exact_mut(g4) {
        for ((g, &bi), &bh_) in row.iter_mut().zip(p.bias_ih).zip(p.bias_hh) {
            *g = bi + bh_;
        }
    }
    let x = &inp[steps.start * b * i_len..steps.end * b * i_len];
    gemm_shared(
        GemmDims::new(rows, g4, i_len).b_transposed(),
        1.0,
        x,
        p.weight_ih,
        1.0,
        gx,
    );
    for t in steps.clone() {
        let (out_prev, out_rest) = out.split_at_mut(t * bh);
        let (cells_prev, cells_rest) = cells.split_at_mut(t * bh);
        let (h_prev, c_prev) = if t == 0 {
            (&h0[..bh], &c0[..bh])
        } else {
            (&out_prev[(t - 1) * bh..], &cells_prev[(t - 1) * bh..])
        };
        let g = &mut gates[t * b * g4..(t + 1) * b * g4];
        gemm_shared(
            GemmDims::new(b, g4, h).b_transposed(),
            1.0,
            h_prev,
            p.weight_hh,
            1.0,
            g,
        );
        let (h_t, c_t) = (&mut out_rest[..bh], &mut cells_rest[..bh]);
        for r in 0..b {
            let row = &mut g[r * g4..(r + 1) * g4];
            for j in 0..h {
                let i = sigmoid(row[j]);
                let f = sigmoid(row[h + j]);
                let gg = row[2 * h + j].tanh();
                let o = sigmoid(row[3 * h + j]);
                row[j] = i;
                row[h + j] = f;
                row[2 * h + j] = gg;
                row[3 * h + j] = o;
                let c = f * c_prev[r * h + j] + i * gg;
                c_t[r * h + j] = c;
                h_t[r * h + j] = o * c.tanh();
            }
        }
    }
    let last = (steps.end - 1) * bh;
    h_n[..bh].copy_from_slice(&out[last..last + bh]);
    c_n[..bh].copy_from_slice(&cells[last..last + bh]);
}

/// Gradients a backward writes: dinp `[T x B x I]` (when wanted), dh0 and dc0
/// `[B x H]`, dgates `[T x B x 4H]` (work space), and the four parameter gradients
/// (accumulated).
pub struct LstmGrads<'a> {
    pub dinp: Option<&'a mut [f32]>,
    pub dh0: &'a mut [f32],
    pub dc0: &'a mut [f32],
    pub dgates: &'a mut [f32],
    pub dweight_ih: &'a mut [f32],
    pub dweight_hh: &'a mut [f32],
    pub dbias_ih: &'a mut [f32],
    pub dbias_hh: &'a mut [f32],
}

/// Backpropagation through time; see [`crate::compute::backend::Backend::lstm_backward`].
#[allow(clippy::too_many_arguments)]
pub fn lstm_backward(
    mut d: LstmGrads,
    dout: &[f32],
    dfinal: Option<(&[f32], &[f32])>,
    inp: &[f32],
    h0: &[f32],
    c0: &[f32],
    saved: &LstmSaved,
    p: &LstmParams,
    dims: &LstmDims,
) {
    let (t_len, bh) = (dims.steps, dims.batch * dims.hidden);
    // dh0 and dc0 carry dh_{t} and dc_{t} from step to step, backwards.
    let (dh, dc) = (&mut d.dh0[..bh], &mut d.dc0[..bh]);
    match dfinal {
        Some((dh_n, dc_n)) => {
            dh.copy_from_slice(&dh_n[..bh]);
            dc.copy_from_slice(&dc_n[..bh]);
        }
        None => {
            dh.fill(0.0);
            dc.fill(0.0);
        }
    }
    for t in (0..t_len).rev() {
        step_backward(t, &mut d, dout, c0, saved, p, dims);
    }
    parameter_grads(d, inp, h0, saved, p, dims);
}

/// Step `t` of backpropagation through time: the gates' gradient of the step from the
/// output's gradient and the carried `dh`, `dc` (in `d.dh0`, `d.dc0`), which it moves one
/// step back.
fn step_backward(
    t: usize,
    d: &mut LstmGrads,
    dout: &[f32],
    c0: &[f32],
    saved: &LstmSaved,
    p: &LstmParams,
    dims: &LstmDims,
) {
    let (b, h) = (dims.batch, dims.hidden);
    let (g4, bh) = (4 * h, b * h);
    let (dh, dc) = (&mut d.dh0[..bh], &mut d.dc0[..bh]);
    let c_prev = if t == 0 {
        &c0[..bh]
    } else {
        &saved.cells[(t - 1) * bh..t * bh]
    };
    let cells = &saved.cells[t * bh..(t + 1) * bh];
    let gates = &saved.gates[t * b * g4..(t + 1) * b * g4];
    let dg = &mut d.dgates[t * b * g4..(t + 1) * b * g4];
    let dout_t = &dout[t * bh..(t + 1) * bh];
    for r in 0..b {
        let (grow, drow) = (&gates[r * g4..(r + 1) * g4], &mut dg[r * g4..(r + 1) * g4]);
        for j in 0..h {
            let k = r * h + j;
            let (i, f, g, o) = (grow[j], grow[h + j], grow[2 * h + j], grow[3 * h + j]);
            let tc = cells[k].tanh();
            let dh_t = dout_t[k] + dh[k];
            let dc_t = dc[k] + dh_t * o * (1.0 - tc * tc);
            drow[j] = dc_t * g * i * (1.0 - i);
            drow[h + j] = dc_t * c_prev[k] * f * (1.0 - f);
            drow[2 * h + j] = dc_t * i * (1.0 - g * g);
            drow[3 * h + j] = dh_t * tc * o * (1.0 - o);
            dc[k] = dc_t * f;
        }
    }
    // dh_{t-1} = dgates_t W_hh.
    gemm_shared(GemmDims::new(b, h, g4), 1.0, dg, p.weight_hh, 0.0, dh);
}

/// The weights' and biases' gradients from every step's gates' gradient, and the
/// input's.
fn parameter_grads(
    d: LstmGrads,
    inp: &[f32],
    h0: &[f32],
    saved: &LstmSaved,
    p: &LstmParams,
    dims: &LstmDims,
) {
    let (t_len, b, i_len, h) = (dims.steps, dims.batch, dims.input, dims.hidden);
    let g4 = 4 * h;
    let rows = t_len * b;
    let dgates = &d.dgates[..rows * g4];
    // dW_hh += sum_t dgates_t^T h_{t-1}: steps 1.. against out[0..T-1], step 0 against h0.
    if t_len > 1 {
        let later = (t_len - 1) * b;
        gemm_shared(
            GemmDims::new(g4, h, later).a_transposed(),
            1.0,
            &dgates[b * g4..],
            &saved.out[..later * h],
            1.0,
            d.dweight_hh,
        );
    }
    gemm_shared(
        GemmDims::new(g4, h, b).a_transposed(),
        1.0,
        &dgates[..b * g4],
        h0,
        1.0,
        d.dweight_hh,
    );
    gemm_shared(
        GemmDims::new(g4, i_len, rows).a_transposed(),
        1.0,
        dgates,
        inp,
        1.0,
        d.dweight_ih,
    );
    for row in dgates.chunks_exact(g4) {
        for ((bi, bh_), &x) in d.dbias_ih.iter_mut().zip(d.dbias_hh.iter_mut()).zip(row) {
            *bi += x;
            *bh_ += x;
        }
    }
    if let Some(dinp) = d.dinp {
        gemm_shared(
            GemmDims::new(rows, i_len, g4),
            1.0,
            dgates,
            p.weight_ih,
            0.0,
            dinp,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One unit, one input, two steps, written out with PyTorch's equations and gate
    /// order (rows i, f, g, o of the weights): a different order gives other numbers.
    #[test]
    fn forward_follows_pytorchs_equations_and_gate_order() {
        let w_ih = [0.5f32, -0.3, 0.8, 0.2];
        let w_hh = [0.1f32, 0.4, -0.6, 0.7];
        let b_ih = [0.05f32, 0.1, -0.05, 0.0];
        let b_hh = [0.0f32, 0.2, 0.1, -0.1];
        let p = LstmParams {
            weight_ih: &w_ih,
            weight_hh: &w_hh,
            bias_ih: &b_ih,
            bias_hh: &b_hh,
        };
        let dims = LstmDims {
            steps: 2,
            batch: 1,
            input: 1,
            hidden: 1,
        };
        let x = [1.5f32, -0.7];
        let (h0, c0) = ([0.3f32], [-0.2f32]);
        let (mut out, mut cells, mut gates) = ([0.0; 2], [0.0; 2], [0.0; 8]);
        let (mut h_n, mut c_n) = ([0.0], [0.0]);
        lstm_forward(
            &mut out,
            &mut cells,
            &mut gates,
            &mut h_n,
            &mut c_n,
            &x,
            &h0,
            &c0,
            &p,
            &dims,
            0..2,
        );
        let s = |v: f64| 1.0 / (1.0 + (-v).exp());
        let (mut h, mut c) = (h0[0] as f64, c0[0] as f64);
        for (t, &xt) in x.iter().enumerate() {
            let pre = |k: usize| {
                w_ih[k] as f64 * xt as f64 + b_ih[k] as f64 + w_hh[k] as f64 * h + b_hh[k] as f64
            };
            let (i, f, g, o) = (s(pre(0)), s(pre(1)), pre(2).tanh(), s(pre(3)));
            c = f * c + i * g;
            h = o * c.tanh();
            assert!((out[t] as f64 - h).abs() < 1e-6, "h_{t}");
            assert!((cells[t] as f64 - c).abs() < 1e-6, "c_{t}");
        }
        assert_eq!((h_n[0], c_n[0]), (out[1], cells[1]));
    }
}
