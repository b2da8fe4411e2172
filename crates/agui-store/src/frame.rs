//! The batch codec: how every durable backend stores the events of one
//! appended batch (SQLite and PostgreSQL as one row, the file store as one
//! record). One codec, so that backends cannot drift apart.
//!
//! A frame is a body plus what checks it: the codec, the body's raw length
//! and its CRC-32. The typed body (codecs [`TYPED`] and [`TYPED_ZSTD`]) is,
//! for each event:
//!
//! | bytes | what |
//! | --- | --- |
//! | 1 | type code: 1 to 31 for the protocol's known types ([`type_code`]), 0 for any other `type` |
//! | 4 | length of the event's JSON text (u32, little endian) |
//! | n | the event's exact JSON text |
//!
//! Reading a typed body parses no JSON: once the CRC-32 over the whole body
//! holds, each event is its text and its type code
//! ([`Event::from_checked_storage`]); only an event of an unknown type (code
//! 0) is read with [`Event::from_json`] to learn its `type`.
//!
//! [`TYPED_ZSTD`] bodies are compressed with zstd at level [`LEVEL`] over a
//! dictionary shipped with this crate (`frame/agui-events-v1.zdict`, trained
//! on the generated AG-UI corpus of `agui-testkit`: every profile's key
//! names, types and shapes; see `frame/README.md`). A gateway's batches are a
//! few events each, and a dictionary is what makes those small bodies
//! compress (measured in `crates/agui-store/BENCHMARK.md`). The dictionary is
//! part of the stored format: it never changes; a better one would get a new
//! codec number. A body is stored compressed only when that saves at least
//! an eighth.
//!
//! [`PACKED`] frames hold several batches of one thread, merged by a
//! backend after they were committed (SQLite packs a thread's small rows
//! into frames of up to [`PACK_EVENTS`] events, where zstd finds far more to
//! share than in one batch: see `crates/agui-store/BENCHMARK.md`). Their
//! body starts with a table of the batches it holds, each batch's event
//! count and receive time (u32 and i64, little endian, after a u32 count of
//! batches), followed by the typed records of every event; it is always
//! zstd over the shipped dictionary, checked by the same length and CRC-32
//! over the whole body. [`decode_timed`] reads it with each batch's receive
//! time; [`decode`] refuses it (a backend that never packs never stores one).
//!
//! Older codecs stay readable: [`PLAIN`] and [`ZSTD`] (length-prefixed texts
//! without type codes, zstd level 1 without a dictionary, every event parsed
//! on read), and PostgreSQL's schema-1 rows of one event each
//! ([`LEGACY_PLAIN`], [`LEGACY_ZSTD`]).

use std::cell::RefCell;
use std::sync::OnceLock;

use agui_protocol::{Event, EventType};
use zstd::dict::{DecoderDictionary, EncoderDictionary};

use crate::error::{Result, StoreError};
use crate::types::Timestamp;

/// Untyped body, stored as is (written before type codes; read only).
pub const PLAIN: i64 = 0;
/// Untyped body, zstd level 1 without a dictionary (read only).
pub const ZSTD: i64 = 1;
/// Typed body, stored as is.
pub const TYPED: i64 = 2;
/// Typed body, zstd with the shipped dictionary (`agui-events-v1`).
pub const TYPED_ZSTD: i64 = 3;
/// Several batches merged after their commit: a table of the batches'
/// event counts and receive times, then typed records; zstd with the
/// shipped dictionary.
pub const PACKED: i64 = 4;
/// PostgreSQL schema-1 row: one event's JSON, as is, no checksum (read only).
pub const LEGACY_PLAIN: i64 = 10;
/// PostgreSQL schema-1 row: one event's JSON, zstd, no checksum (read only).
pub const LEGACY_ZSTD: i64 = 11;

/// The zstd level of [`TYPED_ZSTD`] bodies (chosen by measurement: see
/// `crates/agui-store/BENCHMARK.md`).
pub const LEVEL: i32 = 3;

/// Events per frame at most: a larger batch spans several frames (rows).
pub const CHUNK_EVENTS: usize = 1024;

/// Events per [`PACKED`] frame that a packer aims at (and raw bytes,
/// [`PACK_BYTES`]): chosen by measurement (BENCHMARK.md, session 23), where
/// a reader that starts inside a frame decompresses at most this much.
pub const PACK_EVENTS: usize = 1024;
/// Raw body bytes of a [`PACKED`] frame a packer aims at, at most.
pub const PACK_BYTES: usize = 512 * 1024;

