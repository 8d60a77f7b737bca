//! Small text helpers shared by the tools: line splitting, binary sniffing, cutting, numbers.

use std::borrow::Cow;

/// How many bytes at the start of a file are checked for a NUL byte.
pub(crate) const BINARY_SNIFF: usize = 8 * 1024;

/// True when the first 8 KiB hold a NUL byte.
pub(crate) fn is_binary(bytes: &[u8]) -> bool {
    bytes[..bytes.len().min(BINARY_SNIFF)].contains(&0)
}

/// One line of a file: its content and its terminator (`\n`, `\r\n` or empty for a last line
/// without newline). Concatenating all lines gives back the file byte for byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Line<'a> {
    pub content: &'a [u8],
    pub terminator: &'a [u8],
}

/// Splits a file into lines. `""` has no line, `"a"` and `"a\n"` have one, `"\n"` has one empty one.
pub(crate) fn split_lines(bytes: &[u8]) -> Vec<Line<'_>> {
    let mut lines = Vec::new();
    let mut start = 0;
    while start < bytes.len() {
        match bytes[start..].iter().position(|&b| b == b'\n') {
            Some(i) => {
                let nl = start + i;
                let cr = nl > start && bytes[nl - 1] == b'\r';
                let end = if cr { nl - 1 } else { nl };
                lines.push(Line {
                    content: &bytes[start..end],
                    terminator: &bytes[end..=nl],
                });
                start = nl + 1;
            }
            None => {
                lines.push(Line {
                    content: &bytes[start..],
                    terminator: &[],
                });
                start = bytes.len();
            }
        }
    }
    lines
}

/// Cuts `s` to at most `max` chars, ending with `…` when something was cut.
pub(crate) fn cut(s: &str, max: usize) -> Cow<'_, str> {
    match s.char_indices().nth(max.saturating_sub(1)) {
        Some((i, _)) if s[i..].chars().nth(1).is_some() => Cow::Owned(format!("{}…", &s[..i])),
        _ => Cow::Borrowed(s),
    }
}

/// `8123` → `8,123`.
pub(crate) fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    let mut until_comma = match digits.len() % 3 {
        0 => 3,
        r => r,
    };
    for c in digits.chars() {
        if until_comma == 0 {
            out.push(',');
            until_comma = 3;
        }
        out.push(c);
        until_comma -= 1;
    }
    out
}

/// A string as a Python literal, for "how to read on" hints: `"src/x.rs"`.
pub(crate) fn py_str(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_keep_their_terminators_so_the_file_can_be_rebuilt() {
        let src = b"a\r\nb\n\nc";
        let lines = split_lines(src);
        let contents: Vec<_> = lines.iter().map(|l| l.content).collect();
        assert_eq!(contents, [&b"a"[..], b"b", b"", b"c"]);
        let rebuilt: Vec<u8> = lines
            .iter()
            .flat_map(|l| [l.content, l.terminator].concat())
            .collect();
        assert_eq!(rebuilt, src);
        assert!(split_lines(b"").is_empty());
        assert_eq!(split_lines(b"\n").len(), 1);
        assert_eq!(split_lines(b"a\n").len(), 1);
    }

    #[test]
    fn cutting_counts_chars_not_bytes_and_marks_the_cut() {
        assert_eq!(cut("abcdef", 3), "ab…");
        assert_eq!(cut("abc", 3), "abc");
        assert_eq!(cut("ééé", 3), "ééé");
        assert_eq!(cut("éééé", 3), "éé…");
    }

    #[test]
    fn numbers_get_thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(8123), "8,123");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }

    #[test]
    fn a_nul_byte_in_the_first_8_kib_means_binary() {
        assert!(is_binary(b"ab\0c"));
        assert!(!is_binary(b"abc"));
        let mut late = vec![b'a'; BINARY_SNIFF];
        late.push(0);
        assert!(!is_binary(&late));
    }
}
