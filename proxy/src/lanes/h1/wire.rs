//! HTTP/1.1 heads as the relay reads and writes them.

use bytes::{Buf, BytesMut};
use http::header::{self, HeaderMap};
use http::uri::PathAndQuery;
use http::{Method, StatusCode};

use super::fields::{write_field, Fields};

/// The largest request body the relay carries (read whole, then sent with its head in one
/// write); a larger one goes to the HTTP server lane, which streams it.
pub(crate) const BODY_LIMIT: u64 = 64 * 1024;
/// Header fields per head (hyper's limit too).
pub(super) const MAX_HEADERS: usize = 100;

/// Which request targets the relay takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Form {
    /// A path and query (inside a tunnel, whose host CONNECT named).
    Origin,
    /// `http://host[:port]/path` (a plain-HTTP proxy request). A target naming `own_port`
    /// may be a provider route addressed to the proxy itself: the HTTP server reads it.
    Absolute { own_port: u16 },
}

/// The host and port an absolute-form target names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Authority {
    /// Lower case, IPv6 without brackets (as the policy reads hosts).
    pub(crate) host: String,
    pub(crate) port: u16,
}

/// A request head the relay takes.
#[derive(Debug)]
pub(crate) struct Head {
    pub(crate) method: Method,
    /// The path and query sent upstream.
    pub(crate) path: PathAndQuery,
    /// The host and port of an absolute-form target ([`Form::Absolute`]).
    pub(crate) authority: Option<Authority>,
    /// The fields (one `Host` among them).
    pub(crate) fields: Fields,
    pub(crate) body_len: u64,
    /// The client asked to close after this answer.
    pub(crate) close: bool,
}

/// A return value that lives for one match: boxing the head would cost an allocation per
/// request.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum Parsed {
    /// Not complete yet.
    Partial,
    /// A head the relay takes, taken off the buffer.
    Take(Head),
    /// For the HTTP server lane.
    Handoff,
}

/// Read a request head at the start of `buf`; a head the relay takes is taken off it.
pub(crate) fn parse_head(buf: &mut BytesMut, max_head: usize, form: Form) -> Parsed {
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut slots);
    let (plain, n) = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) if n <= max_head => match plain_head(buf, &req, form) {
            Some(p) => (p, n),
            None => return Parsed::Handoff,
        },
        Ok(httparse::Status::Partial) if buf.len() <= max_head => return Parsed::Partial,
        _ => return Parsed::Handoff,
    };
    // Copied out (one small allocation): a split would make the read buffer shared, and the
    // next read into it would then allocate a new one.
    let raw = bytes::Bytes::copy_from_slice(&buf[..n]);
    let (start, end) = plain.path;
    // a target the http types refuse: handed off whole, nothing taken off the buffer
    let (path, authority) = match form {
        Form::Origin => match PathAndQuery::from_maybe_shared(raw.slice(start..end)) {
            Ok(path) => (path, None),
            Err(_) => return Parsed::Handoff,
        },
        Form::Absolute { own_port } => match absolute(raw.slice(start..end), own_port) {
            Some((path, authority)) => (path, Some(authority)),
            None => return Parsed::Handoff,
        },
    };
    buf.advance(n);
    let mut fields = plain.fields;
    fields.attach(raw);
    Parsed::Take(Head {
        method: plain.method,
        path,
        authority,
        fields,
        body_len: plain.body_len,
        close: plain.close,
    })
}

/// What [`plain_head`] reads of a head the relay takes; the target as its place in the head.
struct Plain {
    method: Method,
    path: (usize, usize),
    fields: Fields,
    body_len: u64,
    close: bool,
}

/// An absolute-form `http://` target as the path sent upstream and the authority it names;
/// `None` for one the HTTP server reads instead (user info, a port that is not a number,
/// the proxy's own port, no host).
fn absolute(target: bytes::Bytes, own_port: u16) -> Option<(PathAndQuery, Authority)> {
    let uri = http::Uri::from_maybe_shared(target).ok()?;
    let authority = uri.authority()?;
    if uri.scheme_str() != Some("http") || authority.as_str().contains('@') {
        return None;
    }
    let port = crate::lanes::target::authority_port(authority.as_str(), 80)?;
    let host = authority.host();
    if port == own_port || host.trim().is_empty() {
        return None;
    }
    let host = crate::policy::normalize_host(host);
    let path = uri
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    Some((path, Authority { host, port }))
}

