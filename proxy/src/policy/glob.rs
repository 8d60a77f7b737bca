//! Path globs (docs/decisions.md, egress policy rules): anchored full match; `?` = one character; `*` (and
//! `**`) = any run of characters INCLUDING `/`; everything else literal.
//! Hand-written because globset treats `[`, `{` and `/` specially, which the
//! spec forbids.

/// A compiled path glob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob {
    tokens: Vec<Tok>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Lit(char),
    One,
    Star,
}

impl Glob {
    /// Compile a pattern.
    pub fn new(pattern: &str) -> Self {
        let mut tokens = Vec::new();
        for c in pattern.chars() {
            match c {
                '*' => {
                    if tokens.last() != Some(&Tok::Star) {
                        tokens.push(Tok::Star)
                    }
                }
                '?' => tokens.push(Tok::One),
                c => tokens.push(Tok::Lit(c)),
            }
        }
        Glob { tokens }
    }

    /// Anchored match (iterative, with single-star backtracking: O(n·m) worst case).
    pub fn matches(&self, text: &str) -> bool {
        let t: Vec<char> = text.chars().collect();
        let p = &self.tokens;
        let (mut i, mut j) = (0usize, 0usize);
        let mut star: Option<(usize, usize)> = None;
        while i < t.len() {
            match p.get(j) {
                Some(Tok::Star) => {
                    star = Some((j, i));
                    j += 1;
                }
                Some(Tok::One) => {
                    i += 1;
                    j += 1;
                }
                Some(Tok::Lit(c)) if *c == t[i] => {
                    i += 1;
                    j += 1;
                }
                _ => match star {
                    Some((sj, si)) => {
                        j = sj + 1;
                        i = si + 1;
                        star = Some((sj, si + 1));
                    }
                    None => return false,
                },
            }
        }
        p[j..].iter().all(|t| *t == Tok::Star)
    }
}

#[cfg(test)]
mod tests {
    use super::Glob;

    #[test]
    fn star_crosses_slashes_and_query_is_part_of_the_text() {
        assert!(Glob::new("/repos/**").matches("/repos/a/b?x=1"));
        assert!(!Glob::new("/v1/issues").matches("/v1/issues?x=1"));
        assert!(Glob::new("*").matches("/anything/at/all"));
        assert!(Glob::new("**").matches(""));
    }

    #[test]
    fn regex_metacharacters_are_literal_and_question_mark_is_one_char() {
        assert!(Glob::new("/a.b(c)[d]{e}|+^$").matches("/a.b(c)[d]{e}|+^$"));
        assert!(!Glob::new("/a.b").matches("/axb"));
        assert!(Glob::new("/v?/x").matches("/v1/x"));
        assert!(!Glob::new("/v?/x").matches("/v12/x"));
    }

    #[test]
    fn backtracking_finds_late_matches() {
        assert!(Glob::new("/a/*/c/*.json").matches("/a/b/c/x/c/y.json"));
        assert!(!Glob::new("/a/*/c").matches("/a/b/d"));
    }
}
