//! ROS 2 messages decoded from CDR (the encapsulation rosbag2 records: a 4-byte header
//! naming the byte order, then the fields in order, each aligned to its size counted from
//! the end of that header) straight into JSON text.
//!
//! Why text and not a JSON tree: a camera image is megabytes of `uint8`, and a tree of
//! numbers costs tens of bytes per byte; writing the text as the fields are read costs
//! what the output is, and the output is bounded ([`Limits::max_json`]). Counts read from
//! the message are checked against the bytes left before anything is allocated for them.
//! The paths the caller asks for (labels, the header's stamp) are captured on the way.

use base64::Engine;

use super::jpeg::{self, ImageShape};
use super::msgdef::{Arity, Element, MsgDefs, Prim};

/// Deepest nesting of messages decoded: a schema whose type contains itself would
/// otherwise recurse without end.
const MAX_DEPTH: usize = 64;

/// How a binary (`uint8[]` / `byte[]`) field is written into the JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binary {
    /// A JSON list of numbers (the default).
    List,
    /// A base64 string.
    Base64,
    /// An image's pixels (`sensor_msgs/msg/Image`) as a base64 JPEG.
    Jpeg,
}

/// What a decode may write and what it reports besides the JSON.
pub struct Limits<'a> {
    /// Most bytes of JSON one message may produce.
    pub max_json: usize,
    /// Per field path (`header.frame_id`, `status[0].name`), how binary fields are written.
    pub binary: &'a [(String, Binary)],
    /// The field paths whose values are captured (labels), as [`path_key`] writes them.
    pub capture: &'a [String],
}

/// A decoded message.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded {
    /// The message as JSON text.
    pub json: Vec<u8>,
    /// Per path of [`Limits::capture`], the value found there (a string unquoted, anything
    /// else as its JSON text), if the message has that path.
    pub captured: Vec<Option<String>>,
    /// `header.stamp` in microseconds, when the message has a header with a stamp.
    pub stamp_us: Option<u64>,
}

/// A field path as this module compares them: `a.b[2].c` (a path written `a.b.2.c` is
/// the same).
pub fn path_key(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for part in path.split('.').filter(|p| !p.is_empty()) {
        if part.bytes().all(|b| b.is_ascii_digit()) {
            out.push('[');
            out.push_str(part);
            out.push(']');
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(part);
        }
    }
    out
}

/// Decodes `data`, a CDR-encoded message of the schema `defs`, into JSON; the error names
/// the field where the bytes ran out or made no sense.
pub fn decode(defs: &MsgDefs, data: &[u8], limits: &Limits) -> Result<Decoded, String> {
    let little = match data.get(..2) {
        Some([0, 1]) => true,
        Some([0, 0]) => false,
        Some([a, b]) => {
            return Err(format!(
                "unsupported CDR representation {a:#04x}{b:02x} (only plain CDR, as rosbag2 records, is read)"
            ));
        }
        _ => return Err("the message is shorter than its CDR header".into()),
    };
    let mut d = Decoder {
        defs,
        data,
        pos: 4.min(data.len()),
        little,
        out: Vec::with_capacity(data.len().min(limits.max_json).min(1 << 20) + 64),
        path: String::new(),
        limits,
        captured: vec![None; limits.capture.len()],
        stamp: (None, None),
        image: None,
    };
    if data.len() < 4 {
        return Err("the message is shorter than its CDR header".into());
    }
    d.message(0, 0)?;
    let stamp_us = match d.stamp {
        (Some(sec), Some(nanosec)) if sec >= 0 => Some(sec as u64 * 1_000_000 + nanosec / 1_000),
        _ => None,
    };
    Ok(Decoded {
        json: d.out,
        captured: d.captured,
        stamp_us,
    })
}

struct Decoder<'a> {
    defs: &'a MsgDefs,
    data: &'a [u8],
    pos: usize,
    little: bool,
    out: Vec<u8>,
    path: String,
    limits: &'a Limits<'a>,
    captured: Vec<Option<String>>,
    /// `header.stamp.sec` and `.nanosec`, when met.
    stamp: (Option<i64>, Option<u64>),
    /// The shape of the image whose pixels are the next field, for a JPEG encoding.
    image: Option<ImageShape>,
}

impl<'a> Decoder<'a> {
    fn fail(&self, why: &str) -> String {
        match self.path.is_empty() {
            true => why.to_string(),
            false => format!("field '{}': {why}", self.path),
        }
    }

    fn align(&mut self, n: usize) {
        let rel = self.pos - 4;
        self.pos += (n - rel % n) % n;
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let data: &'a [u8] = self.data;
        let end = self.pos.checked_add(n).filter(|&e| e <= data.len());
        match end {
            Some(end) => {
                let bytes = &data[self.pos..end];
                self.pos = end;
                Ok(bytes)
            }
            None => Err(self.fail("the message ends before its schema does")),
        }
    }

