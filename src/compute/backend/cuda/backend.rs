//! [`Cuda`]: the [`Backend`] on one GPU. Buffers are device memory (`CudaSlice<f32>`);
//! every operation is a launch of the project's kernels (`kernels/*.cu`) or a cuBLAS SGEMM
//! on one stream, in order, so no operation waits for the host except those whose result
//! the host needs (the loss, a sum of squares, a download).
//!
//! GEMMs: the layers store row-major matrices and cuBLAS reads column-major ones; a
//! row-major `C = op(A) op(B)` is the column-major `C^T = op(B)^T op(A)^T`, so each call
//! swaps the operands (see [`Cuda::gemm`]). Convolution unfolds the whole batch at once
//! (im2col into `[C*k*k x n*OH*OW]`), one GEMM per pass, and permutes between the NCHW
//! layout and the GEMM's channel-major rows.
//!
//! A failed launch or copy is a device fault, not bad input: it panics naming the kernel
//! and the driver's error, and the run's rank stops with it.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use cudarc::cublas::{sys::cublasOperation_t, CudaBlas, Gemm, GemmConfig};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, CudaViewMut, DevicePtr, DevicePtrMut,
    LaunchConfig, PushKernelArg,
};

use super::kernels;
use crate::compress::MirrorDevice;
use crate::compute::backend::{
    AdamStep, Backend, BatchNormDims, BatchNormMode, Conv2dDims, EmbeddingDims, GemmDims,
    LinearDims, LstmDims, LstmSpan, SgdStep, Span, Window2d, XentStats,
};

/// Threads per block: the block reductions in kernels/common.cuh assume it.
const BLOCK: u32 = 256;
/// Blocks of a grid-stride launch at most: enough to fill any current GPU.
const MAX_BLOCKS: usize = 16_384;

struct Inner {
    stream: Arc<CudaStream>,
    blas: CudaBlas,
    functions: HashMap<&'static str, CudaFunction>,
    description: String,
}

/// One GPU: its stream, cuBLAS handle and the loaded kernels. Cloning shares them.
#[derive(Clone)]
pub struct Cuda {
    inner: Arc<Inner>,
}

/// A grid-stride launch over `n` elements.
fn elements(n: usize) -> LaunchConfig {
    let blocks = n.div_ceil(BLOCK as usize).clamp(1, MAX_BLOCKS) as u32;
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// One block per row (channel, plane) of a reduction.
fn per_row(rows: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (rows.max(1) as u32, 1, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// A single thread (the sequential steps of top-k).
fn single() -> LaunchConfig {
    LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (1, 1, 1),
        shared_mem_bytes: 0,
    }
}

fn check<T, E: std::fmt::Debug>(r: Result<T, E>, what: &str) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("CUDA: {what} failed: {e:?}"),
    }
}

/// Launches kernel `$name` with `$cfg` and the arguments in order. Every scalar argument
/// must be a local that outlives the launch (the driver reads it through a pointer).
macro_rules! launch {
    ($self:expr, $name:expr, $cfg:expr, $($arg:expr),+ $(,)?) => {{
        let function = $self.function($name);
        let mut builder = $self.inner.stream.launch_builder(function);
        $( builder.arg($arg); )+
        // SAFETY: the arguments match the kernel's parameters in kernels/ in number,
        // order and type (device pointers, u64 sizes, f32 and u32 scalars).
        let launched = unsafe { builder.launch($cfg) };
        check(launched, $name);
    }};
}

impl Cuda {
    /// The GPU `ordinal`: its context, the kernels compiled for its architecture (from the
    /// PTX cache when there) and a cuBLAS handle. Fails with the reason, naming what is
    /// missing, where the driver, the GPU or NVRTC is not usable.
    pub fn new(ordinal: usize) -> anyhow::Result<Cuda> {
        if let Some(why) = super::device::unavailable() {
            anyhow::bail!("{why}");
        }
        let ctx = CudaContext::new(ordinal).map_err(|e| {
            anyhow::anyhow!("CUDA device {ordinal}: cannot create a context: {e:?}")
        })?;
        let (major, minor) = ctx
            .compute_capability()
            .map_err(|e| anyhow::anyhow!("CUDA device {ordinal}: {e:?}"))?;
        let arch = kernels::arch_for(major as u32, minor as u32);
        let cache = kernels::default_cache_dir();
        let mut functions = HashMap::new();
        for file in kernels::all() {
            let ptx = kernels::cached_ptx(&cache, file, &arch)?;
            let module = ctx
                .load_module(cudarc::nvrtc::Ptx::from_src(ptx))
                .map_err(|e| {
                    anyhow::anyhow!(
                        "kernels/{}.cu: the driver refused its PTX for {arch}: {e:?}",
                        file.name
                    )
                })?;
            for &entry in file.entries {
                let f = module.load_function(entry).map_err(|e| {
                    anyhow::anyhow!("kernels/{}.cu: no kernel {entry}: {e:?}", file.name)
                })?;
                functions.insert(entry, f);
            }
        }
        let stream = ctx.default_stream();
        let blas = CudaBlas::new(stream.clone())
            .map_err(|e| anyhow::anyhow!("cuBLAS: cannot start on device {ordinal}: {e:?}"))?;
        let name = ctx.name().unwrap_or_else(|_| "GPU".to_string());
        Ok(Cuda {
            inner: Arc::new(Inner {
                stream,
                blas,
                functions,
                description: format!("{name} (device {ordinal}, sm_{major}{minor})"),
            }),
        })
    }

    /// The device's name, ordinal and architecture, for logs.
    pub fn describe(&self) -> &str {
        &self.inner.description
    }

    /// Waits for every queued operation (timing, and before reading results elsewhere).
    pub fn synchronize(&self) {
        check(self.inner.stream.synchronize(), "stream synchronize");
    }

