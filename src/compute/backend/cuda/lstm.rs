//! One LSTM layer (PyTorch's gates i, f, g, o): the input projection of all the steps of
//! a call as one GEMM, then per step a GEMM of the previous hidden state and the
//! element-wise cell (kernels/lstm.cu); backpropagation through time in reverse, with the
//! weight gradients as GEMMs over all the steps at once.

use std::ops::Range;

use cudarc::driver::{CudaSlice, CudaView, CudaViewMut};

use super::gemm::gemm;
use super::kernels::entry;
use super::launch::{elements, launch, per_row};
use super::{Cuda, CudaError};
use crate::compute::backend::{GemmDims, LstmDims, LstmSpan};

type Buf = CudaSlice<f32>;

/// The layer's sizes as the kernels and GEMMs take them.
#[derive(Clone, Copy)]
struct Sizes {
    batch: usize,
    input: usize,
    hidden: usize,
    /// 4H, the gates of one row.
    gates: usize,
    /// B*H, one step's hidden state.
    state: usize,
}

impl Sizes {
    fn of(dims: &LstmDims) -> Sizes {
        Sizes {
            batch: dims.batch,
            input: dims.input,
            hidden: dims.hidden,
            gates: 4 * dims.hidden,
            state: dims.batch * dims.hidden,
        }
    }

    /// The gate values of steps `steps` in a `[T x B x 4H]` buffer.
    fn gate_rows(&self, steps: Range<usize>) -> Range<usize> {
        steps.start * self.batch * self.gates..steps.end * self.batch * self.gates
    }
}

/// The steps `steps` forward (see `Backend::lstm_forward`).
#[allow(clippy::too_many_arguments)]
pub(super) fn lstm_forward(
    cuda: &Cuda,
    out: &mut Buf,
    cells: &mut Buf,
    gates: &mut Buf,
    final_state: (&mut Buf, &mut Buf),
    inp: &Buf,
    init: (&Buf, &Buf),
    params: &Buf,
    at: &LstmSpan,
    dims: &LstmDims,
    steps: Range<usize>,
) -> Result<(), CudaError> {
    if steps.is_empty() || steps.end > dims.steps {
        return Err(CudaError::LstmSteps {
            first: steps.start,
            end: steps.end,
            total: dims.steps,
        });
    }
    let z = Sizes::of(dims);
    input_projection(cuda, gates, inp, params, at, z, steps.clone())?;
    let w_hh = params.slice(at.weight_hh.clone());
    for t in steps.clone() {
        let (out_prev, mut out_rest) = out.split_at_mut(t * z.state);
        let (cells_prev, mut cells_rest) = cells.split_at_mut(t * z.state);
        let (h_prev, c_prev) = if t == 0 {
            (init.0.slice(..z.state), init.1.slice(..z.state))
        } else {
            let prev = (t - 1) * z.state..;
            (out_prev.slice(prev.clone()), cells_prev.slice(prev))
        };
        let mut g = gates.slice_mut(z.gate_rows(t..t + 1));
        let mut h_t = out_rest.slice_mut(..z.state);
        let mut c_t = cells_rest.slice_mut(..z.state);
        let recurrent = GemmDims::new(z.batch, z.gates, z.hidden).b_transposed();
        gemm(cuda, recurrent, 1.0, &h_prev, &w_hh, 1.0, &mut g)?;
        let (b64, h64) = (z.batch as u64, z.hidden as u64);
        let cell = elements(z.state);
        launch!(
            cuda,
            entry::LSTM_CELL_FORWARD,
            cell,
            &mut g,
            &mut h_t,
            &mut c_t,
            &c_prev,
            &b64,
            &h64
        )?;
    }
    let last = (steps.end - 1) * z.state;
    let (h_n, c_n) = final_state;
    cuda.copy_range(h_n, out, last, z.state)?;
    cuda.copy_range(c_n, cells, last, z.state)
}

/// gates of `steps` = x W_ih^T + b_ih + b_hh: the part of the gates that does not wait
/// for the previous step.
fn input_projection(
    cuda: &Cuda,
    gates: &mut Buf,
    inp: &Buf,
    params: &Buf,
    at: &LstmSpan,
    z: Sizes,
    steps: Range<usize>,
) -> Result<(), CudaError> {
    let rows = steps.len() * z.batch;
    let (rows64, g4_64, len) = (rows as u64, z.gates as u64, (rows * z.gates) as u64);
    let values = elements(rows * z.gates);
    let zero = 0.0f32;
    let mut gx = gates.slice_mut(z.gate_rows(steps.clone()));
    launch!(cuda, entry::FILL_F32, values, &mut gx, &zero, &len)?;
    for bias in [&at.bias_ih, &at.bias_hh] {
        let b = params.slice(bias.clone());
        launch!(
            cuda,
            entry::BIAS_ADD_ROWS,
            values,
            &mut gx,
            &b,
            &rows64,
            &g4_64
        )?;
    }
    let x = inp.slice(steps.start * z.batch * z.input..steps.end * z.batch * z.input);
    let w_ih = params.slice(at.weight_ih.clone());
    let product = GemmDims::new(rows, z.gates, z.input).b_transposed();
    gemm(cuda, product, 1.0, &x, &w_ih, 1.0, &mut gx)
}

