//! Cross-origin requests (`RS_CORS_ALLOW_ORIGIN`), as ReductStore 1.21.5 answers them, so
//! a browser application on another origin (ReductStore's web console among them) can
//! call the API: the allowed origins get `access-control-allow-origin` on every answer,
//! errors included, and `OPTIONS` on any path is a preflight answered without a token.

use crate::server::http::Response;

/// The origins allowed to call the API from a browser.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cors {
    /// `*` was listed: every origin is allowed.
    any: bool,
    /// Allowed origins, compared as exact strings.
    origins: Vec<String>,
}

impl Cors {
    /// Parses `RS_CORS_ALLOW_ORIGIN`: comma-separated origins (trimmed, empty items
    /// dropped, not validated as URLs); an item `*` allows every origin. Empty: none.
    pub fn parse(list: &str) -> Cors {
        let origins: Vec<String> = list
            .split(',')
            .map(str::trim)
            .filter(|o| !o.is_empty())
            .map(str::to_string)
            .collect();
        Cors {
            any: origins.iter().any(|o| o == "*"),
            origins,
        }
    }

    /// Adds the CORS headers every answer carries: with `*`, `access-control-allow-origin:
    /// *`; otherwise `vary: origin`, and the request's `origin` echoed when it is listed.
    pub fn apply(&self, origin: Option<&str>, response: &mut Response) {
        let headers = &mut response.headers;
        if self.any {
            headers.push(("access-control-allow-origin".into(), "*".into()));
        } else {
            if let Some(origin) = origin.filter(|o| self.origins.iter().any(|a| a == o)) {
                headers.push(("access-control-allow-origin".into(), origin.to_string()));
            }
            headers.push(("vary".into(), "origin".into()));
        }
        headers.push(("access-control-expose-headers".into(), "*".into()));
    }

    /// The answer to an `OPTIONS` request (a preflight): 200, every method and header
    /// allowed, and `allow` with the methods of the route the path names, if any. The
    /// origin headers are added by [`Cors::apply`] like on every answer.
    pub fn preflight(allow: Option<&str>) -> Response {
        let mut response = Response::ok()
            .header("access-control-allow-methods", "*")
            .header("access-control-allow-headers", "*");
        response.anonymous = true;
        match allow {
            Some(methods) => response.header("allow", methods),
            None => response,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header<'a>(r: &'a Response, name: &str) -> Option<&'a str> {
        r.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn listed_origins_are_echoed_and_others_are_not() {
        let cors = Cors::parse(" https://a.example , ,http://b.example:8080");
        let mut r = Response::error(404, "x");
        cors.apply(Some("https://a.example"), &mut r);
        assert_eq!(
            header(&r, "access-control-allow-origin"),
            Some("https://a.example")
        );
        assert_eq!(header(&r, "vary"), Some("origin"));
        assert_eq!(header(&r, "access-control-expose-headers"), Some("*"));
        for other in [
            Some("https://evil.example"),
            Some("https://a.example/"),
            None,
        ] {
            let mut r = Response::ok();
            cors.apply(other, &mut r);
            assert_eq!(header(&r, "access-control-allow-origin"), None, "{other:?}");
            assert_eq!(header(&r, "vary"), Some("origin"));
        }
    }

    #[test]
    fn a_star_allows_every_origin_without_vary_and_unset_allows_none() {
        let mut r = Response::ok();
        Cors::parse("https://a.example,*").apply(None, &mut r);
        assert_eq!(header(&r, "access-control-allow-origin"), Some("*"));
        assert_eq!(header(&r, "vary"), None);
        let mut r = Response::ok();
        Cors::parse("").apply(Some("https://a.example"), &mut r);
        assert_eq!(header(&r, "access-control-allow-origin"), None);
        assert_eq!(header(&r, "vary"), Some("origin"));
    }

    #[test]
    fn a_preflight_allows_everything_and_names_the_routes_methods() {
        let r = Cors::preflight(Some("GET,HEAD"));
        assert_eq!(r.status, 200);
        assert_eq!(header(&r, "access-control-allow-methods"), Some("*"));
        assert_eq!(header(&r, "access-control-allow-headers"), Some("*"));
        assert_eq!(header(&r, "allow"), Some("GET,HEAD"));
        assert_eq!(header(&Cors::preflight(None), "allow"), None);
    }
}
