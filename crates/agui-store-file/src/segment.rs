//! Segment files: the active (plain, append-only) segment, sealed (zstd)
//! segments, replay scans, sealing and the block cache.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::error::FileError;
use crate::record::{self, Frame};

/// The first bytes of a plain segment; records start after them.
pub const MAGIC_PLAIN: &[u8; 8] = b"AGUISEG1";
/// The first bytes of a sealed segment; blocks start after them.
pub const MAGIC_SEALED: &[u8; 8] = b"AGUIZSG1";
/// Bytes of a sealed block's header.
const BLOCK_HEADER: usize = 8 + 4 + 4 + 4;

/// File name of plain segment `id`.
pub fn plain_name(id: u64) -> String {
    format!("{id:016x}.seg")
}

/// File name of sealed segment `id`.
pub fn sealed_name(id: u64) -> String {
    format!("{id:016x}.zseg")
}

/// Reads a segment id and whether it is sealed from a file name.
pub fn parse_name(name: &str) -> Option<(u64, bool)> {
    let (stem, sealed) = if let Some(s) = name.strip_suffix(".zseg") {
        (s, true)
    } else if let Some(s) = name.strip_suffix(".seg") {
        (s, false)
    } else {
        return None;
    };
    if stem.len() != 16 {
        return None;
    }
    u64::from_str_radix(stem, 16).ok().map(|id| (id, sealed))
}

/// Where a record is: segment, logical offset (in the plain form) and frame
/// length (header included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loc {
    pub seg: u64,
    pub off: u64,
    pub len: u32,
}

/// One zstd block of a sealed segment.
#[derive(Debug, Clone, Copy)]
pub struct Block {
    /// Logical offset of its first byte.
    pub logical: u64,
    /// Uncompressed length.
    pub raw_len: u32,
    /// Offset of the compressed bytes in the file.
    pub file_off: u64,
    /// Compressed length.
    pub comp_len: u32,
    /// CRC-32 of the compressed bytes.
    pub crc: u32,
}

/// A readable segment.
pub enum Segment {
    /// Records as written (the active segment, or one waiting to be sealed).
    Plain { id: u64, file: File, path: PathBuf },
    /// zstd blocks of whole records.
    Sealed {
        id: u64,
        file: File,
        path: PathBuf,
        blocks: Vec<Block>,
    },
}

impl Segment {
    pub fn path(&self) -> &Path {
        match self {
            Segment::Plain { path, .. } | Segment::Sealed { path, .. } => path,
        }
    }

    fn id(&self) -> u64 {
        match self {
            Segment::Plain { id, .. } | Segment::Sealed { id, .. } => *id,
        }
    }

    /// The bytes `loc` names (a whole frame).
    pub fn read(&self, loc: Loc, cache: &BlockCache) -> Result<Vec<u8>, FileError> {
        let damaged = |why| FileError::Damaged {
            segment: self.id(),
            offset: loc.off,
            why,
        };
        match self {
            Segment::Plain { file, path, .. } => {
                let mut buf = vec![0u8; loc.len as usize];
                file.read_exact_at(&mut buf, loc.off)
                    .map_err(|e| FileError::io("read a segment", path, e))?;
                Ok(buf)
            }
            Segment::Sealed { blocks, .. } => {
                let i = blocks.partition_point(|b| b.logical + u64::from(b.raw_len) <= loc.off);
                let b = blocks
                    .get(i)
                    .ok_or_else(|| damaged("offset beyond the segment"))?;
                let data = cache.get_or_load(self.id(), i, || self.load_block(b))?;
                let start = usize::try_from(loc.off - b.logical.min(loc.off))
                    .map_err(|_| damaged("offset"))?;
                data.get(start..start + loc.len as usize)
                    .map(<[u8]>::to_vec)
                    .ok_or_else(|| damaged("record crosses a block"))
            }
        }
    }

