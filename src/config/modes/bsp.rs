//! `bsp`: one server waits for every worker's push and steps on their mean.

use super::{Apply, Bound, Mode, Roles, Simulation};
use crate::config::{SyncConfig, SyncMode};

pub struct Bsp;

impl Mode for Bsp {
    fn mode(&self) -> SyncMode {
        SyncMode::Bsp
    }

    fn roles(&self) -> Roles {
        Roles::Servers
    }

    fn simulation(&self) -> Simulation {
        Simulation::Servers { round: true }
    }

    fn bound(&self) -> Bound {
        Bound::Lockstep
    }

    fn apply(&self, _sync: &SyncConfig) -> Apply {
        Apply::Round
    }
}
