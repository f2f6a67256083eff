//! Tests of the HTTP/1.1 framing over byte slices, split at every position.

use super::*;

/// Feeds `pieces` to a decoder of `framing` one after another, decoding after each. Returns the
/// body, whether it ended, and the bytes left after its end (buffered or not yet fed).
fn feed(framing: Framing, pieces: &[&[u8]]) -> Result<(Vec<u8>, bool, Vec<u8>), WireError> {
    let mut d = BodyDecoder::new(framing);
    let mut buf = BytesMut::new();
    let mut body = Vec::new();
    for (i, piece) in pieces.iter().enumerate() {
        buf.extend_from_slice(piece);
        loop {
            match d.decode(&mut buf)? {
                Step::Data(b) => {
                    assert!(!b.is_empty(), "an empty data step");
                    body.extend_from_slice(&b);
                }
                Step::More => break,
                Step::End => {
                    let mut left = buf.to_vec();
                    pieces[i + 1..]
                        .iter()
                        .for_each(|p| left.extend_from_slice(p));
                    return Ok((body, true, left));
                }
            }
        }
    }
    Ok((body, false, Vec::new()))
}

/// [`feed`] of `bytes` split at every pair of positions, each of which must agree with the
/// whole.
fn feed_every_split(framing: Framing, bytes: &[u8]) -> Result<(Vec<u8>, bool, Vec<u8>), WireError> {
    let whole = feed(framing, &[bytes]);
    for i in 0..=bytes.len() {
        for j in i..=bytes.len() {
            let split = feed(framing, &[&bytes[..i], &bytes[i..j], &bytes[j..]]);
            assert_eq!(split, whole, "split at {i} and {j}");
        }
    }
    whole
}

const CHUNKED: &[u8] =
    b"5;name=\"v a\"\r\nhello\r\n6 \t;x\r\n, worl\r\nA\r\nd and more\r\n0\r\nX-Sum: 1\r\nX-More: 2\r\n\r\nNEXT";

#[test]
fn a_chunked_body_with_extensions_and_trailers_decodes_at_every_split() {
    let (body, ended, left) = feed_every_split(Framing::Chunked, CHUNKED).unwrap();
    assert_eq!(String::from_utf8_lossy(&body), "hello, world and more");
    assert!(ended);
    assert_eq!(left, b"NEXT", "bytes after the body stay in the buffer");
}

#[test]
fn a_chunked_body_fed_byte_by_byte_ends_exactly_at_its_last_crlf() {
    let end = CHUNKED.len() - b"NEXT".len();
    let pieces: Vec<&[u8]> = CHUNKED[..end].chunks(1).collect();
    let (body, ended, left) = feed(Framing::Chunked, &pieces).unwrap();
    assert_eq!(body, b"hello, world and more");
    assert!(ended && left.is_empty());
}

#[test]
fn malformed_chunked_bodies_are_errors_wherever_they_are_split() {
    let cases: [(&[u8], WireError); 11] = [
        (b"zz\r\nab\r\n0\r\n\r\n", WireError::ChunkSize),
        (b"\r\n", WireError::ChunkSize),
        (b"5 x\r\nhello\r\n", WireError::ChunkSize),
        (b"-5\r\nhello\r\n", WireError::ChunkSize),
        (b"5\nhello\r\n", WireError::ChunkSize),
        (b"5;a\rb\r\nhello\r\n", WireError::ChunkSize),
        (b"10000000000000000\r\n", WireError::ChunkSize),
        (b"5\r\nhelloXY0\r\n\r\n", WireError::ChunkEnd),
        (b"5\r\nhello\n0\r\n\r\n", WireError::ChunkEnd),
        (b"0\r\nno colon here\r\n\r\n", WireError::Trailers),
        (b"0\r\nX: 1\n\r\n", WireError::Trailers),
    ];
    for (bytes, want) in cases {
        let what = String::from_utf8_lossy(bytes);
        assert_eq!(
            feed_every_split(Framing::Chunked, bytes),
            Err(want),
            "{what}"
        );
    }
}

#[test]
fn a_chunk_size_line_that_never_ends_is_an_error_once_over_the_limit() {
    let mut line = b"5;".to_vec();
    line.resize(MAX_CHUNK_LINE - 1, b'x');
    assert_eq!(
        feed(Framing::Chunked, &[&line]),
        Ok((vec![], false, vec![]))
    );
    line.push(b'x');
    assert_eq!(feed(Framing::Chunked, &[&line]), Err(WireError::ChunkSize));
}

