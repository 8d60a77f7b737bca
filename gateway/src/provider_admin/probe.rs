//! The live status check and the limits report of one provider.
//!
//! Status: a models-list call through the provider's own wire (same key, same headers as a
//! turn; it costs no tokens). A 401/403 is a rejected key; an unreachable server, a 5xx or
//! a 429 leave the key usable but say why the check failed. A Provider extension's
//! `status_fn` and `limits_fn` are consulted for the providers it declares.
//!
//! Limits: the rate-limit headers of the provider's last answer, and the extension's
//! `ProviderLimits` where it has a `limits_fn`.

use crate::extensions::ProviderInfo;
use serde_json::{Map, Value};
use std::sync::Arc;
use std::time::Duration;
use vis_companion_api::providers::{
    LimitRow, LimitWindow, LimitsDynamic, LimitsError, ProviderLimits, ProviderStatus,
};
use vis_providers::{Client, ProviderError};

/// The longest a status check waits for the provider.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

fn status(auth_state: &str, authenticated: Option<bool>, source: &str) -> ProviderStatus {
    ProviderStatus {
        is_authenticated: authenticated,
        auth_state: auth_state.into(),
        source: Some(source.into()),
        ..Default::default()
    }
}

/// What the list says before (or without) a live check.
pub fn unchecked(
    source: &str,
    has_key: bool,
    is_local: bool,
    key_env: Option<&str>,
) -> ProviderStatus {
    if has_key {
        let from = key_env.map_or_else(|| source.to_string(), |v| format!("the variable {v}"));
        ProviderStatus {
            detail: Some(format!("API key from {from}; not checked yet")),
            label: Some("API key".into()),
            ..status("unverified", Some(true), source)
        }
    } else if is_local {
        ProviderStatus {
            detail: Some("local server; no key needed".into()),
            label: Some("No key".into()),
            ..status("unverified", Some(true), source)
        }
    } else {
        let msg = match key_env {
            Some(v) => format!("no API key: the variable {v} is not set"),
            None => "no API key is set for this provider: sign in to add one".into(),
        };
        ProviderStatus {
            detail: Some(msg.clone()),
            error: Some(msg),
            ..status("rejected", Some(false), source)
        }
    }
}

/// The host of a base URL, for messages.
fn host(base_url: &str) -> String {
    reqwest::Url::parse(base_url)
        .ok()
        .and_then(|u| {
            u.host_str().map(|h| {
                format!(
                    "{h}{}",
                    u.port().map(|p| format!(":{p}")).unwrap_or_default()
                )
            })
        })
        .unwrap_or_else(|| base_url.to_string())
}

/// Checks a provider now with a models-list call through its wire.
pub async fn check_client(client: &Arc<Client>, label: &str, source: &str) -> ProviderStatus {
    check_listing(client, label, source).await.0
}

/// [`check_client`], with the models the provider listed when it answered.
pub async fn check_listing(
    client: &Arc<Client>,
    label: &str,
    source: &str,
) -> (ProviderStatus, Option<Vec<String>>) {
    let cfg = client.config();
    let has_key = cfg.api_key.as_deref().is_some_and(|k| !k.is_empty());
    let at = host(&cfg.base_url);
    let r = tokio::time::timeout(PROBE_TIMEOUT, client.list_models()).await;
    let listed = match &r {
        Ok(Ok(models)) => Some(models.clone()),
        _ => None,
    };
    let key_label = Some(if has_key { "API key" } else { "No key" }.to_string());
    let status = match r {
        Ok(Ok(models)) => ProviderStatus {
            detail: Some(format!(
                "{label} at {at} accepted the {} and listed {} model(s)",
                if has_key { "API key" } else { "request" },
                models.len()
            )),
            label: key_label,
            ..status("verified", Some(true), source)
        },
        Ok(Err(ProviderError::Http {
            status: s @ (401 | 403),
            message,
            ..
        })) => {
            let why = if has_key {
                format!("{label} rejected the API key (HTTP {s}: {message})")
            } else {
                format!("{label} needs an API key (HTTP {s}: {message}); sign in to add one")
            };
            ProviderStatus {
                detail: Some(why.clone()),
                error: Some(why),
                label: key_label,
                ..status("rejected", Some(false), source)
            }
        }
        Ok(Err(ProviderError::Http { status: 404, .. })) => ProviderStatus {
            detail: Some(format!(
                "{label} at {at} has no models list ({}/models answered 404); the key was not checked",
                cfg.base_url
            )),
            warning: Some("the provider could not be checked".into()),
            label: key_label,
            ..status("unverified", Some(has_key), source)
        },
        Ok(Err(ProviderError::Http {
            status: s, message, ..
        })) => ProviderStatus {
            detail: Some(format!("{label} answered HTTP {s}: {message}")),
            warning: Some(format!("the live check failed with HTTP {s}; the key stays in use")),
            label: key_label,
            ..status("degraded", Some(true), source)
        },
        Ok(Err(ProviderError::Transport(m))) => {
            let why = format!("can't reach {label} at {at} — is it running? ({m})");
            ProviderStatus {
                detail: Some(why.clone()),
                error: Some(why),
                label: key_label,
                ..status("degraded", Some(false), source)
            }
        }
        Ok(Err(e)) => ProviderStatus {
            detail: Some(format!("{label}: {e}")),
            warning: Some(e.to_string()),
            label: key_label,
            ..status("degraded", Some(has_key), source)
        },
        Err(_) => {
            let why = format!(
                "{label} at {at} did not answer within {} s",
                PROBE_TIMEOUT.as_secs()
            );
            ProviderStatus {
                detail: Some(why.clone()),
                warning: Some(why),
                label: key_label,
                ..status("degraded", Some(has_key), source)
            }
        }
    };
    (status, listed)
}

