//! Bucket settings: block limits and quota fields, with ReductStore's JSON field names.

use serde::{Deserialize, Serialize};

/// When a log is sealed and a new one starts (from the bucket settings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockLimits {
    /// Seal before a record would take the block's payload past this many bytes.
    pub max_block_size: u64,
    /// Seal once the block holds this many records.
    pub max_block_records: u64,
}

/// File holding a bucket's settings (JSON), in the bucket's folder.
pub const SETTINGS_FILE: &str = ".settings";

/// Default `max_block_size`: 64 MB.
pub const DEFAULT_MAX_BLOCK_SIZE: u64 = 64_000_000;
/// Default `max_block_records`.
pub const DEFAULT_MAX_BLOCK_RECORDS: u64 = 1024;

/// Quota policy of a bucket (stored; enforcement arrives with the server).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "UPPERCASE")]
pub enum QuotaType {
    /// No quota.
    #[default]
    None,
    /// Delete the oldest blocks when the quota is exceeded.
    Fifo,
    /// Reject writes past the quota.
    Hard,
}

/// The full settings of a bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketSettings {
    /// Quota policy.
    pub quota_type: QuotaType,
    /// Quota size in bytes.
    pub quota_size: u64,
    /// A new block starts when a record would take the open block past this many bytes.
    pub max_block_size: u64,
    /// A new block starts when the open block holds this many records.
    pub max_block_records: u64,
}

impl Default for BucketSettings {
    fn default() -> Self {
        BucketSettings {
            quota_type: QuotaType::None,
            quota_size: 0,
            max_block_size: DEFAULT_MAX_BLOCK_SIZE,
            max_block_records: DEFAULT_MAX_BLOCK_RECORDS,
        }
    }
}

/// A partial settings change: `None` fields keep their current value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketSettingsUpdate {
    /// New quota policy.
    pub quota_type: Option<QuotaType>,
    /// New quota size.
    pub quota_size: Option<u64>,
    /// New block size limit.
    pub max_block_size: Option<u64>,
    /// New block record limit.
    pub max_block_records: Option<u64>,
}

impl BucketSettings {
    /// These settings with the fields of `update` that are set.
    pub fn merged(self, update: &BucketSettingsUpdate) -> BucketSettings {
        BucketSettings {
            quota_type: update.quota_type.unwrap_or(self.quota_type),
            quota_size: update.quota_size.unwrap_or(self.quota_size),
            max_block_size: update.max_block_size.unwrap_or(self.max_block_size),
            max_block_records: update.max_block_records.unwrap_or(self.max_block_records),
        }
    }

    /// The block limits the write path applies; zero limits are treated as one so a block
    /// always holds at least one record.
    pub fn block_limits(&self) -> BlockLimits {
        BlockLimits {
            max_block_size: self.max_block_size.max(1),
            max_block_records: self.max_block_records.max(1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_names_and_merge() {
        let json = serde_json::to_value(BucketSettings::default()).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"quota_type":"NONE","quota_size":0,"max_block_size":64000000,"max_block_records":1024})
        );
        let update: BucketSettingsUpdate =
            serde_json::from_str(r#"{"max_block_records": 10, "quota_type": null}"#).unwrap();
        let merged = BucketSettings::default().merged(&update);
        assert_eq!(merged.max_block_records, 10);
        assert_eq!(merged.max_block_size, DEFAULT_MAX_BLOCK_SIZE);
        assert_eq!(merged.quota_type, QuotaType::None);
    }
}
