//! The interception CA (docs/decisions.md, P5): one ephemeral ECDSA P-256 CA per
//! process, leaves per name in a bounded LRU, and the upstream client config.

use std::net::IpAddr;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use lru::LruCache;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType, SerialNumber,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::sign::CertifiedKey;
use time::{Duration as TDuration, OffsetDateTime};

use crate::error::ProxyError;

/// ring's provider with `TLS13_AES_128_GCM_SHA256` first: an intercepted connection runs
/// two TLS 1.3 handshakes, and a SHA-256 key schedule costs them about half the hashing of
/// `TLS13_AES_256_GCM_SHA384`, ring's first choice (docs/benchmarks.md, issue 27).
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    static P: std::sync::OnceLock<Arc<rustls::crypto::CryptoProvider>> = std::sync::OnceLock::new();
    P.get_or_init(|| {
        let mut p = rustls::crypto::ring::default_provider();
        let first = rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256;
        p.cipher_suites.sort_by_key(|s| s.suite() != first.suite());
        Arc::new(p)
    })
    .clone()
}

fn random_serial() -> SerialNumber {
    let a = uuid::Uuid::new_v4();
    let b = uuid::Uuid::new_v4();
    let mut bytes = [0u8; 20];
    bytes[..16].copy_from_slice(a.as_bytes());
    bytes[16..].copy_from_slice(&b.as_bytes()[..4]);
    bytes[0] &= 0x7f; // positive, ≤ 159 bits
    SerialNumber::from_slice(&bytes)
}

fn window(p: &mut CertificateParams) {
    let now = OffsetDateTime::now_utc();
    p.not_before = now - TDuration::days(1);
    p.not_after = now + TDuration::days(825);
}

/// The ephemeral CA and its leaf cache.
pub struct CertAuthority {
    issuer: Issuer<'static, KeyPair>,
    ca_der: CertificateDer<'static>,
    ca_pem: String,
    cache: Mutex<LruCache<String, Arc<CertifiedKey>>>,
    /// Server configs per name (same bound as the leaves).
    configs: Mutex<LruCache<String, Arc<rustls::ServerConfig>>>,
}

impl std::fmt::Debug for CertAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertAuthority").finish_non_exhaustive()
    }
}

impl CertAuthority {
    /// Mint a new CA (`CN=vis ephemeral CA,O=vis`).
    pub fn new(cache_size: usize) -> Result<Self, ProxyError> {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
        let mut p = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "vis ephemeral CA");
        dn.push(DnType::OrganizationName, "vis");
        p.distinguished_name = dn;
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        p.serial_number = Some(random_serial());
        window(&mut p);
        let cert = p.self_signed(&key)?;
        let cap = NonZeroUsize::new(cache_size.max(1)).unwrap_or(NonZeroUsize::MIN);
        Ok(CertAuthority {
            ca_der: cert.der().clone(),
            ca_pem: cert.pem(),
            issuer: Issuer::new(p, key),
            cache: Mutex::new(LruCache::new(cap)),
            configs: Mutex::new(LruCache::new(cap)),
        })
    }

    /// The CA certificate, PEM.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The CA certificate, DER.
    pub fn ca_der(&self) -> &CertificateDer<'static> {
        &self.ca_der
    }

    /// Number of cached leaves.
    pub fn cached_leaves(&self) -> usize {
        self.cache.lock().map(|c| c.len()).unwrap_or(0)
    }

    /// The leaf for `name` (lower-cased), minted on first use.
    pub fn leaf(&self, name: &str) -> Result<Arc<CertifiedKey>, ProxyError> {
        let name = name.trim().trim_end_matches('.').to_ascii_lowercase();
        if let Ok(mut c) = self.cache.lock() {
            if let Some(k) = c.get(&name) {
                return Ok(k.clone());
            }
        }
        let ck = Arc::new(self.mint(&name)?);
        if let Ok(mut c) = self.cache.lock() {
            c.put(name, ck.clone());
        }
        Ok(ck)
    }

    fn mint(&self, name: &str) -> Result<CertifiedKey, ProxyError> {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
        let mut p = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, name);
        p.distinguished_name = dn;
        let bare = name.trim_start_matches('[').trim_end_matches(']');
        p.subject_alt_names = vec![match bare.parse::<IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName(name.try_into()?),
        }];
        p.is_ca = IsCa::ExplicitNoCa;
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        p.serial_number = Some(random_serial());
        window(&mut p);
        let cert = p.signed_by(&key, &self.issuer)?;
        let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let signer = provider().key_provider.load_private_key(key_der)?;
        Ok(CertifiedKey::new(
            vec![cert.der().clone(), self.ca_der.clone()],
            signer,
        ))
    }

    /// Server config presenting the leaf for `name`, ALPN h2 + http/1.1.
    /// Cached per name, like the leaf it presents.
    pub fn server_config(&self, name: &str) -> Result<Arc<rustls::ServerConfig>, ProxyError> {
        let key = name.trim().trim_end_matches('.').to_ascii_lowercase();
        if let Ok(mut c) = self.configs.lock() {
            if let Some(cfg) = c.get(&key) {
                return Ok(cfg.clone());
            }
        }
        let cfg = self.build_server_config(&key)?;
        if let Ok(mut c) = self.configs.lock() {
            c.put(key, cfg.clone());
        }
        Ok(cfg)
    }

    fn build_server_config(&self, name: &str) -> Result<Arc<rustls::ServerConfig>, ProxyError> {
        let ck = self.leaf(name)?;
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(Fixed(ck)));
        cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        // the proxy's suite order (AES-128-GCM first), not the client's (mostly AES-256 first)
        cfg.ignore_client_order = true;
        Ok(Arc::new(cfg))
    }
}

