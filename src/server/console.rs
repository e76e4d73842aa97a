//! The web console at `/ui/`: plain HTML, CSS and ES modules from `console/`, compiled
//! into the binary (no network at run time, no build step, no third-party code). Any
//! other path under `/ui/` answers the console's page, so deep links
//! (`/ui/b/{bucket}/{entry}?start=…`) survive a reload; the page's modules route them.
//!
//! Every answer carries strict security headers: a Content-Security-Policy that allows
//! only the console's own files (no inline script or style, no framing), `nosniff`, no
//! referrer. The console calls the API with the token it keeps in `sessionStorage`.
//!
//! Scripts are admitted by a nonce made for each answer of the page, not by origin: the
//! page's module carries it and the modules it imports inherit it, while a document a
//! record could become in this origin (a `blob:` URL inherits the page's policy) cannot
//! know it, so a `<script src>` planted in a record runs nowhere — not even one whose
//! source is this origin's own query link.

use crate::server::http::response::{Response, ResponseBody};

/// The Content-Security-Policy of the console's answers; `{NONCE}` is the page's nonce
/// (the modules' answers, which run nothing of their own, get a fresh one too).
const CSP: &str = "default-src 'none'; script-src 'nonce-{NONCE}' 'strict-dynamic'; style-src 'self'; img-src 'self' blob: data:; media-src 'self' blob:; connect-src 'self' blob:; font-src 'self'; base-uri 'self'; form-action 'none'; frame-ancestors 'none'; object-src 'none'";

macro_rules! asset {
    ($path:literal, $type:literal) => {
        (
            $path,
            $type,
            include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/console/", $path)) as &[u8],
        )
    };
}

/// The console's files: path under `/ui/`, content type, bytes.
const ASSETS: &[(&str, &str, &[u8])] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("style.css", "text/css; charset=utf-8"),
    asset!("favicon.svg", "image/svg+xml"),
    asset!("js/main.js", "text/javascript; charset=utf-8"),
    asset!("js/api.js", "text/javascript; charset=utf-8"),
    asset!("js/batch.js", "text/javascript; charset=utf-8"),
    asset!("js/format.js", "text/javascript; charset=utf-8"),
    asset!("js/protocol.js", "text/javascript; charset=utf-8"),
    asset!("js/route.js", "text/javascript; charset=utf-8"),
    asset!("js/chart.js", "text/javascript; charset=utf-8"),
    asset!("js/dom.js", "text/javascript; charset=utf-8"),
    asset!("js/views/login.js", "text/javascript; charset=utf-8"),
    asset!("js/views/cards.js", "text/javascript; charset=utf-8"),
    asset!("js/views/dashboard.js", "text/javascript; charset=utf-8"),
    asset!("js/views/attachments.js", "text/javascript; charset=utf-8"),
    asset!("js/views/bucket.js", "text/javascript; charset=utf-8"),
    asset!("js/views/entry.js", "text/javascript; charset=utf-8"),
    asset!("js/views/lifecycles.js", "text/javascript; charset=utf-8"),
    asset!("js/views/replications.js", "text/javascript; charset=utf-8"),
    asset!("js/views/tokens.js", "text/javascript; charset=utf-8"),
];

/// The answer to `GET`/`HEAD` of `/ui/<rest>` (`rest` without the query string) on a
/// server whose API lives under `base_path` (`/`, or `/prefix/`).
pub fn answer(rest: &str, base_path: &str) -> Response {
    let (_, content_type, bytes) = ASSETS
        .iter()
        .find(|(path, _, _)| *path == rest)
        .copied()
        .unwrap_or(ASSETS[0]);
    let nonce = nonce();
    let body = if content_type.starts_with("text/html") {
        // The page's relative links resolve against `<base href>`: the base path in it.
        let page = String::from_utf8_lossy(bytes);
        page.replace("%BASE%", &attribute_text(base_path))
            .replace("%NONCE%", &nonce)
            .into_bytes()
    } else {
        bytes.to_vec()
    };
    // The page itself is always asked again (a new binary brings new modules); the
    // modules may be kept for a while, the page names them.
    let cache = if content_type.starts_with("text/html") {
        "no-cache"
    } else {
        "max-age=300"
    };
    secured(Response::ok(), &nonce)
        .header("content-type", content_type)
        .header("cache-control", cache)
        .with_body(ResponseBody::Bytes(body))
}

/// `text` made safe inside a double-quoted HTML attribute.
fn attribute_text(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A fresh script nonce: 128 random bits, base64. Without randomness (never on Linux)
/// the nonce is one no page carries, so the console's scripts stop rather than the
/// policy opening.
fn nonce() -> String {
    use base64::Engine;
    let mut bytes = [0u8; 16];
    match getrandom::fill(&mut bytes) {
        Ok(()) => base64::engine::general_purpose::STANDARD.encode(bytes),
        Err(_) => "unavailable".to_string(),
    }
}

/// `response` with the console's security headers, admitting scripts that carry `nonce`.
pub fn secured(response: Response, nonce: &str) -> Response {
    response
        .header("content-security-policy", CSP.replace("{NONCE}", nonce))
        .header("x-content-type-options", "nosniff")
        .header("x-frame-options", "DENY")
        .header("referrer-policy", "no-referrer")
        .header("cross-origin-opener-policy", "same-origin")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_paths_answer_the_page_and_modules_their_type() {
        let page = answer("b/frames/cam", "/prefix/");
        assert_eq!(page.status, 200);
        let main = answer("js/main.js", "/");
        let header = |r: &Response, name: &str| {
            r.headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        assert!(header(&page, "content-type").starts_with("text/html"));
        assert!(header(&main, "content-type").starts_with("text/javascript"));
        assert!(header(&page, "content-security-policy").contains("frame-ancestors 'none'"));
        assert!(!CSP.contains("unsafe-inline"));
        let ResponseBody::Bytes(html) = &page.body else {
            panic!("a page body");
        };
        let html = String::from_utf8_lossy(html);
        assert!(html.contains(r#"<base href="/prefix/ui/">"#));
        // The page's one script carries the nonce its policy names, and only that one.
        let policy = header(&page, "content-security-policy");
        let nonce = policy
            .split("'nonce-")
            .nth(1)
            .and_then(|rest| rest.split('\'').next())
            .expect("a nonce in the policy");
        assert!(nonce.len() >= 22, "{nonce}");
        assert!(html.contains(&format!(r#"nonce="{nonce}""#)), "{html}");
        assert!(!policy.contains("'self' 'nonce") && !policy.contains("script-src 'self'"));
        let again = header(&answer("", "/"), "content-security-policy");
        assert_ne!(policy, again, "a new nonce per answer");
    }
}
