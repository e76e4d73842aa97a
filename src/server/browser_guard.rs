//! What a browser may do with the API's answers. Records hold whatever their writers put
//! there, the console runs in the same origin, and a query link needs no token: so no API
//! answer may become a script, a style or an active document of this origin.
//!
//! - A request a page makes for a script, a style or a worker (`Sec-Fetch-Dest`, which
//!   browsers send to `https` and loopback origins) is refused before it is routed.
//! - Every API answer with something to show (all but the empty answers of changes) says
//!   `nosniff`, is sandboxed when opened as a document (an HTML record renders with no
//!   script and an opaque origin: no token, no storage of ours), and, but for query links
//!   meant to be shared, is not served to other origins' pages.
//!
//! The console adds its own line: a per-page script nonce (`console.rs`), and downloads
//! typed so that no browser renders them.

use crate::server::http::head::RequestHead;
use crate::server::http::{Response, ResponseBody};

/// The `Sec-Fetch-Dest` values under which an answer would run or style a page.
const ACTIVE_DESTINATIONS: &[&str] = &[
    "script",
    "style",
    "worker",
    "sharedworker",
    "serviceworker",
    "audioworklet",
    "paintworklet",
    "xslt",
];

/// A 403 for an API request a browser makes to load a script, a style or a worker.
pub fn refuse_active_load(head: &RequestHead, api_path: bool) -> Option<Response> {
    if !api_path {
        return None;
    }
    let dest = head.header("sec-fetch-dest")?.trim().to_ascii_lowercase();
    if !ACTIVE_DESTINATIONS.contains(&dest.as_str()) {
        return None;
    }
    Some(Response::error(
        403,
        &format!(
            "the API does not serve a page's {dest} (Sec-Fetch-Dest: {dest}): records are data, never code of this origin"
        ),
    ))
}

/// Adds the headers an API answer carries (`link`: a query link's answer, which may be
/// embedded by other origins as a shared file is). `change`: the answer of a write, a
/// relabel or a removal (POST, PUT, PATCH, DELETE), which goes without them when it has no
/// bytes: nothing there for a browser to sniff, render or read across origins, and every
/// client would parse them on each such answer (a third of a Python client's time per
/// relabel). Every GET and HEAD answer has them, an empty one too.
pub fn harden(response: Response, link: bool, change: bool) -> Response {
    if change
        && (matches!(&response.body, ResponseBody::Empty)
            || matches!(&response.body, ResponseBody::Bytes(b) if b.is_empty()))
    {
        return response;
    }
    let response = response
        .header("x-content-type-options", "nosniff")
        .header("content-security-policy", "sandbox");
    if link {
        response
    } else {
        response.header("cross-origin-resource-policy", "same-origin")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(dest: Option<&str>) -> RequestHead {
        let mut head = RequestHead {
            method: "GET".into(),
            path: "/api/v1/links/x.js".into(),
            ..RequestHead::default()
        };
        if let Some(dest) = dest {
            head.headers.push(("sec-fetch-dest".into(), dest.into()));
        }
        head
    }

    #[test]
    fn scripts_and_styles_are_refused_documents_and_fetches_are_not() {
        for dest in ["script", "Style", "worker", "serviceworker"] {
            let refusal = refuse_active_load(&head(Some(dest)), true).expect(dest);
            assert_eq!(refusal.status, 403);
        }
        for dest in [None, Some("document"), Some("empty"), Some("image")] {
            assert!(refuse_active_load(&head(dest), true).is_none(), "{dest:?}");
        }
        assert!(refuse_active_load(&head(Some("script")), false).is_none());
    }

    #[test]
    fn answers_are_sandboxed_and_links_stay_shareable() {
        let names = |r: &Response| r.headers.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
        let api = harden(Response::ok(), false, false);
        assert!(names(&api).contains(&"cross-origin-resource-policy".to_string()));
        assert!(names(&api).contains(&"content-security-policy".to_string()));
        // A change's empty answer goes without them; one with bytes keeps them.
        assert!(names(&harden(Response::ok(), false, true)).is_empty());
        let json = Response::json(&serde_json::json!({"a": 1}));
        assert!(names(&harden(json, false, true)).contains(&"content-security-policy".to_string()));
        let link = harden(Response::ok(), true, false);
        assert!(!names(&link).contains(&"cross-origin-resource-policy".to_string()));
        assert!(names(&link).contains(&"x-content-type-options".to_string()));
    }
}