#[test]
fn a_trailer_section_over_the_limit_is_an_error() {
    let mut bytes = b"0\r\n".to_vec();
    while bytes.len() < MAX_TRAILERS + 100 {
        bytes.extend_from_slice(b"X-Filler: abcdefghijklmnopqrstuvwxyz\r\n");
    }
    assert_eq!(feed(Framing::Chunked, &[&bytes]), Err(WireError::Trailers));
}

#[test]
fn the_largest_chunk_size_is_accepted_and_decoded_lazily() {
    let (body, ended, _) = feed(Framing::Chunked, &[b"ffffffffffffffff\r\nabc"]).unwrap();
    assert_eq!((body, ended), (b"abc".to_vec(), false));
}

#[test]
fn a_content_length_body_ends_at_its_length_and_leaves_what_follows() {
    let (body, ended, left) = feed_every_split(Framing::Length(5), b"hello!!").unwrap();
    assert_eq!(
        (body, ended, left),
        (b"hello".to_vec(), true, b"!!".to_vec())
    );
    assert_eq!(
        feed(Framing::Length(0), &[b"x"]),
        Ok((vec![], true, b"x".to_vec())),
        "no body: ended before any byte"
    );
}

#[test]
fn a_close_at_the_wrong_place_is_a_truncation_and_a_close_delimited_body_ends_with_it() {
    let mut d = BodyDecoder::new(Framing::Length(10));
    let mut buf = BytesMut::from(&b"short"[..]);
    assert!(matches!(d.decode(&mut buf), Ok(Step::Data(_))));
    assert_eq!(d.decode(&mut buf), Ok(Step::More));
    assert!(matches!(d.eof(), Err(WireError::Truncated(_))));

    let mut d = BodyDecoder::new(Framing::Chunked);
    let mut buf = BytesMut::from(&b"5\r\nhel"[..]);
    assert!(matches!(d.decode(&mut buf), Ok(Step::Data(_))));
    assert!(matches!(d.eof(), Err(WireError::Truncated(_))));

    let mut d = BodyDecoder::new(Framing::Close);
    assert!(d.is_close_delimited());
    let mut buf = BytesMut::from(&b"all of it"[..]);
    assert_eq!(
        d.decode(&mut buf),
        Ok(Step::Data(Bytes::from_static(b"all of it")))
    );
    assert_eq!(d.decode(&mut buf), Ok(Step::More));
    assert_eq!(d.eof(), Ok(()));
    assert!(d.is_done());
    assert_eq!(d.decode(&mut buf), Ok(Step::End));
}

#[test]
fn body_data_is_a_slice_of_the_read_buffer_not_a_copy() {
    let mut buf = BytesMut::with_capacity(64);
    buf.extend_from_slice(b"3\r\nabc\r\n");
    let base = buf.as_ptr() as usize;
    let mut d = BodyDecoder::new(Framing::Chunked);
    let Ok(Step::Data(data)) = d.decode(&mut buf) else {
        panic!("no data");
    };
    assert_eq!(data.as_ptr() as usize, base + 3);
}

const HEAD: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nX-Mixed-Case: a\r\n  folded\r\n\r\nbody";

#[test]
fn a_response_head_parses_at_every_split_and_keeps_header_case() {
    let end = HEAD.len() - 4;
    for i in 0..end {
        assert_eq!(parse_head(&HEAD[..i]).map(|h| h.is_none()), Ok(true), "{i}");
    }
    for i in end..=HEAD.len() {
        let (h, len) = parse_head(&HEAD[..i]).unwrap().unwrap();
        assert_eq!(len, end);
        assert_eq!(h.status, 200);
        assert_eq!(h.version, http::Version::HTTP_11);
        assert_eq!(h.get_reason_phrase(), Some("OK"));
        assert_eq!(h.headers["content-type"], "text/event-stream");
        let folded = h.headers["x-mixed-case"].as_bytes();
        assert!(
            folded.starts_with(b"a ") && folded.ends_with(b" folded"),
            "{folded:?}"
        );
        assert!(!folded.iter().any(|b| matches!(b, b'\r' | b'\n')));
        let mut wire = Vec::new();
        h.header_to_h1_wire(&mut wire);
        assert!(wire.starts_with(b"Content-Type: "), "case kept");
    }
}