/// A Provider extension's own `ProviderStatus` (`status_fn`), in the app's shape.
pub fn from_status_fn(v: &Value, ext: &str) -> Option<ProviderStatus> {
    let authenticated = v.get("is_authenticated").and_then(Value::as_bool)?;
    let text = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    let error = text("error");
    Some(ProviderStatus {
        is_authenticated: Some(authenticated),
        auth_state: match (authenticated, &error) {
            (true, _) => "unverified",
            (false, Some(_)) => "degraded",
            (false, None) => "unverified",
        }
        .into(),
        detail: error.clone().or_else(|| {
            Some(format!(
                "the extension {ext} says the provider is {}signed in",
                if authenticated { "" } else { "not " }
            ))
        }),
        label: text("label"),
        source: text("source").or(Some("extension".into())),
        error,
        warning: None,
    })
}

/// Folds an extension's `ProviderLimits` status into a status (a provider's own limits
/// endpoint is also a check of its credential).
pub fn with_limits(mut s: ProviderStatus, limits: &ProviderLimits) -> ProviderStatus {
    if s.is_authenticated != Some(true) {
        return s;
    }
    let note = limits
        .dynamic
        .note
        .clone()
        .or_else(|| limits.error.as_ref().map(|e| e.message.clone()));
    match limits.status.as_str() {
        "ok" => s.auth_state = "verified".into(),
        "unauthenticated" => {
            let why =
                note.unwrap_or_else(|| "the provider rejected the current credentials".into());
            s.auth_state = "rejected".into();
            s.is_authenticated = Some(false);
            s.error = Some(why.clone());
            s.detail = Some(why);
        }
        "error" => {
            s.auth_state = "degraded".into();
            s.warning =
                Some(note.unwrap_or_else(|| "the provider's limits could not be read".into()));
        }
        _ => {}
    }
    s
}

/// The limits report from the rate-limit headers of the provider's last answer.
pub fn from_headers(id: &str, client: Option<&Client>) -> ProviderLimits {
    let seen = client.and_then(|c| c.last_rate_limits());
    let Some(seen) = seen else {
        return ProviderLimits {
            provider_id: Some(id.into()),
            status: "ok".into(),
            dynamic: LimitsDynamic {
                limits: Vec::new(),
                note: Some(
                    "no rate-limit headers seen yet: they come with the provider's answers \
                     (a turn or a status check)"
                        .into(),
                ),
            },
            ..Default::default()
        };
    };
    let rows = seen
        .windows
        .iter()
        .map(|w| LimitRow {
            id: Some(format!("rate-{}", w.id)),
            label: Some(match w.id.as_str() {
                "requests" => "Requests".to_string(),
                "tokens" => "Tokens".to_string(),
                "input-tokens" => "Input tokens".to_string(),
                "output-tokens" => "Output tokens".to_string(),
                other => other.to_string(),
            }),
            used: match (w.limit, w.remaining) {
                (Some(l), Some(r)) => Some(l.saturating_sub(r) as f64),
                _ => None,
            },
            limit: w.limit.map(|l| l as f64),
            remaining: w.remaining.map(|r| r as f64),
            window: Some(LimitWindow {
                kind: Some("rolling".into()),
                resets_at_ms: w.resets_at_ms,
                ..Default::default()
            }),
            source: Some("provider-api".into()),
            note: Some("from the rate-limit headers of the provider's last answer".into()),
            ..Default::default()
        })
        .collect();
    ProviderLimits {
        provider_id: Some(id.into()),
        status: "ok".into(),
        fetched_at_ms: Some(seen.seen_at_ms),
        static_: Map::new(),
        dynamic: LimitsDynamic {
            limits: rows,
            note: None,
        },
        error: None,
    }
}

