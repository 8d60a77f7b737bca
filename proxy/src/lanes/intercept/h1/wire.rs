//! HTTP/1.1 heads as the relay reads and writes them.

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode, Uri};

use crate::lanes::forward::strip_hop_by_hop;

/// The largest request body the relay carries (read whole, then sent with its head in one
/// write); a larger one goes to the HTTP server lane, which streams it.
pub(super) const BODY_LIMIT: u64 = 64 * 1024;
/// Header fields per head (hyper's limit too).
pub(super) const MAX_HEADERS: usize = 100;

/// A request head the relay takes.
#[derive(Debug)]
pub(super) struct Head {
    pub(super) method: Method,
    pub(super) uri: Uri,
    pub(super) headers: HeaderMap,
    pub(super) body_len: u64,
    /// The client asked to close after this answer.
    pub(super) close: bool,
}

/// A return value that lives for one match: boxing the head would cost an allocation per
/// request.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(super) enum Parsed {
    /// Not complete yet.
    Partial,
    /// A head the relay takes, and its length.
    Take(Head, usize),
    /// For the HTTP server lane.
    Handoff,
}

pub(super) fn parse_head(buf: &[u8], max_head: usize) -> Parsed {
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut slots);
    match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) if n <= max_head => match plain_head(&req) {
            Some(h) => Parsed::Take(h, n),
            None => Parsed::Handoff,
        },
        Ok(httparse::Status::Partial) if buf.len() <= max_head => Parsed::Partial,
        _ => Parsed::Handoff,
    }
}

/// The head as the relay carries it, or `None` when it is not one the relay takes.
fn plain_head(req: &httparse::Request<'_, '_>) -> Option<Head> {
    if req.version != Some(1) {
        return None;
    }
    let method = Method::from_bytes(req.method?.as_bytes()).ok()?;
    let path = req.path?;
    if method == Method::CONNECT || !path.starts_with('/') {
        return None;
    }
    let uri: Uri = path.parse().ok()?;
    let mut headers = HeaderMap::with_capacity(req.headers.len());
    let mut body_len = None;
    let mut hosts = 0;
    let mut close = false;
    for h in req.headers.iter() {
        let name = HeaderName::from_bytes(h.name.as_bytes()).ok()?;
        let value = HeaderValue::from_bytes(h.value).ok()?;
        if name == header::CONTENT_LENGTH {
            if body_len.is_some() {
                return None;
            }
            body_len = Some(decimal(h.value)?);
        } else if name == header::TRANSFER_ENCODING
            || name == header::UPGRADE
            || name == header::EXPECT
        {
            return None;
        } else if name == header::HOST {
            hosts += 1;
        } else if name == header::CONNECTION {
            close |= has_token(h.value, "close");
        }
        headers.append(name, value);
    }
    let body_len = body_len.unwrap_or(0);
    if hosts != 1 || body_len > BODY_LIMIT {
        return None;
    }
    Some(Head {
        method,
        uri,
        headers,
        body_len,
        close,
    })
}

/// A `Content-Length` value: digits only (no sign, no list), at most 19 of them.
fn decimal(v: &[u8]) -> Option<u64> {
    let v = v.trim_ascii();
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(v).ok()?.parse().ok()
}

fn has_token(v: &[u8], token: &str) -> bool {
    v.split(|b| *b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
}

/// How an upstream response's body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BodyFraming {
    None,
    Length(u64),
    Chunked,
    /// To the upstream's close.
    Close,
}

/// An upstream response head.
#[derive(Debug)]
pub(super) struct RespHead {
    pub(super) status: StatusCode,
    /// Hop-by-hop fields removed; the framing fields as they will be written.
    pub(super) headers: HeaderMap,
    pub(super) framing: BodyFraming,
    /// The upstream connection can carry another request after this body.
    pub(super) reusable: bool,
}

pub(super) fn parse_response(
    resp: &httparse::Response<'_, '_>,
    head: bool,
) -> Result<RespHead, String> {
    let code = resp.code.ok_or("no status")?;
    let status = StatusCode::from_u16(code).map_err(|_| format!("status {code}"))?;
    let mut headers = HeaderMap::with_capacity(resp.headers.len());
    let mut length: Option<u64> = None;
    let mut encoded = false;
    let mut chunked = false;
    let mut close = resp.version != Some(1);
    for h in resp.headers.iter() {
        let name = HeaderName::from_bytes(h.name.as_bytes())
            .map_err(|_| format!("header name {:?}", h.name))?;
        let value = HeaderValue::from_bytes(h.value)
            .map_err(|_| format!("value of the header {}", h.name))?;
        if name == header::CONTENT_LENGTH {
            let n = decimal(h.value).ok_or("a Content-Length that is not a number")?;
            if length.is_some_and(|l| l != n) {
                return Err("two different Content-Length values".into());
            }
            length = Some(n);
            continue;
        }
        if name == header::TRANSFER_ENCODING {
            encoded = true;
            // the last coding decides: chunked or not
            if let Some(last) = h.value.split(|b| *b == b',').next_back() {
                chunked = last.trim_ascii().eq_ignore_ascii_case(b"chunked");
            }
        } else if name == header::CONNECTION {
            close |= has_token(h.value, "close");
        }
        headers.append(name, value);
    }
    strip_hop_by_hop(&mut headers);
    let bodiless = head
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    let framing = if bodiless {
        BodyFraming::None
    } else if encoded && chunked {
        BodyFraming::Chunked
    } else if encoded {
        BodyFraming::Close
    } else {
        match length {
            Some(n) => BodyFraming::Length(n),
            None => BodyFraming::Close,
        }
    };
    if framing == BodyFraming::Chunked {
        headers.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
    }
    if let Some(n) = length.filter(|_| !encoded) {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(n));
    }
    Ok(RespHead {
        status,
        headers,
        framing,
        reusable: !close && framing != BodyFraming::Close,
    })
}

