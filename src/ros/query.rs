//! A query through the `ros` extension: the storage query selects MCAP records (its
//! `when` sees the stored records), and each one is replaced by the records its
//! extraction makes, which the step's own `when` (strict, the only place where computed
//! `@labels` resolve, as in ReductStore) then filters, per entry.

use std::collections::{HashMap, HashSet};

use super::extract::{ExtractOptions, Extractor};
use super::mcap_messages::McapMessages;
use crate::error::{Error, Result};
use crate::storage::condition::{Condition, Directives, Matcher, Verdict};
use crate::storage::query::{QueryIter, RecordSource};
use crate::storage::record::{Labels, Payload, Record};

/// Most bytes of one MCAP record or chunk (compressed or not) an extraction reads.
pub const MAX_MCAP_RECORD: usize = 256 << 20;

/// The MCAP record being extracted.
struct Current {
    entry: String,
    timestamp: u64,
    labels: Labels,
    messages: McapMessages,
}

/// The records a query makes through the `ros` extension.
pub struct RosQuery {
    source: QueryIter,
    extractor: Extractor,
    when: Option<Condition>,
    matchers: HashMap<String, Matcher>,
    /// Entries whose step condition's `$limit` was reached.
    stopped: HashSet<String>,
    current: Option<Current>,
    with_payload: bool,
    failed: bool,
}

impl RosQuery {
    /// Extracts with `options` from the records `source` selects (read with their
    /// payloads), keeping those `when` selects; `with_payload` false answers metadata only.
    pub fn new(
        source: QueryIter,
        options: ExtractOptions,
        when: Option<Condition>,
        with_payload: bool,
    ) -> Self {
        RosQuery {
            source,
            extractor: Extractor::new(options),
            when,
            matchers: HashMap::new(),
            stopped: HashSet::new(),
            current: None,
            with_payload,
            failed: false,
        }
    }

    /// The next record of the current MCAP record that the step's condition selects;
    /// `Ok(None)` when it has no more.
    fn next_extracted(&mut self) -> Result<Option<Record>> {
        let Some(current) = self.current.as_mut() else {
            return Ok(None);
        };
        loop {
            let extractor = &mut self.extractor;
            let labels = &current.labels;
            let extracted = current
                .messages
                .next_message(|m| extractor.wants(&m).then(|| extractor.extract(&m, labels)));
            let extracted = match extracted {
                None => break,
                Some(Err(e)) => {
                    return Err(Error::unprocessable(format!(
                        "record {} of entry '{}' is not a readable MCAP file: {e}",
                        current.timestamp, current.entry
                    )));
                }
                Some(Ok(None)) => continue,
                Some(Ok(Some(Err(e)))) => {
                    return Err(Error::unprocessable(format!(
                        "record {} of entry '{}': {e}",
                        current.timestamp, current.entry
                    )));
                }
                Some(Ok(Some(Ok(extracted)))) => extracted,
            };
            if let Some(when) = &self.when {
                let matcher = self
                    .matchers
                    .entry(current.entry.clone())
                    .or_insert_with(|| when.matcher());
                match matcher.evaluate(&extracted.meta) {
                    Ok(Verdict::Match) => {}
                    Ok(Verdict::Skip) => continue,
                    Ok(Verdict::Stop) => {
                        self.stopped.insert(current.entry.clone());
                        self.current = None;
                        return Ok(None);
                    }
                    Err(e) => {
                        self.failed = true;
                        return Err(e);
                    }
                }
            }
            return Ok(Some(Record {
                entry: current.entry.clone(),
                meta: extracted.meta,
                payload: self.with_payload.then(|| Payload::from_vec(extracted.json)),
            }));
        }
        self.current = None;
        Ok(None)
    }
}

impl Iterator for RosQuery {
    type Item = Result<Record>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        loop {
            if self.current.is_some() {
                match self.next_extracted() {
                    Ok(Some(record)) => return Some(Ok(record)),
                    Ok(None) => continue,
                    Err(e) => {
                        // The rest of a record that failed is not read.
                        self.current = None;
                        return Some(Err(e));
                    }
                }
            }
            let record = match self.source.next()? {
                Ok(record) => record,
                Err(e) => {
                    self.failed = self.source.has_failed();
                    return Some(Err(e));
                }
            };
            if self.stopped.contains(&record.entry) {
                continue;
            }
            let Some(payload) = record.payload else {
                continue;
            };
            self.current = Some(Current {
                entry: record.entry,
                timestamp: record.meta.timestamp,
                labels: record.meta.labels,
                messages: McapMessages::new(payload, MAX_MCAP_RECORD),
            });
        }
    }
}

impl RecordSource for RosQuery {
    fn has_failed(&self) -> bool {
        self.failed
    }

    fn directives(&self) -> &Directives {
        self.source.directives()
    }

    fn is_following(&self) -> bool {
        self.source.is_following()
    }

    fn rewind(&mut self) {
        self.source.rewind();
    }
}
