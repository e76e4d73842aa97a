//! What a log line may not carry, taken out where the line is formatted: credentials
//! (bearer tokens, `Authorization` values, S3 signatures, credentials and session tokens,
//! a replication's `dst_token`) and the build machine's paths. The logger runs every line
//! through [`redact`] before the process log or the `$system` trail sees it, whatever the
//! level, so no setting can let a secret through.
//!
//! Lines that carry raw wire bytes cannot be redacted (a hexdump splits a header over
//! several lines), so they are not logged at all: see [`carries_wire_bytes`].

use std::borrow::Cow;

/// What replaces a secret.
pub const REDACTED: &str = "[redacted]";

/// How a key's value is recognised.
#[derive(Clone, Copy, PartialEq)]
enum Value {
    /// After `:` or `=`, up to a quote or the end of the line (an `Authorization` value:
    /// a scheme, then credentials that may hold spaces and commas).
    Rest,
    /// After `:` or `=`, one word (a query parameter, a header value, a JSON string).
    Word,
    /// After white space, one word (`Bearer <token>`).
    Spaced,
}

/// The keys whose values are secrets, lowercase; matched in any case.
const KEYS: &[(&str, Value)] = &[
    ("authorization", Value::Rest),
    ("x-amz-signature", Value::Word),
    ("x-amz-credential", Value::Word),
    ("x-amz-security-token", Value::Word),
    ("signature", Value::Word),
    ("credential", Value::Word),
    ("dst_token", Value::Word),
    ("api_token", Value::Word),
    ("access_key", Value::Word),
    ("secret_key", Value::Word),
    ("bearer", Value::Spaced),
];

/// Whether a log line comes from another crate at TRACE: an HTTP client's hexdump of the
/// request (headers and all, split over lines), a TLS library's handshake messages and
/// session tickets. Such a line is dropped before any output sees it.
pub fn carries_wire_bytes(target: &str, level: log::Level) -> bool {
    level == log::Level::Trace && !is_ours(target)
}

/// Whether a log target is this crate's own.
pub fn is_ours(target: &str) -> bool {
    target == "halflife" || target.starts_with("halflife::")
}

/// `text` with every secret value replaced by [`REDACTED`] and every path into the
/// build machine's cargo registry cut to the crate's own path.
pub fn redact(text: &str) -> Cow<'_, str> {
    let lower = text.to_ascii_lowercase();
    let mut spans: Vec<(usize, usize)> = Vec::new();
    for &(key, kind) in KEYS {
        let mut from = 0;
        while let Some(found) = lower[from..].find(key) {
            let start = from + found;
            let after = start + key.len();
            from = after;
            // A key is a whole word: `xsignature` or `signatures` is something else.
            let bytes = lower.as_bytes();
            let word_byte = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
            if start > 0 && word_byte(bytes[start - 1]) {
                continue;
            }
            if bytes.get(after).is_some_and(|&b| word_byte(b)) {
                continue;
            }
            if let Some(span) = value_span(text, after, kind) {
                spans.push(span);
            }
        }
    }
    let text = if spans.is_empty() {
        Cow::Borrowed(text)
    } else {
        Cow::Owned(replace(text, spans))
    };
    match text.find(REGISTRY) {
        None => text,
        Some(_) => Cow::Owned(strip_registry(&text)),
    }
}

/// Where the value after a key at `after` lies, if it has one.
fn value_span(text: &str, after: usize, kind: Value) -> Option<(usize, usize)> {
    let bytes = text.as_bytes();
    let mut at = after;
    let mut assigned = false;
    let mut spaced = false;
    // Separators as logs write them: `key: v`, `key=v`, `"key":"v"`, `key: Some("v")`.
    while at < bytes.len() {
        match bytes[at] {
            b':' | b'=' => assigned = true,
            b' ' | b'\t' => spaced = true,
            b'"' | b'\'' => {}
            _ => break,
        }
        at += 1;
    }
    if text[at..].starts_with("Some(") {
        at += "Some(".len();
        while at < bytes.len() && (bytes[at] == b'"' || bytes[at] == b'\'') {
            at += 1;
        }
    }
    let ready = match kind {
        Value::Spaced => spaced && !assigned,
        Value::Rest | Value::Word => assigned,
    };
    if !ready || at >= bytes.len() {
        return None;
    }
    let end = match kind {
        Value::Rest => text[at..]
            .find(['"', '\'', '\r', '\n'])
            .map_or(text.len(), |i| at + i),
        Value::Word | Value::Spaced => text[at..]
            .find(|c: char| {
                c.is_whitespace()
                    || matches!(
                        c,
                        '"' | '\'' | '&' | ',' | ';' | ')' | '}' | ']' | '>' | '<' | '\\'
                    )
            })
            .map_or(text.len(), |i| at + i),
    };
    (end > at).then_some((at, end))
}

