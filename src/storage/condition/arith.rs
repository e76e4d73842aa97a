//! Arithmetic: `$add $sub $mult $div $div_num $rem $abs`. Bool counts as 0/1, a Duration as
//! its µs; integers wrap on overflow; a Float on either side makes the result a Float;
//! `$add` of two strings concatenates. Where 1.21.5 exits (`$rem` by an integer zero,
//! `i64::MIN $div_num -1`), the result is a clear 422 or the wrapped value instead.

use super::Fault;
use super::value::{Num, Text, Value};

type Out = Result<Value<'static>, Fault<'static>>;

fn fail(message: String) -> Out {
    Err(Fault::unprocessable(message))
}

fn nums(a: &Value, b: &Value) -> Option<(Num, Num)> {
    Some((a.num()?, b.num()?))
}

fn int_or_float(
    a: Num,
    b: Num,
    ints: impl Fn(i64, i64) -> Out,
    floats: impl Fn(f64, f64) -> f64,
) -> Out {
    match (a, b) {
        (Num::Int(x), Num::Int(y)) => ints(x, y),
        _ => Ok(Value::Float(floats(a.as_f64(), b.as_f64()))),
    }
}

/// `a + b`; two strings concatenate.
pub fn add<'a>(a: &Value<'a>, b: &Value<'a>) -> Out {
    if let (Value::Str(x), Value::Str(y)) = (a, b) {
        return Ok(Value::Str(Text::Owned(format!(
            "{}{}",
            x.as_str(),
            y.as_str()
        ))));
    }
    match nums(a, b) {
        Some((x, y)) => int_or_float(x, y, |x, y| Ok(Value::Int(x.wrapping_add(y))), |x, y| x + y),
        None => fail(format!("Cannot add {} to {}", b.type_name(), a.type_name())),
    }
}

/// `a - b`.
pub fn sub(a: &Value, b: &Value) -> Out {
    match nums(a, b) {
        Some((x, y)) => int_or_float(x, y, |x, y| Ok(Value::Int(x.wrapping_sub(y))), |x, y| x - y),
        None => match (a, b) {
            (Value::Str(_), Value::Str(_)) => fail("Cannot subtract string".to_string()),
            (Value::Str(_), other) | (other, _) => {
                fail(format!("Cannot subtract string from {}", other.type_name()))
            }
        },
    }
}

/// `a × b`.
pub fn mult(a: &Value, b: &Value) -> Out {
    match nums(a, b) {
        Some((x, y)) => int_or_float(x, y, |x, y| Ok(Value::Int(x.wrapping_mul(y))), |x, y| x * y),
        None => match a {
            Value::Str(_) => fail(format!("Cannot multiply string by {}", b.type_name())),
            _ => fail(format!("Cannot multiply {} by string", a.type_name())),
        },
    }
}

/// The remainder with the dividend's sign; a float divisor of 0 gives NaN, an integer one
/// is refused.
pub fn rem(a: &Value, b: &Value) -> Out {
    match nums(a, b) {
        Some((x, y)) => int_or_float(
            x,
            y,
            |x, y| {
                if y == 0 {
                    fail("Cannot divide by zero".to_string())
                } else {
                    Ok(Value::Int(x.wrapping_rem(y)))
                }
            },
            |x, y| x % y,
        ),
        None => match (a, b) {
            (Value::Str(_), Value::Str(_)) => fail("Cannot divide string".to_string()),
            (Value::Str(_), other) => {
                fail(format!("Cannot divide string by {}", other.type_name()))
            }
            (other, _) => fail(format!("Cannot divide {} by string", other.type_name())),
        },
    }
}

fn division_operands(a: &Value, b: &Value) -> Result<(), Fault<'static>> {
    if matches!(a, Value::Str(_)) {
        return Err(Fault::unprocessable("Cannot divide string".to_string()));
    }
    if matches!(b, Value::Str(_)) {
        return Err(Fault::unprocessable("Cannot divide by string".to_string()));
    }
    Ok(())
}

