//! Parsing `when` JSON into a [`Node`] tree.
//!
//! Accepted: object notation `{"&label": {"$op": arg}}` and array notation
//! `{"$op": [operand, …]}`, nested to any depth; `$eq $ne $gt $gte $lt $lte`, `$in $nin`,
//! `$contains $starts_with $ends_with`, `$exists`/`$has`, `$and`/`$all_of`,
//! `$or`/`$any_of`, `$not`/`$none_of`, `$xor`/`$one_of`, and `$timestamp` (the record's
//! timestamp, as an operand or as an object-notation key). Operands: `&label`, `$timestamp`,
//! literals (bool, numbers, strings; `$$x` is the literal string `$x`; duration strings
//! such as `"1h"` compare as µs with numbers).
//!
//! Rejected at parse time, with the operator named: unknown operators, aggregation
//! operators (`$each_n $each_t $limit $gate`) that make no sense for selecting data to
//! delete, computed labels (`@name`), and `#` directives.

use serde_json::{Map, Value};

use super::value::Literal;
use super::{CmpOp, Node, Operand, TextOp};
use crate::error::{Error, Result};

const AGGREGATES: [&str; 4] = ["$each_n", "$each_t", "$limit", "$gate"];

fn err(message: String) -> Error {
    Error::unprocessable(message)
}

/// Most JSON values (operators, operands, literals) a condition may hold.
pub const MAX_CONDITION_TERMS: usize = 10_000;
/// Deepest nesting a condition may have.
pub const MAX_CONDITION_DEPTH: usize = 64;

/// Refuses conditions past [`MAX_CONDITION_TERMS`] or [`MAX_CONDITION_DEPTH`] before any
/// of it is compiled: a condition is client input held for a query's lifetime, so its
/// size is bounded like every other input.
fn check_size(json: &Value) -> Result<()> {
    let mut terms = 0usize;
    let mut stack = vec![(json, 1usize)];
    while let Some((value, depth)) = stack.pop() {
        terms += 1;
        if terms > MAX_CONDITION_TERMS {
            return Err(err(format!(
                "The condition has more than {MAX_CONDITION_TERMS} terms"
            )));
        }
        if depth > MAX_CONDITION_DEPTH {
            return Err(err(format!(
                "The condition is nested deeper than {MAX_CONDITION_DEPTH} levels"
            )));
        }
        match value {
            Value::Array(items) => stack.extend(items.iter().map(|v| (v, depth + 1))),
            Value::Object(map) => stack.extend(map.values().map(|v| (v, depth + 1))),
            _ => {}
        }
    }
    Ok(())
}

/// Parses the top-level object; its keys are ANDed.
pub(super) fn parse_root(json: &Value) -> Result<Node> {
    check_size(json)?;
    match json {
        Value::Object(map) => parse_object(map),
        other => Err(err(format!(
            "A condition must be a JSON object, got {other}"
        ))),
    }
}

fn parse_object(map: &Map<String, Value>) -> Result<Node> {
    let mut nodes = Vec::with_capacity(map.len());
    for (key, value) in map {
        nodes.push(parse_key(key, value)?);
    }
    Ok(match nodes.len() {
        1 => nodes.pop().expect("one node was just checked"),
        _ => Node::All(nodes),
    })
}

fn parse_key(key: &str, value: &Value) -> Result<Node> {
    if key.starts_with('#') {
        return Err(err(format!(
            "Directive '{key}' is not supported in a condition that selects records"
        )));
    }
    if key.starts_with('@') {
        return Err(err(format!("Computed label '{key}' is not supported")));
    }
    if let Some(label) = key.strip_prefix('&') {
        return parse_reference(Operand::Label(label.to_string()), key, value);
    }
    if key == "$timestamp" && value.is_object() {
        return parse_reference(Operand::Timestamp, key, value);
    }
    if key.starts_with('$') {
        let args = match value {
            Value::Array(items) => items.clone(),
            single => vec![single.clone()],
        };
        return parse_operator(key, &args);
    }
    Err(err(format!(
        "'{key}' is neither a label reference ('&{key}') nor an operator"
    )))
}

