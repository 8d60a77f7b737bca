//! Byte relay for tunnels and upgraded connections (§13): two independent
//! directions, half-close propagation, idle teardown, byte counting.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

async fn one_way<R, W>(
    r: &mut R,
    w: &mut W,
    count: &AtomicU64,
    activity: &AtomicU64,
    start: Instant,
) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = r.read(&mut buf).await?;
        if n == 0 {
            let _ = w.shutdown().await;
            return Ok(());
        }
        w.write_all(&buf[..n]).await?;
        w.flush().await?;
        count.fetch_add(n as u64, Ordering::Relaxed);
        activity.store(start.elapsed().as_millis() as u64, Ordering::Relaxed);
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
    let start = Instant::now();
    let activity = AtomicU64::new(0);
    let c2u = one_way(&mut cr, &mut uw, up, &activity, start);
    let u2c = one_way(&mut ur, &mut cw, down, &activity, start);
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
                let last = Duration::from_millis(activity.load(Ordering::Relaxed));
                if start.elapsed().saturating_sub(last) >= idle {
                    return Ok(());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
