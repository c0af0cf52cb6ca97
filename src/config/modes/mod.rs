//! Each sync mode's strategy, in one place. One module per mode answers every question the
//! rest of the program asks about a mode: who its ranks are and how many serve, how its
//! servers bound staleness and apply a push, whether its workers take local steps, how its
//! collective averages, what a fresh run measures at set-up, what its summary reports, how
//! `gssp plan` simulates it and which rows of its comparison it shows, which variants of
//! `gssp bench`'s comparison it brings, and what a resumed run changes. `register!`
//! registers them: one line a mode gives both [`of`] (a mode's strategy) and [`all`]
//! (every strategy, which `gssp plan` and the bench's variants check walk). The layers
//! above act on the answers (`protocol::layout` lays the roles out, `runtime` runs them,
//! `tools::plan` simulates them, `checkpoint::fit` resumes them) and never match on
//! [`SyncMode`] nor list modes by name, so a new mode is one module here and one line in
//! the registration (docs/design.md, "Adding a mode").
//!
//! The strategies are pure: no MPI, no files. They live in `config`, beside [`SyncMode`] and
//! the sections their answers read, because every layer asks, the checkpoint layer beside
//! this one included. Balanced variants (`[sync.balance]`) are a setting the modes with
//! workers read, not modes of their own; a mode names the balanced rows and variants it
//! shows ([`PlanRow::balanced`], [`Mode::bench_variants`]).

mod allreduce;
mod asp;
mod async_localsgd;
mod bsp;
mod gssp;
mod localsgd;
mod single;
mod ssp;

use super::{OuterConfig, Staleness, SyncConfig, SyncMode};

/// The registration: each `SyncMode` variant and its strategy, one line a mode, in the
/// order `gssp plan` lists their rows. It makes [`of`], whose match is exhaustive (a
/// variant left out does not compile), and [`all`] from the same lines, so the two cannot
/// drift apart.
macro_rules! register {
    ($($variant:ident => $strategy:expr,)+) => {
        /// The strategy of `mode`: the registration of every mode.
        pub fn of(mode: SyncMode) -> &'static dyn Mode {
            match mode {
                $(SyncMode::$variant => &$strategy,)+
            }
        }

        /// Every registered mode, in order of registration.
        const REGISTERED: &[SyncMode] = &[$(SyncMode::$variant,)+];
    };
}

register! {
    Single => single::Single,
    Bsp => bsp::Bsp,
    Asp => asp::Asp,
    Ssp => ssp::Ssp,
    Gssp => gssp::Gssp,
    Allreduce => allreduce::Allreduce,
    Localsgd => localsgd::Localsgd,
    AsyncLocalsgd => async_localsgd::AsyncLocalsgd,
}

/// Every mode's strategy, in order of registration: what `gssp plan` asks for its rows and
/// the bench's variants check for the variants each brings, so a new mode joins both by
/// its registration alone.
pub fn all() -> impl Iterator<Item = &'static dyn Mode> {
    REGISTERED.iter().map(|&mode| of(mode))
}

impl SyncMode {
    /// This mode's strategy ([`of`]), for the questions that need none of its settings.
    pub fn strategy(self) -> &'static dyn Mode {
        of(self)
    }
}

/// What a sync mode is. The methods that take the `[sync]` section read the mode's own
/// part of it; the defaults are those of a mode that has no such feature (no local steps,
/// no exchange between groups, nothing extra in the summary, ...).
pub trait Mode: Sync {
    /// The mode this strategy is.
    fn mode(&self) -> SyncMode;

    /// Who its ranks are.
    fn roles(&self) -> Roles;

    /// How `gssp plan` simulates its timing (and `gssp bench plan` a measured run of it).
    fn simulation(&self) -> Simulation;