/// An extension's `limits_fn` answer as a report (an unreadable one is an `error` report).
pub fn from_limits_fn(id: &str, r: Result<Value, String>) -> Option<ProviderLimits> {
    let v = match r {
        Ok(Value::Null) => return None,
        Ok(v) => v,
        Err(e) => {
            return Some(ProviderLimits {
                provider_id: Some(id.into()),
                status: "error".into(),
                error: Some(LimitsError { message: e }),
                ..Default::default()
            })
        }
    };
    Some(
        serde_json::from_value::<ProviderLimits>(v).unwrap_or_else(|e| ProviderLimits {
            provider_id: Some(id.into()),
            status: "error".into(),
            error: Some(LimitsError {
                message: format!("the extension's limits report is malformed: {e}"),
            }),
            ..Default::default()
        }),
    )
}

/// The extension's report with the header rows added (headers alone when it has none).
pub fn merge(id: &str, ext: Option<ProviderLimits>, headers: ProviderLimits) -> ProviderLimits {
    let Some(mut r) = ext else { return headers };
    r.provider_id.get_or_insert_with(|| id.to_string());
    r.dynamic.limits.extend(headers.dynamic.limits);
    if r.fetched_at_ms.is_none() {
        r.fetched_at_ms = headers.fetched_at_ms;
    }
    r
}

/// Whether an extension provider fills a slot.
pub fn has_slot(info: &ProviderInfo, slot: &str) -> bool {
    info.slots.iter().any(|s| s == slot)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ext_status(authenticated: bool) -> Value {
        json!({"is_authenticated": authenticated, "source": "auth-file"})
    }

    #[test]
    fn an_unchecked_provider_without_a_key_says_how_to_get_one() {
        let s = unchecked("saved", false, false, None);
        assert_eq!(s.auth_state, "rejected");
        assert!(s.error.unwrap().contains("sign in"));
        let s = unchecked("env-var", true, false, Some("OPENAI_API_KEY"));
        assert_eq!(s.auth_state, "unverified");
        assert!(s.detail.unwrap().contains("OPENAI_API_KEY"));
        assert_eq!(
            unchecked("saved", false, true, None).auth_state,
            "unverified"
        );
    }

    #[test]
    fn an_extension_limits_report_decides_between_verified_and_rejected() {
        let base = from_status_fn(&ext_status(true), "acme").unwrap();
        let ok = from_limits_fn(
            "acme",
            Ok(json!({"status": "ok", "static": {}, "dynamic": {"limits": []}})),
        );
        assert_eq!(
            with_limits(base.clone(), &ok.unwrap()).auth_state,
            "verified"
        );
        let denied = from_limits_fn(
            "acme",
            Ok(json!({"status": "unauthenticated", "static": {}, "dynamic": {"limits": [], "note": "token expired"}})),
        )
        .unwrap();
        let s = with_limits(base, &denied);
        assert_eq!(s.auth_state, "rejected");
        assert_eq!(s.error.as_deref(), Some("token expired"));
        let broken = from_limits_fn("acme", Ok(json!({"status": 3}))).unwrap();
        assert_eq!(broken.status, "error");
    }

    #[test]
    fn without_headers_the_report_says_when_figures_will_come() {
        let r = from_headers("openai", None);
        assert_eq!(r.status, "ok");
        assert!(r.dynamic.limits.is_empty());
        assert!(r.dynamic.note.unwrap().contains("rate-limit headers"));
    }
}
