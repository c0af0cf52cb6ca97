//! What a group server sends of its change, and how it applies what arrives: the peer view
//! (the replica as the peers know it; the weights minus it is the unsent change, error
//! feedback without a residual buffer), and the three ways to take from it: all of it
//! (dense), its top-k entries (sparse, selected on the host or on a device that mirrors the
//! view), or its rank-r PowerSGD approximation (low-rank). What is taken is counted as sent
//! in the view at once; what is not stays unsent for a later exchange.

use anyhow::Result;

use crate::compress::feedback::PeerView;
use crate::compress::powersgd::{reconstruct, Block, LowRankLayout, PowerSgd, TensorShape};
use crate::compress::topk::TopK;
use crate::compress::{CompressError, MirrorDevice};
use crate::compute::optim::Outer;
use crate::protocol::mailbox::{self, Inbox, LowRankError};

use super::transport::Arrivals;

/// What the last take left in the encoder's buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// `vals`: the whole unsent change.
    Dense,
    /// `idx`, `vals`: its top-k entries.
    Sparse,
    /// `msg`: the low-rank factors as a mailbox message; `vals`: the dense change they
    /// stand for, what the peers will rebuild.
    LowRank,
}

/// PowerSGD on one group server: the model's tensors, the rank at the target ratio, the
/// sender's warm starts, and scratch for the unsent change, a payload and a reconstruction.
struct LowRank {
    tensors: Vec<TensorShape>,
    rank: usize,
    psgd: PowerSgd,
    unsent: Vec<f32>,
    payload: Vec<f32>,
    scratch: Vec<f32>,
}

/// One group server's encoder.
pub struct Encoder {
    n: usize,
    view: PeerView,
    /// Where the view is mirrored and sparse exchanges select (`None`: on the host).
    mirror: Option<Box<dyn MirrorDevice>>,
    low_rank: Option<LowRank>,
    topk: TopK,
    pub idx: Vec<u32>,
    pub vals: Vec<f32>,
    pub msg: Vec<u32>,
}

impl Encoder {
    /// For a model starting at `initial`, with PowerSGD of rank `low_rank` over `tensors`
    /// when given (seeded by `seed`), top-k of up to `k` entries otherwise.
    pub fn new(
        initial: &[f32],
        low_rank: Option<(usize, &[TensorShape], u64)>,
        k: usize,
    ) -> Encoder {
        let n = initial.len();
        let low_rank = low_rank.map(|(rank, tensors, seed)| LowRank {
            tensors: tensors.to_vec(),
            rank,
            psgd: PowerSgd::new(seed),
            unsent: Vec::with_capacity(n),
            payload: Vec::new(),
            scratch: Vec::new(),
        });
        Encoder {
            n,
            view: PeerView::new(initial),
            mirror: None,
            low_rank,
            topk: TopK::new(),
            idx: Vec::with_capacity(k),
            vals: Vec::with_capacity(n),
            msg: Vec::new(),
        }
    }

    /// Selects sparse exchanges on `device` from now on, the view mirrored there.
    pub fn select_on(&mut self, mut device: Box<dyn MirrorDevice>) {
        self.view.mirror_on(device.as_mut());
        self.mirror = Some(device);
    }

    /// The low-rank layout at `rank` (powersgd only).
    pub fn low_rank_layout(&self, rank_at: impl Fn(usize) -> usize) -> Option<LowRankLayout> {
        self.low_rank
            .as_ref()
            .map(|l| LowRankLayout::new(&l.tensors, self.n, rank_at(l.rank)))
    }

    /// Takes the whole unsent change into `vals`.
    pub fn take_dense(&mut self, weights: &[f32]) -> Result<Taken, CompressError> {
        self.view.take_dense(weights, &mut self.vals)?;
        Ok(Taken::Dense)
    }

    /// Takes the `k` largest unsent entries into `idx`/`vals` (and `msg`).
    pub fn take_sparse(&mut self, weights: &[f32], k: usize) -> Result<Taken, CompressError> {
        let (idx, vals) = (&mut self.idx, &mut self.vals);
        match &mut self.mirror {
            Some(device) => self
                .view
                .take_sparse_on(device.as_mut(), weights, k, idx, vals)?,
            None => self
                .view
                .take_sparse(weights, k, &mut self.topk, idx, vals)?,
        }
        Ok(Taken::Sparse)
    }