#[test]
fn a_response_head_over_the_limit_or_malformed_is_an_error() {
    let mut big = b"HTTP/1.1 200 OK\r\n".to_vec();
    let filler = format!("X-Filler: {}\r\n", "v".repeat(1000));
    while big.len() < MAX_HEAD {
        big.extend_from_slice(filler.as_bytes());
    }
    assert_eq!(
        parse_head(&big[..MAX_HEAD - 1]).map(|h| h.is_none()),
        Ok(true)
    );
    assert_eq!(parse_head(&big).err(), Some(WireError::HeadTooLarge));
    big.extend_from_slice(b"\r\n");
    assert_eq!(
        parse_head(&big).err(),
        Some(WireError::HeadTooLarge),
        "ended"
    );

    let mut many = b"HTTP/1.1 200 OK\r\n".to_vec();
    for i in 0..=MAX_HEADERS {
        many.extend_from_slice(format!("X-{i}: 1\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    assert_eq!(
        parse_head(&many).err(),
        Some(WireError::Head(httparse::Error::TooManyHeaders))
    );
    for junk in [
        &b"GARBAGE\r\n\r\n"[..],
        b"HTTP/1.1 2000 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n",
    ] {
        assert!(
            parse_head(junk).is_err(),
            "{}",
            String::from_utf8_lossy(junk)
        );
    }
}

#[test]
fn an_informational_head_parses_alone_and_what_follows_stays() {
    let bytes = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
    let (h, len) = parse_head(bytes).unwrap().unwrap();
    assert_eq!((h.status.as_u16(), len), (100, 25));
    let (h, _) = parse_head(&bytes[len..]).unwrap().unwrap();
    assert_eq!(h.status, 200);
}

fn head(text: &str) -> ResponseHeader {
    parse_head(text.as_bytes()).unwrap().unwrap().0
}

#[test]
fn framing_follows_rfc_9112() {
    let get = http::Method::GET;
    let cases = [
        (
            "HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n",
            Ok(Framing::Length(0)),
        ),
        (
            "HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n",
            Ok(Framing::Length(0)),
        ),
        (
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
            Ok(Framing::Chunked),
        ),
        (
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, Chunked\r\n\r\n",
            Ok(Framing::Chunked),
        ),
        (
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
            Ok(Framing::Close),
        ),
        (
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5, 5\r\n\r\n",
            Ok(Framing::Length(5)),
        ),
        ("HTTP/1.0 200 OK\r\n\r\n", Ok(Framing::Close)),
        (
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
            Err(()),
        ),
        ("HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\n", Err(())),
        ("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", Err(())),
        (
            "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n",
            Err(()),
        ),
    ];
    for (text, want) in cases {
        let got = framing(&head(text), &get).map_err(|_| ());
        assert_eq!(got, want, "{text:?}");
    }
    let ok = head("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n");
    assert_eq!(framing(&ok, &http::Method::HEAD), Ok(Framing::Length(0)));
}

#[test]
fn keep_alive_is_http_1_1_without_close_or_http_1_0_asking_for_it() {
    let cases = [
        ("HTTP/1.1 200 OK\r\n\r\n", true),
        (
            "HTTP/1.1 200 OK\r\nConnection: Keep-Alive, Close\r\n\r\n",
            false,
        ),
        ("HTTP/1.1 200 OK\r\nConnection: x-hop\r\n\r\n", true),
        ("HTTP/1.0 200 OK\r\n\r\n", false),
        ("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\n", true),
    ];
    for (text, want) in cases {
        assert_eq!(keeps_alive(&head(text)), want, "{text:?}");
    }
}

#[test]
fn the_request_head_is_http_1_1_with_the_headers_as_given() {
    let mut req = RequestHeader::build("POST", b"/chat?x=1", None).unwrap();
    req.set_version(http::Version::HTTP_10);
    req.insert_header("Host", "backend").unwrap();
    req.insert_header("Content-Length", "2").unwrap();
    let head = request_head(&req).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&head),
        "POST /chat?x=1 HTTP/1.1\r\nHost: backend\r\nContent-Length: 2\r\n\r\n"
    );
}

#[test]
fn framing_is_in_doubt_for_bodiless_answers_and_conflicting_or_misplaced_codings() {
    let post = http::Method::POST;
    let cases = [
        ("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", &post, false),
        (
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            &post,
            false,
        ),
        ("HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\n", &post, false),
        ("HTTP/1.1 204 No Content\r\n\r\n", &post, true),
        ("HTTP/1.1 304 Not Modified\r\n\r\n", &post, true),
        (
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
            &http::Method::HEAD,
            true,
        ),
        (
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
            &post,
            true,
        ),
        (
            "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            &post,
            true,
        ),
    ];
    for (text, method, want) in cases {
        assert_eq!(
            framing_in_doubt(&head(text), method),
            want,
            "{method} {text:?}"
        );
    }
}
