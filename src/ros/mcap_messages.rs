//! The messages of one MCAP record, read with Foxglove's `mcap` crate as a stream: the
//! reader owns its state and is fed the record's bytes a slice at a time, so memory stays
//! at the largest chunk or record it meets, and a limit refuses any chunk or record that
//! claims more (a corrupt length, a compressed size of gigabytes) before it is buffered.

use mcap::sans_io::{LinearReaderOptions, MessageReadEvent, MessageReader};

use crate::storage::record::Payload;

/// An MCAP message as the extension reads it.
pub type McapMessage = mcap::Message<'static>;

/// Iterator over the messages of an MCAP file held in a payload.
pub struct McapMessages {
    reader: MessageReader,
    payload: Payload,
    fed: usize,
    done: bool,
}

impl McapMessages {
    /// A stream over `payload`, refusing any record or chunk longer than `max_record`
    /// bytes, compressed or not.
    pub fn new(payload: Payload, max_record: usize) -> Self {
        let options = LinearReaderOptions::default()
            .with_record_length_limit(max_record)
            .with_prevalidate_chunk_crcs(true);
        McapMessages {
            reader: MessageReader::new_with_options(options),
            payload,
            fed: 0,
            done: false,
        }
    }
}

impl Iterator for McapMessages {
    type Item = Result<McapMessage, String>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        loop {
            match self.reader.next_event() {
                None => {
                    self.done = true;
                    return None;
                }
                Some(Err(e)) => {
                    self.done = true;
                    return Some(Err(e.to_string()));
                }
                Some(Ok(MessageReadEvent::ReadRequest(want))) => {
                    let bytes = self.payload.as_slice();
                    let n = want.max(1).min(bytes.len() - self.fed).min(1 << 20);
                    self.reader
                        .insert(n)
                        .copy_from_slice(&bytes[self.fed..self.fed + n]);
                    self.reader.notify_read(n);
                    self.fed += n;
                }
                Some(Ok(MessageReadEvent::Message(message))) => return Some(Ok(message)),
            }
        }
    }
}