    /// The rows `gssp plan`'s comparison shows for it, each simulated as
    /// [`Mode::simulation`] says (none: it is left out of the comparison, as single is).
    fn plan_rows(&self) -> &'static [PlanRow] {
        const ROWS: &[PlanRow] = &[];
        ROWS
    }

    /// The variants it brings to `gssp bench`'s comparison: names of
    /// configs/bench/variants.toml's `[[variant]]`s, which hold their tuned settings and
    /// run it (`sync.mode`). A unit test of `tools::bench::variants` holds the file to
    /// exactly the variants every registered mode brings.
    fn bench_variants(&self) -> &'static [&'static str] {
        &[]
    }

    /// The ranks it reserves as servers (ranks `0..S`): one for a server mode, none
    /// otherwise.
    fn servers(&self, _sync: &SyncConfig) -> ServerCount {
        match self.roles() {
            Roles::Servers => ServerCount::Exact(1),
            Roles::Single | Roles::Collective => ServerCount::Exact(0),
        }
    }

    /// The SSP bound a fresh layout records for each group (`Layout::staleness`), or
    /// `"auto"`: each group's from the profile. 0 where the servers keep none.
    fn staleness(&self, _sync: &SyncConfig) -> Staleness {
        Staleness::Bound(0)
    }

    /// How its servers bound their workers' staleness.
    fn bound(&self) -> Bound {
        Bound::Unbounded
    }

    /// How its servers apply a push.
    fn apply(&self, _sync: &SyncConfig) -> Apply {
        Apply::Immediate
    }

    /// [`Apply::Delta`]: the outer optimizer a server steps each change through
    /// (async-localsgd's Delayed Nesterov; `None`: each change as it is). gssp's
    /// `[sync.gssp.outer]` acts on what a group server sends its peers, not here.
    fn outer(&self, _sync: &SyncConfig) -> Option<OuterConfig> {
        None
    }

    /// [`Apply::Delta`]: whether a server takes each change at 1/W, W the run's workers, as
    /// it takes a gradient (gssp's local steps: a change of H steps at the workers' rate is
    /// worth H gradient pushes); otherwise whole.
    fn changes_per_worker(&self, _sync: &SyncConfig) -> bool {
        false
    }

    /// Whether workers take local steps on their own replica and push the change they made,
    /// and how many (`None`: each push is one batch's gradient).
    fn local_steps(&self, _sync: &SyncConfig) -> Option<LocalSteps> {
        None
    }

    /// How a collective mode's ranks keep their replicas together (`None`: not one).
    fn averaging(&self, _sync: &SyncConfig) -> Option<Averaging> {
        None
    }

    /// What a fresh run measures at set-up before its layout is final.
    fn preparation(&self) -> Preparation {
        Preparation::None
    }

    /// Whether its servers exchange their groups' updates with each other (gssp, when it
    /// has more than one group).
    fn exchanges(&self) -> bool {
        false
    }

    /// Regrouping during the run, when its settings ask for it (`None`: the groups formed
    /// at the start stay).
    fn regrouping(&self, _sync: &SyncConfig) -> Option<Regrouping> {
        None
    }

    /// What its summary reports beyond the figures every mode has.
    fn reports(&self) -> Reports {
        Reports::default()
    }

    /// Whether the summary's epochs are every rank's iterations together (a collective,
    /// where no server counts them) rather than the furthest rank's own count.
    fn counts_epochs_collectively(&self) -> bool {
        self.roles() == Roles::Collective
    }

    /// Why a checkpoint of a run with these settings cannot be resumed, in words that
    /// follow the run directory's name (`None`: it can).
    fn resume_refusal(&self, _sync: &SyncConfig) -> Option<String> {
        None
    }

    /// Changes a run resumed on another rank count makes to its settings (those that name
    /// the old world's ranks).
    fn refit_to_world(&self, _sync: &mut SyncConfig) {}

    /// Why its workers cannot compute a step ahead (`sync.overlap`), as the requirement a
    /// validation error states (`None`: they can). Only workers that push a gradient under
    /// a bound of at least 1, or none, can: the step ahead spends one step of the bound.
    fn overlap_refusal(&self, _sync: &SyncConfig) -> Option<String> {
        Some(format!(
            "false with sync.mode = \"{}\" (workers compute a step ahead only in asp, ssp and gssp without local steps)",
            self.mode()
        ))
    }
    /// Why its group servers cannot be sharded over several ranks (`sync.shards` > 1), as
    /// the requirement a validation error states (`None`: they can). A shard answers the
    /// pushes of its range on its own, so a mode whose workers push gradients to servers that
    /// keep no state of their workers beyond the clock can be; the rest is not built yet.
    fn shards_refusal(&self, _sync: &SyncConfig) -> Option<String> {
        Some(format!(
            "1 with sync.mode = \"{}\" (only asp, ssp and gssp shard their servers)",
            self.mode()
        ))
    }
}

