//! Wire protocol numbers and the pure compatibility verdict.

use axum::http::HeaderMap;
use serde_json::{json, Value};

pub const PROTOCOL: i64 = 2;
pub const MIN_CLIENT: i64 = 2;
pub const MIN_GATEWAY: i64 = 2;
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The `protocol` block every status answer carries.
pub fn protocol_block() -> Value {
    json!({"protocol": PROTOCOL, "min_client": MIN_CLIENT, "min_gateway": MIN_GATEWAY, "version": VERSION, "build": Value::Null})
}

/// What a client advertised in its headers.
#[derive(Debug, Clone, Default)]
pub struct ClientInfo {
    pub protocol: Option<i64>,
    pub min_gateway: Option<i64>,
    pub name: Option<String>,
    pub version: Option<String>,
}

impl ClientInfo {
    pub fn from_headers(h: &HeaderMap) -> Self {
        let text = |name: &str| {
            h.get(name)
                .and_then(|v| v.to_str().ok())
                .map(|s| s.trim().to_string())
        };
        let num = |name: &str| text(name).and_then(|s| s.parse::<i64>().ok());
        Self {
            protocol: num("x-vis-protocol"),
            min_gateway: num("x-vis-min-gateway-protocol"),
            name: text("x-vis-client"),
            version: text("x-vis-client-version"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    Ok,
    Unknown,
    ClientTooOld,
    GatewayTooOld,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Ok => "ok",
            Reason::Unknown => "unknown",
            Reason::ClientTooOld => "client-too-old",
            Reason::GatewayTooOld => "gateway-too-old",
        }
    }
    pub fn upgrade(self) -> Value {
        match self {
            Reason::ClientTooOld => json!("client"),
            Reason::GatewayTooOld => json!("gateway"),
            _ => Value::Null,
        }
    }
}

/// The verdict for a client against this gateway.
pub fn verdict(client: &ClientInfo) -> Reason {
    let Some(cp) = client.protocol else {
        return Reason::Unknown;
    };
    let cmin = client.min_gateway.unwrap_or(cp);
    if cp < MIN_CLIENT {
        Reason::ClientTooOld
    } else if PROTOCOL < cmin {
        Reason::GatewayTooOld
    } else {
        Reason::Ok
    }
}

/// The `compatibility` block of the capabilities answer.
pub fn compatibility_short(client: &ClientInfo) -> Value {
    let r = verdict(client);
    json!({"is_compatible": r == Reason::Ok, "reason": r.as_str(), "upgrade": r.upgrade()})
}

/// The 426 body.
pub fn incompatible_body(client: &ClientInfo) -> Value {
    let r = verdict(client);
    let (title, summary, remedy): (&str, String, Vec<&str>) = match r {
        Reason::GatewayTooOld => (
            "Update the gateway",
            format!(
                "this client needs gateway protocol {} but the gateway speaks {PROTOCOL}.",
                client.min_gateway.unwrap_or(0)
            ),
            vec![
                "Update Vis on the machine hosting the gateway.",
                "Restart it: vis-gateway stop && vis-gateway start",
            ],
        ),
        Reason::Unknown => (
            "Update this client",
            "this client did not advertise the current Vis wire protocol and is unsupported."
                .to_string(),
            vec![
                "Update Vis on this device to the version running the gateway.",
                "Reload the app (or restart the TUI) once the update lands.",
            ],
        ),
        _ => (
            "Update this client",
            format!(
                "this client speaks protocol {} but the gateway needs at least {MIN_CLIENT}.",
                client.protocol.unwrap_or(0)
            ),
            vec![
                "Update Vis on this device to the version running the gateway.",
                "Reload the app (or restart the TUI) once the update lands.",
            ],
        ),
    };
    json!({
        "error": {"type": "incompatible_protocol", "message": format!("{title} — {summary}"), "title": title, "remedy": remedy},
        "protocol": protocol_block(),
        "compatibility": {
            "is_compatible": false, "reason": r.as_str(), "upgrade": r.upgrade(),
            "gateway_protocol": PROTOCOL, "gateway_min_client": MIN_CLIENT, "gateway_version": VERSION,
            "client_protocol": client.protocol, "client_min_gateway": client.min_gateway,
            "client_version": client.version, "client_name": client.name,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(p: Option<i64>, m: Option<i64>) -> ClientInfo {
        ClientInfo {
            protocol: p,
            min_gateway: m,
            ..Default::default()
        }
    }

    #[test]
    fn a_client_without_headers_is_unknown() {
        assert_eq!(verdict(&client(None, None)), Reason::Unknown);
    }

    #[test]
    fn protocol_one_is_too_old_and_protocol_two_is_ok() {
        assert_eq!(verdict(&client(Some(1), None)), Reason::ClientTooOld);
        assert_eq!(verdict(&client(Some(2), Some(2))), Reason::Ok);
    }

    #[test]
    fn a_client_demanding_protocol_three_finds_the_gateway_too_old() {
        assert_eq!(verdict(&client(Some(3), Some(3))), Reason::GatewayTooOld);
        let body = incompatible_body(&client(Some(2), Some(3)));
        assert_eq!(body["error"]["title"], "Update the gateway");
        assert_eq!(body["compatibility"]["upgrade"], "gateway");
    }
}
