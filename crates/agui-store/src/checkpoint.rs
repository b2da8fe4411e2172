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
//! Layout (version 3, written today): `b"AGCK"`, a version byte (3), a
//! codec byte (bit 0: the meta part is zstd, bit 1: the text part is), the
//! CRC-32 of every other byte of the blob (header fields and stored parts,
//! little endian), the meta part's length (u32) and stored length (u32), the
//! text part's length (u64), the sequence number of the last event the
//! conversation covers (u64; a checkpoint that covers fewer events than its
//! run now has is stale), then the two parts as stored:
//!
//! | part | |
//! | --- | --- |
//! | meta | kind u8 (0 full, 1 delta); for a delta the base's last sequence u64, kept messages u64, base run id length u32 + UTF-8 bytes; the message count u32, then the end offset (u32) of each in the text |
//! | text | the messages' JSON joined with `,`, then `],"state":`, the state's JSON and `}` |
//!
//! The checksum covers the stored bytes, so it is checked before anything is
//! decompressed, over the compressed size; and the text part is laid out as
//! the tail of a composed conversation, so a restore decompresses each link
//! straight into the conversation it composes: no second copy.
//!
//! Version 2 blobs (one body: kind, base, count, ends, text length, text,
//! state; the CRC over the uncompressed body) and version 1 blobs (the whole
//! conversation's text, read as full checkpoints of their own run, never a
//! delta's base) are still read. Backends store blobs as opaque bytes.

use crate::error::{Result, StoreError};

const MAGIC: &[u8; 4] = b"AGCK";
/// The version written.
const VERSION: u8 = 3;
const VERSION_2: u8 = 2;
const VERSION_1: u8 = 1;
/// The header of versions 1 and 2.
const HEADER_2: usize = 4 + 1 + 1 + 4 + 8 + 8;
/// The header of version 3.
const HEADER: usize = 4 + 1 + 1 + 4 + 4 + 4 + 8 + 8;
/// What follows a version 3 text part's messages, before the state.
const SEPARATOR: &[u8] = b"],\"state\":";
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
    let mut meta = Vec::with_capacity(32 + 4 * messages.len());
    match base {
        None => meta.push(0u8),
        Some(b) => {
            meta.push(1u8);
            meta.extend_from_slice(&b.last_seq.to_le_bytes());
            meta.extend_from_slice(&b.keep.to_le_bytes());
            meta.extend_from_slice(&(b.run_id.len() as u32).to_le_bytes());
            meta.extend_from_slice(b.run_id.as_bytes());
        }
    }
    meta.extend_from_slice(&(messages.len() as u32).to_le_bytes());
    let mut end = 0usize;
    for (i, m) in messages.iter().enumerate() {
        end += m.as_ref().len() + usize::from(i > 0);
        meta.extend_from_slice(&(end as u32).to_le_bytes());
    }
    let mut text = Vec::with_capacity(end + SEPARATOR.len() + state.len() + 1);
    for (i, m) in messages.iter().enumerate() {
        if i > 0 {
            text.push(b',');
        }
        text.extend_from_slice(m.as_ref().as_bytes());
    }
    text.extend_from_slice(SEPARATOR);
    text.extend_from_slice(state.as_bytes());
    text.push(b'}');
    let (meta_z, meta_stored) = pack(&meta);
    let (text_z, text_stored) = pack(&text);
    let mut out = Vec::with_capacity(HEADER + meta_stored.len() + text_stored.len());
    out.extend_from_slice(MAGIC);
    out.push(VERSION);
    out.push(u8::from(meta_z) | u8::from(text_z) << 1);
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&(meta.len() as u32).to_le_bytes());
    out.extend_from_slice(&(meta_stored.len() as u32).to_le_bytes());
    out.extend_from_slice(&(text.len() as u64).to_le_bytes());
    out.extend_from_slice(&last_seq.to_le_bytes());
    out.extend_from_slice(&meta_stored);
    out.extend_from_slice(&text_stored);
    let crc = blob_checksum(&out);
    out[6..10].copy_from_slice(&crc.to_le_bytes());
    out
}

/// A part as stored: zstd when that makes it smaller, else as it is.
fn pack(part: &[u8]) -> (bool, std::borrow::Cow<'_, [u8]>) {
    if part.len() >= COMPRESS_FROM
        && let Ok(z) = zstd::bulk::compress(part, LEVEL)
        && z.len() < part.len()
    {
        return (true, z.into());
    }
    (false, part.into())
}

