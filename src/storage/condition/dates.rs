//! Date operators: `$year $month $day $hour $minute $second $weekday` of a µs timestamp in
//! UTC or an IANA time zone (named exactly, case-sensitively; daylight saving time as the
//! zone's rules say), with the zone database built into the binary (`jiff`).

use jiff::Timestamp;
use jiff::tz::TimeZone;

use super::Fault;
use super::value::Value;

/// What a date operator extracts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DatePart {
    Year,
    Month,
    Day,
    Hour,
    Minute,
    Second,
    Weekday,
}

/// A time zone named in a condition, resolved once; `None` when no zone has that name.
#[derive(Debug, Clone)]
pub struct Zone(Option<TimeZone>);

impl Zone {
    /// Looks a zone up by its exact IANA name (`UTC`, `Europe/Berlin`, `EST`; not `utc`).
    pub fn resolve(name: &str) -> Zone {
        Zone(
            TimeZone::get(name)
                .ok()
                .filter(|tz| tz.iana_name().is_some_and(|n| n == name)),
        )
    }
}

/// The date part of `micros` in `zone` (UTC when `None`).
pub fn date_part(
    part: DatePart,
    name: &str,
    micros: &Value,
    zone: Option<(&Zone, &str)>,
) -> Result<Value<'static>, Fault<'static>> {
    let us = micros.to_int()?;
    let ts = Timestamp::from_microsecond(us).map_err(|_| {
        Fault::unprocessable(format!(
            "{name} requires a valid timestamp in microseconds, got {us}"
        ))
    })?;
    let dt = match zone {
        None => TimeZone::UTC.to_datetime(ts),
        Some((Zone(Some(tz)), _)) => tz.to_datetime(ts),
        Some((Zone(None), zone_name)) => {
            return Err(Fault::unprocessable(format!(
                "Invalid timezone: '{zone_name}'"
            )));
        }
    };
    Ok(Value::Int(match part {
        DatePart::Year => i64::from(dt.year()),
        DatePart::Month => i64::from(dt.month()),
        DatePart::Day => i64::from(dt.day()),
        DatePart::Hour => i64::from(dt.hour()),
        DatePart::Minute => i64::from(dt.minute()),
        DatePart::Second => i64::from(dt.second()),
        DatePart::Weekday => i64::from(dt.weekday().to_monday_zero_offset()),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zones_are_named_exactly() {
        assert!(Zone::resolve("UTC").0.is_some());
        assert!(Zone::resolve("Europe/Berlin").0.is_some());
        assert!(Zone::resolve("America/New_York").0.is_some());
        assert!(Zone::resolve("Etc/GMT+5").0.is_some());
        assert!(Zone::resolve("EST").0.is_some());
        assert!(Zone::resolve("utc").0.is_none());
        assert!(Zone::resolve("Mars/Olympus").0.is_none());
    }

    #[test]
    fn parts_in_a_zone() {
        let ts = Value::Int(1_704_067_200_000_000); // 2024-01-01 00:00 UTC, a Monday
        let berlin = Zone::resolve("Europe/Berlin");
        let ny = Zone::resolve("America/New_York");
        let part = |p, zone: Option<(&Zone, &str)>| match date_part(p, "$x", &ts, zone) {
            Ok(Value::Int(i)) => i,
            other => panic!("{other:?}"),
        };
        assert_eq!(part(DatePart::Hour, None), 0);
        assert_eq!(part(DatePart::Weekday, None), 0);
        assert_eq!(part(DatePart::Hour, Some((&berlin, "Europe/Berlin"))), 1);
        assert_eq!(part(DatePart::Year, Some((&ny, "America/New_York"))), 2023);
        assert_eq!(part(DatePart::Day, Some((&ny, "America/New_York"))), 31);
        let bad = Zone::resolve("utc");
        assert!(date_part(DatePart::Hour, "$hour", &ts, Some((&bad, "utc"))).is_err());
        assert!(date_part(DatePart::Hour, "$hour", &Value::Int(i64::MAX), None).is_err());
    }
}
