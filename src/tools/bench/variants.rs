//! The variants a comparison runs (`bench paper`, `bench scale`), read from a TOML file:
//! each a name and the `--set` overrides that make it, after the scenario config's own
//! settings (configs/bench/variants.toml holds the tuned baselines).
//!
//! Which variants the default comparison holds is the registered modes' to say: each
//! names those it brings ([`crate::config::modes::Mode::bench_variants`]), and the file
//! holds their tuned settings, since tuning is the file's. A unit test here holds
//! [`DEFAULT_FILE`] to exactly the variants every registered mode brings, each under its
//! mode (its `sync.mode`), so a mode registered without its variants' settings, or a
//! variant left in the file after its mode dropped it, fails the tests rather than a
//! bench. The other files are hand-picked subsets for one study each, and stay so.

use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::Deserialize;

use crate::config::Config;

/// One job of a comparison.
#[derive(Debug, Clone)]
pub struct Variant {
    pub name: String,
    pub ranks: usize,
    pub overrides: Vec<String>,
}

impl Variant {
    pub fn new(name: &str, ranks: usize, overrides: &[&str]) -> Variant {
        Variant {
            name: name.into(),
            ranks,
            overrides: overrides.iter().map(|s| s.to_string()).collect(),
        }
    }
}

/// The workers of `config` (with `overrides`): its `heterogeneity.slowdown` list, else its
/// tiers; gssp gets four groups whatever their speeds.
pub fn configured_workers(config: &Path, overrides: &[String]) -> Result<usize> {
    let h = crate::config::Config::load(config, overrides)?.heterogeneity;
    let workers = if h.slowdown.is_empty() {
        h.tiers.iter().map(|t| t.workers).sum()
    } else {
        h.slowdown.len()
    };
    if workers < 4 {
        bail!(
            "{}: the comparison needs at least 4 workers (one per gssp group) in heterogeneity.tiers or .slowdown, got {workers}",
            config.display()
        );
    }
    Ok(workers)
}

