//! Checkpoint blobs: a run's conversation (`{messages, state}` as JSON),
//! self-checking so that a damaged checkpoint is detected and rebuilt rather
//! than trusted.
//!
//! A blob is either **full** (every message of the conversation) or a
//! **delta**: "the conversation of base run B (which covered the thread up to
//! sequence S), keeping its first P messages, then these messages, and this
//! state". Deltas make a checkpoint cost the size of what changed since its
//! base, not the size of the conversation; [`crate::restore`] chooses bases so
//! that restoring a run reads O(log n) blobs along its branch.
//!
//! Messages are stored as their JSON text, joined with `,` and with the end
//! offset of each, so a conversation is composed by copying slices: a restore
//! never parses JSON. The composed text is exactly
//! `serde_json::to_string(&Conversation)`.
//!
//! Layout: `b"AGCK"`, a version byte (2), a codec byte (0 plain, 1 zstd), the
//! CRC-32 of the last sequence number and the uncompressed body (little
//! endian), the body length (u64, little endian), the sequence number of the
//! last event the conversation covers (u64, little endian; a checkpoint that
//! covers fewer events than its run now has is stale), then the (possibly
//! compressed) body:
//!
//! | field | |
//! | --- | --- |
//! | kind | u8: 0 full, 1 delta |
//! | base (delta only) | base last sequence u64, kept messages u64, base run id length u32 + UTF-8 bytes |
//! | messages | count u32, then the end offset (u32) of each in the text |
//! | text | length u32, the messages' JSON joined with `,` |
//! | state | the rest: the state's JSON |
//!
//! Version 1 blobs (the whole conversation's text) are still read as full
//! checkpoints of their own run; they are never a delta's base. Backends store
//! blobs as opaque bytes.

use crate::error::{Result, StoreError};

const MAGIC: &[u8; 4] = b"AGCK";
const VERSION: u8 = 2;
const VERSION_1: u8 = 1;
const HEADER: usize = 4 + 1 + 1 + 4 + 8 + 8;
/// Bodies at least this long are compressed.
const COMPRESS_FROM: usize = 512;
/// zstd level of checkpoint bodies.
const LEVEL: i32 = 3;
/// The largest body a checkpoint may hold (1 GiB).
const MAX_BODY: u64 = 1 << 30;

/// Where a delta checkpoint starts from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseRef {
    /// The base run (an earlier run on the same branch).
    pub run_id: String,
    /// The last sequence number the base's checkpoint covers.
    pub last_seq: u64,
    /// How many of the base conversation's first messages are kept.
    pub keep: u64,
}

/// Encodes a full checkpoint: `messages` are the JSON texts of every message
/// in order, `state` the state's JSON; it covers the thread up to `last_seq`.
pub fn encode_full<S: AsRef<str>>(messages: &[S], state: &str, last_seq: u64) -> Vec<u8> {
    encode(None, messages, state, last_seq)
}

/// Encodes a delta checkpoint: `base`'s first `keep` messages, then
/// `messages` (JSON texts), then `state`.
pub fn encode_delta<S: AsRef<str>>(
    base: &BaseRef,
    messages: &[S],
    state: &str,
    last_seq: u64,
) -> Vec<u8> {
    encode(Some(base), messages, state, last_seq)
}

fn encode<S: AsRef<str>>(
    base: Option<&BaseRef>,
    messages: &[S],
    state: &str,
    last_seq: u64,
) -> Vec<u8> {
    let text_len: usize = messages.iter().map(|m| m.as_ref().len() + 1).sum();
    let mut body = Vec::with_capacity(64 + 4 * messages.len() + text_len + state.len());
    match base {
        None => body.push(0u8),
        Some(b) => {
            body.push(1u8);
            body.extend_from_slice(&b.last_seq.to_le_bytes());
            body.extend_from_slice(&b.keep.to_le_bytes());
            body.extend_from_slice(&(b.run_id.len() as u32).to_le_bytes());
            body.extend_from_slice(b.run_id.as_bytes());
        }
    }
    body.extend_from_slice(&(messages.len() as u32).to_le_bytes());
    let mut end = 0usize;
    for (i, m) in messages.iter().enumerate() {
        end += m.as_ref().len() + usize::from(i > 0);
        body.extend_from_slice(&(end as u32).to_le_bytes());
    }
    body.extend_from_slice(&(end as u32).to_le_bytes());
    for (i, m) in messages.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(m.as_ref().as_bytes());
    }
    body.extend_from_slice(state.as_bytes());
    seal(VERSION, &body, last_seq)
}

