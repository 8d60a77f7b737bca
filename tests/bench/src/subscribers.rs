//! The SSE subscribers of the fan-out benchmark: plain sockets read by two threads over
//! epoll, parsed in place.
//!
//! The client shares the machine's 2 CPUs with the gateway, so it is built to cost as little
//! as possible: each thread collects every readable socket, reads and parses them, and when
//! nothing is ready sleeps `POLL_GAP` instead of blocking in `epoll_wait`. A thread blocked
//! in `epoll_wait` makes every loopback write into one of its sockets wake it (an
//! inter-processor interrupt charged to the *gateway's* write); a remote Companion costs the
//! gateway nothing of the kind, so polling keeps the measurement closer to a real
//! deployment. Latencies are whole milliseconds, so the gap adds no measurable delay.

use anyhow::{bail, Context, Result};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

const THREADS: usize = 2;
const POLL_GAP: Duration = Duration::from_micros(500);

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    memchr::memmem::find(hay, needle)
}

/// The envelope `ts` of one frame's `data:` line, if any.
pub(crate) fn frame_ts(frame: &[u8]) -> Option<i64> {
    let data = &frame[find(frame, b"\ndata: ")? + 7..];
    let at = find(data, b"\"ts\":")? + 5;
    let digits = data[at..].iter().take_while(|c| c.is_ascii_digit()).count();
    std::str::from_utf8(&data[at..at + digits])
        .ok()?
        .parse()
        .ok()
}

/// Counters shared by the reader threads.
#[derive(Default)]
pub struct Stats {
    /// Data frames received (not comments, not `subscription.ready`).
    pub frames: AtomicU64,
    /// Subscribers that received `subscription.ready`.
    pub ready: AtomicU64,
    /// Bytes read from every socket (the wire size of the frames, with any HTTP framing).
    pub bytes: AtomicU64,
    /// Publish→receive latencies (ms) of frames with an envelope `ts`.
    pub lat: Mutex<Vec<i64>>,
}

struct Conn {
    sock: TcpStream,
    buf: Vec<u8>,
    filled: usize,
    counted_ready: bool,
}

impl Conn {
    /// Reads what is available and parses every complete frame. `false`: closed.
    fn pump(&mut self, now: i64, stats: &Stats, lat: &mut Vec<i64>) -> bool {
        let mut frames = 0;
        let before = self.filled;
        loop {
            if self.filled == self.buf.len() {
                self.buf.resize(self.buf.len() * 2, 0);
            }
            let room = self.buf.len() - self.filled;
            match self.sock.read(&mut self.buf[self.filled..]) {
                Ok(0) => return false,
                // A short read drained the socket; data arriving later raises a new edge.
                Ok(n) if n < room => {
                    self.filled += n;
                    break;
                }
                Ok(n) => self.filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => return false,
            }
        }
        stats
            .bytes
            .fetch_add((self.filled - before) as u64, Ordering::Relaxed);
        let mut start = 0;
        while let Some(end) = find(&self.buf[start..self.filled], b"\n\n").map(|e| start + e + 2) {
            let frame = &self.buf[start..end];
            start = end;
            if frame.starts_with(b":") {
                continue; // a comment: `: ping` or the pad
            }
            if !self.counted_ready && find(frame, b"event: subscription.ready").is_some() {
                self.counted_ready = true;
                stats.ready.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            frames += 1;
            if let Some(ts) = frame_ts(frame) {
                lat.push(now - ts);
            }
        }
        self.buf.copy_within(start..self.filled, 0);
        self.filled -= start;
        if frames > 0 {
            stats.frames.fetch_add(frames, Ordering::Relaxed);
        }
        true
    }
}

/// `n` subscribers on one session's stream, read until dropped.
pub struct Subscribers {
    pub stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Subscribers {
    pub fn open(port: u16, sid: &str, n: usize) -> Result<Subscribers> {
        let stats = Arc::new(Stats::default());
        let stop = Arc::new(AtomicBool::new(false));
        let req = format!(
            "GET /v1/sessions/{sid}/events?cursor=-1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\
             X-Vis-Protocol: 2\r\nX-Vis-Min-Gateway-Protocol: 2\r\nAccept: text/event-stream\r\n\r\n"
        );
        let mut groups: Vec<Vec<Conn>> = (0..THREADS).map(|_| Vec::new()).collect();
        for i in 0..n {
            let mut sock = TcpStream::connect(("127.0.0.1", port))
                .with_context(|| format!("connect subscriber {i}"))?;
            sock.set_nodelay(true)?;
            sock.write_all(req.as_bytes())?;
            sock.set_nonblocking(true)?;
            if i % 200 == 199 {
                std::thread::sleep(Duration::from_millis(5)); // let the gateway accept
            }
            groups[i % THREADS].push(Conn {
                sock,
                buf: vec![0; 16 * 1024],
                filled: 0,
                counted_ready: false,
            });
        }
        let mut threads = Vec::new();
        for conns in groups {
            let (stats, stop) = (stats.clone(), stop.clone());
            threads.push(std::thread::spawn(move || {
                if let Err(e) = read_loop(conns, &stats, &stop) {
                    eprintln!("subscriber thread: {e:#}");
                }
            }));
        }
        Ok(Subscribers {
            stats,
            stop,
            threads,
        })
    }
}

impl Drop for Subscribers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn read_loop(mut conns: Vec<Conn>, stats: &Stats, stop: &AtomicBool) -> Result<()> {
    // SAFETY: plain epoll calls on descriptors this thread owns for the loop's lifetime.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if ep < 0 {
        bail!("epoll_create1: {}", std::io::Error::last_os_error());
    }
    for (i, c) in conns.iter().enumerate() {
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLET) as u32,
            u64: i as u64,
        };
        // SAFETY: `ev` outlives the call; the socket stays open while registered.
        if unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, c.sock.as_raw_fd(), &mut ev) } < 0 {
            bail!("epoll_ctl: {}", std::io::Error::last_os_error());
        }
    }
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 1024];
    let mut lat = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        // SAFETY: `events` has room for `events.len()` entries.
        let n = unsafe { libc::epoll_wait(ep, events.as_mut_ptr(), events.len() as i32, 0) };
        if n <= 0 {
            std::thread::sleep(POLL_GAP);
            continue;
        }
        let now = crate::now_ms();
        for ev in &events[..n as usize] {
            let i = ev.u64 as usize;
            if let Some(c) = conns.get_mut(i) {
                if !c.pump(now, stats, &mut lat) {
                    let fd = c.sock.as_raw_fd();
                    // SAFETY: deregistering a descriptor that is still open.
                    unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_DEL, fd, std::ptr::null_mut()) };
                }
            }
        }
        if !lat.is_empty() {
            if let Ok(mut v) = stats.lat.lock() {
                v.append(&mut lat);
            }
        }
    }
    // SAFETY: closing the epoll descriptor created above.
    unsafe { libc::close(ep) };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::frame_ts;

    #[test]
    fn the_envelope_ts_is_read_from_the_data_line() {
        let f = b"id: 3\nevent: x\ndata: {\"seq\":3,\"ts\":1700000000123,\"type\":\"x\"}\n\n";
        assert_eq!(frame_ts(f), Some(1_700_000_000_123));
        assert_eq!(frame_ts(b"id: \nevent: x\ndata: {}\n\n"), None);
    }
}
