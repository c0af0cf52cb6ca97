//! How a rank waits for a message: spinning inside MPI (MPI's own default, the lowest
//! latency when every rank has a core of its own), or polling with short sleeps in between
//! when the node runs more ranks than it has cores. There a spinning rank takes a core from
//! one that has work, and every rank waiting for it waits longer. A poll every [`PAUSE`]
//! adds at most one pause to a wait, short against an iteration.
//! `GSSP_IDLE_WAIT=spin` or `=sleep` overrides the choice.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use thiserror::Error;

/// Between two polls of a sleeping wait.
const PAUSE: Duration = Duration::from_micros(50);

static SLEEP_WHEN_IDLE: AtomicBool = AtomicBool::new(false);

/// A `GSSP_IDLE_WAIT` that names no way of waiting (read by every rank of a node at
/// `MPI_Init`, before any collective can stop them together: each rank reports it).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("GSSP_IDLE_WAIT must be \"spin\" or \"sleep\", got {value:?}")]
pub struct IdleWaitError {
    pub value: String,
}

/// Whether waits sleep between polls: `overrule` ("spin" or "sleep") decides if given,
/// else whether the node's `local_ranks` outnumber its `cores` (unknown: spin, as MPI does).
pub(crate) fn sleeps(
    overrule: Option<&str>,
    local_ranks: Option<usize>,
    cores: usize,
) -> Result<bool, IdleWaitError> {
    match overrule {
        Some("spin") => Ok(false),
        Some("sleep") => Ok(true),
        Some(other) => Err(IdleWaitError {
            value: other.to_string(),
        }),
        None => Ok(local_ranks.is_some_and(|n| n > cores)),
    }
}

/// Decides for this process from its environment (`GSSP_IDLE_WAIT`, and the local rank
/// count OpenMPI or Slurm give); returns the choice.
pub(crate) fn choose_from_env() -> Result<bool, IdleWaitError> {
    let overrule = std::env::var("GSSP_IDLE_WAIT").ok();
    let local_ranks = [
        "OMPI_COMM_WORLD_LOCAL_SIZE",
        "MPI_LOCALNRANKS",
        "SLURM_NTASKS_PER_NODE",
    ]
    .iter()
    .find_map(|key| std::env::var(key).ok()?.trim().parse().ok());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let sleep = sleeps(overrule.as_deref(), local_ranks, cores)?;
    SLEEP_WHEN_IDLE.store(sleep, Ordering::Relaxed);
    Ok(sleep)
}

/// Whether this process's waits sleep between polls.
pub(crate) fn sleeping() -> bool {
    SLEEP_WHEN_IDLE.load(Ordering::Relaxed)
}

/// One pause between two polls of a sleeping wait.
pub(crate) fn pause() {
    std::thread::sleep(PAUSE);
}

/// Between two polls of a wait that polls in any case (a deadline's): a pause where waits
/// sleep, else the core yielded to any thread that wants it.
pub(crate) fn pause_or_yield() {
    if sleeping() {
        pause();
    } else {
        std::thread::yield_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_sleep_only_on_an_oversubscribed_node_unless_overruled() {
        assert_eq!(sleeps(None, Some(20), 2), Ok(true));
        assert_eq!(sleeps(None, Some(2), 2), Ok(false));
        assert_eq!(sleeps(None, None, 2), Ok(false));
        assert_eq!(sleeps(Some("spin"), Some(20), 2), Ok(false));
        assert_eq!(sleeps(Some("sleep"), Some(1), 16), Ok(true));
        let err = sleeps(Some("yield"), Some(1), 16).unwrap_err();
        assert_eq!(err.value, "yield");
        assert_eq!(
            err.to_string(),
            "GSSP_IDLE_WAIT must be \"spin\" or \"sleep\", got \"yield\""
        );
    }
}
