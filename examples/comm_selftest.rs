//! Multi-rank checks of gssp's communication layer (`gssp::comm`): collectives and split
//! communicators, the parameter-server links (with the runtime's messages on them,
//! `gssp::runtime::messages`), a group's links moved to a communicator of
//! new members (`create_group`, a Regroup message, `rebind`), RMA windows and
//! `fatal_on_all`, on the ranks
//! of the current job (any number >= 2). Prints `comm_selftest: ok` on rank 0 and exits 0
//! when every check passed on every rank, else exits 1. `tests/comm_mpi.rs` runs it:
//!
//! ```sh
//! cargo build --release --examples
//! mpirun -n 5 --oversubscribe target/release/examples/comm_selftest
//! ```
//!
//! Every phase finishes its protocol even after a wrong value was seen (so no rank is left
//! waiting), then the ranks agree through [`Collectives::fatal_on_all`]. An MPI error inside a
//! protocol aborts the job instead, since the peers would otherwise wait forever.

use std::process::ExitCode;

use gssp::comm::p2p::{ServerLink, WorkerLink};
use gssp::comm::rma::{LockKind, SharedWindow, Window};
use gssp::comm::{Collectives, Comm, CommError};
use gssp::protocol::wire::HEADER_WORDS;
use gssp::runtime::messages::{PushRef, ServerMessages, WorkerMessages};
use rand::seq::index::sample;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn main() -> ExitCode {
    let comm = match Comm::init() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    comm.install_panic_abort();
    match run(&comm) {
        Ok(()) => {
            if comm.rank() == 0 {
                println!("comm_selftest: ok");
            }
            ExitCode::SUCCESS
        }
        Err(m) => {
            eprintln!("comm_selftest: FAILED on rank {}: {m}", comm.rank());
            ExitCode::FAILURE
        }
    }
}

/// Runs all checks; `Err` on every rank if any rank saw a problem.
fn run(comm: &Comm) -> Result<(), String> {
    if comm.size() < 2 {
        return Err(format!(
            "needs at least 2 ranks, the job has {}",
            comm.size()
        ));
    }
    type Phase = fn(&Comm) -> Result<(), String>;
    let phases: [(&str, Phase); 5] = [
        ("collectives", collectives),
        ("p2p", p2p),
        ("groups", groups),
        ("rma", rma),
        ("fatal_on_all", fatal_on_all),
    ];
    for (name, phase) in phases {
        comm.fatal_on_all(phase(comm))
            .map_err(|f| format!("{name}: {f}"))?;
    }
    Ok(())
}

/// Unwraps an MPI result or aborts the job with a message naming the step.
fn or_abort<T, E: std::fmt::Display>(comm: &Comm, step: &str, r: Result<T, E>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => {
            eprintln!("error: rank {}: comm_selftest {step}: {e}", comm.rank());
            comm.abort(1)
        }
    }
}

/// Keeps the first of possibly many mismatches.
#[derive(Default)]
struct Findings(Option<String>);

impl Findings {
    fn expect(&mut self, ok: bool, what: impl FnOnce() -> String) {
        if !ok && self.0.is_none() {
            self.0 = Some(what());
        }
    }
    fn into_result(self) -> Result<(), String> {
        self.0.map_or(Ok(()), Err)
    }
}

