//! Chunks: the events of one appended batch in one row.
//!
//! Body: for each event, its JSON length (u32, little endian) then its bytes.
//! The body is zstd-compressed (level 1) when that saves at least an eighth;
//! the row keeps the codec, the body's raw length and its CRC-32 so that any
//! damage is detected on read.

use agui_protocol::Event;
use agui_store::{Result, StoreError};

/// Stored uncompressed.
pub const PLAIN: i64 = 0;
/// Stored zstd-compressed.
pub const ZSTD: i64 = 1;

/// Bodies shorter than this are not worth compressing.
const COMPRESS_FROM: usize = 256;

/// An encoded chunk, ready to insert.
pub struct Encoded {
    /// [`PLAIN`] or [`ZSTD`].
    pub codec: i64,
    /// Length of the uncompressed body.
    pub raw_len: i64,
    /// CRC-32 of the uncompressed body.
    pub crc: i64,
    /// The stored bytes.
    pub data: Vec<u8>,
}

/// Frames and (when it pays) compresses a batch.
pub fn encode(events: &[Event]) -> Result<Encoded> {
    let len: usize = events.iter().map(|e| 4 + e.len_bytes()).sum();
    let mut body = Vec::with_capacity(len);
    for e in events {
        let n = u32::try_from(e.len_bytes())
            .map_err(|_| StoreError::invalid("an event is larger than 4 GiB"))?;
        body.extend_from_slice(&n.to_le_bytes());
        body.extend_from_slice(e.json().as_bytes());
    }
    let crc = i64::from(crc32fast::hash(&body));
    let raw_len = body.len() as i64;
    let compressed = (body.len() >= COMPRESS_FROM)
        .then(|| zstd::bulk::compress(&body, 1).ok())
        .flatten()
        .filter(|z| z.len() < body.len() - body.len() / 8);
    if let Some(z) = compressed {
        return Ok(Encoded {
            codec: ZSTD,
            raw_len,
            crc,
            data: z,
        });
    }
    Ok(Encoded {
        codec: PLAIN,
        raw_len,
        crc,
        data: body,
    })
}

/// Decodes a chunk into its events, checking length, checksum and count.
pub fn decode(codec: i64, raw_len: i64, crc: i64, data: &[u8], count: u64) -> Result<Vec<Event>> {
    let damaged = |why: &str| StoreError::corrupt(format!("a stored chunk is damaged: {why}"));
    let raw_len = usize::try_from(raw_len).map_err(|_| damaged("length"))?;
    let body: std::borrow::Cow<'_, [u8]> = match codec {
        PLAIN => data.into(),
        ZSTD => zstd::bulk::decompress(data, raw_len)
            .map_err(|_| damaged("decompression"))?
            .into(),
        _ => return Err(damaged("unknown codec")),
    };
    if body.len() != raw_len || i64::from(crc32fast::hash(&body)) != crc {
        return Err(damaged("checksum"));
    }
    let mut out = Vec::with_capacity(usize::try_from(count).unwrap_or(0).min(1 << 20));
    let mut rest: &[u8] = &body;
    while !rest.is_empty() {
        if rest.len() < 4 {
            return Err(damaged("framing"));
        }
        let n = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        let Some(text) = rest.get(4..4 + n) else {
            return Err(damaged("framing"));
        };
        let text = std::str::from_utf8(text).map_err(|_| damaged("not UTF-8"))?;
        out.push(Event::from_json(text).map_err(|_| damaged("not an event"))?);
        rest = &rest[4 + n..];
    }
    if out.len() as u64 != count {
        return Err(damaged("event count"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(n: usize) -> Vec<Event> {
        (0..n)
            .map(|i| {
                Event::from_json(&format!(
                    r#"{{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"word {i} and more words"}}"#
                ))
                .unwrap()
            })
            .collect()
    }

    #[test]
    fn round_trip_plain_and_compressed() {
        for n in [1, 2, 500] {
            let ev = events(n);
            let c = encode(&ev).unwrap();
            assert_eq!(c.codec, if n == 500 { ZSTD } else { PLAIN });
            let back = decode(c.codec, c.raw_len, c.crc, &c.data, n as u64).unwrap();
            let a: Vec<&str> = ev.iter().map(Event::json).collect();
            let b: Vec<&str> = back.iter().map(Event::json).collect();
            assert_eq!(a, b);
        }
    }

    #[test]
    fn damage_is_detected() {
        for n in [1, 500] {
            let c = encode(&events(n)).unwrap();
            for i in (0..c.data.len()).step_by(7) {
                let mut d = c.data.clone();
                d[i] ^= 1;
                assert!(decode(c.codec, c.raw_len, c.crc, &d, n as u64).is_err());
            }
            assert!(decode(c.codec, c.raw_len, c.crc, &c.data, n as u64 + 1).is_err());
            assert!(decode(9, c.raw_len, c.crc, &c.data, n as u64).is_err());
            assert!(decode(c.codec, -1, c.crc, &c.data, n as u64).is_err());
        }
    }
}