    fn word<const N: usize>(&mut self) -> Result<[u8; N], String> {
        self.align(N);
        let little = self.little;
        let mut bytes: [u8; N] = self
            .take(N)?
            .try_into()
            .map_err(|_| "short read".to_string())?;
        if !little {
            bytes.reverse();
        }
        Ok(bytes)
    }

    fn count(&mut self) -> Result<usize, String> {
        Ok(u32::from_le_bytes(self.word::<4>()?) as usize)
    }

    fn check_budget(&self) -> Result<(), String> {
        match self.out.len() > self.limits.max_json {
            true => Err(self.fail(&format!(
                "the message makes more than {} bytes of JSON (encode binary fields as base64)",
                self.limits.max_json
            ))),
            false => Ok(()),
        }
    }

    fn message(&mut self, ty: usize, depth: usize) -> Result<(), String> {
        if depth >= MAX_DEPTH {
            return Err(self.fail(&format!("messages nest more than {MAX_DEPTH} deep")));
        }
        let defs = self.defs;
        self.out.push(b'{');
        // Where each field's JSON lies, for an image's shape.
        let mut written: Vec<(&str, usize, usize)> = Vec::new();
        for (i, field) in defs.types[ty].fields.iter().enumerate() {
            if i > 0 {
                self.out.push(b',');
            }
            write_json_str(&mut self.out, &field.name);
            self.out.push(b':');
            let before = self.path.len();
            if !self.path.is_empty() {
                self.path.push('.');
            }
            self.path.push_str(&field.name);
            let start = self.out.len();
            if field.element == Element::Prim(Prim::U8) && self.binary_of() == Binary::Jpeg {
                let text = |name: &str| {
                    written
                        .iter()
                        .find(|(n, _, _)| *n == name)
                        .map(|&(_, a, b)| text_of(&self.out[a..b]))
                        .unwrap_or_default()
                };
                self.image = Some(ImageShape {
                    width: text("width").parse().unwrap_or(0),
                    height: text("height").parse().unwrap_or(0),
                    step: text("step").parse().unwrap_or(0),
                    encoding: text("encoding"),
                });
            }
            match field.arity {
                Arity::One => self.element(&field.element, depth)?,
                Arity::Fixed(n) => self.array(&field.element, n, depth)?,
                Arity::Sequence => {
                    let n = self.count()?;
                    self.array(&field.element, n, depth)?
                }
            }
            self.captures(start);
            written.push((&field.name, start, self.out.len()));
            self.path.truncate(before);
        }
        self.out.push(b'}');
        self.check_budget()
    }

    /// Records the value just written from `start` if its path is one asked for.
    fn captures(&mut self, start: usize) {
        match self.path.as_str() {
            "header.stamp.sec" => self.stamp.0 = text_of(&self.out[start..]).parse().ok(),
            "header.stamp.nanosec" => self.stamp.1 = text_of(&self.out[start..]).parse().ok(),
            _ => {}
        }
        if let Some(i) = self.limits.capture.iter().position(|p| *p == self.path) {
            self.captured[i] = Some(text_of(&self.out[start..]));
        }
    }

    fn array(&mut self, element: &Element, n: usize, depth: usize) -> Result<(), String> {
        // Every element takes at least a byte, but for messages without fields: a count
        // past the bytes left is refused before anything is written for it.
        let left = self.data.len() - self.pos.min(self.data.len());
        if n > left && !matches!(element, Element::Msg(t) if self.defs.types[*t].fields.is_empty())
        {
            return Err(self.fail(&format!(
                "a count of {n} elements exceeds the {left} bytes left"
            )));
        }
        if *element == Element::Prim(Prim::U8) {
            return self.bytes(n);
        }
        self.out.push(b'[');
        for i in 0..n {
            if i > 0 {
                self.out.push(b',');
            }
            let before = self.path.len();
            self.path.push_str(&format!("[{i}]"));
            let start = self.out.len();
            self.element(element, depth)?;
            self.captures(start);
            self.path.truncate(before);
            self.check_budget()?;
        }
        self.out.push(b']');
        Ok(())
    }

    /// How the binary field at the current path is written.
    fn binary_of(&self) -> Binary {
        self.limits
            .binary
            .iter()
            .find(|(p, _)| *p == self.path)
            .map_or(Binary::List, |(_, b)| *b)
    }

