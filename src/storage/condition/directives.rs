//! Directives: the top-level `#` keys of a condition. Their names and value shapes are
//! checked when the condition is parsed; their values only when an entry query is built
//! ([`RawDirectives::resolve`]), as 1.21.5 does (so a query that matches no entry, or a
//! lifecycle at creation, accepts `{"#ctx_before": -1}`).

use std::time::Duration;

use serde_json::Value as Json;

use super::literal::parse_duration_literal;
use crate::error::{Error, Result};

const NAMES: [&str; 10] = [
    "#ctx_before",
    "#ctx_after",
    "#select_labels",
    "#ext",
    "#batch_size",
    "#batch_records",
    "#batch_metadata_size",
    "#batch_timeout",
    "#record_timeout",
    "#io_timeout",
];

/// One item of a directive's value.
#[derive(Debug, Clone, PartialEq)]
pub enum DirValue {
    /// `true` / `false`.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// Another number.
    Float(f64),
    /// A string that is not a duration literal (an object's compact JSON too).
    Str(String),
    /// A duration literal, in µs.
    Duration(i64),
}

/// A directive as written: its name, its items, and the raw JSON (for `#ext`).
#[derive(Debug, Clone, PartialEq)]
pub struct RawDirective {
    /// `#name`.
    pub name: String,
    /// The items of its value.
    pub items: Vec<DirValue>,
    /// The value as written.
    pub json: Json,
}

fn err(message: String) -> Error {
    Error::unprocessable(message)
}

/// Reads a top-level `#` key: the name must be known, the value not null; an object is one
/// text item, an array one item per element (objects only in `#ext`), a scalar one item.
pub fn parse_directive(name: &str, json: &Json) -> Result<RawDirective> {
    if !NAMES.contains(&name) {
        return Err(err(format!("Directive '{name}' is not supported")));
    }
    let items = match json {
        Json::Null => return Err(err(format!("Directive '{name}' cannot be null"))),
        Json::Object(_) => vec![DirValue::Str(json.to_string())],
        Json::Array(values) => {
            let mut items = Vec::with_capacity(values.len());
            for value in values {
                items.push(match value {
                    Json::Object(_) if name == "#ext" => DirValue::Str(value.to_string()),
                    Json::Object(_) => {
                        return Err(err(format!(
                            "Directive '{name}' does not support object items in arrays"
                        )));
                    }
                    other => directive_scalar(name, other)?,
                });
            }
            items
        }
        scalar => vec![directive_scalar(name, scalar)?],
    };
    Ok(RawDirective {
        name: name.to_string(),
        items,
        json: json.clone(),
    })
}

/// How many records, or how much time, a context directive spans.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Span {
    /// A number of records.
    Records(u64),
    /// A time window in µs (inclusive).
    Micros(u64),
}

/// How a read endpoint cuts results into batches (`#batch_*` and the timeouts); `None`
/// leaves the server's setting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchDirectives {
    /// `#batch_size`: payload bytes after which a batch closes.
    pub size: Option<u64>,
    /// `#batch_metadata_size`: header bytes after which a batch closes.
    pub metadata_size: Option<u64>,
    /// `#batch_records`: records per batch (0 acts as 1).
    pub records: Option<u64>,
    /// `#batch_timeout`: longest time a read gathers.
    pub batch_timeout: Option<Duration>,
    /// `#record_timeout`: longest wait for the next record.
    pub record_timeout: Option<Duration>,
    /// `#io_timeout`: validated, no effect on queries.
    pub io_timeout: Option<Duration>,
}

/// The directives of a condition, values checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Directives {
    /// `#ctx_before`: records (or time) before each match also returned.
    pub ctx_before: Option<Span>,
    /// `#ctx_after`: records (or time) after each match also returned.
    pub ctx_after: Option<Span>,
    /// `#select_labels`: the labels output records keep.
    pub select_labels: Option<Vec<String>>,
    /// Batching of the read endpoint.
    pub batch: BatchDirectives,
}

/// The directives of a parsed condition, values unchecked.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RawDirectives(pub Vec<RawDirective>);

impl RawDirectives {
    /// The `#ext` directive, if given.
    pub fn ext(&self) -> Option<&RawDirective> {
        self.0.iter().find(|d| d.name == "#ext")
    }

