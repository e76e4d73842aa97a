//! A walk through the console in headless Chromium against a real `halflife serve` with
//! authentication on: log in, create a bucket, open an entry, upload an image and see it
//! previewed, edit a label, edit its attachments, run a query with a `when` condition and see an invalid one's
//! message from the server, create a compress policy, run it and open its run on the
//! timeline, create a token (its value shown once) and remove it, create a replication
//! task and switch its mode. A screenshot of each view goes under the test's output
//! folder; any console error but the ones the walk provokes fails the test. Without
//! Chromium and ChromeDriver it is ignored (`HALFLIFE_REQUIRE_BROWSER=1` makes that a
//! failure).

use std::io::Write;
use std::path::PathBuf;

use serde_json::json;

use crate::common::{ServerProcess, borrowed, now_us, start_server, wait_until};
use crate::webdriver::{Browser, chromium};

pub(crate) const TOKEN: &str = "console-walk-token";

/// A `width`×`height` RGB PNG of a gradient (what a camera frame stands in for).
pub(crate) fn png(width: u32, height: u32) -> Vec<u8> {
    let mut raw = Vec::new();
    for y in 0..height {
        raw.push(0); // no filter
        for x in 0..width {
            raw.extend([(x * 255 / width) as u8, (y * 255 / height) as u8, 160]);
        }
    }
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    z.write_all(&raw).unwrap();
    let idat = z.finish().unwrap();
    let mut ihdr = Vec::new();
    ihdr.extend(width.to_be_bytes());
    ihdr.extend(height.to_be_bytes());
    ihdr.extend([8, 2, 0, 0, 0]);
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    for (kind, data) in [(&b"IHDR"[..], ihdr), (b"IDAT", idat), (b"IEND", Vec::new())] {
        out.extend((data.len() as u32).to_be_bytes());
        let mut crc = crc32fast::Hasher::new();
        crc.update(kind);
        crc.update(&data);
        out.extend(kind);
        out.extend(&data);
        out.extend(crc.finalize().to_be_bytes());
    }
    out
}