fn seal(version: u8, body: &[u8], last_seq: u64) -> Vec<u8> {
    let crc = checksum(body, last_seq);
    let compressed = if body.len() >= COMPRESS_FROM {
        match zstd::bulk::compress(body, LEVEL) {
            Ok(z) if z.len() < body.len() => Some(z),
            _ => None,
        }
    } else {
        None
    };
    let (codec, stored) = match &compressed {
        Some(z) => (1u8, z.as_slice()),
        None => (0u8, body),
    };
    let mut out = Vec::with_capacity(HEADER + stored.len());
    out.extend_from_slice(MAGIC);
    out.push(version);
    out.push(codec);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    out.extend_from_slice(&last_seq.to_le_bytes());
    out.extend_from_slice(stored);
    out
}

/// The JSON text of a *full* checkpoint blob, when intact and covering
/// exactly `last_seq` (the run's current last sequence number); `None` when
/// damaged, stale or a delta (which [`crate::restore_run`] composes).
pub fn usable(blob: &[u8], last_seq: u64) -> Option<String> {
    let decoded = decode(blob).ok()?;
    if decoded.last_seq != last_seq || decoded.base.is_some() {
        return None;
    }
    compose(&[decoded]).ok()
}

/// The longest chain of delta checkpoints a backend reads or the engine
/// follows before giving up: the builder makes chains of at most 65 on a
/// branch of 2^64 runs, so a longer one is damage.
pub const MAX_CHAIN: usize = 80;

/// Checks a fetched chain (`(run id, blob)`, the run's own first, then each
/// base) exactly as a restore does, and composes the conversation's text.
/// `None` when a link is missing, damaged, stale or does not fit: the caller
/// then takes the repairing path ([`crate::restore_run`]).
pub fn compose_links<R: AsRef<[u8]>, B: AsRef<[u8]> + Sync>(
    run_id: &str,
    last_seq: u64,
    links: &[(R, B)],
) -> Option<String> {
    let blobs: Vec<&[u8]> = links.iter().map(|(_, b)| b.as_ref()).collect();
    let mut decoded = decode_all(&blobs).into_iter();
    let mut chain = Vec::with_capacity(links.len());
    let (mut want_run, mut want_seq) = (run_id.as_bytes().to_vec(), last_seq);
    for (run, _) in links {
        if run.as_ref() != want_run.as_slice() {
            return None;
        }
        let d = decoded.next()?.ok()?;
        if d.last_seq != want_seq {
            return None;
        }
        let next = d.base.as_ref().map(|b| (b.run_id.clone(), b.last_seq));
        chain.push(d);
        match next {
            None => return compose(&chain).ok(),
            // Bases cover strictly earlier events: no cycle.
            Some((_, s)) if s >= want_seq => return None,
            Some((r, s)) => (want_run, want_seq) = (r.into_bytes(), s),
        }
    }
    None
}

/// Blobs past which [`decode_all`] decodes on two threads (a thread costs
/// tens of microseconds; decoding a megabyte, about a millisecond).
const PARALLEL_FROM: usize = 256 * 1024;

/// Decodes every blob of a chain, in order. Decompressing and checking are
/// most of a cold restore, and the links are independent: above
/// [`PARALLEL_FROM`] bytes the largest blob (the oldest base, about half of
/// a Fenwick chain) is decoded on a second thread while this one decodes
/// the others.
fn decode_all(blobs: &[&[u8]]) -> Vec<Result<Decoded>> {
    let total: usize = blobs.iter().map(|b| b.len()).sum();
    let largest = (0..blobs.len()).max_by_key(|&i| blobs[i].len());
    let (Some(largest), true) = (largest, blobs.len() >= 2 && total >= PARALLEL_FROM) else {
        return blobs.iter().map(|b| decode(b)).collect();
    };
    std::thread::scope(|scope| {
        let big = blobs[largest];
        // Without a second thread (none could be started), all here.
        let other = std::thread::Builder::new()
            .name("agui-checkpoint-decode".into())
            .spawn_scoped(scope, move || decode(big))
            .ok();
        let mut out: Vec<Option<Result<Decoded>>> = blobs
            .iter()
            .enumerate()
            .map(|(i, b)| (i != largest || other.is_none()).then(|| decode(b)))
            .collect();
        if let Some(h) = other {
            out[largest] = Some(h.join().unwrap_or_else(|_| Err(damaged("decoding failed"))));
        }
        out.into_iter()
            .map(|d| d.unwrap_or_else(|| Err(damaged("not decoded"))))
            .collect()
    })
}

