//! Extensions, the sandbox environment and the folder browser (`GET /v1/fs`).

use super::Q;
use crate::error::{ApiError, ApiResult};
use crate::wire::{ExtensionsListing, ReloadAnswer, SandboxEnv};
use crate::AppState;
use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

pub async fn extensions(State(st): State<AppState>, q: Q) -> ApiResult<Json<ExtensionsListing>> {
    Ok(Json(st.engine.extensions(q.get("root").cloned()).await?))
}

/// `POST /v1/extensions/reload` — project from `?root=` or the body's `root` (default: the
/// gateway's start-up directory).
pub async fn reload_extensions(
    State(st): State<AppState>,
    q: Q,
    body: crate::body::JsonBody,
) -> ApiResult<Json<ReloadAnswer>> {
    let root = q
        .get("root")
        .cloned()
        .or_else(|| {
            body.0
                .get("root")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .filter(|r| !r.trim().is_empty());
    Ok(Json(st.engine.reload_extensions(root).await?))
}

pub async fn sandbox_env(
    State(st): State<AppState>,
    body: crate::body::JsonBody,
) -> ApiResult<Json<SandboxEnv>> {
    let text = |k: &str| -> ApiResult<Option<String>> {
        match body.0.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone()).filter(|s| !s.trim().is_empty())),
            Some(_) => Err(ApiError::bad_request(
                "invalid-request",
                format!("{k} must be a string"),
            )),
        }
    };
    Ok(Json(
        st.engine
            .sandbox_env(
                text("session_id")?,
                text("root")?,
                text("title")?,
                text("command")?,
            )
            .await?,
    ))
}

/// Lists directories under `path` (default: home), no dot-folders, ≤ 400 entries.
pub async fn fs(q: Q) -> ApiResult<Json<Value>> {
    let home = std::env::var("HOME").unwrap_or_else(|_| "/".into());
    let path = q
        .get("path")
        .filter(|p| !p.trim().is_empty())
        .cloned()
        .unwrap_or_else(|| home.clone());
    let dir = std::path::PathBuf::from(&path);
    let listing = tokio::task::spawn_blocking(move || -> std::io::Result<(Vec<Value>, bool)> {
        let mut entries = Vec::new();
        let mut truncated = false;
        let mut names: Vec<_> = std::fs::read_dir(&dir)?
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
            .map(|e| e.file_name().to_string_lossy().to_string())
            .filter(|n| !n.starts_with('.'))
            .collect();
        names.sort();
        for name in names {
            if entries.len() >= 400 {
                truncated = true;
                break;
            }
            let p = dir.join(&name);
            let count = std::fs::read_dir(&p).map(|r| r.count()).unwrap_or(0);
            entries.push(
                json!({"name": name, "path": p.to_string_lossy(), "entry_count": count,
                "is_repo": p.join(".git").exists()}),
            );
        }
        Ok((entries, truncated))
    })
    .await
    .map_err(|e| ApiError::engine(e.to_string()))?;
    let (entries, truncated) = listing
        .map_err(|e| ApiError::bad_request("invalid-path", format!("cannot list {path}: {e}")))?;
    let parent = std::path::Path::new(&path)
        .parent()
        .map(|p| p.to_string_lossy().to_string());
    Ok(Json(
        json!({"path": path, "parent": parent, "home": home, "is_truncated": truncated, "entries": entries}),
    ))
}