    /// The sparse entries just taken as one mailbox message.
    pub fn sparse_message(&mut self) -> &[u32] {
        mailbox::encode(&self.idx, &self.vals, &mut self.msg);
        &self.msg
    }

    /// Takes the unsent change's approximation by `layout` into `msg`, and what the peers
    /// will rebuild from it into `vals`, counted as sent in the view.
    pub fn take_low_rank(
        &mut self,
        weights: &[f32],
        layout: &LowRankLayout,
    ) -> Result<Taken, CompressError> {
        let Some(l) = self.low_rank.as_mut() else {
            return Err(CompressError::Factorization(
                "a low-rank exchange without powersgd".into(),
            ));
        };
        self.view.unsent_into(weights, &mut l.unsent)?;
        l.psgd.compress(&l.unsent, layout, &mut l.payload)?;
        self.vals.clear();
        self.vals.resize(self.n, 0.0);
        let vals = &mut self.vals;
        reconstruct(layout, &l.payload, &mut l.scratch, |offset, values| {
            vals[offset..offset + values.len()].copy_from_slice(values);
        })?;
        self.view.count_sent(0, &self.vals);
        mailbox::encode_low_rank(layout.rank, &l.payload, &mut self.msg);
        Ok(Taken::LowRank)
    }

    /// Replaces the group's own progress since `anchor` by `outer`'s step for it (see
    /// [`PeerView::transform_progress`]); `scratch` holds the progress.
    pub fn outer_step(
        &mut self,
        weights: &mut [f32],
        outer: &mut Outer,
        anchor: &[f32],
        scratch: &mut Vec<f32>,
    ) -> Result<(), CompressError> {
        self.view
            .transform_progress(weights, anchor, scratch, |p| outer.step(p))
    }

    /// The group's unsent change, `weights` minus the view, into `out`.
    pub fn unsent(&self, weights: &[f32], out: &mut Vec<f32>) -> Result<(), CompressError> {
        self.view.unsent_into(weights, out)
    }

    /// The view and `weights`, to apply what the peers sent.
    pub fn receiver<'a>(&'a mut self, weights: &'a mut [f32]) -> Receiver<'a> {
        Receiver {
            view: &mut self.view,
            weights,
            low_rank: self
                .low_rank
                .as_mut()
                .map(|l| (&l.tensors[..], &mut l.scratch)),
        }
    }

    /// Low-rank blocks of the layout at the configured rank, for the start-up log.
    pub fn low_rank_matrices(&self) -> usize {
        self.low_rank_layout(|r| r)
            .map(|p| {
                p.blocks
                    .iter()
                    .filter(|b| matches!(b, Block::LowRank { .. }))
                    .count()
            })
            .unwrap_or(0)
    }
}

/// Applies what arrives from the peers to a server's weights and peer view.
pub struct Receiver<'a> {
    view: &'a mut PeerView,
    weights: &'a mut [f32],
    /// The model's tensors and a reconstruction buffer (powersgd runs only).
    low_rank: Option<(&'a [TensorShape], &'a mut Vec<f32>)>,
}

impl Inbox for Receiver<'_> {
    fn value(&mut self, index: usize, value: f32) {
        self.view.receive(self.weights, index, value);
    }

    fn low_rank(&mut self, rank: usize, payload: &[f32]) -> Result<(), LowRankError> {
        let Some((tensors, scratch)) = self.low_rank.as_mut() else {
            return Err(LowRankError::Unexpected { rank });
        };
        let layout = LowRankLayout::new(tensors, self.weights.len(), rank);
        let (view, weights) = (&mut *self.view, &mut *self.weights);
        reconstruct(&layout, payload, scratch, |offset, values| {
            view.receive_slice(weights, offset, values)
        })
        .map_err(|error| LowRankError::Payload { rank, error })
    }
}

impl Arrivals for Receiver<'_> {
    fn dense(&mut self, inbox: &mut [f32]) -> Result<()> {
        Ok(self.view.receive_dense(self.weights, inbox)?)
    }
}
