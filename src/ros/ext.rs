//! The parameters of the `ros` extension in a query (`{"#ext": {"ros": {...}, "when":
//! {...}}}` in `when`, or the body's `ext`), read into a step.

use serde_json::Value as Json;

use super::extract::ExtractOptions;
use crate::storage::condition::Condition;

/// One `ros` step of a query.
#[derive(Clone)]
pub struct RosStep {
    /// What to extract.
    pub extract: ExtractOptions,
    /// The step's own condition, evaluated strictly on the records it makes.
    pub when: Option<Condition>,
}

/// Reads the `ros` extension's parameters `params` and the step's condition `when`; the
/// error says which parameter is wrong.
pub fn ros_step(params: &Json, when: Option<&Json>) -> Result<RosStep, String> {
    let Json::Object(map) = params else {
        return Err(format!(
            "the 'ros' extension's parameters must be an object, not {params}"
        ));
    };
    let mut extract = None;
    for (key, value) in map {
        match key.as_str() {
            "extract" => extract = Some(ExtractOptions::parse(value)?),
            "transform" => {
                return Err(
                    "'ros.transform' is not supported by this server; 'ros.extract' is".into(),
                );
            }
            other => return Err(format!("unknown 'ros' parameter '{other}'")),
        }
    }
    let extract = extract.ok_or_else(|| "the 'ros' extension needs 'extract'".to_string())?;
    let when = when
        .map(|w| Condition::parse(w, true))
        .transpose()
        .map_err(|e| e.message().to_string())?;
    Ok(RosStep { extract, when })
}
