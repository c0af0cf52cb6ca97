//! GSSP between groups: speed-profiled grouping, and the asynchronous exchange of
//! (sparsified) updates between group servers through one-sided RMA, with GDTopK's
//! per-group upload ratio.
//!
//! Each server's window holds an inbox the size of the model and a telemetry area with
//! two slots per group (its speed in pushes/s and its applied-push count). Every
//! `inter_group_every` applied pushes a server:
//! 1. adds the parameter change its own group caused since the last exchange to its
//!    residual (the weights minus a copy taken right after the last drain: between
//!    exchanges only the own group's steps touch the weights),
//! 2. takes all of the residual (dense) or its top-k entries (sparse; the rest stays:
//!    error feedback),
//! 3. accumulates them into every peer's inbox under a shared lock and puts its speed and
//!    push count into every peer's telemetry,
//! 4. drains its own inbox into its weights under an exclusive lock on itself.
//!
//! No server waits for another group. At the end every server flushes its residual
//! densely, the servers meet at a barrier, drain their inboxes, and the replicas (now equal
//! up to float rounding) are averaged.

use anyhow::{Context, Result};

use crate::comm::rma::{LockKind, Window};
use crate::comm::{Collectives, Comm, SubComm};
use crate::compress::ratio::{k_for_ratio, upload_ratio, SpeedMeter};
use crate::compress::topk::{Residual, TopK};
use crate::config::{CompressionKind, Config, Grouping};
use crate::data::Dataset;
use crate::grouping::partition_by_speed;
use crate::hetero::Pacer;
use crate::metrics::{EvalRow, Snapshots};
use crate::sync::ps::ParamServer;
use crate::sync::run::Layout;
use crate::sync::server::Exchange;
use crate::train::ComputeStep;

/// Worker ranks of each group, and (profile) each worker's measured seconds per iteration.
pub type Grouped = (Vec<Vec<usize>>, Option<Vec<f64>>);

/// Snapshots (with their evaluation rows to fill) and the final model.
pub type Replicas = (Vec<(EvalRow, Vec<f32>)>, Option<Vec<f32>>);

/// Groups of worker ranks: from the config (`static`) or from measured speeds (`profile`:
/// every worker times `profile_iters` local iterations, compute plus emulated slowdown;
/// rank 0 partitions them exactly and broadcasts the result).
pub fn form_groups(
    comm: &Comm,
    cfg: &Config,
    layout: &Layout,
    step: &mut ComputeStep,
    train: &Dataset,
    pacer: &mut Pacer,
) -> Result<Grouped> {
    if cfg.sync.grouping == Grouping::Static {
        return Ok((cfg.sync.static_groups.clone(), None));
    }
    let is_worker = !layout.servers.contains(&comm.rank());
    let mut seconds = f64::NAN;
    if is_worker {
        // Calibration iterations first (no padding while calibrating), then the timed ones.
        for _ in 0..5 {
            let t = std::time::Instant::now();
            step.compute(train);
            pacer.sleep_pad(t.elapsed().as_secs_f64());
        }
        let t = std::time::Instant::now();
        for _ in 0..cfg.sync.profile_iters {
            let t0 = std::time::Instant::now();
            step.compute(train);
            pacer.sleep_pad(t0.elapsed().as_secs_f64());
        }
        seconds = t.elapsed().as_secs_f64() / cfg.sync.profile_iters as f64;
    }
    let times = comm.gather_f64(0, seconds)?;
    let mut text = Vec::new();
    if let Some(times) = times {
        let worker_ranks: Vec<usize> = layout.groups.iter().flatten().copied().collect();
        let worker_times: Vec<f64> = worker_ranks.iter().map(|&r| times[r]).collect();
        let parts =
            partition_by_speed(&worker_times, cfg.sync.groups).context("grouping by profile")?;
        let groups: Vec<Vec<usize>> = parts
            .iter()
            .map(|p| p.iter().map(|&i| worker_ranks[i]).collect())
            .collect();
        text = serde_json::to_vec(&(groups, worker_times))?;
    }
    comm.broadcast_bytes(0, &mut text)?;
    let (groups, times): (Vec<Vec<usize>>, Vec<f64>) =
        serde_json::from_slice(&text).context("layout broadcast")?;
    Ok((groups, Some(times)))
}

