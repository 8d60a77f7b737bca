//! Byte relay for tunnels and upgraded connections (docs/decisions.md, egress policy rules): two independent
//! directions, half-close propagation, idle teardown, byte counting.
//!
//! Two implementations behind one contract:
//! * [`relay`] — any `AsyncRead + AsyncWrite` pair (TLS streams, upgraded
//!   HTTP connections, tests): a user-space copy through 64 KiB buffers,
//!   flushing only when the reading side has nothing more for now.
//! * [`relay_tcp`] — TCP on both sides (opaque CONNECT, SOCKS5): on Linux the
//!   bytes move socket → pipe → socket with `splice(2)` and never enter user
//!   space; elsewhere it is [`relay`].

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

/// Buffer size of each direction of the copy relay.
const COPY_BUF: usize = 64 * 1024;

/// Last activity, as milliseconds since `start`.
struct Activity {
    start: Instant,
    last_ms: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Activity {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }
    fn touch(&self) {
        self.last_ms
            .store(self.start.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
    fn idle_for(&self) -> Duration {
        self.start
            .elapsed()
            .saturating_sub(Duration::from_millis(self.last_ms.load(Ordering::Relaxed)))
    }
}

/// Run both directions until both ended, one failed, or nothing moved for
/// `idle` (checked on a coarse tick, so a busy tunnel pays no timer cost).
async fn drive<F1, F2>(c2u: F1, u2c: F2, idle: Duration, activity: &Activity) -> io::Result<()>
where
    F1: std::future::Future<Output = io::Result<()>>,
    F2: std::future::Future<Output = io::Result<()>>,
{
    tokio::pin!(c2u, u2c);
    let (mut c2u_done, mut u2c_done) = (false, false);
    let tick = (idle / 4).clamp(Duration::from_millis(10), Duration::from_secs(5));
    loop {
        if c2u_done && u2c_done {
            return Ok(());
        }
        tokio::select! {
            r = &mut c2u, if !c2u_done => { r?; c2u_done = true; }
            r = &mut u2c, if !u2c_done => { r?; u2c_done = true; }
            _ = tokio::time::sleep(tick) => {
                if activity.idle_for() >= idle {
                    return Ok(());
                }
            }
        }
    }
}

/// Reads from `r`, writes to `w` in `COPY_BUF` chunks; flushes when the
/// reader has nothing ready (so buffered writers such as TLS streams send
/// promptly without a flush per chunk); shuts `w` down at EOF.
async fn copy_one_way<R, W>(
    r: &mut R,
    w: &mut W,
    count: &AtomicU64,
    activity: &Activity,
) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; COPY_BUF];
    let mut unflushed = false;
    loop {
        let n = {
            let mut rb = ReadBuf::new(&mut buf);
            let ready = std::future::poll_fn(|cx| {
                Poll::Ready(match Pin::new(&mut *r).poll_read(cx, &mut rb) {
                    Poll::Ready(res) => Some(res),
                    Poll::Pending => None,
                })
            })
            .await;
            match ready {
                Some(res) => res?,
                None => {
                    if unflushed {
                        w.flush().await?;
                    }
                    std::future::poll_fn(|cx| Pin::new(&mut *r).poll_read(cx, &mut rb)).await?;
                }
            }
            rb.filled().len()
        };
        if n == 0 {
            let _ = w.shutdown().await;
            return Ok(());
        }
        w.write_all(&buf[..n]).await?;
        unflushed = true;
        count.fetch_add(n as u64, Ordering::Relaxed);
        activity.touch();
    }
}

