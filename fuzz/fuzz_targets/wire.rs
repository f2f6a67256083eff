//! Fuzzes the backend response reader (`tether::backend::wire`): response heads (1xx skipped),
//! framing, the body decoder (length, chunked with trailers, close-delimited) and the
//! reusability verdict, fed in arbitrary pieces, against `httparse` on the whole input and a
//! straightforward reference body decoder written here.
//!
//! Input: one flags byte (bit 0: the request was a `HEAD`), one seed byte for the split
//! points, then the bytes the backend sent.

#![no_main]

use bytes::{Buf, BytesMut};
use libfuzzer_sys::fuzz_target;
use tether::backend::wire::{self, BodyDecoder, Framing, Step, WireError, MAX_HEAD};

/// The read sizes the driver hands the decoder, from a seed (a tiny xorshift).
struct Splits(u32);

impl Splits {
    fn next(&mut self, left: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 17;
        self.0 ^= self.0 << 5;
        let n = match self.0 % 4 {
            0 => 1,
            1 => (self.0 >> 8) as usize % 8 + 1,
            2 => (self.0 >> 8) as usize % 64 + 1,
            _ => left,
        };
        n.clamp(1, left.max(1))
    }
}

/// How a read ended, coarsely: the kinds both decoders can tell apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// The body ended where its framing says.
    Done,
    /// The connection closed early.
    Truncated,
    /// The bytes are not HTTP/1.1 as tether reads it.
    Bad,
}

/// The head as httparse sees it, the parts the oracle compares.
#[derive(Debug)]
struct RefHead {
    code: u16,
    version: u8,
    headers: Vec<(String, Vec<u8>)>,
}

/// Whitespace and the bytes a header value normalization turns into spaces, collapsed, so
/// obs-fold and stray CR/LF compare equal however they were rewritten.
fn squash(v: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len());
    for &b in v {
        let ws = matches!(b, b' ' | b'\t' | b'\r' | b'\n' | 0);
        if ws {
            if out.last() != Some(&b' ') {
                out.push(b' ');
            }
        } else {
            out.push(b);
        }
    }
    while out.last() == Some(&b' ') {
        out.pop();
    }
    if out.first() == Some(&b' ') {
        out.remove(0);
    }
    out
}

/// httparse, as tether configures it, over the start of `s`.
fn ref_head(s: &[u8]) -> Result<Option<(RefHead, usize)>, ()> {
    let mut slots = [httparse::EMPTY_HEADER; 256];
    let mut resp = httparse::Response::new(&mut slots);
    let mut config = httparse::ParserConfig::default();
    config.allow_spaces_after_header_name_in_responses(true);
    config.allow_obsolete_multiline_headers_in_responses(true);
    match config.parse_response(&mut resp, s) {
        Ok(httparse::Status::Complete(len)) if len <= MAX_HEAD => Ok(Some((
            RefHead {
                code: resp.code.unwrap_or(0),
                version: resp.version.unwrap_or(9),
                headers: resp
                    .headers
                    .iter()
                    .map(|h| (h.name.to_ascii_lowercase(), h.value.to_vec()))
                    .collect(),
            },
            len,
        ))),
        Ok(httparse::Status::Partial) if s.len() < MAX_HEAD => Ok(None),
        _ => Err(()),
    }
}

impl RefHead {
    /// The values of a header, normalized as a header value is (CR, LF, NUL as spaces), and
    /// only those `HeaderValue::to_str` accepts (visible ASCII and tabs).
    fn text_values(&self, name: &str) -> Vec<Option<String>> {
        self.headers
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| {
                let v: Vec<u8> = v
                    .iter()
                    .map(|&b| {
                        if matches!(b, b'\r' | b'\n' | 0) {
                            b' '
                        } else {
                            b
                        }
                    })
                    .collect();
                v.iter()
                    .all(|&b| b == b'\t' || (0x20..0x7f).contains(&b))
                    .then(|| String::from_utf8(v).unwrap_or_default())
            })
            .collect()
    }

    fn has(&self, name: &str) -> bool {
        self.headers.iter().any(|(n, _)| n == name)
    }

    /// RFC 9112 §6.3, as tether reads it.
    fn framing(&self, head: bool) -> Result<Framing, ()> {
        if head || self.code == 204 || self.code == 304 {
            return Ok(Framing::Length(0));
        }
        if self.has("transfer-encoding") {
            let mut last = None;
            for v in self.text_values("transfer-encoding").into_iter().flatten() {
                for t in v.split(',') {
                    let t = t.trim();
                    if !t.is_empty() {
                        last = Some(t.to_ascii_lowercase());
                    }
                }
            }
            return Ok(match last.as_deref() {
                Some("chunked") => Framing::Chunked,
                _ => Framing::Close,
            });
        }
        let mut length: Option<u64> = None;
        for v in self.text_values("content-length") {
            let v = v.ok_or(())?;
            for part in v.split(',') {
                let part = part.trim();
                if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(());
                }
                let n: u64 = part.parse().map_err(|_| ())?;
                if length.is_some_and(|l| l != n) {
                    return Err(());
                }
                length = Some(n);
            }
        }
        Ok(length.map_or(Framing::Close, Framing::Length))
    }

    /// Whether the connection may carry another request after this answer's body.
    fn reusable(&self, head: bool, framing: Framing) -> bool {
        let token = |t: &str| {
            self.text_values("connection")
                .into_iter()
                .flatten()
                .any(|v| v.split(',').any(|x| x.trim().eq_ignore_ascii_case(t)))
        };
        let alive = match self.version {
            1 => !token("close"),
            0 => token("keep-alive") && !token("close"),
            _ => false,
        };
        let coded = self.has("transfer-encoding");
        let doubt = head
            || self.code == 204
            || self.code == 304
            || (coded && self.has("content-length"))
            || (coded && self.version != 1);
        alive && framing != Framing::Close && !doubt
    }
}