    /// Checks every value and returns the directives, with 1.21.5's messages.
    pub fn resolve(&self) -> Result<Directives> {
        let mut out = Directives::default();
        for d in &self.0 {
            let name = d.name.as_str();
            match name {
                "#ctx_before" => out.ctx_before = Some(span(name, &d.items)?),
                "#ctx_after" => out.ctx_after = Some(span(name, &d.items)?),
                "#select_labels" => out.select_labels = Some(select_labels(&d.items)?),
                "#batch_size" => out.batch.size = Some(size(name, &d.items)?),
                "#batch_metadata_size" => out.batch.metadata_size = Some(size(name, &d.items)?),
                "#batch_records" => out.batch.records = Some(records(&d.items)?),
                "#batch_timeout" => out.batch.batch_timeout = Some(timeout(name, &d.items)?),
                "#record_timeout" => out.batch.record_timeout = Some(timeout(name, &d.items)?),
                "#io_timeout" => out.batch.io_timeout = Some(timeout(name, &d.items)?),
                _ => {}
            }
        }
        Ok(out)
    }
}

fn span(name: &str, items: &[DirValue]) -> Result<Span> {
    let [item] = items else {
        return Err(err(format!("{name} must be a single value")));
    };
    let value = match item {
        DirValue::Duration(us) => {
            if *us < 0 {
                return Err(err(format!("{name} must be non-negative")));
            }
            return Ok(Span::Micros(*us as u64));
        }
        DirValue::Int(i) => *i,
        DirValue::Bool(b) => i64::from(*b),
        DirValue::Float(f) => *f as i64,
        DirValue::Str(s) => s.parse::<i64>().map_err(|_| {
            err(format!(
                "{name} must be an integer or duration: Value '{s}' could not be parsed as integer"
            ))
        })?,
    };
    if value < 0 {
        return Err(err(format!("{name} must be non-negative")));
    }
    Ok(Span::Records(value as u64))
}

fn select_labels(items: &[DirValue]) -> Result<Vec<String>> {
    if items.is_empty() {
        return Err(err(
            "#select_labels must contain at least one label".to_string()
        ));
    }
    items
        .iter()
        .map(|item| match item {
            DirValue::Str(s) => Ok(s.clone()),
            _ => Err(err(
                "#select_labels must contain only string values".to_string()
            )),
        })
        .collect()
}

fn size(name: &str, items: &[DirValue]) -> Result<u64> {
    let [item] = items else {
        return Err(err(format!(
            "{name} must be a single integer or string value"
        )));
    };
    let refused = || {
        err(format!(
            "{name} must be a positive integer or string representing a positive integer"
        ))
    };
    match item {
        DirValue::Int(i) if *i >= 0 => Ok(*i as u64),
        DirValue::Str(s) => parse_size(s).map_err(|why| {
            err(format!(
                "{name} must be a positive integer or string: {why}"
            ))
        }),
        _ => Err(refused()),
    }
}

/// A size such as `100`, `1KB`, `1.5KB`, `1M`, `2 MiB` (decimal units for `K M G T P`,
/// binary ones for `Ki Mi …`, `B` optional, case-insensitive).
pub fn parse_size(text: &str) -> std::result::Result<u64, String> {
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("couldn't parse {trimmed:?} into a known SI unit"))?;
    let unit = unit.trim().to_ascii_lowercase();
    let unit = unit.strip_suffix('b').unwrap_or(&unit);
    let scale: f64 = match unit {
        "" => 1.0,
        "k" => 1e3,
        "m" => 1e6,
        "g" => 1e9,
        "t" => 1e12,
        "p" => 1e15,
        "ki" => 1024.0,
        "mi" => 1024.0 * 1024.0,
        "gi" => 1024.0 * 1024.0 * 1024.0,
        "ti" => 1024f64.powi(4),
        "pi" => 1024f64.powi(5),
        _ => return Err(format!("couldn't parse {unit:?} into a known SI unit")),
    };
    Ok((number * scale) as u64)
}

fn records(items: &[DirValue]) -> Result<u64> {
    let [item] = items else {
        return Err(err(
            "#batch_records must be a single integer value".to_string()
        ));
    };
    match item {
        DirValue::Int(i) if *i >= 0 => Ok(*i as u64),
        _ => Err(err("#batch_records must be a positive integer".to_string())),
    }
}

