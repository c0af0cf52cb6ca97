//! One group's server on the simulated clock: the runtime's [`ParamServer`] over the whole
//! model, or with `sync.shards = S` one over each shard's range of it (as the sharded
//! runtime keeps them: every shard takes every push of its group in the same order, so
//! their clocks stay equal), and with several gssp groups each shard's part in the exchange
//! with the other groups' same shard ([`GroupExchange`] over that shard's [`Network`]).

use std::cell::RefCell;
use std::ops::Range;
use std::rc::Rc;

use anyhow::Result;

use super::network::{Network, SimTransport};
use crate::compute::optim::ClipError;
use crate::config::Config;
use crate::protocol::layout::{shard_ranges, Layout};
use crate::protocol::param_server::{Applied, ParamServer};
use crate::runtime::exchange::GroupExchange;
use crate::runtime::group_server::{batches_per_group_push, param_server, ServerModel};
use crate::runtime::peers::{Exchange, Exchanged, NoPeers};

/// One shard of a group's server: its range and what it serves of it.
struct Part {
    range: Range<usize>,
    ps: ParamServer,
    exchange: Option<GroupExchange<SimTransport>>,
}

/// A group's server: its shards' parts, shard 0 first.
pub struct GroupServer {
    parts: Vec<Part>,
    n: usize,
}

/// Every shard index's network between the groups (none without an exchange).
pub type Networks = Vec<Rc<RefCell<Network>>>;

impl GroupServer {
    /// Group `g`'s server of `layout` with `slots` worker slots, from `initial`.
    pub fn new(cfg: &Config, layout: &Layout, g: usize, initial: &[f32], slots: usize) -> Self {
        let n = initial.len();
        let parts = shard_ranges(n, layout.shards_per_group().max(1))
            .into_iter()
            .map(|range| Part {
                ps: param_server(cfg, layout, g, initial[range.clone()].to_vec(), slots),
                range,
                exchange: None,
            })
            .collect();
        GroupServer { parts, n }
    }

    /// A group server with nothing to serve (a placeholder while its group is elsewhere).
    pub fn empty() -> Self {
        GroupServer {
            parts: Vec::new(),
            n: 0,
        }
    }

    /// The server of shard 0: its clock and versions stand for every shard's.
    pub fn lead(&self) -> &ParamServer {
        &self.parts[0].ps
    }

    /// The whole model, its shards' ranges laid end to end, into `out`.
    pub fn weights_into(&self, out: &mut Vec<f32>) {
        out.resize(self.n, 0.0);
        for p in &self.parts {
            out[p.range.clone()].copy_from_slice(p.ps.weights());
        }
    }

    /// Applies slot `w`'s `push` at `lr`, each shard its range: shard 0's account of it,
    /// and whether it completed an optimizer step.
    pub fn apply(&mut self, w: usize, push: &[f32], lr: f64) -> Result<(Applied, bool), ClipError> {
        let before = self.lead().version();
        let mut lead = None;
        for p in &mut self.parts {
            let applied = p.ps.on_push(w, &push[p.range.clone()], lr)?;
            lead.get_or_insert(applied);
        }
        let stepped = self.lead().version() > before;
        Ok((lead.expect("a server has a shard"), stepped))
    }

    /// Every shard's part in the exchange after its `pushes`-th push, at `at` (epochs,
    /// seconds), each on its shard's network, its clock set to `at`'s: the ratio of shard
    /// 0's, the bytes and the groups drained of all.
    pub fn exchange(&mut self, pushes: u64, at: (f64, f64), nets: &Networks) -> Result<Exchanged> {
        let mut all = Exchanged::default();
        for (j, p) in self.parts.iter_mut().enumerate() {
            let done = match p.exchange.as_mut() {
                Some(ex) => {
                    nets[j].borrow_mut().set_now(at.1);
                    ex.after_push(&mut p.ps, pushes, at)?
                }
                None => NoPeers.after_push(&mut p.ps, pushes, at)?,
            };
            if j == 0 {
                all.ratio = done.ratio;
            }
            all.sent_bytes += done.sent_bytes;
            all.drained_from |= done.drained_from;
        }
        Ok(all)
    }

