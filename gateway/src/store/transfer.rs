//! Moving a whole store between engines (docs/decisions.md, C5): every row of the gateway's
//! own tables as JSON lines, read from one store and written into an empty one, e.g. a
//! single node's SQLite home into the PostgreSQL database of a cluster.
//!
//! The file: a header line `{"vis_store_export": 1, "tables": {...}}` naming each table's
//! columns, then one line per row, `{"table": "turns", "row": {"tid": ..., ...}}`, tables in
//! the order their references need (sessions first). Blobs are base64. What either engine
//! derives is not carried: the search index (rebuilt by the target's triggers), a cluster
//! session's home node and lease epoch (a moved session has no home until a node writes for
//! it), node leases.

use super::sql::{AnyRow, Param};
use super::{Db, StoreError, StoreResult};
use base64::Engine as _;
use serde_json::{json, Map, Value};
use std::io::{BufRead, Write};
use std::sync::OnceLock;

/// The file format's version, in the header.
pub const FORMAT: i64 = 1;

/// How a column is read and written.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Int,
    Text,
    Bool,
    Blob,
}

struct Table {
    name: &'static str,
    columns: &'static [(&'static str, Kind)],
    /// The row order of an export (SQLite's and PostgreSQL's text where they differ).
    order: (&'static str, &'static str),
    /// A `BIGSERIAL` id on PostgreSQL: its sequence is moved past the imported ids.
    serial: Option<&'static str>,
}

use Kind::{Blob, Bool, Int, Text};

/// The tables, in an order that inserts every referenced row before its references.
const TABLES: &[Table] = &[
    Table {
        name: "sessions",
        columns: &[
            ("id", Text),
            ("channel", Text),
            ("title", Text),
            ("external_id", Text),
            ("workspace_id", Text),
            ("root", Text),
            ("owner_id", Text),
            ("created_at", Int),
            ("modified_at", Int),
            ("last_active_at", Int),
            ("turn_count", Int),
            ("first_request", Text),
            ("favorite_rank", Int),
            ("model_pref", Text),
            ("last_seq", Int),
            ("trimmed_through", Int),
            ("last_status", Text),
            ("queue_paused", Bool),
            ("cancel_floor", Int),
        ],
        order: ("created_at, id", "created_at, id"),
        serial: None,
    },
    Table {
        name: "turns",
        columns: &[
            ("tid", Text),
            ("sid", Text),
            ("ord", Int),
            ("status", Text),
            ("idempotency_key", Text),
            ("record", Text),
        ],
        order: ("sid, ord, tid", "sid, ord, tid"),
        serial: None,
    },
    Table {
        name: "events",
        columns: &[("sid", Text), ("seq", Int), ("type", Text), ("data", Text)],
        order: ("sid, seq", "sid, seq"),
        serial: None,
    },
    Table {
        name: "egress",
        columns: &[("sid", Text), ("seq", Int), ("data", Text)],
        order: ("sid, seq", "sid, seq"),
        serial: None,
    },
    Table {
        name: "extension_state",
        columns: &[("extension", Text), ("key", Text), ("value", Text)],
        order: ("extension, key", "extension, key"),
        serial: None,
    },
    Table {
        name: "artifacts",
        columns: &[
            ("id", Int),
            ("sid", Text),
            ("tid", Text),
            ("iteration_id", Text),
            ("idx", Int),
            ("tool_call_id", Text),
            ("kind", Text),
            ("filename", Text),
            ("media_type", Text),
            ("version", Int),
            ("size", Int),
            ("created_at", Int),
            ("data", Blob),
        ],
        order: ("id", "id"),
        serial: Some("id"),
    },
    Table {
        name: "devices",
        columns: &[("token", Text), ("record", Text)],
        // registration order: SQLite's row id, PostgreSQL's counter column
        order: ("rowid", "n"),
        serial: None,
    },
    Table {
        name: "gateway_settings",
        columns: &[("key", Text), ("value", Text)],
        order: ("key", "key"),
        serial: None,
    },
    Table {
        name: "drafts",
        columns: &[
            ("id", Text),
            ("repo_root", Text),
            ("label", Text),
            ("state", Text),
            ("session_id", Text),
            ("created_at", Int),
            ("record", Text),
        ],
        order: ("created_at, id", "created_at, id"),
        serial: None,
    },
    Table {
        name: "forks",
        columns: &[
            ("child", Text),
            ("parent", Text),
            ("through_tid", Text),
            ("created_at", Int),
        ],
        order: ("created_at, child", "created_at, child"),
        serial: None,
    },
    Table {
        name: "transcripts",
        columns: &[("sid", Text), ("tid", Text), ("record", Text)],
        order: ("sid, tid", "sid, tid"),
        serial: None,
    },
    Table {
        name: "compactions",
        columns: &[("sid", Text), ("n", Int), ("record", Text)],
        order: ("sid, n", "sid, n"),
        serial: None,
    },
    Table {
        name: "egress_modes",
        columns: &[("sid", Text), ("mode", Text)],
        order: ("sid", "sid"),
        serial: None,
    },
    Table {
        name: "policy_changes",
        columns: &[
            ("id", Int),
            ("root", Text),
            ("sid", Text),
            ("applied_at", Int),
            ("record", Text),
        ],
        order: ("id", "id"),
        serial: Some("id"),
    },
];