fn rng(tag: u64, a: u64, b: u64) -> ChaCha8Rng {
    let seed = tag
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(a.wrapping_mul(0xC2B2_AE3D_27D4_EB4F))
        .wrapping_add(b.wrapping_mul(0x1656_67B1_9E37_79F9));
    ChaCha8Rng::seed_from_u64(seed)
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

fn collectives(comm: &Comm) -> Result<(), String> {
    let (me, size) = (comm.rank(), comm.size());
    let mut f = Findings::default();

    let root = size - 1;
    let text = format!(
        "{{\"from\":{root},\"pad\":\"{}\"}}",
        "x".repeat(1000 + root)
    );
    let mut buf = if me == root {
        text.clone().into_bytes()
    } else {
        vec![7u8; me]
    };
    or_abort(
        comm,
        "broadcast_bytes",
        comm.broadcast_bytes(root, &mut buf),
    );
    f.expect(buf == text.as_bytes(), || {
        "broadcast_bytes delivered other bytes".into()
    });

    let gathered = or_abort(comm, "gather_f64", comm.gather_f64(0, me as f64 * 1.5));
    let want: Vec<f64> = (0..size).map(|r| r as f64 * 1.5).collect();
    f.expect(gathered == (me == 0).then_some(want), || {
        "gather_f64 returned wrong values".into()
    });

    let mut data: Vec<f32> = (0..1000).map(|i| (me + i) as f32).collect();
    or_abort(
        comm,
        "allreduce_sum_f32",
        comm.allreduce_sum_f32_in_place(&mut data),
    );
    let base = (size * (size - 1) / 2) as f32;
    f.expect(
        data.iter()
            .enumerate()
            .all(|(i, &v)| v == (size * i) as f32 + base),
        || "allreduce_sum_f32_in_place returned wrong sums".into(),
    );
    let mx = or_abort(comm, "allreduce_max", comm.allreduce_max_f64(me as f64));
    let mn = or_abort(
        comm,
        "allreduce_min",
        comm.allreduce_min_f64(me as f64 - 0.5),
    );
    let sum = or_abort(
        comm,
        "allreduce_sum_u64",
        comm.allreduce_sum_u64((1 << 40) + me as u64),
    );
    f.expect(mx == (size - 1) as f64, || {
        format!("allreduce_max_f64 gave {mx}")
    });
    f.expect(mn == -0.5, || format!("allreduce_min_f64 gave {mn}"));
    let want_sum = ((size as u64) << 40) + (size * (size - 1) / 2) as u64;
    f.expect(sum == want_sum, || {
        format!("allreduce_sum_u64 gave {sum}, not {want_sum}")
    });

    // Split by parity, reversed order; the last rank of 3+ stays out (MPI_UNDEFINED).
    let out = size >= 3 && me == size - 1;
    let color = (!out).then_some((me % 2) as u32);
    let sub = or_abort(comm, "split", comm.split(color, -(me as i32)));
    let members: Vec<usize> = (0..size)
        .filter(|&r| r % 2 == me % 2 && !(size >= 3 && r == size - 1))
        .collect();
    match (&sub, out) {
        (None, true) => {}
        (Some(s), false) => {
            let want_rank = members.iter().filter(|&&r| r > me).count();
            f.expect(s.size() == members.len() && s.rank() == want_rank, || {
                format!(
                    "split gave rank {}/{}, expected {want_rank}/{}",
                    s.rank(),
                    s.size(),
                    members.len()
                )
            });
            let t = or_abort(comm, "sub allreduce", s.allreduce_sum_u64(me as u64));
            let want_t: u64 = members.iter().map(|&r| r as u64).sum();
            f.expect(t == want_t, || {
                format!("allreduce on the split gave {t}, not {want_t}")
            });
        }
        _ => f.expect(false, || {
            format!("split: membership wrong (excluded = {out})")
        }),
    }
    f.into_result()
}

const P2P_N: usize = 1000;
const P2P_ITERS: u64 = 50;
const INITIAL: u64 = u64::MAX;

/// A random sparse message: `k` unique indices (as bit patterns) then `k` values with random
/// bits (NaNs included, so that exactness is checked bit for bit); `2k <= P2P_N`.
fn sparse_message(tag: u64, worker: usize, clock: u64) -> Vec<f32> {
    let mut r = rng(tag, worker as u64, clock);
    let k = r.gen_range(0..=P2P_N / 2);
    let idx = sample(&mut r, P2P_N, k).into_vec();
    let mut msg: Vec<f32> = idx.iter().map(|&i| f32::from_bits(i as u32)).collect();
    msg.extend((0..k).map(|_| f32::from_bits(r.gen())));
    msg
}

fn loss_of(worker: usize, clock: u64) -> f32 {
    worker as f32 + clock as f32 * 0.25
}

fn p2p(comm: &Comm) -> Result<(), String> {
    let me = comm.rank();
    let workers: Vec<usize> = (1..comm.size()).collect();
    let slots: Vec<Option<usize>> = workers.iter().map(|&w| Some(w)).collect();
    let mut f = Findings::default();
    let (sent, received) = if me == 0 {
        let mut link = or_abort(
            comm,
            "ServerLink::new",
            ServerLink::new(comm, &slots, HEADER_WORDS, P2P_N),
        );
        // The initial weights: one payload shared by every worker, each with its own header.
        let everyone: Vec<usize> = (0..workers.len()).collect();
        or_abort(
            comm,
            "send_weights",
            link.send_weights(&everyone, 0, &sparse_message(2, 0, INITIAL), |i| i as u64),
        );
        let mut next_clock = vec![0u64; workers.len()];
        let mut version = 0u64;
        let mut polled = 0u64;
        loop {
            // Check a push while it is borrowed; keep only what the answer needs.
            let mut inspect = |p: PushRef<'_>| {
                let w = workers[p.worker];
                let ok = p.clock == next_clock[p.worker]
                    && p.loss == loss_of(w, p.clock)
                    && same_bits(p.payload, &sparse_message(1, w, p.clock));
                (p.worker, p.clock, ok)
            };
            let got = match or_abort(comm, "poll_push", link.poll_push()) {
                Some(p) => {
                    polled += 1;
                    Some(inspect(p))
                }
                None => None,
            };
            let got = match got {
                Some(g) => Some(g),
                None => or_abort(comm, "wait_push", link.wait_push()).map(&mut inspect),
            };
            let Some((i, clock, ok)) = got else { break };
            f.expect(ok, || {
                format!("push {clock} of rank {} arrived altered", workers[i])
            });
            next_clock[i] = clock + 1;
            version += 1;
            if clock + 1 == P2P_ITERS {
                or_abort(comm, "send_stop", link.send_stop(i, version, clock));
            } else {
                // Answers of varying length reuse the shared payloads.
                let msg = sparse_message(2, workers[i], clock);
                or_abort(
                    comm,
                    "send_weights",
                    link.send_weights(&[i], version, &msg, |_| clock),
                );
            }
        }
        or_abort(comm, "ServerLink::finish", link.finish());
        f.expect(next_clock.iter().all(|&c| c == P2P_ITERS), || {
            format!("server saw clocks {next_clock:?}")
        });
        let s = link.stats();
        let want = P2P_ITERS * workers.len() as u64;
        f.expect(
            s.messages_received == want && s.messages_sent == want + workers.len() as u64,
            || format!("server counted {s:?}"),
        );
        let _ = polled; // either path may serve a push, depending on timing
        (0, 0)
    } else {
        let mut link = or_abort(
            comm,
            "WorkerLink::new",
            WorkerLink::new(comm, 0, HEADER_WORDS, P2P_N),
        );
        let mut w = vec![0.0f32; P2P_N];
        let h = or_abort(comm, "recv_weights", link.recv_weights(&mut w));
        f.expect(
            h.version == 0
                && !h.stop
                && h.staleness == me as u64 - 1
                && same_bits(&w[..h.len], &sparse_message(2, 0, INITIAL)),
            || format!("initial weights arrived altered ({h:?})"),
        );
        let mut last_version = 0;
        for clock in 0..P2P_ITERS {
            let g = sparse_message(1, me, clock);
            or_abort(comm, "push", link.push(clock, loss_of(me, clock), &g));
            let h = or_abort(comm, "recv_weights", link.recv_weights(&mut w));
            let stop = clock + 1 == P2P_ITERS;
            let payload_ok = if stop {
                h.len == 0
            } else {
                same_bits(&w[..h.len], &sparse_message(2, me, clock))
            };
            f.expect(
                h.version > last_version && h.stop == stop && h.staleness == clock && payload_ok,
                || format!("weights answering push {clock} arrived altered ({h:?})"),
            );
            last_version = h.version;
        }
        f.expect(link.push(P2P_ITERS, 0.0, &[]).is_err(), || {
            "push after stop was accepted".into()
        });
        f.expect(link.recv_weights(&mut w).is_err(), || {
            "recv_weights after stop was accepted".into()
        });
        or_abort(comm, "WorkerLink::finish", link.finish());
        let s = link.stats();
        f.expect(
            s.messages_sent == P2P_ITERS && s.messages_received == P2P_ITERS + 1,
            || format!("worker counted {s:?}"),
        );
        (s.bytes_sent, s.bytes_received)
    };
    // The server's byte counts must match the workers' totals.
    let w_sent = or_abort(comm, "allreduce", comm.allreduce_sum_u64(sent));
    let w_received = or_abort(comm, "allreduce", comm.allreduce_sum_u64(received));
    if me == 0 {
        // Recomputed from the known messages: header + payload words, 4 bytes each.
        let words = |tag, clock: u64| -> u64 {
            workers
                .iter()
                .map(|&w| (HEADER_WORDS + sparse_message(tag, w, clock).len()) as u64)
                .sum()
        };
        let pushes: u64 = (0..P2P_ITERS).map(|c| words(1, c)).sum::<u64>() * 4;
        let initial = workers.len() * (HEADER_WORDS + sparse_message(2, 0, INITIAL).len());
        let stops = workers.len() * HEADER_WORDS;
        let answers: u64 =
            ((0..P2P_ITERS - 1).map(|c| words(2, c)).sum::<u64>() + (initial + stops) as u64) * 4;
        f.expect(w_sent == pushes && w_received == answers, || {
            format!("workers counted {w_sent}/{w_received} bytes sent/received, expected {pushes}/{answers}")
        });
    }
    f.into_result()
}

