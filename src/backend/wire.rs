//! HTTP/1.1 framing of the backend exchange, over bytes only: the request head as written, the
//! response head as parsed (httparse), how the response body is delimited, and a body decoder
//! that hands out slices of the read buffer without copying them.
//!
//! Nothing here touches a socket; [`super::exchange`] does the I/O. Every function takes what
//! has been read so far and says whether it needs more, so the tests can split the bytes at any
//! position.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use pingora_http::{RequestHeader, ResponseHeader};
use thiserror::Error;

/// The largest response head accepted (status line, headers, blank line).
pub const MAX_HEAD: usize = 64 * 1024;

/// The most header fields a response head may have.
const MAX_HEADERS: usize = 256;

/// The longest chunk-size line (size and extensions) or trailer section accepted.
const MAX_CHUNK_LINE: usize = 4 * 1024;

/// The largest trailer section accepted (trailers are read and dropped).
const MAX_TRAILERS: usize = 64 * 1024;

/// Bytes the backend sent that are not HTTP/1.1 as tether reads it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum WireError {
    /// The request cannot be written (a forbidden byte in its target).
    #[error("the request target has a forbidden byte")]
    Target,
    /// The response head is over [`MAX_HEAD`].
    #[error("response head over {MAX_HEAD} bytes")]
    HeadTooLarge,
    /// httparse refused the response head.
    #[error("malformed response head: {0}")]
    Head(httparse::Error),
    /// The response head parsed but does not make a header (status, a header name).
    #[error("invalid response head: {0}")]
    Invalid(&'static str),
    /// `Content-Length` is not one non-negative integer.
    #[error("invalid content-length {0:?}")]
    ContentLength(String),
    /// A chunk-size line is malformed or too long.
    #[error("malformed chunk size line")]
    ChunkSize,
    /// A chunk's data is not followed by CRLF.
    #[error("chunk data not followed by CRLF")]
    ChunkEnd,
    /// The trailer section is malformed or too large.
    #[error("malformed trailer section")]
    Trailers,
    /// The connection closed before the body's end.
    #[error("connection closed {0}")]
    Truncated(&'static str),
}

/// The request head as written to the backend: `METHOD target HTTP/1.1`, the headers as they
/// are (case kept), a blank line. Tether speaks HTTP/1.1 to the backend whatever the client
/// spoke.
pub fn request_head(req: &RequestHeader) -> Result<BytesMut, WireError> {
    let target = req.raw_path();
    if target.is_empty() || target.iter().any(|b| matches!(b, 0 | b'\r' | b'\n' | b' ')) {
        return Err(WireError::Target);
    }
    let mut buf = BytesMut::with_capacity(256 + target.len());
    buf.put_slice(req.method.as_str().as_bytes());
    buf.put_u8(b' ');
    buf.put_slice(target);
    buf.put_slice(b" HTTP/1.1\r\n");
    req.header_to_h1_wire(&mut buf);
    buf.put_slice(b"\r\n");
    Ok(buf)
}

/// Parses a response head from the start of `buf`: the header and the head's length, or `None`
/// when more bytes are needed. A head over [`MAX_HEAD`] is an error whether or not it ended.
/// The headers are kept as sent; see [`drop_overridden_length`].
pub fn parse_head(buf: &[u8]) -> Result<Option<(ResponseHeader, usize)>, WireError> {
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut slots);
    let mut config = httparse::ParserConfig::default();
    config.allow_spaces_after_header_name_in_responses(true);
    config.allow_obsolete_multiline_headers_in_responses(true);
    let len = match config.parse_response(&mut resp, buf) {
        Ok(httparse::Status::Complete(len)) if len <= MAX_HEAD => len,
        Ok(httparse::Status::Complete(_)) => return Err(WireError::HeadTooLarge),
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD => {
            return Err(WireError::HeadTooLarge)
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(WireError::Head(e)),
    };
    let code = resp.code.ok_or(WireError::Invalid("no status"))?;
    let mut h = ResponseHeader::build(code, Some(resp.headers.len()))
        .map_err(|_| WireError::Invalid("status out of range"))?;
    h.set_version(match resp.version {
        Some(1) => http::Version::HTTP_11,
        Some(0) => http::Version::HTTP_10,
        _ => http::Version::HTTP_09,
    });
    h.set_reason_phrase(resp.reason)
        .map_err(|_| WireError::Invalid("reason phrase"))?;
    for field in resp.headers.iter() {
        // httparse let through only what a header value may hold; obs-fold becomes a space.
        let value = pingora_http::header_value_from_slice(field.value);
        h.append_header(Bytes::copy_from_slice(field.name.as_bytes()), value)
            .map_err(|_| WireError::Invalid("header name"))?;
    }
    Ok(Some((h, len)))
}

/// Drops `Content-Length` from a head that also has `Transfer-Encoding`, which overrides it
/// (RFC 9112 §6.3), so the answer is relayed by one framing only.
pub fn drop_overridden_length(h: &mut ResponseHeader) {
    if h.headers.contains_key(http::header::TRANSFER_ENCODING) {
        h.remove_header(&http::header::CONTENT_LENGTH);
    }
}

/// Whether the head of `h`, the answer to a `method` request, leaves doubt about where the
/// answer ends on the connection, so that bytes after it could be taken for the next answer:
/// a bodiless answer (`204`, `304`, the answer to a `HEAD`: a body sent anyway may still be on
/// its way), both `Transfer-Encoding` and `Content-Length` (RFC 9112 §6.3 item 3: a possible
/// smuggling attempt), or `Transfer-Encoding` in an HTTP/1.0 answer (§6.1). The answer is still
/// read; its connection is closed after it instead of going back to the pool.
pub fn framing_in_doubt(h: &ResponseHeader, method: &http::Method) -> bool {
    let coded = h.headers.contains_key(http::header::TRANSFER_ENCODING);
    method == http::Method::HEAD
        || matches!(h.status.as_u16(), 204 | 304)
        || (coded && h.headers.contains_key(http::header::CONTENT_LENGTH))
        || (coded && h.version != http::Version::HTTP_11)
}

/// How a response body is delimited (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// Exactly this many bytes (`0`: no body, as for `204`, `304` and `HEAD`).
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Until the backend closes the connection.
    Close,
}