/// The inter-group exchange of one group server (an [`Exchange`] for the server loop).
pub struct GroupExchange<'c> {
    comm: &'c SubComm,
    window: Window,
    n: usize,
    groups: usize,
    me: usize,
    every: u64,
    dense: bool,
    cfg_ratio: (crate::config::RatioPolicy, f64, f64, f64),
    /// Weights right after the last drain.
    base: Vec<f32>,
    residual: Residual,
    topk: TopK,
    idx: Vec<u32>,
    vals: Vec<f32>,
    telemetry: Vec<f32>,
    speeds: Vec<f64>,
    peer_pushes: Vec<u64>,
    meter: SpeedMeter,
    last_exchange: std::time::Instant,
    last_pushes: u64,
    bytes_sent: u64,
    /// Sum of everything this group sent (f64, for the end-of-run check; sparse exchanges
    /// add only their k entries).
    sent_total: Vec<f64>,
    initial: Vec<f32>,
}

impl<'c> GroupExchange<'c> {
    /// Collective over the servers' communicator (creates the window).
    pub fn new(comm: &'c SubComm, cfg: &Config, initial: &[f32]) -> Result<Self> {
        let n = initial.len();
        let groups = comm.size();
        let window = Window::create(comm, n + 2 * groups)?;
        let c = &cfg.compression;
        Ok(GroupExchange {
            comm,
            window,
            n,
            groups,
            me: comm.rank(),
            every: cfg.sync.inter_group_every as u64,
            dense: c.kind == CompressionKind::Dense,
            cfg_ratio: (c.policy, c.ratio, c.ratio_min, c.warmup_epochs),
            base: initial.to_vec(),
            residual: Residual::new(n),
            topk: TopK::new(),
            idx: Vec::with_capacity(n),
            vals: Vec::with_capacity(n),
            telemetry: vec![0.0; 2],
            speeds: vec![0.0; groups],
            peer_pushes: vec![0; groups],
            meter: SpeedMeter::new(c.speed_ema)?,
            last_exchange: std::time::Instant::now(),
            last_pushes: 0,
            bytes_sent: 0,
            sent_total: vec![0.0; n],
            initial: initial.to_vec(),
        })
    }

    pub fn bytes_sent(&self) -> u64 {
        self.bytes_sent
    }

    /// Moves the own group's change since the last drain into the residual (one pass).
    fn collect_own_change(&mut self, weights: &[f32]) -> Result<()> {
        self.residual.add_difference(weights, &self.base)?;
        Ok(())
    }

    /// Sends `idx`/`vals` (sparse) or `vals` (dense) plus telemetry to every peer.
    fn send_to_peers(&mut self, sparse: bool, own_pushes: u64) -> Result<()> {
        self.telemetry[0] = self.meter.speed() as f32;
        self.telemetry[1] = own_pushes as f32;
        // One committed datatype for all peers.
        let scatter = if sparse {
            Some(self.window.scatter(&self.idx)?)
        } else {
            None
        };
        for peer in (0..self.groups).filter(|&p| p != self.me) {
            let mut epoch = self.window.lock(peer, LockKind::Shared)?;
            match &scatter {
                Some(scatter) => epoch.accumulate_scattered(scatter, &self.vals)?,
                None => epoch.accumulate_sum_dense(0, &self.vals)?,
            }
            epoch.put(self.n + 2 * self.me, &self.telemetry)?;
            epoch.unlock()?;
            let per_value = if sparse { 8 } else { 4 };
            self.bytes_sent += (self.vals.len() * per_value + 8) as u64;
        }
        if sparse {
            for (&i, &v) in self.idx.iter().zip(&self.vals) {
                self.sent_total[i as usize] += v as f64;
            }
        } else {
            for (t, &v) in self.sent_total.iter_mut().zip(&self.vals) {
                *t += v as f64;
            }
        }
        Ok(())
    }

    /// Adds the inbox to the weights, zeroes it and takes the new base (one pass), and reads
    /// the peers' telemetry.
    fn drain(&mut self, weights: &mut [f32]) -> Result<()> {
        let mut local = self.window.lock_local()?;
        let (inbox, telemetry) = local.split_at_mut(self.n);
        for ((w, x), b) in weights.iter_mut().zip(inbox.iter_mut()).zip(&mut self.base) {
            *w += *x;
            *x = 0.0;
            *b = *w;
        }
        for g in (0..self.groups).filter(|&g| g != self.me) {
            self.speeds[g] = telemetry[2 * g] as f64;
            self.peer_pushes[g] = telemetry[2 * g + 1] as u64;
        }
        local.unlock()?;
        Ok(())
    }