/// Object notation: `{"&label": {"$gt": 1, "$lt": 5}}` (several operators are ANDed).
fn parse_reference(subject: Operand, key: &str, value: &Value) -> Result<Node> {
    let Value::Object(ops) = value else {
        return Err(err(format!(
            "'{key}' must map to an object of operators, e.g. {{\"$eq\": 1}}"
        )));
    };
    let mut nodes = Vec::with_capacity(ops.len());
    for (op, arg) in ops {
        check_known(op)?;
        let node = match op.as_str() {
            "$exists" | "$has" => {
                let Operand::Label(label) = &subject else {
                    return Err(err(format!("'{op}' needs a label, not '{key}'")));
                };
                let Value::Bool(want) = arg else {
                    return Err(err(format!("'{op}' on '{key}' expects true or false")));
                };
                Node::Exists {
                    labels: vec![label.clone()],
                    want: *want,
                }
            }
            "$in" | "$nin" => {
                let Value::Array(items) = arg else {
                    return Err(err(format!("'{op}' on '{key}' expects an array of values")));
                };
                let mut args = vec![subject.clone()];
                for item in items {
                    args.push(parse_operand(item, op)?);
                }
                member(op, args)?
            }
            _ if is_logical(op) => {
                return Err(err(format!(
                    "Logical operator '{op}' cannot apply to '{key}'; use array notation"
                )));
            }
            _ => binary(op, vec![subject.clone(), parse_operand(arg, op)?])?,
        };
        nodes.push(node);
    }
    Ok(match nodes.len() {
        1 => nodes.pop().expect("one node was just checked"),
        0 => return Err(err(format!("'{key}' has no operator"))),
        _ => Node::All(nodes),
    })
}

fn is_logical(op: &str) -> bool {
    matches!(
        op,
        "$and" | "$all_of" | "$or" | "$any_of" | "$not" | "$none_of" | "$xor" | "$one_of"
    )
}

fn check_known(op: &str) -> Result<()> {
    if AGGREGATES.contains(&op) {
        return Err(err(format!(
            "Aggregation operator '{op}' is not supported in a condition that selects records"
        )));
    }
    const KNOWN: [&str; 20] = [
        "$eq",
        "$ne",
        "$gt",
        "$gte",
        "$lt",
        "$lte",
        "$in",
        "$nin",
        "$contains",
        "$starts_with",
        "$ends_with",
        "$exists",
        "$has",
        "$and",
        "$all_of",
        "$or",
        "$any_of",
        "$not",
        "$none_of",
        "$xor",
    ];
    if KNOWN.contains(&op) || op == "$one_of" {
        Ok(())
    } else {
        Err(err(format!("Unknown operator '{op}'")))
    }
}

/// Array notation: `{"$op": [operand, …]}`.
fn parse_operator(op: &str, args: &[Value]) -> Result<Node> {
    check_known(op)?;
    if is_logical(op) {
        let mut nodes = Vec::with_capacity(args.len());
        for arg in args {
            match arg {
                Value::Object(map) => nodes.push(parse_object(map)?),
                other => {
                    return Err(err(format!(
                        "'{op}' expects conditions (objects) as operands, got {other}"
                    )));
                }
            }
        }
        if nodes.is_empty() {
            return Err(err(format!("'{op}' needs at least one operand")));
        }
        return Ok(match op {
            "$and" | "$all_of" => Node::All(nodes),
            "$or" | "$any_of" => Node::Any(nodes),
            "$not" | "$none_of" => Node::NoneOf(nodes),
            _ => Node::OneOf(nodes),
        });
    }
    let mut operands = Vec::with_capacity(args.len());
    for arg in args {
        match arg {
            // `{"$in": ["&x", [1, 2]]}`: a list as the second operand is the set.
            Value::Array(items) if matches!(op, "$in" | "$nin") && !operands.is_empty() => {
                for item in items {
                    operands.push(parse_operand(item, op)?);
                }
            }
            _ => operands.push(parse_operand(arg, op)?),
        }
    }
    match op {
        "$exists" | "$has" => {
            let labels = operands
                .into_iter()
                .map(|o| match o {
                    Operand::Label(l) => Ok(l),
                    other => Err(err(format!(
                        "'{op}' expects label references, got {other:?}"
                    ))),
                })
                .collect::<Result<Vec<String>>>()?;
            if labels.is_empty() {
                return Err(err(format!("'{op}' needs at least one label")));
            }
            Ok(Node::Exists { labels, want: true })
        }
        "$in" | "$nin" => member(op, operands),
        _ => binary(op, operands),
    }
}

