//! `allreduce`: no server; every rank steps on the mean of every rank's gradient
//! (`crate::runtime::collective`).

use super::{Averaging, Mode, Roles, Simulation};
use crate::config::{SyncConfig, SyncMode};

pub struct Allreduce;

impl Mode for Allreduce {
    fn mode(&self) -> SyncMode {
        SyncMode::Allreduce
    }

    fn roles(&self) -> Roles {
        Roles::Collective
    }

    fn simulation(&self) -> Simulation {
        Simulation::Collective { local_steps: false }
    }

    fn averaging(&self, _sync: &SyncConfig) -> Option<Averaging> {
        Some(Averaging::Gradients)
    }
}
