//! Little-endian binary encoding for block metadata and log operations. The reader checks
//! every bound, so a truncated or corrupt file becomes an error, never a panic.

use crate::error::{Error, Result};
use crate::storage::record::Labels;

/// Appends fixed-width integers and length-prefixed strings to a buffer.
#[derive(Default)]
pub struct BinaryWriter {
    /// The bytes written so far.
    pub buf: Vec<u8>,
}

impl BinaryWriter {
    /// Appends one byte.
    pub fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }
    /// Appends a u32.
    pub fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// Appends a u64.
    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// Appends a string with a u32 length prefix.
    pub fn str(&mut self, v: &str) {
        self.u32(v.len() as u32);
        self.buf.extend_from_slice(v.as_bytes());
    }
    /// Appends an unsigned LEB128 varint (1 byte for values below 128).
    pub fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.buf.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
    }
    /// Appends a string with a varint length prefix.
    pub fn short_str(&mut self, v: &str) {
        self.varint(v.len() as u64);
        self.buf.extend_from_slice(v.as_bytes());
    }
    /// Appends a label set: a count, then name/value pairs in name order.
    pub fn labels(&mut self, labels: &Labels) {
        self.u32(labels.len() as u32);
        for (k, v) in labels {
            self.str(k);
            self.str(v);
        }
    }
}

/// Reads what [`BinaryWriter`] wrote, failing cleanly on truncation.
pub struct BinaryReader<'a> {
    bytes: &'a [u8],
    pos: usize,
    what: &'a str,
}

impl<'a> BinaryReader<'a> {
    /// A reader over `bytes`; `what` names the source in error messages.
    pub fn new(bytes: &'a [u8], what: &'a str) -> Self {
        BinaryReader {
            bytes,
            pos: 0,
            what,
        }
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    /// Takes the next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.remaining() < n {
            return Err(Error::internal(format!(
                "{} is truncated: needed {n} bytes at offset {}, {} left",
                self.what,
                self.pos,
                self.remaining()
            )));
        }
        let out = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    /// Reads one byte.
    pub fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    /// Reads a u32.
    pub fn u32(&mut self) -> Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    /// Reads a u64.
    pub fn u64(&mut self) -> Result<u64> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    /// Reads an unsigned LEB128 varint.
    #[inline]
    pub fn varint(&mut self) -> Result<u64> {
        // Most values of a record table (deltas, dictionary ids, counts) fit one byte: that
        // case is a compare and an increment, which matters when a table of thousands of
        // rows is decoded per block.
        if let Some(&byte) = self.bytes.get(self.pos)
            && byte < 0x80
        {
            self.pos += 1;
            return Ok(u64::from(byte));
        }
        self.varint_long()
    }

    /// [`Self::varint`] past its one-byte case.
    fn varint_long(&mut self) -> Result<u64> {
        let mut value = 0u64;
        for (i, &byte) in self.bytes[self.pos..].iter().take(10).enumerate() {
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                self.pos += i + 1;
                return Ok(value);
            }
        }
        Err(self.bad_varint())
    }

    #[cold]
    fn bad_varint(&self) -> Error {
        if self.remaining() < 10 && self.bytes[self.pos..].iter().all(|b| b & 0x80 != 0) {
            Error::internal(format!(
                "{} is truncated: a varint at offset {} runs past its end",
                self.what, self.pos
            ))
        } else {
            Error::internal(format!("{} holds an overlong varint", self.what))
        }
    }

    /// Reads `n` varints into a vector: a table column.
    pub fn varints(&mut self, n: usize) -> Result<Vec<u64>> {
        let mut out = Vec::with_capacity(n.min(self.remaining()));
        for _ in 0..n {
            out.push(self.varint()?);
        }
        Ok(out)
    }
    /// Reads a string with a varint length prefix.
    pub fn short_str(&mut self) -> Result<String> {
        let len = usize::try_from(self.varint()?)
            .map_err(|_| Error::internal(format!("{} holds an absurd length", self.what)))?;
        let raw = self.take(len)?;
        String::from_utf8(raw.to_vec())
            .map_err(|_| Error::internal(format!("{} holds a string that is not UTF-8", self.what)))
    }
    /// Reads a length-prefixed UTF-8 string.
    pub fn str(&mut self) -> Result<String> {
        let len = self.u32()? as usize;
        let raw = self.take(len)?;
        String::from_utf8(raw.to_vec())
            .map_err(|_| Error::internal(format!("{} holds a string that is not UTF-8", self.what)))
    }
    /// Reads a label set.
    pub fn labels(&mut self) -> Result<Labels> {
        let count = self.u32()? as usize;
        let mut labels = Labels::new();
        for _ in 0..count {
            let k = self.str()?;
            let v = self.str()?;
            labels.insert(k, v);
        }
        Ok(labels)
    }
}

/// Maps a signed value to an unsigned one with small magnitudes small (for varints).
pub fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// The inverse of [`zigzag`].
pub fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_truncation() {
        let mut w = BinaryWriter::default();
        w.u8(7);
        w.u32(70_000);
        w.u64(u64::MAX - 1);
        w.str("cam/front");
        let mut labels = Labels::new();
        labels.insert("origin".into(), "EWR".into());
        w.labels(&labels);
        let mut r = BinaryReader::new(&w.buf, "test");
        assert_eq!(r.u8().unwrap(), 7);
        assert_eq!(r.u32().unwrap(), 70_000);
        assert_eq!(r.u64().unwrap(), u64::MAX - 1);
        assert_eq!(r.str().unwrap(), "cam/front");
        assert_eq!(r.labels().unwrap(), labels);
        assert_eq!(r.remaining(), 0);

        let mut v = BinaryWriter::default();
        for x in [0u64, 127, 128, 300, u64::MAX] {
            v.varint(x);
        }
        v.short_str("é");
        let mut r = BinaryReader::new(&v.buf, "varints");
        for x in [0u64, 127, 128, 300, u64::MAX] {
            assert_eq!(r.varint().unwrap(), x);
        }
        assert_eq!(r.short_str().unwrap(), "é");
        assert!(BinaryReader::new(&[0xff; 11], "x").varint().is_err());
        // A varint cut short says so, at any length; one within its bytes leaves the rest.
        for cut in [&[][..], &[0x80], &[0xff, 0xff, 0x81]] {
            let err = BinaryReader::new(cut, "cut column").varint().unwrap_err();
            assert!(err.message().contains("cut column is truncated"), "{err}");
        }
        let mut r = BinaryReader::new(&[0xac, 0x02, 0x05], "column");
        assert_eq!(r.varints(2).unwrap(), vec![300, 5]);
        assert_eq!(r.remaining(), 0);
        assert!(BinaryReader::new(&[0x05], "column").varints(2).is_err());

        let cut = &w.buf[..w.buf.len() - 2];
        let mut r = BinaryReader::new(cut, "cut block");
        r.take(13).unwrap();
        r.str().unwrap();
        let err = r.labels().unwrap_err();
        assert!(err.message().contains("cut block is truncated"), "{err}");
    }
}