fn shots() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
#[cfg_attr(
    halflife_missing = "browser",
    ignore = "needs Chromium and ChromeDriver (apt-get install chromium chromium-driver); HALFLIFE_REQUIRE_BROWSER=1 makes it a failure"
)]
fn a_user_walks_through_the_console_in_a_real_browser() {
    let (chromium, driver) = chromium();
    let data = tempfile::tempdir().unwrap();
    let bearer = format!("Bearer {TOKEN}");
    {
        // A first run of the server leaves usage events (written at shutdown): the
        // history the bucket page charts.
        let first = start_server(data.path(), &[("RS_API_TOKEN", TOKEN)]);
        let auth = [("authorization", bearer.as_str())];
        assert_eq!(
            first
                .request("POST", "/api/v1/b/history", &auth, b"")
                .status,
            200
        );
        for ts in 1..=3 {
            let path = format!("/api/v1/b/history/log?ts={ts}");
            assert_eq!(first.request("POST", &path, &auth, b"a line").status, 200);
        }
        // A bucket of many entries, listed a page at a time.
        assert_eq!(
            first.request("POST", "/api/v1/b/many", &auth, b"").status,
            200
        );
        for n in 0..150 {
            let path = format!("/api/v1/b/many/e-{n:03}?ts=1");
            assert_eq!(first.request("POST", &path, &auth, b"x").status, 200);
        }
        let (status, _) = first.terminate();
        assert!(status.success());
    }
    // Runs bounded by work, so a policy over a backlog catches up run after run.
    let server = start_server(
        data.path(),
        &[
            ("RS_API_TOKEN", TOKEN),
            ("RS_LIFECYCLE_MAX_RECORDS_PER_RUN", "400"),
        ],
    );
    let site = format!("http://{}", server.addr);
    let shots = shots();
    let browser = Browser::start(&chromium, &driver);

    // `/` leads to the console, which asks for a token.
    browser.open(&format!("{site}/"));
    browser.wait_for("#token");
    assert!(browser.url().contains("/ui/login"), "{}", browser.url());
    look(&browser, &shots, "01-login.png");
    // Before the login, the console's first call was refused: that 401 is expected.
    let before_login = browser.console();

    browser.type_into("#token", "not-the-token");
    browser.click("form button[type=submit]");
    browser.wait_for_text(".error", "401");
    browser.type_into("#token", TOKEN);
    browser.click("form button[type=submit]");
    browser.wait_for_text("h1", "Dashboard");
    browser.wait_for_text(".cards", "STANDALONE");
    browser.wait_for_text(
        ".cards",
        concat!(
            "halflife ",
            env!("CARGO_PKG_VERSION"),
            " (ReductStore API 1.21.5)"
        ),
    );
    assert_eq!(current_nav(&browser), "Dashboard");
    // An instant in a card: its date, its time to the second, the exact value on hover.
    let card = browser.script(
        "const c = [...document.querySelectorAll('.card')].find((c) => c.textContent.startsWith('Latest record')); \
         return c ? [c.getAttribute('title'), c.querySelector('.value').textContent, c.querySelector('.sub').textContent] : null",
        json!([]),
    );
    let card: Vec<String> = serde_json::from_value(card).unwrap();
    assert!(
        card[0].ends_with(" µs)") && card[0].contains(" UTC ("),
        "{card:?}"
    );
    assert_eq!(card[1].len(), 10, "a date: {card:?}");
    assert!(
        card[2].len() == 12 && card[2].ends_with(" UTC"),
        "a time to the second: {card:?}"
    );
    let rejected_login = browser.console();
    look(&browser, &shots, "02-dashboard.png");
    // The token is in sessionStorage, never in the URL or a cookie.
    let stored = browser.script("return sessionStorage.getItem('halflife.token')", json!([]));
    assert_eq!(stored, json!(TOKEN));
    assert!(!browser.url().contains(TOKEN));
    assert_eq!(
        browser.script("return document.cookie", json!([])),
        json!("")
    );

    // A bucket created from the dashboard.
    browser.type_into("#new-bucket", "frames");
    browser.click("#create-bucket button");
    browser.wait_for_text("h1", "Bucket frames");
    // A record written by a client shows up in the bucket's entries.
    let r = server.request(
        "POST",
        "/api/v1/b/frames/cam?ts=1700000000000000",
        &[
            ("authorization", &format!("Bearer {TOKEN}")),
            ("content-type", "application/json"),
            ("x-reduct-label-kind", "json"),
        ],
        br#"{"exposure": 12, "gain": 1.5}"#,
    );
    assert_eq!(r.status, 200);
    browser.open(&format!("{site}/ui/b/frames"));
    browser.wait_for_text("table", "cam");
    browser.wait_for_text(".legend", "open");
    look(&browser, &shots, "03-bucket.png");
    browser.open(&format!("{site}/ui/b/history"));
    browser.wait_for(".history svg rect");
    time_axis(&browser, ".history");
    browser.wait_for_text(".history", "snapshots");
    look(&browser, &shots, "03b-bucket-history.png");
    browser.open(&format!("{site}/ui/b/many"));
    browser.wait_for_text(".pager", "1–100 of 150");
    browser.click(".pager button:nth-of-type(2)");
    browser.wait_for_text(".pager", "101–150 of 150");
    browser.type_into("#entry-filter", "e-14");
    browser.wait_for_text("table[aria-label=Entries]", "e-149");
    let rows = browser.script(
        "return document.querySelectorAll('table[aria-label=Entries] tbody tr').length",
        json!([]),
    );
    assert_eq!(rows, json!(10), "e-140 to e-149");
    // Renamed: its page follows it, its entries with it.
    browser.type_into("#rename-to", "fleet-archive");
    browser.click("#rename-bucket button");
    browser.wait_for_text("h1", "Bucket fleet-archive");
    browser.wait_for_text(".pager", "1–100 of 150");
    let r = server.request("GET", "/api/v1/b/many", &[("authorization", &bearer)], b"");
    assert_eq!(r.status, 404, "the old name is gone");
    browser.open(&format!("{site}/ui/b/frames"));
    browser.wait_for_text("table", "cam");
    browser.click("table a");
    browser.wait_for_text("h1", "Entry cam");
    browser.wait_for("table[aria-label=Records]");
    browser.wait_for(".chart svg rect");
    time_axis(&browser, ".chart");

    upload_image_and_label(&browser, data.path());
    look(&browser, &shots, "04-entry.png");

    // A range chosen: the chart and the list keep to it, and its deep link survives a
    // reload; then back to the whole entry.
    browser.script(
        "document.getElementById('range-start').value = '2023-11-14T22:13:20'; \
         document.getElementById('range-stop').value = '2023-11-14T22:13:21'; return 1",
        json!([]),
    );
    browser.click("#range-form button[type=submit]");
    browser.wait_for_text(".chart figcaption", "1 record,");
    // A second in 60 bars: bars of a round 20 ms (not 16.7).
    let caption = browser.text(".chart figcaption");
    assert!(caption.contains("bytes per 20 ms from"), "{caption}");
    let url = browser.url();
    assert!(
        url.contains("start=1700000000000000") && url.contains("stop=1700000001000000"),
        "{url}"
    );
    browser.open(&url);
    browser.wait_for_text(".chart figcaption", "1 record,");
    browser.wait_for_text("table[aria-label=Records]", "application/json");
    assert_eq!(
        browser.script(
            "return document.querySelectorAll('table[aria-label=Records] tbody tr').length",
            json!([]),
        ),
        json!(1)
    );
    browser.click("#range-form button.secondary");
    browser.wait_for_text(".chart figcaption", "2 records,");

    // The JSON record previewed pretty-printed, then removed after confirmation.
    browser.click("table[aria-label=Records] tbody tr:first-child button");
    browser.wait_for_text(".preview pre", "\"exposure\": 12");
    browser.click("#remove-record");
    browser.accept_prompt(None);
    browser.wait_for_text(".preview", "Removed.");
    assert_eq!(
        server
            .request(
                "GET",
                "/api/v1/b/frames/cam?ts=1700000000000000",
                &[("authorization", &format!("Bearer {TOKEN}"))],
                b""
            )
            .status,
        404
    );

    // Attachments: none at first (listed without any failed call), then one a client
    // wrote, shown, edited, another added, one removed.
    browser.click("#show-attachments");
    browser.wait_for_text(".attachments", "No attachments.");
    let r = server.request(
        "POST",
        "/api/v1/b/frames/cam/$meta?ts=1700000000000001",
        &[
            ("authorization", &bearer),
            ("content-type", "application/json"),
            ("x-reduct-label-key", "calibration"),
        ],
        br#"{"gain": 1}"#,
    );
    assert_eq!(r.status, 200, "{}", r.error());
    browser.click("#refresh-attachments");
    browser.wait_for_text("table[aria-label=Attachments]", "calibration");
    browser.type_into(
        "textarea[aria-label='attachment calibration']",
        r#"{"gain": 2}"#,
    );
    browser.click("table[aria-label=Attachments] tbody tr:first-child button.secondary");
    // Saved and listed again: the value comes back as the server stored it.
    let calibration = || {
        browser.script(
            "const t = document.querySelector(\"textarea[aria-label='attachment calibration']\"); return t && t.value",
            json!([]),
        )
    };
    let started = std::time::Instant::now();
    while calibration() != json!(r#"{"gain":2}"#) {
        assert!(
            started.elapsed().as_secs() < 10,
            "the edit never came back: {}",
            calibration()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    browser.type_into("#attachment-key", "owner");
    browser.type_into("#attachment-value", r#"{"team": "vision"}"#);
    browser.click("#attachment-form button");
    browser.wait_for_text("table[aria-label=Attachments]", "owner");
    browser.click("table[aria-label=Attachments] tbody tr:first-child button.danger");
    let started = std::time::Instant::now();
    while browser
        .text("table[aria-label=Attachments]")
        .contains("calibration")
    {
        assert!(started.elapsed().as_secs() < 10, "the attachment stayed");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    look(&browser, &shots, "04b-attachments.png");

    // A query with a condition, then an invalid one: the server's message is shown.
    browser.type_into("#when", r#"{"&kind": {"$eq": "png"}}"#);
    browser.click("#query-form button");
    browser.wait_for_text("table[aria-label=Records]", "image/png");
    let rows = browser.script(
        "return document.querySelectorAll('table[aria-label=Records] tbody tr').length",
        json!([]),
    );
    assert_eq!(rows, json!(1), "the condition keeps the png only");
    browser.type_into("#when", r#"{"&kind": {"$nope": 1}}"#);
    browser.click("#query-form button");
    browser.wait_for_text(".error", "422");
    look(&browser, &shots, "05-query-error.png");
    let after = browser.console();

    // A compress policy created from its form, run now; its run appears on the timeline
    // and a click shows its event.
    browser.click("nav a[href=lifecycles]");
    browser.wait_for_text("h1", "Lifecycle policies");
    browser.type_into("#p-name", "squeeze");
    browser.type_into("#p-bucket", "frames");
    browser.type_into("#p-older", "1h");
    browser.script(
        "const s = document.getElementById('p-algorithm'); s.value = 'zstd'; return s.value",
        json!([]),
    );
    browser.click("#policy-form button[type=submit]");
    browser.wait_for_text("h1", "Policy squeeze");
    browser.click("#run-now");
    browser.wait_for(".timeline circle.run.ok");
    browser.click(".timeline circle");
    browser.wait_for_text(".preview pre", "\"policy_name\": \"squeeze\"");
    browser.wait_for(".saved svg rect");
    time_axis(&browser, ".saved");
    time_axis(&browser, ".timeline");
    assert_eq!(current_nav(&browser), "Lifecycles");
    browser.wait_for_text("main", "No backlog: every recorded run caught up.");
    look(&browser, &shots, "06-lifecycle.png");
    // Keyboard only: a run's mark opened with Enter, the navigation reached with Tab.
    let policy_page = browser.url();
    browser.open(&policy_page);
    browser.wait_for(".timeline circle");
    browser.script(
        "document.querySelector('.timeline circle').focus(); return 1",
        json!([]),
    );
    browser.press(&["\u{E007}"]);
    browser.wait_for_text(".preview pre", "\"policy_name\": \"squeeze\"");
    browser.script(
        "document.querySelector('a.brand').focus(); return 1",
        json!([]),
    );
    browser.press(&["\u{E004}"]);
    assert_eq!(
        browser.script("return document.activeElement.textContent", json!([])),
        json!("Dashboard")
    );
    browser.press(&["\u{E007}"]);
    browser.wait_for_text("h1", "Dashboard");
    browser.open(&policy_page);
    browser.wait_for(".timeline circle");

    // A token created with its permissions, its value shown once, then removed.
    browser.click("nav a[href=tokens]");
    browser.wait_for_text("h1", "Tokens");
    browser.type_into("#token-name", "viewer");
    browser.type_into("#token-read", "frames");
    browser.click("#create-token button");
    browser.wait_for("#token-value");
    let value = browser.script(
        "return document.getElementById('token-value').value",
        json!([]),
    );
    assert!(
        value.as_str().unwrap_or_default().starts_with("viewer-"),
        "{value}"
    );
    browser.wait_for_text("table[aria-label=Tokens]", "viewer");
    look(&browser, &shots, "07-tokens.png");
    browser.click("table[aria-label=Tokens] tbody tr:last-child button.danger");
    browser.accept_prompt(None);
    let started = std::time::Instant::now();
    while browser.text("table[aria-label=Tokens]").contains("viewer") {
        assert!(started.elapsed().as_secs() < 10, "the token stayed listed");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }

    // A replication task to a destination that is away: created, its mode switched.
    browser.click("nav a[href=replications]");
    browser.wait_for_text("h1", "Replications");
    browser.type_into("#r-name", "offsite");
    browser.type_into("#r-src", "frames");
    browser.type_into("#r-dst", "frames-copy");
    browser.type_into("#r-host", "http://127.0.0.1:9");
    browser.click("#replication-form button[type=submit]");
    browser.wait_for_text("h1", "Replication offsite");
    browser.script(
        "const s = document.getElementById('r-mode'); s.value = 'paused'; return s.value",
        json!([]),
    );
    browser.click("#r-mode ~ button, form.inline button[type=submit]");
    browser.wait_for_text("h1", "Replication offsite");
    let started = std::time::Instant::now();
    while browser.script("return document.getElementById('r-mode').value", json!([]))
        != json!("paused")
    {
        assert!(
            started.elapsed().as_secs() < 10,
            "the mode never became paused"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // Records written while it is paused wait; the mode changed by a client writes a
    // snapshot of that backlog, which the task's page charts.
    for ts in [1700000000000100u64, 1700000000000200] {
        let r = server.request(
            "POST",
            &format!("/api/v1/b/frames/cam?ts={ts}"),
            &[("authorization", &bearer)],
            b"queued",
        );
        assert_eq!(r.status, 200, "{}", r.error());
    }
    wait_until("two records pending", || {
        server
            .get_with("/api/v1/replications/offsite", &bearer)
            .json()["info"]["pending_records"]
            == 2
    });
    let r = server.request(
        "PATCH",
        "/api/v1/replications/offsite/mode",
        &[("authorization", &bearer)],
        br#"{"mode":"disabled"}"#,
    );
    assert_eq!(r.status, 200, "{}", r.error());
    let info = server.get_with("/api/v1/info", &bearer).json();
    let instance = info["instance_name"].as_str().unwrap_or_default();
    let events = format!(
        "replications/{}/offsite",
        halflife::storage::system::sanitize(instance)
    );
    wait_until("the backlog's snapshot", || {
        !server.json_records("$system", &events, &bearer).is_empty()
    });
    browser.open(&format!("{site}/ui/replications/offsite"));
    browser.wait_for(".pending svg rect");
    browser.wait_for(".lag svg rect");
    time_axis(&browser, ".pending");
    time_axis(&browser, ".lag");
    assert_eq!(current_nav(&browser), "Replications");
    look(&browser, &shots, "08-replication.png");

    // The `$system` trail: its entries, and the policy's events filtered by status.
    browser.click("nav a[href='b/%24system']");
    browser.wait_for_text("h1", "Bucket $system");
    assert_eq!(current_nav(&browser), "System trail");
    browser.wait_for_text("table[aria-label=Entries]", "squeeze");
    browser.script(
        "Array.from(document.querySelectorAll('table a')).find(a => a.textContent.endsWith('/squeeze')).click()",
        json!([]),
    );
    browser.wait_for_text("h1", "squeeze");
    browser.type_into("#when", r#"{"&status": {"$eq": 200}}"#);
    browser.click("#query-form button");
    browser.wait_for_text("table[aria-label=Records]", "status=200");
    look(&browser, &shots, "09-system-trail.png");
    catching_up(&server, &browser, &site, &shots);
    let after_policies = browser.console();

    // Console errors: only the refusals the walk provoked.
    let unexpected: Vec<_> = before_login
        .iter()
        .filter(|(level, m)| level == "SEVERE" && !m.contains("401"))
        .chain(
            rejected_login
                .iter()
                .filter(|(level, m)| level == "SEVERE" && !m.contains("401")),
        )
        .chain(
            after
                .iter()
                .filter(|(level, m)| level == "SEVERE" && !m.contains("422")),
        )
        .chain(after_policies.iter().filter(|(level, _)| level == "SEVERE"))
        .collect();
    assert!(
        unexpected.is_empty(),
        "browser console errors: {unexpected:?}"
    );
    eprintln!("console screenshots in {}", shots.display());
}

/// On an entry's page: a PNG (written to `dir`) uploaded as a record, listed, previewed
/// and decoded inline, then labelled `kind=png` in place.
/// The chart `chart` has a time axis: labels of round instants under it, each a date, a
/// time to the minute or the second, or both.
pub(crate) fn time_axis(browser: &Browser, chart: &str) {
    browser.wait_for(&format!("{chart} svg text.time-label"));
    let labels = browser.script(
        "return [...document.querySelectorAll(arguments[0] + ' svg text.time-label')].map((t) => t.firstChild.textContent)",
        json!([chart]),
    );
    let labels: Vec<String> = serde_json::from_value(labels).unwrap();
    assert!(!labels.is_empty(), "{chart}: no time labels");
    let shaped = |l: &str| {
        let digits = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit());
        let parts: Vec<&str> = l.split([' ', '-', ':']).collect();
        match parts.as_slice() {
            [y, m, d] if l.contains('-') => digits(y, 4) && digits(m, 2) && digits(d, 2),
            [a, b] | [a, b, _] if l.contains(':') && !l.contains('-') => {
                digits(a, 2) && digits(b, 2)
            }
            [m, d, hh, mm] => digits(m, 2) && digits(d, 2) && digits(hh, 2) && digits(mm, 2),
            _ => false,
        }
    };
    assert!(labels.iter().all(|l| shaped(l)), "{chart}: {labels:?}");
}

/// The text of the navigation link marked as the current page.
pub(crate) fn current_nav(browser: &Browser) -> String {
    browser.text("header nav a[aria-current=page]")
}

pub(crate) fn upload_image_and_label(browser: &Browser, dir: &std::path::Path) {
    let image = dir.join("frame.png");
    std::fs::write(&image, png(64, 48)).unwrap();
    browser.type_into("#upload", image.to_str().unwrap());
    browser.click("#upload-form button");
    browser.wait_for_text("table[aria-label=Records]", "image/png");
    browser.click("table[aria-label=Records] tbody tr:last-child button");
    browser.wait_for(".preview img");
    let started = std::time::Instant::now();
    while browser.script(
        "return document.querySelector('.preview img').naturalWidth",
        json!([]),
    ) != json!(64)
    {
        assert!(started.elapsed().as_secs() < 10, "the image never decoded");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    browser.type_into("input[aria-label='new label name']", "kind");
    browser.type_into("input[aria-label='new label value']", "png");
    browser.click("#labels-form button");
    browser.wait_for_text("table[aria-label=Records]", "kind=png");
}

/// Saves a screenshot of the view on screen as `name`, after checking that every control
/// in it has a label (its own `<label>` or an `aria-label`): what a screen reader, and a
/// keyboard user, needs to know what a field is for.
pub(crate) fn look(browser: &Browser, shots: &std::path::Path, name: &str) {
    let unlabelled = browser.script(
        "return [...document.querySelectorAll('input, select, textarea')]\
         .filter((e) => e.type !== 'hidden' && e.labels.length === 0 && !e.getAttribute('aria-label'))\
         .map((e) => e.outerHTML.slice(0, 120))",
        json!([]),
    );
    assert_eq!(unlabelled, json!([]), "controls without a label in {name}");
    browser.screenshot(&shots.join(name));
}

/// A compress policy over a backlog of 4,000 telemetry records two days old: it catches
/// up run after run (400 records a run), and its page shows the runs, the backlog going
/// down and the bytes saved — the picture the README shows
/// (`docs/console-lifecycle.png`, refreshed from here when `HALFLIFE_UPDATE_DOCS=1`).
fn catching_up(server: &ServerProcess, browser: &Browser, site: &str, shots: &std::path::Path) {
    let bearer = format!("Bearer {TOKEN}");
    let auth = [("authorization", bearer.as_str())];
    let r = server.request(
        "POST",
        "/api/v1/b/fleet",
        &auth,
        br#"{"max_block_records":100}"#,
    );
    assert_eq!(r.status, 200, "{}", r.error());
    let start = now_us() - 2 * 86_400_000_000;
    for batch in 0..20u64 {
        let mut body = Vec::new();
        let mut headers = vec![("authorization".to_string(), bearer.clone())];
        for i in 0..200u64 {
            let n = batch * 200 + i;
            let line = format!(
                r#"{{"vehicle":"truck-{}","speed_kmh":{:.1},"lat":{:.5},"lon":{:.5},"fuel":{}}}"#,
                n % 7,
                40.0 + (n % 37) as f64 * 1.3,
                52.52 + n as f64 * 1e-5,
                13.40 + n as f64 * 2e-5,
                90 - n % 60
            )
            .repeat(8);
            headers.push((
                format!("x-reduct-time-{}", start + n * 1_000_000),
                format!("{},application/json", line.len()),
            ));
            body.extend_from_slice(line.as_bytes());
        }
        let r = server.request(
            "POST",
            "/api/v1/b/fleet/telemetry/batch",
            &borrowed(&headers),
            &body,
        );
        assert_eq!(r.status, 200, "{}", r.error());
    }
    let r = server.request(
        "POST",
        "/api/v1/lifecycles/fleet-zstd",
        &auth,
        br#"{"type":"compress","bucket":"fleet","older_than":"1d","interval":"1h","compression":{"algorithm":"zstd","level":9}}"#,
    );
    assert_eq!(r.status, 200, "{}", r.error());
    let r = server.request("POST", "/api/v1/lifecycles/fleet-zstd/run", &auth, b"");
    assert_eq!(r.status, 200, "{}", r.error());
    wait_until("the policy catches up", || {
        let info = server
            .get_with("/api/v1/lifecycles/fleet-zstd", &bearer)
            .json();
        info["info"]["caught_up"] == true && info["info"]["running_now"] == false
    });
    browser.open(&format!("{site}/ui/lifecycles/fleet-zstd"));
    browser.wait_for(".backlog svg rect");
    time_axis(browser, ".backlog");
    browser.wait_for(".saved svg rect");
    let marks = browser.script(
        "return document.querySelectorAll('.timeline circle').length",
        json!([]),
    );
    assert!(
        marks.as_u64().unwrap_or(0) >= 10,
        "{marks} runs on the timeline"
    );
    browser.resize(1280, 1080);
    look(browser, shots, "10-policy-catching-up.png");
    browser.resize(1280, 800);
    if std::env::var_os("HALFLIFE_UPDATE_DOCS").is_some() {
        let docs =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/console-lifecycle.png");
        std::fs::copy(shots.join("10-policy-catching-up.png"), docs)
            .expect("README picture refreshed");
    }
}
