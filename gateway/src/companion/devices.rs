//! Push devices (`/v1/devices`): registrations are stored (table `devices`, keyed by the raw
//! token, which is never answered), but this gateway has no push credentials and dials no
//! push service, so its push status says nothing is delivered.

use super::errors::DeviceError;
use crate::store::Db;
use crate::store::{Store, StoreError};
use sha2::{Digest, Sha256};
use vis_companion_api::records::{
    DeviceInput, DeviceRegistered, DevicesAnswer, PushChannel, PushDevice, PushStatus,
};
use vis_companion_api::sse::now_ms;

const NOT_DELIVERED: &str = "this gateway holds no push credentials and runs offline: \
     registered devices are kept, but no notification is delivered";

fn channel(missing: &[&str]) -> PushChannel {
    PushChannel {
        is_available: false,
        missing: missing.iter().map(|m| m.to_string()).collect(),
    }
}

pub fn push_status(devices: u64) -> PushStatus {
    PushStatus {
        is_available: false,
        provider: "apns".into(),
        is_delivered: false,
        detail: NOT_DELIVERED.into(),
        missing: vec![
            "apns key".into(),
            "apns key id".into(),
            "apns team id".into(),
            "apns topic".into(),
        ],
        apns: channel(&["apns key", "apns key id", "apns team id", "apns topic"]),
        fcm: channel(&["fcm service account"]),
        web_push: channel(&["vapid key"]),
        relay: channel(&["relay url"]),
        devices,
    }
}

/// `…abcd`: the last four characters of a token (or a hash of a relay grant).
fn preview(token: &str) -> String {
    let tail: String = token
        .chars()
        .rev()
        .take(4)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    format!("…{tail}")
}

fn clip(s: Option<String>) -> Option<String> {
    s.map(|v| v.trim().chars().take(200).collect::<String>())
        .filter(|v| !v.is_empty())
}

/// The push devices job: the stored registrations.
pub struct Devices {
    store: Store,
}

impl Devices {
    pub fn new(store: Store) -> Self {
        Devices { store }
    }

    async fn rows(&self) -> Result<Vec<PushDevice>, DeviceError> {
        self.store
            .with(|db: &mut Db| {
                // In the order they were first registered.
                let sql = db.pick(
                    "SELECT record FROM devices ORDER BY rowid",
                    "SELECT record FROM devices ORDER BY n",
                );
                let rows: Vec<String> = db.column(sql, &[])?;
                Ok(rows
                    .iter()
                    .filter_map(|r| serde_json::from_str(r).ok())
                    .collect())
            })
            .await
            .map_err(DeviceError::Store)
    }

    /// Every registered device and the push status.
    pub async fn list(&self) -> Result<DevicesAnswer, DeviceError> {
        let devices = self.rows().await?;
        Ok(DevicesAnswer {
            push: push_status(devices.len() as u64),
            devices,
        })
    }

    /// The push status (nothing is delivered), with the number of registered devices.
    pub async fn status(&self) -> PushStatus {
        let n = self.rows().await.map(|d| d.len()).unwrap_or(0);
        push_status(n as u64)
    }

    /// Registers (or refreshes) a device; idempotent per token.
    pub async fn register(&self, input: DeviceInput) -> Result<DeviceRegistered, DeviceError> {
        let token = input
            .token
            .clone()
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty());
        let grant = input
            .grant
            .clone()
            .map(|g| g.trim().to_string())
            .filter(|g| !g.is_empty());
        let key = match (&token, &grant) {
            (Some(t), _) => t.clone(),
            (None, Some(g)) => format!("grant:{}", hex::encode(Sha256::digest(g.as_bytes()))),
            (None, None) => return Err(DeviceError::NoToken),
        };
        if key.len() > 4096 {
            return Err(DeviceError::TokenTooLong { max: 4096 });
        }
        let now = now_ms();
        let k = key.clone();
        let registered_at: Option<i64> = self
            .store
            .with(move |db| {
                Ok(db
                    .value::<String>("SELECT record FROM devices WHERE token = ?1", &[&k])?
                    .and_then(|r| serde_json::from_str::<PushDevice>(&r).ok())
                    .map(|d| d.registered_at))
            })
            .await?;
        let device = PushDevice {
            token_preview: preview(&key),
            platform: clip(input.platform),
            environment: clip(input.environment),
            client: clip(input.client),
            client_version: clip(input.client_version),
            label: clip(input.label),
            bundle_id: clip(input.bundle_id),
            is_relayed: grant.is_some() && token.is_none(),
            relay_url: clip(input.relay_url),
            registered_at: registered_at.unwrap_or(now),
            last_seen: now,
        };
        let record = serde_json::to_string(&device)
            .map_err(|e| DeviceError::Store(StoreError::Other(e.to_string())))?;
        let n = self
            .store
            .with(move |db| {
                db.exec(
                    "INSERT INTO devices (token, record) VALUES (?1, ?2) \
                     ON CONFLICT (token) DO UPDATE SET record = excluded.record",
                    &[&key, &record],
                )?;
                Ok(db
                    .value::<i64>("SELECT COUNT(*) FROM devices", &[])?
                    .unwrap_or(0))
            })
            .await?;
        Ok(DeviceRegistered {
            device,
            push: push_status(n as u64),
        })
    }

    /// Forgets a device; `false` when its token was not registered.
    pub async fn unregister(&self, token: &str) -> Result<bool, DeviceError> {
        let t = token.trim().to_string();
        let n = self
            .store
            .with(move |db| db.exec("DELETE FROM devices WHERE token = ?1", &[&t]))
            .await?;
        Ok(n > 0)
    }
}
