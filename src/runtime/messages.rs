//! The parameter-server messages over the links: each of [`crate::protocol::wire`]'s
//! messages encoded into, or decoded from, the words [`crate::comm::p2p`] moves, and the
//! protocol's rules the links leave to their callers.
//!
//! * A worker alternates [`WorkerMessages::push`] and [`WorkerMessages::recv_weights`]; the
//!   server may also send weights first (the initial model).
//! * The server sends stop to a worker only in answer to that worker's push
//!   ([`ServerMessages::send_stop`]; the worker is then waiting, with nothing in flight), and
//!   the worker leaves the server's link: a later push from it is an error, and
//!   [`ServerMessages::wait_push`] returns `None` once every worker is stopped. The worker
//!   sends nothing afterwards: a stop closes its link, so a push is refused.
//! * A push without payload is a leave: the worker's other server shard said stop
//!   (`sync.shards`, [`crate::runtime::shard_links`]); the server answers it with stop and
//!   stops its other workers too.
//! * Regrouping: the server may answer a push (or a worker already waiting) with Regroup
//!   instead of weights ([`ServerMessages::send_regroup`]): a tag, and the world ranks of the
//!   worker's group from now on, its server first. Every member of that group then forms
//!   the group's new communicator ([`crate::comm::Collectives::create_group`] with that
//!   tag), and the worker's link moves to it ([`WorkerLink::rebind`]), where its weights
//!   come from the server at rank 0. The server moves its link the same way
//!   ([`ServerLink::rebind`]) once it has told every worker it had.
//!
//! A push costs what it did when the links wrote the headers themselves: its header is
//! built on the stack and copied into the send buffer with the gradient; the server decodes
//! it where it was received; the weights' headers go into the link's header words of each
//! worker, beside the one shared copy of the weights; and the worker copies the weights out
//! of its receive buffer once. Only a Regroup, rare, encodes its members into a new buffer.

use std::time::Instant;

use thiserror::Error;

use crate::comm::p2p::{Arrival, ServerLink, Waited, WorkerLink};
use crate::comm::CommError;
use crate::protocol::wire::{self, Push, Reply, WireError};

/// Everything that can go wrong with a message: moving it, or its format.
#[derive(Debug, Error)]
pub enum MessageError {
    #[error(transparent)]
    Comm(#[from] CommError),
    #[error("a malformed message from the server: {0}")]
    FromServer(WireError),
    #[error("a malformed push from worker slot {worker} (rank {rank} of its link): {error}")]
    FromWorker {
        worker: usize,
        rank: usize,
        error: WireError,
    },
    #[error("a Regroup that cannot be sent: {0}")]
    Unsendable(WireError),
    /// A server shard answered a worker's leave with weights (`runtime::shard_links`).
    #[error("server shard {shard} answered a leave with weights; it must stop the worker")]
    LeaveNotStopped { shard: usize },
    /// A server shard told a worker to stop while another told it of its new group.
    #[error("server shard {shard} told the worker to stop while another shard regrouped it")]
    StopInRegroup { shard: usize },
    /// A server shard answered a worker's ask for its new group with something else.
    #[error(
        "server shard {shard} answered the worker's ask for its new group with weights or stop"
    )]
    AskNotAnswered { shard: usize },
    /// Two server shards named different workers for the worker's new group.
    #[error("server shards 0 and {shard} name different workers for the new group: {first:?} and {other:?}")]
    RegroupsDisagree {
        shard: usize,
        first: Vec<usize>,
        other: Vec<usize>,
    },
    /// A 16-bit reply (`compression.reply = "bf16"`) of the wrong length.
    #[error("server shard {shard} sent 16-bit weights that do not fit its range: {error}")]
    PackedReply {
        shard: usize,
        error: crate::compress::bf16::PackedLength,
    },
}

/// A worker's new group (a Regroup message): the world ranks of its members, the server
/// first, and the tag their new communicator is created with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Regroup {
    pub tag: u16,
    pub members: Vec<usize>,
}

/// What a worker received from its server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeightsHeader {
    /// Model version chosen by the server (a Regroup's tag).
    pub version: u64,
    /// The server asks the worker to stop.
    pub stop: bool,
    /// Staleness of the worker's last push (server steps between the weights it used and
    /// its arrival), saturating at [`wire::MAX_STALENESS`].
    pub staleness: u64,
    /// Number of weights copied into the caller's buffer.
    pub len: usize,
    /// Regrouping: the worker's group from now on (nothing was copied into the caller's
    /// buffer).
    pub regroup: Option<Regroup>,
}

