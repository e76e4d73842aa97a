//! The headers of a v2 batch delete (`DELETE /io/{bucket}/remove`): only the names
//! matter — `x-reduct-<entry index>-<delta>` — and values are not read, so the empty
//! values reduct-rs sends and the `<len>,<type>` values reduct-py sends both work.

use crate::error::{Error, Result};
use crate::server::http::head::{RequestHead, parse_decimal};
use crate::server::protocol::batch::split_names;
use crate::storage::attachments::{is_attachment_entry, record_removal_refused};

/// One record a batch delete names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoveRecord {
    /// Index into the entry list.
    pub entry: usize,
    /// Delta to the start timestamp, as sent (for the error header).
    pub delta: u64,
    /// The record's timestamp.
    pub timestamp: u64,
}

/// A decoded batch delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoveBatch {
    /// The entries, as `x-reduct-entries` lists them.
    pub entries: Vec<String>,
    /// The records, in (entry, delta) order.
    pub records: Vec<RemoveRecord>,
}

/// Reads a batch delete's headers. A record header's last part must be digits (others
/// such as `x-reduct-0-x` are not record headers); its entry part must then be a number.
/// No entries and no record headers is a valid empty delete.
pub fn decode_remove_batch(head: &RequestHead) -> Result<RemoveBatch> {
    let entries = head
        .header("x-reduct-entries")
        .map(split_names)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| !e.is_empty())
        .collect::<Vec<_>>();
    let mut raw = Vec::new();
    for (name, _) in &head.headers {
        let Some(rest) = name.strip_prefix("x-reduct-") else {
            continue;
        };
        let Some((e, d)) = rest.rsplit_once('-') else {
            continue;
        };
        let Some(delta) = parse_decimal(d) else {
            continue;
        };
        let entry = parse_decimal(e)
            .and_then(|e| usize::try_from(e).ok())
            .ok_or_else(|| {
                Error::unprocessable(format!(
                    "Invalid header '{name}': entry index must be a number"
                ))
            })?;
        if entry >= entries.len() {
            return Err(Error::unprocessable(format!(
                "header '{name}' names entry index {entry}, but x-reduct-entries has {}",
                entries.len()
            )));
        }
        raw.push((entry, delta));
    }
    if let Some(system) = entries.iter().find(|e| is_attachment_entry(e)) {
        return Err(record_removal_refused(system));
    }
    if raw.is_empty() && entries.is_empty() {
        return Ok(RemoveBatch {
            entries,
            records: Vec::new(),
        });
    }
    let start_text = head
        .header("x-reduct-start-ts")
        .ok_or_else(|| Error::unprocessable("x-reduct-start-ts header is required"))?;
    let start = parse_decimal(start_text).ok_or_else(|| {
        Error::unprocessable(format!(
            "x-reduct-start-ts '{start_text}' must be an unix timestamp in microseconds"
        ))
    })?;
    raw.sort_unstable();
    raw.dedup();
    let mut records = Vec::with_capacity(raw.len());
    for (entry, delta) in raw {
        let timestamp = start.checked_add(delta).ok_or_else(|| {
            Error::unprocessable(format!(
                "timestamp {start} + {delta} does not fit in 64 bits"
            ))
        })?;
        records.push(RemoveRecord {
            entry,
            delta,
            timestamp,
        });
    }
    Ok(RemoveBatch { entries, records })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(headers: &[(&str, &str)]) -> RequestHead {
        RequestHead {
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..RequestHead::default()
        }
    }

    fn refusal(headers: &[(&str, &str)]) -> String {
        decode_remove_batch(&head(headers))
            .expect_err("refused")
            .message()
            .to_string()
    }

    #[test]
    fn values_are_ignored_and_names_checked() {
        let batch = decode_remove_batch(&head(&[
            ("x-reduct-entries", "a,b"),
            ("x-reduct-start-ts", "100"),
            ("x-reduct-0-0", ""),
            ("x-reduct-1-5", "10,text/plain"),
            ("x-reduct-0-x", "ignored"),
        ]))
        .expect("decodes");
        assert_eq!(batch.entries, ["a", "b"]);
        let stamps: Vec<_> = batch
            .records
            .iter()
            .map(|r| (r.entry, r.timestamp))
            .collect();
        assert_eq!(stamps, [(0, 100), (1, 105)]);
        assert_eq!(
            refusal(&[
                ("x-reduct-entries", "a"),
                ("x-reduct-start-ts", "1"),
                ("x-reduct-x-1", "")
            ]),
            "Invalid header 'x-reduct-x-1': entry index must be a number"
        );
        assert_eq!(
            refusal(&[("x-reduct-entries", "a"), ("x-reduct-0-1", "")]),
            "x-reduct-start-ts header is required"
        );
        assert_eq!(
            refusal(&[
                ("x-reduct-entries", "a/%24meta"),
                ("x-reduct-start-ts", "1")
            ]),
            "Can't delete records from system entry 'a/$meta'; use label update with remove=true"
        );
        let empty = decode_remove_batch(&head(&[])).expect("an empty delete");
        assert!(empty.entries.is_empty() && empty.records.is_empty());
    }
}
