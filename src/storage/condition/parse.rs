//! JSON → expression tree, with 1.21.5's structure rules (`docs/conditions.md`, "Structure"):
//! top-level `#` keys are directives, every other key is one expression and they are ANDed
//! in document order; `{"$op": [..]}` is the array form, `{"left": {"$op": right}}` the
//! object form (the key read as a literal), `{"$op": scalar}` the unary form; an object in
//! operand position contributes one operand per key. Arity is checked here; operand types
//! are not (they fail per record).

use serde_json::{Map, Value as Json};

use super::dates;
use super::directives::{RawDirective, parse_directive};
use super::expr::{Call, Expr, Op};
use super::literal::string_operand;
use super::value::Value;
use crate::error::{Error, Result};

/// Most JSON values (operators, operands, literals) a condition may hold.
pub const MAX_CONDITION_TERMS: usize = 10_000;
/// Deepest nesting a condition may have (the HTTP layer's JSON parser stops at 128).
pub const MAX_CONDITION_DEPTH: usize = 128;

fn err(message: String) -> Error {
    Error::unprocessable(message)
}

/// What parsing a condition yields.
pub struct Parsed {
    /// The expression; `None` selects every record.
    pub root: Option<Expr>,
    /// The kind of each aggregate's state slot.
    pub slots: Vec<Op>,
    /// Directives with their values, shapes checked, values not yet.
    pub directives: Vec<RawDirective>,
}

/// Refuses conditions past [`MAX_CONDITION_TERMS`] or [`MAX_CONDITION_DEPTH`] before any
/// of it is compiled: a condition is client input held for a query's lifetime.
fn check_size(json: &Json) -> Result<()> {
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
            Json::Array(items) => stack.extend(items.iter().map(|v| (v, depth + 1))),
            Json::Object(map) => stack.extend(map.values().map(|v| (v, depth + 1))),
            _ => {}
        }
    }
    Ok(())
}

/// Parses a whole `when` value. Errors come in 1.21.5's order: directive names and value
/// shapes first, then expressions in document order.
pub fn parse_condition(json: &Json) -> Result<Parsed> {
    check_size(json)?;
    let mut parser = Parser { slots: Vec::new() };
    let mut directives = Vec::new();
    let root = match json {
        Json::Null => None,
        Json::Object(map) => {
            for (key, value) in map.iter().filter(|(k, _)| k.starts_with('#')) {
                directives.push(parse_directive(key, value)?);
            }
            let mut all = Vec::new();
            for (key, value) in map.iter().filter(|(k, _)| !k.starts_with('#')) {
                all.push(parser.pair(key, value)?);
            }
            Some(match all.len() {
                0 => Expr::Const(Value::Bool(true)),
                1 => all.pop().expect("one expression was just counted"),
                _ => parser.call("$and", all)?,
            })
        }
        Json::Array(_) => return Err(array_error(json)),
        scalar => {
            let mut operands = parser.operand(scalar)?;
            Some(operands.pop().expect("a scalar is one operand"))
        }
    };
    Ok(Parsed {
        root,
        slots: parser.slots,
        directives,
    })
}

fn array_error(json: &Json) -> Error {
    err(format!("Array type is not supported: {json}"))
}

fn null_error() -> Error {
    err("Null type is not supported: null".to_string())
}

struct Parser {
    slots: Vec<Op>,
}

impl Parser {
    /// One key/value pair: array, object or unary form.
    fn pair(&mut self, key: &str, value: &Json) -> Result<Expr> {
        match value {
            Json::Array(items) => {
                check_operator_name(key)?;
                let mut operands = Vec::with_capacity(items.len());
                for item in items {
                    operands.extend(self.operand(item)?);
                }
                self.call(key, operands)
            }
            Json::Object(inner) => self.object_form(key, inner),
            Json::Null => Err(null_error()),
            scalar => {
                check_operator_name(key)?;
                let operands = self.operand(scalar)?;
                self.call(key, operands)
            }
        }
    }

    /// `{"left": {"$op": right}}`: the key is a literal operand, then the operator's
    /// further operands.
    fn object_form(&mut self, key: &str, inner: &Map<String, Json>) -> Result<Expr> {
        if inner.len() != 1 {
            return Err(err(
                "Object notation must have exactly one operator".to_string()
            ));
        }
        let left = string_operand(key)?;
        let (op, right) = inner.iter().next().expect("one member was just checked");
        check_operator_name(op)?;
        let mut operands = vec![left];
        operands.extend(self.operand(right)?);
        self.call(op, operands)
    }

    /// One operand position: scalars and strings give one operand, an object one per key.
    fn operand(&mut self, json: &Json) -> Result<Vec<Expr>> {
        Ok(match json {
            Json::Null => return Err(null_error()),
            Json::Bool(b) => vec![Expr::Const(Value::Bool(*b))],
            Json::Number(n) => vec![Expr::Const(if let Some(i) = n.as_i64() {
                Value::Int(i)
            } else if n.is_u64() {
                // 1.21.5 exits on this; a clear refusal instead.
                return Err(err(format!(
                    "Integer {n} is out of range: integers in a condition must fit a signed 64-bit integer (at most {})",
                    i64::MAX
                )));
            } else {
                Value::Float(n.as_f64().unwrap_or(f64::NAN))
            })],
            Json::String(s) => vec![string_operand(s)?],
            Json::Array(_) => return Err(array_error(json)),
            Json::Object(map) => {
                let mut out = Vec::with_capacity(map.len());
                for (key, value) in map {
                    out.push(self.pair(key, value)?);
                }
                out
            }
        })
    }

    /// An operator call, its arity checked.
    fn call(&mut self, name: &str, args: Vec<Expr>) -> Result<Expr> {
        check_operator_name(name)?;
        let (op, canonical) =
            Op::from_name(name).ok_or_else(|| err(format!("Operator '{name}' not supported")))?;
        if let Some(message) = op.arity_error(canonical, args.len()) {
            return Err(err(message));
        }
        let slot = if op.is_aggregate() {
            self.slots.push(op);
            self.slots.len() - 1
        } else {
            0
        };
        let zone = match (op, args.get(1)) {
            (Op::Date(_), Some(Expr::Const(Value::Str(name)))) => {
                Some(dates::Zone::resolve(name.as_str()))
            }
            _ => None,
        };
        Ok(Expr::Call(Box::new(Call {
            op,
            name: canonical,
            args,
            slot,
            zone,
        })))
    }
}

fn check_operator_name(name: &str) -> Result<()> {
    if name.starts_with('$') {
        Ok(())
    } else {
        Err(err(format!("Operator '{name}' must start with '$'")))
    }
}
