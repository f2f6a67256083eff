//! Tests of the verbatim write loop over an in-memory run with a raw record.

use super::*;
use crate::deliver::collect::{Collect, Tagged};
use crate::journal::raw::Frame;
use crate::record::format::{agui::Agui, Format};
use crate::record::sse::SseEvent;
use bytes::Bytes;

fn push(run: &Run, n: u64) {
    let data = format!(r#"{{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"{n}"}}"#);
    let ev = Agui.classify(&SseEvent {
        event: None,
        data: Bytes::from(data.clone()),
        id: None,
    });
    let frame = Frame {
        bytes: Bytes::from(format!("data: {data}\n\n")),
        id: None,
        cursor: Some(n as i64),
        named: false,
    };
    run.append_raw(&[ev], vec![frame]);
}

fn opts(inject: bool) -> Options {
    Options {
        heartbeat: Duration::from_secs(60),
        inject_ids: inject,
    }
}

#[tokio::test]
async fn a_reader_gets_the_frames_from_its_index_then_closes_when_the_run_ends() {
    let run = Arc::new(Run::with_raw("r", 16, Some(1 << 20)));
    (0..3).for_each(|n| push(&run, n));
    run.finish(true, None);
    let mut sink = Collect(Vec::new());
    let out = serve(
        &mut sink,
        &run,
        Plan::From(1),
        Join::Resume,
        &opts(false),
        &CancellationToken::new(),
    )
    .await;
    assert_eq!(out, Exit::Ended);
    let text = String::from_utf8(sink.0).unwrap();
    assert!(text.starts_with(
        "data: {\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m\",\"delta\":\"1\"}\n\n"
    ));
    assert_eq!(text.matches("data: ").count(), 2);
}

#[tokio::test]
async fn injected_ids_name_each_frame_by_run_and_index() {
    let run = Arc::new(Run::with_raw("r", 16, Some(1 << 20)));
    (0..2).for_each(|n| push(&run, n));
    run.finish(true, None);
    let mut sink = Collect(Vec::new());
    serve(
        &mut sink,
        &run,
        Plan::From(0),
        Join::Resume,
        &opts(true),
        &CancellationToken::new(),
    )
    .await;
    let text = String::from_utf8(sink.0).unwrap();
    assert!(text.contains("\"delta\":\"0\"}\nid: r:0\n\n"), "{text}");
    assert!(text.ends_with("\"delta\":\"1\"}\nid: r:1\n\n"), "{text}");
}

#[tokio::test]
async fn a_from_start_reader_gets_the_compacted_history_then_the_live_tail() {
    let run = Arc::new(Run::with_raw("r", 16, Some(1 << 20)));
    (0..3).for_each(|n| push(&run, n));
    let reader = {
        let run = run.clone();
        tokio::spawn(async move {
            let mut sink = Collect(Vec::new());
            serve(
                &mut sink,
                &run,
                Plan::Render,
                Join::Resume,
                &opts(false),
                &CancellationToken::new(),
            )
            .await;
            String::from_utf8(sink.0).unwrap()
        })
    };
    // Wait until the reader is attached, then add the tail and end the run.
    while run.observers() == 0 {
        tokio::task::yield_now().await;
    }
    push(&run, 3);
    run.finish(true, None);
    let text = reader.await.unwrap();
    let frames: Vec<&str> = text.split("\n\n").filter(|f| !f.is_empty()).collect();
    assert_eq!(
        frames[0],
        r#"data: {"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"012"}"#
    );
    assert_eq!(frames.len(), 2, "{text}");
    assert!(frames[1].contains("\"delta\":\"3\""));
}

#[tokio::test]
async fn an_empty_plan_ends_at_once() {
    let run = Arc::new(Run::with_raw("r", 16, Some(1 << 20)));
    let mut sink = Collect(Vec::new());
    let out = serve(
        &mut sink,
        &run,
        Plan::Empty,
        Join::Resume,
        &opts(false),
        &CancellationToken::new(),
    )
    .await;
    assert_eq!((out, sink.0.len()), (Exit::Ended, 0));
}

#[tokio::test]
async fn a_backlog_longer_than_one_write_is_written_whole_without_a_further_wake() {
    // More frames than one write takes, and the run then silent (not ended): the reader reads
    // again on its own; a caught-up reader waits for the run instead.
    let n = MAX_FRAMES_PER_WRITE as u64 * 2 + 3;
    let run = Arc::new(Run::with_raw("r", n as usize + 8, Some(1 << 24)));
    (0..n).for_each(|i| push(&run, i));
    let stop = CancellationToken::new();
    let reader = {
        let (run, stop) = (run.clone(), stop.clone());
        tokio::spawn(async move {
            let mut sink = Collect(Vec::new());
            let out = serve(
                &mut sink,
                &run,
                Plan::From(0),
                Join::Resume,
                &opts(false),
                &stop,
            )
            .await;
            (out, String::from_utf8(sink.0).unwrap())
        })
    };
    // One thread: the reader's first poll counts it in and writes its first frame, then it
    // yields once (its head first) and writes as far as it goes without waiting (the sink never
    // blocks), noticing shutdown only once it waits caught up: so it has written all it will
    // before the run changes. Then shutdown ends it.
    while run.observers() == 0 {
        tokio::task::yield_now().await;
    }
    stop.cancel();
    let (out, text) = reader.await.unwrap();
    assert_eq!(out, Exit::Shutdown);
    assert_eq!(
        text.matches("data: ").count() as u64,
        n,
        "every frame of the backlog"
    );
    assert!(text.ends_with(&format!("\"delta\":\"{}\"}}\n\n", n - 1)));
}

/// The `delta` of every frame in `chunk`, in order.
fn deltas(chunk: &[u8]) -> Vec<u64> {
    String::from_utf8_lossy(chunk)
        .split("\"delta\":\"")
        .skip(1)
        .filter_map(|s| s.split('"').next()?.parse().ok())
        .collect()
}

/// Readers of the raw record from index 0, attaching together to a run of `n` frames that
/// ended: every write, tagged with its reader, in the order they were made.
async fn attach_together(n: u64, tags: &[&'static str]) -> Vec<(&'static str, Bytes)> {
    let run = Arc::new(Run::with_raw("r", n as usize + 8, Some(1 << 24)));
    (0..n).for_each(|i| push(&run, i));
    run.finish(true, None);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let stop = CancellationToken::new();
    let tasks: Vec<_> = tags
        .iter()
        .map(|&tag| {
            let (run, stop, tx) = (run.clone(), stop.clone(), tx.clone());
            tokio::spawn(async move {
                let mut sink = Tagged { tag, tx };
                let plan = Plan::From(0);
                serve(&mut sink, &run, plan, Join::Resume, &opts(false), &stop).await
            })
        })
        .collect();
    drop(tx);
    for t in tasks {
        assert_eq!(t.await.unwrap(), Exit::Ended);
    }
    let mut writes = Vec::new();
    while let Ok(w) = rx.try_recv() {
        writes.push(w);
    }
    writes
}

#[tokio::test]
async fn readers_attaching_together_far_behind_each_write_their_first_frame_before_any_backlog() {
    // The first write carries the response head: one frame, then the reader yields, so every
    // reader that attached together has its head out before anyone's backlog. The sinks never
    // wait, so without the yield the first reader would write its whole backlog first.
    let n = MAX_FRAMES_PER_WRITE as u64 * 2 + 3;
    let writes = attach_together(n, &["a", "b"]).await;
    let firsts: Vec<_> = writes[..2].iter().map(|(t, c)| (*t, deltas(c))).collect();
    assert_eq!(firsts, [("a", vec![0]), ("b", vec![0])]);
    for tag in ["a", "b"] {
        let all: Vec<u64> = writes
            .iter()
            .filter(|(t, _)| *t == tag)
            .flat_map(|(_, c)| deltas(c))
            .collect();
        assert_eq!(all, (0..n).collect::<Vec<_>>(), "reader {tag}");
    }
}

#[tokio::test]
async fn a_reader_whose_backlog_fits_in_one_write_gets_it_whole_in_its_first_write() {
    let n = MAX_FRAMES_PER_WRITE as u64;
    let writes = attach_together(n, &["a"]).await;
    assert_eq!(deltas(&writes[0].1), (0..n).collect::<Vec<_>>());
    assert_eq!(writes.len(), 1);
}
