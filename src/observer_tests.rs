//! Tests of attach decisions and the observer write loop, with an in-memory sink.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::{mpsc, watch};

use super::*;
use crate::event::classify;
use crate::sse::{Decoded, Decoder, SseEvent};

fn ev(v: Value) -> crate::event::Event {
    classify(&SseEvent {
        event: None,
        data: Bytes::from(v.to_string()),
        id: None,
    })
}

fn text(d: &str) -> crate::event::Event {
    ev(json!({"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":d}))
}

fn live(reg: &Arc<Registry>, chat: &str, id: &str, window: usize) -> Arc<Run> {
    let p = reg.begin(chat, Owner::NONE, id);
    let run = Arc::new(Run::new(id, window));
    reg.go_live(&p, run.clone());
    run
}

/// A sink that forwards every write to a channel; `send` waits while `gate` is closed.
struct ChanSink {
    tx: mpsc::UnboundedSender<Bytes>,
    gate: watch::Receiver<bool>,
}

#[async_trait]
impl Sink for ChanSink {
    async fn send(&mut self, data: Bytes) -> Result<(), ()> {
        let _ = self.gate.wait_for(|open| *open).await;
        self.tx.send(data).map_err(|_| ())
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

fn opts() -> Options {
    Options {
        heartbeat: Duration::from_secs(3600),
    }
}

#[test]
fn attach_table_without_cursor() {
    let reg = Registry::new(Duration::from_secs(60), 8, Metrics::new());
    assert!(matches!(
        decide(&reg, "c", &Owner::NONE, None, None),
        Decision::Missing
    ));
    let run = live(&reg, "c", "r1", 8);
    assert!(matches!(
        decide(&reg, "c", &Owner::NONE, None, None),
        Decision::Serve {
            start: Start::Snapshot,
            reset: None,
            ..
        }
    ));
    run.finish(false, Some("upstream_reset"));
    assert!(matches!(
        decide(&reg, "c", &Owner::NONE, None, None),
        Decision::Serve {
            start: Start::Snapshot,
            ..
        }
    ));
    let run2 = live(&reg, "c", "r2", 8);
    run2.finish(true, None);
    assert!(matches!(
        decide(&reg, "c", &Owner::NONE, None, None),
        Decision::NoContent
    ));
}

#[test]
fn attach_table_with_cursor() {
    let reg = Registry::new(Duration::from_secs(60), 8, Metrics::new());
    assert!(matches!(
        decide(&reg, "c", &Owner::NONE, Some("nope"), Some(3)),
        Decision::NoContent
    ));
    let run = live(&reg, "c", "r1", 2);
    for d in ["a", "b", "c", "d"] {
        run.append(&[text(d)]);
    }
    let reset = |d: Decision| match d {
        Decision::Serve {
            start: Start::Snapshot,
            reset,
            ..
        } => reset,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        reset(decide(&reg, "c", &Owner::NONE, Some("nope"), Some(3))),
        Some("unknown_run")
    );
    assert_eq!(
        reset(decide(&reg, "c", &Owner::NONE, Some("r1"), Some(9))),
        Some("future_cursor")
    );
    assert_eq!(
        reset(decide(&reg, "c", &Owner::NONE, Some("r1"), Some(1))),
        Some("expired_cursor")
    );
    assert!(matches!(
        decide(&reg, "c", &Owner::NONE, Some("r1"), Some(3)),
        Decision::Serve {
            start: Start::After(3),
            reset: None,
            ..
        }
    ));
    run.finish(true, None);
    // At the head of a completed run: served from the cursor, which yields just STREAM_END.
    assert!(matches!(
        decide(&reg, "c", &Owner::NONE, Some("r1"), Some(4)),
        Decision::Serve {
            start: Start::After(4),
            ..
        }
    ));
}

#[tokio::test]
async fn waiting_attach_gets_the_run_as_soon_as_it_is_live() {
    let reg = Registry::new(Duration::from_secs(60), 8, Metrics::new());
    let r2 = reg.clone();
    let waiter =
        tokio::spawn(
            async move { wait_for_run(&r2, "c", &Owner::NONE, Duration::from_secs(30)).await },
        );
    tokio::task::yield_now().await;
    live(&reg, "c", "r1", 8);
    match waiter.await.unwrap() {
        Decision::Serve { run, .. } => assert_eq!(run.id(), "r1"),
        other => panic!("{other:?}"),
    }
    let d = wait_for_run(&reg, "none", &Owner::NONE, Duration::from_millis(1)).await;
    assert!(matches!(d, Decision::NoContent));
}

#[tokio::test]
async fn serves_snapshot_then_live_events_then_one_end() {
    let m = Metrics::new();
    let run = Arc::new(Run::new("r", 8));
    run.append(&[text("a"), text("b")]);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (_gate_tx, gate) = watch::channel(true);
    let (_stop_tx, stop) = watch::channel(false);
    let r = run.clone();
    let m2 = m.clone();
    let task = tokio::spawn(async move {
        let mut sink = ChanSink { tx, gate };
        serve(&mut sink, &r, Start::Snapshot, None, &opts(), &m2, stop).await
    });
    // The snapshot arrives first; wait for it before appending more.
    let first = rx.recv().await.unwrap();
    run.append(&[text("c")]);
    run.finish(true, None);
    assert_eq!(task.await.unwrap(), Outcome::Ended);
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
    let (_stop_tx, stop) = watch::channel(false);
    let r = run.clone();
    let m2 = m.clone();
    let task = tokio::spawn(async move {
        let mut sink = ChanSink { tx, gate };
        serve(&mut sink, &r, Start::After(0), None, &opts(), &m2, stop).await
    });
    let _ = rx.recv().await.unwrap(); // seq 1 written
    gate_tx.send_replace(false); // the client stops reading
    run.append(&[text("b")]);
    for d in ["c", "d", "e", "f", "g", "h"] {
        run.append(&[ev(json!({"type":"CUSTOM","name":"x","value":d})), text(d)]);
    }
    gate_tx.send_replace(true);
    run.finish(true, None);
    assert_eq!(task.await.unwrap(), Outcome::Ended);
    let frames = frames_of(&mut rx, &mut Decoder::new(1 << 20));
    let types: Vec<&str> = frames.iter().map(|f| f["type"].as_str().unwrap()).collect();
    // Seq 2 left the window before the observer could write it: a reset, not a gap.
    assert_eq!(types, ["STREAM_SNAPSHOT", "STREAM_END"]);
    assert_eq!(frames[0]["seq"], run.head());
    assert_eq!(frames[0]["events"][0]["delta"], "ab");
    assert_eq!(frames[0]["events"].as_array().unwrap().len(), 13);
    assert!(m
        .render()
        .contains("tether_snapshot_resets_total{reason=\"lagged\"} 1"));
}

#[tokio::test]
async fn fresh_start_sends_an_empty_snapshot_at_seq_zero() {
    let m = Metrics::new();
    let run = Arc::new(Run::new("r", 4));
    run.finish(false, Some("no_terminal_event"));
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (_g, gate) = watch::channel(true);
    let (_s, stop) = watch::channel(false);
    let mut sink = ChanSink { tx, gate };
    assert_eq!(
        serve(&mut sink, &run, Start::Fresh, None, &opts(), &m, stop).await,
        Outcome::Ended
    );
    let frames = frames_of(&mut rx, &mut Decoder::new(1 << 20));
    assert_eq!(
        frames[0],
        json!({"type":"STREAM_SNAPSHOT","run_id":"r","seq":0,"events":[]})
    );
    assert_eq!(frames[1]["reason"], "no_terminal_event");
}
