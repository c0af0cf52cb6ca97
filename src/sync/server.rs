//! The parameter-server loop over nonblocking point-to-point messages, shared by the
//! single-server baselines (bsp, asp, ssp) and by every gssp group server.
//!
//! The loop takes whichever worker's push arrives first (a matched probe from any source,
//! `MPI_Mprobe` then `MPI_Mrecv`, in [`ServerLink::wait_push`]), never waiting for a
//! particular worker; applies it through [`ParamServer`]; lets the [`Exchange`] hook talk to
//! other groups; and answers every worker the SSP rule allows.

use std::time::Instant;

use anyhow::Result;

use crate::comm::p2p::ServerLink;
use crate::config::Config;
use crate::metrics::{thread_cpu_s, CsvLog, ServerRow, Snapshots};
use crate::optim;
use crate::sync::ps::ParamServer;
use crate::train::{run_progress, should_stop};

/// What a server does besides serving its own workers: nothing for the single-server
/// modes, the inter-group exchange for gssp.
pub trait Exchange {
    /// Called after each applied push with this server's push count; returns the upload
    /// ratio it used (0 when it did not exchange).
    fn after_push(&mut self, ps: &mut ParamServer, own_pushes: u64, epoch: f64) -> Result<f64>;
    /// Pushes applied by all groups together, as far as this server knows.
    fn global_pushes(&self, own_pushes: u64) -> u64;
}

/// The single-server modes: no peers.
pub struct NoExchange;

impl Exchange for NoExchange {
    fn after_push(&mut self, _: &mut ParamServer, _: u64, _: f64) -> Result<f64> {
        Ok(0.0)
    }
    fn global_pushes(&self, own_pushes: u64) -> u64 {
        own_pushes
    }
}

/// Totals of one server's run.
#[derive(Debug, Clone, Copy, Default)]
pub struct ServeStats {
    pub pushes: u64,
    pub epoch: f64,
    pub wall_s: f64,
    /// Waiting for a push to arrive (`MPI_Mprobe`).
    pub recv_wait_s: f64,
    /// Copying arrived pushes into the server's buffers (`MPI_Mrecv`).
    pub receive_s: f64,
    pub apply_s: f64,
    pub send_s: f64,
    pub exchange_s: f64,
    /// Pushes after which the server exchanged with its peers (gssp).
    pub exchanges: u64,
    /// Sum of the staleness of every applied push.
    pub staleness_sum: u64,
    /// Thread CPU seconds from receiving each push to answering the workers (exchange and
    /// snapshots included), and of the exchange alone.
    pub busy_cpu_s: f64,
    pub exchange_cpu_s: f64,
}

impl ServeStats {
    /// Seconds the server worked: receiving and applying pushes, answering workers,
    /// exchanging.
    pub fn busy_s(&self) -> f64 {
        self.receive_s + self.apply_s + self.send_s + self.exchange_s
    }
}

/// Everything the loop needs besides the link and the update rule.
pub struct ServeContext<'a> {
    pub cfg: &'a Config,
    pub train_len: usize,
    /// Common time origin of all ranks (taken right after a barrier).
    pub start: Instant,
    /// Whether this server shows the run's progress (world rank 0).
    pub show_progress: bool,
    /// World rank of each of this server's workers, for error messages.
    pub worker_ranks: &'a [usize],
}

