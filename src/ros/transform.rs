//! The `transform` step of `#ext.ros` (ReductROS's query format): each MCAP record is
//! written again as new MCAP episodes holding only the topics `include` and `exclude`
//! select (regular expressions, searched in the topic name: `^…$` for an exact one), a new
//! episode begun whenever the one being written reaches `duration` (from its first
//! message's log time) or `size` (bytes of message data, uncompressed).
//!
//! An episode keeps each message's channel, schema, sequence and times; it is written
//! with zstd chunks by the `mcap` crate, timestamped with its first message's log time,
//! labeled as its source record. Episodes are cut within one source record: a record is
//! a chunk of a recording, and an episode never waits for the next record to finish.
//! An episode is held in memory until it is cut, so `size` is capped at
//! [`MAX_EPISODE_BYTES`].

use std::collections::{BTreeMap, HashMap};
use std::io::Cursor;

use regex::Regex;
use serde_json::Value as Json;

use super::mcap_messages::{ChannelInfo, MessageView};
use crate::storage::record::{Labels, RecordMeta};

/// Most bytes of message data one episode holds (its `size` when none is asked for).
pub const MAX_EPISODE_BYTES: u64 = 64 << 20;

/// The `transform` parameters of a query.
#[derive(Debug, Clone)]
pub struct TransformOptions {
    /// Topics kept: those matching any of these (all when empty).
    pub include: Vec<Regex>,
    /// Topics then dropped: those matching any of these.
    pub exclude: Vec<Regex>,
    /// Longest span of an episode, in ns of log time.
    pub duration_ns: Option<u64>,
    /// Most bytes of message data in an episode.
    pub size: u64,
}

fn patterns(value: &Json, what: &str) -> Result<Vec<Regex>, String> {
    let Json::Array(items) = value else {
        return Err(format!(
            "'transform.{what}' must be an array of regular expressions, not {value}"
        ));
    };
    items
        .iter()
        .map(|item| {
            let text = item.as_str().ok_or_else(|| {
                format!("'transform.{what}' holds {item}, not a regular expression")
            })?;
            Regex::new(text).map_err(|e| {
                // The crate's message spans lines (a caret under the pattern): one line,
                // for a header.
                let why = e
                    .to_string()
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ");
                format!("'transform.{what}': {text:?} is not a regular expression: {why}")
            })
        })
        .collect()
}

impl TransformOptions {
    /// Reads the `transform` object of a query; the error names the bad parameter.
    pub fn parse(json: &Json) -> Result<Self, String> {
        let Json::Object(map) = json else {
            return Err(format!("'transform' must be an object, not {json}"));
        };
        let mut options = TransformOptions {
            include: Vec::new(),
            exclude: Vec::new(),
            duration_ns: None,
            size: MAX_EPISODE_BYTES,
        };
        for (key, value) in map {
            match key.as_str() {
                "include" => options.include = patterns(value, "include")?,
                "exclude" => options.exclude = patterns(value, "exclude")?,
                "duration" => {
                    let text = value.as_str().ok_or_else(|| {
                        format!(
                            "'transform.duration' must be a duration such as \"1m\", not {value}"
                        )
                    })?;
                    let us = crate::duration::parse_duration(text)
                        .map_err(|e| format!("'transform.duration': {}", e.message()))?;
                    if us <= 0 {
                        return Err(format!(
                            "'transform.duration' must be positive, not {text:?}"
                        ));
                    }
                    options.duration_ns = Some(us as u64 * 1_000);
                }
                "size" => {
                    let text = value.as_str().ok_or_else(|| {
                        format!("'transform.size' must be a size such as \"100MB\", not {value}")
                    })?;
                    let size = crate::storage::condition::directives::parse_size(text)
                        .map_err(|e| format!("'transform.size': {e}"))?;
                    if size == 0 || size > MAX_EPISODE_BYTES {
                        return Err(format!(
                            "'transform.size' must be between 1 byte and {} MiB, not {text:?}",
                            MAX_EPISODE_BYTES >> 20
                        ));
                    }
                    options.size = size;
                }
                other => return Err(format!("unknown 'transform' parameter '{other}'")),
            }
        }
        Ok(options)
    }

