//! A head's fields read in place: the head's bytes and where each field lies in them.
//!
//! The relay writes the fields it passes on straight from those bytes. A `HeaderMap` (an
//! allocation per field and a hash per name) is built only when something reads fields by
//! name: network filters, or a provider credential to swap.

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue};

/// Field names never passed to the next hop, lower-case. `Upgrade` is passed only beside a
/// `Connection` that names it; `TE: trailers` is passed as that alone.
const HOP_BY_HOP: [&[u8]; 8] = [
    b"connection",
    b"proxy-connection",
    b"keep-alive",
    b"proxy-authorization",
    b"proxy-authenticate",
    b"te",
    b"trailer",
    b"transfer-encoding",
];

/// Where one field's name and value lie in the head.
#[derive(Debug, Clone, Copy)]
struct Span {
    name: (u32, u32),
    value: (u32, u32),
}

/// The fields of one head, in the order they came.
#[derive(Debug, Default)]
pub(super) struct Fields {
    raw: Bytes,
    spans: Vec<Span>,
}

/// Where `part` (a slice of `base`) starts and ends in it.
fn offsets(base: &[u8], part: &[u8]) -> (u32, u32) {
    let start = (part.as_ptr() as usize).saturating_sub(base.as_ptr() as usize);
    (start as u32, (start + part.len()) as u32)
}

/// A value the `http` types take (visible ASCII, spaces, tabs and obs-text).
pub(super) fn valid_value(v: &[u8]) -> bool {
    v.iter().all(|&b| (b >= 0x20 && b != 0x7f) || b == b'\t')
}

impl Fields {
    /// The spans of `headers`, which httparse read from `base`; `None` when a name or value
    /// is one the `http` types refuse. [`Fields::attach`] then gives them their bytes.
    pub(super) fn locate(base: &[u8], headers: &[httparse::Header<'_>]) -> Option<Fields> {
        let mut spans = Vec::with_capacity(headers.len());
        for h in headers {
            if h.name.is_empty() || h.name.len() > u16::MAX as usize || !valid_value(h.value) {
                return None;
            }
            spans.push(Span {
                name: offsets(base, h.name.as_bytes()),
                value: offsets(base, h.value),
            });
        }
        Some(Fields {
            raw: Bytes::new(),
            spans,
        })
    }

    /// The head's bytes (the same ones [`Fields::locate`] read).
    pub(super) fn attach(&mut self, raw: Bytes) {
        self.raw = raw;
    }

    fn slice(&self, (a, b): (u32, u32)) -> &[u8] {
        self.raw.get(a as usize..b as usize).unwrap_or_default()
    }

    /// Every field, name and value, as sent.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.spans
            .iter()
            .map(|s| (self.slice(s.name), self.slice(s.value)))
    }

    /// The values of the fields named `name` (any case).
    pub(super) fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> {
        self.iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, v)| v)
    }

    /// Whether a field named `name` is present.
    pub(super) fn has(&self, name: &str) -> bool {
        self.values(name).next().is_some()
    }

    /// Every field as a `HeaderMap` (for filters and credential swaps).
    pub(super) fn to_map(&self) -> HeaderMap {
        let mut map = HeaderMap::with_capacity(self.spans.len());
        for s in &self.spans {
            let value = self.raw.slice(s.value.0 as usize..s.value.1 as usize);
            if let (Ok(n), Ok(v)) = (
                HeaderName::from_bytes(self.slice(s.name)),
                HeaderValue::from_maybe_shared(value),
            ) {
                map.append(n, v);
            }
        }
        map
    }

    /// Is `name` one that `Connection` lists (other than `upgrade`)?
    fn named_by_connection(&self, name: &[u8]) -> bool {
        self.values("connection").any(|v| {
            v.split(|b| *b == b',').any(|t| {
                let t = t.trim_ascii();
                t.eq_ignore_ascii_case(name) && !t.eq_ignore_ascii_case(b"upgrade")
            })
        })
    }

    /// Calls `f` with each field passed to the next hop: the hop-by-hop ones and those that
    /// `Connection` lists are left out; `TE: trailers` is kept; `Upgrade` is kept with a
    /// `Connection: upgrade` only when a `Connection` field names it.
    pub(super) fn each_relayed(&self, mut f: impl FnMut(&[u8], &[u8])) {
        let has_upgrade = self.has("upgrade");
        let upgrade = has_upgrade
            && self
                .values("connection")
                .any(|v| v.windows(7).any(|w| w.eq_ignore_ascii_case(b"upgrade")));
        let te_trailers = self
            .values("te")
            .next()
            .is_some_and(|v| v.trim_ascii().eq_ignore_ascii_case(b"trailers"));
        let connection = self.has("connection");
        for (n, v) in self.iter() {
            let hop = HOP_BY_HOP.iter().any(|h| n.eq_ignore_ascii_case(h))
                || (n.eq_ignore_ascii_case(b"upgrade") && !upgrade)
                || (connection && self.named_by_connection(n));
            if !hop {
                f(n, v);
            }
        }
        if te_trailers {
            f(b"te", b"trailers");
        }
        if upgrade {
            f(b"connection", b"upgrade");
        }
    }
}