/// Relay `client` ⇄ `upstream` until both directions ended, an error occurs,
/// or nothing moved for `idle`. Counts into `up` (client→upstream) and `down`.
pub async fn relay<A, B>(
    client: A,
    upstream: B,
    idle: Duration,
    up: &AtomicU64,
    down: &AtomicU64,
) -> io::Result<()>
where
    A: AsyncRead + AsyncWrite,
    B: AsyncRead + AsyncWrite,
{
    let (mut cr, mut cw) = tokio::io::split(client);
    let (mut ur, mut uw) = tokio::io::split(upstream);
    let activity = Activity::new();
    let c2u = copy_one_way(&mut cr, &mut uw, up, &activity);
    let u2c = copy_one_way(&mut ur, &mut cw, down, &activity);
    drive(c2u, u2c, idle, &activity).await
}

/// [`relay`] for TCP on both sides; `prefix` holds client bytes already read
/// (e.g. behind a CONNECT head) and is sent upstream first. On Linux the
/// payload is moved with `splice(2)`; elsewhere, or if a pipe cannot be made,
/// through the copy relay.
pub async fn relay_tcp(
    client: TcpStream,
    prefix: &[u8],
    mut upstream: TcpStream,
    idle: Duration,
    up: &AtomicU64,
    down: &AtomicU64,
) -> io::Result<()> {
    if !prefix.is_empty() {
        upstream.write_all(prefix).await?;
        up.fetch_add(prefix.len() as u64, Ordering::Relaxed);
    }
    #[cfg(target_os = "linux")]
    {
        if let (Ok(p1), Ok(p2)) = (splice::Pipe::new(), splice::Pipe::new()) {
            let activity = Activity::new();
            let c2u = splice::one_way(&client, &upstream, p1, up, &activity);
            let u2c = splice::one_way(&upstream, &client, p2, down, &activity);
            return drive(c2u, u2c, idle, &activity).await;
        }
    }
    relay(client, upstream, idle, up, down).await
}

#[cfg(target_os = "linux")]
mod splice {
    //! socket → pipe → socket with `splice(2)`, readiness from tokio.
    //!
    //! Each direction fills its pipe only when the pipe is empty and drains
    //! it completely before reading again. That keeps `EAGAIN` unambiguous:
    //! from an empty pipe it can only mean "the socket has no data", into a
    //! socket only "the socket buffer is full" — so tokio's readiness is
    //! cleared only when the socket really is not ready.

    use std::io;
    use std::os::fd::{AsFd, AsRawFd, RawFd};
    use std::sync::atomic::{AtomicU64, Ordering};

    use tokio::io::Interest;
    use tokio::net::TcpStream;

    use super::Activity;

    /// Bytes asked for per `splice` call (the pipe is grown towards this).
    const CHUNK: usize = 256 * 1024;
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

    pub(super) struct Pipe {
        r: std::io::PipeReader,
        w: std::io::PipeWriter,
        cap: usize,
    }

