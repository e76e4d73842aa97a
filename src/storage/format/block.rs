//! The sealed block file: payload frames followed by a checksummed record table.
//!
//! ```text
//! "HLBLK001" | frame 0 | frame 1 | … | meta | footer
//! meta   = codec, frames [offset, stored_len, raw_len, codec, crc32],
//!          records [timestamp, frame, offset in frame, size, content type, labels]
//!          (record table in format 1 or 2, stored as is or lz4-packed; see `block_meta.rs`)
//! footer = meta_offset u64 | meta_len u64 | meta_crc u32 | encoding u32 | "HLBLKEND"
//!          (encoding: low byte = packing, second byte = record table format)
//! ```
//!
//! A sealed block file is written once under a fresh name and never modified; changes write
//! a new file (`docs/storage.md`, "The write path"). Each frame carries its own CRC, checked the first
//! time the frame is read through a mapping, so a flipped byte fails the reads of that frame
//! with a clear error while every other block keeps working.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::storage::format::block_meta::{self as meta, BlockSummary, FrameInfo};
use crate::storage::format::block_record::BlockRecord;
use crate::storage::format::codec::Codec;
use crate::storage::format::columns::TableColumns;
use crate::storage::format::frames::{BlockFrames, DecodedFrame, Fetch, FileIdentity, FrameChecks};
use crate::storage::format::writeback::Writeback;
use crate::storage::record::{Payload, RecordMeta};

mod footer;
mod in_log;
pub(crate) mod row;

pub(crate) use footer::{BLOCK_MAGIC, meta_offset};
use footer::{FOOTER_LEN, Footer};
pub(crate) use in_log::{
    FrameSpan, PayloadSpans, SpanChecksums, check_frames, keep_payloads, payload_spans,
    plan_frames, seal_trailer,
};

/// Compresses one frame with `codec`, keeping it as stored when compression would not make
/// it smaller (JPEG or PNG payloads); returns the codec actually used and the bytes.
pub fn encode_frame(codec: Codec, raw: &[u8]) -> Result<(Codec, Vec<u8>)> {
    if codec == Codec::None {
        return Ok((Codec::None, raw.to_vec()));
    }
    let encoded = codec.encode(raw)?;
    if encoded.len() >= raw.len() {
        Ok((Codec::None, raw.to_vec()))
    } else {
        Ok((codec, encoded))
    }
}

/// Writes a new block file record by record, in timestamp order.
pub struct BlockWriter {
    path: PathBuf,
    out: BufWriter<File>,
    pos: u64,
    codec: Codec,
    frame_size: usize,
    frame_raw: Vec<u8>,
    frames: Vec<FrameInfo>,
    records: Vec<BlockRecord>,
    payload_bytes: u64,
    writeback: Writeback,
}

