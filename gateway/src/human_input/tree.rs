//! The live view tree: node checks and caps, the patch ops applied to a view's nodes and
//! log records, and the coalescing of ops before they are published.

use serde_json::{json, Map, Value};
use std::collections::HashMap;

/// Lines of a log node carried in the view tree (the window).
pub(super) const LOG_WINDOW: usize = 2000;
/// Lines of a log node kept in the view's record (older ones are dropped).
pub(super) const LOG_KEPT: usize = 100_000;

/// Lines per merged `append`.
pub(super) const MERGED_APPEND_MAX: usize = 500;
pub(super) const MAX_NODES: usize = 32;
pub(super) const MAX_TABLE_ROWS: usize = 5000;
pub(super) const MAX_TABLE_ROWS_PER_PATCH: usize = 200;
pub(super) const MAX_STATS: usize = 32;
pub(super) const MAX_STEPS: usize = 200;
pub(super) const MAX_LINKS: usize = 32;

pub(super) const LIVE_NODE_TYPES: &[&str] = &[
    "status", "progress", "stat", "steps", "log", "table", "link",
];

/// The `lines` of a log node or an `append` op as text (non-strings as their JSON).
pub(super) fn log_lines(v: &Value) -> Vec<String> {
    v.get("lines")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|l| {
                    l.as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| l.to_string())
                })
                .collect()
        })
        .unwrap_or_default()
}

pub(super) fn find_node_mut<'a>(nodes: &'a mut [Value], id: &str) -> Option<&'a mut Value> {
    for n in nodes.iter_mut() {
        if n.get("id").and_then(Value::as_str) == Some(id) {
            return Some(n);
        }
        if let Some(children) = n.get_mut("fields").and_then(Value::as_array_mut) {
            if let Some(found) = find_node_mut(children, id) {
                return Some(found);
            }
        }
    }
    None
}

pub(super) fn remove_node(nodes: &mut Vec<Value>, id: &str) -> bool {
    if let Some(i) = nodes
        .iter()
        .position(|n| n.get("id").and_then(Value::as_str) == Some(id))
    {
        nodes.remove(i);
        return true;
    }
    nodes.iter_mut().any(|n| {
        n.get_mut("fields")
            .and_then(Value::as_array_mut)
            .is_some_and(|c| remove_node(c, id))
    })
}

pub(super) fn insert_after(nodes: &mut Vec<Value>, after: &str, node: Value) -> Result<(), Value> {
    if let Some(i) = nodes
        .iter()
        .position(|n| n.get("id").and_then(Value::as_str) == Some(after))
    {
        nodes.insert(i + 1, node);
        return Ok(());
    }
    let mut node = node;
    for n in nodes.iter_mut() {
        if let Some(c) = n.get_mut("fields").and_then(Value::as_array_mut) {
            match insert_after(c, after, node) {
                Ok(()) => return Ok(()),
                Err(back) => node = back,
            }
        }
    }
    Err(node)
}

pub(super) fn leaf_nodes(nodes: &[Value], out: &mut Vec<Value>) {
    for n in nodes {
        if n.get("type").and_then(Value::as_str) == Some("group") {
            if let Some(c) = n.get("fields").and_then(Value::as_array) {
                leaf_nodes(c, out);
            }
        } else {
            out.push(n.clone());
        }
    }
}

pub(super) fn check_nodes(nodes: &[Value]) -> Result<(), String> {
    let mut leaves = Vec::new();
    leaf_nodes(nodes, &mut leaves);
    if leaves.len() > MAX_NODES {
        return Err(format!("a live view holds at most {MAX_NODES} nodes"));
    }
    let mut seen = std::collections::HashSet::new();
    for n in &leaves {
        let t = n.get("type").and_then(Value::as_str).unwrap_or("");
        if !LIVE_NODE_TYPES.contains(&t) {
            return Err(format!("unknown live node type '{t}'"));
        }
        let Some(id) = n.get("id").and_then(Value::as_str) else {
            return Err("every live node needs an id".into());
        };
        if !seen.insert(id.to_string()) {
            return Err(format!("live node id '{id}' is used twice"));
        }
    }
    Ok(())
}

pub(super) fn upsert(
    list: &mut Vec<Value>,
    item: Value,
    cap: usize,
    what: &str,
) -> Result<(), String> {
    let id = item.get("id").cloned().unwrap_or(Value::Null);
    if let Some(slot) = list.iter_mut().find(|x| x.get("id") == Some(&id)) {
        if let (Some(dst), Some(src)) = (slot.as_object_mut(), item.as_object()) {
            for (k, v) in src {
                dst.insert(k.clone(), v.clone());
            }
        }
        return Ok(());
    }
    if list.len() >= cap {
        return Err(format!("a live {what} holds at most {cap} items"));
    }
    list.push(item);
    Ok(())
}

pub(super) fn array_mut<'a>(node: &'a mut Value, key: &str) -> &'a mut Vec<Value> {
    if !node.get(key).is_some_and(Value::is_array) {
        node[key] = json!([]);
    }
    node[key].as_array_mut().expect("just set")
}

