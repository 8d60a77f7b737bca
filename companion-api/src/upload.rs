//! Inline uploads: `base64` given raw or as a data URL (`data:<type>[;…];base64,<data>`),
//! which is what the Companion app sends.

use base64::Engine as _;

/// An upload's bytes and the media type it declared (the field, else the data URL's).
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded {
    pub media_type: Option<String>,
    pub bytes: Vec<u8>,
}

/// Splits a data URL into its media type and payload; a plain string is all payload.
pub fn split_data_url(s: &str) -> Result<(Option<String>, &str), String> {
    let s = s.trim();
    let Some(rest) = s.strip_prefix("data:") else {
        return Ok((None, s));
    };
    let Some((head, data)) = rest.split_once(',') else {
        return Err("a data URL needs a comma before its data".into());
    };
    let mut parts = head.split(';');
    let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
    if !parts.any(|p| p.trim().eq_ignore_ascii_case("base64")) {
        return Err("only base64 data URLs are accepted".into());
    }
    Ok(((!media.is_empty()).then_some(media), data))
}

/// Decodes raw base64 or a base64 data URL (whitespace ignored, padding optional).
/// `declared` (the request's `media_type`) wins over the data URL's type.
pub fn decode(raw: &str, declared: Option<&str>) -> Result<Decoded, String> {
    let (from_url, data) = split_data_url(raw)?;
    let compact: String = data.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    let trimmed = compact.trim_end_matches('=');
    let bytes = base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(trimmed)
        .map_err(|e| format!("not valid base64: {e}"))?;
    let media_type = declared
        .map(|d| d.trim().to_ascii_lowercase())
        .filter(|d| !d.is_empty())
        .or(from_url);
    Ok(Decoded { media_type, bytes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_data_url_and_raw_base64_decode_to_the_same_bytes() {
        let raw = decode("aGVsbG8=", Some("text/plain")).unwrap();
        let url = decode("data:text/plain;base64,aGVsbG8=", None).unwrap();
        assert_eq!(raw.bytes, b"hello");
        assert_eq!(url.bytes, b"hello");
        assert_eq!(url.media_type.as_deref(), Some("text/plain"));
        assert_eq!(decode("aGVsbG8", None).unwrap().bytes, b"hello");
    }

    #[test]
    fn the_declared_media_type_wins_and_bad_input_is_named() {
        let d = decode("data:image/png;base64,aGk=", Some("IMAGE/JPEG")).unwrap();
        assert_eq!(d.media_type.as_deref(), Some("image/jpeg"));
        assert!(decode("data:image/png,abc", None)
            .unwrap_err()
            .contains("base64"));
        assert!(decode("!!not base64!!", None)
            .unwrap_err()
            .contains("base64"));
        assert!(decode("data:image/png;base64", None)
            .unwrap_err()
            .contains("comma"));
    }
}