/// The base run a delta blob names, read from the start of its body alone
/// (the rest is neither decompressed nor checked): what a backend keeps
/// beside a blob to fetch a whole chain in one query. A hint, not a check:
/// the restore checks every link it composes. `None` for a full or
/// unreadable blob.
pub fn base_run(blob: &[u8]) -> Option<String> {
    use std::io::Read;
    if blob.len() < HEADER || &blob[..4] != MAGIC || blob[4] != VERSION {
        return None;
    }
    let stored = &blob[HEADER..];
    // kind, base last sequence, kept messages, id length, id.
    let most = (1 + 8 + 8 + 4 + crate::MAX_ID_BYTES) as u64;
    let mut head = Vec::new();
    let prefix: &[u8] = match blob[5] {
        0 => stored,
        1 => {
            let mut d = zstd::stream::read::Decoder::with_buffer(stored).ok()?;
            // The id's length first, then as much of the id as it says.
            let mut fixed = [0u8; 21];
            d.read_exact(&mut fixed).ok()?;
            head.extend_from_slice(&fixed);
            let n = u32::from_le_bytes([fixed[17], fixed[18], fixed[19], fixed[20]]) as u64;
            d.take(n.min(most)).read_to_end(&mut head).ok()?;
            &head
        }
        _ => return None,
    };
    if prefix.first() != Some(&1) {
        return None;
    }
    let n = u32_at(prefix, 17)? as usize;
    let id = prefix.get(21..21 + n)?;
    String::from_utf8(id.to_vec()).ok()
}

/// A decoded, checked checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    /// The last sequence number it covers.
    pub last_seq: u64,
    /// `None` for a full checkpoint.
    pub base: Option<BaseRef>,
    /// The end offset of each message in `text`.
    ends: Vec<u32>,
    /// The body, checked UTF-8 once: its binary fields (read into the
    /// fields above) blanked with spaces, then the messages' text and the
    /// state's; `text_at`, every end and `state_at` are char boundaries.
    body: String,
    text_at: usize,
    state_at: usize,
    /// A version 1 blob: `body` is the whole conversation's text.
    whole: bool,
}

impl Decoded {
    /// How many messages the blob itself holds.
    pub fn message_count(&self) -> usize {
        self.ends.len()
    }

    /// Messages of the conversation it describes (kept ones included).
    pub fn total_messages(&self) -> u64 {
        self.base.as_ref().map_or(0, |b| b.keep) + self.ends.len() as u64
    }

    /// The JSON text of its first `n` own messages, joined with `,`.
    fn first_messages(&self, n: usize) -> &str {
        match n {
            0 => "",
            n => &self.body[self.text_at..self.text_at + self.ends[n - 1] as usize],
        }
    }

    fn state(&self) -> &str {
        &self.body[self.state_at..]
    }
}

/// Decodes a checkpoint blob, checking every byte (the header fields are
/// covered by the checksum too). Any damage is [`crate::ErrorKind::Corrupt`].
pub fn decode(blob: &[u8]) -> Result<Decoded> {
    if blob.len() < HEADER || &blob[..4] != MAGIC {
        return Err(damaged("bad header"));
    }
    let version = blob[4];
    if version != VERSION && version != VERSION_1 {
        return Err(damaged("unknown version"));
    }
    let codec = blob[5];
    let crc = u32::from_le_bytes([blob[6], blob[7], blob[8], blob[9]]);
    let len = u64_at(blob, 10).ok_or_else(|| damaged("bad header"))?;
    let last_seq = u64_at(blob, 18).ok_or_else(|| damaged("bad header"))?;
    if len > MAX_BODY {
        return Err(damaged("length out of range"));
    }
    let stored = &blob[HEADER..];
    let body = match codec {
        0 => stored.to_vec(),
        1 => zstd::bulk::decompress(stored, len as usize).map_err(|_| damaged("decompression"))?,
        _ => return Err(damaged("unknown codec")),
    };
    if body.len() as u64 != len || checksum(&body, last_seq) != crc {
        return Err(damaged("checksum mismatch"));
    }
    if version == VERSION_1 {
        let body = String::from_utf8(body).map_err(|_| damaged("not UTF-8"))?;
        let state_at = body.len();
        return Ok(Decoded {
            last_seq,
            base: None,
            ends: Vec::new(),
            body,
            text_at: 0,
            state_at,
            whole: true,
        });
    }
    parse_body(body, last_seq)
}

