//! The filter lane: network-filter calls from the gateway to a filter worker over a
//! dedicated socket, with a compact binary encoding (no JSON on either side).
//!
//! The gateway creates a `socketpair(AF_UNIX, SOCK_STREAM)` when it spawns the registration
//! worker and passes one end as `--lane-fd N`. In the worker a dedicated thread serves it
//! ([`serve`]): it reads every request that is already queued, runs them under ONE GIL
//! acquisition (the filter function is called directly with a ctx dict built in Rust) and
//! answers them in one write. On the gateway side ([`Lane`]) the calling task writes its
//! frame straight into the socket and reads the answer itself: one waiting task at a time
//! is the reader and hands the answers of the others to them (no writer or reader task, no
//! channel hop). It tries the socket once before it sleeps on readiness (optionally for a
//! while, yielding to the runtime in between: `VIS_FILTER_LANE_SPIN_US`); a runtime thread
//! is never blocked.
//!
//! Frames (little-endian, `bytes` = u32 length + data, `opt` = u32 length or `u32::MAX`):
//!
//! ```text
//! request  u32 len | u64 id | u64 deadline (CLOCK_MONOTONIC ns) | u32 index | bytes file |
//!          u8 phase | opt method | bytes host | u16 port | opt path |
//!          u32 n | n × (bytes name, bytes value) | opt body | u32 status (u32::MAX: none)
//! reply    u32 len | u64 id | u8 kind | u8 restart | kind 1: bytes reason |
//!          kind 2: bytes type, bytes message, opt traceback
//! ```
//!
//! Reply kinds: 0 allow, 1 block (`vis.block(reason)`), 2 error (a raise, with the
//! traceback), 3 busy (the extension stayed busy with another call until the deadline).

use super::protocol::WireError;
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// Frames larger than this are refused (a body is at most 1 MiB, headers are bounded).
pub const MAX_FRAME: usize = 16 << 20;

pub const KIND_ALLOW: u8 = 0;
pub const KIND_BLOCK: u8 = 1;
pub const KIND_ERROR: u8 = 2;
pub const KIND_BUSY: u8 = 3;

/// `CLOCK_MONOTONIC` in nanoseconds: the same clock in the gateway and its workers.
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write into.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

pub fn phase_code(p: vis_proxy::Phase) -> u8 {
    match p {
        vis_proxy::Phase::Http => 0,
        vis_proxy::Phase::Https => 1,
        vis_proxy::Phase::Socks => 2,
        vis_proxy::Phase::HttpResponse => 3,
        vis_proxy::Phase::HttpsResponse => 4,
    }
}

pub fn phase_name(code: u8) -> &'static str {
    match code {
        0 => "http",
        1 => "https",
        2 => "socks",
        3 => "http-response",
        _ => "https-response",
    }
}

#[cfg(test)]
pub fn phase_from_name(name: &str) -> Option<vis_proxy::Phase> {
    Some(match name {
        "http" => vis_proxy::Phase::Http,
        "https" => vis_proxy::Phase::Https,
        "socks" => vis_proxy::Phase::Socks,
        "http-response" => vis_proxy::Phase::HttpResponse,
        "https-response" => vis_proxy::Phase::HttpsResponse,
        _ => return None,
    })
}

// ---------------------------------------------------------------------------------------
// Encoding
// ---------------------------------------------------------------------------------------

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

fn put_opt(out: &mut Vec<u8>, b: Option<&[u8]>) {
    match b {
        Some(b) => put_bytes(out, b),
        None => out.extend_from_slice(&u32::MAX.to_le_bytes()),
    }
}

