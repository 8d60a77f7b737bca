//! The fan-out floor: the least work any server can do to deliver one event to N SSE
//! subscribers on this machine, run against the same client as the gateway.
//!
//! `bench-gateway --floor-server N FRAME_BYTES` listens on 127.0.0.1, prints its port, holds
//! N subscribers (one `subscription.ready` frame each), then publishes `TICKS` events at
//! `TICK` intervals. Each event is one pre-formatted frame of FRAME_BYTES bytes (the size of
//! the gateway's frames in the same run) written with ONE blocking `write` per subscriber,
//! by as many threads as the gateway has workers (2): no parsing, no queue, no task, no
//! allocation per delivery. Its publish→receive p99 is what the 10k target is up against:
//! whatever a gateway adds comes on top of it.

use anyhow::{Context, Result};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// Events published, one per `TICK` (the gateway's steady load: 100 events, 10 per second).
pub const TICKS: u64 = 100;
const TICK: Duration = Duration::from_millis(100);
const WRITERS: usize = 2;

/// One SSE frame of exactly `bytes` bytes (at least its fixed part) carrying `ts`.
fn frame(seq: u64, ts: i64, bytes: usize) -> Vec<u8> {
    let head = format!(
        "id: {seq}\nevent: content.block.delta\ndata: {{\"seq\":{seq},\"ts\":{ts},\"pad\":\""
    );
    let tail = "\"}\n\n";
    let pad = bytes.saturating_sub(head.len() + tail.len());
    let mut f = Vec::with_capacity(head.len() + pad + tail.len());
    f.extend_from_slice(head.as_bytes());
    f.resize(head.len() + pad, b'x');
    f.extend_from_slice(tail.as_bytes());
    f
}

/// Accepts `n` subscribers and answers each with the stream's head and `subscription.ready`.
fn hold(listener: &TcpListener, n: usize) -> Result<Vec<TcpStream>> {
    let mut socks = Vec::with_capacity(n);
    let mut head = [0u8; 4096];
    while socks.len() < n {
        let (mut s, _) = listener.accept().context("accept")?;
        s.set_nodelay(true)?;
        // The request fits one read (a short GET); its content is not needed.
        let _ = s.read(&mut head)?;
        s.write_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n\r\n\
              event: subscription.ready\ndata: {}\n\n",
        )?;
        socks.push(s);
    }
    Ok(socks)
}

/// Runs the floor server until its events are published (then lingers so the client reads).
pub fn serve(n: usize, frame_bytes: usize) -> Result<()> {
    let listener = TcpListener::bind(("127.0.0.1", 0)).context("bind")?;
    println!("{}", listener.local_addr()?.port());
    std::io::stdout().flush()?;
    let socks = hold(&listener, n)?;
    std::thread::sleep(Duration::from_millis(500));
    let start = Instant::now() + TICK;
    let mut groups: Vec<Vec<TcpStream>> = (0..WRITERS).map(|_| Vec::new()).collect();
    for (i, s) in socks.into_iter().enumerate() {
        groups[i % WRITERS].push(s);
    }
    let threads: Vec<_> = groups
        .into_iter()
        .map(|mut socks| {
            std::thread::spawn(move || {
                for seq in 1..=TICKS {
                    let due = start + TICK * (seq as u32 - 1);
                    if let Some(wait) = due.checked_duration_since(Instant::now()) {
                        std::thread::sleep(wait);
                    }
                    let f = frame(seq, crate::now_ms(), frame_bytes);
                    for s in &mut socks {
                        let _ = s.write_all(&f);
                    }
                }
                socks
            })
        })
        .collect();
    let mut held = Vec::new();
    for t in threads {
        held.extend(t.join().unwrap_or_default());
    }
    // Keep the sockets open until the client has read everything and goes away.
    std::thread::sleep(Duration::from_secs(3));
    drop(held);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::frame;

    #[test]
    fn a_floor_frame_has_the_asked_size_and_a_ts_the_client_reads() {
        let f = frame(7, 1_700_000_000_123, 300);
        assert_eq!(f.len(), 300);
        assert_eq!(crate::subscribers::frame_ts(&f), Some(1_700_000_000_123));
        assert!(f.ends_with(b"\"}\n\n"));
    }
}
