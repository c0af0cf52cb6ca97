//! `gssp`: G group servers, each serving a group of workers of similar speed under SSP
//! with its own bound, exchanging their groups' updates with each other through one-sided
//! MPI (`[sync.gssp]`; docs/design.md). With `local_steps` > 1 workers push the change
//! their local steps made.

use super::{
    Apply, Bound, LocalSteps, Mode, PlanRow, Preparation, Regrouping, Reports, Roles, ServerCount,
    Simulation,
};
use crate::config::{Grouping, Staleness, SyncConfig, SyncMode};

pub struct Gssp;

impl Mode for Gssp {
    fn mode(&self) -> SyncMode {
        SyncMode::Gssp
    }

    fn roles(&self) -> Roles {
        Roles::Servers
    }

    fn simulation(&self) -> Simulation {
        Simulation::Servers { round: false }
    }

    /// Its workers grouped by speed at each group count the plan tries, and its variants at
    /// the recommended count ([`super::PlanWorkers::Grouped`]).
    fn plan_rows(&self) -> &'static [PlanRow] {
        const ROWS: &[PlanRow] = &[PlanRow::grouped("gssp")];
        ROWS
    }

    /// Its exchange dense, top-k at one ratio, GDTopK (the ratio follows each group's
    /// speed), GDTopK with an outer optimizer and GDTopK with local steps.
    fn bench_variants(&self) -> &'static [&'static str] {
        &[
            "gssp",
            "gssp-topk",
            "gssp-gdtopk",
            "gssp-gdtopk-outer",
            "gssp-gdtopk-local",
        ]
    }

    /// One server per group: `groups`, or up to `max_groups` with `groups = "auto"`.
    fn servers(&self, sync: &SyncConfig) -> ServerCount {
        let g = &sync.gssp;
        match g.groups.count() {
            Some(n) => ServerCount::Exact(n),
            None => ServerCount::UpTo(g.max_groups),
        }
    }

    fn staleness(&self, sync: &SyncConfig) -> Staleness {
        sync.gssp.staleness
    }

    fn bound(&self) -> Bound {
        Bound::OfGroup
    }

    fn apply(&self, sync: &SyncConfig) -> Apply {
        match sync.gssp.takes_local_steps() {
            true => Apply::Delta,
            false => Apply::Immediate,
        }
    }

    fn changes_per_worker(&self, sync: &SyncConfig) -> bool {
        sync.gssp.takes_local_steps()
    }

    fn local_steps(&self, sync: &SyncConfig) -> Option<LocalSteps> {
        let g = &sync.gssp;
        g.takes_local_steps().then_some(LocalSteps {
            per_push: g.local_steps,
            dynamic: g.dynamic_local_steps,
        })
    }

    fn preparation(&self) -> Preparation {
        Preparation::Groups
    }

    fn exchanges(&self) -> bool {
        true
    }

    fn regrouping(&self, sync: &SyncConfig) -> Option<Regrouping> {
        let g = &sync.gssp;
        (g.regroup_every_s > 0.0).then_some(Regrouping {
            every_s: g.regroup_every_s,
            min_gain: g.regroup_min_gain,
        })
    }

    /// The replicas after the final flush, and the outer optimizer on what each group
    /// server sends.
    fn reports(&self) -> Reports {
        Reports {
            replica_error: true,
            outer_steps: true,
        }
    }

    /// A checkpoint does not record the workers' replicas that local steps keep.
    fn resume_refusal(&self, sync: &SyncConfig) -> Option<String> {
        let g = &sync.gssp;
        g.takes_local_steps().then(|| {
            format!(
                "took local steps (sync.gssp.local_steps = {}), and a checkpoint does not record its workers' replicas yet",
                g.local_steps
            )
        })
    }

    /// Workers that take local steps push a change, not a gradient; `"auto"` bounds are
    /// raised to [`super::OVERLAP_MIN_STALENESS`] at set-up.
    fn overlap_refusal(&self, sync: &SyncConfig) -> Option<String> {
        let g = &sync.gssp;
        if g.takes_local_steps() {
            return Some(format!(
                "false with sync.gssp.local_steps = {} (workers that take local steps push a change, not a gradient)",
                g.local_steps
            ));
        }
        match g.staleness {
            Staleness::Bound(s) => super::bound_too_small("sync.gssp.staleness", s),
            Staleness::Auto => None,
        }
    }

    /// A sharded group needs a fixed group count (the reserved ranks are laid out per
    /// group).
    fn shards_refusal(&self, sync: &SyncConfig) -> Option<String> {
        sync.gssp.groups.count().is_none().then(|| {
            "1 with sync.gssp.groups = \"auto\" (sharded servers need a fixed group count)".into()
        })
    }

    /// Static groups name the old world's ranks: the run groups by profile instead.
    fn refit_to_world(&self, sync: &mut SyncConfig) {
        let g = &mut sync.gssp;
        if g.grouping == Grouping::Static {
            g.grouping = Grouping::Profile;
            g.static_groups.clear();
        }
    }
}
