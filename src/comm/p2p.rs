//! Parameter-server messaging over nonblocking point-to-point MPI.
//!
//! rsmpi's safe requests are tied to scopes, which does not fit receives that stay posted for the
//! whole run, so the requests here are raw `MPI_Request`s owned by the link together with their
//! buffers. A buffer is allocated once (capacity fixed at construction), never resized, and only
//! touched by Rust after its request has completed.
//!
//! # Wire layout
//! Every message is an array of `f32` sent as `MPI_FLOAT` on the link's communicator:
//!
//! | word | Push (tag [`TAG_PUSH`], worker -> server) | Weights (tag [`TAG_WEIGHTS`], server -> worker) |
//! |------|-------------------------------------------|-------------------------------------------------|
//! | 0    | clock, low 32 bits (bit pattern)          | version, low 32 bits (bit pattern)              |
//! | 1    | clock, high 32 bits (bit pattern)         | version, high 32 bits (bit pattern)             |
//! | 2    | loss (`f32`)                              | flags (bit 0 = stop, bit 1 = regroup, bits 2..32 = staleness) |
//! | 3..  | payload, `len <= capacity` values         | payload, `len <= capacity` values               |
//!
//! The payload length is the received element count minus [`HEADER_WORDS`] (`MPI_Get_count`),
//! so variable-length (e.g. sparse index/value) payloads need no extra field. Integer fields
//! travel as `f32` bit patterns: MPI copies `MPI_FLOAT` bit-exactly between hosts of the same
//! architecture (no conversion), which is the deployment this program targets.
//!
//! # Protocol rules (the caller's side of the contract)
//! * A worker alternates [`WorkerLink::push`] and [`WorkerLink::recv_weights`]; the server may also
//!   send weights first (e.g. the initial model).
//! * The server sends `stop = true` to a worker only in answer to that worker's push (the worker
//!   is then waiting, with nothing in flight). The worker sends nothing afterwards
//!   ([`WorkerLink::push`] refuses). The server then retires the worker: a later push from it
//!   is an error, and [`ServerLink::wait_push`] returns `None` once every worker is retired.
//! * Regrouping: the server may answer a push (or a worker already waiting) with Regroup
//!   instead of weights ([`ServerLink::send_regroup`]): the regroup flag, a tag in the
//!   version words, and as payload the world ranks of the worker's group from now on, its
//!   server first. Every member of that group then forms the group's new communicator
//!   ([`super::Collectives::create_group`] with that tag), and the worker's link moves to it
//!   ([`WorkerLink::rebind`]), where its weights come from the server at rank 0. The server
//!   moves its link the same way ([`ServerLink::rebind`]) once it has told every worker it
//!   had.

use super::sealed::CommHandle;
use super::Collectives;
use super::{c_count, c_rank, check, empty_status, CommError};
use crate::telemetry::clock::thread_cpu_s;
use mpi::ffi;
use std::os::raw::c_int;
use std::rc::Rc;

/// MPI tag of Push messages.
pub const TAG_PUSH: i32 = 0x5055;
/// MPI tag of Weights messages.
pub const TAG_WEIGHTS: i32 = 0x5745;
/// Number of leading `f32` words holding the header.
pub const HEADER_WORDS: usize = 3;

const STOP_FLAG: u32 = 1;
const REGROUP_FLAG: u32 = 2;
const FLAG_BITS: u32 = 2;

/// Traffic and waiting counters of one link (header words included in the bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LinkStats {
    /// Bytes handed to `MPI_Isend`.
    pub bytes_sent: u64,
    /// Bytes received.
    pub bytes_received: u64,
    /// Messages sent.
    pub messages_sent: u64,
    /// Messages received.
    pub messages_received: u64,
    /// Seconds spent blocked in `MPI_Wait` or `MPI_Mprobe` (waiting for a message or for a
    /// buffer to be free again).
    pub wait_seconds: f64,
}

/// A worker's new group (a Regroup message): the world ranks of its members, the server
/// first, and the tag their new communicator is created with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Regroup {
    pub tag: u16,
    pub members: Vec<usize>,
}

/// Header of a received Weights message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeightsHeader {
    /// Model version chosen by the server.
    pub version: u64,
    /// The server asks the worker to stop.
    pub stop: bool,
    /// Staleness of the worker's last push (server steps between the weights it used and
    /// its arrival), saturating at 2^30 - 1.
    pub staleness: u64,
    /// Number of payload values copied into the caller's buffer.
    pub len: usize,
    /// Regrouping: the worker's group from now on (a Regroup message; nothing was copied
    /// into the caller's buffer).
    pub regroup: Option<Regroup>,
}

/// A push handed out by [`ServerLink::poll_push`]/[`ServerLink::wait_push`]; borrows the
/// worker's receive buffer until the next poll/wait.
#[derive(Debug)]
pub struct PushRef<'a> {
    /// Index of the worker in the `workers` slice given to [`ServerLink::new`].
    pub worker: usize,
    /// The worker's clock.
    pub clock: u64,
    /// The worker's loss.
    pub loss: f32,
    /// The payload (gradient), `len <= capacity`.
    pub payload: &'a [f32],
    /// Wall seconds of copying the push into the server's buffer (`MPI_Mrecv`); see
    /// [`ServerLink`].
    pub receive_s: f64,
    /// Thread CPU seconds of the same copy.
    pub receive_cpu_s: f64,
}

