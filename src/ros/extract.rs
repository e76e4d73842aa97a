//! The `extract` step of `#ext.ros` (ReductROS's query format): each MCAP record becomes
//! one JSON record per message of one topic, decoded from CDR with the schema the
//! recording carries, timestamped from the message's `header.stamp` (else its log time),
//! labeled with the source record's labels and the computed `@topic`, `@schema`,
//! `@encoding` and the `as_label` paths.

use std::sync::Arc;

use serde_json::Value as Json;

use super::cdr::{self, Binary, Limits, path_key};
use super::mcap_messages::{MessageView, SchemaInfo};
use super::msgdef::MsgDefs;
use crate::storage::record::{Labels, RecordMeta};

/// Most bytes of JSON one extracted message may make.
pub const MAX_MESSAGE_JSON: usize = 64 << 20;

/// The `extract` parameters of a query.
#[derive(Debug, Clone, PartialEq)]
pub struct ExtractOptions {
    /// The topic whose messages are extracted.
    pub topic: String,
    /// Per field path, how a binary field is written.
    pub binary: Vec<(String, Binary)>,
    /// Computed labels: (label name with its `@`, field path).
    pub labels: Vec<(String, String)>,
}

impl ExtractOptions {
    /// Reads the `extract` object of a query; the error names the bad parameter.
    pub fn parse(json: &Json) -> Result<Self, String> {
        let Json::Object(map) = json else {
            return Err(format!("'extract' must be an object, not {json}"));
        };
        let mut topic = None;
        let mut binary = Vec::new();
        let mut labels = Vec::new();
        for (key, value) in map {
            match (key.as_str(), value) {
                ("topic", Json::String(t)) => topic = Some(t.clone()),
                ("topic", other) => {
                    return Err(format!("'extract.topic' must be a string, not {other}"));
                }
                ("encode", Json::Object(fields)) => {
                    for (field, how) in fields {
                        let how = match how.as_str() {
                            Some("base64") => Binary::Base64,
                            Some("jpeg") => Binary::Jpeg,
                            _ => {
                                return Err(format!(
                                    "'extract.encode.{field}' must be \"base64\" or \"jpeg\", not {how}"
                                ));
                            }
                        };
                        binary.push((path_key(field), how));
                    }
                }
                ("encode", other) => {
                    return Err(format!("'extract.encode' must be an object, not {other}"));
                }
                ("as_label", Json::Object(paths)) => {
                    for (name, path) in paths {
                        let Some(path) = path.as_str() else {
                            return Err(format!(
                                "'extract.as_label.{name}' must be a JSON path string, not {path}"
                            ));
                        };
                        let name = match name.strip_prefix('@') {
                            Some(bare) => format!("@{bare}"),
                            None => format!("@{name}"),
                        };
                        labels.push((name, path_key(path)));
                    }
                }
                ("as_label", other) => {
                    return Err(format!("'extract.as_label' must be an object, not {other}"));
                }
                (other, _) => return Err(format!("unknown 'extract' parameter '{other}'")),
            }
        }
        let topic = topic.ok_or_else(|| "'extract.topic' is required".to_string())?;
        Ok(ExtractOptions {
            topic,
            binary,
            labels,
        })
    }
}

/// An extracted message: its record's metadata and JSON payload.
#[derive(Debug, Clone, PartialEq)]
pub struct Extracted {
    /// Timestamp, labels, `application/json`, size.
    pub meta: RecordMeta,
    /// The message as JSON.
    pub json: Vec<u8>,
}

/// A schema parsed, or why it does not parse.
type Parsed = Arc<Result<MsgDefs, String>>;

/// Turns the messages of MCAP records into records, keeping each schema parsed once.
pub struct Extractor {
    options: ExtractOptions,
    capture: Vec<String>,
    /// The schemas met so far, parsed: a recording has a handful, each met on every
    /// message, so a message of a schema seen finds it without copying its text.
    schemas: Vec<(Arc<SchemaInfo>, Parsed)>,
}

impl Extractor {
    /// An extractor for `options`.
    pub fn new(options: ExtractOptions) -> Self {
        let capture = options.labels.iter().map(|(_, p)| p.clone()).collect();
        Extractor {
            options,
            capture,
            schemas: Vec::new(),
        }
    }

    /// Whether `message` is of the extracted topic.
    pub fn wants(&self, message: &MessageView) -> bool {
        message.channel.topic == self.options.topic
    }

    /// The record made of `message` (of the extracted topic), from a record labeled
    /// `source`; the error says why the message could not be decoded.
    pub fn extract(&mut self, message: &MessageView, source: &Labels) -> Result<Extracted, String> {
        let channel = message.channel;
        let Some(schema) = &channel.schema else {
            return Err(format!("topic '{}' has no schema", channel.topic));
        };
        if channel.message_encoding != "cdr" {
            return Err(format!(
                "topic '{}' is encoded as '{}'; only 'cdr' (ROS 2) is read",
                channel.topic, channel.message_encoding
            ));
        }
        if schema.encoding != "ros2msg" {
            return Err(format!(
                "schema '{}' is encoded as '{}'; only 'ros2msg' is read",
                schema.name, schema.encoding
            ));
        }
        let known = self
            .schemas
            .iter()
            .find(|(s, _)| Arc::ptr_eq(s, schema) || **s == **schema);
        let defs = match known {
            Some((_, defs)) => defs.clone(),
            None => {
                let text = String::from_utf8_lossy(&schema.data);
                let defs = Arc::new(MsgDefs::parse(&schema.name, &text));
                self.schemas.push((schema.clone(), defs.clone()));
                defs
            }
        };
        let defs = defs
            .as_ref()
            .as_ref()
            .map_err(|e| format!("schema '{}' does not parse: {e}", schema.name))?;
        let limits = Limits {
            max_json: MAX_MESSAGE_JSON,
            binary: &self.options.binary,
            capture: &self.capture,
        };
        let decoded = cdr::decode(defs, message.data, &limits).map_err(|e| {
            format!(
                "message {} of topic '{}' ({}) does not decode: {e}",
                message.sequence, channel.topic, schema.name
            )
        })?;
        let mut labels = source.clone();
        labels.insert("@topic".into(), channel.topic.clone());
        labels.insert("@schema".into(), schema.name.clone());
        labels.insert("@encoding".into(), channel.message_encoding.clone());
        for ((name, _), value) in self.options.labels.iter().zip(decoded.captured) {
            if let Some(value) = value {
                labels.insert(name.clone(), value);
            }
        }
        Ok(Extracted {
            meta: RecordMeta {
                timestamp: decoded.stamp_us.unwrap_or(message.log_time / 1_000),
                labels,
                content_type: "application/json".into(),
                size: decoded.json.len() as u64,
            },
            json: decoded.json,
        })
    }
}