    fn load_block(&self, b: &Block) -> Result<Vec<u8>, FileError> {
        let Segment::Sealed { file, path, id, .. } = self else {
            return Err(FileError::Malformed("not a sealed segment"));
        };
        let mut comp = vec![0u8; b.comp_len as usize];
        file.read_exact_at(&mut comp, b.file_off)
            .map_err(|e| FileError::io("read a segment", path, e))?;
        decompress_block(*id, b, &comp)
    }
}

fn decompress_block(id: u64, b: &Block, comp: &[u8]) -> Result<Vec<u8>, FileError> {
    let damaged = |why| FileError::Damaged {
        segment: id,
        offset: b.logical,
        why,
    };
    if crc32fast::hash(comp) != b.crc {
        return Err(damaged("block checksum"));
    }
    let raw = zstd::bulk::decompress(comp, b.raw_len as usize)
        .map_err(|_| damaged("block decompression"))?;
    if raw.len() != b.raw_len as usize {
        return Err(damaged("block length"));
    }
    Ok(raw)
}

/// A cached block: segment, block index, bytes.
type CachedBlock = (u64, usize, Arc<Vec<u8>>);

/// A few recently decompressed blocks (sequential reads and repeated
/// checkpoint loads hit it).
pub struct BlockCache {
    entries: Mutex<Vec<CachedBlock>>,
    capacity: usize,
}

impl BlockCache {
    pub fn new(capacity: usize) -> BlockCache {
        BlockCache {
            entries: Mutex::new(Vec::new()),
            capacity: capacity.max(1),
        }
    }

    fn get_or_load(
        &self,
        seg: u64,
        block: usize,
        load: impl FnOnce() -> Result<Vec<u8>, FileError>,
    ) -> Result<Arc<Vec<u8>>, FileError> {
        {
            let mut e = self.entries.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(pos) = e.iter().position(|(s, b, _)| *s == seg && *b == block) {
                let hit = e.remove(pos);
                let data = hit.2.clone();
                e.insert(0, hit);
                return Ok(data);
            }
        }
        let data = Arc::new(load()?);
        let mut e = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        e.insert(0, (seg, block, data.clone()));
        e.truncate(self.capacity);
        Ok(data)
    }

    /// Forgets a segment's blocks.
    pub fn forget(&self, seg: u64) {
        let mut e = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        e.retain(|(s, _, _)| *s != seg);
    }
}

/// The segment being appended to.
pub struct Active {
    pub id: u64,
    pub file: Arc<File>,
    pub path: PathBuf,
    /// Logical (= file) length.
    pub len: u64,
}

impl Active {
    /// Creates a new, empty plain segment (magic written and synced).
    pub fn create(dir: &Path, id: u64) -> Result<Active, FileError> {
        let path = dir.join(plain_name(id));
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| FileError::io("create a segment", &path, e))?;
        file.write_all(MAGIC_PLAIN)
            .and_then(|()| file.sync_all())
            .map_err(|e| FileError::io("create a segment", &path, e))?;
        sync_dir(dir)?;
        Ok(Active {
            id,
            file: Arc::new(file),
            path,
            len: MAGIC_PLAIN.len() as u64,
        })
    }

    /// Reopens a plain segment for appending at `len` (its verified length).
    pub fn reopen(dir: &Path, id: u64, len: u64) -> Result<Active, FileError> {
        let path = dir.join(plain_name(id));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| FileError::io("open a segment", &path, e))?;
        Ok(Active {
            id,
            file: Arc::new(file),
            path,
            len,
        })
    }

    /// Appends a frame; returns where it is. On failure the segment is cut
    /// back to its previous length (best effort) and nothing was appended.
    pub fn append(&mut self, frame: &[u8]) -> Result<Loc, FileError> {
        let len = u32::try_from(frame.len()).map_err(|_| FileError::TooLarge)?;
        if let Err(e) = self.file.write_all_at(frame, self.len) {
            let _ = self.file.set_len(self.len);
            return Err(FileError::io("write a segment", &self.path, e));
        }
        let loc = Loc {
            seg: self.id,
            off: self.len,
            len,
        };
        self.len += frame.len() as u64;
        Ok(loc)
    }

    pub fn sync(&self) -> Result<(), FileError> {
        self.file
            .sync_data()
            .map_err(|e| FileError::io("sync a segment", &self.path, e))
    }

    /// A reader on the same file.
    pub fn segment(&self) -> Result<Segment, FileError> {
        let file =
            File::open(&self.path).map_err(|e| FileError::io("open a segment", &self.path, e))?;
        Ok(Segment::Plain {
            id: self.id,
            file,
            path: self.path.clone(),
        })
    }
}