/// Who a mode's ranks are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Roles {
    /// One process, no MPI communication (single).
    Single,
    /// No server: every rank trains and averages with all the others (allreduce,
    /// localsgd).
    Collective,
    /// Servers (ranks `0..S`) and the workers of their groups (bsp, asp, ssp, gssp,
    /// async-localsgd).
    Servers,
}

/// How many ranks a mode reserves as servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerCount {
    /// Exactly this many (0 without servers).
    Exact(usize),
    /// Up to this many: the count is chosen at set-up (gssp's `groups = "auto"`), and the
    /// reserved ranks it leaves over stay idle.
    UpTo(usize),
}

impl ServerCount {
    /// The ranks reserved as servers: ranks `0..reserved()`.
    pub fn reserved(self) -> usize {
        match self {
            ServerCount::Exact(n) | ServerCount::UpTo(n) => n,
        }
    }
}

/// How a server bounds its workers' staleness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// No bound: each push is answered at once (asp, async-localsgd).
    Unbounded,
    /// 0 by construction: the server steps once every worker has pushed (bsp).
    Lockstep,
    /// Its group's bound as the layout records it: ssp's, gssp's fixed one or each group's
    /// `"auto"` one.
    OfGroup,
}

impl Bound {
    /// A server's SSP bound, its group's recorded bound being `recorded` (`None`: no
    /// bound).
    pub fn of_group(self, recorded: usize) -> Option<usize> {
        match self {
            Bound::Unbounded => None,
            Bound::Lockstep => Some(0),
            Bound::OfGroup => Some(recorded),
        }
    }
}

/// The bound a server answers its workers by (`sync.overlap`: `bound` - 1, the step a
/// worker computes ahead being the one it spends; at least 0), for a staleness `bound`.
pub fn release_gate(bound: Option<usize>, overlap: bool) -> Option<usize> {
    match overlap {
        true => bound.map(|s| s.saturating_sub(1)),
        false => bound,
    }
}

/// The least staleness bound of a group whose workers compute a step ahead: a bound of 0
/// leaves no step to spend.
pub const OVERLAP_MIN_STALENESS: usize = 1;

/// The least bound a group takes (`"auto"` bounds are raised to it): 0, or
/// [`OVERLAP_MIN_STALENESS`] when its workers compute a step ahead.
pub fn least_staleness(overlap: bool) -> usize {
    match overlap {
        true => OVERLAP_MIN_STALENESS,
        false => 0,
    }
}

/// The refusal of `sync.overlap` under a fixed bound of `staleness` set by `key`.
fn bound_too_small(key: &str, staleness: usize) -> Option<String> {
    (staleness < OVERLAP_MIN_STALENESS).then(|| {
        format!("false with {key} = {staleness} (the step a worker computes ahead needs a bound of at least {OVERLAP_MIN_STALENESS})")
    })
}

/// How a server applies a push (`crate::protocol::param_server` implements each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Apply {
    /// A gradient, one optimizer step at 1/W at once (asp, ssp, gssp).
    Immediate,
    /// A gradient summed into its round: one step on the mean once every active worker
    /// has pushed (bsp).
    Round,
    /// The change a worker's local steps made, applied at once (async-localsgd, gssp
    /// with local steps).
    Delta,
}

/// Local steps per push.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalSteps {
    /// The fastest worker's local steps between two pushes (H).
    pub per_push: usize,
    /// Whether each other worker's follow its profiled speed (`dynamic_local_steps`);
    /// otherwise every worker takes `per_push`.
    pub dynamic: bool,
}

/// How the ranks of a collective mode keep their replicas together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Averaging {
    /// allreduce: the gradients, every step.
    Gradients,
    /// localsgd: the parameters, every `every` local steps.
    Parameters { every: u64 },
}

