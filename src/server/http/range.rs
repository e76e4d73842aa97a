//! `Range: bytes=…` request headers (RFC 9110 §14), for the one route that serves
//! ranges: query links.

/// An inclusive byte range of a body.
pub type ByteRange = (u64, u64);

/// No range of a `Range` header can be served (416).
#[derive(Debug, PartialEq, Eq)]
pub struct Unsatisfiable;

/// The ranges a `Range` header asks of a body of `len` bytes, in the order asked:
/// `Ok(None)` when the header is absent or not a `bytes` range (the whole body is sent,
/// as RFC 9110 lets a server do with a range it does not understand), `Err(Unsatisfiable)` when no
/// range is satisfiable (416). Ranges past the end are clipped; unsatisfiable ones among
/// others are dropped.
pub fn parse_ranges(
    header: Option<&str>,
    len: u64,
) -> Result<Option<Vec<ByteRange>>, Unsatisfiable> {
    let Some(spec) = header.and_then(|h| h.trim().strip_prefix("bytes=")) else {
        return Ok(None);
    };
    let mut ranges = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (first, last) = part.split_once('-').ok_or(Unsatisfiable)?;
        let number = |s: &str| crate::server::http::head::parse_decimal(s.trim());
        let range = match (first.trim().is_empty(), last.trim().is_empty()) {
            // `-N`: the last N bytes.
            (true, false) => {
                let suffix = number(last).ok_or(Unsatisfiable)?;
                (suffix > 0 && len > 0).then(|| (len.saturating_sub(suffix), len - 1))
            }
            // `N-`: from N to the end.
            (false, true) => {
                let start = number(first).ok_or(Unsatisfiable)?;
                (start < len).then(|| (start, len - 1))
            }
            (false, false) => {
                let (start, end) = (
                    number(first).ok_or(Unsatisfiable)?,
                    number(last).ok_or(Unsatisfiable)?,
                );
                if end < start {
                    return Err(Unsatisfiable);
                }
                (start < len).then(|| (start, end.min(len - 1)))
            }
            (true, true) => return Err(Unsatisfiable),
        };
        ranges.extend(range);
    }
    if ranges.is_empty() {
        return Err(Unsatisfiable);
    }
    Ok(Some(ranges))
}

/// Most ranges one header may ask for; past it the whole body is sent (RFC 9110 §14.2
/// lets a server ignore a `Range` header, and many small ranges are a known abuse).
pub const MAX_RANGES: usize = 16;

/// The one range served for a `Range` header (RFC 9110 §14): the ranges asked for,
/// coalesced into the span from the first byte asked to the last, so an answer is one
/// `206` with a true `Content-Range` and never longer than the body, whatever overlaps.
/// `Ok(None)`: send the whole body (no `bytes` range, or more than [`MAX_RANGES`]).
pub fn served_range(header: Option<&str>, len: u64) -> Result<Option<ByteRange>, Unsatisfiable> {
    let Some(spec) = header.and_then(|h| h.trim().strip_prefix("bytes=")) else {
        return Ok(None);
    };
    if spec
        .split(',')
        .filter(|p| !p.trim().is_empty())
        .nth(MAX_RANGES)
        .is_some()
    {
        return Ok(None);
    }
    let Some(ranges) = parse_ranges(header, len)? else {
        return Ok(None);
    };
    let first = ranges.iter().map(|r| r.0).min().unwrap_or(0);
    let last = ranges.iter().map(|r| r.1).max().unwrap_or(0);
    Ok(Some((first, last)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_as_rfc_9110_reads_them() {
        assert_eq!(parse_ranges(None, 15), Ok(None));
        assert_eq!(parse_ranges(Some("items=1-2"), 15), Ok(None));
        assert_eq!(parse_ranges(Some("bytes=2-5"), 15), Ok(Some(vec![(2, 5)])));
        assert_eq!(parse_ranges(Some("bytes=-3"), 15), Ok(Some(vec![(12, 14)])));
        assert_eq!(
            parse_ranges(Some("bytes=10-"), 15),
            Ok(Some(vec![(10, 14)]))
        );
        assert_eq!(
            parse_ranges(Some("bytes=10-99"), 15),
            Ok(Some(vec![(10, 14)]))
        );
        assert_eq!(
            parse_ranges(Some("bytes=0-1, 4-4"), 15),
            Ok(Some(vec![(0, 1), (4, 4)]))
        );
        assert_eq!(
            parse_ranges(Some("bytes=0-1,20-30"), 15),
            Ok(Some(vec![(0, 1)]))
        );
        assert_eq!(
            parse_ranges(Some("bytes=-100"), 15),
            Ok(Some(vec![(0, 14)]))
        );
        for bad in [
            "bytes=20-30",
            "bytes=5-2",
            "bytes=x-1",
            "bytes=-",
            "bytes=",
            "bytes=-0",
        ] {
            assert_eq!(parse_ranges(Some(bad), 15), Err(Unsatisfiable), "{bad}");
        }
        assert_eq!(parse_ranges(Some("bytes=0-0"), 0), Err(Unsatisfiable));
    }

    #[test]
    fn several_ranges_are_served_as_one_span_and_many_as_the_whole() {
        assert_eq!(served_range(None, 15), Ok(None));
        assert_eq!(served_range(Some("bytes=2-5"), 15), Ok(Some((2, 5))));
        // Overlapping, out of order, apart: the span covering them.
        assert_eq!(served_range(Some("bytes=0-4,2-6"), 1011), Ok(Some((0, 6))));
        assert_eq!(served_range(Some("bytes=8-9, 0-1"), 15), Ok(Some((0, 9))));
        assert_eq!(served_range(Some("bytes=-2,0-0"), 15), Ok(Some((0, 14))));
        // Many ranges: the whole body, whatever they ask.
        let many = format!("bytes={}", vec!["0-"; 100_000].join(","));
        assert_eq!(served_range(Some(&many), 1024), Ok(None));
        let sixteen = format!("bytes={}", vec!["0-1"; MAX_RANGES].join(","));
        assert_eq!(served_range(Some(&sixteen), 1024), Ok(Some((0, 1))));
        assert_eq!(served_range(Some("bytes=20-30"), 15), Err(Unsatisfiable));
    }
}