    fn function(&self, name: &'static str) -> &CudaFunction {
        self.inner.functions.get(name).unwrap_or_else(|| {
            panic!("CUDA: kernel {name} is not loaded (kernels::FILES lists it?)")
        })
    }

    fn upload_u32(&self, host: &[u32]) -> CudaSlice<u32> {
        let host: &[u32] = if host.is_empty() { &[0] } else { host };
        check(self.inner.stream.clone_htod(host), "upload of ids")
    }

    fn zeros<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(
        &self,
        len: usize,
    ) -> CudaSlice<T> {
        check(self.inner.stream.alloc_zeros::<T>(len.max(1)), "allocation")
    }

    fn download_vec<T: cudarc::driver::DeviceRepr + Default + Clone>(
        &self,
        src: &CudaSlice<T>,
        len: usize,
    ) -> Vec<T> {
        let mut host = vec![T::default(); len];
        if len > 0 {
            check(
                self.inner
                    .stream
                    .memcpy_dtoh(&src.slice(..len), &mut host[..]),
                "download",
            );
        }
        host
    }

    /// Row-major `c[m x n] = alpha * op(a) op(b) + beta * c` (see the module docs).
    fn gemm<A: DevicePtr<f32>, B: DevicePtr<f32>, C: DevicePtrMut<f32>>(
        &self,
        d: GemmDims,
        alpha: f32,
        a: &A,
        b: &B,
        beta: f32,
        c: &mut C,
    ) {
        if d.m == 0 || d.n == 0 {
            return;
        }
        let op = |t: bool| {
            if t {
                cublasOperation_t::CUBLAS_OP_T
            } else {
                cublasOperation_t::CUBLAS_OP_N
            }
        };
        let cfg = GemmConfig {
            transa: op(d.trans_b),
            transb: op(d.trans_a),
            m: d.n as i32,
            n: d.m as i32,
            k: d.k as i32,
            alpha,
            // cuBLAS wants every leading dimension >= 1, also when k is 0 (an empty batch),
            // where it only scales c by beta.
            lda: (if d.trans_b { d.k } else { d.n }).max(1) as i32,
            ldb: (if d.trans_a { d.m } else { d.k }).max(1) as i32,
            beta,
            ldc: d.n as i32,
        };
        // SAFETY: the layers size every operand for the dimensions they pass.
        check(
            unsafe { self.inner.blas.gemm(cfg, b, a, c) },
            "cuBLAS SGEMM",
        );
    }

    /// Exact top-k by magnitude of `after` (or of `after - before`): the indices in
    /// ascending order and their values, the CPU's result (lowest indices win ties at
    /// the threshold). The selection stays on the device; only the k pairs are copied
    /// back.
    pub fn topk(
        &self,
        after: &CudaSlice<f32>,
        before: Option<&CudaSlice<f32>>,
        n: usize,
        k: usize,
    ) -> (Vec<u32>, Vec<f32>) {
        // The kernels index in u32 (as the CPU's top-k does) and read n values of each input.
        assert!(
            u32::try_from(n).is_ok(),
            "top-k of {n} values: indices are u32"
        );
        assert!(
            n <= after.len() && before.is_none_or(|b| n <= b.len()),
            "top-k of {n} values from a shorter buffer"
        );
        let k = k.min(n);
        if k == 0 {
            return (Vec::new(), Vec::new());
        }
        let mut state = self.zeros::<u32>(3);
        let mut hist = self.zeros::<u32>(256);
        let (n64, k32) = (n as u64, k as u32);
        launch!(self, "topk_init", single(), &mut state, &mut hist, &k32);
        let null = 0u64;
        for shift in [24u32, 16, 8, 0] {
            match before {
                Some(b) => launch!(
                    self,
                    "topk_histogram",
                    elements(n),
                    &mut hist,
                    &state,
                    after,
                    b,
                    &n64,
                    &shift
                ),
                None => launch!(
                    self,
                    "topk_histogram",
                    elements(n),
                    &mut hist,
                    &state,
                    after,
                    &null,
                    &n64,
                    &shift
                ),
            }
            launch!(self, "topk_pick", single(), &mut hist, &mut state, &shift);
        }
        let blocks = n.div_ceil(BLOCK as usize * 64).clamp(1, MAX_BLOCKS);
        let seg = n.div_ceil(blocks) as u64;
        let blocks64 = blocks as u64;
        let mut counts = self.zeros::<u32>(2 * blocks);
        match before {
            Some(b) => launch!(
                self,
                "topk_block_counts",
                per_row(blocks),
                &mut counts,
                &state,
                after,
                b,
                &n64,
                &seg
            ),
            None => launch!(
                self,
                "topk_block_counts",
                per_row(blocks),
                &mut counts,
                &state,
                after,
                &null,
                &n64,
                &seg
            ),
        }
        launch!(self, "topk_scan_blocks", single(), &mut counts, &blocks64);
        let mut index = self.zeros::<u32>(k);
        let mut value = self.zeros::<f32>(k);
        match before {
            Some(b) => launch!(
                self,
                "topk_write",
                per_row(blocks),
                &mut index,
                &mut value,
                &state,
                &counts,
                after,
                b,
                &n64,
                &seg
            ),
            None => launch!(
                self,
                "topk_write",
                per_row(blocks),
                &mut index,
                &mut value,
                &state,
                &counts,
                after,
                &null,
                &n64,
                &seg
            ),
        }
        (self.download_vec(&index, k), self.download_vec(&value, k))
    }