    /// End of training: flush the residual densely, meet the other servers, drain, and
    /// check that the replica equals the initial weights plus every group's updates.
    pub fn finish(&mut self, ps: &mut ParamServer) -> Result<f64> {
        self.collect_own_change(ps.weights())?;
        self.residual.take_dense(&mut self.vals)?;
        self.send_to_peers(false, self.last_pushes)?;
        self.comm.barrier()?;
        self.drain(ps.weights_mut())?;
        self.comm.barrier()?;
        // Nothing lost: replica - initial must equal the sum of everything all groups sent,
        // final flushes included. A group's own changes reach its replica directly, not
        // through what it sent, so anything its residual or top-k dropped shows up here.
        let mut total: Vec<f32> = self.sent_total.iter().map(|&x| x as f32).collect();
        self.comm.allreduce_sum_f32_in_place(&mut total)?;
        let mut max_err = 0.0f64;
        let mut max_ref = 0.0f64;
        for ((&w, &i), &t) in ps.weights().iter().zip(&self.initial).zip(&total) {
            max_err = max_err.max(((w - i) as f64 - t as f64).abs());
            max_ref = max_ref.max((t as f64).abs());
        }
        log::info!(
            "group {}: replica - initial vs sum of all groups' sent updates: max abs difference {max_err:.3e} (updates up to {max_ref:.3e})",
            self.me
        );
        Ok(max_err)
    }
}

impl Exchange for GroupExchange<'_> {
    fn after_push(&mut self, ps: &mut ParamServer, own_pushes: u64, epoch: f64) -> Result<f64> {
        if !own_pushes.is_multiple_of(self.every) {
            return Ok(0.0);
        }
        let dt = self.last_exchange.elapsed().as_secs_f64();
        self.meter.update(own_pushes - self.last_pushes, dt);
        self.last_exchange = std::time::Instant::now();
        self.last_pushes = own_pushes;
        self.speeds[self.me] = self.meter.speed();

        self.collect_own_change(ps.weights())?;
        let ratio = if self.dense {
            self.residual
                .take_dense(&mut self.vals)
                .map_err(|e| e.in_context(self.me, own_pushes))?;
            1.0
        } else {
            let (policy, target, min, warmup) = self.cfg_ratio;
            let ratio = upload_ratio(
                policy,
                target,
                min,
                warmup,
                epoch,
                self.speeds[self.me],
                &self.speeds,
            );
            let k = k_for_ratio(self.n, ratio);
            self.residual
                .take_sparse(k, &mut self.topk, &mut self.idx, &mut self.vals)
                .map_err(|e| e.in_context(self.me, own_pushes))?;
            ratio
        };
        self.send_to_peers(!self.dense, own_pushes)?;
        self.drain(ps.weights_mut())?;
        Ok(ratio)
    }

    fn global_pushes(&self, own_pushes: u64) -> u64 {
        own_pushes
            + self
                .peer_pushes
                .iter()
                .enumerate()
                .filter(|&(g, _)| g != self.me)
                .map(|(_, &p)| p)
                .sum::<u64>()
    }
}

/// Averages the group servers' replicas: the final weights and each snapshot index that
/// every server took (collective over the servers' communicator; rank 0 of it gets them).
pub fn average_replicas(
    comm: &SubComm,
    snapshots: Snapshots,
    final_weights: Option<Vec<f32>>,
) -> Result<Replicas> {
    let groups = comm.size() as f32;
    let count = comm.allreduce_min_f64(snapshots.taken.len() as f64)? as usize;
    let mut taken = snapshots.taken;
    taken.truncate(count);
    for (_, w) in &mut taken {
        comm.allreduce_sum_f32_in_place(w)?;
        w.iter_mut().for_each(|x| *x /= groups);
    }
    let mut final_weights = final_weights.context("group server holds no model")?;
    comm.allreduce_sum_f32_in_place(&mut final_weights)?;
    final_weights.iter_mut().for_each(|x| *x /= groups);
    Ok((taken, Some(final_weights)))
}
