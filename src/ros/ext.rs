//! The parameters of the `ros` extension in a query (`{"#ext": {"ros": {...}, "when":
//! {...}}}` in `when`, or the body's `ext`), read into a step.

use serde_json::Value as Json;

use super::extract::ExtractOptions;
use super::transform::TransformOptions;
use crate::storage::condition::Condition;

/// What a `ros` step makes of each MCAP record.
#[derive(Debug, Clone)]
pub enum RosAction {
    /// JSON records of one topic's messages.
    Extract(ExtractOptions),
    /// New MCAP episodes of some topics.
    Transform(TransformOptions),
}

/// One `ros` step of a query.
#[derive(Clone)]
pub struct RosStep {
    /// What it makes.
    pub action: RosAction,
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
    let mut action = None;
    for (key, value) in map {
        let parsed = match key.as_str() {
            "extract" => RosAction::Extract(ExtractOptions::parse(value)?),
            "transform" => RosAction::Transform(TransformOptions::parse(value)?),
            other => return Err(format!("unknown 'ros' parameter '{other}'")),
        };
        if action.replace(parsed).is_some() {
            return Err("the 'ros' extension takes 'extract' or 'transform', not both".into());
        }
    }
    let action =
        action.ok_or_else(|| "the 'ros' extension needs 'extract' or 'transform'".to_string())?;
    let when = when
        .map(|w| Condition::parse(w, true).map(Condition::resolving_computed))
        .transpose()
        .map_err(|e| e.message().to_string())?;
    Ok(RosStep { action, when })
}