    /// Uploads the (index, value) pairs of a sparse update of a buffer of `bound` values,
    /// checking them first; returns them and their count.
    fn upload_pairs(
        &self,
        what: &str,
        bound: usize,
        index: &[u32],
        values: &[f32],
    ) -> (CudaSlice<u32>, CudaSlice<f32>, u64) {
        assert_eq!(index.len(), values.len(), "{what}: indices and values");
        if let Some(&bad) = index.iter().find(|&&i| i as usize >= bound) {
            panic!("{what}: index {bad} outside a buffer of {bound}");
        }
        let idx = self.upload_u32(index);
        let vals = check(self.inner.stream.clone_htod(values), "upload of values");
        (idx, vals, index.len() as u64)
    }

    /// `dense[index[j]] = values[j]` (distinct indices): entries copied to the device.
    pub fn scatter_set(&self, dense: &mut CudaSlice<f32>, index: &[u32], values: &[f32]) {
        if index.is_empty() {
            return;
        }
        let (idx, vals, k) = self.upload_pairs("scatter_set", dense.len(), index, values);
        launch!(
            self,
            "scatter_set",
            elements(index.len()),
            dense,
            &idx,
            &vals,
            &k
        );
    }

    /// `dense[index[j]] += factor * values[j]`: a sparse update applied on the device.
    pub fn scatter_add(
        &self,
        dense: &mut CudaSlice<f32>,
        index: &[u32],
        values: &[f32],
        factor: f32,
    ) {
        if index.is_empty() {
            return;
        }
        let (idx, vals, k) = self.upload_pairs("scatter_add", dense.len(), index, values);
        launch!(
            self,
            "scatter_add",
            elements(index.len()),
            dense,
            &idx,
            &vals,
            &factor,
            &k
        );
    }
}

/// A group server's peer view mirrored on the GPU ([`MirrorDevice`]): the view, and room
/// for the weights uploaded per exchange, both sized by the first `load`. Selection is
/// [`Cuda::topk`] of `weights - view`; only the k pairs come back, and changed entries go
/// up as (index, value) pairs.
pub struct CudaMirror {
    cuda: Cuda,
    weights: CudaSlice<f32>,
    view: CudaSlice<f32>,
    n: usize,
}

impl CudaMirror {
    pub fn new(cuda: Cuda) -> CudaMirror {
        let (weights, view) = (cuda.zeros(0), cuda.zeros(0));
        CudaMirror {
            cuda,
            weights,
            view,
            n: 0,
        }
    }
}

impl MirrorDevice for CudaMirror {
    fn load(&mut self, view: &[f32]) {
        if view.len() != self.n {
            self.n = view.len();
            self.weights = self.cuda.zeros(self.n);
            self.view = self.cuda.zeros(self.n);
        }
        self.cuda.upload(&mut self.view, view);
    }

    fn set(&mut self, index: &[u32], values: &[f32]) {
        self.cuda.scatter_set(&mut self.view, index, values);
    }

    fn select(&mut self, weights: &[f32], k: usize, idx: &mut Vec<u32>, vals: &mut Vec<f32>) {
        assert_eq!(
            weights.len(),
            self.n,
            "CudaMirror: weights and the loaded view"
        );
        self.cuda.upload(&mut self.weights, weights);
        (*idx, *vals) = self.cuda.topk(&self.weights, Some(&self.view), self.n, k);
    }
}

/// The view of `buf` from a span's weight on, and the offset of its bias in that view:
/// kernels that update both (batch norm's running mean and variance, its gradients)
/// take one pointer and the offset, as two mutable views of one buffer cannot coexist.
fn from_weight<'a>(buf: &'a mut CudaSlice<f32>, at: &Span) -> (CudaViewMut<'a, f32>, u64) {
    let bias = at.bias.clone().expect("the layer has a bias");
    assert!(bias.start >= at.weight.end, "a bias follows its weight");
    let offset = (bias.start - at.weight.start) as u64;
    (buf.slice_mut(at.weight.start..bias.end), offset)
}

impl Backend for Cuda {
    type Buf = CudaSlice<f32>;

    fn alloc(&self, len: usize) -> CudaSlice<f32> {
        self.zeros(len)
    }
    fn upload(&self, dst: &mut CudaSlice<f32>, src: &[f32]) {
        if !src.is_empty() {
            let mut d = dst.slice_mut(..src.len());
            check(self.inner.stream.memcpy_htod(src, &mut d), "upload");
        }
    }
    fn download(&self, dst: &mut [f32], src: &CudaSlice<f32>) {
        if !dst.is_empty() {
            let s = src.slice(..dst.len());
            check(self.inner.stream.memcpy_dtoh(&s, dst), "download");
        }
    }
    fn fill(&self, buf: &mut CudaSlice<f32>, range: Range<usize>, value: f32) {
        let n = range.len() as u64;
        if n == 0 {
            return;
        }
        let mut v = buf.slice_mut(range);
        launch!(self, "fill_f32", elements(n as usize), &mut v, &value, &n);
    }
    fn copy(&self, dst: &mut CudaSlice<f32>, src: &CudaSlice<f32>, len: usize) {
        if len > 0 {
            let s = src.slice(..len);
            let mut d = dst.slice_mut(..len);
            check(self.inner.stream.memcpy_dtod(&s, &mut d), "device copy");
        }
    }
    fn add(&self, out: &mut CudaSlice<f32>, a: &CudaSlice<f32>, b: &CudaSlice<f32>, len: usize) {
        let n = len as u64;
        launch!(self, "add_f32", elements(len), out, a, b, &n);
    }
    fn sum_squares(&self, buf: &CudaSlice<f32>, len: usize) -> f64 {
        let mut total = self.zeros::<f64>(1);
        let n = len as u64;
        if len > 0 {
            launch!(self, "sum_squares", elements(len), &mut total, buf, &n);
        }
        self.download_vec(&total, 1)[0]
    }
    fn scale(&self, buf: &mut CudaSlice<f32>, len: usize, factor: f32) {
        let n = len as u64;
        launch!(self, "scale_f32", elements(len), buf, &factor, &n);
    }