fn null_request() -> ffi::MPI_Request {
    // SAFETY: reading an extern constant.
    unsafe { ffi::RSMPI_REQUEST_NULL }
}

fn is_active(req: ffi::MPI_Request) -> bool {
    req != null_request()
}

fn put_u64(words: &mut [f32], v: u64) {
    words[0] = f32::from_bits(v as u32);
    words[1] = f32::from_bits((v >> 32) as u32);
}

fn get_u64(words: &[f32]) -> u64 {
    u64::from(words[0].to_bits()) | (u64::from(words[1].to_bits()) << 32)
}

fn bytes_of(words: usize) -> u64 {
    (words * std::mem::size_of::<f32>()) as u64
}

/// Counts one message sent or received on `comm` ([`super::Collectives::p2p_messages`]).
fn count_message(comm: &CommHandle) {
    comm.p2p_messages.set(comm.p2p_messages.get() + 1);
}

/// Starts a send of `buf[..words]`.
///
/// # Safety
/// `buf` must stay alive and unmodified until `req` completes.
unsafe fn isend(
    comm: &CommHandle,
    buf: &[f32],
    words: usize,
    dest: c_int,
    tag: c_int,
    req: &mut ffi::MPI_Request,
) -> Result<(), CommError> {
    let count = c_count("MPI_Isend", words)?;
    check(
        "MPI_Isend",
        ffi::MPI_Isend(
            buf.as_ptr().cast(),
            count,
            ffi::RSMPI_FLOAT,
            dest,
            tag,
            comm.raw,
            req,
        ),
    )
}

/// Posts a receive into all of `buf`.
///
/// # Safety
/// `buf` must stay alive and untouched until `req` completes.
unsafe fn irecv(
    comm: &CommHandle,
    buf: &mut [f32],
    source: c_int,
    tag: c_int,
    req: &mut ffi::MPI_Request,
) -> Result<(), CommError> {
    let count = c_count("MPI_Irecv", buf.len())?;
    check(
        "MPI_Irecv",
        ffi::MPI_Irecv(
            buf.as_mut_ptr().cast(),
            count,
            ffi::RSMPI_FLOAT,
            source,
            tag,
            comm.raw,
            req,
        ),
    )
}

/// Blocks until `req` completes (immediately if inactive); adds the time to `waited`.
fn wait(req: &mut ffi::MPI_Request, waited: &mut f64) -> Result<ffi::MPI_Status, CommError> {
    let mut status = empty_status();
    if is_active(*req) {
        let t0 = mpi::time();
        if super::idle::sleeping() {
            loop {
                if let Some(done) = test(req)? {
                    status = done;
                    break;
                }
                super::idle::pause();
            }
            *waited += mpi::time() - t0;
        } else {
            // SAFETY: req is a request handle owned by the caller; status is a valid out-pointer.
            let rc = unsafe { ffi::MPI_Wait(req, &mut status) };
            *waited += mpi::time() - t0;
            check("MPI_Wait", rc)?;
        }
    }
    Ok(status)
}

/// Completes `req` if it is done; `None` while it is still pending.
fn test(req: &mut ffi::MPI_Request) -> Result<Option<ffi::MPI_Status>, CommError> {
    let mut status = empty_status();
    let mut flag: c_int = 0;
    // SAFETY: req is a request handle owned by the caller; out-pointers are valid.
    check("MPI_Test", unsafe {
        ffi::MPI_Test(req, &mut flag, &mut status)
    })?;
    Ok((flag != 0).then_some(status))
}

/// Cancels a posted receive and completes it (a receive that already matched completes
/// normally and its message is discarded).
fn cancel_recv(req: &mut ffi::MPI_Request) -> Result<(), CommError> {
    if is_active(*req) {
        // SAFETY: req is an active receive owned by the caller.
        check("MPI_Cancel", unsafe { ffi::MPI_Cancel(req) })?;
        let mut status = empty_status();
        // SAFETY: as above.
        check("MPI_Wait", unsafe { ffi::MPI_Wait(req, &mut status) })?;
    }
    Ok(())
}

/// Completes a send if it is done; otherwise frees the request and leaks the buffer so that MPI
/// can finish reading it in the background. Only for `Drop`, where blocking could hang the job.
fn release_send(req: &mut ffi::MPI_Request, buf: &mut Vec<f32>) {
    if abandon_send(req) {
        std::mem::forget(std::mem::take(buf));
    }
}

/// Completes a send if it is done, otherwise frees the request; returns whether MPI may still
/// read its buffer (which the caller must then leak).
fn abandon_send(req: &mut ffi::MPI_Request) -> bool {
    if !is_active(*req) {
        return false;
    }
    if let Ok(Some(_)) = test(req) {
        return false;
    }
    // SAFETY: req is an active send; MPI finishes it in the background.
    unsafe {
        ffi::MPI_Request_free(req);
    }
    true
}

