//! Session routes the Companion app calls besides the core flow: rename/star, search, usage,
//! the Markdown export, `@file` suggestions, the model pin, forks and drafts.

use super::path::Path;
use super::Q;
use crate::body::JsonBody;
use crate::error::{ApiError, ApiResult};
use crate::records::{ForkRequest, ModelPref, SessionPatch};
use crate::AppState;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::bad_request("invalid-request", message)
}

/// The body as an object, or a 400 naming what was expected.
fn object(body: &JsonBody, what: &str) -> ApiResult<serde_json::Map<String, Value>> {
    match &body.0 {
        Value::Object(m) => Ok(m.clone()),
        _ => Err(invalid(format!("the body must be a JSON object {what}"))),
    }
}

/// Longest accepted session title, in characters.
pub const MAX_TITLE_CHARS: usize = 200;

/// Parses `{title?, is_favorite?}`; any other key is ignored, a wrong type is a 400.
pub fn parse_patch(m: &serde_json::Map<String, Value>) -> ApiResult<SessionPatch> {
    let mut patch = SessionPatch::default();
    match m.get("title") {
        None => {}
        Some(Value::String(t)) => {
            let t = t.trim();
            if t.is_empty() {
                return Err(invalid("title must not be blank"));
            }
            if t.chars().count() > MAX_TITLE_CHARS {
                return Err(invalid(format!(
                    "title must be at most {MAX_TITLE_CHARS} characters"
                )));
            }
            if t.chars().any(|c| c.is_control()) {
                return Err(invalid("title must be one line without control characters"));
            }
            patch.title = Some(t.to_string());
        }
        Some(_) => return Err(invalid("title must be a string")),
    }
    match m.get("is_favorite") {
        None => {}
        Some(Value::Bool(b)) => patch.is_favorite = Some(*b),
        Some(_) => return Err(invalid("is_favorite must be true or false")),
    }
    if patch == SessionPatch::default() {
        return Err(invalid(
            "nothing to change: send title (string) and/or is_favorite (bool)",
        ));
    }
    Ok(patch)
}

pub async fn patch_session(
    State(st): State<AppState>,
    Path(sid): Path<String>,
    body: JsonBody,
) -> ApiResult<Json<crate::wire::SessionRecord>> {
    let patch = parse_patch(&object(&body, "{title?, is_favorite?}")?)?;
    st.engine.patch_session(&sid, patch).await?;
    Ok(Json(st.engine.get_session(&sid, false).await?))
}

/// Longest accepted search query, in characters.
const MAX_QUERY_CHARS: usize = 200;

pub async fn search(State(st): State<AppState>, q: Q) -> ApiResult<Response> {
    let text = q.get("q").map(|s| s.trim()).unwrap_or("");
    if text.chars().count() > MAX_QUERY_CHARS {
        return Err(ApiError::bad_request(
            "invalid-query",
            format!("q must be at most {MAX_QUERY_CHARS} characters"),
        ));
    }
    Ok(Json(st.engine.search_sessions(text).await?).into_response())
}

pub async fn usage(State(st): State<AppState>, Path(sid): Path<String>) -> ApiResult<Response> {
    Ok(Json(st.engine.session_usage(&sid).await?).into_response())
}

pub async fn transcript_md(
    State(st): State<AppState>,
    Path(sid): Path<String>,
) -> ApiResult<Response> {
    let md = st.engine.transcript_markdown(&sid).await?;
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/markdown; charset=utf-8")],
        md,
    )
        .into_response())
}

pub async fn suggest(
    State(st): State<AppState>,
    Path(sid): Path<String>,
    q: Q,
) -> ApiResult<Response> {
    let kind = q.get("kind").map(String::as_str).unwrap_or("file");
    if kind != "file" {
        return Err(ApiError::bad_request(
            "invalid-kind",
            format!("unknown suggestion kind {kind:?}; known: file"),
        ));
    }
    let text = q.get("q").map(String::as_str).unwrap_or("");
    if text.chars().count() > MAX_QUERY_CHARS {
        return Err(ApiError::bad_request(
            "invalid-query",
            format!("q must be at most {MAX_QUERY_CHARS} characters"),
        ));
    }
    Ok(Json(st.engine.suggest_files(&sid, text).await?).into_response())
}

/// `PATCH …/model {provider, model}`; both blank (or absent) clear the pin.
pub async fn set_model(
    State(st): State<AppState>,
    Path(sid): Path<String>,
    body: JsonBody,
) -> ApiResult<Response> {
    let m = object(&body, "{provider, model}")?;
    let text = |k: &str| -> ApiResult<String> {
        match m.get(k) {
            None | Some(Value::Null) => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.trim().to_string()),
            Some(_) => Err(invalid(format!("{k} must be a string"))),
        }
    };
    let (provider, model) = (text("provider")?, text("model")?);
    let pref = match (provider.is_empty(), model.is_empty()) {
        (true, true) => None,
        (true, false) => {
            return Err(invalid(
                "provider is required with a model (send both blank to clear the pin)",
            ))
        }
        _ => Some(ModelPref { provider, model }),
    };
    Ok(Json(st.engine.set_session_model(&sid, pref).await?).into_response())
}

