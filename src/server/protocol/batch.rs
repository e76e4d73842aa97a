//! The headers of the multi-entry batch protocol (v2): encoding a read batch and decoding
//! a batched write. Per record one header `x-reduct-<E>-<D>: <len>[,<ct>[,<delta>]]`, where
//! the content type and labels are given relative to the previous record of the same entry.

use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::server::http::head::RequestHead;
use crate::server::http::head::parse_decimal;
use crate::storage::{DEFAULT_CONTENT_TYPE, Labels, RecordMeta};
use crate::wire::percent;

/// Headers of a read batch: `records` are (entry index, metadata), in (entry, timestamp)
/// order, the body's order too. Content types and labels are deltas per entry; label
/// names share one `x-reduct-labels` list, numbered as they first appear.
pub fn encode_read_batch(
    entries: &[String],
    records: &[(usize, RecordMeta)],
) -> Vec<(String, String)> {
    let start = records.iter().map(|(_, r)| r.timestamp).min().unwrap_or(0);
    let mut names: Vec<&str> = Vec::new();
    let mut index: HashMap<&str, usize> = HashMap::new();
    let mut headers = Vec::with_capacity(records.len() + 4);
    let mut prev: Option<&RecordMeta> = None;
    let mut prev_entry = usize::MAX;
    for (entry, meta) in records {
        if *entry != prev_entry {
            prev = None;
            prev_entry = *entry;
        }
        let mut value = meta.size.to_string();
        let ct_changed = prev.is_none_or(|p| p.content_type != meta.content_type);
        let mut ops: Vec<(usize, String)> = Vec::new();
        for (k, v) in &meta.labels {
            if prev.and_then(|p| p.labels.get(k)) == Some(v) {
                continue;
            }
            let i = *index.entry(k).or_insert_with(|| {
                names.push(k);
                names.len() - 1
            });
            let v = if v.contains(',') {
                format!("\"{v}\"")
            } else {
                v.clone()
            };
            ops.push((i, v));
        }
        if let Some(p) = prev {
            for k in p.labels.keys() {
                if !meta.labels.contains_key(k) {
                    let i = *index.entry(k).or_insert_with(|| {
                        names.push(k);
                        names.len() - 1
                    });
                    ops.push((i, String::new()));
                }
            }
        }
        ops.sort();
        if ct_changed || !ops.is_empty() {
            value.push(',');
            if ct_changed {
                value.push_str(&meta.content_type);
            }
        }
        if !ops.is_empty() {
            value.push(',');
            let delta: Vec<String> = ops.iter().map(|(i, v)| format!("{i}={v}")).collect();
            value.push_str(&delta.join(","));
        }
        headers.push((
            format!("x-reduct-{entry}-{}", meta.timestamp - start),
            value,
        ));
        prev = Some(meta);
    }
    let mut out = vec![
        ("x-reduct-entries".to_string(), encode_entries(entries)),
        ("x-reduct-start-ts".to_string(), start.to_string()),
    ];
    if !names.is_empty() {
        let encoded: Vec<String> = names.iter().map(|n| percent::encode(n)).collect();
        out.push(("x-reduct-labels".to_string(), encoded.join(",")));
    }
    out.extend(headers);
    out
}

/// `x-reduct-entries` of an answer: the names, percent-encoded, by index. A batched
/// change's answer re-encodes the names it decoded (as ReductStore does) rather than
/// echoing the request's header, so only names that passed its checks come back.
pub fn encode_entries(entries: &[String]) -> String {
    let encoded: Vec<String> = entries.iter().map(|e| percent::encode(e)).collect();
    encoded.join(",")
}

/// One record of a batched write, resolved against the records before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchRecord {
    /// Index into the entry list.
    pub entry: usize,
    /// Delta to the batch's start timestamp (as the client sent it, for error headers).
    pub delta: u64,
    /// Timestamp, size, content type and labels.
    pub meta: RecordMeta,
    /// The label operations this record's header carried, in order: (name, value), an
    /// empty value removing the label (what a batched label update accumulates).
    pub ops: Vec<(String, String)>,
}

/// A decoded batched-write head: entry names, start timestamp, and the records in body
/// order, (E, timestamp).
#[derive(Debug)]
pub struct WriteBatch {
    /// Entry names (decoded), by index.
    pub entries: Vec<String>,
    /// `x-reduct-start-ts`.
    pub start: u64,
    /// The records, in the order their bytes follow in the body.
    pub records: Vec<BatchRecord>,
}

