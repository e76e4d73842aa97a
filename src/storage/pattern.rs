//! Entry-name patterns, as lifecycle policies and queries use them.
//!
//! - an exact name (`cam/front`) matches itself;
//! - `*` inside a segment matches any characters of that segment (`cam/*` matches
//!   `cam/front`, not `cam/front/raw`);
//! - `**` as a whole segment matches any number of segments, including none (`a/**`
//!   matches `a`, `a/b` and `a/b/c`);
//! - a single trailing `*` with no other wildcard is a prefix match (`sensor-*` matches
//!   `sensor-1` and `sensor-1/raw`; `*` alone matches every entry);
//! - `!pattern` excludes what it matches, after the includes are applied;
//! - a leading `/` is ignored; an empty list means every entry.
//!
//! Attachment entries (`…/$meta`, see `attachments.rs`) are matched only by a pattern
//! that is exactly their name, never by a wildcard, a prefix or an empty list.

use crate::error::{Error, Result};

#[derive(Debug, Clone, PartialEq, Eq)]
enum Pattern {
    Prefix(String),
    Segments(Vec<Segment>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    /// `**`: any number of segments.
    AnySegments,
    /// A segment, split at its `*` wildcards: `a*b*c` → ["a", "b", "c"].
    Glob(Vec<String>),
}

/// A parsed list of include and exclude patterns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EntryPatterns {
    includes: Vec<Pattern>,
    excludes: Vec<Pattern>,
}

impl EntryPatterns {
    /// Parses a pattern list; an error names the pattern that is malformed.
    pub fn parse<S: AsRef<str>>(patterns: &[S]) -> Result<Self> {
        let mut out = EntryPatterns::default();
        for raw in patterns {
            let raw = raw.as_ref();
            let (exclude, body) = match raw.strip_prefix('!') {
                Some(rest) => (true, rest),
                None => (false, raw),
            };
            let pattern = parse_one(body.strip_prefix('/').unwrap_or(body), raw)?;
            if exclude {
                out.excludes.push(pattern);
            } else {
                out.includes.push(pattern);
            }
        }
        Ok(out)
    }

    /// True when the list selects this entry.
    pub fn matches(&self, entry: &str) -> bool {
        if entry.split('/').any(|s| s.starts_with('$')) {
            return self
                .includes
                .iter()
                .any(|p| p.is_literal() && p.matches(entry))
                && !self.excludes.iter().any(|p| p.matches(entry));
        }
        let included = self.includes.is_empty() || self.includes.iter().any(|p| p.matches(entry));
        included && !self.excludes.iter().any(|p| p.matches(entry))
    }

    /// The entry names when every pattern is a plain name (no wildcards, no excludes), so
    /// callers can look entries up instead of scanning them all.
    pub fn literal_names(&self) -> Option<Vec<String>> {
        if !self.excludes.is_empty() || self.includes.is_empty() {
            return None;
        }
        self.includes
            .iter()
            .map(|p| match p {
                Pattern::Segments(segments) => segments
                    .iter()
                    .map(|s| match s {
                        Segment::Glob(parts) if parts.len() == 1 => Some(parts[0].as_str()),
                        _ => None,
                    })
                    .collect::<Option<Vec<&str>>>()
                    .map(|parts| parts.join("/")),
                Pattern::Prefix(_) => None,
            })
            .collect()
    }
}

fn parse_one(body: &str, raw: &str) -> Result<Pattern> {
    let bad = |why: &str| Error::unprocessable(format!("Invalid entry pattern '{raw}': {why}"));
    if body.is_empty() {
        return Err(bad("it is empty"));
    }
    let stars = body.matches('*').count();
    if stars == 1 && body.ends_with('*') && !body.ends_with("/*") {
        return Ok(Pattern::Prefix(body[..body.len() - 1].to_string()));
    }
    if body == "*" {
        return Ok(Pattern::Prefix(String::new()));
    }
    let mut segments = Vec::new();
    let count = body.split('/').count();
    for (i, segment) in body.split('/').enumerate() {
        if segment.is_empty() {
            return Err(bad("empty segment (no trailing or double '/')"));
        }
        if segment == "**" {
            segments.push(Segment::AnySegments);
        } else if segment == crate::storage::attachments::META_SEGMENT {
            if i + 1 < count || stars > 0 {
                return Err(bad("'$meta' may only end an exact entry name"));
            }
            segments.push(Segment::Glob(vec![segment.to_string()]));
        } else if segment.contains("**") {
            return Err(bad("'**' must be a whole segment"));
        } else if !segment
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '*')
        {
            return Err(bad(
                "only letters, digits, '-', '_', '/', '*' and a leading '!' are allowed",
            ));
        } else {
            segments.push(Segment::Glob(
                segment.split('*').map(str::to_string).collect(),
            ));
        }
    }
    Ok(Pattern::Segments(segments))
}

