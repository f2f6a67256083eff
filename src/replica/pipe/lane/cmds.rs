//! An append's commands (the `XADD` and its doorbell's `PUBLISH`, no script) and what their
//! answers, and the rare path's [`REFUSED`](crate::replica::scripts::REFUSED) answer, mean for the lane.

use std::io::Write;

use bytes::Bytes;
use redis::{Cmd, RedisResult, Value};

use super::Target;
use crate::replica::WriteResult;

/// An append's commands: the `XADD` of entry `<last>-0` (only onto the stream the go-live
/// made, trimmed to `minid`) and the `PUBLISH` of the doorbell carrying it. Each buffer gets its
/// arguments' size up front, so the batch is copied into it once.
pub(super) fn append_cmds(t: &Target, first: u64, last: u64, minid: u64, data: &[u8]) -> Vec<Cmd> {
    let mut xadd = Cmd::with_capacity(12, xadd_size(t, data.len()));
    xadd.arg("XADD")
        .arg(&t.s)
        .arg("NOMKSTREAM")
        .arg("MINID")
        .arg("~")
        .arg(minid)
        .arg(format!("{last}-0"))
        .arg("f")
        .arg(first)
        .arg("d")
        .arg(data);
    let mut msg = Vec::with_capacity(42 + data.len());
    let _ = write!(msg, "{first} {last} ");
    msg.extend_from_slice(data);
    let mut publish = Cmd::with_capacity(3, t.publish.len() + t.bell.len() + msg.len());
    publish.arg(t.publish).arg(&t.bell).arg(msg);
    vec![xadd, publish]
}

/// Bytes of arguments an append's `XADD` of `data` bytes has at most: three numbers of 20
/// digits, the id's `-0`, the command's name and flags.
fn xadd_size(t: &Target, data: usize) -> usize {
    3 * 20 + 2 + "XADDNOMKSTREAMMINID~fd".len() + t.s.len() + data
}

/// What an append's `XADD` answer says.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Appended {
    /// The entry is in the stream (its id answered).
    Taken,
    /// Redis answered without taking it: an id not above the stream's top (an end, a re-base's
    /// marker, a duplicate), or no stream (`NOMKSTREAM`'s nil): the rare path says why.
    Refused,
    /// No answer, or Redis refused the write itself (`-OOM`, `-READONLY`).
    Failed,
}

pub(super) fn appended(r: &RedisResult<Value>) -> Appended {
    match r {
        Ok(Value::BulkString(_) | Value::SimpleString(_)) => Appended::Taken,
        Ok(Value::Nil) => Appended::Refused,
        Err(e) if e.to_string().contains("smaller than the target stream top") => Appended::Refused,
        _ => Appended::Failed,
    }
}

