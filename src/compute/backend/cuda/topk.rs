//! Exact top-k by magnitude on the device (kernels/topk.cu), the CPU's result: a radix
//! select of the k-th magnitude over four 8-bit digits, then per-block counts, their scan,
//! and an ordered write, so the indices come out ascending and the lowest indices win
//! ties at the threshold. The selection stays on the device; only the k pairs are copied
//! back.

use cudarc::driver::{CudaSlice, DevicePtr};

use super::kernels::entry;
use super::launch::{elements, launch, per_row, single, BLOCK, MAX_BLOCKS};
use super::{Cuda, CudaError};

type Buf = CudaSlice<f32>;

impl Cuda {
    /// The top-k by magnitude of the first `n` values of `after` (or of `after - before`):
    /// their indices in ascending order and their values.
    pub fn topk(
        &self,
        after: &Buf,
        before: Option<&Buf>,
        n: usize,
        k: usize,
    ) -> Result<(Vec<u32>, Vec<f32>), CudaError> {
        check_input(after, before, n)?;
        let k = k.min(n);
        if k == 0 {
            return Ok((Vec::new(), Vec::new()));
        }
        // The kernels take `before` as a pointer, null without one; `_read` keeps cudarc's
        // record of the read until the launches are queued.
        let (before, _read) = match before {
            Some(b) => {
                let (ptr, read) = b.device_ptr(self.stream());
                (ptr, Some(read))
            }
            None => (0, None),
        };
        let state = self.topk_threshold(after, before, n, k)?;
        let (index, value) = self.topk_write(&state, after, before, n, k)?;
        Ok((self.download_vec(&index, k)?, self.download_vec(&value, k)?))
    }

    /// The selection state after the radix select: the k-th magnitude's bits and how many
    /// values tie with it are taken.
    fn topk_threshold(
        &self,
        after: &Buf,
        before: u64,
        n: usize,
        k: usize,
    ) -> Result<CudaSlice<u32>, CudaError> {
        let mut state = self.zeros::<u32>(3)?;
        let mut hist = self.zeros::<u32>(256)?;
        let (n64, k32) = (n as u64, k as u32);
        launch!(
            self,
            entry::TOPK_INIT,
            single(),
            &mut state,
            &mut hist,
            &k32
        )?;
        for shift in [24u32, 16, 8, 0] {
            launch!(
                self,
                entry::TOPK_HISTOGRAM,
                elements(n),
                &mut hist,
                &state,
                after,
                &before,
                &n64,
                &shift
            )?;
            launch!(
                self,
                entry::TOPK_PICK,
                single(),
                &mut hist,
                &mut state,
                &shift
            )?;
        }
        Ok(state)
    }

    /// The k selected (index, value) pairs on the device, in index order: each block counts
    /// its selected values, a scan gives each block its first output slot, and each block
    /// writes its own in order.
    fn topk_write(
        &self,
        state: &CudaSlice<u32>,
        after: &Buf,
        before: u64,
        n: usize,
        k: usize,
    ) -> Result<(CudaSlice<u32>, Buf), CudaError> {
        let blocks = n.div_ceil(BLOCK as usize * 64).clamp(1, MAX_BLOCKS);
        let (n64, seg, blocks64) = (n as u64, n.div_ceil(blocks) as u64, blocks as u64);
        let mut counts = self.zeros::<u32>(2 * blocks)?;
        launch!(
            self,
            entry::TOPK_BLOCK_COUNTS,
            per_row(blocks),
            &mut counts,
            state,
            after,
            &before,
            &n64,
            &seg
        )?;
        launch!(
            self,
            entry::TOPK_SCAN_BLOCKS,
            single(),
            &mut counts,
            &blocks64
        )?;
        let mut index = self.zeros::<u32>(k)?;
        let mut value = self.zeros::<f32>(k)?;
        launch!(
            self,
            entry::TOPK_WRITE,
            per_row(blocks),
            &mut index,
            &mut value,
            state,
            &counts,
            after,
            &before,
            &n64,
            &seg
        )?;
        Ok((index, value))
    }
}

/// The kernels index in u32 (as the CPU's top-k does) and read `n` values of each input.
fn check_input(after: &Buf, before: Option<&Buf>, n: usize) -> Result<(), CudaError> {
    if u32::try_from(n).is_err() {
        return Err(CudaError::OutOfRange {
            what: "top-k length (indices are u32)",
            value: n as u64,
            bound: 1 << 32,
        });
    }
    let len = before.map_or(after.len(), |b| b.len().min(after.len()));
    if n > len {
        return Err(CudaError::Length {
            what: "top-k",
            wanted: n,
            len,
        });
    }
    Ok(())
}
