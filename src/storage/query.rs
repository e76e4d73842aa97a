//! A streaming query over entries and a time range: records come entry by entry (in name
//! order), each entry's in timestamp order, one block at a time, so a query over a whole
//! bucket never holds more than one block's record table and one frame in memory.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::storage::condition::Condition;
use crate::storage::entry::{Chunk, Entry, chunk_len, chunk_meta, chunk_record};
use crate::storage::record::Record;

/// What a query selects.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueryOptions {
    /// Entry patterns (exact names, `*`, `**`, `prefix*`, `!exclude`); empty means every
    /// entry.
    pub entries: Vec<String>,
    /// Inclusive start (µs); `None` means from the oldest record.
    pub start: Option<u64>,
    /// Exclusive stop (µs); `None` means through the latest record.
    pub stop: Option<u64>,
    /// Return metadata without payloads.
    pub only_metadata: bool,
    /// Only records matching this condition; a strict condition's evaluation error is
    /// returned by the iterator.
    pub when: Option<Condition>,
}

/// Iterator over the records a query selects.
pub struct QueryIter {
    /// Entries still to read, each with where its reading starts.
    entries: VecDeque<(Arc<Entry>, u64)>,
    stop: u64,
    with_payload: bool,
    when: Option<Condition>,
    current: Option<Cursor>,
    /// A continuous query keeps each entry it has read to the end, with where it stopped,
    /// to read on from there after [`QueryIter::rewind`].
    following: Option<Vec<(Arc<Entry>, u64)>>,
}

struct Cursor {
    entry: Arc<Entry>,
    next_from: u64,
    chunk: Option<(Chunk, usize)>,
    /// Blocks that failed to open: reported once, then read around.
    broken: HashSet<u64>,
}

impl QueryIter {
    /// A query over `entries` (already selected, sorted by name).
    pub fn new(entries: Vec<Arc<Entry>>, options: &QueryOptions) -> Result<Self> {
        let start = options.start.unwrap_or(0);
        let stop = options.stop.unwrap_or(u64::MAX);
        if start > stop {
            return Err(Error::unprocessable(format!(
                "Start time must be before stop time (start {start}, stop {stop})"
            )));
        }
        Ok(QueryIter {
            entries: entries.into_iter().map(|e| (e, start)).collect(),
            stop,
            with_payload: !options.only_metadata,
            when: options.when.clone(),
            current: None,
            following: None,
        })
    }

    /// Makes this a continuous query: it has no stop, and an entry read to the end is
    /// kept to be read on, from where it stopped, after [`QueryIter::rewind`]. Follows the
    /// entries selected when the query was made, as ReductStore does.
    pub fn following(mut self) -> Self {
        self.stop = u64::MAX;
        self.following = Some(Vec::new());
        self
    }

    /// Whether this is a continuous query.
    pub fn is_following(&self) -> bool {
        self.following.is_some()
    }

    /// For a continuous query that returned `None` (caught up): starts another pass over
    /// its entries, each from where it stopped, to return what was written since.
    pub fn rewind(&mut self) {
        if let Some(done) = self.following.as_mut() {
            self.entries.extend(done.drain(..));
        }
    }

    /// The cursor finished its entry: a continuous query keeps it for the next pass.
    fn finish_entry(&mut self) {
        if let Some(cursor) = self.current.take()
            && let Some(done) = self.following.as_mut()
        {
            done.push((cursor.entry, cursor.next_from));
        }
    }

    fn advance(&mut self) -> Result<Option<Record>> {
        loop {
            let Some(cursor) = self.current.as_mut() else {
                let Some((entry, from)) = self.entries.pop_front() else {
                    return Ok(None);
                };
                self.current = Some(Cursor {
                    entry,
                    next_from: from,
                    chunk: None,
                    broken: HashSet::new(),
                });
                continue;
            };
            if let Some((chunk, pos)) = cursor.chunk.as_mut() {
                if *pos < chunk_len(chunk) {
                    // Step past the record first: a damaged record yields its error once
                    // and the query goes on with the next one.
                    *pos += 1;
                    if let Some(when) = &self.when
                        && !when.evaluate(chunk_meta(chunk, *pos - 1))?
                    {
                        continue;
                    }
                    let (meta, payload) = chunk_record(chunk, *pos - 1, self.with_payload)?;
                    return Ok(Some(Record {
                        entry: cursor.entry.name().to_string(),
                        meta,
                        payload,
                    }));
                }
                cursor.chunk = None;
            }
            if cursor.next_from >= self.stop {
                self.finish_entry();
                continue;
            }
            match cursor
                .entry
                .next_chunk(cursor.next_from, self.stop, &mut cursor.broken)
            {
                Ok(Some((chunk, next_from))) => {
                    // A block that cannot be opened yields its error once and is skipped.
                    cursor.next_from = next_from;
                    cursor.chunk = Some((chunk?, 0));
                }
                Ok(None) => self.finish_entry(),
                // An entry removed while the query runs simply has no more records.
                Err(e) if e.kind() == crate::error::ErrorKind::NotFound => self.current = None,
                Err(e) => return Err(e),
            }
        }
    }
}

impl Iterator for QueryIter {
    type Item = Result<Record>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.advance() {
            Ok(Some(record)) => Some(Ok(record)),
            Ok(None) => None,
            Err(e) => Some(Err(e)),
        }
    }
}
