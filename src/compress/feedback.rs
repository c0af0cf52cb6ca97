//! Error feedback without a residual buffer.
//!
//! A group server keeps [`PeerView`]: its replica as the other groups know it, i.e. the
//! initial weights plus everything received from them plus everything sent to them. The
//! weights minus this view is exactly the error-feedback residual (the group's own change
//! not yet sent), so the residual is never stored: a sparse exchange reads the weights and
//! the view once, selecting the top-k of their difference on the fly, and writes only the k
//! sent entries. Received updates go into both the weights and the view, so they never look
//! like the group's own change.
//!
//! The view can also be mirrored on a device ([`MirrorDevice`]), where the sparse take's
//! pass over the whole model then runs; the host copy stays the one every other operation
//! reads, and the view records which entries changed since the mirror last matched it.

use super::mirror::MirrorDevice;
use super::topk::{select_unsent, TopK};
use super::{find_non_finite, CompressError};

/// What the other groups know of one group server's replica (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct PeerView {
    view: Vec<f32>,
    /// Entries changed since a device mirror last matched the view (`None`: not mirrored).
    changes: Option<Changes>,
}

/// What changed in a mirrored view since its mirror last matched it.
#[derive(Debug, Clone, PartialEq)]
enum Changes {
    /// These entries (unsorted, maybe repeated).
    Entries(Vec<u32>),
    /// Too much to track entry by entry (a dense or low-rank change): reload it all.
    All,
}

impl PeerView {
    /// Starts from the weights every group starts from.
    pub fn new(initial: &[f32]) -> Self {
        Self {
            view: initial.to_vec(),
            changes: None,
        }
    }

    /// Mirrors the view on `device` from now on: loads it there; later changes are
    /// recorded and carried over by the next [`PeerView::take_sparse_on`].
    pub fn mirror_on(&mut self, device: &mut dyn MirrorDevice) {
        device.load(&self.view);
        self.changes = Some(Changes::Entries(Vec::new()));
    }

    fn changed(&mut self, index: usize) {
        if let Some(Changes::Entries(entries)) = &mut self.changes {
            entries.push(index as u32);
        }
    }

    fn changed_all(&mut self) {
        if self.changes.is_some() {
            self.changes = Some(Changes::All);
        }
    }

    /// Brings `device`'s mirror up to the view: the changed entries get the host's values
    /// (set, not added, so the mirror stays bit for bit the host's view); past a quarter of
    /// the model, one whole copy is cheaper.
    fn sync(&mut self, device: &mut dyn MirrorDevice) {
        match &mut self.changes {
            Some(Changes::Entries(entries)) if entries.len() <= self.view.len() / 4 => {
                entries.sort_unstable();
                entries.dedup();
                let values: Vec<f32> = entries.iter().map(|&i| self.view[i as usize]).collect();
                device.set(entries, &values);
                entries.clear();
            }
            _ => {
                device.load(&self.view);
                self.changes = Some(Changes::Entries(Vec::new()));
            }
        }
    }

    /// [`PeerView::take_sparse`] with the selection's pass on `device`, where the view is
    /// mirrored ([`PeerView::mirror_on`]): the same indices and values, since the device
    /// selects from the same differences with the same tie rule. Only the k pairs come
    /// back; the view is updated on the host and the mirror at the next take.
    pub fn take_sparse_on(
        &mut self,
        device: &mut dyn MirrorDevice,
        weights: &[f32],
        k: usize,
        idx: &mut Vec<u32>,
        vals: &mut Vec<f32>,
    ) -> Result<(), CompressError> {
        self.check_len(weights.len())?;
        idx.clear();
        vals.clear();
        if k == 0 {
            return Ok(());
        }
        self.sync(device);
        device.select(weights, k, idx, vals)?;
        self.count_taken(idx, vals)
    }

    /// Counts the selected pairs as sent; refuses them all (clearing both) if a value is a
    /// NaN or infinity.
    fn count_taken(
        &mut self,
        idx: &mut Vec<u32>,
        vals: &mut Vec<f32>,
    ) -> Result<(), CompressError> {
        if let Some((j, value)) = find_non_finite(vals) {
            let index = idx[j] as usize;
            idx.clear();
            vals.clear();
            return Err(CompressError::NonFinite { index, value });
        }
        for (&i, &v) in idx.iter().zip(vals.iter()) {
            self.view[i as usize] += v;
        }
        if let Some(Changes::Entries(entries)) = &mut self.changes {
            entries.extend_from_slice(idx);
        }
        Ok(())
    }

    fn check_len(&self, got: usize) -> Result<(), CompressError> {
        if got == self.view.len() {
            Ok(())
        } else {
            Err(CompressError::LengthMismatch {
                expected: self.view.len(),
                got,
            })
        }
    }

    #[cfg(test)]
    pub(crate) fn view_for_tests(&self) -> &[f32] {
        &self.view
    }

    /// The unsent change at every index (`weights - view`).
    #[cfg(test)]
    fn unsent(&self, weights: &[f32]) -> Vec<f32> {
        weights.iter().zip(&self.view).map(|(w, v)| w - v).collect()
    }