/// Encodes one request frame (length prefix included).
pub fn encode_request(
    out: &mut Vec<u8>,
    id: u64,
    deadline_ns: u64,
    file: &str,
    index: u32,
    ctx: &vis_proxy::FilterCtx,
) {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&id.to_le_bytes());
    out.extend_from_slice(&deadline_ns.to_le_bytes());
    out.extend_from_slice(&index.to_le_bytes());
    put_bytes(out, file.as_bytes());
    out.push(phase_code(ctx.phase));
    put_opt(out, ctx.method.as_deref().map(str::as_bytes));
    put_bytes(out, ctx.host.as_bytes());
    out.extend_from_slice(&ctx.port.to_le_bytes());
    put_opt(out, ctx.path.as_deref().map(str::as_bytes));
    out.extend_from_slice(&(ctx.headers.len() as u32).to_le_bytes());
    for (k, v) in &ctx.headers {
        put_bytes(out, k.as_bytes());
        put_bytes(out, v.as_bytes());
    }
    put_opt(out, ctx.body.as_deref().map(str::as_bytes));
    out.extend_from_slice(&ctx.status.map_or(u32::MAX, u32::from).to_le_bytes());
    let len = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
}

/// A filter's answer as it crosses the lane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Allow,
    Block(String),
    Error { error: WireError, restart: bool },
    Busy,
}

/// Encodes one reply frame (length prefix included).
pub fn encode_reply(out: &mut Vec<u8>, id: u64, reply: &Reply) {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&id.to_le_bytes());
    match reply {
        Reply::Allow => out.extend_from_slice(&[KIND_ALLOW, 0]),
        Reply::Busy => out.extend_from_slice(&[KIND_BUSY, 0]),
        Reply::Block(reason) => {
            out.extend_from_slice(&[KIND_BLOCK, 0]);
            put_bytes(out, reason.as_bytes());
        }
        Reply::Error { error, restart } => {
            out.extend_from_slice(&[KIND_ERROR, u8::from(*restart)]);
            put_bytes(out, error.kind.as_bytes());
            put_bytes(out, error.message.as_bytes());
            put_opt(out, error.traceback.as_deref().map(str::as_bytes));
        }
    }
    let len = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
}

/// A bounds-checked cursor over one frame body.
pub struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(buf: &'a [u8]) -> Cursor<'a> {
        Cursor { buf, pos: 0 }
    }
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let s = self.buf.get(self.pos..end)?;
        self.pos = end;
        Some(s)
    }
    pub fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    pub fn u16(&mut self) -> Option<u16> {
        self.take(2)
            .and_then(|b| b.try_into().ok())
            .map(u16::from_le_bytes)
    }
    pub fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes)
    }
    pub fn u64(&mut self) -> Option<u64> {
        self.take(8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
    }
    pub fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    /// `Some(None)` for an absent value, `None` for a malformed frame.
    pub fn opt(&mut self) -> Option<Option<&'a [u8]>> {
        let n = self.u32()?;
        if n == u32::MAX {
            return Some(None);
        }
        self.take(n as usize).map(Some)
    }
}

/// Splits complete frames off the front of `buf`: `(frame bodies, bytes consumed)`.
/// `Err` when a frame announces more than [`MAX_FRAME`] bytes.
pub fn split_frames(buf: &[u8]) -> Result<(Vec<&[u8]>, usize), String> {
    let mut frames = Vec::new();
    let mut pos = 0;
    while let Some(head) = buf.get(pos..pos + 4) {
        let mut len = [0u8; 4];
        len.copy_from_slice(head);
        let len = u32::from_le_bytes(len) as usize;
        if len > MAX_FRAME {
            return Err(format!("a filter-lane frame of {len} bytes is too large"));
        }
        let Some(body) = buf.get(pos + 4..pos + 4 + len) else {
            break;
        };
        frames.push(body);
        pos += 4 + len;
    }
    Ok((frames, pos))
}

