//! Mailboxes for the sparse updates between group servers, laid out in each server's `u32`
//! RMA window: one slot per sending group, a header and a ring of messages.
//!
//! An indexed accumulate costs MPI a datatype walk per value; a sparse message written as
//! one contiguous put costs a copy, and the receiver applies its k values directly, without
//! a dense pass over an inbox. The price is flow control: a sender writes a message only
//! when the receiver's ring has room, and otherwise keeps the values unsent (they stay in
//! its error feedback) until the receiver has drained.
//!
//! Slot of sender `s`: `[written, speed bits, pushes, dense flushes, slowest worker's rank,
//! its seconds per iteration bits, its slowdown bits, consumed | ring]`. The sender alone
//! writes the first seven words and the ring; the receiver alone writes `consumed`. `written` and `consumed` count words and wrap; the ring's length is a power
//! of two, so a counter modulo it stays continuous across the wrap. A top-k message is
//! `[k, k indices, k value bits]`; a low-rank (PowerSGD) message is
//! `[LOW_RANK | rank, len, len value bits]`, its payload laid out by
//! [`crate::compress::powersgd::LowRankLayout`] (k never reaches the tag bit: indices are `u32`).
//!
//! Everything here is pure; the RMA operations are in `sync::gssp` over `comm::rma`.

use thiserror::Error;

use crate::compress::CompressError;

/// Header words of a slot.
pub const WRITTEN: usize = 0;
pub const SPEED: usize = 1;
pub const PUSHES: usize = 2;
pub const DENSE_FLUSHES: usize = 3;
/// The sender's slowest worker (world rank, [`NO_WORKER`] when it knows none), its smoothed
/// seconds per iteration and its slowdown against its group's median (`f32` bits), for rank
/// 0's progress line.
pub const SLOWEST_RANK: usize = 4;
pub const SLOWEST_SECONDS: usize = 5;
pub const SLOWEST_SLOWDOWN: usize = 6;
/// The header words the sender writes (`WRITTEN..=SLOWEST_SLOWDOWN`).
pub const SENDER_WORDS: usize = 7;
pub const CONSUMED: usize = 7;
pub const HEADER: usize = 8;
/// [`SLOWEST_RANK`] of a sender that has not measured two workers yet.
pub const NO_WORKER: u32 = u32::MAX;

/// Tag bit of a low-rank message's first word (the rest of the word is its rank).
pub const LOW_RANK: u32 = 1 << 31;

/// A message that breaks the format: a bug or memory corruption, never a user error.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum MailboxError {
    #[error("corrupt mailbox message from group {sender}: {detail}")]
    Corrupt { sender: usize, detail: String },
    /// A low-rank message its receiver cannot take ([`Inbox::low_rank`]).
    #[error("corrupt mailbox message from group {sender}: {error}")]
    LowRank { sender: usize, error: LowRankError },
}

/// Why a receiver cannot take a low-rank message ([`Inbox::low_rank`]); `rank` is the
/// message's PowerSGD rank.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum LowRankError {
    /// A low-rank message in a run that exchanges none.
    #[error("a low-rank message (rank {rank}) in a run without powersgd")]
    Unexpected { rank: usize },
    /// A payload that does not fit the model at its rank.
    #[error("rank {rank}: {error}")]
    Payload { rank: usize, error: CompressError },
}

/// Where each sender's slot lies in a server's mailbox window (the same on every server).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MailboxLayout {
    pub groups: usize,
    /// Ring length in words (a power of two, or 0: header only, every update goes dense).
    pub cap: usize,
}

/// Words of a message of `k` values.
pub fn message_words(k: usize) -> usize {
    1 + 2 * k
}

/// Words of a low-rank message of `len` payload values.
pub fn low_rank_message_words(len: usize) -> usize {
    2 + len
}

/// Where the drain puts what a message holds.
pub trait Inbox {
    /// One top-k value.
    fn value(&mut self, index: usize, value: f32);
    /// One low-rank payload of `rank`; an `Err` says why it does not fit this receiver.
    fn low_rank(&mut self, rank: usize, payload: &[f32]) -> Result<(), LowRankError>;
}

/// A closure takes top-k values only; a low-rank message is then corrupt.
impl<F: FnMut(usize, f32)> Inbox for F {
    fn value(&mut self, index: usize, value: f32) {
        self(index, value)
    }
    fn low_rank(&mut self, rank: usize, _: &[f32]) -> Result<(), LowRankError> {
        Err(LowRankError::Unexpected { rank })
    }
}

