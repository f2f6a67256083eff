//! A scanner for AG-UI events: one pass over a JSON object that checks it as `serde_json` does and
//! takes the spans of the five top-level members the classifier reads, without `serde_json`'s
//! visitor machinery. It answers only when it is sure; anything it does not handle (a control
//! byte anywhere, an escaped top-level key, a known key twice, nesting deeper than 128, invalid
//! JSON) is left to the `serde_json` path, which stays the reference (see `agui/tests.rs` and the
//! `agui_scan` fuzz target, which check that both agree).

use std::ops::Range;

/// The spans of the top-level members the AG-UI classifier reads, each the whole value (a string
/// with its quotes, as `serde_json`'s `RawValue` borrows it); `None` when absent or `null`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Members {
    /// `type`.
    pub ty: Option<Range<usize>>,
    /// `messageId`.
    pub message_id: Option<Range<usize>>,
    /// `toolCallId`.
    pub tool_call_id: Option<Range<usize>>,
    /// `delta`.
    pub delta: Option<Range<usize>>,
    /// `name`.
    pub name: Option<Range<usize>>,
}

/// Bytes of a string searched a word at a time before `memchr` takes over.
const SHORT: usize = 32;

/// `1` in every byte of a word.
const ONES: u64 = 0x0101_0101_0101_0101;
/// `"` in every byte of a word.
const QUOTES: u64 = ONES * b'"' as u64;
/// `\` in every byte of a word.
const BACKSLASHES: u64 = ONES * b'\\' as u64;

/// The high bit of each zero byte of `v` (and possibly of bytes above the lowest zero byte).
#[inline(always)]
fn zero(v: u64) -> u64 {
    v.wrapping_sub(ONES) & !v & 0x8080_8080_8080_8080
}

/// Deepest nesting the scanner follows (a bit a level); deeper values go to `serde_json`.
const MAX_DEPTH: u32 = 128;

/// The members of `data`, one JSON object (JSON whitespace around it), when the scanner is sure
/// `serde_json` would read the same; `None` when it is not (the caller asks `serde_json`).
pub fn scan(data: &[u8]) -> Option<Members> {
    // A control byte is whitespace between tokens or an error in a string: left to `serde_json`
    // (one line of SSE data holds none), so strings need look only for quotes and escapes.
    if data.iter().fold(false, |any, &b| any | (b < 0x20)) {
        return None;
    }
    let mut c = Cursor { d: data, i: 0 };
    c.ws();
    c.eat(b'{')?;
    let mut m = Members::default();
    let mut seen = 0u8;
    c.ws();
    if c.peek()? == b'}' {
        c.i += 1;
    } else {
        loop {
            c.ws();
            let (key, escaped) = c.key()?;
            // `serde_json` matches a field's name after unescaping it: its path reads this one.
            if escaped {
                return None;
            }
            c.ws();
            let start = c.i;
            // A string or a number directly; anything else (nesting) by the general walk.
            match c.peek()? {
                b'"' => {
                    c.string()?;
                }
                b'-' | b'0'..=b'9' => c.number()?,
                _ => c.value()?,
            }
            let slot = match &data[key] {
                b"type" => Some((1, &mut m.ty)),
                b"messageId" => Some((2, &mut m.message_id)),
                b"toolCallId" => Some((4, &mut m.tool_call_id)),
                b"delta" => Some((8, &mut m.delta)),
                b"name" => Some((16, &mut m.name)),
                _ => None,
            };
            if let Some((bit, slot)) = slot {
                // `serde_json` refuses a duplicate field: its path decides what that becomes.
                if seen & bit != 0 {
                    return None;
                }
                seen |= bit;
                if &data[start..c.i] != b"null" {
                    *slot = Some(start..c.i);
                }
            }
            c.ws();
            match c.peek()? {
                b',' => c.i += 1,
                b'}' => {
                    c.i += 1;
                    break;
                }
                _ => return None,
            }
        }
    }
    c.ws();
    (c.i == data.len()).then_some(m)
}

/// A position in the bytes being scanned.
struct Cursor<'a> {
    d: &'a [u8],
    i: usize,
}