fn utf8(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Decodes one reply frame body: `(id, reply)`.
pub fn decode_reply(body: &[u8]) -> Option<(u64, Reply)> {
    let mut c = Cursor::new(body);
    let id = c.u64()?;
    let kind = c.u8()?;
    let restart = c.u8()? != 0;
    let reply = match kind {
        KIND_ALLOW => Reply::Allow,
        KIND_BUSY => Reply::Busy,
        KIND_BLOCK => Reply::Block(utf8(c.bytes()?)),
        KIND_ERROR => Reply::Error {
            error: WireError {
                kind: utf8(c.bytes()?),
                message: utf8(c.bytes()?),
                traceback: c.opt()?.map(utf8),
            },
            restart,
        },
        _ => return None,
    };
    Some((id, reply))
}

// ---------------------------------------------------------------------------------------
// The gateway side
// ---------------------------------------------------------------------------------------

/// How long a caller polls the socket (yielding to the runtime in between) before it
/// sleeps on readiness. Default 0 (one try, then sleep): on a small machine a polling
/// runtime thread takes the CPU the worker's lane thread was just woken on, which costs
/// more than the wake-up it saves. `VIS_FILTER_LANE_SPIN_US` sets it (at most 10 ms).
fn spin_budget() -> Duration {
    static SPIN: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *SPIN.get_or_init(|| {
        let us = std::env::var("VIS_FILTER_LANE_SPIN_US")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        Duration::from_micros(us.min(10_000))
    })
}

/// How long the worker's lane thread polls for the next request after answering, before
/// it sleeps (`VIS_FILTER_LANE_WORKER_SPIN_US`, default 0, at most 10 ms).
pub fn worker_spin_us() -> u64 {
    std::env::var("VIS_FILTER_LANE_WORKER_SPIN_US")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0)
        .min(10_000)
}

enum Slot {
    Waiting(Option<Waker>),
    Done(Reply),
}

#[derive(Default)]
struct State {
    /// Bytes not yet written (only while a flusher task runs).
    out: Vec<u8>,
    flushing: bool,
    /// Bytes read and not yet parsed (a partial frame).
    inbuf: Vec<u8>,
    slots: HashMap<u64, Slot>,
    /// Calls whose caller went away before the answer came.
    abandoned: HashSet<u64>,
    /// The call that reads the socket for everybody.
    reader: Option<u64>,
    /// Why the lane no longer works (`None`: it does).
    dead: Option<String>,
}

/// Why a lane call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LaneError {
    /// The socket closed or failed (the worker is gone or going).
    Closed(String),
}

/// The gateway end of one worker's filter lane.
pub struct Lane {
    /// `fd`'s registration with the event loop of the first thread that waits on it
    /// (declared before `fd`: it is dropped, and deregistered, first).
    reg: OnceLock<AsyncFd<LaneFd>>,
    fd: OwnedFd,
    st: Mutex<State>,
    next_id: AtomicU64,
}

/// The lane's descriptor as the registration sees it (owned by [`Lane::fd`]).
struct LaneFd(RawFd);

impl AsRawFd for LaneFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// A worker's filter lanes: one per proxy event-loop thread, and one for every other
/// caller (the last). A proxy thread always uses its own lane, so the lane's socket is
/// registered with that thread's event loop and an answer wakes the waiting thread
/// directly, not another runtime's thread that would then have to wake it.
pub struct Lanes(Vec<Arc<Lane>>);

impl Lanes {
    /// How many lanes a worker gets: one per proxy thread, plus one.
    pub fn wanted() -> usize {
        vis_proxy::default_io_threads() + 1
    }

    /// `None` without any lane.
    pub fn new(lanes: Vec<Arc<Lane>>) -> Option<Lanes> {
        (!lanes.is_empty()).then_some(Lanes(lanes))
    }

    /// The calling thread's lane.
    pub fn pick(&self) -> &Arc<Lane> {
        let last = self.0.len() - 1;
        let i = vis_proxy::io_thread_index().filter(|i| *i < last);
        &self.0[i.unwrap_or(last)]
    }

    /// Fails every waiting call on every lane (the worker ended).
    pub fn fail_all(&self, why: &str) {
        self.0.iter().for_each(|l| l.fail_all(why));
    }
}

fn sys_err(r: isize) -> Result<usize, io::Error> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