fn parse_body(mut body: Vec<u8>, last_seq: u64) -> Result<Decoded> {
    let bad = || damaged("malformed body");
    let mut at = 0usize;
    let kind = *body.first().ok_or_else(bad)?;
    at += 1;
    let base = match kind {
        0 => None,
        1 => {
            let base_seq = u64_at(&body, at).ok_or_else(bad)?;
            let keep = u64_at(&body, at + 8).ok_or_else(bad)?;
            let n = u32_at(&body, at + 16).ok_or_else(bad)? as usize;
            at += 20;
            let id = body.get(at..at + n).ok_or_else(bad)?;
            let run_id = String::from_utf8(id.to_vec()).map_err(|_| bad())?;
            at += n;
            Some(BaseRef {
                run_id,
                last_seq: base_seq,
                keep,
            })
        }
        _ => return Err(bad()),
    };
    let count = u32_at(&body, at).ok_or_else(bad)? as usize;
    at += 4;
    if count > body.len() / 4 {
        return Err(bad());
    }
    let mut ends = Vec::with_capacity(count);
    let mut prev = 0u32;
    for i in 0..count {
        let e = u32_at(&body, at + 4 * i).ok_or_else(bad)?;
        // Each message is non-empty JSON, separated by one comma.
        if e <= prev + u32::from(i > 0) {
            return Err(bad());
        }
        ends.push(e);
        prev = e;
    }
    at += 4 * count;
    let text_len = u32_at(&body, at).ok_or_else(bad)? as usize;
    at += 4;
    if text_len != prev as usize {
        return Err(bad());
    }
    let text_at = at;
    let state_at = at
        .checked_add(text_len)
        .filter(|&s| s < body.len())
        .ok_or_else(bad)?;
    // Messages start at a comma boundary: the separators are where promised
    // (so each end is a char boundary; `state_at` is checked below).
    for &e in &ends[..count.saturating_sub(1)] {
        if body[text_at + e as usize] != b',' {
            return Err(bad());
        }
    }
    // One UTF-8 check for the text and the state: the binary fields before
    // them, already read, become spaces.
    body[..text_at].fill(b' ');
    let body = String::from_utf8(body).map_err(|_| damaged("not UTF-8"))?;
    if !body.is_char_boundary(state_at) {
        return Err(damaged("not UTF-8"));
    }
    Ok(Decoded {
        last_seq,
        base,
        ends,
        body,
        text_at,
        state_at,
        whole: false,
    })
}

/// Composes the conversation's JSON text from a chain of decoded blobs: the
/// run's own first, each next one the base of the one before, the last one
/// full. Fails (`Corrupt`) when the chain does not fit together.
pub fn compose(chain: &[Decoded]) -> Result<String> {
    let bad = || damaged("the checkpoint chain does not fit together");
    let (first, last) = match (chain.first(), chain.last()) {
        (Some(f), Some(l)) => (f, l),
        _ => return Err(bad()),
    };
    if last.base.is_some() {
        return Err(bad());
    }
    if first.whole {
        if chain.len() != 1 {
            return Err(bad());
        }
        return Ok(first.body.clone());
    }
    // How many messages each level contributes from its own list.
    let mut take = Vec::with_capacity(chain.len());
    let mut need = first.total_messages();
    for (i, d) in chain.iter().enumerate() {
        if d.whole || need > d.total_messages() {
            return Err(bad());
        }
        let keep = d.base.as_ref().map_or(0, |b| b.keep);
        take.push((need.saturating_sub(keep)) as usize);
        need = need.min(keep);
        if let (Some(b), Some(next)) = (&d.base, chain.get(i + 1))
            && next.last_seq != b.last_seq
        {
            return Err(bad());
        }
    }
    let state = first.state();
    let size: usize = chain
        .iter()
        .zip(&take)
        .map(|(d, &n)| d.first_messages(n).len() + 1)
        .sum::<usize>()
        + state.len()
        + 24;
    // Every piece was checked UTF-8 once, at decode.
    let mut out = String::with_capacity(size);
    out.push_str("{\"messages\":[");
    let mut any = false;
    for (d, &n) in chain.iter().zip(&take).rev() {
        if n == 0 {
            continue;
        }
        if any {
            out.push(',');
        }
        out.push_str(d.first_messages(n));
        any = true;
    }
    out.push_str("],\"state\":");
    out.push_str(state);
    out.push('}');
    Ok(out)
}