/// Payload of the group links: room for a Regroup message naming every rank of a job.
const GROUP_N: usize = 64;

/// A group's links moved from one communicator to another, as a regroup moves them: on a
/// communicator of every rank in reverse order (the last world rank its server), the server
/// answers each worker's push with Regroup naming a second one (every rank in world order,
/// world rank 0 its server); all form it, move their links, and train on there. The
/// messages travel on those two communicators only, none on the world.
fn groups(comm: &Comm) -> Result<(), String> {
    let (me, size) = (comm.rank(), comm.size());
    let mut f = Findings::default();
    let world_before = comm.p2p_messages();
    let first: Vec<usize> = (0..size).rev().collect();
    let second: Vec<usize> = (0..size).collect();
    let a = or_abort(comm, "create_group", comm.create_group(&first, 1));
    f.expect(a.rank() == size - 1 - me, || {
        format!("rank {} in the reversed group", a.rank())
    });
    let weights: Vec<f32> = (0..GROUP_N).map(|i| i as f32).collect();
    let (sent_a, sent_b) = if a.rank() == 0 {
        // Slot w is world rank w (its rank in `a` is size - 1 - w); the server itself has no
        // slot used (world rank size - 1).
        let on_a: Vec<Option<usize>> = (0..size - 1).map(|w| Some(size - 1 - w)).collect();
        let mut link = or_abort(
            comm,
            "ServerLink::new",
            ServerLink::new(&a, &on_a, HEADER_WORDS, GROUP_N),
        );
        let everyone: Vec<usize> = (0..size - 1).collect();
        or_abort(
            comm,
            "send_weights",
            link.send_weights(&everyone, 1, &weights, |_| 0),
        );
        for _ in 0..size - 1 {
            let got = or_abort(comm, "wait_push", link.wait_push()).map(|p| p.worker);
            let w = got.unwrap_or(0);
            or_abort(comm, "send_regroup", link.send_regroup(w, 2, &second));
        }
        let b = or_abort(comm, "create_group", comm.create_group(&second, 2));
        // In `b` the server is world rank size - 1 = rank size - 1 there: not rank 0, so
        // it joins as a worker of world rank 0's server instead; its old link retires.
        or_abort(comm, "ServerLink::finish", link.finish());
        worker_on(comm, &b, &mut f, &weights);
        (a.p2p_messages(), b.p2p_messages())
    } else {
        let mut link = or_abort(
            comm,
            "WorkerLink::new",
            WorkerLink::new(&a, 0, HEADER_WORDS, GROUP_N),
        );
        let mut w = vec![0.0f32; GROUP_N];
        let h = or_abort(comm, "recv_weights", link.recv_weights(&mut w));
        f.expect(same_bits(&w, &weights) && h.regroup.is_none(), || {
            format!("weights on the first group arrived altered ({h:?})")
        });
        or_abort(comm, "push", link.push(1, 0.5, &[me as f32]));
        let h = or_abort(comm, "recv_weights", link.recv_weights(&mut w));
        let regroup = h.regroup.clone();
        f.expect(
            regroup
                .as_ref()
                .is_some_and(|g| g.tag == 2 && g.members == second)
                && h.len == 0,
            || format!("no Regroup naming the second group ({h:?})"),
        );
        let b = or_abort(comm, "create_group", comm.create_group(&second, 2));
        if me == 0 {
            server_on(comm, &b, &mut f, &weights);
        } else {
            or_abort(comm, "rebind", link.rebind(&b, 0));
            worker_after_rebind(comm, &mut link, &mut f, &weights);
        }
        (a.p2p_messages(), b.p2p_messages())
    };
    f.expect(comm.p2p_messages() == world_before, || {
        format!(
            "{} messages on the world",
            comm.p2p_messages() - world_before
        )
    });
    // The first group: the server's initial weights, pushes and Regroups; every other rank
    // received two messages and sent one. The second: rank 0 serves the others.
    let want_a = if me == size - 1 {
        3 * (size as u64 - 1)
    } else {
        3
    };
    let want_b = if me == 0 { 3 * (size as u64 - 1) } else { 3 };
    f.expect(sent_a == want_a && sent_b == want_b, || {
        format!("messages on the groups {sent_a}/{sent_b}, expected {want_a}/{want_b}")
    });
    f.into_result()
}