/// How a [`REFUSED`](crate::replica::scripts::REFUSED) answer (or a failed call) counts, and the stop flag when the
/// append counts as taken (`dup`).
pub(super) fn outcome(r: &RedisResult<Value>) -> (WriteResult, Option<Bytes>) {
    let v = match r {
        Ok(Value::Array(v)) => v,
        Err(e) if crate::replica::refuses_writes(e) => return (WriteResult::Refused, None),
        _ => return (WriteResult::Error, None),
    };
    let text = |i: usize| match v.get(i) {
        Some(Value::BulkString(b)) => Some(&b[..]),
        Some(Value::SimpleString(s)) => Some(s.as_bytes()),
        _ => None,
    };
    match text(0) {
        Some(b"ok") | Some(b"dup") => (
            WriteResult::Ok,
            Some(Bytes::copy_from_slice(text(1).unwrap_or_default())),
        ),
        Some(b"ended") => (WriteResult::Ended, None),
        Some(b"fenced") => (WriteResult::Fenced, None),
        // `gap`, `missing`: Redis took nothing; the writer re-bases.
        _ => (WriteResult::Ok, None),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Lane, Target};
    use super::*;
    use crate::record::format::Event;
    use crate::replica::codec;
    use std::sync::Arc;
    use tokio::sync::mpsc;

    fn used(cmd: &Cmd) -> usize {
        cmd.args_iter()
            .map(|a| match a {
                redis::Arg::Simple(b) => b.len(),
                _ => 0,
            })
            .sum()
    }

    fn args(cmd: &Cmd) -> Vec<Vec<u8>> {
        cmd.args_iter()
            .map(|a| match a {
                redis::Arg::Simple(b) => b.to_vec(),
                _ => Vec::new(),
            })
            .collect()
    }

    #[test]
    fn an_append_is_an_xadd_onto_the_made_stream_and_the_doorbell_carrying_it() {
        let lane = Arc::new(Lane::default());
        let key = |k: &str| format!("tj:{{s:chat-0123456789abcdef:run-0123456789abcdef}}:{k}");
        lane.target(Target {
            m: key("m"),
            s: key("s"),
            bell: key("bell"),
            publish: "PUBLISH",
            lease: "0123456789abcdef".into(),
            window: 1000,
            pipe: mpsc::unbounded_channel().0,
        });
        lane.open(0, 0, 0, 1);
        let ev = Event::verbatim(
            Bytes::from_static(b"{\"type\":\"text-delta\",\"delta\":\"abcd\"}"),
            0..0,
            0..0,
        );
        lane.push(1, std::slice::from_ref(&ev), 0, &[]);
        lane.push(2, std::slice::from_ref(&ev), 0, &[]);
        let Some((cmds, sent)) = lane.take() else {
            panic!("the lane holds a batch to send");
        };
        assert_eq!((sent.first, sent.last, sent.why), (1, 2, false));
        let [xadd, publish] = &cmds[..] else {
            panic!("an append is two commands: {}", cmds.len());
        };
        let x = args(xadd);
        let text = |v: &[Vec<u8>]| {
            v.iter()
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            text(&x[..9]),
            [
                "XADD",
                &key("s"),
                "NOMKSTREAM",
                "MINID",
                "~",
                "1",
                "2-0",
                "f",
                "1"
            ],
            "no stream is made, the entry's id is its last seq"
        );
        assert_eq!(&x[9], b"d");
        let Some(t) = lane.target.get() else {
            panic!("the lane has its target");
        };
        assert!(
            used(xadd) <= xadd_size(t, x[10].len()),
            "the XADD's buffer grows on every call"
        );
        let p = args(publish);
        assert_eq!(text(&p[..2]), ["PUBLISH", &key("bell")]);
        let rung =
            codec::decode_rung(&Bytes::from(p[2].clone())).expect("the doorbell carries its entry");
        assert_eq!((rung.first, rung.last, &rung.data[..]), (1, 2, &x[10][..]));
    }

    #[test]
    fn a_refused_or_streamless_append_takes_the_rare_path_and_a_failed_one_re_bases() {
        let id = Ok(Value::BulkString(b"2-0".to_vec()));
        assert_eq!(appended(&id), Appended::Taken);
        assert_eq!(
            appended(&Ok(Value::Nil)),
            Appended::Refused,
            "NOMKSTREAM: no stream"
        );
        let refused: RedisResult<Value> = Err(redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
            "An error was signalled by the server",
            "The ID specified in XADD is equal or smaller than the target stream top item".into(),
        )));
        assert_eq!(appended(&refused), Appended::Refused, "{refused:?}");
        let io: RedisResult<Value> = Err((redis::ErrorKind::Io, "gone").into());
        assert_eq!(appended(&io), Appended::Failed);
    }

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn a_refused_appends_reason_counts_its_result_and_carries_the_stop_flag() {
        let ok = |r: Value| outcome(&Ok(r));
        assert_eq!(
            ok(Value::Array(vec![bulk("ok"), bulk("cancelled")])),
            (WriteResult::Ok, Some(Bytes::from_static(b"cancelled")))
        );
        assert_eq!(
            ok(Value::Array(vec![bulk("dup"), bulk("")])),
            (WriteResult::Ok, Some(Bytes::new()))
        );
        assert_eq!(ok(Value::Array(vec![bulk("gap")])), (WriteResult::Ok, None));
        assert_eq!(
            ok(Value::Array(vec![bulk("fenced")])).0,
            WriteResult::Fenced
        );
        assert_eq!(ok(Value::Array(vec![bulk("ended")])).0, WriteResult::Ended);
        assert_eq!(ok(Value::Int(1)).0, WriteResult::Error);
    }
}
