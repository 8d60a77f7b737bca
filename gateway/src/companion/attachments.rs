//! A turn's inline uploads: checked at submit (raw base64 or a data URL; images of the types
//! both dialects accept, and UTF-8 text files), stored with the turn, and turned into the
//! user message the model receives (images as image parts, text files as fenced text).

use super::errors::AttachmentError;
use serde_json::{json, Value};
use vis_companion_api::upload;
use vis_companion_api::SubmitTurn;
use vis_providers::{ChatMessage, Image};

pub const MAX_FILES: usize = 8;
pub const MAX_FILE_BYTES: usize = 26_214_400;
/// Largest text file sent to the model as text.
pub const MAX_TEXT_BYTES: usize = 1 << 20;
/// Images both wire dialects accept (advertised in `/v1/capabilities`).
pub const IMAGE_TYPES: &[&str] = &["image/jpeg", "image/png", "image/gif", "image/webp"];

fn is_text(media: &str) -> bool {
    media.starts_with("text/")
        || matches!(
            media,
            "application/json" | "application/xml" | "application/yaml" | "application/x-yaml"
        )
}

/// Checks the uploads against the advertised caps and keeps them as
/// `{id, filename, media_type, size, base64}` (raw base64, whatever form was sent).
pub fn check(req: &SubmitTurn) -> Result<Vec<Value>, AttachmentError> {
    use base64::Engine as _;
    let bad = |reason: String| AttachmentError { reason };
    let Some(atts) = &req.attachments else {
        return Ok(vec![]);
    };
    if atts.len() > MAX_FILES {
        return Err(bad(format!("at most {MAX_FILES} attachments per turn")));
    }
    let mut out = Vec::new();
    for (i, a) in atts.iter().enumerate() {
        let Some(raw) = a.base64.as_deref() else {
            return Err(bad(format!("attachment {i} has no base64 data")));
        };
        // A cheap size check before decoding anything.
        if raw.len() / 4 * 3 > MAX_FILE_BYTES + 3 {
            return Err(bad(format!(
                "attachment {i} exceeds {MAX_FILE_BYTES} bytes"
            )));
        }
        let decoded = upload::decode(raw, a.media_type.as_deref())
            .map_err(|e| bad(format!("attachment {i}: {e}")))?;
        if decoded.bytes.len() > MAX_FILE_BYTES {
            return Err(bad(format!(
                "attachment {i} exceeds {MAX_FILE_BYTES} bytes"
            )));
        }
        let media = decoded.media_type.unwrap_or_default();
        let text = is_text(&media);
        if !IMAGE_TYPES.contains(&media.as_str()) && !text {
            return Err(bad(format!(
                "attachment {i} has media type {media:?}; the model receives images ({}) and \
                 UTF-8 text files (text/*, application/json)",
                IMAGE_TYPES.join(", ")
            )));
        }
        if text {
            if decoded.bytes.len() > MAX_TEXT_BYTES {
                return Err(bad(format!(
                    "attachment {i} is a text file over {MAX_TEXT_BYTES} bytes"
                )));
            }
            if std::str::from_utf8(&decoded.bytes).is_err() {
                return Err(bad(format!("attachment {i} ({media}) is not UTF-8 text")));
            }
        }
        let filename = a
            .filename
            .clone()
            .map(|f| f.trim().chars().take(255).collect::<String>())
            .filter(|f| !f.is_empty())
            .unwrap_or_else(|| format!("attachment-{}", i + 1));
        out.push(json!({
            "id": uuid::Uuid::new_v4().to_string(),
            "filename": filename,
            "media_type": media,
            "size": decoded.bytes.len(),
            "base64": base64::engine::general_purpose::STANDARD.encode(&decoded.bytes),
        }));
    }
    Ok(out)
}

/// The user message of a turn: images as image parts, text files appended as fenced text.
pub fn user_message(request: &str, atts: &[Value]) -> ChatMessage {
    use base64::Engine as _;
    let mut text = request.to_string();
    let mut images = Vec::new();
    for a in atts {
        let media = a["media_type"].as_str().unwrap_or("");
        let b64 = a["base64"].as_str().unwrap_or("");
        let name = a["filename"].as_str().unwrap_or("file");
        if IMAGE_TYPES.contains(&media) {
            images.push(Image {
                media_type: media.to_string(),
                base64: b64.to_string(),
            });
        } else if is_text(media) {
            let body = base64::engine::general_purpose::STANDARD
                .decode(b64)
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
                .unwrap_or_default();
            text.push_str(&format!(
                "\n\n[Attached file `{name}` ({media})]\n```\n{body}\n```"
            ));
        }
    }
    if images.is_empty() {
        ChatMessage::User { text }
    } else {
        ChatMessage::UserImages { text, images }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vis_companion_api::Attachment;

    fn req(atts: Vec<(&str, Option<&str>, &str)>) -> SubmitTurn {
        SubmitTurn {
            attachments: Some(
                atts.into_iter()
                    .map(|(f, m, b)| Attachment {
                        filename: Some(f.into()),
                        media_type: m.map(str::to_string),
                        base64: Some(b.into()),
                    })
                    .collect(),
            ),
            ..Default::default()
        }
    }

    const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

    #[test]
    fn a_data_url_image_is_kept_as_raw_base64_with_its_type() {
        let url = format!("data:image/png;base64,{PNG}");
        let out = check(&req(vec![("a.png", None, &url)])).unwrap();
        assert_eq!(out[0]["media_type"], "image/png");
        assert_eq!(out[0]["base64"], PNG);
        assert_eq!(out[0]["size"], 70);
        match user_message("look", &out) {
            ChatMessage::UserImages { text, images } => {
                assert_eq!(text, "look");
                assert_eq!(images[0].base64, PNG);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_pdf_is_refused_and_a_text_file_reaches_the_model_as_text() {
        let e = check(&req(vec![(
            "a.pdf",
            None,
            "data:application/pdf;base64,JVBERi0=",
        )]))
        .unwrap_err();
        let e = vis_companion_api::ApiError::from(e);
        assert_eq!(e.kind, "invalid-attachment");
        assert!(e.message.contains("application/pdf"), "{}", e.message);
        let out = check(&req(vec![("n.txt", Some("text/plain"), "aGVsbG8=")])).unwrap();
        match user_message("read", &out) {
            ChatMessage::User { text } => assert!(text.contains("```\nhello\n```"), "{text}"),
            other => panic!("{other:?}"),
        }
    }
}
