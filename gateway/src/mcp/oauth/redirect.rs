//! The browser's side of an MCP sign-in: the loopback listener the authorization server
//! redirects to, which finishes the flow and shows a page saying how it went. An HTTP surface
//! of its own (a page for a person, not the Companion API), so it picks its page's status
//! here; the Companion API's answers for the same failures are chosen in
//! `engine/routes/mcp.rs`.

use super::flow::Flow;
use super::AuthFailure;
use axum::http::StatusCode;
use std::sync::Arc;

/// The status of the page shown for a failed sign-in.
fn page_status(e: &AuthFailure) -> StatusCode {
    match e {
        AuthFailure::BadInput(_)
        | AuthFailure::Denied(_)
        | AuthFailure::StateMismatch
        | AuthFailure::Rejected(_) => StatusCode::BAD_REQUEST,
        AuthFailure::UnknownFlow(_) => StatusCode::NOT_FOUND,
        AuthFailure::Finished(_) | AuthFailure::NotNeeded(_) => StatusCode::CONFLICT,
        AuthFailure::Unsupported(_) | AuthFailure::Upstream(_) => StatusCode::BAD_GATEWAY,
        AuthFailure::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Serves `GET /mcp-callback` at the redirect URI until the flow ends or expires.
pub fn serve(flow: Arc<Flow>, listener: tokio::net::TcpListener, ttl: std::time::Duration) {
    use axum::extract::RawQuery;
    use axum::response::Html;
    let stop = flow.stop.clone();
    let handler = move |RawQuery(q): RawQuery| {
        let flow = flow.clone();
        async move {
            let q = q.unwrap_or_default();
            let r = match super::flow::parse_input(&format!("?{q}")) {
                Ok(cb) => flow.finish(cb).await,
                Err(e) => Err(e),
            };
            let server = html_escape(&flow.server);
            let (status, body) = match r {
                Ok(()) => (
                    StatusCode::OK,
                    format!("<h2>Signed in to {server}</h2><p>You can close this tab.</p>"),
                ),
                Err(e) => (
                    page_status(&e),
                    format!(
                        "<h2>Sign-in to {server} failed</h2><p>{}</p>",
                        html_escape(&e.to_string())
                    ),
                ),
            };
            let page = format!(
                "<!doctype html><meta charset=utf-8><title>Vis: MCP sign-in</title>\
                 <body style=\"font-family:sans-serif;padding:2em\">{body}</body>"
            );
            (status, Html(page))
        }
    };
    let app = axum::Router::new().route("/mcp-callback", axum::routing::get(handler));
    tokio::spawn(async move {
        let serve =
            axum::serve(listener, app).with_graceful_shutdown(stop.clone().cancelled_owned());
        tokio::select! {
            _ = serve => {}
            _ = tokio::time::sleep(ttl) => stop.cancel(),
        }
    });
}
