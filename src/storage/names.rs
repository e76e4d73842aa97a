//! Name rules for buckets and entries. They are what keeps user input from reaching outside
//! the data directory: only `[A-Za-z0-9_-]` segments, so no `.`, `..`, `/` tricks or `%2F`.

use crate::error::{Error, Result, quoted};
use crate::storage::record::Labels;

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// Longest bucket name, and longest segment of an entry name: each is a directory
/// name, and file systems stop at 255 bytes (with room left for the suffixes of
/// directories being removed).
pub const MAX_NAME_LEN: usize = 128;
/// Most segments an entry name may have: each is a directory level.
pub const MAX_ENTRY_SEGMENTS: usize = 32;
/// Longest entry name in bytes, so its path stays far below the system's path limit.
pub const MAX_ENTRY_NAME_LEN: usize = 1024;

fn too_long(what: &str, name: &str) -> Error {
    Error::unprocessable(format!(
        "{what} '{}...' is longer than {MAX_NAME_LEN} characters",
        quoted(&name.chars().take(32).collect::<String>())
    ))
}

/// Checks a user bucket name against `^[A-Za-z0-9_-]+$`; `$` names are reserved.
pub fn validate_bucket_name(name: &str) -> Result<()> {
    validate_name("Bucket", name)
}

/// Checks a replication name: the bucket-name rules, since the name becomes a thread's
/// name and a directory's (a NUL or a 200-character name must not reach either).
pub fn validate_replication_name(name: &str) -> Result<()> {
    validate_name("Replication", name)
}

/// Checks a lifecycle policy name: the bucket-name rules, because the name is also a
/// segment of the entry holding the policy's events.
pub fn validate_lifecycle_name(name: &str) -> Result<()> {
    validate_name("Lifecycle", name)
}

/// The bucket-name rules for the name of a `what` (`Bucket`, `Lifecycle`).
fn validate_name(what: &str, name: &str) -> Result<()> {
    let name = &quoted(name);
    if name.len() > MAX_NAME_LEN {
        return Err(too_long(&format!("{what} name"), name));
    }
    if name.starts_with('$') {
        return Err(Error::unprocessable(format!(
            "{what} name '{name}' is reserved: names starting with '$' belong to the system"
        )));
    }
    if name.is_empty() || !name.chars().all(is_name_char) {
        return Err(Error::unprocessable(format!(
            "{what} name '{name}' can contain only letters, digits and [-,_] symbols"
        )));
    }
    Ok(())
}

/// Checks a system bucket name: `$` followed by a valid bucket name.
pub fn validate_system_bucket_name(name: &str) -> Result<()> {
    match name.strip_prefix('$') {
        Some(rest) if !rest.is_empty() && rest.chars().all(is_name_char) => Ok(()),
        _ => Err(Error::unprocessable(format!(
            "System bucket name '{name}' must be '$' followed by letters, digits, '-' or '_'"
        ))),
    }
}

/// Checks an entry name: segments of `[A-Za-z0-9_-]` joined by `/`, none empty; the
/// last may be `$meta` (an attachment entry).
pub fn validate_entry_name(name: &str) -> Result<()> {
    let name = &quoted(name);
    if name.is_empty() {
        return Err(Error::unprocessable("Entry name can't be empty"));
    }
    if name.len() > MAX_ENTRY_NAME_LEN {
        return Err(Error::unprocessable(format!(
            "Entry name '{}...' is longer than {MAX_ENTRY_NAME_LEN} bytes",
            name.chars().take(32).collect::<String>()
        )));
    }
    let segments = name.split('/').count();
    if segments > MAX_ENTRY_SEGMENTS {
        return Err(Error::unprocessable(format!(
            "Entry name '{}...' has {segments} segments; at most {MAX_ENTRY_SEGMENTS} are allowed",
            name.chars().take(32).collect::<String>()
        )));
    }
    let segments = name.split('/').count();
    for (i, segment) in name.split('/').enumerate() {
        if segment.is_empty() {
            return Err(Error::unprocessable(format!(
                "Entry name '{name}' has an empty segment: no leading, trailing or double '/'"
            )));
        }
        // The hidden entry of a parent's attachments (`attachments.rs`).
        if segment == crate::storage::attachments::META_SEGMENT && i + 1 == segments {
            continue;
        }
        if segment.len() > MAX_NAME_LEN {
            return Err(too_long("A segment of entry name", segment));
        }
        if !segment.chars().all(is_name_char) {
            return Err(Error::unprocessable(format!(
                "Entry name '{name}' can contain only letters, digits, '/' and [-,_] symbols or end with '/$meta'"
            )));
        }
    }
    Ok(())
}

