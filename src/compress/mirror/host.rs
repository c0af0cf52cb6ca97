//! [`HostMirror`]: the mirror in host memory, the reference for the device ones.

use super::MirrorDevice;
use crate::compress::topk::{select_unsent, TopK};
use crate::compress::CompressError;

/// [`MirrorDevice`] in host memory.
#[derive(Debug, Default)]
pub struct HostMirror {
    view: Vec<f32>,
    topk: TopK,
}

impl HostMirror {
    pub fn new() -> Self {
        Self::default()
    }
}

impl MirrorDevice for HostMirror {
    fn load(&mut self, view: &[f32]) {
        self.view.clear();
        self.view.extend_from_slice(view);
    }

    fn set(&mut self, index: &[u32], values: &[f32]) {
        for (&i, &v) in index.iter().zip(values) {
            self.view[i as usize] = v;
        }
    }

    fn select(
        &mut self,
        weights: &[f32],
        k: usize,
        idx: &mut Vec<u32>,
        vals: &mut Vec<f32>,
    ) -> Result<(), CompressError> {
        select_unsent(&mut self.topk, weights, &self.view, k, idx, vals);
        Ok(())
    }
}