impl MailboxLayout {
    /// Rings that hold `messages` messages of `k` values each (rounded up to a power of two);
    /// `k = 0` gives header-only slots.
    ///
    /// # Panics
    /// If the ring's size overflows `usize`: unchecked, it would wrap in a release build to
    /// a tiny or empty ring. Config validation bounds `messages`
    /// ([`crate::config::MAX_MAILBOX_MESSAGES`]), so this is a caller bug.
    pub fn new(groups: usize, k: usize, messages: usize) -> Self {
        if k == 0 {
            return Self { groups, cap: 0 };
        }
        k.checked_mul(2)
            .and_then(|w| w.checked_add(1))
            .and_then(|words| Self::for_words(groups, words, messages))
            .unwrap_or_else(|| {
                panic!("a mailbox ring of {messages} messages of {k} values overflows usize")
            })
    }

    /// Rings that hold `messages` messages of `words` words each (rounded up to a power of
    /// two); `None` if that overflows `usize`.
    pub fn for_words(groups: usize, words: usize, messages: usize) -> Option<Self> {
        let cap = if words == 0 || messages == 0 {
            0
        } else {
            words
                .checked_mul(messages)
                .and_then(usize::checked_next_power_of_two)?
        };
        Some(Self { groups, cap })
    }

    pub fn window_len(&self) -> usize {
        self.groups * (HEADER + self.cap)
    }

    /// Offset of sender `s`'s slot (its header).
    pub fn slot(&self, s: usize) -> usize {
        s * (HEADER + self.cap)
    }

    /// Offset of sender `s`'s ring.
    pub fn ring(&self, s: usize) -> usize {
        self.slot(s) + HEADER
    }

    /// Free words in a ring whose sender wrote `written` and whose receiver consumed
    /// `consumed` (as far as the sender knows: a stale `consumed` only underestimates).
    pub fn room(&self, written: u32, consumed: u32) -> usize {
        self.cap
            .saturating_sub(written.wrapping_sub(consumed) as usize)
    }

    /// Where `len` words written at counter `pos` go in the ring: (ring offset, offset in
    /// the message, length) of at most two contiguous pieces (the second empty unless the
    /// message wraps).
    pub fn pieces(&self, pos: u32, len: usize) -> [(usize, usize, usize); 2] {
        let start = pos as usize % self.cap.max(1);
        let first = len.min(self.cap - start);
        [(start, 0, first), (0, first, len - first)]
    }

    /// Hands every message in `ring` between the counters `from` and `to` to `inbox` (each
    /// top-k value, each low-rank payload), and returns `to`. Indices must be below `n`.
    pub fn decode(
        &self,
        sender: usize,
        ring: &[u32],
        from: u32,
        to: u32,
        n: usize,
        mut inbox: impl Inbox,
    ) -> Result<u32, MailboxError> {
        let corrupt = |detail: String| MailboxError::Corrupt { sender, detail };
        if ring.len() != self.cap || (to.wrapping_sub(from) as usize) > self.cap {
            return Err(corrupt(format!(
                "{} words pending in a ring of {}",
                to.wrapping_sub(from),
                self.cap
            )));
        }
        let at = |pos: u32| ring[pos as usize % self.cap];
        let mut pos = from;
        let mut payload = Vec::new();
        while pos != to {
            let left = to.wrapping_sub(pos) as usize;
            if at(pos) & LOW_RANK != 0 {
                let rank = (at(pos) & !LOW_RANK) as usize;
                let len = if left >= 2 {
                    at(pos.wrapping_add(1)) as usize
                } else {
                    left
                };
                if len > left.saturating_sub(2) {
                    return Err(corrupt(format!(
                        "a low-rank message of {len} values in {left} pending words"
                    )));
                }
                let start = pos.wrapping_add(2);
                payload.clear();
                payload.extend((0..len as u32).map(|j| f32::from_bits(at(start.wrapping_add(j)))));
                inbox
                    .low_rank(rank, &payload)
                    .map_err(|error| MailboxError::LowRank { sender, error })?;
                pos = start.wrapping_add(len as u32);
                continue;
            }
            let k = at(pos) as usize;
            if message_words(k) > left {
                return Err(corrupt(format!(
                    "a message of {k} values in {left} pending words"
                )));
            }
            let idx = pos.wrapping_add(1);
            let val = idx.wrapping_add(k as u32);
            for j in 0..k as u32 {
                let i = at(idx.wrapping_add(j)) as usize;
                if i >= n {
                    return Err(corrupt(format!("index {i} in a model of {n}")));
                }
                inbox.value(i, f32::from_bits(at(val.wrapping_add(j))));
            }
            pos = val.wrapping_add(k as u32);
        }
        Ok(to)
    }
}