/// World rank 0, serving the second group: weights, one push from each, stop.
fn server_on(comm: &Comm, b: &gssp::comm::SubComm, f: &mut Findings, weights: &[f32]) {
    let size = comm.size();
    let slots: Vec<Option<usize>> = (1..size).map(Some).collect();
    let mut link = or_abort(
        comm,
        "ServerLink::new",
        ServerLink::new(b, &slots, HEADER_WORDS, GROUP_N),
    );
    let everyone: Vec<usize> = (0..size - 1).collect();
    or_abort(
        comm,
        "send_weights",
        link.send_weights(&everyone, 2, weights, |_| 0),
    );
    for _ in 0..size - 1 {
        let got = or_abort(comm, "wait_push", link.wait_push()).map(|p| (p.worker, p.payload[0]));
        let (w, value) = got.unwrap_or((0, f32::NAN));
        f.expect(value == (w + 1) as f32, || {
            format!("slot {w} pushed {value}")
        });
        or_abort(comm, "send_stop", link.send_stop(w, 3, 0));
    }
    or_abort(comm, "ServerLink::finish", link.finish());
}

/// A worker of the second group, fresh (the first group's server): weights, a push, stop.
fn worker_on(comm: &Comm, b: &gssp::comm::SubComm, f: &mut Findings, weights: &[f32]) {
    let mut link = or_abort(
        comm,
        "WorkerLink::new",
        WorkerLink::new(b, 0, HEADER_WORDS, GROUP_N),
    );
    worker_after_rebind(comm, &mut link, f, weights);
}

