//! The processing window of one run (docs/lifecycle.md).
//!
//! A run always starts from the oldest matching record — old data can become eligible
//! again (a write into a compressed block, a label change matching `when`) — and stops at
//! `min(last_processed_ts + window, effective_stop)`, where
//! `effective_stop = min(latest + 1, now - older_than + 1)`. Without system events there is
//! no saved progress and the window is the whole eligible range.

/// The range one run processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Inclusive start: the oldest matching record.
    pub start: u64,
    /// Exclusive stop.
    pub stop: u64,
    /// The window reaches the effective stop of the data visible now.
    pub caught_up: bool,
}

/// What the window is computed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowInput {
    /// Oldest and latest record over the matching entries; `None` when they are empty.
    pub range: Option<(u64, u64)>,
    /// Now, in µs.
    pub now: u64,
    /// The policy's `older_than` in µs.
    pub older_than: u64,
    /// `Some(last_processed_ts)` (itself optional) when system events keep progress;
    /// `None` when they are off and the whole eligible range is processed.
    pub progress: Option<Option<u64>>,
    /// How far one run advances, in µs.
    pub window: u64,
    /// With progress saved: the first instant at or after the marker that holds a
    /// record (from the index), `None` when none does. The window advances from there,
    /// so an empty stretch of time of any length costs no run.
    pub next_record: Option<u64>,
}

/// Where eligible data ends: after the latest record, and no later than `older_than`
/// before now.
pub fn effective_stop(latest: u64, now: u64, older_than: u64) -> u64 {
    latest
        .saturating_add(1)
        .min(now.saturating_sub(older_than).saturating_add(1))
}

/// The window of the next run, or `None` when there is nothing to look at.
pub fn processing_window(input: &WindowInput) -> Option<Window> {
    let (oldest, latest) = input.range?;
    let effective_stop = effective_stop(latest, input.now, input.older_than);
    let stop = match input.progress {
        None => effective_stop,
        // Nothing after the marker: the rest of the eligible range at once.
        Some(Some(_)) if input.next_record.is_none() => effective_stop,
        Some(last) => last
            .unwrap_or(oldest)
            .max(input.next_record.unwrap_or(0))
            .saturating_add(input.window)
            .min(effective_stop),
    };
    let stop = stop.max(oldest);
    Some(Window {
        start: oldest,
        stop,
        caught_up: stop >= effective_stop,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: u64 = 3_600_000_000;

    fn input(range: Option<(u64, u64)>, progress: Option<Option<u64>>) -> WindowInput {
        WindowInput {
            range,
            now: 1000 * H,
            older_than: 24 * H,
            progress,
            window: 10 * H,
            next_record: progress.flatten(),
        }
    }

    #[test]
    fn windows_follow_the_reference() {
        // Empty data: nothing to do.
        assert_eq!(processing_window(&input(None, Some(None))), None);
        // No events: the whole eligible range at once.
        let w = processing_window(&input(Some((100 * H, 990 * H)), None)).unwrap();
        assert_eq!(
            w,
            Window {
                start: 100 * H,
                stop: 976 * H + 1,
                caught_up: true
            }
        );
        // Events but no progress yet: one window from the oldest record.
        let w = processing_window(&input(Some((100 * H, 990 * H)), Some(None))).unwrap();
        assert_eq!(
            w,
            Window {
                start: 100 * H,
                stop: 110 * H,
                caught_up: false
            }
        );
        // With progress: advance from it, but always start at the oldest record.
        let w = processing_window(&input(Some((100 * H, 990 * H)), Some(Some(500 * H)))).unwrap();
        assert_eq!(
            w,
            Window {
                start: 100 * H,
                stop: 510 * H,
                caught_up: false
            }
        );
        // Progress near the cutoff: clamped and caught up.
        let w = processing_window(&input(Some((100 * H, 990 * H)), Some(Some(970 * H)))).unwrap();
        assert_eq!(
            w,
            Window {
                start: 100 * H,
                stop: 976 * H + 1,
                caught_up: true
            }
        );
        // Latest record before the age cutoff: the stop is latest + 1.
        let w = processing_window(&input(Some((100 * H, 200 * H)), None)).unwrap();
        assert_eq!(w.stop, 200 * H + 1);
        // A gap after the marker: the window starts where records resume.
        let mut gap = input(Some((100 * H, 990 * H)), Some(Some(200 * H)));
        gap.next_record = Some(800 * H);
        assert_eq!(processing_window(&gap).unwrap().stop, 810 * H);
        gap.next_record = None;
        let w = processing_window(&gap).unwrap();
        assert_eq!((w.stop, w.caught_up), (976 * H + 1, true));
        // All data younger than older_than: an empty window that is caught up.
        let w = processing_window(&input(Some((990 * H, 995 * H)), Some(None))).unwrap();
        assert_eq!(
            w,
            Window {
                start: 990 * H,
                stop: 990 * H,
                caught_up: true
            }
        );
    }
}