    fn embedding_forward(
        &self,
        out: &mut CudaSlice<f32>,
        ids: &[u32],
        first_row: usize,
        params: &CudaSlice<f32>,
        at: &Span,
        dims: &EmbeddingDims,
    ) {
        if let Some(&bad) = ids.iter().find(|&&i| i as usize >= dims.vocab) {
            panic!("token id {bad} outside a vocabulary of {}", dims.vocab);
        }
        let dev_ids = self.upload_u32(ids);
        let table = params.slice(at.weight.clone());
        let (first, count, dim) = (first_row as u64, ids.len() as u64, dims.dim as u64);
        launch!(
            self,
            "embedding_forward",
            elements(ids.len() * dims.dim),
            out,
            &dev_ids,
            &first,
            &count,
            &table,
            &dim
        );
    }
    fn embedding_backward(
        &self,
        grads: &mut CudaSlice<f32>,
        dout: &CudaSlice<f32>,
        ids: &[u32],
        at: &Span,
        dims: &EmbeddingDims,
    ) {
        if let Some(&bad) = ids.iter().find(|&&i| i as usize >= dims.vocab) {
            panic!("token id {bad} outside a vocabulary of {}", dims.vocab);
        }
        let dev_ids = self.upload_u32(ids);
        let mut table = grads.slice_mut(at.weight.clone());
        let (count, dim) = (ids.len() as u64, dims.dim as u64);
        launch!(
            self,
            "embedding_backward",
            elements(ids.len() * dims.dim),
            &mut table,
            dout,
            &dev_ids,
            &count,
            &dim
        );
    }

    fn lstm_forward(
        &self,
        out: &mut CudaSlice<f32>,
        cells: &mut CudaSlice<f32>,
        gates: &mut CudaSlice<f32>,
        final_state: (&mut CudaSlice<f32>, &mut CudaSlice<f32>),
        inp: &CudaSlice<f32>,
        init: (&CudaSlice<f32>, &CudaSlice<f32>),
        params: &CudaSlice<f32>,
        at: &LstmSpan,
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
        let (rows64, g4_64, b64, h64) = (rows as u64, g4 as u64, b as u64, h as u64);
        let zero = 0.0f32;
        let gx_len = (rows * g4) as u64;
        {
            let mut gx = gates.slice_mut(steps.start * b * g4..steps.end * b * g4);
            launch!(
                self,
                "fill_f32",
                elements(rows * g4),
                &mut gx,
                &zero,
                &gx_len
            );
            let b_ih = params.slice(at.bias_ih.clone());
            let b_hh = params.slice(at.bias_hh.clone());
            launch!(
                self,
                "bias_add_rows",
                elements(rows * g4),
                &mut gx,
                &b_ih,
                &rows64,
                &g4_64
            );
            launch!(
                self,
                "bias_add_rows",
                elements(rows * g4),
                &mut gx,
                &b_hh,
                &rows64,
                &g4_64
            );
            let x = inp.slice(steps.start * b * i_len..steps.end * b * i_len);
            let w_ih = params.slice(at.weight_ih.clone());
            self.gemm(
                GemmDims::new(rows, g4, i_len).b_transposed(),
                1.0,
                &x,
                &w_ih,
                1.0,
                &mut gx,
            );
        }
        let w_hh = params.slice(at.weight_hh.clone());
        for t in steps.clone() {
            let (out_prev, mut out_rest) = out.split_at_mut(t * bh);
            let (cells_prev, mut cells_rest) = cells.split_at_mut(t * bh);
            let mut g = gates.slice_mut(t * b * g4..(t + 1) * b * g4);
            let mut h_t = out_rest.slice_mut(..bh);
            let mut c_t = cells_rest.slice_mut(..bh);
            if t == 0 {
                let (h0, c0) = (init.0.slice(..bh), init.1.slice(..bh));
                self.gemm(
                    GemmDims::new(b, g4, h).b_transposed(),
                    1.0,
                    &h0,
                    &w_hh,
                    1.0,
                    &mut g,
                );
                launch!(
                    self,
                    "lstm_cell_forward",
                    elements(bh),
                    &mut g,
                    &mut h_t,
                    &mut c_t,
                    &c0,
                    &b64,
                    &h64
                );
            } else {
                let h_prev = out_prev.slice((t - 1) * bh..);
                let c_prev = cells_prev.slice((t - 1) * bh..);
                self.gemm(
                    GemmDims::new(b, g4, h).b_transposed(),
                    1.0,
                    &h_prev,
                    &w_hh,
                    1.0,
                    &mut g,
                );
                launch!(
                    self,
                    "lstm_cell_forward",
                    elements(bh),
                    &mut g,
                    &mut h_t,
                    &mut c_t,
                    &c_prev,
                    &b64,
                    &h64
                );
            }
        }
        let last = (steps.end - 1) * bh;
        let (h_n, c_n) = final_state;
        self.copy_range(h_n, out, last, bh);
        self.copy_range(c_n, cells, last, bh);
    }