/// A table's statements, made once per process from [`TABLES`] (the store's statement
/// caches key on `&'static str`).
struct Statements {
    select_sqlite: String,
    select_postgres: String,
    insert: String,
    count: String,
    /// PostgreSQL only: moves the `serial` column's sequence past the greatest id.
    reseed: Option<String>,
}

fn statements() -> &'static [Statements] {
    static ALL: OnceLock<Vec<Statements>> = OnceLock::new();
    ALL.get_or_init(|| {
        TABLES
            .iter()
            .map(|t| {
                let cols: Vec<&str> = t.columns.iter().map(|(c, _)| *c).collect();
                let list = cols.join(", ");
                let marks: Vec<String> = (1..=cols.len()).map(|i| format!("?{i}")).collect();
                Statements {
                    select_sqlite: format!("SELECT {list} FROM {} ORDER BY {}", t.name, t.order.0),
                    select_postgres: format!(
                        "SELECT {list} FROM {} ORDER BY {}",
                        t.name, t.order.1
                    ),
                    insert: format!(
                        "INSERT INTO {} ({list}) VALUES ({})",
                        t.name,
                        marks.join(", ")
                    ),
                    count: format!("SELECT COUNT(*) FROM {}", t.name),
                    reseed: t.serial.map(|c| {
                        format!(
                            "SELECT setval(pg_get_serial_sequence('{0}', '{c}'), \
                             COALESCE((SELECT MAX({c}) FROM {0}), 0) + 1, false)",
                            t.name
                        )
                    }),
                }
            })
            .collect()
    })
}

/// Rows per table, in [`TABLES`]' order.
#[derive(Debug, Default, PartialEq)]
pub struct Counts(pub Vec<(&'static str, u64)>);

impl Counts {
    pub fn total(&self) -> u64 {
        self.0.iter().map(|(_, n)| n).sum()
    }
}

impl std::fmt::Display for Counts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self
            .0
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(t, n)| format!("{n} {t}"))
            .collect();
        if parts.is_empty() {
            return f.write_str("no rows");
        }
        f.write_str(&parts.join(", "))
    }
}

fn io_error(what: &str, e: std::io::Error) -> StoreError {
    StoreError::Other(format!("{what}: {e}"))
}

/// Writes every row of the store to `out`, all read in one unit (one snapshot on SQLite;
/// on PostgreSQL one transaction, so stop the nodes first for a consistent copy).
pub fn export(db: &mut Db, out: &mut dyn Write) -> StoreResult<Counts> {
    db.atomically(|db| {
        let header: Map<String, Value> = TABLES
            .iter()
            .map(|t| {
                let cols: Vec<&str> = t.columns.iter().map(|(c, _)| *c).collect();
                (t.name.to_string(), json!(cols))
            })
            .collect();
        let line = json!({"vis_store_export": FORMAT, "tables": header});
        writeln!(out, "{line}").map_err(|e| io_error("cannot write the export", e))?;
        let mut counts = Counts::default();
        for (t, st) in TABLES.iter().zip(statements()) {
            let sql = db.pick(&st.select_sqlite, &st.select_postgres);
            let mut n = 0;
            db.scan(sql, &[], |r| {
                let row = read_row(t, r)?;
                let line = json!({"table": t.name, "row": row});
                writeln!(out, "{line}").map_err(|e| io_error("cannot write the export", e))?;
                n += 1;
                Ok(true)
            })?;
            counts.0.push((t.name, n));
        }
        out.flush()
            .map_err(|e| io_error("cannot write the export", e))?;
        Ok(counts)
    })
}

