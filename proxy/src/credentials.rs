//! Provider credential injection (docs/decisions.md, P8): a request carrying a
//! session's phantom key gets the real secret only when it goes to that
//! provider's own hosts; a phantom sent anywhere else is denied. Runs AFTER
//! the network filters, so filters only ever see the phantom.

use http::header::{HeaderMap, HeaderValue};

use crate::deny::{kind, DeciderKind, Denial};
use crate::policy::HostPattern;
use crate::traits::ProviderCredential;

/// Header names that may carry a provider key.
const KEY_HEADERS: [&str; 3] = ["authorization", "x-api-key", "api-key"];

impl ProviderCredential {
    /// Is `host` (normalized) one of this provider's hosts?
    /// The base URL's host counts as one of the provider's hosts.
    pub fn covers(&self, host: &str) -> bool {
        let base_host = self
            .base_url
            .as_deref()
            .and_then(|u| u.parse::<http::Uri>().ok())
            .and_then(|u| u.host().map(str::to_string));
        self.hosts.iter().chain(base_host.iter()).any(|h| {
            match HostPattern::parse(h, "provider host") {
                Ok((_, p)) => !p.is_any() && p.matches(host),
                Err(_) => false,
            }
        })
    }
}

/// Whether a request with these field names and this target could carry a phantom at all:
/// a look that needs no map, before one is built for [`apply`] (which swaps nothing when
/// this is `false`).
pub(crate) fn could_carry<'a>(mut names: impl Iterator<Item = &'a [u8]>, path: &str) -> bool {
    path.contains("key=")
        || names.any(|n| {
            KEY_HEADERS
                .iter()
                .any(|k| n.eq_ignore_ascii_case(k.as_bytes()))
        })
}

fn carried_in(cred: &ProviderCredential, headers: &HeaderMap, query: Option<&str>) -> bool {
    if cred.phantom.is_empty() {
        return false;
    }
    let in_headers = KEY_HEADERS
        .iter()
        .flat_map(|n| headers.get_all(*n).iter())
        .any(|v| {
            v.to_str()
                .map(|s| s.contains(&cred.phantom))
                .unwrap_or(false)
        });
    in_headers
        || query
            .map(|q| {
                q.split('&')
                    .any(|kv| kv.strip_prefix("key=") == Some(cred.phantom.as_str()))
            })
            .unwrap_or(false)
}

