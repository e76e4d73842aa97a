//! The console through real HTTP: `/` leads to `/ui/` with a proper reason phrase, the
//! page and its modules answer with strict security headers, deep links answer the page,
//! and `RS_WEB_CONSOLE=false` turns it all off.

use std::io::{Read, Write};

use crate::common::start_server;

#[test]
fn the_console_is_served_with_strict_headers_and_can_be_turned_off() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(dir.path(), &[("RS_API_TOKEN", "secret")]);
    let root = s.get("/");
    assert_eq!(root.status, 302);
    assert_eq!(root.header("location"), Some("/ui/"));
    // The status line says what 302 is.
    let mut raw = std::net::TcpStream::connect(s.addr).unwrap();
    raw.write_all(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    raw.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 302 Found\r\n"), "{answer}");
    for path in [
        "/ui/",
        "/ui/b/frames/cam?start=1",
        "/ui/js/main.js",
        "/ui/style.css",
    ] {
        // No token needed: the page asks for one.
        let r = s.get(path);
        assert_eq!(r.status, 200, "{path}");
        let csp = r.header("content-security-policy").unwrap_or_default();
        assert!(
            csp.contains("script-src 'nonce-") && csp.contains("frame-ancestors 'none'"),
            "{path}: {csp}"
        );
        assert!(!csp.contains("unsafe-inline"), "{path}: {csp}");
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    }
    let answer = s.get("/ui/b/frames/cam");
    let page = String::from_utf8(answer.body.clone()).unwrap();
    assert!(page.contains(r#"<base href="/ui/">"#), "{page}");
    assert!(!page.contains("<script>"), "no inline script");
    // Scripts run by the page's nonce, not by origin: a new one for every answer.
    let csp = answer.header("content-security-policy").unwrap_or_default();
    let nonce = csp
        .split("'nonce-")
        .nth(1)
        .and_then(|rest| rest.split('\'').next())
        .unwrap_or_default();
    assert!(nonce.len() >= 22, "{csp}");
    assert!(page.contains(&format!(r#"nonce="{nonce}""#)), "{page}");
    assert!(!csp.contains("script-src 'self'"), "{csp}");
    let again = s.get("/ui/b/frames/cam");
    assert_ne!(again.header("content-security-policy"), Some(csp));
    // API answers are never a page's script, style or active document.
    let r = s.request("GET", "/api/v1/info", &[("sec-fetch-dest", "script")], b"");
    assert_eq!(r.status, 403, "{}", r.error());
    let r = s.get("/api/v1/alive");
    assert_eq!(r.header("content-security-policy"), Some("sandbox"));
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(
        r.header("cross-origin-resource-policy"),
        Some("same-origin")
    );
    assert!(
        s.get("/ui/js/main.js")
            .header("content-type")
            .unwrap_or_default()
            .starts_with("text/javascript")
    );
    // The API still wants its token.
    assert_eq!(s.get("/api/v1/info").status, 401);
    drop(s);

    let off = start_server(dir.path(), &[("RS_WEB_CONSOLE", "false")]);
    assert_eq!(off.get("/ui/").status, 404);
    assert_eq!(off.get("/").status, 404);
}
