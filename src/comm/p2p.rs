//! Point-to-point links between a server and its workers over nonblocking MPI. They move
//! messages of `f32` words and know nothing of what the words mean.
//!
//! rsmpi's safe requests are tied to scopes, which does not fit receives that stay posted for the
//! whole run, so the requests here are raw `MPI_Request`s owned by the link together with their
//! buffers. A buffer is allocated once (capacity fixed at construction), never resized, and only
//! touched by Rust after its request has completed.
//!
//! # Messages
//! A message is a header of the link's header words (their number fixed at construction)
//! followed by a payload of at most the link's capacity, sent as one array of `MPI_FLOAT` on
//! the link's communicator: from a worker with tag [`TAG_TO_SERVER`], from the server with tag
//! [`TAG_TO_WORKER`]. A receiver gets the whole message; its length is the received element
//! count (`MPI_Get_count`). The words are copied bit for bit. What they mean (gssp's pushes,
//! weights, stops and regroups) is [`crate::protocol::wire`]'s, encoded and decoded by the
//! runtime ([`crate::runtime::messages`]).
//!
//! # The links' rules (the caller's side of the contract)
//! * A worker alternates [`WorkerLink::send`] and [`WorkerLink::recv`] (a send also posts the
//!   receive for the answer); the server may also send first (e.g. the initial model).
//! * The server sends a worker either a payload shared with other workers behind that
//!   worker's header ([`ServerLink::send_shared`]) or a message of its own
//!   ([`ServerLink::send_to`]).
//! * A worker whose server sends nothing more closes its link ([`WorkerLink::close`]): later
//!   sends and receives are refused. A worker the server expects nothing more from leaves the
//!   server's link ([`ServerLink::leave`]): a later message from it is an error, and
//!   [`ServerLink::wait_message`] returns `None` once every worker has left.
//! * Moving to another communicator (regrouping): a worker's link moves there
//!   ([`WorkerLink::rebind`]) once nothing more is in flight from its old server, and the
//!   server's ([`ServerLink::rebind`]) once it has sent its last message on the old one.

use super::sealed::CommHandle;
use super::Collectives;
use super::{c_count, c_rank, check, empty_status, CommError};
use crate::telemetry::clock::thread_cpu_s;
use mpi::ffi;
use std::os::raw::c_int;
use std::rc::Rc;
use std::time::Instant;

/// MPI tag of messages from a worker to its server.
pub const TAG_TO_SERVER: i32 = 0x5055;
/// MPI tag of messages from the server to a worker.
pub const TAG_TO_WORKER: i32 = 0x5745;

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

/// A worker's message handed out by [`ServerLink::poll_message`] and
/// [`ServerLink::wait_message`]; borrows the worker's receive buffer until the next poll or
/// wait.
#[derive(Debug)]
pub struct Arrival<'a> {
    /// Index of the worker's slot (see [`ServerLink::new`]).
    pub worker: usize,
    /// The worker's rank in the link's communicator.
    pub rank: usize,
    /// The whole message, header and payload.
    pub message: &'a [f32],
    /// Wall seconds of copying the message into the server's buffer (`MPI_Mrecv`); see
    /// [`ServerLink`].
    pub receive_s: f64,
    /// Thread CPU seconds of the same copy.
    pub receive_cpu_s: f64,
}

pub(super) fn null_request() -> ffi::MPI_Request {
    // SAFETY: reading an extern constant.
    unsafe { ffi::RSMPI_REQUEST_NULL }
}

pub(super) fn is_active(req: ffi::MPI_Request) -> bool {
    req != null_request()
}

fn bytes_of(words: usize) -> u64 {
    (words * std::mem::size_of::<f32>()) as u64
}

/// Counts one message sent or received on `comm` ([`super::Collectives::p2p_messages`]).
fn count_message(comm: &CommHandle) {
    comm.p2p_messages.set(comm.p2p_messages.get() + 1);
}

/// Counts a sent message of `words` words in `stats` and on `comm`.
fn count_sent(stats: &mut LinkStats, comm: &CommHandle, words: usize) {
    stats.bytes_sent += bytes_of(words);
    stats.messages_sent += 1;
    count_message(comm);
}

/// Counts a received message of `words` words in `stats` and on `comm`.
fn count_received(stats: &mut LinkStats, comm: &CommHandle, words: usize) {
    stats.bytes_received += bytes_of(words);
    stats.messages_received += 1;
    count_message(comm);
}