/// The CRC-32 of a version 3 blob: every byte but the checksum's own.
fn blob_checksum(blob: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&blob[..6]);
    h.update(&blob[10..]);
    h.finalize()
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
pub fn compose_links<R: AsRef<[u8]>, B: AsRef<[u8]>>(
    run_id: &str,
    last_seq: u64,
    links: &[(R, B)],
) -> Option<String> {
    let mut chain = Vec::with_capacity(links.len());
    let (mut want_run, mut want_seq) = (run_id.to_owned(), last_seq);
    for (run, blob) in links {
        if run.as_ref() != want_run.as_bytes() {
            return None;
        }
        let d = decode(blob.as_ref()).ok()?;
        if d.last_seq != want_seq {
            return None;
        }
        let next = d.base.as_ref().map(|b| (b.run_id.clone(), b.last_seq));
        chain.push(d);
        match next {
            None => return compose(&chain).ok(),
            // Bases cover strictly earlier events: no cycle.
            Some((_, s)) if s >= want_seq => return None,
            Some((r, s)) => (want_run, want_seq) = (r, s),
        }
    }
    None
}

/// Text parts past which [`compose`] decompresses the oldest link (about
/// half of a Fenwick chain) on a second thread while this one decompresses
/// the others (a thread costs tens of microseconds; a megabyte, about a
/// millisecond).
const PARALLEL_FROM: usize = 1 << 20;

/// The base run a delta blob names, read from the start of its meta part
/// alone (the text is neither decompressed nor checked): what a backend
/// keeps beside a blob to fetch a whole chain in one query. A hint, not a
/// check: the restore checks every link it composes. `None` for a full or
/// unreadable blob.
pub fn base_run(blob: &[u8]) -> Option<String> {
    use std::io::Read;
    if blob.len() < HEADER_2 || &blob[..4] != MAGIC {
        return None;
    }
    // kind, base last sequence, kept messages, id length, id.
    let most = (1 + 8 + 8 + 4 + crate::MAX_ID_BYTES) as u64;
    let (zstd, stored) = match blob[4] {
        VERSION if blob.len() >= HEADER => {
            let stored_len = u32_at(blob, 14)? as usize;
            (blob[5] & 1 != 0, blob.get(HEADER..HEADER + stored_len)?)
        }
        VERSION_2 => match blob[5] {
            0 => (false, &blob[HEADER_2..]),
            1 => (true, &blob[HEADER_2..]),
            _ => return None,
        },
        _ => return None,
    };
    let mut head = Vec::new();
    let prefix: &[u8] = if zstd {
        let mut d = zstd::stream::read::Decoder::with_buffer(stored).ok()?;
        // The id's length first, then as much of the id as it says.
        let mut fixed = [0u8; 21];
        d.read_exact(&mut fixed).ok()?;
        head.extend_from_slice(&fixed);
        let n = u32::from_le_bytes([fixed[17], fixed[18], fixed[19], fixed[20]]) as u64;
        d.take(n.min(most)).read_to_end(&mut head).ok()?;
        &head
    } else {
        stored
    };
    if prefix.first() != Some(&1) {
        return None;
    }
    let n = u32_at(prefix, 17)? as usize;
    let id = prefix.get(21..21 + n)?;
    String::from_utf8(id.to_vec()).ok()
}

/// A decoded, checked checkpoint (the text of a version 3 blob is checked
/// by its checksum here, and unpacked and checked as text when composed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded<'a> {
    /// The last sequence number it covers.
    pub last_seq: u64,
    /// `None` for a full checkpoint.
    pub base: Option<BaseRef>,
    /// The end offset of each message in the text.
    ends: Vec<u32>,
    text: Text<'a>,
}

/// A decoded blob's messages and state.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Text<'a> {
    /// Version 1: the whole conversation's text.
    Whole(String),
    /// Version 2: the body, checked UTF-8 once (its binary fields blanked
    /// with spaces), then the messages' text from `text_at` and the state's
    /// from `state_at`; every end is a char boundary.
    Body {
        body: String,
        text_at: usize,
        state_at: usize,
    },
    /// Version 3: the text part as stored (checksummed), `len` bytes when
    /// unpacked.
    Packed {
        stored: std::borrow::Cow<'a, [u8]>,
        len: usize,
        zstd: bool,
    },
}

