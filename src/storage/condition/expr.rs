//! The parsed form of a condition: an expression tree whose nodes are constants, label
//! references, the record timestamp, or operator calls, and the operator table (names,
//! aliases, arity and its error message).

use super::dates::DatePart;
use super::value::Value;

/// An operator of the language.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Eq,
    Ne,
    Gt,
    Gte,
    Lt,
    Lte,
    And,
    Or,
    Not,
    Xor,
    In,
    Nin,
    Exists,
    Contains,
    StartsWith,
    EndsWith,
    Add,
    Sub,
    Mult,
    Div,
    DivNum,
    Rem,
    Abs,
    Date(DatePart),
    Cast,
    Ref,
    Timestamp,
    EachN,
    EachT,
    Limit,
    Gate,
}

/// How many operands an operator takes.
enum Arity {
    Any,
    Exactly(usize),
    AtLeast(usize),
    OneOrTwo,
}

impl Op {
    /// The operator a `$name` names, with the name its messages use (an alias shares its
    /// operator's messages).
    pub fn from_name(name: &str) -> Option<(Op, &'static str)> {
        use DatePart::*;
        Some(match name {
            "$eq" => (Op::Eq, "$eq"),
            "$ne" => (Op::Ne, "$ne"),
            "$gt" => (Op::Gt, "$gt"),
            "$gte" => (Op::Gte, "$gte"),
            "$lt" => (Op::Lt, "$lt"),
            "$lte" => (Op::Lte, "$lte"),
            "$and" | "$all_of" => (Op::And, "$and"),
            "$or" | "$any_of" => (Op::Or, "$or"),
            "$not" | "$none_of" => (Op::Not, "$not"),
            "$xor" | "$one_of" => (Op::Xor, "$xor"),
            "$in" => (Op::In, "$in"),
            "$nin" => (Op::Nin, "$nin"),
            "$exists" | "$has" => (Op::Exists, "$exists"),
            "$contains" => (Op::Contains, "$contains"),
            "$starts_with" => (Op::StartsWith, "$starts_with"),
            "$ends_with" => (Op::EndsWith, "$ends_with"),
            "$add" => (Op::Add, "$add"),
            "$sub" => (Op::Sub, "$sub"),
            "$mult" => (Op::Mult, "$mult"),
            "$div" => (Op::Div, "$div"),
            "$div_num" => (Op::DivNum, "$div_num"),
            "$rem" => (Op::Rem, "$rem"),
            "$abs" => (Op::Abs, "$abs"),
            "$year" => (Op::Date(Year), "$year"),
            "$month" => (Op::Date(Month), "$month"),
            "$day" => (Op::Date(Day), "$day"),
            "$hour" => (Op::Date(Hour), "$hour"),
            "$minute" => (Op::Date(Minute), "$minute"),
            "$second" => (Op::Date(Second), "$second"),
            "$weekday" => (Op::Date(Weekday), "$weekday"),
            "$cast" => (Op::Cast, "$cast"),
            "$ref" => (Op::Ref, "$ref"),
            "$timestamp" | "$id" => (Op::Timestamp, "$timestamp"),
            "$each_n" => (Op::EachN, "$each_n"),
            "$each_t" => (Op::EachT, "$each_t"),
            "$limit" => (Op::Limit, "$limit"),
            "$gate" => (Op::Gate, "$gate"),
            _ => return None,
        })
    }

    fn arity(self) -> Arity {
        match self {
            Op::And | Op::Or | Op::Not | Op::Xor | Op::Add | Op::Mult => Arity::Any,
            Op::In | Op::Nin => Arity::AtLeast(2),
            Op::Exists => Arity::AtLeast(1),
            Op::Date(_) => Arity::OneOrTwo,
            Op::Timestamp => Arity::Exactly(0),
            Op::Abs | Op::Ref | Op::EachN | Op::EachT | Op::Limit => Arity::Exactly(1),
            _ => Arity::Exactly(2),
        }
    }

    /// The arity error for `count` operands, as 1.21.5 words it; `None` when they fit.
    pub fn arity_error(self, name: &str, count: usize) -> Option<String> {
        match self.arity() {
            Arity::Any => None,
            Arity::Exactly(n) if n == count => None,
            Arity::Exactly(0) => Some(format!("{name} requires no operands")),
            Arity::Exactly(1) => Some(format!("{name} requires exactly one operand")),
            Arity::Exactly(_) => Some(format!("{name} requires exactly two operands")),
            Arity::AtLeast(n) if count >= n => None,
            Arity::AtLeast(1) => Some(format!("{name} requires at least one operand")),
            Arity::AtLeast(_) => Some(format!("{name} operator requires at least two operands")),
            Arity::OneOrTwo if (1..=2).contains(&count) => None,
            Arity::OneOrTwo => Some(format!("{name} requires one or two operands")),
        }
    }

    /// Whether the operator keeps state between records.
    pub fn is_aggregate(self) -> bool {
        matches!(self, Op::EachN | Op::EachT | Op::Limit | Op::Gate)
    }
}

/// A node of a parsed condition.
#[derive(Debug, Clone)]
pub enum Expr {
    /// A literal.
    Const(Value<'static>),
    /// `&name`: a stored label, typed.
    Label(String),
    /// `@name`: a computed label (only extensions make them; never present here).
    Computed(String),
    /// `$timestamp` / `$id`.
    Timestamp,
    /// An operator applied to operands.
    Call(Box<Call>),
}

/// An operator call.
#[derive(Debug, Clone)]
pub struct Call {
    /// The operator.
    pub op: Op,
    /// The name its messages use.
    pub name: &'static str,
    /// Operands, in document order.
    pub args: Vec<Expr>,
    /// For an aggregate: its state's index in the evaluation state.
    pub slot: usize,
    /// For a date operator with a constant zone: the zone, resolved once.
    pub zone: Option<super::dates::Zone>,
}