impl BlockWriter {
    /// Creates the file; it is named by nothing until the caller commits the index. The
    /// file must not exist: an existing file is never truncated (it could belong to an
    /// entry re-created under the same name while a stale writer ran).
    pub fn create(path: &Path, codec: Codec, frame_size: usize) -> Result<Self> {
        crate::storage::fence::check()?;
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| Error::io(format!("creating block {}", path.display()), e))?;
        let mut writer = BlockWriter {
            path: path.to_path_buf(),
            out: BufWriter::with_capacity(1 << 20, file),
            pos: 0,
            codec,
            frame_size: frame_size.max(1),
            frame_raw: Vec::new(),
            frames: Vec::new(),
            records: Vec::new(),
            payload_bytes: 0,
            writeback: Writeback::default(),
        };
        writer.write(BLOCK_MAGIC)?;
        Ok(writer)
    }

    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.out
            .write_all(bytes)
            .map_err(|e| Error::io(format!("writing block {}", self.path.display()), e))?;
        self.pos += bytes.len() as u64;
        if self.writeback.due(self.pos) {
            // Handed to the kernel first, so the request covers the bytes.
            self.out
                .flush()
                .map_err(|e| Error::io(format!("writing block {}", self.path.display()), e))?;
            self.writeback.start(self.out.get_ref(), self.pos);
        }
        Ok(())
    }

    /// Adds a record; timestamps must be strictly increasing.
    pub fn push(&mut self, meta: &RecordMeta, payload: &[u8]) -> Result<()> {
        if let Some(last) = self.records.last()
            && last.meta.timestamp >= meta.timestamp
        {
            return Err(Error::internal(format!(
                "block records out of order: {} after {}",
                meta.timestamp, last.meta.timestamp
            )));
        }
        let mut meta = meta.clone();
        meta.size = payload.len() as u64;
        self.records.push(BlockRecord {
            meta,
            frame: self.frames.len() as u32,
            offset: self.frame_raw.len() as u64,
        });
        self.frame_raw.extend_from_slice(payload);
        self.payload_bytes += payload.len() as u64;
        if self.frame_raw.len() >= self.frame_size {
            self.flush_frame()?;
        }
        Ok(())
    }

    fn flush_frame(&mut self) -> Result<()> {
        let raw = std::mem::take(&mut self.frame_raw);
        let (codec, stored) = encode_frame(self.codec, &raw)?;
        self.append_encoded_frame(codec, &stored, raw.len() as u64)
    }

    /// Appends a frame that is already encoded (recompression encodes frames in parallel
    /// and hands them over in order). Use with [`BlockWriter::finish_copied`].
    pub fn append_encoded_frame(
        &mut self,
        codec: Codec,
        stored: &[u8],
        raw_len: u64,
    ) -> Result<()> {
        let info = FrameInfo {
            offset: self.pos,
            stored_len: stored.len() as u64,
            raw_len,
            codec,
            crc: crc32fast::hash(stored),
        };
        self.write(stored)?;
        self.frames.push(info);
        Ok(())
    }

    /// Writes the record table and footer and fsyncs the file.
    pub fn finish(mut self) -> Result<BlockSummary> {
        if !self.frame_raw.is_empty() || self.frames.is_empty() {
            self.flush_frame()?;
        }
        let (Some(first), Some(last)) = (self.records.first(), self.records.last()) else {
            return Err(Error::internal(format!(
                "refusing to write empty block {}",
                self.path.display()
            )));
        };
        let (first_ts, last_ts) = (first.meta.timestamp, last.meta.timestamp);
        let mut head = meta::encode_head(self.codec, &self.frames);
        let (stored, encoding) = if self.codec == Codec::None {
            meta::encode_records(&self.records, &mut head);
            (head, meta::META_RAW | meta::TABLE_V3)
        } else {
            let mut records = Vec::new();
            meta::encode_records(&self.records, &mut records);
            let (packing, packed) = meta::pack_records(&records, self.codec);
            (
                meta::assemble_packed(&head, &packed),
                packing | meta::TABLE_V3,
            )
        };
        let count = self.records.len() as u64;
        let payload = self.payload_bytes;
        let (summary, file) =
            self.write_tail(stored, encoding, first_ts, last_ts, count, payload)?;
        sync(&file, &summary, first_ts)?;
        Ok(summary)
    }

    /// Finishes a block whose frames were appended one for one from `source` (described by
    /// `entry`): the source's record table (frame numbers and offsets) stays
    /// valid, so its bytes are reused as `packed_records` (from
    /// [`SealedBlock::records_section`] through `block_meta::pack_records`) instead of
    /// being rebuilt. The file is not fsynced: the caller must sync it before committing.
    pub fn finish_copied(
        self,
        source: &SealedBlock,
        entry: &BlockSummary,
        packed_records: &(u32, Vec<u8>),
    ) -> Result<(BlockSummary, File)> {
        if self.frames.len() != source.frames().len() {
            return Err(Error::internal(format!(
                "block {} has {} frames, its source {}",
                self.path.display(),
                self.frames.len(),
                source.frames().len()
            )));
        }
        self.finish_with_table(packed_records, source.table_format, entry)
    }

    /// Finishes a block whose frames were appended encoded and whose record table
    /// (`packed_records`, in `table_format`) describes them; `content` gives its first
    /// and last timestamps, record count and payload bytes. Not fsynced, as
    /// [`BlockWriter::finish_copied`].
    pub fn finish_with_table(
        self,
        packed_records: &(u32, Vec<u8>),
        table_format: u32,
        content: &BlockSummary,
    ) -> Result<(BlockSummary, File)> {
        let head = meta::encode_head(self.codec, &self.frames);
        let (packing, packed) = packed_records;
        let stored = meta::assemble_packed(&head, packed);
        self.write_tail(
            stored,
            packing | table_format,
            content.first_ts,
            content.last_ts,
            content.record_count,
            content.payload_bytes,
        )
    }

    /// Writes the stored metadata section and the footer, and flushes (without fsync).
    fn write_tail(
        mut self,
        stored: Vec<u8>,
        encoding: u32,
        first_ts: u64,
        last_ts: u64,
        record_count: u64,
        payload_bytes: u64,
    ) -> Result<(BlockSummary, File)> {
        let meta_offset = self.pos;
        let meta_crc = crc32fast::hash(&stored);
        self.write(&stored)?;
        self.write(&Footer::encode(
            meta_offset,
            stored.len() as u64,
            meta_crc,
            encoding,
        ))?;
        let path = self.path.clone();
        let file = self
            .out
            .into_inner()
            .map_err(|e| Error::io(format!("flushing block {}", path.display()), e.into_error()))?;
        let summary = BlockSummary {
            first_ts,
            last_ts,
            record_count,
            size: self.pos,
            payload_bytes,
            codec: self.codec,
            meta_crc,
        };
        Ok((summary, file))
    }
}