impl Decoded<'_> {
    /// How many messages the blob itself holds.
    pub fn message_count(&self) -> usize {
        self.ends.len()
    }

    /// Messages of the conversation it describes (kept ones included).
    pub fn total_messages(&self) -> u64 {
        self.base.as_ref().map_or(0, |b| b.keep) + self.ends.len() as u64
    }

    /// The same checkpoint, owning what it borrowed from its blob.
    pub fn into_owned(self) -> Decoded<'static> {
        let text = match self.text {
            Text::Whole(w) => Text::Whole(w),
            Text::Body {
                body,
                text_at,
                state_at,
            } => Text::Body {
                body,
                text_at,
                state_at,
            },
            Text::Packed { stored, len, zstd } => Text::Packed {
                stored: std::borrow::Cow::Owned(stored.into_owned()),
                len,
                zstd,
            },
        };
        Decoded {
            last_seq: self.last_seq,
            base: self.base,
            ends: self.ends,
            text,
        }
    }

    /// The end of its first `n` own messages in its text.
    fn end_of(&self, n: usize) -> usize {
        match n {
            0 => 0,
            n => self.ends[n - 1] as usize,
        }
    }

    /// Appends its first `n` own messages (with `,` before them when
    /// `comma`), or, when `last`, its text through the end of the
    /// conversation (`n` is then every message of its own), to `out`.
    fn append(
        &self,
        out: &mut Vec<u8>,
        n: usize,
        comma: bool,
        last: bool,
        unpacker: &mut Option<zstd::bulk::Decompressor<'static>>,
    ) -> Result<()> {
        if n == 0 && !last {
            return Ok(());
        }
        let end = self.end_of(n);
        if comma && n > 0 {
            out.push(b',');
        }
        match &self.text {
            Text::Whole(_) => return Err(chain_unfit()),
            Text::Body {
                body,
                text_at,
                state_at,
            } => {
                out.extend_from_slice(&body.as_bytes()[*text_at..*text_at + end]);
                if last {
                    out.extend_from_slice(SEPARATOR);
                    out.extend_from_slice(&body.as_bytes()[*state_at..]);
                    out.push(b'}');
                }
            }
            Text::Packed { stored, len, zstd } => {
                let at = out.len();
                unpack(out, stored, *len, *zstd, unpacker)?;
                let text = &out[at..];
                // The messages it gives end at a comma, or where the
                // separator starts (the state follows it and the
                // conversation's `}` ends it): so the cut is at a char
                // boundary, and the piece kept is checked UTF-8 here, on
                // the thread that unpacked it, while it is fresh in cache.
                // (The ends of messages it does not cut at are never used.)
                let ok = text.get(end) == Some(if n < self.ends.len() { &b',' } else { &b']' })
                    && text
                        .get(self.end_of(self.ends.len())..)
                        .is_some_and(|t| t.starts_with(SEPARATOR) && t.len() > SEPARATOR.len() + 1)
                    && text.last() == Some(&b'}');
                let keep = if last { text.len() } else { end };
                if !ok {
                    return Err(damaged("malformed text"));
                }
                if simdutf8::basic::from_utf8(&text[..keep]).is_err() {
                    return Err(damaged("not UTF-8"));
                }
                out.truncate(at + keep);
            }
        }
        Ok(())
    }
}

/// Appends a version 3 text part, unpacked, to `out` (exactly `len` bytes,
/// or damage).
fn unpack(
    out: &mut Vec<u8>,
    stored: &[u8],
    len: usize,
    zstd: bool,
    unpacker: &mut Option<zstd::bulk::Decompressor<'static>>,
) -> Result<()> {
    if !zstd {
        if stored.len() != len {
            return Err(damaged("length mismatch"));
        }
        out.extend_from_slice(stored);
        return Ok(());
    }
    out.reserve(len);
    let at = out.len();
    let d = match unpacker {
        Some(d) => d,
        None => {
            unpacker.insert(zstd::bulk::Decompressor::new().map_err(|_| damaged("decompression"))?)
        }
    };
    let mut cursor = std::io::Cursor::new(&mut *out);
    cursor.set_position(at as u64);
    let wrote = d
        .decompress_to_buffer(stored, &mut cursor)
        .map_err(|_| damaged("decompression"))?;
    if wrote != len || out.len() != at + len {
        return Err(damaged("length mismatch"));
    }
    Ok(())
}

/// Decodes a checkpoint blob, checking every byte (the header fields are
/// covered by the checksum too). Any damage is [`crate::ErrorKind::Corrupt`].
/// A version 3 blob's text stays as stored (borrowed) until composed.
pub fn decode(blob: &[u8]) -> Result<Decoded<'_>> {
    if blob.len() < HEADER_2 || &blob[..4] != MAGIC {
        return Err(damaged("bad header"));
    }
    match blob[4] {
        VERSION => decode_3(blob),
        VERSION_2 | VERSION_1 => decode_2(blob),
        _ => Err(damaged("unknown version")),
    }
}

