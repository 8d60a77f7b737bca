//! How large a model's context window is, how much of it a request may fill, and how many
//! tokens a request holds (docs/decisions.md, T2).

use vis_providers::{ChatMessage, ToolSpec};

/// The window assumed for a model nothing else names: small enough that an unknown local
/// model is rarely overrun (a refusal still compacts and retries once).
pub const DEFAULT_WINDOW: u64 = 32_000;

/// Well-known models by the start of their id (the last path segment, lower-cased); the
/// longest matching start wins.
const KNOWN: &[(&str, u64)] = &[
    ("gpt-4.1", 1_047_576),
    ("gpt-4o", 128_000),
    ("gpt-4-turbo", 128_000),
    ("gpt-4", 8_192),
    ("gpt-3.5-turbo", 16_385),
    ("gpt-5", 400_000),
    ("o1", 200_000),
    ("o3", 200_000),
    ("o4-mini", 200_000),
    ("codex-mini", 200_000),
    ("claude-", 200_000),
    ("gemini-", 1_048_576),
    ("deepseek", 128_000),
    ("qwen2.5-coder", 32_768),
    ("qwen3-coder", 262_144),
    ("qwen3", 32_768),
    ("llama3.1", 128_000),
    ("llama3.2", 128_000),
    ("llama3.3", 128_000),
    ("llama-3.1", 128_000),
    ("llama-3.2", 128_000),
    ("llama-3.3", 128_000),
    ("meta-llama-3.1", 128_000),
    ("llama3", 8_192),
    ("mistral-large", 128_000),
    ("codestral", 256_000),
    ("devstral", 128_000),
    ("mistral", 32_000),
    ("gpt-oss", 131_072),
];

/// Where a window came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WindowSource {
    /// `context_window` on the provider's entry in `vis.yml`.
    Configured,
    /// The provider's models listing.
    Listed,
    /// The table of well-known models.
    Known,
    /// [`DEFAULT_WINDOW`].
    Default,
}

/// The table's window for a model id, if it knows the model.
pub fn known_window(model: &str) -> Option<u64> {
    let id = model
        .rsplit('/')
        .next()
        .unwrap_or(model)
        .to_ascii_lowercase();
    KNOWN
        .iter()
        .filter(|(start, _)| id.starts_with(start))
        .max_by_key(|(start, _)| start.len())
        .map(|(_, w)| *w)
}

/// The window of `model`: configured, else listed, else known, else the default.
pub fn resolve(configured: Option<u64>, listed: Option<u64>, model: &str) -> (u64, WindowSource) {
    if let Some(w) = configured.filter(|w| *w > 0) {
        return (w, WindowSource::Configured);
    }
    if let Some(w) = listed.filter(|w| *w > 0) {
        return (w, WindowSource::Listed);
    }
    match known_window(model) {
        Some(w) => (w, WindowSource::Known),
        None => (DEFAULT_WINDOW, WindowSource::Default),
    }
}

/// How much of a window one request may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub window: u64,
    /// Kept free for the answer.
    pub reserve: u64,
    /// The most a request may hold: `window - reserve`.
    pub limit: u64,
    /// Above this the older part of the session is compacted first (80 % of `limit`).
    pub threshold: u64,
}

impl Budget {
    pub fn new(window: u64) -> Budget {
        let window = window.max(2_048);
        let reserve = (window / 8).clamp(1_024, 16_384).min(window / 2);
        let limit = window - reserve;
        Budget {
            window,
            reserve,
            limit,
            threshold: limit * 4 / 5,
        }
    }

    /// The answer's token cap to ask for when the window is small enough that a dialect's
    /// default (8192) would not fit beside the request.
    pub fn max_answer_tokens(&self) -> Option<u32> {
        (self.reserve < 8_192).then_some(self.reserve as u32)
    }
}

/// Tokens per image part (a provider bills images by size; this is a typical photo).
const IMAGE_TOKENS: u64 = 1_600;
/// The framing each message adds (role, separators).
const MESSAGE_OVERHEAD: u64 = 6;

/// Tokens of some text: one per three bytes, which over-counts every tokenizer we know for
/// English, code and JSON, so a request estimated to fit does fit.
pub fn text_tokens(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(3)
}

/// Estimated tokens of one message.
pub fn message_tokens(m: &ChatMessage) -> u64 {
    MESSAGE_OVERHEAD
        + match m {
            ChatMessage::User { text } => text_tokens(text.len()),
            ChatMessage::UserImages { text, images } => {
                text_tokens(text.len()) + IMAGE_TOKENS * images.len() as u64
            }
            ChatMessage::Assistant { text, tool_calls } => {
                text_tokens(text.len())
                    + tool_calls
                        .iter()
                        .map(|c| text_tokens(c.name.len() + c.arguments.len() + c.id.len()) + 8)
                        .sum::<u64>()
            }
            ChatMessage::ToolResult {
                call_id, content, ..
            } => text_tokens(content.len() + call_id.len()),
        }
}

/// Estimated tokens of the parts every request of a turn repeats: the system prompt and
/// the tool specifications.
pub fn fixed_tokens(system: &str, tools: &[ToolSpec]) -> u64 {
    let specs: usize = tools
        .iter()
        .map(|t| t.name.len() + t.description.len() + t.parameters.to_string().len())
        .sum();
    text_tokens(system.len() + specs) + 16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_known_start_of_a_model_id_gives_its_window() {
        assert_eq!(known_window("gpt-4o-mini"), Some(128_000));
        assert_eq!(known_window("gpt-4-0613"), Some(8_192));
        assert_eq!(known_window("openai/gpt-4.1"), Some(1_047_576));
        assert_eq!(known_window("claude-sonnet-4-5"), Some(200_000));
        assert_eq!(known_window("qwen2.5-coder:7b"), Some(32_768));
        assert_eq!(known_window("my-finetune"), None);
    }

    #[test]
    fn a_configured_window_beats_the_listing_which_beats_the_table() {
        assert_eq!(
            resolve(Some(6000), Some(9000), "gpt-4o"),
            (6000, WindowSource::Configured)
        );
        assert_eq!(
            resolve(None, Some(9000), "gpt-4o"),
            (9000, WindowSource::Listed)
        );
        assert_eq!(
            resolve(None, None, "gpt-4o"),
            (128_000, WindowSource::Known)
        );
        assert_eq!(
            resolve(None, None, "x"),
            (DEFAULT_WINDOW, WindowSource::Default)
        );
    }

    #[test]
    fn a_budget_keeps_room_for_the_answer_and_compacts_before_the_limit() {
        let b = Budget::new(6_000);
        assert_eq!(b.reserve, 1_024);
        assert_eq!(b.limit, 4_976);
        assert!(b.threshold < b.limit);
        assert_eq!(b.max_answer_tokens(), Some(1_024));
        let big = Budget::new(200_000);
        assert_eq!(big.reserve, 16_384);
        assert_eq!(big.max_answer_tokens(), None);
    }

    #[test]
    fn the_estimate_over_counts_a_four_characters_per_token_tokenizer() {
        let text = "fn main() { println!(\"hello\"); }\n".repeat(100);
        let m = ChatMessage::User { text: text.clone() };
        assert!(message_tokens(&m) >= (text.len() as u64).div_ceil(4));
    }
}