/// Fsyncs a directory (so that created, renamed and removed names persist).
pub fn sync_dir(dir: &Path) -> Result<(), FileError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| FileError::io("sync the store directory", dir, e))
}

/// What scanning a plain segment found.
pub struct PlainScan {
    /// Length of the valid prefix (magic + complete records).
    pub valid_len: u64,
    /// True when bytes after `valid_len` were dropped (a torn tail).
    pub torn: bool,
    /// The file's length (the torn tail is `valid_len..file_len`).
    pub file_len: u64,
    /// Records (complete or not) in the torn tail.
    pub torn_records: u64,
    /// The torn tail starts with a complete record that fails its checksum:
    /// the mark of damage (a flipped bit) more than of a write cut short,
    /// which leaves an incomplete record (though a crash on a file system
    /// that may grow a file before writing its data leaves one too).
    pub complete_damaged: bool,
}

/// How many records (the last one possibly incomplete) `bytes` holds,
/// following the length fields of their headers.
pub fn count_records(mut bytes: &[u8]) -> u64 {
    let mut n = 0;
    while !bytes.is_empty() {
        n += 1;
        match record::read_frame(bytes) {
            Frame::Ok(_, len) | Frame::Damaged(_, len) => bytes = &bytes[len..],
            Frame::Incomplete => break,
        }
    }
    n
}

/// A record met by a scan: its location, payload and whether its checksum
/// held.
pub struct Scanned<'a> {
    pub loc: Loc,
    pub payload: &'a [u8],
    pub intact: bool,
}

