//! Anchors: `LINE:HASH`, where HASH is 3 lowercase hex chars of a hash of the line's content.
//!
//! The hash is FNV-1a 32-bit over the line's bytes (without its `\n` / `\r\n` terminator),
//! xor-folded to 12 bits as the FNV authors recommend for short hashes:
//! `((h >> 12) ^ h) & 0xfff`. It is stable across runs, platforms and versions of this crate.

use std::fmt;
use std::str::FromStr;

use crate::FileError;

/// The separator between an anchor and the line's text: U+2502 and one space.
pub const SEPARATOR: &str = "│ ";

/// The 3 lowercase hex chars of a line's hash (`line` without its terminator).
pub fn anchor_hash(line: &str) -> String {
    hash_bytes(line.as_bytes())
}

pub(crate) fn hash_bytes(line: &[u8]) -> String {
    format!("{:03x}", hash12(line))
}

fn hash12(line: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for &b in line {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    ((h >> 12) ^ h) & 0xfff
}

/// One line shown to the model: `12:a3f│ text`. The text is lossily decoded as UTF-8 and, when
/// `max_chars` is given, cut there with `…`. The hash is always of the full raw line.
pub(crate) fn anchored(number: usize, line: &[u8], max_chars: Option<usize>) -> String {
    let text = String::from_utf8_lossy(line);
    let text = match max_chars {
        Some(max) => crate::text::cut(&text, max),
        None => text,
    };
    format!("{number}:{}{SEPARATOR}{text}", hash_bytes(line))
}

/// A parsed anchor. `line` is 1-based; line 0 (written `0`, hash optional) is the top of the
/// file and is only valid as the `after` of an insertion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Anchor {
    pub line: usize,
    pub hash: String,
}

impl Anchor {
    /// Parses `LINE:HASH`. Lenient where it is safe: surrounding spaces are ignored, the hash may
    /// be upper case, and a whole pasted anchored line (`12:a3f│ text`) is cut at the separator.
    pub fn parse(s: &str) -> Result<Anchor, FileError> {
        let bad = || FileError::BadAnchor(s.to_string());
        let core = s.split('│').next().unwrap_or("").trim();
        let (line, hash) = match core.split_once(':') {
            Some((l, h)) => (l.trim(), h.trim()),
            None => (core, ""),
        };
        let line: usize = line.parse().map_err(|_| bad())?;
        if line == 0 {
            return Ok(Anchor {
                line: 0,
                hash: String::new(),
            });
        }
        if hash.len() != 3 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad());
        }
        Ok(Anchor {
            line,
            hash: hash.to_ascii_lowercase(),
        })
    }

    /// True when this anchor still names `content` (the raw current line).
    pub(crate) fn matches(&self, content: &[u8]) -> bool {
        hash_bytes(content) == self.hash
    }
}

impl fmt::Display for Anchor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "0")
        } else {
            write!(f, "{}:{}", self.line, self.hash)
        }
    }
}

impl FromStr for Anchor {
    type Err = FileError;
    fn from_str(s: &str) -> Result<Anchor, FileError> {
        Anchor::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_three_lowercase_hex_chars_and_stable() {
        // FNV-1a 32 of "" is 0x811c9dc5: (0x811c9 ^ 0x811c9dc5) & 0xfff = 0xc0c.
        assert_eq!(anchor_hash(""), "c0c");
        let h = anchor_hash("fn main() {");
        assert_eq!(h.len(), 3);
        assert!(h
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        assert_eq!(h, anchor_hash("fn main() {"));
    }

    #[test]
    fn anchors_change_when_a_line_changes() {
        let a = anchor_hash("let x = 1;");
        assert_ne!(a, anchor_hash("let x = 2;"));
        assert_ne!(a, anchor_hash("let x = 1; "));
        assert_ne!(a, anchor_hash(" let x = 1;"));
    }

    #[test]
    fn an_anchored_line_is_number_hash_separator_text() {
        let line = anchored(12, b"fn main() {", None);
        assert_eq!(
            line,
            format!("12:{}│ fn main() {{", anchor_hash("fn main() {"))
        );
        let cut = anchored(1, "é".repeat(10).as_bytes(), Some(4));
        assert!(cut.ends_with("│ ééé…"), "{cut}");
    }

    #[test]
    fn an_anchor_parses_leniently_but_refuses_garbage() {
        assert_eq!(
            Anchor::parse(" 12:A3F ").expect("ok"),
            Anchor {
                line: 12,
                hash: "a3f".into()
            }
        );
        assert_eq!(Anchor::parse("12:a3f│ fn main() {").expect("ok").line, 12);
        assert_eq!(Anchor::parse("0").expect("top").line, 0);
        for bad in [
            "", "12", "12:", "12:a3", "12:a3fz", "x:a3f", "-1:a3f", "12:ghi",
        ] {
            let e = Anchor::parse(bad).expect_err(bad);
            assert_eq!(e.kind(), "bad-anchor", "{bad}");
        }
        assert_eq!(Anchor::parse("7:0ab").expect("ok").to_string(), "7:0ab");
    }
}