    fn lstm_backward(
        &self,
        dinp: Option<&mut CudaSlice<f32>>,
        dinit: (&mut CudaSlice<f32>, &mut CudaSlice<f32>),
        grads: &mut CudaSlice<f32>,
        dgates: &mut CudaSlice<f32>,
        dout: &CudaSlice<f32>,
        dfinal: Option<(&CudaSlice<f32>, &CudaSlice<f32>)>,
        inp: &CudaSlice<f32>,
        init: (&CudaSlice<f32>, &CudaSlice<f32>),
        saved: (&CudaSlice<f32>, &CudaSlice<f32>, &CudaSlice<f32>),
        params: &CudaSlice<f32>,
        at: &LstmSpan,
        dims: &LstmDims,
    ) {
        let LstmDims {
            steps: t_len,
            batch: b,
            input: i_len,
            hidden: h,
        } = *dims;
        let (g4, bh) = (4 * h, b * h);
        let (b64, h64) = (b as u64, h as u64);
        let (saved_out, saved_cells, saved_gates) = saved;
        let (dh, dc) = dinit;
        match dfinal {
            Some((dh_n, dc_n)) => {
                self.copy(dh, dh_n, bh);
                self.copy(dc, dc_n, bh);
            }
            None => {
                self.fill(dh, 0..bh, 0.0);
                self.fill(dc, 0..bh, 0.0);
            }
        }
        let w_hh = params.slice(at.weight_hh.clone());
        for t in (0..t_len).rev() {
            let c_prev = if t == 0 {
                init.1.slice(..bh)
            } else {
                saved_cells.slice((t - 1) * bh..t * bh)
            };
            let c_t = saved_cells.slice(t * bh..(t + 1) * bh);
            let gates_t = saved_gates.slice(t * b * g4..(t + 1) * b * g4);
            let dout_t = dout.slice(t * bh..(t + 1) * bh);
            let mut dg = dgates.slice_mut(t * b * g4..(t + 1) * b * g4);
            {
                let dh_next = dh.slice(..bh);
                let mut dc_v = dc.slice_mut(..bh);
                launch!(
                    self,
                    "lstm_cell_backward",
                    elements(bh),
                    &mut dg,
                    &mut dc_v,
                    &dout_t,
                    &dh_next,
                    &gates_t,
                    &c_t,
                    &c_prev,
                    &b64,
                    &h64
                );
            }
            // dh_{t-1} = dgates_t W_hh.
            let mut dh_v = dh.slice_mut(..bh);
            self.gemm(GemmDims::new(b, h, g4), 1.0, &dg, &w_hh, 0.0, &mut dh_v);
        }
        let rows = t_len * b;
        let dg_all = dgates.slice(..rows * g4);
        {
            let mut dw_hh = grads.slice_mut(at.weight_hh.clone());
            if t_len > 1 {
                let later = (t_len - 1) * b;
                let dg_later = dgates.slice(b * g4..rows * g4);
                let outs = saved_out.slice(..later * h);
                self.gemm(
                    GemmDims::new(g4, h, later).a_transposed(),
                    1.0,
                    &dg_later,
                    &outs,
                    1.0,
                    &mut dw_hh,
                );
            }
            let dg_first = dgates.slice(..b * g4);
            let h0 = init.0.slice(..bh);
            self.gemm(
                GemmDims::new(g4, h, b).a_transposed(),
                1.0,
                &dg_first,
                &h0,
                1.0,
                &mut dw_hh,
            );
        }
        {
            let mut dw_ih = grads.slice_mut(at.weight_ih.clone());
            let x = inp.slice(..rows * i_len);
            self.gemm(
                GemmDims::new(g4, i_len, rows).a_transposed(),
                1.0,
                &dg_all,
                &x,
                1.0,
                &mut dw_ih,
            );
        }
        let (rows64, g4_64) = (rows as u64, g4 as u64);
        for bias in [&at.bias_ih, &at.bias_hh] {
            let mut db = grads.slice_mut(bias.clone());
            launch!(
                self,
                "bias_grad_rows",
                per_row(g4),
                &mut db,
                &dg_all,
                &rows64,
                &g4_64
            );
        }
        if let Some(dinp) = dinp {
            let w_ih = params.slice(at.weight_ih.clone());
            let mut d = dinp.slice_mut(..rows * i_len);
            self.gemm(
                GemmDims::new(rows, i_len, g4),
                1.0,
                &dg_all,
                &w_ih,
                0.0,
                &mut d,
            );
        }
    }

    fn linear_forward(
        &self,
        out: &mut CudaSlice<f32>,
        inp: &CudaSlice<f32>,
        params: &CudaSlice<f32>,
        at: &Span,
        dims: &LinearDims,
    ) {
        let LinearDims {
            batch: n,
            in_f,
            out_f,
        } = *dims;
        let w = params.slice(at.weight.clone());
        self.gemm(
            GemmDims::new(n, out_f, in_f).b_transposed(),
            1.0,
            inp,
            &w,
            0.0,
            out,
        );
        if let Some(bias) = &at.bias {
            let b = params.slice(bias.clone());
            let (rows, cols) = (n as u64, out_f as u64);
            launch!(
                self,
                "bias_add_rows",
                elements(n * out_f),
                out,
                &b,
                &rows,
                &cols
            );
        }
    }
    fn linear_backward(
        &self,
        dinp: Option<&mut CudaSlice<f32>>,
        grads: &mut CudaSlice<f32>,
        dout: &CudaSlice<f32>,
        inp: &CudaSlice<f32>,
        params: &CudaSlice<f32>,
        at: &Span,
        dims: &LinearDims,
    ) {
        let LinearDims {
            batch: n,
            in_f,
            out_f,
        } = *dims;
        {
            let mut dw = grads.slice_mut(at.weight.clone());
            self.gemm(
                GemmDims::new(out_f, in_f, n).a_transposed(),
                1.0,
                dout,
                inp,
                1.0,
                &mut dw,
            );
        }
        if let Some(bias) = &at.bias {
            let mut db = grads.slice_mut(bias.clone());
            let (rows, cols) = (n as u64, out_f as u64);
            launch!(
                self,
                "bias_grad_rows",
                per_row(out_f),
                &mut db,
                dout,
                &rows,
                &cols
            );
        }
        if let Some(dinp) = dinp {
            let w = params.slice(at.weight.clone());
            self.gemm(GemmDims::new(n, in_f, out_f), 1.0, dout, &w, 0.0, dinp);
        }
    }

