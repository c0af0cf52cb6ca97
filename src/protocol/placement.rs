//! Which node each rank sits on (`cluster.nodes`, `cluster.distribution`), as Slurm and
//! mpirun place a job's tasks over its nodes: `block` fills each node with consecutive
//! ranks (`srun --distribution=block`, `mpirun --map-by slot`), `cyclic` deals the ranks
//! out one node after another (`srun --distribution=cyclic`, `mpirun --map-by node`).
//! With the servers as the first ranks, `block` gives them nodes of their own (unless a
//! node's share of ranks runs past them) and `cyclic` puts each beside workers on one of
//! the first nodes, sharing that node's network link. The link emulation shares one link
//! among a node's ranks, `gssp plan` counts nodes, and `gssp placement` prints the table
//! and the launcher's options. Pure logic.

use crate::config::{ClusterConfig, Distribution};

/// A job's placement over `nodes` nodes (0: a node for every rank).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    pub nodes: usize,
    pub distribution: Distribution,
}

impl Placement {
    /// The placement `cluster` states.
    pub fn of(cluster: &ClusterConfig) -> Placement {
        Placement {
            nodes: cluster.nodes,
            distribution: cluster.distribution,
        }
    }

    /// Checks that a job of `world` ranks can be placed: no more nodes than ranks.
    pub fn check(&self, world: usize) -> Result<(), String> {
        if self.nodes > world {
            return Err(format!(
                "cluster.nodes = {} is more than the job's {world} ranks (Slurm refuses nodes without a task; use at most {world}, or 0 for a node per rank)",
                self.nodes
            ));
        }
        Ok(())
    }

    /// Nodes a job of `world` ranks takes.
    pub fn node_count(&self, world: usize) -> usize {
        match self.nodes {
            0 => world,
            n => n.min(world.max(1)),
        }
    }

    /// Most ranks on one node.
    pub fn ranks_per_node(&self, world: usize) -> usize {
        world.div_ceil(self.node_count(world).max(1))
    }

    /// The node of `rank` in a job of `world` ranks.
    pub fn node_of(&self, rank: usize, world: usize) -> usize {
        match self.distribution {
            Distribution::Block => rank / self.ranks_per_node(world).max(1),
            Distribution::Cyclic => rank % self.node_count(world).max(1),
        }
    }

    /// The ranks on each node, in rank order.
    pub fn ranks_by_node(&self, world: usize) -> Vec<Vec<usize>> {
        let mut nodes = vec![Vec::new(); self.node_count(world)];
        for rank in 0..world {
            nodes[self.node_of(rank, world)].push(rank);
        }
        nodes.retain(|ranks| !ranks.is_empty());
        nodes
    }

    /// Whether some node holds more than one rank (and so shares its link).
    pub fn shares_nodes(&self, world: usize) -> bool {
        self.ranks_per_node(world) > 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placement(nodes: usize, distribution: Distribution) -> Placement {
        Placement {
            nodes,
            distribution,
        }
    }

    #[test]
    fn block_fills_nodes_with_consecutive_ranks() {
        let p = placement(3, Distribution::Block);
        assert_eq!(p.ranks_per_node(8), 3);
        assert_eq!(
            p.ranks_by_node(8),
            vec![vec![0, 1, 2], vec![3, 4, 5], vec![6, 7]]
        );
        assert!(p.shares_nodes(8));
        // No node count: every rank on its own node, as an unplaced run.
        let own = placement(0, Distribution::Block);
        assert_eq!(own.node_count(5), 5);
        assert!((0..5).all(|r| own.node_of(r, 5) == r));
        assert!(!own.shares_nodes(5));
    }

    #[test]
    fn cyclic_puts_the_first_ranks_on_different_nodes() {
        // 16 shard ranks and 32 workers on 16 nodes: each one shard and two workers.
        let p = placement(16, Distribution::Cyclic);
        let nodes = p.ranks_by_node(48);
        assert_eq!(nodes.len(), 16);
        for (n, ranks) in nodes.iter().enumerate() {
            assert_eq!(ranks, &vec![n, n + 16, n + 32]);
        }
        // The same ranks on 32 nodes, as many as allreduce's 32 workers take: the first 16
        // hold a shard and a worker, the others one worker.
        let p = placement(32, Distribution::Cyclic);
        let nodes = p.ranks_by_node(48);
        assert_eq!(nodes.len(), 32);
        assert_eq!(nodes[0], vec![0, 32]);
        assert_eq!(nodes[15], vec![15, 47]);
        assert_eq!(nodes[16], vec![16]);
    }

    #[test]
    fn more_nodes_than_ranks_is_refused() {
        let p = placement(40, Distribution::Cyclic);
        let err = p.check(36).unwrap_err();
        assert!(err.contains("cluster.nodes = 40"), "{err}");
        assert!(p.check(40).is_ok());
        assert!(placement(0, Distribution::Block).check(1).is_ok());
    }
}
