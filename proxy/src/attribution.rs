//! Attribution (docs/decisions.md, P2): extract the token, ask [`Attribution`].

use base64::Engine;

use crate::deny::{reason, Denial};
use crate::traits::{Attribution, Lookup, Principal};

/// Extract the token (the Basic username) from a `Proxy-Authorization`
/// value. Pure; `None` when absent, not Basic, undecodable or blank.
pub fn token_from_proxy_authorization(value: &[u8]) -> Option<String> {
    let v = std::str::from_utf8(value).ok()?.trim();
    // `get`, not `[..6]`: byte 6 may fall inside a multi-byte char.
    if !v.get(..6).is_some_and(|p| p.eq_ignore_ascii_case("basic ")) {
        return None;
    }
    // Decoded on the stack: this runs for every proxied request.
    let encoded = v[6..].trim().as_bytes();
    let engine = &base64::engine::general_purpose::STANDARD;
    let mut buf = [0u8; 192];
    let raw: std::borrow::Cow<[u8]> = match engine.decode_slice(encoded, &mut buf) {
        Ok(n) => std::borrow::Cow::Borrowed(&buf[..n]),
        Err(base64::DecodeSliceError::OutputSliceTooSmall) => {
            std::borrow::Cow::Owned(engine.decode(encoded).ok()?)
        }
        Err(_) => return None,
    };
    let text = std::str::from_utf8(&raw).ok()?;
    let user = text.split(':').next().unwrap_or("").trim();
    if user.is_empty() {
        None
    } else {
        Some(user.to_string())
    }
}

/// The first `Proxy-Authorization` header's token.
pub fn token_from_headers(headers: &http::HeaderMap) -> Option<String> {
    headers
        .get(http::header::PROXY_AUTHORIZATION)
        .and_then(|v| token_from_proxy_authorization(v.as_bytes()))
}

/// Resolve a token to a principal, or the denial to send (407 / 403).
pub async fn authorize(attr: &dyn Attribution, token: Option<&str>) -> Result<Principal, Denial> {
    let token = match token.map(str::trim) {
        Some(t) if !t.is_empty() => t,
        _ => {
            tracing::debug!("unattributable egress: no proxy token");
            return Err(Denial::auth(reason::MISSING_TOKEN));
        }
    };
    match attr.lookup(token).await {
        Lookup::Found(p) => Ok(p),
        Lookup::Unknown => {
            tracing::debug!("unattributable egress: unknown proxy token");
            Err(Denial::auth(reason::UNKNOWN_TOKEN))
        }
        Lookup::Failed(msg) => {
            tracing::warn!(error = %msg, "proxy attribution backend failed");
            Err(Denial::policy_error())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    #[test]
    fn the_basic_username_is_the_token() {
        let v = format!("  bAsIc {}  ", b64("tok-123:ignored"));
        assert_eq!(
            token_from_proxy_authorization(v.as_bytes()).as_deref(),
            Some("tok-123")
        );
        let v = format!("Basic {}", b64("tok"));
        assert_eq!(
            token_from_proxy_authorization(v.as_bytes()).as_deref(),
            Some("tok")
        );
    }

    #[test]
    fn long_credentials_decode_like_short_ones() {
        let token = "t".repeat(300);
        let v = format!("Basic {}", b64(&format!("{token}:{}", "p".repeat(300))));
        assert_eq!(
            token_from_proxy_authorization(v.as_bytes()).as_deref(),
            Some(token.as_str())
        );
        assert_eq!(
            token_from_proxy_authorization(format!("Basic {}!", b64(&token)).as_bytes()),
            None
        );
    }

    #[test]
    fn a_multibyte_char_across_byte_six_gives_no_token_not_a_panic() {
        // Found by `cargo fuzz run head` (crash-19ff7d39…).
        assert_eq!(token_from_proxy_authorization(b"/r\x008p\xd1\xa2"), None);
        assert_eq!(
            token_from_proxy_authorization("Basic\u{e9}x".as_bytes()),
            None
        );
    }

    #[test]
    fn blank_bad_base64_and_other_schemes_give_no_token() {
        assert_eq!(
            token_from_proxy_authorization(format!("Basic {}", b64(":pw")).as_bytes()),
            None
        );
        assert_eq!(token_from_proxy_authorization(b"Basic !!!"), None);
        assert_eq!(token_from_proxy_authorization(b"Bearer abc"), None);
        assert_eq!(token_from_proxy_authorization(b""), None);
    }
}