/// No body is larger than this (PostgreSQL's field limit; a damaged length
/// must never make a reader allocate without bound).
pub const MAX_BODY: usize = 1 << 30;

/// Bodies shorter than this are stored as they are.
const COMPRESS_FROM: usize = 48;

/// The shipped dictionary of [`TYPED_ZSTD`].
const DICTIONARY: &[u8] = include_bytes!("frame/agui-events-v1.zdict");

/// The stored code of an event type: its place in [`EventType::KNOWN`] + 1;
/// 0 for an unknown type. Part of the stored format: the test
/// `the_type_codes_are_the_protocol_order_and_never_move` holds every code
/// to a fixed table, so a type added to the protocol may only take the next
/// code.
pub fn type_code(ty: &EventType) -> u8 {
    match ty {
        EventType::Unknown(_) => 0,
        known => EventType::KNOWN
            .iter()
            .position(|k| k == known)
            .filter(|&i| i < usize::from(u8::MAX))
            .map_or(0, |i| i as u8 + 1),
    }
}

/// One encoded frame, ready to store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// How `data` is to be read ([`TYPED`] or [`TYPED_ZSTD`] when written).
    pub codec: i64,
    /// Length of the typed body.
    pub raw_len: u32,
    /// CRC-32 of the typed body.
    pub crc: u32,
    /// The stored bytes.
    pub data: Vec<u8>,
}

fn damaged(why: &str) -> StoreError {
    StoreError::corrupt(format!("a stored batch is damaged: {why}"))
}

fn encoder_dictionary() -> &'static EncoderDictionary<'static> {
    static D: OnceLock<EncoderDictionary<'static>> = OnceLock::new();
    D.get_or_init(|| EncoderDictionary::copy(DICTIONARY, LEVEL))
}

fn decoder_dictionary() -> &'static DecoderDictionary<'static> {
    static D: OnceLock<DecoderDictionary<'static>> = OnceLock::new();
    D.get_or_init(|| DecoderDictionary::copy(DICTIONARY))
}

thread_local! {
    /// Contexts reused across calls (making one costs more than compressing
    /// a small batch).
    static COMPRESSOR: RefCell<Option<zstd::bulk::Compressor<'static>>> =
        const { RefCell::new(None) };
    static DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { RefCell::new(None) };
    static PLAIN_DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { RefCell::new(None) };
}

fn compress(body: &[u8]) -> Option<Vec<u8>> {
    use zstd::zstd_safe::CParameter;
    COMPRESSOR.with(|c| {
        let mut c = c.borrow_mut();
        if c.is_none() {
            let mut new =
                zstd::bulk::Compressor::with_prepared_dictionary(encoder_dictionary()).ok()?;
            // Our own header holds the length and a checksum, and the codec
            // names the dictionary.
            new.set_parameter(CParameter::ContentSizeFlag(false)).ok()?;
            new.set_parameter(CParameter::ChecksumFlag(false)).ok()?;
            new.set_parameter(CParameter::DictIdFlag(false)).ok()?;
            *c = Some(new);
        }
        c.as_mut()?.compress(body).ok()
    })
}

fn decompress(data: &[u8], len: usize, dictionary: bool) -> Result<Vec<u8>> {
    let cell = if dictionary {
        &DECOMPRESSOR
    } else {
        &PLAIN_DECOMPRESSOR
    };
    cell.with(|d| {
        let mut d = d.borrow_mut();
        if d.is_none() {
            *d = if dictionary {
                zstd::bulk::Decompressor::with_prepared_dictionary(decoder_dictionary()).ok()
            } else {
                zstd::bulk::Decompressor::new().ok()
            };
        }
        d.as_mut()?.decompress(data, len).ok()
    })
    .ok_or_else(|| damaged("decompression"))
}

