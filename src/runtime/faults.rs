//! Faults a test can inject into a real run, to check that the job stops cleanly and names
//! the cause. They are read from the environment once, at set-up; a run without them is
//! untouched (the worker loop asks [`Faults::before_push`], which then does nothing).
//!
//! `GSSP_FAULT_NAN_GRADIENT=RANK:ITERATION` makes the parameter-server worker of world rank
//! RANK push a gradient holding a NaN at its iteration ITERATION (from 1), to check that
//! its server stops the job naming both.
//!
//! `GSSP_FAULT_SERVER_STOP=RANK:PUSHES` makes the server (or server shard) of world rank
//! RANK decide the stop once it has applied PUSHES pushes, whatever the budget: with
//! sharded servers (`sync.shards`) the other shards of its group then learn it from the
//! workers' leaves (`runtime::shard_links`).

use thiserror::Error;

use crate::compute::backend::Backend;
use crate::compute::model::Trainable;
use crate::compute::workload::ComputeStep;

/// The environment variable of the NaN-gradient fault.
pub const NAN_GRADIENT_VAR: &str = "GSSP_FAULT_NAN_GRADIENT";

/// The environment variable of the early server stop.
pub const SERVER_STOP_VAR: &str = "GSSP_FAULT_SERVER_STOP";

/// A fault-injection variable that cannot be read (every rank reads the same environment, so
/// all stop together on it, rank 0 naming it).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FaultError {
    #[error("{NAN_GRADIENT_VAR}: must be RANK:ITERATION (iteration >= 1), got {value:?}")]
    NanGradient { value: String },
    #[error("{SERVER_STOP_VAR}: must be RANK:PUSHES (pushes >= 1), got {value:?}")]
    ServerStop { value: String },
}

/// The faults this rank injects.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Faults {
    /// The iteration whose gradient gets a NaN before it is pushed.
    pub nan_gradient_at: Option<u64>,
    /// A server's pushes after which it decides the stop.
    pub server_stop_after: Option<u64>,
}

impl Faults {
    /// The faults of world rank `rank`, from the environment.
    pub fn from_env(rank: usize) -> Result<Faults, FaultError> {
        let value = std::env::var(NAN_GRADIENT_VAR).ok();
        let stop = std::env::var(SERVER_STOP_VAR).ok();
        Ok(Faults {
            nan_gradient_at: nan_gradient_at(value.as_deref(), rank)?,
            server_stop_after: rank_and_count(stop.as_deref(), rank).map_err(|_| {
                FaultError::ServerStop {
                    value: stop.clone().unwrap_or_default(),
                }
            })?,
        })
    }

    /// Called with a worker's gradient ready to push at iteration `clock`.
    pub fn before_push<B: Backend>(&self, clock: u64, step: &mut ComputeStep<B>) {
        if self.nan_gradient_at == Some(clock) {
            let mut grads = vec![0.0f32; step.net.num_params()];
            step.net.grads_to_host(&mut grads);
            let middle = grads.len() / 2;
            grads[middle] = f32::NAN;
            step.net.grads_from_host(&grads);
        }
    }
}

/// The iteration at which world rank `rank` injects a NaN, from the value of
/// [`NAN_GRADIENT_VAR`] (`None` when unset or meant for another rank).
fn nan_gradient_at(value: Option<&str>, rank: usize) -> Result<Option<u64>, FaultError> {
    rank_and_count(value, rank).map_err(|_| FaultError::NanGradient {
        value: value.unwrap_or_default().to_string(),
    })
}

/// The count (>= 1) that `value`, `RANK:COUNT`, sets for world rank `rank` (`None` when
/// unset or meant for another rank); `Err` when it is not of that form.
fn rank_and_count(value: Option<&str>, rank: usize) -> Result<Option<u64>, ()> {
    let Some(value) = value else { return Ok(None) };
    let parsed = value.split_once(':').and_then(|(r, i)| {
        Some((
            r.trim().parse::<usize>().ok()?,
            i.trim().parse::<u64>().ok()?,
        ))
    });
    match parsed {
        Some((r, i)) if i >= 1 => Ok((r == rank).then_some(i)),
        _ => Err(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nan_fault_names_one_rank_and_iteration() {
        assert_eq!(nan_gradient_at(None, 3), Ok(None));
        assert_eq!(nan_gradient_at(Some("3:7"), 3), Ok(Some(7)));
        assert_eq!(nan_gradient_at(Some(" 3 : 7 "), 3), Ok(Some(7)));
        assert_eq!(nan_gradient_at(Some("3:7"), 2), Ok(None));
        for bad in ["", "3", "3:", "x:1", "3:0", "-1:2", "3:7:1"] {
            let err = nan_gradient_at(Some(bad), 3).unwrap_err();
            let value = bad.to_string();
            assert_eq!(err, FaultError::NanGradient { value });
            assert!(
                err.to_string()
                    .starts_with("GSSP_FAULT_NAN_GRADIENT: must be RANK:ITERATION"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn server_stop_names_one_rank_and_its_pushes() {
        assert_eq!(rank_and_count(Some("1:20"), 1), Ok(Some(20)));
        assert_eq!(rank_and_count(Some("1:20"), 0), Ok(None));
        assert_eq!(rank_and_count(None, 1), Ok(None));
        assert_eq!(rank_and_count(Some("1:0"), 1), Err(()));
        let err = FaultError::ServerStop { value: "x".into() };
        assert_eq!(
            err.to_string(),
            "GSSP_FAULT_SERVER_STOP: must be RANK:PUSHES (pushes >= 1), got \"x\""
        );
    }
}