    /// Pushes of every group together as shard 0 knows them, this group's being `own`.
    pub fn global_pushes(&self, own: u64) -> u64 {
        match &self.parts[0].exchange {
            Some(ex) => ex.global_pushes(own),
            None => own,
        }
    }

    /// The slots every shard's clock lets go now, appended to `out` (shard 0's list; the
    /// others release the same, their clocks being equal).
    pub fn release(&mut self, out: &mut Vec<usize>) {
        let from = out.len();
        self.parts[0].ps.release(out);
        let mut same = Vec::new();
        for p in &mut self.parts[1..] {
            same.clear();
            p.ps.release(&mut same);
            debug_assert_eq!(same, out[from..], "shards of one group released alike");
        }
    }

    /// Slot `w` is told to stop at every shard.
    pub fn retire(&mut self, w: usize) {
        for p in &mut self.parts {
            p.ps.retire(w);
        }
    }

    /// gssp with several groups: each shard's part in the exchange of every group's
    /// servers, on one network per shard index (each message `link`'s latency and
    /// bandwidth on its way); the networks, none where nothing is exchanged.
    pub fn connect(
        cfg: &Config,
        layout: &Layout,
        servers: &mut [GroupServer],
        (model, link): (&ServerModel, (f64, f64)),
    ) -> Result<Networks> {
        let groups = servers.len();
        if !cfg.sync.strategy().exchanges() || groups < 2 {
            return Ok(Vec::new());
        }
        let shards = servers[0].parts.len();
        let batches = batches_per_group_push(layout);
        let mut nets: Vec<Option<Rc<RefCell<Network>>>> = vec![None; shards];
        for (g, server) in servers.iter_mut().enumerate() {
            for (j, p) in server.parts.iter_mut().enumerate() {
                // PowerSGD (which reads the tensors) is validated unsharded.
                let tensors = if shards == 1 { model.tensors() } else { &[] };
                let initial = p.ps.weights().to_vec();
                let net = &mut nets[j];
                let mut ex =
                    GroupExchange::with_transport(cfg, &initial, tensors, (g, groups), |l| {
                        let net = net.get_or_insert_with(|| {
                            Rc::new(RefCell::new(Network::new(groups, initial.len(), l, link)))
                        });
                        Ok(SimTransport::new(net.clone(), g))
                    })?;
                ex.count_batches(batches.clone());
                p.exchange = Some(ex);
            }
        }
        Ok(nets.into_iter().flatten().collect())
    }

    /// The end of the exchange, at `wall_s`: every shard of every group flushes its unsent
    /// change, then drains everything (each network delivers it all), and checks its
    /// replica against every update its shard index sent. Returns the largest error and the
    /// bytes sent between the servers (`None`, 0: no exchange).
    pub fn finish(
        servers: &mut [GroupServer],
        nets: &Networks,
        wall_s: f64,
    ) -> Result<(Option<f64>, u64)> {
        if nets.is_empty() {
            return Ok((None, 0));
        }
        let (mut error, mut bytes) = (0.0f64, 0u64);
        for (j, net) in nets.iter().enumerate() {
            net.borrow_mut().set_now(wall_s);
            for s in servers.iter_mut() {
                let p = &mut s.parts[j];
                if let Some(ex) = p.exchange.as_mut() {
                    ex.flush(&mut p.ps)?;
                }
            }
            net.borrow_mut().set_now(f64::INFINITY);
            let mut all_sent: Vec<f32> = Vec::new();
            for s in servers.iter_mut() {
                let p = &mut s.parts[j];
                if let Some(ex) = p.exchange.as_mut() {
                    ex.drain_all(&mut p.ps)?;
                    let sent = ex.sent();
                    match all_sent.is_empty() {
                        true => all_sent = sent,
                        false => all_sent.iter_mut().zip(&sent).for_each(|(a, b)| *a += b),
                    }
                }
            }
            for s in servers.iter() {
                let p = &s.parts[j];
                if let Some(ex) = p.exchange.as_ref() {
                    error = error.max(ex.replica_error(&p.ps, &all_sent));
                    bytes += ex.bytes_sent();
                }
            }
        }
        Ok((Some(error), bytes))
    }
}
