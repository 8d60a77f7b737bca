//! A head's fields read in place: the head's bytes and where each field lies in them.
//!
//! The relay writes the fields it passes on straight from those bytes. A `HeaderMap` (an
//! allocation per field and a hash per name) is built only when something reads fields by
//! name: network filters, or a provider credential to swap.

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue};

use crate::lanes::forward::HOP_BY_HOP;

/// What a field's name makes it to the relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Passed on (unless `Connection` lists it).
    Plain,
    /// Never passed on.
    Hop,
    Connection,
    Te,
    /// Passed on only beside a `Connection` that names it.
    Upgrade,
}

/// The kind of a field name, any case: the hop-by-hop names are the ones every lane strips
/// (a comparison each, most ending at the length).
fn kind_of(name: &[u8]) -> Kind {
    // most names have no hop-by-hop name's length: one bit test
    if name.len() >= 64 || hop_lengths() & (1 << name.len()) == 0 {
        return Kind::Plain;
    }
    let is = |n: &HeaderName| name.eq_ignore_ascii_case(n.as_str().as_bytes());
    if is(&http::header::CONNECTION) {
        Kind::Connection
    } else if is(&http::header::TE) {
        Kind::Te
    } else if is(&http::header::UPGRADE) {
        Kind::Upgrade
    } else if HOP_BY_HOP.iter().any(is) {
        Kind::Hop
    } else {
        Kind::Plain
    }
}

/// The lengths of the names that are not [`Kind::Plain`], as bits.
fn hop_lengths() -> u64 {
    static LENGTHS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *LENGTHS.get_or_init(|| {
        HOP_BY_HOP
            .iter()
            .chain([&http::header::UPGRADE])
            .fold(0, |bits, n| bits | 1 << n.as_str().len())
    })
}

/// Where one field's name and value lie in the head, and its kind.
#[derive(Debug, Clone, Copy)]
struct Span {
    name: (u32, u32),
    value: (u32, u32),
    kind: Kind,
}

/// The fields of one head, in the order they came.
#[derive(Debug)]
pub(crate) struct Fields {
    raw: Bytes,
    spans: Vec<Span>,
    /// Some field is not [`Kind::Plain`].
    special: bool,
}

/// Where `part` (a slice of `base`) starts and ends in it.
fn offsets(base: &[u8], part: &[u8]) -> (u32, u32) {
    let start = (part.as_ptr() as usize).saturating_sub(base.as_ptr() as usize);
    (start as u32, (start + part.len()) as u32)
}

impl Fields {
    /// The spans of `headers`, which httparse read from `base`; `None` when a name is one
    /// the `http` types refuse. (httparse takes in a value only what they take: visible
    /// ASCII, spaces, tabs and obs-text.) [`Fields::attach`] then gives them their bytes.
    pub(super) fn locate(base: &[u8], headers: &[httparse::Header<'_>]) -> Option<Fields> {
        let mut spans = Vec::with_capacity(headers.len());
        let mut special = false;
        for h in headers {
            let name = h.name.as_bytes();
            if name.is_empty() || name.len() > u16::MAX as usize {
                return None;
            }
            let kind = kind_of(name);
            special |= kind != Kind::Plain;
            spans.push(Span {
                name: offsets(base, name),
                value: offsets(base, h.value),
                kind,
            });
        }
        Some(Fields {
            raw: Bytes::new(),
            spans,
            special,
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
    pub(crate) fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> {
        self.iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, v)| v)
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

    /// The values of the fields of one kind.
    fn of_kind(&self, kind: Kind) -> impl Iterator<Item = &[u8]> {
        self.spans
            .iter()
            .filter(move |s| s.kind == kind)
            .map(|s| self.slice(s.value))
    }

    /// Is `name` one that `Connection` lists (other than `upgrade`)?
    fn named_by_connection(&self, name: &[u8]) -> bool {
        self.of_kind(Kind::Connection).any(|v| {
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
        if !self.special {
            for s in &self.spans {
                f(self.slice(s.name), self.slice(s.value));
            }
            return;
        }
        let connection = self.of_kind(Kind::Connection).next().is_some();
        let upgrade = self.of_kind(Kind::Upgrade).next().is_some()
            && self
                .of_kind(Kind::Connection)
                .any(|v| v.windows(7).any(|w| w.eq_ignore_ascii_case(b"upgrade")));
        let te_trailers = self
            .of_kind(Kind::Te)
            .next()
            .is_some_and(|v| v.trim_ascii().eq_ignore_ascii_case(b"trailers"));
        for s in &self.spans {
            let (n, v) = (self.slice(s.name), self.slice(s.value));
            let passed = match s.kind {
                Kind::Plain => !(connection && self.named_by_connection(n)),
                Kind::Upgrade => upgrade,
                Kind::Hop | Kind::Connection | Kind::Te => false,
            };
            if passed {
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
        assert!(f.values("HOST").next().is_some() && f.values("accept").next().is_none());
        let map = f.to_map();
        assert_eq!(map.get_all("x-a").iter().count(), 2);
        assert_eq!(map.get("host").map(|v| v.as_bytes()), Some(&b"x.test"[..]));
    }

    #[test]
    fn every_hop_by_hop_name_is_known_in_any_case_and_others_are_plain() {
        for (name, kind) in [
            ("TE", Kind::Te),
            ("Upgrade", Kind::Upgrade),
            ("trailer", Kind::Hop),
            ("CONNECTION", Kind::Connection),
            ("Keep-Alive", Kind::Hop),
            ("proxy-connection", Kind::Hop),
            ("Transfer-Encoding", Kind::Hop),
            ("Proxy-Authenticate", Kind::Hop),
            ("Proxy-Authorization", Kind::Hop),
            ("tex", Kind::Plain),
            ("connections", Kind::Plain),
            ("x-upgrade", Kind::Plain),
            ("host", Kind::Plain),
            ("user-agent", Kind::Plain),
            (
                "x-a-name-longer-than-sixty-four-bytes-is-plain-whatever-it-spells",
                Kind::Plain,
            ),
        ] {
            assert_eq!(kind_of(name.as_bytes()), kind, "{name}");
        }
        for name in HOP_BY_HOP.iter().chain([&http::header::UPGRADE]) {
            assert_ne!(kind_of(name.as_str().as_bytes()), Kind::Plain, "{name}");
        }
    }
}
