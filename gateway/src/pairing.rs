//! Pairing (docs/decisions.md, G5): the `vis://gateway?…` link, host preference, and a terminal QR code.

use std::net::IpAddr;

fn enc(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// Whether a bind host is loopback (pairing a phone with it cannot work).
pub fn is_loopback_host(host: &str) -> bool {
    host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

fn rank(ip: &IpAddr) -> u8 {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            if o[0] == 100 && (64..128).contains(&o[1]) {
                0
            } else if v4.is_private() {
                1
            } else {
                2
            }
        }
        IpAddr::V6(_) => 3,
    }
}

/// Candidate URLs for a bind: for a wildcard bind, this machine's interface addresses in
/// preference order (Tailscale, LAN, others; link-local and loopback dropped).
pub fn urls(host: &str, port: u16) -> Vec<String> {
    let wildcard = host == "0.0.0.0" || host == "::";
    if !wildcard {
        return vec![format!("http://{}:{port}", bracket(host))];
    }
    let mut ips: Vec<IpAddr> = if_addrs::get_if_addrs()
        .unwrap_or_default()
        .into_iter()
        .map(|i| i.ip())
        .filter(|ip| !ip.is_loopback() && !is_link_local(ip))
        .collect();
    ips.sort_by_key(rank);
    ips.dedup();
    ips.iter()
        .map(|ip| format!("http://{}:{port}", bracket(&ip.to_string())))
        .collect()
}

fn is_link_local(ip: &IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) == 0xfe80,
    }
}

fn bracket(host: &str) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_string()
    }
}

/// `vis://gateway?url=…[&alt=…][&token=…]`.
pub fn link(urls: &[String], token: Option<&str>) -> Option<String> {
    let (first, rest) = urls.split_first()?;
    let mut s = format!("vis://gateway?url={}", enc(first));
    if !rest.is_empty() {
        s.push_str(&format!("&alt={}", enc(&rest.join(","))));
    }
    if let Some(t) = token {
        s.push_str(&format!("&token={}", enc(t)));
    }
    Some(s)
}

/// The link as a QR code drawn with Unicode half blocks.
pub fn qr(text: &str) -> Option<String> {
    let code = qrcode::QrCode::new(text.as_bytes()).ok()?;
    Some(
        code.render::<qrcode::render::unicode::Dense1x2>()
            .quiet_zone(true)
            .build(),
    )
}

/// The refusal printed for a loopback bind.
pub const LOOPBACK_REFUSAL: &str =
    "refusing to pair: the gateway is bound to a loopback address, which a phone cannot reach.\n\
Restart it on a reachable address, e.g. `vis-gateway start --pair` (binds 0.0.0.0 with a token) \
or `vis-gateway start --host <tailscale-or-lan-ip> --pair`.";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_link_encodes_url_alternatives_and_token() {
        let l = link(
            &[
                "http://100.64.1.2:7890".into(),
                "http://192.168.1.5:7890".into(),
            ],
            Some("t k"),
        )
        .unwrap();
        assert_eq!(l, "vis://gateway?url=http%3A%2F%2F100.64.1.2%3A7890&alt=http%3A%2F%2F192.168.1.5%3A7890&token=t+k");
    }

    #[test]
    fn tailscale_ranks_before_lan_before_public() {
        let ts: IpAddr = "100.100.1.1".parse().unwrap();
        let lan: IpAddr = "192.168.1.2".parse().unwrap();
        let other: IpAddr = "8.8.8.8".parse().unwrap();
        assert!(rank(&ts) < rank(&lan) && rank(&lan) < rank(&other));
    }

    #[test]
    fn loopback_hosts_are_recognised() {
        assert!(
            is_loopback_host("127.0.0.1")
                && is_loopback_host("::1")
                && is_loopback_host("localhost")
        );
        assert!(!is_loopback_host("0.0.0.0"));
    }

    #[test]
    fn a_qr_code_renders() {
        assert!(qr("vis://gateway?url=x").unwrap().contains('█'));
    }
}