/// The variants file the benches read unless told otherwise.
pub const DEFAULT_FILE: &str = "configs/bench/variants.toml";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct VariantsFile {
    variant: Vec<VariantEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct VariantEntry {
    name: String,
    set: Vec<String>,
}

/// The variants of `file` on scenario `config` with `common` overrides (applied before
/// each variant's): every variant is loaded and validated for its world size, the
/// scenario's workers plus its mode's servers, so a bad entry is named before any run.
pub fn load(file: &Path, config: &Path, common: &[String]) -> Result<Vec<Variant>> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("--variants: cannot read {}", file.display()))?;
    let parsed: VariantsFile =
        toml::from_str(&text).with_context(|| format!("--variants: {}", file.display()))?;
    if parsed.variant.is_empty() {
        bail!("--variants: {} lists no [[variant]]", file.display());
    }
    let workers = configured_workers(config, common)?;
    let mut variants: Vec<Variant> = Vec::with_capacity(parsed.variant.len());
    for entry in parsed.variant {
        if variants.iter().any(|v| v.name == entry.name) {
            bail!(
                "--variants: {}: variant {:?} twice",
                file.display(),
                entry.name
            );
        }
        let overrides: Vec<String> = common.iter().chain(&entry.set).cloned().collect();
        let cfg = Config::load(config, &overrides)
            .with_context(|| format!("variant {:?} of {}", entry.name, file.display()))?;
        let ranks = workers + cfg.num_servers();
        cfg.validate_for_world(ranks)
            .with_context(|| format!("variant {:?} of {}", entry.name, file.display()))?;
        variants.push(Variant {
            name: entry.name,
            ranks,
            overrides: entry.set,
        });
    }
    Ok(variants)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paper() -> Vec<Variant> {
        load(
            Path::new(DEFAULT_FILE),
            Path::new("configs/paper_lenet5_mnist.toml"),
            &[],
        )
        .unwrap()
    }

    #[test]
    fn the_shipped_variants_load_with_their_world_sizes() {
        let ranks: Vec<(String, usize)> = paper().into_iter().map(|v| (v.name, v.ranks)).collect();
        let want = [
            ("allreduce", 16),
            ("bsp", 17),
            ("asp", 17),
            ("ssp", 17),
            ("asp-dc", 17),
            ("localsgd", 16),
            ("async-localsgd", 17),
            ("gssp", 20),
            ("gssp-topk", 20),
            ("gssp-gdtopk", 20),
            ("gssp-gdtopk-outer", 20),
            ("gssp-gdtopk-local", 20),
            ("allreduce-balanced", 16),
            ("bsp-balanced", 17),
            ("localsgd-balanced", 16),
        ];
        let want: Vec<(String, usize)> = want.iter().map(|(n, r)| (n.to_string(), *r)).collect();
        assert_eq!(ranks, want);
    }

    /// The default file defines exactly the variants the registered modes bring, each
    /// running the mode that brings it (no name twice: [`load`] refuses it in the file, and
    /// a unit test of `config::modes` among the modes).
    #[test]
    fn the_default_variants_are_those_the_registered_modes_bring() {
        use crate::config::{modes, SyncMode};
        let config = Path::new("configs/paper_lenet5_mnist.toml");
        let defined: Vec<(String, SyncMode)> = paper()
            .into_iter()
            .map(|v| {
                let mode = Config::load(config, &v.overrides).unwrap().sync.mode;
                (v.name, mode)
            })
            .collect();
        let brought: Vec<(String, SyncMode)> = modes::all()
            .flat_map(|m| {
                m.bench_variants()
                    .iter()
                    .map(move |&v| (v.into(), m.mode()))
            })
            .collect();
        for (name, mode) in &brought {
            let found = defined.iter().find(|(n, _)| n == name);
            let found = found.unwrap_or_else(|| panic!("{DEFAULT_FILE} lacks {name} ({mode})"));
            assert_eq!(found.1, *mode, "{DEFAULT_FILE}: {name} runs another mode");
        }
        for (name, mode) in &defined {
            let of_mode = brought.iter().any(|(n, m)| n == name && m == mode);
            assert!(
                of_mode,
                "{DEFAULT_FILE}: {name} is no variant {mode} brings"
            );
        }
    }

    /// A scenario config tunes gssp's optimiser; the baselines keep the schedule each was
    /// tuned at, whatever the config says.
    #[test]
    fn scenario_optimiser_settings_reach_gssp_only() {
        let optim = |config: &str, v: &Variant| {
            let cfg = Config::load(Path::new(config), &v.overrides).unwrap();
            let o = cfg.optim;
            (o.momentum, o.lr, o.delay_compensation)
        };
        let paper_config = "configs/paper_lenet5_mnist.toml";
        let transient = "configs/paper_lenet5_mnist_transient.toml";
        let variants = paper();
        for v in &variants {
            let (base, scenario) = (optim(paper_config, v), optim(transient, v));
            if v.name == "gssp-gdtopk-local" {
                // A pushed change is not a gradient: no delay compensation.
                assert_eq!(scenario, (0.0, 0.5, 0.0), "{}", v.name);
                assert_eq!(base, (0.9, 0.05, 0.0), "{}", v.name);
            } else if v.name.starts_with("gssp") {
                assert_eq!(scenario, (0.0, 0.5, 2.0), "{}", v.name);
                assert_eq!(base, (0.9, 0.05, 0.0), "{}", v.name);
            } else {
                assert_eq!(
                    base, scenario,
                    "{} follows the scenario's optimiser",
                    v.name
                );
            }
        }
        let dc = |name: &str| {
            let v = variants.iter().find(|v| v.name == name).unwrap();
            optim(transient, v).2
        };
        assert_eq!((dc("asp"), dc("asp-dc"), dc("ssp")), (0.0, 2.0, 0.0));
    }

    /// gssp runs with the config's group count, or "auto" with `sync.gssp.max_groups`
    /// server ranks: a `--set sync.gssp.groups=...` reaches it.
    #[test]
    fn gssp_variants_take_the_configured_group_count() {
        let config = Path::new("configs/paper_lenet5_mnist.toml");
        let gssp_ranks = |sets: &[&str]| {
            let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
            let variants = load(Path::new(DEFAULT_FILE), config, &sets).unwrap();
            let v = variants.iter().find(|v| v.name == "gssp-gdtopk").unwrap();
            let all: Vec<String> = sets.iter().chain(&v.overrides).cloned().collect();
            let cfg = Config::load(config, &all).unwrap();
            cfg.validate_for_world(v.ranks).unwrap();
            (v.ranks, cfg.sync.gssp.groups)
        };
        use crate::config::Groups;
        assert_eq!(gssp_ranks(&[]), (20, Groups::Count(4)));
        assert_eq!(gssp_ranks(&["sync.gssp.groups=2"]), (18, Groups::Count(2)));
        let (ranks, groups) = gssp_ranks(&["sync.gssp.groups=auto", "sync.gssp.max_groups=6"]);
        assert_eq!((ranks, groups), (22, Groups::Auto));
    }

    /// The ResNet-18 variants load on their scenario, and the baselines run at their own
    /// schedule, not at the one the scenario config tuned for gssp.
    #[test]
    fn the_resnet18_variants_load_with_their_own_schedules() {
        let config = Path::new("configs/resnet18_cifar10_gssp.toml");
        let file = Path::new("configs/bench/variants_resnet18.toml");
        let variants = load(file, config, &[]).unwrap();
        let ranks: Vec<(&str, usize)> = variants
            .iter()
            .map(|v| (v.name.as_str(), v.ranks))
            .collect();
        let want = [
            ("asp-dc", 9),
            ("async-localsgd", 9),
            ("gssp-gdtopk-outer", 12),
            ("gssp-gdtopk-outer-static", 12),
            ("allreduce", 8),
            ("allreduce-balanced", 8),
        ];
        assert_eq!(ranks, want);
        let dc = Config::load(config, &variants[0].overrides).unwrap().optim;
        assert_eq!((dc.lr, dc.momentum, dc.delay_compensation), (0.1, 0.0, 2.0));
        assert_eq!(dc.staleness_lr, crate::config::StalenessLr::None);
        let gssp = Config::load(config, &variants[2].overrides).unwrap().optim;
        assert_eq!((gssp.lr, gssp.momentum), (0.1, 0.0));
        assert_eq!(gssp.staleness_lr, crate::config::StalenessLr::Inverse);
        let stated = Config::load(config, &variants[3].overrides).unwrap();
        stated.validate_for_world(variants[3].ranks).unwrap();
        assert_eq!(stated.sync.gssp.grouping, crate::config::Grouping::Static);
    }

    /// `name`'s config and world size in the scale study's per-size variants file.
    fn scale_variant(workers: usize, name: &str) -> (Config, usize) {
        let config = format!("configs/scale_lenet5_mnist_{workers}.toml");
        let file = format!("configs/bench/variants_scale_{workers}.toml");
        let variants = load(Path::new(&file), Path::new(&config), &[]).unwrap();
        let v = variants.iter().find(|v| v.name == name);
        let v = v.unwrap_or_else(|| panic!("{file} lacks {name}"));
        let cfg = Config::load(Path::new(&config), &v.overrides).unwrap();
        (cfg, v.ranks)
    }

    /// The simulated study's files load on their sizes (servers counted: 4 groups at 100,
    /// 16 and 64 at 1,000), each mode at its screened rate.
    #[test]
    fn the_simulated_scale_variants_load_with_their_screened_rates() {
        let (gssp, ranks) = scale_variant(100, "gssp-s10");
        let bound = crate::config::Staleness::Bound(10);
        assert_eq!((gssp.optim.lr, gssp.sync.gssp.staleness), (0.05, bound));
        assert_eq!(ranks, 104);
        let (gssp, ranks) = scale_variant(1000, "gssp-auto");
        let auto = crate::config::Staleness::Auto;
        assert_eq!((gssp.optim.lr, gssp.sync.gssp.staleness), (1.0, auto));
        assert_eq!(ranks, 1016);
        let (_, ranks) = scale_variant(1000, "gssp-g64-s2");
        assert_eq!(ranks, 1064);
        let (ar, ranks) = scale_variant(1000, "allreduce-balanced");
        assert_eq!(
            (ar.optim.lr, ar.optim.warmup_epochs, ranks),
            (0.05, 2.0, 1000)
        );
    }

    /// The per-size files of the scale study load on their sizes, with each mode's
    /// candidate schedules as tuned there (not variants.toml's).
    #[test]
    fn the_per_size_scale_variants_load_with_their_schedules() {
        for (workers, dc) in [
            (8, (0.15, 0.5)),
            (16, (0.5, 0.0)),
            (32, (0.5, 0.0)),
            (64, (0.5, 0.0)),
        ] {
            let (gssp, ranks) = scale_variant(workers, "gssp-gdtopk");
            assert_eq!(
                (gssp.optim.lr, gssp.optim.momentum),
                (0.25, 0.5),
                "{workers}"
            );
            assert_eq!(ranks, workers + 4, "{workers}");
            let (asp_dc, ranks) = scale_variant(workers, "asp-dc");
            assert_eq!((asp_dc.optim.lr, asp_dc.optim.momentum), dc, "{workers}");
            assert_eq!(ranks, workers + 1, "{workers}");
            let (local, _) = scale_variant(workers, "async-localsgd-h2");
            assert_eq!(local.sync.async_localsgd.local_steps, 2, "{workers}");
        }
        for workers in [8, 16] {
            let (every2, _) = scale_variant(workers, "gssp-gdtopk-every2");
            assert_eq!(every2.sync.gssp.inter_group_every, 2, "{workers}");
        }
    }

    /// At 32 and 64 workers every mode decays its learning rate later than the 16-worker
    /// scenario's 0.6 epochs, where 98% comes after the first epoch.
    #[test]
    fn the_32_and_64_worker_variants_decay_after_the_first_epoch() {
        let decay = |workers, name| scale_variant(workers, name).0.optim.lr_decay_epochs;
        for (workers, name, at) in [
            (32, "gssp-gdtopk", 1.2),
            (32, "async-localsgd-h2", 1.2),
            (32, "asp-dc", 1.2),
            (64, "gssp-gdtopk", 1.4),
            (64, "async-localsgd-h2", 1.6),
            (64, "asp-dc", 1.4),
            (32, "allreduce-balanced", 1.2),
            (64, "allreduce-balanced-lr08", 1.4),
        ] {
            assert_eq!(decay(workers, name), [at], "{workers} {name}");
        }
        assert_eq!(decay(16, "gssp-gdtopk"), [0.6]);
    }

    #[test]
    fn a_bad_variant_is_named_before_any_run() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("v.toml");
        let config = Path::new("configs/paper_lenet5_mnist.toml");
        std::fs::write(
            &file,
            "[[variant]]\nname = \"x\"\nset = [\"optim.lrr=1\"]\n",
        )
        .unwrap();
        let msg = format!("{:#}", load(&file, config, &[]).unwrap_err());
        assert!(msg.starts_with("variant \"x\" of "), "{msg}");
        assert!(msg.contains("unknown key optim.lrr"), "{msg}");
        std::fs::write(&file, "[[variant]]\nname = \"x\"\nset = []\nsets = []\n").unwrap();
        let msg = format!("{:#}", load(&file, config, &[]).unwrap_err());
        assert!(msg.contains("unknown field `sets`"), "{msg}");
        let twice = "[[variant]]\nname = \"x\"\nset = []\n[[variant]]\nname = \"x\"\nset = []\n";
        std::fs::write(&file, twice).unwrap();
        let msg = format!("{:#}", load(&file, config, &[]).unwrap_err());
        assert!(msg.ends_with("variant \"x\" twice"), "{msg}");
    }

    /// The overlap pairs load on the transient scenario (its gssp bound "auto", raised to
    /// 1 with overlap) and differ in `sync.overlap` alone.
    #[test]
    fn the_overlap_variants_pair_each_variant_with_and_without_overlap() {
        let config = Path::new("configs/paper_lenet5_mnist_transient.toml");
        let file = Path::new("configs/bench/variants_overlap.toml");
        let variants = load(file, config, &[]).unwrap();
        assert_eq!(variants.len(), 6);
        for pair in variants.chunks(2) {
            let (off, on) = (&pair[0], &pair[1]);
            assert_eq!(on.name, format!("{}-overlap", off.name));
            let mut want = off.overrides.clone();
            want.push("sync.overlap=true".into());
            assert_eq!(on.overrides, want, "{}", on.name);
            assert_eq!(on.ranks, off.ranks);
        }
    }

    /// The co-located variants take the 32 workers' nodes alone: cyclic over 32 nodes puts
    /// each shard rank (gssp's 16, DC-ASGD's 4) beside a worker on one of the first nodes.
    #[test]
    fn the_colocated_variants_sit_on_the_workers_nodes() {
        use crate::protocol::placement::Placement;
        let file = Path::new("configs/bench/variants_colocated.toml");
        let config = Path::new("configs/scale_lenet5_mnist_32.toml");
        let variants = load(file, config, &[]).unwrap();
        let names: Vec<&str> = variants.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "gssp-gdtopk-shards4",
                "gssp-gdtopk-shards4-colocated",
                "asp-dc-shards4-colocated",
                "allreduce-balanced"
            ]
        );
        for (v, ranks) in variants[1..3].iter().zip([48, 36]) {
            assert_eq!(v.ranks, ranks, "{}", v.name);
            let cfg = Config::load(config, &v.overrides).unwrap();
            let nodes = Placement::of(&cfg.cluster).ranks_by_node(v.ranks);
            assert_eq!(nodes.len(), 32, "{}", v.name);
            assert_eq!(nodes[0], vec![0, 32], "{}", v.name);
            assert_eq!(nodes[31], vec![31], "{}", v.name);
        }
        assert_eq!(variants[3].ranks, 32);
    }

    /// The 16-bit variants load on the 32 workers' config, on the same ranks as the variant
    /// before them, from which each differs in `compression.push` (and `compression.reply`
    /// unless it is a "-bf16-push" variant) alone.
    #[test]
    fn the_bf16_variants_differ_from_the_one_before_in_their_precision_alone() {
        let file = Path::new("configs/bench/variants_bf16.toml");
        let config = Path::new("configs/scale_lenet5_mnist_32.toml");
        let variants = load(file, config, &[]).unwrap();
        let names: Vec<&str> = variants.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "gssp-gdtopk",
                "gssp-gdtopk-bf16-push",
                "gssp-gdtopk-bf16",
                "gssp-gdtopk-shards4",
                "gssp-gdtopk-shards4-bf16",
                "asp-dc",
                "asp-dc-bf16"
            ]
        );
        let push = "compression.push=bf16".to_string();
        let reply = "compression.reply=bf16".to_string();
        for (base, bf16, sets) in [
            (0, 1, vec![push.clone()]),
            (0, 2, vec![push.clone(), reply.clone()]),
            (3, 4, vec![push.clone(), reply.clone()]),
            (5, 6, vec![push.clone(), reply.clone()]),
        ] {
            let (base, bf16) = (&variants[base], &variants[bf16]);
            let mut want = base.overrides.clone();
            want.extend(sets);
            assert_eq!(bf16.overrides, want, "{}", bf16.name);
            assert_eq!(bf16.ranks, base.ranks, "{}", bf16.name);
        }
    }

    /// The shard pairs load on both sizes' configs, differ in `sync.shards` alone, and
    /// reserve the three further shards of each group server as ranks.
    #[test]
    fn the_shard_variants_pair_each_variant_with_one_and_four_server_ranks_per_group() {
        let file = Path::new("configs/bench/variants_shards.toml");
        for (config, workers) in [
            ("configs/scale_lenet5_mnist_32.toml", 32),
            ("configs/scale_lenet5_mnist_64.toml", 64),
        ] {
            let variants = load(file, Path::new(config), &[]).unwrap();
            assert_eq!(variants.len(), 5, "{config}");
            for pair in variants[..4].chunks(2) {
                let (one, four) = (&pair[0], &pair[1]);
                assert_eq!(four.name, format!("{}-shards4", one.name));
                let mut want = one.overrides.clone();
                want.push("sync.shards=4".into());
                assert_eq!(four.overrides, want, "{}", four.name);
                let groups = one.ranks - workers;
                assert_eq!(four.ranks, workers + 4 * groups, "{}", four.name);
            }
        }
    }

    /// The local-steps pair loads on the 32 workers' config, differs in
    /// `sync.gssp.local_steps` alone, and takes the same ranks (4 groups of 4 shards).
    #[test]
    fn the_sharded_local_steps_variant_differs_in_its_local_steps_alone() {
        let file = Path::new("configs/bench/variants_shards_local.toml");
        let config = Path::new("configs/scale_lenet5_mnist_32.toml");
        let variants = load(file, config, &[]).unwrap();
        let [sharded, local] = &variants[..] else {
            panic!("{variants:?}");
        };
        assert_eq!(local.name, format!("{}-local2", sharded.name));
        let mut want = sharded.overrides.clone();
        want.push("sync.gssp.local_steps=2".into());
        assert_eq!(local.overrides, want);
        assert_eq!((sharded.ranks, local.ranks), (48, 48));
    }

    /// The auto-shards file loads on the 32 workers' config: four shards with and without
    /// periodic checkpoints, and `"auto"` up to four, each differing from the first in
    /// those keys alone and taking the same 32 + 4 x 4 ranks (auto reserves the most).
    #[test]
    fn the_auto_shard_variants_differ_from_four_shards_in_their_own_keys_alone() {
        let file = Path::new("configs/bench/variants_shards_auto.toml");
        let config = Path::new("configs/scale_lenet5_mnist_32.toml");
        let variants = load(file, config, &[]).unwrap();
        let [four, checkpoints, auto] = &variants[..] else {
            panic!("{variants:?}");
        };
        assert_eq!(checkpoints.name, format!("{}-checkpoints", four.name));
        let mut want = four.overrides.clone();
        want.push("run.checkpoint_every_s=10".into());
        assert_eq!(checkpoints.overrides, want);
        let mut want = four.overrides.clone();
        want.pop();
        want.extend(["sync.shards=auto".into(), "sync.max_shards=4".into()]);
        assert_eq!(auto.overrides, want);
        assert_eq!((four.ranks, checkpoints.ranks, auto.ranks), (48, 48, 48));
    }

    /// The regrouping shard variants load on the speed-change scenario: two shards with the
    /// config's regrouping and without it, and one shard with it, differing in those keys
    /// alone and taking 16 + 4 x 2 and 16 + 4 ranks.
    #[test]
    fn the_regrouping_shard_variants_differ_in_their_shards_and_regrouping_alone() {
        let file = Path::new("configs/bench/variants_shards_regroup.toml");
        let config = Path::new("configs/paper_lenet5_mnist_speed_change.toml");
        let variants = load(file, config, &[]).unwrap();
        let [sharded, fixed, one] = &variants[..] else {
            panic!("{variants:?}");
        };
        let mut want = sharded.overrides.clone();
        want.push("sync.gssp.regroup_every_s=0".into());
        assert_eq!(fixed.overrides, want);
        let mut want = sharded.overrides.clone();
        want.pop();
        assert_eq!(one.overrides, want);
        assert_eq!((sharded.ranks, fixed.ranks, one.ranks), (24, 24, 20));
    }

    /// The ResNet-18 shard pair loads on its scenario as the file's command sets it (16
    /// workers in four tiers), differs in `sync.shards` alone, and takes 16 + 4 and
    /// 16 + 4 x 4 ranks.
    #[test]
    fn the_resnet18_shard_pair_differs_in_its_shards_alone() {
        let file = Path::new("configs/bench/variants_shards_resnet18.toml");
        let config = Path::new("configs/resnet18_cifar10_gssp.toml");
        let tiers = "heterogeneity.tiers=[{factor=1.0,workers=4},{factor=2.0,workers=4},{factor=3.0,workers=4},{factor=4.0,workers=4}]";
        let sets = [tiers.to_string(), "model.width=0.125".into()];
        let variants = load(file, config, &sets).unwrap();
        let [one, four] = &variants[..] else {
            panic!("{variants:?}");
        };
        assert_eq!(four.name, format!("{}-shards4", one.name));
        let mut want = one.overrides.clone();
        want.push("sync.shards=4".into());
        assert_eq!(four.overrides, want);
        assert_eq!((one.ranks, four.ranks), (20, 32));
        let all: Vec<String> = sets.iter().chain(&four.overrides).cloned().collect();
        Config::load(config, &all)
            .unwrap()
            .validate_for_world(four.ranks)
            .unwrap();
    }
}
