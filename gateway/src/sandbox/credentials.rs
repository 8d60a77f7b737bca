//! Provider routing for sandbox children (docs/decisions.md, P8): children see shape-preserving
//! phantom keys and a proxy-served base URL; the proxy swaps a phantom for the real key only
//! on requests to that provider's own hosts.

use parking_lot::RwLock;
use rand::Rng;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use vis_providers::{Client, Dialect};
use vis_proxy::{Credentials, Principal, ProviderCredential};

/// Key prefixes of well-known providers, kept verbatim in a phantom (longest first).
const KNOWN_PREFIXES: [&str; 18] = [
    "sk-ant-admin01-",
    "sk-ant-api03-",
    "sk-ant-oat01-",
    "sk-svcacct-",
    "sk-or-v1-",
    "sk-admin-",
    "sk-proj-",
    "sk-ant-",
    "nvapi-",
    "pplx-",
    "csk-",
    "gsk_",
    "xai-",
    "sk-",
    "sk_",
    "hf_",
    "r8_",
    "AIza",
];

/// The part of a key that names its kind rather than its secret: a well-known provider
/// prefix, else up to two short leading segments like `abc-` or `key12_` (lower-case
/// letters, then at most two digits). Everything after it is secret.
pub fn key_prefix(secret: &str) -> &str {
    if let Some(p) = KNOWN_PREFIXES
        .iter()
        .find(|p| secret.starts_with(**p) && secret.len() > p.len())
    {
        return &secret[..p.len()];
    }
    let bytes = secret.as_bytes();
    let mut end = 0;
    for _ in 0..2 {
        let seg = &bytes[end..];
        let letters = seg.iter().take_while(|b| b.is_ascii_lowercase()).count();
        let digits = seg[letters..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        let len = letters + digits;
        let sep = seg.get(len).copied();
        if !(2..=5).contains(&letters) || digits > 2 || !matches!(sep, Some(b'-' | b'_')) {
            break;
        }
        end += len + 1;
    }
    // never the whole key
    if end >= secret.len() {
        return "";
    }
    &secret[..end]
}

/// A phantom with the secret's shape: the same prefix ([`key_prefix`]), then the same
/// length and character classes (digits, lower- and upper-case letters; any other
/// character kept), random.
pub fn phantom_for(secret: &str) -> String {
    let prefix = key_prefix(secret);
    let mut rng = rand::thread_rng();
    let tail: String = secret[prefix.len()..]
        .chars()
        .map(|c| {
            if c.is_ascii_digit() {
                char::from(b'0' + rng.gen_range(0..10))
            } else if c.is_ascii_alphabetic() {
                let base = if c.is_ascii_uppercase() { b'A' } else { b'a' };
                char::from(base + rng.gen_range(0..26))
            } else {
                c
            }
        })
        .collect();
    format!("{prefix}{tail}")
}

/// The environment variable stem of a provider (`OPENAI`, `ANTHROPIC`, or the id upper-cased).
pub fn env_stem(id: &str, dialect: &Dialect) -> String {
    match (id, dialect) {
        ("openai", _) => "OPENAI".into(),
        ("anthropic", _) | (_, Dialect::Anthropic) if id == "anthropic" => "ANTHROPIC".into(),
        _ => id
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_uppercase()
                } else {
                    '_'
                }
            })
            .collect(),
    }
}

/// One provider as the sandbox sees it.
#[derive(Clone)]
pub struct Routed {
    pub cred: ProviderCredential,
    pub stem: String,
}

/// The configured providers, and the phantoms minted for them: one per provider per
/// session (a phantom names the session that holds it, and one session's phantom is
/// nothing to another's proxy token).
#[derive(Default)]
pub struct ProviderRoutes {
    routed: RwLock<Vec<Routed>>,
    /// session → provider id → phantom.
    phantoms: RwLock<HashMap<String, HashMap<String, String>>>,
    /// session → the list the proxy gets on each of its requests, built on first use. Built
    /// and stored under this lock, and emptied (for a session, or whole) only after the
    /// routes or phantoms it was built from change: a list built from what was there
    /// before a change is stored before the change's emptying, never after it.
    lists: RwLock<HashMap<String, Arc<[ProviderCredential]>>>,
}

