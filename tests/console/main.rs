//! The web console: its HTTP answers (`http.rs`), a walk through it in headless Chromium
//! and a shorter one in headless Firefox, driven over WebDriver (`browser.rs`,
//! `firefox.rs`, `webdriver.rs`), and its pure modules' unit tests run with Node's test
//! runner (`node_units.rs`).

#[path = "../common/mod.rs"]
mod common;

mod browser;
mod firefox;
mod fresh_server;
mod http;
mod node_units;
mod planted_script;
mod webdriver;
