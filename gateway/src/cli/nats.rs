//! `start --nats-url`: the checks of the NATS flags and the event publisher (docs/decisions.md,
//! C2).

use anyhow::Result;
use std::time::Duration;
use vis_store::nats::{is_token, Nats, Publisher};
use vis_store::CommitSink;

/// A NATS server URL: `nats://`, `tls://`, `ws://` or `wss://` with a host.
pub(super) fn url(v: &str) -> Result<String, String> {
    let (scheme, rest) = v
        .split_once("://")
        .ok_or("expected a NATS URL such as nats://127.0.0.1:4222")?;
    if !["nats", "tls", "ws", "wss"].contains(&scheme) {
        return Err(format!(
            "the scheme {scheme}:// is not a NATS one (nats://, tls://, ws://, wss://)"
        ));
    }
    let host = rest.rsplit('@').next().unwrap_or_default();
    if host.is_empty() || host.starts_with(':') || host.starts_with('/') {
        return Err("the URL names no host".into());
    }
    Ok(v.to_string())
}

/// A JetStream stream name: letters, digits, `-` and `_`.
pub(super) fn stream_name(v: &str) -> Result<String, String> {
    let fine = v.len() <= 64 && is_token(v);
    fine.then(|| v.to_string())
        .ok_or_else(|| "a stream name is 1-64 letters, digits, '-' or '_'".into())
}

/// A subject prefix: dot-separated tokens of letters, digits, `-` and `_` (no wildcards).
pub(super) fn subject_prefix(v: &str) -> Result<String, String> {
    let fine = v.split('.').all(is_token);
    fine.then(|| v.to_string()).ok_or_else(|| {
        "a subject prefix is dot-separated tokens of letters, digits, '-' or '_'".into()
    })
}

/// Connects to NATS and starts the event publisher (`--nats-url`), bounded in time.
pub(super) async fn start_publishing(
    url: Option<&str>,
    stream: &str,
    prefix: &str,
) -> Result<Option<(CommitSink, Publisher, Nats)>> {
    let Some(url) = url else {
        return Ok(None);
    };
    let connect = Nats::connect(url, stream, prefix);
    let nats = match tokio::time::timeout(Duration::from_secs(10), connect).await {
        Ok(Ok(n)) => n,
        Ok(Err(e)) => anyhow::bail!("cannot publish events on NATS at {url}: {e}"),
        Err(_) => anyhow::bail!("cannot publish events on NATS at {url}: no answer within 10 s"),
    };
    tracing::info!(
        url = %url,
        stream = %stream,
        subjects = %format!("{prefix}.<session id>"),
        "publishing events on NATS JetStream"
    );
    let (sink, publisher) = nats.start_publisher();
    Ok(Some((sink, publisher, nats)))
}

#[cfg(test)]
mod tests {
    use super::{stream_name as nats_name, subject_prefix as nats_prefix, url as nats_url};

    #[test]
    fn a_nats_url_needs_a_nats_scheme_and_a_host() {
        for good in [
            "nats://127.0.0.1:4222",
            "tls://nats.internal:4222",
            "nats://user:pass@127.0.0.1:4222",
            "wss://nats.internal/ws",
        ] {
            assert_eq!(nats_url(good).as_deref(), Ok(good));
        }
        for bad in [
            "127.0.0.1:4222",
            "http://127.0.0.1:4222",
            "nats://",
            "nats://:4222",
        ] {
            assert!(nats_url(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn stream_names_and_subject_prefixes_refuse_what_jetstream_would() {
        assert!(nats_name("VIS_EVENTS").is_ok());
        for bad in ["", "vis.events", "VIS EVENTS", "VIS*", &"x".repeat(65)] {
            assert!(nats_name(bad).is_err(), "stream {bad:?} accepted");
        }
        assert!(nats_prefix("vis.events").is_ok());
        assert!(nats_prefix("team-a.vis_events").is_ok());
        for bad in [
            "",
            "vis.",
            ".vis",
            "vis..events",
            "vis.*",
            "vis.>",
            "vis events",
        ] {
            assert!(nats_prefix(bad).is_err(), "prefix {bad:?} accepted");
        }
    }
}
