//! Looking for secrets where they must not be: pieces of a credential in a text, and the
//! whole `$system` trail as one text to look in.

use super::ServerProcess;

/// The first 8-byte piece of `secret` found in `text`, if any: a credential split over
/// log lines or records still shows up.
pub fn leaked<'a>(secret: &'a str, text: &str) -> Option<&'a str> {
    (0..=secret.len().saturating_sub(8))
        .map(|i| &secret[i..i + 8])
        .find(|piece| text.contains(piece))
}

/// Every record of every `$system` entry, as text, read with `authorization`.
pub fn whole_trail(s: &ServerProcess, authorization: &str) -> String {
    let mut out = String::new();
    for entry in s.entry_names_with("$system", authorization) {
        for record in s.json_records("$system", &entry, authorization) {
            out.push_str(&record.to_string());
            out.push('\n');
        }
    }
    out
}