/// `a / b` as floats.
pub fn div(a: &Value, b: &Value) -> Out {
    division_operands(a, b)?;
    let (x, y) = (a.to_float()?, b.to_float()?);
    if y == 0.0 {
        return fail("Cannot divide by zero".to_string());
    }
    Ok(Value::Float(x / y))
}

/// `a / b` as integers (floats truncated first), truncating toward zero.
pub fn div_num(a: &Value, b: &Value) -> Out {
    division_operands(a, b)?;
    let (x, y) = (a.to_int()?, b.to_int()?);
    if y == 0 {
        return fail("Cannot divide by zero".to_string());
    }
    Ok(Value::Int(x.wrapping_div(y)))
}

/// `|a|`: Bool and Int give an Int, a Float a Float.
pub fn abs(a: &Value) -> Out {
    match a.num() {
        Some(Num::Int(i)) => Ok(Value::Int(i.wrapping_abs())),
        Some(Num::Float(f)) => Ok(Value::Float(f.abs())),
        None => fail("Cannot calculate absolute value of a string".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int(v: Out) -> i64 {
        match v {
            Ok(Value::Int(i)) => i,
            other => panic!("{other:?}"),
        }
    }

    fn message(v: Out) -> String {
        match v {
            Err(Fault::Error(e)) => e.message().to_string(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn integer_arithmetic_wraps_and_keeps_signs() {
        assert!(int(add(&Value::Int(i64::MAX), &Value::Int(1))) < 0);
        assert_eq!(int(rem(&Value::Int(-7), &Value::Int(2))), -1);
        assert_eq!(int(div_num(&Value::Int(-7), &Value::Int(2))), -3);
        assert_eq!(
            int(div_num(&Value::Int(i64::MIN), &Value::Int(-1))),
            i64::MIN
        );
        assert_eq!(int(rem(&Value::Int(i64::MIN), &Value::Int(-1))), 0);
        assert_eq!(int(abs(&Value::Int(i64::MIN))), i64::MIN);
        assert_eq!(int(add(&Value::Duration(5), &Value::Bool(true))), 6);
        assert!(matches!(rem(&Value::Float(7.5), &Value::Int(2)), Ok(Value::Float(f)) if f == 1.5));
        assert!(
            matches!(rem(&Value::Int(1), &Value::Float(0.0)), Ok(Value::Float(f)) if f.is_nan())
        );
    }

    #[test]
    fn refusals_name_the_types() {
        let s = Value::str("x");
        assert_eq!(
            message(add(&s, &Value::Bool(true))),
            "Cannot add boolean to string"
        );
        assert_eq!(
            message(add(&Value::Int(1), &s)),
            "Cannot add string to integer"
        );
        assert_eq!(message(sub(&s, &s)), "Cannot subtract string");
        assert_eq!(
            message(sub(&Value::Float(1.0), &s)),
            "Cannot subtract string from float"
        );
        assert_eq!(
            message(sub(&s, &Value::Duration(1))),
            "Cannot subtract string from duration"
        );
        assert_eq!(message(mult(&s, &s)), "Cannot multiply string by string");
        assert_eq!(
            message(mult(&Value::Int(1), &s)),
            "Cannot multiply integer by string"
        );
        assert_eq!(
            message(rem(&s, &Value::Int(1))),
            "Cannot divide string by integer"
        );
        assert_eq!(
            message(rem(&Value::Int(1), &Value::Int(0))),
            "Cannot divide by zero"
        );
        assert_eq!(message(div(&s, &Value::Int(1))), "Cannot divide string");
        assert_eq!(message(div(&Value::Int(1), &s)), "Cannot divide by string");
        assert_eq!(
            message(div(&Value::Int(1), &Value::Float(0.0))),
            "Cannot divide by zero"
        );
        assert_eq!(
            message(div_num(&Value::Int(1), &Value::Float(0.5))),
            "Cannot divide by zero"
        );
        assert_eq!(
            message(abs(&s)),
            "Cannot calculate absolute value of a string"
        );
    }
}