/// `MPI_Get_address` of `p`.
fn address(p: *const f32) -> Result<ffi::MPI_Aint, CommError> {
    let mut a: ffi::MPI_Aint = 0;
    // SAFETY: p points into a live allocation; a is a valid out-pointer.
    check("MPI_Get_address", unsafe {
        ffi::MPI_Get_address(p.cast(), &mut a)
    })?;
    Ok(a)
}

/// Starts a send of one element of the derived datatype `dt` at `base`.
///
/// # Safety
/// Everything `dt` describes relative to `base` must stay alive and unmodified until `req`
/// completes.
unsafe fn isend_typed(
    comm: &CommHandle,
    base: *const f32,
    dt: ffi::MPI_Datatype,
    dest: c_int,
    req: &mut ffi::MPI_Request,
) -> Result<(), CommError> {
    check(
        "MPI_Isend",
        ffi::MPI_Isend(base.cast(), 1, dt, dest, TAG_WEIGHTS, comm.raw, req),
    )
}

/// Number of `f32` words received according to `status`.
fn received_words(status: &ffi::MPI_Status) -> Result<usize, CommError> {
    let mut count: c_int = 0;
    // SAFETY: status was filled by a completed receive; count is a valid out-pointer.
    check("MPI_Get_count", unsafe {
        ffi::MPI_Get_count(status, ffi::RSMPI_FLOAT, &mut count)
    })?;
    usize::try_from(count).map_err(|_| CommError::Invalid {
        what: "MPI_Get_count",
        detail: format!("undefined element count {count}"),
    })
}

/// Payload length of a received message of `words` elements.
fn payload_len(words: usize, from: c_int) -> Result<usize, CommError> {
    words.checked_sub(HEADER_WORDS).ok_or(CommError::Invalid {
        what: "p2p receive",
        detail: format!("message of {words} words from rank {from} is shorter than its header"),
    })
}

/// The worker's end of a link to its server.
pub struct WorkerLink {
    comm: Rc<CommHandle>,
    server: c_int,
    capacity: usize,
    send_buf: Vec<f32>,
    send_req: ffi::MPI_Request,
    recv_buf: Vec<f32>,
    recv_req: ffi::MPI_Request,
    stopped: bool,
    stats: LinkStats,
}

impl WorkerLink {
    /// Link to `server_rank` of `comm` for payloads of at most `n` values. Not collective.
    pub fn new<C: Collectives>(comm: &C, server_rank: usize, n: usize) -> Result<Self, CommError> {
        let comm = Rc::clone(comm.handle());
        let server = c_rank("WorkerLink server", server_rank, comm.size)?;
        if server_rank == comm.rank {
            return Err(CommError::Invalid {
                what: "WorkerLink::new",
                detail: format!("rank {server_rank} cannot be its own server"),
            });
        }
        c_count("WorkerLink capacity", n + HEADER_WORDS)?;
        Ok(WorkerLink {
            comm,
            server,
            capacity: n,
            send_buf: vec![0.0; n + HEADER_WORDS],
            send_req: null_request(),
            recv_buf: vec![0.0; n + HEADER_WORDS],
            recv_req: null_request(),
            stopped: false,
            stats: LinkStats::default(),
        })
    }

    /// Sends Push{clock, loss, grad}: waits for the previous push to leave the send buffer,
    /// copies `grad` into it and starts the send; also posts the receive for the answer.
    pub fn push(&mut self, clock: u64, loss: f32, grad: &[f32]) -> Result<(), CommError> {
        if self.stopped {
            return Err(CommError::Invalid {
                what: "WorkerLink::push",
                detail: "the server already sent stop".to_string(),
            });
        }
        if grad.len() > self.capacity {
            return Err(CommError::TooLong {
                what: "WorkerLink::push gradient",
                len: grad.len(),
                capacity: self.capacity,
            });
        }
        wait(&mut self.send_req, &mut self.stats.wait_seconds)?;
        put_u64(&mut self.send_buf[0..2], clock);
        self.send_buf[2] = loss;
        self.send_buf[HEADER_WORDS..HEADER_WORDS + grad.len()].copy_from_slice(grad);
        let words = HEADER_WORDS + grad.len();
        super::emulation::hold_send(bytes_of(words));
        // SAFETY: send_buf is owned by self, never resized, and not written again before
        // send_req completes (push waits first; Drop leaks it if still pending).
        unsafe {
            isend(
                &self.comm,
                &self.send_buf,
                words,
                self.server,
                TAG_PUSH,
                &mut self.send_req,
            )?;
        }
        self.stats.bytes_sent += bytes_of(words);
        self.stats.messages_sent += 1;
        count_message(&self.comm);
        self.post_recv()
    }

