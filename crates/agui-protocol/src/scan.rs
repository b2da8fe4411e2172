//! The one-pass envelope scanner: the fast path of [`Event::from_json`].
//!
//! [`scan`] walks an event's text once, byte by byte (eight bytes at a time
//! inside strings), and checks everything the reference path checks with
//! `serde_json` plus a second byte pass: the text is one JSON object, strictly
//! by the JSON grammar, with exactly one top-level `type` whose value is a
//! string. On the way it records where each top-level member's key and value
//! lie, so readers can find a field without parsing the event again.
//!
//! The scanner is **conservative**: it accepts only text for which the
//! reference path would return the same text unchanged (no line break, depth
//! within [`MAX_DEPTH`], no escape that could hide a lone surrogate or the
//! reserved key, no key that is the reserved key, no escaped top-level key,
//! a `type` without escapes). For
//! anything else it answers `None` and the caller takes the reference path,
//! which gives the verdict and the exact error. So the fast path can only
//! ever be faster, never different; `tests/scan_differential.rs` and the
//! `envelope` fuzz target compare the two on generated and mutated text.
//!
//! [`Event::from_json`]: crate::Event::from_json
//! [`MAX_DEPTH`]: crate::MAX_DEPTH

use crate::MAX_DEPTH;

/// Where one top-level member of an event's text lies, as the envelope scan
/// found it: the byte range of its key's body (between the quotes; the scan
/// records only keys written without escapes) and of its raw value, both
/// counted from the start of the event's text; and whether the value is a
/// string written without escapes (its body is then the string itself).
///
/// [`Event::check_recording`] records a table of these for each event it
/// accepts on its fast path, so that readers of the event's fields
/// ([`EventRef::for_each_member`]) need not walk its text again. A table is
/// only meaningful with the text it was recorded from.
///
/// [`Event::check_recording`]: crate::Event::check_recording
/// [`EventRef::for_each_member`]: crate::EventRef::for_each_member
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Member {
    /// Start and end (exclusive) of the key's body.
    pub(crate) key: (u32, u32),
    /// Start and end (exclusive) of the raw value.
    pub(crate) value: (u32, u32),
    /// The value is a string with no escape.
    pub(crate) plain: bool,
}

impl Member {
    /// The key and the raw value of this member in `text`, the event text
    /// the member was recorded from; `None` when the offsets do not fall on
    /// character boundaries of `text` (another text).
    #[inline]
    pub fn of<'a>(&self, text: &'a str) -> Option<(&'a str, &'a str)> {
        Some((
            text.get(self.key.0 as usize..self.key.1 as usize)?,
            text.get(self.value.0 as usize..self.value.1 as usize)?,
        ))
    }

    /// Whether the value is a string written without escapes (its body, the
    /// text between the quotes, is then the string itself).
    #[inline]
    pub fn is_plain(&self) -> bool {
        self.plain
    }
}

/// What a successful [`scan`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Scanned {
    /// Start and end (exclusive) of the `type` string's body (no escapes).
    pub(crate) ty: (usize, usize),
}

/// Where members are recorded while scanning (nothing, or a caller's list).
pub(crate) trait Sink {
    fn member(&mut self, member: Member);
}

impl Sink for () {
    #[inline(always)]
    fn member(&mut self, _: Member) {}
}

impl Sink for Vec<Member> {
    #[inline]
    fn member(&mut self, member: Member) {
        self.push(member);
    }
}

/// A sink that hands each member to a closure as text slices.
struct Each<'a, F> {
    text: &'a str,
    f: F,
}

impl<'a, F: FnMut(&'a str, &'a str)> Sink for Each<'a, F> {
    #[inline]
    fn member(&mut self, m: Member) {
        // The offsets come from the scanner on this very text and sit on
        // ASCII delimiters (quotes and value boundaries), so they are char
        // boundaries; `of` keeps this panic-free regardless.
        if let Some((key, value)) = m.of(self.text) {
            (self.f)(key, value);
        }
    }
}

/// Walks the top-level members of an event's JSON text in one pass, calling
/// `f(key, raw_value)` for each: the key's body as written (the scanner
/// only reads keys without escapes, so this is the key itself) and the
/// value's exact text.
///
/// Returns `false` when the one-pass scanner defers the text (see the
/// module's rules: an escaped key, a line break, a `\u` escape the
/// reference path must judge, ...) or the text is not a valid envelope; the
/// caller must then discard what `f` saw and read the text another way.
pub fn for_each_member<'a>(text: &'a str, f: impl FnMut(&'a str, &'a str)) -> bool {
    scan(text.as_bytes(), &mut Each { text, f }).is_some()
}

/// The scanner's grammar states.
#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    /// Right after `{`: a key or `}`.
    ObjectFirst,
    /// After `,` in an object: a key.
    ObjectKey,
    /// After a key: `:`.
    Colon,
    /// A value.
    Value,
    /// Right after `[`: a value or `]`.
    ArrayFirst,
    /// After a value: `,` or the container's closing bracket.
    After,
}

