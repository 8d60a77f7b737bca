//! Delta coalescing for streamed text: a delta goes out when a sentence closes in
//! the new tail, after 2 s without one, or at the end; the first non-blank text opens the
//! block and emits at once. `cumulative` carries the full text so far, capped.

use std::time::{Duration, Instant};

pub const CUMULATIVE_CAP: usize = 16_000;
const MAX_QUIET: Duration = Duration::from_millis(2000);

/// What the coalescer asks its owner to emit.
#[derive(Debug, PartialEq, Eq)]
pub enum Out {
    /// Open the block, then emit this delta.
    Open {
        text: String,
        cumulative: String,
    },
    Delta {
        text: String,
        cumulative: String,
    },
}

#[derive(Debug, Default)]
pub struct Coalescer {
    opened: bool,
    full: String,
    pending: String,
    last_emit: Option<Instant>,
}

fn closes_sentence(tail: &str) -> bool {
    if tail.contains('\n') {
        return true;
    }
    let chars: Vec<char> = tail.chars().collect();
    for (i, c) in chars.iter().enumerate() {
        if matches!(c, '.' | '!' | '?' | '…') {
            let mut j = i + 1;
            while j < chars.len()
                && matches!(chars[j], '"' | '\'' | ')' | ']' | '}' | '»' | '”' | '’')
            {
                j += 1;
            }
            if j == chars.len() || chars[j].is_whitespace() {
                return true;
            }
        }
    }
    false
}

impl Coalescer {
    pub fn text(&self) -> &str {
        &self.full
    }

    fn cumulative(&self) -> String {
        self.full.chars().take(CUMULATIVE_CAP).collect()
    }

    fn emit(&mut self, now: Instant) -> Out {
        self.last_emit = Some(now);
        let text = std::mem::take(&mut self.pending);
        if self.opened {
            Out::Delta {
                text,
                cumulative: self.cumulative(),
            }
        } else {
            self.opened = true;
            Out::Open {
                text,
                cumulative: self.cumulative(),
            }
        }
    }

    /// Feeds streamed text.
    pub fn push(&mut self, text: &str, now: Instant) -> Option<Out> {
        self.full.push_str(text);
        self.pending.push_str(text);
        if !self.opened {
            // Empty streams never open a block.
            return (!self.full.trim().is_empty()).then(|| self.emit(now));
        }
        let quiet = self
            .last_emit
            .is_none_or(|t| now.duration_since(t) >= MAX_QUIET);
        (closes_sentence(&self.pending) || quiet).then(|| self.emit(now))
    }

    /// Emits whatever is left at the end of the stream.
    pub fn finish(&mut self, now: Instant) -> Option<Out> {
        (self.opened && !self.pending.is_empty()).then(|| self.emit(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blank_text_never_opens_a_block() {
        let mut c = Coalescer::default();
        let t = Instant::now();
        assert_eq!(c.push("  ", t), None);
        assert_eq!(c.finish(t), None);
    }

    #[test]
    fn the_first_non_blank_text_opens_and_later_text_waits_for_a_sentence_end() {
        let mut c = Coalescer::default();
        let t = Instant::now();
        assert!(matches!(c.push("Hel", t), Some(Out::Open { .. })));
        assert_eq!(c.push("lo wor", t), None);
        match c.push("ld. Next", t) {
            Some(Out::Delta { text, cumulative }) => {
                assert_eq!(text, "lo world. Next");
                assert_eq!(cumulative, "Hello world. Next");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(c.push(" part", t), None);
        assert!(matches!(c.finish(t), Some(Out::Delta { text, .. }) if text == " part"));
    }

    #[test]
    fn two_quiet_seconds_force_a_delta() {
        let mut c = Coalescer::default();
        let t = Instant::now();
        c.push("a", t);
        assert_eq!(c.push("b", t + Duration::from_millis(500)), None);
        assert!(c.push("c", t + Duration::from_millis(2100)).is_some());
    }

    #[test]
    fn a_period_inside_a_number_does_not_close_a_sentence() {
        assert!(!closes_sentence("version 1.5 is"));
        assert!(closes_sentence("done.\" Then"));
        assert!(closes_sentence("line\n"));
    }
}