/// Makes a finished block file durable (step 1 of the commit protocol).
pub fn sync(file: &File, summary: &BlockSummary, first_ts: u64) -> Result<()> {
    file.sync_all().map_err(|e| {
        Error::io(
            format!("syncing new block {first_ts} ({} bytes)", summary.size),
            e,
        )
    })
}

/// A sealed block mapped into memory with its record table parsed.
pub struct SealedBlock {
    /// The mapping and its frames, shared with forks and with the block's lookup.
    body: Arc<BlockFrames>,
    codec: Codec,
    records: Vec<BlockRecord>,
    /// The raw bytes of the record table, reused when the block is recompressed.
    records_section: Vec<u8>,
    /// The table format of `records_section` (`block_meta::TABLE_*`).
    table_format: u32,
    /// The checksum of the metadata section, as the footer has it.
    meta_crc: u32,
}

impl SealedBlock {
    /// Maps `path` and parses its table; `what` names the block in errors, and
    /// `expected_meta_crc` (from the index) proves the file is the one that was committed.
    pub fn open(path: &Path, what: String, expected_meta_crc: Option<u32>) -> Result<Self> {
        Self::open_inner(path, what, expected_meta_crc, true, false, None, None)
    }

    /// [`SealedBlock::open`] trusting `known`, the frame checks of an earlier mapping of
    /// the file, when they are of this very file ([`FrameChecks::for_file`]).
    pub(crate) fn open_known(
        path: &Path,
        what: String,
        expected_meta_crc: Option<u32>,
        known: Option<Arc<FrameChecks>>,
        fetch: Option<Fetch>,
    ) -> Result<Self> {
        Self::open_inner(path, what, expected_meta_crc, true, false, known, fetch)
    }

    /// Maps a block only to copy its frames (recompression): the record table is kept as
    /// bytes and not parsed, so [`SealedBlock::records`] is empty; only the frame accessors
    /// and [`BlockWriter::finish_copied`] may use the result.
    pub(crate) fn open_frames(
        path: &Path,
        what: String,
        expected_meta_crc: Option<u32>,
    ) -> Result<Self> {
        Self::open_inner(path, what, expected_meta_crc, false, true, None, None)
    }

    /// Maps a block to join it with others (recompression of small blocks): its pages
    /// read ahead and its table decoded into columns (a table older than format 3 is
    /// parsed into records first), nothing cached anywhere.
    pub(crate) fn open_for_joining(
        path: &Path,
        what: String,
        expected_meta_crc: Option<u32>,
    ) -> Result<(Arc<BlockFrames>, TableColumns)> {
        let block = Self::open_inner(
            path,
            what.clone(),
            expected_meta_crc,
            false,
            true,
            None,
            None,
        )?;
        let raw_lens: Vec<u64> = block.frames().iter().map(|f| f.raw_len).collect();
        if block.table_format == meta::TABLE_V3 {
            let columns = TableColumns::decode(&block.records_section, &raw_lens, &what)?;
            return Ok((block.body, columns));
        }
        let parsed = Self::open_inner(path, what, expected_meta_crc, true, false, None, None)?;
        Ok((block.body, TableColumns::from_records(parsed.records())))
    }

