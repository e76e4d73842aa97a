//! `when` conditions: the whole condition language of ReductStore 1.21.5, whose rules
//! `docs/conditions.md` states, for queries, remove-queries, replication tasks and
//! policies.
//!
//! ```json
//! {"$in": ["&origin", "EWR", "JFK"], "$lt": ["$timestamp", 1700000000000000]}
//! ```
//!
//! A condition is parsed once ([`Condition::parse`]) into an immutable tree; evaluating it
//! on a record's metadata borrows label text and allocates nothing. The state of the
//! aggregates (`$each_n`, `$each_t`, `$limit`, `$gate`) lives in a [`Matcher`], one per
//! evaluation context (a query's entry, a removal's entry), so one parsed condition serves
//! many entries and threads. An evaluation error is not a false value: it rejects the
//! record (or, with `strict`, fails the query).
//!
//! Files, by family: `parse.rs` (structure), `literal.rs` (string literals, durations),
//! `value.rs` (types, conversions), `compare.rs`, `logic.rs`, `arith.rs`, `dates.rs`,
//! `aggregates.rs`, `directives.rs` (`#` keys), `context.rs` (`#ctx_before`/`#ctx_after`).

mod aggregates;
mod arith;
mod compare;
pub(crate) mod context;
mod dates;
pub(crate) mod directives;
mod expr;
mod literal;
mod logic;
mod parse;
pub(crate) mod value;

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::storage::record::RecordMeta;
pub use aggregates::State;
pub use directives::{BatchDirectives, Directives, RawDirectives, Span};
use expr::{Call, Expr, Op};
pub use parse::{MAX_CONDITION_DEPTH, MAX_CONDITION_TERMS};
use value::{Text, Value};

/// Longest JSON text of a condition accepted (ample for [`MAX_CONDITION_TERMS`] terms).
pub const MAX_CONDITION_BYTES: usize = 256 << 10;

/// Why the evaluation of a record stopped short of a value.
#[derive(Debug)]
pub enum Fault<'a> {
    /// `&name` is not a label of the record.
    Missing(&'a str),
    /// `@name` is not a computed label (only an extension's records have them).
    MissingComputed(&'a str),
    /// Any other evaluation error.
    Error(Error),
    /// `$limit` was passed: the entry's query ends here.
    Interrupt,
}

impl Fault<'_> {
    /// A 422 evaluation error.
    pub fn unprocessable(message: String) -> Fault<'static> {
        Fault::Error(Error::unprocessable(message))
    }

    fn into_error(self) -> Error {
        match self {
            Fault::Missing(name) => Error::not_found(format!("Reference '{name}' not found")),
            Fault::MissingComputed(name) => {
                Error::not_found(format!("Reference '@{name}' not found"))
            }
            Fault::Error(e) => e,
            Fault::Interrupt => Error::internal("interrupted by $limit"),
        }
    }
}

/// What a condition says of one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Selected.
    Match,
    /// Not selected (false, or an evaluation error outside strict mode).
    Skip,
    /// `$limit` ended this entry's part of the query: no later record is examined.
    Stop,
}

struct Inner {
    root: Option<Expr>,
    slots: Vec<Op>,
    directives: RawDirectives,
    /// The condition's compact JSON: what equality compares and `Debug` shows.
    source: Arc<str>,
}

/// A parsed `when` condition; cheap to clone (the tree is shared).
#[derive(Clone)]
pub struct Condition {
    inner: Arc<Inner>,
    strict: bool,
    /// `@name` reads the record's `@name` label: set for a query extension's step, whose
    /// records carry computed labels; elsewhere `@name` is never found, as in ReductStore.
    computed: bool,
}

impl PartialEq for Condition {
    fn eq(&self, other: &Self) -> bool {
        self.strict == other.strict && self.inner.source == other.inner.source
    }
}

impl std::fmt::Debug for Condition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Condition({}, strict: {})",
            self.inner.source, self.strict
        )
    }
}

impl Condition {
    /// Parses a condition: structure, operators, arity, literals and directive shapes.
    /// Directive values are checked by [`Condition::directives`]. With `strict`, an
    /// evaluation error fails the query instead of rejecting the record.
    pub fn parse(json: &serde_json::Value, strict: bool) -> Result<Condition> {
        Self::parse_with_source(json, strict, json.to_string().into())
    }