/// A worker's round on the second group: its weights, a push of its world rank, stop.
fn worker_after_rebind(comm: &Comm, link: &mut WorkerLink, f: &mut Findings, weights: &[f32]) {
    let mut w = vec![0.0f32; GROUP_N];
    let h = or_abort(comm, "recv_weights", link.recv_weights(&mut w));
    f.expect(same_bits(&w, weights) && h.version == 2, || {
        format!("weights on the second group arrived altered ({h:?})")
    });
    or_abort(comm, "push", link.push(2, 0.5, &[comm.rank() as f32]));
    let h = or_abort(comm, "recv_weights", link.recv_weights(&mut w));
    f.expect(h.stop, || format!("no stop on the second group ({h:?})"));
    or_abort(comm, "WorkerLink::finish", link.finish());
}

const INBOX: usize = 4096;
const RMA_ROUNDS: u64 = 40;
const DENSE: usize = 64;

/// What `src` adds to `dst`'s inbox in one round.
struct Contribution {
    /// Unique indices with small integer values (exact sums in any order).
    indices: Vec<u32>,
    values: Vec<f32>,
    /// Every fourth round also a dense block at an offset.
    dense: Option<(usize, Vec<f32>)>,
}

fn contribution(src: usize, dst: usize, round: u64) -> Contribution {
    let mut r = rng(3, (src * 1000 + dst) as u64, round);
    let k = r.gen_range(1..=INBOX / 4);
    let indices: Vec<u32> = sample(&mut r, INBOX, k)
        .into_iter()
        .map(|i| i as u32)
        .collect();
    let values: Vec<f32> = (0..k).map(|_| r.gen_range(1..=4) as f32).collect();
    let dense = round.is_multiple_of(4).then(|| {
        let off = r.gen_range(0..=INBOX - DENSE);
        (off, (0..DENSE).map(|_| r.gen_range(1..=3) as f32).collect())
    });
    Contribution {
        indices,
        values,
        dense,
    }
}