/// The framing of the body of `h`, the answer to a request with method `method`. `1xx` heads
/// have no body and are never asked about.
pub fn framing(h: &ResponseHeader, method: &http::Method) -> Result<Framing, WireError> {
    let status = h.status.as_u16();
    if method == http::Method::HEAD || status == 204 || status == 304 {
        return Ok(Framing::Length(0));
    }
    if h.headers.contains_key(http::header::TRANSFER_ENCODING) {
        let last = h
            .headers
            .get_all(http::header::TRANSFER_ENCODING)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .rfind(|t| !t.is_empty());
        // A response whose last coding is not chunked runs to the close (§6.3 item 4).
        return Ok(match last {
            Some(t) if t.eq_ignore_ascii_case("chunked") => Framing::Chunked,
            _ => Framing::Close,
        });
    }
    let mut length = None;
    for v in h.headers.get_all(http::header::CONTENT_LENGTH) {
        let bad = || WireError::ContentLength(String::from_utf8_lossy(v.as_bytes()).into_owned());
        let text = v.to_str().map_err(|_| bad())?;
        // Identical repeats ("5, 5", or two headers) are one length (RFC 9110 §8.6).
        for part in text.split(',').map(str::trim) {
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            let n: u64 = part.parse().map_err(|_| bad())?;
            if length.is_some_and(|l| l != n) {
                return Err(bad());
            }
            length = Some(n);
        }
    }
    Ok(length.map_or(Framing::Close, Framing::Length))
}

/// Whether the backend lets the connection be reused after this answer: HTTP/1.1 unless it
/// said `Connection: close`, HTTP/1.0 only with `Connection: keep-alive`.
pub fn keeps_alive(h: &ResponseHeader) -> bool {
    let has = |token: &str| {
        h.headers
            .get_all(http::header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    };
    match h.version {
        http::Version::HTTP_11 => !has("close"),
        http::Version::HTTP_10 => has("keep-alive") && !has("close"),
        _ => false,
    }
}

/// What the decoder made of the bytes read so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Body bytes, split off the read buffer (no copy).
    Data(Bytes),
    /// More bytes are needed.
    More,
    /// The body ended; bytes left in the buffer were read past it.
    End,
}

/// Where the decoder is in a chunked body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// At a chunk-size line.
    Size,
    /// Inside a chunk's data, this many bytes to go.
    Data(u64),
    /// After a chunk's data, at its CRLF.
    DataEnd,
    /// In the trailer section, this many bytes of it seen.
    Trailers(usize),
}

/// Where the decoder is in the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Length(u64),
    Chunked(Chunk),
    Close,
    Done,
}

/// Decodes a response body from the read buffer, one [`Step`] at a time.
#[derive(Debug)]
pub struct BodyDecoder {
    state: State,
}

impl BodyDecoder {
    /// A decoder for a body of this framing.
    pub fn new(framing: Framing) -> Self {
        let state = match framing {
            Framing::Length(0) => State::Done,
            Framing::Length(n) => State::Length(n),
            Framing::Chunked => State::Chunked(Chunk::Size),
            Framing::Close => State::Close,
        };
        BodyDecoder { state }
    }

    /// Whether the body was read to its end.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Whether the body ends with the connection (nothing can follow it on the connection).
    pub fn is_close_delimited(&self) -> bool {
        self.state == State::Close
    }