/// Serves until the run's epochs or time budget are used up and every worker has been
/// told to stop.
pub fn serve(
    link: &mut ServerLink,
    ps: &mut ParamServer,
    ctx: &ServeContext<'_>,
    exchange: &mut dyn Exchange,
    log: &mut CsvLog<ServerRow>,
    snapshots: &mut Snapshots,
) -> Result<ServeStats> {
    let cfg = ctx.cfg;
    let workers = link.workers();
    let samples_per_push = cfg.optim.batch_size as f64 / ctx.train_len as f64;
    let mut ready = Vec::with_capacity(workers);
    let mut stats = ServeStats::default();
    let everyone: Vec<usize> = (0..workers).collect();
    link.send_weights(&everyone, ps.version(), ps.weights(), |_| 0)?;
    let mut stopping = false;
    let mut epoch = 0.0;
    let mut shown = crate::progress::Progress::new(cfg, ctx.train_len, ctx.show_progress);
    loop {
        let t_wait = Instant::now();
        let Some(push) = link.wait_push()? else { break };
        let (receive_s, receive_cpu_s) = (push.receive_s, push.receive_cpu_s);
        let recv_wait_s = (t_wait.elapsed().as_secs_f64() - receive_s).max(0.0);
        let (w, loss) = (push.worker, push.loss);
        let rank = ctx.worker_ranks.get(w).copied().unwrap_or(w);
        if !loss.is_finite() {
            anyhow::bail!(
                "worker {w} (rank {rank}) pushed a non-finite loss ({loss}) at push {}; lower optim.lr (now {})",
                stats.pushes,
                cfg.optim.lr
            );
        }
        // A NaN or infinity anywhere makes the sum non-finite: one cheap pass, and the
        // search for the entry only when it fails. Applied, it would poison every replica.
        if !push.payload.iter().sum::<f32>().is_finite() {
            let what = match push.payload.iter().position(|v| !v.is_finite()) {
                Some(i) => format!("entry {i} is {}", push.payload[i]),
                None => "its entries overflow when summed".to_string(),
            };
            anyhow::bail!(
                "worker {w} (rank {rank}) pushed a non-finite gradient ({what}) at its iteration {}; lower optim.lr (now {})",
                push.clock,
                cfg.optim.lr
            );
        }
        // Every push is applied, also one that arrives after the stop decision (the
        // worker computed it and counts it), so no work is lost.
        let progress = run_progress(cfg, epoch, ctx.start.elapsed().as_secs_f64());
        let lr = optim::lr_at(&cfg.optim, epoch, progress);
        let cpu_start = thread_cpu_s();
        let t_apply = Instant::now();
        let version_before = ps.version();
        let applied = ps.on_push(w, push.payload, lr);
        let apply_s = t_apply.elapsed().as_secs_f64();
        stats.pushes += 1;

        let cpu_exchange = thread_cpu_s();
        let t_exchange = Instant::now();
        let ratio = exchange.after_push(ps, stats.pushes, epoch)?;
        let exchange_s = t_exchange.elapsed().as_secs_f64();
        stats.exchange_cpu_s += thread_cpu_s() - cpu_exchange;
        epoch = exchange.global_pushes(stats.pushes) as f64 * samples_per_push;
        let time_s = ctx.start.elapsed().as_secs_f64();
        snapshots.maybe_take(time_s, epoch, stats.pushes, ps.weights());
        shown.tick(epoch, time_s, loss);

        let t_send = Instant::now();
        // Stop only after a completed step: in bsp every worker is then waiting, so no
        // partial round is left behind.
        let stepped = ps.version() > version_before;
        stopping |= stepped && should_stop(cfg, epoch, time_s);
        if stopping {
            for v in 0..workers {
                if ps.clock().is_waiting(v) && !link.is_retired(v) {
                    link.send_stop(v, ps.version(), ps.last_staleness(v))?;
                    ps.retire(v);
                }
            }
        } else {
            ready.clear();
            ps.release(&mut ready);
            link.send_weights(&ready, ps.version(), ps.weights(), |w| ps.last_staleness(w))?;
        }
        let send_s = t_send.elapsed().as_secs_f64();
        stats.busy_cpu_s += receive_cpu_s + (thread_cpu_s() - cpu_start);
        stats.recv_wait_s += recv_wait_s;
        stats.receive_s += receive_s;
        stats.apply_s += apply_s;
        stats.send_s += send_s;
        stats.exchange_s += exchange_s;
        stats.exchanges += u64::from(ratio > 0.0);
        stats.staleness_sum += applied.staleness;
        if stats.pushes.is_multiple_of(cfg.run.log_every as u64) {
            log.push(&ServerRow {
                time_s,
                epoch,
                pushes: stats.pushes,
                version: ps.version(),
                worker: w,
                staleness: applied.staleness,
                clock_spread: ps.clock().spread(),
                recv_wait_s,
                receive_s,
                apply_s,
                send_s,
                exchange_s,
                loss,
                lr: applied.lr,
                ratio,
            })?;
        }
    }
    shown.finish();
    link.finish()?;
    stats.epoch = epoch;
    stats.wall_s = ctx.start.elapsed().as_secs_f64();
    Ok(stats)
}