fn timeout(name: &str, items: &[DirValue]) -> Result<Duration> {
    let [item] = items else {
        return Err(err(format!(
            "{name} must be a single integer or duration value"
        )));
    };
    match item {
        DirValue::Int(s) if *s >= 0 => Ok(Duration::from_secs(*s as u64)),
        DirValue::Duration(us) if *us >= 0 => Ok(Duration::from_micros(*us as u64)),
        _ => Err(err(format!(
            "{name} must be a positive integer or duration"
        ))),
    }
}

/// Directive values as the scalar rule reads them.
fn directive_scalar(name: &str, json: &Json) -> Result<DirValue> {
    Ok(match json {
        Json::Bool(b) => DirValue::Bool(*b),
        Json::Number(n) => match n.as_i64() {
            Some(i) => DirValue::Int(i),
            None if n.is_u64() => {
                return Err(err(format!(
                    "Directive '{name}' contains integer value out of range: {n}"
                )));
            }
            None => DirValue::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Json::String(s) => match parse_duration_literal(s) {
            Some(micros) => DirValue::Duration(micros),
            None => DirValue::Str(s.clone()),
        },
        other => {
            return Err(err(format!(
                "Directive '{name}' contains unsupported value type: {other}"
            )));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn resolve(name: &str, value: Json) -> Result<Directives> {
        RawDirectives(vec![parse_directive(name, &value)?]).resolve()
    }

    fn message(r: Result<Directives>) -> String {
        r.expect_err("refused").message().to_string()
    }

    #[test]
    fn shapes_and_values_as_the_reference_words_them() {
        assert_eq!(
            message(resolve("#foo", json!(1))),
            "Directive '#foo' is not supported"
        );
        assert_eq!(
            message(resolve("#ctx_before", json!(null))),
            "Directive '#ctx_before' cannot be null"
        );
        assert_eq!(
            message(resolve("#ctx_before", json!([{"a": 1}]))),
            "Directive '#ctx_before' does not support object items in arrays"
        );
        assert_eq!(
            message(resolve("#ctx_before", json!([[1]]))),
            "Directive '#ctx_before' contains unsupported value type: [1]"
        );
        assert_eq!(
            message(resolve("#ctx_before", json!(18446744073709551615u64))),
            "Directive '#ctx_before' contains integer value out of range: 18446744073709551615"
        );
        assert_eq!(
            message(resolve("#ctx_before", json!(-1))),
            "#ctx_before must be non-negative"
        );
        assert_eq!(
            message(resolve("#ctx_after", json!([]))),
            "#ctx_after must be a single value"
        );
        assert_eq!(
            message(resolve("#ctx_before", json!("abc"))),
            "#ctx_before must be an integer or duration: Value 'abc' could not be parsed as integer"
        );
        let d = resolve("#ctx_before", json!("1d")).expect("window");
        assert_eq!(d.ctx_before, Some(Span::Micros(86_400_000_000)));
        let d = resolve("#ctx_after", json!(1.7)).expect("count");
        assert_eq!(d.ctx_after, Some(Span::Records(1)));
        assert_eq!(
            message(resolve("#select_labels", json!([]))),
            "#select_labels must contain at least one label"
        );
        assert_eq!(
            message(resolve("#select_labels", json!(["m5"]))),
            "#select_labels must contain only string values"
        );
        let d = resolve("#select_labels", json!("opt")).expect("one name");
        assert_eq!(d.select_labels, Some(vec!["opt".to_string()]));
        assert_eq!(
            message(resolve("#batch_records", json!(2.0))),
            "#batch_records must be a positive integer"
        );
        assert_eq!(
            message(resolve("#batch_size", json!("1m"))),
            "#batch_size must be a positive integer or string representing a positive integer"
        );
        assert!(
            message(resolve("#batch_size", json!("lots")))
                .starts_with("#batch_size must be a positive integer or string: ")
        );
        assert_eq!(
            message(resolve("#batch_timeout", json!(1.5))),
            "#batch_timeout must be a positive integer or duration"
        );
        let d = resolve("#batch_size", json!("1.5KB")).expect("size");
        assert_eq!(d.batch.size, Some(1500));
        assert_eq!(parse_size("2 MiB"), Ok(2 << 20));
        assert_eq!(parse_size("100B"), Ok(100));
        assert_eq!(parse_size("1M"), Ok(1_000_000));
        let d = resolve("#record_timeout", json!("2s")).expect("timeout");
        assert_eq!(d.batch.record_timeout, Some(Duration::from_secs(2)));
    }
}
