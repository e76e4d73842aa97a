//! Values of the condition language: the five types (Bool, Int, Float, String, Duration),
//! how label text is typed, truthiness, the conversions to integer, float and text, and the
//! text form of each type. Text borrows the label or literal it came from, or sits inline
//! (numbers and durations turned into text), so evaluation allocates nothing.

use std::fmt::{self, Write};

use super::Fault;
use crate::duration::write_duration;

/// Longest text kept inline; longer text (a huge float written out, a concatenation) is
/// owned.
const INLINE: usize = 23;

/// Inline text bytes, aligned so values move as whole words (a byte-aligned buffer made
/// every move of a value byte-wise, and evaluation several times slower).
#[derive(Clone, Copy)]
#[repr(C, align(8))]
pub struct InlineText {
    bytes: [u8; INLINE],
    len: u8,
}

/// Text of a String value.
#[derive(Clone)]
pub enum Text<'a> {
    /// Borrowed from a label or from the condition.
    Borrowed(&'a str),
    /// A short text made during evaluation.
    Inline(InlineText),
    /// A longer text made during evaluation.
    Owned(String),
}

impl Text<'_> {
    /// The text.
    pub fn as_str(&self) -> &str {
        match self {
            Text::Borrowed(s) => s,
            Text::Owned(s) => s,
            Text::Inline(inline) => {
                // Only whole `str` writes fill the buffer (see `Inline`), so the prefix is
                // valid UTF-8.
                std::str::from_utf8(&inline.bytes[..usize::from(inline.len)]).unwrap_or_default()
            }
        }
    }
}

impl fmt::Debug for Text<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

/// A `fmt::Write` into an inline buffer that fails instead of growing.
struct Inline {
    len: usize,
    bytes: [u8; INLINE],
}

impl Write for Inline {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self.len + s.len();
        if end > INLINE {
            return Err(fmt::Error);
        }
        self.bytes[self.len..end].copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// Text made by `write`: inline when short, else owned.
pub fn text_of(write: impl Fn(&mut dyn Write) -> fmt::Result) -> Text<'static> {
    let mut inline = Inline {
        len: 0,
        bytes: [0; INLINE],
    };
    if write(&mut inline).is_ok() {
        return Text::Inline(InlineText {
            bytes: inline.bytes,
            len: inline.len as u8,
        });
    }
    let mut owned = String::new();
    let _ = write(&mut owned);
    Text::Owned(owned)
}

/// A value an operand evaluates to.
#[derive(Clone, Debug)]
pub enum Value<'a> {
    /// `true` / `false`.
    Bool(bool),
    /// A signed 64-bit integer (timestamps are µs).
    Int(i64),
    /// A 64-bit float (NaN and infinities included).
    Float(f64),
    /// Text.
    Str(Text<'a>),
    /// Microseconds; an integer everywhere except in its text form.
    Duration(i64),
}

/// A number, for arithmetic and comparison.
#[derive(Clone, Copy, Debug)]
pub enum Num {
    /// Bool, Int or Duration.
    Int(i64),
    /// Float.
    Float(f64),
}

impl Num {
    /// As a float.
    pub fn as_f64(self) -> f64 {
        match self {
            Num::Int(i) => i as f64,
            Num::Float(f) => f,
        }
    }
}

impl<'a> Value<'a> {
    /// A borrowed string value.
    pub fn str(text: &'a str) -> Value<'a> {
        Value::Str(Text::Borrowed(text))
    }

    /// Types a label's text: `true`/`false`, else a 64-bit integer, else a float (`1e3`,
    /// `.5`, `nan`, `inf`, integers too large for i64), else text. Never a duration.
    #[inline]
    pub fn of_label(text: &'a str) -> Value<'a> {
        match text {
            "true" => return Value::Bool(true),
            "false" => return Value::Bool(false),
            _ => {}
        }
        // Text starting with a letter is a number only as `inf`, `infinity` or `nan`.
        let first = text.as_bytes().first().copied().unwrap_or(b' ');
        if first.is_ascii_alphabetic() && !matches!(first, b'i' | b'I' | b'n' | b'N') {
            return Value::str(text);
        }
        if let Ok(i) = text.parse::<i64>() {
            return Value::Int(i);
        }
        match text.parse::<f64>() {
            Ok(f) => Value::Float(f),
            Err(_) => Value::str(text),
        }
    }

    /// The type's name, as error messages write it.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Bool(_) => "boolean",
            Value::Int(_) => "integer",
            Value::Float(_) => "float",
            Value::Str(_) => "string",
            Value::Duration(_) => "duration",
        }
    }

    /// The number this is, `None` for text.
    pub fn num(&self) -> Option<Num> {
        match self {
            Value::Bool(b) => Some(Num::Int(i64::from(*b))),
            Value::Int(i) | Value::Duration(i) => Some(Num::Int(*i)),
            Value::Float(f) => Some(Num::Float(*f)),
            Value::Str(_) => None,
        }
    }

