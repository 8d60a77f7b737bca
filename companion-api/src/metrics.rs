//! `/metrics` series and their Prometheus text: every series with one `# HELP` and one
//! `# TYPE` line, then its samples.

use serde_json::{Map, Value};
use std::fmt::Write;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// One sample: `<name><suffix>{labels} value` (`suffix` is `_bucket`, `_sum` or `_count`
/// for histograms, empty otherwise).
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub suffix: &'static str,
    pub labels: Vec<(&'static str, String)>,
    pub value: f64,
}

impl Sample {
    pub fn plain(value: f64) -> Sample {
        Sample {
            suffix: "",
            labels: Vec::new(),
            value,
        }
    }

    pub fn labelled(labels: Vec<(&'static str, String)>, value: f64) -> Sample {
        Sample {
            suffix: "",
            labels,
            value,
        }
    }
}

/// A metric family: a name, what it means, its type, its samples.
#[derive(Debug, Clone, PartialEq)]
pub struct Family {
    pub name: &'static str,
    pub help: &'static str,
    pub kind: Kind,
    pub samples: Vec<Sample>,
}

impl Family {
    /// A family with one unlabelled sample.
    pub fn single(name: &'static str, help: &'static str, kind: Kind, value: f64) -> Family {
        Family {
            name,
            help,
            kind,
            samples: vec![Sample::plain(value)],
        }
    }
}

/// A label value with `\`, `"` and newlines escaped.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn number(v: f64) -> String {
    if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_string()
    } else {
        v.to_string()
    }
}

/// The Prometheus text exposition (version 0.0.4).
pub fn render(families: &[Family]) -> String {
    let mut out = String::new();
    for f in families {
        let _ = writeln!(out, "# HELP {} {}", f.name, f.help.replace('\n', " "));
        let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind.as_str());
        for s in &f.samples {
            out.push_str(f.name);
            out.push_str(s.suffix);
            if !s.labels.is_empty() {
                let labels: Vec<String> = s
                    .labels
                    .iter()
                    .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                    .collect();
                let _ = write!(out, "{{{}}}", labels.join(","));
            }
            let _ = writeln!(out, " {}", number(s.value));
        }
    }
    out
}

/// A JSON key for a label value: lower case, anything but letters and digits as `_`.
fn key(v: &str) -> String {
    v.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// The JSON variant (snake_case keys): `name` without `vis_` → the value of an unlabelled
/// series; a labelled one → objects nested by its label values (`{"http": {"allow": 3}}`); a
/// histogram → `{"count", "sum", "buckets": [{"le", "count"}]}` (`le` of the last is `"+Inf"`).
pub fn to_json(families: &[Family]) -> Map<String, Value> {
    let mut m = Map::new();
    for f in families {
        let name = f.name.trim_start_matches("vis_").to_string();
        let plain = |s: &Sample| s.labels.is_empty() && s.suffix.is_empty();
        if f.kind == Kind::Histogram {
            let mut h = Map::new();
            let mut buckets = Vec::new();
            for s in &f.samples {
                match s.suffix {
                    "_bucket" => {
                        let le = s.labels.first().map(|(_, v)| v.as_str()).unwrap_or("");
                        let le = match le.parse::<f64>() {
                            Ok(b) if b.is_finite() => Value::from(b),
                            _ => Value::from(le),
                        };
                        buckets.push(serde_json::json!({"le": le, "count": s.value}));
                    }
                    suffix => {
                        h.insert(suffix.trim_start_matches('_').to_string(), s.value.into());
                    }
                }
            }
            h.insert("buckets".into(), Value::Array(buckets));
            m.insert(name, Value::Object(h));
        } else if f.samples.len() == 1 && plain(&f.samples[0]) {
            m.insert(name, Value::from(f.samples[0].value));
        } else {
            let mut top = Value::Object(Map::new());
            for s in &f.samples {
                let mut at = &mut top;
                for (_, v) in &s.labels {
                    if !at.is_object() {
                        *at = Value::Object(Map::new());
                    }
                    if let Value::Object(o) = at {
                        at = o.entry(key(v)).or_insert(Value::Null);
                    }
                }
                *at = Value::from(s.value);
            }
            m.insert(name, top);
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_gets_help_and_type_and_labels_are_escaped() {
        let text = render(&[
            Family::single("vis_a_total", "As counted.", Kind::Counter, 3.0),
            Family {
                name: "vis_b",
                help: "Bs by kind.",
                kind: Kind::Gauge,
                samples: vec![Sample::labelled(vec![("kind", "x\"y\\z".into())], 1.5)],
            },
        ]);
        assert_eq!(
            text,
            "# HELP vis_a_total As counted.\n# TYPE vis_a_total counter\nvis_a_total 3\n\
             # HELP vis_b Bs by kind.\n# TYPE vis_b gauge\nvis_b{kind=\"x\\\"y\\\\z\"} 1.5\n"
        );
    }

    #[test]
    fn a_histogram_renders_its_buckets_sum_and_count() {
        let f = Family {
            name: "vis_h_seconds",
            help: "H.",
            kind: Kind::Histogram,
            samples: vec![
                Sample {
                    suffix: "_bucket",
                    labels: vec![("le", "0.1".into())],
                    value: 1.0,
                },
                Sample {
                    suffix: "_bucket",
                    labels: vec![("le", "+Inf".into())],
                    value: 2.0,
                },
                Sample {
                    suffix: "_sum",
                    labels: vec![],
                    value: 0.5,
                },
                Sample {
                    suffix: "_count",
                    labels: vec![],
                    value: 2.0,
                },
            ],
        };
        let text = render(std::slice::from_ref(&f));
        assert!(
            text.contains("vis_h_seconds_bucket{le=\"+Inf\"} 2\n"),
            "{text}"
        );
        assert!(text.contains("vis_h_seconds_sum 0.5\nvis_h_seconds_count 2\n"));
        let j = to_json(&[
            f,
            Family {
                name: "vis_d_total",
                help: "D.",
                kind: Kind::Counter,
                samples: vec![Sample::labelled(
                    vec![("lane", "http".into()), ("kind", "blocked-by-x".into())],
                    4.0,
                )],
            },
        ]);
        assert_eq!(j["h_seconds"]["buckets"][0]["le"], 0.1);
        assert_eq!(j["h_seconds"]["buckets"][1]["le"], "+Inf");
        assert_eq!(j["h_seconds"]["sum"], 0.5);
        assert_eq!(j["h_seconds"]["count"], 2.0);
        assert_eq!(j["d_total"]["http"]["blocked_by_x"], 4.0);
    }
}
