//! `ssp`: one server applies each push at once, answering a worker only while it is at
//! most `sync.ssp.staleness` pushes ahead of the slowest.

use super::{Apply, Bound, Mode, PlanRow, Roles, Simulation};
use crate::config::{Staleness, SyncConfig, SyncMode};

pub struct Ssp;

impl Mode for Ssp {
    fn mode(&self) -> SyncMode {
        SyncMode::Ssp
    }

    fn roles(&self) -> Roles {
        Roles::Servers
    }

    fn simulation(&self) -> Simulation {
        Simulation::Servers { round: false }
    }

    fn plan_rows(&self) -> &'static [PlanRow] {
        const ROWS: &[PlanRow] = &[PlanRow::configured("ssp")];
        ROWS
    }

    fn bench_variants(&self) -> &'static [&'static str] {
        &["ssp"]
    }

    fn staleness(&self, sync: &SyncConfig) -> Staleness {
        Staleness::Bound(sync.ssp.staleness)
    }

    fn bound(&self) -> Bound {
        Bound::OfGroup
    }

    fn apply(&self, _sync: &SyncConfig) -> Apply {
        Apply::Immediate
    }

    fn overlap_refusal(&self, sync: &SyncConfig) -> Option<String> {
        super::bound_too_small("sync.ssp.staleness", sync.ssp.staleness)
    }

    fn shards_refusal(&self, _sync: &SyncConfig) -> Option<String> {
        None
    }
}
