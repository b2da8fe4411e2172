//! Checkpoint blobs: a run's conversation (`{messages, state}` as JSON),
//! self-checking so that a damaged checkpoint is detected and rebuilt rather
//! than trusted.
//!
//! Layout: `b"AGCK"`, a version byte (1), a codec byte (0 plain, 1 zstd),
//! the CRC-32 of the JSON text (little endian), the JSON length (u64, little
//! endian), the sequence number of the last event the conversation covers
//! (u64, little endian; a checkpoint that covers fewer events than its run
//! now has is stale), then the (possibly compressed) JSON text. Backends store
//! the blob as opaque bytes.

use crate::error::{Result, StoreError};

const MAGIC: &[u8; 4] = b"AGCK";
const VERSION: u8 = 1;
const HEADER: usize = 4 + 1 + 1 + 4 + 8 + 8;
/// Conversations at least this long are compressed.
const COMPRESS_FROM: usize = 512;
/// The largest conversation a checkpoint may hold (1 GiB).
const MAX_JSON: u64 = 1 << 30;

/// Encodes a conversation's JSON text, which covers a thread's events up to
/// `last_seq`, as a checkpoint blob.
pub fn encode(json: &str, last_seq: u64) -> Vec<u8> {
    let crc = checksum(json.as_bytes(), last_seq);
    let (codec, body) = if json.len() >= COMPRESS_FROM {
        match zstd::bulk::compress(json.as_bytes(), 1) {
            Ok(z) if z.len() < json.len() => (1u8, z),
            _ => (0u8, json.as_bytes().to_vec()),
        }
    } else {
        (0u8, json.as_bytes().to_vec())
    };
    let mut out = Vec::with_capacity(HEADER + body.len());
    out.extend_from_slice(MAGIC);
    out.push(VERSION);
    out.push(codec);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&(json.len() as u64).to_le_bytes());
    out.extend_from_slice(&last_seq.to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// The JSON text of a checkpoint blob, when intact and covering exactly
/// `last_seq` (the run's current last sequence number); `None` when damaged
/// or stale.
pub fn usable(blob: &[u8], last_seq: u64) -> Option<String> {
    let decoded = decode(blob).ok()?;
    (decoded.last_seq == last_seq).then_some(decoded.json)
}

/// A decoded checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    /// The conversation's JSON text.
    pub json: String,
    /// The last sequence number it covers.
    pub last_seq: u64,
}

/// Decodes a checkpoint blob, checking every byte (the header fields are
/// covered by the checksum too). Any damage is [`crate::ErrorKind::Corrupt`].
pub fn decode(blob: &[u8]) -> Result<Decoded> {
    let damaged = |why: &str| StoreError::corrupt(format!("checkpoint damaged: {why}"));
    if blob.len() < HEADER || &blob[..4] != MAGIC {
        return Err(damaged("bad header"));
    }
    if blob[4] != VERSION {
        return Err(damaged("unknown version"));
    }
    let codec = blob[5];
    let crc = u32::from_le_bytes([blob[6], blob[7], blob[8], blob[9]]);
    let mut len_bytes = [0u8; 8];
    len_bytes.copy_from_slice(&blob[10..18]);
    let len = u64::from_le_bytes(len_bytes);
    let mut seq_bytes = [0u8; 8];
    seq_bytes.copy_from_slice(&blob[18..26]);
    let last_seq = u64::from_le_bytes(seq_bytes);
    if len > MAX_JSON {
        return Err(damaged("length out of range"));
    }
    let body = &blob[HEADER..];
    let json = match codec {
        0 => body.to_vec(),
        1 => zstd::bulk::decompress(body, len as usize).map_err(|_| damaged("decompression"))?,
        _ => return Err(damaged("unknown codec")),
    };
    if json.len() as u64 != len || checksum(&json, last_seq) != crc {
        return Err(damaged("checksum mismatch"));
    }
    let json = String::from_utf8(json).map_err(|_| damaged("not UTF-8"))?;
    Ok(Decoded { json, last_seq })
}

fn checksum(json: &[u8], last_seq: u64) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&last_seq.to_le_bytes());
    h.update(json);
    h.finalize()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_small_and_large() {
        let small = r#"{"messages":[],"state":{}}"#;
        let d = decode(&encode(small, 7)).unwrap();
        assert_eq!((d.json.as_str(), d.last_seq), (small, 7));
        let big = format!(
            r#"{{"messages":[{{"id":"m","role":"user","content":"{}"}}],"state":null}}"#,
            "hello ".repeat(2000)
        );
        let blob = encode(&big, 1);
        assert!(blob.len() < big.len() / 4, "large conversations compress");
        assert_eq!(decode(&blob).unwrap().json, big);
    }

    #[test]
    fn every_single_byte_flip_is_detected() {
        let text = format!(r#"{{"messages":[],"state":{{"k":"{}"}}}}"#, "v".repeat(600));
        for blob in [encode(r#"{"messages":[],"state":1}"#, 3), encode(&text, 4)] {
            for i in 0..blob.len() {
                let mut bad = blob.clone();
                bad[i] ^= 0x40;
                assert!(decode(&bad).is_err(), "flip at {i} undetected");
            }
            assert!(decode(&blob[..blob.len() - 1]).is_err());
        }
        assert!(decode(b"").is_err());
    }
}