    /// Whether the messages of `topic` go into the episodes.
    pub fn keeps(&self, topic: &str) -> bool {
        (self.include.is_empty() || self.include.iter().any(|r| r.is_match(topic)))
            && !self.exclude.iter().any(|r| r.is_match(topic))
    }
}

/// An episode: its record's metadata and MCAP bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct Episode {
    /// Timestamp (its first message's log time, µs), labels, `application/mcap`, size.
    pub meta: RecordMeta,
    /// The MCAP file.
    pub mcap: Vec<u8>,
}

/// The episode being written.
struct Open {
    writer: mcap::Writer<Cursor<Vec<u8>>>,
    /// Source channel (by topic) → the episode's channel id.
    channels: HashMap<String, u16>,
    first_ns: u64,
    bytes: u64,
}

/// Writes the kept messages of one source record into episodes.
pub struct Transformer {
    options: TransformOptions,
    labels: Labels,
    open: Option<Open>,
}

impl Transformer {
    /// A transformer with `options` for the record labeled `labels`.
    pub fn new(options: TransformOptions, labels: Labels) -> Self {
        Transformer {
            options,
            labels,
            open: None,
        }
    }

    /// Adds `message` if its topic is kept; returns the episode it completed, if it
    /// begins a new one.
    pub fn add(&mut self, message: &MessageView) -> Result<Option<Episode>, String> {
        if !self.options.keeps(&message.channel.topic) {
            return Ok(None);
        }
        let size = message.data.len() as u64;
        let cut = self.open.as_ref().is_some_and(|open| {
            let too_long = self
                .options
                .duration_ns
                .is_some_and(|d| message.log_time.saturating_sub(open.first_ns) >= d);
            too_long || open.bytes + size > self.options.size
        });
        let done = match cut {
            true => self.finish()?,
            false => None,
        };
        let open = match &mut self.open {
            Some(open) => open,
            None => self.open.insert(Open {
                writer: mcap::WriteOptions::new()
                    .profile("ros2")
                    .create(Cursor::new(Vec::new()))
                    .map_err(|e| format!("starting an episode: {e}"))?,
                channels: HashMap::new(),
                first_ns: message.log_time,
                bytes: 0,
            }),
        };
        let channel = match open.channels.get(&message.channel.topic) {
            Some(&id) => id,
            None => {
                let id = add_channel(&mut open.writer, message.channel)?;
                open.channels.insert(message.channel.topic.clone(), id);
                id
            }
        };
        let header = mcap::records::MessageHeader {
            channel_id: channel,
            sequence: message.sequence,
            log_time: message.log_time,
            publish_time: message.publish_time,
        };
        open.writer
            .write_to_known_channel(&header, message.data)
            .map_err(|e| format!("writing an episode: {e}"))?;
        open.bytes += size;
        Ok(done)
    }

    /// The episode being written, finished; `None` if no message was kept since the last.
    pub fn finish(&mut self) -> Result<Option<Episode>, String> {
        let Some(mut open) = self.open.take() else {
            return Ok(None);
        };
        open.writer
            .finish()
            .map_err(|e| format!("finishing an episode: {e}"))?;
        let mcap = open.writer.into_inner().into_inner();
        Ok(Some(Episode {
            meta: RecordMeta {
                timestamp: open.first_ns / 1_000,
                labels: self.labels.clone(),
                content_type: "application/mcap".into(),
                size: mcap.len() as u64,
            },
            mcap,
        }))
    }
}

/// Declares `channel` (and its schema) in an episode; its id there.
fn add_channel(
    writer: &mut mcap::Writer<Cursor<Vec<u8>>>,
    channel: &ChannelInfo,
) -> Result<u16, String> {
    let fail = |e: mcap::McapError| format!("writing an episode: {e}");
    let schema = match &channel.schema {
        Some(s) => writer
            .add_schema(&s.name, &s.encoding, &s.data)
            .map_err(fail)?,
        None => 0,
    };
    writer
        .add_channel(
            schema,
            &channel.topic,
            &channel.message_encoding,
            &BTreeMap::new(),
        )
        .map_err(fail)
}
