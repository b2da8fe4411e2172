//! Records: the unit written to a segment.
//!
//! Frame: payload length (u32 LE), CRC-32 of the payload (u32 LE), payload.
//! Payload: a kind byte, then the kind's fields. Strings are a length (u32 LE)
//! then UTF-8 bytes; integers are little endian.
//!
//! | kind | fields |
//! | --- | --- |
//! | 1 batch (read only) | tenant, thread, agent (u8 0/1 then string), received_at (i64), first_seq (u64), count (u32), count × (length u32, JSON bytes) |
//! | 8 framed batch | tenant, thread, agent, received_at (i64), first_seq (u64), count (u32), codec (u8), body length (u32), body CRC-32 (u32), frame data (length u32, bytes): a frame of `agui_store::frame`, the codec every durable backend stores |
//! | 2 checkpoint | tenant, thread, run, blob length (u32), blob |
//! | 3 delete thread | tenant, thread |
//! | 4 interrupted | time (i64): every run still running becomes interrupted |
//! | 5 checkpoint removed | tenant, thread, run |
//! | 6 channel | tenant, thread, agent, updated_at (i64), state (JSON object text) |
//! | 7 rename | tenant, old thread id, new thread id |

use agui_protocol::Event;
use agui_store::frame;

use crate::error::FileError;

/// Bytes of a frame header (length + CRC).
pub const HEADER: usize = 8;
/// The largest payload accepted (1 GiB).
pub const MAX_PAYLOAD: usize = 1 << 30;

pub const BATCH: u8 = 1;
pub const CHECKPOINT: u8 = 2;
pub const DELETE: u8 = 3;
pub const INTERRUPTED: u8 = 4;
pub const UNCHECKPOINT: u8 = 5;
pub const CHANNEL: u8 = 6;
pub const RENAME: u8 = 7;
pub const FRAMED_BATCH: u8 = 8;

/// Builds a payload.
#[derive(Default)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    pub fn new(kind: u8) -> Writer {
        Writer { buf: vec![kind] }
    }

    pub fn str(&mut self, s: &str) -> &mut Self {
        self.bytes(s.as_bytes())
    }

    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        // Callers bound every field far below 4 GiB (ids by MAX_ID_BYTES,
        // events and blobs by MAX_PAYLOAD, checked before encoding).
        self.buf
            .extend_from_slice(&u32::try_from(b.len()).unwrap_or(u32::MAX).to_le_bytes());
        self.buf.extend_from_slice(b);
        self
    }

    pub fn opt_str(&mut self, s: Option<&str>) -> &mut Self {
        match s {
            Some(s) => {
                self.buf.push(1);
                self.str(s)
            }
            None => {
                self.buf.push(0);
                self
            }
        }
    }

    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub fn i64(&mut self, v: i64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// The framed record (header + payload).
    pub fn frame(&self) -> Result<Vec<u8>, FileError> {
        if self.buf.len() > MAX_PAYLOAD {
            return Err(FileError::TooLarge);
        }
        let mut out = Vec::with_capacity(HEADER + self.buf.len());
        out.extend_from_slice(&(self.buf.len() as u32).to_le_bytes());
        out.extend_from_slice(&crc32fast::hash(&self.buf).to_le_bytes());
        out.extend_from_slice(&self.buf);
        Ok(out)
    }
}

/// Reads a payload field by field; every read is bounds-checked.
pub struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(payload: &'a [u8]) -> Reader<'a> {
        Reader { rest: payload }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], FileError> {
        if self.rest.len() < n {
            return Err(FileError::Malformed("truncated field"));
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    pub fn u8(&mut self) -> Result<u8, FileError> {
        Ok(self.take(1)?[0])
    }

    pub fn u32(&mut self) -> Result<u32, FileError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn u64(&mut self) -> Result<u64, FileError> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }

    pub fn i64(&mut self) -> Result<i64, FileError> {
        Ok(self.u64()? as i64)
    }

    pub fn bytes(&mut self) -> Result<&'a [u8], FileError> {
        let n = self.u32()? as usize;
        self.take(n)
    }

    pub fn str(&mut self) -> Result<&'a str, FileError> {
        std::str::from_utf8(self.bytes()?).map_err(|_| FileError::Malformed("text not UTF-8"))
    }

    pub fn opt_str(&mut self) -> Result<Option<&'a str>, FileError> {
        match self.u8()? {
            0 => Ok(None),
            1 => self.str().map(Some),
            _ => Err(FileError::Malformed("bad option flag")),
        }
    }

    pub fn end(&self) -> Result<(), FileError> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(FileError::Malformed("trailing bytes"))
        }
    }
}

/// A decoded batch record.
pub struct Batch<'a> {
    pub tenant: &'a str,
    pub thread: &'a str,
    pub agent: Option<&'a str>,
    pub received_at: i64,
    pub first_seq: u64,
    pub events: Vec<Event>,
}

/// True for the kinds [`decode_batch`] reads.
pub fn is_batch(kind: u8) -> bool {
    kind == BATCH || kind == FRAMED_BATCH
}

/// Encodes a batch record (framed), its events as a frame of
/// `agui_store::frame` (`data`, made by [`frame::encode`] before any lock
/// is taken).
pub fn encode_batch(
    tenant: &str,
    thread: &str,
    agent: Option<&str>,
    received_at: i64,
    first_seq: u64,
    count: usize,
    data: &frame::Frame,
) -> Result<Vec<u8>, FileError> {
    if data.data.len() > MAX_PAYLOAD - 1024 || count > u32::MAX as usize {
        return Err(FileError::TooLarge);
    }
    let mut w = Writer::new(FRAMED_BATCH);
    w.buf
        .reserve(data.data.len() + tenant.len() + thread.len() + 64);
    w.str(tenant)
        .str(thread)
        .opt_str(agent)
        .i64(received_at)
        .u64(first_seq)
        .u32(count as u32);
    // Codec numbers are small (see `agui_store::frame`).
    w.buf.push(data.codec as u8);
    w.u32(data.raw_len).u32(data.crc).bytes(&data.data);
    w.frame()
}

