//! The console's pure modules (formatting, chart scales, routes) under Node's built-in
//! test runner, where Node is present.

use std::process::Command;

#[test]
fn the_console_modules_pass_their_node_tests() {
    let tests = concat!(env!("CARGO_MANIFEST_DIR"), "/console/tests/");
    let run = match Command::new("node").args(["--test", tests]).output() {
        Ok(run) => run,
        Err(e) => {
            assert!(
                std::env::var_os("HALFLIFE_REQUIRE_NODE").is_none(),
                "node is required here: {e}"
            );
            eprintln!("*** console node tests NOT RUN: no node ({e}) ***");
            return;
        }
    };
    let out = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "node --test failed:\n{out}");
    assert!(
        out.contains("# fail 0") && !out.contains("# pass 0"),
        "{out}"
    );
}
