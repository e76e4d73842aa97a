//! A streaming query over entries and a time range. Each entry is read in timestamp
//! order, one block at a time, through its own [`Matcher`] (so `$limit`, `$each_n` and
//! the context directives count per entry, as in ReductStore); the entries are merged by
//! timestamp (ties by entry name). A query holds at most one block's record table per
//! entry and the records its context directives keep.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use crate::error::{Error, ErrorKind, Result};
use crate::storage::attachments::{is_attachment_entry, is_tombstone};
use crate::storage::condition::context::Context;
use crate::storage::condition::{Condition, Directives, Matcher, Verdict};
use crate::storage::entry::{
    Chunk, Entry, LastFrame, MergedRecord, chunk_len, chunk_locator, chunk_meta, chunk_record,
    locator_record,
};
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

/// What a record that comes out of an entry's filter is.
enum Ready {
    /// A record of the current chunk: read it from there (no copy of its metadata yet).
    Here(usize),
    /// A record kept aside (a context record, or one of an earlier chunk).
    Kept(MergedRecord),
}

/// One entry being read.
struct Cursor {
    entry: Arc<Entry>,
    next_from: u64,
    chunk: Option<(Chunk, usize)>,
    /// Blocks that failed to open: reported once, then read around.
    broken: HashSet<u64>,
    matcher: Option<Matcher>,
    context: Option<Context<MergedRecord>>,
    /// Records selected and not yet returned, in time order.
    ready: VecDeque<Ready>,
    /// Read to the end (or stopped by `$limit`) in this pass.
    done: bool,
    /// `$limit` stopped this entry at this record, which a continuous query's next pass
    /// examines again.
    stopped_at: Option<u64>,
    /// An attachment entry: its tombstones (`remove=true`) are skipped before the
    /// condition sees them, as if it began with "not removed".
    hide_tombstones: bool,
    /// The frame last decoded for this entry's records.
    last_frame: LastFrame,
}

/// Iterator over the records a query selects.
pub struct QueryIter {
    cursors: Vec<Cursor>,
    start: u64,
    stop: u64,
    with_payload: bool,
    when: Option<Condition>,
    directives: Directives,
    /// A continuous query reads on after [`QueryIter::rewind`].
    following: bool,
    /// A strict condition's error, returned once; the query then ends.
    failed: bool,
}

impl QueryIter {
    /// A query over `entries` (already selected, sorted by name). The condition's
    /// directive values are checked here, when there is an entry to query (as 1.21.5
    /// does).
    pub fn new(entries: Vec<Arc<Entry>>, options: &QueryOptions) -> Result<Self> {
        let start = options.start.unwrap_or(0);
        let stop = options.stop.unwrap_or(u64::MAX);
        if start > stop {
            return Err(Error::unprocessable(format!(
                "Start time must be before stop time (start {start}, stop {stop})"
            )));
        }
        let directives = match (&options.when, entries.is_empty()) {
            (Some(when), false) => when.directives()?,
            _ => Directives::default(),
        };
        let mut query = QueryIter {
            cursors: Vec::with_capacity(entries.len()),
            start,
            stop,
            with_payload: !options.only_metadata,
            when: options.when.clone(),
            directives,
            following: false,
            failed: false,
        };
        for entry in entries {
            let cursor = query.cursor(entry, start);
            query.cursors.push(cursor);
        }
        Ok(query)
    }

    /// Whether a strict condition's error ended the query.
    pub fn has_failed(&self) -> bool {
        self.failed
    }

    /// The checked directives of the query's condition (batching, labels, context).
    pub fn directives(&self) -> &Directives {
        &self.directives
    }

    fn cursor(&self, entry: Arc<Entry>, from: u64) -> Cursor {
        let hide_tombstones = is_attachment_entry(entry.name());
        let stateful = self.when.as_ref().is_some_and(|w| w.is_stateful());
        let has_context =
            self.directives.ctx_before.is_some() || self.directives.ctx_after.is_some();
        Cursor {
            entry,
            next_from: from,
            chunk: None,
            broken: HashSet::new(),
            matcher: self.when.as_ref().map(Condition::matcher),
            context: (stateful && has_context)
                .then(|| Context::new(self.directives.ctx_before, self.directives.ctx_after)),
            ready: VecDeque::new(),
            done: false,
            stopped_at: None,
            last_frame: LastFrame::default(),
            hide_tombstones,
        }
    }

    /// Makes this a continuous query: it has no stop, and an entry read to the end is
    /// read on, from where it stopped, after [`QueryIter::rewind`]. Follows the entries
    /// selected when the query was made, as ReductStore does.
    pub fn following(mut self) -> Self {
        self.stop = u64::MAX;
        self.following = true;
        self
    }

    /// Whether this is a continuous query.
    pub fn is_following(&self) -> bool {
        self.following
    }

    /// For a continuous query that returned `None` (caught up): starts another pass over
    /// its entries, each from where it stopped, with the condition's state fresh (1.21.5
    /// parses the condition again for each pass).
    pub fn rewind(&mut self) {
        if !self.following || self.failed {
            return;
        }
        let cursors = std::mem::take(&mut self.cursors);
        for old in cursors {
            let from = old.stopped_at.unwrap_or(old.next_from).max(self.start);
            let cursor = self.cursor(old.entry, from);
            self.cursors.push(cursor);
        }
    }

