//! The worker loop of the parameter-server modes (bsp, asp, ssp, gssp): compute a
//! gradient on the weights held, push it, wait for fresh weights, until told to stop. When
//! its server answers with a move (gssp regrouping), the worker takes its weights from the
//! new server instead.
//!
//! # Computing a step ahead (`sync.overlap`)
//! Without overlap a worker's round trip (its push, the server's queue and apply, the
//! reply) is time it does not compute. With it, a worker that has pushed step c computes
//! step c + 1 on the weights it holds (those of reply c - 1) while push c and reply c
//! travel, and waits only for reply c, which its server sends once the SSP rule allows;
//! then it pushes step c + 1 and computes c + 2 on reply c. The reply lands in the link's
//! receive buffer while the model computes on its own copy: two buffers, no extra copy.
//!
//! The step ahead spends one step of the staleness bound s: the server releases a worker
//! only while it is at most s - 1 pushes ahead of the slowest
//! ([`crate::config::modes::release_gate`]), so a worker starts step c + 1 only while
//! c - c_min <= s, as without overlap, and no step is computed on weights missing more of
//! the slowest worker's pushes than s allows. A step computed ahead still reads older
//! weights than one computed after its reply: it misses the worker's own last push and
//! whatever the others pushed during that step, so its staleness in versions grows by
//! about a step of every worker (docs/results.md (o)); its server counts it from the reply
//! the step was computed on. When the reply says stop, the step computed ahead is dropped.

use std::time::Instant;

use anyhow::Result;

use crate::comm::Comm;
use crate::compute::backend::cpu::Cpu;
use crate::compute::backend::Backend;
use crate::compute::model::Trainable;
use crate::compute::pace::Pacer;
use crate::compute::workload::{ComputeStep, Corpus};
use crate::runtime::faults::Faults;
use crate::runtime::messages::{WeightsHeader, WorkerMessages};
use crate::runtime::shard_links::ShardLinks;
use crate::telemetry::{WorkerLog, WorkerRow};

/// What a worker computes with: its model (on its backend: the CPU, or its GPU) and data
/// shard, its emulated speed, its log.
pub struct WorkerContext<'a, B: Backend = Cpu> {
    pub step: &'a mut ComputeStep<B>,
    pub corpus: &'a Corpus,
    pub pacer: &'a mut Pacer,
    pub log: &'a mut WorkerLog,
    /// Common time origin of all ranks (taken right after a barrier; a resumed run's lies
    /// its checkpoint's training clock back).
    pub start: Instant,
    /// Iterations done before the checkpoint a run resumed from (0 for a fresh run).
    pub done: u64,
}

/// Totals of one worker's run, gathered into the summary.
#[derive(Debug, Clone, Copy, Default)]
pub struct WorkerStats {
    pub iterations: u64,
    pub wall_s: f64,
    pub compute_s: f64,
    pub wait_s: f64,
    pub comm_s: f64,
    pub bytes_sent: u64,
    pub bytes_recv: u64,
    /// Times a regroup changed this worker's group (moved it, or changed its members).
    pub regroups: u64,
}

impl WorkerStats {
    /// Counts one iteration's `row` into the totals and writes it to `log`.
    pub fn record(&mut self, log: &mut WorkerLog, row: WorkerRow) -> Result<()> {
        self.iterations = row.iteration;
        self.compute_s += row.compute_s;
        self.wait_s += row.wait_s;
        self.comm_s += row.comm_s;
        self.bytes_sent += row.bytes_sent;
        self.bytes_recv += row.bytes_recv;
        log.record(&row)
    }

    pub fn wait_fraction(&self) -> f64 {
        if self.wall_s > 0.0 {
            self.wait_s / self.wall_s
        } else {
            0.0
        }
    }
}

/// Runs the worker until its server says stop, with `faults` injected (none in a real
/// run); with `ahead` (`sync.overlap`) each step is computed while the push before it and
/// its reply travel. A regroup moves its link to the communicator of its new group,
/// formed from `world`.
pub fn work<B: Backend>(
    link: &mut ShardLinks,
    world: &Comm,
    w: WorkerContext<'_, B>,
    (faults, ahead): (Faults, bool),
) -> Result<WorkerStats> {
    let WorkerContext {
        step,
        corpus,
        pacer,
        log,
        start,
        done,
    } = w;
    let mut stats = WorkerStats::default();
    // Host copies of the gradient and the weights, used on a GPU only.
    let (mut grads_stage, mut weights_stage) = (Vec::new(), Vec::new());
    let t_first = Instant::now();
    let mut header = recv_weights(link, world, step, &mut weights_stage, &mut stats)?;
    stats.wait_s += t_first.elapsed().as_secs_f64();
    let mut clock = done;
    // The step computed ahead, while the last push travelled: its loss and seconds.
    let mut computed: Option<(f32, f64)> = None;
    while !header.stop {
        let (loss, compute_s) = match computed.take() {
            Some(c) => c,
            None => step.compute_paced(corpus, pacer)?,
        };

        let t1 = Instant::now();
        let before = link.stats();
        clock += 1;
        faults.before_push(clock, step);
        link.push(clock, loss, step.net.grads_on_host(&mut grads_stage))?;
        let comm_s = t1.elapsed().as_secs_f64();

        if ahead {
            // The push left the model's gradient for the link's buffer; the reply lands
            // in the link's own buffer until `recv_weights` copies it in.
            computed = Some(step.compute_paced(corpus, pacer)?);
        }
        let t2 = Instant::now();
        header = recv_weights(link, world, step, &mut weights_stage, &mut stats)?;
        let wait_s = t2.elapsed().as_secs_f64();
        let after = link.stats();

        stats.record(
            log,
            WorkerRow {
                time_s: start.elapsed().as_secs_f64(),
                epoch: step.epoch(),
                iteration: clock,
                compute_s,
                wait_s,
                comm_s,
                bytes_sent: after.bytes_sent - before.bytes_sent,
                bytes_recv: after.bytes_received - before.bytes_received,
                staleness: header.staleness,
                loss,
                lr: None,
                batch: step.batch(),
            },
        )?;
    }
    finish_link(link, stats, start)
}

/// Ends the worker's side of `link` and completes `stats` with its bytes and the wall
/// time since `start`.
pub(crate) fn finish_link(
    link: &mut ShardLinks,
    mut stats: WorkerStats,
    start: Instant,
) -> Result<WorkerStats> {
    link.finish()?;
    let s = link.stats();
    stats.bytes_sent = s.bytes_sent;
    stats.bytes_recv = s.bytes_received;
    stats.wall_s = start.elapsed().as_secs_f64();
    Ok(stats)
}

/// The next weights. A Regroup message on the way moves the link to the worker's new
/// group: every member forms its communicator (one per server shard), where the server
/// is rank 0.
pub(crate) fn recv_weights<B: Backend>(
    link: &mut ShardLinks,
    world: &Comm,
    step: &mut ComputeStep<B>,
    stage: &mut Vec<f32>,
    stats: &mut WorkerStats,
) -> Result<WeightsHeader> {
    let mut header = step
        .net
        .write_params_on_host(stage, |w| link.recv_weights(w))?;
    while header.regroup.is_some() {
        link.regroup(world)?;
        stats.regroups += 1;
        header = step
            .net
            .write_params_on_host(stage, |w| link.recv_weights(w))?;
    }
    let params = step.net.num_params();
    if !header.stop && header.len != params {
        anyhow::bail!(
            "the server sent {} weights at version {}; the model has {params}",
            header.len,
            header.version
        );
    }
    Ok(header)
}
