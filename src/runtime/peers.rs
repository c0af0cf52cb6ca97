//! What a server does besides serving its own workers: after each push, its part of the
//! exchange between groups ([`Exchange`]); now and then, a meeting of all the group
//! servers, for a checkpoint, a regroup or the end ([`Meetings`]). The single-server modes
//! have neither ([`NoPeers`]); a gssp group server has both (`runtime::exchange`).

use anyhow::Result;

use crate::protocol::param_server::ParamServer;
use crate::telemetry::pace::Slowest;

/// A server's part in the exchange, push by push.
pub trait Exchange {
    /// Called after each applied push with this server's push count, the run's epochs as
    /// it knows them and its training clock; returns what it exchanged (all zero when it
    /// did not).
    fn after_push(
        &mut self,
        ps: &mut ParamServer,
        own_pushes: u64,
        at: (f64, f64),
    ) -> Result<Exchanged>;
    /// Pushes applied by all groups together, as far as this server knows.
    fn global_pushes(&self, own_pushes: u64) -> u64;
    /// What of the exchange a checkpoint saves (this group's pushes are `own_pushes`).
    fn saved_state(&self, own_pushes: u64) -> SavedPeers;
    /// Notes this server's slowest worker, told to the peers with its next exchange.
    fn note_slowest(&mut self, _own: Option<Slowest>) {}
    /// The run's slowest worker as far as this server knows (`own`: its own slowest).
    fn slowest_of_run(&self, own: Option<Slowest>) -> Option<Slowest> {
        own
    }
}

/// The meetings of the group servers (each method collective among them).
pub trait Meetings {
    /// Agrees with the other group servers on a meeting at `time_s` ([`Meet::Stop`] when
    /// one of them is already finishing).
    fn meet(&mut self, time_s: f64) -> Result<Meet>;
    /// Brings the replicas to a quiet point: nothing unsent, nothing in flight.
    fn quiesce(&mut self, ps: &mut ParamServer) -> Result<()>;
    /// Every server's `row`, in group order (after a meeting).
    fn share(&mut self, row: &[f64]) -> Result<Vec<Vec<f64>>>;
}

/// What one push's part in the exchange did, for the server's log row.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Exchanged {
    /// The upload ratio it used (0 when it did not exchange).
    pub ratio: f64,
    /// Bytes it put into the peers' windows (0: nothing sent).
    pub sent_bytes: u64,
    /// The groups whose updates it applied, bit g for group g.
    pub drained_from: u64,
}

/// What of the exchange a checkpoint saves.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SavedPeers {
    /// Every group's pushes as known here.
    pub group_pushes: Vec<u64>,
    /// This server's measured speed, pushes per second.
    pub speed: f64,
    /// The outer optimizer's deltas taken and its buffers by name (none without one).
    pub outer_steps: u64,
    pub outer: Vec<(&'static str, Vec<f32>)>,
}

/// A server's peers: the exchange and the meetings, one object.
pub trait Peers: Exchange + Meetings {}

impl<T: Exchange + Meetings> Peers for T {}

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
pub struct NoPeers;

impl Exchange for NoPeers {
    fn after_push(&mut self, _: &mut ParamServer, _: u64, _: (f64, f64)) -> Result<Exchanged> {
        Ok(Exchanged::default())
    }
    fn global_pushes(&self, own_pushes: u64) -> u64 {
        own_pushes
    }
    fn saved_state(&self, own_pushes: u64) -> SavedPeers {
        SavedPeers {
            group_pushes: vec![own_pushes],
            ..SavedPeers::default()
        }
    }
}

impl Meetings for NoPeers {
    fn meet(&mut self, time_s: f64) -> Result<Meet> {
        Ok(Meet::Together { time_s })
    }
    fn quiesce(&mut self, _: &mut ParamServer) -> Result<()> {
        Ok(())
    }
    fn share(&mut self, row: &[f64]) -> Result<Vec<Vec<f64>>> {
        Ok(vec![row.to_vec()])
    }
}
