//! The web console: its HTTP answers (`http.rs`), a walk through it in headless Chromium
//! driven over WebDriver (`browser.rs`, `webdriver.rs`), and its pure modules' unit tests
//! run with Node's test runner (`node_units.rs`).

#[path = "../common/mod.rs"]
mod common;

mod browser;
mod http;
mod node_units;
mod webdriver;
