//! Chunks: the events of one appended batch (up to [`CHUNK_EVENTS`]) in one
//! row of the `chunks` table.
//!
//! A framed body is, for each event, its JSON length (u32, little endian)
//! then its exact bytes. It is stored zstd-compressed (level 1) when that
//! saves at least an eighth; the row keeps the codec, the body's raw length
//! and its CRC-32, so damage is detected on read. Rows migrated from schema
//! version 1 (one event per row, no checksum) keep their old body under the
//! legacy codecs.

use std::cell::RefCell;

use agui_protocol::Event;
use agui_store::{Result, StoreError};

/// Framed body, stored as is.
pub(crate) const PLAIN: i16 = 0;
/// Framed body, zstd-compressed.
pub(crate) const ZSTD: i16 = 1;
/// Schema version 1 row: one event's JSON, as is.
pub(crate) const LEGACY_PLAIN: i16 = 10;
/// Schema version 1 row: one event's JSON, zstd-compressed.
pub(crate) const LEGACY_ZSTD: i16 = 11;

/// Events per chunk row at most (a larger batch spans several rows).
pub(crate) const CHUNK_EVENTS: usize = 1024;

/// Bodies shorter than this are not worth compressing.
const COMPRESS_FROM: usize = 256;

/// No chunk body decompresses to more than this (a damaged length must not
/// make the store allocate without bound): PostgreSQL's own field limit.
const MAX_BODY: usize = 1 << 30;

/// An encoded chunk, ready to insert.
pub(crate) struct Encoded {
    /// [`PLAIN`] or [`ZSTD`].
    pub codec: i16,
    /// Length of the framed body.
    pub raw_len: i64,
    /// CRC-32 of the framed body.
    pub crc: i64,
    /// The stored bytes.
    pub data: Vec<u8>,
}

/// Frames and (when it pays) compresses a run of events.
pub(crate) fn encode(events: &[Event]) -> Result<Encoded> {
    let len: usize = events.iter().map(|e| 4 + e.len_bytes()).sum();
    if len > MAX_BODY {
        return Err(StoreError::invalid(
            "a batch is larger than the 1 GiB a row can hold",
        ));
    }
    let mut body = Vec::with_capacity(len);
    for e in events {
        // Fits: the whole body is at most 1 GiB.
        body.extend_from_slice(&(e.len_bytes() as u32).to_le_bytes());
        body.extend_from_slice(e.json().as_bytes());
    }
    let crc = i64::from(crc32fast::hash(&body));
    let raw_len = body.len() as i64;
    let compressed = (body.len() >= COMPRESS_FROM)
        .then(|| compress(&body))
        .flatten()
        .filter(|z| z.len() < body.len() - body.len() / 8);
    Ok(match compressed {
        Some(z) => Encoded {
            codec: ZSTD,
            raw_len,
            crc,
            data: z,
        },
        None => Encoded {
            codec: PLAIN,
            raw_len,
            crc,
            data: body,
        },
    })
}

fn damaged(why: &str) -> StoreError {
    StoreError::corrupt(format!("a stored chunk is damaged: {why}"))
}

thread_local! {
    /// Contexts reused across calls (creating one costs more than
    /// compressing a small batch).
    static COMPRESSOR: RefCell<Option<zstd::bulk::Compressor<'static>>> =
        const { RefCell::new(None) };
    static DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { RefCell::new(None) };
}

fn compress(body: &[u8]) -> Option<Vec<u8>> {
    COMPRESSOR.with(|c| {
        let mut c = c.borrow_mut();
        if c.is_none() {
            *c = zstd::bulk::Compressor::new(1).ok();
        }
        c.as_mut()?.compress(body).ok()
    })
}

fn decompress(data: &[u8], len: usize) -> Result<Vec<u8>> {
    DECOMPRESSOR
        .with(|d| {
            let mut d = d.borrow_mut();
            if d.is_none() {
                *d = zstd::bulk::Decompressor::new().ok();
            }
            d.as_mut()?.decompress(data, len).ok()
        })
        .ok_or_else(|| damaged("decompression"))
}

