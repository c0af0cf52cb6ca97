//! `localsgd`: no server; every rank takes `sync.localsgd.local_steps` steps on its own
//! replica, then the ranks average their replicas (`crate::runtime::collective`).

use super::{Averaging, Mode, PlanRow, Reports, Roles, Simulation};
use crate::config::{SyncConfig, SyncMode};

pub struct Localsgd;

impl Mode for Localsgd {
    fn mode(&self) -> SyncMode {
        SyncMode::Localsgd
    }

    fn roles(&self) -> Roles {
        Roles::Collective
    }

    fn simulation(&self) -> Simulation {
        Simulation::Collective { local_steps: true }
    }

    fn plan_rows(&self) -> &'static [PlanRow] {
        const ROWS: &[PlanRow] = &[
            PlanRow::configured("localsgd"),
            PlanRow::balanced("localsgd-balanced"),
        ];
        ROWS
    }

    fn bench_variants(&self) -> &'static [&'static str] {
        &["localsgd", "localsgd-balanced"]
    }

    fn averaging(&self, sync: &SyncConfig) -> Option<Averaging> {
        Some(Averaging::Parameters {
            every: sync.localsgd.local_steps as u64,
        })
    }

    /// The replicas after the final average.
    fn reports(&self) -> Reports {
        Reports {
            replica_error: true,
            ..Reports::default()
        }
    }
}
