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

mod frame;
#[cfg(test)]
mod tests;

pub use self::frame::*;
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
