//! Unit tests of the Durable Streams readers over an in-memory run: chunks, the compacted start,
//! misses, long-polls and the SSE loop.

use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;

use super::*;
use crate::deliver::collect::Collect;
use crate::record::format::{agui::Agui, Format};
use crate::record::sse::SseEvent;

fn push(run: &Run, n: u64) {
    let data = format!(r#"{{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"{n}"}}"#);
    let ev = Agui.classify(&SseEvent {
        event: None,
        data: Bytes::from(data),
        id: None,
    });
    run.append(&[ev]);
}

fn messages(c: &Chunk) -> Vec<Value> {
    serde_json::from_slice(&c.body).unwrap()
}

fn deltas(v: &[Value]) -> String {
    v.iter().filter_map(|m| m["delta"].as_str()).collect()
}

#[test]
fn a_chunk_is_the_events_after_the_cursor_then_the_end_message() {
    let run = Run::new("r", 16);
    (0..3).for_each(|n| push(&run, n));
    let c = chunk(&run, 1).unwrap();
    assert_eq!(deltas(&messages(&c)), "12");
    assert_eq!(
        (c.after, c.next, c.up_to_date, c.closed),
        (1, 3, true, false)
    );
    // At the head of an active run: nothing, up to date, open.
    let at_head = chunk(&run, 3).unwrap();
    assert!(at_head.is_empty() && at_head.up_to_date && !at_head.closed);
    assert_eq!(&at_head.body[..], b"[]");
    run.finish(true, None);
    let c = chunk(&run, 2).unwrap();
    let m = messages(&c);
    assert_eq!(deltas(&m), "2");
    assert_eq!(m[1]["type"], "STREAM_END");
    assert_eq!(m[1]["persisted"], true);
    assert_eq!((c.next, c.closed), (4, true));
    // Past the end message: the closed tail; further is an offset tether never gave.
    let tail = chunk(&run, 4).unwrap();
    assert!(tail.is_empty() && tail.closed && tail.up_to_date);
    assert_eq!(chunk(&run, 5).unwrap_err(), Miss::Ahead);
    assert_eq!(now(&run), 4);
}

#[test]
fn a_chunk_holds_at_most_max_messages_and_says_it_is_not_up_to_date() {
    let run = Run::new("r", MAX_MESSAGES + 10);
    (0..MAX_MESSAGES as u64 + 5).for_each(|n| push(&run, n));
    run.finish(true, None);
    let first = chunk(&run, 0).unwrap();
    assert_eq!(messages(&first).len(), MAX_MESSAGES);
    assert!(!first.up_to_date && !first.closed);
    let rest = chunk(&run, first.next).unwrap();
    assert_eq!(messages(&rest).len(), 6);
    assert!(rest.closed);
}

#[test]
fn a_read_from_the_start_of_a_long_run_gets_the_compacted_history() {
    let run = Run::new("r", 4);
    (0..10).for_each(|n| push(&run, n));
    // The window holds seqs 7..=10 only: the start is compacted (deltas merged), the text whole.
    let c = chunk(&run, 0).unwrap();
    let m = messages(&c);
    assert_eq!(deltas(&m), "0123456789");
    assert!(m.len() < 10);
    assert_eq!((c.next, c.up_to_date, c.closed), (10, true, false));
    // A cursor whose next events left the window cannot continue in order.
    assert_eq!(chunk(&run, 3).unwrap_err(), Miss::Gone);
    assert_eq!(deltas(&messages(&chunk(&run, 6).unwrap())), "6789");
    run.finish(false, None);
    let m = messages(&chunk(&run, 0).unwrap());
    assert_eq!(m.last().unwrap()["persisted"], false);
}

#[tokio::test(start_paused = true)]
async fn a_long_poll_answers_the_next_event_or_nothing_at_the_timeout() {
    let run = Arc::new(Run::new("r", 16));
    push(&run, 0);
    let stop = CancellationToken::new();
    let mut sink = Collect(Vec::new());
    // Data there already: at once.
    let c = long_poll(&mut sink, &run, 0, Duration::from_secs(5), &stop)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(deltas(&messages(&c)), "0");
    // Nothing until the timeout.
    let timed_out = long_poll(&mut sink, &run, 1, Duration::from_secs(5), &stop).await;
    assert_eq!(timed_out, Ok(None));
    // An event while waiting ends the wait with it.
    let producer = {
        let run = run.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            push(&run, 1);
        })
    };
    let c = long_poll(&mut sink, &run, 1, Duration::from_secs(5), &stop)
        .await
        .unwrap()
        .unwrap();
    producer.await.unwrap();
    assert_eq!(deltas(&messages(&c)), "1");
    // The end while waiting: the end message at once.
    let ender = {
        let run = run.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            run.finish(true, None);
        })
    };
    let c = long_poll(&mut sink, &run, 2, Duration::from_secs(5), &stop)
        .await
        .unwrap()
        .unwrap();
    ender.await.unwrap();
    assert!(c.closed);
    assert_eq!(messages(&c)[0]["type"], "STREAM_END");
    // At the closed tail: closed, without waiting.
    let c = long_poll(&mut sink, &run, 3, Duration::from_secs(5), &stop)
        .await
        .unwrap()
        .unwrap();
    assert!(c.is_empty() && c.closed);
}

