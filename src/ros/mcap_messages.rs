//! The messages of one MCAP record, read with Foxglove's `mcap` crate as a stream: its
//! sans-io reader owns its state and is fed the record's bytes a slice at a time, so
//! memory stays at the largest chunk or record it meets, and a limit refuses any chunk or
//! record that claims more (a corrupt length, a compressed size of gigabytes) before it is
//! buffered.
//!
//! Each message is lent to the caller where the reader holds it, never copied: a
//! recording is mostly camera frames, and extracting its IMU topic must not allocate a
//! megabyte per frame it skips.

use std::collections::HashMap;
use std::sync::Arc;

use mcap::records::{Record, op};
use mcap::sans_io::{LinearReadEvent, LinearReader, LinearReaderOptions};

use crate::storage::record::Payload;

/// A schema as the recording declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaInfo {
    /// Its name (`sensor_msgs/msg/Imu`).
    pub name: String,
    /// How its text is written (`ros2msg`).
    pub encoding: String,
    /// Its definition.
    pub data: Vec<u8>,
}

/// A channel (a topic) as the recording declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelInfo {
    /// The topic.
    pub topic: String,
    /// How its messages are encoded (`cdr`).
    pub message_encoding: String,
    /// Its messages' schema, if it has one.
    pub schema: Option<Arc<SchemaInfo>>,
}

/// One message, lent by [`McapMessages::next_message`].
pub struct MessageView<'m> {
    /// Its channel.
    pub channel: &'m ChannelInfo,
    /// Its sequence number.
    pub sequence: u32,
    /// When it was logged (ns).
    pub log_time: u64,
    /// When it was published (ns).
    pub publish_time: u64,
    /// Its encoded bytes.
    pub data: &'m [u8],
}

/// The messages of an MCAP file held in a payload.
pub struct McapMessages {
    reader: LinearReader,
    payload: Payload,
    fed: usize,
    done: bool,
    schemas: HashMap<u16, Arc<SchemaInfo>>,
    channels: HashMap<u16, ChannelInfo>,
}

impl McapMessages {
    /// A stream over `payload`, refusing any record or chunk longer than `max_record`
    /// bytes, compressed or not.
    pub fn new(payload: Payload, max_record: usize) -> Self {
        let options = LinearReaderOptions::default()
            .with_record_length_limit(max_record)
            .with_prevalidate_chunk_crcs(true);
        McapMessages {
            reader: LinearReader::new_with_options(options),
            payload,
            fed: 0,
            done: false,
            schemas: HashMap::new(),
            channels: HashMap::new(),
        }
    }

    /// Lends the next message to `f` and returns what it made of it; `None` at the end of
    /// the recording's data, an error (then the end) where it cannot be read.
    pub fn next_message<R>(
        &mut self,
        f: impl FnOnce(MessageView<'_>) -> R,
    ) -> Option<Result<R, String>> {
        if self.done {
            return None;
        }
        let result = self.advance(f);
        if !matches!(result, Some(Ok(_))) {
            self.done = true;
        }
        result
    }

    fn advance<R>(&mut self, f: impl FnOnce(MessageView<'_>) -> R) -> Option<Result<R, String>> {
        loop {
            let (opcode, data) = match self.reader.next_event()? {
                Err(e) => return Some(Err(e.to_string())),
                Ok(LinearReadEvent::ReadRequest(want)) => {
                    let bytes = self.payload.as_slice();
                    let n = want.max(1).min(bytes.len() - self.fed).min(1 << 20);
                    self.reader
                        .insert(n)
                        .copy_from_slice(&bytes[self.fed..self.fed + n]);
                    self.reader.notify_read(n);
                    self.fed += n;
                    continue;
                }
                Ok(LinearReadEvent::Record { opcode, data }) => (opcode, data),
            };
            match opcode {
                // The summary after it repeats what the data declared.
                op::DATA_END => return None,
                op::SCHEMA | op::CHANNEL | op::MESSAGE => {}
                _ => continue,
            }
            let record = match mcap::parse_record(opcode, data) {
                Ok(record) => record,
                Err(e) => return Some(Err(e.to_string())),
            };
            match record {
                Record::Schema { header, data } => {
                    let schema = SchemaInfo {
                        name: header.name,
                        encoding: header.encoding,
                        data: data.into_owned(),
                    };
                    self.schemas.insert(header.id, Arc::new(schema));
                }
                Record::Channel(channel) => {
                    let schema = match channel.schema_id {
                        0 => None,
                        id => match self.schemas.get(&id) {
                            Some(schema) => Some(schema.clone()),
                            None => {
                                return Some(Err(format!(
                                    "channel '{}' names schema {id}, which the recording does not define before it",
                                    channel.topic
                                )));
                            }
                        },
                    };
                    let info = ChannelInfo {
                        topic: channel.topic,
                        message_encoding: channel.message_encoding,
                        schema,
                    };
                    self.channels.insert(channel.id, info);
                }
                Record::Message { header, data } => {
                    let Some(channel) = self.channels.get(&header.channel_id) else {
                        return Some(Err(format!(
                            "message {} names channel {}, which the recording does not define before it",
                            header.sequence, header.channel_id
                        )));
                    };
                    return Some(Ok(f(MessageView {
                        channel,
                        sequence: header.sequence,
                        log_time: header.log_time,
                        publish_time: header.publish_time,
                        data: &data,
                    })));
                }
                _ => {}
            }
        }
    }
}
