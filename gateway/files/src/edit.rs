//! Edits: what `patch` applies, typed, plus the parser of the wire form the model writes.
//!
//! Wire form (one dict, or a list of dicts):
//! - `{"from": "12:a3f", "to": "14:9c1", "replace": "..."}`: replace lines 12..=14 (`to`
//!   defaults to `from`; `""` deletes them);
//! - `{"after": "12:a3f", "insert": "..."}`: insert after line 12 (`"after": "0"` = at the top);
//! - `{"before": "12:a3f", "insert": "..."}`: insert before line 12.

use serde_json::{Map, Value};

use crate::{Anchor, FileError};

/// One edit of a file. Anchors are checked against the file when the patch is applied. Text is
/// split into lines; a trailing newline in it does not add an empty line, and its line endings
/// are converted to the file's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Edit {
    /// Replaces lines `from..=to` with `text`; an empty `text` deletes them.
    Replace {
        from: Anchor,
        to: Anchor,
        text: String,
    },
    /// Inserts `text` before the anchored line, keeping that line.
    InsertBefore { before: Anchor, text: String },
    /// Inserts `text` after the anchored line, keeping that line; the anchor `0` means the top
    /// of the file (the only way to add text to an empty file).
    InsertAfter { after: Anchor, text: String },
}

impl Edit {
    /// `Replace` from anchor strings; `to: None` means the single line `from`.
    pub fn replace(
        from: &str,
        to: Option<&str>,
        text: impl Into<String>,
    ) -> Result<Edit, FileError> {
        let from = Anchor::parse(from)?;
        let to = match to {
            Some(t) => Anchor::parse(t)?,
            None => from.clone(),
        };
        Ok(Edit::Replace {
            from,
            to,
            text: text.into(),
        })
    }

    /// `InsertBefore` from an anchor string.
    pub fn insert_before(before: &str, text: impl Into<String>) -> Result<Edit, FileError> {
        Ok(Edit::InsertBefore {
            before: Anchor::parse(before)?,
            text: text.into(),
        })
    }

    /// `InsertAfter` from an anchor string (`"0"` = the top of the file).
    pub fn insert_after(after: &str, text: impl Into<String>) -> Result<Edit, FileError> {
        Ok(Edit::InsertAfter {
            after: Anchor::parse(after)?,
            text: text.into(),
        })
    }

    /// The new text of the edit.
    pub fn text(&self) -> &str {
        match self {
            Edit::Replace { text, .. }
            | Edit::InsertBefore { text, .. }
            | Edit::InsertAfter { text, .. } => text,
        }
    }
}

const SHAPES: &str = "an edit is {\"from\": \"12:a3f\", \"to\": \"14:9c1\", \"replace\": \"...\"} \
     (\"to\" optional), {\"after\": \"12:a3f\", \"insert\": \"...\"} or {\"before\": \"12:a3f\", \"insert\": \"...\"}";

/// Parses the wire form the model writes: one edit dict or a list of them.
///
/// - `{"from": "12:a3f", "to": "14:9c1", "replace": "..."}` → [`Edit::Replace`] (`to` optional,
///   defaults to `from`; `"replace": ""` deletes the lines);
/// - `{"after": "12:a3f", "insert": "..."}` → [`Edit::InsertAfter`] (`"after": "0"` = the top);
/// - `{"before": "12:a3f", "insert": "..."}` → [`Edit::InsertBefore`].
///
/// Errors are [`FileError::BadEdit`] naming the edit's 0-based index and the bad field.
pub fn edits_from_json(v: &Value) -> Result<Vec<Edit>, FileError> {
    match v {
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| edit_from_json(i, item))
            .collect(),
        Value::Object(_) => Ok(vec![edit_from_json(0, v)?]),
        other => Err(FileError::BadEdit {
            index: 0,
            why: format!(
                "expected a list of edits or one edit, got {}; {SHAPES}",
                type_name(other)
            ),
        }),
    }
}

