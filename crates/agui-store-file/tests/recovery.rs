//! Recovery and layout tests of the file store: torn tails, damage on disk,
//! sealing, file names, locking, URLs, durability flags.

use std::path::{Path, PathBuf};

use agui_store::conformance::events::{event, full_run, run_started};
use agui_store::{AppendRequest, Durability, ErrorKind, Store, StoredEvent};
use agui_store_file::{FileOptions, FileStore, parse_url};
use serde_json::json;

const T: &str = "tenant";

fn custom(n: u64) -> agui_protocol::Event {
    event(json!({"type":"CUSTOM","name":"n","value":n,"pad":"x".repeat((n % 50) as usize)}))
}

async fn all(s: &Store, thread: &str) -> Vec<StoredEvent> {
    s.read_range(T, thread, 1, u64::MAX).await.expect("read")
}

fn files(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    out.sort();
    out
}

/// (offset, length, kind) of every record of a plain segment.
fn records(path: &Path) -> Vec<(usize, usize, u8)> {
    let data = std::fs::read(path).unwrap();
    let mut pos = 8;
    let mut out = Vec::new();
    while pos + 8 <= data.len() {
        let len = u32::from_le_bytes(data[pos..pos + 4].try_into().unwrap()) as usize;
        if pos + 8 + len > data.len() {
            break;
        }
        out.push((pos, 8 + len, data[pos + 8]));
        pos += 8 + len;
    }
    out
}

#[tokio::test]
async fn a_torn_tail_is_cut_back_to_the_last_complete_record() {
    let dir = tempfile::tempdir().unwrap();
    let s = agui_store::Store::new(
        FileStore::open(dir.path(), FileOptions::default())
            .await
            .unwrap(),
    );
    for k in 0..5 {
        s.append(
            T,
            "th",
            AppendRequest::new(vec![custom(k), custom(k + 100)]),
        )
        .await
        .unwrap();
    }
    let before = all(&s, "th").await;
    s.close().await.unwrap();
    drop(s);
    let seg = files(dir.path(), ".seg").pop().unwrap();
    let recs = records(&seg);
    let full = std::fs::metadata(&seg).unwrap().len();
    // Cut the last record at every possible point, and append garbage.
    let (last_off, last_len, _) = *recs.last().unwrap();
    let original = std::fs::read(&seg).unwrap();
    for cut in [1, 4, 8, 9, last_len - 1] {
        std::fs::write(&seg, &original[..last_off + cut]).unwrap();
        let s = agui_store::Store::new(
            FileStore::open(dir.path(), FileOptions::default())
                .await
                .unwrap(),
        );
        let got = all(&s, "th").await;
        assert_eq!(
            got.len(),
            before.len() - 2,
            "cut at {cut}: the torn batch is gone"
        );
        for (a, b) in got.iter().zip(&before) {
            assert_eq!((a.seq, a.event.json()), (b.seq, b.event.json()));
        }
        s.close().await.unwrap();
        drop(s);
        assert_eq!(
            std::fs::metadata(&seg).unwrap().len(),
            last_off as u64,
            "the file was cut back"
        );
    }
    let mut garbage = original.clone();
    garbage.extend_from_slice(&[0u8; 4096]);
    garbage.extend_from_slice(b"\xff\xff\x00\x00junk");
    std::fs::write(&seg, &garbage).unwrap();
    let s = agui_store::Store::new(
        FileStore::open(dir.path(), FileOptions::default())
            .await
            .unwrap(),
    );
    assert_eq!(all(&s, "th").await.len(), before.len());
    assert_eq!(std::fs::metadata(&seg).unwrap().len(), full);
    // Appending continues after the cut.
    let a = s
        .append(
            T,
            "th",
            AppendRequest::new(vec![custom(9)]).expect_seq(before.len() as u64),
        )
        .await
        .unwrap();
    assert_eq!(a.first_seq, before.len() as u64 + 1);
    s.close().await.unwrap();
}