/// The names of a comma-separated header (`x-reduct-entries`, `x-reduct-labels`),
/// percent-decoded.
pub fn split_names(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(|n| percent::decode(n.trim()))
        .collect()
}

/// Decodes the batch headers of a batched write.
pub fn decode_write_batch(head: &RequestHead) -> Result<WriteBatch> {
    let entries = split_names(head.header("x-reduct-entries").ok_or_else(|| {
        Error::unprocessable("x-reduct-entries header is required for batched writes")
    })?);
    let start_text = head.header("x-reduct-start-ts").ok_or_else(|| {
        Error::unprocessable("x-reduct-start-ts header is required for batched writes")
    })?;
    let start: u64 = parse_decimal(start_text).ok_or_else(|| {
        Error::unprocessable(format!(
            "x-reduct-start-ts '{start_text}' must be an unix timestamp in microseconds"
        ))
    })?;
    let label_names = head.header("x-reduct-labels").map(split_names);
    let mut raw: Vec<(usize, u64, &str)> = Vec::new();
    for (name, value) in &head.headers {
        let Some(rest) = name.strip_prefix("x-reduct-") else {
            continue;
        };
        let Some((e, d)) = rest.split_once('-') else {
            continue;
        };
        let (Some(e), Some(d)) = (parse_decimal(e), parse_decimal(d)) else {
            continue;
        };
        let Ok(e) = usize::try_from(e) else {
            continue;
        };
        if e >= entries.len() {
            return Err(Error::unprocessable(format!(
                "header '{name}' names entry index {e}, but x-reduct-entries has {}",
                entries.len()
            )));
        }
        raw.push((e, d, value.as_str()));
    }
    raw.sort_by_key(|&(e, d, _)| (e, d));
    let mut records = Vec::with_capacity(raw.len());
    let mut prev: HashMap<usize, (String, Labels)> = HashMap::new();
    for (e, d, value) in raw {
        let ts = start.checked_add(d).ok_or_else(|| {
            Error::unprocessable(format!("timestamp {start} + {d} does not fit in 64 bits"))
        })?;
        let (len_text, rest) = match value.split_once(',') {
            Some((l, r)) => (l, Some(r)),
            None => (value, None),
        };
        let size: u64 = parse_decimal(len_text.trim()).ok_or_else(|| {
            Error::unprocessable(format!(
                "record header 'x-reduct-{e}-{d}': length '{len_text}' is not a number"
            ))
        })?;
        let previous = prev.get(&e);
        let mut ops = Vec::new();
        let (content_type, labels) = match rest {
            None => previous.cloned().ok_or_else(|| {
                Error::unprocessable(format!(
                    "Content-type and labels must be provided for the first record of an entry ('x-reduct-{e}-{d}')"
                ))
            })?,
            Some(rest) => {
                let (ct, delta) = match rest.split_once(',') {
                    Some((c, d)) => (c, Some(d)),
                    None => (rest, None),
                };
                let ct = match (ct.trim(), previous) {
                    ("", Some((prev_ct, _))) => prev_ct.clone(),
                    ("", None) => DEFAULT_CONTENT_TYPE.to_string(),
                    (ct, _) => ct.to_string(),
                };
                let mut labels = previous.map(|p| p.1.clone()).unwrap_or_default();
                if let Some(delta) = delta {
                    apply_delta(&mut labels, delta, label_names.as_deref(), &mut ops)
                        .map_err(|m| Error::unprocessable(format!("record header 'x-reduct-{e}-{d}': {m}")))?;
                }
                (ct, labels)
            }
        };
        prev.insert(e, (content_type.clone(), labels.clone()));
        records.push(BatchRecord {
            entry: e,
            delta: d,
            meta: RecordMeta {
                timestamp: ts,
                labels,
                content_type,
                size,
            },
            ops,
        });
    }
    Ok(WriteBatch {
        entries,
        start,
        records,
    })
}