fn edit_from_json(index: usize, v: &Value) -> Result<Edit, FileError> {
    let bad = |why: String| FileError::BadEdit { index, why };
    let Value::Object(map) = v else {
        return Err(bad(format!(
            "expected a dict, got {}; {SHAPES}",
            type_name(v)
        )));
    };
    if let Some(key) = map
        .keys()
        .find(|k| !["from", "to", "replace", "after", "before", "insert"].contains(&k.as_str()))
    {
        return Err(bad(format!("unknown field `{key}`; {SHAPES}")));
    }
    let has = |k: &str| map.contains_key(k);
    let kinds = [has("from"), has("after"), has("before")];
    if kinds.iter().filter(|&&k| k).count() != 1 {
        return Err(bad(format!(
            "give exactly one of `from`, `after` or `before`; {SHAPES}"
        )));
    }
    if has("from") {
        if has("insert") {
            return Err(bad(
                "`insert` goes with `after`/`before`; with `from` the new text is `replace`".into(),
            ));
        }
        let from = anchor_field(index, map, "from")?;
        let to = match map.get("to") {
            None | Some(Value::Null) => from.clone(),
            Some(_) => anchor_field(index, map, "to")?,
        };
        let text = string_field(
            index,
            map,
            "replace",
            "the new text; \"\" deletes the lines",
        )?;
        return Ok(Edit::Replace { from, to, text });
    }
    if has("to") || has("replace") {
        return Err(bad(
            "`to`/`replace` go with `from`; with `after`/`before` the new text is `insert`".into(),
        ));
    }
    let text = string_field(index, map, "insert", "the text to insert")?;
    if has("after") {
        Ok(Edit::InsertAfter {
            after: anchor_field(index, map, "after")?,
            text,
        })
    } else {
        Ok(Edit::InsertBefore {
            before: anchor_field(index, map, "before")?,
            text,
        })
    }
}

fn anchor_field(index: usize, map: &Map<String, Value>, key: &str) -> Result<Anchor, FileError> {
    let bad = |why: String| FileError::BadEdit { index, why };
    match map.get(key) {
        Some(Value::String(s)) => Anchor::parse(s).map_err(|_| {
            bad(format!(
                "field `{key}`: {s:?} is not an anchor; use LINE:HASH exactly as cat() or grep() shows it, e.g. \"12:a3f\""
            ))
        }),
        Some(other) => Err(bad(format!(
            "field `{key}` must be an anchor string like \"12:a3f\", got {}",
            type_name(other)
        ))),
        None => Err(bad(format!("missing field `{key}`"))),
    }
}

fn string_field(
    index: usize,
    map: &Map<String, Value>,
    key: &str,
    what: &str,
) -> Result<String, FileError> {
    match map.get(key) {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(FileError::BadEdit {
            index,
            why: format!(
                "field `{key}` must be a string ({what}), got {}",
                type_name(other)
            ),
        }),
        None => Err(FileError::BadEdit {
            index,
            why: format!("missing field `{key}` ({what})"),
        }),
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a bool",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a dict",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_three_wire_shapes_parse_into_typed_edits() {
        let edits = edits_from_json(&json!([
            {"from": "12:a3f", "to": "14:9c1", "replace": "x\n"},
            {"from": "3:000", "replace": ""},
            {"after": "0", "insert": "top"},
            {"before": "5:abc", "insert": "y"},
        ]))
        .expect("parse");
        assert_eq!(
            edits,
            [
                Edit::replace("12:a3f", Some("14:9c1"), "x\n").expect("edit"),
                Edit::replace("3:000", None, "").expect("edit"),
                Edit::insert_after("0", "top").expect("edit"),
                Edit::insert_before("5:abc", "y").expect("edit"),
            ]
        );
        let one = edits_from_json(&json!({"from": "1:abc", "replace": "z"})).expect("one");
        assert_eq!(one.len(), 1);
    }

    #[test]
    fn a_bad_field_is_named_with_the_index_of_its_edit() {
        let cases = [
            (
                json!([{"from": "1:abc", "replace": "x"}, {"from": "12", "replace": "x"}]),
                1,
                "field `from`",
            ),
            (json!([{"from": "1:abc"}]), 0, "missing field `replace`"),
            (
                json!([{"from": "1:abc", "replace": 3}]),
                0,
                "field `replace` must be a string",
            ),
            (
                json!([{"after": "1:abc", "text": "x"}]),
                0,
                "unknown field `text`",
            ),
            (
                json!([{"after": "1:abc", "from": "1:abc", "insert": "x"}]),
                0,
                "exactly one of",
            ),
            (
                json!([{"after": "1:abc", "replace": "x"}]),
                0,
                "go with `from`",
            ),
            (
                json!([{"from": "1:abc", "insert": "x"}]),
                0,
                "`insert` goes with",
            ),
            (
                json!([1, {"after": "2:abc", "insert": "x"}]),
                0,
                "expected a dict",
            ),
            (json!("nope"), 0, "expected a list"),
        ];
        for (v, index, needle) in cases {
            let e = edits_from_json(&v).expect_err(needle);
            match &e {
                FileError::BadEdit { index: i, why } => {
                    assert_eq!(*i, index, "{e}");
                    assert!(why.contains(needle), "{e}");
                }
                other => panic!("expected BadEdit for {v}, got {other}"),
            }
            assert!(e.to_string().starts_with(&format!("edit #{index}: ")));
        }
    }
}