    /// Takes the `k` largest unsent entries by magnitude: their indices (ascending) into
    /// `idx`, their values into `vals`, and counts them as sent. Fails, leaving everything
    /// unchanged, if the unsent change holds a NaN or infinity (NaN and infinity rank above
    /// every finite value, so checking the selected values is enough). With `k = 0` nothing
    /// is read, sent or checked.
    pub fn take_sparse(
        &mut self,
        weights: &[f32],
        k: usize,
        topk: &mut TopK,
        idx: &mut Vec<u32>,
        vals: &mut Vec<f32>,
    ) -> Result<(), CompressError> {
        self.check_len(weights.len())?;
        select_unsent(topk, weights, &self.view, k, idx, vals);
        self.count_taken(idx, vals)
    }

    /// Takes the whole unsent change into `vals` (dense exchange and the final flush) and
    /// counts it as sent. Fails, leaving everything unchanged, on a NaN or infinity.
    pub fn take_dense(
        &mut self,
        weights: &[f32],
        vals: &mut Vec<f32>,
    ) -> Result<(), CompressError> {
        self.check_len(weights.len())?;
        vals.clear();
        vals.extend(weights.iter().zip(&self.view).map(|(w, v)| w - v));
        if let Some((index, value)) = find_non_finite(vals) {
            vals.clear();
            return Err(CompressError::NonFinite { index, value });
        }
        for (v, d) in self.view.iter_mut().zip(vals.iter()) {
            *v += d;
        }
        self.changed_all();
        Ok(())
    }

    /// Copies the whole unsent change into `out` without counting any of it as sent (a
    /// low-rank exchange sends an approximation of it and counts that with
    /// [`PeerView::count_sent`]).
    pub fn unsent_into(&self, weights: &[f32], out: &mut Vec<f32>) -> Result<(), CompressError> {
        self.check_len(weights.len())?;
        out.clear();
        out.extend(weights.iter().zip(&self.view).map(|(w, v)| w - v));
        Ok(())
    }

    /// Replaces the group's own progress since `anchor` (its unsent change as it stood
    /// then) by what `transform` makes of it: with `p = weights - view - anchor`, the
    /// weights become `view + anchor + transform(p)`. The view is untouched: the peers learn
    /// the transformed progress as any unsent change, through later takes. `scratch`
    /// holds `p`.
    pub fn transform_progress(
        &self,
        weights: &mut [f32],
        anchor: &[f32],
        scratch: &mut Vec<f32>,
        transform: impl FnOnce(&mut [f32]),
    ) -> Result<(), CompressError> {
        self.check_len(weights.len())?;
        self.check_len(anchor.len())?;
        scratch.clear();
        let unsent = weights.iter().zip(&self.view).map(|(w, v)| w - v);
        scratch.extend(unsent.zip(anchor).map(|(u, a)| u - a));
        transform(scratch);
        for (((w, v), a), s) in weights
            .iter_mut()
            .zip(&self.view)
            .zip(anchor)
            .zip(scratch.iter())
        {
            *w = v + a + s;
        }
        Ok(())
    }

    /// Counts `values`, starting at `offset`, as sent: the part of the unsent change the
    /// peers now know.
    pub fn count_sent(&mut self, offset: usize, values: &[f32]) {
        for (v, d) in self.view[offset..offset + values.len()]
            .iter_mut()
            .zip(values)
        {
            *v += d;
        }
        self.changed_all();
    }

    /// Adds another group's update `values`, starting at `offset`, to the weights and to
    /// the view.
    pub fn receive_slice(&mut self, weights: &mut [f32], offset: usize, values: &[f32]) {
        let end = offset + values.len();
        let pairs = weights[offset..end]
            .iter_mut()
            .zip(&mut self.view[offset..end]);
        for ((w, v), x) in pairs.zip(values) {
            *w += x;
            *v += x;
        }
        self.changed_all();
    }

    /// Adds another group's update `value` at `index` to the weights and to the view.
    #[inline]
    pub fn receive(&mut self, weights: &mut [f32], index: usize, value: f32) {
        weights[index] += value;
        self.view[index] += value;
        self.changed(index);
    }

    /// Adds a dense inbox of other groups' updates to the weights and the view, and zeroes
    /// it (one pass).
    pub fn receive_dense(
        &mut self,
        weights: &mut [f32],
        inbox: &mut [f32],
    ) -> Result<(), CompressError> {
        self.check_len(weights.len())?;
        self.check_len(inbox.len())?;
        for ((w, v), x) in weights.iter_mut().zip(&mut self.view).zip(inbox) {
            *w += *x;
            *v += *x;
            *x = 0.0;
        }
        self.changed_all();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// Sort-based reference top-k of `values` (magnitude descending, lower index first).
    fn reference(values: &[f32], k: usize) -> Vec<u32> {
        let mut order: Vec<u32> = (0..values.len() as u32).collect();
        order.sort_by(|&a, &b| {
            let (x, y) = (values[a as usize].abs(), values[b as usize].abs());
            y.total_cmp(&x).then(a.cmp(&b))
        });
        order.truncate(k.min(values.len()));
        order.sort_unstable();
        order
    }

    /// Multiples of 1/8 in a small range: every sum below is exact in f32, so the identities
    /// must hold bit for bit.
    fn exact_delta(rng: &mut ChaCha8Rng, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| rng.gen_range(-16i32..=16) as f32 / 8.0)
            .collect()
    }

