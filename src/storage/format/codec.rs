//! Frame codecs: `none`, `lz4` and `zstd` at a level, ordered from weakest to strongest so
//! that recompression knows which blocks a target would improve.

use serde::{Deserialize, Serialize};
use std::fmt;

use crate::error::{Error, Result};

/// How the frames of a block are compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Codec {
    /// Stored as written.
    None,
    /// LZ4 block format (lz4_flex); the raw size comes from the frame table.
    Lz4,
    /// Zstandard at the given level (1..=22).
    Zstd(i32),
}

impl Codec {
    /// Position in the strength order none < lz4 < zstd 1 < … < zstd 22.
    pub fn rank(self) -> i32 {
        match self {
            Codec::None => 0,
            Codec::Lz4 => 1,
            Codec::Zstd(level) => 1 + level.max(1),
        }
    }

    /// True when `self` is strictly weaker than `target`, i.e. recompressing helps.
    pub fn is_weaker_than(self, target: Codec) -> bool {
        self.rank() < target.rank()
    }

    /// On-disk id and level of this codec.
    pub fn to_parts(self) -> (u8, i32) {
        match self {
            Codec::None => (0, 0),
            Codec::Lz4 => (1, 0),
            Codec::Zstd(level) => (2, level),
        }
    }

    /// Rebuilds a codec from its on-disk id and level.
    pub fn from_parts(id: u8, level: i32) -> Result<Codec> {
        match id {
            0 => Ok(Codec::None),
            1 => Ok(Codec::Lz4),
            2 if (1..=22).contains(&level) => Ok(Codec::Zstd(level)),
            _ => Err(Error::internal(format!(
                "unknown codec id {id} with level {level}"
            ))),
        }
    }

    /// Compresses one frame.
    pub fn encode(self, raw: &[u8]) -> Result<Vec<u8>> {
        match self {
            Codec::None => Ok(raw.to_vec()),
            Codec::Lz4 => Ok(lz4_flex::compress(raw)),
            Codec::Zstd(level) => zstd_compress(raw, level),
        }
    }

    /// Decompresses one frame whose raw size is `raw_len`.
    pub fn decode(self, stored: &[u8], raw_len: usize) -> Result<Vec<u8>> {
        let out = match self {
            Codec::None => stored.to_vec(),
            Codec::Lz4 => lz4_flex::decompress(stored, raw_len)
                .map_err(|e| Error::internal(format!("lz4 frame does not decode: {e}")))?,
            Codec::Zstd(_) => zstd::bulk::decompress(stored, raw_len)
                .map_err(|e| Error::internal(format!("zstd frame does not decode: {e}")))?,
        };
        if out.len() != raw_len {
            return Err(Error::internal(format!(
                "{self} frame decoded to {} bytes, expected {raw_len}",
                out.len()
            )));
        }
        Ok(out)
    }
}

thread_local! {
    /// One zstd compression context per thread and level, reused across frames: creating a
    /// context per frame costs an allocation and clearing of its tables every time.
    static ZSTD_CONTEXT: std::cell::RefCell<Option<(i32, zstd::bulk::Compressor<'static>)>> =
        const { std::cell::RefCell::new(None) };
}

fn zstd_compress(raw: &[u8], level: i32) -> Result<Vec<u8>> {
    let failed = |e: std::io::Error| Error::internal(format!("zstd level {level} failed: {e}"));
    ZSTD_CONTEXT.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.as_ref().is_none_or(|(l, _)| *l != level) {
            *slot = Some((level, zstd::bulk::Compressor::new(level).map_err(failed)?));
        }
        let (_, compressor) = slot.as_mut().expect("the context was just created");
        compressor.compress(raw).map_err(failed)
    })
}

impl fmt::Display for Codec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Codec::None => f.write_str("none"),
            Codec::Lz4 => f.write_str("lz4"),
            Codec::Zstd(level) => write!(f, "zstd-{level}"),
        }
    }
}

impl std::str::FromStr for Codec {
    type Err = crate::error::Error;

    /// `none`, `lz4`, `zstd` (level 3), or `zstd-N` / `zstd:N` with N in 1..=22.
    fn from_str(text: &str) -> crate::error::Result<Codec> {
        let bad = || {
            crate::error::Error::unprocessable(format!(
                "codec '{text}' is not one of none, lz4, zstd, zstd-<level 1..22>"
            ))
        };
        match text.to_ascii_lowercase().as_str() {
            "none" => Ok(Codec::None),
            "lz4" => Ok(Codec::Lz4),
            "zstd" => Ok(Codec::Zstd(3)),
            other => {
                let level = other
                    .strip_prefix("zstd-")
                    .or_else(|| other.strip_prefix("zstd:"))
                    .ok_or_else(bad)?;
                match level.parse::<i32>() {
                    Ok(l) if (1..=22).contains(&l) => Ok(Codec::Zstd(l)),
                    _ => Err(bad()),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names() {
        assert_eq!("lz4".parse::<Codec>().unwrap(), Codec::Lz4);
        assert_eq!("zstd".parse::<Codec>().unwrap(), Codec::Zstd(3));
        assert_eq!("ZSTD-19".parse::<Codec>().unwrap(), Codec::Zstd(19));
        assert_eq!("zstd:1".parse::<Codec>().unwrap(), Codec::Zstd(1));
        let err = "zstd-23".parse::<Codec>().unwrap_err();
        assert!(err.message().contains("'zstd-23'"), "{err}");
        assert!("gzip".parse::<Codec>().is_err());
        for c in [Codec::None, Codec::Lz4, Codec::Zstd(7)] {
            assert_eq!(c.to_string().parse::<Codec>().unwrap(), c);
        }
    }

    #[test]
    fn strength_order() {
        assert!(Codec::None.is_weaker_than(Codec::Lz4));
        assert!(Codec::Lz4.is_weaker_than(Codec::Zstd(1)));
        assert!(Codec::Zstd(3).is_weaker_than(Codec::Zstd(19)));
        assert!(!Codec::Zstd(19).is_weaker_than(Codec::Zstd(3)));
        assert!(!Codec::Lz4.is_weaker_than(Codec::Lz4));
    }

    #[test]
    fn every_codec_round_trips() {
        let raw: Vec<u8> = (0..100_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        for codec in [Codec::None, Codec::Lz4, Codec::Zstd(1), Codec::Zstd(19)] {
            let stored = codec.encode(&raw).unwrap();
            assert_eq!(codec.decode(&stored, raw.len()).unwrap(), raw, "{codec}");
            let (id, level) = codec.to_parts();
            assert_eq!(Codec::from_parts(id, level).unwrap(), codec);
        }
        assert!(Codec::from_parts(9, 0).is_err());
        assert!(Codec::from_parts(2, 40).is_err());
    }

    #[test]
    fn corrupt_frames_are_errors_not_panics() {
        let stored = Codec::Zstd(3).encode(b"hello hello hello").unwrap();
        assert!(
            Codec::Zstd(3)
                .decode(&stored[..stored.len() / 2], 17)
                .is_err()
        );
        assert!(Codec::Lz4.decode(b"\xff\xff\xff\x7fgarbage", 10).is_err());
        assert!(
            Codec::Lz4
                .decode(&Codec::Lz4.encode(b"abcabcabc").unwrap(), 4)
                .is_err()
        );
        assert!(Codec::None.decode(b"abc", 4).is_err());
    }
}
