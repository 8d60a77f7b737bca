//! The path-parameter extractor of every route: axum's `Path`, with a rejection (a segment
//! that is not valid UTF-8 after percent-decoding, say) answered as the API's JSON error.

use crate::error::ApiError;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

/// `Path<T>` whose rejection is a JSON `400 invalid-request` naming what is wrong.
pub struct Path<T>(pub T);

impl<S, T> FromRequestParts<S> for Path<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(v)) => Ok(Path(v)),
            Err(e) => Err(ApiError::bad_request(
                "invalid-request",
                format!("bad path parameter: {}", e.body_text()),
            )),
        }
    }
}