    /// The unfolded batch `[C*k*k x n*OH*OW]`, then the GEMM's output (forward) or the
    /// output gradient (backward) as `[out_c x n*OH*OW]`.
    fn conv2d_scratch_len(&self, dims: &Conv2dDims) -> usize {
        let g = &dims.window;
        let cols = dims.batch * g.col_cols();
        g.col_rows() * cols + dims.out_c * cols
    }
    fn conv2d_forward(
        &self,
        out: &mut CudaSlice<f32>,
        scratch: &mut CudaSlice<f32>,
        inp: &CudaSlice<f32>,
        params: &CudaSlice<f32>,
        at: &Span,
        dims: &Conv2dDims,
    ) {
        let (n, out_c, g) = (dims.batch, dims.out_c, &dims.window);
        let (rows, pix) = (g.col_rows(), g.col_cols());
        let cols = n * pix;
        let (mut col, mut tmp) = scratch.split_at_mut(rows * cols);
        self.im2col(&mut col, inp, n, g);
        let w = params.slice(at.weight.clone());
        self.gemm(
            GemmDims::new(out_c, cols, rows),
            1.0,
            &w,
            &col,
            0.0,
            &mut tmp,
        );
        let (n64, c64, p64) = (n as u64, out_c as u64, pix as u64);
        launch!(
            self,
            "rows_to_planes",
            elements(n * out_c * pix),
            &mut *out,
            &mut tmp,
            &n64,
            &c64,
            &p64
        );
        if let Some(bias) = &at.bias {
            let b = params.slice(bias.clone());
            launch!(
                self,
                "bias_add_planes",
                elements(n * out_c * pix),
                out,
                &b,
                &n64,
                &c64,
                &p64
            );
        }
    }
    fn conv2d_backward(
        &self,
        dinp: Option<&mut CudaSlice<f32>>,
        grads: &mut CudaSlice<f32>,
        scratch: &mut CudaSlice<f32>,
        dout: &CudaSlice<f32>,
        inp: &CudaSlice<f32>,
        params: &CudaSlice<f32>,
        at: &Span,
        dims: &Conv2dDims,
    ) {
        let (n, out_c, g) = (dims.batch, dims.out_c, &dims.window);
        let (rows, pix) = (g.col_rows(), g.col_cols());
        let cols = n * pix;
        let (n64, c64, p64) = (n as u64, out_c as u64, pix as u64);
        if let Some(bias) = &at.bias {
            let mut db = grads.slice_mut(bias.clone());
            launch!(
                self,
                "bias_grad_planes",
                per_row(out_c),
                &mut db,
                dout,
                &n64,
                &c64,
                &p64
            );
        }
        let (mut col, mut gathered) = scratch.split_at_mut(rows * cols);
        launch!(
            self,
            "planes_to_rows",
            elements(n * out_c * pix),
            &mut gathered,
            dout,
            &n64,
            &c64,
            &p64
        );
        self.im2col(&mut col, inp, n, g);
        {
            let mut dw = grads.slice_mut(at.weight.clone());
            self.gemm(
                GemmDims::new(out_c, rows, cols).b_transposed(),
                1.0,
                &gathered,
                &col,
                1.0,
                &mut dw,
            );
        }
        if let Some(dinp) = dinp {
            let w = params.slice(at.weight.clone());
            self.gemm(
                GemmDims::new(rows, cols, out_c).a_transposed(),
                1.0,
                &w,
                &gathered,
                0.0,
                &mut col,
            );
            self.fill(dinp, 0..n * g.in_len(), 0.0);
            let (ld, m) = (cols as u64, n as u64);
            let (c, h, wd, k, s, p) = window_args(g);
            launch!(
                self,
                "col2im",
                elements(n * g.in_len()),
                dinp,
                &mut col,
                &ld,
                &m,
                &c,
                &h,
                &wd,
                &k,
                &s,
                &p
            );
        }
    }

    fn batchnorm_forward(
        &self,
        out: &mut CudaSlice<f32>,
        saved: &mut CudaSlice<f32>,
        state: &mut CudaSlice<f32>,
        inp: &CudaSlice<f32>,
        params: &CudaSlice<f32>,
        at: &Span,
        stats: &Span,
        dims: &BatchNormDims,
        mode: BatchNormMode,
    ) {
        let BatchNormDims {
            batch: n,
            channels: ch,
            plane,
            eps,
        } = *dims;
        let (n64, c64, p64) = (n as u64, ch as u64, plane as u64);
        let gamma = params.slice(at.weight.clone());
        let beta = params.slice(at.bias.clone().expect("batch norm has a shift"));
        match mode {
            BatchNormMode::Train { momentum } => {
                let (mut running, var_at) = from_weight(state, stats);
                launch!(
                    self,
                    "batchnorm_stats",
                    per_row(ch),
                    &mut *saved,
                    &mut running,
                    &var_at,
                    inp,
                    &n64,
                    &c64,
                    &p64,
                    &eps,
                    &momentum
                );
                launch!(
                    self,
                    "batchnorm_apply",
                    elements(n * ch * plane),
                    out,
                    inp,
                    &*saved,
                    &gamma,
                    &beta,
                    &n64,
                    &c64,
                    &p64
                );
            }
            BatchNormMode::Eval => {
                let mean = state.slice(stats.weight.clone());
                let var = state.slice(
                    stats
                        .bias
                        .clone()
                        .expect("batch norm keeps a running variance"),
                );
                launch!(
                    self,
                    "batchnorm_apply_eval",
                    elements(n * ch * plane),
                    out,
                    inp,
                    &mean,
                    &var,
                    &gamma,
                    &beta,
                    &n64,
                    &c64,
                    &p64,
                    &eps
                );
            }
        }
    }
    fn batchnorm_backward(
        &self,
        dinp: &mut CudaSlice<f32>,
        grads: &mut CudaSlice<f32>,
        dout: &CudaSlice<f32>,
        inp: &CudaSlice<f32>,
        saved: &CudaSlice<f32>,
        params: &CudaSlice<f32>,
        at: &Span,
        dims: &BatchNormDims,
    ) {
        let BatchNormDims {
            batch: n,
            channels: ch,
            plane,
            ..
        } = *dims;
        let (n64, c64, p64) = (n as u64, ch as u64, plane as u64);
        let mut sums = self.zeros::<f32>(2 * ch);
        {
            let (mut dparams, beta_at) = from_weight(grads, at);
            launch!(
                self,
                "batchnorm_backward_sums",
                per_row(ch),
                &mut sums,
                &mut dparams,
                &beta_at,
                dout,
                inp,
                saved,
                &n64,
                &c64,
                &p64
            );
        }
        let gamma = params.slice(at.weight.clone());
        launch!(
            self,
            "batchnorm_backward_input",
            elements(n * ch * plane),
            dinp,
            dout,
            inp,
            saved,
            &sums,
            &gamma,
            &n64,
            &c64,
            &p64
        );
    }

