//! UTC times as the API and the fixtures write them: parsing dates in the fixtures,
//! writing RFC 3339 times (`last_run`, token times) and reading them (token
//! `expires_at`). The calendar is `jiff`'s.

use std::time::{SystemTime, UNIX_EPOCH};

use jiff::Timestamp;
use jiff::civil::Date;
use jiff::tz::TimeZone;

/// Now, in µs since the epoch (0 for a clock before it).
pub fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// µs since the epoch of a UTC date and time; `None` for an impossible date or time.
pub fn utc_micros(y: i64, mo: i64, d: i64, h: i64, mi: i64, s: i64) -> Option<i64> {
    let small = |v: i64| i8::try_from(v).ok();
    let date = Date::new(i16::try_from(y).ok()?, small(mo)?, small(d)?).ok()?;
    let time = date.at(small(h)?, small(mi)?, small(s)?, 0);
    Some(TimeZone::UTC.to_timestamp(time).ok()?.as_microsecond())
}

/// RFC 3339 UTC with microseconds, e.g. `2025-03-01T12:00:00.123456Z` (the epoch for a
/// time the calendar cannot hold).
pub fn rfc3339(time: SystemTime) -> String {
    let ts = Timestamp::try_from(time).unwrap_or(Timestamp::UNIX_EPOCH);
    ts.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

/// Parses an RFC 3339 date-time with an offset (`2026-12-01T10:00:00Z`,
/// `2026-12-01T12:00:00.5+02:00`) into µs since the epoch. `None` for anything else: a
/// time without an offset, an impossible date, a time before 1970.
pub fn parse_rfc3339(text: &str) -> Option<u64> {
    // jiff reads more than RFC 3339 (zone annotations, `+02` offsets); hold to its shape.
    let b = text.as_bytes();
    let at = |i: usize, c: &[u8]| b.get(i).is_some_and(|x| c.contains(x));
    let shaped = at(4, b"-") && at(7, b"-") && at(10, b"Tt ") && at(13, b":") && at(16, b":");
    let tail_ok = text.ends_with(['Z', 'z'])
        || (text.len() >= 6 && at(text.len() - 3, b":") && at(text.len() - 6, b"+-"));
    if !shaped || !tail_ok || !text.is_ascii() {
        return None;
    }
    let ts: Timestamp = text.parse().ok()?;
    u64::try_from(ts.as_microsecond()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn dates_and_format() {
        assert_eq!(utc_micros(1970, 1, 1, 0, 0, 0), Some(0));
        assert_eq!(
            utc_micros(2025, 3, 1, 12, 0, 0),
            Some(1_740_830_400_000_000)
        );
        assert_eq!(utc_micros(2025, 2, 29, 0, 0, 0), None);
        assert_eq!(
            utc_micros(2024, 2, 29, 0, 0, 0),
            Some(1_709_164_800_000_000)
        );
        let t = UNIX_EPOCH + Duration::from_micros(1_740_830_400_123_456);
        assert_eq!(rfc3339(t), "2025-03-01T12:00:00.123456Z");
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000000Z");
    }

    #[test]
    fn rfc3339_parses_with_offsets_only() {
        assert_eq!(
            parse_rfc3339("2025-03-01T12:00:00.123456Z"),
            Some(1_740_830_400_123_456)
        );
        assert_eq!(
            parse_rfc3339("2025-03-01T14:00:00.123456789+02:00"),
            Some(1_740_830_400_123_456)
        );
        assert_eq!(
            parse_rfc3339("2025-03-01T11:30:00-00:30"),
            Some(1_740_830_400_000_000)
        );
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0));
        for bad in [
            "2025-03-01T12:00:00",
            "2025-02-29T12:00:00Z",
            "2025-03-01T24:00:00Z",
            "2025-03-01T12:00:00.Z",
            "2025-03-01T12:00:00+2:00",
            "1969-12-31T23:59:59Z",
            "2025-3-01T12:00:00Z",
            "",
            "2025-03-01T12:00:00Zjunk",
            "\u{e9}025-03-01T12:00:00Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }
}
