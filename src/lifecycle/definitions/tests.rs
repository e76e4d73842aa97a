use super::*;

fn settings(bucket: &str) -> LifecycleSettings {
    let json = format!(r#"{{"type":"delete","bucket":"{bucket}","older_than":"1h"}}"#);
    LifecycleSettings::from_json(json.as_bytes()).expect("settings parse")
}

fn def(bucket: &str) -> Definition {
    Definition {
        settings: settings(bucket),
        provisioned: false,
        invalid: None,
    }
}

/// Name → bucket of every definition, to compare stores.
fn contents(store: &DefinitionStore) -> Vec<(String, String)> {
    store
        .iter()
        .map(|(name, d)| (name.clone(), d.settings.bucket.clone()))
        .collect()
}

#[test]
fn changes_survive_a_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = DefinitionStore::open(dir.path()).expect("open");
    store.put("a", def("b1")).expect("put a");
    store.put("b", def("b2")).expect("put b");
    store.put("a", def("b3")).expect("update a");
    store.remove("b").expect("remove b");
    store.put("c", def("b4")).expect("put c");
    drop(store);
    let store = DefinitionStore::open(dir.path()).expect("reopen");
    assert_eq!(
        contents(&store),
        vec![("a".into(), "b3".into()), ("c".into(), "b4".into())]
    );
    assert_eq!(store.journal_ops(), 5, "nothing compacted yet");
}

#[test]
fn a_torn_last_change_is_the_only_one_lost() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = DefinitionStore::open(dir.path()).expect("open");
    store.put("a", def("b1")).expect("put a");
    store.put("b", def("b2")).expect("put b");
    drop(store);
    let journal = dir.path().join(JOURNAL_FILE);
    let len = std::fs::metadata(&journal).expect("journal").len();
    // A kill in the middle of the second append.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&journal)
        .and_then(|f| f.set_len(len - 5))
        .expect("tear");
    let mut store = DefinitionStore::open(dir.path()).expect("reopen");
    assert_eq!(contents(&store), vec![("a".into(), "b1".into())]);
    // The torn tail is cut, so later changes land after the last whole one.
    store.put("c", def("b3")).expect("put c");
    drop(store);
    let store = DefinitionStore::open(dir.path()).expect("reopen again");
    assert_eq!(
        contents(&store),
        vec![("a".into(), "b1".into()), ("c".into(), "b3".into())]
    );
}

#[test]
fn the_journal_is_compacted_into_the_snapshot() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = DefinitionStore::open(dir.path()).expect("open");
    for i in 0..MIN_COMPACTION_OPS + 10 {
        store
            .put(&format!("p{}", i % 20), def(&format!("b{i}")))
            .expect("put");
    }
    assert!(
        store.journal_ops() < MIN_COMPACTION_OPS,
        "compacted after {MIN_COMPACTION_OPS} changes, {} left",
        store.journal_ops()
    );
    let journal_len = std::fs::metadata(dir.path().join(JOURNAL_FILE))
        .expect("journal")
        .len();
    assert!(
        journal_len < 10 * 1024,
        "journal emptied, {journal_len} bytes"
    );
    let before = contents(&store);
    drop(store);
    let store = DefinitionStore::open(dir.path()).expect("reopen");
    assert_eq!(contents(&store), before);
    assert_eq!(store.len(), 20);
}

#[test]
fn a_kill_between_snapshot_and_emptied_journal_replays_to_the_same_map() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = DefinitionStore::open(dir.path()).expect("open");
    store.put("a", def("b1")).expect("put a");
    store.put("b", def("b2")).expect("put b");
    store.remove("a").expect("remove a");
    let journal = dir.path().join(JOURNAL_FILE);
    let old_journal = std::fs::read(&journal).expect("journal");
    store.compact().expect("compact");
    let expected = contents(&store);
    drop(store);
    // The snapshot was replaced but the journal not yet emptied.
    std::fs::write(&journal, &old_journal).expect("restore journal");
    let store = DefinitionStore::open(dir.path()).expect("reopen");
    assert_eq!(contents(&store), expected);
    assert_eq!(expected, vec![("b".into(), "b2".into())]);
}

#[test]
fn a_snapshot_without_journal_loads() {
    // What versions before the journal wrote.
    let dir = tempfile::tempdir().expect("tempdir");
    let mut map = BTreeMap::new();
    map.insert("old".to_string(), def("b1"));
    std::fs::write(
        dir.path().join(SNAPSHOT_FILE),
        serde_json::to_vec_pretty(&map).expect("encode"),
    )
    .expect("write snapshot");
    let mut store = DefinitionStore::open(dir.path()).expect("open");
    assert_eq!(contents(&store), vec![("old".into(), "b1".into())]);
    store.put("new", def("b2")).expect("put");
    drop(store);
    let store = DefinitionStore::open(dir.path()).expect("reopen");
    assert_eq!(store.len(), 2);
}

#[test]
fn a_damaged_journal_header_is_restored_and_the_changes_after_it_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = DefinitionStore::open(dir.path()).expect("open");
    store.put("one", def("b1")).expect("put");
    store.put("two", def("b2")).expect("put");
    drop(store);
    let path = dir.path().join(JOURNAL_FILE);
    let mut bytes = std::fs::read(&path).expect("read");
    bytes[2] ^= 0x5a;
    std::fs::write(&path, bytes).expect("write");
    let store = DefinitionStore::open(dir.path()).expect("a damaged header is restored");
    assert_eq!(
        contents(&store),
        vec![("one".into(), "b1".into()), ("two".into(), "b2".into())]
    );
}
