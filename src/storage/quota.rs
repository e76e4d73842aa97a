//! Bucket quotas: a HARD quota refuses writes that would pass it; a FIFO quota makes room
//! by dropping the oldest sealed blocks of the bucket (whole files, through the same bulk
//! removal every other delete uses).

use crate::error::{Error, Result};
use crate::storage::bucket::Bucket;
use crate::storage::settings::QuotaType;

impl Bucket {
    /// Checks the bucket's quota before a write of `incoming` bytes: a HARD quota refuses
    /// it (400 `Quota of 'b' exceeded`); a FIFO quota drops the oldest sealed blocks until
    /// the write fits or none is left to drop.
    pub fn make_room(&self, incoming: u64) -> Result<()> {
        let settings = self.settings();
        match settings.quota_type {
            QuotaType::None => Ok(()),
            QuotaType::Hard => {
                if self.info()?.size.saturating_add(incoming) > settings.quota_size {
                    return Err(Error::bad_request(format!(
                        "Quota of '{}' exceeded",
                        self.name()
                    )));
                }
                Ok(())
            }
            QuotaType::Fifo => {
                while self.info()?.size.saturating_add(incoming) > settings.quota_size {
                    if !self.drop_oldest_block()? {
                        log::warn!(
                            "bucket '{}': FIFO quota of {} bytes exceeded and no sealed block is left to drop",
                            self.name(),
                            settings.quota_size
                        );
                        break;
                    }
                }
                Ok(())
            }
        }
    }

    /// Removes the sealed block holding the bucket's oldest record; false when there is
    /// no sealed block (the blocks being written are never dropped).
    fn drop_oldest_block(&self) -> Result<bool> {
        let mut oldest: Option<(u64, String, u64)> = None;
        for entry in self.entries() {
            let st = entry.lock()?;
            if let Some(first) = st.index.blocks.first()
                && oldest
                    .as_ref()
                    .is_none_or(|(ts, _, _)| first.first_ts < *ts)
            {
                oldest = Some((first.first_ts, entry.name().to_string(), first.last_ts));
            }
        }
        let Some((first_ts, entry, last_ts)) = oldest else {
            return Ok(false);
        };
        let stats = self.remove_records(
            std::slice::from_ref(&entry),
            first_ts,
            last_ts.saturating_add(1),
            None,
        )?;
        log::info!(
            "bucket '{}': FIFO quota dropped {} record(s) of '{entry}' up to {last_ts}",
            self.name(),
            stats.records
        );
        Ok(stats.records > 0)
    }
}
