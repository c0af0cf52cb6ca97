//! Arrival at a meeting, with a deadline.
//!
//! The group servers' meetings (checkpoints, regroups, the end of training) are collectives,
//! and a collective waits for every member however long that takes: a server held by a
//! stopped worker would hold every other group with it, for good. So before a meeting each
//! member tells every other that it has come (one 8-byte message each way, tag
//! [`TAG_ARRIVAL`]) and waits a bounded time for all of them to say the same. Who did not come
//! in time is returned, for the caller to name, instead of being waited for.
//!
//! Arrivals pair up by their order (MPI does not reorder messages between two ranks on one
//! tag): the n-th arrival of one rank meets the n-th of every other, and each carries its
//! meeting's number so that a mismatch is an error rather than a silent mix-up. After a
//! meeting that some member missed the pairing is lost: the caller ends the job.

use std::os::raw::c_int;
use std::time::{Duration, Instant};

use mpi::ffi;

use super::p2p::{abandon_send, cancel_recv, is_active, null_request, test};
use super::{check, Collectives, CommError, HasHandle, SubComm};

/// The tag of arrival messages; nothing else goes point to point on a servers' communicator.
pub const TAG_ARRIVAL: c_int = 0x4d45;

/// What the members of a meeting agreed: whether all of them and whether any of them
/// voted to stop, and the latest of their clocks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Votes {
    pub all_stop: bool,
    pub any_stop: bool,
    pub time_s: f64,
}

impl SubComm {
    /// Meeting number `meeting` of every rank of the communicator ([`SubComm::arrive`],
    /// then the votes): this rank votes `stop` and brings its clock `time_s`. `Err` holds
    /// the ranks that had not come within `timeout` (the caller names them and ends the job).
    pub fn meet(
        &self,
        meeting: u64,
        timeout: Duration,
        (stop, time_s): (bool, f64),
    ) -> Result<Result<Votes, Vec<usize>>, CommError> {
        let absent = self.arrive(meeting, timeout)?;
        if !absent.is_empty() {
            return Ok(Err(absent));
        }
        let vote = f64::from(u8::from(stop));
        Ok(Ok(Votes {
            all_stop: self.allreduce_min_f64(vote)? > 0.0,
            any_stop: self.allreduce_max_f64(vote)? > 0.0,
            time_s: self.allreduce_max_f64(time_s)?,
        }))
    }

    /// Says this rank has come to meeting number `meeting` and waits at most `timeout` for
    /// every other rank of the communicator to come to it too. Returns the ranks (of this
    /// communicator) that had not come when the time ran out; empty when all came.
    pub fn arrive(&self, meeting: u64, timeout: Duration) -> Result<Vec<usize>, CommError> {
        self.arrive_within(meeting, 0, timeout)
    }

    /// [`SubComm::arrive`], where a rank that came to a meeting at most `slack` numbers
    /// from this rank's counts as come. A nonblocking reduction completes on each rank on
    /// its own: when one rank stops, a rank that already finished reduction n gives up on
    /// n + 1 while another gives up on n, and both came (no rank can be further apart: to
    /// finish n + 1 takes every rank's part of it).
    pub fn arrive_within(
        &self,
        meeting: u64,
        slack: u64,
        timeout: Duration,
    ) -> Result<Vec<usize>, CommError> {
        let deadline = Instant::now() + timeout;
        let me = self.rank();
        let others: Vec<usize> = (0..self.size()).filter(|&r| r != me).collect();
        let mut posted = Posted::new(others.len(), meeting);
        for (i, &peer) in others.iter().enumerate() {
            posted.post(self, i, peer)?;
        }
        let mut pending: Vec<usize> = (0..others.len()).collect();
        loop {
            let mut still = Vec::with_capacity(pending.len());
            for i in pending {
                if test(&mut posted.recvs[i])?.is_none() {
                    still.push(i);
                } else if posted.got[i].abs_diff(meeting) > slack {
                    return Err(CommError::Invalid {
                        what: "meeting arrival",
                        detail: format!(
                            "rank {} came to meeting {} while rank {me} came to meeting {meeting}",
                            others[i], posted.got[i]
                        ),
                    });
                }
            }
            pending = still;
            if pending.is_empty() {
                return Ok(Vec::new());
            }
            if Instant::now() >= deadline {
                return Ok(pending.iter().map(|&i| others[i]).collect());
            }
            super::idle::pause_or_yield();
        }
    }
}

/// The arrival messages in flight and their buffers. Dropping it cancels the receives still
/// posted and lets unfinished sends complete in the background, leaking a buffer MPI may
/// still touch rather than freeing it under MPI's feet.
struct Posted {
    /// What each peer said (its meeting number), written by MPI.
    got: Vec<u64>,
    /// This rank's meeting number, read by MPI for every send.
    sent: Vec<u64>,
    recvs: Vec<ffi::MPI_Request>,
    sends: Vec<ffi::MPI_Request>,
}

impl Posted {
    fn new(peers: usize, meeting: u64) -> Self {
        Posted {
            got: vec![0; peers],
            sent: vec![meeting],
            recvs: vec![null_request(); peers],
            sends: vec![null_request(); peers],
        }
    }

    /// Posts the receive from `peer` into slot `i`, then the send to it.
    fn post(&mut self, comm: &SubComm, i: usize, peer: usize) -> Result<(), CommError> {
        let raw = comm.handle().raw;
        let peer = c_int::try_from(peer).map_err(|_| CommError::Invalid {
            what: "meeting arrival",
            detail: format!("rank {peer} does not fit in a C int"),
        })?;
        // SAFETY: reading an extern constant.
        let u64t = unsafe { ffi::RSMPI_UINT64_T };
        // SAFETY: `got[i]` and `sent[0]` are one u64 each in buffers that neither move nor
        // are freed while a request on them is active (Drop cancels or leaks them).
        check("MPI_Irecv", unsafe {
            ffi::MPI_Irecv(
                (&mut self.got[i] as *mut u64).cast(),
                1,
                u64t,
                peer,
                TAG_ARRIVAL,
                raw,
                &mut self.recvs[i],
            )
        })?;
        // SAFETY: as above.
        check("MPI_Isend", unsafe {
            ffi::MPI_Isend(
                self.sent.as_ptr().cast(),
                1,
                u64t,
                peer,
                TAG_ARRIVAL,
                raw,
                &mut self.sends[i],
            )
        })
    }
}

impl Drop for Posted {
    fn drop(&mut self) {
        let mut receiving = false;
        for req in &mut self.recvs {
            receiving |= cancel_recv(req).is_err() && is_active(*req);
        }
        if receiving {
            std::mem::forget(std::mem::take(&mut self.got));
        }
        let mut sending = false;
        for req in &mut self.sends {
            sending |= abandon_send(req);
        }
        if sending {
            std::mem::forget(std::mem::take(&mut self.sent));
        }
    }
}
