//! [`FirstFailure`]: the CUDA backend's record of its first failed operation.
//!
//! The [`crate::compute::backend::Backend`] operations return no `Result`: a failure is
//! kept here instead, every later operation is skipped (it returns a placeholder value and
//! leaves its outputs as they are), and [`crate::compute::backend::Backend::status`]
//! reports the kept failure at the next check. This is how the device fails anyway: CUDA
//! reports a kernel's fault at a later call, and after one the context fails every call.

use std::sync::OnceLock;

use super::CudaError;
use crate::compute::backend::BackendError;

/// The first failure of a backend's operations, once one happened.
#[derive(Debug, Default)]
pub(super) struct FirstFailure(OnceLock<BackendError>);

impl FirstFailure {
    /// Whether an operation has failed.
    pub(super) fn happened(&self) -> bool {
        self.0.get().is_some()
    }

    /// Keeps `error`, found by operation `op`, unless an earlier failure is kept.
    pub(super) fn record(&self, op: &'static str, error: CudaError) {
        // An earlier failure stays the one reported: later ones follow from it.
        let _ = self.0.set(BackendError::Cuda { op, source: error });
    }

    /// What `run` returns, or `skipped` where an earlier operation failed or `run` fails
    /// (whose failure is then kept).
    pub(super) fn run<T>(
        &self,
        op: &'static str,
        skipped: T,
        run: impl FnOnce() -> Result<T, CudaError>,
    ) -> T {
        if self.happened() {
            return skipped;
        }
        run().unwrap_or_else(|error| {
            self.record(op, error);
            skipped
        })
    }

    /// The kept failure, if any.
    pub(super) fn check(&self) -> Result<(), BackendError> {
        self.0.get().map_or(Ok(()), |e| Err(e.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bad(value: u64) -> CudaError {
        CudaError::OutOfRange {
            what: "label",
            value,
            bound: 10,
        }
    }

    #[test]
    fn the_first_failure_is_kept_and_every_later_operation_is_skipped() {
        let failure = FirstFailure::default();
        assert_eq!(failure.run("sum_squares", f64::NAN, || Ok(4.0)), 4.0);
        assert!(failure.check().is_ok());
        let loss = failure.run("softmax_xent", f32::NAN, || Err(bad(12)));
        assert!(loss.is_nan());
        let mut ran = false;
        failure.run("relu_forward", (), || {
            ran = true;
            Ok(())
        });
        assert!(!ran, "an operation after a failure is skipped");
        failure.run("softmax_xent", (), || Err(bad(13)));
        failure.record("download", bad(14));
        let err = failure.check().unwrap_err().to_string();
        assert_eq!(err, "CUDA backend: softmax_xent: label 12 is outside 0..10");
        assert!(failure.happened());
    }
}