    fn relu_forward(&self, out: &mut CudaSlice<f32>, inp: &CudaSlice<f32>, len: usize) {
        let n = len as u64;
        launch!(self, "relu_forward", elements(len), out, inp, &n);
    }
    fn relu_backward(
        &self,
        dinp: &mut CudaSlice<f32>,
        dout: &CudaSlice<f32>,
        out: &CudaSlice<f32>,
        len: usize,
    ) {
        let n = len as u64;
        launch!(self, "relu_backward", elements(len), dinp, dout, out, &n);
    }

    fn maxpool_forward(
        &self,
        out: &mut CudaSlice<f32>,
        argmax: &mut CudaSlice<f32>,
        inp: &CudaSlice<f32>,
        planes: usize,
        g: &Window2d,
    ) {
        let (p, h, w, k, s) = pool_args(planes, g);
        let n = planes * g.out_height() * g.out_width();
        launch!(
            self,
            "maxpool_forward",
            elements(n),
            out,
            argmax,
            inp,
            &p,
            &h,
            &w,
            &k,
            &s
        );
    }
    fn maxpool_backward(
        &self,
        dinp: &mut CudaSlice<f32>,
        dout: &CudaSlice<f32>,
        argmax: &CudaSlice<f32>,
        planes: usize,
        g: &Window2d,
    ) {
        let (p, h, w, k, s) = pool_args(planes, g);
        launch!(
            self,
            "maxpool_backward",
            elements(planes * g.height * g.width),
            dinp,
            dout,
            argmax,
            &p,
            &h,
            &w,
            &k,
            &s
        );
    }
    fn avgpool_forward(
        &self,
        out: &mut CudaSlice<f32>,
        inp: &CudaSlice<f32>,
        planes: usize,
        g: &Window2d,
    ) {
        let (p, h, w, k, s) = pool_args(planes, g);
        let n = planes * g.out_height() * g.out_width();
        launch!(
            self,
            "avgpool_forward",
            elements(n),
            out,
            inp,
            &p,
            &h,
            &w,
            &k,
            &s
        );
    }
    fn avgpool_backward(
        &self,
        dinp: &mut CudaSlice<f32>,
        dout: &CudaSlice<f32>,
        planes: usize,
        g: &Window2d,
    ) {
        let (p, h, w, k, s) = pool_args(planes, g);
        launch!(
            self,
            "avgpool_backward",
            elements(planes * g.height * g.width),
            dinp,
            dout,
            &p,
            &h,
            &w,
            &k,
            &s
        );
    }
    fn global_avgpool_forward(
        &self,
        out: &mut CudaSlice<f32>,
        inp: &CudaSlice<f32>,
        planes: usize,
        plane: usize,
    ) {
        let (p, l) = (planes as u64, plane as u64);
        launch!(
            self,
            "global_avgpool_forward",
            per_row(planes),
            out,
            inp,
            &p,
            &l
        );
    }
    fn global_avgpool_backward(
        &self,
        dinp: &mut CudaSlice<f32>,
        dout: &CudaSlice<f32>,
        planes: usize,
        plane: usize,
    ) {
        let (p, l) = (planes as u64, plane as u64);
        launch!(
            self,
            "global_avgpool_backward",
            elements(planes * plane),
            dinp,
            dout,
            &p,
            &l
        );
    }

    fn dropout_forward(
        &self,
        out: &mut CudaSlice<f32>,
        mask: &mut CudaSlice<f32>,
        inp: &CudaSlice<f32>,
        len: usize,
        p: f32,
        seed: u64,
    ) {
        self.dropout_forward_range(out, mask, inp, 0..len, p, seed);
    }
    fn dropout_forward_range(
        &self,
        out: &mut CudaSlice<f32>,
        mask: &mut CudaSlice<f32>,
        inp: &CudaSlice<f32>,
        range: Range<usize>,
        p: f32,
        seed: u64,
    ) {
        let (first, n) = (range.start as u64, range.len() as u64);
        if n == 0 {
            return;
        }
        launch!(
            self,
            "dropout_forward",
            elements(range.len()),
            out,
            mask,
            inp,
            &p,
            &seed,
            &first,
            &n
        );
    }
    fn dropout_backward(
        &self,
        dinp: &mut CudaSlice<f32>,
        dout: &CudaSlice<f32>,
        mask: &CudaSlice<f32>,
        len: usize,
    ) {
        let n = len as u64;
        launch!(
            self,
            "dropout_backward",
            elements(len),
            dinp,
            dout,
            mask,
            &n
        );
    }