    /// Maps a block and decodes its record table into columns only, not records: what a
    /// compact lookup is built from. `None` for the columns of a table older than format 3
    /// (the caller parses the block instead). `known` as for [`SealedBlock::open_known`].
    pub(crate) fn open_columns(
        path: &Path,
        what: String,
        expected_meta_crc: Option<u32>,
        known: Option<Arc<FrameChecks>>,
        fetch: Option<Fetch>,
    ) -> Result<(Arc<BlockFrames>, Option<TableColumns>)> {
        let block = Self::open_inner(path, what, expected_meta_crc, false, false, known, fetch)?;
        if block.table_format != meta::TABLE_V3 {
            return Ok((block.body, None));
        }
        let raw_lens: Vec<u64> = block.frames().iter().map(|f| f.raw_len).collect();
        let columns = TableColumns::decode(&block.records_section, &raw_lens, block.body.what())?;
        Ok((block.body, Some(columns)))
    }

    /// Maps a block to read a few of its frames (predicting a compression): like
    /// [`SealedBlock::open_frames`], but only the pages read are faulted in.
    pub(crate) fn open_for_sampling(
        path: &Path,
        what: String,
        expected_meta_crc: Option<u32>,
    ) -> Result<Self> {
        Self::open_inner(path, what, expected_meta_crc, false, false, None, None)
    }

    fn open_inner(
        path: &Path,
        what: String,
        expected_meta_crc: Option<u32>,
        parse_records: bool,
        populate: bool,
        known: Option<Arc<FrameChecks>>,
        fetch: Option<Fetch>,
    ) -> Result<Self> {
        let file = File::open(path).map_err(|e| Error::io(format!("opening {what}"), e))?;
        let identity = file
            .metadata()
            .map(|m| FileIdentity::of(&m))
            .map_err(|e| Error::io(format!("reading the size of {what}"), e))?;
        // SAFETY: block files are written once under a fresh name and never modified in
        // place afterwards (changes write a new file and rename the index), so the mapped
        // bytes cannot change under us; an unlinked file stays valid while mapped.
        let map = unsafe {
            let mut options = memmap2::MmapOptions::new();
            // A block mapped for recompression is read whole; fault it in at once
            // rather than page by page from the encoding threads.
            if populate {
                options.populate();
            }
            options.map(&file)
        }
        .map_err(|e| Error::io(format!("mapping {what}"), e))?;
        let footer = Footer::of_mapped(&map, &what)?;
        let meta = &map[footer.meta_offset..footer.meta_offset + footer.meta_len];
        footer.check(meta, expected_meta_crc, &what)?;
        let (meta_crc, encoding) = (footer.meta_crc, footer.encoding);
        let meta = meta::unpack(meta, encoding, &what)?;
        let (codec, frames, records_start) =
            meta::decode_frames(&meta, &what, footer.meta_offset as u64)?;
        let records_section = meta[records_start..].to_vec();
        let frame_count = frames.len();
        let records = if parse_records {
            meta::decode_records(&records_section, &frames, &what, encoding)?
        } else {
            Vec::new()
        };
        Ok(SealedBlock {
            body: Arc::new(BlockFrames::new(
                what,
                Arc::new(map),
                frames,
                FrameChecks::for_file(known, identity, frame_count),
                fetch,
            )),
            codec,
            records,
            records_section,
            table_format: encoding & !0xff,
            meta_crc,
        })
    }

    /// What the file holds, as its writer would have reported it: how an index that was
    /// lost is rebuilt from the block itself. Needs the records parsed ([`SealedBlock::open`]).
    pub fn summary(&self) -> BlockSummary {
        BlockSummary {
            first_ts: self.records.first().map_or(0, |r| r.meta.timestamp),
            last_ts: self.records.last().map_or(0, |r| r.meta.timestamp),
            record_count: self.records.len() as u64,
            size: self.body.file_len(),
            payload_bytes: self.records.iter().map(|r| r.meta.size).sum(),
            codec: self.codec,
            meta_crc: self.meta_crc,
        }
    }

    /// Whether the file is a log sealed in place (`in_log.rs`), as its first bytes say.
    pub fn is_sealed_log(&self) -> bool {
        self.body
            .file_bytes()
            .starts_with(crate::storage::format::log::LOG_MAGIC)
    }

    /// The block's codec tier.
    pub fn codec(&self) -> Codec {
        self.codec
    }

    /// The records, sorted by timestamp.
    pub fn records(&self) -> &[BlockRecord] {
        &self.records
    }

    /// The records, for applying the block's edit log to this view of it (the file is
    /// never changed).
    pub(crate) fn records_mut(&mut self) -> &mut Vec<BlockRecord> {
        &mut self.records
    }

