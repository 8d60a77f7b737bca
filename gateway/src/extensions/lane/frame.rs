//! The filter lane's frames: the binary encoding of requests and replies (see the
//! module above for the layout).

use crate::extensions::protocol::WireError;

/// Frames larger than this are refused (a body is at most 1 MiB, headers are bounded).
pub const MAX_FRAME: usize = 16 << 20;

pub const KIND_ALLOW: u8 = 0;
pub const KIND_BLOCK: u8 = 1;
pub const KIND_ERROR: u8 = 2;
pub const KIND_BUSY: u8 = 3;

/// `CLOCK_MONOTONIC` in nanoseconds: the same clock in the gateway and its workers.
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write into.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

pub fn phase_code(p: vis_proxy::Phase) -> u8 {
    match p {
        vis_proxy::Phase::Http => 0,
        vis_proxy::Phase::Https => 1,
        vis_proxy::Phase::Socks => 2,
        vis_proxy::Phase::HttpResponse => 3,
        vis_proxy::Phase::HttpsResponse => 4,
    }
}

pub fn phase_name(code: u8) -> &'static str {
    match code {
        0 => "http",
        1 => "https",
        2 => "socks",
        3 => "http-response",
        _ => "https-response",
    }
}

#[cfg(test)]
pub fn phase_from_name(name: &str) -> Option<vis_proxy::Phase> {
    Some(match name {
        "http" => vis_proxy::Phase::Http,
        "https" => vis_proxy::Phase::Https,
        "socks" => vis_proxy::Phase::Socks,
        "http-response" => vis_proxy::Phase::HttpResponse,
        "https-response" => vis_proxy::Phase::HttpsResponse,
        _ => return None,
    })
}

// ---------------------------------------------------------------------------------------
// Encoding
// ---------------------------------------------------------------------------------------

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

fn put_opt(out: &mut Vec<u8>, b: Option<&[u8]>) {
    match b {
        Some(b) => put_bytes(out, b),
        None => out.extend_from_slice(&u32::MAX.to_le_bytes()),
    }
}

/// Encodes one request frame (length prefix included).
pub fn encode_request(
    out: &mut Vec<u8>,
    id: u64,
    deadline_ns: u64,
    file: &str,
    index: u32,
    ctx: &vis_proxy::FilterCtx,
) {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&id.to_le_bytes());
    out.extend_from_slice(&deadline_ns.to_le_bytes());
    out.extend_from_slice(&index.to_le_bytes());
    put_bytes(out, file.as_bytes());
    out.push(phase_code(ctx.phase));
    put_opt(out, ctx.method.as_deref().map(str::as_bytes));
    put_bytes(out, ctx.host.as_bytes());
    out.extend_from_slice(&ctx.port.to_le_bytes());
    put_opt(out, ctx.path.as_deref().map(str::as_bytes));
    out.extend_from_slice(&(ctx.headers.len() as u32).to_le_bytes());
    for (k, v) in &ctx.headers {
        put_bytes(out, k.as_bytes());
        put_bytes(out, v.as_bytes());
    }
    put_opt(out, ctx.body.as_deref().map(str::as_bytes));
    out.extend_from_slice(&ctx.status.map_or(u32::MAX, u32::from).to_le_bytes());
    let len = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
}

/// A filter's answer as it crosses the lane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Allow,
    Block(String),
    Error { error: WireError, restart: bool },
    Busy,
}

/// Encodes one reply frame (length prefix included).
pub fn encode_reply(out: &mut Vec<u8>, id: u64, reply: &Reply) {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&id.to_le_bytes());
    match reply {
        Reply::Allow => out.extend_from_slice(&[KIND_ALLOW, 0]),
        Reply::Busy => out.extend_from_slice(&[KIND_BUSY, 0]),
        Reply::Block(reason) => {
            out.extend_from_slice(&[KIND_BLOCK, 0]);
            put_bytes(out, reason.as_bytes());
        }
        Reply::Error { error, restart } => {
            out.extend_from_slice(&[KIND_ERROR, u8::from(*restart)]);
            put_bytes(out, error.kind.as_bytes());
            put_bytes(out, error.message.as_bytes());
            put_opt(out, error.traceback.as_deref().map(str::as_bytes));
        }
    }
    let len = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
}

/// A bounds-checked cursor over one frame body.
pub struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(buf: &'a [u8]) -> Cursor<'a> {
        Cursor { buf, pos: 0 }
    }
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let s = self.buf.get(self.pos..end)?;
        self.pos = end;
        Some(s)
    }
    pub fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    pub fn u16(&mut self) -> Option<u16> {
        self.take(2)
            .and_then(|b| b.try_into().ok())
            .map(u16::from_le_bytes)
    }
    pub fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes)
    }
    pub fn u64(&mut self) -> Option<u64> {
        self.take(8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
    }
    pub fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    /// `Some(None)` for an absent value, `None` for a malformed frame.
    pub fn opt(&mut self) -> Option<Option<&'a [u8]>> {
        let n = self.u32()?;
        if n == u32::MAX {
            return Some(None);
        }
        self.take(n as usize).map(Some)
    }
}

/// Splits complete frames off the front of `buf`: `(frame bodies, bytes consumed)`.
/// `Err` when a frame announces more than [`MAX_FRAME`] bytes.
pub fn split_frames(buf: &[u8]) -> Result<(Vec<&[u8]>, usize), String> {
    let mut frames = Vec::new();
    let mut pos = 0;
    while let Some(head) = buf.get(pos..pos + 4) {
        let mut len = [0u8; 4];
        len.copy_from_slice(head);
        let len = u32::from_le_bytes(len) as usize;
        if len > MAX_FRAME {
            return Err(format!("a filter-lane frame of {len} bytes is too large"));
        }
        let Some(body) = buf.get(pos + 4..pos + 4 + len) else {
            break;
        };
        frames.push(body);
        pos += 4 + len;
    }
    Ok((frames, pos))
}

fn utf8(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Decodes one reply frame body: `(id, reply)`.
pub fn decode_reply(body: &[u8]) -> Option<(u64, Reply)> {
    let mut c = Cursor::new(body);
    let id = c.u64()?;
    let kind = c.u8()?;
    let restart = c.u8()? != 0;
    let reply = match kind {
        KIND_ALLOW => Reply::Allow,
        KIND_BUSY => Reply::Busy,
        KIND_BLOCK => Reply::Block(utf8(c.bytes()?)),
        KIND_ERROR => Reply::Error {
            error: WireError {
                kind: utf8(c.bytes()?),
                message: utf8(c.bytes()?),
                traceback: c.opt()?.map(utf8),
            },
            restart,
        },
        _ => return None,
    };
    Some((id, reply))
}