    /// Truthiness: true, non-zero, not 0.0 (NaN is truthy), non-empty text.
    pub fn truthy(&self) -> bool {
        match self {
            Value::Bool(b) => *b,
            Value::Int(i) | Value::Duration(i) => *i != 0,
            Value::Float(f) => *f != 0.0,
            Value::Str(t) => !t.as_str().is_empty(),
        }
    }

    /// Converted to an integer: floats truncated and saturated (NaN is 0), text parsed.
    pub fn to_int(&self) -> Result<i64, Fault<'static>> {
        match self {
            Value::Bool(b) => Ok(i64::from(*b)),
            Value::Int(i) | Value::Duration(i) => Ok(*i),
            Value::Float(f) => Ok(*f as i64),
            Value::Str(t) => t.as_str().parse::<i64>().map_err(|_| {
                Fault::unprocessable(format!(
                    "Value '{}' could not be parsed as integer",
                    t.as_str()
                ))
            }),
        }
    }

    /// Converted to a float; text parsed as label text is.
    pub fn to_float(&self) -> Result<f64, Fault<'static>> {
        match self {
            Value::Str(t) => t.as_str().parse::<f64>().map_err(|_| {
                Fault::unprocessable(format!(
                    "Value '{}' could not be parsed as float",
                    t.as_str()
                ))
            }),
            other => Ok(other.num().map_or(0.0, Num::as_f64)),
        }
    }

    /// The text form: `true`, `42`, `1.5` (shortest, never an exponent), the text itself,
    /// or a duration's `1h 30m`.
    pub fn to_text(&self) -> Text<'a> {
        match self {
            Value::Str(t) => t.clone(),
            Value::Bool(true) => Text::Borrowed("true"),
            Value::Bool(false) => Text::Borrowed("false"),
            Value::Int(i) => {
                let i = *i;
                text_of(move |w| write!(w, "{i}"))
            }
            Value::Float(f) => {
                let f = *f;
                text_of(move |w| write!(w, "{f}"))
            }
            Value::Duration(us) => {
                let us = *us;
                text_of(move |w| write_duration(w, us))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(v: Value) -> String {
        v.to_text().as_str().to_string()
    }

    #[test]
    fn labels_are_typed_bool_int_float_text() {
        assert!(matches!(Value::of_label("true"), Value::Bool(true)));
        assert!(matches!(Value::of_label("True"), Value::Str(_)));
        assert!(matches!(Value::of_label("+5"), Value::Int(5)));
        assert!(matches!(Value::of_label("007"), Value::Int(7)));
        assert!(matches!(Value::of_label("-0"), Value::Int(0)));
        assert!(matches!(Value::of_label("1e3"), Value::Float(f) if f == 1000.0));
        assert!(matches!(Value::of_label(".5"), Value::Float(f) if f == 0.5));
        assert!(matches!(Value::of_label("5."), Value::Float(f) if f == 5.0));
        assert!(matches!(Value::of_label("nan"), Value::Float(f) if f.is_nan()));
        assert!(matches!(Value::of_label("-inf"), Value::Float(f) if f == f64::NEG_INFINITY));
        assert!(matches!(Value::of_label("Infinity"), Value::Float(f) if f.is_infinite()));
        assert!(matches!(
            Value::of_label("99999999999999999999"),
            Value::Float(_)
        ));
        for s in ["0x1F", "1h", "a b", "$dollar", "gamma,delta", ""] {
            assert!(matches!(Value::of_label(s), Value::Str(_)), "{s}");
        }
    }

    #[test]
    fn text_forms() {
        assert_eq!(text(Value::Float(1.5)), "1.5");
        assert_eq!(text(Value::Float(-10.0)), "-10");
        assert_eq!(text(Value::Float(1e20)), "100000000000000000000");
        assert_eq!(text(Value::Float(1e-7)), "0.0000001");
        assert_eq!(text(Value::Float(f64::NAN)), "NaN");
        assert_eq!(text(Value::Float(f64::INFINITY)), "inf");
        assert_eq!(text(Value::Float(-0.0)), "-0");
        assert_eq!(text(Value::Float(1e300)).len(), 301, "long text is owned");
        assert_eq!(text(Value::Duration(90_000_000)), "1m 30s");
        assert_eq!(text(Value::Int(-42)), "-42");
    }

    #[test]
    fn truthiness_and_conversions() {
        assert!(Value::Float(f64::NAN).truthy());
        assert!(!Value::Float(-0.0).truthy());
        assert!(!Value::str("").truthy());
        assert_eq!(Value::Float(f64::INFINITY).to_int().ok(), Some(i64::MAX));
        assert_eq!(Value::Float(f64::NAN).to_int().ok(), Some(0));
        assert_eq!(Value::Float(-2.9).to_int().ok(), Some(-2));
        assert!(Value::str("abc").to_int().is_err());
        assert_eq!(Value::str("2.5").to_float().ok(), Some(2.5));
    }
}
