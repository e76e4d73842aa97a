//! The console's pure modules (formatting, chart scales, routes) under Node's built-in
//! test runner (ignored where Node is missing).

use std::process::Command;

use crate::common::tools::{Tool, require};

#[test]
#[cfg_attr(
    halflife_missing = "node",
    ignore = "needs Node (apt-get install nodejs); HALFLIFE_REQUIRE_NODE=1 makes it a failure"
)]
fn the_console_modules_pass_their_node_tests() {
    let tests = concat!(env!("CARGO_MANIFEST_DIR"), "/console/tests/");
    let node = require(Tool::Node).remove(0);
    let run = Command::new(node)
        .args(["--test", tests])
        .output()
        .expect("node starts");
    let out = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "node --test failed:\n{out}");
    assert!(
        out.contains("# fail 0") && !out.contains("# pass 0"),
        "{out}"
    );
}
