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

    /// Parses a condition from JSON text.
    pub fn parse_str(text: &str, strict: bool) -> Result<Condition> {
        let json: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| Error::unprocessable(format!("Invalid JSON in condition: {e}")))?;
        Self::parse(&json, strict)
    }

    /// True when the record matches.
    pub fn evaluate(&self, meta: &RecordMeta) -> Result<bool> {
        self.eval(&self.root, meta)
    }

    fn resolve<'a>(
        &'a self,
        operand: &'a Operand,
        meta: &'a RecordMeta,
    ) -> Result<Option<Val<'a>>> {
        match operand {
            Operand::Lit(lit) => Ok(Some(lit.as_val())),
            Operand::Timestamp => Ok(Some(Val::Int(
                i64::try_from(meta.timestamp).unwrap_or(i64::MAX),
            ))),
            Operand::Label(name) => match meta.labels.get(name) {
                Some(text) => Ok(Some(Val::of_label(text))),
                None if self.strict => {
                    Err(Error::not_found(format!("Reference '{name}' not found")))
                }
                None => Ok(None),
            },
        }
    }

    /// The raw text of an operand, for the string operators.
    fn text<'a>(&'a self, operand: &'a Operand, meta: &'a RecordMeta) -> Result<Option<&'a str>> {
        match operand {
            Operand::Label(name) => match meta.labels.get(name) {
                Some(text) => Ok(Some(text)),
                None if self.strict => {
                    Err(Error::not_found(format!("Reference '{name}' not found")))
                }
                None => Ok(None),
            },
            Operand::Lit(Literal::Str(s) | Literal::Duration(_, s)) => Ok(Some(s)),
            // The parser only lets text literals and labels reach string operators.
            Operand::Lit(_) | Operand::Timestamp => Ok(None),
        }
    }

    fn eval(&self, node: &Node, meta: &RecordMeta) -> Result<bool> {
        Ok(match node {
            Node::Compare(op, a, b) => {
                let (Some(a), Some(b)) = (self.resolve(a, meta)?, self.resolve(b, meta)?) else {
                    return Ok(false);
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
                let Some(value) = self.resolve(value, meta)? else {
                    return Ok(false);
                };
                let mut found = false;
                for candidate in set {
                    if let Some(c) = self.resolve(candidate, meta)?
                        && compare(value, c) == Some(Ordering::Equal)
                    {
                        found = true;
                        break;
                    }
                }
                found != *negate
            }
            Node::Text(op, a, b) => {
                let (Some(a), Some(b)) = (self.text(a, meta)?, self.text(b, meta)?) else {
                    return Ok(false);
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