/// A push handed out by [`ServerMessages::poll_push`]/[`ServerMessages::wait_push`];
/// borrows the worker's receive buffer until the next poll or wait.
#[derive(Debug)]
pub struct PushRef<'a> {
    /// Index of the worker's slot in the link ([`ServerLink::new`]).
    pub worker: usize,
    /// The worker's clock.
    pub clock: u64,
    /// The worker's loss.
    pub loss: f32,
    /// The payload (gradient), `len <= capacity`.
    pub payload: &'a [f32],
    /// Wall seconds of copying the push into the server's buffer (`MPI_Mrecv`).
    pub receive_s: f64,
    /// Thread CPU seconds of the same copy.
    pub receive_cpu_s: f64,
}

/// A worker's messages on its link to its server.
pub trait WorkerMessages {
    /// Sends Push{clock, loss, payload} (the gradient, or a change) and posts the receive
    /// for the answer.
    fn push(&mut self, clock: u64, loss: f32, payload: &[f32]) -> Result<(), MessageError>;

    /// Blocks until the server's answer arrives: weights (copied into `out[..len]`), stop
    /// (the link is closed then), or a Regroup.
    fn recv_weights(&mut self, out: &mut [f32]) -> Result<WeightsHeader, MessageError>;
}

impl WorkerMessages for WorkerLink {
    fn push(&mut self, clock: u64, loss: f32, payload: &[f32]) -> Result<(), MessageError> {
        Ok(self.send(&Push { clock, loss }.encode(), payload)?)
    }

    fn recv_weights(&mut self, out: &mut [f32]) -> Result<WeightsHeader, MessageError> {
        let message = self.recv()?;
        let (reply, payload) =
            Reply::decode(message, out.len()).map_err(MessageError::FromServer)?;
        let header = answer(reply, payload, out);
        if header.stop {
            self.close();
        }
        Ok(header)
    }
}

/// What `reply` with `payload` (whose length [`Reply::decode`] checked against `out`) tells
/// a worker; weights are copied into `out`.
fn answer(reply: Reply, payload: &[f32], out: &mut [f32]) -> WeightsHeader {
    let header = |version, stop, staleness| WeightsHeader {
        version,
        stop,
        staleness,
        len: 0,
        regroup: None,
    };
    match reply {
        Reply::Weights { version, staleness } => {
            out[..payload.len()].copy_from_slice(payload);
            WeightsHeader {
                len: payload.len(),
                ..header(version, false, staleness)
            }
        }
        Reply::Stop { version, staleness } => header(version, true, staleness),
        Reply::Regroup { tag } => WeightsHeader {
            regroup: Some(Regroup {
                tag,
                members: wire::decode_members(payload),
            }),
            ..header(u64::from(tag), false, 0)
        },
    }
}

/// What a wait for a push with a deadline ended with.
pub enum NextPush<'a> {
    Push(PushRef<'a>),
    /// The deadline passed first.
    Deadline,
    /// Every worker is stopped or gone.
    AllGone,
}

/// A server's messages on its link to its workers.
pub trait ServerMessages {
    /// A push that has arrived, without blocking; `None` if none has or every worker is
    /// stopped or gone.
    fn poll_push(&mut self) -> Result<Option<PushRef<'_>>, MessageError>;

    /// Blocks until a push arrives; `None` when every worker is stopped or gone.
    fn wait_push(&mut self) -> Result<Option<PushRef<'_>>, MessageError>;

    /// As [`ServerMessages::wait_push`], but no later than `deadline`.
    fn wait_push_until(&mut self, deadline: Instant) -> Result<NextPush<'_>, MessageError>;

    /// Blocks until worker index `worker`'s next push arrives (the others' stay queued).
    fn wait_push_from(&mut self, worker: usize) -> Result<PushRef<'_>, MessageError>;

    /// Sends Weights{version, staleness(w), weights} to every worker index w in `workers`,
    /// from one shared copy of the weights.
    fn send_weights(
        &mut self,
        workers: &[usize],
        version: u64,
        weights: &[f32],
        staleness: impl Fn(usize) -> u64,
    ) -> Result<(), MessageError>;

    /// Tells worker index `worker` to stop (in answer to its push), with the version and
    /// staleness its push was applied at, and expects nothing more from it.
    fn send_stop(
        &mut self,
        worker: usize,
        version: u64,
        staleness: u64,
    ) -> Result<(), MessageError>;

    /// Answers worker index `worker` (waiting, its push applied) with Regroup: its group from
    /// now on is `members` (world ranks, the server first), whose communicator is created with
    /// `tag`. The worker stays on this link until the server leaves it or rebinds without it.
    fn send_regroup(
        &mut self,
        worker: usize,
        tag: u16,
        members: &[usize],
    ) -> Result<(), MessageError>;
}