/// Writes the low-rank message `[LOW_RANK | rank, len, payload bits]` into `out` (cleared
/// first).
pub fn encode_low_rank(rank: usize, payload: &[f32], out: &mut Vec<u32>) {
    debug_assert!(rank > 0 && (rank as u64) < u64::from(LOW_RANK));
    out.clear();
    out.push(LOW_RANK | rank as u32);
    out.push(payload.len() as u32);
    out.extend(payload.iter().map(|v| v.to_bits()));
}

/// Appends the message `[k, indices, value bits]` to `out` (cleared first).
pub fn encode(indices: &[u32], values: &[f32], out: &mut Vec<u32>) {
    debug_assert_eq!(indices.len(), values.len());
    out.clear();
    out.push(indices.len() as u32);
    out.extend_from_slice(indices);
    out.extend(values.iter().map(|v| v.to_bits()));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `msg` into `ring` at counter `pos` the way the sender does.
    fn write(layout: &MailboxLayout, ring: &mut [u32], pos: u32, msg: &[u32]) -> u32 {
        for (at, from, len) in layout.pieces(pos, msg.len()) {
            ring[at..at + len].copy_from_slice(&msg[from..from + len]);
        }
        pos.wrapping_add(msg.len() as u32)
    }

    #[test]
    fn sizes_are_powers_of_two_and_slots_do_not_overlap() {
        let l = MailboxLayout::new(4, 925, 8);
        assert_eq!(l.cap, 16_384); // 8 * 1851 = 14808, rounded up
        assert_eq!(l.window_len(), 4 * (HEADER + 16_384));
        assert_eq!(l.ring(1), l.slot(1) + HEADER);
        assert_eq!(l.slot(2), l.ring(1) + l.cap);
        assert_eq!(MailboxLayout::new(3, 0, 8).cap, 0);
        assert_eq!(MailboxLayout::new(3, 0, 8).window_len(), 3 * HEADER);
    }

    /// Fuzzing finding: `messages * (1 + 2k)` wrapped in release builds, to a ring of 2^62
    /// words here (or of none), where it must fail loudly instead.
    #[test]
    #[should_panic(expected = "a mailbox ring of 4611686018427387904 messages of 10 values")]
    fn an_overflowing_ring_size_panics_instead_of_wrapping() {
        MailboxLayout::new(2, 10, 1 << 62);
    }

    #[test]
    fn room_counts_across_the_counter_wrap() {
        let l = MailboxLayout::new(2, 3, 2); // cap 16
        assert_eq!(l.cap, 16);
        assert_eq!(l.room(0, 0), 16);
        assert_eq!(l.room(10, 3), 9);
        assert_eq!(
            l.room(5, u32::MAX - 2),
            8,
            "8 words pending across the wrap"
        );
        assert_eq!(l.room(16, 0), 0);
        assert_eq!(MailboxLayout::new(2, 0, 1).room(0, 0), 0);
    }

    #[test]
    fn messages_round_trip_through_wrapping_rings_and_counters() {
        let l = MailboxLayout::new(2, 5, 2); // 2 * 11 = 22 -> cap 32
        let mut ring = vec![0u32; l.cap];
        let mut msg = Vec::new();
        // Start near the u32 wrap so both the ring and the counter wrap.
        let start = u32::MAX - 40;
        let (mut written, mut consumed) = (start, start);
        let mut expected = Vec::new();
        for round in 0..20u32 {
            let k = (round % 5 + 1) as usize;
            let idx: Vec<u32> = (0..k as u32).map(|j| (round * 7 + j * 3) % 100).collect();
            let vals: Vec<f32> = (0..k).map(|j| round as f32 - j as f32 * 0.5).collect();
            encode(&idx, &vals, &mut msg);
            assert_eq!(msg.len(), message_words(k));
            assert!(l.room(written, consumed) >= msg.len());
            written = write(&l, &mut ring, written, &msg);
            expected.extend(idx.iter().map(|&i| i as usize).zip(vals));
            if round % 2 == 1 {
                let mut got = Vec::new();
                consumed = l
                    .decode(1, &ring, consumed, written, 100, |i, v| got.push((i, v)))
                    .unwrap();
                assert_eq!(got, expected, "round {round}");
                expected.clear();
            }
        }
        assert_eq!(consumed, written);
        assert!(written < start, "the counter wrapped");
    }

    /// Collects what a drain hands over, both kinds.
    #[derive(Default)]
    struct Collect {
        values: Vec<(usize, f32)>,
        low_rank: Vec<(usize, Vec<f32>)>,
    }

    impl Inbox for &mut Collect {
        fn value(&mut self, index: usize, value: f32) {
            self.values.push((index, value));
        }
        fn low_rank(&mut self, rank: usize, payload: &[f32]) -> Result<(), LowRankError> {
            if payload.len() > 6 {
                let error = CompressError::LengthMismatch {
                    expected: 6,
                    got: payload.len(),
                };
                return Err(LowRankError::Payload { rank, error });
            }
            self.low_rank.push((rank, payload.to_vec()));
            Ok(())
        }
    }

    #[test]
    fn low_rank_and_top_k_messages_share_a_wrapping_ring() {
        let l = MailboxLayout::for_words(2, 8, 2).unwrap(); // cap 16
        assert_eq!(l.cap, 16);
        let mut ring = vec![0u32; 16];
        let mut msg = Vec::new();
        let mut written = 10u32; // the second message wraps
        encode(&[3], &[0.5], &mut msg);
        written = write(&l, &mut ring, written, &msg);
        encode_low_rank(2, &[1.0, -2.0, 3.5, 4.0, 0.0], &mut msg);
        assert_eq!(msg.len(), low_rank_message_words(5));
        written = write(&l, &mut ring, written, &msg);
        let mut got = Collect::default();
        assert_eq!(
            l.decode(1, &ring, 10, written, 10, &mut got).unwrap(),
            written
        );
        assert_eq!(got.values, vec![(3, 0.5)]);
        assert_eq!(got.low_rank, vec![(2, vec![1.0, -2.0, 3.5, 4.0, 0.0])]);
        // A payload the model refuses, a length beyond what is pending, and a low-rank
        // message where only top-k is expected: errors naming the sender.
        encode_low_rank(1, &[0.0; 7], &mut msg);
        let end = write(&l, &mut ring, 0, &msg);
        let err = l
            .decode(4, &ring, 0, end, 10, &mut Collect::default())
            .unwrap_err();
        assert!(
            matches!(
                err,
                MailboxError::LowRank {
                    sender: 4,
                    error: LowRankError::Payload { rank: 1, .. }
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("group 4") && err.to_string().contains("has 7"));
        assert!(l
            .decode(4, &ring, 0, 5, 10, &mut Collect::default())
            .is_err());
        assert!(l
            .decode(4, &ring, 0, 1, 10, &mut Collect::default())
            .is_err());
        let err = l.decode(0, &ring, 0, end, 10, |_, _| {}).unwrap_err();
        let unexpected = LowRankError::Unexpected { rank: 1 };
        assert_eq!(
            err,
            MailboxError::LowRank {
                sender: 0,
                error: unexpected
            }
        );
        assert!(err.to_string().contains("low-rank"), "{err}");
    }

    #[test]
    fn corrupt_messages_are_errors_not_panics() {
        let l = MailboxLayout::new(2, 2, 2); // cap 16
        let mut ring = vec![0u32; 16];
        let mut msg = Vec::new();
        encode(&[1, 200], &[1.0, 2.0], &mut msg);
        let w = write(&l, &mut ring, 0, &msg);
        let err = l.decode(3, &ring, 0, w, 100, |_, _| {}).unwrap_err();
        assert!(err.to_string().contains("group 3") && err.to_string().contains("index 200"));
        ring[0] = 1000; // claims more values than pending
        assert!(l.decode(0, &ring, 0, w, 1000, |_, _| {}).is_err());
        assert!(
            l.decode(0, &ring, 0, 17, 1000, |_, _| {}).is_err(),
            "over capacity"
        );
        assert!(l.decode(0, &ring[..8], 0, 0, 1000, |_, _| {}).is_err());
    }
}
