//! Durations in the ReductStore syntax (`30d`, `1h -30m`, `100ms`) ↔ microseconds.
//!
//! A duration is one or more whitespace-separated terms, each an optionally signed integer
//! followed by a unit (`us`, `ms`, `s`, `m`, `h`, `d`); terms are added. Fractions
//! (`1.5h`), terms run together (`1h30m`) and ISO-8601 (`PT1H`) are rejected, as the
//! ReductStore server rejects them, so that a policy means exactly what it says.

use std::fmt::{self, Write};

use crate::error::{Error, Result};

/// The units, largest first, with their length in µs.
pub(crate) const UNITS: [(&str, i64); 6] = [
    ("d", 86_400_000_000),
    ("h", 3_600_000_000),
    ("m", 60_000_000),
    ("s", 1_000_000),
    ("ms", 1_000),
    ("us", 1),
];

/// The length in µs of a unit (`us ms s m h d`).
pub(crate) fn unit_factor(unit: &str) -> Option<i64> {
    UNITS.iter().find(|(u, _)| *u == unit).map(|(_, f)| *f)
}

/// Parses a duration string into microseconds; the error names the bad value.
pub fn parse_duration(text: &str) -> Result<i64> {
    let bad = |why: &str| Error::unprocessable(format!("Invalid duration '{text}': {why}"));
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(bad("it is empty"));
    }
    if trimmed.starts_with(['P', 'p']) {
        return Err(bad(
            "ISO-8601 durations are not supported; use terms like '1h 30m'",
        ));
    }
    let bytes = trimmed.as_bytes();
    let mut pos = 0;
    let mut total: i64 = 0;
    while pos < bytes.len() {
        while pos < bytes.len() && bytes[pos].is_ascii_whitespace() {
            pos += 1;
        }
        if pos == bytes.len() {
            break;
        }
        let negative = match bytes[pos] {
            b'-' => {
                pos += 1;
                true
            }
            b'+' => {
                pos += 1;
                false
            }
            _ => false,
        };
        let digits_start = pos;
        while pos < bytes.len() && bytes[pos].is_ascii_digit() {
            pos += 1;
        }
        if digits_start == pos {
            return Err(bad("expected a number"));
        }
        if pos < bytes.len() && (bytes[pos] == b'.' || bytes[pos] == b',') {
            return Err(bad("fractions are not supported; use a smaller unit"));
        }
        let number: i64 = trimmed[digits_start..pos]
            .parse()
            .map_err(|_| bad("the number is too large"))?;
        let unit_start = pos;
        while pos < bytes.len() && bytes[pos].is_ascii_alphabetic() {
            pos += 1;
        }
        let unit = &trimmed[unit_start..pos];
        if pos < bytes.len() && !bytes[pos].is_ascii_whitespace() {
            return Err(bad("terms must be separated by spaces, e.g. '1h 30m'"));
        }
        if unit.is_empty() {
            return Err(bad("a unit is missing (us, ms, s, m, h or d)"));
        }
        let factor = unit_factor(unit)
            .ok_or_else(|| bad(&format!("unknown unit '{unit}' (use us, ms, s, m, h or d)")))?;
        let term = number
            .checked_mul(factor)
            .ok_or_else(|| bad("the value is too large"))?;
        let term = if negative { -term } else { term };
        total = total
            .checked_add(term)
            .ok_or_else(|| bad("the value is too large"))?;
    }
    Ok(total)
}

/// Formats microseconds as the shortest duration string that parses back to the same value,
/// e.g. `5400000000` → `1h 30m`.
pub fn format_duration(micros: i64) -> String {
    if micros == 0 {
        return "0s".to_string();
    }
    let sign = if micros < 0 { "-" } else { "" };
    let mut rest = micros.unsigned_abs();
    let mut parts = Vec::new();
    for (unit, factor) in UNITS {
        let factor = factor as u64;
        if rest >= factor {
            parts.push(format!("{sign}{}{unit}", rest / factor));
            rest %= factor;
        }
    }
    parts.join(" ")
}

/// Writes a duration as conditions show it (a `$cast` to string, a duration value's
/// text): days down to microseconds, largest first, zero parts left out (`0us` for
/// zero), each part of a negative value negative.
pub fn write_duration(w: &mut dyn Write, micros: i64) -> fmt::Result {
    if micros == 0 {
        return w.write_str("0us");
    }
    let mut rest = micros;
    let mut first = true;
    for (unit, scale) in UNITS {
        let part = rest / scale;
        rest %= scale;
        if part != 0 {
            if !first {
                w.write_char(' ')?;
            }
            write!(w, "{part}{unit}")?;
            first = false;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_single_and_combined_terms() {
        let cases = [
            ("30d", 30 * 86_400_000_000),
            ("1h", 3_600_000_000),
            ("100ms", 100_000),
            ("5us", 5),
            ("10s", 10_000_000),
            ("2m", 120_000_000),
            ("1h -30m", 1_800_000_000),
            ("1h 30m", 5_400_000_000),
            (" 1d 2h ", 93_600_000_000),
            ("-1h", -3_600_000_000),
            ("0s", 0),
        ];
        for (text, want) in cases {
            assert_eq!(parse_duration(text).unwrap(), want, "{text}");
        }
    }

    #[test]
    fn rejects_bad_input_with_the_value_in_the_message() {
        let cases = [
            ("1.5h", "fractions"),
            ("PT1H", "ISO-8601"),
            ("", "empty"),
            ("10", "unit is missing"),
            ("10x", "unknown unit 'x'"),
            ("h", "expected a number"),
            ("99999999999999999999d", "too large"),
            ("9999999999999d", "too large"),
            ("1h30m", "separated by spaces"),
            ("1h-30m", "separated by spaces"),
        ];
        for (text, why) in cases {
            let err = parse_duration(text).unwrap_err();
            assert!(err.message().contains(why), "{text}: {err}");
            assert!(err.message().contains(&format!("'{text}'")), "{err}");
            assert_eq!(err.kind(), crate::error::ErrorKind::Unprocessable);
        }
    }

    #[test]
    fn format_round_trips() {
        for micros in [1, 999, 1_000, 5_400_000_000, 86_400_000_001, -3_600_000_000] {
            let text = format_duration(micros);
            assert_eq!(parse_duration(&text).unwrap(), micros, "{text}");
        }
        assert_eq!(format_duration(5_400_000_000), "1h 30m");
        assert_eq!(format_duration(0), "0s");
    }
}
