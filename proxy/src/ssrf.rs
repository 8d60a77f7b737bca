//! The SSRF floor (docs/decisions.md, P4): a pure classifier over `IpAddr`, the
//! `inet_aton`-compatible IP-literal parser, and the per-request check that
//! picks the one validated address to dial.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::Serialize;

use crate::deny::{kind, DeciderKind, Denial};

/// The class of an address as far as egress is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AddrClass {
    /// Reachable, allowed.
    Public,
    /// 127/8, ::1 — allowed except reserved ports.
    Loopback,
    /// RFC 1918, CGNAT, ULA, site-local, 192.0.0/24, 198.18/15 — allowed only with `allow_private`.
    Private,
    /// Link-local, metadata, unspecified, multicast, broadcast, 240/4 — always denied.
    Internal,
}

/// Known cloud metadata / host-agent addresses that are not already link-local.
const METADATA_V4: [Ipv4Addr; 3] = [
    Ipv4Addr::new(100, 100, 100, 200), // Alibaba Cloud
    Ipv4Addr::new(168, 63, 129, 16),   // Azure wire server
    Ipv4Addr::new(192, 0, 0, 192),     // Oracle Cloud (legacy)
];
const METADATA_V6: [Ipv6Addr; 3] = [
    Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254), // AWS IMDS
    Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x253), // AWS DNS
    Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x123), // AWS time sync
];

/// Classify an IPv4 address.
pub fn classify_v4(ip: Ipv4Addr) -> AddrClass {
    let o = ip.octets();
    if METADATA_V4.contains(&ip)
        || o[0] == 0
        || (o[0] == 169 && o[1] == 254)
        || ip.is_multicast()
        || ip.is_broadcast()
        || o[0] >= 240
    {
        return AddrClass::Internal;
    }
    if o[0] == 127 {
        return AddrClass::Loopback;
    }
    if o[0] == 10
        || (o[0] == 172 && (16..=31).contains(&o[1]))
        || (o[0] == 192 && o[1] == 168)
        || (o[0] == 100 && (64..=127).contains(&o[1]))
        || (o[0] == 192 && o[1] == 0 && o[2] == 0)
        || (o[0] == 198 && (o[1] == 18 || o[1] == 19))
    {
        return AddrClass::Private;
    }
    AddrClass::Public
}

/// The IPv4 address embedded in an IPv6 transition form (mapped, translated, NAT64,
/// 6to4, IPv4-compatible, Teredo client), if any.
pub fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let low = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    if s[..5] == [0, 0, 0, 0, 0] && s[5] == 0xffff {
        return Some(low); // ::ffff:a.b.c.d
    }
    if s[..4] == [0, 0, 0, 0] && s[4] == 0xffff && s[5] == 0 {
        return Some(low); // IPv4-translated ::ffff:0:a.b.c.d (SIIT)
    }
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] || (s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1) {
        return Some(low); // NAT64 well-known and local-use prefixes
    }
    if s[0] == 0x2002 {
        return Some(Ipv4Addr::new(
            (s[1] >> 8) as u8,
            s[1] as u8,
            (s[2] >> 8) as u8,
            s[2] as u8,
        ));
    }
    if s[0] == 0x2001 && s[1] == 0 {
        let v = !(((s[6] as u32) << 16) | s[7] as u32);
        return Some(Ipv4Addr::from(v)); // Teredo client address (obfuscated)
    }
    if s[..6] == [0, 0, 0, 0, 0, 0] && !(s[6] == 0 && s[7] <= 1) {
        return Some(low); // IPv4-compatible ::a.b.c.d
    }
    None
}

/// Classify an IPv6 address.
pub fn classify_v6(ip: Ipv6Addr) -> AddrClass {
    let s = ip.segments();
    if METADATA_V6.contains(&ip)
        || ip.is_unspecified()
        || ip.is_multicast()
        || (s[0] & 0xffc0) == 0xfe80
    {
        return AddrClass::Internal;
    }
    if ip.is_loopback() {
        return AddrClass::Loopback;
    }
    if let Some(v4) = embedded_v4(ip) {
        return classify_v4(v4);
    }
    if (s[0] & 0xfe00) == 0xfc00 || (s[0] & 0xffc0) == 0xfec0 {
        return AddrClass::Private;
    }
    AddrClass::Public
}