#[tokio::test]
async fn a_damaged_checkpoint_on_disk_is_rebuilt_and_damaged_events_refuse_to_open() {
    let dir = tempfile::tempdir().unwrap();
    let s = agui_store::Store::new(
        FileStore::open(dir.path(), FileOptions::default())
            .await
            .unwrap(),
    );
    s.append(
        T,
        "th",
        AppendRequest::new(full_run("th", "r1", None, "hello there")),
    )
    .await
    .unwrap();
    // Records after the checkpoint: its damage is not a torn tail.
    s.append(T, "other", AppendRequest::new(vec![custom(1)]))
        .await
        .unwrap();
    let want = s.restore(T, "th", "r1").await.unwrap();
    assert!(want.from_checkpoint);
    let n_events = all(&s, "th").await.len();
    s.close().await.unwrap();
    drop(s);
    let seg = files(dir.path(), ".seg").pop().unwrap();
    let recs = records(&seg);
    let (off, len, _) = *recs.iter().find(|r| r.2 == 2).expect("a checkpoint record");
    let mut data = std::fs::read(&seg).unwrap();
    let original = data.clone();
    data[off + len - 3] ^= 0x41;
    std::fs::write(&seg, &data).unwrap();
    let s = agui_store::Store::new(
        FileStore::open(dir.path(), FileOptions::default())
            .await
            .unwrap(),
    );
    assert_eq!(all(&s, "th").await.len(), n_events);
    let r = s.restore(T, "th", "r1").await.unwrap();
    assert!(!r.from_checkpoint, "the damaged checkpoint is not trusted");
    assert_eq!(r.json, want.json);
    assert!(s.restore(T, "th", "r1").await.unwrap().from_checkpoint);
    s.close().await.unwrap();
    drop(s);

    // Damage inside the first batch (followed by intact records): open
    // refuses rather than renumber or drop events.
    let (off, _, kind) = recs[0];
    assert_eq!(kind, 8, "a framed batch record");
    let mut data = original;
    data[off + 20] ^= 0x41;
    std::fs::write(&seg, &data).unwrap();
    let e = FileStore::open(dir.path(), FileOptions::default())
        .await
        .err()
        .expect("damaged events refuse to open");
    assert_eq!(e.kind(), ErrorKind::Corrupt);
    let shown = e.to_string();
    assert!(!shown.contains(&*dir.path().to_string_lossy()), "{shown}");
}

#[tokio::test]
async fn sealed_segments_read_back_and_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    // Batch records are compressed already: small segments, so that 300
    // batches still fill several.
    let opts = FileOptions {
        segment_bytes: 12 * 1024,
        block_bytes: 2 * 1024,
        ..FileOptions::default()
    };
    let file = FileStore::open(dir.path(), opts.clone()).await.unwrap();
    let s = agui_store::Store::new(file.clone());
    let mut expect = Vec::new();
    for k in 0..300u64 {
        let batch: Vec<_> = (0..10).map(|i| custom(k * 10 + i)).collect();
        expect.extend(batch.iter().map(|e| e.json().to_owned()));
        s.append(T, "big", AppendRequest::new(batch)).await.unwrap();
    }
    file.seal().await.unwrap();
    assert!(
        files(dir.path(), ".zseg").len() >= 3,
        "full segments are sealed"
    );
    assert_eq!(
        files(dir.path(), ".seg").len(),
        1,
        "only the active segment is plain"
    );
    let got: Vec<String> = all(&s, "big")
        .await
        .into_iter()
        .map(|e| e.event.json().to_owned())
        .collect();
    assert_eq!(got, expect);
    let stats = s.stats().await.unwrap();
    assert!(stats.stored_bytes < stats.raw_bytes, "{stats:?}");
    s.close().await.unwrap();
    drop(s);
    let s = agui_store::Store::new(FileStore::open(dir.path(), opts).await.unwrap());
    let page = s.read(T, "big", 1234, 7).await.unwrap();
    let seqs: Vec<u64> = page.events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1234..1241).collect::<Vec<_>>());
    assert_eq!(page.events[0].event.json(), expect[1233]);
    assert_eq!(all(&s, "big").await.len(), expect.len());
    s.close().await.unwrap();
}

#[tokio::test]
async fn ids_never_become_file_names() {
    let dir = tempfile::tempdir().unwrap();
    let s = agui_store::Store::new(
        FileStore::open(dir.path(), FileOptions::default())
            .await
            .unwrap(),
    );
    let long = "é".repeat(20_000);
    for id in ["../../escape", "/", "CON", "a\0b", "nul.txt", long.as_str()] {
        s.append(id, id, AppendRequest::new(vec![run_started(id, id, None)]))
            .await
            .unwrap();
        assert_eq!(s.thread(id, id).await.unwrap().thread_id, id);
    }
    s.close().await.unwrap();
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    for n in &names {
        assert!(
            n == "LOCK" || n.ends_with(".seg") || n.ends_with(".zseg"),
            "unexpected file {n}"
        );
    }
    assert!(!dir.path().parent().unwrap().join("escape").exists());
}

