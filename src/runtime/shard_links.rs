//! A worker's links to its group's server, one per shard (`sync.shards`).
//!
//! With S shards, group g's server is S ranks; shard j holds range j of the parameters
//! ([`shard_ranges`]: contiguous, equal to within one value) and runs the parameter-server
//! loop over that range alone, on its own communicator with the group's workers
//! (`runtime::setup`). A worker sends range j of each gradient to shard j, then waits for
//! every shard's answer and writes range j of the weights from shard j's. Each shard sees
//! every push of every worker of its group in its own order, so each keeps the same SSP
//! clocks and releases a worker on the same rule; a worker starts its next step once
//! every shard has released it, so no worker is more than s steps ahead of the group's
//! slowest at any shard. A group's server traffic per push is spread over S links: this
//! is ps-lite's and BytePS's key-range sharding, the way a server keeps up with many
//! workers on a large model.
//!
//! Stopping: each shard decides on its own (the same epochs, its own clock), so a worker
//! may be told stop by one shard and sent weights by another for the same push. It then
//! sends each shard that sent weights a push without payload, a leave; such a shard
//! answers it with stop and stops its other workers too ([`crate::protocol::wire`]). Every
//! push a shard took is applied, so every push reaches every shard or, past the stop, none
//! of its work is lost at any shard that applied it. The workers of local steps take one
//! shard only (validated).
//!
//! Regrouping: each shard tells the worker its new group in answer to a push (Regroup), and
//! for the same push another shard may have answered with weights before the regroup was
//! decided. The worker then asks each such shard with a push without payload, which a
//! shard that has the worker still to tell answers with its Regroup
//! (`runtime::regrouper`). Once every shard has told it, the worker joins its new group's
//! communicators in shard order ([`ShardLinks::regroup`]), where each new shard sends it
//! the weights of its range.
//!
//! With `compression.push = "bf16"` each shard's range of a push travels as bfloat16, two
//! values a word, each range with its own error feedback ([`crate::compress::bf16`]); the
//! shard widens it back before it applies it. With `compression.reply = "bf16"` each
//! shard's range of the weights comes the same way and is widened into the worker's model.

use std::ops::Range;

use anyhow::{Context, Result};

use crate::comm::p2p::{LinkStats, WorkerLink};
use crate::comm::{Collectives, Comm, CommError};
use crate::compress::bf16;
use crate::config::Precision;
use crate::protocol::layout::shard_ranges;
use crate::protocol::wire::HEADER_WORDS;
use crate::runtime::messages::{MessageError, Regroup, WeightsHeader, WorkerMessages};

/// A worker's links to its server's shards, shard 0 first.
pub struct ShardLinks {
    links: Vec<WorkerLink>,
    ranges: Vec<Range<usize>>,
    /// Each shard's answer to the last push, kept to be refilled without allocating.
    headers: Vec<WeightsHeader>,
    /// With 16-bit pushes, each shard's range's encoder (empty: f32 pushes).
    encoders: Vec<bf16::Encoder>,
    /// A range of the last push, packed.
    packed: Vec<f32>,
    /// What the replies carry; with bfloat16, a range of the last reply as it came.
    reply: Precision,
    reply_words: Vec<f32>,
    /// Each shard's Regroup, shard 0 first, once every shard has told the worker its new
    /// group (empty otherwise).
    regroups: Vec<Regroup>,
}