fn decode_3(blob: &[u8]) -> Result<Decoded<'_>> {
    let bad = || damaged("bad header");
    if blob.len() < HEADER {
        return Err(bad());
    }
    let crc = u32_at(blob, 6).ok_or_else(bad)?;
    if blob_checksum(blob) != crc {
        return Err(damaged("checksum mismatch"));
    }
    let codec = blob[5];
    let meta_len = u32_at(blob, 10).ok_or_else(bad)? as usize;
    let meta_stored = u32_at(blob, 14).ok_or_else(bad)? as usize;
    let text_len = u64_at(blob, 18).ok_or_else(bad)?;
    let last_seq = u64_at(blob, 26).ok_or_else(bad)?;
    if codec > 3 || text_len > MAX_BODY || meta_len as u64 > MAX_BODY {
        return Err(bad());
    }
    let stored = &blob[HEADER..];
    let (meta, text) = (
        stored.get(..meta_stored).ok_or_else(bad)?,
        &stored[meta_stored..],
    );
    let meta = if codec & 1 != 0 {
        zstd::bulk::decompress(meta, meta_len).map_err(|_| damaged("decompression"))?
    } else {
        meta.to_vec()
    };
    if meta.len() != meta_len {
        return Err(damaged("length mismatch"));
    }
    let mut at = 0;
    let base = read_base(&meta, &mut at)?;
    let ends = read_ends(&meta, &mut at, text_len as usize)?;
    if at != meta.len() {
        return Err(damaged("malformed meta"));
    }
    Ok(Decoded {
        last_seq,
        base,
        ends,
        text: Text::Packed {
            stored: text.into(),
            len: text_len as usize,
            zstd: codec & 2 != 0,
        },
    })
}

/// The kind and, for a delta, the base, from the start of `meta`.
fn read_base(meta: &[u8], at: &mut usize) -> Result<Option<BaseRef>> {
    let bad = || damaged("malformed body");
    let kind = *meta.first().ok_or_else(bad)?;
    *at += 1;
    match kind {
        0 => Ok(None),
        1 => {
            let base_seq = u64_at(meta, *at).ok_or_else(bad)?;
            let keep = u64_at(meta, *at + 8).ok_or_else(bad)?;
            let n = u32_at(meta, *at + 16).ok_or_else(bad)? as usize;
            *at += 20;
            let id = meta.get(*at..*at + n).ok_or_else(bad)?;
            let run_id = String::from_utf8(id.to_vec()).map_err(|_| bad())?;
            *at += n;
            Ok(Some(BaseRef {
                run_id,
                last_seq: base_seq,
                keep,
            }))
        }
        _ => Err(bad()),
    }
}

/// The message count and end offsets at `at`: strictly increasing, each
/// message non-empty, one comma between two, all within `within` bytes.
fn read_ends(meta: &[u8], at: &mut usize, within: usize) -> Result<Vec<u32>> {
    let bad = || damaged("malformed body");
    let count = u32_at(meta, *at).ok_or_else(bad)? as usize;
    *at += 4;
    if count > meta.len() / 4 {
        return Err(bad());
    }
    let mut ends = Vec::with_capacity(count);
    let mut prev = 0u32;
    for i in 0..count {
        let e = u32_at(meta, *at + 4 * i).ok_or_else(bad)?;
        if e <= prev + u32::from(i > 0) || e as usize > within {
            return Err(bad());
        }
        ends.push(e);
        prev = e;
    }
    *at += 4 * count;
    Ok(ends)
}

/// Versions 1 and 2: one body, checksummed uncompressed.
fn decode_2(blob: &[u8]) -> Result<Decoded<'static>> {
    let version = blob[4];
    let codec = blob[5];
    let crc = u32::from_le_bytes([blob[6], blob[7], blob[8], blob[9]]);
    let len = u64_at(blob, 10).ok_or_else(|| damaged("bad header"))?;
    let last_seq = u64_at(blob, 18).ok_or_else(|| damaged("bad header"))?;
    if len > MAX_BODY {
        return Err(damaged("length out of range"));
    }
    let stored = &blob[HEADER_2..];
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
        return Ok(Decoded {
            last_seq,
            base: None,
            ends: Vec::new(),
            text: Text::Whole(body),
        });
    }
    parse_body(body, last_seq)
}

