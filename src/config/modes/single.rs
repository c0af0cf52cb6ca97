//! `single`: one process trains alone, with no MPI communication
//! (`crate::runtime::single`).

use super::{Mode, Roles, Simulation};
use crate::config::SyncMode;

pub struct Single;

impl Mode for Single {
    fn mode(&self) -> SyncMode {
        SyncMode::Single
    }

    fn roles(&self) -> Roles {
        Roles::Single
    }

    /// A collective of one rank, whose allreduce costs nothing.
    fn simulation(&self) -> Simulation {
        Simulation::Collective { local_steps: false }
    }
}
