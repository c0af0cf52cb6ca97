//! The parameter-server loop over nonblocking point-to-point messages, shared by the
//! single-server baselines (bsp, asp, ssp) and by every gssp group server.
//!
//! The loop takes whichever worker's push arrives first (a matched probe from any source,
//! `MPI_Mprobe` then `MPI_Mrecv`, in [`ServerLink::wait_push`]), never waiting for a
//! particular worker; applies it through [`ParamServer`]; lets its [`Peers`] (the exchange) talk to
//! other groups; and answers every worker the SSP rule allows.

use std::time::Instant;

use anyhow::Result;

use crate::checkpoint::{RankMeta, WEIGHTS};
use crate::comm::p2p::ServerLink;
use crate::comm::SubComm;
use crate::compute::optim;
use crate::config::Config;
use crate::protocol::param_server::ParamServer;
use crate::runtime::peers::{Meet, Peers};
use crate::runtime::regrouper::Regrouper;
use crate::runtime::saver::{self, Saver};
use crate::telemetry::clock::thread_cpu_s;
use crate::telemetry::{CsvLog, ServerRow, Snapshots};

/// Who a server talks to besides its workers: its peers, and the regrouping it takes part
/// in (gssp with `sync.gssp.regroup_every_s`).
pub struct Outside<'a, 'w> {
    pub peers: &'a mut dyn Peers,
    pub regroup: Option<&'a mut Regrouper<'w>>,
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
    /// Pushes this server applied before the checkpoint it resumed from (`None`: a fresh
    /// run).
    pub resumed_pushes: Option<u64>,
}