/// Checks the labels of a write or a label update: names are not empty, and neither
/// names nor values hold control characters (CR, LF, NUL, …; a value may hold a tab). Labels come back in
/// response headers on every read, so what could break a header line is refused when it
/// arrives, not only escaped when it leaves.
pub fn validate_labels(labels: &Labels) -> Result<()> {
    for (name, value) in labels {
        if name.is_empty() {
            return Err(Error::unprocessable("Label names must not be empty"));
        }
        if name.chars().any(char::is_control) {
            return Err(Error::unprocessable(format!(
                "Label name '{}' must not contain control characters",
                quoted(name)
            )));
        }
        // A tab is allowed in HTTP header values, so in label values as well.
        if value.chars().any(|c| c.is_control() && c != '\t') {
            return Err(Error::unprocessable(format!(
                "Value of label '{}' ('{}') must not contain control characters",
                quoted(name),
                quoted(value)
            )));
        }
        // Batch headers quote a value holding a comma and have no escape for a quote
        // inside quotes: a value starting with `"`, or holding both `"` and `,`, would
        // be stored but read back wrong (or break the client's batch parser).
        if value.starts_with('"') || (value.contains('"') && value.contains(',')) {
            return Err(Error::unprocessable(format!(
                "Value of label '{}' ('{}') cannot be carried in batch headers: it must not start with '\"' nor hold both '\"' and ','",
                quoted(name),
                quoted(value)
            )));
        }
    }
    Ok(())
}

/// Most labels one record may carry: every label is a header of a single-record read,
/// and clients read at most about 128 response headers (aiohttp, under reduct-py), while
/// ReductStore's own request parser takes at most 100 headers.
pub const MAX_LABELS: usize = 100;
/// Most bytes a record's labels and content type may take encoded: a batch read carries
/// them all in one header line, and clients read lines of at most 8,190 bytes (aiohttp).
pub const MAX_LABEL_BYTES: usize = 8000;