    /// [`Condition::parse`] of `json` whose compact text the caller already holds as
    /// `source`: a long-lived holder (a policy) keeps one copy of the text, not two.
    pub fn parse_with_source(
        json: &serde_json::Value,
        strict: bool,
        source: Arc<str>,
    ) -> Result<Condition> {
        let parsed = parse::parse_condition(json)?;
        Ok(Condition {
            inner: Arc::new(Inner {
                root: parsed.root,
                slots: parsed.slots,
                directives: RawDirectives(parsed.directives),
                source,
            }),
            strict,
            computed: false,
        })
    }

    /// This condition, with `@name` reading the records' computed (`@`-named) labels: what
    /// a query extension's step evaluates the records it makes with.
    pub fn resolving_computed(mut self) -> Self {
        self.computed = true;
        self
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
            .map_err(|e| Error::unprocessable(format!("Invalid JSON: {e}")))?;
        Self::parse(&json, strict)
    }

    /// Whether evaluation errors fail the query.
    pub fn is_strict(&self) -> bool {
        self.strict
    }

    /// The directives as written (values unchecked).
    pub fn raw_directives(&self) -> &RawDirectives {
        &self.inner.directives
    }

    /// The directives with their values checked (1.21.5 checks them when an entry query
    /// is built, not when the condition is parsed).
    pub fn directives(&self) -> Result<Directives> {
        self.inner.directives.resolve()
    }

    /// Whether the result for a record depends on the records before it (aggregates or
    /// context directives), so records must be evaluated in time order, per entry.
    pub fn is_stateful(&self) -> bool {
        self.has_aggregates() || self.has_context()
    }

    /// Whether the condition has aggregates (`$each_n`, `$each_t`, `$limit`, `$gate`),
    /// whose verdict on a record depends on how many records, and which, came before.
    pub fn has_aggregates(&self) -> bool {
        !self.inner.slots.is_empty()
    }

    /// Whether the condition has context directives (`#ctx_before`, `#ctx_after`), which
    /// select records around a match.
    pub fn has_context(&self) -> bool {
        self.inner
            .directives
            .0
            .iter()
            .any(|d| matches!(d.name.as_str(), "#ctx_before" | "#ctx_after"))
    }

    /// The condition as compact JSON (what tells two conditions apart).
    pub fn source(&self) -> &str {
        &self.inner.source
    }

    /// A matcher that resumes from `state` (saved by [`Matcher::state`] of a matcher of
    /// this condition); a state of another condition is refused, naming the condition.
    pub fn resume(&self, state: State) -> Result<Matcher> {
        if !state.fits(&self.inner.slots) {
            return Err(Error::unprocessable(format!(
                "the saved aggregate state does not fit the condition {}",
                self.inner.source
            )));
        }
        Ok(Matcher {
            state,
            condition: self.clone(),
        })
    }

    /// A matcher with fresh aggregate state.
    pub fn matcher(&self) -> Matcher {
        Matcher {
            state: State::new(&self.inner.slots),
            condition: self.clone(),
        }
    }

    /// True when the record matches, for a condition without aggregates (one with them
    /// sees each record as its first; use a [`Matcher`]). `$limit` past its count is false.
    pub fn evaluate(&self, meta: &RecordMeta) -> Result<bool> {
        let mut state = State::new(&self.inner.slots);
        Ok(self.verdict(meta, &mut state)? == Verdict::Match)
    }

    /// The verdict on one record with this aggregate state.
    fn verdict(&self, meta: &RecordMeta, state: &mut State) -> Result<Verdict> {
        let Some(root) = &self.inner.root else {
            return Ok(Verdict::Match);
        };
        let mut eval = Eval {
            meta,
            state,
            computed: self.computed,
        };
        match eval.truth(root) {
            Ok(true) => Ok(Verdict::Match),
            Ok(false) => Ok(Verdict::Skip),
            Err(Fault::Interrupt) => Ok(Verdict::Stop),
            Err(_) if !self.strict => Ok(Verdict::Skip),
            Err(fault) => Err(fault.into_error()),
        }
    }
}

/// A condition with the aggregate state of one evaluation context.
pub struct Matcher {
    condition: Condition,
    state: State,
}

impl Matcher {
    /// The verdict on the next record (records are offered in time order).
    pub fn evaluate(&mut self, meta: &RecordMeta) -> Result<Verdict> {
        self.condition.verdict(meta, &mut self.state)
    }