fn events(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter(|b| !b.is_empty() && !b.starts_with(':'))
        .map(|b| {
            let (ev, data) = b.split_once('\n').unwrap();
            let ev = ev.strip_prefix("event: ").unwrap().to_string();
            let data: String = data
                .lines()
                .map(|l| l.strip_prefix("data: ").unwrap())
                .collect::<Vec<_>>()
                .join("\n");
            (ev, serde_json::from_str(&data).unwrap())
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn an_sse_reader_gets_data_and_control_events_until_the_stream_closes() {
    let run = Arc::new(Run::new("r", 16));
    push(&run, 0);
    let producer = {
        let run = run.clone();
        tokio::spawn(async move {
            for n in 1..3 {
                tokio::time::sleep(Duration::from_millis(10)).await;
                push(&run, n);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
            run.finish(true, None);
        })
    };
    let mut sink = Collect(Vec::new());
    let opts = SseOptions {
        heartbeat: Duration::from_secs(60),
        cursor: 9,
    };
    let out = sse(&mut sink, &run, 0, opts, &CancellationToken::new()).await;
    producer.await.unwrap();
    assert_eq!(out, Exit::Ended);
    let evs = events(&String::from_utf8(sink.0).unwrap());
    let mut text = String::new();
    let mut last = None;
    for (ev, v) in &evs {
        match ev.as_str() {
            "data" => text.push_str(&deltas(v.as_array().unwrap())),
            "control" => last = Some(v.clone()),
            other => panic!("unexpected event {other}"),
        }
    }
    assert_eq!(text, "012");
    // Every data event is followed by its control event.
    assert!(evs
        .windows(2)
        .all(|w| w[0].0 != "data" || w[1].0 == "control"));
    let last = last.unwrap();
    assert_eq!(last["streamClosed"], true);
    assert_eq!(last["streamNextOffset"], ds::offset(run.id(), 4));
    assert!(last.get("streamCursor").is_none());
    assert_eq!(evs[1].1["streamCursor"], "9");
}

#[tokio::test(start_paused = true)]
async fn an_sse_reader_at_the_tail_gets_an_up_to_date_control_first() {
    let run = Arc::new(Run::new("r", 16));
    push(&run, 0);
    let mut sink = Collect(Vec::new());
    let stop = CancellationToken::new();
    let opts = SseOptions {
        heartbeat: Duration::from_secs(60),
        cursor: 1,
    };
    let reader = {
        let run = run.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let out = sse(&mut sink, &run, 1, opts, &stop).await;
            (out, sink.0)
        })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.cancel();
    let (out, bytes) = reader.await.unwrap();
    assert_eq!(out, Exit::Shutdown);
    let evs = events(&String::from_utf8(bytes).unwrap());
    assert_eq!(evs.len(), 1);
    assert_eq!(evs[0].0, "control");
    assert_eq!(evs[0].1["upToDate"], true);
    assert_eq!(evs[0].1["streamNextOffset"], ds::offset(run.id(), 1));
}
