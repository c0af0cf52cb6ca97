//! `async-localsgd` (Liu et al. 2024): one server; each worker takes local steps on its
//! own replica (in proportion to its profiled speed with `dynamic_local_steps`) and pushes
//! the change, which the server applies at once through Delayed Nesterov
//! (`[sync.async_localsgd]`).

use super::{Apply, Bound, LocalSteps, Mode, PlanRow, Preparation, Reports, Roles, Simulation};
use crate::config::{OuterConfig, SyncConfig, SyncMode};

pub struct AsyncLocalsgd;

impl Mode for AsyncLocalsgd {
    fn mode(&self) -> SyncMode {
        SyncMode::AsyncLocalsgd
    }

    fn roles(&self) -> Roles {
        Roles::Servers
    }

    fn simulation(&self) -> Simulation {
        Simulation::Servers { round: false }
    }

    fn plan_rows(&self) -> &'static [PlanRow] {
        const ROWS: &[PlanRow] = &[PlanRow::configured("async-localsgd")];
        ROWS
    }

    fn bench_variants(&self) -> &'static [&'static str] {
        &["async-localsgd"]
    }

    fn bound(&self) -> Bound {
        Bound::Unbounded
    }

    fn apply(&self, _sync: &SyncConfig) -> Apply {
        Apply::Delta
    }

    fn outer(&self, sync: &SyncConfig) -> Option<OuterConfig> {
        Some(sync.async_localsgd.outer())
    }

    fn local_steps(&self, sync: &SyncConfig) -> Option<LocalSteps> {
        let a = &sync.async_localsgd;
        Some(LocalSteps {
            per_push: a.local_steps,
            dynamic: a.dynamic_local_steps,
        })
    }

    fn preparation(&self) -> Preparation {
        Preparation::LocalSteps
    }

    fn reports(&self) -> Reports {
        Reports {
            outer_steps: true,
            ..Reports::default()
        }
    }
}