    impl Pipe {
        pub(super) fn new() -> io::Result<Pipe> {
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

    /// `shutdown(SHUT_WR)` on a borrowed tokio socket.
    fn shutdown_write(s: &TcpStream) {
        let sock = socket_ref(s);
        let _ = sock.shutdown(std::net::Shutdown::Write);
    }

    fn socket_ref(s: &TcpStream) -> std::mem::ManuallyDrop<std::net::TcpStream> {
        use std::os::fd::FromRawFd;
        // SAFETY: the descriptor stays owned by `s` (alive for this borrow);
        // ManuallyDrop guarantees the std handle never closes it.
        std::mem::ManuallyDrop::new(unsafe { std::net::TcpStream::from_raw_fd(s.as_raw_fd()) })
    }

    pub(super) async fn one_way(
        src: &TcpStream,
        dst: &TcpStream,
        pipe: Pipe,
        count: &AtomicU64,
        activity: &Activity,
    ) -> io::Result<()> {
        loop {
            // Fill: the pipe is empty here.
            let n = loop {
                match src.try_io(Interest::READABLE, || {
                    splice_raw(src.as_raw_fd(), pipe.w.as_fd().as_raw_fd(), pipe.cap)
                }) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => src.readable().await?,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            };
            if n == 0 {
                // EOF from src: propagate the half-close.
                shutdown_write(dst);
                return Ok(());
            }
            // Drain the pipe completely into dst.
            let mut left = n;
            while left > 0 {
                match dst.try_io(Interest::WRITABLE, || {
                    splice_raw(pipe.r.as_fd().as_raw_fd(), dst.as_raw_fd(), left)
                }) {
                    Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                    Ok(m) => {
                        left -= m;
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn a_half_closed_client_still_gets_the_late_answer() {
        let (client_side, mut client) = tokio::io::duplex(64);
        let (upstream_side, mut origin) = tokio::io::duplex(64);
        let (up, down) = (AtomicU64::new(0), AtomicU64::new(0));
        let relay = relay(
            client_side,
            upstream_side,
            Duration::from_secs(5),
            &up,
            &down,
        );
        let drive = async {
            client.write_all(b"ping").await.unwrap();
            client.shutdown().await.unwrap();
            let mut got = [0u8; 4];
            origin.read_exact(&mut got).await.unwrap();
            assert_eq!(&got, b"ping");
            let mut eof = [0u8; 1];
            assert_eq!(origin.read(&mut eof).await.unwrap(), 0);
            tokio::time::sleep(Duration::from_millis(100)).await;
            origin.write_all(b"pong").await.unwrap();
            drop(origin);
            let mut out = Vec::new();
            client.read_to_end(&mut out).await.unwrap();
            assert_eq!(out, b"pong");
        };
        let (r, _) = tokio::join!(relay, drive);
        r.unwrap();
        assert_eq!(up.load(Ordering::Relaxed), 4);
        assert_eq!(down.load(Ordering::Relaxed), 4);
    }

    #[tokio::test]
    async fn an_idle_tunnel_is_torn_down() {
        let (client_side, _client) = tokio::io::duplex(64);
        let (upstream_side, _origin) = tokio::io::duplex(64);
        let (up, down) = (AtomicU64::new(0), AtomicU64::new(0));
        relay(
            client_side,
            upstream_side,
            Duration::from_millis(50),
            &up,
            &down,
        )
        .await
        .unwrap();
    }

    #[tokio::test]
    async fn a_silent_client_keeps_receiving_origin_ticks_past_the_idle_limit() {
        let (client_side, mut client) = tokio::io::duplex(64);
        let (upstream_side, mut origin) = tokio::io::duplex(64);
        let (up, down) = (AtomicU64::new(0), AtomicU64::new(0));
        let relay = relay(
            client_side,
            upstream_side,
            Duration::from_secs(1),
            &up,
            &down,
        );
        let drive = async {
            for _ in 0..8 {
                origin.write_all(b"t").await.unwrap();
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
            drop(origin);
            let mut out = Vec::new();
            client.read_to_end(&mut out).await.unwrap();
            assert_eq!(out, b"tttttttt");
        };
        let (r, _) = tokio::join!(relay, drive);
        r.unwrap();
    }

    /// (our end, far end) of one loopback TCP connection.
    async fn tcp_pair() -> (TcpStream, TcpStream) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (b, _) = l.accept().await.unwrap();
        (a, b)
    }

    #[tokio::test]
    async fn tcp_relay_propagates_half_close_and_counts_the_prefix() {
        let (mut client, client_side) = tcp_pair().await;
        let (upstream_side, mut origin) = tcp_pair().await;
        let (up, down) = (AtomicU64::new(0), AtomicU64::new(0));
        let relay = relay_tcp(
            client_side,
            b"pre:",
            upstream_side,
            Duration::from_secs(5),
            &up,
            &down,
        );
        let drive = async {
            client.write_all(b"ping").await.unwrap();
            client.shutdown().await.unwrap();
            let mut got = Vec::new();
            origin.read_to_end(&mut got).await.unwrap();
            assert_eq!(got, b"pre:ping");
            tokio::time::sleep(Duration::from_millis(100)).await;
            origin.write_all(b"pong").await.unwrap();
            drop(origin);
            let mut out = Vec::new();
            client.read_to_end(&mut out).await.unwrap();
            assert_eq!(out, b"pong");
        };
        let (r, _) = tokio::join!(relay, drive);
        r.unwrap();
        assert_eq!(up.load(Ordering::Relaxed), 8);
        assert_eq!(down.load(Ordering::Relaxed), 4);
    }

    #[tokio::test]
    async fn tcp_relay_moves_megabytes_both_ways_intact() {
        const N: usize = 12 * 1024 * 1024 + 13;
        let pattern = |i: usize| (i * 31 % 251) as u8;
        let (client, client_side) = tcp_pair().await;
        let (upstream_side, origin) = tcp_pair().await;
        let (up, down) = (AtomicU64::new(0), AtomicU64::new(0));
        let relay = relay_tcp(
            client_side,
            &[],
            upstream_side,
            Duration::from_secs(5),
            &up,
            &down,
        );
        async fn pump(s: TcpStream, pattern: fn(usize) -> u8) -> Vec<u8> {
            let (mut r, mut w) = s.into_split();
            let send = async move {
                let data: Vec<u8> = (0..N).map(pattern).collect();
                for c in data.chunks(100_000) {
                    w.write_all(c).await.unwrap();
                }
                w.shutdown().await.unwrap();
            };
            let recv = async move {
                let mut got = Vec::new();
                r.read_to_end(&mut got).await.unwrap();
                got
            };
            tokio::join!(send, recv).1
        }
        let (r, from_origin, from_client) =
            tokio::join!(relay, pump(client, pattern), pump(origin, pattern));
        r.unwrap();
        assert_eq!(from_origin.len(), N);
        assert_eq!(from_client.len(), N);
        assert!(from_origin
            .iter()
            .enumerate()
            .all(|(i, b)| *b == pattern(i)));
        assert!(from_client
            .iter()
            .enumerate()
            .all(|(i, b)| *b == pattern(i)));
        assert_eq!(up.load(Ordering::Relaxed), N as u64);
        assert_eq!(down.load(Ordering::Relaxed), N as u64);
    }

    #[tokio::test]
    async fn an_idle_tcp_tunnel_is_torn_down_and_both_ends_see_the_close() {
        let (mut client, client_side) = tcp_pair().await;
        let (upstream_side, mut origin) = tcp_pair().await;
        let (up, down) = (AtomicU64::new(0), AtomicU64::new(0));
        let started = Instant::now();
        relay_tcp(
            client_side,
            &[],
            upstream_side,
            Duration::from_millis(100),
            &up,
            &down,
        )
        .await
        .unwrap();
        assert!(started.elapsed() < Duration::from_secs(2));
        let mut b = [0u8; 1];
        assert_eq!(client.read(&mut b).await.unwrap(), 0);
        assert_eq!(origin.read(&mut b).await.unwrap(), 0);
    }

    #[tokio::test]
    async fn a_tcp_tunnel_with_steady_traffic_outlives_the_idle_limit() {
        let (mut client, client_side) = tcp_pair().await;
        let (upstream_side, mut origin) = tcp_pair().await;
        let (up, down) = (AtomicU64::new(0), AtomicU64::new(0));
        let relay = relay_tcp(
            client_side,
            &[],
            upstream_side,
            Duration::from_millis(300),
            &up,
            &down,
        );
        let drive = async {
            for _ in 0..8 {
                origin.write_all(b"t").await.unwrap();
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            drop(origin);
            let mut out = Vec::new();
            client.read_to_end(&mut out).await.unwrap();
            assert_eq!(out, b"tttttttt");
        };
        let (r, _) = tokio::join!(relay, drive);
        r.unwrap();
        assert_eq!(down.load(Ordering::Relaxed), 8);
    }
}
