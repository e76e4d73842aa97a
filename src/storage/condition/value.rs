//! Typed values for conditions. Label values are typed bool, then integer, then float, then
//! string, so `"10"` equals `10` and `"9" < "10"` numerically. Values borrow their text, so
//! typing a label allocates nothing.

use std::cmp::Ordering;

use crate::duration::parse_duration;

/// A literal written in a condition, parsed once.
#[derive(Debug, Clone, PartialEq)]
pub enum Literal {
    /// `true` / `false`.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A string.
    Str(String),
    /// A string that is also a duration (`"1h"`): microseconds, and the text.
    Duration(i64, String),
}

impl Literal {
    /// A string literal, typed like a label (bool, integer, float), else a duration when
    /// it parses as one (`"1h"`), else a plain string.
    pub fn from_text(text: &str) -> Literal {
        match Val::of_label(text) {
            Val::Bool(b) => return Literal::Bool(b),
            Val::Int(i) => return Literal::Int(i),
            Val::Float(f) => return Literal::Float(f),
            Val::Str(_) | Val::Duration(..) => {}
        }
        let looks_like_duration = text.bytes().any(|b| b.is_ascii_digit())
            && text.bytes().any(|b| b.is_ascii_alphabetic());
        match looks_like_duration.then(|| parse_duration(text)) {
            Some(Ok(micros)) => Literal::Duration(micros, text.to_string()),
            _ => Literal::Str(text.to_string()),
        }
    }

    /// The literal as a value.
    pub fn as_val(&self) -> Val<'_> {
        match self {
            Literal::Bool(b) => Val::Bool(*b),
            Literal::Int(i) => Val::Int(*i),
            Literal::Float(f) => Val::Float(*f),
            Literal::Str(s) => Val::Str(s),
            Literal::Duration(micros, text) => Val::Duration(*micros, text),
        }
    }
}

/// A value being compared: a typed label, the record timestamp, or a literal.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Val<'a> {
    /// A boolean.
    Bool(bool),
    /// An integer (also timestamps, in µs).
    Int(i64),
    /// A finite float.
    Float(f64),
    /// Text that is not a number or boolean.
    Str(&'a str),
    /// A duration literal: compares as µs with numbers and as text with text.
    Duration(i64, &'a str),
}

impl<'a> Val<'a> {
    /// Types a label value: bool, then integer, then float, then string.
    #[inline]
    pub fn of_label(text: &'a str) -> Val<'a> {
        match text {
            "true" => return Val::Bool(true),
            "false" => return Val::Bool(false),
            _ => {}
        }
        // Fast path: text starting with a letter is never a number we accept (f64 parsing
        // would only find "inf" or "nan", which stay text).
        if text
            .as_bytes()
            .first()
            .is_some_and(|b| b.is_ascii_alphabetic())
        {
            return Val::Str(text);
        }
        if let Ok(i) = text.parse::<i64>() {
            return Val::Int(i);
        }
        match text.parse::<f64>() {
            Ok(f) if f.is_finite() => Val::Float(f),
            _ => Val::Str(text),
        }
    }

    fn as_f64(self) -> Option<f64> {
        match self {
            Val::Int(i) | Val::Duration(i, _) => Some(i as f64),
            Val::Float(f) => Some(f),
            Val::Bool(b) => Some(if b { 1.0 } else { 0.0 }),
            Val::Str(_) => None,
        }
    }
}

/// Orders two values, or `None` when they cannot be compared (text against a number).
pub fn compare(a: Val, b: Val) -> Option<Ordering> {
    use Val::*;
    match (a, b) {
        (Int(x) | Duration(x, _), Int(y) | Duration(y, _)) => Some(x.cmp(&y)),
        (Bool(x), Bool(y)) => Some(x.cmp(&y)),
        (Str(x), Str(y) | Duration(_, y)) | (Duration(_, x), Str(y)) => Some(x.cmp(y)),
        (Str(_), _) | (_, Str(_)) => None,
        _ => a.as_f64()?.partial_cmp(&b.as_f64()?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_typed_in_order() {
        assert_eq!(Val::of_label("true"), Val::Bool(true));
        assert_eq!(Val::of_label("10"), Val::Int(10));
        assert_eq!(Val::of_label("-3"), Val::Int(-3));
        assert_eq!(Val::of_label("2.5"), Val::Float(2.5));
        assert_eq!(Val::of_label("EWR"), Val::Str("EWR"));
        assert_eq!(Val::of_label("nan"), Val::Str("nan"));
        assert_eq!(Val::of_label("inf"), Val::Str("inf"));
    }

    #[test]
    fn comparisons_coerce_like_reductstore() {
        let lt = Some(Ordering::Less);
        assert_eq!(compare(Val::of_label("9"), Val::of_label("10")), lt);
        assert_eq!(
            compare(Val::of_label("10"), Literal::Int(10).as_val()),
            Some(Ordering::Equal)
        );
        assert_eq!(compare(Val::Int(1), Val::Float(1.5)), lt);
        assert_eq!(compare(Val::Bool(true), Val::Int(1)), Some(Ordering::Equal));
        assert_eq!(compare(Val::Str("a"), Val::Str("b")), lt);
        assert_eq!(compare(Val::Str("a"), Val::Int(1)), None);
        let hour = Literal::from_text("1h");
        assert_eq!(hour, Literal::Duration(3_600_000_000, "1h".into()));
        assert_eq!(compare(Val::Int(3_599_999_999), hour.as_val()), lt);
        assert_eq!(
            compare(Val::Str("1h"), hour.as_val()),
            Some(Ordering::Equal)
        );
        assert_eq!(Literal::from_text("EWR"), Literal::Str("EWR".into()));
        assert_eq!(Literal::from_text("10"), Literal::Int(10));
        assert_eq!(Literal::from_text("false"), Literal::Bool(false));
    }
}
