//! A query through the `ros` extension: the storage query selects MCAP records (its
//! `when` sees the stored records), and each one is replaced by the records its step
//! makes (extracted messages or transformed episodes), which the step's own `when`
//! (strict, the only place where computed `@labels` resolve, as in ReductStore) then
//! filters, per entry.

use std::collections::{HashMap, HashSet};

use super::ext::RosAction;
use super::extract::Extractor;
use super::mcap_messages::McapMessages;
use super::transform::{TransformOptions, Transformer};
use crate::error::{Error, Result};
use crate::storage::condition::{Condition, Directives, Matcher, Verdict};
use crate::storage::query::{QueryIter, RecordSource};
use crate::storage::record::{Labels, Payload, Record, RecordMeta};

/// Most bytes of one MCAP record or chunk (compressed or not) the extension reads.
pub const MAX_MCAP_RECORD: usize = 256 << 20;

/// What the step makes records with.
enum Maker {
    Extract(Extractor),
    Transform(TransformOptions),
}

/// The MCAP record being turned into records.
struct Current {
    entry: String,
    timestamp: u64,
    labels: Labels,
    messages: McapMessages,
    /// A transform's episodes of this record; `None` once the last one is out.
    episodes: Option<Transformer>,
}

/// The records a query makes through the `ros` extension.
pub struct RosQuery {
    source: QueryIter,
    maker: Maker,
    when: Option<Condition>,
    matchers: HashMap<String, Matcher>,
    /// Entries whose step condition's `$limit` was reached.
    stopped: HashSet<String>,
    current: Option<Current>,
    with_payload: bool,
    failed: bool,
}

impl RosQuery {
    /// Applies `action` to the records `source` selects (read with their payloads),
    /// keeping what `when` selects; `with_payload` false answers metadata only.
    pub fn new(
        source: QueryIter,
        action: RosAction,
        when: Option<Condition>,
        with_payload: bool,
    ) -> Self {
        RosQuery {
            source,
            maker: match action {
                RosAction::Extract(options) => Maker::Extract(Extractor::new(options)),
                RosAction::Transform(options) => Maker::Transform(options),
            },
            when,
            matchers: HashMap::new(),
            stopped: HashSet::new(),
            current: None,
            with_payload,
            failed: false,
        }
    }

    /// The next record the step makes of the current MCAP record, `None` when it makes no
    /// more; the error names the record.
    fn next_made(&mut self) -> Result<Option<(RecordMeta, Vec<u8>)>> {
        let Some(current) = self.current.as_mut() else {
            return Ok(None);
        };
        let fail = |e: String| {
            Error::unprocessable(format!(
                "record {} of entry '{}': {e}",
                current.timestamp, current.entry
            ))
        };
        let unreadable = |e: String| fail(format!("not a readable MCAP file: {e}"));
        loop {
            let labels = &current.labels;
            let made = match (&mut self.maker, &mut current.episodes) {
                (Maker::Extract(extractor), _) => current.messages.next_message(|m| {
                    extractor
                        .wants(&m)
                        .then(|| extractor.extract(&m, labels).map(|x| (x.meta, x.json)))
                }),
                (Maker::Transform(_), Some(episodes)) => {
                    let next = current.messages.next_message(|m| {
                        episodes
                            .add(&m)
                            .transpose()
                            .map(|r| r.map(|e| (e.meta, e.mcap)))
                    });
                    if next.is_none() {
                        let last = episodes.finish().map_err(fail)?;
                        current.episodes = None;
                        return Ok(last.map(|e| (e.meta, e.mcap)));
                    }
                    next
                }
                (Maker::Transform(_), None) => return Ok(None),
            };
            match made {
                None => return Ok(None),
                Some(Err(e)) => return Err(unreadable(e)),
                Some(Ok(None)) => continue,
                Some(Ok(Some(Err(e)))) => return Err(fail(e)),
                Some(Ok(Some(Ok((meta, bytes))))) => return Ok(Some((meta, bytes))),
            }
        }
    }

    /// The next record of the current MCAP record that the step's condition selects;
    /// `Ok(None)` when it has no more.
    fn next_selected(&mut self) -> Result<Option<Record>> {
        loop {
            let Some(entry) = self.current.as_ref().map(|c| c.entry.clone()) else {
                return Ok(None);
            };
            let Some((meta, bytes)) = self.next_made()? else {
                self.current = None;
                return Ok(None);
            };
            if let Some(when) = &self.when {
                let matcher = self
                    .matchers
                    .entry(entry.clone())
                    .or_insert_with(|| when.matcher());
                match matcher.evaluate(&meta) {
                    Ok(Verdict::Match) => {}
                    Ok(Verdict::Skip) => continue,
                    Ok(Verdict::Stop) => {
                        self.stopped.insert(entry);
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
                entry,
                meta,
                payload: self.with_payload.then(|| Payload::from_vec(bytes)),
            }));
        }
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
                match self.next_selected() {
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
            let episodes = match &self.maker {
                Maker::Transform(options) => Some(Transformer::new(
                    options.clone(),
                    record.meta.labels.clone(),
                )),
                Maker::Extract(_) => None,
            };
            self.current = Some(Current {
                entry: record.entry,
                timestamp: record.meta.timestamp,
                labels: record.meta.labels,
                messages: McapMessages::new(payload, MAX_MCAP_RECORD),
                episodes,
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
