//! `/links/{file}`: `POST` makes a query link (any token; read access to its bucket),
//! `GET`/`HEAD` opens one without a token and answers the record it names, with
//! `Range` support. The link format is `server/links.rs`.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{Error, Result};
use crate::server::api::io::{QueryRequest, QueryType};
use crate::server::api::records::single_record;
use crate::server::auth::Access;
use crate::server::http::ResponseBody;
use crate::server::http::range::served_range;
use crate::server::http::request::{Request, read_body};
use crate::server::http::{Response, head::parse_decimal};
use crate::server::links::{AUTH_DISABLED_ISSUER, LinkParams, LinkRequest, open, seal};
use crate::server::state::App;
use crate::storage::QueryOptions;
use crate::storage::condition::Condition;

/// The query a link runs, parsed and checked (only `QUERY`).
fn link_query(request: &LinkRequest) -> Result<QueryRequest> {
    let query: QueryRequest = serde_json::from_str(request.query.get())
        .map_err(|e| Error::unprocessable(format!("Invalid JSON: {e}")))?;
    if query.query_type != QueryType::Query {
        return Err(Error::unprocessable(
            "Only 'Query' type is supported for query links",
        ));
    }
    Ok(query)
}

/// `base_url` as ReductStore checks it: absolute, with a host.
fn check_base_url(url: &str) -> Result<()> {
    let bad = |why: &str| {
        Error::unprocessable(format!("Invalid base_url provided for query link: {why}"))
    };
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| bad("relative URL without a base"))?;
    let scheme_ok = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    if !scheme_ok {
        return Err(bad("relative URL without a base"));
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = authority.rsplit('@').next().unwrap_or_default();
    if host.is_empty() || host.starts_with(':') {
        return Err(bad("missing host"));
    }
    Ok(())
}

