//! Reading a request's target: pure helpers the lanes share (the CONNECT authority, the
//! size of a request head, the bracketed form of an IPv6 host).

use http::Request;

use crate::policy::normalize_host;

/// Parse a CONNECT target `host[:port]` / `[v6]:port` (port defaults to
/// 443). Pure; `None` when malformed.
pub fn parse_authority(s: &str) -> Option<(String, u16)> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let end = rest.find(']')?;
        let host = &rest[..end];
        let tail = &rest[end + 1..];
        let port = match tail.strip_prefix(':') {
            Some(p) => p.parse::<u16>().ok()?,
            None if tail.is_empty() => 443,
            None => return None,
        };
        (host.to_string(), port)
    } else {
        match s.rsplit_once(':') {
            Some((h, p)) if !h.contains(':') => (h.to_string(), p.parse::<u16>().ok()?),
            Some(_) => return None,
            None => (s.to_string(), 443),
        }
    };
    if host.is_empty()
        || port == 0
        || host
            .chars()
            .any(|c| c.is_whitespace() || c == '/' || c == '@')
    {
        return None;
    }
    Some((normalize_host(&host), port))
}

/// The port an absolute URI's authority names: `default` when it names none, `None` when
/// what follows its `:` is not a port (`http://h:99999/`, `http://h:/`).
pub(crate) fn authority_port(authority: &str, default: u16) -> Option<u16> {
    let b = authority.as_bytes();
    // the last `:` not inside an IPv6 literal's brackets (a hand loop: this runs per request)
    let Some(colon) = b.iter().rposition(|&c| c == b':' || c == b']') else {
        return Some(default);
    };
    if b[colon] == b']' {
        return Some(default);
    }
    let digits = &b[colon + 1..];
    if digits.is_empty() {
        return None;
    }
    let mut port: u32 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        // leading zeros are allowed; past 65535 it stays past it
        port = (port * 10 + u32::from(d - b'0')).min(70_000);
    }
    u16::try_from(port).ok()
}

/// Approximate size of a request head (names, values, separators).
pub(crate) fn head_size<B>(req: &Request<B>) -> usize {
    let uri = req.uri();
    let uri_len = uri.scheme_str().map_or(0, |s| s.len() + 3)
        + uri.authority().map_or(0, |a| a.as_str().len())
        + uri.path_and_query().map_or(1, |p| p.as_str().len());
    let line = req.method().as_str().len() + uri_len + 12;
    line + req
        .headers()
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len() + 4)
        .sum::<usize>()
}

/// `host` as it appears in an authority (`[v6]`, else as is).
pub(crate) fn bracket(host: &str) -> String {
    if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::{authority_port, parse_authority};

    #[test]
    fn an_absolute_uri_s_port_is_its_digits_or_the_default_and_anything_else_is_none() {
        assert_eq!(authority_port("h:8080", 80), Some(8080));
        assert_eq!(authority_port("h", 80), Some(80));
        assert_eq!(authority_port("[::1]", 80), Some(80));
        assert_eq!(authority_port("[::1]:81", 80), Some(81));
        assert_eq!(authority_port("h:99999", 80), None);
        assert_eq!(authority_port("h:", 80), None);
        assert_eq!(authority_port("h:+1", 80), None);
        assert_eq!(authority_port("h:65535", 80), Some(65535));
        assert_eq!(authority_port("h:65536", 80), None);
        assert_eq!(authority_port("h:000080", 80), Some(80));
        assert_eq!(authority_port("h:99999999999999999999", 80), None);
    }

    #[test]
    fn connect_targets_parse_including_bracketed_ipv6() {
        assert_eq!(
            parse_authority("example.com:8443"),
            Some(("example.com".into(), 8443))
        );
        assert_eq!(
            parse_authority("Example.com"),
            Some(("example.com".into(), 443))
        );
        assert_eq!(parse_authority("[::1]:443"), Some(("::1".into(), 443)));
        assert_eq!(
            parse_authority("[0:0:0:0:0:0:0:1]:80"),
            Some(("::1".into(), 80))
        );
        assert_eq!(
            parse_authority("2130706433:80"),
            Some(("127.0.0.1".into(), 80))
        );
        assert_eq!(parse_authority("::1:443"), None);
        assert_eq!(parse_authority("x:99999"), None);
        assert_eq!(parse_authority(":80"), None);
        assert_eq!(parse_authority(""), None);
    }
}
