//! What a server does besides serving its own workers ([`Exchange`]): nothing for the
//! single-server modes ([`NoExchange`]), the inter-group exchange and the meetings of the
//! group servers for gssp (`runtime::exchange`).

use anyhow::Result;

use crate::protocol::param_server::ParamServer;

/// What a server does besides serving its own workers: nothing for the single-server
/// modes, the inter-group exchange for gssp.
pub trait Exchange {
    /// Called after each applied push with this server's push count; returns the upload
    /// ratio it used (0 when it did not exchange).
    fn after_push(&mut self, ps: &mut ParamServer, own_pushes: u64, epoch: f64) -> Result<f64>;
    /// Pushes applied by all groups together, as far as this server knows.
    fn global_pushes(&self, own_pushes: u64) -> u64;
    /// Agrees with the other group servers on a checkpoint at `time_s` (collective among
    /// them; [`Meet::Stop`] when one of them is already finishing).
    fn meet(&mut self, time_s: f64) -> Result<Meet>;
    /// Brings the replicas to a quiet point: nothing unsent, nothing in flight.
    fn quiesce(&mut self, ps: &mut ParamServer) -> Result<()>;
    /// What of the exchange a checkpoint saves: every group's pushes as known here (this
    /// group's are `own_pushes`), and this server's measured speed.
    fn saved_state(&self, own_pushes: u64) -> (Vec<u64>, f64);
    /// Every server's `row`, in group order (collective among them, after a meeting).
    fn share(&mut self, row: &[f64]) -> Result<Vec<Vec<f64>>>;
}

/// What the group servers agreed at a meeting.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Meet {
    /// Everyone is here and training: take the checkpoint (or regroup) at the latest of
    /// their clocks.
    Together { time_s: f64 },
    /// A server is finishing: stop training too (its final flush needs everyone).
    Stop,
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
    fn meet(&mut self, time_s: f64) -> Result<Meet> {
        Ok(Meet::Together { time_s })
    }
    fn quiesce(&mut self, _: &mut ParamServer) -> Result<()> {
        Ok(())
    }
    fn saved_state(&self, own_pushes: u64) -> (Vec<u64>, f64) {
        (vec![own_pushes], 0.0)
    }
    fn share(&mut self, row: &[f64]) -> Result<Vec<Vec<f64>>> {
        Ok(vec![row.to_vec()])
    }
}
