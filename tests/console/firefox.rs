//! The console in Firefox (Debian's `firefox-esr`, headless, driven through geckodriver)
//! against a real `halflife serve` with authentication on: the login, a bucket created, an
//! entry's chart, records, an uploaded image decoded in the preview, a label added, a
//! `when` query and an invalid one's message, attachments, a compress policy created and
//! run with its run opened from the keyboard, a token created, the replications page.
//! geckodriver hands out no console log, so each step checks instead that no error box is
//! shown but the one it provoked. Screenshots go to `target/tmp/console-screenshots-firefox/`.
//! Without Firefox or geckodriver it is ignored; `HALFLIFE_REQUIRE_FIREFOX=1` (set by
//! `.ci/run`) makes that a failure.

use std::path::PathBuf;

use serde_json::json;

use crate::browser::{TOKEN, current_nav, look, time_axis, upload_image_and_label};
use crate::common::start_server;
use crate::webdriver::{Browser, firefox};

/// The error boxes on screen (the server's messages the console shows).
fn errors(browser: &Browser) -> serde_json::Value {
    browser.script(
        "return [...document.querySelectorAll('.error')].map((e) => e.textContent)",
        json!([]),
    )
}

#[test]
#[cfg_attr(
    halflife_missing = "firefox",
    ignore = "needs Firefox and geckodriver (apt-get install firefox-esr; cargo install geckodriver --version 0.37.1 --locked); HALFLIFE_REQUIRE_FIREFOX=1 makes it a failure"
)]
fn a_user_walks_through_the_console_in_firefox() {
    let (firefox, driver) = firefox();
    let data = tempfile::tempdir().unwrap();
    let server = start_server(data.path(), &[("RS_API_TOKEN", TOKEN)]);
    let bearer = format!("Bearer {TOKEN}");
    let site = format!("http://{}", server.addr);
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots-firefox");
    std::fs::create_dir_all(&shots).unwrap();
    let browser = Browser::start_firefox(&firefox, &driver);
    let clean = |step: &str| assert_eq!(errors(&browser), json!([]), "error shown at {step}");

    // The login, then the dashboard; a bucket created there.
    browser.open(&format!("{site}/"));
    browser.wait_for("#token");
    look(&browser, &shots, "01-login.png");
    browser.type_into("#token", TOKEN);
    browser.click("form button[type=submit]");
    browser.wait_for_text("h1", "Dashboard");
    clean("the dashboard");
    look(&browser, &shots, "02-dashboard.png");
    browser.type_into("#new-bucket", "frames");
    browser.click("#create-bucket button");
    browser.wait_for_text("h1", "Bucket frames");

    // An entry: a client's record listed and charted, an image uploaded and decoded.
    let r = server.request(
        "POST",
        "/api/v1/b/frames/cam?ts=1700000000000000",
        &[
            ("authorization", &bearer),
            ("content-type", "application/json"),
            ("x-reduct-label-kind", "json"),
        ],
        br#"{"exposure": 12}"#,
    );
    assert_eq!(r.status, 200, "{}", r.error());
    browser.open(&format!("{site}/ui/b/frames/cam"));
    browser.wait_for_text("h1", "Entry cam");
    browser.wait_for(".chart svg rect");
    time_axis(&browser, ".chart");
    assert_eq!(current_nav(&browser), "Dashboard");
    browser.wait_for_text("table[aria-label=Records]", "application/json");
    upload_image_and_label(&browser, data.path());
    browser.click("#show-attachments");
    browser.wait_for_text(".attachments", "No attachments.");
    clean("the entry");
    look(&browser, &shots, "03-entry.png");

    // A query with a condition, then an invalid one: the server's message is shown.
    browser.type_into("#when", r#"{"&kind": {"$eq": "png"}}"#);
    browser.click("#query-form button");
    browser.wait_for_text(".chart figcaption", "1 record,");
    browser.type_into("#when", r#"{"&kind": {"$nope": 1}}"#);
    browser.click("#query-form button");
    browser.wait_for_text(".error", "422");
    look(&browser, &shots, "04-query-error.png");

    // A compress policy created and run; its run opened with the keyboard.
    browser.click("nav a[href=lifecycles]");
    browser.wait_for_text("h1", "Lifecycle policies");
    browser.type_into("#p-name", "squeeze");
    browser.type_into("#p-bucket", "frames");
    browser.type_into("#p-older", "1h");
    browser.click("#policy-form button[type=submit]");
    browser.wait_for_text("h1", "Policy squeeze");
    browser.click("#run-now");
    browser.wait_for(".timeline circle.run.ok");
    time_axis(&browser, ".timeline");
    assert_eq!(current_nav(&browser), "Lifecycles");
    browser.script(
        "document.querySelector('.timeline circle').focus(); return 1",
        json!([]),
    );
    browser.press(&["\u{E007}"]);
    browser.wait_for_text(".preview pre", "\"policy_name\": \"squeeze\"");
    clean("the policy");
    look(&browser, &shots, "05-lifecycle.png");

    // A token created, its value shown once; the replications page.
    browser.click("nav a[href=tokens]");
    browser.wait_for_text("h1", "Tokens");
    browser.type_into("#token-name", "viewer");
    browser.type_into("#token-read", "frames");
    browser.click("#create-token button");
    browser.wait_for("#token-value");
    clean("the tokens");
    look(&browser, &shots, "06-tokens.png");
    browser.click("nav a[href=replications]");
    browser.wait_for_text("h1", "Replications");
    clean("the replications");
    look(&browser, &shots, "07-replications.png");
    eprintln!("Firefox screenshots in {}", shots.display());
}
