//! The point-to-point messages between a worker and its server, as the `f32` words
//! [`crate::comm::p2p`] moves: a header of [`HEADER_WORDS`] words, then a payload. (The
//! group servers' messages to each other, over RMA, are [`super::mailbox`]'s.)
//!
//! | word | [`Push`] (worker -> server) | [`Reply`] (server -> worker)                          |
//! |------|-----------------------------|-------------------------------------------------------|
//! | 0    | clock, low 32 bits          | version (Regroup: its tag), low 32 bits               |
//! | 1    | clock, high 32 bits         | version (Regroup: its tag), high 32 bits              |
//! | 2    | loss (`f32`)                | flags: bit 0 stop, bit 1 regroup, bits 2..32 staleness |
//! | 3..  | the gradient (or change)    | Weights: the weights; Stop: none; Regroup: members    |
//!
//! A push without payload is a leave: a worker of sharded servers that another shard told
//! to stop (`runtime::shard_links`). The staleness is that of the worker's last push,
//! saturating at [`MAX_STALENESS`]. A
//! Regroup's members are the world ranks of the worker's group from now on, its server
//! first, each a `u32` bit pattern.
//!
//! Integer words travel as `f32` bit patterns (MPI copies `MPI_FLOAT` bit-exactly between
//! hosts of the same architecture, the deployment gssp targets). The payload's length is the
//! message's less the header, so a message needs no length field.
//!
//! Everything here is pure. Encoding builds the header words (the payload goes beside them:
//! a worker's send buffer, or the weights one server copy shares); decoding checks the
//! header and the payload's length against the kind and returns a [`WireError`] on a
//! message that breaks the format, never a panic.

use thiserror::Error;

/// Words of every message's header.
pub const HEADER_WORDS: usize = 3;

/// A message's header words.
pub type Header = [f32; HEADER_WORDS];

const STOP: u32 = 1;
const REGROUP: u32 = 2;
const FLAG_BITS: u32 = 2;

/// The largest staleness a [`Reply`] carries (2^30 - 1); a larger one saturates to it.
pub const MAX_STALENESS: u64 = (u32::MAX >> FLAG_BITS) as u64;

/// A message that breaks the format: a bug or memory corruption, never a user error.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum WireError {
    #[error("a message of {words} words is shorter than its {HEADER_WORDS}-word header")]
    Short { words: usize },
    /// Stop and regroup together, or a regroup with a staleness.
    #[error("reply flags {flags:#010x} are those of no message")]
    Flags { flags: u32 },
    #[error("regroup tag {tag} does not fit 16 bits")]
    Tag { tag: u64 },
    #[error("a {kind} message carries {len} payload words, expected {min} to {max}")]
    Length {
        kind: &'static str,
        len: usize,
        min: usize,
        max: usize,
    },
    #[error("member rank {rank} does not fit 32 bits")]
    Member { rank: usize },
}

/// A worker's push header: its clock (pushes so far) and its loss; the payload is the
/// gradient, or in local SGD the change its local steps made.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Push {
    pub clock: u64,
    pub loss: f32,
}

impl Push {
    /// The header words.
    pub fn encode(&self) -> Header {
        let [lo, hi] = split(self.clock);
        [lo, hi, self.loss]
    }

    /// The header of a whole `message` and its payload.
    pub fn decode(message: &[f32]) -> Result<(Push, &[f32]), WireError> {
        let (h, payload) = header(message)?;
        Ok((
            Push {
                clock: join(h),
                loss: h[2],
            },
            payload,
        ))
    }
}

/// A server's message to a worker, by kind; the payload goes beside the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// The model at `version`; `staleness` that of the worker's last push (0 before its
    /// first). The payload is the weights.
    Weights { version: u64, staleness: u64 },
    /// Stop, in answer to a push: the worker sends nothing more. No payload.
    Stop { version: u64, staleness: u64 },
    /// The worker's group from now on, whose communicator is created with `tag`. The payload
    /// is its members ([`encode_members`]), at least its server.
    Regroup { tag: u16 },
}