/// A CRLF-ended line at the start of `s` of at most `max` bytes (CRLF included): its length.
fn ref_line(s: &[u8], max: usize) -> Result<usize, Verdict> {
    for (i, &b) in s.iter().enumerate() {
        if i >= max {
            return Err(Verdict::Bad);
        }
        if b == b'\n' {
            return if i > 0 && s[i - 1] == b'\r' {
                Ok(i + 1)
            } else {
                Err(Verdict::Bad)
            };
        }
    }
    if s.len() >= max {
        Err(Verdict::Bad)
    } else {
        Err(Verdict::Truncated)
    }
}

/// `hex *(SP / HTAB) [";" extensions]`, extensions without control bytes but HTAB.
fn ref_chunk_size(line: &[u8]) -> Option<u64> {
    let mut i = 0;
    let mut size: u64 = 0;
    while i < line.len() && line[i].is_ascii_hexdigit() {
        let d = (line[i] as char).to_digit(16)? as u64;
        size = size.checked_mul(16)?.checked_add(d)?;
        i += 1;
    }
    if i == 0 {
        return None;
    }
    while i < line.len() && (line[i] == b' ' || line[i] == b'\t') {
        i += 1;
    }
    if i == line.len() {
        return Some(size);
    }
    if line[i] != b';' {
        return None;
    }
    line[i..]
        .iter()
        .all(|&b| b == b'\t' || (b >= 0x20 && b != 0x7f))
        .then_some(size)
}

/// The reference body decoder over everything after the head: the body bytes, the verdict,
/// and how many bytes the body took.
fn ref_body(s: &[u8], framing: Framing) -> (Vec<u8>, Verdict, usize) {
    match framing {
        Framing::Close => (s.to_vec(), Verdict::Done, s.len()),
        Framing::Length(n) => {
            if (s.len() as u64) < n {
                (s.to_vec(), Verdict::Truncated, s.len())
            } else {
                (s[..n as usize].to_vec(), Verdict::Done, n as usize)
            }
        }
        Framing::Chunked => {
            let mut out = Vec::new();
            let mut at = 0;
            loop {
                let len = match ref_line(&s[at..], 4096) {
                    Ok(l) => l,
                    Err(v) => return (out, v, at),
                };
                let Some(size) = ref_chunk_size(&s[at..at + len - 2]) else {
                    return (out, Verdict::Bad, at);
                };
                at += len;
                if size == 0 {
                    break;
                }
                let have = (s.len() - at) as u64;
                if have < size {
                    out.extend_from_slice(&s[at..]);
                    return (out, Verdict::Truncated, s.len());
                }
                out.extend_from_slice(&s[at..at + size as usize]);
                at += size as usize;
                let end = &s[at..s.len().min(at + 2)];
                if !b"\r\n".starts_with(end) {
                    return (out, Verdict::Bad, at);
                }
                if end.len() < 2 {
                    return (out, Verdict::Truncated, s.len());
                }
                at += 2;
            }
            let mut seen = 0;
            loop {
                let len = match ref_line(&s[at..], 64 * 1024 - seen) {
                    Ok(l) => l,
                    Err(v) => return (out, v, at),
                };
                if len == 2 {
                    return (out, Verdict::Done, at + 2);
                }
                if !s[at..at + len].contains(&b':') {
                    return (out, Verdict::Bad, at);
                }
                seen += len;
                at += len;
            }
        }
    }
}

fn verdict(e: &WireError) -> Verdict {
    match e {
        WireError::Truncated(_) => Verdict::Truncated,
        _ => Verdict::Bad,
    }
}

