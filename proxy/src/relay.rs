//! Byte relay for tunnels and upgraded connections (docs/decisions.md, egress policy rules): two independent
//! directions, half-close propagation, idle teardown, byte counting.
//!
//! Two implementations behind one contract:
//! * [`relay`] — any `AsyncRead + AsyncWrite` pair (TLS streams, upgraded
//!   HTTP connections, tests): a user-space copy through 64 KiB buffers,
//!   flushing only when the reading side has nothing more for now.
//! * [`relay_tcp`] — TCP on both sides (opaque CONNECT, SOCKS5): on Linux a
//!   direction's first 64 KiB are copied, the rest moves socket → pipe → socket
//!   with `splice(2)` and never enters user space; elsewhere it is [`relay`].

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
/// (e.g. behind a CONNECT head) and is sent upstream first. On Linux each direction copies
/// its first bytes and moves the rest with `splice(2)` (`relay/splice.rs`); elsewhere this
/// is the copy relay.
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
    return splice::relay(client, upstream, idle, up, down).await;
    #[cfg(not(target_os = "linux"))]
    return relay(client, upstream, idle, up, down).await;
}

#[cfg(target_os = "linux")]
mod splice;

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

    /// One tunnel carrying `n` bytes each way; checks every byte.
    async fn tunnel_both_ways(n: usize) {
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
        async fn pump(s: TcpStream, n: usize, seed: u8) -> Vec<u8> {
            let (mut r, mut w) = s.into_split();
            let send = async move {
                let data: Vec<u8> = (0..n).map(|i| (i as u8).wrapping_mul(seed)).collect();
                w.write_all(&data).await.unwrap();
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
            tokio::join!(relay, pump(client, n, 7), pump(origin, n, 13));
        r.unwrap();
        assert!(from_origin
            .iter()
            .enumerate()
            .all(|(i, b)| *b == (i as u8).wrapping_mul(13)));
        assert!(from_client
            .iter()
            .enumerate()
            .all(|(i, b)| *b == (i as u8).wrapping_mul(7)));
        assert_eq!((from_origin.len(), from_client.len()), (n, n));
        assert_eq!(
            (up.load(Ordering::Relaxed), down.load(Ordering::Relaxed)),
            (n as u64, n as u64)
        );
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_short_tunnel_is_copied_and_takes_no_pipe() {
        let before = splice::pooled();
        tunnel_both_ways(5_000).await;
        assert_eq!(splice::pooled(), before, "no pipe was made or taken");
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn the_next_long_tunnel_reuses_the_emptied_pipes_and_gets_only_its_own_bytes() {
        tunnel_both_ways(3 * 1024 * 1024 + 5).await;
        let kept = splice::pooled();
        assert!(kept >= 1, "the emptied pipes went back to the pool");
        // the next tunnel takes the pooled pipe(s), and its bytes arrive intact and alone
        tunnel_both_ways(2 * 1024 * 1024 + 9).await;
        assert!(splice::pooled() >= kept, "and gives them back");
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