impl Reply {
    /// The header words; a staleness above [`MAX_STALENESS`] is sent as that.
    pub fn encode(&self) -> Header {
        let (version, flags) = match *self {
            Reply::Weights { version, staleness } => (version, staleness_bits(staleness)),
            Reply::Stop { version, staleness } => (version, staleness_bits(staleness) | STOP),
            Reply::Regroup { tag } => (u64::from(tag), REGROUP),
        };
        let [lo, hi] = split(version);
        [lo, hi, f32::from_bits(flags)]
    }

    /// The header of a whole `message` and its payload, whose length must fit the kind: none
    /// for Stop, at most `max` weights, 1 to `max` members.
    pub fn decode(message: &[f32], max: usize) -> Result<(Reply, &[f32]), WireError> {
        let (h, payload) = header(message)?;
        let reply = Reply::of(join(h), h[2].to_bits())?;
        reply.check_len(payload.len(), max)?;
        Ok((reply, payload))
    }

    /// The reply a version and flags word stand for.
    fn of(version: u64, flags: u32) -> Result<Reply, WireError> {
        let staleness = u64::from(flags >> FLAG_BITS);
        match flags & (STOP | REGROUP) {
            0 => Ok(Reply::Weights { version, staleness }),
            STOP => Ok(Reply::Stop { version, staleness }),
            REGROUP if staleness == 0 => u16::try_from(version)
                .map(|tag| Reply::Regroup { tag })
                .map_err(|_| WireError::Tag { tag: version }),
            _ => Err(WireError::Flags { flags }),
        }
    }

    /// Whether a payload of `len` words fits this kind (`max` as in [`Reply::decode`]).
    fn check_len(&self, len: usize, max: usize) -> Result<(), WireError> {
        let (kind, min, max) = match self {
            Reply::Weights { .. } => ("weights", 0, max),
            Reply::Stop { .. } => ("stop", 0, 0),
            Reply::Regroup { .. } => ("regroup", 1, max),
        };
        if (min..=max).contains(&len) {
            Ok(())
        } else {
            Err(WireError::Length {
                kind,
                len,
                min,
                max,
            })
        }
    }
}

/// A Regroup's payload: the world ranks `members`, each as a `u32` bit pattern.
pub fn encode_members(members: &[usize]) -> Result<Vec<f32>, WireError> {
    members
        .iter()
        .map(|&rank| {
            u32::try_from(rank)
                .map(f32::from_bits)
                .map_err(|_| WireError::Member { rank })
        })
        .collect()
}

/// The world ranks a Regroup's payload names.
pub fn decode_members(payload: &[f32]) -> Vec<usize> {
    payload.iter().map(|w| w.to_bits() as usize).collect()
}

/// A flags word's staleness bits, saturated.
fn staleness_bits(staleness: u64) -> u32 {
    (staleness.min(MAX_STALENESS) as u32) << FLAG_BITS
}

/// A message's header and payload.
fn header(message: &[f32]) -> Result<(&Header, &[f32]), WireError> {
    match message.split_first_chunk::<HEADER_WORDS>() {
        Some(split) => Ok(split),
        None => Err(WireError::Short {
            words: message.len(),
        }),
    }
}

/// `v` as two words, low 32 bits first.
fn split(v: u64) -> [f32; 2] {
    [f32::from_bits(v as u32), f32::from_bits((v >> 32) as u32)]
}

