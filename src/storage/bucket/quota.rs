//! Bucket quotas: a HARD quota refuses writes that would pass it; a FIFO quota makes room
//! by dropping the oldest sealed blocks of the bucket (whole files, through the same bulk
//! removal every other delete uses), never those of attachment entries.

use std::sync::Arc;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorKind, Result};
use crate::storage::bucket::Bucket;
use crate::storage::entry::Entry;
use crate::storage::format::log::record_disk_size;
use crate::storage::record::RecordMeta;
use crate::storage::settings::QuotaType;

impl Bucket {
    /// Bytes the bucket takes on the local disk: what quotas count (a tiered block counts
    /// its stub, not its object).
    pub fn local_size(&self) -> Result<u64> {
        let mut size = 0;
        for entry in self.entries() {
            size += entry.local_size()?;
        }
        Ok(size)
    }

    /// Checks the bucket's quota before a write of `records` (their `size` the
    /// payloads'): a HARD quota refuses it when the payloads would pass it (400 `Quota of
    /// 'b' exceeded`), as ReductStore counts; a FIFO quota drops the oldest local sealed
    /// blocks until what the write adds on disk — payloads, their log operations, a new
    /// log's header — fits, or none is left to drop, so the bucket stays within it. Both
    /// count local bytes only.
    pub fn make_room<'a>(&self, records: impl IntoIterator<Item = &'a RecordMeta>) -> Result<()> {
        let settings = self.settings();
        // Payloads, and what lands on disk only where a FIFO quota counts it: a bucket
        // without a quota pays nothing per write.
        let fifo = settings.quota_type == QuotaType::Fifo;
        let (incoming, on_disk) = records.into_iter().fold((0u64, 0u64), |(p, d), meta| {
            let disk = if fifo { record_disk_size(meta) } else { 0 };
            (p.saturating_add(meta.size), d.saturating_add(disk))
        });
        match settings.quota_type {
            QuotaType::None => Ok(()),
            QuotaType::Hard => {
                if self.local_size()?.saturating_add(incoming) > settings.quota_size {
                    return Err(Error::bad_request(format!(
                        "Quota of '{}' exceeded",
                        self.name()
                    )));
                }
                Ok(())
            }
            QuotaType::Fifo => {
                if incoming > settings.quota_size {
                    return Err(Error::new(
                        ErrorKind::InsufficientStorage,
                        format!(
                            "A write of {incoming} bytes is larger than the FIFO quota of bucket '{}' ({} bytes)",
                            self.name(),
                            settings.quota_size
                        ),
                    ));
                }
                let mut sealed = false;
                while self.local_size()?.saturating_add(on_disk) > settings.quota_size {
                    if self.drop_oldest_block()? {
                        continue;
                    }
                    // What is over the quota is still in the logs being written (records
                    // large beside the block limits): seal them early, once, so their
                    // oldest records can go as blocks.
                    if !sealed {
                        sealed = true;
                        if self.seal_evictable_logs()? > 0 {
                            continue;
                        }
                    }
                    warn_quota_stuck(self.name(), settings.quota_size);
                    break;
                }
                Ok(())
            }
        }
    }

    /// Seals the logs of the entries a FIFO quota may evict; returns how many.
    fn seal_evictable_logs(&self) -> Result<usize> {
        let mut sealed = 0;
        for entry in self
            .entries()
            .into_iter()
            .filter(|e| !crate::storage::attachments::is_attachment_entry(e.name()))
        {
            sealed += entry.seal_stale_logs(0, u64::MAX)?;
        }
        Ok(sealed)
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
                .iter()
                // A tiered block frees no local space: the quota guards the local disk.
                .find(|b| b.remote.is_none())
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

/// How often a bucket whose FIFO quota cannot be met says so at most.
const STUCK_WARNING_EVERY: Duration = Duration::from_secs(60);

/// Warns that a FIFO quota cannot be met (everything left is pending replication or an
/// attachment), at most once a minute per bucket, counting the writes in between.
fn warn_quota_stuck(bucket: &str, quota: u64) {
    static LAST: Mutex<Option<HashMap<String, (Instant, u64)>>> = Mutex::new(None);
    let mut last = LAST.lock().unwrap_or_else(|p| p.into_inner());
    let seen = last.get_or_insert_with(HashMap::new);
    let now = Instant::now();
    let (at, quiet) = seen.entry(bucket.to_string()).or_insert((now, 0));
    if *quiet > 0 && now.duration_since(*at) < STUCK_WARNING_EVERY {
        *quiet += 1;
        return;
    }
    let more = quiet.saturating_sub(1);
    log::warn!(
        "bucket '{bucket}': FIFO quota of {quota} bytes exceeded and nothing is left that it may drop (records pending replication, attachments){}",
        if more > 0 {
            format!("; {more} more writes since the last warning")
        } else {
            String::new()
        }
    );
    *at = now;
    *quiet = 1;
}