/// Frames a batch of at most [`CHUNK_EVENTS`] events (more are allowed but
/// make one large frame) and compresses it when that pays. `Invalid` when
/// the body would exceed [`MAX_BODY`].
pub fn encode(events: &[Event]) -> Result<Frame> {
    let len: usize = events.iter().map(|e| 5 + e.len_bytes()).sum();
    if len > MAX_BODY {
        return Err(StoreError::invalid(
            "a batch is larger than the 1 GiB a stored batch can hold",
        ));
    }
    let mut body = Vec::with_capacity(len);
    for e in events {
        body.push(type_code(e.event_type()));
        // Fits: the whole body is at most 1 GiB.
        body.extend_from_slice(&(e.len_bytes() as u32).to_le_bytes());
        body.extend_from_slice(e.json().as_bytes());
    }
    let crc = crc32fast::hash(&body);
    let raw_len = body.len() as u32;
    let compressed = (body.len() >= COMPRESS_FROM)
        .then(|| compress(&body))
        .flatten()
        .filter(|z| z.len() < body.len() - body.len() / 8);
    Ok(match compressed {
        Some(data) => Frame {
            codec: TYPED_ZSTD,
            raw_len,
            crc,
            data,
        },
        None => Frame {
            codec: TYPED,
            raw_len,
            crc,
            data: body,
        },
    })
}

/// Reads a stored frame back into its `count` events, checking the codec,
/// the length, the checksum, the framing and the count. `raw_len` and `crc`
/// are `None` only for the legacy one-event codecs, which have neither.
/// Any mismatch is `Corrupt`, and so is a [`PACKED`] frame (read those with
/// [`decode_timed`]).
pub fn decode(
    codec: i64,
    raw_len: Option<i64>,
    crc: Option<i64>,
    data: Vec<u8>,
    count: u64,
) -> Result<Vec<Event>> {
    if codec == PACKED {
        return Err(damaged("a packed frame where none is written"));
    }
    decode_timed(codec, raw_len, crc, data, count).map(|d| d.events)
}

/// What [`decode_timed`] read.
#[derive(Debug, Clone, Default)]
pub struct Decoded {
    /// The frame's events, in order.
    pub events: Vec<Event>,
    /// For a [`PACKED`] frame, its batches in order: how many events each
    /// holds and when it was received. Empty for any other frame, whose
    /// events share the receive time stored beside it.
    pub batches: Batches,
    /// Events of the frame before `events[0]` that were not built (see
    /// [`decode_window`]); 0 otherwise.
    pub skipped: u64,
}

/// The batches of a [`PACKED`] frame: each one's event count and receive
/// time, in order.
pub type Batches = Vec<(u32, Timestamp)>;

/// [`decode`] for every codec, [`PACKED`] included, with the receive time of
/// each batch a packed frame holds.
pub fn decode_timed(
    codec: i64,
    raw_len: Option<i64>,
    crc: Option<i64>,
    data: Vec<u8>,
    count: u64,
) -> Result<Decoded> {
    decode_window(codec, raw_len, crc, data, count, 0, usize::MAX)
}

/// [`decode_timed`] that builds only the events of a window: it skips the
/// first `skip` and stops building after `take` (a reader starting inside
/// a large frame, or a page that ends there). The whole frame is still
/// checked: its checksum, framing and count.
pub fn decode_window(
    codec: i64,
    raw_len: Option<i64>,
    crc: Option<i64>,
    data: Vec<u8>,
    count: u64,
    skip: u64,
    take: usize,
) -> Result<Decoded> {
    let len = || {
        raw_len
            .and_then(|n| usize::try_from(n).ok())
            .filter(|&n| n <= MAX_BODY)
            .ok_or_else(|| damaged("length"))
    };
    let (body, typed) = match codec {
        PLAIN => (data, false),
        ZSTD => (decompress(&data, len()?, false)?, false),
        TYPED => (data, true),
        TYPED_ZSTD | PACKED => (decompress(&data, len()?, true)?, true),
        LEGACY_PLAIN | LEGACY_ZSTD => {
            if count != 1 {
                return Err(damaged("event count"));
            }
            let events = if skip == 0 && take > 0 {
                vec![legacy(codec, data)?]
            } else {
                Vec::new()
            };
            return Ok(Decoded {
                events,
                batches: Vec::new(),
                skipped: skip.min(1),
            });
        }
        _ => return Err(damaged("unknown codec")),
    };
    let crc_ok = crc
        .and_then(|c| u32::try_from(c).ok())
        .is_some_and(|c| c == crc32fast::hash(&body));
    if body.len() != len()? || !crc_ok {
        return Err(damaged("checksum"));
    }
    let (batches, mut rest) = if codec == PACKED {
        let (batches, records) = batch_table(&body)?;
        let total: u64 = batches.iter().map(|&(n, _)| u64::from(n)).sum();
        if total != count {
            return Err(damaged("event count"));
        }
        (batches, records)
    } else {
        (Vec::new(), &body[..])
    };
    let want = usize::try_from(count.saturating_sub(skip))
        .unwrap_or(usize::MAX)
        .min(take);
    let mut out = Vec::with_capacity(want.min(PACK_EVENTS));
    let mut seen = 0u64;
    while !rest.is_empty() {
        let code = if typed {
            let (&c, tail) = rest.split_first().ok_or_else(|| damaged("framing"))?;
            rest = tail;
            Some(c)
        } else {
            None
        };
        let Some((head, tail)) = rest.split_first_chunk::<4>() else {
            return Err(damaged("framing"));
        };
        let n = u32::from_le_bytes(*head) as usize;
        let Some(text) = tail.get(..n) else {
            return Err(damaged("framing"));
        };
        seen += 1;
        if seen <= skip || out.len() >= take {
            // Outside the window: framed and checksummed, not built.
            rest = &tail[n..];
            continue;
        }
        let text = std::str::from_utf8(text).map_err(|_| damaged("not UTF-8"))?;
        let event = match code {
            Some(c) if c > 0 && usize::from(c) <= EventType::KNOWN.len() => {
                Event::from_checked_storage(text, EventType::KNOWN[usize::from(c) - 1].clone())
            }
            Some(0) | None => Event::from_json(text).map_err(|_| damaged("not an event"))?,
            Some(_) => return Err(damaged("type code")),
        };
        out.push(event);
        rest = &tail[n..];
    }
    if seen != count {
        return Err(damaged("event count"));
    }
    Ok(Decoded {
        events: out,
        batches,
        skipped: skip.min(count),
    })
}