/// Splits a label list `k=v,k="v,w",k=` into (name, value) pairs, names and unquoted
/// values trimmed; a quoted value runs to the next `"` (no escapes). A fragment that is not
/// `k=v` (no `=`, or an unterminated quote) comes back as an error holding it: the v2
/// decoder refuses it, v1 ignores it, as ReductStore does. Shared by both protocol
/// versions.
pub fn label_pairs(text: &str) -> impl Iterator<Item = std::result::Result<(&str, &str), &str>> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.trim().is_empty() {
            return None;
        }
        let stop = rest.find([',', '=']);
        let Some(eq) = stop.filter(|&i| rest.as_bytes()[i] == b'=') else {
            // A fragment without '=' up to the next comma (or the end).
            let (fragment, next) = rest.split_once(',').unwrap_or((rest, ""));
            rest = next;
            return Some(Err(fragment));
        };
        let key = rest[..eq].trim();
        let after = &rest[eq + 1..];
        let trimmed = after.trim_start();
        if let Some(quoted) = trimmed.strip_prefix('"') {
            let Some(end) = quoted.find('"') else {
                let fragment = rest;
                rest = "";
                return Some(Err(fragment));
            };
            let next = quoted[end + 1..].trim_start();
            rest = next.strip_prefix(',').unwrap_or(next);
            return Some(Ok((key, &quoted[..end])));
        }
        let (value, next) = after.split_once(',').unwrap_or((after, ""));
        rest = next;
        Some(Ok((key, value.trim())))
    })
}