impl ShardLinks {
    /// Links to the server at rank 0 of each of `comms` (shard 0 first) for a model of `n`
    /// parameters, whose pushes and replies carry `(push, reply)`. Not collective.
    pub fn new<C: Collectives>(
        comms: &[&C],
        n: usize,
        (push, reply): (Precision, Precision),
    ) -> Result<ShardLinks, CommError> {
        let ranges = shard_ranges(n, comms.len());
        let links = comms
            .iter()
            .zip(&ranges)
            .map(|(c, r)| WorkerLink::new(*c, 0, HEADER_WORDS, r.len()))
            .collect::<Result<Vec<_>, _>>()?;
        let headers = Vec::with_capacity(links.len());
        let encoders = match push {
            Precision::F32 => Vec::new(),
            Precision::Bf16 => ranges.iter().map(|r| bf16::Encoder::new(r.len())).collect(),
        };
        Ok(ShardLinks {
            links,
            ranges,
            headers,
            encoders,
            packed: Vec::new(),
            reply,
            reply_words: Vec::new(),
            regroups: Vec::new(),
        })
    }

    /// Shard `j`'s answer, the weights of its range written into `out`: as they came, or
    /// widened from bfloat16 (`compression.reply`).
    fn recv_range(&mut self, j: usize, out: &mut [f32]) -> Result<WeightsHeader, MessageError> {
        let link = &mut self.links[j];
        if self.reply == Precision::F32 {
            return link.recv_weights(out);
        }
        self.reply_words.resize(bf16::words_for(out.len()), 0.0);
        let mut header = link.recv_weights(&mut self.reply_words)?;
        if !header.stop && header.regroup.is_none() {
            bf16::decode(&self.reply_words[..header.len], out)
                .map_err(|error| MessageError::PackedReply { shard: j, error })?;
            header.len = out.len();
        }
        Ok(header)
    }

    /// After an answer that was a Regroup: joins the new group's communicator of every
    /// shard in shard order (each collective over its members, made from `world`) and
    /// moves each shard's link there, its new shard at rank 0.
    pub fn regroup(&mut self, world: &Comm) -> Result<()> {
        let groups = std::mem::take(&mut self.regroups);
        for (link, group) in self.links.iter_mut().zip(&groups) {
            log::debug!("regrouped into {:?}", group.members);
            let comm = world
                .create_group(&group.members, group.tag)
                .with_context(|| format!("regroup: joining the group {:?}", group.members))?;
            link.rebind(&comm, 0)?;
        }
        Ok(())
    }

    /// Counters of every link together.
    pub fn stats(&self) -> LinkStats {
        self.links.iter().fold(LinkStats::default(), |mut s, l| {
            let t = l.stats();
            s.bytes_sent += t.bytes_sent;
            s.bytes_received += t.bytes_received;
            s.messages_sent += t.messages_sent;
            s.messages_received += t.messages_received;
            s.wait_seconds += t.wait_seconds;
            s
        })
    }

    /// Ends every link ([`WorkerLink::finish`]).
    pub fn finish(&mut self) -> Result<(), CommError> {
        self.links.iter_mut().try_for_each(WorkerLink::finish)
    }

    /// With a Regroup among `headers`: asks each shard that answered with weights for its
    /// Regroup (a push without payload), keeps every shard's, and returns the answer that
    /// says regroup.
    fn gather_regroups(
        &mut self,
        headers: &mut [WeightsHeader],
        clock: u64,
    ) -> Result<WeightsHeader, MessageError> {
        if let Some(shard) = headers.iter().position(|h| h.stop) {
            return Err(MessageError::StopInRegroup { shard });
        }
        let mut scratch = Vec::new();
        for (j, header) in headers.iter_mut().enumerate() {
            if header.regroup.is_some() {
                continue;
            }
            let link = &mut self.links[j];
            link.push(clock, 0.0, &[])?;
            scratch.resize(self.ranges[j].len(), 0.0);
            let reply = link.recv_weights(&mut scratch)?;
            if reply.regroup.is_none() {
                return Err(MessageError::AskNotAnswered { shard: j });
            }
            *header = reply;
        }
        self.regroups = headers
            .iter_mut()
            .filter_map(|h| h.regroup.take())
            .collect();
        let first = &self.regroups[0];
        for (shard, other) in self.regroups.iter().enumerate().skip(1) {
            if other.members.get(1..) != first.members.get(1..) {
                return Err(MessageError::RegroupsDisagree {
                    shard,
                    first: first.members.clone(),
                    other: other.members.clone(),
                });
            }
        }
        Ok(WeightsHeader {
            version: 0,
            stop: false,
            staleness: 0,
            len: 0,
            regroup: Some(first.clone()),
        })
    }

