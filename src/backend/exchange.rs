//! One HTTP/1.1 request and response with the backend over a connection of Pingora's pool:
//! writes the request, reads the response head (1xx skipped), then hands out the body as slices
//! of one read buffer, and says whether the connection can go back to the pool.
//!
//! The framing is [`wire`]'s; this file does the I/O. The read buffer starts at 1 KiB and grows
//! (to 64 KiB) only when a read fills it, and each body read is split off it without a copy: the
//! buffer's allocation comes back once the slices handed out are dropped. (Pingora's client
//! session kept a 64 KiB body buffer per response and copied every read.)

use std::io;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use pingora_core::protocols::Stream;
use pingora_http::ResponseHeader;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::slots::Slot;
use super::wire::{self, BodyDecoder, Framing, Step};
use crate::error::{UpstreamError, UpstreamErrorKind};

/// The read buffer's first size.
const FIRST_READ: usize = 1024;
/// The read buffer's largest size (a response head may take it a little over).
const MAX_READ: usize = 64 * 1024;
/// Below this much free room the buffer is reclaimed or replaced before a read.
const MIN_SPARE: usize = 512;

/// The time limits of an exchange's start.
#[derive(Debug, Clone, Copy)]
pub struct StartTimeouts {
    /// For writing the whole request.
    pub write: Duration,
    /// For reading the whole response head.
    pub head: Duration,
}

/// An exchange that did not get a response head.
#[derive(Debug)]
pub struct Failed {
    /// What went wrong.
    pub error: UpstreamError,
    /// The connection failed before any byte of the request was handed to it (a pooled
    /// connection the backend had closed), so the backend cannot have seen the request and a
    /// fresh connection may carry it. Once a byte was written this is never set: the backend
    /// may be running the turn.
    pub retry: bool,
}

/// A connection's reads into one buffer.
struct Reader<S> {
    stream: S,
    buf: BytesMut,
    /// How much room a fresh buffer gets.
    size: usize,
}

impl<S: AsyncRead + Unpin> Reader<S> {
    fn new(stream: S) -> Self {
        Reader {
            stream,
            buf: BytesMut::new(),
            size: FIRST_READ,
        }
    }

    /// Reads once into the buffer; `0` at the end of the stream.
    async fn fill(&mut self) -> io::Result<usize> {
        self.make_room();
        let room = self.buf.capacity() - self.buf.len();
        let n = self.stream.read_buf(&mut self.buf).await?;
        if n == room && room >= self.size / 2 {
            self.size = (self.size * 2).min(MAX_READ);
        }
        Ok(n)
    }

    /// Makes at least [`MIN_SPARE`] of room: the buffer's own allocation when every slice of it
    /// was dropped, else a fresh one of `size` (the few unread bytes copied over).
    fn make_room(&mut self) {
        let len = self.buf.len();
        if self.buf.capacity() - len >= MIN_SPARE
            || self
                .buf
                .try_reclaim(self.size.saturating_sub(len).max(MIN_SPARE))
        {
            return;
        }
        let mut fresh = BytesMut::with_capacity(self.size.max(len + MIN_SPARE));
        fresh.extend_from_slice(&self.buf);
        self.buf = fresh;
    }
}

/// A request sent and its response head read; the body is read with [`Exchange::next`].
pub struct Exchange<S = Stream> {
    reader: Reader<S>,
    header: ResponseHeader,
    body: BodyDecoder,
    /// Neither side ends the connection after this answer, and its framing leaves no doubt
    /// where the answer ends ([`wire::framing_in_doubt`]).
    keep_alive: bool,
    /// The body has no length or chunking of its own: it ends when the connection closes.
    close_delimited: bool,
    /// The connection pool's key of the peer the connection goes to.
    pool_key: u64,
    /// The request's slot ([`super::slots`]), given back with the connection.
    slot: Option<Slot>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Exchange<S> {
    /// Writes the request (`head`, then `body`) on `stream` and reads the response head.
    /// `method` is the request's, for the framing of the answer to a `HEAD`.
    pub async fn start(
        mut stream: S,
        head: &[u8],
        body: &[u8],
        method: &http::Method,
        limits: StartTimeouts,
    ) -> Result<Self, Failed> {
        let mut request = Buf::chain(head, body);
        let total = request.remaining();
        let write = async {
            stream.write_all_buf(&mut request).await?;
            stream.flush().await
        };
        let written = tokio::time::timeout(limits.write, write).await;
        match written {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                return Err(Failed {
                    error: io_error(&e, "writing the request"),
                    retry: request.remaining() == total,
                })
            }
            Err(_) => {
                return Err(failed(
                    UpstreamErrorKind::Timeout,
                    format!("upstream took over {:?} to take the request", limits.write),
                ))
            }
        }
        let mut reader = Reader::new(stream);
        let mut header = match tokio::time::timeout(limits.head, read_head(&mut reader)).await {
            Ok(h) => h?,
            Err(_) => {
                return Err(failed(
                    UpstreamErrorKind::Timeout,
                    format!("no upstream response head within {:?}", limits.head),
                ))
            }
        };
        let framing = wire::framing(&header, method).map_err(|e| {
            failed(
                UpstreamErrorKind::Protocol,
                format!("upstream response head: {e}"),
            )
        })?;
        let doubt = wire::framing_in_doubt(&header, method);
        wire::drop_overridden_length(&mut header);
        Ok(Exchange {
            keep_alive: wire::keeps_alive(&header) && framing != Framing::Close && !doubt,
            close_delimited: framing == Framing::Close,
            pool_key: 0,
            slot: None,
            body: BodyDecoder::new(framing),
            reader,
            header,
        })
    }