impl ProviderRoutes {
    /// Rebuilds the list from the provider router. Sessions keep their phantoms while a
    /// provider's secret is unchanged; a changed secret gets new phantoms.
    pub fn refresh(&self, clients: &BTreeMap<String, Arc<Client>>) {
        let old = self.routed.read().clone();
        let mut next = Vec::new();
        let mut changed = Vec::new();
        for (id, c) in clients {
            let cfg = c.config();
            let Some(secret) = cfg.api_key.clone().filter(|k| !k.is_empty()) else {
                continue;
            };
            let anthropic = matches!(cfg.dialect, Dialect::Anthropic);
            let base = if anthropic {
                cfg.base_url.trim_end_matches("/v1").to_string()
            } else {
                cfg.base_url.clone()
            };
            if !old
                .iter()
                .any(|r| r.cred.provider == *id && r.cred.secret == secret)
            {
                changed.push(id.clone());
            }
            next.push(Routed {
                cred: ProviderCredential {
                    provider: id.clone(),
                    hosts: vec![],
                    phantom: String::new(),
                    secret,
                    base_url: Some(base),
                },
                stem: env_stem(id, &cfg.dialect),
            });
        }
        *self.routed.write() = next;
        if !changed.is_empty() {
            for per in self.phantoms.write().values_mut() {
                per.retain(|p, _| !changed.contains(p));
            }
        }
        self.lists.write().clear();
    }

    /// The session's phantom for `provider`, minted on first use.
    fn phantom(&self, sid: &str, r: &Routed) -> String {
        if let Some(p) = self
            .phantoms
            .read()
            .get(sid)
            .and_then(|m| m.get(&r.cred.provider))
        {
            return p.clone();
        }
        let minted = self
            .phantoms
            .write()
            .entry(sid.to_string())
            .or_default()
            .entry(r.cred.provider.clone())
            .or_insert_with(|| phantom_for(&r.cred.secret))
            .clone();
        self.lists.write().remove(sid);
        minted
    }

    /// Forgets a session's phantoms (its token was revoked).
    pub fn forget(&self, sid: &str) {
        self.phantoms.write().remove(sid);
        self.lists.write().remove(sid);
    }

    /// `<STEM>_API_KEY` = the session's phantom and `<STEM>_BASE_URL` = the proxy route,
    /// per provider.
    pub fn child_vars(&self, sid: &str, proxy_port: u16, token: &str) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let routed = self.routed.read().clone();
        for r in &routed {
            out.push((format!("{}_API_KEY", r.stem), self.phantom(sid, r)));
            out.push((
                format!("{}_BASE_URL", r.stem),
                format!(
                    "http://127.0.0.1:{proxy_port}/_vis/provider/{}/{token}",
                    r.cred.provider
                ),
            ));
        }
        out
    }

    /// The credentials a session's requests may carry: its own phantoms only. Kept per
    /// session once built (the proxy asks on every request).
    pub fn for_session(&self, sid: &str) -> Arc<[ProviderCredential]> {
        if let Some(list) = self.lists.read().get(sid) {
            return list.clone();
        }
        if self.routed.read().is_empty() {
            return vis_proxy::no_credentials();
        }
        let mut lists = self.lists.write();
        let list: Arc<[ProviderCredential]> = self.build(sid).into();
        lists.insert(sid.to_string(), list.clone());
        list
    }

    fn build(&self, sid: &str) -> Vec<ProviderCredential> {
        let routed = self.routed.read();
        let phantoms = self.phantoms.read();
        let mine = phantoms.get(sid);
        routed
            .iter()
            .map(|r| {
                let mut c = r.cred.clone();
                c.phantom = mine
                    .and_then(|m| m.get(&r.cred.provider))
                    .cloned()
                    .unwrap_or_default();
                c
            })
            .collect()
    }
}

/// The proxy's view: each session's own phantoms.
pub struct RoutesCredentials(pub Arc<ProviderRoutes>);

