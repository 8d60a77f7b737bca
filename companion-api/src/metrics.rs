//! `/metrics` series (§5.6) and their Prometheus text: every series with one `# HELP` and one
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

/// The JSON variant: `name` without `vis_` → value for an unlabelled series; a labelled one
/// becomes an object keyed by its label values joined with `/` (a histogram's buckets by
/// `le`, plus `sum` and `count`).
pub fn to_json(families: &[Family]) -> Map<String, Value> {
    let mut m = Map::new();
    for f in families {
        let key = f.name.trim_start_matches("vis_").to_string();
        if f.samples.len() == 1 && f.samples[0].labels.is_empty() && f.samples[0].suffix.is_empty()
        {
            m.insert(key, Value::from(f.samples[0].value));
            continue;
        }
        let mut inner = Map::new();
        for s in &f.samples {
            let mut k: Vec<String> = s.labels.iter().map(|(_, v)| v.clone()).collect();
            if !s.suffix.is_empty() && s.suffix != "_bucket" {
                k.push(s.suffix.trim_start_matches('_').to_string());
            }
            let v = if s.value.is_finite() {
                Value::from(s.value)
            } else {
                Value::from(number(s.value))
            };
            inner.insert(k.join("/"), v);
        }
        m.insert(key, Value::Object(inner));
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
        let j = to_json(&[f]);
        assert_eq!(j["h_seconds"]["0.1"], 1.0);
        assert_eq!(j["h_seconds"]["sum"], 0.5);
    }
}
