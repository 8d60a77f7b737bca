//! The worker side of the filter lanes (see [`crate::extensions::lane`]): ONE thread serves
//! every lane the gateway gave this worker. It sleeps in `poll(2)` on all of them, reads
//! every request already queued on any lane, runs the whole batch under one GIL
//! acquisition and writes each lane's answers in one `send`.
//!
//! One thread, not one per lane: with a thread per lane, two lanes busy at once handed the
//! GIL back and forth (each hand-off a sleep and a wake-up), and each thread slept and was
//! woken for its own, smaller batches. Calls into one extension were serialized by its file
//! lock either way, and a filter that hangs kills the whole worker at its deadline.
//!
//! Sleeping in `poll(POLLIN)` rather than a blocking `recv` matters too: reading a Unix
//! socket wakes whoever waits on the peer's socket with "write space", so a thread blocked
//! in `recv` was also woken every time the gateway read its answers.

use super::{hard_exit, io, lane_turn, wire_error, WireError, LANE_ON};
use anyhow::{anyhow, Context, Result};
use pyo3::prelude::*;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::extensions::lane::{self, Reply};

/// At most about this much is read from one lane for one batch (a frame larger than this
/// still arrives whole, over several batches).
const MAX_BATCH_BYTES: usize = 4 << 20;

/// Takes the lane descriptors the gateway passed and starts the thread that serves them.
pub(super) fn start(fds: &[i32], spin: Duration) -> Result<()> {
    if fds.is_empty() {
        return Ok(());
    }
    let mut lanes = Vec::with_capacity(fds.len());
    for &fd in fds {
        // SAFETY: the gateway passed this descriptor for us alone; keep it from children.
        let owned = unsafe {
            if libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) < 0 {
                return Err(anyhow!("the filter lane descriptor {fd} is not open"));
            }
            OwnedFd::from_raw_fd(fd)
        };
        lanes.push(LaneIo {
            sock: owned,
            inbuf: Vec::with_capacity(64 * 1024),
            out: Vec::with_capacity(4096),
        });
    }
    LANE_ON.store(true, Ordering::SeqCst);
    std::thread::Builder::new()
        .name("vis-filter-lane".into())
        .spawn(move || serve(lanes, spin))
        .context("cannot start the filter lane thread")?;
    Ok(())
}

/// One lane: its socket, the bytes read and not yet parsed, the answers not yet written.
struct LaneIo {
    sock: OwnedFd,
    inbuf: Vec<u8>,
    out: Vec<u8>,
}

impl LaneIo {
    fn fd(&self) -> i32 {
        self.sock.as_raw_fd()
    }

