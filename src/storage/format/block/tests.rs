//! Block file format: every codec, incompressible frames, corruption, ordering.
use super::*;
use crate::storage::record::Labels;

fn meta(ts: u64, i: usize) -> RecordMeta {
    let mut labels = Labels::new();
    labels.insert("i".into(), i.to_string());
    RecordMeta {
        timestamp: ts,
        labels,
        content_type: "text/plain".into(),
        size: 0,
    }
}

fn payload(i: usize) -> Vec<u8> {
    format!("record number {i} ")
        .repeat(i % 50 + 1)
        .into_bytes()
}

fn build(path: &Path, codec: Codec, frame_size: usize, n: usize) -> BlockSummary {
    let mut w = BlockWriter::create(path, codec, frame_size).unwrap();
    for i in 0..n {
        w.push(&meta(1000 + i as u64 * 10, i), &payload(i)).unwrap();
    }
    w.finish().unwrap()
}

#[test]
fn every_codec_reads_back_every_record() {
    let dir = tempfile::tempdir().unwrap();
    for codec in [Codec::None, Codec::Lz4, Codec::Zstd(3), Codec::Zstd(19)] {
        let path = dir.path().join(format!("{codec}.blk"));
        let summary = build(&path, codec, 4096, 300);
        assert_eq!(summary.record_count, 300);
        assert_eq!(summary.first_ts, 1000);
        assert_eq!(summary.last_ts, 1000 + 299 * 10);
        let block = SealedBlock::open(&path, "test".into(), Some(summary.meta_crc)).unwrap();
        assert!(block.frames().len() > 10, "frames split the block");
        assert_eq!(block.codec(), codec);
        // Random access order, to exercise the one-frame cache.
        for i in (0..300).rev().step_by(7).chain(0..300) {
            let ts = 1000 + i as u64 * 10;
            let idx = block.find(ts).unwrap();
            assert_eq!(
                block.payload_with(idx, &mut None).unwrap().as_slice(),
                payload(i),
                "{codec} {i}"
            );
            assert_eq!(block.records()[idx].meta, {
                let mut m = meta(ts, i);
                m.size = payload(i).len() as u64;
                m
            });
        }
        assert_eq!(block.range(1005, 1031), 1..4);
        assert_eq!(block.range(0, 1), 0..0);
        assert!(block.find(1001).is_none());
    }
}

#[test]
fn incompressible_frames_are_stored_not_grown() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("noise.blk");
    let mut state = 0x12345678u64;
    let noise: Vec<u8> = (0..50_000)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    let mut w = BlockWriter::create(&path, Codec::Zstd(19), 1 << 20).unwrap();
    w.push(&meta(1, 0), &noise).unwrap();
    let summary = w.finish().unwrap();
    assert_eq!(summary.codec, Codec::Zstd(19));
    let block = SealedBlock::open(&path, "noise".into(), None).unwrap();
    assert_eq!(block.frames()[0].codec, Codec::None);
    assert_eq!(block.frames()[0].stored_len, 50_000);
    assert_eq!(block.payload_with(0, &mut None).unwrap().as_slice(), noise);
}

#[test]
fn corruption_fails_only_the_damaged_frame() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.blk");
    build(&path, Codec::None, 4096, 300);
    let block = SealedBlock::open(&path, "good".into(), None).unwrap();
    let victim = block.frames()[3].clone();
    drop(block);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[victim.offset as usize + 5] ^= 0xff;
    std::fs::write(&path, &bytes).unwrap();
    let block = SealedBlock::open(&path, "block 1000 of b/e".into(), None).unwrap();
    let mut failed = 0;
    for i in 0..300 {
        match block.payload_with(i, &mut None) {
            Ok(p) => assert_eq!(p.as_slice(), payload(i)),
            Err(e) => {
                assert_eq!(block.records()[i].frame, 3);
                assert!(e.message().contains("block 1000 of b/e is corrupt"), "{e}");
                assert!(e.message().contains("frame 3 checksum"), "{e}");
                failed += 1;
            }
        }
    }
    assert!(failed > 0);

    // A damaged record table makes the whole block fail to open, cleanly.
    let len = bytes.len();
    bytes[len - FOOTER_LEN - 3] ^= 0x01;
    std::fs::write(&path, &bytes).unwrap();
    let err = SealedBlock::open(&path, "block x".into(), None)
        .err()
        .unwrap();
    assert!(err.message().contains("record table checksum"), "{err}");
    std::fs::write(&path, &bytes[..len / 2]).unwrap();
    assert!(SealedBlock::open(&path, "block x".into(), None).is_err());
    std::fs::write(&path, b"").unwrap();
    assert!(SealedBlock::open(&path, "block x".into(), None).is_err());
}

#[test]
fn out_of_order_pushes_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = BlockWriter::create(&dir.path().join("x.blk"), Codec::None, 100).unwrap();
    w.push(&meta(5, 0), b"a").unwrap();
    assert!(w.push(&meta(5, 0), b"b").is_err());
    assert!(w.push(&meta(4, 0), b"b").is_err());
}

#[test]
fn an_existing_file_is_never_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("0000000000000001.blk");
    let summary = build(&path, Codec::None, 1024, 10);
    let before = std::fs::read(&path).unwrap();
    // A stale writer (an entry removed and re-created meanwhile) must fail, not truncate.
    assert!(BlockWriter::create(&path, Codec::None, 1024).is_err());
    let written =
        crate::storage::format::rewrite::write_new_block(&path, Codec::None, 1024, |_| Ok(()));
    assert!(written.is_err());
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "the file is untouched"
    );
    let log = dir.path().join("0000000000000002.log");
    std::fs::write(&log, b"someone else's").unwrap();
    assert!(crate::storage::format::log::OpenLog::create(&log).is_err());
    assert_eq!(std::fs::read(&log).unwrap(), b"someone else's");
    assert_eq!(summary.record_count, 10);
}