#[tokio::test]
async fn one_process_at_a_time_and_closed_handles_refuse() {
    let dir = tempfile::tempdir().unwrap();
    let s = agui_store::Store::new(
        FileStore::open(dir.path(), FileOptions::default())
            .await
            .unwrap(),
    );
    let e = FileStore::open(dir.path(), FileOptions::default())
        .await
        .err()
        .expect("locked");
    assert_eq!(e.kind(), ErrorKind::Unavailable);
    s.close().await.unwrap();
    let e = s
        .append(T, "x", AppendRequest::new(vec![custom(1)]))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable);
    let again = agui_store::Store::new(
        FileStore::open(dir.path(), FileOptions::default())
            .await
            .unwrap(),
    );
    again.close().await.unwrap();
}

#[tokio::test]
async fn durability_flags_follow_the_choice() {
    let dir = tempfile::tempdir().unwrap();
    let s = agui_store::Store::new(
        FileStore::open(dir.path(), FileOptions::default())
            .await
            .unwrap(),
    );
    let a = s
        .append(
            T,
            "d",
            AppendRequest::new(vec![run_started("d", "r", None)]),
        )
        .await
        .unwrap();
    assert!(!a.durable, "run_end: an open run's append is not synced");
    let a = s
        .append(
            T,
            "d",
            AppendRequest::new(vec![custom(1)]).durability(Durability::Append),
        )
        .await
        .unwrap();
    assert!(a.durable);
    let a = s
        .append(
            T,
            "d",
            AppendRequest::new(vec![agui_store::conformance::events::run_finished(
                "d", "r",
            )]),
        )
        .await
        .unwrap();
    assert!(a.durable, "run_end: the append that ends a run is synced");
    s.close().await.unwrap();
    drop(s);
    let forced = FileOptions {
        durability: Some(Durability::Append),
        ..FileOptions::default()
    };
    let s = agui_store::Store::new(FileStore::open(dir.path(), forced).await.unwrap());
    let a = s
        .append(T, "d", AppendRequest::new(vec![custom(2)]))
        .await
        .unwrap();
    assert!(a.durable, "the store-wide option overrides the request");
    s.close().await.unwrap();
}

#[test]
fn urls_parse_with_options_and_reject_nonsense() {
    let (dir, o) = parse_url("file:///var/lib/agui").unwrap();
    assert_eq!(dir, PathBuf::from("/var/lib/agui"));
    assert_eq!(o.durability, None);
    let (dir, o) = parse_url("file://rel/dir?durability=append&segment_mb=8&zstd_level=3").unwrap();
    assert_eq!(dir, PathBuf::from("rel/dir"));
    assert_eq!(o.durability, Some(Durability::Append));
    assert_eq!((o.segment_bytes, o.zstd_level), (8 << 20, 3));
    for bad in [
        "sqlite:///x",
        "file://",
        "file:///x?durability=never",
        "file:///x?segment_mb=0",
        "file:///x?zstd_level=99",
        "file:///x?what=1",
    ] {
        assert_eq!(
            parse_url(bad).unwrap_err().kind(),
            ErrorKind::Invalid,
            "{bad}"
        );
    }
}

/// A store of one thread with five batches of two events, closed; returns
/// the events and the segment.
async fn five_batches(dir: &Path) -> (Vec<(u64, String)>, PathBuf) {
    let s = agui_store::Store::new(FileStore::open(dir, FileOptions::default()).await.unwrap());
    for k in 0..5 {
        s.append(
            T,
            "th",
            AppendRequest::new(vec![custom(k), custom(k + 100)]),
        )
        .await
        .unwrap();
    }
    let events = all(&s, "th")
        .await
        .into_iter()
        .map(|e| (e.seq, e.event.json().to_owned()))
        .collect();
    s.close().await.unwrap();
    (events, files(dir, ".seg").pop().unwrap())
}

#[tokio::test]
async fn a_cut_in_the_middle_of_the_log_refuses_to_open_unless_repair_is_asked() {
    let dir = tempfile::tempdir().unwrap();
    let (before, seg) = five_batches(dir.path()).await;
    let recs = records(&seg);
    // The second batch's length field now points past the end of the file:
    // the records after it are intact, so this is no torn tail.
    let mut data = std::fs::read(&seg).unwrap();
    let (off, _, _) = recs[1];
    data[off..off + 4].copy_from_slice(&u32::MAX.to_le_bytes()[..4]);
    data[off + 3] = 0x01;
    std::fs::write(&seg, &data).unwrap();
    let e = FileStore::open(dir.path(), FileOptions::default())
        .await
        .err()
        .expect("a cut in the middle refuses to open");
    assert_eq!(e.kind(), ErrorKind::Corrupt);
    assert_eq!(std::fs::read(&seg).unwrap(), data, "nothing was cut");
    // Read-only opens refuse too.
    let url = format!("file://{}", dir.path().display());
    let e = agui_store_file::open_read_only(&url).await.err().unwrap();
    assert_eq!(e.kind(), ErrorKind::Corrupt);
    // With repair: cut at the damaged record; the first batch survives.
    let s = agui_store::Store::new(
        agui_store_file::open(&format!("{url}?repair=true"))
            .await
            .unwrap(),
    );
    let got: Vec<(u64, String)> = all(&s, "th")
        .await
        .into_iter()
        .map(|e| (e.seq, e.event.json().to_owned()))
        .collect();
    assert_eq!(got, before[..2]);
    assert_eq!(std::fs::metadata(&seg).unwrap().len(), off as u64);
    // And the store goes on from there.
    s.append(T, "th", AppendRequest::new(vec![custom(7)]).expect_seq(2))
        .await
        .unwrap();
    s.close().await.unwrap();
}

