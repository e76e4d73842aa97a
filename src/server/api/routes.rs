//! How an entry path is classified: the part of the routing table that `/metrics` also
//! needs to group requests, kept apart so it depends on nothing.

/// Where a `/b/{bucket}/…` path goes (ReductStore routes by how the entry part ends).
pub enum EntryRoute<'a> {
    /// `…/{entry}/batch`.
    Batch(&'a str),
    /// `…/{entry}/q`.
    Query(&'a str),
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
    if let Some(name) = entry.strip_suffix("/q").filter(|n| !n.is_empty())
        && matches!(method, "POST" | "GET" | "HEAD" | "DELETE")
    {
        return EntryRoute::Query(name);
    }
    EntryRoute::Record
}
