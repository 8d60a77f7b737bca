//! The SSE frame of one event.

use bytes::{BufMut, Bytes, BytesMut};

/// Formats one frame: `id: <seq>` (empty for control frames), `event: <type>`, one-line data.
///
/// `data` must be one line; serialized JSON is (a string's line breaks are escaped).
pub fn format_frame(seq: Option<i64>, event_type: &str, data: &str) -> Bytes {
    let mut b = BytesMut::with_capacity(data.len() + event_type.len() + 32);
    b.put_slice(b"id: ");
    if let Some(s) = seq {
        b.put_slice(s.to_string().as_bytes());
    }
    b.put_slice(b"\nevent: ");
    b.put_slice(event_type.as_bytes());
    b.put_slice(b"\ndata: ");
    b.put_slice(data.as_bytes());
    b.put_slice(b"\n\n");
    b.freeze()
}