fn damaged(why: &str) -> StoreError {
    StoreError::corrupt(format!("checkpoint damaged: {why}"))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    let s = b.get(at..at + 8)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(s);
    Some(u64::from_le_bytes(a))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at + 4)?;
    Some(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

fn checksum(body: &[u8], last_seq: u64) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&last_seq.to_le_bytes());
    h.update(body);
    h.finalize()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn texts(ms: &[Value]) -> Vec<String> {
        ms.iter().map(|m| m.to_string()).collect()
    }

    /// A delta over run `base` (covering up to `base_seq`), keeping `keep`
    /// of its messages, then `ms`.
    fn delta(base: &str, base_seq: u64, keep: u64, ms: &[Value], state: &str, seq: u64) -> Vec<u8> {
        let base = BaseRef {
            run_id: base.into(),
            last_seq: base_seq,
            keep,
        };
        encode_delta(&base, &texts(ms), state, seq)
    }

    fn conv(ms: &[Value], state: &Value) -> String {
        serde_json::to_string(&json!({"messages": ms, "state": state})).unwrap()
    }

    /// A blob whose checksum holds but whose offsets cut a character: the
    /// slices it names would not be text. Refused as damage, no panic.
    #[test]
    fn offsets_inside_a_character_are_damage() {
        let body_with = |ends: &[u32], text: &str, state: &str| {
            let mut b = vec![0u8];
            b.extend_from_slice(&(ends.len() as u32).to_le_bytes());
            for e in ends {
                b.extend_from_slice(&e.to_le_bytes());
            }
            let len = ends.last().copied().unwrap_or(0);
            b.extend_from_slice(&len.to_le_bytes());
            b.extend_from_slice(text.as_bytes());
            b.extend_from_slice(state.as_bytes());
            b
        };
        // The text is one message, "é" (bytes 22 C3 A9 22).
        let good = seal(VERSION, &body_with(&[4], "\"é\"", "{}"), 1);
        assert_eq!(
            compose(&[decode(&good).unwrap()]).unwrap(),
            r#"{"messages":["é"],"state":{}}"#
        );
        // Its only message ends in the middle of the é: the state starts
        // inside a character.
        let cut = seal(VERSION, &body_with(&[2], "\"é\"", "{}"), 1);
        let err = decode(&cut).unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::Corrupt);
        // Invalid UTF-8 in the text.
        let mut bad = body_with(&[4], "\"é\"", "{}");
        let at = bad.len() - 4;
        bad[at] = 0xff;
        assert!(decode(&seal(VERSION, &bad, 1)).is_err());
    }

    #[test]
    fn round_trips_small_and_large() {
        let d = decode(&encode_full::<&str>(&[], "{}", 7)).unwrap();
        assert_eq!(d.last_seq, 7);
        assert_eq!(compose(&[d]).unwrap(), r#"{"messages":[],"state":{}}"#);
        let ms = vec![json!({"id":"m","role":"user","content":"hello ".repeat(2000)})];
        let blob = encode_full(&texts(&ms), "null", 1);
        assert!(blob.len() < 2000, "large conversations compress");
        assert_eq!(usable(&blob, 1).unwrap(), conv(&ms, &Value::Null));
        assert!(usable(&blob, 2).is_none(), "stale");
    }

    #[test]
    fn a_chain_composes_prefixes_and_tails() {
        let m: Vec<Value> = (0..6).map(|i| json!({"id": i, "c": "x,y]"})).collect();
        // Base: m0 m1 m2. Middle keeps 2 of them then m3 m4. Top keeps 3
        // (m0 m1 m3) then m5.
        let base = encode_full(&texts(&m[..3]), "1", 10);
        let mid = delta("b", 10, 2, &m[3..5], "2", 20);
        let top = delta("m", 20, 3, &m[5..], "{\"s\":3}", 30);
        let chain: Vec<Decoded> = [&top, &mid, &base]
            .iter()
            .map(|b| decode(b).unwrap())
            .collect();
        let want = conv(
            &[m[0].clone(), m[1].clone(), m[3].clone(), m[5].clone()],
            &json!({"s":3}),
        );
        assert_eq!(compose(&chain).unwrap(), want);
        assert_eq!(
            compose(&chain[1..]).unwrap(),
            conv(
                &m[..2].iter().chain(&m[3..5]).cloned().collect::<Vec<_>>(),
                &json!(2)
            )
        );
        assert!(usable(&top, 30).is_none(), "a delta is not usable alone");
        // A chain out of order, or whose base covers another sequence, fails.
        assert!(compose(&[chain[0].clone(), chain[2].clone()]).is_err());
        assert!(compose(&chain[..2]).is_err());
        // A version 1 blob still reads as its own full checkpoint.
        let v1_text = conv(&m[..1], &json!({}));
        let v1 = seal(VERSION_1, v1_text.as_bytes(), 5);
        assert_eq!(usable(&v1, 5).unwrap(), v1_text);
    }

    #[test]
    fn every_single_byte_flip_is_detected() {
        let big = vec![json!({"k": "v".repeat(600)})];
        let base = BaseRef {
            run_id: "r".into(),
            last_seq: 2,
            keep: 1,
        };
        for blob in [
            encode_full(&texts(&big[..0]), "1", 3),
            encode_full(&texts(&big), "{}", 4),
            encode_delta(&base, &["{}", "[]"], "0", 5),
        ] {
            for i in 0..blob.len() {
                let mut bad = blob.clone();
                bad[i] ^= 0x40;
                assert!(decode(&bad).is_err(), "flip at {i} undetected");
            }
            assert!(decode(&blob[..blob.len() - 1]).is_err());
        }
        assert!(decode(b"").is_err());
    }

    /// A chain large enough to be decoded on two threads composes exactly
    /// as one decoded in order, and damage in any link (the one decoded on
    /// the other thread included) still sends it down the repairing path.
    #[test]
    fn a_large_chain_decoded_on_two_threads_composes_the_same() {
        let mut x: u64 = 7;
        let mut noise = |n: usize| -> String {
            (0..n)
                .map(|_| {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    char::from(b'a' + (x >> 59) as u8)
                })
                .collect()
        };
        let m: Vec<Value> = (0..12)
            .map(|i| json!({"id": i, "c": noise(40_000)}))
            .collect();
        let base = encode_full(&texts(&m[..8]), "1", 10);
        let mid = delta("b", 10, 8, &m[8..11], "2", 20);
        let top = delta("m", 20, 11, &m[11..], "3", 30);
        let links = vec![("t", top.clone()), ("m", mid.clone()), ("b", base.clone())];
        let total: usize = links.iter().map(|(_, b)| b.len()).sum();
        assert!(total >= PARALLEL_FROM, "{total} bytes");
        let chain: Vec<Decoded> = [&top, &mid, &base]
            .iter()
            .map(|b| decode(b).unwrap())
            .collect();
        let want = compose(&chain).unwrap();
        assert_eq!(compose_links("t", 30, &links).unwrap(), want);
        assert_eq!(want, conv(&m, &json!(3)));
        for k in 0..3 {
            let mut bad = links.clone();
            let at = bad[k].1.len() / 2;
            bad[k].1[at] ^= 0x10;
            assert!(compose_links("t", 30, &bad).is_none(), "damage in link {k}");
        }
        assert!(compose_links("t", 31, &links).is_none(), "stale");
        assert!(
            compose_links("t", 30, &links[..2]).is_none(),
            "a base missing"
        );
    }

    #[test]
    fn the_base_run_is_read_from_the_start_of_a_body() {
        let base = BaseRef {
            run_id: "the-base-run é".into(),
            last_seq: 10,
            keep: 2,
        };
        let big: Vec<String> = (0..50)
            .map(|i| format!("{{\"m\":{i},\"t\":\"{}\"}}", "word ".repeat(300)))
            .collect();
        for messages in [&big[..0], &big[..]] {
            let delta = encode_delta(&base, messages, "{}", 20);
            assert_eq!(base_run(&delta).as_deref(), Some("the-base-run é"));
            assert_eq!(decode(&delta).unwrap().base.unwrap().run_id, base.run_id);
        }
        assert_eq!(base_run(&encode_full(&big, "{}", 3)), None);
        assert_eq!(base_run(b"AGCK"), None);
        let mut bad = encode_delta(&base, &big, "{}", 20);
        bad[5] = 9;
        assert_eq!(base_run(&bad), None);
    }
}