    fn bytes(&mut self, n: usize) -> Result<(), String> {
        let binary = self.binary_of();
        let image = self.image.take();
        let bytes = self.take(n)?;
        let jpeg = match (binary, image) {
            (Binary::Jpeg, Some(shape)) => Some(jpeg::encode(bytes, &shape)),
            (Binary::Jpeg, None) => Some(Err(
                "JPEG encoding needs an image's fields around its pixels".to_string(),
            )),
            _ => None,
        };
        let (binary, bytes) = match &jpeg {
            Some(Ok(encoded)) => (Binary::Base64, encoded.as_slice()),
            Some(Err(e)) => return Err(self.fail(e)),
            None => (binary, bytes),
        };
        let n = bytes.len();
        let mut out = std::mem::take(&mut self.out);
        match binary {
            Binary::Base64 => {
                out.push(b'"');
                let at = out.len();
                out.resize(at + n.div_ceil(3) * 4, 0);
                let written = base64::engine::general_purpose::STANDARD
                    .encode_slice(bytes, &mut out[at..])
                    .unwrap_or(0);
                out.truncate(at + written);
                out.push(b'"');
            }
            Binary::List | Binary::Jpeg => {
                // At most what the budget lets the list take: a larger one fails on
                // the check below, not on an allocation of four times its bytes.
                out.reserve((n * 4 + 2).min(self.limits.max_json.saturating_sub(out.len()) + 16));
                out.push(b'[');
                for (i, b) in bytes.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                        // Past the budget the list stops growing: the check below fails.
                        if i % 4096 == 0 && out.len() > self.limits.max_json {
                            break;
                        }
                    }
                    push_u8(&mut out, *b);
                }
                out.push(b']');
            }
        }
        self.out = out;
        self.check_budget()
    }

    fn element(&mut self, element: &Element, depth: usize) -> Result<(), String> {
        match element {
            Element::Prim(p) => self.prim(*p),
            Element::String => {
                let n = self.count()?;
                let bytes = self.take(n)?;
                // The length counts the terminating NUL.
                let text =
                    String::from_utf8_lossy(bytes.strip_suffix(&[0]).unwrap_or(bytes)).into_owned();
                write_json_str(&mut self.out, &text);
                self.check_budget()
            }
            Element::WString => {
                let n = self.count()?;
                let units: Vec<u16> = (0..n)
                    .map(|_| self.word::<2>().map(u16::from_le_bytes))
                    .collect::<Result<_, _>>()?;
                let units = units.strip_suffix(&[0]).unwrap_or(&units);
                write_json_str(&mut self.out, &String::from_utf16_lossy(units));
                self.check_budget()
            }
            Element::Msg(ty) => self.message(*ty, depth + 1),
        }
    }

    /// Reads an `N`-byte number and writes it as JSON (NaN and infinities as `null`).
    fn number<const N: usize, T: serde::Serialize>(
        &mut self,
        from: impl FnOnce([u8; N]) -> T,
    ) -> Result<(), String> {
        let v = from(self.word()?);
        let _ = serde_json::to_writer(&mut self.out, &v);
        Ok(())
    }

    fn prim(&mut self, p: Prim) -> Result<(), String> {
        match p {
            Prim::Bool => {
                let b = self.take(1)?[0];
                self.out
                    .extend_from_slice(if b != 0 { b"true" } else { b"false" });
            }
            Prim::U8 => {
                let b = self.take(1)?[0];
                push_u8(&mut self.out, b);
            }
            Prim::I8 => self.number(|[b]: [u8; 1]| b as i8)?,
            Prim::I16 => self.number(i16::from_le_bytes)?,
            Prim::U16 => self.number(u16::from_le_bytes)?,
            Prim::I32 => self.number(i32::from_le_bytes)?,
            Prim::U32 => self.number(u32::from_le_bytes)?,
            Prim::I64 => self.number(i64::from_le_bytes)?,
            Prim::U64 => self.number(u64::from_le_bytes)?,
            Prim::F32 => self.number(f32::from_le_bytes)?,
            Prim::F64 => self.number(f64::from_le_bytes)?,
        }
        Ok(())
    }
}

/// A value's JSON text as a label: a string unquoted, anything else as written.
fn text_of(json: &[u8]) -> String {
    match serde_json::from_slice::<serde_json::Value>(json) {
        Ok(serde_json::Value::String(s)) => s,
        _ => String::from_utf8_lossy(json).into_owned(),
    }
}

fn write_json_str(out: &mut Vec<u8>, s: &str) {
    let _ = serde_json::to_writer(out, s);
}

fn push_u8(out: &mut Vec<u8>, b: u8) {
    if b >= 100 {
        out.push(b'0' + b / 100);
    }
    if b >= 10 {
        out.push(b'0' + (b / 10) % 10);
    }
    out.push(b'0' + b % 10);
}