impl ServerMessages for ServerLink {
    fn poll_push(&mut self) -> Result<Option<PushRef<'_>>, MessageError> {
        self.poll_message()?.map(push_of).transpose()
    }

    fn wait_push(&mut self) -> Result<Option<PushRef<'_>>, MessageError> {
        self.wait_message()?.map(push_of).transpose()
    }

    fn wait_push_until(&mut self, deadline: Instant) -> Result<NextPush<'_>, MessageError> {
        Ok(match self.wait_message_until(deadline)? {
            Waited::Message(m) => NextPush::Push(push_of(m)?),
            Waited::Deadline => NextPush::Deadline,
            Waited::AllLeft => NextPush::AllGone,
        })
    }

    fn wait_push_from(&mut self, worker: usize) -> Result<PushRef<'_>, MessageError> {
        push_of(self.wait_message_from(worker)?)
    }

    fn send_weights(
        &mut self,
        workers: &[usize],
        version: u64,
        weights: &[f32],
        staleness: impl Fn(usize) -> u64,
    ) -> Result<(), MessageError> {
        let header = |w| {
            let staleness = staleness(w);
            Reply::Weights { version, staleness }.encode()
        };
        Ok(self.send_shared(workers, weights, header)?)
    }

    fn send_stop(
        &mut self,
        worker: usize,
        version: u64,
        staleness: u64,
    ) -> Result<(), MessageError> {
        let stop = Reply::Stop { version, staleness };
        self.send_to(worker, &stop.encode(), &[])?;
        Ok(self.leave(worker)?)
    }

    fn send_regroup(
        &mut self,
        worker: usize,
        tag: u16,
        members: &[usize],
    ) -> Result<(), MessageError> {
        let payload = wire::encode_members(members).map_err(MessageError::Unsendable)?;
        Ok(self.send_to(worker, &Reply::Regroup { tag }.encode(), &payload)?)
    }
}

/// The push a worker's message holds.
fn push_of(arrival: Arrival<'_>) -> Result<PushRef<'_>, MessageError> {
    let Arrival {
        worker,
        rank,
        message,
        receive_s,
        receive_cpu_s,
    } = arrival;
    let (push, payload) = Push::decode(message).map_err(|error| MessageError::FromWorker {
        worker,
        rank,
        error,
    })?;
    Ok(PushRef {
        worker,
        clock: push.clock,
        loss: push.loss,
        payload,
        receive_s,
        receive_cpu_s,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_copy_weights_and_nothing_else() {
        let mut out = [9.0f32; 4];
        let weights = Reply::Weights {
            version: u64::MAX,
            staleness: 3,
        };
        let h = answer(weights, &[1.0, f32::NAN], &mut out);
        assert_eq!(
            (h.version, h.stop, h.staleness, h.len),
            (u64::MAX, false, 3, 2)
        );
        assert_eq!(out[0], 1.0);
        assert!(out[1].is_nan());
        assert_eq!(out[2..], [9.0, 9.0]);
        let stop = Reply::Stop {
            version: 5,
            staleness: 7,
        };
        let h = answer(stop, &[], &mut out);
        assert_eq!((h.version, h.stop, h.staleness, h.len), (5, true, 7, 0));
        let members = wire::encode_members(&[4, 0, 2]).unwrap();
        let h = answer(Reply::Regroup { tag: 6 }, &members, &mut out);
        let regroup = Regroup {
            tag: 6,
            members: vec![4, 0, 2],
        };
        assert_eq!((h.version, h.stop, h.len), (6, false, 0));
        assert_eq!(h.regroup, Some(regroup));
        assert_eq!(out[2..], [9.0, 9.0], "members are not weights");
    }

    /// Worker slot 2's `message`, from rank 3.
    fn arrival(message: &[f32]) -> Arrival<'_> {
        Arrival {
            worker: 2,
            rank: 3,
            message,
            receive_s: 0.0,
            receive_cpu_s: 0.0,
        }
    }

    #[test]
    fn pushes_decode_and_a_malformed_one_names_its_sender() {
        let err = push_of(arrival(&[0.0, 0.0])).unwrap_err();
        assert!(matches!(
            err,
            MessageError::FromWorker {
                worker: 2,
                rank: 3,
                error: WireError::Short { words: 2 }
            }
        ));
        assert!(err.to_string().contains("worker slot 2 (rank 3"), "{err}");
        let [a, b, c] = Push {
            clock: 8,
            loss: 0.25,
        }
        .encode();
        let message = [a, b, c, 1.5];
        let push = push_of(arrival(&message)).unwrap();
        assert_eq!((push.worker, push.clock, push.loss), (2, 8, 0.25));
        assert_eq!(push.payload, [1.5]);
    }
}