/// The head as the relay carries it, or `None` when it is not one the relay takes.
fn plain_head(buf: &[u8], req: &httparse::Request<'_, '_>, form: Form) -> Option<Plain> {
    if req.version != Some(1) {
        return None;
    }
    let method = Method::from_bytes(req.method?.as_bytes()).ok()?;
    let path = req.path?;
    let taken = match form {
        Form::Origin => path.starts_with('/'),
        Form::Absolute { .. } => path.starts_with("http://"),
    };
    if method == Method::CONNECT || !taken {
        return None;
    }
    let start = (path.as_ptr() as usize).checked_sub(buf.as_ptr() as usize)?;
    let fields = Fields::locate(buf, req.headers)?;
    let mut body_len = None;
    let mut hosts = 0;
    let mut close = false;
    for h in req.headers.iter() {
        let name = h.name.as_bytes();
        if name.eq_ignore_ascii_case(b"content-length") {
            if body_len.is_some() {
                return None;
            }
            body_len = Some(decimal(h.value)?);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding")
            || name.eq_ignore_ascii_case(b"upgrade")
            || name.eq_ignore_ascii_case(b"expect")
        {
            return None;
        } else if name.eq_ignore_ascii_case(b"host") {
            hosts += 1;
        } else if name.eq_ignore_ascii_case(b"connection") {
            close |= has_token(h.value, "close");
        }
    }
    let body_len = body_len.unwrap_or(0);
    if hosts != 1 || body_len > BODY_LIMIT {
        return None;
    }
    Some(Plain {
        method,
        path: (start, start + path.len()),
        fields,
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
    /// The fields as the upstream sent them.
    fields: Fields,
    /// The body's length, when the upstream gave one and no transfer coding.
    length: Option<u64>,
    pub(super) framing: BodyFraming,
    /// The upstream connection can carry another request after this body.
    pub(super) reusable: bool,
}

/// Read a response head that httparse read from `base`; [`RespHead::attach`] then gives its
/// fields their bytes.
pub(super) fn parse_response(
    base: &[u8],
    resp: &httparse::Response<'_, '_>,
    head: bool,
) -> Result<RespHead, String> {
    let code = resp.code.ok_or("no status")?;
    let status = StatusCode::from_u16(code).map_err(|_| format!("status {code}"))?;
    let fields = Fields::locate(base, resp.headers).ok_or("a field the http types refuse")?;
    let mut length: Option<u64> = None;
    let mut encoded = false;
    let mut chunked = false;
    let mut close = resp.version != Some(1);
    for h in resp.headers.iter() {
        let name = h.name.as_bytes();
        if name.eq_ignore_ascii_case(b"content-length") {
            let n = decimal(h.value).ok_or("a Content-Length that is not a number")?;
            if length.is_some_and(|l| l != n) {
                return Err("two different Content-Length values".into());
            }
            length = Some(n);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            encoded = true;
            // the last coding decides: chunked or not
            if let Some(last) = h.value.split(|b| *b == b',').next_back() {
                chunked = last.trim_ascii().eq_ignore_ascii_case(b"chunked");
            }
        } else if name.eq_ignore_ascii_case(b"connection") {
            close |= has_token(h.value, "close");
        }
    }
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
    Ok(RespHead {
        status,
        fields,
        length: length.filter(|_| !encoded),
        framing,
        reusable: !close && framing != BodyFraming::Close,
    })
}

impl RespHead {
    /// The head's bytes (those [`parse_response`] read).
    pub(super) fn attach(&mut self, raw: bytes::Bytes) {
        self.fields.attach(raw);
    }

    /// Each field as the client gets it: hop-by-hop ones left out, the framing fields as
    /// the relay writes the body (`chunked` re-chunked, one `Content-Length`).
    fn each_field(&self, mut f: impl FnMut(&[u8], &[u8])) {
        self.fields.each_relayed(|n, v| {
            if !n.eq_ignore_ascii_case(b"content-length") {
                f(n, v)
            }
        });
        if self.framing == BodyFraming::Chunked {
            f(b"transfer-encoding", b"chunked");
        }
        if let Some(n) = self.length {
            let mut digits = [0u8; 20];
            f(b"content-length", decimal_digits(n, &mut digits));
        }
    }

    /// The head written to the client; `close` adds `Connection: close` unless a
    /// `Connection` field is passed on.
    pub(super) fn write(&self, out: &mut Vec<u8>, close: bool) {
        status_line(out, self.status);
        let mut connection = false;
        self.each_field(|n, v| {
            connection |= n.eq_ignore_ascii_case(b"connection");
            write_field(out, n, v);
        });
        if close && !connection {
            out.extend_from_slice(b"connection: close\r\n");
        }
        out.extend_from_slice(b"\r\n");
    }

    /// The fields the client gets, as a map (for response filters).
    pub(super) fn to_map(&self) -> HeaderMap {
        let mut map = HeaderMap::new();
        self.each_field(|n, v| {
            if let (Ok(n), Ok(v)) = (
                header::HeaderName::from_bytes(n),
                header::HeaderValue::from_bytes(v),
            ) {
                map.append(n, v);
            }
        });
        map
    }
}

/// `n` in decimal, written at the end of `buf`.
fn decimal_digits(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}

fn status_line(out: &mut Vec<u8>, status: StatusCode) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// The fields of a map, each on its line, into `out`.
pub(super) fn write_fields(out: &mut Vec<u8>, headers: &HeaderMap) {
    for (k, v) in headers {
        write_field(out, k.as_str().as_bytes(), v.as_bytes());
    }
}

/// A head of the proxy's own (an answer to a refusal) into `out`.
pub(super) fn response_head(
    out: &mut Vec<u8>,
    status: StatusCode,
    headers: &HeaderMap,
    close: bool,
) {
    status_line(out, status);
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
    for form in [Form::Origin, Form::Absolute { own_port: 3128 }] {
        let mut buf = BytesMut::from(data);
        if let Parsed::Take(head) = parse_head(&mut buf, 64 * 1024, form) {
            let used = data.len() - buf.len();
            assert!(used > 0 && head.body_len <= BODY_LIMIT);
            assert_eq!(head.authority.is_some(), form != Form::Origin);
            let _ = head.fields.to_map();
            let mut relayed = Vec::new();
            head.fields
                .each_relayed(|n, v| super::fields::write_field(&mut relayed, n, v));
        }
    }
    let _ = decimal(data);
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut slots);
    if let Ok(httparse::Status::Complete(_)) = resp.parse(data) {
        for head in [false, true] {
            if let Ok(mut r) = parse_response(data, &resp, head) {
                r.attach(bytes::Bytes::copy_from_slice(data));
                let mut out = Vec::new();
                r.write(&mut out, !r.reusable);
                let _ = r.to_map();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    const CAP: usize = 64 * 1024;

    /// The parse, and how many bytes it took off the buffer.
    fn parse_at(raw: &str, cap: usize) -> (Parsed, usize) {
        let mut buf = BytesMut::from(raw.as_bytes());
        let parsed = parse_head(&mut buf, cap, Form::Origin);
        (parsed, raw.len() - buf.len())
    }

    fn parse(raw: &str) -> Parsed {
        parse_at(raw, CAP).0
    }

    fn taken(raw: &str) -> Head {
        match parse_at(raw, CAP) {
            (Parsed::Take(h), n) => {
                assert_eq!(n, raw.find("\r\n\r\n").map(|i| i + 4).unwrap_or(raw.len()));
                h
            }
            (other, _) => panic!("expected the relay to take {raw:?}, got {other:?}"),
        }
    }

    fn handed_off(raw: &str) {
        match parse(raw) {
            Parsed::Handoff => {}
            other => panic!("expected a handoff for {raw:?}, got {other:?}"),
        }
    }

    fn absolute(raw: &str) -> Parsed {
        let mut buf = BytesMut::from(raw.as_bytes());
        parse_head(&mut buf, CAP, Form::Absolute { own_port: 3128 })
    }

    #[test]
    fn an_absolute_http_target_is_taken_with_its_host_port_and_path() {
        let cases = [
            (
                "http://Example.COM:8080/a?b=1",
                "example.com",
                8080,
                "/a?b=1",
            ),
            ("http://[::1]/v6", "::1", 80, "/v6"),
            ("http://origin.test", "origin.test", 80, "/"),
        ];
        for (target, host, port, path) in cases {
            let raw = format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n");
            let Parsed::Take(head) = absolute(&raw) else {
                panic!("expected the relay to take {target}");
            };
            let a = head.authority.expect("an authority");
            assert_eq!((a.host.as_str(), a.port), (host, port), "{target}");
            assert_eq!(head.path.as_str(), path, "{target}");
        }
    }

    #[test]
    fn targets_the_plain_relay_does_not_take_go_to_the_http_server() {
        for target in [
            "/origin-form",
            "https://origin.test/",
            "HTTP://origin.test/",
            "http://user:pw@origin.test/",
            "http://origin.test:99999/",
            "http://origin.test:/",
            "http://127.0.0.1:3128/v1/provider/x",
            "*",
        ] {
            let raw = format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n");
            assert!(matches!(absolute(&raw), Parsed::Handoff), "{target}");
        }
        let connect = "CONNECT origin.test:443 HTTP/1.1\r\nHost: origin.test:443\r\n\r\n";
        assert!(matches!(absolute(connect), Parsed::Handoff));
        // and a tunnel's relay takes no absolute target
        handed_off("GET http://origin.test/ HTTP/1.1\r\nHost: origin.test\r\n\r\n");
    }

    #[test]
    fn a_plain_get_and_a_small_post_are_taken_with_their_fields_and_body_length() {
        let h = taken("GET /a?b=1 HTTP/1.1\r\nHost: x.test\r\nAccept: */*\r\n\r\n");
        assert_eq!(h.method, Method::GET);
        assert_eq!(h.path.as_str(), "/a?b=1");
        assert_eq!(h.fields.values("accept").next(), Some(&b"*/*"[..]));
        assert_eq!(h.fields.values("host").next(), Some(&b"x.test"[..]));
        assert_eq!(h.body_len, 0);
        assert!(!h.close);
        let h = taken("POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\nConnection: keep-alive, Close\r\n\r\n");
        assert_eq!(h.body_len, 12);
        assert!(h.close, "a close token among others asks to close");
    }

    #[test]
    fn bytes_after_the_head_are_not_counted_in_its_length() {
        let raw = "GET / HTTP/1.1\r\nHost: x\r\n\r\nGET /next HTTP/1.1\r\n";
        match parse_at(raw, CAP) {
            (Parsed::Take(_), n) => assert_eq!(n, raw.find("GET /next").unwrap_or(0)),
            (other, _) => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_unfinished_head_waits_until_it_outgrows_the_cap() {
        assert!(matches!(
            parse("GET / HTTP/1.1\r\nHost: x\r\n"),
            Parsed::Partial
        ));
        let long = format!("GET / HTTP/1.1\r\nX: {}", "a".repeat(200));
        assert!(matches!(parse_at(&long, 100), (Parsed::Handoff, 0)));
        let whole = format!(
            "GET / HTTP/1.1\r\nHost: x\r\nX: {}\r\n\r\n",
            "a".repeat(200)
        );
        assert!(matches!(parse_at(&whole, 100), (Parsed::Handoff, 0)));
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
            // what httparse refuses: a space before the colon, a bare CR, control bytes in
            // a value (the relay writes values as they came, unchecked by the http types)
            "GET / HTTP/1.1\r\nHost : x\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: x\rY: z\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: x\r\nY: a\x01b\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: x\r\nY: a\x7fb\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: x\r\nY: a\x00b\r\n\r\n",
        ] {
            handed_off(raw);
        }
    }

    #[test]
    fn a_head_handed_off_leaves_every_byte_for_the_http_server() {
        // targets httparse reads and the `http` types may refuse; whatever the verdict, a
        // head that is not taken is not consumed either
        let mut refused = 0;
        for target in [
            "/a\"b",
            "/a{b}",
            "/a|b",
            "/a\\b",
            "/a^b",
            "/a`b",
            "/a<b>",
            "/a\u{e9}b",
            "/a#b",
        ] {
            let raw = format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n");
            match parse_at(&raw, CAP) {
                (Parsed::Take(h), n) => {
                    assert_eq!(n, raw.len(), "{target:?}");
                    assert!(h.path.as_str().starts_with("/a"), "{target:?}");
                }
                (Parsed::Handoff, n) => {
                    refused += 1;
                    assert_eq!(n, 0, "{target:?}: a handoff consumed {n} bytes");
                }
                (Parsed::Partial, _) => panic!("{target:?}: a whole head read as partial"),
            }
        }
        assert!(
            refused > 0,
            "one of the targets is refused by the http types"
        );
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
            Ok(httparse::Status::Complete(_)) => {
                let mut r = parse_response(raw.as_bytes(), &resp, head)?;
                r.attach(bytes::Bytes::copy_from_slice(raw.as_bytes()));
                Ok(r)
            }
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
        let headers = r.to_map();
        for gone in ["connection", "keep-alive", "x-private", "content-length"] {
            assert!(!headers.contains_key(gone), "{gone} should be dropped");
        }
        assert_eq!(headers.get("x-kept").map(|v| v.as_bytes()), Some(&b"2"[..]));
        assert_eq!(headers.get_all("transfer-encoding").iter().count(), 1);
        assert_eq!(
            headers.get("transfer-encoding").map(|v| v.as_bytes()),
            Some(&b"chunked"[..])
        );
        let mut out = Vec::new();
        r.write(&mut out, true);
        assert_eq!(
            String::from_utf8_lossy(&out),
            "HTTP/1.1 200 OK\r\nX-Kept: 2\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n"
        );
        let r = response(
            "HTTP/1.1 200 OK\r\nContent-Length: 1234\r\nContent-Length: 1234\r\n\r\n",
            false,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        out.clear();
        r.write(&mut out, false);
        assert_eq!(
            String::from_utf8_lossy(&out),
            "HTTP/1.1 200 OK\r\ncontent-length: 1234\r\n\r\n"
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