    fn post_recv(&mut self) -> Result<(), CommError> {
        if self.stopped {
            return Err(CommError::Invalid {
                what: "WorkerLink receive",
                detail: "the server already sent stop; nothing more will come".to_string(),
            });
        }
        if !is_active(self.recv_req) {
            // SAFETY: recv_buf is owned by self, never resized, and read only after completion.
            unsafe {
                irecv(
                    &self.comm,
                    &mut self.recv_buf,
                    self.server,
                    TAG_WEIGHTS,
                    &mut self.recv_req,
                )?;
            }
        }
        Ok(())
    }

    /// Blocks until Weights arrive; copies the payload into `out[..len]`.
    pub fn recv_weights(&mut self, out: &mut [f32]) -> Result<WeightsHeader, CommError> {
        self.post_recv()?;
        let status = wait(&mut self.recv_req, &mut self.stats.wait_seconds)?;
        self.decode(&status, out)
    }

    fn decode(
        &mut self,
        status: &ffi::MPI_Status,
        out: &mut [f32],
    ) -> Result<WeightsHeader, CommError> {
        let words = received_words(status)?;
        let len = payload_len(words, self.server)?;
        if len > out.len() {
            return Err(CommError::TooLong {
                what: "WorkerLink::recv_weights output",
                len,
                capacity: out.len(),
            });
        }
        super::emulation::hold_receive(bytes_of(words));
        self.stats.bytes_received += bytes_of(words);
        self.stats.messages_received += 1;
        count_message(&self.comm);
        let version = get_u64(&self.recv_buf[0..2]);
        let flags = self.recv_buf[2].to_bits();
        let stop = flags & STOP_FLAG != 0;
        let staleness = u64::from(flags >> FLAG_BITS);
        let payload = &self.recv_buf[HEADER_WORDS..words];
        let regroup = (flags & REGROUP_FLAG != 0).then(|| Regroup {
            tag: version as u16,
            members: payload.iter().map(|w| w.to_bits() as usize).collect(),
        });
        let len = if regroup.is_some() { 0 } else { len };
        out[..len].copy_from_slice(&payload[..len]);
        self.stopped |= stop;
        Ok(WeightsHeader {
            version,
            stop,
            staleness,
            len,
            regroup,
        })
    }

    /// Talks to `server_rank` of `comm` from now on, after a Regroup message from the old
    /// server (nothing is then in flight from it); waits for the last push to leave first.
    /// Buffers and counters carry over.
    pub fn rebind<C: Collectives>(
        &mut self,
        comm: &C,
        server_rank: usize,
    ) -> Result<(), CommError> {
        let handle = Rc::clone(comm.handle());
        let server = c_rank("WorkerLink::rebind", server_rank, handle.size)?;
        if server_rank == handle.rank || is_active(self.recv_req) {
            return Err(CommError::Invalid {
                what: "WorkerLink::rebind",
                detail: format!(
                    "cannot take rank {server_rank} as server (own rank {}, or a receive pending)",
                    handle.rank
                ),
            });
        }
        wait(&mut self.send_req, &mut self.stats.wait_seconds)?;
        self.comm = handle;
        self.server = server;
        Ok(())
    }

    /// Counters so far.
    pub fn stats(&self) -> LinkStats {
        self.stats
    }

    /// Waits for the last push to be delivered and withdraws the posted receive.
    pub fn finish(&mut self) -> Result<(), CommError> {
        wait(&mut self.send_req, &mut self.stats.wait_seconds)?;
        cancel_recv(&mut self.recv_req)
    }
}

impl Drop for WorkerLink {
    fn drop(&mut self) {
        if mpi::environment::is_finalized() {
            return;
        }
        let _ = cancel_recv(&mut self.recv_req);
        release_send(&mut self.send_req, &mut self.send_buf);
    }
}

/// The server's end of the links to its workers: pushes are taken with matched probes
/// (`MPI_Mprobe`/`MPI_Improbe`, then `MPI_Mrecv`) into one reusable receive buffer per
/// worker; weights go out from shared copies ([`ServerLink::send_weights`]).
///
/// Why matched probes rather than a receive posted per worker: a large push travels by
/// rendezvous, and with shared memory the receiver itself copies it (OpenMPI's CMA
/// single copy). With posted receives that copy happens somewhere inside `MPI_Waitany`'s
/// polling, indistinguishable from idle waiting. With a matched probe the wait ends when the
/// push's header is there, and the copy is the `MPI_Mrecv` that follows, timed on its own
/// ([`PushRef::receive_s`]) and counted as server work.
pub struct ServerLink {
    comm: Rc<CommHandle>,
    capacity: usize,
    /// Each worker slot's rank in the communicator (`None`: not a member there).
    workers: Vec<Option<c_int>>,
    /// Worker index of each rank of the communicator (`None`: not a worker of this server).
    worker_of_rank: Vec<Option<usize>>,
    recv_bufs: Vec<Vec<f32>>,
    /// Header words of each worker's last Weights message (sent from here).
    headers: Vec<[f32; HEADER_WORDS]>,
    /// Each worker's last Regroup message, header and members (kept until it is sent).
    notices: Vec<Vec<f32>>,
    /// Copies of the weights, each shared by every worker released together; a copy is
    /// reused once no pending send reads it (at most one per worker plus one exist).
    payloads: Vec<Vec<f32>>,
    /// Pending sends reading each payload.
    readers: Vec<usize>,
    /// The payload each worker's pending send reads.
    payload_of: Vec<Option<usize>>,
    /// Committed datatypes "worker w's header, then payload p's first `len` values", built
    /// on first use: `types[w][p] = (len, datatype)`.
    types: Vec<Vec<Option<(usize, ffi::MPI_Datatype)>>>,
    send_reqs: Vec<ffi::MPI_Request>,
    retired: Vec<bool>,
    /// Workers not yet sent `stop`.
    active: usize,
    stats: LinkStats,
    /// Copies the weights into a payload ([`ServerLink::with_copy`]).
    copy: fn(&mut [f32], &[f32]),
}