/// A [`PACKED`] body's table of batches and the typed records after it.
fn batch_table(body: &[u8]) -> Result<(Batches, &[u8])> {
    let bad = || damaged("batch table");
    let (k, mut rest) = body.split_first_chunk::<4>().ok_or_else(bad)?;
    let k = u32::from_le_bytes(*k) as usize;
    if k == 0 || k > rest.len() / 12 {
        return Err(bad());
    }
    let mut batches = Vec::with_capacity(k);
    for _ in 0..k {
        let (n, tail) = rest.split_first_chunk::<4>().ok_or_else(bad)?;
        let (at, tail) = tail.split_first_chunk::<8>().ok_or_else(bad)?;
        let n = u32::from_le_bytes(*n);
        if n == 0 {
            return Err(bad());
        }
        batches.push((n, Timestamp(i64::from_le_bytes(*at))));
        rest = tail;
    }
    Ok((batches, rest))
}

/// One stored frame's typed records, checked, with the batches they hold
/// (one batch, received at `received_at`, for a frame that is not
/// [`PACKED`]): what a packer merges, without reading any event. `None` for
/// the untyped and legacy codecs, which a packer leaves as they are.
/// `Corrupt` when the frame is damaged or does not hold `count` events.
pub fn records(
    codec: i64,
    raw_len: i64,
    crc: i64,
    data: &[u8],
    count: u64,
    received_at: Timestamp,
) -> Result<Option<Records>> {
    let body = match codec {
        TYPED => data.to_vec(),
        TYPED_ZSTD | PACKED => {
            let n = usize::try_from(raw_len)
                .ok()
                .filter(|&n| n <= MAX_BODY)
                .ok_or_else(|| damaged("length"))?;
            decompress(data, n, true)?
        }
        _ => return Ok(None),
    };
    if i64::try_from(body.len()).ok() != Some(raw_len)
        || u32::try_from(crc).ok() != Some(crc32fast::hash(&body))
    {
        return Err(damaged("checksum"));
    }
    let (batches, at) = if codec == PACKED {
        let (batches, records) = batch_table(&body)?;
        let at = body.len() - records.len();
        (batches, at)
    } else {
        let n = u32::try_from(count).map_err(|_| damaged("event count"))?;
        (vec![(n, received_at)], 0)
    };
    // The records must frame exactly the events the table promises.
    let mut seen = 0u64;
    let mut rest = &body[at..];
    while let Some((_, tail)) = rest.split_first() {
        let (n, tail) = tail
            .split_first_chunk::<4>()
            .ok_or_else(|| damaged("framing"))?;
        let n = u32::from_le_bytes(*n) as usize;
        rest = tail.get(n..).ok_or_else(|| damaged("framing"))?;
        seen += 1;
    }
    let promised: u64 = batches.iter().map(|&(n, _)| u64::from(n)).sum();
    if seen != count || promised != count {
        return Err(damaged("event count"));
    }
    Ok(Some(Records { body, at, batches }))
}