/// Words of a message of `header_words` and `n` payload values, checked to fit MPI's count.
fn message_words(what: &'static str, header_words: usize, n: usize) -> Result<usize, CommError> {
    let words = header_words.checked_add(n).ok_or(CommError::Invalid {
        what,
        detail: format!("{header_words} + {n} words overflow"),
    })?;
    c_count(what, words)?;
    Ok(words)
}

/// Checks a message to send: a header of exactly `header_words` words, a payload of at most
/// `capacity` values.
fn check_message(
    what: &'static str,
    (header_words, capacity): (usize, usize),
    (header, payload): (usize, usize),
) -> Result<(), CommError> {
    if header != header_words {
        return Err(CommError::Invalid {
            what,
            detail: format!("a header of {header} words on a link of {header_words}"),
        });
    }
    if payload > capacity {
        return Err(CommError::TooLong {
            what,
            len: payload,
            capacity,
        });
    }
    Ok(())
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
pub(super) fn test(req: &mut ffi::MPI_Request) -> Result<Option<ffi::MPI_Status>, CommError> {
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
pub(super) fn cancel_recv(req: &mut ffi::MPI_Request) -> Result<(), CommError> {
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
pub(super) fn abandon_send(req: &mut ffi::MPI_Request) -> bool {
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
        ffi::MPI_Isend(base.cast(), 1, dt, dest, TAG_TO_WORKER, comm.raw, req),
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

/// The worker's end of a link to its server.
pub struct WorkerLink {
    comm: Rc<CommHandle>,
    server: c_int,
    header_words: usize,
    capacity: usize,
    send_buf: Vec<f32>,
    send_req: ffi::MPI_Request,
    recv_buf: Vec<f32>,
    recv_req: ffi::MPI_Request,
    /// The server sends nothing more ([`WorkerLink::close`]).
    closed: bool,
    stats: LinkStats,
}

impl WorkerLink {
    /// Link to `server_rank` of `comm` for messages of `header_words` header words and
    /// payloads of at most `n` values, either way. Not collective.
    pub fn new<C: Collectives>(
        comm: &C,
        server_rank: usize,
        header_words: usize,
        n: usize,
    ) -> Result<Self, CommError> {
        let comm = Rc::clone(comm.handle());
        let server = c_rank("WorkerLink server", server_rank, comm.size)?;
        if server_rank == comm.rank {
            return Err(CommError::Invalid {
                what: "WorkerLink::new",
                detail: format!("rank {server_rank} cannot be its own server"),
            });
        }
        let words = message_words("WorkerLink capacity", header_words, n)?;
        Ok(WorkerLink {
            comm,
            server,
            header_words,
            capacity: n,
            send_buf: vec![0.0; words],
            send_req: null_request(),
            recv_buf: vec![0.0; words],
            recv_req: null_request(),
            closed: false,
            stats: LinkStats::default(),
        })
    }

    /// Sends `header` then `payload` as one message: waits for the previous message to
    /// leave the send buffer, copies both into it and starts the send; also posts the
    /// receive for the answer.
    pub fn send(&mut self, header: &[f32], payload: &[f32]) -> Result<(), CommError> {
        self.check_open("WorkerLink::send")?;
        let frame = (self.header_words, self.capacity);
        check_message("WorkerLink::send", frame, (header.len(), payload.len()))?;
        wait(&mut self.send_req, &mut self.stats.wait_seconds)?;
        let words = header.len() + payload.len();
        self.send_buf[..header.len()].copy_from_slice(header);
        self.send_buf[header.len()..words].copy_from_slice(payload);
        super::emulation::hold_send(bytes_of(words));
        // SAFETY: send_buf is owned by self, never resized, and not written again before
        // send_req completes (send waits first; Drop leaks it if still pending).
        unsafe {
            isend(
                &self.comm,
                &self.send_buf,
                words,
                self.server,
                TAG_TO_SERVER,
                &mut self.send_req,
            )?;
        }
        count_sent(&mut self.stats, &self.comm, words);
        self.post_recv()
    }

    fn check_open(&self, what: &'static str) -> Result<(), CommError> {
        if self.closed {
            return Err(CommError::Invalid {
                what,
                detail: "the link is closed: the server sends nothing more".to_string(),
            });
        }
        Ok(())
    }

    fn post_recv(&mut self) -> Result<(), CommError> {
        self.check_open("WorkerLink receive")?;
        if !is_active(self.recv_req) {
            // SAFETY: recv_buf is owned by self, never resized, and read only after completion.
            unsafe {
                irecv(
                    &self.comm,
                    &mut self.recv_buf,
                    self.server,
                    TAG_TO_WORKER,
                    &mut self.recv_req,
                )?;
            }
        }
        Ok(())
    }

    /// Blocks until the server's next message arrives; returns it whole (header and
    /// payload), borrowing the receive buffer until the next call.
    pub fn recv(&mut self) -> Result<&[f32], CommError> {
        self.post_recv()?;
        let status = wait(&mut self.recv_req, &mut self.stats.wait_seconds)?;
        let words = received_words(&status)?;
        super::emulation::hold_receive(bytes_of(words));
        count_received(&mut self.stats, &self.comm, words);
        Ok(&self.recv_buf[..words])
    }

    /// The server sends nothing more (it said so in the message last received, nothing is
    /// in flight from it): later sends and receives are refused.
    pub fn close(&mut self) {
        self.closed = true;
    }

    /// Talks to `server_rank` of `comm` from now on, once nothing more is in flight from
    /// the old server; waits for the last message sent to leave first. Buffers and counters
    /// carry over.
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

    /// Waits for the last message sent to be delivered and withdraws the posted receive.
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

/// What a wait with a deadline ended with ([`ServerLink::wait_message_until`]).
pub enum Waited<'a> {
    Message(Arrival<'a>),
    /// The deadline passed first.
    Deadline,
    /// Every worker has left.
    AllLeft,
}

/// The server's end of the links to its workers: their messages are taken with matched
/// probes (`MPI_Mprobe`/`MPI_Improbe`, then `MPI_Mrecv`) into one reusable receive buffer
/// per worker; a payload for several workers goes out from one shared copy
/// ([`ServerLink::send_shared`]).
///
/// Why matched probes rather than a receive posted per worker: a large message (a push)
/// travels by rendezvous, and with shared memory the receiver itself copies it (OpenMPI's
/// CMA single copy). With posted receives that copy happens somewhere inside
/// `MPI_Waitany`'s polling, indistinguishable from idle waiting. With a matched probe the
/// wait ends when the message's header is there, and the copy is the `MPI_Mrecv` that
/// follows, timed on its own ([`Arrival::receive_s`]) and counted as server work.
pub struct ServerLink {
    comm: Rc<CommHandle>,
    header_words: usize,
    capacity: usize,
    /// Each worker slot's rank in the communicator (`None`: not a member there).
    workers: Vec<Option<c_int>>,
    /// Worker index of each rank of the communicator (`None`: not a worker of this server).
    worker_of_rank: Vec<Option<usize>>,
    recv_bufs: Vec<Vec<f32>>,
    /// Header words of each worker's last shared-payload message (sent from here; each
    /// `header_words` long, never resized).
    headers: Vec<Vec<f32>>,
    /// Each worker's last message of its own, header and payload (kept until it is sent).
    own: Vec<Vec<f32>>,
    /// Copies of shared payloads, each read by every worker it was sent to together; a
    /// copy is reused once no pending send reads it (at most one per worker plus one exist).
    payloads: Vec<Vec<f32>>,
    /// Pending sends reading each payload.
    readers: Vec<usize>,
    /// The payload each worker's pending send reads.
    payload_of: Vec<Option<usize>>,
    /// Committed datatypes "worker w's header, then payload p's first `len` values", built
    /// on first use: `types[w][p] = (len, datatype)`.
    types: Vec<Vec<Option<(usize, ffi::MPI_Datatype)>>>,
    send_reqs: Vec<ffi::MPI_Request>,
    /// Workers that left ([`ServerLink::leave`]).
    left: Vec<bool>,
    /// Workers that have not left.
    active: usize,
    stats: LinkStats,
    /// Copies a shared payload ([`ServerLink::with_copy`]).
    copy: fn(&mut [f32], &[f32]),
}

/// The default payload copy: `copy_from_slice` on the calling thread.
fn copy_here(dst: &mut [f32], src: &[f32]) {
    dst.copy_from_slice(src);
}

impl ServerLink {
    /// This rank, the server at rank 0 of `comm`, serving worker slots `slots` (each the
    /// worker's rank in `comm`, distinct and not 0; `None` for a worker that is not a member
    /// there, as if it had left) with messages of `header_words` header words and payloads of
    /// at most `n` values, either way. Not collective. Workers are referred to by their slot
    /// index.
    pub fn new<C: Collectives>(
        comm: &C,
        slots: &[Option<usize>],
        header_words: usize,
        n: usize,
    ) -> Result<Self, CommError> {
        let words = message_words("ServerLink capacity", header_words, n)?;
        let k = slots.len();
        let mut link = ServerLink {
            comm: Rc::clone(comm.handle()),
            header_words,
            capacity: n,
            workers: vec![None; k],
            worker_of_rank: Vec::new(),
            recv_bufs: (0..k).map(|_| vec![0.0; words]).collect(),
            headers: vec![vec![0.0; header_words]; k],
            own: vec![Vec::new(); k],
            payloads: Vec::new(),
            readers: Vec::new(),
            payload_of: vec![None; k],
            types: vec![Vec::new(); k],
            send_reqs: vec![null_request(); k],
            left: vec![true; k],
            active: 0,
            stats: LinkStats::default(),
            copy: copy_here,
        };
        link.bind(comm, slots)?;
        Ok(link)
    }

    /// Copies each shared payload with `copy` (of two equal-length slices, `dst` first),
    /// e.g. one that splits the copy over the caller's threads.
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

    /// The slot and rank of the active worker at rank `source`.
    fn worker_at(&self, source: c_int) -> Result<(usize, usize), CommError> {
        let rank = usize::try_from(source).ok();
        let worker = rank.and_then(|r| self.worker_of_rank.get(r).copied().flatten());
        match (worker, rank) {
            (Some(w), Some(r)) if !self.left[w] => Ok((w, r)),
            _ => Err(CommError::Invalid {
                what: "ServerLink receive",
                detail: format!("a message from rank {source}, which is not an active worker"),
            }),
        }
    }

    /// Receives the probed `message` from the rank in `status` into that worker's buffer.
    fn receive(
        &mut self,
        mut message: ffi::MPI_Message,
        status: &ffi::MPI_Status,
    ) -> Result<Arrival<'_>, CommError> {
        let (w, rank) = self.worker_at(status.MPI_SOURCE)?;
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
        count_received(&mut self.stats, &self.comm, words);
        Ok(Arrival {
            worker: w,
            rank,
            message: &self.recv_bufs[w][..words],
            receive_s,
            receive_cpu_s,
        })
    }

    /// Returns a worker's message that has arrived, without blocking (`MPI_Improbe`); `None`
    /// if none has or every worker has left.
    pub fn poll_message(&mut self) -> Result<Option<Arrival<'_>>, CommError> {
        if self.active == 0 {
            return Ok(None);
        }
        // SAFETY: reading an extern constant.
        let any = unsafe { ffi::RSMPI_ANY_SOURCE };
        match self.probe(any)? {
            Some((message, status)) => self.receive(message, &status).map(Some),
            None => Ok(None),
        }
    }

    /// Blocks until a worker's message arrives (`MPI_Mprobe`, or polls of `MPI_Improbe`
    /// where waits sleep, `super::idle`; the time counted as waiting) and receives it; `None`
    /// when every worker has left.
    pub fn wait_message(&mut self) -> Result<Option<Arrival<'_>>, CommError> {
        if self.active == 0 {
            return Ok(None);
        }
        // SAFETY: reading an extern constant.
        let any = unsafe { ffi::RSMPI_ANY_SOURCE };
        match self.wait_probe(any, None)? {
            Some((message, status)) => self.receive(message, &status).map(Some),
            None => Ok(None),
        }
    }

    /// As [`ServerLink::wait_message`], but waits no later than `deadline` (polls of
    /// `MPI_Improbe`, sleeping between them where waits sleep, else yielding the core).
    pub fn wait_message_until(&mut self, deadline: Instant) -> Result<Waited<'_>, CommError> {
        if self.active == 0 {
            return Ok(Waited::AllLeft);
        }
        // SAFETY: reading an extern constant.
        let any = unsafe { ffi::RSMPI_ANY_SOURCE };
        match self.wait_probe(any, Some(deadline))? {
            Some((message, status)) => self.receive(message, &status).map(Waited::Message),
            None => Ok(Waited::Deadline),
        }
    }

    /// Blocks until worker `worker`'s next message arrives and receives it, whatever other
    /// workers sent meanwhile (they stay queued). An error if `worker` has left.
    pub fn wait_message_from(&mut self, worker: usize) -> Result<Arrival<'_>, CommError> {
        let rank = self.rank_of("ServerLink::wait_message_from", worker)?;
        if self.left[worker] {
            return Err(CommError::Invalid {
                what: "ServerLink::wait_message_from",
                detail: format!("worker slot {worker} has left"),
            });
        }
        match self.wait_probe(rank, None)? {
            Some((message, status)) => self.receive(message, &status),
            None => Err(CommError::Invalid {
                what: "ServerLink::wait_message_from",
                detail: "a wait without a deadline ended without a message".into(),
            }),
        }
    }

    /// Waits for the next message from `source` (a rank, or `MPI_ANY_SOURCE`), matched but
    /// not yet received; `None` once `deadline` has passed. Without a deadline, a blocking
    /// `MPI_Mprobe` unless waits sleep. The time is counted as waiting.
    fn wait_probe(
        &mut self,
        source: c_int,
        deadline: Option<Instant>,
    ) -> Result<Option<(ffi::MPI_Message, ffi::MPI_Status)>, CommError> {
        let t0 = mpi::time();
        let probed = if deadline.is_some() || super::idle::sleeping() {
            loop {
                match self.probe(source) {
                    Ok(None) if deadline.is_some_and(|d| Instant::now() >= d) => break Ok(None),
                    Ok(None) if super::idle::sleeping() => super::idle::pause(),
                    Ok(None) => std::thread::yield_now(),
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
                    source,
                    TAG_TO_SERVER,
                    self.comm.raw,
                    &mut message,
                    &mut status,
                )
            };
            check("MPI_Mprobe", rc).map(|()| Some((message, status)))
        };
        self.stats.wait_seconds += mpi::time() - t0;
        probed
    }

    /// The next message from `source` (a rank, or `MPI_ANY_SOURCE`) that has arrived,
    /// matched but not yet received (`MPI_Improbe`).
    fn probe(
        &self,
        source: c_int,
    ) -> Result<Option<(ffi::MPI_Message, ffi::MPI_Status)>, CommError> {
        let mut flag: c_int = 0;
        // SAFETY: reading an extern constant.
        let mut message = unsafe { ffi::RSMPI_MESSAGE_NULL };
        let mut status = empty_status();
        // SAFETY: the communicator is alive (held by self); out-pointers are valid.
        check("MPI_Improbe", unsafe {
            ffi::MPI_Improbe(
                source,
                TAG_TO_SERVER,
                self.comm.raw,
                &mut flag,
                &mut message,
                &mut status,
            )
        })?;
        Ok((flag != 0).then_some((message, status)))
    }

    /// Sends `payload` to every worker index in `workers`, each message that worker's
    /// `header(w)` (the link's header words) followed by the payload. The payload is copied
    /// once (with the link's copy, [`ServerLink::with_copy`]), into a copy all these sends
    /// read; each message is one derived datatype, so the wire layout is the same as a
    /// contiguous message's. First waits for each worker's previous message to be delivered.
    pub fn send_shared<const H: usize>(
        &mut self,
        workers: &[usize],
        payload: &[f32],
        header: impl Fn(usize) -> [f32; H],
    ) -> Result<(), CommError> {
        let frame = (self.header_words, self.capacity);
        check_message("ServerLink::send_shared", frame, (H, payload.len()))?;
        for &w in workers {
            self.check_worker("ServerLink::send_shared", w)?;
            wait(&mut self.send_reqs[w], &mut self.stats.wait_seconds)?;
            self.settle(w);
        }
        if workers.is_empty() {
            return Ok(());
        }
        let p = self.free_payload()?;
        (self.copy)(&mut self.payloads[p][..payload.len()], payload);
        for &w in workers {
            self.headers[w].copy_from_slice(&header(w));
            self.start_shared(w, p, payload.len())?;
        }
        Ok(())
    }

    /// Starts the send of worker `w`'s header and the first `len` values of payload `p`;
    /// its previous send has completed.
    fn start_shared(&mut self, w: usize, p: usize, len: usize) -> Result<(), CommError> {
        let rank = self.rank_of("ServerLink::send_shared", w)?;
        let dt = self.message_type(w, p, len)?;
        let words = self.header_words + len;
        super::emulation::hold_send(bytes_of(words));
        // SAFETY: the header and payload p are owned by self, never resized or moved
        // (their heap buffers stay put), and not written while a send reads them: a
        // worker's header is rewritten only after its send completed (waited for first),
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
        count_sent(&mut self.stats, &self.comm, words);
        Ok(())
    }

    /// Sends worker index `worker` a message of its own, `header` then `payload` (copied,
    /// and kept until it is delivered), once its previous message has been delivered.
    pub fn send_to(
        &mut self,
        worker: usize,
        header: &[f32],
        payload: &[f32],
    ) -> Result<(), CommError> {
        let rank = self.rank_of("ServerLink::send_to", worker)?;
        let frame = (self.header_words, self.capacity);
        check_message("ServerLink::send_to", frame, (header.len(), payload.len()))?;
        wait(&mut self.send_reqs[worker], &mut self.stats.wait_seconds)?;
        self.settle(worker);
        let own = &mut self.own[worker];
        own.clear();
        own.extend_from_slice(header);
        own.extend_from_slice(payload);
        let words = own.len();
        super::emulation::hold_send(bytes_of(words));
        // SAFETY: the message is owned by self and not written again before
        // send_reqs[worker] completes (every writer waits for it first).
        unsafe {
            isend(
                &self.comm,
                &self.own[worker],
                words,
                rank,
                TAG_TO_WORKER,
                &mut self.send_reqs[worker],
            )?;
        }
        count_sent(&mut self.stats, &self.comm, words);
        Ok(())
    }

    /// Worker index `worker` sends this server nothing more (it was told to stop, or
    /// belongs to another server now): a message from it is an error, and
    /// [`ServerLink::wait_message`] no longer waits for it.
    pub fn leave(&mut self, worker: usize) -> Result<(), CommError> {
        self.check_worker("ServerLink::leave", worker)?;
        if !self.left[worker] {
            self.left[worker] = true;
            self.active -= 1;
        }
        Ok(())
    }

    /// Worker index `worker` (left before, or never here) is this server's again.
    pub fn join(&mut self, worker: usize) -> Result<(), CommError> {
        self.check_worker("ServerLink::join", worker)?;
        if self.left[worker] {
            self.left[worker] = false;
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
        let lengths = [
            c_count("ServerLink header", self.header_words)?,
            c_count("ServerLink payload", len)?,
        ];
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

    /// Whether worker index `worker` has left ([`ServerLink::leave`]).
    pub fn has_left(&self, worker: usize) -> bool {
        self.left.get(worker).copied().unwrap_or(false)
    }

    /// Counters so far.
    pub fn stats(&self) -> LinkStats {
        self.stats
    }

    /// Waits until every message sent has been delivered.
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
            std::mem::forget(std::mem::take(&mut self.own));
            std::mem::forget(std::mem::take(&mut self.payloads));
        }
        for dt in self.types.iter_mut().flatten().flatten() {
            // SAFETY: datatypes created here, each freed once; pending sends keep theirs alive.
            unsafe { ffi::MPI_Type_free(&mut dt.1) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_must_have_the_links_header_and_fit_its_capacity() {
        let frame = (3, 10);
        assert!(check_message("t", frame, (3, 0)).is_ok());
        assert!(check_message("t", frame, (3, 10)).is_ok());
        let err = check_message("t", frame, (2, 0)).unwrap_err();
        assert!(
            err.to_string()
                .contains("a header of 2 words on a link of 3"),
            "{err}"
        );
        assert!(matches!(
            check_message("t", frame, (3, 11)),
            Err(CommError::TooLong {
                len: 11,
                capacity: 10,
                ..
            })
        ));
    }

    #[test]
    fn message_sizes_that_overflow_or_exceed_a_c_int_are_errors() {
        assert_eq!(message_words("t", 3, 7).unwrap(), 10);
        assert!(message_words("t", 3, usize::MAX).is_err());
        assert!(message_words("t", 3, c_int::MAX as usize).is_err());
        assert_eq!(bytes_of(3), 12);
    }
}