/// Applies one op to a view's tree and log records.
pub(super) fn apply_op(
    nodes: &mut Vec<Value>,
    logs: &mut HashMap<String, (usize, Vec<String>)>,
    op: &Value,
) -> Result<(), String> {
    let kind = op.get("op").and_then(Value::as_str).unwrap_or("");
    let node_id = op.get("node_id").and_then(Value::as_str).unwrap_or("");
    let fields = |skip: &[&str]| -> Map<String, Value> {
        op.as_object()
            .map(|o| {
                o.iter()
                    .filter(|(k, _)| {
                        !["op", "node_id"].contains(&k.as_str()) && !skip.contains(&k.as_str())
                    })
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default()
    };
    match kind {
        "add-node" => {
            let node = op.get("node").cloned().unwrap_or(Value::Null);
            let mut probe = nodes.clone();
            probe.push(node.clone());
            check_nodes(&probe)?;
            match op.get("after").and_then(Value::as_str) {
                Some(after) => {
                    if let Err(node) = insert_after(nodes, after, node) {
                        nodes.push(node);
                    }
                }
                None => nodes.push(node),
            }
            return Ok(());
        }
        "remove-node" => {
            if !remove_node(nodes, node_id) {
                return Err(format!("live view has no node '{node_id}'"));
            }
            logs.remove(node_id);
            return Ok(());
        }
        _ => {}
    }
    let node = find_node_mut(nodes, node_id)
        .ok_or_else(|| format!("live view has no node '{node_id}'"))?;
    let ntype = node
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    match (kind, ntype.as_str()) {
        ("set", "stat") | ("set", "steps") => {
            let mut item = fields(&["item_id"]);
            let id = op.get("item_id").cloned().unwrap_or(Value::Null);
            item.insert("id".into(), id);
            let (cap, what) = if ntype == "stat" {
                (MAX_STATS, "stat")
            } else {
                (MAX_STEPS, "steps node")
            };
            upsert(array_mut(node, "items"), Value::Object(item), cap, what)
        }
        ("set", "table") => {
            let row = op.get("row").cloned().ok_or("a table set needs a row")?;
            upsert(array_mut(node, "rows"), row, MAX_TABLE_ROWS, "table")
        }
        ("set", _) => {
            if let Some(obj) = node.as_object_mut() {
                for (k, v) in fields(&[]) {
                    obj.insert(k, v);
                }
            }
            Ok(())
        }
        ("append", "log") => {
            let lines = log_lines(op);
            let window = array_mut(node, "lines");
            window.extend(lines.iter().cloned().map(Value::String));
            if window.len() > LOG_WINDOW {
                let cut = window.len() - LOG_WINDOW;
                window.drain(..cut);
            }
            let rec = logs.entry(node_id.to_string()).or_default();
            rec.1.extend(lines);
            if rec.1.len() > LOG_KEPT {
                let cut = rec.1.len() - LOG_KEPT;
                rec.1.drain(..cut);
                rec.0 += cut;
            }
            Ok(())
        }
        ("append", "link") => {
            let item = op
                .get("item")
                .cloned()
                .ok_or("a link append needs an item")?;
            upsert(array_mut(node, "items"), item, MAX_LINKS, "link")
        }
        ("clear", "log") => {
            node["lines"] = json!([]);
            logs.insert(node_id.to_string(), (0, Vec::new()));
            Ok(())
        }
        ("clear", "table") => {
            node["rows"] = json!([]);
            Ok(())
        }
        ("clear", _) => {
            node["items"] = json!([]);
            Ok(())
        }
        ("remove", t) => {
            let id = op.get("item_id").cloned().unwrap_or(Value::Null);
            let key = if t == "table" { "rows" } else { "items" };
            array_mut(node, key).retain(|x| x.get("id") != Some(&id));
            Ok(())
        }
        (k, t) => Err(format!("live op '{k}' does not apply to a {t} node")),
    }
}

/// Adds ops to a coalescing buffer; consecutive appends of lines to the same log node merge
/// (up to [`MERGED_APPEND_MAX`] lines per merged append).
pub(super) fn coalesce_into(buf: &mut Vec<Value>, op: Value) {
    let is_lines_append = |o: &Value| {
        o.get("op").and_then(Value::as_str) == Some("append") && o.get("lines").is_some()
    };
    if is_lines_append(&op) {
        if let Some(last) = buf.last_mut() {
            let same = is_lines_append(last)
                && last.get("node_id") == op.get("node_id")
                && last.get("tone") == op.get("tone");
            let (n_last, n_new) = (
                last["lines"].as_array().map_or(0, Vec::len),
                op["lines"].as_array().map_or(0, Vec::len),
            );
            if same && n_last + n_new <= MERGED_APPEND_MAX {
                if let (Some(dst), Some(src)) =
                    (last["lines"].as_array_mut(), op["lines"].as_array())
                {
                    dst.extend(src.iter().cloned());
                }
                return;
            }
        }
    }
    buf.push(op);
}