/// Checks that the whole label set a record will carry (after a write or an update),
/// with its content type, fits in the headers clients read back: at most [`MAX_LABELS`]
/// labels and [`MAX_LABEL_BYTES`] encoded (each label as `name=value,` with room for
/// quotes). Refused with 422 naming the count, or the largest label, so a record is
/// never stored that no client could read.
pub fn validate_label_set(labels: &Labels, content_type: &str) -> Result<()> {
    if labels.len() > MAX_LABELS {
        return Err(Error::unprocessable(format!(
            "A record may carry at most {MAX_LABELS} labels, not {}: clients read each label as a response header",
            labels.len()
        )));
    }
    let encoded = |(name, value): (&String, &String)| name.len() + value.len() + 6;
    let bytes = content_type.len() + labels.iter().map(encoded).sum::<usize>();
    if bytes > MAX_LABEL_BYTES {
        // The content type alone may be what is too long (there may be no label).
        let largest = labels
            .iter()
            .max_by_key(|label| encoded(*label))
            .filter(|label| encoded(*label) > content_type.len());
        return Err(Error::unprocessable(match largest {
            Some((name, _)) => format!(
                "The labels of a record take {bytes} bytes encoded, more than the {MAX_LABEL_BYTES} a batch header line can carry to clients (the largest is '{}')",
                quoted(&name.chars().take(64).collect::<String>())
            ),
            None => format!(
                "The content type of a record takes {} bytes, more than the {MAX_LABEL_BYTES} a batch header line can carry to clients with its labels",
                content_type.len()
            ),
        }));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_names() {
        for good in ["b", "my-bucket_1", "ABC"] {
            validate_bucket_name(good).unwrap();
        }
        for bad in ["", "a b", "..", "a/b", "a.b", "%2F", "ü"] {
            let err = validate_bucket_name(bad).unwrap_err();
            assert!(err.message().contains(&format!("'{bad}'")), "{err}");
        }
        assert!(
            validate_bucket_name("$system")
                .unwrap_err()
                .message()
                .contains("reserved")
        );
        validate_system_bucket_name("$system").unwrap();
        assert!(validate_system_bucket_name("$").is_err());
        assert!(validate_system_bucket_name("$../x").is_err());
        assert!(validate_system_bucket_name("system").is_err());
    }

    #[test]
    fn entry_names() {
        for good in [
            "e",
            "cam/front",
            "a/b/c-1_2",
            "lifecycle/x/y",
            "cam/$meta",
            "$meta",
        ] {
            validate_entry_name(good).unwrap();
        }
        for bad in [
            "",
            "/a",
            "a/",
            "a//b",
            "..",
            "a/../b",
            "a/./b",
            "a%2Fb",
            "a b",
            ".index",
            "$meta/x",
            "a/$meta/b",
            "a/$metax",
            "$x",
        ] {
            assert!(validate_entry_name(bad).is_err(), "{bad}");
        }
        // Deep or long names are refused before any directory is made.
        let deep = vec!["a"; 2100].join("/");
        let e = validate_entry_name(&deep).expect_err("too long");
        assert_eq!(e.kind(), crate::error::ErrorKind::Unprocessable);
        let many = vec!["ab"; MAX_ENTRY_SEGMENTS + 1].join("/");
        assert!(
            validate_entry_name(&many)
                .unwrap_err()
                .message()
                .contains("segments")
        );
        validate_entry_name(&vec!["ab"; MAX_ENTRY_SEGMENTS].join("/")).expect("at the limit");
    }

    #[test]
    fn label_sets_clients_cannot_read_back_are_refused() {
        let set = |n: usize, len: usize| -> Labels {
            (0..n)
                .map(|i| (format!("l{i:03}"), "v".repeat(len)))
                .collect()
        };
        validate_label_set(&set(MAX_LABELS, 60), "image/jpeg").expect("100 short labels fit");
        let e = validate_label_set(&set(MAX_LABELS + 1, 1), "x").unwrap_err();
        assert!(e.message().contains("at most 100 labels, not 101"), "{e}");
        let mut big = set(3, 10);
        big.insert("huge".into(), "v".repeat(MAX_LABEL_BYTES));
        let e = validate_label_set(&big, "x").unwrap_err();
        assert_eq!(e.kind(), crate::error::ErrorKind::Unprocessable);
        assert!(e.message().contains("the largest is 'huge'"), "{e}");
        validate_label_set(&Labels::new(), "").expect("no labels");
    }

    #[test]
    fn label_values_batch_headers_cannot_carry_are_refused() {
        let one = |v: &str| validate_labels(&[("k".to_string(), v.to_string())].into());
        for bad in ["\"", "\"w\"", "x\",y", "\"a,b", "a\"b,c"] {
            let e = one(bad).expect_err(bad);
            assert!(e.message().contains("cannot be carried"), "{bad}: {e}");
        }
        for good in ["a\"b", "a,b", "w\"", "plain", ""] {
            one(good).unwrap_or_else(|e| panic!("{good}: {e}"));
        }
    }

    #[test]
    fn names_that_cannot_be_directories_are_refused() {
        let long = "n".repeat(MAX_NAME_LEN + 1);
        let e = validate_bucket_name(&long).unwrap_err();
        assert!(e.message().contains("longer than 128"), "{e}");
        assert!(validate_bucket_name(&long[1..]).is_ok());
        assert!(validate_entry_name(&format!("a/{long}")).is_err());
        assert!(validate_entry_name(&format!("{}/{}", &long[1..], &long[1..])).is_ok());
    }

    #[test]
    fn labels_refuse_control_characters_and_quote_them_escaped() {
        let labels = |n: &str, v: &str| Labels::from([(n.to_string(), v.to_string())]);
        assert!(validate_labels(&labels("city", "Zürich, a\tb")).is_ok());
        assert!(validate_labels(&labels("ci\tty", "x")).is_err());
        let e = validate_labels(&labels("a\r\nset-cookie", "x")).unwrap_err();
        assert!(e.message().contains("a\\r\\nset-cookie"), "{e}");
        assert!(!e.message().contains('\r'));
        let e = validate_labels(&labels("a", "v\0")).unwrap_err();
        assert!(e.message().contains("v\\u{0}"), "{e}");
        assert!(validate_labels(&labels("", "x")).is_err());
        let e = validate_entry_name("x\ny").unwrap_err();
        assert!(!e.message().contains('\n'), "{e}");
    }
}