#[tokio::test]
async fn repair_moves_later_segments_aside() {
    let dir = tempfile::tempdir().unwrap();
    let opts = FileOptions {
        segment_bytes: 1,
        ..FileOptions::default()
    };
    let s = agui_store::Store::new(FileStore::open(dir.path(), opts.clone()).await.unwrap());
    for k in 0..4 {
        s.append(T, "th", AppendRequest::new(vec![custom(k)]))
            .await
            .unwrap();
    }
    s.close().await.unwrap();
    drop(s);
    // One record per segment (they may be sealed by now): damage the
    // second segment whatever its form.
    let mut segs: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let n = p.to_string_lossy();
            n.ends_with(".seg") || n.ends_with(".zseg")
        })
        .collect();
    segs.sort();
    assert!(segs.len() >= 4, "{segs:?}");
    let second = &segs[1];
    let mut data = std::fs::read(second).unwrap();
    let last = data.len() - 2;
    data[last] ^= 0x5a;
    std::fs::write(second, &data).unwrap();
    let e = FileStore::open(dir.path(), opts.clone())
        .await
        .err()
        .unwrap();
    assert_eq!(e.kind(), ErrorKind::Corrupt);
    let s = agui_store::Store::new(
        FileStore::open(
            dir.path(),
            FileOptions {
                repair: true,
                ..opts
            },
        )
        .await
        .unwrap(),
    );
    assert_eq!(all(&s, "th").await.len(), 1, "only the first batch is kept");
    let aside = std::fs::read_dir(dir.path().join("damaged"))
        .unwrap()
        .count();
    assert!(aside >= 2, "later segments are kept aside, not deleted");
    s.close().await.unwrap();
}

#[tokio::test]
async fn read_only_opens_create_nothing_and_work_beside_the_writer() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("typo");
    let e = agui_store_file::open_read_only(&format!("file://{}", missing.display()))
        .await
        .err()
        .unwrap();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    assert!(!missing.exists(), "no directory was created");
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let e = agui_store_file::open_read_only(&format!("file://{}", empty.display()))
        .await
        .err()
        .unwrap();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    assert_eq!(std::fs::read_dir(&empty).unwrap().count(), 0);
    // Beside a running writer (which holds the lock).
    let store = dir.path().join("store");
    let w = agui_store::Store::new(
        FileStore::open(&store, FileOptions::default())
            .await
            .unwrap(),
    );
    w.append(T, "th", AppendRequest::new(vec![custom(1), custom(2)]))
        .await
        .unwrap();
    let r = agui_store::Store::new(
        agui_store_file::open_read_only(&format!("file://{}", store.display()))
            .await
            .unwrap(),
    );
    assert_eq!(all(&r, "th").await.len(), 2);
    let e = r
        .append(T, "th", AppendRequest::new(vec![custom(3)]))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unsupported);
    r.close().await.unwrap();
    w.close().await.unwrap();
}

/// An intact record of a kind this version does not know was written by a
/// newer version: opening says so (`Unsupported`), and a repair refuses too
/// rather than cut the log there and drop everything after it.
#[tokio::test]
async fn a_record_of_an_unknown_kind_is_a_newer_store_never_damage_to_cut() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().display());
    let s = Store::new(agui_store_file::open(&url).await.unwrap());
    s.append(
        T,
        "th",
        AppendRequest::new(full_run("th", "r1", None, "hi")),
    )
    .await
    .unwrap();
    s.close().await.unwrap();
    drop(s);
    let seg = files(dir.path(), ".seg").pop().unwrap();
    let payload = [200u8, 1, 2, 3];
    let mut data = std::fs::read(&seg).unwrap();
    data.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    data.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    data.extend_from_slice(&payload);
    std::fs::write(&seg, &data).unwrap();
    for query in ["", "?repair=true"] {
        let e = agui_store_file::open(&format!("{url}{query}"))
            .await
            .err()
            .expect("refused");
        assert_eq!(e.kind(), ErrorKind::Unsupported, "{query}: {e}");
        assert_eq!(std::fs::read(&seg).unwrap(), data, "{query}: nothing cut");
    }
}

