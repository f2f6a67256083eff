//! Tests of attach decisions and the observer write loop, with an in-memory sink.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::{mpsc, watch};

use super::*;
use crate::deliver::collect::Tagged;
use crate::record::format::{agui::Agui, Format};
use crate::record::sse::{Decoded, Decoder, SseEvent};

fn ev(v: Value) -> crate::record::format::Event {
    Agui.classify(&SseEvent {
        event: None,
        data: Bytes::from(v.to_string()),
        id: None,
    })
}

fn text(d: &str) -> crate::record::format::Event {
    ev(json!({"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":d}))
}

/// A sink that forwards every write to a channel; `send` waits while `gate` is closed.
struct ChanSink {
    tx: mpsc::UnboundedSender<Bytes>,
    gate: watch::Receiver<bool>,
}

impl Sink for ChanSink {
    async fn send(&mut self, data: Bytes) -> Result<(), ClientGone> {
        let _ = self.gate.wait_for(|open| *open).await;
        self.tx.send(data).map_err(|_| ClientGone)
    }
    async fn closed(&mut self) {
        std::future::pending::<()>().await
    }
}

/// Decodes everything written so far into frame JSON.
fn frames_of(rx: &mut mpsc::UnboundedReceiver<Bytes>, dec: &mut Decoder) -> Vec<Value> {
    let mut out = Vec::new();
    let mut decoded = Vec::new();
    while let Ok(chunk) = rx.try_recv() {
        dec.feed(&chunk, &mut decoded);
    }
    for d in decoded {
        if let Decoded::Event(e) = d {
            out.push(serde_json::from_slice(&e.data).unwrap());
        }
    }
    out
}

/// The `STREAM_EVENT` seqs of one written chunk.
fn event_seqs(chunk: &Bytes) -> Vec<u64> {
    let mut decoded = Vec::new();
    Decoder::new(1 << 24).feed(chunk, &mut decoded);
    decoded
        .into_iter()
        .filter_map(|d| match d {
            Decoded::Event(e) => serde_json::from_slice::<Value>(&e.data).ok(),
            _ => None,
        })
        .filter(|f| f["type"] == "STREAM_EVENT")
        .filter_map(|f| f["seq"].as_u64())
        .collect()
}

/// A reader resuming from cursor 0 of a run of `n` text events (`d0`, `d1`, …), writing to a
/// [`ChanSink`] that never waits; stopped by the token.
fn resume_from_zero(
    n: usize,
) -> (
    mpsc::UnboundedReceiver<Bytes>,
    CancellationToken,
    tokio::task::JoinHandle<Exit>,
) {
    let m = Metrics::new();
    let run = Arc::new(Run::new("r", n + 8));
    let events: Vec<_> = (0..n).map(|i| text(&format!("d{i}"))).collect();
    run.append(&events);
    let (tx, rx) = mpsc::unbounded_channel();
    let (gate_tx, gate) = watch::channel(true);
    let stop = CancellationToken::new();
    let s2 = stop.clone();
    let task = tokio::spawn(async move {
        let _open = gate_tx;
        let mut sink = ChanSink { tx, gate };
        serve(&mut sink, &run, Start::After(0), None, &opts(), &m, &s2).await
    });
    (rx, stop, task)
}

fn opts() -> Options {
    Options {
        heartbeat: Duration::from_secs(3600),
    }
}