fn member(op: &str, mut operands: Vec<Operand>) -> Result<Node> {
    if operands.is_empty() {
        return Err(err(format!("'{op}' needs a value and a list")));
    }
    let value = operands.remove(0);
    Ok(Node::Member {
        negate: op == "$nin",
        value,
        set: operands,
    })
}

fn binary(op: &str, operands: Vec<Operand>) -> Result<Node> {
    let count = operands.len();
    let Ok([a, b]) = <[Operand; 2]>::try_from(operands) else {
        return Err(err(format!("'{op}' needs 2 operands, got {count}")));
    };
    let cmp = |c| Ok(Node::Compare(c, a.clone(), b.clone()));
    let text = |t| {
        for o in [&a, &b] {
            if matches!(
                o,
                Operand::Timestamp
                    | Operand::Lit(Literal::Bool(_) | Literal::Int(_) | Literal::Float(_))
            ) {
                return Err(err(format!("'{op}' expects text operands, got {o:?}")));
            }
        }
        Ok(Node::Text(t, a.clone(), b.clone()))
    };
    match op {
        "$eq" => cmp(CmpOp::Eq),
        "$ne" => cmp(CmpOp::Ne),
        "$gt" => cmp(CmpOp::Gt),
        "$gte" => cmp(CmpOp::Gte),
        "$lt" => cmp(CmpOp::Lt),
        "$lte" => cmp(CmpOp::Lte),
        "$contains" => text(TextOp::Contains),
        "$starts_with" => text(TextOp::StartsWith),
        "$ends_with" => text(TextOp::EndsWith),
        _ => Err(err(format!("Unknown operator '{op}'"))),
    }
}

fn parse_operand(value: &Value, op: &str) -> Result<Operand> {
    Ok(match value {
        Value::Bool(b) => Operand::Lit(Literal::Bool(*b)),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Operand::Lit(Literal::Int(i)),
            None => match n.as_f64() {
                Some(f) if n.is_f64() => Operand::Lit(Literal::Float(f)),
                _ => return Err(err(format!("Number {n} in '{op}' is out of range"))),
            },
        },
        Value::String(s) => {
            if let Some(label) = s.strip_prefix('&') {
                Operand::Label(label.to_string())
            } else if s == "$timestamp" {
                Operand::Timestamp
            } else if let Some(escaped) = s.strip_prefix("$$") {
                Operand::Lit(Literal::Str(format!("${escaped}")))
            } else if s.starts_with('$') {
                check_known(s)?;
                return Err(err(format!(
                    "Operator '{s}' cannot be used as an operand of '{op}'"
                )));
            } else if s.starts_with('@') {
                return Err(err(format!("Computed label '{s}' is not supported")));
            } else {
                Operand::Lit(Literal::from_text(s))
            }
        }
        Value::Null => return Err(err(format!("null is not a valid operand of '{op}'"))),
        Value::Array(_) | Value::Object(_) => {
            return Err(err(format!(
                "'{op}' expects plain values (labels, numbers, strings), got {value}"
            )));
        }
    })
}