fuzz_target!(|input: &[u8]| {
    let [flags, seed, stream @ ..] = input else {
        return;
    };
    let head_req = flags & 1 == 1;
    let method = if head_req {
        http::Method::HEAD
    } else {
        http::Method::POST
    };
    let mut splits = Splits(u32::from(*seed).wrapping_mul(0x9E37_79B9) | 1);

    // Reference: httparse over the whole input, 1xx heads skipped.
    let mut at = 0;
    let ref_final = loop {
        match ref_head(&stream[at..]) {
            Ok(Some((h, len))) => {
                at += len;
                match h.code {
                    101 => break Err(()),
                    100..=199 => continue,
                    _ => break Ok(Some(h)),
                }
            }
            Ok(None) => break Ok(None),
            Err(()) => break Err(()),
        }
    };

    // tether: the same bytes in pieces, reading more only when asked.
    let mut fed = 0;
    let mut buf = BytesMut::new();
    let mut feed = |buf: &mut BytesMut| -> bool {
        if fed == stream.len() {
            return false;
        }
        let n = splits.next(stream.len() - fed);
        buf.extend_from_slice(&stream[fed..fed + n]);
        fed += n;
        true
    };
    let got = loop {
        match wire::parse_head(&buf) {
            Ok(Some((h, len))) => {
                assert!(len <= buf.len());
                buf.advance(len);
                match h.status.as_u16() {
                    101 => break Err(None),
                    100..=199 => continue,
                    _ => break Ok(Some(h)),
                }
            }
            Ok(None) => {
                if !feed(&mut buf) {
                    break Ok(None);
                }
            }
            Err(e) => break Err(Some(e)),
        }
    };

    let (h, rh) = match (got, ref_final) {
        (Ok(Some(h)), Ok(Some(rh))) => (h, rh),
        (Ok(None), Ok(None)) | (Err(None), Err(())) => return,
        // tether refuses what httparse parsed: only for a status http cannot hold.
        (Err(Some(WireError::Invalid(why))), Ok(Some(rh))) => {
            assert!(rh.code < 100, "{why}: {rh:?}");
            return;
        }
        (Err(Some(WireError::Invalid(_))), Err(())) => return,
        (Err(Some(WireError::Head(_) | WireError::HeadTooLarge)), Err(())) => return,
        (got, want) => panic!("head: tether {got:?}, httparse {want:?}"),
    };

    // The head: the same status, version and fields.
    assert_eq!(h.status.as_u16(), rh.code);
    let version = match h.version {
        http::Version::HTTP_11 => 1,
        http::Version::HTTP_10 => 0,
        _ => 9,
    };
    assert_eq!(version, rh.version);
    let fields: Vec<(String, Vec<u8>)> = h
        .headers
        .iter()
        .map(|(n, v)| (n.as_str().to_string(), squash(v.as_bytes())))
        .collect();
    let mut want: Vec<(String, Vec<u8>)> = rh
        .headers
        .iter()
        .map(|(n, v)| (n.clone(), squash(v)))
        .collect();
    let mut sorted = fields.clone();
    sorted.sort();
    want.sort();
    assert_eq!(sorted, want, "header fields");

    // The framing and the reuse verdict.
    let framing = wire::framing(&h, &method);
    let ref_framing = rh.framing(head_req);
    assert_eq!(framing.as_ref().ok(), ref_framing.as_ref().ok(), "framing");
    let Ok(framing) = framing else { return };
    let reusable =
        wire::keeps_alive(&h) && framing != Framing::Close && !wire::framing_in_doubt(&h, &method);
    assert_eq!(reusable, rh.reusable(head_req, framing), "reusable");

    // The body.
    let (ref_data, ref_verdict, used) = ref_body(&stream[at..], framing);
    let mut dec = BodyDecoder::new(framing);
    let mut data = Vec::new();
    let verdict = loop {
        match dec.decode(&mut buf) {
            Ok(Step::Data(d)) => {
                assert!(!d.is_empty(), "an empty data step");
                data.extend_from_slice(&d);
            }
            Ok(Step::More) => {
                if !feed(&mut buf) {
                    break match dec.eof() {
                        Ok(()) => Verdict::Done,
                        Err(e) => verdict(&e),
                    };
                }
            }
            Ok(Step::End) => {
                assert!(dec.is_done());
                break Verdict::Done;
            }
            Err(e) => break verdict(&e),
        }
    };
    assert_eq!(verdict, ref_verdict, "body verdict");
    if verdict == Verdict::Done {
        assert_eq!(data, ref_data, "body bytes");
        // What tether read past the body is the start of what follows it.
        let past = &buf[..];
        assert!(
            stream[at + used..].starts_with(past),
            "bytes read past the body"
        );
    } else {
        assert!(ref_data.starts_with(&data), "body bytes before the error");
    }
});
