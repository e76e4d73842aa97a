//! Where a run's window ends besides the policy's own window: the first record after the
//! progress (so a gap costs no run) and the work cap (at most so many records a run).

use std::sync::Arc;

use crate::error::Result;
use crate::lifecycle::progress::Window;
use crate::storage::entry::RecordSpan;
use crate::storage::{Entry, QueryIter, QueryOptions};

/// The first record at or after `from` in the selected entries: a metadata query that
/// stops at its first record, so it reads at most the one block per entry holding it.
pub(super) fn next_record_from(selected: Vec<Arc<Entry>>, from: u64) -> Result<Option<u64>> {
    let query = QueryIter::new(
        selected,
        &QueryOptions {
            start: Some(from),
            only_metadata: true,
            ..Default::default()
        },
    )?;
    // A damaged block reports its error and is read around: the next record counts.
    Ok(query
        .filter_map(|r| r.ok())
        .map(|r| r.meta.timestamp)
        .next())
}

/// Where a window from the marker `from` to `stop` must end so that it takes on at most
/// `budget` records after the marker (whole spans, at least one): `None` when all of
/// them fit.
pub(super) fn work_cap(spans: &mut [RecordSpan], from: u64, stop: u64, budget: u64) -> Option<u64> {
    spans.sort_by_key(|s| s.first);
    let mut taken = 0u64;
    for (i, span) in spans.iter().filter(|s| s.first < stop).enumerate() {
        taken += span.records;
        if taken > budget {
            // The span that passes the budget waits for the next run, unless it is the
            // first, or began before the marker (no window end can leave it out): then
            // it is taken whole, so every run moves past something.
            let cap = if i == 0 || span.first <= from {
                span.last.saturating_add(1)
            } else {
                span.first
            };
            let cap = cap.max(from.saturating_add(1));
            return (cap < stop).then_some(cap);
        }
    }
    None
}

/// The window of an action that takes whole blocks (compress, tier): one ending inside an
/// eligible block takes all of it, or a backlog whose blocks span more than a window
/// would never move.
pub(super) fn whole_blocks(mut window: Window, spans: &[RecordSpan], eligible: u64) -> Window {
    let reach = spans
        .iter()
        .filter(|s| s.first < window.stop && s.last >= window.stop && s.last < eligible)
        .map(|s| s.last + 1)
        .max();
    if let Some(reach) = reach {
        window.stop = reach;
        window.caught_up = reach >= eligible;
    }
    window
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(first: u64, last: u64, records: u64) -> RecordSpan {
        RecordSpan {
            first,
            last,
            records,
        }
    }

    #[test]
    fn a_window_ends_where_its_records_pass_the_budget() {
        let mut spans = vec![
            span(300, 399, 100),
            span(100, 199, 100),
            span(200, 299, 100),
        ];
        // 250 records: the first two spans; the third waits.
        assert_eq!(work_cap(&mut spans, 100, 1000, 250), Some(300));
        assert_eq!(work_cap(&mut spans, 100, 1000, 150), Some(200));
        // Within the budget, or the cap past the window: no change.
        assert_eq!(work_cap(&mut spans, 100, 1000, 300), None);
        assert_eq!(work_cap(&mut spans, 100, 200, 150), None);
        // One span over the budget still makes progress.
        assert_eq!(work_cap(&mut spans, 100, 1000, 10), Some(200));
        // A span begun before the marker is taken whole: the window always moves on.
        let mut straddling = vec![span(50, 150, 100), span(60, 500, 300), span(200, 210, 5)];
        assert_eq!(work_cap(&mut straddling, 100, 1000, 150), Some(501));
    }
}