/// The default payload copy: `copy_from_slice` on the calling thread.
fn copy_here(dst: &mut [f32], src: &[f32]) {
    dst.copy_from_slice(src);
}

impl ServerLink {
    /// This rank, the server at rank 0 of `comm`, serving worker slots `slots` (each the
    /// worker's rank in `comm`, distinct and not 0; `None` for a worker that is not a member
    /// there, as if it had left) with payloads of at most `n` values. Not collective.
    /// Workers are referred to by their slot index.
    pub fn new<C: Collectives>(
        comm: &C,
        slots: &[Option<usize>],
        n: usize,
    ) -> Result<Self, CommError> {
        c_count("ServerLink capacity", n + HEADER_WORDS)?;
        let k = slots.len();
        let mut link = ServerLink {
            comm: Rc::clone(comm.handle()),
            capacity: n,
            workers: vec![None; k],
            worker_of_rank: Vec::new(),
            recv_bufs: (0..k).map(|_| vec![0.0; n + HEADER_WORDS]).collect(),
            headers: vec![[0.0; HEADER_WORDS]; k],
            notices: vec![Vec::new(); k],
            payloads: Vec::new(),
            readers: Vec::new(),
            payload_of: vec![None; k],
            types: vec![Vec::new(); k],
            send_reqs: vec![null_request(); k],
            retired: vec![true; k],
            active: 0,
            stats: LinkStats::default(),
            copy: copy_here,
        };
        link.bind(comm, slots)?;
        Ok(link)
    }

    /// Copies the weights into each reply's payload with `copy` (of two equal-length slices,
    /// `dst` first), e.g. one that splits the copy over the caller's threads.
    pub fn with_copy(mut self, copy: fn(&mut [f32], &[f32])) -> Self {
        self.copy = copy;
        self
    }

    /// Serves the slots' workers on `comm` from now on (this rank at 0 there, `slots` as in
    /// [`ServerLink::new`]), once every send pending on the old communicator is delivered.
    /// A slot present in `slots` is a member again ([`ServerLink::join`]); an absent one
    /// has left. Buffers and counters carry over.
    pub fn rebind<C: Collectives>(
        &mut self,
        comm: &C,
        slots: &[Option<usize>],
    ) -> Result<(), CommError> {
        self.finish()?;
        for w in 0..self.workers.len() {
            self.settle(w);
        }
        self.bind(comm, slots)
    }

    fn bind<C: Collectives>(&mut self, comm: &C, slots: &[Option<usize>]) -> Result<(), CommError> {
        let handle = Rc::clone(comm.handle());
        if handle.rank != 0 || slots.len() != self.workers.len() {
            return Err(CommError::Invalid {
                what: "ServerLink::bind",
                detail: format!(
                    "the server must be rank 0 (is {}) with {} slots (got {})",
                    handle.rank,
                    self.workers.len(),
                    slots.len()
                ),
            });
        }
        let mut worker_of_rank = vec![None; handle.size];
        let mut ranks = vec![None; slots.len()];
        for (i, slot) in slots.iter().enumerate() {
            let Some(w) = *slot else { continue };
            let r = c_rank("ServerLink worker", w, handle.size)?;
            if w == 0 || worker_of_rank[w].is_some() {
                return Err(CommError::Invalid {
                    what: "ServerLink::bind",
                    detail: format!("worker rank {w} is the server or listed twice"),
                });
            }
            worker_of_rank[w] = Some(i);
            ranks[i] = Some(r);
        }
        self.comm = handle;
        self.workers = ranks;
        self.worker_of_rank = worker_of_rank;
        for (w, slot) in slots.iter().enumerate() {
            match slot {
                Some(_) => self.join(w)?,
                None => self.leave(w)?,
            }
        }
        Ok(())
    }

    /// Worker `worker`'s rank in the communicator, or an error if it is not a member.
    fn rank_of(&self, what: &'static str, worker: usize) -> Result<c_int, CommError> {
        self.check_worker(what, worker)?;
        self.workers[worker].ok_or(CommError::Invalid {
            what,
            detail: format!("worker slot {worker} is not a member on this communicator"),
        })
    }