    /// Sends a leave to each shard that answered `headers` with weights, and takes its stop.
    fn leave_open(&mut self, headers: &[WeightsHeader], clock: u64) -> Result<(), MessageError> {
        let mut scratch = Vec::new();
        for j in open_shards(headers) {
            let link = &mut self.links[j];
            link.push(clock, 0.0, &[])?;
            scratch.resize(self.ranges[j].len(), 0.0);
            let reply = link.recv_weights(&mut scratch)?;
            if !reply.stop {
                return Err(MessageError::LeaveNotStopped { shard: j });
            }
        }
        Ok(())
    }
}

impl WorkerMessages for ShardLinks {
    fn push(&mut self, clock: u64, loss: f32, payload: &[f32]) -> Result<(), MessageError> {
        for (j, (link, range)) in self.links.iter_mut().zip(&self.ranges).enumerate() {
            let values = &payload[range.clone()];
            match self.encoders.get_mut(j) {
                Some(encoder) => {
                    encoder.encode(values, &mut self.packed);
                    link.push(clock, loss, &self.packed)?;
                }
                None => link.push(clock, loss, values)?,
            }
        }
        Ok(())
    }

    fn recv_weights(&mut self, out: &mut [f32]) -> Result<WeightsHeader, MessageError> {
        let mut headers = std::mem::take(&mut self.headers);
        headers.clear();
        for j in 0..self.links.len() {
            let range = self.ranges[j].clone();
            headers.push(self.recv_range(j, &mut out[range])?);
        }
        let version = headers[0].version;
        let answer = if headers.iter().any(|h| h.regroup.is_some()) {
            self.gather_regroups(&mut headers, version)
        } else if headers.iter().any(|h| h.stop) {
            self.leave_open(&headers, version)
                .map(|()| combine(&headers))
        } else {
            Ok(combine(&headers))
        };
        self.headers = headers;
        answer
    }
}

/// The shards whose answer was weights, not stop.
fn open_shards(headers: &[WeightsHeader]) -> Vec<usize> {
    (0..headers.len()).filter(|&j| !headers[j].stop).collect()
}

/// The answer of every shard as one: stop if any said stop (the others are left then),
/// shard 0's version, the largest staleness, the weights of every range.
fn combine(headers: &[WeightsHeader]) -> WeightsHeader {
    let stop = headers.iter().any(|h| h.stop);
    WeightsHeader {
        version: headers.first().map_or(0, |h| h.version),
        stop,
        staleness: headers.iter().map(|h| h.staleness).max().unwrap_or(0),
        len: match stop {
            true => 0,
            false => headers.iter().map(|h| h.len).sum(),
        },
        regroup: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(version: u64, stop: bool, staleness: u64, len: usize) -> WeightsHeader {
        WeightsHeader {
            version,
            stop,
            staleness,
            len,
            regroup: None,
        }
    }

    #[test]
    fn every_shards_weights_make_one_answer_at_the_first_shards_version() {
        let h = combine(&[header(7, false, 1, 4), header(9, false, 3, 3)]);
        assert_eq!(h, header(7, false, 3, 7));
        assert!(open_shards(&[header(7, false, 1, 4), header(9, false, 3, 3)]).len() == 2);
    }

    #[test]
    fn one_shards_stop_stops_the_worker_and_leaves_the_others() {
        let headers = [
            header(7, false, 1, 4),
            header(9, true, 0, 0),
            header(8, false, 2, 3),
        ];
        assert_eq!(combine(&headers), header(7, true, 2, 0));
        assert_eq!(open_shards(&headers), [0, 2]);
    }
}