/// Decodes a batch payload (kind byte included), either kind, into its
/// events: a framed batch through `agui_store::frame` (no JSON parse for
/// known types), an old one by reading each event's text.
pub fn decode_batch(payload: &[u8]) -> Result<Batch<'_>, FileError> {
    let mut r = Reader::new(payload);
    let kind = r.u8()?;
    if !is_batch(kind) {
        return Err(FileError::Malformed("not a batch record"));
    }
    let tenant = r.str()?;
    let thread = r.str()?;
    let agent = r.opt_str()?;
    let received_at = r.i64()?;
    let first_seq = r.u64()?;
    let n = r.u32()? as usize;
    let events = if kind == FRAMED_BATCH {
        let codec = i64::from(r.u8()?);
        let (raw_len, crc) = (i64::from(r.u32()?), i64::from(r.u32()?));
        let data = r.bytes()?;
        r.end()?;
        frame::decode(codec, Some(raw_len), Some(crc), data.to_vec(), n as u64)
            .map_err(|_| FileError::Malformed("a batch frame does not decode"))?
    } else {
        let mut events = Vec::with_capacity(n.min(payload.len() / 4));
        for _ in 0..n {
            let text = r.str()?;
            events.push(
                Event::from_json(text)
                    .map_err(|_| FileError::Malformed("a stored event is not an event"))?,
            );
        }
        r.end()?;
        events
    };
    Ok(Batch {
        tenant,
        thread,
        agent,
        received_at,
        first_seq,
        events,
    })
}

/// The outcome of looking for a frame at the start of `buf`.
pub enum Frame<'a> {
    /// A complete frame with a valid checksum: payload and total length.
    Ok(&'a [u8], usize),
    /// A complete frame whose checksum fails: payload and total length.
    Damaged(&'a [u8], usize),
    /// Not enough bytes for the frame the header announces (or no header).
    Incomplete,
}

/// Reads the frame at the start of `buf`.
pub fn read_frame(buf: &[u8]) -> Frame<'_> {
    if buf.len() < HEADER {
        return Frame::Incomplete;
    }
    let len = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    let crc = u32::from_le_bytes([buf[4], buf[5], buf[6], buf[7]]);
    if len > MAX_PAYLOAD || buf.len() - HEADER < len {
        return Frame::Incomplete;
    }
    let payload = &buf[HEADER..HEADER + len];
    if len == 0 || crc32fast::hash(payload) != crc {
        Frame::Damaged(payload, HEADER + len)
    } else {
        Frame::Ok(payload, HEADER + len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_round_trip_and_damage() {
        let events = vec![
            Event::from_json(r#"{"type":"CUSTOM","name":"a","value":1}"#).unwrap(),
            Event::from_json(r#"{"type":"RUN_STARTED","threadId":"t","runId":"r"}"#).unwrap(),
        ];
        let data = frame::encode(&events).unwrap();
        let framed = encode_batch("ten", "th\0/..", Some("ag"), -7, 42, 2, &data).unwrap();
        let Frame::Ok(payload, n) = read_frame(&framed) else {
            panic!("a fresh frame reads back")
        };
        assert_eq!(n, framed.len());
        let b = decode_batch(payload).unwrap();
        assert_eq!(
            (b.tenant, b.thread, b.agent),
            ("ten", "th\0/..", Some("ag"))
        );
        assert_eq!((b.received_at, b.first_seq), (-7, 42));
        let texts: Vec<&str> = b.events.iter().map(Event::json).collect();
        assert_eq!(texts, [events[0].json(), events[1].json()]);
        for i in 0..framed.len() {
            let mut d = framed.clone();
            d[i] ^= 0x10;
            match read_frame(&d) {
                Frame::Ok(p, _) => panic!("byte {i} flipped but {} bytes read as valid", p.len()),
                Frame::Damaged(..) | Frame::Incomplete => {}
            }
        }
        for cut in 0..framed.len() {
            assert!(matches!(read_frame(&framed[..cut]), Frame::Incomplete));
        }
    }

    #[test]
    fn garbage_payloads_are_errors_not_panics() {
        for bad in [
            &b""[..],
            &[1],
            &[1, 255, 255, 255, 255],
            &[1, 0, 0, 0, 0, 0, 0, 0, 0, 2],
        ] {
            assert!(decode_batch(bad).is_err());
        }
    }

    /// Batch records written before frames (kind 1: each event's text)
    /// still read back.
    #[test]
    fn old_batch_records_read_back() {
        let events = [
            r#"{"type":"RUN_STARTED","threadId":"t","runId":"r"}"#,
            r#"{"type":"MY_TYPE","x":[1,2]}"#,
        ];
        let mut w = Writer::new(BATCH);
        w.str("ten").str("th").opt_str(None).i64(5).u64(1).u32(2);
        for e in events {
            w.str(e);
        }
        let framed = w.frame().unwrap();
        let Frame::Ok(payload, _) = read_frame(&framed) else {
            panic!("a fresh frame reads back")
        };
        let b = decode_batch(payload).unwrap();
        let texts: Vec<&str> = b.events.iter().map(Event::json).collect();
        assert_eq!(texts, events);
        assert_eq!(b.events[1].type_name(), "MY_TYPE");
        let mut bad = payload.to_vec();
        let at = bad.len() - 3;
        bad[at] = b'{';
        assert!(decode_batch(&bad).is_err());
    }
}
