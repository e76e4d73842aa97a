//! How an entry path is classified: the part of the routing table that `/metrics` and
//! the usage trail also need to group requests, below `api/` so that they need not reach
//! up into it, and depending on nothing.

/// Where a `/b/{bucket}/…` path goes (ReductStore routes by how the entry part ends).
pub enum EntryRoute<'a> {
    /// `…/{entry}/batch`.
    Batch(&'a str),
    /// `…/{entry}/q`.
    Query(&'a str),
    /// `PUT …/{entry}/rename`.
    Rename(&'a str),
    /// The single-record endpoints.
    Record,
}

/// Routes an entry path: a `/batch` or `/q` suffix after a non-empty entry name (so
/// top-level entries named `batch` or `q` stay reachable as records).
pub fn entry_route<'a>(method: &str, entry: &'a str) -> EntryRoute<'a> {
    if let Some(name) = entry.strip_suffix("/batch").filter(|n| !n.is_empty())
        && matches!(method, "POST" | "PATCH" | "DELETE" | "GET" | "HEAD")
    {
        return EntryRoute::Batch(name);
    }
    if let Some(name) = entry.strip_suffix("/rename").filter(|n| !n.is_empty())
        && method == "PUT"
    {
        return EntryRoute::Rename(name);
    }
    if let Some(name) = entry.strip_suffix("/q").filter(|n| !n.is_empty())
        && matches!(method, "POST" | "GET" | "HEAD" | "DELETE")
    {
        return EntryRoute::Query(name);
    }
    EntryRoute::Record
}

/// The methods a path of the API answers (`rest`: the path after `/api/v1/`, without
/// its query), as ReductStore's router lists them in `allow` with a 405; `None` for a
/// path no route matches.
pub fn allowed_methods(rest: &str) -> Option<&'static str> {
    let parts: Vec<&str> = rest.split('/').collect();
    let named = |s: &str| !s.is_empty();
    Some(match parts.as_slice() {
        ["info" | "list" | "me" | "alive" | "ready" | "tokens" | "lifecycles" | "replications"] => {
            "GET,HEAD"
        }
        ["tokens", name] if named(name) => "GET,HEAD,POST,DELETE",
        ["tokens", name, "rotate"] if named(name) => "POST",
        ["b", bucket] if named(bucket) => "GET,HEAD,POST,PUT,DELETE",
        ["b", bucket, _, ..] if named(bucket) => "GET,HEAD,POST,PATCH,PUT,DELETE",
        ["io", bucket, op] if named(bucket) => match *op {
            "write" | "q" => "POST",
            "read" => "GET,HEAD",
            "remove" => "DELETE",
            "update" => "PATCH",
            _ => return None,
        },
        ["lifecycles", name] if named(name) => "GET,HEAD,POST,PUT,DELETE",
        ["lifecycles", name, "mode"] if named(name) => "PATCH",
        ["lifecycles", name, "run"] if named(name) => "POST",
        ["replications", name] if named(name) => "GET,HEAD,POST,PUT,DELETE",
        ["replications", name, "mode"] if named(name) => "PATCH",
        // The file name may hold slashes (reduct-py names it after the entry), as
        // ReductStore routes `/links/{*file_name}`.
        ["links", file @ ..] if !file.is_empty() && file.iter().all(|s| named(s)) => {
            "GET,HEAD,POST"
        }
        ["storage", bucket] if named(bucket) => "GET,HEAD",
        ["storage", bucket, "histogram"] if named(bucket) => "GET,HEAD",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::allowed_methods;

    #[test]
    fn every_route_lists_its_methods_and_unknown_paths_none() {
        assert_eq!(allowed_methods("info"), Some("GET,HEAD"));
        assert_eq!(allowed_methods("b/x"), Some("GET,HEAD,POST,PUT,DELETE"));
        assert_eq!(
            allowed_methods("b/x/a/b/c"),
            Some("GET,HEAD,POST,PATCH,PUT,DELETE")
        );
        assert_eq!(allowed_methods("io/x/read"), Some("GET,HEAD"));
        assert_eq!(allowed_methods("lifecycles/p/mode"), Some("PATCH"));
        assert_eq!(
            allowed_methods("links/cam/front.bin"),
            Some("GET,HEAD,POST")
        );
        for unknown in [
            "",
            "nope",
            "b",
            "b/",
            "io/x",
            "io/x/other",
            "tokens/a/b",
            "info/x",
            "links/",
            "links/a//b",
        ] {
            assert_eq!(allowed_methods(unknown), None, "{unknown}");
        }
    }
}