/// The `u64` of a header's first two words.
fn join(h: &Header) -> u64 {
    u64::from(h[0].to_bits()) | (u64::from(h[1].to_bits()) << 32)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `header` followed by `payload`, as the links send it.
    fn message(header: Header, payload: &[f32]) -> Vec<f32> {
        let mut m = header.to_vec();
        m.extend_from_slice(payload);
        m
    }

    fn bits(words: &[f32]) -> Vec<u32> {
        words.iter().map(|w| w.to_bits()).collect()
    }

    /// Clocks and versions at the type's edges, and ones whose halves are NaN or
    /// infinity patterns (which must travel untouched).
    const EDGES: [u64; 8] = [
        0,
        1,
        u32::MAX as u64,
        u32::MAX as u64 + 1,
        0x7fc0_0000_7f80_0001,
        0xffff_ffff_7f80_0000,
        u64::MAX - 1,
        u64::MAX,
    ];

    #[test]
    fn pushes_round_trip_at_edge_clocks_and_any_loss() {
        let losses = [
            0.0,
            -0.0,
            1.5,
            f32::MIN_POSITIVE / 2.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            f32::from_bits(0x7f80_0001), // a signalling NaN
            f32::from_bits(0xffc0_1234),
        ];
        let payload = [1.0, f32::NAN, -2.5];
        for clock in EDGES {
            for loss in losses {
                let m = message(Push { clock, loss }.encode(), &payload);
                let (push, got) = Push::decode(&m).unwrap();
                assert_eq!(push.clock, clock);
                assert_eq!(push.loss.to_bits(), loss.to_bits(), "loss {loss}");
                assert_eq!(bits(got), bits(&payload));
            }
        }
        let bare = Push {
            clock: 7,
            loss: 0.5,
        };
        let header = bare.encode();
        assert_eq!(Push::decode(&header).unwrap(), (bare, &[][..]));
    }

    #[test]
    fn weights_and_stop_round_trip_at_edge_versions_and_staleness() {
        let staleness = [0, 1, 2, MAX_STALENESS - 1, MAX_STALENESS];
        for version in EDGES {
            for s in staleness {
                let weights = Reply::Weights {
                    version,
                    staleness: s,
                };
                let m = message(weights.encode(), &[f32::NAN, 3.0]);
                let (got, payload) = Reply::decode(&m, 2).unwrap();
                assert_eq!(got, weights);
                assert_eq!(bits(payload), bits(&[f32::NAN, 3.0]));
                let stop = Reply::Stop {
                    version,
                    staleness: s,
                };
                assert_eq!(Reply::decode(&stop.encode(), 0).unwrap(), (stop, &[][..]));
            }
        }
        let empty = Reply::Weights {
            version: 3,
            staleness: 0,
        };
        assert_eq!(Reply::decode(&empty.encode(), 0).unwrap().0, empty);
    }

    #[test]
    fn a_huge_staleness_saturates_and_never_touches_the_flags() {
        for (sent, got) in [
            (MAX_STALENESS + 1, MAX_STALENESS),
            (1 << 40, MAX_STALENESS),
            (u64::MAX, MAX_STALENESS),
        ] {
            let w = Reply::Weights {
                version: 9,
                staleness: sent,
            };
            let (reply, _) = Reply::decode(&w.encode(), 0).unwrap();
            assert_eq!(
                reply,
                Reply::Weights {
                    version: 9,
                    staleness: got
                }
            );
            let s = Reply::Stop {
                version: 9,
                staleness: sent,
            };
            let (reply, _) = Reply::decode(&s.encode(), 0).unwrap();
            assert_eq!(
                reply,
                Reply::Stop {
                    version: 9,
                    staleness: got
                }
            );
        }
    }

    #[test]
    fn regroups_round_trip_with_their_members() {
        for tag in [0, 1, 255, u16::MAX] {
            for members in [vec![0], vec![5, 0, 3], vec![u32::MAX as usize, 0x7f80_0001]] {
                let payload = encode_members(&members).unwrap();
                let m = message(Reply::Regroup { tag }.encode(), &payload);
                let (reply, got) = Reply::decode(&m, members.len()).unwrap();
                assert_eq!(reply, Reply::Regroup { tag });
                assert_eq!(decode_members(got), members);
            }
        }
    }

    /// The layout the module docs give, word by word: every flag combination the encoder
    /// makes, and what a hand-built header decodes to.
    #[test]
    fn every_flag_combination_decodes_to_its_kind_or_an_error() {
        let h = |version: u64, flags: u32| {
            let [lo, hi] = split(version);
            [lo, hi, f32::from_bits(flags)]
        };
        let stop = Reply::Stop {
            version: 1 << 33,
            staleness: 5,
        };
        assert_eq!(bits(&stop.encode()), [0, 2, (5 << 2) | 1]);
        let regroup = Reply::Regroup { tag: 7 }.encode();
        assert_eq!(bits(&regroup), [7, 0, 2]);
        let decode = |version, flags, payload: &[f32]| {
            Reply::decode(&message(h(version, flags), payload), 4).map(|(r, _)| r)
        };
        let weights = decode(2, 4 << 2, &[1.0]).unwrap();
        assert_eq!(
            weights,
            Reply::Weights {
                version: 2,
                staleness: 4
            }
        );
        assert_eq!(
            decode(3, STOP, &[]).unwrap(),
            Reply::Stop {
                version: 3,
                staleness: 0
            }
        );
        assert_eq!(
            decode(3, REGROUP, &[f32::from_bits(1)]).unwrap(),
            Reply::Regroup { tag: 3 }
        );
        for flags in [
            STOP | REGROUP,
            (1 << 2) | REGROUP,
            u32::MAX,
            (u32::MAX << 2) | STOP | REGROUP,
        ] {
            assert_eq!(
                decode(3, flags, &[f32::from_bits(1)]),
                Err(WireError::Flags { flags }),
                "flags {flags:#x}"
            );
        }
    }

    #[test]
    fn short_messages_are_errors() {
        for words in 0..HEADER_WORDS {
            let m = vec![0.0; words];
            assert_eq!(Push::decode(&m), Err(WireError::Short { words }));
            assert_eq!(Reply::decode(&m, 10), Err(WireError::Short { words }));
        }
    }

    #[test]
    fn payloads_that_do_not_fit_the_kind_are_errors() {
        let weights = Reply::Weights {
            version: 1,
            staleness: 0,
        };
        let err = Reply::decode(&message(weights.encode(), &[0.0; 3]), 2).unwrap_err();
        assert_eq!(
            err,
            WireError::Length {
                kind: "weights",
                len: 3,
                min: 0,
                max: 2
            }
        );
        assert!(
            err.to_string().contains("weights message carries 3"),
            "{err}"
        );
        let stop = Reply::Stop {
            version: 1,
            staleness: 0,
        };
        assert!(matches!(
            Reply::decode(&message(stop.encode(), &[0.0]), 10),
            Err(WireError::Length {
                kind: "stop",
                len: 1,
                ..
            })
        ));
        let regroup = Reply::Regroup { tag: 1 }.encode();
        assert!(matches!(
            Reply::decode(&regroup, 10),
            Err(WireError::Length {
                kind: "regroup",
                len: 0,
                ..
            })
        ));
        assert!(matches!(
            Reply::decode(&message(regroup, &[0.0; 3]), 2),
            Err(WireError::Length {
                kind: "regroup",
                len: 3,
                ..
            })
        ));
    }

    #[test]
    fn a_regroup_tag_beyond_16_bits_is_an_error() {
        for version in [1 << 16, u32::MAX as u64 + 7, u64::MAX] {
            let [lo, hi] = split(version);
            let m = [lo, hi, f32::from_bits(REGROUP), f32::from_bits(0)];
            assert_eq!(Reply::decode(&m, 4), Err(WireError::Tag { tag: version }));
        }
    }

    #[test]
    fn a_member_beyond_32_bits_cannot_be_encoded() {
        if let Ok(rank) = usize::try_from(u32::MAX as u64 + 1) {
            assert_eq!(encode_members(&[0, rank]), Err(WireError::Member { rank }));
        }
        assert_eq!(encode_members(&[]), Ok(Vec::new()));
    }
}