    fn softmax_xent(
        &self,
        dlogits: &mut CudaSlice<f32>,
        logits: &CudaSlice<f32>,
        labels: &[u8],
        n: usize,
        classes: usize,
    ) -> (f32, usize) {
        let labels32: Vec<u32> = labels[..n].iter().map(|&l| l as u32).collect();
        if let Some(&bad) = labels32.iter().find(|&&l| l as usize >= classes) {
            panic!("label {bad} outside {classes} classes");
        }
        let dev = self.upload_u32(&labels32);
        let mut loss = self.zeros::<f32>(n);
        let mut hit = self.zeros::<f32>(n);
        let (rows, cls, weight) = (n as u64, classes as u64, 1.0 / n as f32);
        launch!(
            self,
            "softmax_xent",
            per_row(n),
            dlogits,
            &mut loss,
            &mut hit,
            logits,
            &dev,
            &rows,
            &cls,
            &weight
        );
        let loss = self.download_vec(&loss, n);
        let hit = self.download_vec(&hit, n);
        let total: f64 = loss.iter().map(|&l| l as f64).sum();
        (
            (total / n as f64) as f32,
            hit.iter().filter(|&&h| h > 0.5).count(),
        )
    }
    fn softmax_xent_masked(
        &self,
        dlogits: &mut CudaSlice<f32>,
        logits: &CudaSlice<f32>,
        labels: &[u32],
        pad: u32,
        classes: usize,
    ) -> XentStats {
        let n = labels.len();
        if let Some(&bad) = labels.iter().find(|&&l| l != pad && l as usize >= classes) {
            panic!("label {bad} outside {classes} classes");
        }
        let tokens = labels.iter().filter(|&&l| l != pad).count();
        let inv = if tokens == 0 {
            0.0
        } else {
            1.0 / tokens as f32
        };
        let dev = self.upload_u32(labels);
        let mut loss = self.zeros::<f32>(n);
        let mut hit = self.zeros::<f32>(n);
        let (rows, cls) = (n as u64, classes as u64);
        launch!(
            self,
            "softmax_xent_masked",
            per_row(n),
            dlogits,
            &mut loss,
            &mut hit,
            logits,
            &dev,
            &pad,
            &rows,
            &cls,
            &inv
        );
        let loss = self.download_vec(&loss, n);
        let hit = self.download_vec(&hit, n);
        let total: f64 = loss.iter().map(|&l| l as f64).sum();
        XentStats {
            loss: (total * inv as f64) as f32,
            correct: hit.iter().filter(|&&h| h > 0.5).count(),
            tokens,
        }
    }

    fn sgd_step(
        &self,
        params: &mut CudaSlice<f32>,
        velocity: &mut CudaSlice<f32>,
        grads: &CudaSlice<f32>,
        h: &SgdStep,
    ) {
        let n = params.len() as u64;
        let SgdStep {
            lr,
            momentum,
            weight_decay,
            scale,
        } = *h;
        launch!(
            self,
            "sgd_step",
            elements(n as usize),
            params,
            velocity,
            grads,
            &lr,
            &momentum,
            &weight_decay,
            &scale,
            &n
        );
    }
    fn adam_step(
        &self,
        params: &mut CudaSlice<f32>,
        m: &mut CudaSlice<f32>,
        v: &mut CudaSlice<f32>,
        grads: &CudaSlice<f32>,
        h: &AdamStep,
    ) {
        let n = params.len() as u64;
        let AdamStep {
            lr,
            one_minus_beta1,
            one_minus_beta2,
            eps,
            weight_decay,
            scale,
            bias_correction1,
            bias_correction2,
        } = *h;
        launch!(
            self,
            "adam_step",
            elements(n as usize),
            params,
            m,
            v,
            grads,
            &lr,
            &one_minus_beta1,
            &one_minus_beta2,
            &eps,
            &weight_decay,
            &scale,
            &bias_correction1,
            &bias_correction2,
            &n
        );
    }
}

/// The geometry arguments of conv.cu's kernels: channels, height, width, kernel, stride,
/// padding.
fn window_args(g: &Window2d) -> (u64, u64, u64, u64, u64, u64) {
    (
        g.channels as u64,
        g.height as u64,
        g.width as u64,
        g.kernel as u64,
        g.stride as u64,
        g.pad as u64,
    )
}

/// The arguments of pool.cu's kernels: planes, height, width, kernel, stride.
fn pool_args(planes: usize, g: &Window2d) -> (u64, u64, u64, u64, u64) {
    assert_eq!(g.pad, 0, "pooling has no padding");
    (
        planes as u64,
        g.height as u64,
        g.width as u64,
        g.kernel as u64,
        g.stride as u64,
    )
}

impl Cuda {
    /// Unfolds the `n` images of `inp` side by side into `col`.
    fn im2col(&self, col: &mut CudaViewMut<'_, f32>, inp: &CudaSlice<f32>, n: usize, g: &Window2d) {
        let ld = (n * g.col_cols()) as u64;
        let m = n as u64;
        let (c, h, w, k, s, p) = window_args(g);
        launch!(
            self,
            "im2col",
            elements(g.col_rows() * n * g.col_cols()),
            col,
            &ld,
            inp,
            &m,
            &c,
            &h,
            &w,
            &k,
            &s,
            &p
        );
    }

    /// `dst[..len] = src[offset..offset + len]`.
    fn copy_range(
        &self,
        dst: &mut CudaSlice<f32>,
        src: &CudaSlice<f32>,
        offset: usize,
        len: usize,
    ) {
        let s = src.slice(offset..offset + len);
        let mut d = dst.slice_mut(..len);
        check(self.inner.stream.memcpy_dtod(&s, &mut d), "device copy");
    }
}
