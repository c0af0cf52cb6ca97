//! `gssp placement`: where the ranks of a config's job sit (`cluster.nodes`,
//! `cluster.distribution`), what each does there, and the launcher options that place
//! them so, for a Slurm script or a user to check before submitting.

use crate::config::{Config, Distribution};
use crate::protocol::layout::{Layout, Role};
use crate::protocol::placement::Placement;

/// What `gssp placement` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Print {
    /// Every node's ranks and roles, and the commands that place them.
    Table,
    /// The node count (0 when the config states none: a node per rank).
    Nodes,
    /// `srun`'s placement option (nothing without `cluster.nodes`: the launcher's default).
    Srun,
    /// `mpirun`'s placement option (nothing without `cluster.nodes`).
    Mpirun,
}

/// What `cfg`'s job of `world` ranks looks like as `print` asks.
pub fn describe(cfg: &Config, world: usize, print: Print) -> Result<String, String> {
    let placement = Placement::of(&cfg.cluster);
    placement.check(world)?;
    let dist = placement.distribution;
    Ok(match print {
        Print::Nodes => placement.nodes.to_string(),
        Print::Srun | Print::Mpirun if placement.nodes == 0 => String::new(),
        Print::Srun => format!("--distribution={}", dist.name()),
        Print::Mpirun => format!("--map-by {}", dist.mpirun_map_by()),
        Print::Table => table(cfg, placement, world),
    })
}

/// The node table and the commands.
fn table(cfg: &Config, placement: Placement, world: usize) -> String {
    let layout = Layout::from_config(cfg, world);
    let nodes = placement.ranks_by_node(world);
    let mut out = format!(
        "{world} ranks on {} nodes, {} (at most {} a node, sharing its network link)\n",
        nodes.len(),
        placement.distribution.name(),
        placement.ranks_per_node(world)
    );
    out.push_str("node  ranks  roles\n");
    for (node, ranks) in nodes.iter().enumerate() {
        let list: Vec<String> = ranks.iter().map(usize::to_string).collect();
        let roles: Vec<String> = ranks.iter().map(|&r| role_name(layout.role(r))).collect();
        out.push_str(&format!(
            "{node:<5} {:<6} {}\n",
            list.join(","),
            roles.join(", ")
        ));
    }
    out.push_str(&format!(
        "Slurm: sbatch --nodes={} --ntasks={world} --distribution={} jobs/gssp.sbatch CONFIG\n",
        nodes.len(),
        placement.distribution.name()
    ));
    out.push_str(&format!(
        "mpirun: mpirun -n {world} --map-by {} (over {} hosts)\n",
        placement.distribution.mpirun_map_by(),
        nodes.len()
    ));
    if placement.distribution == Distribution::Block && layout.servers.len() > 1 {
        out.push_str(
            "(block: the servers fill the first nodes; cyclic puts each beside workers)\n",
        );
    }
    out
}

/// A role as the table names it.
fn role_name(role: Role) -> String {
    match role {
        Role::Server { group } => format!("server g{group}"),
        Role::Shard { group, shard } => format!("shard {shard} of g{group}"),
        Role::Worker { .. } | Role::Collective => "worker".to_string(),
        Role::Idle => "idle".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(sets: &[&str]) -> Config {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        let minimal = "[data]\ndataset = \"synthetic\"\n[model]\nname = \"mlp\"\n";
        Config::from_str_with_overrides(minimal, "test", &sets).expect("config")
    }

    #[test]
    fn the_table_puts_each_shard_beside_a_worker_with_cyclic() {
        let cfg = config(&[
            "sync.mode=gssp",
            "sync.gssp.groups=2",
            "sync.gssp.grouping=static",
            "sync.gssp.static_groups=[[0,1,2],[3,4,5]]",
            "sync.shards=2",
            "cluster.nodes=6",
            "cluster.distribution=cyclic",
        ]);
        let text = describe(&cfg, 10, Print::Table).expect("table");
        assert!(
            text.starts_with("10 ranks on 6 nodes, cyclic (at most 2 a node, sharing"),
            "{text}"
        );
        assert!(
            text.contains("\n0     0,6    server g0, worker\n"),
            "{text}"
        );
        assert!(
            text.contains("\n2     2,8    shard 1 of g0, worker\n"),
            "{text}"
        );
        assert!(text.contains("\n4     4      worker\n"), "{text}");
        assert!(
            text.contains("sbatch --nodes=6 --ntasks=10 --distribution=cyclic"),
            "{text}"
        );
        assert_eq!(
            describe(&cfg, 10, Print::Srun).unwrap(),
            "--distribution=cyclic"
        );
        assert_eq!(describe(&cfg, 10, Print::Mpirun).unwrap(), "--map-by node");
        assert_eq!(describe(&cfg, 10, Print::Nodes).unwrap(), "6");
        let unplaced = config(&[]);
        assert_eq!(describe(&unplaced, 4, Print::Srun).unwrap(), "");
        assert_eq!(describe(&unplaced, 4, Print::Nodes).unwrap(), "0");
        let err = describe(&cfg, 5, Print::Nodes).unwrap_err();
        assert!(
            err.contains("cluster.nodes = 6 is more than the job's 5 ranks"),
            "{err}"
        );
    }
}