impl Pattern {
    /// A plain name: no wildcard.
    fn is_literal(&self) -> bool {
        match self {
            Pattern::Segments(segments) => segments
                .iter()
                .all(|s| matches!(s, Segment::Glob(parts) if parts.len() == 1)),
            Pattern::Prefix(_) => false,
        }
    }

    fn matches(&self, entry: &str) -> bool {
        match self {
            Pattern::Prefix(prefix) => entry.starts_with(prefix.as_str()),
            Pattern::Segments(segments) => {
                let parts: Vec<&str> = entry.split('/').collect();
                match_segments(segments, &parts)
            }
        }
    }
}

fn match_segments(pattern: &[Segment], parts: &[&str]) -> bool {
    match pattern.split_first() {
        None => parts.is_empty(),
        Some((Segment::AnySegments, rest)) => {
            (0..=parts.len()).any(|skip| match_segments(rest, &parts[skip..]))
        }
        Some((Segment::Glob(glob), rest)) => match parts.split_first() {
            Some((first, tail)) => glob_matches(glob, first) && match_segments(rest, tail),
            None => false,
        },
    }
}

/// Matches one segment against `a*b*c` split into ["a", "b", "c"].
fn glob_matches(glob: &[String], text: &str) -> bool {
    let (first, last) = (&glob[0], &glob[glob.len() - 1]);
    if glob.len() == 1 {
        return text == first;
    }
    if !text.starts_with(first.as_str()) || !text[first.len()..].ends_with(last.as_str()) {
        return false;
    }
    let mut middle = &text[first.len()..text.len() - last.len()];
    for piece in &glob[1..glob.len() - 1] {
        match middle.find(piece.as_str()) {
            Some(at) => middle = &middle[at + piece.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn selects(patterns: &[&str], entry: &str) -> bool {
        EntryPatterns::parse(patterns).unwrap().matches(entry)
    }

    #[test]
    fn table() {
        let cases: &[(&[&str], &str, bool)] = &[
            (&[], "anything", true),
            (&[], "a/b", true),
            (&["*"], "a/b", true),
            (&["cam"], "cam", true),
            (&["cam"], "cam/front", false),
            (&["/cam"], "cam", true),
            (&["/a/**", "!/a/private/**"], "a/public/b", true),
            (&["/a/**", "!/a/private/**"], "a/private/b", false),
            (&["/a/**", "!/a/private/**"], "a/private", false),
            (&["/a/**", "!/a/private/**"], "other", false),
            (&["/a/**"], "a", true),
            (&["entry-a*"], "entry-a", true),
            (&["entry-a*"], "entry-ab", true),
            (&["entry-a*"], "entry-b", false),
            (&["sensor-*"], "sensor-1/raw", true),
            (&["cam/*"], "cam/front", true),
            (&["cam/*"], "cam/front/raw", false),
            (&["cam/*"], "cam", false),
            (&["*/front"], "cam/front", true),
            (&["*/front"], "cam/back", false),
            (&["c*m/f*t"], "cam/front", true),
            (&["c*m/f*t"], "cam/frontal", false),
            (&["a*b*c"], "abc", true),
            (&["a*b*c"], "aXbYc", true),
            (&["a*b*c"], "acb", false),
            (&["**/raw"], "cam/front/raw", true),
            (&["**/raw"], "raw", true),
            (&["a/**/z"], "a/z", true),
            (&["a/**/z"], "a/b/c/z", true),
            (&["a/**/z"], "a/b/c", false),
            (&["!secret"], "public", true),
            (&["!secret"], "secret", false),
            (&["x", "y"], "y", true),
            (&[], "cam/$meta", false),
            (&["**"], "cam/$meta", false),
            (&["cam/*"], "cam/$meta", false),
            (&["cam*"], "cam/$meta", false),
            (&["cam/$meta"], "cam/$meta", true),
            (&["$meta"], "$meta", true),
            (&["cam/$meta", "!cam/$meta"], "cam/$meta", false),
        ];
        for (patterns, entry, want) in cases {
            assert_eq!(selects(patterns, entry), *want, "{patterns:?} on {entry}");
        }
    }

    #[test]
    fn literal_lists_are_recognised() {
        let exact = EntryPatterns::parse(&["/a/b", "c"]).unwrap();
        assert_eq!(
            exact.literal_names(),
            Some(vec!["a/b".to_string(), "c".to_string()])
        );
        for wild in [&["a*"][..], &["a/**"], &["a", "!b"], &[]] {
            assert_eq!(
                EntryPatterns::parse(wild).unwrap().literal_names(),
                None,
                "{wild:?}"
            );
        }
    }

    #[test]
    fn malformed_patterns_are_named() {
        for bad in [
            "",
            "a//b",
            "a/",
            "a/**x",
            "a.b",
            "!",
            "/",
            "$meta/x",
            "a/$meta/b",
            "*/$meta",
            "$meta/$meta",
        ] {
            let err = EntryPatterns::parse(&[bad]).unwrap_err();
            assert!(err.message().contains(&format!("'{bad}'")), "{err}");
        }
    }
}
