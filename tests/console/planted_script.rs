//! A script planted in records by a token that may only write one bucket runs in none of
//! the ways an administrator opens a record from the console: the chain is a record
//! `js` (`text/javascript`) behind a query link (which needs no token), and a record
//! `report` (`text/html`) holding `<script src="LINK">`. Opened by a click, a middle
//! click, `window.open` with and without an opener, its download URL pasted into a tab,
//! or the link itself opened, the script never runs; the console still previews JSON,
//! text and HTML (as source) and downloads the record byte-exact under its file name.
//! Without Chromium and ChromeDriver it is ignored (`HALFLIFE_REQUIRE_BROWSER=1`
//! makes that a failure).

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::common::{ServerProcess, now_us, start_server, wait_until};
use crate::webdriver::{Browser, chromium};

const ADMIN: &str = "planted-admin-token";

/// What the planted script does where it runs: marks the document and the origin's
/// storage (an opaque origin has none), then lists the tokens with the console's token.
const PLANTED: &str = r#"document.documentElement.setAttribute('data-planted', 'ran');
try { localStorage.setItem('planted', location.href); } catch (e) {}
fetch('/api/v1/tokens', { headers: { Authorization: 'Bearer ' + sessionStorage.getItem('halflife.token') } });"#;

fn call(
    s: &ServerProcess,
    token: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> crate::common::Resp {
    let auth = format!("Bearer {token}");
    let mut all = vec![("authorization", auth.as_str())];
    all.extend_from_slice(headers);
    s.request(method, path, &all, body)
}

/// Whether the current window's document was marked by the planted script (a window
/// that closed meanwhile was not).
fn marked(browser: &Browser) -> bool {
    let mark = browser.script(
        "return document.documentElement.getAttribute('data-planted')",
        json!([]),
    );
    mark == json!("ran")
}

/// The downloads finished in `dir` (Chromium writes `.crdownload` until done).
fn downloads(dir: &Path) -> Vec<PathBuf> {
    let mut done: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|all| {
            all.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.extension()
                        .is_none_or(|x| x != "crdownload" && x != "tmp")
                })
                .collect()
        })
        .unwrap_or_default();
    done.sort();
    done
}

/// Runs `open` from the console's window and waits until what it opened either is
/// saved as a download or has run the planted script, in a window it opened or in the
/// console's; closes the windows it opened. Returns whether the script ran.
fn ran_when_opened(
    browser: &Browser,
    console: &str,
    saved_in: &Path,
    open: impl FnOnce(&Browser),
) -> bool {
    let windows = browser.windows();
    let saved = downloads(saved_in).len();
    open(browser);
    let mut ran = false;
    wait_until("the record saved as a download, or its script run", || {
        for handle in browser.windows().iter().filter(|h| !windows.contains(h)) {
            ran |= browser.try_switch_to(handle) && marked(browser);
        }
        browser.switch_to(console);
        ran |= marked(browser);
        ran || downloads(saved_in).len() > saved
    });
    for handle in browser.windows().iter().filter(|h| !windows.contains(h)) {
        if browser.try_switch_to(handle) {
            browser.close_window();
        }
    }
    browser.switch_to(console);
    ran
}