/// Reads a plain segment whole and calls `f` on every record. A damaged
/// record followed by an intact one is reported (`intact: false`); a
/// damaged or incomplete record with nothing intact after it ends the
/// scan: that is a torn tail, reported in the result for the caller to cut.
pub fn scan_plain(
    path: &Path,
    id: u64,
    mut f: impl FnMut(Scanned<'_>) -> Result<(), FileError>,
) -> Result<PlainScan, FileError> {
    let data = std::fs::read(path).map_err(|e| FileError::io("read a segment", path, e))?;
    if data.len() < MAGIC_PLAIN.len() || &data[..MAGIC_PLAIN.len()] != MAGIC_PLAIN {
        // A segment whose creation was cut short has no complete magic.
        if data.len() < MAGIC_PLAIN.len() && MAGIC_PLAIN.starts_with(&data) {
            return Ok(PlainScan {
                valid_len: 0,
                torn: true,
                file_len: data.len() as u64,
                torn_records: 0,
                complete_damaged: false,
            });
        }
        return Err(FileError::Damaged {
            segment: id,
            offset: 0,
            why: "not a segment file",
        });
    }
    let mut pos = MAGIC_PLAIN.len();
    while pos < data.len() {
        let rest = &data[pos..];
        let (payload, n, intact) = match record::read_frame(rest) {
            Frame::Ok(p, n) => (p, n, true),
            Frame::Damaged(p, n) if matches!(record::read_frame(&rest[n..]), Frame::Ok(..)) => {
                (p, n, false)
            }
            Frame::Damaged(..) | Frame::Incomplete => break,
        };
        f(Scanned {
            loc: Loc {
                seg: id,
                off: pos as u64,
                len: n as u32,
            },
            payload,
            intact,
        })?;
        pos += n;
    }
    if pos < data.len() {
        // A torn tail has nothing intact after it. An intact record further
        // on means the log is damaged in the middle: cutting there would
        // drop records that were written whole.
        let resumes =
            (pos + 1..data.len()).any(|p| matches!(record::read_frame(&data[p..]), Frame::Ok(..)));
        if resumes {
            return Err(FileError::Damaged {
                segment: id,
                offset: pos as u64,
                why: "a damaged record with intact records after it",
            });
        }
    }
    Ok(PlainScan {
        valid_len: pos as u64,
        torn: pos < data.len(),
        file_len: data.len() as u64,
        torn_records: count_records(&data[pos..]),
        // Zeros are what a crash leaves where a file grew before its data
        // was written, never damage.
        complete_damaged: match record::read_frame(&data[pos..]) {
            Frame::Damaged(_, n) => data[pos..pos + n].iter().any(|&b| b != 0),
            _ => false,
        },
    })
}

/// Cuts sealed segment file `path` before the block holding logical offset
/// `offset` (every block from it on is dropped). Returns the bytes and
/// records dropped (records counted when their blocks still decompress).
pub fn cut_sealed(path: &Path, id: u64, offset: u64) -> Result<(u64, u64), FileError> {
    let data = std::fs::read(path).map_err(|e| FileError::io("read a segment", path, e))?;
    let mut pos = MAGIC_SEALED.len();
    let mut records = 0u64;
    let mut cut = None;
    while pos + BLOCK_HEADER <= data.len() {
        let h = &data[pos..pos + BLOCK_HEADER];
        let mut l = [0u8; 8];
        l.copy_from_slice(&h[..8]);
        let word = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        let b = Block {
            logical: u64::from_le_bytes(l),
            raw_len: word(8),
            comp_len: word(12),
            crc: word(16),
            file_off: (pos + BLOCK_HEADER) as u64,
        };
        let end = pos + BLOCK_HEADER + b.comp_len as usize;
        let holds = b.logical.saturating_add(u64::from(b.raw_len)) > offset;
        if cut.is_none() && holds {
            cut = Some(pos);
        }
        if cut.is_some()
            && let Some(raw) = data
                .get(pos + BLOCK_HEADER..end)
                .and_then(|comp| decompress_block(id, &b, comp).ok())
        {
            records += count_records(&raw);
        }
        if end > data.len() {
            break;
        }
        pos = end;
    }
    let cut = cut.unwrap_or(pos).max(MAGIC_SEALED.len());
    let f = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| FileError::io("open a segment", path, e))?;
    f.set_len(cut as u64)
        .and_then(|()| f.sync_all())
        .map_err(|e| FileError::io("cut a damaged segment", path, e))?;
    Ok((data.len() as u64 - cut as u64, records))
}

