//! Request bodies: read with a size cap, parsed as JSON whatever the Content-Type; a blank
//! or malformed body counts as `null` (§2).

use crate::error::ApiError;
use crate::AppState;
use axum::extract::{FromRequest, Request};
use serde_json::Value;

/// The request body as JSON (`Value::Null` when blank or malformed).
pub struct JsonBody(pub Value);

impl FromRequest<AppState> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let limit = state.cfg.max_body_bytes;
        let bytes = axum::body::to_bytes(req.into_body(), limit)
            .await
            .map_err(|e| {
                let mut src: Option<&dyn std::error::Error> = Some(&e);
                while let Some(err) = src {
                    if err.is::<http_body_util::LengthLimitError>() {
                        return ApiError::payload_too_large(limit);
                    }
                    src = err.source();
                }
                ApiError::bad_request(
                    "bad-request",
                    format!("could not read the request body: {e}"),
                )
            })?;
        Ok(JsonBody(
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        ))
    }
}

impl JsonBody {
    /// The body as a typed request; `null` or a non-matching shape gives the default.
    pub fn parse<T: serde::de::DeserializeOwned + Default>(&self) -> T {
        serde_json::from_value(self.0.clone()).unwrap_or_default()
    }
}