    /// Receives the probed push `message` from the rank in `status` into that worker's buffer.
    fn receive(
        &mut self,
        mut message: ffi::MPI_Message,
        status: &ffi::MPI_Status,
    ) -> Result<PushRef<'_>, CommError> {
        let source = status.MPI_SOURCE;
        let w = usize::try_from(source)
            .ok()
            .and_then(|r| self.worker_of_rank.get(r).copied().flatten())
            .filter(|&w| !self.retired[w])
            .ok_or(CommError::Invalid {
                what: "ServerLink receive",
                detail: format!("a push from rank {source}, which is not an active worker"),
            })?;
        let buf = &mut self.recv_bufs[w];
        let count = c_count("MPI_Mrecv", buf.len())?;
        let mut received = empty_status();
        let cpu0 = thread_cpu_s();
        let t0 = mpi::time();
        // SAFETY: `message` came from a matched probe on this link's communicator and is
        // received exactly once; buf is owned by self and large enough for `count` floats.
        check("MPI_Mrecv", unsafe {
            ffi::MPI_Mrecv(
                buf.as_mut_ptr().cast(),
                count,
                ffi::RSMPI_FLOAT,
                &mut message,
                &mut received,
            )
        })?;
        let words = received_words(&received)?;
        super::emulation::hold_receive(bytes_of(words));
        let receive_s = mpi::time() - t0;
        let receive_cpu_s = thread_cpu_s() - cpu0;
        let _ = payload_len(words, source)?;
        self.stats.bytes_received += bytes_of(words);
        self.stats.messages_received += 1;
        count_message(&self.comm);
        let buf = &self.recv_bufs[w];
        Ok(PushRef {
            worker: w,
            clock: get_u64(&buf[0..2]),
            loss: buf[2],
            payload: &buf[HEADER_WORDS..words],
            receive_s,
            receive_cpu_s,
        })
    }

    /// Returns a push that has arrived, without blocking (`MPI_Improbe`); `None` if none has
    /// or every worker is retired.
    pub fn poll_push(&mut self) -> Result<Option<PushRef<'_>>, CommError> {
        if self.active == 0 {
            return Ok(None);
        }
        match self.probe_push()? {
            Some((message, status)) => self.receive(message, &status).map(Some),
            None => Ok(None),
        }
    }

    /// Blocks until a push arrives (`MPI_Mprobe`, or polls of `MPI_Improbe` where waits
    /// sleep, `super::idle`; the time counted as waiting) and receives it; `None` when every
    /// worker is retired.
    pub fn wait_push(&mut self) -> Result<Option<PushRef<'_>>, CommError> {
        if self.active == 0 {
            return Ok(None);
        }
        let t0 = mpi::time();
        let probed = if super::idle::sleeping() {
            loop {
                match self.probe_push() {
                    Ok(None) => super::idle::pause(),
                    done => break done,
                }
            }
        } else {
            // SAFETY: reading an extern constant.
            let mut message = unsafe { ffi::RSMPI_MESSAGE_NULL };
            let mut status = empty_status();
            // SAFETY: the communicator is alive (held by self); out-pointers are valid.
            let rc = unsafe {
                ffi::MPI_Mprobe(
                    ffi::RSMPI_ANY_SOURCE,
                    TAG_PUSH,
                    self.comm.raw,
                    &mut message,
                    &mut status,
                )
            };
            check("MPI_Mprobe", rc).map(|()| Some((message, status)))
        };
        self.stats.wait_seconds += mpi::time() - t0;
        match probed? {
            Some((message, status)) => self.receive(message, &status).map(Some),
            None => Ok(None),
        }
    }

    /// The next push that has arrived, matched but not yet received (`MPI_Improbe`).
    fn probe_push(&self) -> Result<Option<(ffi::MPI_Message, ffi::MPI_Status)>, CommError> {
        let mut flag: c_int = 0;
        // SAFETY: reading an extern constant.
        let mut message = unsafe { ffi::RSMPI_MESSAGE_NULL };
        let mut status = empty_status();
        // SAFETY: the communicator is alive (held by self); out-pointers are valid.
        check("MPI_Improbe", unsafe {
            ffi::MPI_Improbe(
                ffi::RSMPI_ANY_SOURCE,
                TAG_PUSH,
                self.comm.raw,
                &mut flag,
                &mut message,
                &mut status,
            )
        })?;
        Ok((flag != 0).then_some((message, status)))
    }

    /// Sends Weights{version, staleness, weights} to every worker index in `workers`, with
    /// `staleness(w)` in worker w's header. The weights are copied once (with the link's
    /// copy, [`ServerLink::with_copy`]), into a payload all
    /// these sends read; each message is that worker's header followed by the payload (one
    /// derived datatype, so the wire layout is the same as a contiguous message). First waits
    /// for each worker's previous Weights to be delivered.
    pub fn send_weights(
        &mut self,
        workers: &[usize],
        version: u64,
        weights: &[f32],
        staleness: impl Fn(usize) -> u64,
    ) -> Result<(), CommError> {
        if weights.len() > self.capacity {
            return Err(CommError::TooLong {
                what: "ServerLink::send_weights weights",
                len: weights.len(),
                capacity: self.capacity,
            });
        }
        for &w in workers {
            self.check_worker("ServerLink::send_weights", w)?;
            wait(&mut self.send_reqs[w], &mut self.stats.wait_seconds)?;
            self.settle(w);
        }
        if workers.is_empty() {
            return Ok(());
        }
        let p = self.free_payload()?;
        (self.copy)(&mut self.payloads[p][..weights.len()], weights);
        for &w in workers {
            let rank = self.rank_of("ServerLink::send_weights", w)?;
            self.write_header(w, version, false, staleness(w));
            let dt = self.message_type(w, p, weights.len())?;
            super::emulation::hold_send(bytes_of(HEADER_WORDS + weights.len()));
            // SAFETY: the header and payload p are owned by self, never resized or moved
            // (their heap buffers stay put), and not written while a send reads them: a
            // worker's header is rewritten only after its send completed (waited above),
            // and a payload only once its readers count is zero.
            unsafe {
                isend_typed(
                    &self.comm,
                    self.headers[w].as_ptr(),
                    dt,
                    rank,
                    &mut self.send_reqs[w],
                )?;
            }
            self.payload_of[w] = Some(p);
            self.readers[p] += 1;
            self.stats.bytes_sent += bytes_of(HEADER_WORDS + weights.len());
            self.stats.messages_sent += 1;
            count_message(&self.comm);
        }
        Ok(())
    }

    /// Tells worker index `worker` to stop (a Weights message with the stop flag and no
    /// payload) and retires it (see the protocol rules in the module docs).
    pub fn send_stop(
        &mut self,
        worker: usize,
        version: u64,
        staleness: u64,
    ) -> Result<(), CommError> {
        self.check_worker("ServerLink::send_stop", worker)?;
        wait(&mut self.send_reqs[worker], &mut self.stats.wait_seconds)?;
        self.settle(worker);
        self.write_header(worker, version, true, staleness);
        self.send_header(worker)?;
        if !self.retired[worker] {
            self.retired[worker] = true;
            self.active -= 1;
        }
        Ok(())
    }

    /// Regrouping: answers worker index `worker` (waiting, its push applied) with Regroup:
    /// its group from now on is `members` (world ranks, the server first), whose new
    /// communicator is created with `tag` (see the module docs' protocol rules). The
    /// worker stays a member of this link until [`ServerLink::leave`] or a
    /// [`ServerLink::rebind`] without it.
    pub fn send_regroup(
        &mut self,
        worker: usize,
        tag: u16,
        members: &[usize],
    ) -> Result<(), CommError> {
        let rank = self.rank_of("ServerLink::send_regroup", worker)?;
        if members.len() > self.capacity {
            return Err(CommError::TooLong {
                what: "ServerLink::send_regroup members",
                len: members.len(),
                capacity: self.capacity,
            });
        }
        wait(&mut self.send_reqs[worker], &mut self.stats.wait_seconds)?;
        self.settle(worker);
        self.write_header(worker, u64::from(tag), false, 0);
        let h = &mut self.headers[worker];
        h[2] = f32::from_bits(h[2].to_bits() | REGROUP_FLAG);
        let notice = &mut self.notices[worker];
        notice.clear();
        notice.extend_from_slice(&self.headers[worker]);
        notice.extend(members.iter().map(|&r| f32::from_bits(r as u32)));
        let words = notice.len();
        super::emulation::hold_send(bytes_of(words));
        // SAFETY: the notice is owned by self and not written again before
        // send_reqs[worker] completes (every writer waits for it first).
        unsafe {
            isend(
                &self.comm,
                &self.notices[worker],
                words,
                rank,
                TAG_WEIGHTS,
                &mut self.send_reqs[worker],
            )?;
        }
        self.stats.bytes_sent += bytes_of(words);
        self.stats.messages_sent += 1;
        count_message(&self.comm);
        Ok(())
    }

    /// Sends worker `worker`'s header alone (stop); its previous send has completed.
    fn send_header(&mut self, worker: usize) -> Result<(), CommError> {
        let rank = self.rank_of("ServerLink::send_header", worker)?;
        // SAFETY: headers[worker] is owned by self, never moved, and not written again
        // before send_reqs[worker] completes (every writer waits for it first).
        unsafe {
            isend(
                &self.comm,
                &self.headers[worker],
                HEADER_WORDS,
                rank,
                TAG_WEIGHTS,
                &mut self.send_reqs[worker],
            )?;
        }
        self.stats.bytes_sent += bytes_of(HEADER_WORDS);
        self.stats.messages_sent += 1;
        count_message(&self.comm);
        Ok(())
    }

    /// Worker index `worker` belongs to another server: a push from it is an error, and
    /// [`ServerLink::wait_push`] no longer waits for it.
    pub fn leave(&mut self, worker: usize) -> Result<(), CommError> {
        self.check_worker("ServerLink::leave", worker)?;
        if !self.retired[worker] {
            self.retired[worker] = true;
            self.active -= 1;
        }
        Ok(())
    }

    /// Worker index `worker` (left before, or never here) is this server's again.
    pub fn join(&mut self, worker: usize) -> Result<(), CommError> {
        self.check_worker("ServerLink::join", worker)?;
        if self.retired[worker] {
            self.retired[worker] = false;
            self.active += 1;
        }
        Ok(())
    }

    fn check_worker(&self, what: &'static str, worker: usize) -> Result<(), CommError> {
        if worker < self.workers.len() {
            Ok(())
        } else {
            Err(CommError::Invalid {
                what,
                detail: format!("worker index {worker} >= {}", self.workers.len()),
            })
        }
    }

    fn write_header(&mut self, worker: usize, version: u64, stop: bool, staleness: u64) {
        let h = &mut self.headers[worker];
        put_u64(&mut h[0..2], version);
        let staleness = staleness.min(u64::from(u32::MAX >> FLAG_BITS)) as u32;
        h[2] = f32::from_bits((staleness << FLAG_BITS) | if stop { STOP_FLAG } else { 0 });
    }

    /// Releases the payload of worker `worker`'s send once that send has completed.
    fn settle(&mut self, worker: usize) {
        if !is_active(self.send_reqs[worker]) {
            if let Some(p) = self.payload_of[worker].take() {
                self.readers[p] -= 1;
            }
        }
    }

    /// A payload no pending send reads: an idle one, else one freed by a completed send,
    /// else a new one.
    fn free_payload(&mut self) -> Result<usize, CommError> {
        if let Some(p) = self.readers.iter().position(|&r| r == 0) {
            return Ok(p);
        }
        for w in 0..self.workers.len() {
            if self.payload_of[w].is_some() && test(&mut self.send_reqs[w])?.is_some() {
                self.settle(w);
            }
        }
        if let Some(p) = self.readers.iter().position(|&r| r == 0) {
            return Ok(p);
        }
        self.payloads.push(vec![0.0; self.capacity]);
        self.readers.push(0);
        Ok(self.payloads.len() - 1)
    }

    /// The committed datatype of worker `worker`'s header followed by the first `len` values
    /// of payload `p`, at their addresses relative to the header.
    fn message_type(
        &mut self,
        worker: usize,
        p: usize,
        len: usize,
    ) -> Result<ffi::MPI_Datatype, CommError> {
        let cache = &mut self.types[worker];
        if cache.len() <= p {
            cache.resize(p + 1, None);
        }
        if let Some((l, dt)) = cache[p] {
            if l == len {
                return Ok(dt);
            }
            let mut old = dt;
            // SAFETY: a datatype created here; sends still using it keep it alive.
            check("MPI_Type_free", unsafe { ffi::MPI_Type_free(&mut old) })?;
            cache[p] = None;
        }
        let header = address(self.headers[worker].as_ptr())?;
        let payload = address(self.payloads[p].as_ptr())?;
        let lengths = [HEADER_WORDS as c_int, c_count("ServerLink payload", len)?];
        let displacements = [0, payload - header];
        // SAFETY: reading an extern constant.
        let mut dt = unsafe { ffi::RSMPI_DATATYPE_NULL };
        // SAFETY: two blocks described by the arrays above; dt is a valid out-pointer.
        check("MPI_Type_create_hindexed", unsafe {
            ffi::MPI_Type_create_hindexed(
                2,
                lengths.as_ptr(),
                displacements.as_ptr(),
                ffi::RSMPI_FLOAT,
                &mut dt,
            )
        })?;
        // SAFETY: dt was just created.
        check("MPI_Type_commit", unsafe { ffi::MPI_Type_commit(&mut dt) })?;
        cache[p] = Some((len, dt));
        Ok(dt)
    }

    /// Number of workers.
    pub fn workers(&self) -> usize {
        self.workers.len()
    }

    /// Whether worker index `worker` was sent `stop`.
    pub fn is_retired(&self, worker: usize) -> bool {
        self.retired.get(worker).copied().unwrap_or(false)
    }

    /// Counters so far.
    pub fn stats(&self) -> LinkStats {
        self.stats
    }

    /// Waits until every Weights message has been delivered.
    pub fn finish(&mut self) -> Result<(), CommError> {
        for req in &mut self.send_reqs {
            wait(req, &mut self.stats.wait_seconds)?;
        }
        Ok(())
    }
}

impl Drop for ServerLink {
    fn drop(&mut self) {
        if mpi::environment::is_finalized() {
            return;
        }
        let mut pending = false;
        for req in &mut self.send_reqs {
            pending |= abandon_send(req);
        }
        if pending {
            // MPI still reads headers and payloads: leak them instead of freeing.
            std::mem::forget(std::mem::take(&mut self.headers));
            std::mem::forget(std::mem::take(&mut self.notices));
            std::mem::forget(std::mem::take(&mut self.payloads));
        }
        for dt in self.types.iter_mut().flatten().flatten() {
            // SAFETY: datatypes created here, each freed once; pending sends keep theirs alive.
            unsafe { ffi::MPI_Type_free(&mut dt.1) };
        }
    }
}