pub async fn fork_points(
    State(st): State<AppState>,
    Path(sid): Path<String>,
) -> ApiResult<Response> {
    Ok(Json(st.engine.fork_points(&sid).await?).into_response())
}

pub async fn fork(
    State(st): State<AppState>,
    Path(sid): Path<String>,
    body: JsonBody,
) -> ApiResult<Response> {
    let text = |k: &str| -> ApiResult<Option<String>> {
        match body.0.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.trim().to_string())),
            Some(_) => Err(invalid(format!("{k} must be a non-empty string"))),
        }
    };
    if !body.0.is_object() && !body.0.is_null() {
        return Err(invalid(
            "the body must be a JSON object {through_turn_id?, draft_label?}",
        ));
    }
    let req = ForkRequest {
        through_turn_id: text("through_turn_id")?,
        draft_label: text("draft_label")?,
    };
    let new_sid = st.engine.fork_session(&sid, req).await?;
    let soul = st.engine.get_session(&new_sid, false).await?;
    Ok((StatusCode::CREATED, Json(json!({ "session": soul }))).into_response())
}

/// `GET …/workspace/drafts`: the drafts of the session's repository, across sessions.
pub async fn drafts(State(st): State<AppState>, Path(sid): Path<String>) -> ApiResult<Response> {
    let drafts = st.engine.drafts(&sid).await?;
    Ok(Json(json!({ "drafts": drafts })).into_response())
}

/// `POST …/workspace/drafts {label, clean?}`: a new draft, entered.
pub async fn create_draft(
    State(st): State<AppState>,
    Path(sid): Path<String>,
    body: JsonBody,
) -> ApiResult<Response> {
    let m = object(&body, "{label, clean?}")?;
    let label = match m.get("label") {
        Some(Value::String(s)) => s.clone(),
        None | Some(Value::Null) => return Err(invalid("label is required")),
        Some(_) => return Err(invalid("label must be a string")),
    };
    let clean = match m.get("clean") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(invalid("clean must be true or false")),
    };
    let changed = st.engine.create_draft(&sid, &label, clean).await?;
    Ok((StatusCode::CREATED, Json(changed)).into_response())
}

/// `POST …/workspace/resume {workspace_id}`.
pub async fn resume_draft(
    State(st): State<AppState>,
    Path(sid): Path<String>,
    body: JsonBody,
) -> ApiResult<Response> {
    let m = object(&body, "{workspace_id}")?;
    let id = match m.get("workspace_id") {
        Some(Value::String(s)) if !s.trim().is_empty() => s.trim().to_string(),
        _ => {
            return Err(invalid(
                "workspace_id is required (a draft's id from the list)",
            ))
        }
    };
    Ok(Json(st.engine.resume_draft(&sid, &id).await?).into_response())
}

/// `POST …/workspace/stash {}`.
pub async fn stash_draft(
    State(st): State<AppState>,
    Path(sid): Path<String>,
) -> ApiResult<Response> {
    Ok(Json(st.engine.stash_draft(&sid).await?).into_response())
}

/// `DELETE …/workspace/drafts/:workspace_id {reason?}`.
pub async fn abandon_draft(
    State(st): State<AppState>,
    Path((sid, id)): Path<(String, String)>,
    body: JsonBody,
) -> ApiResult<Response> {
    let reason = match body.0.get("reason") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err(invalid("reason must be a string")),
    };
    Ok(Json(st.engine.abandon_draft(&sid, &id, reason).await?).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(v: Value) -> serde_json::Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn a_patch_takes_a_trimmed_title_and_a_favorite_flag() {
        let p = parse_patch(&map(json!({"title": "  Plan  ", "is_favorite": true}))).unwrap();
        assert_eq!(p.title.as_deref(), Some("Plan"));
        assert_eq!(p.is_favorite, Some(true));
    }

    #[test]
    fn malformed_patch_fields_are_refused_with_the_field_named() {
        for (body, needle) in [
            (json!({"title": ""}), "blank"),
            (json!({"title": 7}), "title must be a string"),
            (json!({"is_favorite": "yes"}), "is_favorite"),
            (json!({"title": "x".repeat(201)}), "at most"),
            (json!({"title": "a\nb"}), "one line"),
            (json!({"other": 1}), "nothing to change"),
        ] {
            let e = parse_patch(&map(body.clone())).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{body}");
            assert!(e.message.contains(needle), "{body}: {}", e.message);
        }
    }
}
