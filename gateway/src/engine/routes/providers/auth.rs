//! Sign-in flows: an `api-key` flow for built-in and key-taking providers (instructions
//! from the extension's `auth_prompt_fn` when it has one), and the extension's own `auth_fn`
//! run in the background as a device-style flow.

use super::*;
use crate::extensions::ProviderInfo;
use crate::provider_admin::flows::{self, Progress};
use crate::provider_admin::probe;
use axum::http::StatusCode;
use parking_lot::Mutex;
use std::sync::Arc;
use vis_companion_api::providers::*;
use vis_companion_api::{ApiError, ApiResult};

impl ProviderRoutes {
    pub(super) async fn auth_prompt(&self, id: &str) -> Option<Vec<String>> {
        let v = self.call_slot(id, "auth_prompt_fn").await?.ok()?;
        let lines: Vec<String> = match v {
            serde_json::Value::String(s) => s.lines().map(str::to_string).collect(),
            serde_json::Value::Array(a) => a
                .iter()
                .filter_map(|l| l.as_str().map(str::to_string))
                .collect(),
            _ => return None,
        };
        Some(lines.into_iter().filter(|l| !l.trim().is_empty()).collect())
    }

    pub(super) async fn start_flow(&self, id: &str) -> ApiResult<AuthFlow> {
        let saved = self.admin().saved().contains_key(id);
        let info = self
            .extension_providers()
            .await
            .into_iter()
            .find(|p| p.id == id);
        if !saved {
            match self.known(id).await {
                Ok(Known::Routed { source, .. }) => {
                    let e = self.not_removable(id, &source).await;
                    return Err(ApiError::conflict(
                        "provider-not-managed",
                        format!("{}; its key is not set from the phone", e.message),
                    )
                    .with("provider_id", id));
                }
                Ok(Known::Extension(_)) => {}
                Err(_) if self.preset(id).await.is_some() => {}
                Err(e) => return Err(e),
            }
        }
        if let Some(info) = &info {
            if info.is_managed {
                return Err(ApiError::conflict(
                    "auth-managed",
                    format!(
                        "the extension {} issues the credential of {id}; there is nothing to sign in",
                        info.extension
                    ),
                ));
            }
            if probe::has_slot(info, "auth_fn") {
                return self.start_extension_login(info).await;
            }
        }
        let label = self
            .preset(id)
            .await
            .map_or_else(|| id.to_string(), |p| p.label);
        let instructions = match self.auth_prompt(id).await {
            Some(lines) if !lines.is_empty() => lines,
            _ => vec![
                format!("{label} needs an API key: paste it here."),
                "The key is kept on the gateway's machine, readable only by the gateway's \
                 user, and is never sent back to any device."
                    .to_string(),
            ],
        };
        Ok(self
            .admin()
            .flows
            .open(id, FlowKind::ApiKey, instructions, None))
    }

    pub(super) async fn complete_flow(
        &self,
        id: &str,
        body: AuthComplete,
    ) -> ApiResult<AuthVerdict> {
        let flow = self.flow(id, &body.flow_id)?;
        if flow.progress.is_some() {
            return self.poll_flow(id, &body.flow_id).await;
        }
        if body.redirect_url.is_some() && body.api_key.is_none() {
            return Err(invalid(
                "api_key",
                format!("{id} signs in with an API key, not a redirect URL: send api_key"),
            ));
        }
        let Some(key) = body.api_key else {
            return Err(invalid(
                "api_key",
                "api_key is required to finish an api-key sign-in",
            ));
        };
        let change = self
            .save(ProviderInput {
                id: id.to_string(),
                api_key: Some(key),
                ..Default::default()
            })
            .await?;
        self.admin().flows.close(&body.flow_id);
        tracing::info!(target: "vis::providers", provider = %id, "API key saved from the phone");
        publish(
            &self.0,
            if change == Change::Added {
                Change::Added
            } else {
                Change::SignedIn
            },
            id,
        );
        Ok(AuthVerdict {
            status: VerdictStatus::Ok,
            message: Some(format!("API key saved for {id}; the next turn uses it")),
        })
    }

    pub(super) async fn poll_flow(&self, id: &str, flow_id: &str) -> ApiResult<AuthVerdict> {
        let flow = self.flow(id, flow_id)?;
        let Some(progress) = flow.progress else {
            return Ok(AuthVerdict {
                status: VerdictStatus::Pending,
                message: Some("waiting for the API key".into()),
            });
        };
        let (verdict, last) = {
            let p = progress.lock();
            (p.verdict.clone(), p.lines.last().cloned())
        };
        Ok(match verdict {
            None => AuthVerdict {
                status: VerdictStatus::Pending,
                message: last,
            },
            Some(Ok(m)) => {
                self.admin().flows.close(flow_id);
                self.admin().forget_checked(id);
                AuthVerdict {
                    status: VerdictStatus::Ok,
                    message: Some(m),
                }
            }
            Some(Err(e)) => {
                self.admin().flows.close(flow_id);
                AuthVerdict {
                    status: VerdictStatus::Error,
                    message: Some(e),
                }
            }
        })
    }

    pub(super) async fn cancel_flow(&self, id: &str, flow_id: &str) -> ApiResult<AuthVerdict> {
        let was_open =
            self.admin().flows.get(id, flow_id).is_some() && self.admin().flows.close(flow_id);
        Ok(AuthVerdict {
            status: VerdictStatus::Cancelled,
            message: (!was_open)
                .then(|| "no such sign-in is open (already finished or forgotten)".into()),
        })
    }

    pub(super) fn flow(&self, id: &str, flow_id: &str) -> ApiResult<flows::Flow> {
        self.admin().flows.get(id, flow_id).ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "unknown-flow",
                format!(
                    "no open sign-in {flow_id:?} for {id} (it finished, was cancelled or expired)"
                ),
            )
        })
    }

    /// Runs the extension's `auth_fn` in the background; its printed lines are the flow's
    /// instructions and its answer the verdict.
    pub(super) async fn start_extension_login(&self, info: &ProviderInfo) -> ApiResult<AuthFlow> {
        let progress = Arc::new(Mutex::new(Progress::default()));
        let mut flow = self.admin().flows.open(
            &info.id,
            FlowKind::Device,
            Vec::new(),
            Some(progress.clone()),
        );
        let sink = progress.clone();
        let print: crate::extensions::LinePrinter = Arc::new(move |line: String| {
            sink.lock().lines.push(line);
        });
        let login = self
            .0
            .extensions
            .providers()
            .login(&info.extension, &info.id, print);
        let (gw, id, done) = (self.0.clone(), info.id.clone(), progress.clone());
        tokio::spawn(async move {
            let verdict = login.await;
            if verdict.is_ok() {
                publish(&gw, Change::SignedIn, &id);
            }
            done.lock().verdict = Some(verdict);
        });
        // The first instructions usually come at once (a URL and a code to enter).
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(3);
        loop {
            {
                let p = progress.lock();
                if !p.lines.is_empty() || p.verdict.is_some() {
                    flow.instructions = p.lines.clone();
                    break;
                }
            }
            if tokio::time::Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        flow.url = flows::first_url(&flow.instructions);
        flow.verification_uri = flow.url.clone();
        Ok(flow)
    }
}