/// Classify any address.
pub fn classify(ip: IpAddr) -> AddrClass {
    match ip {
        IpAddr::V4(v) => classify_v4(v),
        IpAddr::V6(v) => classify_v6(v),
    }
}

/// Parse one `inet_aton` component: decimal, `0x` hex or leading-0 octal.
fn parse_part(s: &str) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    let (digits, radix) = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        (h, 16)
    } else if s.len() > 1 && s.starts_with('0') {
        (&s[1..], 8)
    } else {
        (s, 10)
    };
    if digits.is_empty() {
        return if radix == 16 { Some(0) } else { None };
    }
    if digits.len() > 12 || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    u64::from_str_radix(digits, radix).ok()
}

/// Parse a host as an IP literal the way curl / glibc `inet_aton` would:
/// `a`, `a.b`, `a.b.c`, `a.b.c.d` with decimal, octal or hex parts, plus
/// IPv6 (optionally bracketed). Returns `None` for names.
pub fn parse_ip_literal(host: &str) -> Option<IpAddr> {
    let h = host.trim();
    let h = h
        .strip_prefix('[')
        .and_then(|x| x.strip_suffix(']'))
        .unwrap_or(h);
    if h.contains(':') {
        let no_zone = h.split('%').next().unwrap_or(h);
        return no_zone.parse::<Ipv6Addr>().ok().map(IpAddr::V6);
    }
    let h = h.strip_suffix('.').unwrap_or(h);
    // The canonical dotted quad (all the std parser accepts) means the same to
    // `inet_aton`; it is what a normalized host is, so it skips the part parser.
    if let Ok(v4) = h.parse::<Ipv4Addr>() {
        return Some(IpAddr::V4(v4));
    }
    let mut nums = [0u64; 4];
    let mut count = 0;
    for part in h.split('.') {
        if count == nums.len() {
            return None;
        }
        nums[count] = parse_part(part)?;
        count += 1;
    }
    let (head, last) = (&nums[..count - 1], nums[count - 1]);
    if head.iter().any(|&n| n > 255) {
        return None;
    }
    let last_max: u64 = match count {
        1 => u32::MAX as u64,
        2 => 0xff_ffff,
        3 => 0xffff,
        _ => 0xff,
    };
    if last > last_max {
        return None;
    }
    let mut v: u64 = 0;
    for (i, n) in head.iter().enumerate() {
        v |= n << (24 - 8 * i);
    }
    v |= last;
    Some(IpAddr::V4(Ipv4Addr::from(v as u32)))
}

/// Inputs of the floor for one target.
#[derive(Debug, Clone, Copy)]
pub struct FloorInput<'a> {
    /// Host as shown in refusals.
    pub host: &'a str,
    /// Target port.
    pub port: u16,
    /// Policy's `allow_private`.
    pub allow_private: bool,
    /// Reserved loopback ports (the control plane's).
    pub reserved_ports: &'a [u16],
    /// The proxy's own port, reserved as well.
    pub own_port: Option<u16>,
    /// Resolved addresses of the concrete denied names.
    pub denied_addrs: &'a [IpAddr],
}

fn ssrf_denial(msg: &str, host: &str) -> Denial {
    Denial::policy(
        kind::SSRF,
        format!("{msg} for host: {host}"),
        DeciderKind::Ssrf,
    )
}

