//! Properties of the batch codec (`agui_store::frame`), over every profile
//! of the generator (unknown types, deep state, chunk soups, big numbers,
//! odd escapes) cut into batches of any size:
//! - a frame reads back as exactly the events written, texts and types;
//! - damage to the stored bytes (flips, cuts, insertions, a wrong length,
//!   checksum, count or codec) is refused, never read as other events;
//! - arbitrary bytes under any codec are an error, never a panic.

use agui_protocol::Event;
use agui_store::frame::{self, Frame};
use agui_testkit::r#gen::{Profile, chunk_soup, stream};
use proptest::prelude::*;

fn texts(ev: &[Event]) -> Vec<(String, String)> {
    ev.iter()
        .map(|e| (e.json().to_owned(), e.type_name().to_owned()))
        .collect()
}

fn decode(f: &Frame, data: Vec<u8>, count: u64) -> agui_store::Result<Vec<Event>> {
    frame::decode(
        f.codec,
        Some(i64::from(f.raw_len)),
        Some(i64::from(f.crc)),
        data,
        count,
    )
}

fn batch(profile: usize, seed: u64, start: usize, len: usize) -> Vec<Event> {
    let events = if profile == Profile::ALL.len() {
        chunk_soup(seed)
    } else {
        stream(Profile::ALL[profile], seed)
    };
    if events.is_empty() {
        return events;
    }
    let start = start % events.len();
    events[start..(start + len).min(events.len())].to_vec()
}

#[derive(Debug, Clone)]
enum Damage {
    Flip(usize, u8),
    Cut(usize),
    Insert(usize, u8),
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        (any::<usize>(), 1u8..=255).prop_map(|(i, x)| Damage::Flip(i, x)),
        any::<usize>().prop_map(Damage::Cut),
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Damage::Insert(i, b)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(256)
    ))]

    #[test]
    fn frames_read_back_exactly(
        profile in 0..=Profile::ALL.len(),
        seed in 0u64..1000,
        start in any::<usize>(),
        len in 1usize..300,
    ) {
        let ev = batch(profile, seed, start, len);
        prop_assume!(!ev.is_empty());
        let f = frame::encode(&ev).unwrap();
        let got = decode(&f, f.data.clone(), ev.len() as u64).unwrap();
        prop_assert_eq!(texts(&got), texts(&ev));
    }

    #[test]
    fn damaged_frames_are_refused_or_unchanged(
        profile in 0..=Profile::ALL.len(),
        seed in 0u64..1000,
        start in any::<usize>(),
        len in 1usize..60,
        hurt in prop::collection::vec(damage(), 1..4),
    ) {
        let ev = batch(profile, seed, start, len);
        prop_assume!(!ev.is_empty());
        let f = frame::encode(&ev).unwrap();
        let mut data = f.data.clone();
        for d in hurt {
            match d {
                Damage::Flip(i, x) if !data.is_empty() => {
                    let i = i % data.len();
                    data[i] ^= x;
                }
                Damage::Cut(i) => data.truncate(i % (data.len() + 1)),
                Damage::Insert(i, b) => data.insert(i % (data.len() + 1), b),
                Damage::Flip(..) => {}
            }
        }
        // A zstd header's window size may change without changing what
        // decompresses: then the events are the same. Anything else fails.
        if let Ok(got) = decode(&f, data, ev.len() as u64) {
            prop_assert_eq!(texts(&got), texts(&ev));
        }
        let n = ev.len() as u64;
        let bad_len = Some(i64::from(f.raw_len) + 1);
        let bad_crc = Some(i64::from(f.crc ^ 1));
        prop_assert!(frame::decode(f.codec, bad_len, Some(i64::from(f.crc)), f.data.clone(), n).is_err());
        prop_assert!(frame::decode(f.codec, Some(i64::from(f.raw_len)), bad_crc, f.data.clone(), n).is_err());
        prop_assert!(decode(&f, f.data.clone(), n + 1).is_err());
        let other = if f.codec == frame::TYPED { frame::TYPED_ZSTD } else { frame::TYPED };
        prop_assert!(frame::decode(other, Some(i64::from(f.raw_len)), Some(i64::from(f.crc)), f.data.clone(), n).is_err());
    }

    #[test]
    fn arbitrary_bytes_never_panic(
        codec in prop_oneof![Just(0i64), Just(1), Just(2), Just(3), Just(10), Just(11), any::<i64>()],
        raw_len in prop::option::of(0i64..5000),
        crc in prop::option::of(any::<u32>().prop_map(i64::from)),
        data in prop::collection::vec(any::<u8>(), 0..400),
        count in 0u64..5,
    ) {
        let _ = frame::decode(codec, raw_len, crc, data, count);
    }
}
