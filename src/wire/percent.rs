//! Percent-encoding as the API uses it: decoding of path segments and query values, and
//! the encoding of entry and label names in batch headers (every byte outside the RFC 7230
//! `tchar` set becomes `%XX`; `%` itself stays).

/// Decodes `%XX` escapes (and nothing else: `+` stays `+`). Malformed escapes are kept as
/// they are; bytes that do not form UTF-8 become U+FFFD, which no name rule accepts.
pub fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push(h << 4 | l);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// [`decode`] that borrows `text` when it has no escape (the common case: no allocation).
pub fn decode_cow(text: &str) -> std::borrow::Cow<'_, str> {
    if text.contains('%') {
        std::borrow::Cow::Owned(decode(text))
    } else {
        std::borrow::Cow::Borrowed(text)
    }
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Encodes a name for `x-reduct-entries` / `x-reduct-labels`.
pub fn encode(name: &str) -> String {
    encode_keeping(name, is_tchar)
}

/// A bucket or entry name as URL path text: unreserved bytes and `/` (nested entries) as
/// they are, every other byte percent-encoded (`%` included).
pub fn path_segment(name: &str) -> String {
    encode_keeping(name, |b| b.is_ascii_alphanumeric() || b"-._~/".contains(&b))
}

/// Percent-encodes every byte of `name` that `keep` does not keep as it is.
pub fn encode_keeping(name: &str, keep: impl Fn(u8) -> bool) -> String {
    let mut out = String::with_capacity(name.len());
    for &b in name.as_bytes() {
        if keep(b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        assert_eq!(encode("cam/front,x"), "cam%2Ffront%2Cx");
        assert_eq!(encode("50%"), "50%");
        assert_eq!(decode("cam%2Ffront%2cx"), "cam/front,x");
        assert_eq!(decode("a%2"), "a%2");
        assert_eq!(decode("a%zz"), "a%zz");
        assert_eq!(decode("%24system"), "$system");
        assert_eq!(decode("%FF"), "\u{fffd}");
    }
}
