//! Equality and ordering (`docs/conditions.md`, "Values"): Bool, Int, Duration and Float are one numeric class
//! (integers compared exactly, as f64 once a Float is involved); strings compare byte-wise;
//! a string and a number are never equal and never ordered; NaN equals nothing.

use std::cmp::Ordering;

use super::expr::Op;
use super::value::{Num, Value};

/// How two values order, `None` when they cannot be compared.
pub fn compare(a: &Value, b: &Value) -> Option<Ordering> {
    match (a.num(), b.num()) {
        (Some(Num::Int(x)), Some(Num::Int(y))) => Some(x.cmp(&y)),
        (Some(x), Some(y)) => x.as_f64().partial_cmp(&y.as_f64()),
        (None, None) => match (a, b) {
            (Value::Str(x), Value::Str(y)) => {
                Some(x.as_str().as_bytes().cmp(y.as_str().as_bytes()))
            }
            _ => None,
        },
        _ => None,
    }
}

/// Equality as `$eq`, `$in` and `$nin` use it.
pub fn equal(a: &Value, b: &Value) -> bool {
    compare(a, b) == Some(Ordering::Equal)
}

/// The result of a comparison operator.
pub fn comparison(op: Op, a: &Value, b: &Value) -> bool {
    let ord = compare(a, b);
    match op {
        Op::Eq => ord == Some(Ordering::Equal),
        Op::Ne => ord != Some(Ordering::Equal),
        Op::Gt => ord == Some(Ordering::Greater),
        Op::Gte => matches!(ord, Some(Ordering::Greater | Ordering::Equal)),
        Op::Lt => ord == Some(Ordering::Less),
        Op::Lte => matches!(ord, Some(Ordering::Less | Ordering::Equal)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_strings_and_nan() {
        assert!(equal(&Value::Bool(true), &Value::Int(1)));
        assert!(equal(
            &Value::Duration(3_600_000_000),
            &Value::Int(3_600_000_000)
        ));
        assert!(!equal(&Value::Int(10), &Value::str("10")));
        assert!(comparison(Op::Ne, &Value::Int(10), &Value::str("10")));
        assert!(!comparison(Op::Gt, &Value::Int(10), &Value::str("1")));
        assert!(comparison(Op::Lt, &Value::str("10"), &Value::str("9")));
        assert!(comparison(
            Op::Lt,
            &Value::str("Alpha"),
            &Value::str("alpha")
        ));
        let nan = Value::Float(f64::NAN);
        assert!(!equal(&nan, &nan));
        assert!(comparison(Op::Ne, &nan, &nan));
        assert!(!comparison(Op::Lte, &nan, &Value::Int(1)));
        assert!(comparison(Op::Lt, &Value::Int(1), &Value::Float(1.5)));
    }
}
