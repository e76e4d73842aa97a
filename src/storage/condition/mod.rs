//! `when` conditions in the ReductStore syntax, for selecting records to query or delete.
//!
//! ```json
//! {"&origin": {"$in": ["EWR", "JFK"]}, "$lt": ["$timestamp", 1700000000000000]}
//! ```
//!
//! A condition is parsed once into a tree ([`Condition::parse`]); evaluating it against a
//! record ([`Condition::evaluate`]) borrows label text and allocates nothing. Top-level keys
//! are ANDed. See `parse.rs` for the accepted operators and what is rejected.

mod parse;
pub mod value;

use std::cmp::Ordering;

use crate::error::{Error, Result};
use crate::storage::record::RecordMeta;
use value::{Literal, Val, compare};

pub use parse::{MAX_CONDITION_DEPTH, MAX_CONDITION_TERMS};

/// Longest JSON text of a condition accepted (ample for [`MAX_CONDITION_TERMS`] terms).
pub const MAX_CONDITION_BYTES: usize = 256 << 10;

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CmpOp {
    Eq,
    Ne,
    Gt,
    Gte,
    Lt,
    Lte,
}

/// A string operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TextOp {
    Contains,
    StartsWith,
    EndsWith,
}

/// Something a node compares.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Operand {
    Label(String),
    Timestamp,
    Lit(Literal),
}

/// A node of the parsed condition tree.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node {
    Compare(CmpOp, Operand, Operand),
    Member {
        negate: bool,
        value: Operand,
        set: Vec<Operand>,
    },
    Text(TextOp, Operand, Operand),
    Exists {
        labels: Vec<String>,
        want: bool,
    },
    All(Vec<Node>),
    Any(Vec<Node>),
    NoneOf(Vec<Node>),
    OneOf(Vec<Node>),
}

/// A parsed `when` condition.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    root: Node,
    strict: bool,
}

impl Condition {
    /// Parses a condition; unknown or unsupported operators and `#` directives are errors
    /// naming them. With `strict`, a record missing a referenced label makes evaluation
    /// fail; otherwise that comparison is simply false.
    pub fn parse(json: &serde_json::Value, strict: bool) -> Result<Condition> {
        Ok(Condition {
            root: parse::parse_root(json)?,
            strict,
        })
    }

    /// Parses a condition from JSON text. Text past [`MAX_CONDITION_BYTES`] is refused
    /// before it is parsed: a JSON tree takes many times its text in memory.
    pub fn parse_str(text: &str, strict: bool) -> Result<Condition> {
        if text.len() > MAX_CONDITION_BYTES {
            return Err(Error::unprocessable(format!(
                "The condition is {} bytes of JSON; at most {MAX_CONDITION_BYTES} are accepted",
                text.len()
            )));
        }
        let json: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| Error::unprocessable(format!("Invalid JSON in condition: {e}")))?;
        Self::parse(&json, strict)
    }

    /// True when the record matches.
    pub fn evaluate(&self, meta: &RecordMeta) -> Result<bool> {
        self.eval(&self.root, meta)
    }

    /// The value of an operand; `None` for a label the record does not have.
    #[inline]
    fn resolve<'a>(operand: &'a Operand, meta: &'a RecordMeta) -> Option<Val<'a>> {
        match operand {
            Operand::Lit(lit) => Some(lit.as_val()),
            Operand::Timestamp => Some(Val::Int(i64::try_from(meta.timestamp).unwrap_or(i64::MAX))),
            Operand::Label(name) => meta.labels.get(name).map(|text| Val::of_label(text)),
        }
    }

    /// The raw text of an operand, for the string operators; `None` for a missing label.
    #[inline]
    fn text<'a>(operand: &'a Operand, meta: &'a RecordMeta) -> Option<&'a str> {
        match operand {
            Operand::Label(name) => meta.labels.get(name).map(String::as_str),
            Operand::Lit(Literal::Str(s) | Literal::Duration(_, s)) => Some(s),
            // The parser only lets text literals and labels reach string operators.
            Operand::Lit(_) | Operand::Timestamp => None,
        }
    }

    /// Outcome of a comparison with a missing label: no match, or in strict mode an error
    /// naming the label. Kept out of line so the hot path stays small.
    #[cold]
    fn missing(&self, operands: &[&Operand], meta: &RecordMeta) -> Result<bool> {
        if self.strict {
            for operand in operands {
                if let Operand::Label(name) = operand
                    && !meta.labels.contains_key(name)
                {
                    return Err(Error::not_found(format!("Reference '{name}' not found")));
                }
            }
        }
        Ok(false)
    }

    fn eval(&self, node: &Node, meta: &RecordMeta) -> Result<bool> {
        Ok(match node {
            Node::Compare(op, a_op, b_op) => {
                let (Some(a), Some(b)) = (Self::resolve(a_op, meta), Self::resolve(b_op, meta))
                else {
                    return self.missing(&[a_op, b_op], meta);
                };
                let ord = compare(a, b);
                match op {
                    CmpOp::Eq => ord == Some(Ordering::Equal),
                    CmpOp::Ne => ord != Some(Ordering::Equal),
                    CmpOp::Gt => ord == Some(Ordering::Greater),
                    CmpOp::Gte => matches!(ord, Some(Ordering::Greater | Ordering::Equal)),
                    CmpOp::Lt => ord == Some(Ordering::Less),
                    CmpOp::Lte => matches!(ord, Some(Ordering::Less | Ordering::Equal)),
                }
            }
            Node::Member { negate, value, set } => {
                let Some(v) = Self::resolve(value, meta) else {
                    return self.missing(&[value], meta);
                };
                let mut found = false;
                for candidate in set {
                    match Self::resolve(candidate, meta) {
                        Some(c) if compare(v, c) == Some(Ordering::Equal) => {
                            found = true;
                            break;
                        }
                        Some(_) => {}
                        None => return self.missing(&[candidate], meta),
                    }
                }
                found != *negate
            }
            Node::Text(op, a_op, b_op) => {
                let (Some(a), Some(b)) = (Self::text(a_op, meta), Self::text(b_op, meta)) else {
                    return self.missing(&[a_op, b_op], meta);
                };
                match op {
                    TextOp::Contains => a.contains(b),
                    TextOp::StartsWith => a.starts_with(b),
                    TextOp::EndsWith => a.ends_with(b),
                }
            }
            Node::Exists { labels, want } => {
                labels.iter().all(|l| meta.labels.contains_key(l)) == *want
            }
            Node::All(nodes) => {
                for n in nodes {
                    if !self.eval(n, meta)? {
                        return Ok(false);
                    }
                }
                true
            }
            Node::Any(nodes) => {
                for n in nodes {
                    if self.eval(n, meta)? {
                        return Ok(true);
                    }
                }
                false
            }
            Node::NoneOf(nodes) => {
                for n in nodes {
                    if self.eval(n, meta)? {
                        return Ok(false);
                    }
                }
                true
            }
            Node::OneOf(nodes) => {
                let mut count = 0;
                for n in nodes {
                    count += usize::from(self.eval(n, meta)?);
                }
                count == 1
            }
        })
    }
}

#[cfg(test)]
mod tests;
