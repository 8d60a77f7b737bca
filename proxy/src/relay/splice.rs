//! One direction of a TCP-to-TCP tunnel on Linux: the first bytes by copy, the rest
//! socket → pipe → socket with `splice(2)`, readiness from tokio.
//!
//! Most tunnels are short (a TLS handshake, one request, its answer): for them a pipe pair
//! costs more system calls (`pipe2`, `fcntl`, `close`, and an `EAGAIN` splice after each
//! chunk) than the bytes are worth. A direction therefore starts as a plain copy through a
//! small buffer (tokio's reads stop at a short read, no `EAGAIN` round) and switches to
//! `splice` once it has carried [`SPLICE_AFTER`] bytes. Pipes of ended tunnels are kept per
//! thread for the next one, but only a pipe known to be empty: one left with bytes in it (an
//! error, a tunnel torn down mid-transfer) is closed, so no byte of one tunnel can reach
//! another.
//!
//! Each splicing direction fills its pipe only when the pipe is empty and drains it
//! completely before reading again. That keeps `EAGAIN` unambiguous: from an empty pipe it
//! can only mean "the socket has no data", into a socket only "the socket buffer is full" —
//! so tokio's readiness is cleared only when the socket really is not ready.

use std::cell::RefCell;
use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::TcpStream;

use super::Activity;

/// Bytes a direction copies before it moves to `splice`.
pub(super) const SPLICE_AFTER: u64 = 64 * 1024;
/// Buffer of the copy phase (a TLS record and its header fit).
const COPY_CHUNK: usize = 17 * 1024;
/// Bytes asked for per `splice` call (the pipe is grown towards this).
const CHUNK: usize = 256 * 1024;
/// Empty pipes kept per thread for the next tunnels (two descriptors each).
const POOL_MAX: usize = 8;
const SPLICE_F_MOVE: u32 = 1;
const SPLICE_F_NONBLOCK: u32 = 2;
/// `F_LINUX_SPECIFIC_BASE + 7`, the same on every Linux architecture.
const F_SETPIPE_SZ: i32 = 1031;

// The C library is linked anyway; declaring the two calls here keeps the
// crate free of a `libc`/`nix` dependency.
extern "C" {
    fn splice(
        fd_in: i32,
        off_in: *mut i64,
        fd_out: i32,
        off_out: *mut i64,
        len: usize,
        flags: u32,
    ) -> isize;
    fn fcntl(fd: i32, cmd: i32, ...) -> i32;
}

struct Pipe {
    r: std::io::PipeReader,
    w: std::io::PipeWriter,
    cap: usize,
}

impl Pipe {
    fn new() -> io::Result<Pipe> {
        // close-on-exec; the descriptors stay blocking, every splice
        // passes SPLICE_F_NONBLOCK for the pipe side.
        let (r, w) = std::io::pipe()?;
        // A bigger pipe means fewer syscalls; keep the default if refused.
        // SAFETY: fcntl(F_SETPIPE_SZ, int) on a descriptor we own.
        let sz = unsafe { fcntl(w.as_fd().as_raw_fd(), F_SETPIPE_SZ, CHUNK as i32) };
        let cap = if sz > 0 { sz as usize } else { 64 * 1024 };
        Ok(Pipe { r, w, cap })
    }
}

thread_local! {
    /// Empty pipes of ended tunnels, for the next tunnel on this thread.
    static POOL: RefCell<Vec<Pipe>> = const { RefCell::new(Vec::new()) };
}

/// A pipe lent to one direction. Dropped empty, it goes back to this thread's pool;
/// dropped with bytes in it (or unknown), it is closed.
struct Lent {
    pipe: Option<Pipe>,
    /// Bytes spliced into the pipe and not yet out of it.
    held: usize,
}

impl Lent {
    fn take() -> io::Result<Lent> {
        let pooled = POOL.with(|p| p.borrow_mut().pop());
        let pipe = match pooled {
            Some(p) => p,
            None => Pipe::new()?,
        };
        Ok(Lent {
            pipe: Some(pipe),
            held: 0,
        })
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        let Some(pipe) = self.pipe.take() else { return };
        if self.held != 0 {
            return;
        }
        // `try_with`: during thread teardown the pool may be gone; the pipe just closes.
        let _ = POOL.try_with(|p| {
            let mut p = p.borrow_mut();
            if p.len() < POOL_MAX {
                p.push(pipe);
            }
        });
    }
}

/// Pipes waiting in this thread's pool.
#[cfg(test)]
pub(super) fn pooled() -> usize {
    POOL.with(|p| p.borrow().len())
}