/// Apply the floor's checks, in order, to every answer; return the one address to dial.
pub fn check(answers: &[IpAddr], f: FloorInput<'_>) -> Result<IpAddr, Denial> {
    if answers.is_empty() && !f.host.is_empty() {
        return Err(Denial::unresolvable(f.host));
    }
    if f.host.is_empty() {
        return Err(Denial::policy(
            kind::SSRF,
            format!("cannot resolve host: {}", f.host),
            DeciderKind::Ssrf,
        ));
    }
    let canon = |ip: &IpAddr| match ip {
        IpAddr::V6(v) => embedded_v4(*v).map(IpAddr::V4).unwrap_or(*ip),
        v => *v,
    };
    if answers
        .iter()
        .any(|a| f.denied_addrs.iter().any(|d| canon(d) == canon(a)))
    {
        return Err(ssrf_denial("blocked denied-domain address", f.host));
    }
    let classes: Vec<AddrClass> = answers.iter().map(|a| classify(*a)).collect();
    if classes.contains(&AddrClass::Internal) {
        return Err(ssrf_denial("blocked internal address", f.host));
    }
    if let Some(i) = classes.iter().position(|c| *c == AddrClass::Loopback) {
        if f.reserved_ports.contains(&f.port) || f.own_port == Some(f.port) {
            return Err(ssrf_denial("blocked loopback address", f.host));
        }
        return Ok(answers[i]);
    }
    if !f.allow_private && classes.contains(&AddrClass::Private) {
        return Err(ssrf_denial("blocked private address", f.host));
    }
    Ok(answers[0])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> AddrClass {
        classify(s.parse().unwrap())
    }
    fn floor(ans: &[&str], port: u16, allow_private: bool) -> Result<IpAddr, Denial> {
        let a: Vec<IpAddr> = ans.iter().map(|s| s.parse().unwrap()).collect();
        check(
            &a,
            FloorInput {
                host: "h.test",
                port,
                allow_private,
                reserved_ports: &[7890],
                own_port: Some(9999),
                denied_addrs: &[],
            },
        )
    }

    #[test]
    fn always_internal_addresses_are_blocked_even_with_allow_private() {
        for a in [
            "169.254.169.254",
            "169.254.170.2",
            "0.0.0.0",
            "0.1.2.3",
            "fe80::1",
            "224.0.0.1",
            "255.255.255.255",
            "fd00:ec2::254",
            "100.100.100.200",
            "ff02::1",
            "::",
            "240.0.0.1",
        ] {
            assert_eq!(c(a), AddrClass::Internal, "{a}");
            let e = floor(&[a], 80, true).unwrap_err();
            assert_eq!(e.reason, "blocked internal address for host: h.test");
        }
    }

    #[test]
    fn embedded_ipv4_forms_are_classified_by_the_ipv4() {
        assert_eq!(c("::ffff:169.254.169.254"), AddrClass::Internal);
        assert_eq!(c("64:ff9b::a9fe:a9fe"), AddrClass::Internal);
        assert_eq!(c("2002:a9fe:a9fe::1"), AddrClass::Internal);
        assert_eq!(c("::ffff:10.0.0.1"), AddrClass::Private);
        assert_eq!(c("::10.0.0.1"), AddrClass::Private);
        assert_eq!(c("::ffff:127.0.0.1"), AddrClass::Loopback);
        assert_eq!(
            c("::ffff:0:a9fe:a9fe"),
            AddrClass::Internal,
            "IPv4-translated"
        );
        assert_eq!(
            c("::ffff:0:10.1.2.3"),
            AddrClass::Private,
            "IPv4-translated"
        );
        assert_eq!(
            c("::ffff:0:127.0.0.1"),
            AddrClass::Loopback,
            "IPv4-translated"
        );
        assert_eq!(
            c("2001:0:4136:e378:8000:63bf:5601:5601"),
            AddrClass::Internal,
            "teredo client 169.254.254.254"
        );
    }

    #[test]
    fn private_ranges_need_allow_private() {
        for a in [
            "10.0.0.1",
            "192.168.1.1",
            "172.16.0.1",
            "100.64.0.1",
            "fc00::1",
            "fec0::1",
            "192.0.0.8",
            "198.18.0.1",
        ] {
            assert_eq!(c(a), AddrClass::Private, "{a}");
            assert_eq!(
                floor(&[a], 80, false).unwrap_err().reason,
                "blocked private address for host: h.test"
            );
            assert!(floor(&[a], 80, true).is_ok());
        }
    }

    #[test]
    fn loopback_is_allowed_except_on_reserved_ports() {
        assert_eq!(
            floor(&["127.0.0.1"], 3000, false).unwrap(),
            "127.0.0.1".parse::<IpAddr>().unwrap()
        );
        assert!(floor(&["::1"], 3000, false).is_ok());
        assert_eq!(
            floor(&["127.0.0.1"], 7890, false).unwrap_err().reason,
            "blocked loopback address for host: h.test"
        );
        assert!(floor(&["127.0.0.1"], 9999, false).is_err());
    }

    #[test]
    fn public_address_passes_and_is_the_one_dialled() {
        assert_eq!(
            floor(&["93.184.216.34", "1.1.1.1"], 80, false)
                .unwrap()
                .to_string(),
            "93.184.216.34"
        );
    }

    #[test]
    fn one_bad_answer_blocks_the_whole_name() {
        assert!(floor(&["93.184.216.34", "10.0.0.1"], 80, false).is_err());
        assert!(floor(&["93.184.216.34", "169.254.169.254"], 80, true).is_err());
    }

    #[test]
    fn empty_answers_cannot_resolve() {
        assert_eq!(
            floor(&[], 80, false).unwrap_err().reason,
            "cannot resolve host: h.test"
        );
    }

    #[test]
    fn denied_domain_addresses_block_raw_ips() {
        let d: Vec<IpAddr> = vec!["93.184.216.34".parse().unwrap()];
        let a: Vec<IpAddr> = vec!["::ffff:93.184.216.34".parse().unwrap()];
        let e = check(
            &a,
            FloorInput {
                host: "x",
                port: 80,
                allow_private: false,
                reserved_ports: &[],
                own_port: None,
                denied_addrs: &d,
            },
        )
        .unwrap_err();
        assert_eq!(e.reason, "blocked denied-domain address for host: x");
    }

    #[test]
    fn refusal_texts_never_name_the_address() {
        for a in ["169.254.169.254", "10.1.2.3"] {
            let e = floor(&[a], 80, false).unwrap_err();
            assert!(!e.reason.contains(a));
            assert_eq!(e.error_kind(), Some(kind::SSRF));
        }
    }

    #[test]
    fn ip_literals_parse_like_inet_aton() {
        let v = |s: &str| parse_ip_literal(s).map(|i| i.to_string());
        assert_eq!(v("2130706433").as_deref(), Some("127.0.0.1"));
        assert_eq!(v("0177.0.0.1").as_deref(), Some("127.0.0.1"));
        assert_eq!(v("0x7f.0.0.1").as_deref(), Some("127.0.0.1"));
        assert_eq!(v("0x7f000001").as_deref(), Some("127.0.0.1"));
        assert_eq!(v("127.1").as_deref(), Some("127.0.0.1"));
        assert_eq!(v("169.254.43518").as_deref(), Some("169.254.169.254"));
        assert_eq!(v("0xA9.0xFE.0xA9.0xFE").as_deref(), Some("169.254.169.254"));
        assert_eq!(v("[::1]").as_deref(), Some("::1"));
        assert_eq!(v("0:0:0:0:0:0:0:1").as_deref(), Some("::1"));
        assert_eq!(v("example.com"), None);
        assert_eq!(v("1.2.3.4.5"), None);
        assert_eq!(v("256.1.1.1"), None);
        assert_eq!(v("09.1.1.1"), None);
        assert_eq!(v("4294967296"), None);
        assert_eq!(v("1e100.net"), None);
        assert_eq!(v("10.0.0.1").as_deref(), Some("10.0.0.1"));
        assert_eq!(v("10.0.0.1.").as_deref(), Some("10.0.0.1"));
        assert_eq!(v("010.0.0.1").as_deref(), Some("8.0.0.1"));
        assert_eq!(v("1..2"), None);
        assert_eq!(v(""), None);
        assert_eq!(v("."), None);
    }
}