/// Percent-encodes a link's query parameter value (everything but unreserved bytes).
fn param(value: &str) -> String {
    value
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `POST /links/{file}`.
pub fn create(app: &App, file: &str, req: &mut Request) -> Result<Response> {
    let body = read_body(req)?;
    let request: LinkRequest = serde_json::from_slice(&body)
        .map_err(|e| Error::unprocessable(format!("Invalid JSON: {e}")))?;
    link_query(&request)?;
    if request.record_entry.is_none() || request.record_timestamp.is_none() {
        return Err(Error::unprocessable(
            "Both 'record_entry' and 'record_timestamp' must be provided in payload",
        ));
    }
    if let Some(base) = &request.base_url {
        check_base_url(base)?;
    }
    let (issuer, secret) = match (&req.caller, &app.tokens) {
        (Some(caller), Some(tokens)) => {
            caller.check(Access::Read(&request.bucket))?;
            (caller.name.clone(), tokens.link_issuer(&caller.name)?.0)
        }
        _ => (AUTH_DISABLED_ISSUER.to_string(), Vec::new()),
    };
    let params = seal(&request, &issuer, &secret)?;
    let mut base = request
        .base_url
        .clone()
        .unwrap_or_else(|| app.public_url.clone());
    if !base.ends_with('/') {
        base.push('/');
    }
    // The name goes back as it was given (1.21.5 puts a space back raw), but for what
    // would end the path or be read as an escape: `?`, `#`, `%` and control bytes.
    let file = crate::wire::percent::encode_keeping(file, |b| {
        !matches!(b, b'?' | b'#' | b'%') && !b.is_ascii_control()
    });
    let link = format!(
        "{base}api/v1/links/{file}?ct={}&s={}&i={}&n={}",
        params.ct,
        params.s,
        param(&params.i),
        params.n
    );
    Ok(Response::json(&serde_json::json!({ "link": link })))
}

/// `GET|HEAD /links/{any file}?ct=&s=&i=&n=[&e=&ts=]`, without a token.
pub fn open_link(app: &App, method: &str, req: &Request) -> Result<Response> {
    let get = |name: &str| {
        req.head
            .query_param(name)
            .ok_or_else(|| Error::unprocessable(format!("Missing '{name}' parameter")))
    };
    let params = LinkParams {
        ct: get("ct")?,
        s: get("s")?,
        i: get("i")?,
        n: get("n")?,
    };
    let (secret, issuer) = match &app.tokens {
        Some(tokens) => {
            let (secret, caller) = tokens.link_issuer(&params.i)?;
            (secret, Some(caller))
        }
        None if params.i == AUTH_DISABLED_ISSUER => (Vec::new(), None),
        None => {
            return Err(Error::not_found(format!(
                "Token '{}' doesn't exist",
                params.i
            )));
        }
    };
    let request = open(&params, &secret)?;
    if now_secs() > request.expire_at {
        return Err(Error::unprocessable("Query link has expired"));
    }
    if let Some(issuer) = &issuer {
        issuer.check(Access::Read(&request.bucket))?;
    }
    let (entry, ts) = match (req.head.query_param("e"), req.head.query_param("ts")) {
        (Some(e), Some(ts)) => {
            let ts = parse_decimal(&ts).ok_or_else(|| {
                Error::unprocessable("'ts' must be an unix timestamp in microseconds")
            })?;
            (e, ts)
        }
        (None, None) => match (&request.record_entry, request.record_timestamp) {
            (Some(e), Some(ts)) => (e.clone(), ts),
            _ => {
                return Err(Error::unprocessable(
                    "Both 'record_entry' and 'record_timestamp' must be provided in payload",
                ));
            }
        },
        _ => {
            return Err(Error::unprocessable(
                "Both 'e' and 'ts' parameters must be provided together",
            ));
        }
    };
    let record = find_record(app, &request, &entry, ts)?;
    let len = record.meta.size;
    let Ok(range) = served_range(req.head.header("range"), len) else {
        // (1.21.5 drops the connection here; RFC 9110 says 416.)
        return Ok(Response::error(
            416,
            &format!("Range not satisfiable for a record of {len} bytes"),
        )
        .header("content-range", format!("bytes */{len}")));
    };
    let payload = record.payload.clone();
    let mut response = single_record(record, method, &entry).header("accept-ranges", "bytes");
    if let (Some((first, last)), Some(payload)) = (range, payload) {
        response.status = 206;
        response = response.header("content-range", format!("bytes {first}-{last}/{len}"));
        let part = payload.slice(first as usize..last as usize + 1);
        response.body = if method == "GET" {
            ResponseBody::Payloads(vec![part])
        } else {
            ResponseBody::Head(part.len() as u64)
        };
    }
    Ok(response)
}

/// The record of the link's query whose entry and timestamp are the ones asked for.
fn find_record(
    app: &App,
    request: &LinkRequest,
    entry: &str,
    ts: u64,
) -> Result<crate::storage::Record> {
    let query = link_query(request)?;
    let bucket = app.store.bucket(&request.bucket)?;
    let strict = query.strict.unwrap_or(false);
    let when = query
        .when
        .as_ref()
        .filter(|w| w.get() != "null")
        .map(|w| Condition::parse_str(w.get(), strict))
        .transpose()?;
    let patterns = match query.entries {
        Some(entries) if !entries.is_empty() => entries,
        _ => vec![request.entry.clone()],
    };
    let start = query.start.unwrap_or(0);
    let stop = query.stop.unwrap_or(u64::MAX);
    let stateful = when.as_ref().is_some_and(Condition::is_stateful);
    let mut selected = bucket.select_entries(&patterns)?;
    // A stateless condition judges each record alone: only the one asked for is read.
    // One with aggregates needs the stream before it, in every selected entry.
    let (from, to) = if stateful {
        (start, stop)
    } else {
        selected.retain(|e| e.name() == entry);
        (start.max(ts), stop.min(ts.saturating_add(1)))
    };
    let not_found = || Error::not_found(format!("Record {entry}/{ts} not found in query result"));
    if ts < start || ts >= stop || from >= to {
        return Err(not_found());
    }
    let records = crate::storage::QueryIter::new(
        selected,
        &QueryOptions {
            entries: Vec::new(),
            start: Some(from),
            stop: Some(to),
            only_metadata: false,
            when,
        },
    )?;
    for record in records {
        let record = record?;
        if record.meta.timestamp > ts {
            break;
        }
        if record.meta.timestamp == ts && record.entry == entry {
            return Ok(record);
        }
    }
    Err(not_found())
}
