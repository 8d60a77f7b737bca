//! What the *Add provider* picker offers: the built-in catalog (OpenAI, Anthropic, local
//! OpenAI-compatible servers) and the presets Provider extensions declare.

use crate::extensions::ProviderInfo;
use serde_json::Value;
use vis_companion_api::providers::{AuthKind, ProviderPreset};

/// One built-in preset: `(id, label, auth, is_local, base_url, api_style, models)`.
type Builtin = (
    &'static str,
    &'static str,
    AuthKind,
    bool,
    &'static str,
    &'static str,
    &'static [&'static str],
);

const BUILTIN: &[Builtin] = &[
    (
        "openai",
        "OpenAI",
        AuthKind::ApiKey,
        false,
        "https://api.openai.com/v1",
        "openai",
        &["gpt-4.1", "gpt-4.1-mini", "o4-mini"],
    ),
    (
        "anthropic",
        "Anthropic",
        AuthKind::ApiKey,
        false,
        "https://api.anthropic.com/v1",
        "anthropic",
        &["claude-sonnet-4-5", "claude-opus-4-1", "claude-haiku-4-5"],
    ),
    (
        "openai-compatible",
        "OpenAI-compatible server",
        AuthKind::ApiKey,
        true,
        "http://localhost:8000/v1",
        "openai",
        &[],
    ),
    (
        "ollama",
        "Ollama",
        AuthKind::None,
        true,
        "http://localhost:11434/v1",
        "openai",
        &[],
    ),
    (
        "llama-cpp",
        "llama.cpp server",
        AuthKind::None,
        true,
        "http://localhost:8080/v1",
        "openai",
        &[],
    ),
    (
        "vllm",
        "vLLM",
        AuthKind::None,
        true,
        "http://localhost:8000/v1",
        "openai",
        &[],
    ),
    (
        "lmstudio",
        "LM Studio",
        AuthKind::None,
        true,
        "http://localhost:1234/v1",
        "openai",
        &[],
    ),
];

/// Every built-in preset.
pub fn builtin() -> Vec<ProviderPreset> {
    BUILTIN
        .iter()
        .map(
            |(id, label, auth, local, base, style, models)| ProviderPreset {
                id: id.to_string(),
                label: label.to_string(),
                auth_kind: *auth,
                is_local: *local,
                base_url: Some(base.to_string()),
                api_style: Some(style.to_string()),
                models: models.iter().map(|m| m.to_string()).collect(),
                extension: None,
            },
        )
        .collect()
}

/// A provider's name for people: the label it was saved with, else its built-in preset's,
/// else its id.
pub fn label_of(id: &str, saved: &crate::provider_admin::saved::Saved) -> String {
    saved
        .get(id)
        .map(|s| s.label.clone())
        .filter(|l| !l.trim().is_empty())
        .or_else(|| builtin().into_iter().find(|p| p.id == id).map(|p| p.label))
        .unwrap_or_else(|| id.to_string())
}

/// The preset a Provider extension declares, when it may be added from the phone (it has a
/// label, is not hidden and its runtime does not issue the credential itself).
pub fn of_extension(p: &ProviderInfo) -> Option<ProviderPreset> {
    let hidden = p.preset.get("is_hidden").and_then(Value::as_bool) == Some(true);
    if p.label.trim().is_empty() || hidden || p.is_managed {
        return None;
    }
    let text = |k: &str| {
        p.preset
            .get(k)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    let api_style = text("api_style").map(|s| {
        match crate::extensions::dialect_of(&s) {
            Some(vis_providers::Dialect::Anthropic) => "anthropic",
            _ => "openai",
        }
        .to_string()
    });
    let base_url = text("base_url");
    Some(ProviderPreset {
        id: p.id.clone(),
        label: p.label.clone(),
        auth_kind: if p.slots.iter().any(|s| s == "auth_fn") {
            AuthKind::Oauth
        } else {
            AuthKind::ApiKey
        },
        is_local: base_url.as_deref().is_some_and(is_loopback_url),
        base_url,
        api_style,
        models: p
            .preset
            .get("default_models")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default(),
        extension: Some(p.extension.clone()),
    })
}

/// Whether a URL names this machine (`localhost`, `127.x`, `[::1]`).
pub fn is_loopback_url(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
    let host = if host.starts_with('[') {
        host.split(']').next().unwrap_or("").trim_start_matches('[')
    } else {
        host.split(':').next().unwrap_or("")
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// A base URL the gateway can use: `http(s)://host[:port][/path]`, no credentials, no
/// query. The message names the field.
pub fn check_base_url(url: &str) -> Result<String, String> {
    let url = url.trim();
    let parsed =
        reqwest::Url::parse(url).map_err(|e| format!("base_url {url:?} is not a URL: {e}"))?;
    if parsed.scheme() != "http" && parsed.scheme() != "https" {
        return Err(format!(
            "base_url {url:?} must start with http:// or https://"
        ));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(format!("base_url {url:?} has no host"));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err("base_url must not carry credentials; give the key as api_key".to_string());
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(format!(
            "base_url {url:?} must not have a query or fragment"
        ));
    }
    Ok(url.trim_end_matches('/').to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_catalog_has_the_cloud_and_local_presets() {
        let ids: Vec<String> = builtin().into_iter().map(|p| p.id).collect();
        for id in ["openai", "anthropic", "ollama", "llama-cpp", "vllm"] {
            assert!(ids.iter().any(|i| i == id), "{id}: {ids:?}");
        }
        let ollama = builtin().into_iter().find(|p| p.id == "ollama").unwrap();
        assert_eq!(ollama.auth_kind, AuthKind::None);
        assert!(ollama.is_local);
        assert_eq!(
            ollama.base_url.as_deref(),
            Some("http://localhost:11434/v1")
        );
    }

    #[test]
    fn base_urls_are_checked_and_the_field_is_named() {
        assert_eq!(
            check_base_url("http://127.0.0.1:8080/v1/").unwrap(),
            "http://127.0.0.1:8080/v1"
        );
        for bad in [
            "ftp://x/v1",
            "not a url",
            "http://u:p@h/v1",
            "http://h/v1?k=1",
        ] {
            let e = check_base_url(bad).unwrap_err();
            assert!(e.contains("base_url"), "{bad}: {e}");
        }
        assert!(is_loopback_url("http://localhost:11434/v1"));
        assert!(is_loopback_url("http://[::1]:80/v1"));
        assert!(!is_loopback_url("https://api.openai.com/v1"));
    }
}
