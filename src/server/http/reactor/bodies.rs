//! Bodies in the poller: a connection whose admitted request is gathering its body is
//! read like a partial head, under the body deadlines, and handed to a handler thread
//! when the body is complete — or, when one body's buffer or all bodies' budget is full
//! (or the client waits for `100 Continue`), to one of the few streaming slots; without a
//! free slot it waits unread, first come first served.

use std::sync::atomic::Ordering;
use std::time::Instant;

use polling::Event;

use super::Reactor;
use crate::server::http::connection::Connection;
use crate::server::http::gather::Gathered;

impl Reactor {
    /// Decides what a connection gathering a body waits for next: complete, it goes to
    /// a handler thread; with its buffer full (or all bodies' buffers), to a streaming
    /// slot; otherwise it waits for more under its deadlines.
    pub(super) fn settle_body(&mut self, key: usize) {
        let Some(parked) = self.parked.get_mut(&key) else {
            return;
        };
        let Some(mut wait) = parked.conn.body_wait.take() else {
            return;
        };
        let pending = parked.conn.pending();
        let gathered = if wait.stream_at_once {
            Gathered::Full
        } else {
            wait.progress(&pending[wait.head_len..], self.limits.body_buffer)
        };
        self.buffered = self.buffered - parked.counted + pending.len();
        parked.counted = pending.len();
        let started = wait.started;
        parked.conn.body_wait = Some(wait);
        match gathered {
            Gathered::Complete => self.dispatch(key),
            Gathered::Full => self.stream_or_pause(key),
            Gathered::Waiting if self.buffered > self.limits.body_buffer_total => {
                log::debug!(
                    "bodies being gathered hold {} bytes, more than --http-body-buffer-total: streaming instead",
                    self.buffered
                );
                self.stream_or_pause(key);
            }
            Gathered::Waiting => {
                let due = (Instant::now() + self.limits.body_timeout)
                    .min(started + self.limits.body_deadline);
                self.set_body_due(key, due);
                let stream = &self.parked[&key].conn.stream;
                if self.poller.modify(stream, Event::readable(key)).is_err() {
                    self.close(key, None);
                }
            }
        }
    }

    /// Moves a gathering connection's place in the body deadlines to `due`.
    fn set_body_due(&mut self, key: usize, due: Instant) {
        let Some(parked) = self.parked.get_mut(&key) else {
            return;
        };
        if let Some(old) = parked.body_due.replace(due) {
            self.bodies.remove(&(old, key));
        }
        self.bodies.insert((due, key));
    }

    /// Hands a connection whose body does not fit its buffer to a handler thread to
    /// stream, if a streaming slot is free; otherwise it waits, unread, for one (under
    /// its total deadline only: the wait is the server's, not the client's).
    fn stream_or_pause(&mut self, key: usize) {
        if self.streaming < self.limits.streaming_bodies {
            self.streaming += 1;
            if let Some(parked) = self.parked.get_mut(&key) {
                parked.conn.streaming = true;
            }
            self.dispatch(key);
            return;
        }
        let Some(parked) = self.parked.get_mut(&key) else {
            return;
        };
        if parked.paused {
            return;
        }
        parked.paused = true;
        let Some(started) = parked.conn.body_wait.as_ref().map(|w| w.started) else {
            return;
        };
        log::debug!(
            "{}: waiting for a thread to stream its body",
            parked.conn.peer
        );
        self.set_body_due(key, started + self.limits.body_deadline);
        self.stream_queue.push_back(key);
    }

    /// A connection back from a handler thread gives back its streaming slot, if it
    /// held one, to the first connection waiting for one.
    pub(super) fn end_streaming(&mut self, conn: &mut Connection) {
        if !std::mem::take(&mut conn.streaming) {
            return;
        }
        self.streaming -= 1;
        while self.streaming < self.limits.streaming_bodies {
            let Some(key) = self.stream_queue.pop_front() else {
                break;
            };
            let Some(parked) = self.parked.get_mut(&key) else {
                continue;
            };
            if std::mem::take(&mut parked.paused) {
                self.stream_or_pause(key);
            }
        }
    }

    /// A connection back from a handler thread, admitted, to gather its body.
    pub(super) fn gather(&mut self, mut conn: Connection) {
        self.end_streaming(&mut conn);
        if self.stop.load(Ordering::SeqCst) || conn.stream.set_nonblocking(true).is_err() {
            let _ = self.poller.delete(&conn.stream);
            return;
        }
        conn.take_decrypted();
        let key = self.insert(conn, None);
        self.settle_body(key);
    }
}