fn splice_raw(from: RawFd, to: RawFd, len: usize) -> io::Result<usize> {
    // SAFETY: both descriptors are open for the duration of the call;
    // null offsets mean "current position" (required for sockets/pipes).
    let n = unsafe {
        splice(
            from,
            std::ptr::null_mut(),
            to,
            std::ptr::null_mut(),
            len,
            SPLICE_F_MOVE | SPLICE_F_NONBLOCK,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Both directions of a TCP tunnel until both ended, one failed, or nothing moved for `idle`.
pub(super) async fn relay(
    mut client: TcpStream,
    mut upstream: TcpStream,
    idle: Duration,
    up: &AtomicU64,
    down: &AtomicU64,
) -> io::Result<()> {
    let activity = Activity::new();
    let (mut cr, mut cw) = client.split();
    let (mut ur, mut uw) = upstream.split();
    let c2u = one_way(&mut cr, &mut uw, up, &activity);
    let u2c = one_way(&mut ur, &mut cw, down, &activity);
    super::drive(c2u, u2c, idle, &activity).await
}

/// Moves `src` → `dst` until `src` ends (then half-closes `dst`), an error occurs, or the
/// caller stops polling.
async fn one_way(
    src: &mut ReadHalf<'_>,
    dst: &mut WriteHalf<'_>,
    count: &AtomicU64,
    activity: &Activity,
) -> io::Result<()> {
    // read into spare capacity: nothing to zero
    let mut buf = Vec::with_capacity(COPY_CHUNK);
    let mut moved = 0u64;
    while moved < SPLICE_AFTER {
        buf.clear();
        let n = src.read_buf(&mut buf).await?;
        if n == 0 {
            let _ = dst.shutdown().await;
            return Ok(());
        }
        dst.write_all(&buf).await?;
        moved += n as u64;
        count.fetch_add(n as u64, Ordering::Relaxed);
        activity.touch();
    }
    drop(buf);
    match Lent::take() {
        Ok(pipe) => spliced(src.as_ref(), dst.as_ref(), pipe, count, activity).await,
        // no pipe to be had (descriptors): the copy relay carries the rest
        Err(_) => Box::pin(super::copy_one_way(src, dst, count, activity)).await,
    }
}

async fn spliced(
    src: &TcpStream,
    dst: &TcpStream,
    mut pipe: Lent,
    count: &AtomicU64,
    activity: &Activity,
) -> io::Result<()> {
    let Some(p) = pipe.pipe.as_ref() else {
        return Err(io::ErrorKind::BrokenPipe.into());
    };
    let (pr, pw, cap) = (p.r.as_fd().as_raw_fd(), p.w.as_fd().as_raw_fd(), p.cap);
    loop {
        // Fill: the pipe is empty here.
        let n = loop {
            match src.try_io(Interest::READABLE, || splice_raw(src.as_raw_fd(), pw, cap)) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => src.readable().await?,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        };
        if n == 0 {
            // EOF from src: propagate the half-close.
            let _ = socket_ref(dst).shutdown(std::net::Shutdown::Write);
            return Ok(());
        }
        pipe.held = n;
        // Drain the pipe completely into dst.
        while pipe.held > 0 {
            match dst.try_io(Interest::WRITABLE, || {
                splice_raw(pr, dst.as_raw_fd(), pipe.held)
            }) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(m) => {
                    pipe.held -= m;
                    count.fetch_add(m as u64, Ordering::Relaxed);
                    activity.touch();
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => dst.writable().await?,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

fn socket_ref(s: &TcpStream) -> std::mem::ManuallyDrop<std::net::TcpStream> {
    use std::os::fd::FromRawFd;
    // SAFETY: the descriptor stays owned by `s` (alive for this borrow);
    // ManuallyDrop guarantees the std handle never closes it.
    std::mem::ManuallyDrop::new(unsafe { std::net::TcpStream::from_raw_fd(s.as_raw_fd()) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pipe_dropped_with_bytes_in_it_is_closed_not_pooled() {
        let before = pooled();
        let mut dirty = Lent::take().expect("a pipe");
        dirty.held = 10;
        drop(dirty);
        assert_eq!(pooled(), before);
        drop(Lent::take().expect("a pipe"));
        assert_eq!(pooled(), (before + 1).min(POOL_MAX));
    }

    #[test]
    fn an_emptied_pipe_is_lent_again() {
        let fd = |l: &Lent| l.pipe.as_ref().map(|p| p.r.as_fd().as_raw_fd());
        let first = Lent::take().expect("a pipe");
        let used = fd(&first);
        drop(first);
        let again = Lent::take().expect("a pipe");
        assert_eq!(fd(&again), used);
    }

    #[test]
    fn the_pool_keeps_a_bounded_number_of_pipes() {
        let lent: Vec<Lent> = (0..POOL_MAX + 3)
            .map(|_| Lent::take().expect("a pipe"))
            .collect();
        drop(lent);
        assert_eq!(pooled(), POOL_MAX);
    }
}
