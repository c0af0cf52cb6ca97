//! Which GPU a rank uses, and whether this node has a usable CUDA driver.

/// The environment variables that carry a rank's index among the ranks of its node, in
/// the order they are read: OpenMPI's `mpirun`, Slurm's `srun`, MPICH's Hydra.
pub const LOCAL_RANK_VARS: [&str; 3] = [
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "SLURM_LOCALID",
    "MPI_LOCALRANKID",
];

/// This rank's index on its node from the first of [`LOCAL_RANK_VARS`] that `lookup`
/// finds and that parses; `None` outside a launcher (one process: GPU 0).
pub fn local_rank(lookup: impl Fn(&str) -> Option<String>) -> Option<usize> {
    LOCAL_RANK_VARS
        .iter()
        .find_map(|v| lookup(v).and_then(|s| s.trim().parse().ok()))
}

/// The GPU of the rank with node-local index `local_rank` among `devices` GPUs: ranks
/// take the GPUs in turn, so with one rank per GPU each has its own, and more ranks than
/// GPUs share them evenly. `None` when the node has no GPU.
pub fn gpu_for(local_rank: Option<usize>, devices: usize) -> Option<usize> {
    (devices > 0).then(|| local_rank.unwrap_or(0) % devices)
}

/// Why this node cannot run CUDA, or `None` when the driver library loads and sees at
/// least one device.
pub fn unavailable() -> Option<String> {
    // SAFETY: only tries to load the driver library by its usual names.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Some(
            "no CUDA driver library (libcuda.so) on this node: install the NVIDIA driver, or run on a GPU node"
                .to_string(),
        );
    }
    match cudarc::driver::CudaContext::device_count() {
        Ok(n) if n > 0 => None,
        Ok(_) => Some("the CUDA driver sees no GPU on this node".to_string()),
        Err(e) => Some(format!("the CUDA driver failed to start: {e:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_rank_comes_from_the_first_launcher_variable_that_parses() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(local_rank(env(&[])), None);
        assert_eq!(local_rank(env(&[("SLURM_LOCALID", "3")])), Some(3));
        assert_eq!(
            local_rank(env(&[
                ("SLURM_LOCALID", "3"),
                ("OMPI_COMM_WORLD_LOCAL_RANK", "1")
            ])),
            Some(1)
        );
        assert_eq!(
            local_rank(env(&[
                ("OMPI_COMM_WORLD_LOCAL_RANK", "x"),
                ("SLURM_LOCALID", "2")
            ])),
            Some(2)
        );
    }

    #[test]
    fn ranks_take_the_gpus_in_turn() {
        assert_eq!(gpu_for(None, 4), Some(0));
        assert_eq!(gpu_for(Some(2), 4), Some(2));
        assert_eq!(gpu_for(Some(5), 4), Some(1));
        assert_eq!(gpu_for(Some(0), 0), None);
    }
}
