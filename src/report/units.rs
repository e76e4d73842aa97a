//! How sizes, rates and instants read for people, one style in every command: binary
//! units with one decimal (`5.2 MiB`), RFC 3339 instants to the second.

use std::time::{Duration, UNIX_EPOCH};

use crate::timefmt::rfc3339;

/// A byte count: `512 B`, `1.5 KiB`, `64.0 MiB`, `2.1 GiB` (powers of 1024).
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// A rate in bytes per second, as [`human_bytes`] with `/s`.
pub fn human_rate(bytes: u64, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64();
    if secs <= 0.0 {
        return "-".to_string();
    }
    format!("{}/s", human_bytes((bytes as f64 / secs) as u64))
}

/// A timestamp in µs as RFC 3339 to the second (`-` for 0, an empty entry's).
pub fn human_time(micros: u64) -> String {
    if micros == 0 {
        return "-".to_string();
    }
    let text = rfc3339(UNIX_EPOCH + Duration::from_micros(micros));
    // Whole seconds read better; the JSON form keeps the µs.
    match text.split_once('.') {
        Some((seconds, _)) => format!("{seconds}Z"),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_rates_and_times_read_in_one_style() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1_536), "1.5 KiB");
        assert_eq!(human_bytes(5_452_595), "5.2 MiB");
        assert_eq!(human_bytes(64 << 20), "64.0 MiB");
        assert_eq!(human_bytes(u64::MAX), "16.0 EiB");
        assert_eq!(human_rate(3 << 20, Duration::from_secs(2)), "1.5 MiB/s");
        assert_eq!(human_rate(1, Duration::ZERO), "-");
        assert_eq!(human_time(0), "-");
        assert_eq!(human_time(1_356_998_400_000_000), "2013-01-01T00:00:00Z");
    }
}