#[test]
#[cfg_attr(
    halflife_missing = "browser",
    ignore = "needs Chromium and ChromeDriver (apt-get install chromium chromium-driver); HALFLIFE_REQUIRE_BROWSER=1 makes it a failure"
)]
fn a_script_planted_in_records_runs_in_none_of_the_ways_a_record_is_opened() {
    let (chromium, driver) = chromium();
    let data = tempfile::tempdir().unwrap();
    let server = start_server(data.path(), &[("RS_API_TOKEN", ADMIN)]);
    let site = format!("http://{}", server.addr);
    assert_eq!(
        call(&server, ADMIN, "POST", "/api/v1/b/shared", &[], b"").status,
        200
    );
    let r = call(
        &server,
        ADMIN,
        "POST",
        "/api/v1/tokens/writer",
        &[],
        br#"{"full_access":false,"read":["shared"],"write":["shared"]}"#,
    );
    assert_eq!(r.status, 200, "{}", r.error());
    let writer = r.json()["value"].as_str().unwrap().to_string();

    // The attacker's chain, with nothing but read and write on `shared`.
    let js = [("content-type", "text/javascript")];
    let r = call(
        &server,
        &writer,
        "POST",
        "/api/v1/b/shared/js?ts=1",
        &js,
        PLANTED.as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.error());
    let expire = now_us() / 1_000_000 + 3600;
    let request = json!({"bucket": "shared", "entry": "js", "query": {"query_type": "QUERY"},
        "expire_at": expire, "record_entry": "js", "record_timestamp": 1});
    let r = call(
        &server,
        &writer,
        "POST",
        "/api/v1/links/x.js",
        &[],
        request.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.error());
    let link = r.json()["link"].as_str().unwrap().to_string();
    let report = format!(
        r#"<!doctype html><html><body><p id="report">quarterly report</p><script src="{link}"></script></body></html>"#
    );
    let html = [("content-type", "text/html")];
    let r = call(
        &server,
        &writer,
        "POST",
        "/api/v1/b/shared/report?ts=2",
        &html,
        report.as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.error());
    // Records the console must still show: JSON pretty-printed, an SVG as its source.
    let json_type = [("content-type", "application/json")];
    let r = call(
        &server,
        &writer,
        "POST",
        "/api/v1/b/shared/doc?ts=3",
        &json_type,
        br#"{"exposure":12}"#,
    );
    assert_eq!(r.status, 200);
    let svg_type = [("content-type", "image/svg+xml")];
    let svg = br#"<svg xmlns="http://www.w3.org/2000/svg"><script>document.title='svg ran'</script></svg>"#;
    let r = call(
        &server,
        &writer,
        "POST",
        "/api/v1/b/shared/doc?ts=4",
        &svg_type,
        svg,
    );
    assert_eq!(r.status, 200);

    // A page may not load an API answer as a script, even one of this origin.
    let r = server.request(
        "GET",
        link.trim_start_matches(&site),
        &[("sec-fetch-dest", "script")],
        b"",
    );
    assert_eq!(r.status, 403, "{}", r.error());

    let saved_in = tempfile::tempdir().unwrap();
    let browser = Browser::start_saving_to(&chromium, &driver, Some(saved_in.path()));
    browser.open(&format!("{site}/ui/login"));
    browser.type_into("#token", ADMIN);
    browser.click("form button[type=submit]");
    browser.wait_for_text("h1", "Dashboard");
    let console = browser.window();

    // The administrator opens `report`: its source is shown, its download is offered.
    browser.open(&format!("{site}/ui/b/shared/report"));
    browser.click("table[aria-label=Records] tbody tr:first-child button");
    browser.wait_for_text(".preview pre", "quarterly report");
    browser.wait_for(".preview a[download]");
    let href = browser.script(
        "return document.querySelector('.preview a[download]').href",
        json!([]),
    );
    let href = href.as_str().unwrap().to_string();
    assert!(href.starts_with("blob:"), "{href}");
    let dir = saved_in.path();
    let mut ran = Vec::new();
    // 1. A plain click: saved under the record's file name, byte-exact.
    if ran_when_opened(&browser, &console, dir, |b| b.click(".preview a[download]")) {
        ran.push("click");
    }
    // 2. A middle click.
    if ran_when_opened(&browser, &console, dir, |b| {
        b.middle_click(".preview a[download]")
    }) {
        ran.push("middle click");
    }
    // 3, 4. `window.open`, with and without an opener.
    let open_with = |features: &'static str| {
        let href = href.clone();
        move |b: &Browser| {
            b.script(
                "window.open(arguments[0], '_blank', arguments[1]); return null",
                json!([href, features]),
            );
        }
    };
    if ran_when_opened(&browser, &console, dir, open_with("")) {
        ran.push("window.open");
    }
    if ran_when_opened(&browser, &console, dir, open_with("noopener")) {
        ran.push("window.open without an opener");
    }
    // 5. The URL pasted into a new tab's address bar, and the query link itself.
    let pasted = |url: String| {
        move |b: &Browser| {
            b.new_tab();
            b.open(&url);
        }
    };
    if ran_when_opened(&browser, &console, dir, pasted(href.clone())) {
        ran.push("pasted blob: URL");
    }
    if ran_when_opened(&browser, &console, dir, pasted(link.clone())) {
        ran.push("pasted link");
    }
    assert!(ran.is_empty(), "the planted script ran: {ran:?}");
    // Typed so that no browser renders it.
    let fetched = browser.script(
        "return fetch(arguments[0]).then(async r => [r.headers.get('content-type'), await r.text()])",
        json!([href]),
    );
    assert_eq!(fetched, json!(["application/octet-stream", report]));

    let file = dir.join("report-2.html");
    assert!(downloads(dir).contains(&file), "{:?}", downloads(dir));
    assert_eq!(std::fs::read(&file).unwrap(), report.as_bytes());
    assert_eq!(
        browser.script("return localStorage.getItem('planted')", json!([])),
        Value::Null,
        "the planted script ran in the console's origin"
    );
    for saved in downloads(dir) {
        let bytes = std::fs::read(&saved).unwrap();
        assert!(
            bytes == report.as_bytes() || bytes == PLANTED.as_bytes(),
            "{} holds something else",
            saved.display()
        );
    }

    // Previews of the other kinds still work; an SVG shows as source, not as a picture.
    browser.open(&format!("{site}/ui/b/shared/doc"));
    browser.click("table[aria-label=Records] tbody tr:first-child button");
    browser.wait_for_text(".preview pre", "\"exposure\": 12");
    browser.click("table[aria-label=Records] tbody tr:nth-child(2) button");
    browser.wait_for_text(".preview pre", "<svg");
    assert!(browser.find(".preview img").is_none());
    assert_ne!(
        browser.script("return document.title", json!([])),
        json!("svg ran")
    );
    let errors: Vec<_> = browser
        .console()
        .into_iter()
        .filter(|(level, message)| {
            level == "SEVERE" && !message.contains("Content Security Policy")
        })
        .collect();
    assert!(errors.is_empty(), "browser errors: {errors:?}");
}
