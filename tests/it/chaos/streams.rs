//! What the checker reads in Redis itself: every run's stream must be whole, since appends go
//! without a script and only the stream ids fence them (docs/protocol.md, "The journal in
//! Redis"). A batch entry (`<last>-0`, first seq in `f`) follows the entry before it (a batch's
//! last seq, or a re-base marker `<h>-1`'s `h`) with no hole; the end (the highest id) is the
//! last entry and its `seq` is the head before it; nothing lies past it.

use crate::support::RedisServer;

const END_ID: &str = "18446744073709551615-0";

type Entry = (String, Vec<Vec<u8>>);

fn field<'a>(fields: &'a [Vec<u8>], name: &[u8]) -> Option<&'a [u8]> {
    fields
        .chunks(2)
        .find(|p| p.first().map(Vec::as_slice) == Some(name))
        .and_then(|p| p.get(1).map(Vec::as_slice))
}

fn num(b: Option<&[u8]>) -> Option<u64> {
    std::str::from_utf8(b?).ok()?.parse().ok()
}

/// What is wrong with one stream's entries (none when whole).
pub fn stream_faults(key: &str, entries: &[Entry]) -> Vec<String> {
    let mut out = Vec::new();
    // The head the entry before left: a batch's last seq or a marker's seq.
    let mut head: Option<u64> = None;
    let mut ended = false;
    for (id, fields) in entries {
        if ended {
            out.push(format!("{key}: entry {id} after the end"));
            continue;
        }
        if id == END_ID {
            ended = true;
            let seq = num(field(fields, b"seq"));
            if head.is_some_and(|h| Some(h) != seq) {
                out.push(format!("{key}: the end at seq {seq:?} after head {head:?}"));
            }
            continue;
        }
        let Some((seq, kind)) = id.split_once('-') else {
            out.push(format!("{key}: entry id {id}"));
            continue;
        };
        let Ok(seq) = seq.parse::<u64>() else {
            out.push(format!("{key}: entry id {id}"));
            continue;
        };
        if kind == "0" {
            let first = num(field(fields, b"f"));
            if let (Some(h), Some(f)) = (head, first) {
                if f > h + 1 {
                    out.push(format!("{key}: a hole: batch {f}..={seq} after head {h}"));
                }
            }
        }
        head = Some(seq);
    }
    out
}

/// Every run stream's faults in `redis` (the checker's own look, after the run), and how many
/// streams it read.
pub fn all_stream_faults(redis: &RedisServer) -> (Vec<String>, u64) {
    let keys: Vec<String> = redis.query(&["KEYS", "tj:*:r:*:s"]);
    let mut out = Vec::new();
    for k in &keys {
        let entries: Vec<Entry> = redis.query(&["XRANGE", k, "-", "+"]);
        out.extend(stream_faults(k, &entries));
    }
    (out, keys.len() as u64)
}

/// The faults of the streams of the runs whose meta keys are `metas`.
pub fn run_stream_faults(redis: &RedisServer, metas: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for m in metas {
        let s = format!("{}s", m.strip_suffix('m').unwrap_or(m));
        let entries: Vec<Entry> = redis.query(&["XRANGE", &s, "-", "+"]);
        out.extend(stream_faults(&s, &entries));
    }
    out
}