    /// The condition this matcher evaluates.
    pub fn condition(&self) -> &Condition {
        &self.condition
    }

    /// The aggregates' state after the records evaluated so far.
    pub fn state(&self) -> &State {
        &self.state
    }
}

/// A constant as a value borrowing the condition (no copy of its text).
fn borrow_const<'a>(v: &'a Value<'static>) -> Value<'a> {
    match v {
        Value::Str(t) => Value::Str(Text::Borrowed(t.as_str())),
        other => other.clone(),
    }
}

/// One record's evaluation.
struct Eval<'a, 's> {
    meta: &'a RecordMeta,
    state: &'s mut State,
    /// Whether `@name` reads computed labels ([`Condition::resolving_computed`]).
    computed: bool,
}

type Out<'a> = std::result::Result<Value<'a>, Fault<'a>>;

impl<'a> Eval<'a, '_> {
    fn timestamp(&self) -> i64 {
        i64::try_from(self.meta.timestamp).unwrap_or(i64::MAX)
    }

    /// An operand read by truthiness; comparisons and logic answer without making values.
    fn truth(&mut self, expr: &'a Expr) -> std::result::Result<bool, Fault<'a>> {
        if let Expr::Call(call) = expr {
            match call.op {
                Op::Eq | Op::Ne | Op::Gt | Op::Gte | Op::Lt | Op::Lte => {
                    let a = self.value(&call.args[0])?;
                    let b = self.value(&call.args[1])?;
                    return Ok(compare::comparison(call.op, &a, &b));
                }
                Op::And | Op::Or | Op::Not | Op::Xor => {
                    return logic::logical(call.op, &call.args, |e| self.truth(e));
                }
                _ => {}
            }
        }
        self.value(expr).map(|v| v.truthy())
    }

    /// Leaves inline (the hot path: a label, a constant), calls out of line.
    #[inline(always)]
    fn value(&mut self, expr: &'a Expr) -> Out<'a> {
        match expr {
            Expr::Const(v) => Ok(borrow_const(v)),
            Expr::Label(name) => match self.meta.labels.get(name) {
                Some(text) => Ok(Value::of_label(text)),
                None => Err(Fault::Missing(name)),
            },
            // Computed labels are the `@`-named labels an extension gives the records it
            // makes; a stored label so named is not one.
            Expr::Computed(name) if self.computed => {
                let computed = self
                    .meta
                    .labels
                    .iter()
                    .find(|(k, _)| k.strip_prefix('@') == Some(name));
                match computed {
                    Some((_, text)) => Ok(Value::of_label(text)),
                    None => Err(Fault::MissingComputed(name)),
                }
            }
            Expr::Computed(name) => Err(Fault::MissingComputed(name)),
            Expr::Timestamp => Ok(Value::Int(self.timestamp())),
            Expr::Call(call) => self.call(call),
        }
    }

    /// The common operators on a short path; the rest, with their larger frames, apart.
    fn call(&mut self, call: &'a Call) -> Out<'a> {
        match call.op {
            Op::Eq | Op::Ne | Op::Gt | Op::Gte | Op::Lt | Op::Lte => {
                let a = self.value(&call.args[0])?;
                let b = self.value(&call.args[1])?;
                Ok(Value::Bool(compare::comparison(call.op, &a, &b)))
            }
            Op::And | Op::Or | Op::Not | Op::Xor => {
                let truth = logic::logical(call.op, &call.args, |e| self.truth(e))?;
                Ok(Value::Bool(truth))
            }
            _ => self.other_call(call),
        }
    }

    #[inline(never)]
    fn other_call(&mut self, call: &'a Call) -> Out<'a> {
        let args = &call.args;
        Ok(match call.op {
            // Answered by `call`.
            Op::Eq | Op::Ne | Op::Gt | Op::Gte | Op::Lt | Op::Lte => return self.call(call),
            Op::And | Op::Or | Op::Not | Op::Xor => return self.call(call),
            Op::In | Op::Nin => {
                let first = self.value(&args[0])?;
                let mut found = false;
                for candidate in &args[1..] {
                    if compare::equal(&first, &self.value(candidate)?) {
                        found = true;
                        break;
                    }
                }
                Value::Bool(found == (call.op == Op::In))
            }
            Op::Exists => {
                for arg in args {
                    let name = self.value(arg)?.to_text();
                    if !self.meta.labels.contains_key(name.as_str()) {
                        return Ok(Value::Bool(false));
                    }
                }
                Value::Bool(true)
            }
            Op::Contains | Op::StartsWith | Op::EndsWith => {
                let a = self.value(&args[0])?.to_text();
                let b = self.value(&args[1])?.to_text();
                let (a, b) = (a.as_str(), b.as_str());
                Value::Bool(match call.op {
                    Op::Contains => a.contains(b),
                    Op::StartsWith => a.starts_with(b),
                    _ => a.ends_with(b),
                })
            }
            Op::Add | Op::Mult => {
                let Some((first, rest)) = args.split_first() else {
                    return Ok(Value::Int(0));
                };
                let mut acc = self.value(first)?;
                for arg in rest {
                    let next = self.value(arg)?;
                    acc = if call.op == Op::Add {
                        arith::add(&acc, &next)?
                    } else {
                        arith::mult(&acc, &next)?
                    };
                }
                acc
            }
            Op::Sub | Op::Div | Op::DivNum | Op::Rem => {
                let a = self.value(&args[0])?;
                let b = self.value(&args[1])?;
                match call.op {
                    Op::Sub => arith::sub(&a, &b)?,
                    Op::Div => arith::div(&a, &b)?,
                    Op::DivNum => arith::div_num(&a, &b)?,
                    _ => arith::rem(&a, &b)?,
                }
            }
            Op::Abs => arith::abs(&self.value(&args[0])?)?,
            Op::Date(part) => {
                let micros = self.value(&args[0])?;
                match (&call.zone, args.get(1)) {
                    (Some(zone), Some(Expr::Const(Value::Str(name)))) => {
                        dates::date_part(part, call.name, &micros, Some((zone, name.as_str())))?
                    }
                    (_, Some(zone_expr)) => {
                        let Value::Str(name) = self.value(zone_expr)? else {
                            return Err(Fault::unprocessable(format!(
                                "{} requires timezone to be a string",
                                call.name
                            )));
                        };
                        let zone = dates::Zone::resolve(name.as_str());
                        dates::date_part(part, call.name, &micros, Some((&zone, name.as_str())))?
                    }
                    (_, None) => dates::date_part(part, call.name, &micros, None)?,
                }
            }
            Op::Cast => {
                let v = self.value(&args[0])?;
                let kind = self.value(&args[1])?.to_text();
                match kind.as_str() {
                    "bool" => Value::Bool(v.truthy()),
                    "int" => Value::Int(v.to_int()?),
                    "float" => Value::Float(v.to_float()?),
                    "string" => Value::Str(v.to_text()),
                    "duration" => Value::Duration(v.to_int()?),
                    other => {
                        return Err(Fault::unprocessable(format!("Unknown type '{other}'")));
                    }
                }
            }
            Op::Ref => {
                let name = self.value(&args[0])?.to_text();
                match self.meta.labels.get(name.as_str()) {
                    Some(text) => Value::of_label(text),
                    None => {
                        return Err(Fault::Error(Error::not_found(format!(
                            "Label '\"{}\"' not found",
                            name.as_str()
                        ))));
                    }
                }
            }
            Op::Timestamp => Value::Int(self.timestamp()),
            Op::EachN => {
                let count = aggregates::count(self.state, call.slot)?;
                let n = self.value(&args[0])?;
                Value::Bool(aggregates::each_n(count, &n)?)
            }
            Op::Limit => {
                let count = aggregates::count(self.state, call.slot)?;
                let n = self.value(&args[0])?;
                Value::Bool(aggregates::limit(count, &n)?)
            }
            Op::EachT => {
                let t = self.timestamp();
                aggregates::each_t_arm(self.state, call.slot, t)?;
                let interval = self.value(&args[0])?;
                Value::Bool(aggregates::each_t_decide(
                    self.state, call.slot, t, &interval,
                )?)
            }
            Op::Gate => {
                let t = self.timestamp();
                aggregates::gate_arm(self.state, call.slot, t)?;
                let window = self.value(&args[0])?;
                let input = self.value(&args[1])?;
                Value::Bool(aggregates::gate_decide(
                    self.state, call.slot, t, &window, &input,
                )?)
            }
        })
    }
}

// The reference records are fixture data, compiled in with the `demo` feature.
#[cfg(all(test, feature = "demo"))]
mod tests;