    /// The response header as the backend sent it (after any 1xx).
    pub fn header(&self) -> &ResponseHeader {
        &self.header
    }

    /// Whether the body ends when the backend closes the connection (no length, no chunking):
    /// its end then cannot tell a finished answer from a backend that died mid-answer.
    pub fn is_close_delimited(&self) -> bool {
        self.close_delimited
    }

    /// The next piece of the body; `None` at its clean end. After an error the exchange is
    /// done with (its connection is never reused).
    pub async fn next(&mut self) -> Result<Option<Bytes>, UpstreamError> {
        loop {
            match self.body.decode(&mut self.reader.buf) {
                Ok(Step::Data(b)) => return Ok(Some(b)),
                Ok(Step::End) => return Ok(None),
                Ok(Step::More) => {}
                Err(e) => {
                    self.keep_alive = false;
                    return Err(UpstreamError::new(
                        UpstreamErrorKind::Protocol,
                        format!("upstream response body: {e}"),
                    ));
                }
            }
            match self.reader.fill().await {
                Ok(0) => {
                    self.keep_alive = false;
                    self.body.eof().map_err(|e| {
                        UpstreamError::new(UpstreamErrorKind::Reset, format!("upstream {e}"))
                    })?;
                }
                Ok(_) => {}
                Err(e) => {
                    self.keep_alive = false;
                    return Err(io_error(&e, "reading the response body"));
                }
            }
        }
    }

    /// The exchange, its connection to go back to the pool under `key` (its peer's).
    pub fn pooled_as(mut self, key: u64) -> Self {
        self.pool_key = key;
        self
    }

    /// The exchange, holding `slot` until it is dropped or its connection goes back to the pool.
    pub fn holding(mut self, slot: Slot) -> Self {
        self.slot = Some(slot);
        self
    }

    /// The connection pool's key of its peer (see [`Self::pooled_as`]).
    pub fn pool_key(&self) -> u64 {
        self.pool_key
    }

    /// The connection, when it can carry another request: the body was read to its clean end,
    /// nothing was read past it, neither side asked for a close, and the answer's framing left
    /// no doubt where it ended (never after a bodiless answer, whose stray body could follow).
    pub fn into_reusable(self) -> Option<S> {
        let clean = self.keep_alive && self.body.is_done() && self.reader.buf.is_empty();
        clean.then_some(self.reader.stream)
    }
}

/// Reads the response head, skipping 1xx heads. The request was written: no failure here is
/// retried.
async fn read_head<S: AsyncRead + Unpin>(reader: &mut Reader<S>) -> Result<ResponseHeader, Failed> {
    loop {
        match wire::parse_head(&reader.buf) {
            Ok(Some((header, len))) => {
                reader.buf.advance(len);
                match header.status.as_u16() {
                    // Tether never asks for an upgrade (`Upgrade` is hop-by-hop).
                    101 => {
                        return Err(failed(
                            UpstreamErrorKind::Protocol,
                            "upstream switched protocols unasked".into(),
                        ))
                    }
                    100..=199 => continue,
                    _ => return Ok(header),
                }
            }
            Ok(None) => {}
            Err(e) => {
                return Err(failed(
                    UpstreamErrorKind::Protocol,
                    format!("upstream response head: {e}"),
                ))
            }
        }
        match reader.fill().await {
            Ok(0) => {
                return Err(failed(
                    UpstreamErrorKind::Reset,
                    "upstream closed the connection before its response head".into(),
                ))
            }
            Ok(_) => {}
            Err(e) => {
                return Err(Failed {
                    error: io_error(&e, "reading the response head"),
                    retry: false,
                })
            }
        }
    }
}

/// A failure that no retry helps.
fn failed(kind: UpstreamErrorKind, message: String) -> Failed {
    Failed {
        error: UpstreamError::new(kind, message),
        retry: false,
    }
}

/// An I/O error on the connection: a timeout, a TLS alert or error (an HTTPS backend that
/// refused the client certificate after the handshake), or a reset.
fn io_error(e: &io::Error, doing: &str) -> UpstreamError {
    let tls = e
        .get_ref()
        .is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some());
    let kind = match e.kind() {
        io::ErrorKind::TimedOut => UpstreamErrorKind::Timeout,
        _ if tls => UpstreamErrorKind::Tls,
        _ => UpstreamErrorKind::Reset,
    };
    UpstreamError::new(kind, format!("upstream failed while {doing}: {e}"))
        .caused_by(io::Error::new(e.kind(), e.to_string()))
}

#[cfg(test)]
mod tests;
