//! Server-sent events: an incremental line decoder that accepts chunk
//! boundaries anywhere (inside a line, inside a UTF-8 sequence, between the
//! CR and LF of a CRLF), plus the glue that turns a provider HTTP response into
//! a [`StreamEvent`] stream with stall detection and cancellation.

use std::collections::VecDeque;
use std::time::Duration;

use futures::stream::{BoxStream, StreamExt};
use tokio_util::sync::CancellationToken;

use crate::error::{redact_error, Secrets};
use crate::{ProviderError, StreamEvent};

/// One dispatched SSE event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `event:` field, if any.
    pub event: Option<String>,
    /// All `data:` lines joined with `\n`.
    pub data: String,
}

/// Incremental SSE decoder (WHATWG event-stream rules: LF, CR or CRLF line
/// ends, `:` comments, one optional space after the colon, multi-line data).
#[derive(Debug, Default)]
pub struct SseDecoder {
    line: Vec<u8>,
    /// The previous chunk ended in CR: a leading LF belongs to that line end.
    skip_lf: bool,
    seen_first_line: bool,
    event: Option<String>,
    data: String,
    has_data: bool,
}

impl SseDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds bytes; returns every event completed by them.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        let mut out = Vec::new();
        let mut start = 0;
        for (i, &b) in chunk.iter().enumerate() {
            if self.skip_lf {
                self.skip_lf = false;
                if b == b'\n' {
                    start = i + 1;
                    continue;
                }
            }
            if b == b'\r' || b == b'\n' {
                self.line.extend_from_slice(&chunk[start..i]);
                let line = std::mem::take(&mut self.line);
                self.process_line(&line, &mut out);
                self.skip_lf = b == b'\r';
                start = i + 1;
            }
        }
        self.line.extend_from_slice(&chunk[start..]);
        out
    }

    /// End of input: a last unterminated line and a pending event (no final
    /// blank line) are dispatched too, leniently.
    pub fn finish(&mut self) -> Option<SseEvent> {
        let mut out = Vec::new();
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.process_line(&line, &mut out);
        }
        self.process_line(b"", &mut out);
        out.pop()
    }

    fn process_line(&mut self, raw: &[u8], out: &mut Vec<SseEvent>) {
        let mut raw = raw;
        if !self.seen_first_line {
            self.seen_first_line = true;
            raw = raw.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(raw);
        }
        if raw.is_empty() {
            if self.has_data {
                out.push(SseEvent {
                    event: self.event.take(),
                    data: std::mem::take(&mut self.data),
                });
            }
            self.event = None;
            self.data.clear();
            self.has_data = false;
            return;
        }
        if raw[0] == b':' {
            return; // comment / keep-alive
        }
        let line = String::from_utf8_lossy(raw);
        let (field, value) = match line.find(':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(' ').unwrap_or(v))
            }
            None => (&line[..], ""),
        };
        match field {
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => self.event = Some(value.to_string()),
            _ => {} // id, retry and unknown fields are not needed here
        }
    }
}

/// Dialect-specific translation of SSE events into [`StreamEvent`]s.
pub(crate) trait EventParser: Send {
    fn on_event(
        &mut self,
        ev: SseEvent,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<(), ProviderError>;
    /// The terminal event was seen and `Completed` emitted.
    fn is_done(&self) -> bool;
    /// Body ended; emit `Completed` leniently or fail.
    fn on_eof(&mut self, out: &mut VecDeque<StreamEvent>) -> Result<(), ProviderError>;
}

struct State {
    body: BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    decoder: SseDecoder,
    parser: Box<dyn EventParser>,
    pending: VecDeque<StreamEvent>,
    cancel: CancellationToken,
    stall: Duration,
    secrets: Secrets,
    finished: bool,
}

impl State {
    fn fail(&mut self, e: ProviderError) -> Result<StreamEvent, ProviderError> {
        self.finished = true;
        self.pending.clear();
        Err(redact_error(e, &self.secrets))
    }

    fn feed(&mut self, chunk: &[u8]) -> Result<(), ProviderError> {
        for ev in self.decoder.feed(chunk) {
            self.parser.on_event(ev, &mut self.pending)?;
            if self.parser.is_done() {
                break;
            }
        }
        Ok(())
    }