impl Credentials for RoutesCredentials {
    fn credentials(&self, principal: &Principal) -> Arc<[ProviderCredential]> {
        self.0.for_session(&principal.session_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_phantom_keeps_the_prefix_length_and_alphabet_but_not_the_secret() {
        let secret = "sk-ant-api03-AbCdEf0123456789xyz";
        let p = phantom_for(secret);
        assert_eq!(p.len(), secret.len());
        assert!(p.starts_with("sk-ant-api03-"));
        assert_ne!(p, secret);
        assert!(p
            .chars()
            .zip(secret.chars())
            .all(|(a, b)| a.is_ascii_digit() == b.is_ascii_digit()));
    }

    #[test]
    fn real_key_shapes_keep_their_provider_prefix() {
        for (secret, prefix) in [
            (
                "sk-ant-api03-Qx9_fK2-ab3dE_FGhij-KLmno9pQRsT-uvWXyz0123AA",
                "sk-ant-api03-",
            ),
            ("sk-proj-Ab3dEfGh-IjKlMnOp_qrStUv", "sk-proj-"),
            ("sk-AbCdEfGhIjKlMnOpQrSt-uVwXyZ", "sk-"),
            ("gsk_AbCdEf0123456789", "gsk_"),
            ("xai-AbCdEf0123456789", "xai-"),
            ("AIzaSyAbCdEf0123456789", "AIza"),
            ("acme-live_AbCdEf0123", "acme-live_"),
            ("Zz9-AbCdEf", ""),
        ] {
            assert_eq!(key_prefix(secret), prefix, "{secret}");
            let p = phantom_for(secret);
            assert!(p.starts_with(prefix), "{secret} → {p}");
            assert_eq!(p.len(), secret.len());
            assert_ne!(p, secret);
            assert!(
                p.chars().zip(secret.chars()).all(|(a, b)| {
                    a.is_ascii_digit() == b.is_ascii_digit()
                        && a.is_ascii_uppercase() == b.is_ascii_uppercase()
                        && a.is_ascii_lowercase() == b.is_ascii_lowercase()
                }),
                "{secret} → {p}"
            );
        }
    }

    fn routes_with(ids: &[(&str, &str)]) -> ProviderRoutes {
        let r = ProviderRoutes::default();
        *r.routed.write() = ids
            .iter()
            .map(|(id, secret)| Routed {
                cred: ProviderCredential {
                    provider: id.to_string(),
                    hosts: vec![],
                    phantom: String::new(),
                    secret: secret.to_string(),
                    base_url: Some("http://127.0.0.1:9/v1".into()),
                },
                stem: id.to_ascii_uppercase(),
            })
            .collect();
        r
    }

    #[test]
    fn each_session_gets_its_own_phantom_and_sees_only_its_own() {
        let r = routes_with(&[("openai", "sk-AbCdEfGhIjKlMnOp0123")]);
        let a = r.child_vars("a", 1, "tok-a");
        let b = r.child_vars("b", 1, "tok-b");
        assert_ne!(a[0].1, b[0].1, "one phantom per session");
        assert_eq!(r.child_vars("a", 1, "tok-a")[0].1, a[0].1, "stable");
        assert_eq!(r.for_session("a")[0].phantom, a[0].1);
        assert_eq!(r.for_session("b")[0].phantom, b[0].1);
        r.forget("a");
        assert_eq!(r.for_session("a")[0].phantom, "");
    }

    #[test]
    fn a_sessions_list_is_shared_until_its_phantoms_change() {
        let r = routes_with(&[("openai", "sk-AbCdEfGhIjKlMnOp0123")]);
        let before = r.for_session("a");
        assert_eq!(before[0].phantom, "", "no phantom minted yet");
        assert!(
            Arc::ptr_eq(&before, &r.for_session("a")),
            "handed out, not rebuilt"
        );
        let minted = r.child_vars("a", 1, "tok-a")[0].1.clone();
        let after = r.for_session("a");
        assert_eq!(
            after[0].phantom, minted,
            "a new phantom empties the kept list"
        );
        assert!(Arc::ptr_eq(&after, &r.for_session("a")));
        assert!(
            ProviderRoutes::default().for_session("a").is_empty(),
            "no providers, no list"
        );
    }

    #[test]
    fn well_known_providers_keep_their_variable_names() {
        assert_eq!(env_stem("openai", &Dialect::OpenAiChat), "OPENAI");
        assert_eq!(env_stem("anthropic", &Dialect::Anthropic), "ANTHROPIC");
        assert_eq!(env_stem("my-llm", &Dialect::OpenAiChat), "MY_LLM");
    }
}