/// What a fresh run measures at set-up before its layout is final (a resumed run keeps the
/// layout it saved).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preparation {
    /// Nothing: the config's layout (ranks `0..S` serve, the rest work in one group).
    None,
    /// Every worker's speed, to form the groups, their bounds and the workers' local steps
    /// (gssp).
    Groups,
    /// Every worker's local steps per push, from its profiled speed where they follow it
    /// (async-localsgd).
    LocalSteps,
}

/// Regrouping's settings: every how many seconds of training, and the least relative gain
/// in predicted throughput for workers to move.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Regrouping {
    pub every_s: f64,
    pub min_gain: f64,
}

/// What a mode's summary reports beyond the figures every mode has (those of an exchange
/// between groups follow [`Mode::exchanges`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reports {
    /// How far the replicas ended apart (`replica_max_error`): gssp's after the final
    /// flush, localsgd's after the final average.
    pub replica_error: bool,
    /// The outer optimizer's steps (`outer_steps`): gssp's, async-localsgd's.
    pub outer_steps: bool,
}

/// How `gssp plan` simulates a mode's timing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Simulation {
    /// Rounds that wait for every rank, each of its local steps and one allreduce: one step
    /// a round, or with `local_steps` the run's `sync.localsgd.local_steps`.
    Collective { local_steps: bool },
    /// Parameter servers bounding staleness as [`Mode::bound`] says, stepping on each
    /// round's mean with `round` (bsp), each worker with its local steps per push.
    Servers { round: bool },
}

/// A row of `gssp plan`'s comparison that a mode shows: plain data that `tools::plan`
/// turns into a simulation. The mode's own answers say the rest: its servers or collective
/// ([`Mode::simulation`]), their bound ([`Mode::bound`], [`Mode::staleness`]) and its
/// workers' local steps ([`Mode::local_steps`]), at the plan's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanRow {
    /// The row's name in the table (`asp-dc`): the mode's name, or one that begins with it.
    pub name: &'static str,
    /// Which workers it simulates and how it groups them.
    pub workers: PlanWorkers,
    /// Its servers compensate each gradient's delay (`optim.delay_compensation`, DC-ASGD):
    /// one more pass over the parameters per apply.
    pub delay_compensation: bool,
}

impl PlanRow {
    /// A row of the configured workers in one group.
    pub const fn configured(name: &'static str) -> PlanRow {
        PlanRow {
            name,
            workers: PlanWorkers::Configured,
            delay_compensation: false,
        }
    }

    /// A row of the workers with batches in proportion to speed, in one group.
    pub const fn balanced(name: &'static str) -> PlanRow {
        PlanRow {
            workers: PlanWorkers::Balanced,
            ..PlanRow::configured(name)
        }
    }

    /// The rows of the workers grouped by speed (see [`PlanWorkers::Grouped`]).
    pub const fn grouped(name: &'static str) -> PlanRow {
        PlanRow {
            workers: PlanWorkers::Grouped,
            ..PlanRow::configured(name)
        }
    }

    /// This row with delay compensation.
    pub const fn delay_compensated(self) -> PlanRow {
        PlanRow {
            delay_compensation: true,
            ..self
        }
    }
}

