//! `asp`: one server applies each push at once and answers at once (with
//! `optim.delay_compensation`, DC-ASGD).

use super::{Apply, Bound, Mode, PlanRow, Roles, Simulation};
use crate::config::{SyncConfig, SyncMode};

pub struct Asp;

impl Mode for Asp {
    fn mode(&self) -> SyncMode {
        SyncMode::Asp
    }

    fn roles(&self) -> Roles {
        Roles::Servers
    }

    fn simulation(&self) -> Simulation {
        Simulation::Servers { round: false }
    }

    /// asp, and DC-ASGD: asp with delay compensation.
    fn plan_rows(&self) -> &'static [PlanRow] {
        const ROWS: &[PlanRow] = &[
            PlanRow::configured("asp"),
            PlanRow::configured("asp-dc").delay_compensated(),
        ];
        ROWS
    }

    fn bench_variants(&self) -> &'static [&'static str] {
        &["asp", "asp-dc"]
    }

    fn bound(&self) -> Bound {
        Bound::Unbounded
    }

    fn apply(&self, _sync: &SyncConfig) -> Apply {
        Apply::Immediate
    }

    fn overlap_refusal(&self, _sync: &SyncConfig) -> Option<String> {
        None
    }

    fn shards_refusal(&self, _sync: &SyncConfig) -> Option<String> {
        None
    }
}