    #[test]
    fn loses_nothing_and_selects_the_unsent_top_k() {
        let mut rng = ChaCha8Rng::seed_from_u64(21);
        let n = 20_000; // above the sampling threshold, so the sampled path runs too
        let initial = exact_delta(&mut rng, n);
        let mut weights = initial.clone();
        let mut view = PeerView::new(&initial);
        let mut topk = TopK::new();
        let (mut own, mut sent, mut received) = (vec![0.0f32; n], vec![0.0f32; n], vec![0.0; n]);
        let (mut idx, mut vals) = (Vec::new(), Vec::new());
        for step in 0..30 {
            let delta = exact_delta(&mut rng, n);
            for ((w, o), d) in weights.iter_mut().zip(&mut own).zip(&delta) {
                *w += d;
                *o += d;
            }
            // Another group's sparse update arrives.
            for _ in 0..50 {
                let i = rng.gen_range(0..n);
                let v = rng.gen_range(-8i32..=8) as f32 / 8.0;
                view.receive(&mut weights, i, v);
                received[i] += v;
            }
            let before = view.unsent(&weights);
            if step % 10 == 9 {
                view.take_dense(&weights, &mut vals).unwrap();
                assert_eq!(vals, before);
                for (s, v) in sent.iter_mut().zip(&vals) {
                    *s += v;
                }
                assert!(view.unsent(&weights).iter().all(|&x| x == 0.0));
            } else {
                let k = rng.gen_range(0..=n / 20);
                view.take_sparse(&weights, k, &mut topk, &mut idx, &mut vals)
                    .unwrap();
                assert_eq!(idx, reference(&before, k));
                let after = view.unsent(&weights);
                for (&i, &v) in idx.iter().zip(&vals) {
                    assert_eq!(v, before[i as usize]);
                    assert_eq!(after[i as usize], 0.0);
                    sent[i as usize] += v;
                }
            }
            // Own change = sent + unsent; weights = initial + own + received.
            let unsent = view.unsent(&weights);
            for i in 0..n {
                assert_eq!(sent[i] + unsent[i], own[i], "step {step} index {i}");
                assert_eq!(weights[i], initial[i] + own[i] + received[i]);
            }
        }
    }

    #[test]
    fn receive_dense_adds_to_both_and_zeroes_the_inbox() {
        let initial = vec![1.0f32, 2.0, 3.0];
        let mut weights = vec![1.5f32, 2.0, 2.0];
        let mut view = PeerView::new(&initial);
        let mut inbox = vec![0.25f32, -1.0, 0.0];
        view.receive_dense(&mut weights, &mut inbox).unwrap();
        assert_eq!(weights, vec![1.75, 1.0, 2.0]);
        assert_eq!(inbox, vec![0.0; 3]);
        assert_eq!(
            view.unsent(&weights),
            vec![0.5, 0.0, -1.0],
            "unsent unchanged"
        );
        assert_eq!(
            view.receive_dense(&mut weights, &mut [0.0; 2]),
            Err(CompressError::LengthMismatch {
                expected: 3,
                got: 2
            })
        );
    }

    #[test]
    fn rejects_non_finite_and_bad_length_leaving_everything_unchanged() {
        let initial = vec![0.0f32; 10];
        let mut weights = vec![0.5f32; 10];
        weights[7] = f32::INFINITY;
        let mut view = PeerView::new(&initial);
        let mut topk = TopK::new();
        let (mut idx, mut vals) = (vec![1], vec![1.0]);
        let err = view
            .take_sparse(&weights, 3, &mut topk, &mut idx, &mut vals)
            .unwrap_err();
        assert_eq!(
            err,
            CompressError::NonFinite {
                index: 7,
                value: f32::INFINITY
            }
        );
        assert!(idx.is_empty() && vals.is_empty());
        assert_eq!(view, PeerView::new(&initial), "nothing counted as sent");
        assert!(view.take_dense(&weights, &mut vals).is_err());
        assert_eq!(view, PeerView::new(&initial));
        let ctx = err.in_context(1, 75, 300).to_string();
        assert!(
            ctx.contains("group 1, exchange 75 (iteration 300)") && ctx.contains("index 7"),
            "{ctx}"
        );
        // A NaN among many finite values is caught by the sparse take too.
        let mut weights = vec![0.5f32; 30_000];
        weights[12_345] = f32::NAN;
        let mut view = PeerView::new(&vec![0.0; 30_000]);
        let err = view
            .take_sparse(&weights, 10, &mut topk, &mut idx, &mut vals)
            .unwrap_err();
        assert!(matches!(
            err,
            CompressError::NonFinite { index: 12_345, .. }
        ));
        assert_eq!(
            view.take_sparse(&weights[1..], 3, &mut topk, &mut idx, &mut vals),
            Err(CompressError::LengthMismatch {
                expected: 30_000,
                got: 29_999
            })
        );
    }
}
