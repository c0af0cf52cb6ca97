//! Device memory of [`Cuda`]: allocation, copies between host and device and within the
//! device, each failure a [`CudaError`] naming the transfer.

use cudarc::driver::{CudaSlice, DeviceRepr, ValidAsZeroBits};

use super::{Cuda, CudaError};

impl Cuda {
    /// `len` zeroed values on the device; one at least, since the driver allocates no
    /// empty buffer.
    pub(super) fn zeros<T: DeviceRepr + ValidAsZeroBits>(
        &self,
        len: usize,
    ) -> Result<CudaSlice<T>, CudaError> {
        let len = len.max(1);
        self.stream()
            .alloc_zeros::<T>(len)
            .map_err(|source| CudaError::Alloc {
                bytes: len * std::mem::size_of::<T>(),
                source,
            })
    }

    /// What [`crate::compute::backend::Backend::alloc`] returns once an operation has
    /// failed: no operation reads or writes it (all are skipped from then on), so one value
    /// does; where even that cannot be allocated, an empty buffer at address 0.
    pub(super) fn placeholder(&self) -> CudaSlice<f32> {
        self.zeros(1).unwrap_or_else(|_| {
            // SAFETY: a buffer of no values, which the skipped operations never pass to a
            // kernel or a copy. Freeing address 0 when it drops is refused by the driver,
            // and cudarc keeps that refusal for a later check instead of panicking.
            // Event tracking is off (see `Cuda::open`), so no event is created for it.
            unsafe { self.stream().upgrade_device_ptr(0, 0) }
        })
    }

    /// `host` copied to a new device buffer (one zero for an empty `host`).
    pub(super) fn upload_new<T: DeviceRepr + ValidAsZeroBits + Default>(
        &self,
        host: &[T],
    ) -> Result<CudaSlice<T>, CudaError> {
        let zero = [T::default()];
        let host = if host.is_empty() { &zero[..] } else { host };
        self.stream()
            .clone_htod(host)
            .map_err(|source| CudaError::Transfer {
                transfer: "upload",
                len: host.len(),
                source,
            })
    }

    /// `dst[..src.len()] = src`, host to device.
    pub(super) fn upload_into(
        &self,
        dst: &mut CudaSlice<f32>,
        src: &[f32],
    ) -> Result<(), CudaError> {
        if src.is_empty() {
            return Ok(());
        }
        let mut d = dst.slice_mut(..src.len());
        self.stream()
            .memcpy_htod(src, &mut d)
            .map_err(|source| CudaError::Transfer {
                transfer: "upload",
                len: src.len(),
                source,
            })
    }

    /// `dst = src[..dst.len()]`, device to host.
    pub(super) fn download_into<T: DeviceRepr>(
        &self,
        dst: &mut [T],
        src: &CudaSlice<T>,
    ) -> Result<(), CudaError> {
        if dst.is_empty() {
            return Ok(());
        }
        let s = src.slice(..dst.len());
        self.stream()
            .memcpy_dtoh(&s, dst)
            .map_err(|source| CudaError::Transfer {
                transfer: "download",
                len: dst.len(),
                source,
            })
    }

    /// The first `len` values of `src` on the host.
    pub(super) fn download_vec<T: DeviceRepr + Default + Clone>(
        &self,
        src: &CudaSlice<T>,
        len: usize,
    ) -> Result<Vec<T>, CudaError> {
        let mut host = vec![T::default(); len];
        self.download_into(&mut host, src)?;
        Ok(host)
    }

    /// `dst[..len] = src[offset..offset + len]` on the device.
    pub(super) fn copy_range(
        &self,
        dst: &mut CudaSlice<f32>,
        src: &CudaSlice<f32>,
        offset: usize,
        len: usize,
    ) -> Result<(), CudaError> {
        if len == 0 {
            return Ok(());
        }
        let s = src.slice(offset..offset + len);
        let mut d = dst.slice_mut(..len);
        self.stream()
            .memcpy_dtod(&s, &mut d)
            .map_err(|source| CudaError::Transfer {
                transfer: "device copy",
                len,
                source,
            })
    }
}