/// Decodes a chunk row into its `count` events, checking codec, length,
/// checksum, framing and count.
pub(crate) fn decode(
    codec: i16,
    raw_len: Option<i64>,
    crc: Option<i64>,
    data: Vec<u8>,
    count: u64,
) -> Result<Vec<Event>> {
    let framed = |raw_len: Option<i64>| {
        raw_len
            .and_then(|n| usize::try_from(n).ok())
            .filter(|&n| n <= MAX_BODY)
            .ok_or_else(|| damaged("length"))
    };
    let body = match codec {
        PLAIN => data,
        ZSTD => decompress(&data, framed(raw_len)?)?,
        LEGACY_PLAIN | LEGACY_ZSTD => {
            if count != 1 {
                return Err(damaged("event count"));
            }
            return Ok(vec![legacy(codec, data)?]);
        }
        _ => return Err(damaged("unknown codec")),
    };
    if body.len() != framed(raw_len)? || crc != Some(i64::from(crc32fast::hash(&body))) {
        return Err(damaged("checksum"));
    }
    let mut out = Vec::with_capacity(usize::try_from(count).unwrap_or(0).min(CHUNK_EVENTS));
    let mut rest: &[u8] = &body;
    while !rest.is_empty() {
        let Some((head, tail)) = rest.split_first_chunk::<4>() else {
            return Err(damaged("framing"));
        };
        let n = u32::from_le_bytes(*head) as usize;
        let Some(text) = tail.get(..n) else {
            return Err(damaged("framing"));
        };
        let text = std::str::from_utf8(text).map_err(|_| damaged("not UTF-8"))?;
        out.push(Event::from_json(text).map_err(|_| damaged("not an event"))?);
        rest = &tail[n..];
    }
    if out.len() as u64 != count {
        return Err(damaged("event count"));
    }
    Ok(out)
}

/// One event as schema version 1 stored it.
fn legacy(codec: i16, body: Vec<u8>) -> Result<Event> {
    let bytes = if codec == LEGACY_ZSTD {
        let size = zstd::zstd_safe::get_frame_content_size(&body)
            .ok()
            .flatten()
            .and_then(|n| usize::try_from(n).ok())
            .filter(|&n| n <= MAX_BODY)
            .ok_or_else(|| damaged("length"))?;
        decompress(&body, size)?
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
                Event::from_json(&format!(
                    r#"{{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"word {i} and more"}}"#
                ))
                .unwrap()
            })
            .collect()
    }

    fn texts(ev: &[Event]) -> Vec<&str> {
        ev.iter().map(Event::json).collect()
    }

    #[test]
    fn round_trips_plain_and_compressed() {
        for n in [1, 2, 300] {
            let ev = events(n);
            let c = encode(&ev).unwrap();
            assert_eq!(c.codec, if n == 300 { ZSTD } else { PLAIN });
            let back = decode(c.codec, Some(c.raw_len), Some(c.crc), c.data, n as u64).unwrap();
            assert_eq!(texts(&ev), texts(&back));
        }
    }

    #[test]
    fn damage_is_detected() {
        for n in [1, 300] {
            let c = encode(&events(n)).unwrap();
            let (codec, len, crc) = (c.codec, Some(c.raw_len), Some(c.crc));
            for i in (0..c.data.len()).step_by(5) {
                let mut d = c.data.clone();
                d[i] ^= 0x21;
                assert!(decode(codec, len, crc, d, n as u64).is_err(), "flip at {i}");
            }
            let n = n as u64;
            assert!(decode(codec, len, crc, c.data.clone(), n + 1).is_err());
            assert!(decode(9, len, crc, c.data.clone(), n).is_err());
            assert!(decode(codec, Some(-1), crc, c.data.clone(), n).is_err());
            assert!(decode(codec, None, crc, c.data.clone(), n).is_err());
            assert!(decode(codec, len, None, c.data.clone(), n).is_err());
            assert!(decode(codec, len, crc, c.data[..c.data.len() - 1].to_vec(), n).is_err());
        }
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
}