#[derive(Debug)]
struct Fixed(Arc<CertifiedKey>);

impl rustls::server::ResolvesServerCert for Fixed {
    fn resolve(&self, _: rustls::server::ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

/// PEM-encode one DER certificate (64-column Base64).
pub fn pem_encode(der: &[u8]) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(chunk));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

/// Upstream TLS client config: system roots (optional) + extra roots,
/// hostname verification on, ALPN h2 + http/1.1. Also returns the roots it
/// trusts (for the children's bundle). Loading the system roots reads files:
/// call from a blocking context.
pub fn upstream_client_config(
    use_system_roots: bool,
    extra: &[CertificateDer<'static>],
) -> Result<(Arc<rustls::ClientConfig>, Vec<CertificateDer<'static>>), ProxyError> {
    let mut roots = rustls::RootCertStore::empty();
    let mut used: Vec<CertificateDer<'static>> = Vec::new();
    if use_system_roots {
        let found = rustls_native_certs::load_native_certs();
        for c in found.certs {
            if roots.add(c.clone()).is_ok() && !used.contains(&c) {
                used.push(c);
            }
        }
    }
    for c in extra {
        roots
            .add(c.clone())
            .map_err(|e| ProxyError::Tls(format!("extra root rejected: {e}")))?;
        if !used.contains(c) {
            used.push(c.clone());
        }
    }
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok((Arc::new(cfg), used))
}

/// `cfg` offering HTTP/1.1 only in ALPN (same roots, same session cache for resumption):
/// for an upstream connection whose requests are relayed as HTTP/1 bytes.
pub fn http1_only(cfg: &rustls::ClientConfig) -> rustls::ClientConfig {
    let mut c = cfg.clone();
    c.alpn_protocols = vec![b"http/1.1".to_vec()];
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaves_are_cached_per_name_and_bounded() {
        let ca = CertAuthority::new(2).unwrap();
        let a = ca.leaf("Example.COM").unwrap();
        let b = ca.leaf("example.com").unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        ca.leaf("b.test").unwrap();
        ca.leaf("c.test").unwrap();
        assert_eq!(ca.cached_leaves(), 2);
        let c1 = ca.server_config("B.test").unwrap();
        let c2 = ca.server_config("b.test.").unwrap();
        assert!(Arc::ptr_eq(&c1, &c2));
        assert_eq!(
            c1.alpn_protocols,
            vec![b"h2".to_vec(), b"http/1.1".to_vec()]
        );
        assert!(ca.ca_pem().starts_with("-----BEGIN CERTIFICATE-----"));
        let pem = pem_encode(ca.ca_der());
        assert!(pem.lines().all(|l| l.len() <= 64));
        let back = crate::settings::certs_from_pem(pem.as_bytes()).unwrap();
        assert_eq!(&back[0], ca.ca_der());
    }

    #[test]
    fn an_intercepted_handshake_runs_aes_128_gcm_sha256_though_the_client_prefers_aes_256() {
        let ca = CertAuthority::new(2).unwrap();
        let server_cfg = ca.server_config("a.test").unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca.ca_der().clone()).unwrap();
        // a client with ring's default order (AES-256-GCM-SHA384 first), as curl and Python send
        let client_cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        let name = rustls::pki_types::ServerName::try_from("a.test").unwrap();
        let mut client = rustls::ClientConnection::new(Arc::new(client_cfg), name).unwrap();
        let mut server = rustls::ServerConnection::new(server_cfg).unwrap();
        for _ in 0..10 {
            if !client.is_handshaking() && !server.is_handshaking() {
                break;
            }
            let mut wire = Vec::new();
            client.write_tls(&mut wire).unwrap();
            server.read_tls(&mut wire.as_slice()).unwrap();
            server.process_new_packets().unwrap();
            let mut back = Vec::new();
            server.write_tls(&mut back).unwrap();
            client.read_tls(&mut back.as_slice()).unwrap();
            client.process_new_packets().unwrap();
        }
        let suite = server.negotiated_cipher_suite().map(|s| s.suite());
        assert_eq!(
            suite,
            Some(rustls::CipherSuite::TLS13_AES_128_GCM_SHA256),
            "a SHA-256 key schedule"
        );
        // and the proxy's own upstream client asks for it first
        assert_eq!(
            provider().cipher_suites[0].suite(),
            rustls::CipherSuite::TLS13_AES_128_GCM_SHA256
        );
    }

    #[test]
    fn ip_literal_leaves_use_ip_sans() {
        let ca = CertAuthority::new(4).unwrap();
        assert_eq!(ca.leaf("127.0.0.1").unwrap().cert.len(), 2);
        assert_eq!(ca.leaf("::1").unwrap().cert.len(), 2);
    }
}