/// What `src` sends to every peer in `round` through one [`gssp::comm::rma::Scatter`].
fn broadcast_contribution(src: usize, round: u64) -> (Vec<u32>, Vec<f32>) {
    let mut r = rng(4, src as u64, round);
    let k = r.gen_range(0..=INBOX / 8);
    let indices: Vec<u32> = sample(&mut r, INBOX, k)
        .into_iter()
        .map(|i| i as u32)
        .collect();
    (indices, (0..k).map(|_| r.gen_range(1..=2) as f32).collect())
}

fn speed_of(rank: usize) -> f32 {
    10.0 + rank as f32 * 0.5
}

fn rma(comm: &Comm) -> Result<(), String> {
    let (me, size) = (comm.rank(), comm.size());
    let mut f = Findings::default();
    // An inbox that every peer accumulates into, drained by its owner under an exclusive
    // lock while the others keep accumulating.
    let mut win = or_abort(comm, "Window::create", Window::create(comm, INBOX + size));
    let mut acc = vec![0.0f32; INBOX];
    let drain = |win: &mut Window, acc: &mut [f32]| -> Result<(), CommError> {
        let mut local = win.lock_local()?;
        for (a, x) in acc.iter_mut().zip(local.iter_mut()) {
            *a += *x;
            *x = 0.0;
        }
        local.unlock()
    };
    for round in 0..RMA_ROUNDS {
        // One committed datatype for every peer; dropped while the last accumulate using
        // it may still be pending, which MPI allows.
        let (b_idx, b_vals) = broadcast_contribution(me, round);
        let mut scatter = Some(or_abort(comm, "scatter", win.scatter(&b_idx)));
        for step in 1..size {
            let peer = (me + step) % size;
            let c = contribution(me, peer, round);
            let own_scatter = or_abort(comm, "scatter", win.scatter(&c.indices));
            let mut ep = or_abort(comm, "lock", win.lock(peer, LockKind::Shared));
            or_abort(
                comm,
                "accumulate_scattered",
                ep.accumulate_scattered(&own_scatter, &c.values),
            );
            if let Some(sc) = &scatter {
                or_abort(
                    comm,
                    "accumulate_scattered",
                    ep.accumulate_scattered(sc, &b_vals),
                );
            }
            if step == size - 1 {
                drop(scatter.take());
            }
            if let Some((off, d)) = &c.dense {
                or_abort(comm, "accumulate_sum", ep.accumulate_sum(*off, d));
            }
            or_abort(comm, "unlock", ep.unlock());
        }
        if round.is_multiple_of(5) {
            or_abort(comm, "drain", drain(&mut win, &mut acc));
        }
    }
    // Telemetry: everyone's speed in slot INBOX + rank of every window (own slot locally).
    let speed = [speed_of(me)];
    for step in 1..size {
        let peer = (me + step) % size;
        let mut ep = or_abort(comm, "lock", win.lock(peer, LockKind::Exclusive));
        or_abort(comm, "put", ep.put(INBOX + me, &speed));
        or_abort(comm, "unlock", ep.unlock());
    }
    {
        let mut local = or_abort(comm, "lock_local", win.lock_local());
        local[INBOX + me] = speed[0];
    }
    or_abort(comm, "barrier", comm.barrier());
    or_abort(comm, "drain", drain(&mut win, &mut acc));

    let mut want = vec![0.0f32; INBOX];
    for src in (0..size).filter(|&s| s != me) {
        for round in 0..RMA_ROUNDS {
            let (b_idx, b_vals) = broadcast_contribution(src, round);
            for (&i, &v) in b_idx.iter().zip(&b_vals) {
                want[i as usize] += v;
            }
            let c = contribution(src, me, round);
            for (&i, &v) in c.indices.iter().zip(&c.values) {
                want[i as usize] += v;
            }
            if let Some((off, d)) = c.dense {
                for (w, v) in want[off..off + DENSE].iter_mut().zip(d) {
                    *w += v;
                }
            }
        }
    }
    let bad = acc.iter().zip(&want).position(|(a, w)| a != w);
    f.expect(bad.is_none(), || {
        let i = bad.unwrap_or(0);
        format!(
            "inbox[{i}] = {} after all accumulates, expected {}",
            acc[i], want[i]
        )
    });

    let expected: Vec<f32> = (0..size).map(speed_of).collect();
    for step in 1..size {
        let peer = (me + step) % size;
        let mut tele = vec![0.0f32; size];
        let mut ep = or_abort(comm, "lock", win.lock(peer, LockKind::Shared));
        or_abort(comm, "get", ep.get(INBOX, &mut tele));
        or_abort(comm, "unlock", ep.unlock());
        f.expect(tele == expected, || {
            format!("telemetry of rank {peer} reads {tele:?}, expected {expected:?}")
        });
    }

    // A shared window (one lock_all epoch): a u32 window moves bit patterns exactly (also
    // ones that as f32 would be NaN): every rank puts its words into its slot at every peer,
    // then reads every peer's slots. The last word of each window is a counter that every
    // rank adds u32::MAX - rank to: sums of unsigned words wrap, which header updates by
    // difference rely on.
    let words = |r: usize| [r as u32, 0x7fc0_0001 ^ r as u32, u32::MAX - r as u32];
    let counter = (0..size).fold(0u32, |c, r| c.wrapping_add(u32::MAX - r as u32));
    // What rank `owner`'s window holds once every other rank has put its words there.
    let slots_of = |owner: usize| {
        (0..size)
            .flat_map(move |r| if r == owner { [0; 3] } else { words(r) })
            .chain([counter])
    };
    let bits: SharedWindow<u32> = or_abort(
        comm,
        "Window::create",
        Window::create(comm, 3 * size + 1).and_then(Window::lock_all),
    );
    let mine = words(me);
    let add = [u32::MAX - me as u32];
    let mut batch = bits.batch();
    for peer in 0..size {
        if peer != me {
            or_abort(comm, "put", batch.put(peer, 3 * me, &mine));
        }
        or_abort(
            comm,
            "accumulate_sum",
            batch.accumulate_sum(peer, 3 * size, &add),
        );
    }
    or_abort(comm, "flush_all", batch.complete());
    or_abort(comm, "barrier", comm.barrier());
    let peeked: Vec<Option<u32>> = (0..3 * size + 2).map(|i| bits.peek_local(i)).collect();
    let want: Vec<Option<u32>> = slots_of(me).map(Some).chain([None]).collect();
    f.expect(peeked == want, || {
        format!("peek of rank {me}'s own u32 window reads {peeked:x?}, expected {want:x?}")
    });
    // Every peer's window in one batch, through a plain get and an atomic fetch.
    let mut got = vec![vec![0u32; 3 * size + 1]; size];
    let mut fetched = vec![vec![0u32; 3 * size + 1]; size];
    let mut batch = bits.batch();
    for (peer, (g, x)) in got.iter_mut().zip(fetched.iter_mut()).enumerate() {
        or_abort(comm, "get", batch.get(peer, 0, g));
        or_abort(comm, "fetch", batch.fetch(peer, 0, x));
    }
    or_abort(comm, "flush_all", batch.complete());
    for (peer, (g, x)) in got.iter().zip(&fetched).enumerate() {
        let want: Vec<u32> = slots_of(peer).collect();
        f.expect(*g == want && *x == want, || {
            format!("u32 window of rank {peer} reads {g:x?} (get) and {x:x?} (fetch), expected {want:x?}")
        });
    }
    let past_end = [0u32; 2];
    let mut one = [0u32; 1];
    let mut batch = bits.batch();
    let r = batch.put((me + 1) % size, 3 * size, &past_end);
    f.expect(
        matches!(&r, Err(e) if e.to_string().contains("exceeds the window length")),
        || format!("a put past the window's end gave {r:?}"),
    );
    let refused = batch.fetch(size, 0, &mut one).is_err();
    f.expect(refused, || {
        format!("an access to rank {size} of {size} was allowed")
    });
    or_abort(comm, "flush_all", batch.complete());
    or_abort(comm, "barrier", comm.barrier());
    or_abort(comm, "SharedWindow::free", bits.free());

    // Bad input is an error naming the call, not an MPI fault.
    let out_of_range = win.scatter(&[0, (INBOX + size) as u32]);
    f.expect(
        matches!(&out_of_range, Err(e) if e.to_string().contains("exceeds the window length")),
        || "scatter accepted an index past the window".into(),
    );
    let sc = or_abort(comm, "scatter", win.scatter(&[1, 2, 3]));
    {
        let mut ep = or_abort(comm, "lock", win.lock((me + 1) % size, LockKind::Shared));
        let short = [1.0f32; 2];
        let r = ep.accumulate_scattered(&sc, &short);
        f.expect(
            matches!(&r, Err(e) if e.to_string().contains("3 indices but 2 values")),
            || format!("accumulate_scattered with 2 values for 3 indices gave {r:?}"),
        );
        or_abort(comm, "unlock", ep.unlock());
    }
    // A scatter checked against one window is refused by another.
    let mut other = or_abort(comm, "Window::create", Window::create(comm, 8));
    {
        let mut ep = or_abort(comm, "lock", other.lock((me + 1) % size, LockKind::Shared));
        let vals = [1.0f32; 3];
        let r = ep.accumulate_scattered(&sc, &vals);
        f.expect(
            matches!(&r, Err(e) if e.to_string().contains("another window")),
            || format!("a scatter of another window gave {r:?}"),
        );
        or_abort(comm, "unlock", ep.unlock());
    }
    let untouched = other.lock_local().map(|l| l.iter().all(|&x| x == 0.0));
    f.expect(matches!(untouched, Ok(true)), || {
        "a refused accumulate changed the other window".into()
    });
    or_abort(comm, "Window::free", other.free());
    drop(sc);

    // Nobody may still read a window when it is freed (MPI_Win_free also synchronises).
    or_abort(comm, "Window::free", win.free());

    // Dropping a window never blocks (an error path must reach the abort, not wait in the
    // collective free): every rank but 0 drops its window before a barrier that rank 0
    // enters first. Were the drop a collective free, the job would hang here.
    let dropped: Window<f32> = or_abort(comm, "Window::create", Window::create(comm, 4));
    if me != 0 {
        drop(dropped);
        or_abort(comm, "barrier", comm.barrier());
    } else {
        or_abort(comm, "barrier", comm.barrier());
        drop(dropped);
    }
    f.into_result()
}

fn fatal_on_all(comm: &Comm) -> Result<(), String> {
    let (me, size) = (comm.rank(), comm.size());
    let mut f = Findings::default();
    let ok: Result<u32, String> = Ok(7);
    f.expect(comm.fatal_on_all(ok) == Ok(7), || {
        "all ranks fine but fatal_on_all failed".into()
    });

    let failing = |r: usize| r == 0 || r == size - 1;
    let count = (0..size).filter(|&r| failing(r)).count() as u64;
    let local: Result<(), String> = if failing(me) {
        Err(format!("injected failure on rank {me}"))
    } else {
        Ok(())
    };
    match comm.fatal_on_all(local) {
        Ok(()) => f.expect(false, || {
            "fatal_on_all returned Ok although ranks failed".into()
        }),
        Err(e) => {
            let want_local = failing(me).then(|| format!("injected failure on rank {me}"));
            f.expect(e.failed_ranks == count && e.local == want_local, || {
                format!("fatal_on_all gave {e:?}")
            });
        }
    }
    f.into_result()
}
