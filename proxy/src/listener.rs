//! Accept loop: the overall connection cap, first-byte demux, lane dispatch.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

use crate::detect::{detect, Protocol};
use crate::engine::Shared;
use crate::io_threads::IoThreads;

pub(crate) async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    io: IoThreads,
    mut stop: watch::Receiver<bool>,
) {
    let sem = Arc::new(Semaphore::new(shared.cfg.max_connections.max(1)));
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
        io.spawn_conn(stream, move |stream| async move {
            handle(stream, shared).await;
            drop(permit);
        });
    }
}

async fn handle(mut stream: TcpStream, shared: Arc<Shared>) {
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
            crate::lanes::http::serve(stream, shared).await
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
