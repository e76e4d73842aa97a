//! The one way a test gets a tool from outside Rust's toolchain (see `build/tools.rs`).
//!
//! A test that needs one carries `#[cfg_attr(halflife_missing = "<tool>", ignore = "…")]`:
//! where the tool was missing when the tests were built, cargo reports it ignored. A test
//! that does run — the tool was there, or `HALFLIFE_REQUIRE_<TOOL>=1` asked for it — calls
//! [`require`], which fails naming the tool when it cannot be found; a tool that is found
//! but fails to start (a mount refused, a process that exits) is the test's failure too,
//! never a skip.

use std::path::PathBuf;

#[path = "../../build/tools.rs"]
mod probe;

pub use probe::Tool;

/// The tool's binaries (none for [`Tool::Root`]); a failure naming it when it is missing.
pub fn require(tool: Tool) -> Vec<PathBuf> {
    tool.find().unwrap_or_else(|why| {
        panic!(
            "this test needs {tool:?} and it is missing ({why}): {}. It ran because {}=1 asks \
             for it, or the tool was there when the tests were built",
            tool.how_to_get(),
            tool.switch()
        )
    })
}
