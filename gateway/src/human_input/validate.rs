//! Form field validation and coercion (pure): what a `vis.ask` submit is checked against
//! before custom validators run.

use serde_json::{Map, Value};

pub(super) fn field_type(f: &Value) -> &str {
    f.get("type").and_then(Value::as_str).unwrap_or("plaintext")
}

pub(super) fn field_name(f: &Value) -> &str {
    f.get("name")
        .or_else(|| f.get("id"))
        .and_then(Value::as_str)
        .unwrap_or("")
}

pub(super) fn flatten_fields(nodes: &[Value], out: &mut Vec<Value>) {
    for n in nodes {
        match n.get("type").and_then(Value::as_str) {
            Some("group") => {
                if let Some(c) = n.get("fields").and_then(Value::as_array) {
                    flatten_fields(c, out);
                }
            }
            Some("heading") | Some("paragraph") => {}
            _ => out.push(n.clone()),
        }
    }
}

pub(super) fn is_blank(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

fn num(v: Option<&Value>) -> Option<f64> {
    v.and_then(Value::as_f64)
}

fn fmt_num(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        format!("{x}")
    }
}

fn option_values(f: &Value) -> Vec<Value> {
    f.get("options")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|o| o.get("value").cloned().unwrap_or_else(|| o.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// The option a submitted value designates (JSON-equal, or equal as text: `"3"` picks 3).
fn pick_option(options: &[Value], v: &Value) -> Option<Value> {
    if let Some(o) = options.iter().find(|o| *o == v) {
        return Some(o.clone());
    }
    let as_text = |x: &Value| match x {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let t = as_text(v);
    options.iter().find(|o| as_text(o) == t).cloned()
}

fn length_error(f: &Value, len: usize, unit: &str) -> Option<String> {
    let min = f.get("min_length").and_then(Value::as_u64);
    let max = f.get("max_length").and_then(Value::as_u64);
    if let Some(m) = min.filter(|m| (len as u64) < *m) {
        return Some(format!("must be at least {m} {unit}"));
    }
    if let Some(m) = max.filter(|m| (len as u64) > *m) {
        return Some(format!("must be at most {m} {unit}"));
    }
    None
}

/// Coerces and checks one field's submitted value: `Ok(value)` or `Err(message)`.
pub(super) fn check_field(f: &Value, raw: Option<&Value>) -> Result<Value, String> {
    let required = f
        .get("is_required")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let raw = match raw {
        Some(v) => v.clone(),
        None => f.get("default").cloned().unwrap_or(Value::Null),
    };
    match field_type(f) {
        "checkbox" => {
            let b = match &raw {
                Value::Null => false,
                Value::Bool(b) => *b,
                Value::Number(n) => n.as_f64().unwrap_or(0.0) != 0.0,
                Value::String(s) => match s.trim().to_ascii_lowercase().as_str() {
                    "true" | "on" | "yes" | "1" => true,
                    "false" | "off" | "no" | "0" | "" => false,
                    _ => return Err("must be true or false".into()),
                },
                _ => return Err("must be true or false".into()),
            };
            if required && !b {
                return Err("is required".into());
            }
            Ok(Value::Bool(b))
        }
        "select" => {
            if is_blank(&raw) {
                return if required {
                    Err("is required".into())
                } else {
                    Ok(Value::Null)
                };
            }
            pick_option(&option_values(f), &raw).ok_or_else(|| "must be one of the options".into())
        }
        "multiselect" => {
            let chosen: Vec<Value> = match &raw {
                Value::Null => Vec::new(),
                Value::Array(a) => a.clone(),
                Value::String(s) if s.is_empty() => Vec::new(),
                other => vec![other.clone()],
            };
            let options = option_values(f);
            let mut picked = Vec::new();
            for c in &chosen {
                match pick_option(&options, c) {
                    Some(o) => picked.push(o),
                    None => return Err("must be a list of the options".into()),
                }
            }
            if required && picked.is_empty() {
                return Err("is required".into());
            }
            // Declaration order, no duplicates.
            Ok(Value::Array(
                options.into_iter().filter(|o| picked.contains(o)).collect(),
            ))
        }
        "range" => {
            let x = match &raw {
                Value::Null => None,
                Value::String(s) if s.trim().is_empty() => None,
                Value::Number(n) => n.as_f64(),
                Value::String(s) => Some(
                    s.trim()
                        .parse::<f64>()
                        .map_err(|_| "must be a number".to_string())?,
                ),
                _ => return Err("must be a number".into()),
            };
            let Some(x) = x.filter(|x| x.is_finite()) else {
                return if required {
                    Err("is required".into())
                } else {
                    Ok(Value::Null)
                };
            };
            let min = num(f.get("min")).unwrap_or(0.0);
            let max = num(f.get("max")).unwrap_or(100.0);
            let step = num(f.get("step")).unwrap_or(1.0);
            if x < min || x > max {
                return Err(format!(
                    "must be between {} and {}",
                    fmt_num(min),
                    fmt_num(max)
                ));
            }
            if step > 0.0 {
                let k = (x - min) / step;
                if (k - k.round()).abs() > 1e-9 {
                    return Err(format!(
                        "must be {} plus a multiple of {}",
                        fmt_num(min),
                        fmt_num(step)
                    ));
                }
            }
            let integral = [min, max, step, x].iter().all(|n| n.fract() == 0.0);
            Ok(if integral {
                Value::from(x as i64)
            } else {
                Value::from(x)
            })
        }
        "otp" => {
            let s = match &raw {
                Value::Null => String::new(),
                Value::String(s) => s.chars().filter(|c| !c.is_whitespace()).collect(),
                Value::Number(n) if n.is_u64() => n.to_string(),
                _ => return Err("must be digits".into()),
            };
            if s.is_empty() {
                return if required {
                    Err("is required".into())
                } else {
                    Ok(Value::Null)
                };
            }
            if !s.chars().all(|c| c.is_ascii_digit()) {
                return Err("must contain only digits".into());
            }
            let min = f.get("min_length").and_then(Value::as_u64).unwrap_or(6);
            let max = f.get("max_length").and_then(Value::as_u64).unwrap_or(6);
            let n = s.len() as u64;
            if n < min || n > max {
                return Err(if min == max {
                    format!("must be {min} digits")
                } else {
                    format!("must be {min} to {max} digits")
                });
            }
            Ok(Value::String(s))
        }
        // plaintext, multiline, password (and unknown types, as text)
        _ => {
            let s = match &raw {
                Value::Null => String::new(),
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                _ => return Err("must be text".into()),
            };
            if s.trim().is_empty() {
                if required {
                    return Err("is required".into());
                }
                return Ok(if s.is_empty() {
                    Value::Null
                } else {
                    Value::String(s)
                });
            }
            if let Some(e) = length_error(f, s.chars().count(), "characters") {
                return Err(e);
            }
            Ok(Value::String(s))
        }
    }
}

/// Coerces every field of a form: `Ok(values)` (every field present) or `Err(errors)`.
pub(super) fn validate(
    fields: &[Value],
    values: &Map<String, Value>,
) -> Result<Map<String, Value>, Map<String, Value>> {
    let mut out = Map::new();
    let mut errors = Map::new();
    for f in fields {
        let name = field_name(f);
        match check_field(f, values.get(name)) {
            Ok(v) => {
                out.insert(name.to_string(), v);
            }
            Err(e) => {
                errors.insert(name.to_string(), Value::String(e));
            }
        }
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}