/// Backpropagation through all the steps (see `Backend::lstm_backward`).
#[allow(clippy::too_many_arguments)]
pub(super) fn lstm_backward(
    cuda: &Cuda,
    dinp: Option<&mut Buf>,
    dinit: (&mut Buf, &mut Buf),
    grads: &mut Buf,
    dgates: &mut Buf,
    dout: &Buf,
    dfinal: Option<(&Buf, &Buf)>,
    inp: &Buf,
    init: (&Buf, &Buf),
    saved: (&Buf, &Buf, &Buf),
    params: &Buf,
    at: &LstmSpan,
    dims: &LstmDims,
) -> Result<(), CudaError> {
    let z = Sizes::of(dims);
    let (dh, dc) = dinit;
    match dfinal {
        Some((dh_n, dc_n)) => {
            cuda.copy_range(dh, dh_n, 0, z.state)?;
            cuda.copy_range(dc, dc_n, 0, z.state)?;
        }
        None => {
            super::elementwise::fill(cuda, dh, 0..z.state, 0.0)?;
            super::elementwise::fill(cuda, dc, 0..z.state, 0.0)?;
        }
    }
    let (_, saved_cells, saved_gates) = saved;
    let w_hh = params.slice(at.weight_hh.clone());
    for t in (0..dims.steps).rev() {
        let c_prev = match t {
            0 => init.1.slice(..z.state),
            _ => saved_cells.slice((t - 1) * z.state..t * z.state),
        };
        let step = StepSaved {
            cell: saved_cells.slice(t * z.state..(t + 1) * z.state),
            cell_prev: c_prev,
            gates: saved_gates.slice(z.gate_rows(t..t + 1)),
            dout: dout.slice(t * z.state..(t + 1) * z.state),
        };
        let mut dg = dgates.slice_mut(z.gate_rows(t..t + 1));
        cell_backward(cuda, &mut dg, (&mut *dh, &mut *dc), &step, z)?;
        // dh_{t-1} = dgates_t W_hh.
        let mut dh_v = dh.slice_mut(..z.state);
        let product = GemmDims::new(z.batch, z.hidden, z.gates);
        gemm(cuda, product, 1.0, &dg, &w_hh, 0.0, &mut dh_v)?;
    }
    weight_grads(cuda, grads, dgates, inp, init.0, saved.0, at, dims)?;
    let Some(dinp) = dinp else {
        return Ok(());
    };
    let rows = dims.steps * z.batch;
    let w_ih = params.slice(at.weight_ih.clone());
    let mut d = dinp.slice_mut(..rows * z.input);
    let dg_all = dgates.slice(..rows * z.gates);
    gemm(
        cuda,
        GemmDims::new(rows, z.input, z.gates),
        1.0,
        &dg_all,
        &w_ih,
        0.0,
        &mut d,
    )
}

/// What one step's cell backward reads of the forward and of the output gradient.
struct StepSaved<'a> {
    cell: CudaView<'a, f32>,
    cell_prev: CudaView<'a, f32>,
    gates: CudaView<'a, f32>,
    dout: CudaView<'a, f32>,
}

/// dgates of one step from the gradients of its hidden state (dout + dh from the next
/// step) and of its cell (dc, updated to the previous cell's).
fn cell_backward(
    cuda: &Cuda,
    dg: &mut CudaViewMut<'_, f32>,
    (dh, dc): (&mut Buf, &mut Buf),
    step: &StepSaved<'_>,
    z: Sizes,
) -> Result<(), CudaError> {
    let (b64, h64) = (z.batch as u64, z.hidden as u64);
    let dh_next = dh.slice(..z.state);
    let mut dc_v = dc.slice_mut(..z.state);
    launch!(
        cuda,
        entry::LSTM_CELL_BACKWARD,
        elements(z.state),
        dg,
        &mut dc_v,
        &step.dout,
        &dh_next,
        &step.gates,
        &step.cell,
        &step.cell_prev,
        &b64,
        &h64
    )
}

/// Accumulates W_hh's gradient (each step's dgates by the previous hidden state: h0 for
/// the first, the saved outputs after), W_ih's (dgates by the inputs) and both biases'
/// (the column sums of dgates).
#[allow(clippy::too_many_arguments)]
fn weight_grads(
    cuda: &Cuda,
    grads: &mut Buf,
    dgates: &Buf,
    inp: &Buf,
    h0: &Buf,
    saved_out: &Buf,
    at: &LstmSpan,
    dims: &LstmDims,
) -> Result<(), CudaError> {
    let z = Sizes::of(dims);
    let rows = dims.steps * z.batch;
    let dg_all = dgates.slice(..rows * z.gates);
    {
        let mut dw_hh = grads.slice_mut(at.weight_hh.clone());
        if dims.steps > 1 {
            let later = (dims.steps - 1) * z.batch;
            let dg_later = dgates.slice(z.batch * z.gates..rows * z.gates);
            let outs = saved_out.slice(..later * z.hidden);
            let product = GemmDims::new(z.gates, z.hidden, later).a_transposed();
            gemm(cuda, product, 1.0, &dg_later, &outs, 1.0, &mut dw_hh)?;
        }
        let dg_first = dgates.slice(..z.batch * z.gates);
        let h0 = h0.slice(..z.state);
        let product = GemmDims::new(z.gates, z.hidden, z.batch).a_transposed();
        gemm(cuda, product, 1.0, &dg_first, &h0, 1.0, &mut dw_hh)?;
    }
    {
        let mut dw_ih = grads.slice_mut(at.weight_ih.clone());
        let x = inp.slice(..rows * z.input);
        let product = GemmDims::new(z.gates, z.input, rows).a_transposed();
        gemm(cuda, product, 1.0, &dg_all, &x, 1.0, &mut dw_ih)?;
    }
    let (rows64, g4_64) = (rows as u64, z.gates as u64);
    for bias in [&at.bias_ih, &at.bias_hh] {
        let mut db = grads.slice_mut(bias.clone());
        launch!(
            cuda,
            entry::BIAS_GRAD_ROWS,
            per_row(z.gates),
            &mut db,
            &dg_all,
            &rows64,
            &g4_64
        )?;
    }
    Ok(())
}
