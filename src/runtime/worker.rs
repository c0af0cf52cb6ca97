//! The worker loop of the parameter-server modes (bsp, asp, ssp, gssp): compute a
//! gradient on the weights held, push it, wait for fresh weights, until told to stop. When
//! its server answers with a move (gssp regrouping), the worker takes its weights from the
//! new server instead.

use std::time::Instant;

use anyhow::Result;

use crate::comm::p2p::WorkerLink;
use crate::compute::backend::cpu::Cpu;
use crate::compute::backend::Backend;
use crate::compute::model::Trainable;
use crate::compute::pace::Pacer;
use crate::compute::workload::{ComputeStep, Corpus};
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
    /// Times a regroup moved this worker to another group's server.
    pub moves: u64,
}

impl WorkerStats {
    pub fn wait_fraction(&self) -> f64 {
        if self.wall_s > 0.0 {
            self.wait_s / self.wall_s
        } else {
            0.0
        }
    }
}

/// Fault injection for tests: `GSSP_FAULT_NAN_GRADIENT=RANK:ITERATION` makes the
/// parameter-server worker of world rank RANK push a gradient holding a NaN at its
/// iteration ITERATION (from 1), to check that its server stops the job naming both.
pub const NAN_FAULT_VAR: &str = "GSSP_FAULT_NAN_GRADIENT";

/// The iteration at which world rank `rank` injects a NaN, from the value of
/// [`NAN_FAULT_VAR`] (`None` when unset or meant for another rank).
pub fn nan_fault_for(value: Option<&str>, rank: usize) -> Result<Option<u64>, String> {
    let Some(value) = value else { return Ok(None) };
    let parsed = value.split_once(':').and_then(|(r, i)| {
        Some((
            r.trim().parse::<usize>().ok()?,
            i.trim().parse::<u64>().ok()?,
        ))
    });
    match parsed {
        Some((r, i)) if i >= 1 => Ok((r == rank).then_some(i)),
        _ => Err(format!(
            "{NAN_FAULT_VAR}: must be RANK:ITERATION (iteration >= 1), got {value:?}"
        )),
    }
}

/// Runs the worker until its server says stop; `nan_at`: see [`NAN_FAULT_VAR`].
pub fn work<B: Backend>(
    link: &mut WorkerLink,
    w: WorkerContext<'_, B>,
    nan_at: Option<u64>,
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
    let mut header = recv_weights(link, step, &mut weights_stage, &mut stats)?;
    stats.wait_s += t_first.elapsed().as_secs_f64();
    let mut clock = done;
    while !header.stop {
        let (loss, compute_s) = step.compute_paced(corpus, pacer)?;

        let t1 = Instant::now();
        let before = link.stats();
        clock += 1;
        if nan_at == Some(clock) {
            let mut grads = vec![0.0f32; step.net.num_params()];
            step.net.grads_to_host(&mut grads);
            let middle = grads.len() / 2;
            grads[middle] = f32::NAN;
            step.net.grads_from_host(&grads);
        }
        link.push(clock, loss, step.net.grads_on_host(&mut grads_stage))?;
        let comm_s = t1.elapsed().as_secs_f64();

        let t2 = Instant::now();
        header = recv_weights(link, step, &mut weights_stage, &mut stats)?;
        let wait_s = t2.elapsed().as_secs_f64();
        let after = link.stats();

        stats.iterations = clock;
        stats.compute_s += compute_s;
        stats.wait_s += wait_s;
        stats.comm_s += comm_s;
        log.record(&WorkerRow {
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
        })?;
    }
    link.finish()?;
    let s = link.stats();
    stats.bytes_sent = s.bytes_sent;
    stats.bytes_recv = s.bytes_received;
    stats.wall_s = start.elapsed().as_secs_f64();
    Ok(stats)
}

/// The next weights, following moves to other servers on the way.
fn recv_weights<B: Backend>(
    link: &mut WorkerLink,
    step: &mut ComputeStep<B>,
    stage: &mut Vec<f32>,
    stats: &mut WorkerStats,
) -> Result<crate::comm::p2p::WeightsHeader> {
    let mut header = step
        .net
        .write_params_on_host(stage, |w| link.recv_weights(w))?;
    while let Some(server) = header.moved_to {
        log::debug!("moved to the server at rank {server}");
        stats.moves += 1;
        link.switch_server(server)?;
        header = step
            .net
            .write_params_on_host(stage, |w| link.recv_weights(w))?;
    }
    Ok(header)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nan_fault_names_one_rank_and_iteration() {
        assert_eq!(nan_fault_for(None, 3), Ok(None));
        assert_eq!(nan_fault_for(Some("3:7"), 3), Ok(Some(7)));
        assert_eq!(nan_fault_for(Some(" 3 : 7 "), 3), Ok(Some(7)));
        assert_eq!(nan_fault_for(Some("3:7"), 2), Ok(None));
        for bad in ["", "3", "3:", "x:1", "3:0", "-1:2", "3:7:1"] {
            let err = nan_fault_for(Some(bad), 3).unwrap_err();
            assert!(
                err.starts_with("GSSP_FAULT_NAN_GRADIENT: must be RANK:ITERATION"),
                "{bad}: {err}"
            );
        }
    }
}
