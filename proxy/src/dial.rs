//! Resolve once, classify every answer, dial only the validated address.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::net::TcpStream;

use crate::deny::{kind, DeciderKind, Denial, DenyClass};
use crate::ssrf::{self, parse_ip_literal, FloorInput};
use crate::traits::{Dialer, Principal, Resolver};

/// Names of metadata services refused at the floor whatever they resolve to.
const METADATA_NAMES: [&str; 4] = [
    "metadata.google.internal",
    "metadata.goog",
    "metadata",
    "instance-data",
];

/// Cache of resolved denied names: name → (resolved at, addresses).
pub type DeniedCache = Mutex<HashMap<String, (Instant, Vec<IpAddr>)>>;

/// Addresses of the policy's concrete denied entries: its IP literals, and what its names
/// resolve to (short-TTL cache). Borrowed from the policy when it names no host.
async fn denied_addrs<'p>(
    resolver: &dyn Resolver,
    cache: Option<(&DeniedCache, Duration)>,
    principal: &'p Principal,
) -> Cow<'p, [IpAddr]> {
    let ips = principal.policy.denied_ips();
    if principal.policy.denied_names().is_empty() {
        return Cow::Borrowed(ips);
    }
    let mut out = ips.to_vec();
    for name in principal.policy.denied_names() {
        let cached = cache.and_then(|(c, ttl)| {
            c.lock().ok().and_then(|c| {
                c.get(name)
                    .filter(|(t, _)| t.elapsed() < ttl)
                    .map(|(_, v)| v.clone())
            })
        });
        let addrs = match cached {
            Some(v) => v,
            None => {
                let v = resolver.resolve(name, 443).await.unwrap_or_default();
                if let Some((c, _)) = cache {
                    if let Ok(mut c) = c.lock() {
                        c.insert(name.clone(), (Instant::now(), v.clone()));
                    }
                }
                v
            }
        };
        out.extend(addrs);
    }
    Cow::Owned(out)
}

/// The SSRF floor for one target: resolve once, classify every answer, return the one
/// address that may be dialled. `cache` keeps what the policy's denied names resolve to;
/// `own_port` is the proxy's port (always reserved).
pub async fn validate_with(
    resolver: &dyn Resolver,
    cache: Option<(&DeniedCache, Duration)>,
    own_port: Option<u16>,
    principal: &Principal,
    host: &str,
    port: u16,
) -> Result<SocketAddr, Denial> {
    if METADATA_NAMES.contains(&host) {
        return Err(Denial::policy(
            kind::SSRF,
            format!("blocked internal address for host: {host}"),
            DeciderKind::Ssrf,
        ));
    }
    let answers = match parse_ip_literal(host) {
        Some(ip) => vec![ip],
        None if host.is_empty() => vec![],
        None => resolver.resolve(host, port).await.unwrap_or_default(),
    };
    let denied = denied_addrs(resolver, cache, principal).await;
    let ip = ssrf::check(
        &answers,
        FloorInput {
            host,
            port,
            allow_private: principal.policy.allow_private(),
            reserved_ports: &principal.reserved_ports,
            own_port,
            denied_addrs: &denied,
        },
    )?;
    Ok(SocketAddr::new(ip, port))
}

/// Map a connect error to its denial class.
pub fn classify_io(e: &io::Error) -> DenyClass {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => DenyClass::UpstreamRefused,
        io::ErrorKind::TimedOut => DenyClass::UpstreamTimeout,
        _ => DenyClass::UpstreamUnreachable,
    }
}

/// Dial a validated address with the connect timeout.
pub(crate) async fn connect(
    dialer: &dyn Dialer,
    timeout: Duration,
    addr: SocketAddr,
) -> Result<TcpStream, Denial> {
    match tokio::time::timeout(timeout, dialer.dial(addr)).await {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => Err(Denial::upstream(classify_io(&e), e)),
        Err(_) => Err(Denial::upstream(
            DenyClass::UpstreamTimeout,
            "connect timed out",
        )),
    }
}