fn send_some(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: `buf` is valid for `buf.len()` bytes.
    let r = unsafe {
        libc::send(
            fd,
            buf.as_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
    sys_err(r)
}

fn recv_some(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is valid for writes of `buf.len()` bytes.
    let r = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
    sys_err(r)
}

/// Writes as much of `buf` as the socket takes now: bytes written, or the failure.
fn write_now(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match send_some(fd, &buf[done..]) {
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

impl State {
    fn kill_all(&mut self, why: &str, wake: &mut Vec<Waker>) {
        if self.dead.is_none() {
            self.dead = Some(why.to_string());
        }
        for slot in self.slots.values_mut() {
            if let Slot::Waiting(w) = slot {
                if let Some(w) = w.take() {
                    wake.push(w);
                }
            }
        }
    }

    /// Hands the reader role to another waiting call.
    fn next_reader(&mut self, wake: &mut Vec<Waker>) {
        self.reader = None;
        for slot in self.slots.values_mut() {
            if let Slot::Waiting(w @ Some(_)) = slot {
                if let Some(w) = w.take() {
                    wake.push(w);
                }
                return;
            }
        }
    }
}

impl Lane {
    /// Wraps the gateway's end of the socket pair (made non-blocking here). The socket is
    /// registered for readiness on first need, with the runtime of the thread that needs it.
    pub fn new(fd: OwnedFd) -> io::Result<Arc<Lane>> {
        // SAFETY: plain fcntl calls on a descriptor we own.
        unsafe {
            let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
            if flags < 0 || libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) < 0
            {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(Arc::new(Lane {
            reg: OnceLock::new(),
            fd,
            st: Mutex::new(State::default()),
            next_id: AtomicU64::new(1),
        }))
    }

    /// The readiness registration (made by the first thread that asks).
    fn reg(&self) -> io::Result<&AsyncFd<LaneFd>> {
        if let Some(r) = self.reg.get() {
            return Ok(r);
        }
        // SAFETY: the descriptor is owned by `self.fd`, which outlives the registration
        // (`reg` is declared, so dropped, first).
        // Readable only: an `EPOLLOUT` interest would wake this thread every time the worker
        // reads a request (a Unix socket announces write space on each read), for nothing.
        match unsafe {
            AsyncFd::register_with_interest(LaneFd(self.fd.as_raw_fd()), Interest::READABLE)
        } {
            Ok(r) => {
                // A thread that lost the race drops its registration; the winner's stays.
                let _ = self.reg.set(r);
            }
            Err(e) if self.reg.get().is_none() => return Err(e.into_parts().1),
            Err(_) => {}
        }
        self.reg
            .get()
            .ok_or_else(|| io::Error::other("no registration"))
    }

    /// Fails every waiting call (the worker ended).
    pub fn fail_all(&self, why: &str) {
        let mut wake = Vec::new();
        self.st.lock().kill_all(why, &mut wake);
        wake.into_iter().for_each(Waker::wake);
    }

    /// The call `id` was abandoned by its caller and has not been answered yet.
    pub fn is_outstanding(&self, id: u64) -> bool {
        let st = self.st.lock();
        st.dead.is_none() && st.abandoned.contains(&id)
    }

    /// Sends one filter request and returns the call to await. The frame is written by the
    /// calling task before this returns (or handed to a flusher task when the socket is
    /// full), so dropping the call never leaves half a frame behind.
    pub fn call(
        self: &Arc<Self>,
        file: &str,
        index: u32,
        ctx: &vis_proxy::FilterCtx,
        deadline_ns: u64,
    ) -> Result<LaneCall, LaneError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut frame = Vec::with_capacity(256 + ctx.body.as_ref().map_or(0, String::len));
        encode_request(&mut frame, id, deadline_ns, file, index, ctx);
        let mut st = self.st.lock();
        if let Some(why) = &st.dead {
            return Err(LaneError::Closed(why.clone()));
        }
        st.slots.insert(id, Slot::Waiting(None));
        if st.flushing {
            st.out.extend_from_slice(&frame);
        } else {
            match write_now(self.fd.as_raw_fd(), &frame) {
                Ok(n) if n == frame.len() => {}
                Ok(n) => {
                    st.out.extend_from_slice(&frame[n..]);
                    st.flushing = true;
                    let lane = self.clone();
                    tokio::spawn(async move { lane.flush().await });
                }
                Err(e) => {
                    let mut wake = Vec::new();
                    st.kill_all(&format!("cannot write to the filter lane: {e}"), &mut wake);
                    st.slots.remove(&id);
                    drop(st);
                    wake.into_iter().for_each(Waker::wake);
                    return Err(LaneError::Closed(e.to_string()));
                }
            }
        }
        drop(st);
        Ok(LaneCall {
            lane: self.clone(),
            id,
            finished: false,
        })
    }

    /// Writes what the socket did not take at once (a large body). Waits for write space
    /// through its own registration of a duplicate descriptor, which lives only while there
    /// is something to write (the lane's own registration is for input only).
    async fn flush(self: Arc<Self>) {
        let reg = match self.fd.try_clone().and_then(|fd| {
            // SAFETY: the registration owns the duplicate, which stays open while it lives.
            unsafe { AsyncFd::register_with_interest(fd, Interest::WRITABLE) }
                .map_err(|e| e.into_parts().1)
        }) {
            Ok(r) => r,
            Err(e) => {
                self.fail_all(&format!("the filter lane failed: {e}"));
                return;
            }
        };
        loop {
            let mut guard = match reg.writable().await {
                Ok(g) => g,
                Err(e) => {
                    self.fail_all(&format!("the filter lane failed: {e}"));
                    return;
                }
            };
            let mut st = self.st.lock();
            if st.dead.is_some() {
                st.flushing = false;
                st.out.clear();
                return;
            }
            match write_now(self.fd.as_raw_fd(), &st.out) {
                Ok(n) => {
                    st.out.drain(..n);
                    if st.out.is_empty() {
                        st.flushing = false;
                        return;
                    }
                    guard.clear_ready();
                }
                Err(e) => {
                    let mut wake = Vec::new();
                    st.kill_all(&format!("cannot write to the filter lane: {e}"), &mut wake);
                    st.flushing = false;
                    drop(st);
                    wake.into_iter().for_each(Waker::wake);
                    return;
                }
            }
        }
    }

    /// Reads whatever is available and delivers complete answers. `Ok(true)`: something
    /// was read; `Ok(false)`: nothing to read now.
    fn pump(&self, st: &mut State, wake: &mut Vec<Waker>) -> Result<bool, String> {
        let mut chunk = [0u8; 16 * 1024];
        let n = loop {
            match recv_some(self.fd.as_raw_fd(), &mut chunk) {
                Ok(0) => return Err("the worker closed its filter lane".into()),
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(format!("the filter lane failed: {e}")),
            }
        };
        st.inbuf.extend_from_slice(&chunk[..n]);
        let inbuf = std::mem::take(&mut st.inbuf);
        let (frames, used) = split_frames(&inbuf)?;
        for body in frames {
            let Some((id, reply)) = decode_reply(body) else {
                return Err("an unreadable filter-lane answer".into());
            };
            st.abandoned.remove(&id);
            if let Some(slot) = st.slots.get_mut(&id) {
                if let Slot::Waiting(Some(w)) = std::mem::replace(slot, Slot::Done(reply)) {
                    wake.push(w);
                }
            }
        }
        st.inbuf = inbuf;
        st.inbuf.drain(..used);
        Ok(true)
    }
}

/// One filter call in flight ([`Lane::call`]). Dropping it before it finishes abandons
/// the call: the answer is discarded when it comes ([`Lane::is_outstanding`] until then).
pub struct LaneCall {
    lane: Arc<Lane>,
    id: u64,
    finished: bool,
}

impl LaneCall {
    pub fn id(&self) -> u64 {
        self.id
    }
}

impl Future for LaneCall {
    type Output = Result<Reply, LaneError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.poll_step(Some(cx))
    }
}

impl LaneCall {
    /// Waits for the answer: polls the socket a few times first, yielding to the runtime
    /// in between (`spin_budget`), then sleeps on readiness.
    pub async fn answer(&mut self) -> Result<Reply, LaneError> {
        let budget = spin_budget();
        if budget.is_zero() {
            return self.await;
        }
        let until = Instant::now() + budget;
        loop {
            if let Poll::Ready(r) = self.poll_step(None) {
                return r;
            }
            if Instant::now() >= until {
                break;
            }
            tokio::task::yield_now().await;
        }
        self.await
    }

    /// One step; without a context nothing is registered for a wake-up (a try).
    fn poll_step(&mut self, cx: Option<&mut Context<'_>>) -> Poll<Result<Reply, LaneError>> {
        let lane = self.lane.clone();
        let mut wake = Vec::new();
        let out = {
            let mut st = lane.st.lock();
            self.step(&lane, &mut st, cx, &mut wake)
        };
        wake.into_iter().for_each(Waker::wake);
        if out.is_ready() {
            self.finished = true;
        }
        out
    }

    fn step(
        &mut self,
        lane: &Lane,
        st: &mut State,
        mut cx: Option<&mut Context<'_>>,
        wake: &mut Vec<Waker>,
    ) -> Poll<Result<Reply, LaneError>> {
        let id = self.id;
        loop {
            match st.slots.get(&id) {
                Some(Slot::Done(_)) => {
                    if let Some(Slot::Done(reply)) = st.slots.remove(&id) {
                        if st.reader == Some(id) {
                            st.next_reader(wake);
                        }
                        return Poll::Ready(Ok(reply));
                    }
                }
                Some(Slot::Waiting(_)) => {}
                None if st.dead.is_none() => {
                    return Poll::Ready(Err(LaneError::Closed("the call was lost".into())));
                }
                None => {}
            }
            if let Some(why) = &st.dead {
                let why = why.clone();
                st.slots.remove(&id);
                if st.reader == Some(id) {
                    st.reader = None;
                }
                return Poll::Ready(Err(LaneError::Closed(why)));
            }
            if st.reader.is_some_and(|r| r != id) {
                if let (Some(cx), Some(Slot::Waiting(w))) = (cx.as_deref(), st.slots.get_mut(&id)) {
                    match w {
                        Some(old) if old.will_wake(cx.waker()) => {}
                        _ => *w = Some(cx.waker().clone()),
                    }
                }
                return Poll::Pending;
            }
            st.reader = Some(id);
            match lane.pump(st, wake) {
                Ok(true) => continue,
                Ok(false) => {}
                Err(why) => {
                    st.kill_all(&why, wake);
                    continue;
                }
            }
            // Nothing to read yet: sleep on readiness (a try just says so).
            let Some(cx) = cx.as_deref_mut() else {
                return Poll::Pending;
            };
            let reg = match lane.reg() {
                Ok(r) => r,
                Err(e) => {
                    st.kill_all(&format!("the filter lane failed: {e}"), wake);
                    continue;
                }
            };
            match reg.poll_read_ready(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(mut guard)) => {
                    guard.clear_ready();
                    match lane.pump(st, wake) {
                        Ok(_) => continue,
                        Err(why) => {
                            st.kill_all(&why, wake);
                            continue;
                        }
                    }
                }
                Poll::Ready(Err(e)) => {
                    st.kill_all(&format!("the filter lane failed: {e}"), wake);
                    continue;
                }
            }
        }
    }
}

impl Drop for LaneCall {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let mut wake = Vec::new();
        {
            let mut st = self.lane.st.lock();
            if let Some(Slot::Waiting(_)) = st.slots.remove(&self.id) {
                st.abandoned.insert(self.id);
            }
            if st.reader == Some(self.id) {
                st.next_reader(&mut wake);
            }
        }
        wake.into_iter().for_each(Waker::wake);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> vis_proxy::FilterCtx {
        vis_proxy::FilterCtx {
            phase: vis_proxy::Phase::HttpsResponse,
            method: Some("GET".into()),
            host: "h.test".into(),
            port: 443,
            path: None,
            headers: [("a".to_string(), "b".to_string())].into_iter().collect(),
            body: Some("x".repeat(70_000)),
            status: Some(204),
        }
    }

    fn pair() -> (OwnedFd, OwnedFd) {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        (a.into(), b.into())
    }

    #[test]
    fn a_thread_outside_the_proxy_uses_the_last_lane() {
        let lanes: Vec<_> = (0..3).map(|_| Lane::new(pair().0).unwrap()).collect();
        let last = lanes[2].clone();
        let lanes = Lanes::new(lanes).unwrap();
        assert!(Arc::ptr_eq(lanes.pick(), &last));
        assert!(Lanes::new(Vec::new()).is_none());
    }

    #[tokio::test]
    async fn a_lane_registers_with_the_runtime_of_its_first_waiter_and_answers() {
        let (ours, theirs) = pair();
        let lane = Lane::new(ours).unwrap();
        let mut call = lane.call("f.py", 0, &ctx(), u64::MAX).unwrap();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        // Play the worker: read the request, answer "allow" once told to.
        let worker = std::thread::spawn(move || {
            let mut s = std::os::unix::net::UnixStream::from(theirs);
            let mut got = Vec::new();
            let mut buf = [0u8; 65536];
            loop {
                let n = std::io::Read::read(&mut s, &mut buf).unwrap();
                got.extend_from_slice(&buf[..n]);
                if let Ok((frames, _)) = split_frames(&got) {
                    if let Some(f) = frames.first() {
                        let id = u64::from_le_bytes(f[..8].try_into().unwrap());
                        go_rx.recv().unwrap();
                        let mut out = Vec::new();
                        encode_reply(&mut out, id, &Reply::Allow);
                        std::io::Write::write_all(&mut s, &out).unwrap();
                        return;
                    }
                }
            }
        });
        assert!(
            lane.reg.get().is_none(),
            "nothing registered before anyone waits"
        );
        // Nothing to read yet: the call goes to sleep on readiness, registering the socket.
        let early = tokio::time::timeout(Duration::from_millis(20), &mut call).await;
        assert!(early.is_err(), "no answer before the worker sends one");
        assert!(lane.reg.get().is_some(), "registered on first wait");
        go_tx.send(()).unwrap();
        let reply = call.answer().await.unwrap();
        assert_eq!(reply, Reply::Allow);
        worker.join().unwrap();
    }

    #[test]
    fn frames_split_only_when_complete_and_replies_round_trip() {
        let mut buf = Vec::new();
        encode_request(&mut buf, 7, 9, "/f.py", 2, &ctx());
        let whole = buf.len();
        encode_reply(&mut buf, 8, &Reply::Block("no".into()));
        encode_reply(
            &mut buf,
            9,
            &Reply::Error {
                error: WireError {
                    kind: "KeyError".into(),
                    message: "KeyError: 'x'".into(),
                    traceback: Some("tb".into()),
                },
                restart: true,
            },
        );
        let (frames, used) = split_frames(&buf[..whole - 1]).expect("split");
        assert!(frames.is_empty());
        assert_eq!(used, 0);
        let (frames, used) = split_frames(&buf).expect("split");
        assert_eq!(frames.len(), 3);
        assert_eq!(used, buf.len());
        assert_eq!(
            decode_reply(frames[1]),
            Some((8, Reply::Block("no".into())))
        );
        match decode_reply(frames[2]) {
            Some((9, Reply::Error { error, restart })) => {
                assert!(restart);
                assert_eq!(error.traceback.as_deref(), Some("tb"));
            }
            other => panic!("{other:?}"),
        }
        // A truncated body is refused, never read out of bounds.
        assert_eq!(decode_reply(&frames[2][..frames[2].len() - 1]), None);
        let huge = ((MAX_FRAME + 1) as u32).to_le_bytes();
        assert!(split_frames(&huge).is_err());
    }
}
