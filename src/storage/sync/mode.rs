//! The sync mode: what an acknowledged change promises about stable storage.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::duration::{format_duration, parse_duration};
use crate::error::{Error, Result};

/// When appended changes (records, relabels, removals) reach stable storage, and so what a
/// power cut can cost. Commits of sealed blocks, indexes and settings are fsynced in every
/// mode; the mode governs the append-only logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncMode {
    /// A change is answered only once its bytes are synced (group commit: appends made
    /// while a sync runs share the next `fdatasync` of their file). A power cut loses no
    /// acknowledged change.
    #[default]
    Always,
    /// Changes are answered from the page cache; a syncer thread syncs every file written
    /// since its last round at this period, so a power cut loses at most about one period.
    Interval(Duration),
    /// Changes are answered from the page cache and synced only when their file is sealed
    /// or committed: a power cut may lose a whole open block. For throw-away data.
    Never,
}

impl FromStr for SyncMode {
    type Err = Error;

    /// `always`, `never` or `interval:<duration>` (`interval:10ms`), any case.
    fn from_str(text: &str) -> Result<SyncMode> {
        let lower = text.trim().to_ascii_lowercase();
        match lower.as_str() {
            "always" => return Ok(SyncMode::Always),
            "never" => return Ok(SyncMode::Never),
            _ => {}
        }
        let Some(period) = lower.strip_prefix("interval:") else {
            return Err(Error::unprocessable(format!(
                "Invalid sync mode '{text}': expected 'always', 'never' or 'interval:<duration>' (e.g. interval:10ms)"
            )));
        };
        let micros = parse_duration(period).map_err(|e| {
            Error::unprocessable(format!("Invalid sync mode '{text}': {}", e.message()))
        })?;
        if micros <= 0 {
            return Err(Error::unprocessable(format!(
                "Invalid sync mode '{text}': the period must be positive"
            )));
        }
        Ok(SyncMode::Interval(Duration::from_micros(micros as u64)))
    }
}

impl fmt::Display for SyncMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SyncMode::Always => f.write_str("always"),
            SyncMode::Never => f.write_str("never"),
            SyncMode::Interval(d) => {
                let micros = i64::try_from(d.as_micros()).unwrap_or(i64::MAX);
                write!(f, "interval:{}", format_duration(micros))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_and_print_back() {
        assert_eq!("always".parse::<SyncMode>().unwrap(), SyncMode::Always);
        assert_eq!("NEVER".parse::<SyncMode>().unwrap(), SyncMode::Never);
        let ten = "interval:10ms".parse::<SyncMode>().unwrap();
        assert_eq!(ten, SyncMode::Interval(Duration::from_millis(10)));
        assert_eq!(ten.to_string().parse::<SyncMode>().unwrap(), ten);
        assert_eq!(SyncMode::default(), SyncMode::Always);
    }

    #[test]
    fn bad_modes_name_the_value() {
        for bad in [
            "sometimes",
            "interval:",
            "interval:0s",
            "interval:-5ms",
            "interval:10",
        ] {
            let e = bad.parse::<SyncMode>().unwrap_err();
            assert!(e.message().contains(bad), "{bad}: {}", e.message());
        }
    }
}