/// Swap phantoms for secrets in place. Returns the provider id that applied,
/// or the denial when a phantom goes to a foreign host. `path` is the
/// request target (path + query) sent upstream. `route`: the provider route the request
/// came through; there only that provider's phantom is swapped, and another provider's
/// phantom is refused even when both providers share a host (the swap is keyed by the
/// provider, never by the host alone).
pub fn apply(
    creds: &[ProviderCredential],
    host: &str,
    route: Option<&str>,
    headers: &mut HeaderMap,
    path: &mut String,
) -> Result<Option<String>, Denial> {
    let mut applied = None;
    for cred in creds {
        let query = path.split_once('?').map(|(_, q)| q.to_string());
        if !carried_in(cred, headers, query.as_deref()) {
            continue;
        }
        if let Some(route) = route.filter(|r| *r != cred.provider) {
            return Err(Denial::policy(
                kind::FILTER,
                format!(
                    "provider credential for {} not allowed on the {route} provider route",
                    cred.provider
                ),
                DeciderKind::Credential,
            ));
        }
        if route.is_none() && !cred.covers(host) {
            return Err(Denial::policy(
                kind::FILTER,
                format!(
                    "provider credential for {} not allowed for host {host}",
                    cred.provider
                ),
                DeciderKind::Credential,
            ));
        }
        for name in KEY_HEADERS {
            let swapped: Vec<HeaderValue> = headers
                .get_all(name)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .filter_map(|s| HeaderValue::from_str(&s.replace(&cred.phantom, &cred.secret)).ok())
                .collect();
            if swapped.is_empty() {
                continue;
            }
            headers.remove(name);
            for v in swapped {
                headers.append(name, v);
            }
        }
        if let Some((p, q)) = path.clone().split_once('?') {
            let q: Vec<String> = q
                .split('&')
                .map(|kv| {
                    if kv == format!("key={}", cred.phantom) {
                        format!("key={}", cred.secret)
                    } else {
                        kv.to_string()
                    }
                })
                .collect();
            *path = format!("{p}?{}", q.join("&"));
        }
        applied = Some(cred.provider.clone());
    }
    Ok(applied)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cred() -> ProviderCredential {
        ProviderCredential {
            provider: "openai".into(),
            hosts: vec!["api.openai.com".into()],
            phantom: "sk-phantom123".into(),
            secret: "sk-real999".into(),
            base_url: None,
        }
    }

    #[test]
    fn phantom_is_swapped_on_the_providers_hosts() {
        let mut h = HeaderMap::new();
        h.insert(
            "authorization",
            HeaderValue::from_static("Bearer sk-phantom123"),
        );
        h.insert("x-api-key", HeaderValue::from_static("sk-phantom123"));
        let mut path = "/v1/models?key=sk-phantom123&x=1".to_string();
        assert_eq!(
            apply(&[cred()], "api.openai.com", None, &mut h, &mut path)
                .unwrap()
                .as_deref(),
            Some("openai")
        );
        assert_eq!(h["authorization"], "Bearer sk-real999");
        assert_eq!(h["x-api-key"], "sk-real999");
        assert_eq!(path, "/v1/models?key=sk-real999&x=1");
    }

    #[test]
    fn phantom_sent_elsewhere_is_denied_and_absent_phantom_is_untouched() {
        let mut h = HeaderMap::new();
        h.insert(
            "authorization",
            HeaderValue::from_static("Bearer sk-phantom123"),
        );
        let mut path = "/".to_string();
        let d = apply(&[cred()], "evil.example", None, &mut h, &mut path).unwrap_err();
        assert_eq!(
            d.reason,
            "provider credential for openai not allowed for host evil.example"
        );
        assert_eq!(d.decider, DeciderKind::Credential);
        let mut h = HeaderMap::new();
        h.insert("authorization", HeaderValue::from_static("Bearer mine"));
        assert_eq!(
            apply(&[cred()], "evil.example", None, &mut h, &mut path).unwrap(),
            None
        );
        assert_eq!(h["authorization"], "Bearer mine");
    }

    #[test]
    fn a_phantom_sent_through_another_providers_route_is_refused_even_on_a_shared_host() {
        let shared = "llm.local.test";
        let openai = ProviderCredential {
            hosts: vec![shared.into()],
            ..cred()
        };
        let anthropic = ProviderCredential {
            provider: "anthropic".into(),
            hosts: vec![shared.into()],
            phantom: "sk-ant-phantom456".into(),
            secret: "sk-ant-real000".into(),
            base_url: None,
        };
        let creds = [openai, anthropic];
        let mut h = HeaderMap::new();
        h.insert("x-api-key", HeaderValue::from_static("sk-phantom123"));
        let mut path = "/v1/messages".to_string();
        let d = apply(&creds, shared, Some("anthropic"), &mut h, &mut path).unwrap_err();
        assert_eq!(
            d.reason,
            "provider credential for openai not allowed on the anthropic provider route"
        );
        assert_eq!(h["x-api-key"], "sk-phantom123", "nothing was swapped");
        // the route's own phantom is swapped
        let mut h = HeaderMap::new();
        h.insert("x-api-key", HeaderValue::from_static("sk-ant-phantom456"));
        assert_eq!(
            apply(&creds, shared, Some("anthropic"), &mut h, &mut path)
                .unwrap()
                .as_deref(),
            Some("anthropic")
        );
        assert_eq!(h["x-api-key"], "sk-ant-real000");
    }
}