fn read_row(t: &Table, r: &AnyRow) -> StoreResult<Map<String, Value>> {
    let mut row = Map::new();
    for (i, (name, kind)) in t.columns.iter().enumerate() {
        let v = match kind {
            Int => json!(r.get::<Option<i64>>(i)?),
            Text => json!(r.get::<Option<String>>(i)?),
            Bool => json!(r.get::<Option<bool>>(i)?),
            Blob => match r.get::<Option<Vec<u8>>>(i)? {
                Some(b) => json!(base64::engine::general_purpose::STANDARD.encode(b)),
                None => Value::Null,
            },
        };
        row.insert(name.to_string(), v);
    }
    Ok(row)
}

/// One column's value, typed for binding.
enum Cell {
    Int(Option<i64>),
    Text(Option<String>),
    Bool(Option<bool>),
    Blob(Option<Vec<u8>>),
}

impl Cell {
    fn param(&self) -> &dyn Param {
        match self {
            Cell::Int(v) => v,
            Cell::Text(v) => v,
            Cell::Bool(v) => v,
            Cell::Blob(v) => v,
        }
    }
}

/// Reads `input` (an export) into the store, which must hold no rows: everything in one
/// unit, so a file that fails half way leaves the store as empty as it was.
pub fn import(db: &mut Db, input: &mut dyn BufRead) -> StoreResult<Counts> {
    db.atomically(|db| {
        let held = counts(db)?;
        if held.total() > 0 {
            return Err(StoreError::Other(format!(
                "the target store is not empty (it holds {held}): import only into a new one"
            )));
        }
        let mut lines = input.lines().enumerate();
        let header = match lines.next() {
            Some((_, line)) => line.map_err(|e| io_error("cannot read the export", e))?,
            None => return Err(bad(1, "the file is empty")),
        };
        check_header(&header)?;
        let mut counts: Vec<(&'static str, u64)> = TABLES.iter().map(|t| (t.name, 0)).collect();
        for (i, line) in lines {
            let n = i + 1;
            let line = line.map_err(|e| io_error("cannot read the export", e))?;
            if line.trim().is_empty() {
                continue;
            }
            let (at, cells) = parse_row(n, &line)?;
            let params: Vec<&dyn Param> = cells.iter().map(Cell::param).collect();
            db.exec(&statements()[at].insert, &params)
                .map_err(|e| bad(n, &format!("{} row refused: {e}", TABLES[at].name)))?;
            counts[at].1 += 1;
        }
        if let Db::Postgres(_) = db {
            for st in statements() {
                if let Some(sql) = &st.reseed {
                    db.scan(sql, &[], |_| Ok(false))?;
                }
            }
        }
        Ok(Counts(counts))
    })
}

/// Rows held per table.
pub fn counts(db: &mut Db) -> StoreResult<Counts> {
    let mut out = Counts::default();
    for (t, st) in TABLES.iter().zip(statements()) {
        let n: i64 = db.value(&st.count, &[])?.unwrap_or(0);
        out.0.push((t.name, n.max(0) as u64));
    }
    Ok(out)
}

fn bad(line: usize, what: &str) -> StoreError {
    StoreError::Other(format!("line {line} of the export: {what}"))
}

fn check_header(line: &str) -> StoreResult<()> {
    let v: Value = serde_json::from_str(line)
        .map_err(|e| bad(1, &format!("not a store export header ({e})")))?;
    match v.get("vis_store_export").and_then(Value::as_i64) {
        Some(FORMAT) => Ok(()),
        Some(other) => Err(bad(
            1,
            &format!("format {other} is not one this gateway reads (it reads {FORMAT})"),
        )),
        None => Err(bad(1, "not a store export header (no vis_store_export)")),
    }
}

/// A row line: its table's index and its cells in column order. Every column must be
/// present (null where the value is absent) and of its column's type.
fn parse_row(n: usize, line: &str) -> StoreResult<(usize, Vec<Cell>)> {
    let v: Value = serde_json::from_str(line).map_err(|e| bad(n, &format!("not JSON ({e})")))?;
    let name = v
        .get("table")
        .and_then(Value::as_str)
        .ok_or_else(|| bad(n, "no \"table\""))?;
    let at = TABLES
        .iter()
        .position(|t| t.name == name)
        .ok_or_else(|| bad(n, &format!("unknown table {name:?}")))?;
    let row = v
        .get("row")
        .and_then(Value::as_object)
        .ok_or_else(|| bad(n, "no \"row\" object"))?;
    let mut cells = Vec::with_capacity(TABLES[at].columns.len());
    for (col, kind) in TABLES[at].columns {
        let value = row
            .get(*col)
            .ok_or_else(|| bad(n, &format!("{name} row has no column {col:?}")))?;
        let wrong = || bad(n, &format!("{name}.{col}: {value} is not {kind:?}"));
        let cell = match (kind, value) {
            (Int, Value::Null) => Cell::Int(None),
            (Int, v) => Cell::Int(Some(v.as_i64().ok_or_else(wrong)?)),
            (Text, Value::Null) => Cell::Text(None),
            (Text, v) => Cell::Text(Some(v.as_str().ok_or_else(wrong)?.to_string())),
            (Bool, Value::Null) => Cell::Bool(None),
            (Bool, v) => Cell::Bool(Some(v.as_bool().ok_or_else(wrong)?)),
            (Blob, Value::Null) => Cell::Blob(None),
            (Blob, v) => {
                let s = v.as_str().ok_or_else(wrong)?;
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(s)
                    .map_err(|_| wrong())?;
                Cell::Blob(Some(bytes))
            }
        };
        cells.push(cell);
    }
    Ok((at, cells))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::temp_store;

    #[test]
    fn a_row_line_names_a_missing_column_or_a_wrong_type_with_its_line() {
        let e = parse_row(7, r#"{"table":"forks","row":{"child":"a","parent":"b"}}"#)
            .err()
            .expect("refused");
        assert!(e.to_string().contains("line 7"), "{e}");
        assert!(e.to_string().contains("through_tid"), "{e}");
        let e = parse_row(
            3,
            r#"{"table":"compactions","row":{"sid":"s","n":"two","record":"{}"}}"#,
        )
        .err()
        .expect("refused");
        assert!(e.to_string().contains("compactions.n"), "{e}");
        let e = parse_row(2, r#"{"table":"leases","row":{}}"#)
            .err()
            .expect("refused");
        assert!(e.to_string().contains("unknown table \"leases\""), "{e}");
    }

    #[test]
    fn a_header_of_another_format_is_refused_by_name() {
        assert!(check_header(r#"{"vis_store_export":1,"tables":{}}"#).is_ok());
        let e = check_header(r#"{"vis_store_export":9}"#).unwrap_err();
        assert!(e.to_string().contains("format 9"), "{e}");
        let e = check_header("[1,2]").unwrap_err();
        assert!(e.to_string().contains("not a store export header"), "{e}");
    }

    #[tokio::test]
    async fn an_export_imports_into_an_empty_store_and_a_second_import_is_refused() {
        let (from, _d1) = temp_store("transfer-from");
        from.with(|db| {
            let mut row = crate::store::rows::SessionRow::bare("s1");
            row.title = Some("Pantry".into());
            crate::store::rows::put_session(db, &row)?;
            crate::store::rows::insert_event(db, "s1", 1, "turn.queued", Some("{}"), 100, false)?;
            db.exec(
                "INSERT INTO artifacts (sid, tid, iteration_id, idx, kind, filename, media_type, \
                 version, size, created_at, data) VALUES ('s1','t','i',0,'file','a.bin', \
                 'application/octet-stream',1,3,5,?1)",
                &[&vec![0u8, 255, 7]],
            )?;
            Ok(())
        })
        .await
        .expect("seed");
        let file = from
            .with(|db| {
                let mut buf = Vec::new();
                let n = export(db, &mut buf)?;
                Ok((n, buf))
            })
            .await
            .expect("export");
        let (counts, bytes) = file;
        assert_eq!(counts.total(), 3, "{counts}");

        let (to, _d2) = temp_store("transfer-to");
        let b = bytes.clone();
        let imported = to
            .with(move |db| import(db, &mut std::io::Cursor::new(b)))
            .await
            .expect("import");
        assert_eq!(imported, counts);
        let again = to
            .with(move |db| {
                let mut buf = Vec::new();
                export(db, &mut buf)?;
                Ok(buf)
            })
            .await
            .expect("export again");
        assert_eq!(
            String::from_utf8_lossy(&again),
            String::from_utf8_lossy(&bytes),
            "the copy exports as the original"
        );
        let refused = to
            .with(move |db| import(db, &mut std::io::Cursor::new(bytes)))
            .await
            .unwrap_err();
        assert!(refused.to_string().contains("not empty"), "{refused}");
    }
}
