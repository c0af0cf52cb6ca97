//! Who each group is, so that a group server missing from a meeting of the group servers is
//! named by its ranks: the error a user reads when a stopped worker (or server) ends the job
//! at a checkpoint, a regroup or the end of training ([`crate::comm::SubComm::arrive`]).

use std::fmt::Write;

/// Each group's server rank and worker ranks (world ranks), as the run started.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Roll {
    servers: Vec<usize>,
    workers: Vec<Vec<usize>>,
    /// Workers may have moved between groups since (regrouping): their ranks are then
    /// those of the start.
    regrouping: bool,
}

/// Which meeting a server came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Occasion {
    Checkpoint,
    Regroup,
    End,
}

impl Occasion {
    fn words(self) -> &'static str {
        match self {
            Occasion::Checkpoint => "checkpoint",
            Occasion::Regroup => "regroup",
            Occasion::End => "end-of-training",
        }
    }
}

impl Roll {
    pub fn new(servers: Vec<usize>, workers: Vec<Vec<usize>>, regrouping: bool) -> Self {
        Roll {
            servers,
            workers,
            regrouping,
        }
    }

    /// Group `g` in words: "group 1 (server rank 1, workers 4, 5)".
    fn group(&self, g: usize) -> String {
        let Some(server) = self.servers.get(g) else {
            return format!("group {g}");
        };
        let workers = self.workers.get(g).map(|w| list(w)).unwrap_or_default();
        let when = if self.regrouping { " at the start" } else { "" };
        format!("group {g} (server rank {server}, workers{when} {workers})")
    }

    /// The error of a meeting `absent` groups did not come to within `timeout_s`.
    pub fn absent(&self, absent: &[usize], occasion: Occasion, timeout_s: f64) -> String {
        let mut names = String::new();
        for (i, &g) in absent.iter().enumerate() {
            let sep = if i == 0 { "" } else { "; " };
            let _ = write!(names, "{sep}{}", self.group(g));
        }
        let verb = if absent.len() == 1 { "has" } else { "have" };
        format!(
            "{names} did not come to the group servers' {} meeting within {timeout_s} s \
             (run.meeting_timeout_s): a worker of it or its server {verb} stopped answering \
             (stopped, swapped out or hung), so the job stops here rather than wait for it",
            occasion.words()
        )
    }
}

/// "4, 5".
fn list(ranks: &[usize]) -> String {
    let words: Vec<String> = ranks.iter().map(usize::to_string).collect();
    words.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_absent_group_is_named_by_its_ranks_and_the_setting_that_bounds_the_wait() {
        let roll = Roll::new(vec![0, 1], vec![vec![2, 3], vec![4, 5]], false);
        let e = roll.absent(&[1], Occasion::Checkpoint, 5.0);
        assert!(
            e.starts_with("group 1 (server rank 1, workers 4, 5) did not come to the group servers' checkpoint meeting within 5 s (run.meeting_timeout_s)"),
            "{e}"
        );
    }

    #[test]
    fn several_absent_groups_are_each_named_and_moved_workers_said_to_be_the_starts() {
        let roll = Roll::new(vec![0, 1, 2], vec![vec![3], vec![4], vec![5, 6]], true);
        let e = roll.absent(&[0, 2], Occasion::Regroup, 2.5);
        assert!(
            e.starts_with("group 0 (server rank 0, workers at the start 3); group 2 (server rank 2, workers at the start 5, 6) did not come to the group servers' regroup meeting within 2.5 s"),
            "{e}"
        );
        assert!(e.contains("have stopped answering"), "{e}");
    }

    #[test]
    fn a_group_beyond_the_roll_is_still_named() {
        let e = Roll::default().absent(&[3], Occasion::End, 1.0);
        assert!(
            e.starts_with("group 3 did not come to the group servers' end-of-training meeting"),
            "{e}"
        );
    }
}