/// Which workers a plan row simulates and how it groups them. The plan lists the rows in
/// this order (every mode's configured rows, then the balanced, then the grouped), each
/// kind in order of registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PlanWorkers {
    /// The workers at their configured speeds, in one group (one server, or one
    /// collective).
    Configured,
    /// The workers with batches in proportion to speed (`sync.balance`), in one group.
    Balanced,
    /// The workers grouped by speed, one server a group bounding it by its own bound: a row
    /// `<name>` per group count the plan tries, then at the recommended count (the fewest
    /// groups within the tolerance of the fastest) its variants: `<name>-local` (local steps
    /// per push), `<name>-overlap` (a step ahead), `<name>-sharded`,
    /// `<name>-sharded-overlap` and `<name>-sharded-local` (several server ranks a group)
    /// and the same three `<name>-sharded-colocated` on the workers' nodes (gssp).
    Grouped,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Grouping, Groups, OuterKind};

    /// Every sync mode, in order of registration.
    const ALL: &[SyncMode] = REGISTERED;

    /// The default `[sync]` section running `mode`.
    fn sync(mode: SyncMode) -> SyncConfig {
        SyncConfig {
            mode,
            ..SyncConfig::default()
        }
    }

    #[test]
    fn every_mode_has_its_own_strategy() {
        for &mode in ALL {
            assert_eq!(of(mode).mode(), mode);
            assert_eq!(mode.strategy().mode(), mode);
            assert_eq!(sync(mode).strategy().mode(), mode);
        }
        let modes: Vec<SyncMode> = all().map(|s| s.mode()).collect();
        assert_eq!(modes, ALL);
    }

    /// Every variant of [`SyncMode`] is registered once: the names serde reads (its list
    /// of the enum's variants, from the error an unknown name gives) are [`all`]'s. The
    /// registration makes this so (`register!`); the test holds it without trusting that.
    #[test]
    fn every_sync_mode_is_registered_once() {
        use serde::de::{value::Error, value::StrDeserializer, IntoDeserializer};
        use serde::Deserialize;
        let unknown: StrDeserializer<Error> = "?".into_deserializer();
        let err = SyncMode::deserialize(unknown).unwrap_err().to_string();
        let (_, list) = err.split_once("expected one of ").unwrap();
        let mut names: Vec<String> = list
            .split(", ")
            .map(|n| n.trim_matches('`').into())
            .collect();
        let mut registered: Vec<String> = all().map(|s| s.mode().to_string()).collect();
        names.sort();
        registered.sort();
        assert_eq!(registered, names);
    }

    /// The rows and variants each mode shows, by name, and the rules their names keep:
    /// each begins with its mode's, and no two rows (or variants) share one.
    #[test]
    fn each_mode_names_its_plan_rows_and_bench_variants() {
        use PlanWorkers::*;
        let rows = |mode: SyncMode| -> Vec<(&str, PlanWorkers, bool)> {
            let rows = of(mode).plan_rows().iter();
            rows.map(|r| (r.name, r.workers, r.delay_compensation))
                .collect()
        };
        assert_eq!(rows(SyncMode::Single), []);
        assert_eq!(
            rows(SyncMode::Bsp),
            [
                ("bsp", Configured, false),
                ("bsp-balanced", Balanced, false)
            ]
        );
        assert_eq!(
            rows(SyncMode::Asp),
            [("asp", Configured, false), ("asp-dc", Configured, true)]
        );
        assert_eq!(rows(SyncMode::Gssp), [("gssp", Grouped, false)]);
        assert_eq!(of(SyncMode::Single).bench_variants(), [] as [&str; 0]);
        let gssp = of(SyncMode::Gssp).bench_variants();
        assert!(gssp.contains(&"gssp-gdtopk"), "{gssp:?}");
        let mut names: Vec<&str> = all().flat_map(|s| s.plan_rows()).map(|r| r.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(
            names.len(),
            all().map(|s| s.plan_rows().len()).sum::<usize>()
        );
        let mut names: Vec<&str> = all().flat_map(|s| s.bench_variants()).copied().collect();
        names.sort();
        names.dedup();
        assert_eq!(
            names.len(),
            all().map(|s| s.bench_variants().len()).sum::<usize>()
        );
        for s in all() {
            let mode = s.mode().to_string();
            let names = s.plan_rows().iter().map(|r| r.name);
            for name in names.chain(s.bench_variants().iter().copied()) {
                let own = name == mode || name.starts_with(&format!("{mode}-"));
                assert!(own, "{mode} names {name}");
            }
            // The grouped rows are of servers, one a group.
            for row in s.plan_rows().iter().filter(|r| r.workers == Grouped) {
                assert_eq!(s.roles(), Roles::Servers, "{}", row.name);
            }
        }
    }

    #[test]
    fn roles_and_servers_of_each_mode() {
        use Roles::*;
        let expected = [
            (SyncMode::Single, Single, 0),
            (SyncMode::Bsp, Servers, 1),
            (SyncMode::Asp, Servers, 1),
            (SyncMode::Ssp, Servers, 1),
            (SyncMode::Gssp, Servers, 1),
            (SyncMode::Allreduce, Collective, 0),
            (SyncMode::Localsgd, Collective, 0),
            (SyncMode::AsyncLocalsgd, Servers, 1),
        ];
        for (mode, roles, servers) in expected {
            let s = of(mode);
            assert_eq!(s.roles(), roles, "{mode}");
            assert_eq!(
                s.servers(&sync(mode)),
                ServerCount::Exact(servers),
                "{mode}"
            );
            assert_eq!(
                s.counts_epochs_collectively(),
                roles == Collective,
                "{mode}"
            );
        }
    }

    #[test]
    fn gssp_reserves_a_server_per_group_or_up_to_max_groups() {
        let mut s = sync(SyncMode::Gssp);
        s.gssp.groups = Groups::Count(3);
        assert_eq!(s.strategy().servers(&s), ServerCount::Exact(3));
        s.gssp.groups = Groups::Auto;
        s.gssp.max_groups = 5;
        assert_eq!(s.strategy().servers(&s), ServerCount::UpTo(5));
        assert_eq!(ServerCount::UpTo(5).reserved(), 5);
    }

    #[test]
    fn servers_bound_staleness_and_apply_pushes_as_their_mode_says() {
        use Apply::*;
        let expected = [
            (
                SyncMode::Bsp,
                Bound::Lockstep,
                Round,
                Simulation::Servers { round: true },
            ),
            (
                SyncMode::Asp,
                Bound::Unbounded,
                Immediate,
                Simulation::Servers { round: false },
            ),
            (
                SyncMode::Ssp,
                Bound::OfGroup,
                Immediate,
                Simulation::Servers { round: false },
            ),
            (
                SyncMode::Gssp,
                Bound::OfGroup,
                Immediate,
                Simulation::Servers { round: false },
            ),
            (
                SyncMode::AsyncLocalsgd,
                Bound::Unbounded,
                Delta,
                Simulation::Servers { round: false },
            ),
        ];
        for (mode, bound, apply, simulation) in expected {
            let s = of(mode);
            assert_eq!(s.bound(), bound, "{mode}");
            assert_eq!(s.apply(&sync(mode)), apply, "{mode}");
            assert_eq!(s.simulation(), simulation, "{mode}");
        }
        assert_eq!(Bound::Unbounded.of_group(3), None);
        assert_eq!(Bound::Lockstep.of_group(3), Some(0));
        assert_eq!(Bound::OfGroup.of_group(3), Some(3));
    }

    #[test]
    fn the_recorded_staleness_is_the_modes_own_setting() {
        let mut s = sync(SyncMode::Ssp);
        s.ssp.staleness = 5;
        s.gssp.staleness = Staleness::Bound(2);
        assert_eq!(s.strategy().staleness(&s), Staleness::Bound(5));
        s.mode = SyncMode::Gssp;
        assert_eq!(s.strategy().staleness(&s), Staleness::Bound(2));
        s.gssp.staleness = Staleness::Auto;
        assert_eq!(s.strategy().staleness(&s), Staleness::Auto);
        for mode in [SyncMode::Bsp, SyncMode::Asp, SyncMode::Allreduce] {
            s.mode = mode;
            assert_eq!(s.strategy().staleness(&s), Staleness::Bound(0), "{mode}");
        }
    }

    #[test]
    fn local_steps_belong_to_async_localsgd_and_gssp_above_one() {
        let mut s = sync(SyncMode::AsyncLocalsgd);
        s.async_localsgd.local_steps = 6;
        s.async_localsgd.dynamic_local_steps = false;
        let steps = s.strategy().local_steps(&s);
        assert_eq!(steps.map(|l| (l.per_push, l.dynamic)), Some((6, false)));
        assert!(!s.strategy().changes_per_worker(&s));
        let outer = s.strategy().outer(&s).map(|o| o.kind);
        assert_eq!(outer, Some(OuterKind::DelayedNesterov));

        s.mode = SyncMode::Gssp;
        assert_eq!(s.strategy().local_steps(&s), None);
        assert!(!s.strategy().changes_per_worker(&s));
        s.gssp.local_steps = 4;
        let steps = s.strategy().local_steps(&s);
        assert_eq!(steps.map(|l| (l.per_push, l.dynamic)), Some((4, true)));
        assert_eq!(s.strategy().apply(&s), Apply::Delta);
        assert!(s.strategy().changes_per_worker(&s));
        assert_eq!(s.strategy().outer(&s), None);

        for mode in [
            SyncMode::Single,
            SyncMode::Bsp,
            SyncMode::Ssp,
            SyncMode::Localsgd,
        ] {
            s.mode = mode;
            assert_eq!(s.strategy().local_steps(&s), None, "{mode}");
        }
    }

    #[test]
    fn collectives_average_gradients_or_parameters() {
        let mut s = sync(SyncMode::Localsgd);
        s.localsgd.local_steps = 7;
        let every = Averaging::Parameters { every: 7 };
        assert_eq!(s.strategy().averaging(&s), Some(every));
        let local = Simulation::Collective { local_steps: true };
        assert_eq!(s.strategy().simulation(), local);
        s.mode = SyncMode::Allreduce;
        assert_eq!(s.strategy().averaging(&s), Some(Averaging::Gradients));
        let each = Simulation::Collective { local_steps: false };
        assert_eq!(s.strategy().simulation(), each);
        for mode in [SyncMode::Single, SyncMode::Bsp, SyncMode::Gssp] {
            s.mode = mode;
            assert_eq!(s.strategy().averaging(&s), None, "{mode}");
        }
    }

    #[test]
    fn set_up_exchanges_and_summary_of_each_mode() {
        let expected = [
            (SyncMode::Single, Preparation::None, false, (false, false)),
            (SyncMode::Bsp, Preparation::None, false, (false, false)),
            (SyncMode::Asp, Preparation::None, false, (false, false)),
            (SyncMode::Ssp, Preparation::None, false, (false, false)),
            (SyncMode::Gssp, Preparation::Groups, true, (true, true)),
            (
                SyncMode::Allreduce,
                Preparation::None,
                false,
                (false, false),
            ),
            (SyncMode::Localsgd, Preparation::None, false, (true, false)),
            (
                SyncMode::AsyncLocalsgd,
                Preparation::LocalSteps,
                false,
                (false, true),
            ),
        ];
        for (mode, preparation, exchanges, (replica_error, outer_steps)) in expected {
            let s = of(mode);
            assert_eq!(s.preparation(), preparation, "{mode}");
            assert_eq!(s.exchanges(), exchanges, "{mode}");
            let reports = Reports {
                replica_error,
                outer_steps,
            };
            assert_eq!(s.reports(), reports, "{mode}");
        }
    }

    #[test]
    fn only_gssp_regroups_refuses_to_resume_local_steps_and_refits_static_groups() {
        let mut s = sync(SyncMode::Gssp);
        assert_eq!(s.strategy().regrouping(&s), None);
        s.gssp.regroup_every_s = 10.0;
        let every = s.strategy().regrouping(&s).map(|r| r.every_s);
        assert_eq!(every, Some(10.0));
        assert_eq!(s.strategy().resume_refusal(&s), None);
        s.gssp.local_steps = 4;
        let refusal = s.strategy().resume_refusal(&s).unwrap_or_default();
        assert!(refusal.contains("sync.gssp.local_steps = 4"), "{refusal}");
        s.gssp.grouping = Grouping::Static;
        s.gssp.static_groups = vec![vec![1], vec![2]];
        s.strategy().refit_to_world(&mut s);
        assert_eq!(s.gssp.grouping, Grouping::Profile);
        assert!(s.gssp.static_groups.is_empty());
        // The same settings under another mode: none of it applies.
        s.gssp.grouping = Grouping::Static;
        for &mode in ALL.iter().filter(|&&m| m != SyncMode::Gssp) {
            s.mode = mode;
            assert_eq!(s.strategy().regrouping(&s), None, "{mode}");
            assert_eq!(s.strategy().resume_refusal(&s), None, "{mode}");
            s.strategy().refit_to_world(&mut s);
            assert_eq!(s.gssp.grouping, Grouping::Static, "{mode}");
        }
    }
}
