//! Cutting a torn tail is never silent: opening logs, at warn level, which
//! segment lost how many bytes and records.

use std::io::Write;
use std::sync::{Arc, Mutex};

use agui_store::AppendRequest;
use agui_store::conformance::events::event;
use agui_store_file::{FileOptions, FileStore};
use serde_json::json;

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_tail_is_cut_with_a_warning_naming_segment_bytes_and_records() {
    let log = Captured::default();
    let writer = log.clone();
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .init();
    let dir = tempfile::tempdir().unwrap();
    let s = agui_store::Store::new(
        FileStore::open(dir.path(), FileOptions::default())
            .await
            .unwrap(),
    );
    for k in 0..4u64 {
        let e = event(json!({"type":"CUSTOM","name":"n","value":k}));
        s.append("t", "th", AppendRequest::new(vec![e]))
            .await
            .unwrap();
    }
    s.close().await.unwrap();
    drop(s);
    let seg = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".seg"))
        .unwrap();
    let len = std::fs::metadata(&seg).unwrap().len();
    // Tear the last record: 5 bytes short.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&seg)
        .unwrap()
        .set_len(len - 5)
        .unwrap();
    assert!(log.0.lock().unwrap().is_empty());
    let s = agui_store::Store::new(
        FileStore::open(dir.path(), FileOptions::default())
            .await
            .unwrap(),
    );
    assert_eq!(s.read_range("t", "th", 1, u64::MAX).await.unwrap().len(), 3);
    s.close().await.unwrap();
    let text = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
    let name = seg.file_stem().unwrap().to_string_lossy().into_owned();
    assert!(text.contains("WARN"), "{text}");
    assert!(text.contains("cut a torn tail"), "{text}");
    assert!(text.contains(&format!("segment={name}")), "{text}");
    assert!(text.contains("records_dropped=1"), "{text}");
    let kept = std::fs::metadata(&seg).unwrap().len();
    assert!(
        text.contains(&format!("bytes_dropped={}", len - 5 - kept)),
        "{text}"
    );
}
