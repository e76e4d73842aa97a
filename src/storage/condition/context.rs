//! `#ctx_before` / `#ctx_after`: context records around each match (`docs/conditions.md`, "Directives"). Every
//! record that reaches the condition enters a buffer, trimmed to the `before` span; the
//! whole buffer is emitted, in time order, when the record matched or falls inside the
//! `after` span of the latest match. No record is emitted twice.

use std::collections::VecDeque;

use super::directives::Span;

/// Most records a context buffer keeps: a `#ctx_before` window over dense data would
/// otherwise hold every record of an entry until a match (the oldest go first past it).
pub const MAX_CONTEXT_RECORDS: usize = 100_000;

/// The context buffer of one evaluation context; `T` is what the caller emits (a record
/// locator, a timestamp).
#[derive(Debug)]
pub struct Context<T> {
    before: Span,
    after: Span,
    buffer: VecDeque<(u64, T)>,
    after_left: i64,
    last_match: Option<u64>,
}

impl<T> Context<T> {
    /// A buffer for these spans (`None` is zero records).
    pub fn new(before: Option<Span>, after: Option<Span>) -> Self {
        Context {
            before: before.unwrap_or(Span::Records(0)),
            after: after.unwrap_or(Span::Records(0)),
            buffer: VecDeque::new(),
            after_left: 0,
            last_match: None,
        }
    }

    /// Offers the record at `ts` that did (`matched`) or did not match; appends what is to
    /// be emitted now to `out`.
    pub fn offer(&mut self, ts: u64, item: T, matched: bool, out: &mut VecDeque<T>) {
        self.buffer.push_back((ts, item));
        match self.before {
            Span::Records(n) => {
                while self.buffer.len() as u64 > n.saturating_add(1) {
                    self.buffer.pop_front();
                }
            }
            Span::Micros(w) => {
                while self
                    .buffer
                    .front()
                    .is_some_and(|(oldest, _)| ts.saturating_sub(*oldest) > w)
                {
                    self.buffer.pop_front();
                }
            }
        }
        while self.buffer.len() > MAX_CONTEXT_RECORDS {
            self.buffer.pop_front();
        }
        let emit = match self.after {
            Span::Records(m) => {
                self.after_left = self.after_left.saturating_sub(1);
                if matched {
                    self.after_left = i64::try_from(m).unwrap_or(i64::MAX);
                }
                self.after_left >= 0
            }
            Span::Micros(v) => {
                if matched {
                    self.last_match = Some(ts);
                }
                self.last_match.is_some_and(|t| t.saturating_add(v) >= ts)
            }
        };
        if emit {
            out.extend(self.buffer.drain(..).map(|(_, item)| item));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(before: Option<Span>, after: Option<Span>, records: &[(u64, bool)]) -> Vec<u64> {
        let mut ctx = Context::new(before, after);
        let mut out = VecDeque::new();
        for &(ts, matched) in records {
            ctx.offer(ts, ts, matched, &mut out);
        }
        out.into_iter().collect()
    }

    #[test]
    fn context_counts_and_windows() {
        let day = 86_400_000_000;
        // The six records of the reference, matching n = 4 (or 5).
        let ts = [
            0,
            5_400_000_000,
            day,
            day + 3_600_000_000,
            2 * day,
            3 * day + day / 2,
        ];
        let at = |n: usize| {
            ts.iter()
                .enumerate()
                .map(|(i, t)| (*t, i + 1 == n))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(Some(Span::Records(1)), None, &at(4)), [ts[2], ts[3]]);
        assert_eq!(run(None, Some(Span::Records(1)), &at(4)), [ts[3], ts[4]]);
        assert_eq!(
            run(Some(Span::Micros(day)), None, &at(5)),
            [ts[2], ts[3], ts[4]]
        );
        assert_eq!(run(None, Some(Span::Micros(day)), &at(4)), [ts[3], ts[4]]);
        assert_eq!(run(None, None, &at(2)), [ts[1]]);
    }
}
