//! Where a group server's sparse exchange selects its entries.
//!
//! A sparse exchange reads the whole replica and the whole peer view once to select the
//! top-k of their difference ([`super::PeerView::take_sparse`]); the rest of the exchange
//! touches only k entries. [`MirrorDevice`] moves that one pass to a device that keeps a
//! mirror of the peer view: per exchange the weights go up, and only the k selected
//! (index, value) pairs and the entries the view changed by come and go
//! ([`super::PeerView::take_sparse_on`]). The replica itself stays in host memory, where
//! the workers' pushes arrive, the optimizer applies them and MPI sends the weights: a
//! replica on the device would cost a gradient upload and a weights download per push,
//! against one weights upload per exchange here.
//!
//! [`HostMirror`] keeps the mirror in host memory, the reference the others are checked
//! against; `CudaMirror` (feature `cuda`) keeps it on a GPU.
//!
//! A device may fail. `load` and `set` return nothing (the view's bookkeeping does not
//! wait for the device): a device keeps its first failure and returns it from the next
//! `select`, whose `Result` the exchange already handles.

#[cfg(feature = "cuda")]
mod cuda;
mod host;

#[cfg(feature = "cuda")]
pub use cuda::CudaMirror;
pub use host::HostMirror;

use super::CompressError;

/// A device holding a mirror of a peer view and selecting from it.
pub trait MirrorDevice {
    /// Replaces the whole mirror with `view`.
    fn load(&mut self, view: &[f32]);
    /// `mirror[index[j]] = values[j]` (distinct indices).
    fn set(&mut self, index: &[u32], values: &[f32]);
    /// The `min(k, n)` largest `|weights - mirror|`: their indices ascending into `idx`
    /// (the lower index first among equal magnitudes, as [`super::TopK`]) and their
    /// differences into `vals`. Leaves the mirror as it is. Fails with
    /// [`CompressError::Device`] where the device failed, in this call or in a `load` or
    /// `set` since the last one.
    fn select(
        &mut self,
        weights: &[f32],
        k: usize,
        idx: &mut Vec<u32>,
        vals: &mut Vec<f32>,
    ) -> Result<(), CompressError>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compress::topk::TopK;
    use crate::compress::PeerView;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// A mirror that also counts what crossed to it, to check the take moves only the
    /// changed entries.
    struct Counting {
        inner: HostMirror,
        loads: usize,
        set_entries: usize,
    }

    impl MirrorDevice for Counting {
        fn load(&mut self, view: &[f32]) {
            self.loads += 1;
            self.inner.load(view)
        }
        fn set(&mut self, index: &[u32], values: &[f32]) {
            self.set_entries += index.len();
            self.inner.set(index, values)
        }
        fn select(
            &mut self,
            w: &[f32],
            k: usize,
            idx: &mut Vec<u32>,
            vals: &mut Vec<f32>,
        ) -> Result<(), CompressError> {
            self.inner.select(w, k, idx, vals)
        }
    }

    /// A mirrored view gives the host view's selections, values and state, step for step,
    /// through receives, sparse and dense takes, low-rank counts and dense inboxes; the
    /// mirror is kept up by setting only the entries that changed.
    #[test]
    fn a_mirrored_view_selects_what_the_host_view_selects() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let n = 30_000; // above the top-k's sampling threshold
        let initial: Vec<f32> = (0..n).map(|_| rng.gen_range(-1.0f32..1.0)).collect();
        let (mut w_host, mut w_dev) = (initial.clone(), initial.clone());
        let mut host = PeerView::new(&initial);
        let mut mirrored = PeerView::new(&initial);
        let mut device = Counting {
            inner: HostMirror::new(),
            loads: 0,
            set_entries: 0,
        };
        mirrored.mirror_on(&mut device);
        assert_eq!(device.loads, 1);
        let mut topk = TopK::new();
        let (mut idx_h, mut vals_h, mut idx_d, mut vals_d) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for step in 0..40 {
            for _ in 0..200 {
                let i = rng.gen_range(0..n);
                let d = rng.gen_range(-0.1f32..0.1);
                w_host[i] += d;
                w_dev[i] += d;
            }
            for _ in 0..60 {
                let (i, v) = (rng.gen_range(0..n), rng.gen_range(-0.1f32..0.1));
                host.receive(&mut w_host, i, v);
                mirrored.receive(&mut w_dev, i, v);
            }
            match step % 13 {
                7 => {
                    host.take_dense(&w_host, &mut vals_h).unwrap();
                    mirrored.take_dense(&w_dev, &mut vals_d).unwrap();
                }
                11 => {
                    let part = vec![0.01f32; 100];
                    host.count_sent(40, &part);
                    mirrored.count_sent(40, &part);
                    let mut inbox_h = vec![0.001f32; n];
                    let mut inbox_d = inbox_h.clone();
                    host.receive_dense(&mut w_host, &mut inbox_h).unwrap();
                    mirrored.receive_dense(&mut w_dev, &mut inbox_d).unwrap();
                }
                _ => {
                    let k = rng.gen_range(0..=n / 50);
                    let (loads, set) = (device.loads, device.set_entries);
                    host.take_sparse(&w_host, k, &mut topk, &mut idx_h, &mut vals_h)
                        .unwrap();
                    mirrored
                        .take_sparse_on(&mut device, &w_dev, k, &mut idx_d, &mut vals_d)
                        .unwrap();
                    assert_eq!(idx_d, idx_h, "step {step}");
                    assert_eq!(vals_d, vals_h, "step {step}");
                    if k > 0 && step % 13 != 8 && step % 13 != 12 {
                        assert_eq!(device.loads, loads, "step {step}: only entries set");
                        assert!(device.set_entries - set < n / 10, "step {step}");
                    }
                }
            }
            assert_eq!(mirrored.view_for_tests(), host.view_for_tests());
        }
        assert!(device.loads > 1, "dense changes reload the mirror");
    }

    #[test]
    fn a_mirrored_take_refuses_non_finite_values_and_counts_nothing() {
        let initial = vec![0.0f32; 10];
        let mut weights = vec![0.5f32; 10];
        weights[3] = f32::NAN;
        let mut view = PeerView::new(&initial);
        let mut device = HostMirror::new();
        view.mirror_on(&mut device);
        let (mut idx, mut vals) = (Vec::new(), Vec::new());
        let err = view
            .take_sparse_on(&mut device, &weights, 2, &mut idx, &mut vals)
            .unwrap_err();
        assert!(matches!(err, CompressError::NonFinite { index: 3, .. }));
        assert!(idx.is_empty() && vals.is_empty());
        assert_eq!(view.view_for_tests(), &initial[..]);
        assert_eq!(
            view.take_sparse_on(&mut device, &weights[1..], 2, &mut idx, &mut vals),
            Err(CompressError::LengthMismatch {
                expected: 10,
                got: 9
            })
        );
    }
}