/// `name: value` and its line end into `out`.
pub(super) fn write_field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lanes::forward::strip_hop_by_hop;

    fn fields(head: &str) -> Fields {
        let mut slots = [httparse::EMPTY_HEADER; 32];
        let mut req = httparse::Request::new(&mut slots);
        match req.parse(head.as_bytes()) {
            Ok(httparse::Status::Complete(_)) => {}
            other => panic!("test head did not parse: {other:?}"),
        }
        let mut f = Fields::locate(head.as_bytes(), req.headers)
            .unwrap_or_else(|| panic!("fields of {head:?} refused"));
        f.attach(Bytes::copy_from_slice(head.as_bytes()));
        f
    }

    fn relayed(f: &Fields) -> Vec<(String, String)> {
        let mut out = Vec::new();
        f.each_relayed(|n, v| {
            out.push((
                String::from_utf8_lossy(n).to_ascii_lowercase(),
                String::from_utf8_lossy(v).into_owned(),
            ))
        });
        out.sort();
        out
    }

    /// The same fields through the `HeaderMap` path every other lane takes.
    fn stripped(f: &Fields) -> Vec<(String, String)> {
        let mut map = f.to_map();
        strip_hop_by_hop(&mut map);
        let mut out: Vec<_> = map
            .iter()
            .map(|(n, v)| {
                (
                    n.as_str().to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        out.sort();
        out
    }

    #[test]
    fn fields_passed_on_are_the_ones_the_header_map_path_keeps() {
        for head in [
            "GET / HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, X-Private\r\nKeep-Alive: 5\r\nx-private: 1\r\nX-Kept: 2\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: x\r\nProxy-Authorization: Basic abc\r\nProxy-Connection: keep-alive\r\nTrailer: x\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: x\r\nTE: trailers\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: x\r\nTE: gzip\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: h2c\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: h2c\r\nConnection: Upgrade, close\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: x\r\nConnection: host\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: x\r\nSet: a\r\nSet: b\r\n\r\n",
        ] {
            let f = fields(head);
            assert_eq!(relayed(&f), stripped(&f), "{head:?}");
        }
    }

    #[test]
    fn fields_are_read_in_order_with_their_case_and_found_by_any_case() {
        let f = fields("GET / HTTP/1.1\r\nHost: x.test\r\nX-A: 1\r\nx-a: 2\r\n\r\n");
        let all: Vec<_> = f.iter().collect();
        assert_eq!(
            all,
            vec![
                (&b"Host"[..], &b"x.test"[..]),
                (b"X-A", b"1"),
                (b"x-a", b"2")
            ]
        );
        assert_eq!(f.values("X-a").collect::<Vec<_>>(), vec![&b"1"[..], b"2"]);
        assert!(f.has("HOST") && !f.has("accept"));
        let map = f.to_map();
        assert_eq!(map.get_all("x-a").iter().count(), 2);
        assert_eq!(map.get("host").map(|v| v.as_bytes()), Some(&b"x.test"[..]));
    }

    #[test]
    fn a_value_with_a_control_byte_is_refused() {
        assert!(valid_value(b"a b\tc\x80\xff"));
        for bad in [&b"a\x00"[..], b"\x7f", b"a\x1bb"] {
            assert!(!valid_value(bad), "{bad:?}");
        }
    }
}
