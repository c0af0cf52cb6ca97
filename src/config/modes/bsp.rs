//! `bsp`: one server waits for every worker's push and steps on their mean.

use super::{Apply, Bound, Mode, PlanRow, Roles, Simulation};
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

    fn plan_rows(&self) -> &'static [PlanRow] {
        const ROWS: &[PlanRow] = &[
            PlanRow::configured("bsp"),
            PlanRow::balanced("bsp-balanced"),
        ];
        ROWS
    }

    fn bench_variants(&self) -> &'static [&'static str] {
        &["bsp", "bsp-balanced"]
    }

    fn bound(&self) -> Bound {
        Bound::Lockstep
    }

    fn apply(&self, _sync: &SyncConfig) -> Apply {
        Apply::Round
    }
}
