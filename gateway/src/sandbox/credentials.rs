//! Provider routing for sandbox children (decision P8): children see shape-preserving
//! phantom keys and a proxy-served base URL; the proxy swaps a phantom for the real key only
//! on requests to that provider's own hosts.

use parking_lot::RwLock;
use rand::Rng;
use std::collections::BTreeMap;
use std::sync::Arc;
use vis_providers::{Client, Dialect};
use vis_proxy::{Credentials, Principal, ProviderCredential};

/// A phantom with the secret's shape: same prefix up to the last `-`, same length and alphabet.
pub fn phantom_for(secret: &str) -> String {
    let prefix_len = secret
        .rfind('-')
        .map(|i| i + 1)
        .filter(|i| *i <= 16)
        .unwrap_or(0);
    let mut rng = rand::thread_rng();
    let tail: String = secret[prefix_len..]
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
    format!("{}{tail}", &secret[..prefix_len])
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

/// Phantoms are minted once per provider and secret, for the life of the process.
#[derive(Default)]
pub struct ProviderRoutes {
    routed: RwLock<Vec<Routed>>,
}

impl ProviderRoutes {
    /// Rebuilds the list from the provider router (keeps a phantom while its secret is unchanged).
    pub fn refresh(&self, clients: &BTreeMap<String, Arc<Client>>) {
        let old = self.routed.read().clone();
        let mut next = Vec::new();
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
            let phantom = old
                .iter()
                .find(|r| r.cred.provider == *id && r.cred.secret == secret)
                .map(|r| r.cred.phantom.clone())
                .unwrap_or_else(|| phantom_for(&secret));
            next.push(Routed {
                cred: ProviderCredential {
                    provider: id.clone(),
                    hosts: vec![],
                    phantom,
                    secret,
                    base_url: Some(base),
                },
                stem: env_stem(id, &cfg.dialect),
            });
        }
        *self.routed.write() = next;
    }

    /// `<STEM>_API_KEY` = phantom and `<STEM>_BASE_URL` = the proxy route, per provider.
    pub fn child_vars(&self, proxy_port: u16, token: &str) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for r in self.routed.read().iter() {
            out.push((format!("{}_API_KEY", r.stem), r.cred.phantom.clone()));
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
}

/// The proxy's view: the same credentials for every session.
pub struct RoutesCredentials(pub Arc<ProviderRoutes>);

impl Credentials for RoutesCredentials {
    fn credentials(&self, _principal: &Principal) -> Vec<ProviderCredential> {
        self.0
            .routed
            .read()
            .iter()
            .map(|r| r.cred.clone())
            .collect()
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
    fn well_known_providers_keep_their_variable_names() {
        assert_eq!(env_stem("openai", &Dialect::OpenAiChat), "OPENAI");
        assert_eq!(env_stem("anthropic", &Dialect::Anthropic), "ANTHROPIC");
        assert_eq!(env_stem("my-llm", &Dialect::OpenAiChat), "MY_LLM");
    }
}