/// The checked records of one stored frame (see [`records`]).
#[derive(Debug, Clone)]
pub struct Records {
    body: Vec<u8>,
    /// Where the typed records start in `body`.
    at: usize,
    batches: Vec<(u32, Timestamp)>,
}

impl Records {
    /// Events held.
    pub fn events(&self) -> u64 {
        self.batches.iter().map(|&(n, _)| u64::from(n)).sum()
    }

    /// Raw bytes of the typed records.
    pub fn len_bytes(&self) -> usize {
        self.body.len() - self.at
    }
}

/// Merges the records of consecutive frames of one thread, in order, into
/// one [`PACKED`] frame that keeps each batch's receive time. `Invalid`
/// when there is nothing to merge or the body would exceed [`MAX_BODY`].
pub fn pack(parts: &[Records]) -> Result<Frame> {
    let batches: Vec<(u32, Timestamp)> = parts
        .iter()
        .flat_map(|p| p.batches.iter().copied())
        .collect();
    let records: usize = parts.iter().map(Records::len_bytes).sum();
    let len = 4 + 12 * batches.len() + records;
    if batches.is_empty() || len > MAX_BODY {
        return Err(StoreError::invalid(
            "a packed frame holds at least one batch and at most 1 GiB",
        ));
    }
    let mut body = Vec::with_capacity(len);
    body.extend_from_slice(&(batches.len() as u32).to_le_bytes());
    for (n, at) in &batches {
        body.extend_from_slice(&n.to_le_bytes());
        body.extend_from_slice(&at.0.to_le_bytes());
    }
    for p in parts {
        body.extend_from_slice(&p.body[p.at..]);
    }
    let crc = crc32fast::hash(&body);
    let data = compress(&body).ok_or_else(|| StoreError::internal("zstd could not compress"))?;
    Ok(Frame {
        codec: PACKED,
        raw_len: body.len() as u32,
        crc,
        data,
    })
}

