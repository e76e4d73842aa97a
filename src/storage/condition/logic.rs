//! Logical operators over any operands, read by truthiness, left to right with 1.21.5's
//! short-circuits: `$and` stops at the first falsy operand, `$or` and `$not` at the first
//! truthy one; `$xor` evaluates all. An operand not evaluated raises no error and advances
//! no aggregate.

use super::Fault;
use super::expr::{Expr, Op};

/// The result of `op` over `args`, evaluating each with `eval`.
pub fn logical<'a>(
    op: Op,
    args: &'a [Expr],
    mut eval: impl FnMut(&'a Expr) -> Result<bool, Fault<'a>>,
) -> Result<bool, Fault<'a>> {
    match op {
        Op::And => {
            for arg in args {
                if !eval(arg)? {
                    return Ok(false);
                }
            }
            Ok(true)
        }
        Op::Or => {
            for arg in args {
                if eval(arg)? {
                    return Ok(true);
                }
            }
            Ok(false)
        }
        Op::Not => {
            for arg in args {
                if eval(arg)? {
                    return Ok(false);
                }
            }
            Ok(true)
        }
        _ => {
            let mut truthy = 0usize;
            for arg in args {
                truthy += usize::from(eval(arg)?);
            }
            Ok(truthy == 1)
        }
    }
}