/// Opens a sealed segment: reads and checks every block, calls `f` on
/// every record, and returns the segment.
pub fn scan_sealed(
    path: &Path,
    id: u64,
    mut f: impl FnMut(Scanned<'_>) -> Result<(), FileError>,
) -> Result<Segment, FileError> {
    let data = std::fs::read(path).map_err(|e| FileError::io("read a segment", path, e))?;
    let damaged = |offset, why| FileError::Damaged {
        segment: id,
        offset,
        why,
    };
    if data.len() < MAGIC_SEALED.len() || &data[..MAGIC_SEALED.len()] != MAGIC_SEALED {
        return Err(damaged(0, "not a sealed segment"));
    }
    let mut pos = MAGIC_SEALED.len();
    let mut blocks = Vec::new();
    let mut logical = MAGIC_PLAIN.len() as u64;
    while pos < data.len() {
        let h = data
            .get(pos..pos + BLOCK_HEADER)
            .ok_or_else(|| damaged(logical, "truncated block header"))?;
        let mut l = [0u8; 8];
        l.copy_from_slice(&h[..8]);
        let word = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        let b = Block {
            logical: u64::from_le_bytes(l),
            raw_len: word(8),
            comp_len: word(12),
            crc: word(16),
            file_off: (pos + BLOCK_HEADER) as u64,
        };
        if b.logical != logical {
            return Err(damaged(logical, "blocks out of order"));
        }
        let comp = data
            .get(pos + BLOCK_HEADER..pos + BLOCK_HEADER + b.comp_len as usize)
            .ok_or_else(|| damaged(logical, "truncated block"))?;
        let raw = decompress_block(id, &b, comp)?;
        let mut at = 0usize;
        while at < raw.len() {
            let (payload, n, intact) = match record::read_frame(&raw[at..]) {
                Frame::Ok(p, n) => (p, n, true),
                Frame::Damaged(p, n) => (p, n, false),
                Frame::Incomplete => return Err(damaged(logical, "record crosses a block")),
            };
            f(Scanned {
                loc: Loc {
                    seg: id,
                    off: b.logical + at as u64,
                    len: n as u32,
                },
                payload,
                intact,
            })?;
            at += n;
        }
        logical += u64::from(b.raw_len);
        pos += BLOCK_HEADER + b.comp_len as usize;
        blocks.push(b);
    }
    let file = File::open(path).map_err(|e| FileError::io("open a segment", path, e))?;
    Ok(Segment::Sealed {
        id,
        file,
        path: path.to_path_buf(),
        blocks,
    })
}

/// Seals plain segment `id` of `dir`: writes `<id>.zseg` (blocks of whole
/// records of about `block_bytes`, zstd at `level`), syncs it, and returns
/// it. The plain file is left for the caller to remove.
pub fn seal(dir: &Path, id: u64, level: i32, block_bytes: usize) -> Result<Segment, FileError> {
    let src = dir.join(plain_name(id));
    let data = std::fs::read(&src).map_err(|e| FileError::io("read a segment", &src, e))?;
    if data.len() < MAGIC_PLAIN.len() || &data[..MAGIC_PLAIN.len()] != MAGIC_PLAIN {
        return Err(FileError::Damaged {
            segment: id,
            offset: 0,
            why: "not a segment file",
        });
    }
    let tmp = dir.join(format!("{}.tmp", sealed_name(id)));
    let dst = dir.join(sealed_name(id));
    let mut out = Vec::with_capacity(data.len() / 4);
    out.extend_from_slice(MAGIC_SEALED);
    let mut blocks = Vec::new();
    let mut start = MAGIC_PLAIN.len();
    while start < data.len() {
        // Whole records up to about block_bytes (at least one).
        let mut end = start;
        while end < data.len() && (end == start || end - start < block_bytes) {
            match record::read_frame(&data[end..]) {
                Frame::Ok(_, n) | Frame::Damaged(_, n) => end += n,
                Frame::Incomplete => {
                    return Err(FileError::Damaged {
                        segment: id,
                        offset: end as u64,
                        why: "incomplete record in a full segment",
                    });
                }
            }
        }
        let raw = &data[start..end];
        let comp =
            zstd::bulk::compress(raw, level).map_err(|e| FileError::io("compress", &src, e))?;
        let b = Block {
            logical: start as u64,
            raw_len: u32::try_from(raw.len()).map_err(|_| FileError::TooLarge)?,
            comp_len: u32::try_from(comp.len()).map_err(|_| FileError::TooLarge)?,
            crc: crc32fast::hash(&comp),
            file_off: (out.len() + BLOCK_HEADER) as u64,
        };
        out.extend_from_slice(&b.logical.to_le_bytes());
        out.extend_from_slice(&b.raw_len.to_le_bytes());
        out.extend_from_slice(&b.comp_len.to_le_bytes());
        out.extend_from_slice(&b.crc.to_le_bytes());
        out.extend_from_slice(&comp);
        blocks.push(b);
        start = end;
    }
    let write = || -> std::io::Result<()> {
        let mut f = File::create(&tmp)?;
        f.write_all(&out)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &dst)
    };
    write().map_err(|e| FileError::io("write a sealed segment", &dst, e))?;
    sync_dir(dir)?;
    let file = File::open(&dst).map_err(|e| FileError::io("open a segment", &dst, e))?;
    Ok(Segment::Sealed {
        id,
        file,
        path: dst,
        blocks,
    })
}
