//! Accept loop: the overall connection cap, first-byte demux, lane dispatch.
//!
//! The cap counts every client connection for as long as anything of it lives: an
//! established CONNECT tunnel, a SOCKS5 relay or an upgraded connection keeps its place
//! (a [`ConnGuard`]) after the HTTP exchange that opened it has ended. The cap is also
//! lowered, at start, so that all connections' descriptors fit under the process's
//! `RLIMIT_NOFILE` with a reserve left for the rest of the gateway: a flood of tunnels
//! can no longer take the last descriptor the Companion API needs to accept `/healthz`.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

use crate::detect::{detect, Protocol};
use crate::io_threads::IoThreads;
use crate::state::{ConnGuard, Shared};

pub(crate) async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    io: IoThreads,
    mut stop: watch::Receiver<bool>,
) {
    let cap = effective_cap(
        shared.cfg.max_connections,
        shared.cfg.reserved_fds,
        nofile_limit(),
    );
    if cap < shared.cfg.max_connections {
        tracing::info!(
            configured = shared.cfg.max_connections,
            cap,
            "proxy connection cap lowered to fit the descriptor limit"
        );
    }
    let sem = Arc::new(Semaphore::new(cap.max(1)));
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = stop.changed() => return,
        };
        let stream = match accepted {
            Ok((s, _)) => s,
            Err(e) => {
                tracing::warn!(error = %e, "proxy accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = sem.clone().try_acquire_owned() else {
            tracing::warn!("proxy connection cap reached; refusing a connection");
            drop(stream);
            continue;
        };
        let shared = shared.clone();
        let guard: ConnGuard = Arc::new(permit);
        io.spawn_conn(stream, move |stream| async move {
            handle(stream, shared, guard).await;
        });
    }
}

/// Descriptors one proxy connection may hold at most: the client socket, the upstream
/// socket and the two pipes of a `splice` relay.
pub const FDS_PER_CONNECTION: usize = 6;

/// The connection cap that fits `limit` descriptors with `reserved` of them (default: a
/// quarter of the limit, at most 4096) left for the rest of the process. Pure.
pub fn effective_cap(configured: usize, reserved: Option<usize>, limit: Option<u64>) -> usize {
    let Some(limit) = limit.and_then(|l| usize::try_from(l).ok()) else {
        return configured;
    };
    let reserved = reserved.unwrap_or_else(|| (limit / 4).min(4096));
    let budget = limit.saturating_sub(reserved) / FDS_PER_CONNECTION;
    configured.min(budget.max(1))
}

/// The soft `RLIMIT_NOFILE` of this process (from `/proc/self/limits`; `None` elsewhere or
/// when unlimited).
pub fn nofile_limit() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

async fn handle(mut stream: TcpStream, shared: Arc<Shared>, conn: ConnGuard) {
    let _ = stream.set_nodelay(true);
    match detect(&stream, shared.cfg.first_byte_timeout).await {
        Ok(Protocol::Socks5) => crate::lanes::socks5::serve(stream, shared).await,
        Ok(Protocol::Http) => {
            if starts_like_h2c(&stream, shared.cfg.head_timeout).await {
                let body = format!("{}\n", crate::deny::reason::MALFORMED);
                let resp = format!(
                    "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(resp.as_bytes()).await;
                let _ = stream.shutdown().await;
                return;
            }
            crate::lanes::http::serve(stream, shared, conn).await
        }
        Ok(Protocol::Socks4) | Ok(Protocol::Eof) | Err(_) => {
            let _ = stream.shutdown().await;
        }
    }
}

/// Peek until the h2c prior-knowledge preface is seen or ruled out.
async fn starts_like_h2c(stream: &TcpStream, timeout: Duration) -> bool {
    const PREFACE: &[u8] = b"PRI * HTTP/2.0";
    let mut buf = [0u8; 14];
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let n = match tokio::time::timeout_at(deadline, stream.peek(&mut buf)).await {
            Ok(Ok(n)) => n,
            _ => return false,
        };
        if n == 0 || !PREFACE.starts_with(&buf[..n]) {
            return false;
        }
        if crate::detect::is_h2c_preface(&buf[..n]) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_leaves_a_reserve_of_descriptors_for_the_rest_of_the_gateway() {
        // 20,000 descriptors: a quarter kept, 15,000 / 6 = 2,500 fit; the configured 2,048 stays
        assert_eq!(effective_cap(2048, None, Some(20_000)), 2048);
        // the default soft limit of many systems
        assert_eq!(effective_cap(2048, None, Some(1024)), 128);
        assert_eq!(effective_cap(2048, Some(100), Some(700)), 100);
        assert_eq!(effective_cap(2048, None, None), 2048);
        assert_eq!(effective_cap(2048, Some(5000), Some(10)), 1);
    }

    #[test]
    fn this_process_knows_its_descriptor_limit_on_linux() {
        if cfg!(target_os = "linux") {
            assert!(nofile_limit().is_some_and(|n| n > 0));
        }
    }
}
