//! A policy's `when` as compact JSON text. A policy lives as long as the server and is
//! loaded at every start, so its condition is held once as text (shared by the stored
//! definition, the running policy and its parsed condition's source) rather than as a
//! JSON tree, which takes several times its text in memory.

use std::fmt;
use std::sync::Arc;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::{Error, Result};

/// The `when` of a policy: compact JSON text, shown and stored as the JSON it is.
#[derive(Clone, PartialEq, Eq)]
pub struct WhenJson(Arc<str>);

impl WhenJson {
    /// The compact text of `value`.
    pub fn new(value: &serde_json::Value) -> Self {
        WhenJson(value.to_string().into())
    }

    /// The compact JSON text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The text, shared.
    pub fn shared(&self) -> Arc<str> {
        self.0.clone()
    }

    /// The condition as a JSON tree again (for parsing it).
    pub fn value(&self) -> Result<serde_json::Value> {
        serde_json::from_str(&self.0)
            .map_err(|e| Error::unprocessable(format!("Invalid JSON in 'when': {e}")))
    }
}

impl From<serde_json::Value> for WhenJson {
    fn from(value: serde_json::Value) -> Self {
        WhenJson::new(&value)
    }
}

impl fmt::Display for WhenJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for WhenJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WhenJson({})", self.0)
    }
}

impl Serialize for WhenJson {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        // Written as the JSON it is, not as a string holding JSON.
        let raw: &serde_json::value::RawValue =
            serde_json::from_str(&self.0).map_err(serde::ser::Error::custom)?;
        raw.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for WhenJson {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        // Through a tree, so any JSON form (and any deserializer) gives the same compact
        // text; the tree is dropped at once.
        let value = serde_json::Value::deserialize(deserializer).map_err(D::Error::custom)?;
        Ok(WhenJson::new(&value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_compact_and_written_back_as_json() {
        let when: WhenJson =
            serde_json::from_str(r#"{ "&a" : { "$eq" : 1 } , "&b": [1, 2] }"#).unwrap();
        assert_eq!(when.as_str(), r#"{"&a":{"$eq":1},"&b":[1,2]}"#);
        let outer = serde_json::json!({ "when": serde_json::to_value(&when).unwrap() });
        assert_eq!(outer["when"]["&a"]["$eq"], 1);
        assert_eq!(
            serde_json::to_string(&Some(when.clone())).unwrap(),
            r#"{"&a":{"$eq":1},"&b":[1,2]}"#
        );
        assert_eq!(when.value().unwrap()["&b"][1], 2);
        assert_eq!(
            when,
            WhenJson::from(serde_json::json!({"&a": {"$eq": 1}, "&b": [1, 2]}))
        );
    }
}