    /// Fills the cursor's `ready` queue with at least one record, or marks it done. An
    /// error comes with whether the condition raised it (strict mode: the query ends)
    /// rather than the storage (a damaged block: reported once, then read around).
    fn fill(&self, c: &mut Cursor) -> std::result::Result<(), (Error, bool)> {
        while c.ready.is_empty() && !c.done {
            if let Some((chunk, pos)) = c.chunk.as_mut() {
                if *pos < chunk_len(chunk) {
                    let i = *pos;
                    // Step past the record first: a damaged record yields its error once
                    // and the query goes on with the next one.
                    *pos += 1;
                    let meta = chunk_meta(chunk, i);
                    if c.hide_tombstones && is_tombstone(&meta.labels) {
                        continue;
                    }
                    let verdict = match c.matcher.as_mut() {
                        Some(m) => m.evaluate(meta).map_err(|e| (e, true))?,
                        None => Verdict::Match,
                    };
                    match (verdict, c.context.as_mut()) {
                        (Verdict::Stop, _) => {
                            c.stopped_at = Some(meta.timestamp);
                            c.done = true;
                        }
                        (verdict, Some(context)) => {
                            let mut out = VecDeque::new();
                            context.offer(
                                meta.timestamp,
                                chunk_locator(chunk, i),
                                verdict == Verdict::Match,
                                &mut out,
                            );
                            c.ready.extend(out.into_iter().map(Ready::Kept));
                        }
                        (Verdict::Match, None) => c.ready.push_back(Ready::Here(i)),
                        (Verdict::Skip, None) => {}
                    }
                    continue;
                }
                c.chunk = None;
            }
            if c.next_from >= self.stop {
                c.done = true;
                continue;
            }
            match c.entry.next_chunk(c.next_from, self.stop, &mut c.broken) {
                Ok(Some((chunk, next_from))) => {
                    // A block that cannot be opened yields its error once and is skipped.
                    c.next_from = next_from;
                    c.chunk = Some((chunk.map_err(|e| (e, false))?, 0));
                }
                Ok(None) => c.done = true,
                // An entry removed while the query runs simply has no more records.
                Err(e) if e.kind() == ErrorKind::NotFound => c.done = true,
                Err(e) => return Err((e, false)),
            }
        }
        Ok(())
    }

    fn ready_ts(c: &Cursor) -> Option<u64> {
        Some(match c.ready.front()? {
            Ready::Here(i) => chunk_meta(&c.chunk.as_ref()?.0, *i).timestamp,
            Ready::Kept(at) => at.meta().timestamp,
        })
    }

    fn advance(&mut self) -> Result<Option<Record>> {
        if self.failed {
            return Ok(None);
        }
        let mut cursors = std::mem::take(&mut self.cursors);
        let mut best: Option<(u64, usize)> = None;
        let mut failure = None;
        for (i, c) in cursors.iter_mut().enumerate() {
            if let Err(e) = self.fill(c) {
                failure = Some(e);
                break;
            }
            if let Some(ts) = Self::ready_ts(c)
                && best.is_none_or(|(b, _)| ts < b)
            {
                best = Some((ts, i));
            }
        }
        let result = match (failure, best) {
            (Some((e, from_condition)), _) => {
                // A strict condition's error ends the query; a damaged block does not.
                self.failed = from_condition;
                Err(e)
            }
            (None, None) => Ok(None),
            (None, Some((_, i))) => match self.pop_record(&mut cursors[i]) {
                Ok(Some(record)) => Ok(Some(record)),
                // Removed under a replica's query: on to the next record.
                Ok(None) => {
                    self.cursors = cursors;
                    return self.advance();
                }
                Err(e) => Err(e),
            },
        };
        self.cursors = cursors;
        result
    }

    /// Returns the cursor's next ready record, labels trimmed by `#select_labels`;
    /// `None` when a replica's writer removed it meanwhile.
    fn pop_record(&self, c: &mut Cursor) -> Result<Option<Record>> {
        let ready = c.ready.pop_front().expect("the cursor has a ready record");
        let read = match ready {
            Ready::Here(i) => {
                let (chunk, _) = c.chunk.as_ref().expect("a Here record's chunk is current");
                let ts = chunk_meta(chunk, i).timestamp;
                (
                    ts,
                    chunk_record(chunk, i, self.with_payload, &mut c.last_frame),
                )
            }
            Ready::Kept(at) => (
                at.meta().timestamp,
                locator_record(&at, self.with_payload, &mut c.last_frame),
            ),
        };
        let (mut meta, payload) = match read {
            (_, Ok(found)) => found,
            // A replica's payload whose object or file its writer removed meanwhile: read
            // again through the entry, which follows the writer's new state (a record
            // removed since is then a 404).
            (ts, Err(_)) if c.entry.is_replica() => match c.entry.read(Some(ts)) {
                Ok(record) => (record.meta, record.payload.filter(|_| self.with_payload)),
                Err(e) if e.kind() == crate::error::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(e),
            },
            (_, Err(e)) => return Err(e),
        };
        if let Some(keep) = &self.directives.select_labels {
            meta.labels.retain(|name, _| keep.contains(name));
        }
        Ok(Some(Record {
            entry: c.entry.name().to_string(),
            meta,
            payload,
        }))
    }
}

/// What a registered query reads its records from: the storage query itself, or a query
/// extension's records made from it.
pub trait RecordSource: Iterator<Item = Result<Record>> + Send {
    /// Whether a strict condition's error ended the query.
    fn has_failed(&self) -> bool;
    /// The checked directives of the query's condition.
    fn directives(&self) -> &Directives;
    /// Whether this is a continuous query.
    fn is_following(&self) -> bool;
    /// Lets a continuous query read on from where each entry stopped.
    fn rewind(&mut self);
}

impl RecordSource for QueryIter {
    fn has_failed(&self) -> bool {
        QueryIter::has_failed(self)
    }

    fn directives(&self) -> &Directives {
        QueryIter::directives(self)
    }

    fn is_following(&self) -> bool {
        QueryIter::is_following(self)
    }

    fn rewind(&mut self) {
        QueryIter::rewind(self)
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
