//! Attachment writes (see `storage/attachments.rs`): an upsert by the `key` label.

use super::Bucket;
use crate::error::Result;
use crate::storage::attachments::{KEY_LABEL, is_tombstone, key_of_write};
use crate::storage::record::RecordMeta;
use crate::storage::sync::Pending;

impl Bucket {
    /// Writes an attachment: the record is stored and made durable first, then the
    /// older live records of its key are removed — so a crash between leaves both
    /// values (the newer one wins on reading), never neither. Tombstoned records of
    /// the key stay, as in ReductStore. The returned `Pending` is already complete.
    pub(super) fn write_attachment(
        &self,
        entry: &str,
        meta: RecordMeta,
        payload: &[u8],
    ) -> Result<Pending> {
        let key = key_of_write(entry, &meta.labels)?.to_string();
        let _one = self
            .attachment_writes
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let ts = meta.timestamp;
        self.write_record(entry, meta, payload)?.wait()?;
        let older = |m: &RecordMeta| {
            Ok(m.timestamp != ts
                && m.labels.get(KEY_LABEL).is_some_and(|k| *k == key)
                && !is_tombstone(&m.labels))
        };
        self.entry(entry)?
            .remove_range(0, u64::MAX, Some(&older), false)?;
        Ok(Pending::none())
    }
}