    /// A second view of the same mapping with its own copy of the records, for changing
    /// the records of a view readers may still hold.
    pub(crate) fn fork(&self) -> SealedBlock {
        SealedBlock {
            body: self.body.clone(),
            codec: self.codec,
            records: self.records.clone(),
            records_section: self.records_section.clone(),
            table_format: self.table_format,
            meta_crc: self.meta_crc,
        }
    }

    /// Bytes of memory the parsed view takes besides the mapping: its records (their
    /// labels and content types), the table's raw bytes and the frame list. What the
    /// store's cache of parsed blocks is budgeted in.
    pub fn heap_bytes(&self) -> usize {
        let records: usize = self
            .records
            .iter()
            .map(|r| record_heap_bytes(&r.meta))
            .sum();
        std::mem::size_of::<Self>()
            + self.records.capacity() * std::mem::size_of::<BlockRecord>()
            + records
            + self.records_section.capacity()
            + self.body.heap_bytes()
    }

    /// The raw bytes of the record table (what recompression copies).
    pub fn records_section(&self) -> &[u8] {
        &self.records_section
    }

    /// Bytes of a copy of this block with `target` frames, besides the frames themselves:
    /// magic, frame table, the record table packed as `packed_records`, footer (what
    /// [`BlockWriter::finish_copied`] writes around them). The copy has `frames` frames:
    /// this block's count when its frames are copied one for one, fewer when they are
    /// joined.
    pub fn copied_overhead(&self, target: Codec, frames: usize, packed_records: &[u8]) -> u64 {
        let all = self.frames();
        let head = meta::encode_head(target, &all[..frames.min(all.len())]);
        (BLOCK_MAGIC.len() + 4 + head.len() + packed_records.len() + FOOTER_LEN) as u64
    }

    /// The frames.
    pub fn frames(&self) -> &[FrameInfo] {
        self.body.frames()
    }

    /// The mapping and its frames, which the block's lookup shares.
    pub(crate) fn body(&self) -> &Arc<BlockFrames> {
        &self.body
    }

    /// Index of the record with this exact timestamp.
    pub fn find(&self, ts: u64) -> Option<usize> {
        self.records
            .binary_search_by_key(&ts, |r| r.meta.timestamp)
            .ok()
    }

    /// Indices of the records with `start <= ts < stop`.
    pub fn range(&self, start: u64, stop: u64) -> Range<usize> {
        let lo = self.records.partition_point(|r| r.meta.timestamp < start);
        let hi = self.records.partition_point(|r| r.meta.timestamp < stop);
        lo..hi.max(lo)
    }

    /// The stored bytes of a frame, checksum-verified on first use.
    pub fn stored_frame(&self, index: usize) -> Result<&[u8]> {
        self.body.stored_frame(index)
    }

    /// The payload of record `index`; decodes only the frame that holds it, unless `cache`
    /// holds that frame of this block already (it then keeps the frame decoded for the
    /// caller's next record). The cache is the caller's, not the block's: a block kept by
    /// the store's cache must not keep a decoded frame with it, and readers walking the
    /// block from several threads at once (a merge writing several output blocks in
    /// parallel) would evict each other's frame per record.
    pub fn payload_with(&self, index: usize, cache: &mut DecodedFrame) -> Result<Payload> {
        let record = &self.records[index];
        self.body
            .payload(record.frame, record.offset, record.meta.size, cache)
    }
}

/// Bytes of memory one parsed record's metadata takes besides its table slot: its content
/// type and labels, as the allocator hands them out — each string its own allocation
/// (rounded up, with the allocator's header), the label map one B-tree node for every
/// eleven labels (a node has room for eleven whatever it holds). What
/// [`SealedBlock::heap_bytes`] sums, and what an edit changes it by.
pub fn record_heap_bytes(meta: &RecordMeta) -> usize {
    /// A B-tree leaf of `String` keys and values: eleven of each, its parent link and
    /// lengths, and the allocator's header.
    const NODE: usize = 11 * 2 * std::mem::size_of::<String>() + 16 + 16;
    let string = |s: &String| match s.capacity() {
        0 => 0,
        n => n.max(16).next_multiple_of(16) + 16,
    };
    string(&meta.content_type)
        + meta.labels.len().div_ceil(11) * NODE
        + meta
            .labels
            .iter()
            .map(|(k, v)| string(k) + string(v))
            .sum::<usize>()
}

#[cfg(test)]
mod tests;
