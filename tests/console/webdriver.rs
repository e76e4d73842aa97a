//! A small W3C WebDriver client over HTTP (ureq), enough to drive Debian's headless
//! Chromium through its ChromeDriver, or Firefox ESR through geckodriver: sessions,
//! navigation, elements, clicks, keys, scripts, screenshots and (Chromium only) the
//! browser's console log.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};

use crate::common::tools::{Tool, require};

/// The W3C name of an element reference in answers.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";
/// The longest wait for a condition: a last guard, conditions decide.
const GUARD: Duration = Duration::from_secs(10);

/// Chromium and ChromeDriver, for a test that runs with them (see `tests/common/tools.rs`).
pub fn chromium() -> (PathBuf, PathBuf) {
    pair(Tool::Browser)
}

/// Firefox and geckodriver (Debian's `firefox-esr`; geckodriver in the `PATH` or cargo's
/// bin folder, where `cargo install geckodriver` puts it), for a test that runs with them.
pub fn firefox() -> (PathBuf, PathBuf) {
    pair(Tool::Firefox)
}

fn pair(tool: Tool) -> (PathBuf, PathBuf) {
    let mut found = require(tool).into_iter();
    match (found.next(), found.next()) {
        (Some(browser), Some(driver)) => (browser, driver),
        _ => panic!("{tool:?}: a browser and its driver"),
    }
}