    /// Reads whatever this lane has queued now. `Ok(true)`: something was read.
    /// An error (the socket closed or failed) means the gateway is gone.
    fn drain(&mut self, chunk: &mut [u8]) -> std::io::Result<bool> {
        let mut read = 0;
        while read < MAX_BATCH_BYTES {
            match recv(self.fd(), chunk, libc::MSG_DONTWAIT) {
                Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    self.inbuf.extend_from_slice(&chunk[..n]);
                    read += n;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        Ok(read > 0)
    }
}

/// Reads every queued request, runs them under one GIL acquisition, answers each lane in
/// one write.
///
/// The thread keeps its Python thread state for its whole life (one `with_gil` around the
/// loop) and releases the GIL only around socket waits: a `with_gil` per batch would create
/// and destroy a thread state each time, which costs more than a trivial filter.
fn serve(mut lanes: Vec<LaneIo>, spin: Duration) {
    let mut chunk = vec![0u8; 64 * 1024];
    // Built once: the lanes never change.
    let mut polled: Vec<libc::pollfd> = lanes
        .iter()
        .map(|l| libc::pollfd {
            fd: l.fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    Python::with_gil(|py| {
        let lane_fn = io()
            .glue
            .get()
            .and_then(|g| g.bind(py).getattr("lane_filter").ok());
        loop {
            if py
                .allow_threads(|| wait_and_read(&mut lanes, &mut polled, &mut chunk, spin))
                .is_err()
            {
                hard_exit(0);
            }
            for l in &mut lanes {
                if l.inbuf.is_empty() {
                    continue;
                }
                let (frames, used) = match lane::split_frames(&l.inbuf) {
                    Ok(v) => v,
                    Err(e) => {
                        eprintln!("vis worker: {e}");
                        hard_exit(3);
                    }
                };
                for body in frames {
                    let (id, reply) = run_one(py, lane_fn.as_ref(), body);
                    lane::encode_reply(&mut l.out, id, &reply);
                }
                l.inbuf.drain(..used);
            }
            let sent = py.allow_threads(|| {
                lanes
                    .iter_mut()
                    .filter(|l| !l.out.is_empty())
                    .try_for_each(|l| {
                        send_all(l.fd(), &l.out)?;
                        l.out.clear();
                        Ok::<(), std::io::Error>(())
                    })
            });
            if sent.is_err() {
                hard_exit(0);
            }
        }
    })
}

/// Waits until some lane has input (polling first for `spin`, when asked) and reads
/// everything queued on the lanes that have some. `polled` holds one entry per lane.
fn wait_and_read(
    lanes: &mut [LaneIo],
    polled: &mut [libc::pollfd],
    chunk: &mut [u8],
    spin: Duration,
) -> std::io::Result<()> {
    if !spin.is_zero() {
        let until = std::time::Instant::now() + spin;
        while std::time::Instant::now() < until {
            let mut any = false;
            for l in lanes.iter_mut() {
                any |= l.drain(chunk)?;
            }
            if any {
                return Ok(());
            }
            std::hint::spin_loop();
        }
    }
    loop {
        polled.iter_mut().for_each(|p| p.revents = 0);
        // SAFETY: `polled` is a valid array of `polled.len()` pollfds.
        let r = unsafe { libc::poll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, -1) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        let mut any = false;
        for (l, p) in lanes.iter_mut().zip(polled.iter()) {
            if p.revents != 0 {
                any |= l.drain(chunk)?;
            }
        }
        if any {
            return Ok(());
        }
    }
}

fn recv(fd: i32, buf: &mut [u8], flags: i32) -> std::io::Result<usize> {
    loop {
        // SAFETY: `buf` is valid for writes of `buf.len()` bytes.
        let r = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), flags) };
        if r >= 0 {
            return Ok(r as usize);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

fn send_all(fd: i32, mut buf: &[u8]) -> std::io::Result<()> {
    while !buf.is_empty() {
        // SAFETY: `buf` is valid for `buf.len()` bytes.
        let r = unsafe { libc::send(fd, buf.as_ptr().cast(), buf.len(), libc::MSG_NOSIGNAL) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        buf = &buf[r as usize..];
    }
    Ok(())
}

fn fail(message: &str) -> Reply {
    Reply::Error {
        error: WireError::host("WorkerError", message),
        restart: false,
    }
}

/// Runs one filter request: `(id, reply)`.
fn run_one(py: Python<'_>, lane_fn: Option<&Bound<'_, PyAny>>, body: &[u8]) -> (u64, Reply) {
    use lane::{phase_name, Cursor};
    let mut c = Cursor::new(body);
    let Some(id) = c.u64() else {
        return (0, fail("an unreadable filter request"));
    };
    let parsed = (|| {
        let deadline = c.u64()?;
        let index = c.u32()?;
        let file = c.bytes()?;
        let phase = c.u8()?;
        let method = c.opt()?;
        let host = c.bytes()?;
        let port = c.u16()?;
        let path = c.opt()?;
        let n = c.u32()?;
        let mut headers = Vec::with_capacity((n as usize).min(256));
        for _ in 0..n {
            headers.push((c.bytes()?, c.bytes()?));
        }
        let req_body = c.opt()?;
        let status = c.u32()?;
        Some((
            deadline, index, file, phase, method, host, port, path, headers, req_body, status,
        ))
    })();
    let Some((deadline, index, file, phase, method, host, port, path, headers, req_body, status)) =
        parsed
    else {
        return (id, fail("an unreadable filter request"));
    };
    let Some(lane_fn) = lane_fn else {
        return (id, fail("the worker glue is not installed"));
    };
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let file = text(file);
    let build = || -> PyResult<Bound<'_, pyo3::types::PyDict>> {
        use pyo3::intern;
        use pyo3::types::{PyDict, PyDictMethods};
        let h = PyDict::new(py);
        for (k, v) in &headers {
            h.set_item(String::from_utf8_lossy(k), String::from_utf8_lossy(v))?;
        }
        let d = PyDict::new(py);
        d.set_item(intern!(py, "phase"), phase_name(phase))?;
        d.set_item(intern!(py, "method"), method.map(String::from_utf8_lossy))?;
        d.set_item(intern!(py, "host"), String::from_utf8_lossy(host))?;
        d.set_item(intern!(py, "port"), port)?;
        d.set_item(intern!(py, "path"), path.map(String::from_utf8_lossy))?;
        d.set_item(intern!(py, "headers"), h)?;
        d.set_item(intern!(py, "body"), req_body.map(String::from_utf8_lossy))?;
        d.set_item(
            intern!(py, "status"),
            (status != u32::MAX).then_some(status),
        )?;
        Ok(d)
    };
    let ctx = match build() {
        Ok(d) => d,
        Err(e) => return (id, fail(&e.to_string())),
    };
    // Leave a little time for the "busy" answer to reach the gateway before its own
    // deadline kills the worker.
    let now = lane::mono_ns();
    let margin = (deadline.saturating_sub(now) / 10).min(50_000_000);
    let Some(turn) = lane_turn(py, &file, deadline.saturating_sub(margin)) else {
        return (id, Reply::Busy);
    };
    let result = lane_fn.call1((file.as_str(), index, ctx));
    drop(turn);
    let reply = match result {
        Err(e) => Reply::Error {
            error: wire_error(py, &e),
            restart: false,
        },
        Ok(v) if v.is_none() => Reply::Allow,
        Ok(v) => verdict(&v),
    };
    (id, reply)
}

/// `lane_filter`'s answer: the reason of a block, or `(error dict, restart)` for a raise.
fn verdict(v: &Bound<'_, PyAny>) -> Reply {
    if let Ok(reason) = v.extract::<String>() {
        return Reply::Block(reason);
    }
    let item = |o: &Bound<'_, PyAny>, k: &str| -> Option<String> {
        o.get_item(k)
            .ok()
            .filter(|x| !x.is_none())
            .and_then(|x| x.extract::<String>().ok())
    };
    let Ok(t) = v.downcast::<pyo3::types::PyTuple>() else {
        return fail("a filter answer that is neither a block nor an error");
    };
    let (Ok(err), Ok(restart)) = (t.get_item(0), t.get_item(1)) else {
        return fail("a malformed filter error");
    };
    Reply::Error {
        error: WireError {
            kind: item(&err, "type").unwrap_or_else(|| "Exception".into()),
            message: item(&err, "message").unwrap_or_default(),
            traceback: item(&err, "traceback"),
        },
        restart: restart.is_truthy().unwrap_or(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::net::UnixStream;

    #[test]
    fn a_lane_reads_in_bounded_steps_until_a_frame_larger_than_one_step_is_whole() {
        let (ours, mut theirs) = UnixStream::pair().expect("pair");
        ours.set_nonblocking(true).expect("nonblocking");
        let total = MAX_BATCH_BYTES + MAX_BATCH_BYTES / 2;
        // The writer hands its socket back instead of closing it: a lane that sees the peer
        // close reports the gateway gone, which is not what this test is about.
        let writer =
            std::thread::spawn(move || theirs.write_all(&vec![7u8; total]).map(|()| theirs));
        let mut lane = LaneIo {
            sock: OwnedFd::from(ours),
            inbuf: Vec::new(),
            out: Vec::new(),
        };
        let mut chunk = vec![0u8; 64 * 1024];
        let mut steps = 0;
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while lane.inbuf.len() < total {
            let before = lane.inbuf.len();
            if lane.drain(&mut chunk).expect("drain") {
                assert!(lane.inbuf.len() - before < MAX_BATCH_BYTES + chunk.len());
                steps += 1;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "stuck at {} of {total} bytes",
                lane.inbuf.len()
            );
        }
        let _theirs = writer.join().expect("join").expect("write");
        assert_eq!(lane.inbuf.len(), total);
        assert!(steps >= 2, "read in more than one step");
    }
}
