//! Accept loop: admission (`admission.rs`: the unauthenticated budget, then the overall
//! cap), first-byte demux, lane dispatch.
//!
//! The cap counts every authenticated client connection for as long as anything of it lives: an
//! established CONNECT tunnel, a SOCKS5 relay or an upgraded connection keeps its place
//! (a [`ConnGuard`]) after the HTTP exchange that opened it has ended. The cap is also
//! lowered, at start, so that all connections' descriptors fit under the process's
//! `RLIMIT_NOFILE` with a reserve left for the rest of the gateway: a flood of tunnels
//! can no longer take the last descriptor the Companion API needs to accept `/healthz`.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::admission::Admission;
use crate::detect::{detect, detect_byte, Protocol};
use crate::io_threads::IoThreads;
use crate::state::{ConnGuard, Shared};

/// Refusals being answered at once at most; past it a refused connection is just closed.
const MAX_REFUSALS_IN_FLIGHT: usize = 64;

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
    let admission = Admission::new(cap, shared.cfg.max_unauthenticated, shared.cfg.auth_timeout);
    let refusals = Arc::new(tokio::sync::Semaphore::new(MAX_REFUSALS_IN_FLIGHT));
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
        let Some(guard) = admission.accept() else {
            admission.refused_unauthenticated.note(
                "proxy: too many connections waiting to authenticate; refused a connection (503)",
            );
            if let Ok(p) = refusals.clone().try_acquire_owned() {
                let timeout = shared.cfg.first_byte_timeout.min(Duration::from_secs(1));
                tokio::spawn(async move {
                    refuse_busy(stream, timeout).await;
                    drop(p);
                });
            }
            continue;
        };
        let shared = shared.clone();
        io.spawn_conn(stream, move |stream| async move {
            let c = guard.clone();
            tokio::select! {
                _ = handle(stream, shared, guard) => {}
                _ = c.must_close() => {}
            }
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

/// Answers a connection that found no place: HTTP 503, or a SOCKS5 greeting's "no
/// acceptable method" (the handshake has no general-failure reply before a request).
async fn refuse_busy(mut stream: TcpStream, timeout: Duration) {
    let first = detect(&stream, timeout).await;
    let answer: &[u8] = match first {
        Ok(Protocol::Socks5) => &[0x05, 0xff],
        Ok(Protocol::Http) => BUSY_503.as_bytes(),
        _ => b"",
    };
    let _ = stream.write_all(answer).await;
    let _ = stream.shutdown().await;
}

/// The answer to an HTTP client the proxy has no place for.
pub(crate) const BUSY_503: &str = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 46\r\nRetry-After: 1\r\nConnection: close\r\n\r\nproxy busy: too many connections, retry later\n";

async fn handle(mut stream: TcpStream, shared: Arc<Shared>, conn: ConnGuard) {
    let _ = stream.set_nodelay(true);
    let first = detect_byte(&stream, shared.cfg.first_byte_timeout).await;
    if matches!(first, Ok((Protocol::Socks5 | Protocol::Http, _))) {
        conn.spoke();
    }
    match first {
        // boxed: SOCKS5's flow is large, and every connection's task would otherwise be
        // that size (tokio copies a task's future when it starts and when it ends)
        Ok((Protocol::Socks5, _)) => {
            Box::pin(crate::lanes::socks5::serve(stream, shared, conn)).await
        }
        Ok((Protocol::Http, byte)) => {
            // only a connection starting with `P` can be the h2c preface: no second peek
            // (a system call) for the others
            if byte == Some(b'P') && starts_like_h2c(&stream, shared.cfg.head_timeout).await {
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
        Ok((Protocol::Socks4 | Protocol::Eof, _)) | Err(_) => {
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
    fn the_busy_answer_is_a_well_formed_503() {
        let (head, body) = BUSY_503.split_once("\r\n\r\n").expect("head and body");
        assert!(head.starts_with("HTTP/1.1 503 "));
        assert!(head.contains(&format!("Content-Length: {}", body.len())));
    }

    #[test]
    fn this_process_knows_its_descriptor_limit_on_linux() {
        if cfg!(target_os = "linux") {
            assert!(nofile_limit().is_some_and(|n| n > 0));
        }
    }
}
