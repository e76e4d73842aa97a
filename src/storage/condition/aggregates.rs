//! Aggregation operators, which keep state between the records that reach them:
//! `$each_n` (every n-th), `$each_t` (at most one per interval), `$limit` (stop after N:
//! an interrupt that ends the entry's query, not an error) and `$gate` (open for a window
//! on a rising edge). The state of one evaluation context (a query's entry, a removal's
//! entry, a lifecycle run's entry) is a [`State`]; the condition itself stays immutable.

use super::Fault;
use super::expr::Op;
use super::value::Value;

/// The state of one aggregate. Serialisable: a delete policy carries it from one run to
/// the next, so each record is judged once (`lifecycle/action/delete/thinning.rs`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Slot {
    /// `$each_n`: how many records reached it.
    EachN(i64),
    /// `$each_t`: the last selected timestamp.
    EachT(Option<i64>),
    /// `$limit`: how many records reached it.
    Limit(i64),
    /// `$gate`.
    Gate(Gate),
}

/// `$gate`'s state.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Gate {
    deadline: Option<i64>,
    previous: bool,
    reset: bool,
    last_ts: Option<i64>,
}

/// The aggregates' state for one evaluation context.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct State(pub Vec<Slot>);

impl State {
    /// Fresh state for the aggregates of a condition.
    pub fn new(slots: &[Op]) -> State {
        State(
            slots
                .iter()
                .map(|op| match op {
                    Op::EachN => Slot::EachN(0),
                    Op::EachT => Slot::EachT(None),
                    Op::Limit => Slot::Limit(0),
                    _ => Slot::Gate(Gate::default()),
                })
                .collect(),
        )
    }

    /// Whether this state belongs to a condition with these aggregates (a saved state
    /// is only resumed by the condition it came from).
    pub fn fits(&self, slots: &[Op]) -> bool {
        self.0.len() == slots.len()
            && self.0.iter().zip(slots).all(|(slot, op)| {
                matches!(
                    (slot, op),
                    (Slot::EachN(_), Op::EachN)
                        | (Slot::EachT(_), Op::EachT)
                        | (Slot::Limit(_), Op::Limit)
                        | (Slot::Gate(_), Op::Gate)
                )
            })
    }
}

fn slot_mismatch() -> Fault<'static> {
    Fault::unprocessable("internal: aggregate state does not match the condition".to_string())
}

/// An interval operand: a Duration in µs, anything else in seconds; negative is 0.
fn interval_micros(v: &Value) -> Result<f64, Fault<'static>> {
    let micros = match v {
        Value::Duration(us) => *us as f64,
        other => other.to_float()? * 1e6,
    };
    Ok(micros.max(0.0))
}

/// Counts a record reaching `$each_n` or `$limit`; returns the new count.
pub fn count(state: &mut State, slot: usize) -> Result<i64, Fault<'static>> {
    match state.0.get_mut(slot) {
        Some(Slot::EachN(c) | Slot::Limit(c)) => {
            *c = c.saturating_add(1);
            Ok(*c)
        }
        _ => Err(slot_mismatch()),
    }
}

/// `$each_n` after counting: whether the count is a multiple of n.
pub fn each_n(count: i64, n: &Value) -> Result<bool, Fault<'static>> {
    let n = n.to_int()?;
    if n == 0 {
        return Err(Fault::unprocessable(
            "Value '0' is not a valid operand for $each_n".to_string(),
        ));
    }
    Ok(count.unsigned_abs().is_multiple_of(n.unsigned_abs()))
}

/// `$limit` after counting: true while within N, an interrupt past it.
pub fn limit(count: i64, n: &Value) -> Result<bool, Fault<'static>> {
    if count > n.to_int()? {
        Err(Fault::Interrupt)
    } else {
        Ok(true)
    }
}

/// `$each_t`, first step at time `t`: the first record sets the reference time.
pub fn each_t_arm(state: &mut State, slot: usize, t: i64) -> Result<(), Fault<'static>> {
    match state.0.get_mut(slot) {
        Some(Slot::EachT(last)) => {
            last.get_or_insert(t);
            Ok(())
        }
        _ => Err(slot_mismatch()),
    }
}

/// `$each_t`, second step, with the interval evaluated: whether `t` is at least one
/// interval after the last selected record (time going backwards restarts from `t`).
pub fn each_t_decide(
    state: &mut State,
    slot: usize,
    t: i64,
    interval: &Value,
) -> Result<bool, Fault<'static>> {
    let interval = interval_micros(interval)?;
    let Some(Slot::EachT(Some(last))) = state.0.get_mut(slot) else {
        return Err(slot_mismatch());
    };
    if t < *last {
        *last = t;
        return Ok(false);
    }
    let due = (t - *last) as f64 >= interval;
    if due {
        *last = t;
    }
    Ok(due)
}

/// `$gate`, first step at time `t`: time going backwards clears the gate.
pub fn gate_arm(state: &mut State, slot: usize, t: i64) -> Result<(), Fault<'static>> {
    let Some(Slot::Gate(g)) = state.0.get_mut(slot) else {
        return Err(slot_mismatch());
    };
    if g.last_ts.is_some_and(|last| t < last) {
        g.deadline = None;
        g.previous = false;
        g.reset = false;
    }
    g.last_ts = Some(t);
    Ok(())
}

/// `$gate`, second step, with the window and the input evaluated: open on a rising edge
/// for `window`, then closed until the input has been false once.
pub fn gate_decide(
    state: &mut State,
    slot: usize,
    t: i64,
    window: &Value,
    input: &Value,
) -> Result<bool, Fault<'static>> {
    let window = interval_micros(window)?;
    let open = input.truthy();
    let Some(Slot::Gate(g)) = state.0.get_mut(slot) else {
        return Err(slot_mismatch());
    };
    if g.deadline.is_some_and(|d| t >= d) {
        g.deadline = None;
        g.reset = true;
    }
    if g.reset {
        if !open {
            g.reset = false;
        }
        g.previous = open;
        return Ok(false);
    }
    if g.deadline.is_none() && !g.previous && open {
        g.deadline = Some(t.saturating_add(window as i64));
    }
    let result = open && g.deadline.is_some_and(|d| t < d);
    g.previous = open;
    Ok(result)
}
