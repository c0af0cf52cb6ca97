//! A parameter server's passes over a whole model, split over the pool's threads
//! (`run.threads`, `compute::backend::cpu::threads`): the SGD step, the sum that
//! checks a push and the copy of the weights into a reply. All are bound by memory
//! traffic, so a second core's bandwidth shortens them.
//!
//! Each thread takes one contiguous share of the model. The step computes every value as the
//! one-thread pass does (it is elementwise), so its result does not depend on the thread
//! count; the sum adds the shares' sums in a fixed order, which only changes its rounding with the
//! thread count (it is used to tell whether a push is finite). Buffers shorter than [`MIN_SPLIT`] stay on the calling thread,
//! where a dispatch would cost more than it saves.

use crate::compute::backend::cpu::{self, threads};
use crate::compute::backend::SgdStep;

/// Values below which a pass runs on the calling thread alone.
pub const MIN_SPLIT: usize = 1 << 15;

/// Whether a pass over `len` values is split over the pool.
fn splits(len: usize) -> bool {
    len >= MIN_SPLIT && threads::threads() > 1
}

/// [`cpu::sgd_step`] (weight decay, momentum and update fused in one pass), which itself
/// splits the model over the pool's threads, with the buffers' lengths checked.
///
/// # Panics
/// If the three buffers differ in length.
pub fn sgd_step(params: &mut [f32], velocity: &mut [f32], grads: &[f32], h: &SgdStep) {
    let n = params.len();
    assert!(
        velocity.len() == n && grads.len() == n,
        "sgd_step: {n} params, {} velocity, {} grads",
        velocity.len(),
        grads.len()
    );
    cpu::sgd_step(params, velocity, grads, h);
}

/// Shares [`sum`] adds at most (its partial sums live on the stack).
const MAX_SHARES: usize = 64;

/// The sum of `values`: each of the pool's threads sums its own fixed share, and the shares'
/// sums are added in share order, so the result depends on the thread count alone.
pub fn sum(values: &[f32]) -> f32 {
    if !splits(values.len()) {
        return values.iter().sum();
    }
    let shares = threads::threads().min(MAX_SHARES);
    let mut sums = [0.0f32; MAX_SHARES];
    let slots = threads::Units::new(&mut sums[..shares], 1);
    threads::for_shares_in_slots(values.len(), slots, [], &|_, slot, range, []| {
        slot[0] = values[range].iter().sum();
    });
    sums[..shares].iter().sum()
}

/// `dst = src`, each of the pool's threads copying its share.
///
/// # Panics
/// If the lengths differ.
pub fn copy(dst: &mut [f32], src: &[f32]) {
    assert_eq!(dst.len(), src.len(), "copy: lengths differ");
    if !splits(src.len()) {
        return dst.copy_from_slice(src);
    }
    let dst = threads::Units::new(dst, 1);
    threads::for_parts(src.len(), [dst], &|r, [dst]| dst.copy_from_slice(&src[r]));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buffers(n: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let wave = |k: f32| -> Vec<f32> { (0..n).map(|i| (i as f32 * k).sin()).collect() };
        (wave(0.37), wave(0.11), wave(0.73))
    }

    #[test]
    fn the_threaded_step_equals_the_one_thread_pass() {
        threads::set_threads(2);
        let n = 3 * MIN_SPLIT + 17;
        let h = SgdStep {
            lr: 0.05,
            momentum: 0.9,
            weight_decay: 5e-4,
            scale: 0.125,
        };
        let (mut w1, mut v1, g) = buffers(n);
        let (mut w2, mut v2) = (w1.clone(), v1.clone());
        for _ in 0..3 {
            cpu::sgd_step(&mut w1, &mut v1, &g, &h);
            sgd_step(&mut w2, &mut v2, &g, &h);
        }
        assert!(threads::threads() > 1, "the pool has a second thread");
        assert_eq!((w1, v1), (w2, v2), "elementwise: the same values");
    }

    #[test]
    fn the_threaded_copy_copies_every_value() {
        threads::set_threads(2);
        let (src, _, _) = buffers(2 * MIN_SPLIT + 3);
        let mut dst = vec![0.0; src.len()];
        copy(&mut dst, &src);
        assert_eq!(dst, src);
    }

    #[test]
    fn the_threaded_sum_matches_the_plain_one_and_sees_an_infinity() {
        threads::set_threads(2);
        let (mut g, _, _) = buffers(2 * MIN_SPLIT + 5);
        let plain: f32 = g.iter().sum();
        assert!((sum(&g) - plain).abs() <= 1e-3 * plain.abs().max(1.0));
        g[MIN_SPLIT + 3] = f32::INFINITY;
        assert!(!sum(&g).is_finite());
    }
}