/// Applies `k=v,k="v,w",k=` operations to `labels`, and lists them in `ops`.
fn apply_delta(
    labels: &mut Labels,
    delta: &str,
    names: Option<&[String]>,
    ops: &mut Vec<(String, String)>,
) -> std::result::Result<(), String> {
    for pair in label_pairs(delta) {
        let (key, value) = pair.map_err(|f| format!("label operation '{f}' is not k=v"))?;
        let name = match (key.parse::<usize>(), names) {
            (Ok(i), Some(names)) => names
                .get(i)
                .cloned()
                .ok_or_else(|| format!("Label index '{i}' is out of range"))?,
            _ if key.starts_with('@') => {
                return Err(format!(
                    "Label names must not start with '@': reserved for computed labels ('{key}')"
                ));
            }
            _ => percent::decode(key),
        };
        let name = name.to_ascii_lowercase();
        if value.is_empty() {
            labels.remove(&name);
        } else {
            labels.insert(name.clone(), value.to_string());
        }
        ops.push((name, value.to_string()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(ts: u64, ct: &str, labels: &[(&str, &str)]) -> RecordMeta {
        RecordMeta {
            timestamp: ts,
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            content_type: ct.to_string(),
            size: 6,
        }
    }

    #[test]
    fn a_batch_of_several_entries_numbers_them_and_restarts_deltas() {
        let records = vec![
            (0, meta(10, "text/plain", &[("k", "1")])),
            (0, meta(20, "text/plain", &[("k", "1")])),
            (1, meta(15, "text/plain", &[("k", "1")])),
        ];
        let h = encode_read_batch(&["c".to_string(), "a b".to_string()], &records);
        let get = |n: &str| h.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
        assert_eq!(get("x-reduct-entries"), Some("c,a%20b"));
        assert_eq!(get("x-reduct-start-ts"), Some("10"));
        assert_eq!(get("x-reduct-0-0"), Some("6,text/plain,0=1"));
        assert_eq!(get("x-reduct-0-10"), Some("6"));
        // The second entry's first record states its content type and labels again.
        assert_eq!(get("x-reduct-1-5"), Some("6,text/plain,0=1"));
    }

    #[test]
    fn read_batch_uses_deltas() {
        let records = [
            meta(
                1000,
                "application/octet-stream",
                &[("csv", "a,b"), ("idx", "0"), ("parity", "even")],
            ),
            meta(
                1001,
                "application/octet-stream",
                &[("csv", "a,b"), ("idx", "1"), ("parity", "odd")],
            ),
            meta(
                1005,
                "application/octet-stream",
                &[("csv", "a,b"), ("idx", "1")],
            ),
            meta(1006, "text/plain", &[("csv", "a,b"), ("idx", "1")]),
            meta(1007, "text/plain", &[("csv", "a,b"), ("idx", "1")]),
        ];
        let one: Vec<(usize, RecordMeta)> = records.iter().cloned().map(|r| (0, r)).collect();
        let h = encode_read_batch(&["cam/front".to_string()], &one);
        let get = |n: &str| h.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
        assert_eq!(get("x-reduct-entries"), Some("cam%2Ffront"));
        assert_eq!(get("x-reduct-start-ts"), Some("1000"));
        assert_eq!(get("x-reduct-labels"), Some("csv,idx,parity"));
        assert_eq!(
            get("x-reduct-0-0"),
            Some("6,application/octet-stream,0=\"a,b\",1=0,2=even")
        );
        assert_eq!(get("x-reduct-0-1"), Some("6,,1=1,2=odd"));
        assert_eq!(get("x-reduct-0-5"), Some("6,,2="));
        assert_eq!(get("x-reduct-0-6"), Some("6,text/plain"));
        assert_eq!(get("x-reduct-0-7"), Some("6"));
    }

    #[test]
    fn write_batch_round_trips_the_read_encoding() {
        let records = vec![
            meta(1000, "image/jpeg", &[("csv", "a,b"), ("idx", "0")]),
            meta(1003, "image/jpeg", &[("idx", "1")]),
            meta(1004, "text/plain", &[("idx", "1")]),
        ];
        let one: Vec<(usize, RecordMeta)> = records.iter().cloned().map(|r| (0, r)).collect();
        let headers = encode_read_batch(&["e".to_string()], &one);
        let head = RequestHead {
            method: "POST".into(),
            path: "/".into(),
            query: String::new(),
            headers,
            http11: true,
        };
        let batch = decode_write_batch(&head).unwrap();
        assert_eq!(batch.entries, vec!["e".to_string()]);
        let metas: Vec<RecordMeta> = batch.records.into_iter().map(|r| r.meta).collect();
        assert_eq!(metas, records);
    }

    #[test]
    fn write_batch_errors_name_the_header() {
        let head = |headers: Vec<(&str, &str)>| RequestHead {
            method: "POST".into(),
            path: "/".into(),
            query: String::new(),
            headers: headers
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            http11: true,
        };
        let err = decode_write_batch(&head(vec![
            ("x-reduct-entries", "a"),
            ("x-reduct-start-ts", "1"),
            ("x-reduct-0-0", "x"),
        ]))
        .unwrap_err();
        assert!(err.message().contains("x-reduct-0-0"), "{err}");
        let err = decode_write_batch(&head(vec![
            ("x-reduct-entries", "a"),
            ("x-reduct-start-ts", "1"),
            ("x-reduct-0-0", "5"),
        ]))
        .unwrap_err();
        assert!(err.message().contains("first record"), "{err}");
        let err = decode_write_batch(&head(vec![
            ("x-reduct-entries", "a"),
            ("x-reduct-start-ts", "1"),
            ("x-reduct-3-0", "5,a"),
        ]))
        .unwrap_err();
        assert!(err.message().contains("index 3"), "{err}");
        let err = decode_write_batch(&head(vec![
            ("x-reduct-entries", "a"),
            ("x-reduct-start-ts", "1"),
            ("x-reduct-labels", "k"),
            ("x-reduct-0-0", "5,a,3=x"),
        ]))
        .unwrap_err();
        assert!(
            err.message().contains("Label index '3' is out of range"),
            "{err}"
        );
    }

    mod fuzz {
        use super::super::*;
        use proptest::prelude::*;

        /// Header values built from the characters batch headers are made of, so the
        /// decoder's branches are reached, not only its first check.
        fn value() -> impl Strategy<Value = String> {
            proptest::collection::vec(
                prop_oneof![
                    Just(','),
                    Just('='),
                    Just('"'),
                    Just('%'),
                    Just('0'),
                    Just('1'),
                    Just('9'),
                    Just('a'),
                    Just('@'),
                    Just('/'),
                    Just(' '),
                    Just('\u{e9}'),
                ],
                0..24,
            )
            .prop_map(|chars| chars.into_iter().collect())
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

            #[test]
            fn any_batch_headers_decode_or_are_refused(
                entries in value(),
                start in value(),
                labels in proptest::option::of(value()),
                records in proptest::collection::vec((0usize..4, 0u64..4, value()), 0..6),
            ) {
                let mut headers = vec![
                    ("x-reduct-entries".to_string(), entries),
                    ("x-reduct-start-ts".to_string(), start),
                ];
                if let Some(labels) = labels {
                    headers.push(("x-reduct-labels".to_string(), labels));
                }
                for (e, d, v) in records {
                    headers.push((format!("x-reduct-{e}-{d}"), v));
                }
                let head = RequestHead {
                    method: "POST".into(),
                    path: "/".into(),
                    query: String::new(),
                    headers,
                    http11: true,
                };
                if let Ok(batch) = decode_write_batch(&head) {
                    for record in &batch.records {
                        prop_assert!(record.entry < batch.entries.len());
                    }
                }
            }
        }
    }
}
