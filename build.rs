//! Marks the tests whose tool is missing on this machine: for each tool of
//! `build/tools.rs` that cannot be found, and whose `HALFLIFE_REQUIRE_<TOOL>=1` switch is
//! off, the crate is compiled with `cfg(halflife_missing = "<tool>")`, and the tests that
//! need it carry `#[cfg_attr(halflife_missing = "<tool>", ignore = "needs …")]`. So cargo's
//! own summary counts them as ignored rather than passed; with the switch on they run and
//! fail, naming the tool, when it is not there.

#[path = "build/tools.rs"]
mod tools;

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=build/tools.rs");
    for var in ["PATH", "HOME", "CARGO_HOME", "REDUCTSTORE_BIN"] {
        println!("cargo::rerun-if-env-changed={var}");
    }
    let keys: Vec<String> = tools::ALL
        .iter()
        .map(|t| format!("\"{}\"", t.key()))
        .collect();
    println!(
        "cargo::rustc-check-cfg=cfg(halflife_missing, values({}))",
        keys.join(", ")
    );
    for tool in tools::ALL {
        println!("cargo::rerun-if-env-changed={}", tool.switch());
        if tool.required() {
            continue;
        }
        match tool.find() {
            // A tool removed later is noticed (a missing file counts as changed); one
            // installed later, at the next change of PATH: until then its tests stay
            // ignored, never counted as passed.
            Ok(found) => {
                for path in found {
                    println!("cargo::rerun-if-changed={}", path.display());
                }
            }
            Err(_) => println!("cargo::rustc-cfg=halflife_missing=\"{}\"", tool.key()),
        }
    }
}