    /// The next step from the bytes in `buf`; the body's framing is consumed from it, its data
    /// split off it.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Step, WireError> {
        loop {
            match self.state {
                State::Done => return Ok(Step::End),
                State::Length(_) | State::Close | State::Chunked(Chunk::Data(_))
                    if buf.is_empty() =>
                {
                    return Ok(Step::More)
                }
                State::Close => return Ok(Step::Data(buf.split().freeze())),
                State::Length(n) => {
                    let (data, left) = take(buf, n);
                    self.state = if left == 0 {
                        State::Done
                    } else {
                        State::Length(left)
                    };
                    return Ok(Step::Data(data));
                }
                State::Chunked(Chunk::Data(n)) => {
                    let (data, left) = take(buf, n);
                    self.state = State::Chunked(match left {
                        0 => Chunk::DataEnd,
                        _ => Chunk::Data(left),
                    });
                    return Ok(Step::Data(data));
                }
                State::Chunked(Chunk::Size) => {
                    let Some(line) = line(buf, MAX_CHUNK_LINE, WireError::ChunkSize)? else {
                        return Ok(Step::More);
                    };
                    let size = chunk_size(&buf[..line])?;
                    buf.advance(line);
                    self.state = State::Chunked(match size {
                        0 => Chunk::Trailers(0),
                        n => Chunk::Data(n),
                    });
                }
                State::Chunked(Chunk::DataEnd) => {
                    if !b"\r\n".starts_with(&buf[..buf.len().min(2)]) {
                        return Err(WireError::ChunkEnd);
                    }
                    if buf.len() < 2 {
                        return Ok(Step::More);
                    }
                    buf.advance(2);
                    self.state = State::Chunked(Chunk::Size);
                }
                State::Chunked(Chunk::Trailers(seen)) => {
                    let room = MAX_TRAILERS.saturating_sub(seen);
                    let Some(line) = line(buf, room, WireError::Trailers)? else {
                        return Ok(Step::More);
                    };
                    let blank = line == 2;
                    // A trailer field is `name: value`; anything else is not HTTP.
                    if !blank && !buf[..line].contains(&b':') {
                        return Err(WireError::Trailers);
                    }
                    buf.advance(line);
                    self.state = match blank {
                        true => State::Done,
                        false => State::Chunked(Chunk::Trailers(seen + line)),
                    };
                }
            }
        }
    }

    /// The connection closed: the end of a close-delimited body, a truncation of any other.
    pub fn eof(&mut self) -> Result<(), WireError> {
        match self.state {
            State::Done => Ok(()),
            State::Close => {
                self.state = State::Done;
                Ok(())
            }
            State::Length(_) => Err(WireError::Truncated("short of the content-length")),
            State::Chunked(_) => Err(WireError::Truncated("inside a chunked body")),
        }
    }
}

/// Splits up to `n` bytes off `buf`: the bytes, and how many of `n` are left.
fn take(buf: &mut BytesMut, n: u64) -> (Bytes, u64) {
    let k = usize::try_from(n).map_or(buf.len(), |n| n.min(buf.len()));
    (buf.split_to(k).freeze(), n - k as u64)
}

/// The length of the CRLF-terminated line at the start of `buf` (CRLF included), `None` when
/// it has not ended yet. A line over `max` bytes, or ended by a bare LF, is `err`.
fn line(buf: &[u8], max: usize, err: WireError) -> Result<Option<usize>, WireError> {
    match memchr::memchr(b'\n', &buf[..buf.len().min(max)]) {
        Some(lf) if lf > 0 && buf[lf - 1] == b'\r' => Ok(Some(lf + 1)),
        Some(_) => Err(err),
        None if buf.len() >= max => Err(err),
        None => Ok(None),
    }
}

/// The size on a chunk-size line (`hex [BWS] [; extensions] CRLF`, RFC 9112 §7.1).
fn chunk_size(line: &[u8]) -> Result<u64, WireError> {
    let body = &line[..line.len() - 2];
    let digits = body.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 {
        return Err(WireError::ChunkSize);
    }
    let mut size: u64 = 0;
    for &b in &body[..digits] {
        let d = (b as char).to_digit(16).ok_or(WireError::ChunkSize)?;
        size = size
            .checked_mul(16)
            .and_then(|s| s.checked_add(u64::from(d)))
            .ok_or(WireError::ChunkSize)?;
    }
    let rest = &body[digits..];
    let rest = &rest[rest
        .iter()
        .take_while(|b| matches!(b, b' ' | b'\t'))
        .count()..];
    match rest.first() {
        None => Ok(size),
        // Extensions are ignored, but may not hide a bare CR or other control bytes.
        Some(b';') if rest.iter().all(|&b| b == b'\t' || (b >= 0x20 && b != 0x7f)) => Ok(size),
        Some(_) => Err(WireError::ChunkSize),
    }
}

#[cfg(test)]
mod tests;