fn parse_body(mut body: Vec<u8>, last_seq: u64) -> Result<Decoded<'static>> {
    let bad = || damaged("malformed body");
    let mut at = 0usize;
    let base = read_base(&body, &mut at)?;
    let ends = read_ends(&body, &mut at, body.len())?;
    let prev = ends.last().copied().unwrap_or(0);
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
    for &e in &ends[..ends.len().saturating_sub(1)] {
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
        text: Text::Body {
            body,
            text_at,
            state_at,
        },
    })
}

fn chain_unfit() -> StoreError {
    damaged("the checkpoint chain does not fit together")
}

/// Composes the conversation's JSON text from a chain of decoded blobs: the
/// run's own first, each next one the base of the one before, the last one
/// full. Each link's text is unpacked straight into the conversation (the
/// oldest, when large, on a second thread). Fails (`Corrupt`) when the
/// chain does not fit together or a link's text is damaged.
pub fn compose(chain: &[Decoded<'_>]) -> Result<String> {
    let bad = chain_unfit;
    let (first, last) = match (chain.first(), chain.last()) {
        (Some(f), Some(l)) => (f, l),
        _ => return Err(bad()),
    };
    if last.base.is_some() {
        return Err(bad());
    }
    if let Text::Whole(w) = &first.text {
        if chain.len() != 1 {
            return Err(bad());
        }
        return Ok(w.clone());
    }
    // How many messages each level contributes from its own list.
    let mut take = Vec::with_capacity(chain.len());
    let mut need = first.total_messages();
    for (i, d) in chain.iter().enumerate() {
        if matches!(d.text, Text::Whole(_)) || need > d.total_messages() {
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
    // The room links `levels` (appended in that order from `start`) need
    // at most: each is unpacked whole where it lands, then cut to the
    // messages it gives, and the next lands right after them.
    let room = |levels: &mut dyn Iterator<Item = usize>, start: usize| {
        let (mut at, mut most) = (start, start);
        for i in levels {
            if take[i] == 0 && i != 0 {
                continue;
            }
            let d = &chain[i];
            let gives = 1 + d.end_of(take[i]);
            let whole = match &d.text {
                Text::Packed { len, .. } => 1 + len,
                Text::Body { body, state_at, .. } if i == 0 => {
                    gives + SEPARATOR.len() + body.len() - state_at + 1
                }
                _ => gives,
            };
            most = most.max(at + whole);
            at += gives;
        }
        most
    };
    const OPEN: &[u8] = b"{\"messages\":[";
    let capacity = room(&mut (0..chain.len()).rev(), OPEN.len());
    let oldest = chain.len() - 1;
    let split =
        chain.len() > 1 && matches!(&last.text, Text::Packed { len, .. } if *len >= PARALLEL_FROM);
    let mut unpacker = None;
    // The links after the oldest, newest last, into `into` (`comma`: a
    // message comes before them).
    let rest = |into: &mut Vec<u8>, mut comma: bool, unpacker: &mut Option<_>| -> Result<()> {
        for i in (0..oldest).rev() {
            chain[i].append(into, take[i], comma, i == 0, unpacker)?;
            comma |= take[i] > 0;
        }
        Ok(())
    };
    let open = || {
        let mut out = Vec::with_capacity(capacity);
        out.extend_from_slice(OPEN);
        out
    };
    // Split: the oldest link on another thread, the rest on this one; `None`
    // when no thread could be started.
    let split = split.then(|| {
        std::thread::scope(|scope| {
            let other = std::thread::Builder::new()
                .name("agui-checkpoint-decode".into())
                .spawn_scoped(scope, || {
                    let mut head = open();
                    last.append(&mut head, take[oldest], false, false, &mut None)
                        .map(|()| head)
                })
                .ok()?;
            let mut tail = Vec::with_capacity(room(&mut (0..oldest).rev(), 0));
            let tail = rest(&mut tail, take[oldest] > 0, &mut unpacker).map(|()| tail);
            let head = other
                .join()
                .unwrap_or_else(|_| Err(damaged("decoding failed")));
            Some((head, tail))
        })
    });
    let out = match split.flatten() {
        Some((head, tail)) => {
            let mut out = head?;
            out.extend_from_slice(&tail?);
            out
        }
        None => {
            let mut out = open();
            for i in (0..chain.len()).rev() {
                let comma = take[i + 1..].iter().any(|&n| n > 0);
                chain[i].append(&mut out, take[i], comma, i == 0, &mut unpacker)?;
            }
            out
        }
    };
    // SAFETY: `out` is UTF-8: the ASCII `{"messages":[`, then pieces each
    // checked UTF-8 where it was appended (a version 2 piece is a slice of
    // a checked `String` at char boundaries, a version 3 piece is checked
    // by `append`), joined with ASCII commas. Tested by
    // `a_damaged_text_under_an_intact_checksum_is_refused` (invalid UTF-8
    // in a piece refused) and every composing test (valid text kept).
    Ok(unsafe { String::from_utf8_unchecked(out) })
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

    /// A version 1 or 2 blob of `body`, as those versions sealed it.
    fn seal(version: u8, body: &[u8], last_seq: u64) -> Vec<u8> {
        let crc = checksum(body, last_seq);
        let z = zstd::bulk::compress(body, LEVEL).unwrap();
        let (codec, stored) = if body.len() >= COMPRESS_FROM && z.len() < body.len() {
            (1u8, z.as_slice())
        } else {
            (0u8, body)
        };
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&[version, codec]);
        out.extend_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(&(body.len() as u64).to_le_bytes());
        out.extend_from_slice(&last_seq.to_le_bytes());
        out.extend_from_slice(stored);
        out
    }

    /// The version 2 body of a checkpoint.
    fn body_2(base: Option<&BaseRef>, ms: &[String], state: &str) -> Vec<u8> {
        let mut b = Vec::new();
        match base {
            None => b.push(0u8),
            Some(r) => {
                b.push(1u8);
                b.extend_from_slice(&r.last_seq.to_le_bytes());
                b.extend_from_slice(&r.keep.to_le_bytes());
                b.extend_from_slice(&(r.run_id.len() as u32).to_le_bytes());
                b.extend_from_slice(r.run_id.as_bytes());
            }
        }
        b.extend_from_slice(&(ms.len() as u32).to_le_bytes());
        let joined = ms.join(",");
        let mut end = 0;
        for (i, m) in ms.iter().enumerate() {
            end += m.len() + usize::from(i > 0);
            b.extend_from_slice(&(end as u32).to_le_bytes());
        }
        b.extend_from_slice(&(joined.len() as u32).to_le_bytes());
        b.extend_from_slice(joined.as_bytes());
        b.extend_from_slice(state.as_bytes());
        b
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
        let good = seal(VERSION_2, &body_with(&[4], "\"é\"", "{}"), 1);
        assert_eq!(
            compose(&[decode(&good).unwrap()]).unwrap(),
            r#"{"messages":["é"],"state":{}}"#
        );
        // Its only message ends in the middle of the é: the state starts
        // inside a character.
        let cut = seal(VERSION_2, &body_with(&[2], "\"é\"", "{}"), 1);
        let err = decode(&cut).unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::Corrupt);
        // Invalid UTF-8 in the text.
        let mut bad = body_with(&[4], "\"é\"", "{}");
        let at = bad.len() - 4;
        bad[at] = 0xff;
        assert!(decode(&seal(VERSION_2, &bad, 1)).is_err());
    }

    #[test]
    fn round_trips_small_and_large() {
        let empty = encode_full::<&str>(&[], "{}", 7);
        let d = decode(&empty).unwrap();
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
            .map(|i| json!({"id": i, "c": noise(150_000)}))
            .collect();
        let base = encode_full(&texts(&m[..8]), "1", 10);
        let mid = delta("b", 10, 8, &m[8..11], "2", 20);
        let top = delta("m", 20, 11, &m[11..], "3", 30);
        let links = vec![("t", top.clone()), ("m", mid.clone()), ("b", base.clone())];
        let oldest = decode(&base).unwrap();
        assert!(
            matches!(oldest.text, Text::Packed { len, .. } if len >= PARALLEL_FROM),
            "the oldest link is unpacked on its own thread"
        );
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

    /// A link whose own messages all come after the ones its successor
    /// keeps gives nothing (and is not unpacked): the chain still composes.
    #[test]
    fn a_link_that_gives_no_message_is_passed_over() {
        let m: Vec<Value> = (0..6).map(|i| json!({"id": i})).collect();
        // base m0 m1 m2; mid keeps all 3, then m3; top keeps 2, then m5.
        let base = encode_full(&texts(&m[..3]), "1", 10);
        let mid = delta("b", 10, 3, &m[3..4], "2", 20);
        let top = delta("m", 20, 2, &m[5..], "3", 30);
        let links = [("t", &top), ("m", &mid), ("b", &base)];
        assert_eq!(
            compose_links("t", 30, &links).unwrap(),
            conv(&[m[0].clone(), m[1].clone(), m[5].clone()], &json!(3))
        );
        // And a top that keeps nothing at all.
        let bare = delta("m", 20, 0, &m[5..], "4", 31);
        let links = [("t", &bare), ("m", &mid), ("b", &base)];
        assert_eq!(
            compose_links("t", 31, &links).unwrap(),
            conv(&m[5..], &json!(4))
        );
    }

    /// Blobs of versions 1 and 2 (stores written before version 3) still
    /// compose, alone and in chains mixed with version 3 links, exactly as
    /// the same chain written today.
    #[test]
    fn blobs_of_earlier_versions_compose_as_before() {
        let m: Vec<String> = (0..6)
            .map(|i| json!({"id": i, "c": format!("x,y] é {}", "w ".repeat(300 * i))}).to_string())
            .collect();
        let r = |id: &str, seq, keep| BaseRef {
            run_id: id.into(),
            last_seq: seq,
            keep,
        };
        let (b, mid, top) = (r("b", 10, 0), r("b", 10, 2), r("m", 20, 3));
        let new = [
            encode_full(&m[..3], "1", 10),
            encode_delta(&mid, &m[3..5], "2", 20),
            encode_delta(&top, &m[5..], "{\"s\":3}", 30),
        ];
        let _ = b;
        let old = [
            seal(VERSION_2, &body_2(None, &m[..3], "1"), 10),
            seal(VERSION_2, &body_2(Some(&mid), &m[3..5], "2"), 20),
            seal(VERSION_2, &body_2(Some(&top), &m[5..], "{\"s\":3}"), 30),
        ];
        let want =
            compose_links("t", 30, &[("t", &new[2]), ("m", &new[1]), ("b", &new[0])]).unwrap();
        assert_eq!(
            want,
            format!(
                "{{\"messages\":[{},{},{},{}],\"state\":{{\"s\":3}}}}",
                m[0], m[1], m[3], m[5]
            )
        );
        for mask in 0..8u8 {
            let pick = |i: usize| if mask >> i & 1 == 1 { &old[i] } else { &new[i] };
            let links = [("t", pick(2)), ("m", pick(1)), ("b", pick(0))];
            assert_eq!(
                compose_links("t", 30, &links).as_deref(),
                Some(&*want),
                "mask {mask}"
            );
            assert_eq!(base_run(pick(2)).as_deref(), Some("m"));
            assert_eq!(base_run(pick(1)).as_deref(), Some("b"));
            assert_eq!(base_run(pick(0)), None);
        }
        assert_eq!(usable(&old[0], 10), usable(&new[0], 10));
    }

    /// A version 3 blob re-sealed (its checksum made to hold) around a
    /// text that is not what its meta says, or not UTF-8: refused as
    /// damage when composed, never a panic or a wrong conversation.
    #[test]
    fn a_damaged_text_under_an_intact_checksum_is_refused() {
        let m = [r#"{"a":"é"}"#.to_string(), r#"{"b":2}"#.to_string()];
        let good = encode_full(&m, "{}", 4);
        assert_eq!(
            usable(&good, 4).unwrap(),
            r#"{"messages":[{"a":"é"},{"b":2}],"state":{}}"#
        );
        // The stored text, changed, the length and checksum made to hold.
        let with_text = |text: &[u8]| {
            let meta_stored = u32_at(&good, 14).unwrap() as usize;
            let mut b = good[..HEADER + meta_stored].to_vec();
            b[18..26].copy_from_slice(&(text.len() as u64).to_le_bytes());
            b.extend_from_slice(text);
            let crc = blob_checksum(&b);
            b[6..10].copy_from_slice(&crc.to_le_bytes());
            b
        };
        let text = r#"{"a":"é"},{"b":2}],"state":{}}"#.as_bytes();
        assert_eq!(usable(&with_text(text), 4), usable(&good, 4));
        let mut not_utf8 = text.to_vec();
        not_utf8[7] = 0xff;
        let mut no_separator = text.to_vec();
        no_separator[18] = b'x';
        for (what, bad) in [
            ("not UTF-8", &not_utf8[..]),
            ("no separator", &no_separator[..]),
            ("no closing brace", &text[..text.len() - 2]),
            ("cut", &text[..12]),
            ("no state", r#"{"a":"é"},{"b":2}],"state":}"#.as_bytes()),
        ] {
            let blob = with_text(bad);
            let d = decode(&blob).map(|d| compose(&[d]));
            assert!(matches!(d, Err(_) | Ok(Err(_))), "{what} was composed");
        }
        // A base cut where its meta says a message ends, but no comma is:
        // refused (the cut would not be at a message's end).
        let mut no_comma = text.to_vec();
        no_comma[10] = b' ';
        let top = encode_delta(
            &BaseRef {
                run_id: "b".into(),
                last_seq: 4,
                keep: 1,
            },
            &["{}"],
            "0",
            5,
        );
        let intact = [("t", top.clone()), ("b", with_text(text))];
        assert_eq!(
            compose_links("t", 5, &intact).unwrap(),
            r#"{"messages":[{"a":"é"},{}],"state":0}"#
        );
        let cut = [("t", top), ("b", with_text(&no_comma))];
        assert!(compose_links("t", 5, &cut).is_none(), "cut at no comma");
        // A length that does not match what the text unpacks to.
        let mut long = good.clone();
        long[18..26].copy_from_slice(&999u64.to_le_bytes());
        let crc = blob_checksum(&long);
        long[6..10].copy_from_slice(&crc.to_le_bytes());
        assert!(usable(&long, 4).is_none());
    }

    /// A version 3 blob of any meta and text bytes (each part stored as it
    /// is or compressed), its checksum made to hold.
    fn sealed_3(meta: &[u8], text: &[u8], codec: u8, last_seq: u64) -> Vec<u8> {
        let part = |p: &[u8], z: bool| {
            if z {
                zstd::bulk::compress(p, 1).unwrap()
            } else {
                p.to_vec()
            }
        };
        let (m, t) = (part(meta, codec & 1 != 0), part(text, codec & 2 != 0));
        let mut b = MAGIC.to_vec();
        b.extend_from_slice(&[VERSION, codec, 0, 0, 0, 0]);
        b.extend_from_slice(&(meta.len() as u32).to_le_bytes());
        b.extend_from_slice(&(m.len() as u32).to_le_bytes());
        b.extend_from_slice(&(text.len() as u64).to_le_bytes());
        b.extend_from_slice(&last_seq.to_le_bytes());
        b.extend_from_slice(&m);
        b.extend_from_slice(&t);
        let crc = blob_checksum(&b);
        b[6..10].copy_from_slice(&crc.to_le_bytes());
        b
    }

    proptest::proptest! {
        /// Any meta and text under a good checksum (so that the parts are
        /// what is read), alone or as a link under an intact delta: refused
        /// or composed, never a panic; what composes is the text itself.
        #[test]
        fn any_checksummed_blob_never_panics(
            meta in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40),
            text in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..60),
            codec in 0u8..4,
            keep in 0u64..4,
        ) {
            let blob = sealed_3(&meta, &text, codec, 9);
            let _ = base_run(&blob);
            if let Ok(d) = decode(&blob) {
                let _ = d.message_count();
                let _ = compose(&[d]);
            }
            let top = encode_delta(
                &BaseRef { run_id: "b".into(), last_seq: 9, keep },
                &["{}"],
                "0",
                10,
            );
            let links = [("t", top), ("b", blob)];
            if let Some(json) = compose_links("t", 10, &links) {
                proptest::prop_assert!(json.starts_with(r#"{"messages":["#), "{}", json);
            }
        }

        /// Any messages and state written today compose to exactly what
        /// `serde_json` writes of the conversation, however they are split
        /// between a full base and a delta.
        #[test]
        fn written_chains_compose_as_serde_writes(
            words in proptest::collection::vec("[a-zé,\\]\"{}]{0,12}", 0..8),
            split in 0usize..8,
            keep in 0usize..8,
        ) {
            let ms: Vec<Value> = words.iter().map(|w| json!({"c": w})).collect();
            let split = split.min(ms.len());
            let keep = keep.min(split);
            let base = encode_full(&texts(&ms[..split]), "{\"s\":1}", 5);
            let base_ref = BaseRef { run_id: "b".into(), last_seq: 5, keep: keep as u64 };
            let top = encode_delta(&base_ref, &texts(&ms[split..]), "[1,\"é\"]", 7);
            let links = [("t", top), ("b", base.clone())];
            let want: Vec<Value> = ms[..keep].iter().chain(&ms[split..]).cloned().collect();
            proptest::prop_assert_eq!(
                compose_links("t", 7, &links).unwrap(),
                conv(&want, &json!([1, "é"]))
            );
            proptest::prop_assert_eq!(usable(&base, 5).unwrap(), conv(&ms[..split], &json!({"s": 1})));
        }
    }
}