    fn eof(&mut self) -> Result<(), ProviderError> {
        if let Some(ev) = self.decoder.finish() {
            if !self.parser.is_done() {
                self.parser.on_event(ev, &mut self.pending)?;
            }
        }
        if !self.parser.is_done() {
            self.parser.on_eof(&mut self.pending)?;
        }
        Ok(())
    }
}

/// Turns a successful response into the event stream. The stream ends after
/// `Completed` or after the first error.
pub(crate) fn event_stream(
    resp: reqwest::Response,
    parser: Box<dyn EventParser>,
    cancel: CancellationToken,
    stall: Duration,
    secrets: Secrets,
) -> BoxStream<'static, Result<StreamEvent, ProviderError>> {
    let state = State {
        body: resp.bytes_stream().boxed(),
        decoder: SseDecoder::new(),
        parser,
        pending: VecDeque::new(),
        cancel,
        stall,
        secrets,
        finished: false,
    };
    futures::stream::unfold(state, |mut st| async move {
        loop {
            if st.finished {
                return None;
            }
            if st.cancel.is_cancelled() {
                let r = st.fail(ProviderError::Cancelled);
                return Some((r, st));
            }
            if let Some(ev) = st.pending.pop_front() {
                return Some((Ok(ev), st));
            }
            if st.parser.is_done() {
                return None;
            }
            let next = tokio::select! {
                biased;
                _ = st.cancel.cancelled() => {
                    let r = st.fail(ProviderError::Cancelled);
                    return Some((r, st));
                }
                r = tokio::time::timeout(st.stall, st.body.next()) => r,
            };
            let step = match next {
                Err(_) => Err(ProviderError::Stalled),
                Ok(None) => st.eof().and_then(|_| {
                    if st.pending.is_empty() && !st.parser.is_done() {
                        Err(ProviderError::Protocol(
                            "stream ended before the response was complete".into(),
                        ))
                    } else {
                        Ok(())
                    }
                }),
                Ok(Some(Err(e))) => Err(ProviderError::Transport(crate::retry::describe(&e))),
                Ok(Some(Ok(bytes))) => st.feed(&bytes),
            };
            if let Err(e) = step {
                let r = st.fail(e);
                return Some((r, st));
            }
        }
    })
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut d = SseDecoder::new();
        let mut out = Vec::new();
        for c in chunks {
            out.extend(d.feed(c));
        }
        out.extend(d.finish());
        out
    }

    fn ev(event: Option<&str>, data: &str) -> SseEvent {
        SseEvent {
            event: event.map(str::to_string),
            data: data.to_string(),
        }
    }

    const SAMPLE: &str = "\u{feff}: keep-alive comment\r\n\
        event: message_start\r\n\
        data: {\"a\":1}\r\n\
        \r\n\
        data: line one\n\
        data:line two\n\
        data\n\
        \n\
        event: ping\r\
        data: {\"type\":\"ping\"}\r\
        \r\
        id: 7\n\
        retry: 100\n\
        data: h\u{e9}llo \u{1F600}\n\
        \n\
        event: only-event-no-data\n\
        \n\
        data: [DONE]\n\n";

    fn expected() -> Vec<SseEvent> {
        vec![
            ev(Some("message_start"), "{\"a\":1}"),
            ev(None, "line one\nline two\n"),
            ev(Some("ping"), "{\"type\":\"ping\"}"),
            ev(None, "h\u{e9}llo \u{1F600}"),
            ev(None, "[DONE]"),
        ]
    }

    #[test]
    fn a_whole_buffer_decodes_into_the_expected_events() {
        assert_eq!(decode_all(&[SAMPLE.as_bytes()]), expected());
    }

    #[test]
    fn splitting_the_input_at_every_byte_boundary_gives_the_same_events() {
        let bytes = SAMPLE.as_bytes();
        for i in 0..=bytes.len() {
            let got = decode_all(&[&bytes[..i], &bytes[i..]]);
            assert_eq!(got, expected(), "split at {i}");
        }
    }

    #[test]
    fn splitting_the_input_at_every_pair_of_boundaries_gives_the_same_events() {
        let bytes = SAMPLE.as_bytes();
        for i in 0..=bytes.len() {
            for j in i..=bytes.len() {
                let got = decode_all(&[&bytes[..i], &bytes[i..j], &bytes[j..]]);
                assert_eq!(got, expected(), "split at {i},{j}");
            }
        }
    }

    #[test]
    fn feeding_one_byte_at_a_time_gives_the_same_events() {
        let chunks: Vec<&[u8]> = SAMPLE.as_bytes().chunks(1).collect();
        assert_eq!(decode_all(&chunks), expected());
    }

    #[test]
    fn a_final_event_without_a_trailing_blank_line_is_still_dispatched() {
        assert_eq!(
            decode_all(&[b"data: {\"x\":1}\n\ndata: last"]),
            vec![ev(None, "{\"x\":1}"), ev(None, "last")]
        );
    }

    #[test]
    fn the_event_name_does_not_leak_into_the_next_event() {
        assert_eq!(
            decode_all(&[b"event: a\ndata: 1\n\ndata: 2\n\n"]),
            vec![ev(Some("a"), "1"), ev(None, "2")]
        );
    }
}
