//! What a compression is asked to do: the window of blocks it covers
//! ([`CompressWindow`], all an estimate needs) and, for a run, the pool it runs on and
//! what it tells its caller ([`CompressRequest`]).

use std::ops::Range;

use super::CompressPool;
use crate::storage::format::codec::Codec;

/// The blocks a compression covers: those of the entries matching `entries` whose
/// records all lie in `[start, stop)` and whose codec is weaker than `target`.
#[derive(Clone, Copy, Debug)]
pub struct CompressWindow<'a> {
    /// The entries (names or patterns, as a policy's `entries`).
    pub entries: &'a [String],
    /// The window's start (µs, inclusive).
    pub start: u64,
    /// The window's stop (µs, exclusive).
    pub stop: u64,
    /// The codec the blocks end up in.
    pub target: Codec,
}

impl<'a> CompressWindow<'a> {
    /// The blocks of `entries` inside `window` (µs) to bring to `target`.
    pub fn new(entries: &'a [String], window: Range<u64>, target: Codec) -> CompressWindow<'a> {
        CompressWindow {
            entries,
            start: window.start,
            stop: window.end,
            target,
        }
    }
}

/// A compression run: its window, the pool that compresses, when to stop and whom to
/// tell. [`CompressRequest::new`] is the common case (never cancelled, nobody told).
#[derive(Clone, Copy)]
pub struct CompressRequest<'a> {
    /// The blocks it covers.
    pub window: CompressWindow<'a>,
    /// The threads that compress.
    pub pool: &'a CompressPool,
    /// Asked between the parts the run writes back (e.g. `&|| flag.load(Relaxed)`);
    /// once it says yes, the run commits what it finished and stops.
    pub cancel: &'a dyn Fn() -> bool,
    /// Told `(entry, bytes before)` as each block is written: a progress bar's steps.
    pub on_block: &'a (dyn Fn(&str, u64) + Sync),
}

impl<'a> CompressRequest<'a> {
    /// `window` compressed on `pool`, never cancelled, with nobody told.
    pub fn new(window: CompressWindow<'a>, pool: &'a CompressPool) -> CompressRequest<'a> {
        CompressRequest {
            window,
            pool,
            cancel: &|| false,
            on_block: &|_, _| {},
        }
    }
}