/// `text` with the byte ranges `spans` (possibly overlapping) replaced by [`REDACTED`].
fn replace(text: &str, mut spans: Vec<(usize, usize)>) -> String {
    spans.sort_unstable();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    for (start, end) in spans {
        if end <= copied {
            continue;
        }
        if start >= copied {
            out.push_str(&text[copied..start]);
            out.push_str(REDACTED);
        }
        copied = end;
    }
    out.push_str(&text[copied..]);
    out
}

/// Where crates from crates.io are unpacked on the machine that built the binary.
const REGISTRY: &str = "/.cargo/registry/src/";

/// `text` with each `<home>/.cargo/registry/src/<index>/` prefix taken out, leaving
/// `<crate>-<version>/src/…`.
fn strip_registry(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(REGISTRY) {
        // The path began at the last separator before the home directory.
        let head = &rest[..at];
        let begin = head
            .rfind(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '(' | '='))
            .map_or(0, |i| i + 1);
        out.push_str(&head[..begin]);
        let after = &rest[at + REGISTRY.len()..];
        // Skip the index directory (`index.crates.io-<hash>/`).
        rest = after.find('/').map_or(after, |i| &after[i + 1..]);
    }
    out.push_str(rest);
    out
}

/// A log record's source file as the trail shows it: this crate's own relative path,
/// another crate's as `<crate>-<version>/src/…`, never a path of the build machine.
pub fn public_file(file: &str) -> Cow<'_, str> {
    if !file.starts_with('/') && !file.contains(":\\") {
        return Cow::Borrowed(file);
    }
    if file.contains(REGISTRY) {
        return Cow::Owned(strip_registry(file));
    }
    // Another absolute path (a git dependency, a vendored crate): from its crate's
    // directory on, as far as it can be told, else the file name alone.
    match file.rfind("/src/") {
        Some(src) => {
            let crate_dir = file[..src].rfind('/').map_or(0, |i| i + 1);
            Cow::Owned(file[crate_dir..].to_string())
        }
        None => Cow::Owned(file.rsplit('/').next().unwrap_or_default().to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens_and_authorization_values_are_cut() {
        assert_eq!(
            redact("authorization: Bearer dst-token-Zq8vW3xK5m"),
            "authorization: [redacted]"
        );
        assert_eq!(
            redact(r#"{"Authorization": "AWS4-HMAC-SHA256 Credential=AK/1, Signature=ab"}"#),
            r#"{"Authorization": "[redacted]"}"#
        );
        assert_eq!(
            redact("sent Bearer abc123 to x"),
            "sent Bearer [redacted] to x"
        );
    }

    #[test]
    fn presigned_urls_lose_their_signature_and_credential() {
        let url = "GET http://127.0.0.1:3900/b/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=GK31%2F2026%2Fgarage&X-Amz-Date=20261206T000000Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host&X-Amz-Signature=0123abcd";
        let clean = redact(url);
        assert!(!clean.contains("GK31"), "{clean}");
        assert!(!clean.contains("0123abcd"), "{clean}");
        assert!(clean.contains("X-Amz-Date=20261206T000000Z"), "{clean}");
        assert!(clean.contains("X-Amz-SignedHeaders=host"), "{clean}");
        assert_eq!(
            redact("x-amz-security-token: FQoGZXIvYXdzE"),
            "x-amz-security-token: [redacted]"
        );
    }

    #[test]
    fn replication_tokens_are_cut_in_json_and_debug_forms() {
        assert_eq!(
            redact(r#"{"dst_token":"secret-1","dst_bucket":"b"}"#),
            r#"{"dst_token":"[redacted]","dst_bucket":"b"}"#
        );
        assert_eq!(
            redact(r#"dst_token: Some("secret-2"), mode"#),
            r#"dst_token: Some("[redacted]"), mode"#
        );
    }

    #[test]
    fn ordinary_words_are_left_alone() {
        for text in [
            "the link's signature is wrong",
            "bad credentials for bucket 'x'",
            "signatures: 3",
            "no bearer",
            "lifecycle 'p' created",
        ] {
            assert_eq!(redact(text), text);
        }
    }

    #[test]
    fn build_machine_paths_are_cut() {
        assert_eq!(
            public_file(
                "/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/ureq-3.5.2/src/run.rs"
            ),
            "ureq-3.5.2/src/run.rs"
        );
        assert_eq!(public_file("src/server/mod.rs"), "src/server/mod.rs");
        assert_eq!(
            public_file("/home/ci/git/checkouts/foo-1/abc/src/lib.rs"),
            "abc/src/lib.rs"
        );
        assert_eq!(
            redact("panicked at /root/.cargo/registry/src/index.crates.io-19/x-1.0/src/a.rs:3"),
            "panicked at x-1.0/src/a.rs:3"
        );
    }

    #[test]
    fn other_crates_traces_carry_wire_bytes() {
        assert!(carries_wire_bytes("ureq_proto::util", log::Level::Trace));
        assert!(carries_wire_bytes("rustls::client::hs", log::Level::Trace));
        assert!(!carries_wire_bytes("ureq::run", log::Level::Debug));
        assert!(!carries_wire_bytes(
            "halflife::replication",
            log::Level::Trace
        ));
    }
}