/// Serves until the run's epochs or time budget are used up and every worker has been
/// told to stop.
pub fn serve(
    link: &mut ServerLink,
    ps: &mut ParamServer,
    ctx: &ServeContext<'_>,
    outside: Outside<'_, '_>,
    log: &mut CsvLog<ServerRow>,
    snapshots: &mut Snapshots,
    saver: &mut Saver<'_, SubComm>,
) -> Result<ServeStats> {
    let cfg = ctx.cfg;
    let Outside {
        peers: exchange,
        mut regroup,
    } = outside;
    let workers = link.workers();
    let samples_per_push = cfg.optim.batch_size as f64 / ctx.train_len as f64;
    let mut ready = Vec::with_capacity(workers);
    let mut stats = ServeStats::default();
    // Pushes applied over the whole run (a resumed run counts those before its checkpoint).
    let before = ctx.resumed_pushes.unwrap_or(0);
    if ctx.resumed_pushes.is_some() {
        // Every worker waits for weights; the SSP bound says who gets them first.
        ps.release(&mut ready);
        link.send_weights(&ready, ps.version(), ps.weights(), |_| 0)?;
    } else {
        // Every worker of this group (a regrouping server has slots for the others too).
        let everyone: Vec<usize> = (0..workers).filter(|&w| !link.is_retired(w)).collect();
        link.send_weights(&everyone, ps.version(), ps.weights(), |_| 0)?;
        if let Some(r) = regroup.as_deref_mut() {
            r.sent(&everyone, ctx.start.elapsed().as_secs_f64());
        }
    }
    let mut stopping = false;
    let mut epoch = exchange.global_pushes(before) as f64 * samples_per_push;
    let mut shown =
        crate::telemetry::progress::Progress::new(cfg, ctx.train_len, ctx.show_progress);
    loop {
        let t_wait = Instant::now();
        let Some(push) = link.wait_push()? else { break };
        let (receive_s, receive_cpu_s) = (push.receive_s, push.receive_cpu_s);
        let recv_wait_s = (t_wait.elapsed().as_secs_f64() - receive_s).max(0.0);
        let (w, loss) = (push.worker, push.loss);
        if let Some(r) = regroup.as_deref_mut() {
            r.pushed(w, ctx.start.elapsed().as_secs_f64());
        }
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
        let progress = cfg.run.progress(epoch, ctx.start.elapsed().as_secs_f64());
        let lr = optim::lr_at(&cfg.optim, epoch, progress);
        let cpu_start = thread_cpu_s();
        let t_apply = Instant::now();
        let version_before = ps.version();
        let applied = ps.on_push(w, push.payload, lr);
        let apply_s = t_apply.elapsed().as_secs_f64();
        if let Some(r) = regroup.as_deref_mut() {
            r.after_push(w, link, ps, ctx.start.elapsed().as_secs_f64())?;
        }
        stats.pushes += 1;
        let own_pushes = before + stats.pushes;

        let cpu_exchange = thread_cpu_s();
        let t_exchange = Instant::now();
        let ratio = exchange.after_push(ps, own_pushes, epoch)?;
        let exchange_s = t_exchange.elapsed().as_secs_f64();
        stats.exchange_cpu_s += thread_cpu_s() - cpu_exchange;
        epoch = exchange.global_pushes(own_pushes) as f64 * samples_per_push;
        let time_s = ctx.start.elapsed().as_secs_f64();
        // The iteration a snapshot records is every group's pushes (gssp: as far as this
        // server knows), as the final evaluation counts every worker's iterations.
        let pushes = exchange.global_pushes(own_pushes);
        snapshots.maybe_take(time_s, epoch, pushes, ps.weights());
        shown.tick(epoch, time_s, loss);

        // Stop, or checkpoint, only after a completed step: in bsp every worker is then
        // waiting, so no partial round is left behind.
        let stepped = ps.version() > version_before;
        // A group whose members change finishes the change first (its workers are forming
        // their new communicator).
        let changing = regroup.as_deref().is_some_and(Regrouper::in_transition);
        stopping |= stepped && !changing && cfg.run.should_stop(epoch, time_s);
        if !stopping && stepped && saver.due(time_s) {
            match exchange.meet(time_s)? {
                Meet::Stop => stopping = true,
                Meet::Together { time_s } => {
                    let t = Instant::now();
                    exchange.quiesce(ps)?;
                    let quiet_s = t.elapsed().as_secs_f64();
                    let known = exchange.saved_state(own_pushes);
                    save(saver, ps, known, (own_pushes, epoch, time_s), snapshots)?;
                    if ctx.show_progress {
                        log::info!(
                            "checkpoint took {:.0} ms (quiet point {:.0} ms)",
                            1e3 * t.elapsed().as_secs_f64(),
                            1e3 * quiet_s
                        );
                    }
                }
            }
        } else if let Some(r) = regroup
            .as_deref_mut()
            .filter(|r| !stopping && stepped && r.due(time_s))
        {
            // Checkpoints and regrouping do not mix (validated), so a meeting is either.
            match exchange.meet(time_s)? {
                Meet::Stop => stopping = true,
                Meet::Together { time_s } => r.meet(exchange, link, ps, time_s)?,
            }
        }
        let t_send = Instant::now();
        if stopping {
            for v in 0..workers {
                if ps.clock().is_waiting(v) && !link.is_retired(v) {
                    link.send_stop(v, ps.version(), ps.last_staleness(v))?;
                    ps.retire(v);
                }
            }
        } else if !regroup.as_deref().is_some_and(Regrouper::in_transition) {
            ready.clear();
            ps.release(&mut ready);
            link.send_weights(&ready, ps.version(), ps.weights(), |w| ps.last_staleness(w))?;
            if let Some(r) = regroup.as_deref_mut() {
                r.sent(&ready, ctx.start.elapsed().as_secs_f64());
            }
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
                pushes: own_pushes,
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

/// Writes this server's part of a checkpoint at a quiet point: its replica, momentum,
/// version, workers' clocks, what the exchange knows ([`crate::runtime::peers::Exchange::saved_state`]) and its
/// snapshots; then own pushes (over the whole run), epoch, and the agreed training clock.
pub fn save(
    saver: &mut Saver<'_, SubComm>,
    ps: &ParamServer,
    (group_pushes, speed): (Vec<u64>, f64),
    (own_pushes, epoch, time_s): (u64, f64, f64),
    snapshots: &Snapshots,
) -> Result<()> {
    let (optimizer, optimizer_steps) = ps.optimizer().state();
    let meta = RankMeta {
        time_s,
        epoch,
        steps: own_pushes,
        version: ps.version(),
        worker_clocks: ps.clock().clocks().to_vec(),
        group_pushes,
        speed,
        evals: saver::snapshot_rows(snapshots),
        optimizer_steps,
    };
    let names = saver::snapshot_names(snapshots);
    let mut tensors = vec![(WEIGHTS, ps.weights())];
    tensors.extend(optimizer);
    for (name, (_, w)) in names.iter().zip(&snapshots.taken) {
        tensors.push((name.as_str(), w.as_slice()));
    }
    saver.save((time_s, epoch), &tensors, &meta)
}
