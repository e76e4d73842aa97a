//! The headers of the single-entry batch protocol (v1, `/b/{bucket}/{entry}/batch`): per
//! record `x-reduct-time-<ts>: <len>,<content-type>[,<k>=<v>…]`, the labels a full set
//! (no deltas), payloads in ascending timestamp order. Label lists are split by the one
//! tokenizer both protocol versions share (`batch::label_pairs`).

use crate::error::{Error, Result};
use crate::server::http::head::RequestHead;
use crate::server::http::head::parse_decimal;
use crate::server::protocol::batch::label_pairs;
use crate::storage::{DEFAULT_CONTENT_TYPE, Labels, RecordMeta};
use crate::wire::record_header::TIME_PREFIX;

/// The records a v1 batch names, sorted by timestamp: the order of their payloads in the
/// body. Labels are the full set (an empty value is kept: for a label update it removes).
pub fn decode_v1_batch(head: &RequestHead) -> Result<Vec<RecordMeta>> {
    let mut records = Vec::new();
    for (name, value) in &head.headers {
        let Some(ts_text) = name.strip_prefix(TIME_PREFIX) else {
            continue;
        };
        let timestamp = parse_decimal(ts_text).ok_or_else(|| {
            Error::unprocessable(format!(
                "Invalid header '{name}': must be an unix timestamp in microseconds"
            ))
        })?;
        let (len, rest) = value
            .split_once(',')
            .ok_or_else(|| Error::unprocessable("Invalid batched header"))?;
        let size = parse_decimal(len.trim())
            .ok_or_else(|| Error::unprocessable("Invalid content length"))?;
        let (content_type, labels) = rest.split_once(',').unwrap_or((rest, ""));
        let content_type = match content_type.trim() {
            "" => DEFAULT_CONTENT_TYPE.to_string(),
            ct => ct.to_string(),
        };
        let labels: Labels = label_pairs(labels)
            .filter_map(|pair| pair.ok())
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        records.push(RecordMeta {
            timestamp,
            labels,
            content_type,
            size,
        });
    }
    records.sort_by_key(|r| r.timestamp);
    if let Some(w) = records
        .windows(2)
        .find(|w| w[0].timestamp == w[1].timestamp)
    {
        return Err(Error::unprocessable(format!(
            "Invalid header '{TIME_PREFIX}{}': the timestamp is given twice",
            w[0].timestamp
        )));
    }
    Ok(records)
}

/// The timestamps a v1 removal names (only header names matter).
pub fn decode_v1_timestamps(head: &RequestHead) -> Result<Vec<u64>> {
    let mut stamps = Vec::new();
    for (name, _) in &head.headers {
        if let Some(ts_text) = name.strip_prefix(TIME_PREFIX) {
            stamps.push(parse_decimal(ts_text).ok_or_else(|| {
                Error::unprocessable(format!(
                    "Invalid header '{name}': must be an unix timestamp in microseconds"
                ))
            })?);
        }
    }
    stamps.sort_unstable();
    stamps.dedup();
    Ok(stamps)
}

/// The per-record error header of a v1 batch.
pub fn v1_error_header(ts: u64, e: &Error) -> (String, String) {
    (
        format!("x-reduct-error-{ts}"),
        format!(
            "{},{}",
            e.kind().http_status(),
            crate::server::http::response::header_message(e.message())
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::record_header::encode_v1_record;

    fn head(headers: &[(&str, &str)]) -> RequestHead {
        RequestHead {
            method: "POST".into(),
            path: "/".into(),
            query: String::new(),
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            http11: true,
        }
    }

    #[test]
    fn records_decode_in_timestamp_order_with_full_labels() {
        let records = decode_v1_batch(&head(&[
            (
                "x-reduct-time-30",
                "3, text/plain ,Lab=b, c=\"d,f\",dangling",
            ),
            ("x-reduct-time-10", "10,"),
            ("content-length", "13"),
        ]))
        .unwrap();
        assert_eq!(records.len(), 2);
        assert_eq!(records[0].timestamp, 10);
        assert_eq!(records[0].content_type, DEFAULT_CONTENT_TYPE);
        assert_eq!(records[1].content_type, "text/plain");
        assert_eq!(records[1].labels["Lab"], "b", "names keep their case");
        assert_eq!(records[1].labels["c"], "d,f");
        assert_eq!(
            records[1].labels.len(),
            2,
            "a fragment without '=' is ignored"
        );
        let (name, value) = encode_v1_record(&records[1]);
        assert_eq!(name, "x-reduct-time-30");
        assert_eq!(value, "3,text/plain,Lab=b,c=\"d,f\"");
    }

    #[test]
    fn bad_headers_are_refused_with_reductstore_wording() {
        let err = |h: &[(&str, &str)]| decode_v1_batch(&head(h)).unwrap_err().to_string();
        assert!(err(&[("x-reduct-time-1", "10")]).contains("Invalid batched header"));
        assert!(err(&[("x-reduct-time-1", "x,")]).contains("Invalid content length"));
        assert!(err(&[("x-reduct-time-abc", "1,")]).contains(
            "Invalid header 'x-reduct-time-abc': must be an unix timestamp in microseconds"
        ));
        assert_eq!(
            decode_v1_timestamps(&head(&[("x-reduct-time-5", ""), ("x-reduct-time-2", "")]))
                .unwrap(),
            vec![2, 5]
        );
    }
}