impl Cursor<'_> {
    #[inline(always)]
    fn peek(&self) -> Option<u8> {
        self.d.get(self.i).copied()
    }

    #[inline(always)]
    fn eat(&mut self, b: u8) -> Option<()> {
        (self.peek()? == b).then(|| self.i += 1)
    }

    /// Skips JSON whitespace (space, tab, LF, CR: not form feed).
    #[inline(always)]
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.i += 1;
        }
    }

    /// An object key and its colon: the span of the key's raw contents, and whether it held an
    /// escape.
    fn key(&mut self) -> Option<(Range<usize>, bool)> {
        let start = self.i + 1;
        let escaped = self.string()?;
        let end = self.i - 1;
        self.ws();
        self.eat(b':')?;
        Some((start..end, escaped))
    }

    /// A string literal from its opening quote, checked as `serde_json` skips one (escapes
    /// `\" \\ \/ \b \f \n \r \t \uXXXX`; surrogates unchecked; control bytes were refused by
    /// [`scan`] before): whether it held an escape.
    #[inline(always)]
    fn string(&mut self) -> Option<bool> {
        let d = self.d;
        self.eat(b'"')?;
        let mut i = self.i;
        let mut escaped = false;
        loop {
            // Eight bytes at a time: the lowest byte flagged in a word is the first quote or
            // backslash (the flag's false hits lie only above a true one); `memchr` past
            // [`SHORT`] bytes, a byte at a time in the input's last bytes.
            let start = i;
            loop {
                let Some(w) = d.get(i..i + 8) else {
                    while d.get(i).is_some_and(|&b| b != b'"' && b != b'\\') {
                        i += 1;
                    }
                    break;
                };
                let w = u64::from_le_bytes(w.try_into().ok()?);
                let hits = zero(w ^ QUOTES) | zero(w ^ BACKSLASHES);
                if hits != 0 {
                    i += (hits.trailing_zeros() / 8) as usize;
                    break;
                }
                i += 8;
                if i - start >= SHORT {
                    i += memchr::memchr2(b'"', b'\\', d.get(i..)?)?;
                    break;
                }
            }
            self.i = i + 1;
            if *d.get(i)? == b'"' {
                return Some(escaped);
            }
            escaped = true;
            self.escape()?;
            i = self.i;
        }
    }

    /// The rest of an escape after its backslash: one of `"\\/bfnrt`, or `u` and four hex digits.
    fn escape(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.i += 1,
            b'u' => {
                let hex = self.d.get(self.i + 1..self.i + 5)?;
                if !hex.iter().all(u8::is_ascii_hexdigit) {
                    return None;
                }
                self.i += 5;
            }
            _ => return None,
        }
        Some(())
    }

    /// Digits; how many.
    #[inline(always)]
    fn digits(&mut self) -> usize {
        let start = self.i;
        let n = self.d[start.min(self.d.len())..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        self.i += n;
        n
    }

    /// A number: `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`.
    fn number(&mut self) -> Option<()> {
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.peek()? {
            b'0' => {
                self.i += 1;
                if let Some(b'0'..=b'9') = self.peek() {
                    return None;
                }
            }
            b'1'..=b'9' => {
                self.digits();
            }
            _ => return None,
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            if self.digits() == 0 {
                return None;
            }
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.i += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.i += 1;
            }
            if self.digits() == 0 {
                return None;
            }
        }
        Some(())
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.i + word.len();
        (self.d.get(self.i..end)? == word).then(|| self.i = end)
    }

    /// One value of any kind (nested to [`MAX_DEPTH`]), from its first byte.
    fn value(&mut self) -> Option<()> {
        // One bit a level of nesting: 1 an object, 0 an array.
        let mut stack: u128 = 0;
        let mut depth = 0u32;
        loop {
            self.ws();
            let b = self.peek()?;
            let mut opened = false;
            match b {
                b'{' | b'[' => {
                    if depth == MAX_DEPTH {
                        return None;
                    }
                    self.i += 1;
                    stack = (stack << 1) | u128::from(b == b'{');
                    depth += 1;
                    self.ws();
                    if self.peek()? == b + 2 {
                        // `{}` or `[]` (`}` and `]` are two above their openers).
                        self.i += 1;
                        stack >>= 1;
                        depth -= 1;
                    } else {
                        opened = true;
                        if b == b'{' {
                            self.key()?;
                        }
                    }
                }
                b'"' => {
                    self.string()?;
                }
                b'-' | b'0'..=b'9' => self.number()?,
                b't' => self.literal(b"true")?,
                b'f' => self.literal(b"false")?,
                b'n' => self.literal(b"null")?,
                _ => return None,
            }
            if opened {
                continue;
            }
            // After a value: close containers, or take the comma before the next value.
            loop {
                if depth == 0 {
                    return Some(());
                }
                self.ws();
                let object = stack & 1 == 1;
                match self.peek()? {
                    b',' => {
                        self.i += 1;
                        if object {
                            self.ws();
                            self.key()?;
                        }
                        break;
                    }
                    b'}' if object => {}
                    b']' if !object => {}
                    _ => return None,
                }
                self.i += 1;
                stack >>= 1;
                depth -= 1;
            }
        }
    }
}