/// The start line and fields of an HTTP/1.1 head into `out`.
pub(super) fn write_fields(out: &mut Vec<u8>, headers: &HeaderMap) {
    for (k, v) in headers {
        out.extend_from_slice(k.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(v.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
}

pub(super) fn response_head(
    out: &mut Vec<u8>,
    status: StatusCode,
    headers: &HeaderMap,
    close: bool,
) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
    write_fields(out, headers);
    if close && !headers.contains_key(header::CONNECTION) {
        out.extend_from_slice(b"connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// The fuzz target's entry: every reader of this module on arbitrary bytes, as request and as
/// response; none may panic, and a taken head's length lies within the input.
#[doc(hidden)]
pub fn fuzz_heads(data: &[u8]) {
    if let Parsed::Take(head, n) = parse_head(data, 64 * 1024) {
        assert!(n <= data.len() && head.body_len <= BODY_LIMIT);
    }
    let _ = decimal(data);
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut slots);
    if let Ok(httparse::Status::Complete(_)) = resp.parse(data) {
        for head in [false, true] {
            if let Ok(r) = parse_response(&resp, head) {
                let mut out = Vec::new();
                response_head(&mut out, r.status, &r.headers, !r.reusable);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAP: usize = 64 * 1024;

    fn parse(raw: &str) -> Parsed {
        parse_head(raw.as_bytes(), CAP)
    }

    fn taken(raw: &str) -> Head {
        match parse(raw) {
            Parsed::Take(h, n) => {
                assert_eq!(n, raw.find("\r\n\r\n").map(|i| i + 4).unwrap_or(raw.len()));
                h
            }
            other => panic!("expected the relay to take {raw:?}, got {other:?}"),
        }
    }

    fn handed_off(raw: &str) {
        match parse(raw) {
            Parsed::Handoff => {}
            other => panic!("expected a handoff for {raw:?}, got {other:?}"),
        }
    }

    #[test]
    fn a_plain_get_and_a_small_post_are_taken_with_their_fields_and_body_length() {
        let h = taken("GET /a?b=1 HTTP/1.1\r\nHost: x.test\r\nAccept: */*\r\n\r\n");
        assert_eq!(h.method, Method::GET);
        assert_eq!(h.uri.path_and_query().map(|p| p.as_str()), Some("/a?b=1"));
        assert_eq!(
            h.headers.get("accept").map(|v| v.as_bytes()),
            Some(&b"*/*"[..])
        );
        assert_eq!(h.body_len, 0);
        assert!(!h.close);
        let h = taken("POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\nConnection: keep-alive, Close\r\n\r\n");
        assert_eq!(h.body_len, 12);
        assert!(h.close, "a close token among others asks to close");
    }

    #[test]
    fn bytes_after_the_head_are_not_counted_in_its_length() {
        let raw = "GET / HTTP/1.1\r\nHost: x\r\n\r\nGET /next HTTP/1.1\r\n";
        match parse(raw) {
            Parsed::Take(_, n) => assert_eq!(n, raw.find("GET /next").unwrap_or(0)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_unfinished_head_waits_until_it_outgrows_the_cap() {
        assert!(matches!(
            parse("GET / HTTP/1.1\r\nHost: x\r\n"),
            Parsed::Partial
        ));
        let long = format!("GET / HTTP/1.1\r\nX: {}", "a".repeat(200));
        assert!(matches!(parse_head(long.as_bytes(), 100), Parsed::Handoff));
        let whole = format!(
            "GET / HTTP/1.1\r\nHost: x\r\nX: {}\r\n\r\n",
            "a".repeat(200)
        );
        assert!(matches!(parse_head(whole.as_bytes(), 100), Parsed::Handoff));
    }

    #[test]
    fn framing_the_relay_does_not_follow_goes_to_the_http_server() {
        for raw in [
            // chunked, with or without a Content-Length beside it (a smuggling shape)
            "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
            // two lengths, equal or not, and lengths that are not plain digits
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3, 3\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +3\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 65537\r\n\r\n",
            // a client waiting for 100-continue, a protocol switch
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
            // no Host, two of them, HTTP/1.0, absolute and authority forms, CONNECT
            "GET / HTTP/1.1\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n",
            "GET / HTTP/1.0\r\nHost: x\r\n\r\n",
            "GET http://x/ HTTP/1.1\r\nHost: x\r\n\r\n",
            "GET * HTTP/1.1\r\nHost: x\r\n\r\n",
            "CONNECT x:443 HTTP/1.1\r\nHost: x:443\r\n\r\n",
            // what httparse refuses: a space before the colon, a bare CR
            "GET / HTTP/1.1\r\nHost : x\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: x\rY: z\r\n\r\n",
        ] {
            handed_off(raw);
        }
    }

    #[test]
    fn a_body_at_the_limit_is_taken_and_one_byte_more_is_not() {
        let at = format!("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {BODY_LIMIT}\r\n\r\n");
        assert_eq!(taken(&at).body_len, BODY_LIMIT);
        handed_off(&format!(
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
            BODY_LIMIT + 1
        ));
    }

    #[test]
    fn a_content_length_is_plain_digits_only() {
        assert_eq!(decimal(b"0"), Some(0));
        assert_eq!(decimal(b" 42 "), Some(42));
        assert_eq!(decimal(b"18446744073709551615"), None, "twenty digits");
        assert_eq!(
            decimal(b"9999999999999999999"),
            Some(9_999_999_999_999_999_999)
        );
        for bad in [&b""[..], b"-1", b"+1", b"1,1", b"0x10", b"1 2", b"\xff"] {
            assert_eq!(decimal(bad), None, "{bad:?}");
        }
    }

    fn response(raw: &str, head: bool) -> Result<RespHead, String> {
        let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut resp = httparse::Response::new(&mut slots);
        match resp.parse(raw.as_bytes()) {
            Ok(httparse::Status::Complete(_)) => parse_response(&resp, head),
            other => panic!("test response did not parse: {other:?}"),
        }
    }

    fn framing(raw: &str, head: bool) -> (BodyFraming, bool) {
        let r = response(raw, head).unwrap_or_else(|e| panic!("{raw:?}: {e}"));
        (r.framing, r.reusable)
    }

    #[test]
    fn a_response_body_is_framed_as_http_1_1_says() {
        use BodyFraming::*;
        let cases: &[(&str, bool, BodyFraming, bool)] = &[
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
                false,
                Length(5),
                true,
            ),
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
                false,
                Length(5),
                true,
            ),
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
                false,
                Chunked,
                true,
            ),
            // chunked wins over a length beside it
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 9\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
                false,
                Chunked,
                true,
            ),
            // a coding that does not end in chunked: to the close
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
                false,
                Close,
                false,
            ),
            ("HTTP/1.1 200 OK\r\n\r\n", false, Close, false),
            // no body whatever the fields say
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
                true,
                None,
                true,
            ),
            ("HTTP/1.1 204 No Content\r\n\r\n", false, None, true),
            (
                "HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n",
                false,
                None,
                true,
            ),
            // the upstream closes after this one
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\n",
                false,
                Length(5),
                false,
            ),
            (
                "HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\n",
                false,
                Length(5),
                false,
            ),
        ];
        for (raw, head, want, reusable) in cases {
            assert_eq!(
                framing(raw, *head),
                (*want, *reusable),
                "{raw:?} (HEAD: {head})"
            );
        }
    }

    #[test]
    fn a_response_with_two_different_lengths_or_a_bad_one_is_refused() {
        assert!(response(
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
            false
        )
        .is_err());
        assert!(response("HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n", false).is_err());
    }

    #[test]
    fn the_relayed_response_loses_hop_by_hop_fields_and_carries_its_own_framing() {
        let r = response(
            "HTTP/1.1 200 OK\r\nConnection: keep-alive, x-private\r\nKeep-Alive: timeout=5\r\nX-Private: 1\r\nX-Kept: 2\r\nContent-Length: 9\r\nTransfer-Encoding: chunked\r\n\r\n",
            false,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        for gone in ["connection", "keep-alive", "x-private", "content-length"] {
            assert!(!r.headers.contains_key(gone), "{gone} should be dropped");
        }
        assert_eq!(
            r.headers.get("x-kept").map(|v| v.as_bytes()),
            Some(&b"2"[..])
        );
        assert_eq!(r.headers.get_all("transfer-encoding").iter().count(), 1);
        assert_eq!(
            r.headers.get("transfer-encoding").map(|v| v.as_bytes()),
            Some(&b"chunked"[..])
        );
    }

    #[test]
    fn a_written_head_has_the_canonical_reason_and_says_close_once() {
        let mut h = HeaderMap::new();
        h.insert("content-length", HeaderValue::from_static("2"));
        let mut out = Vec::new();
        response_head(&mut out, StatusCode::NOT_FOUND, &h, true);
        assert_eq!(
            String::from_utf8_lossy(&out),
            "HTTP/1.1 404 Not Found\r\ncontent-length: 2\r\nconnection: close\r\n\r\n"
        );
        h.insert("connection", HeaderValue::from_static("close"));
        out.clear();
        response_head(
            &mut out,
            StatusCode::from_u16(599).unwrap_or(StatusCode::OK),
            &h,
            true,
        );
        assert_eq!(
            String::from_utf8_lossy(&out),
            "HTTP/1.1 599 \r\ncontent-length: 2\r\nconnection: close\r\n\r\n"
        );
    }
}