/// One event as PostgreSQL's schema 1 stored it.
fn legacy(codec: i64, body: Vec<u8>) -> Result<Event> {
    let bytes = if codec == LEGACY_ZSTD {
        let size = zstd::zstd_safe::get_frame_content_size(&body)
            .ok()
            .flatten()
            .and_then(|n| usize::try_from(n).ok())
            .filter(|&n| n <= MAX_BODY)
            .ok_or_else(|| damaged("length"))?;
        decompress(&body, size, false)?
    } else {
        body
    };
    let json = String::from_utf8(bytes).map_err(|_| damaged("not UTF-8"))?;
    Event::from_json_string(json).map_err(|_| damaged("not an event"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(n: usize) -> Vec<Event> {
        (0..n)
            .map(|i| {
                let text = match i % 4 {
                    0 => format!(
                        r#"{{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"word {i} and more"}}"#
                    ),
                    1 => format!(r#"{{"type":"STATE_DELTA","delta":[{{"op":"add","path":"/n","value":{i}}}]}}"#),
                    2 => format!(r#"{{"type":"MY_OWN_TYPE","n":{i},"note":"kept as it is"}}"#),
                    _ => format!(r#"{{"type":"RUN_STARTED","threadId":"t","runId":"r{i}"}}"#),
                };
                Event::from_json(&text).unwrap()
            })
            .collect()
    }

    fn texts(ev: &[Event]) -> Vec<&str> {
        ev.iter().map(Event::json).collect()
    }

    fn back(f: &Frame, n: usize) -> Result<Vec<Event>> {
        decode(
            f.codec,
            Some(i64::from(f.raw_len)),
            Some(i64::from(f.crc)),
            f.data.clone(),
            n as u64,
        )
    }

    /// The stored type codes, index + 1, as written since codec 2: append
    /// only, never reorder.
    const TYPE_CODES: [&str; 31] = [
        "RUN_STARTED",
        "RUN_FINISHED",
        "RUN_ERROR",
        "STEP_STARTED",
        "STEP_FINISHED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "TEXT_MESSAGE_CHUNK",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_CHUNK",
        "TOOL_CALL_RESULT",
        "STATE_SNAPSHOT",
        "STATE_DELTA",
        "MESSAGES_SNAPSHOT",
        "ACTIVITY_SNAPSHOT",
        "ACTIVITY_DELTA",
        "RAW",
        "CUSTOM",
        "REASONING_START",
        "REASONING_MESSAGE_START",
        "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_END",
        "REASONING_MESSAGE_CHUNK",
        "REASONING_END",
        "REASONING_ENCRYPTED_VALUE",
        "SUBAGENT_STARTED",
        "SUBAGENT_FINISHED",
        "SUBAGENT_ERROR",
    ];

    #[test]
    fn the_type_codes_are_the_protocol_order_and_never_move() {
        assert_eq!(EventType::KNOWN.len(), TYPE_CODES.len());
        for (i, wire) in TYPE_CODES.iter().enumerate() {
            let ty = EventType::from_wire(wire);
            assert_eq!(EventType::KNOWN[i], ty, "code {} is {wire}", i + 1);
            assert_eq!(usize::from(type_code(&ty)), i + 1);
        }
        assert_eq!(type_code(&EventType::from_wire("NOT_A_TYPE")), 0);
    }

    /// The dictionary is part of the stored format (see `frame/README.md`).
    #[test]
    fn the_dictionary_never_changes() {
        use sha2::{Digest, Sha256};
        let hex: String = Sha256::digest(DICTIONARY)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(
            hex,
            "68e430f8565dc1d10f7357554fc7f4d85f1b718f3a727eff8f85b52cade0e43f"
        );
    }

    #[test]
    fn round_trips_typed_and_compressed_with_types_kept() {
        let tiny = vec![Event::from_json(r#"{"type":"RAW","event":1}"#).unwrap()];
        let f = encode(&tiny).unwrap();
        assert_eq!(
            f.codec, TYPED,
            "a body under {COMPRESS_FROM} bytes is stored plain"
        );
        assert_eq!(texts(&back(&f, 1).unwrap()), texts(&tiny));
        for n in [1, 2, 3, 300] {
            let ev = events(n);
            let f = encode(&ev).unwrap();
            assert_eq!(f.codec, TYPED_ZSTD, "{n}");
            let got = back(&f, n).unwrap();
            assert_eq!(texts(&ev), texts(&got));
            let types = |v: &[Event]| v.iter().map(|e| e.event_type().clone()).collect::<Vec<_>>();
            assert_eq!(types(&ev), types(&got));
        }
    }

    #[test]
    fn the_dictionary_makes_small_batches_small() {
        let ev = events(4);
        let raw: usize = ev.iter().map(Event::len_bytes).sum();
        let f = encode(&ev).unwrap();
        assert_eq!(f.codec, TYPED_ZSTD);
        assert!(f.data.len() * 2 < raw, "{} of {raw}", f.data.len());
    }

    #[test]
    fn damage_is_detected() {
        for n in [1, 300] {
            let f = encode(&events(n)).unwrap();
            let (len, crc) = (Some(i64::from(f.raw_len)), Some(i64::from(f.crc)));
            let good = back(&f, n).unwrap();
            for i in 0..f.data.len() {
                let mut d = f.data.clone();
                d[i] ^= 0x21;
                // Damage is refused, or it touched only bytes that do not
                // change what decompresses (a zstd header's window size):
                // never different events.
                if let Ok(got) = decode(f.codec, len, crc, d, n as u64) {
                    assert_eq!(texts(&got), texts(&good), "flip at {i}");
                }
            }
            let mut body = Vec::new();
            for e in &good {
                body.push(type_code(e.event_type()));
                body.extend_from_slice(&(e.len_bytes() as u32).to_le_bytes());
                body.extend_from_slice(e.json().as_bytes());
            }
            for i in (0..body.len()).step_by(3) {
                let mut d = body.clone();
                d[i] ^= 0x21;
                assert!(
                    decode(TYPED, len, crc, d, n as u64).is_err(),
                    "plain flip at {i}"
                );
            }
            let n = n as u64;
            assert!(decode(f.codec, len, crc, f.data.clone(), n + 1).is_err());
            assert!(decode(9, len, crc, f.data.clone(), n).is_err());
            assert!(decode(f.codec, Some(-1), crc, f.data.clone(), n).is_err());
            assert!(decode(f.codec, None, crc, f.data.clone(), n).is_err());
            assert!(decode(f.codec, len, None, f.data.clone(), n).is_err());
            let cut = f.data[..f.data.len() - 1].to_vec();
            assert!(decode(f.codec, len, crc, cut, n).is_err());
        }
    }

    #[test]
    fn a_type_code_out_of_range_is_damage_even_with_a_good_checksum() {
        let ev = events(1);
        let mut body = vec![77u8];
        body.extend_from_slice(&(ev[0].len_bytes() as u32).to_le_bytes());
        body.extend_from_slice(ev[0].json().as_bytes());
        let crc = i64::from(crc32fast::hash(&body));
        let len = Some(body.len() as i64);
        let err = decode(TYPED, len, Some(crc), body, 1).unwrap_err();
        assert!(err.to_string().contains("type code"), "{err}");
    }

    /// The bodies written before type codes (SQLite and PostgreSQL rows,
    /// codecs 0 and 1) read back unchanged.
    #[test]
    fn untyped_bodies_read_back() {
        let ev = events(300);
        let mut body = Vec::new();
        for e in &ev {
            body.extend_from_slice(&(e.len_bytes() as u32).to_le_bytes());
            body.extend_from_slice(e.json().as_bytes());
        }
        let crc = Some(i64::from(crc32fast::hash(&body)));
        let len = Some(body.len() as i64);
        let got = decode(PLAIN, len, crc, body.clone(), 300).unwrap();
        assert_eq!(texts(&ev), texts(&got));
        let z = zstd::bulk::compress(&body, 1).unwrap();
        let got = decode(ZSTD, len, crc, z, 300).unwrap();
        assert_eq!(texts(&ev), texts(&got));
    }

    #[test]
    fn legacy_rows_read_back() {
        let small = r#"{"type":"CUSTOM","name":"n","value":1}"#;
        let got = decode(LEGACY_PLAIN, None, None, small.as_bytes().to_vec(), 1).unwrap();
        assert_eq!(got[0].json(), small);
        let big = format!(
            r#"{{"type":"CUSTOM","name":"n","value":"{}"}}"#,
            "ab ".repeat(900)
        );
        let z = zstd::bulk::compress(big.as_bytes(), 1).unwrap();
        let got = decode(LEGACY_ZSTD, None, None, z.clone(), 1).unwrap();
        assert_eq!(got[0].json(), big);
        let mut bad = z;
        let mid = bad.len() / 2;
        bad[mid] ^= 0x55;
        bad.truncate(bad.len() - 3);
        assert!(decode(LEGACY_ZSTD, None, None, bad, 1).is_err());
        assert!(decode(LEGACY_PLAIN, None, None, vec![0xff, 0xfe], 1).is_err());
        assert!(decode(LEGACY_PLAIN, None, None, small.as_bytes().to_vec(), 2).is_err());
    }

    fn records_of(f: &Frame, n: u64, at: i64) -> Records {
        records(
            f.codec,
            i64::from(f.raw_len),
            i64::from(f.crc),
            &f.data,
            n,
            Timestamp(at),
        )
        .unwrap()
        .unwrap()
    }

    #[test]
    fn a_packed_frame_keeps_every_batch_and_its_receive_time() {
        let ev = events(40);
        let parts: Vec<Records> = ev
            .chunks(8)
            .enumerate()
            .map(|(i, c)| records_of(&encode(c).unwrap(), c.len() as u64, 500 + i as i64))
            .collect();
        let packed = pack(&parts).unwrap();
        assert_eq!(packed.codec, PACKED);
        let (len, crc) = (Some(i64::from(packed.raw_len)), Some(i64::from(packed.crc)));
        let d = decode_timed(PACKED, len, crc, packed.data.clone(), 40).unwrap();
        assert_eq!(texts(&d.events), texts(&ev));
        let want: Vec<(u32, Timestamp)> = (0..5).map(|i| (8, Timestamp(500 + i))).collect();
        assert_eq!(d.batches, want);
        // A packed frame merges again (a small pack and the rows after it)
        // with its batches kept.
        let again = records_of(&packed, 40, 0);
        let tail = records_of(&encode(&ev[..3]).unwrap(), 3, 900);
        assert_eq!(again.events(), 40);
        let twice = pack(&[again, tail]).unwrap();
        let d = decode_timed(
            PACKED,
            Some(i64::from(twice.raw_len)),
            Some(i64::from(twice.crc)),
            twice.data,
            43,
        )
        .unwrap();
        assert_eq!(d.batches.len(), 6);
        assert_eq!(d.batches[5], (3, Timestamp(900)));
        // Plain decode refuses a packed frame; a wrong count is damage.
        assert!(decode(PACKED, len, crc, packed.data.clone(), 40).is_err());
        assert!(decode_timed(PACKED, len, crc, packed.data.clone(), 39).is_err());
        assert!(pack(&[]).is_err());
    }

    /// A window builds exactly the events of the full read between its
    /// bounds, and a page filled from it gets their sequence numbers and
    /// receive times.
    #[test]
    fn a_window_is_a_slice_of_the_whole_frame() {
        use crate::types::{EventPage, StoredEvent};
        let ev = events(30);
        let parts: Vec<Records> = ev
            .chunks(7)
            .enumerate()
            .map(|(i, c)| records_of(&encode(c).unwrap(), c.len() as u64, 100 + i as i64))
            .collect();
        let packed = pack(&parts).unwrap();
        let plain = encode(&ev).unwrap();
        for f in [&packed, &plain] {
            let (len, crc) = (Some(i64::from(f.raw_len)), Some(i64::from(f.crc)));
            let page = |d: Decoded, from: u64, limit: usize| {
                let mut out: Vec<StoredEvent> = Vec::new();
                EventPage::push_frame(&mut out, d, 11, Timestamp(5), from, limit);
                out.iter()
                    .map(|e| (e.seq, e.received_at, e.event.json().to_owned()))
                    .collect::<Vec<_>>()
            };
            let whole = decode_timed(f.codec, len, crc, f.data.clone(), 30).unwrap();
            for skip in [0u64, 1, 6, 7, 29, 30, 40] {
                for take in [0usize, 1, 5, 100] {
                    let d =
                        decode_window(f.codec, len, crc, f.data.clone(), 30, skip, take).unwrap();
                    let want: Vec<&str> = ev
                        .iter()
                        .skip(skip as usize)
                        .take(take)
                        .map(Event::json)
                        .collect();
                    assert_eq!(texts(&d.events), want, "skip {skip} take {take}");
                    let from = 11 + skip;
                    assert_eq!(page(d, from, take), page(whole.clone(), from, take));
                }
            }
            assert!(decode_window(f.codec, len, crc, f.data.clone(), 31, 5, 1).is_err());
        }
    }

    #[test]
    fn a_damaged_batch_table_is_refused_even_with_a_good_checksum() {
        let ev = events(4);
        let rec = records_of(&encode(&ev).unwrap(), 4, 7);
        let good = pack(&[rec]).unwrap();
        let body = decompress(&good.data, good.raw_len as usize, true).unwrap();
        let with = |edit: &dyn Fn(&mut Vec<u8>)| {
            let mut b = body.clone();
            edit(&mut b);
            let crc = Some(i64::from(crc32fast::hash(&b)));
            let len = Some(b.len() as i64);
            let data = compress(&b).unwrap();
            decode_timed(PACKED, len, crc, data, 4)
        };
        assert!(with(&|_| {}).is_ok());
        // No batches; a batch of no events; counts that do not add up; a
        // table longer than the body.
        assert!(with(&|b| b[..4].copy_from_slice(&0u32.to_le_bytes())).is_err());
        assert!(with(&|b| b[4..8].copy_from_slice(&0u32.to_le_bytes())).is_err());
        assert!(with(&|b| b[4..8].copy_from_slice(&3u32.to_le_bytes())).is_err());
        assert!(with(&|b| b[..4].copy_from_slice(&u32::MAX.to_le_bytes())).is_err());
        // The packer's reading refuses the same damage.
        let mut b = body.clone();
        b[4..8].copy_from_slice(&3u32.to_le_bytes());
        let crc = i64::from(crc32fast::hash(&b));
        let data = compress(&b).unwrap();
        assert!(records(PACKED, b.len() as i64, crc, &data, 4, Timestamp(0)).is_err());
        // Untyped frames are left to the packer's caller.
        assert!(
            records(ZSTD, 1, 1, &[1], 1, Timestamp(0))
                .unwrap()
                .is_none()
        );
    }

    proptest::proptest! {
        /// Any body with a good checksum (so that the batch table and the
        /// records are what is read) is refused or read, never a panic.
        #[test]
        fn any_checksummed_packed_body_never_panics(
            body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
            count in 0u64..6,
        ) {
            let crc = i64::from(crc32fast::hash(&body));
            let len = body.len() as i64;
            if let Some(data) = compress(&body) {
                let _ = decode_timed(PACKED, Some(len), Some(crc), data.clone(), count);
                let _ = records(PACKED, len, crc, &data, count, Timestamp(0));
            }
            let _ = records(TYPED, len, crc, &body, count, Timestamp(0));
        }
    }
}