/// A running driver and one browser session.
pub struct Browser {
    driver: Child,
    base: String,
    agent: ureq::Agent,
    _profile: tempfile::TempDir,
    /// Whether the browser keeps a console log the driver hands out (Chromium).
    has_log: bool,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.agent.delete(&self.base).call();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl Browser {
    /// Starts `driver` and a headless `chromium` session with a fresh profile, a
    /// 1280×800 window and the browser's console log kept.
    pub fn start(chromium: &Path, driver: &Path) -> Browser {
        Browser::start_saving_to(chromium, driver, None)
    }

    /// [`Browser::start`], with downloads saved into `downloads` without asking.
    pub fn start_saving_to(chromium: &Path, driver: &Path, downloads: Option<&Path>) -> Browser {
        let profile = tempfile::tempdir().expect("profile dir");
        let args = [
            "--headless=new".to_string(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-quic".into(),
            "--no-first-run".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-sync".into(),
            "--window-size=1280,800".into(),
            format!("--user-data-dir={}", profile.path().display()),
        ];
        let prefs = match downloads {
            Some(dir) => json!({
                "download.default_directory": dir,
                "download.prompt_for_download": false,
            }),
            None => json!({}),
        };
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": chromium, "args": args, "prefs": prefs},
            "goog:loggingPrefs": {"browser": "ALL"},
        }}});
        Browser::session(driver, profile, &capabilities, true)
    }

    /// Starts geckodriver and a headless Firefox session with a fresh profile and a
    /// 1280×800 window.
    pub fn start_firefox(firefox: &Path, driver: &Path) -> Browser {
        let profile = tempfile::tempdir().expect("profile dir");
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "firefox",
            "moz:firefoxOptions": {
                "binary": firefox,
                "args": ["-headless", "-profile", profile.path(), "--width=1280", "--height=800"],
            },
        }}});
        let browser = Browser::session(driver, profile, &capabilities, false);
        browser.resize(1280, 800);
        browser
    }

    fn session(
        driver: &Path,
        profile: tempfile::TempDir,
        capabilities: &Value,
        has_log: bool,
    ) -> Browser {
        let port = free_port();
        let child = Command::new(driver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the WebDriver server starts");
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .new_agent();
        let root = format!("http://127.0.0.1:{port}");
        let started = Instant::now();
        while agent.get(&format!("{root}/status")).call().is_err() {
            assert!(
                started.elapsed() < GUARD,
                "the WebDriver server never answered"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut browser = Browser {
            driver: child,
            base: root.clone(),
            agent,
            _profile: profile,
            has_log,
        };
        let session = browser.post("/session", capabilities);
        let id = session["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {session}"))
            .to_string();
        browser.base = format!("{root}/session/{id}");
        browser
    }

    fn answer(&self, response: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> Value {
        let mut response = response.expect("the driver answers");
        let text = response
            .body_mut()
            .with_config()
            .limit(64 << 20)
            .read_to_string()
            .expect("an answer body");
        let value: Value = serde_json::from_str(&text).expect("JSON from the driver");
        value["value"].clone()
    }

    fn post(&self, path: &str, body: &Value) -> Value {
        let response = self
            .agent
            .post(&format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .send(body.to_string());
        self.answer(response)
    }

    fn get(&self, path: &str) -> Value {
        self.answer(self.agent.get(&format!("{}{path}", self.base)).call())
    }

    /// Opens `url`.
    pub fn open(&self, url: &str) {
        let v = self.post("/url", &json!({ "url": url }));
        assert!(v.is_null(), "navigating to {url}: {v}");
    }

    /// The page's current URL.
    pub fn url(&self) -> String {
        self.get("/url").as_str().unwrap_or_default().to_string()
    }

    /// The first element matching CSS `selector`, if any.
    pub fn find(&self, selector: &str) -> Option<String> {
        let v = self.post(
            "/element",
            &json!({"using": "css selector", "value": selector}),
        );
        v[ELEMENT].as_str().map(str::to_string)
    }

    /// The first element matching CSS `selector`, waited for.
    pub fn wait_for(&self, selector: &str) -> String {
        let started = Instant::now();
        loop {
            if let Some(id) = self.find(selector) {
                return id;
            }
            assert!(
                started.elapsed() < GUARD,
                "never found '{selector}' on {}; page text: {}",
                self.url(),
                self.text("body")
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until the text of the first `selector` element contains `text`.
    pub fn wait_for_text(&self, selector: &str, text: &str) {
        let started = Instant::now();
        while !self.text(selector).contains(text) {
            assert!(
                started.elapsed() < GUARD,
                "'{selector}' never showed '{text}'; it shows: '{}'; the page: {}; console: {:?}",
                self.text(selector),
                self.text("body"),
                self.console()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The visible text of the first `selector` element ('' without one).
    pub fn text(&self, selector: &str) -> String {
        match self.find(selector) {
            Some(id) => self
                .get(&format!("/element/{id}/text"))
                .as_str()
                .unwrap_or_default()
                .to_string(),
            None => String::new(),
        }
    }

    /// Clicks the first `selector` element (waited for).
    pub fn click(&self, selector: &str) {
        let id = self.wait_for(selector);
        let v = self.post(&format!("/element/{id}/click"), &json!({}));
        assert!(v.is_null(), "clicking '{selector}': {v}");
    }

    /// Types `text` into the first `selector` element (waited for), after clearing it.
    pub fn type_into(&self, selector: &str, text: &str) {
        let id = self.wait_for(selector);
        if !self.attribute_is(&id, "type", "file") {
            self.post(&format!("/element/{id}/clear"), &json!({}));
        }
        let v = self.post(&format!("/element/{id}/value"), &json!({ "text": text }));
        assert!(v.is_null(), "typing into '{selector}': {v}");
    }

    fn attribute_is(&self, id: &str, name: &str, expected: &str) -> bool {
        self.get(&format!("/element/{id}/attribute/{name}"))
            .as_str()
            == Some(expected)
    }

    /// Presses `keys` one after the other on whatever has the focus, as a keyboard-only
    /// user would (WebDriver key codes: `\u{E004}` Tab, `\u{E007}` Enter).
    pub fn press(&self, keys: &[&str]) {
        let actions: Vec<Value> = keys
            .iter()
            .flat_map(|k| {
                [
                    json!({"type": "keyDown", "value": k}),
                    json!({"type": "keyUp", "value": k}),
                ]
            })
            .collect();
        let v = self.post(
            "/actions",
            &json!({"actions": [{"type": "key", "id": "keyboard", "actions": actions}]}),
        );
        assert!(v.is_null(), "pressing {keys:?}: {v}");
    }

    /// The handles of the session's windows and tabs.
    pub fn windows(&self) -> Vec<String> {
        self.get("/window/handles")
            .as_array()
            .map(|all| {
                all.iter()
                    .filter_map(|h| h.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The handle of the window commands go to.
    pub fn window(&self) -> String {
        self.get("/window").as_str().unwrap_or_default().to_string()
    }

    /// Sends commands to window `handle` from now on.
    pub fn switch_to(&self, handle: &str) {
        let v = self.post("/window", &json!({ "handle": handle }));
        assert!(v.is_null(), "switching to window {handle}: {v}");
    }

    /// Sends commands to window `handle` if it is still open.
    pub fn try_switch_to(&self, handle: &str) -> bool {
        self.post("/window", &json!({ "handle": handle })).is_null()
    }

    /// Opens a new tab and sends commands to it; returns its handle.
    pub fn new_tab(&self) -> String {
        let v = self.post("/window/new", &json!({"type": "tab"}));
        let handle = v["handle"].as_str().expect("a new tab").to_string();
        self.switch_to(&handle);
        handle
    }

    /// Closes the current window (commands must then switch to another).
    pub fn close_window(&self) {
        self.agent
            .delete(&format!("{}/window", self.base))
            .call()
            .expect("the driver answers");
    }

    /// Clicks the first `selector` element with the middle button, as a user opening a
    /// link in a new tab does.
    pub fn middle_click(&self, selector: &str) {
        let id = self.wait_for(selector);
        let pointer = json!({
            "type": "pointer", "id": "mouse", "parameters": {"pointerType": "mouse"},
            "actions": [
                {"type": "pointerMove", "origin": {ELEMENT: id}, "x": 0, "y": 0},
                {"type": "pointerDown", "button": 1},
                {"type": "pointerUp", "button": 1},
            ],
        });
        let v = self.post("/actions", &json!({ "actions": [pointer] }));
        assert!(v.is_null(), "middle-clicking '{selector}': {v}");
    }

    /// Runs `script` (a function body) with `args`; returns its value.
    pub fn script(&self, script: &str, args: Value) -> Value {
        self.post("/execute/sync", &json!({ "script": script, "args": args }))
    }

    /// Answers the page's pending `alert`/`confirm`/`prompt` with `text` and accepts it.
    pub fn accept_prompt(&self, text: Option<&str>) {
        let started = Instant::now();
        while self.get("/alert/text").is_object() {
            assert!(started.elapsed() < GUARD, "no dialog appeared");
            std::thread::sleep(Duration::from_millis(50));
        }
        if let Some(text) = text {
            self.post("/alert/text", &json!({ "text": text }));
        }
        self.post("/alert/accept", &json!({}));
    }

    /// Sets the window's outer size (a taller window shows a whole page in one shot).
    pub fn resize(&self, width: u32, height: u32) {
        let v = self.post("/window/rect", &json!({"width": width, "height": height}));
        assert!(v.is_object(), "resizing: {v}");
    }

    /// Saves a screenshot of the window as `path` (PNG).
    pub fn screenshot(&self, path: &Path) {
        let data = self.get("/screenshot");
        let png = base64::engine::general_purpose::STANDARD
            .decode(data.as_str().unwrap_or_default())
            .expect("a base64 screenshot");
        std::fs::write(path, png).expect("screenshot written");
    }

    /// The browser console's messages since the last call: (level, message); none from a
    /// browser whose driver hands out no log (Firefox).
    pub fn console(&self) -> Vec<(String, String)> {
        if !self.has_log {
            return Vec::new();
        }
        let v = self.post("/se/log", &json!({"type": "browser"}));
        v.as_array()
            .map(|entries| {
                entries
                    .iter()
                    .map(|e| {
                        (
                            e["level"].as_str().unwrap_or_default().to_string(),
                            e["message"].as_str().unwrap_or_default().to_string(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}
