//! Literals: the rules that turn a string in operand position into a label reference, an
//! escaped string, a nullary operator, a duration or plain text; duration literals
//! (`"1h 30m"`, `"-2s"`, `"m5"`); their text form (`1d 1h`, `-1m -30s`) is
//! `duration::write_duration`.

use super::expr::Expr;
use super::value::{Text, Value};
use crate::duration::unit_factor;
use crate::error::{Error, Result};

/// The value of a duration literal in µs, or `None` when the text is not one. Each
/// whitespace-separated part gathers its digits, `.` and `-` into a number (a signed
/// 64-bit integer) and its other characters into a unit (`us ms s m h d`); the parts are
/// summed, wrapping on overflow.
pub fn parse_duration_literal(text: &str) -> Option<i64> {
    let mut total = 0i64;
    let mut parts = 0;
    for part in text.split_whitespace() {
        parts += 1;
        // A part is short; gather without allocating into fixed buffers.
        let mut number = [0u8; 24];
        let mut unit = [0u8; 4];
        let (mut n, mut u) = (0, 0);
        for b in part.bytes() {
            if b.is_ascii_digit() || b == b'.' || b == b'-' {
                *number.get_mut(n)? = b;
                n += 1;
            } else {
                *unit.get_mut(u)? = b;
                u += 1;
            }
        }
        let value: i64 = std::str::from_utf8(&number[..n]).ok()?.parse().ok()?;
        let unit = std::str::from_utf8(&unit[..u]).ok()?;
        let scale = unit_factor(unit)?;
        total = total.wrapping_add(value.wrapping_mul(scale));
    }
    (parts > 0).then_some(total)
}

/// The text of an unknown `$` literal error.
pub fn unknown_literal(text: &str) -> Error {
    Error::unprocessable(format!(
        "Unknown '$' literal '{text}'; use '$$' to escape a string value"
    ))
}

/// A string in operand position (or the key of the object form): `&label`, `@computed`,
/// `$$escaped`, a nullary operator (`$timestamp`, `$id`, and the logical and arithmetic
/// operators with no operand), a duration, or text. Text is never typed as a number.
pub fn string_operand(text: &str) -> Result<Expr> {
    if let Some(name) = text.strip_prefix('&') {
        return Ok(Expr::Label(name.to_string()));
    }
    if let Some(name) = text.strip_prefix('@') {
        return Ok(Expr::Computed(name.to_string()));
    }
    if let Some(rest) = text.strip_prefix("$$") {
        return Ok(Expr::Const(Value::Str(Text::Owned(format!("${rest}")))));
    }
    if text.starts_with('$') {
        return Ok(match text {
            "$timestamp" | "$id" => Expr::Timestamp,
            "$and" | "$all_of" | "$not" | "$none_of" => Expr::Const(Value::Bool(true)),
            "$or" | "$any_of" | "$xor" | "$one_of" => Expr::Const(Value::Bool(false)),
            "$add" | "$mult" => Expr::Const(Value::Int(0)),
            _ => return Err(unknown_literal(text)),
        });
    }
    Ok(Expr::Const(match parse_duration_literal(text) {
        Some(micros) => Value::Duration(micros),
        None => Value::Str(Text::Owned(text.to_string())),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::duration::write_duration;

    fn text(us: i64) -> String {
        let mut s = String::new();
        write_duration(&mut s, us).expect("writes");
        s
    }

    #[test]
    fn duration_literals_as_reductstore_reads_them() {
        let cases = [
            ("10s", Some(10_000_000)),
            ("1h 30m", Some(5_400_000_000)),
            ("1h -30m", Some(1_800_000_000)),
            ("-2s", Some(-2_000_000)),
            (" 1h ", Some(3_600_000_000)),
            ("m5", Some(300_000_000)),
            ("5m", Some(300_000_000)),
            ("1s0", Some(10_000_000)),
            ("90000us", Some(90_000)),
            ("2.5m", None),
            ("1h30m", None),
            ("1H", None),
            ("+5s", None),
            ("5 s", None),
            ("1-2s", None),
            ("1h,2m", None),
            ("abc", None),
            ("", None),
            ("   ", None),
            ("10", None),
        ];
        for (literal, want) in cases {
            assert_eq!(parse_duration_literal(literal), want, "{literal:?}");
        }
    }

    #[test]
    fn duration_text_form() {
        assert_eq!(text(90_000_000_000), "1d 1h");
        assert_eq!(text(23 * 3_600_000_000 + 5), "23h 5us");
        assert_eq!(text(100_000), "100ms");
        assert_eq!(text(0), "0us");
        assert_eq!(text(-90_000_000), "-1m -30s");
    }
}
