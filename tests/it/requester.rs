//! A protocol-1 requester's task runs its run's producer beside its reader: a requester whose
//! socket does not drain holds up neither the upstream read nor the run's other readers, one
//! that leaves is counted out at once while its run is produced to its end, and a drain waits
//! for that producer.

use std::time::Duration;

use crate::support::*;
use serde_json::{json, Value};

/// An AG-UI turn of `n` deltas of `len` bytes each.
fn big_turn(n: usize, len: usize) -> Vec<Value> {
    let mut v = vec![json!({"type":"RUN_STARTED","threadId":"t","runId":"x"})];
    for i in 0..n {
        let delta = char::from(b'a' + (i % 26) as u8).to_string().repeat(len);
        v.push(json!({"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":delta}));
    }
    v.push(json!({"type":"RUN_FINISHED","threadId":"t","runId":"x"}));
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requester_that_stops_reading_holds_up_neither_the_upstream_nor_another_reader() {
    // 12 MiB after the gate: more than the loopback socket's buffers hold for a reader that
    // reads nothing.
    let events = big_turn(400, 32 * 1024);
    let gate = Gate::default();
    let be = turn_backend(events.clone(), Some((1, gate.clone()))).await;
    let tether = sidecar(be.addr, "").await;
    let mut requester = post(tether.addr, "/chat", &chat("c")).await;
    let snap = requester.frame().await.unwrap();
    assert_eq!(snap.ty(), "STREAM_SNAPSHOT");
    let first = requester.frame().await.unwrap();
    assert_eq!(first.seq(), 1);
    let mut other = post(tether.addr, "/chat/live", &chat("c")).await;
    let other_snap = other.frame().await.unwrap();
    assert_eq!(other_snap.seq(), 1);
    // The requester reads nothing more while the rest of the run is read and served.
    gate.open();
    let rest = within("the other reader's stream", other.frames_to_end()).await;
    assert_eq!(rest.len(), events.len());
    let end = rest.last().unwrap();
    assert_eq!(
        (end.ty(), end.json["persisted"].clone()),
        ("STREAM_END", json!(true))
    );
    be.wait_answers(1).await;
    assert!(be.served.lock()[0].completed);
    // The requester catches up from the journal afterwards: every event once, one end.
    let mine = within("the requester's stream", requester.frames_to_end()).await;
    let mut state = Reduced::default();
    let at = state.apply_frames(&[snap, first], 0);
    state.apply_frames(&mine, at);
    assert_eq!(state, Reduced::of(&events));
    let ends = mine.iter().filter(|f| f.ty() == "STREAM_END").count();
    assert_eq!(ends, 1);
    assert_eq!(mine.last().unwrap().seq(), events.len() as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requester_that_leaves_is_counted_out_at_once_and_its_run_is_produced_to_its_end() {
    let events = turn(20);
    let gate = Gate::default();
    let be = turn_backend(events.clone(), Some((10, gate.clone()))).await;
    let tether = sidecar(be.addr, "").await;
    let (run_id, requester) = started(&tether, "c", &[]).await;
    let run = tether.find_run("c", &run_id).unwrap();
    assert_eq!(run.observers(), 1);
    requester.kill();
    // Counted out while its run still waits on the backend.
    eventually("the requester counted out", || run.observers() == 0).await;
    assert!(run.is_producing());
    assert_eq!(tether.metric("tether_observers_active").await, 0.0);
    gate.open();
    be.wait_answers(1).await;
    assert!(be.served.lock()[0].completed);
    eventually("the run produced to its end", || !run.is_producing()).await;
    assert_eq!(run.head(), events.len() as u64);
    assert!(run.end().is_some_and(|e| e.persisted));
    let mut r = post(tether.addr, "/chat/live", &cursor("c", &run_id, 0)).await;
    let frames = r.frames_to_end().await;
    let mut state = Reduced::default();
    state.apply_frames(&frames, 0);
    assert_eq!(state, Reduced::of(&events));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_waits_for_the_producer_of_a_requester_that_left() {
    let events = turn(6);
    let gate = Gate::default();
    let be = turn_backend(events.clone(), Some((3, gate.clone()))).await;
    let mut tether = sidecar(be.addr, "").await;
    let (run_id, requester) = started(&tether, "c", &[]).await;
    let run = tether.find_run("c", &run_id).unwrap();
    requester.kill();
    eventually("the requester counted out", || run.observers() == 0).await;
    let handle = tether.handle.take().unwrap();
    let drain = tokio::spawn(handle.drain(Duration::from_secs(30)));
    let admin = tether.admin;
    eventually_async("draining", || async move {
        request(admin, "GET", "/readyz", &[], b"").await.status == 503
    })
    .await;
    assert!(
        !drain.is_finished(),
        "the drain waits for the run's producer"
    );
    assert!(run.is_producing());
    gate.open();
    assert!(
        within("drain", drain).await.unwrap(),
        "the run ended in time"
    );
    assert_eq!(run.head(), events.len() as u64);
    assert!(run.end().is_some_and(|e| e.persisted));
}

/// The SSE answer of `events` cut into chunks of seeded sizes (several events in a chunk, an
/// event across chunks), with short pauses between some.
fn cut_answer(events: &[Value], seed: u64) -> Vec<Step> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let body: Vec<u8> = events.iter().flat_map(|e| sse(e).to_vec()).collect();
    let mut steps = vec![sse_head()];
    let mut at = 0;
    while at < body.len() {
        let n = rng.gen_range(1..400).min(body.len() - at);
        steps.push(Step::Chunk(bytes::Bytes::copy_from_slice(
            &body[at..at + n],
        )));
        at += n;
        if rng.gen_bool(0.3) {
            steps.push(Step::Sleep(Duration::from_millis(rng.gen_range(0..4))));
        }
    }
    steps.push(Step::End);
    steps
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_requester_reads_the_bytes_a_reader_from_the_start_reads() {
    // The requester's frames come mostly by the producer's handoff; a resume from cursor 0
    // reads the journal. After the requester's first frame (its empty snapshot) the bytes are
    // the same.
    for seed in 0..4u64 {
        let events = turn(40 + 20 * seed as usize);
        let answer = events.clone();
        let be = backend(move |_| cut_answer(&answer, seed)).await;
        let tether = sidecar(be.addr, "").await;
        let chat_id = format!("c{seed}");
        let mut requester = post(tether.addr, "/chat", &chat(&chat_id)).await;
        let run_id = requester.header("x-tether-run-id").unwrap().to_string();
        let mine = within("the requester's stream", requester.body_to_end()).await;
        let mut resume = post(tether.addr, "/chat/live", &cursor(&chat_id, &run_id, 0)).await;
        let theirs = within("the resume", resume.body_to_end()).await;
        let first = mine.windows(2).position(|w| w == b"\n\n").unwrap() + 2;
        assert!(mine[..first].windows(15).any(|w| w == b"STREAM_SNAPSHOT"));
        assert_eq!(
            String::from_utf8_lossy(&mine[first..]),
            String::from_utf8_lossy(&theirs),
            "seed {seed}"
        );
        let ends = theirs.windows(10).filter(|w| w == b"STREAM_END").count();
        assert_eq!(ends, 1, "seed {seed}");
    }
}
