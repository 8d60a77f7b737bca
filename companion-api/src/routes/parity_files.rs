//! Folders and files: `POST /v1/fs/actions/mkdir`, the session's artifacts and the bytes
//! and revisions of an iteration's attachments.

use super::path::Path;
use crate::body::JsonBody;
use crate::error::{ApiError, ApiResult};
use crate::records::{BrowseEntry, NewRevision};
use crate::AppState;
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::Value;
use std::path::{Component, PathBuf};

/// Largest revision a person may save (the turn attachment cap).
pub const MAX_REVISION_BYTES: usize = 26_214_400;

fn home() -> PathBuf {
    PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/".into()))
}

/// Checks a new folder's `path` (absolute or `~…`, no `..`) and `name` (one plain segment).
pub fn mkdir_target(path: &str, name: &str) -> ApiResult<PathBuf> {
    let bad = |kind: &str, m: String| ApiError::bad_request(kind, m);
    let path = path.trim();
    if path.is_empty() {
        return Err(bad("invalid-path", "path is required".into()));
    }
    let parent = if path == "~" {
        home()
    } else if let Some(rest) = path.strip_prefix("~/") {
        home().join(rest)
    } else {
        PathBuf::from(path)
    };
    if !parent.is_absolute() {
        return Err(bad(
            "invalid-path",
            format!("path must be absolute or start with ~: {path:?}"),
        ));
    }
    if path.split('/').any(|seg| seg == "." || seg == "..")
        || parent
            .components()
            .any(|c| matches!(c, Component::ParentDir))
    {
        return Err(bad(
            "invalid-path",
            format!("path must not contain . or .. segments: {path:?}"),
        ));
    }
    let name = name.trim();
    let plain = !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains('/')
        && !name.contains('\\')
        && !name.chars().any(|c| c.is_control())
        && name.len() <= 255;
    if !plain {
        return Err(bad(
            "invalid-name",
            format!("name must be one folder name (no /, no .., at most 255 bytes): {name:?}"),
        ));
    }
    Ok(parent.join(name))
}

pub async fn mkdir(body: JsonBody) -> ApiResult<Response> {
    let text = |k: &str| -> ApiResult<String> {
        match body.0.get(k) {
            Some(Value::String(s)) => Ok(s.clone()),
            _ => Err(ApiError::bad_request(
                "invalid-request",
                format!("{k} must be a string; send {{path, name}}"),
            )),
        }
    };
    let target = mkdir_target(&text("path")?, &text("name")?)?;
    let made = tokio::task::spawn_blocking(move || -> ApiResult<BrowseEntry> {
        let parent = target.parent().map(PathBuf::from).unwrap_or_default();
        if !parent.is_dir() {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "path-not-found",
                format!("{} is not a folder", parent.display()),
            ));
        }
        match std::fs::create_dir(&target) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(ApiError::conflict(
                    "already-exists",
                    format!("{} already exists", target.display()),
                ))
            }
            Err(e) => {
                return Err(ApiError::new(
                    StatusCode::FORBIDDEN,
                    "mkdir-failed",
                    format!("cannot create {}: {e}", target.display()),
                ))
            }
        }
        Ok(BrowseEntry {
            name: target
                .file_name()
                .map(|n| n.to_string_lossy().to_string())
                .unwrap_or_default(),
            path: target.to_string_lossy().to_string(),
            entry_count: 0,
            is_repo: false,
            branch: None,
        })
    })
    .await
    .map_err(|e| ApiError::engine(e.to_string()))??;
    Ok((StatusCode::CREATED, Json(made)).into_response())
}

pub async fn artifacts(State(st): State<AppState>, Path(sid): Path<String>) -> ApiResult<Response> {
    Ok(Json(st.engine.artifacts(&sid).await?).into_response())
}

pub async fn iteration_list(
    State(st): State<AppState>,
    Path((sid, iid)): Path<(String, String)>,
) -> ApiResult<Response> {
    Ok(Json(st.engine.iteration_attachments(&sid, &iid).await?).into_response())
}

pub async fn iteration_bytes(
    State(st): State<AppState>,
    Path((sid, iid, idx)): Path<(String, String, String)>,
) -> ApiResult<Response> {
    let index: i64 = idx.parse().map_err(|_| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "attachment-not-found",
            format!("no attachment {idx:?}: the index is a number"),
        )
    })?;
    let stored = st
        .engine
        .iteration_attachment_bytes(&sid, &iid, index)
        .await?;
    let ct = HeaderValue::from_str(&stored.media_type)
        .unwrap_or(HeaderValue::from_static("application/octet-stream"));
    let disposition = HeaderValue::from_str(&format!(
        "inline; filename=\"{}\"",
        stored
            .filename
            .rsplit('/')
            .next()
            .unwrap_or("file")
            .replace(['"', '\\'], "_")
    ))
    .unwrap_or(HeaderValue::from_static("inline"));
    Ok((
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, ct),
            (
                header::CACHE_CONTROL,
                HeaderValue::from_static("private, max-age=31536000, immutable"),
            ),
            (header::CONTENT_DISPOSITION, disposition),
        ],
        stored.bytes,
    )
        .into_response())
}

pub async fn iteration_save(
    State(st): State<AppState>,
    Path((sid, iid)): Path<(String, String)>,
    body: JsonBody,
) -> ApiResult<Response> {
    let bad = |m: String| ApiError::bad_request("invalid-attachment", m);
    let filename = match body.0.get("filename") {
        Some(Value::String(s)) if !s.trim().is_empty() && s.len() <= 1024 => s.trim().to_string(),
        _ => return Err(bad("filename must be a non-blank string".into())),
    };
    let raw = match body.0.get("base64") {
        Some(Value::String(s)) => s.as_str(),
        _ => return Err(bad("base64 must be a string".into())),
    };
    let declared = body
        .0
        .get("media_type")
        .and_then(Value::as_str)
        .map(str::to_string);
    let decoded = crate::upload::decode(raw, declared.as_deref())
        .map_err(|e| bad(format!("the upload is not usable: {e}")))?;
    if decoded.bytes.len() > MAX_REVISION_BYTES {
        return Err(bad(format!(
            "the upload exceeds {MAX_REVISION_BYTES} bytes"
        )));
    }
    let media_type = decoded
        .media_type
        .unwrap_or_else(|| "application/octet-stream".into());
    let rev = NewRevision {
        filename,
        media_type,
        bytes: decoded.bytes,
    };
    let saved = st.engine.save_revision(&sid, &iid, rev).await?;
    Ok((StatusCode::CREATED, Json(saved)).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mkdir_refuses_dot_dot_in_the_path_and_the_name() {
        for (path, name) in [
            ("/tmp/../etc", "x"),
            ("/tmp", ".."),
            ("/tmp", "a/b"),
            ("/tmp", ""),
            ("relative/dir", "x"),
            ("/tmp/./x", "y"),
        ] {
            let e = mkdir_target(path, name).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{path} {name}");
        }
        assert_eq!(
            mkdir_target("/tmp", "new").unwrap(),
            PathBuf::from("/tmp/new")
        );
    }
}
