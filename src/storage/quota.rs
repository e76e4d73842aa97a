//! Bucket quotas: a HARD quota refuses writes that would pass it; a FIFO quota makes room
//! by dropping the oldest sealed blocks of the bucket (whole files, through the same bulk
//! removal every other delete uses), never those of attachment entries.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::storage::bucket::Bucket;
use crate::storage::entry::Entry;
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

    /// Removes the sealed block with the oldest first record in the bucket (blocks may
    /// overlap, so exactly that block's file goes, not a time range); false when there is
    /// no sealed block (the logs being written are never dropped).
    fn drop_oldest_block(&self) -> Result<bool> {
        let mut oldest: Option<(u64, Arc<Entry>, u64)> = None;
        // Attachments are never evicted: they describe the data that remains.
        let evictable = self
            .entries()
            .into_iter()
            .filter(|e| !crate::storage::attachments::is_attachment_entry(e.name()));
        for entry in evictable {
            let keep = self.keep_from(entry.name());
            let first = entry
                .lock()?
                .index
                .blocks
                .first()
                // A block holding a record pending replication is not evicted.
                .filter(|b| keep.is_none_or(|keep| b.last_ts < keep))
                .map(|b| (b.first_ts, b.seq));
            if let Some((first_ts, seq)) = first
                && oldest.as_ref().is_none_or(|(ts, _, _)| first_ts < *ts)
            {
                oldest = Some((first_ts, entry, seq));
            }
        }
        let Some((first_ts, entry, seq)) = oldest else {
            return Ok(false);
        };
        let records = entry.drop_block(seq)?;
        log::info!(
            "bucket '{}': FIFO quota dropped {records} record(s) of '{}' from {first_ts}",
            self.name(),
            entry.name()
        );
        // A block removed meanwhile by someone else still made room: look again.
        Ok(true)
    }
}
