//! `allreduce`: no server; every rank steps on the mean of every rank's gradient
//! (`crate::runtime::collective`).

use super::{Averaging, Mode, PlanRow, Roles, Simulation};
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

    fn plan_rows(&self) -> &'static [PlanRow] {
        const ROWS: &[PlanRow] = &[
            PlanRow::configured("allreduce"),
            PlanRow::balanced("allreduce-balanced"),
        ];
        ROWS
    }

    fn bench_variants(&self) -> &'static [&'static str] {
        &["allreduce", "allreduce-balanced"]
    }

    fn averaging(&self, _sync: &SyncConfig) -> Option<Averaging> {
        Some(Averaging::Gradients)
    }
}