/// Eight copies of `b`.
const fn splat(b: u8) -> u64 {
    u64::from_ne_bytes([b; 8])
}

const LOW: u64 = splat(0x01);
const HIGH: u64 = splat(0x80);

/// The high bit of each of the eight bytes of `x` (read little-endian) that
/// is `"`, `\` or below 0x20, and maybe of bytes above such a byte (a
/// borrow only runs upwards). So the mask is zero exactly when no byte is
/// special, and its lowest set bit marks the first special byte.
#[inline(always)]
fn special_mask(x: u64) -> u64 {
    let quote = x ^ splat(b'"');
    let backslash = x ^ splat(b'\\');
    let zero = |v: u64| v.wrapping_sub(LOW) & !v & HIGH;
    let control = x.wrapping_sub(splat(0x20)) & !x & HIGH;
    zero(quote) | zero(backslash) | control
}

/// The offset of the first special byte of a string's content from `i` on,
/// sixteen bytes at a time where SSE2 is at hand (every x86-64 processor),
/// then eight at a time (or of the first of the last seven bytes, which the
/// caller reads one by one). The one loop of both string walks: the
/// validating scanner's and the member walk of already-valid text.
#[inline(always)]
pub(crate) fn skip_plain(text: &[u8], mut i: usize) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{
            _mm_cmpeq_epi8, _mm_loadu_si128, _mm_max_epu8, _mm_movemask_epi8, _mm_or_si128,
            _mm_set1_epi8,
        };
        while let Some(chunk) = text.get(i..i + 16) {
            // SAFETY: `chunk` is sixteen readable bytes (the `get` above
            // checked the range), and `_mm_loadu_si128` reads exactly
            // sixteen bytes from its pointer, with no alignment required.
            // The other calls only compute on registers; they are `unsafe`
            // because they need SSE2, which is part of the x86-64 baseline
            // (this block is compiled for x86-64 only), so every processor
            // this code runs on has it.
            let mask = unsafe {
                let x = _mm_loadu_si128(chunk.as_ptr().cast());
                let quote = _mm_cmpeq_epi8(x, _mm_set1_epi8(b'"' as i8));
                let backslash = _mm_cmpeq_epi8(x, _mm_set1_epi8(b'\\' as i8));
                // Below 0x20 exactly when the unsigned max with 0x1f is 0x1f.
                let low = _mm_set1_epi8(0x1f);
                let control = _mm_cmpeq_epi8(_mm_max_epu8(x, low), low);
                let special = _mm_or_si128(_mm_or_si128(quote, backslash), control);
                _mm_movemask_epi8(special) as u32
            };
            if mask != 0 {
                return Some(i + mask.trailing_zeros() as usize);
            }
            i += 16;
        }
    }
    while let Some(chunk) = text.get(i..i + 8) {
        let mask = special_mask(u64::from_le_bytes(chunk.try_into().ok()?));
        if mask != 0 {
            return Some(i + (mask.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    Some(i)
}

#[cfg(test)]
fn has_special(x: u64) -> bool {
    special_mask(x) != 0
}

/// Scans `text` (already trimmed of surrounding whitespace) as an event
/// envelope. `None`: take the reference path.
#[inline]
pub(crate) fn scan<S: Sink>(text: &[u8], sink: &mut S) -> Option<Scanned> {
    let (scanned, end) = scan_object(text, sink)?;
    (end == text.len()).then_some(scanned)
}

/// Scans the event envelope that starts `text` and returns where it ends
/// (the offset after its closing `}`), whatever follows. The scan never
/// reads past that `}`, so for `text[..end]` [`scan`] finds the same (and
/// records the same members). `None`: the text does not start with an
/// envelope this scanner accepts (take the reference path on the object's
/// exact text).
#[inline]
pub(crate) fn scan_object<S: Sink>(text: &[u8], sink: &mut S) -> Option<(Scanned, usize)> {
    let n = text.len();
    if n < 2 || text[0] != b'{' || n > u32::MAX as usize {
        return None;
    }
    let mut state = State::ObjectFirst;
    let mut i = 1;
    let mut ty: Option<(usize, usize)> = None;
    // The current top-level key, and whether it is `type`.
    let mut key = (0usize, 0usize);
    let mut key_is_type = false;
    loop {
        let c = next_token(text, &mut i)?;
        match state {
            State::ObjectFirst | State::ObjectKey => {
                if c == b'}' && state == State::ObjectFirst {
                    return finish(i + 1, ty);
                }
                if c != b'"' {
                    return None;
                }
                let start = i + 1;
                let (end, escaped) = string(text, start)?;
                if escaped || is_reserved(&text[start..end]) {
                    return None;
                }
                key = (start, end);
                key_is_type = &text[start..end] == b"type";
                i = end + 1;
                state = State::Colon;
            }
            State::Colon => {
                if c != b':' {
                    return None;
                }
                i += 1;
                state = State::Value;
            }
            State::Value | State::ArrayFirst => {
                let start = i;
                let mut plain = false;
                match c {
                    b'{' | b'[' => {
                        if key_is_type {
                            return None;
                        }
                        i = container_end(text, i + 1, c == b'{')?;
                    }
                    b'"' => {
                        let (end, escaped) = string(text, i + 1)?;
                        i = end + 1;
                        plain = !escaped;
                        if key_is_type {
                            if escaped || ty.is_some() {
                                return None;
                            }
                            ty = Some((start + 1, end));
                        }
                    }
                    b'-' | b'0'..=b'9' => i = number(text, i)?,
                    b't' => i = literal(text, i, b"true")?,
                    b'f' => i = literal(text, i, b"false")?,
                    b'n' => i = literal(text, i, b"null")?,
                    _ => return None,
                }
                if key_is_type && c != b'"' {
                    return None;
                }
                sink.member(member(key, (start, i), plain));
                state = State::After;
            }
            State::After => match c {
                b',' => {
                    i += 1;
                    state = State::ObjectKey;
                }
                b'}' => return finish(i + 1, ty),
                _ => return None,
            },
        }
    }
}

/// Skips insignificant whitespace and returns the next byte. A line break
/// sends the text to the reference path (which re-writes it on one line).
#[inline(always)]
fn next_token(text: &[u8], i: &mut usize) -> Option<u8> {
    loop {
        let c = *text.get(*i)?;
        match c {
            b' ' | b'\t' => *i += 1,
            b'\n' | b'\r' => return None,
            _ => return Some(c),
        }
    }
}

/// Scans the rest of a member's value, a container whose opening bracket
/// (`{` when `object`) ends right before `i`, and returns the offset after
/// its closing bracket. The same grammar as [`scan`], at depth 2 and below.
#[inline]
fn container_end(text: &[u8], mut i: usize, object: bool) -> Option<usize> {
    // Bit `d` of `objects` is set when the container at depth `d` (the event
    // object is depth 1) is an object.
    let mut objects: u128 = u128::from(object) << 2;
    let mut depth = 2usize;
    let mut state = if object {
        State::ObjectFirst
    } else {
        State::ArrayFirst
    };
    let (depth, objects, state) = (&mut depth, &mut objects, &mut state);
    loop {
        let c = next_token(text, &mut i)?;
        match *state {
            State::ObjectFirst | State::ObjectKey => {
                if c == b'}' && *state == State::ObjectFirst {
                    i += 1;
                    close(depth, state);
                    if *depth == 1 {
                        return Some(i);
                    }
                    continue;
                }
                if c != b'"' {
                    return None;
                }
                let (end, _) = string(text, i + 1)?;
                if is_reserved(&text[i + 1..end]) {
                    return None;
                }
                i = end + 1;
                *state = State::Colon;
            }
            State::Colon => {
                if c != b':' {
                    return None;
                }
                i += 1;
                *state = State::Value;
            }
            State::Value | State::ArrayFirst => {
                if c == b']' && *state == State::ArrayFirst {
                    i += 1;
                    close(depth, state);
                    if *depth == 1 {
                        return Some(i);
                    }
                    continue;
                }
                match c {
                    b'{' | b'[' => {
                        *depth += 1;
                        if *depth > MAX_DEPTH {
                            return None;
                        }
                        if c == b'{' {
                            *objects |= 1 << *depth;
                            *state = State::ObjectFirst;
                        } else {
                            *objects &= !(1 << *depth);
                            *state = State::ArrayFirst;
                        }
                        i += 1;
                        continue;
                    }
                    b'"' => i = string(text, i + 1)?.0 + 1,
                    b'-' | b'0'..=b'9' => i = number(text, i)?,
                    b't' => i = literal(text, i, b"true")?,
                    b'f' => i = literal(text, i, b"false")?,
                    b'n' => i = literal(text, i, b"null")?,
                    _ => return None,
                }
                *state = State::After;
            }
            State::After => {
                i += 1;
                let in_object = *objects & (1 << *depth) != 0;
                match (c, in_object) {
                    (b',', true) => *state = State::ObjectKey,
                    (b',', false) => *state = State::Value,
                    (b'}', true) | (b']', false) => {
                        close(depth, state);
                        if *depth == 1 {
                            return Some(i);
                        }
                    }
                    _ => return None,
                }
            }
        }
    }
}

/// True for a key whose body (as written) is the key the JSON library
/// reserves for its exact numbers. A body with escapes never decodes to it
/// unless an escape spells printable ASCII, which [`string`] defers: so
/// this test on the raw body is exact.
#[inline(always)]
fn is_reserved(body: &[u8]) -> bool {
    body.first() == Some(&b'$')
        && crate::event::RESERVED_KEYS
            .iter()
            .any(|key| body == key.as_bytes())
}

fn member(key: (usize, usize), value: (usize, usize), plain: bool) -> Member {
    // `scan` refuses text longer than u32::MAX bytes, so these fit.
    Member {
        key: (key.0 as u32, key.1 as u32),
        value: (value.0 as u32, value.1 as u32),
        plain,
    }
}

/// The verdict once the event object closed, right before `end`: it must
/// have had a `type` ([`scan`] also wants nothing after it).
#[inline]
fn finish(end: usize, ty: Option<(usize, usize)>) -> Option<(Scanned, usize)> {
    ty.map(|ty| (Scanned { ty }, end))
}

#[inline(always)]
fn close(depth: &mut usize, state: &mut State) {
    *depth -= 1;
    *state = State::After;
}

/// Scans a string body from `i` (after the opening quote). Returns the offset
/// of the closing quote and whether the body holds escapes. `None` for
/// invalid strings and for the escapes the reference path must judge: a
/// surrogate (`\uD800`-`\uDFFF`, maybe lone) or printable ASCII spelled as
/// `\u0020`-`\u007F` (maybe the reserved key in disguise).
#[inline(always)]
fn string(text: &[u8], mut i: usize) -> Option<(usize, bool)> {
    let mut escaped = false;
    loop {
        i = skip_plain(text, i)?;
        let c = *text.get(i)?;
        match c {
            b'"' => return Some((i, escaped)),
            b'\\' => {
                escaped = true;
                match *text.get(i + 1)? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => i += 2,
                    b'u' => {
                        let hex = text.get(i + 2..i + 6)?;
                        if !hex.iter().all(u8::is_ascii_hexdigit) {
                            return None;
                        }
                        let ascii =
                            hex[0] == b'0' && hex[1] == b'0' && matches!(hex[2], b'2'..=b'7');
                        let surrogate = matches!(hex[0], b'd' | b'D')
                            && matches!(hex[1], b'8'..=b'9' | b'a'..=b'f' | b'A'..=b'F');
                        if ascii || surrogate {
                            return None;
                        }
                        i += 6;
                    }
                    _ => return None,
                }
            }
            0x00..=0x1f => return None,
            _ => i += 1,
        }
    }
}

/// The offset of the first byte from `i` on that is not an ASCII digit
/// (or the text's end), eight bytes at a time: timestamps and ids run to a
/// dozen digits or more.
#[inline(always)]
pub(crate) fn skip_digits(text: &[u8], mut i: usize) -> usize {
    while let Some(chunk) = text.get(i..i + 8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        // Each byte minus '0' (as xor: a digit becomes 0 to 9, and only a
        // digit does so with its high nibble clear). A byte is not a digit
        // when that value has its high bit set, or reaches 0x80 once 0x76
        // is added (10 or more). An addition that carries out of a byte
        // starts from a byte that is not a digit, so it only spoils the
        // bytes above the first non-digit, and the lowest flag is exact.
        let v = u64::from_le_bytes(word) ^ splat(b'0');
        let not_digit = (v | v.wrapping_add(splat(0x76))) & HIGH;
        if not_digit != 0 {
            return i + (not_digit.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while text.get(i).is_some_and(u8::is_ascii_digit) {
        i += 1;
    }
    i
}

/// Scans a number from `i` by the JSON grammar; returns the offset after it.
#[inline]
fn number(text: &[u8], mut i: usize) -> Option<usize> {
    let digit = |i: usize| text.get(i).is_some_and(u8::is_ascii_digit);
    if text[i] == b'-' {
        i += 1;
    }
    match *text.get(i)? {
        b'0' => i += 1,
        b'1'..=b'9' => i = skip_digits(text, i + 1),
        _ => return None,
    }
    if text.get(i) == Some(&b'.') {
        i += 1;
        if !digit(i) {
            return None;
        }
        i = skip_digits(text, i);
    }
    if matches!(text.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(text.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if !digit(i) {
            return None;
        }
        i = skip_digits(text, i);
    }
    // A number runs into the next token only through a delimiter: `01` or
    // `1x` is invalid, which the grammar check after the value catches, but
    // a digit right after `0` must be refused here (`0` then `1` would read
    // as two values).
    if digit(i) {
        return None;
    }
    Some(i)
}

#[inline]
fn literal(text: &[u8], i: usize, word: &[u8]) -> Option<usize> {
    (text.get(i..i + word.len())? == word).then_some(i + word.len())
}

/// Walks the members of a JSON object whose text is already known to be
/// valid JSON (an [`Event`](crate::Event)'s text, or JSON this program
/// wrote), without checking the grammar again: strings are skipped to their
/// closing quote, containers by counting brackets outside strings, scalars
/// to the next delimiter. Calls `f(key, raw_value)` as [`for_each_member`]
/// does; returns `false` (and the caller reads the text another way) for a
/// key with escapes, whose body is not the key itself, and for text that is
/// not an object. On text that is not valid JSON it never panics, and what
/// it reports means nothing.
pub fn members_of_valid<'a>(text: &'a str, mut f: impl FnMut(&'a str, &'a str)) -> bool {
    let b = text.as_bytes();
    let start = skip_space(b, 0);
    let mut clean = true;
    let walked = object_walk(text, start, |key, value| match key {
        Ok(key) => f(key, value),
        Err(_) => clean = false,
    });
    // An escaped key ends the walk's claims.
    walked.is_some() && clean
}

/// Walks the object that starts at `text[i]` (valid JSON assumed): calls
/// `f(key, raw_value)` for each member, the key `Ok(body)` when written
/// without escapes and `Err(raw_body)` otherwise. Returns the offset right
/// after the closing brace; `None` when there is no object there (or the
/// text is not valid).
fn object_walk<'a>(
    text: &'a str,
    mut i: usize,
    mut f: impl FnMut(Result<&'a str, &'a str>, &'a str),
) -> Option<usize> {
    let b = text.as_bytes();
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    loop {
        i = skip_space(b, i);
        match b.get(i) {
            Some(b'"') => {}
            Some(b'}') => return Some(i + 1),
            _ => return None,
        }
        let key_start = i + 1;
        let (key_end, escaped) = string_end(b, key_start)?;
        i = skip_space(b, key_end + 1);
        if b.get(i) != Some(&b':') {
            return None;
        }
        let start = skip_space(b, i + 1);
        let end = value_end(b, start)?;
        // Every offset stands on an ASCII delimiter or the text's end, so
        // these are char boundaries; `get` keeps this panic-free anyway.
        let key = text.get(key_start..key_end)?;
        f(
            if escaped { Err(key) } else { Ok(key) },
            text.get(start..end)?,
        );
        i = skip_space(b, end);
        match b.get(i) {
            Some(b',') => i += 1,
            Some(b'}') => return Some(i + 1),
            _ => return None,
        }
    }
}

/// Walks the array that starts at `text[i]` (valid JSON assumed): `each`
/// gets each element's start offset and returns the offset right after it.
/// Returns the offset right after the closing bracket.
fn array_walk(text: &str, i: usize, mut each: impl FnMut(usize) -> Option<usize>) -> Option<usize> {
    let b = text.as_bytes();
    if b.get(i) != Some(&b'[') {
        return None;
    }
    let mut i = skip_space(b, i + 1);
    if b.get(i) == Some(&b']') {
        return Some(i + 1);
    }
    loop {
        let end = each(i)?;
        i = skip_space(b, end);
        match b.get(i) {
            Some(b',') => i = skip_space(b, i + 1),
            Some(b']') => return Some(i + 1),
            _ => return None,
        }
    }
}

/// Walks the elements of a JSON array whose text is already known to be
/// valid JSON, as [`members_of_valid`] walks an object's members: calls
/// `f(raw_element)` with each element's exact text, in order. Returns
/// `false` for text that is not an array (what `f` saw then means
/// nothing). On text that is not valid JSON it never panics.
pub fn elements_of_valid<'a>(text: &'a str, mut f: impl FnMut(&'a str)) -> bool {
    let b = text.as_bytes();
    array_walk(text, skip_space(b, 0), |start| {
        let end = value_end(b, start)?;
        f(text.get(start..end)?);
        Some(end)
    })
    .is_some()
}

/// Walks an array of objects in valid JSON text in one pass, reading one
/// member of each: calls `f(raw_element, raw_value_of_key)` for each
/// element, in order (`None` when the element is not an object or has no
/// such member; the last one when it has several, as `JSON.parse` reads
/// them). The array starts at `text`'s first non-blank byte; returns the
/// offset right after its closing bracket (text may follow). `None` when
/// there is no array there, or when an element has a key written with
/// escapes (which could be `key` in disguise): the caller then reads the
/// text another way. On text that is not valid JSON it never panics.
pub fn objects_of_valid<'a>(
    text: &'a str,
    key: &str,
    mut f: impl FnMut(&'a str, Option<&'a str>),
) -> Option<usize> {
    let b = text.as_bytes();
    array_walk(text, skip_space(b, 0), |start| {
        let mut found = None;
        let mut clean = true;
        let end = if b.get(start) == Some(&b'{') {
            object_walk(text, start, |k, v| match k {
                Ok(k) if k == key => found = Some(v),
                Ok(_) => {}
                Err(_) => clean = false,
            })?
        } else {
            value_end(b, start)?
        };
        if !clean {
            return None;
        }
        f(text.get(start..end)?, found);
        Some(end)
    })
}

/// The offset right after the JSON value that starts at `text`'s first
/// non-blank byte, in valid JSON text; `None` when there is none. Text may
/// follow the value.
pub fn value_end_of_valid(text: &str) -> Option<usize> {
    let b = text.as_bytes();
    value_end(b, skip_space(b, 0))
}

#[inline(always)]
fn skip_space(b: &[u8], mut i: usize) -> usize {
    while matches!(b.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// The offset of the quote that closes a string whose body starts at `i`,
/// and whether the body holds escapes (valid text assumed).
#[inline]
fn string_end(b: &[u8], mut i: usize) -> Option<(usize, bool)> {
    let mut escaped = false;
    loop {
        // In valid text the special byte is a quote or a backslash: strings
        // hold no control byte.
        i = skip_plain(b, i)?;
        match *b.get(i)? {
            b'"' => return Some((i, escaped)),
            b'\\' => {
                escaped = true;
                i += 2;
            }
            _ => i += 1,
        }
    }
}

/// The offset right after the value that starts at `i` (valid text assumed).
#[inline]
fn value_end(b: &[u8], i: usize) -> Option<usize> {
    match *b.get(i)? {
        b'"' => Some(string_end(b, i + 1)?.0 + 1),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            loop {
                match *b.get(j)? {
                    b'"' => j = string_end(b, j + 1)?.0,
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
        }
        _ => {
            let mut j = i;
            while !matches!(
                b.get(j),
                None | Some(b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
            ) {
                j += 1;
            }
            (j > i).then_some(j)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// `skip_digits` stops where a byte-by-byte walk stops, from every
        /// start, on bytes of every value (digits mostly, so that runs
        /// cross the eight-byte words).
        #[test]
        fn skip_digits_stops_at_the_first_non_digit(
            bytes in proptest::collection::vec(
                proptest::prop_oneof![8 => b'0'..=b'9', 1 => proptest::num::u8::ANY],
                0..40,
            ),
        ) {
            for start in 0..=bytes.len() {
                let mut walk = start;
                while bytes.get(walk).is_some_and(u8::is_ascii_digit) {
                    walk += 1;
                }
                proptest::prop_assert_eq!(skip_digits(&bytes, start), walk);
            }
        }
    }

    #[test]
    fn skip_digits_at_every_byte_value() {
        // Each value after seven digits, then after fifteen: the lane that
        // decides is the last of the first word, then of the second.
        for b in 0..=255u8 {
            for run in [7, 15] {
                let mut text = vec![b'7'; run];
                text.push(b);
                text.extend_from_slice(b"0000000");
                let expected = if b.is_ascii_digit() { text.len() } else { run };
                assert_eq!(
                    skip_digits(&text, 0),
                    expected,
                    "byte {b:#x} after {run} digits"
                );
            }
        }
    }

    fn ty(text: &str) -> Option<&str> {
        scan(text.as_bytes(), &mut ()).map(|s| &text[s.ty.0..s.ty.1])
    }

    #[test]
    fn accepts_plain_events() {
        assert_eq!(ty(r#"{"type":"A"}"#), Some("A"));
        assert_eq!(
            ty(r#"{ "a" : [1, -0.5e+3, {"b": [true, false, null]}], "type" : "B\u00e9\n" }"#),
            None, // the type has an escape: reference path
        );
        assert_eq!(
            ty(r#"{"a":[1,-0.5e+3,{"b":[true,false,null,"x\"y\u00e9"]}],"type":"B","c":{}}"#),
            Some("B")
        );
        assert_eq!(ty(r#"{"type":"A","x":[],"y":{},"z":""}"#), Some("A"));
    }

    #[test]
    fn marks_the_string_values_written_without_escapes() {
        let text = r#"{"type":"A","a":"x","b":"x\"y","c":"\u00e9","d":1,"e":"","f":["s"],"g":{"h":"s"},"i":null,"j":"café\/"}"#;
        let mut members = Vec::new();
        scan(text.as_bytes(), &mut members).unwrap();
        let plain: Vec<(&str, bool)> = members
            .iter()
            .map(|m| (&text[m.key.0 as usize..m.key.1 as usize], m.plain))
            .collect();
        assert_eq!(
            plain,
            [
                ("type", true),
                ("a", true),
                ("b", false),
                ("c", false),
                ("d", false),
                ("e", true),
                ("f", false),
                ("g", false),
                ("i", false),
                ("j", false),
            ]
        );
    }

    #[test]
    fn records_top_level_members() {
        let text = r#"{"type":"A","x":[1,{"k":2}],"y":"s\"","z":null}"#;
        let mut members = Vec::new();
        scan(text.as_bytes(), &mut members).unwrap();
        let got: Vec<(&str, &str)> = members
            .iter()
            .map(|m| {
                (
                    &text[m.key.0 as usize..m.key.1 as usize],
                    &text[m.value.0 as usize..m.value.1 as usize],
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("type", r#""A""#),
                ("x", r#"[1,{"k":2}]"#),
                ("y", r#""s\"""#),
                ("z", "null")
            ]
        );
    }

    #[test]
    fn refuses_or_defers_everything_else() {
        for text in [
            "",
            "{}",
            "[]",
            r#"{"type":1}"#,
            r#"{"type":"A","type":"A"}"#,
            r#"{"type":"A",}"#,
            r#"{"type":"A" "b":1}"#,
            r#"{"type":"A","b":01}"#,
            r#"{"type":"A","b":1.}"#,
            r#"{"type":"A","b":-}"#,
            r#"{"type":"A","b":1e}"#,
            r#"{"type":"A","b":.5}"#,
            r#"{"type":"A","b":+1}"#,
            r#"{"type":"A","b":tru}"#,
            r#"{"type":"A","b":[1,]}"#,
            r#"{"type":"A","b":[1 2]}"#,
            r#"{"type":"A","b":{"c"}}"#,
            r#"{"type":"A","b":{"c":1,}}"#,
            r#"{"type":"A","b":"\x"}"#,
            r#"{"type":"A","b":"\u12"}"#,
            r#"{"type":"A","b":"\ud800"}"#,
            r#"{"type":"A","b":"\u0041"}"#,
            r#"{"type":"A","\u00e9":1}"#,
            "{\"type\":\"A\",\"b\":\"\t\"}",
            "{\"type\":\"A\",\n\"b\":1}",
            r#"{"type":"A"}}"#,
            r#"{"type":"A","b":[}"#,
            r#"{"type":"A","b":{]}"#,
            r#"{"type":"A","b":"unterminated}"#,
            r#"{"type":["A"]}"#,
        ] {
            assert_eq!(ty(text), None, "{text}");
        }
    }

    #[test]
    fn the_reserved_key_is_deferred_wherever_it_stands_and_only_as_a_key() {
        for text in [
            r#"{"type":"A","$serde_json::private::Number":"1"}"#,
            r#"{"type":"A","b":{"$serde_json::private::Number":"1"}}"#,
            r#"{"type":"A","b":[{"c":{"$serde_json::private::Number":"1"}}]}"#,
            r#"{"type":"A","b":{"\u0024serde_json::private::Number":"1"}}"#,
        ] {
            assert_eq!(ty(text), None, "{text}");
        }
        for text in [
            r#"{"type":"A","b":"$serde_json::private::Number"}"#,
            r#"{"type":"A","b":{"$schema":"x","$ref":"y"}}"#,
            r#"{"type":"A","$serde_json::private::Numbers":1}"#,
        ] {
            assert_eq!(ty(text), Some("A"), "{text}");
        }
    }

    #[test]
    fn depth_beyond_the_limit_is_deferred() {
        let nested = |levels: usize| {
            let inner = "[".repeat(levels - 1) + &"]".repeat(levels - 1);
            format!(r#"{{"type":"RAW","event":{inner}}}"#)
        };
        assert_eq!(ty(&nested(MAX_DEPTH)), Some("RAW"));
        assert_eq!(ty(&nested(MAX_DEPTH + 1)), None);
    }

    #[test]
    fn the_word_check_finds_each_special_byte_in_every_lane() {
        for lane in 0..8 {
            for special in [b'"', b'\\', 0x00, 0x1f] {
                let mut bytes = [b'a'; 8];
                bytes[lane] = special;
                assert!(has_special(u64::from_ne_bytes(bytes)), "{lane} {special}");
            }
            let mut bytes = [0xffu8; 8];
            bytes[lane] = b' ';
            assert!(!has_special(u64::from_ne_bytes(bytes)));
        }
        assert!(!has_special(u64::from_ne_bytes(*b"abc~\x7f\x80\xff ")));
    }

    /// The wide loop and the eight-byte loop find the first special byte
    /// at every offset, before every kind of neighbour (plain ASCII, bytes
    /// above 0x7f that a signed compare would take for controls, the
    /// boundary bytes 0x1f and 0x20), and stop short of the last bytes
    /// exactly as the byte-by-byte reading after them expects.
    #[test]
    fn skip_plain_stops_at_the_first_special_byte() {
        let special = |b: u8| b == b'"' || b == b'\\' || b < 0x20;
        for len in 0..48usize {
            for fill in [b'a', 0x80, 0xff, 0x20, b'!'] {
                for at in 0..=len {
                    for s in [b'"', b'\\', 0x00, 0x1f, 0x0a] {
                        let mut text = vec![fill; len];
                        if at < len {
                            text[at] = s;
                        }
                        for from in 0..=len.min(3) {
                            let found = skip_plain(&text, from).unwrap();
                            let first = (from..len).find(|&k| special(text[k]));
                            match first {
                                // Found exactly, or left for the byte loop
                                // (fewer than eight bytes from `found` on).
                                Some(k) => assert!(
                                    found == k || (found < k && len - found < 8),
                                    "len {len} fill {fill} at {at} from {from}: {found}"
                                ),
                                None => assert!(found <= len && len - found < 8),
                            }
                            assert!(found >= from);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn the_mask_marks_the_first_special_byte_exactly() {
        // Every lane for the first hit, with every kind of byte after it
        // (a borrow from the hit may mark later lanes, never earlier ones).
        for first in 0..8 {
            for special in [b'"', b'\\', 0x00, 0x1f] {
                for after in [b'"', b'\\', 0x00, 0x01, 0x20, 0x21, b'a', 0xff] {
                    let mut bytes = [b'a'; 8];
                    bytes[first] = special;
                    for b in &mut bytes[first + 1..] {
                        *b = after;
                    }
                    let mask = special_mask(u64::from_le_bytes(bytes));
                    assert_eq!(mask.trailing_zeros() / 8, first as u32, "{bytes:?}");
                }
            }
        }
    }

    #[test]
    fn the_unchecked_walk_finds_what_the_scanner_finds() {
        let texts = [
            r#"{"type":"A"}"#,
            r#"{}"#,
            r#"{ "type" : "A" , "n" : -1.5e+3 , "s" : "x\"}{[" , "o" : { "a" : [ 1 , { "b" : "]" } ] } , "t" : true , "z" : null }"#,
            r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"h\u00e9llo \\ \n"}"#,
            r#"{"a":[],"b":{},"c":"","type":"B","d":[[[]]]}"#,
        ];
        for text in texts {
            let mut scanned = Vec::new();
            let mut walked = Vec::new();
            let ok = for_each_member(text, |k, v| scanned.push((k, v)));
            assert!(ok || text == "{}", "{text}");
            assert!(members_of_valid(text, |k, v| walked.push((k, v))), "{text}");
            assert_eq!(walked, scanned, "{text}");
        }
        // An escaped key: the caller reads the text another way.
        assert!(!members_of_valid(r#"{"typ\u0065":"A"}"#, |_, _| {}));
        // Not an object, or not valid: no panic, and no claim.
        for text in [
            "",
            "[1]",
            "{",
            r#"{"a""#,
            r#"{"a":"#,
            r#"{"a":1"#,
            r#"{"a":[1"#,
            r#"{"a":"x"#,
            "{\"a\":1,",
        ] {
            let _ = members_of_valid(text, |_, _| {});
        }
        assert!(!members_of_valid("[1]", |_, _| {}));
    }

    #[test]
    fn the_element_walk_finds_what_serde_finds() {
        let texts = [
            "[]",
            " [ ] ",
            "[1]",
            r#"[{"id":"a","content":"x]\"}["},[1,[2]],"s",-0.5e+3,true,null,{}]"#,
            " [ { \"a\" : [ ] } , \"\\u00e9\" , 7 ] ",
            r#"[[[]],[{}],"]","["]"#,
        ];
        for text in texts {
            let want: Vec<&serde_json::value::RawValue> = serde_json::from_str(text).unwrap();
            let want: Vec<&str> = want.iter().map(|r| r.get()).collect();
            let mut got = Vec::new();
            assert!(elements_of_valid(text, |e| got.push(e)), "{text}");
            assert_eq!(got, want, "{text}");
        }
        assert!(!elements_of_valid(r#"{"a":1}"#, |_| {}));
        for text in ["", "[", "[1", "[1,", r#"["x"#, "[{]", "[1 2]", "[,]"] {
            let _ = elements_of_valid(text, |_| {});
        }
        assert!(!elements_of_valid("[1", |_| {}));
        assert!(!elements_of_valid("[1 2]", |_| {}));
    }

    #[test]
    fn the_object_walk_reads_one_member_of_each_element() {
        let text = r#" [ {"id":"a","x":"}"} , 3 , {"x":[{"id":"no"}]} , {"id":1,"id":"last"} ] ,"tail":1}"#;
        let mut got = Vec::new();
        let end = objects_of_valid(text, "id", |e, v| got.push((e, v))).unwrap();
        assert_eq!(&text[end..], r#" ,"tail":1}"#);
        assert_eq!(
            got,
            [
                (r#"{"id":"a","x":"}"}"#, Some(r#""a""#)),
                ("3", None),
                (r#"{"x":[{"id":"no"}]}"#, None),
                (r#"{"id":1,"id":"last"}"#, Some(r#""last""#)),
            ]
        );
        assert_eq!(objects_of_valid("[]", "id", |_, _| {}), Some(2));
        // An escaped key could be the one asked for: no claim.
        assert_eq!(
            objects_of_valid(r#"[{"\u0069d":"a"}]"#, "id", |_, _| {}),
            None
        );
        assert_eq!(objects_of_valid(r#"{"id":1}"#, "id", |_, _| {}), None);
        for text in ["[", "[{", r#"[{"id""#, r#"[{"id":"#, "[{}", "[{},"] {
            assert_eq!(objects_of_valid(text, "id", |_, _| {}), None, "{text}");
        }
        assert_eq!(value_end_of_valid(r#" {"a":[1,"]"]} ,x"#), Some(14));
        assert_eq!(value_end_of_valid("  "), None);
    }
}