#[tokio::test]
async fn serves_snapshot_then_live_events_then_one_end() {
    let m = Metrics::new();
    let run = Arc::new(Run::new("r", 8));
    run.append(&[text("a"), text("b")]);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (_gate_tx, gate) = watch::channel(true);
    let stop = CancellationToken::new();
    let r = run.clone();
    let m2 = m.clone();
    let task = tokio::spawn(async move {
        let mut sink = ChanSink { tx, gate };
        serve(&mut sink, &r, Start::Snapshot, None, &opts(), &m2, &stop).await
    });
    // The snapshot arrives first; wait for it before appending more.
    let first = rx.recv().await.unwrap();
    run.append(&[text("c")]);
    run.finish(true, None);
    assert_eq!(task.await.unwrap(), Exit::Ended);
    let (first_tx, mut first_rx) = mpsc::unbounded_channel();
    first_tx.send(first).unwrap();
    let snap = frames_of(&mut first_rx, &mut Decoder::new(1 << 20)).remove(0);
    assert_eq!(snap["seq"], 2);
    assert_eq!(snap["events"][0]["delta"], "ab");
    let rest = frames_of(&mut rx, &mut Decoder::new(1 << 20));
    let types: Vec<&str> = rest.iter().map(|f| f["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["STREAM_EVENT", "STREAM_END"]);
    assert_eq!(rest[0]["seq"], 3);
    assert_eq!(rest[1]["persisted"], true);
    assert_eq!(run.observers(), 0);
}

#[tokio::test]
async fn a_slow_observer_is_reset_by_snapshot_and_loses_nothing() {
    let m = Metrics::new();
    let run = Arc::new(Run::new("r", 4));
    run.append(&[text("a")]);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (gate_tx, gate) = watch::channel(true);
    let stop = CancellationToken::new();
    let r = run.clone();
    let m2 = m.clone();
    let task = tokio::spawn(async move {
        let mut sink = ChanSink { tx, gate };
        serve(&mut sink, &r, Start::After(0), None, &opts(), &m2, &stop).await
    });
    let _ = rx.recv().await.unwrap(); // seq 1 written
    gate_tx.send_replace(false); // the client stops reading
    run.append(&[text("b")]);
    for d in ["c", "d", "e", "f", "g", "h"] {
        run.append(&[ev(json!({"type":"CUSTOM","name":"x","value":d})), text(d)]);
    }
    gate_tx.send_replace(true);
    run.finish(true, None);
    assert_eq!(task.await.unwrap(), Exit::Ended);
    let frames = frames_of(&mut rx, &mut Decoder::new(1 << 20));
    let types: Vec<&str> = frames.iter().map(|f| f["type"].as_str().unwrap()).collect();
    // Seq 2 left the window before the observer could write it: a reset, not a gap.
    assert_eq!(types, ["STREAM_SNAPSHOT", "STREAM_END"]);
    assert_eq!(frames[0]["seq"], run.head());
    assert_eq!(frames[0]["events"][0]["delta"], "ab");
    assert_eq!(frames[0]["events"].as_array().unwrap().len(), 13);
    assert!(m
        .render()
        .contains("tether_snapshot_resets_total{dialect=\"protocol1\",reason=\"lagged\"} 1"));
}

#[tokio::test]
async fn fresh_start_sends_an_empty_snapshot_at_seq_zero() {
    let m = Metrics::new();
    let run = Arc::new(Run::new("r", 4));
    run.finish(false, Some(crate::vocab::end::EndReason::NoTerminalEvent));
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (_g, gate) = watch::channel(true);
    let stop = CancellationToken::new();
    let mut sink = ChanSink { tx, gate };
    assert_eq!(
        serve(&mut sink, &run, Start::Fresh, None, &opts(), &m, &stop).await,
        Exit::Ended
    );
    let frames = frames_of(&mut rx, &mut Decoder::new(1 << 20));
    assert_eq!(
        frames[0],
        json!({"type":"STREAM_SNAPSHOT","run_id":"r","seq":0,"events":[]})
    );
    assert_eq!(frames[1]["reason"], "no_terminal_event");
}

#[tokio::test(start_paused = true)]
async fn an_idle_observer_gets_a_keepalive_comment_each_heartbeat_and_nothing_between() {
    let run = Arc::new(Run::new("r", 8));
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (_gate_tx, gate) = watch::channel(true);
    let (r, m) = (run.clone(), Metrics::new());
    let task = tokio::spawn(async move {
        let mut sink = ChanSink { tx, gate };
        let opts = Options {
            heartbeat: Duration::from_secs(15),
        };
        let stop = CancellationToken::new();
        serve(&mut sink, &r, Start::After(0), None, &opts, &m, &stop).await
    });
    tokio::time::sleep(Duration::from_secs(14)).await;
    assert!(rx.try_recv().is_err(), "nothing before the first heartbeat");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(rx.try_recv().unwrap(), Bytes::from_static(KEEPALIVE));
    assert!(rx.try_recv().is_err());
    tokio::time::sleep(Duration::from_secs(15)).await;
    assert_eq!(rx.try_recv().unwrap(), Bytes::from_static(KEEPALIVE));
    run.finish(true, None);
    assert_eq!(task.await.unwrap(), Exit::Ended);
}

#[tokio::test]
async fn a_backlog_longer_than_one_write_is_written_whole_without_a_further_wake() {
    // More frames behind the cursor than one write takes, and then nothing: the observer must
    // read again on its own (a caught-up observer waits for the run instead).
    let n = MAX_FRAMES_PER_WRITE * 2 + 3;
    let (mut rx, stop, task) = resume_from_zero(n);
    let mut dec = Decoder::new(1 << 20);
    let mut frames = Vec::new();
    while frames.len() < n {
        let chunk = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .expect("the whole backlog is written without the run changing")
            .unwrap();
        let mut decoded = Vec::new();
        dec.feed(&chunk, &mut decoded);
        frames.extend(decoded.into_iter().filter_map(|d| match d {
            Decoded::Event(e) => Some(serde_json::from_slice::<Value>(&e.data).unwrap()),
            _ => None,
        }));
    }
    let seqs: Vec<u64> = frames.iter().map(|f| f["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=n as u64).collect::<Vec<_>>());
    assert_eq!(frames[n - 1]["event"]["delta"], format!("d{}", n - 1));
    stop.cancel();
    assert_eq!(task.await.unwrap(), Exit::Shutdown);
}

#[tokio::test]
async fn readers_attaching_together_far_behind_each_write_their_first_frame_before_any_backlog() {
    // The first write carries the response head: one frame, then the reader yields, so every
    // reader that attached together has its head out before anyone's backlog. The sinks never
    // wait, so without the yield the first reader would write its whole backlog first.
    let m = Metrics::new();
    let n = MAX_FRAMES_PER_WRITE * 2 + 3;
    let run = Arc::new(Run::new("r", n + 8));
    let events: Vec<_> = (0..n).map(|i| text(&format!("d{i}"))).collect();
    run.append(&events);
    run.finish(true, None);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let stop = CancellationToken::new();
    let tasks: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|tag| {
            let (r, m2, s2, tx) = (run.clone(), m.clone(), stop.clone(), tx.clone());
            tokio::spawn(async move {
                let mut sink = Tagged { tag, tx };
                serve(&mut sink, &r, Start::After(0), None, &opts(), &m2, &s2).await
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
    let firsts: Vec<_> = writes[..2]
        .iter()
        .map(|(t, c)| (*t, event_seqs(c)))
        .collect();
    assert_eq!(firsts, [("a", vec![1]), ("b", vec![1])]);
    for tag in ["a", "b"] {
        let seqs: Vec<u64> = writes
            .iter()
            .filter(|(t, _)| *t == tag)
            .flat_map(|(_, c)| event_seqs(c))
            .collect();
        assert_eq!(seqs, (1..=n as u64).collect::<Vec<_>>(), "reader {tag}");
    }
}

#[tokio::test]
async fn a_reader_whose_backlog_fits_in_one_write_gets_it_whole_in_its_first_write() {
    let n = MAX_FRAMES_PER_WRITE;
    let (mut rx, stop, task) = resume_from_zero(n);
    let first = rx.recv().await.unwrap();
    assert_eq!(event_seqs(&first), (1..=n as u64).collect::<Vec<_>>());
    stop.cancel();
    assert_eq!(task.await.unwrap(), Exit::Shutdown);
}

/// A sink whose every write makes the run change again (so the reader never finds it idle),
/// refusing writes after `left` of them.
struct Busy {
    run: Arc<Run>,
    left: usize,
}

impl Sink for Busy {
    async fn send(&mut self, _data: Bytes) -> Result<(), ClientGone> {
        self.left = self.left.checked_sub(1).ok_or(ClientGone)?;
        self.run.append(&[text("x")]);
        Ok(())
    }
    async fn closed(&mut self) {
        std::future::pending::<()>().await
    }
}

#[tokio::test]
async fn shutdown_ends_a_reader_that_never_runs_out_of_frames() {
    let run = Arc::new(Run::new("r", 64));
    run.append(&[text("a")]);
    let stop = CancellationToken::new();
    stop.cancel();
    let mut sink = Busy {
        run: run.clone(),
        left: 100,
    };
    let out = serve(
        &mut sink,
        &run,
        Start::After(0),
        None,
        &opts(),
        &Metrics::new(),
        &stop,
    )
    .await;
    assert_eq!(
        out,
        Exit::Shutdown,
        "not after writing until the client gave up"
    );
    assert_eq!(sink.left, 99, "one write, then shutdown");
}

/// A sink that records when each write arrived; `send` waits while `gate` is closed.
struct Timed {
    at: Vec<(Instant, Bytes)>,
    gate: watch::Receiver<bool>,
}

impl Sink for Timed {
    async fn send(&mut self, data: Bytes) -> Result<(), ClientGone> {
        let _ = self.gate.wait_for(|open| *open).await;
        self.at.push((Instant::now(), data));
        Ok(())
    }
    async fn closed(&mut self) {
        std::future::pending::<()>().await
    }
}

#[tokio::test(start_paused = true)]
async fn heartbeats_missed_during_a_long_write_are_not_written_in_a_burst() {
    let run = Arc::new(Run::new("r", 8));
    run.append(&[text("a")]);
    let (gate_tx, gate) = watch::channel(false);
    let stop = CancellationToken::new();
    let (r, s) = (run.clone(), stop.clone());
    let task = tokio::spawn(async move {
        let mut sink = Timed {
            at: Vec::new(),
            gate,
        };
        let opts = Options {
            heartbeat: Duration::from_secs(1),
        };
        let out = serve(
            &mut sink,
            &r,
            Start::After(0),
            None,
            &opts,
            &Metrics::new(),
            &s,
        )
        .await;
        (out, sink.at)
    });
    // The first write (seq 1) takes 5.5 s: five heartbeats fall due meanwhile.
    tokio::time::sleep(Duration::from_millis(5500)).await;
    gate_tx.send_replace(true);
    tokio::time::sleep(Duration::from_millis(2200)).await;
    stop.cancel();
    let (out, at) = task.await.unwrap();
    assert_eq!(out, Exit::Shutdown);
    let keepalives: Vec<Instant> = at
        .iter()
        .filter(|(_, d)| d == &Bytes::from_static(KEEPALIVE))
        .map(|(t, _)| *t)
        .collect();
    assert!(
        keepalives.windows(2).all(|w| w[1] > w[0]),
        "at most one keepalive at a time: {keepalives:?}"
    );
    assert!(
        (2..=4).contains(&keepalives.len()),
        "one when the write ends, then one a second: {keepalives:?}"
    );
}