/// A flipped bit in the log's last record (a finished, synced run) is not
/// taken for a crash in silence: a read-only open reports it and `agui
/// store check` counts it as damage, and the open for writing that cuts it
/// keeps the bytes aside in the store directory. An incomplete last record
/// (a write cut short) is reported as a note, not damage.
#[tokio::test]
async fn a_damaged_last_record_is_reported_and_kept_aside_when_cut() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().display());
    let s = agui_store::Store::new(
        FileStore::open(dir.path(), FileOptions::default())
            .await
            .unwrap(),
    );
    s.append(
        T,
        "th",
        AppendRequest::new(full_run("th", "r1", None, "one")),
    )
    .await
    .unwrap();
    s.settle().await;
    // No checkpoint after it: its events are the log's last record.
    s.append(
        T,
        "th",
        AppendRequest::new(full_run("th", "r2", Some("r1"), "two"))
            .checkpoints(agui_store::Checkpoints::Defer),
    )
    .await
    .unwrap();
    let before = all(&s, "th").await;
    s.close().await.unwrap();
    drop(s);
    let seg = files(dir.path(), ".seg").pop().unwrap();
    let recs = records(&seg);
    let (last_off, last_len, kind) = *recs.last().unwrap();
    assert_eq!(kind, 8, "the last record is r2's batch: {recs:?}");
    let original = std::fs::read(&seg).unwrap();
    let mut flipped = original.clone();
    flipped[last_off + last_len - 3] ^= 0x10;
    std::fs::write(&seg, &flipped).unwrap();

    let ro = agui_store::Store::new(agui_store_file::open_read_only(&url).await.unwrap());
    let report = agui_store::check::check_store(&ro, |_| {}).await.unwrap();
    assert_eq!(report.damage.len(), 1, "{:?}", report.damage);
    let said = report.damage[0].to_string();
    assert!(said.starts_with("store: segment "), "{said}");
    assert!(
        said.contains("next open for writing moves them to torn-"),
        "{said}"
    );
    ro.close().await.unwrap();
    drop(ro);
    assert!(
        files(dir.path(), ".bin").is_empty(),
        "a read-only open moves nothing"
    );

    let s = agui_store::Store::new(
        FileStore::open(dir.path(), FileOptions::default())
            .await
            .unwrap(),
    );
    assert!(s.notices()[0].damage);
    let kept = files(dir.path(), ".bin");
    assert_eq!(kept.len(), 1);
    assert_eq!(std::fs::read(&kept[0]).unwrap(), flipped[last_off..]);
    // The run whose record was damaged is gone from the log (its bytes are
    // in the file kept aside); the one before it is whole.
    let got = all(&s, "th").await;
    assert_eq!(got.len(), full_run("th", "r1", None, "one").len());
    for (a, b) in got.iter().zip(&before) {
        assert_eq!((a.seq, a.event.json()), (b.seq, b.event.json()));
    }
    s.close().await.unwrap();
    drop(s);

    // A write cut short: a note, not damage.
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().display());
    let s = agui_store::Store::new(
        FileStore::open(dir.path(), FileOptions::default())
            .await
            .unwrap(),
    );
    s.append(
        T,
        "th",
        AppendRequest::new(full_run("th", "r1", None, "one")),
    )
    .await
    .unwrap();
    s.close().await.unwrap();
    drop(s);
    let seg = files(dir.path(), ".seg").pop().unwrap();
    let (last_off, last_len, _) = *records(&seg).last().unwrap();
    let data = std::fs::read(&seg).unwrap();
    std::fs::write(&seg, &data[..last_off + last_len / 2]).unwrap();
    let ro = agui_store::Store::new(agui_store_file::open_read_only(&url).await.unwrap());
    let report = agui_store::check::check_store(&ro, |_| {}).await.unwrap();
    assert!(report.damage.is_empty(), "{:?}", report.damage);
    let store_notes: Vec<_> = report
        .notes
        .iter()
        .filter(|n| n.tenant.is_empty())
        .collect();
    assert_eq!(store_notes.len(), 1, "{:?}", report.notes);
    assert!(store_notes[0].what.contains("a write cut short by a crash"));
    ro.close().await.unwrap();
}
