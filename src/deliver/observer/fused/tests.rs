//! The fused reader against the general one: the same run read by both must give the same
//! bytes, whatever the batches, the pace, a slow socket or a second reader joining mid-run.

use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use bytes::Bytes;
use proptest::prelude::*;
use serde_json::json;
use tokio::sync::mpsc;

use super::*;
use crate::accounting::Join;
use crate::deliver::collect::Collect;
use crate::deliver::observer::serve;
use crate::producer::Handoff;
use crate::record::format::{agui::Agui, Event, Format};
use crate::record::sse::SseEvent;

/// The `i`-th delta of `len` bytes; every seventh carries an SSE name of its own, which its
/// frame carries too.
fn text(i: usize, len: usize) -> Event {
    let delta: String = (0..len)
        .map(|k| char::from(b'a' + ((i + k) % 26) as u8))
        .collect();
    let mut e = Agui.classify(&SseEvent {
        event: None,
        data: Bytes::from(
            json!({"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":delta}).to_string(),
        ),
        id: None,
    });
    if i % 7 == 3 {
        e.sse_name = Some(Bytes::from_static(br#"delta "named""#));
    }
    e
}

fn opts() -> Options {
    Options {
        heartbeat: Duration::from_secs(3600),
    }
}

/// A sink that keeps every byte and takes `delays[i]` ms (paused time) for its `i`-th write.
struct Slow {
    out: Vec<u8>,
    delays: Vec<u64>,
    writes: usize,
}

impl Sink for Slow {
    async fn send(&mut self, data: Bytes) -> Result<(), ClientGone> {
        let ms = self.delays.get(self.writes).copied().unwrap_or(0);
        self.writes += 1;
        if ms > 0 {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        self.out.extend_from_slice(&data);
        Ok(())
    }
    async fn closed(&mut self) {
        std::future::pending::<()>().await
    }
}

/// One case: batches of events (sizes), the producer's pause before each (ms), the fused
/// reader's write delays, and when a second reader joins (before which batch).
#[derive(Debug, Clone)]
struct Case {
    batches: Vec<(usize, u64)>,
    delays: Vec<u64>,
    second: Option<usize>,
    len: usize,
    /// The producer hands its appends over (the direct path) or not (the journal only).
    direct: bool,
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec((1usize..4, prop_oneof![Just(0u64), 0u64..30]), 1..40),
        prop::collection::vec(prop_oneof![Just(0u64), Just(0), 1u64..80], 0..40),
        prop::option::of(0usize..40),
        prop_oneof![Just(8usize), 1usize..300],
        prop_oneof![3 => Just(true), 1 => Just(false)],
    )
        .prop_map(|(batches, delays, second, len, direct)| Case {
            batches,
            delays,
            second,
            len,
            direct,
        })
}

/// Appends `batch` to `run` as the producer's read loop does: then hands it over.
fn append(run: &Run, handoff: &Handoff, batch: &[Event]) {
    let appended = run.append(batch);
    handoff.appended(run, batch, appended.events);
}

/// What one case gave: the bytes of the fused requester, of a general reader from the start,
/// and of a second general reader joining by snapshot (empty when none joined); and how many
/// appends were handed over.
struct Read {
    fused: Vec<u8>,
    general: Vec<u8>,
    second: Vec<u8>,
    handed: u64,
}

fn read_case(c: &Case) -> Read {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let m = Metrics::new();
        let stop = CancellationToken::new();
        let run = Arc::new(Run::new("r", 4096));
        let r = run.clone();
        let (m2, stop2) = (m.clone(), stop.clone());
        let general = tokio::spawn(async move {
            let mut sink = Collect(Vec::new());
            serve(&mut sink, &r, Start::Fresh, None, &opts(), &m2, &stop2).await;
            sink.0
        });
        let (join_tx, mut join_rx) = mpsc::unbounded_channel();
        let (r, batches, second, len) = (run.clone(), c.batches.clone(), c.second, c.len);
        let handoff = Handoff::new();
        let h = handoff.clone();
        let producer = async move {
            let mut n = 0;
            for (i, (size, pause)) in batches.into_iter().enumerate() {
                if pause > 0 {
                    tokio::time::sleep(Duration::from_millis(pause)).await;
                }
                if second == Some(i) {
                    let _ = join_tx.send(());
                    tokio::task::yield_now().await;
                }
                let batch: Vec<Event> = (0..size).map(|k| text(n + k, len)).collect();
                n += size;
                append(&r, &h, &batch);
            }
            r.finish(true, None);
        };
        let r = run.clone();
        let (m2, stop2) = (m.clone(), stop.clone());
        let joiner = tokio::spawn(async move {
            if join_rx.recv().await.is_none() {
                return Vec::new();
            }
            let mut sink = Collect(Vec::new());
            serve(&mut sink, &r, Start::Snapshot, None, &opts(), &m2, &stop2).await;
            sink.0
        });
        let mut producing = match c.direct {
            true => Producing::with_handoff(producer, handoff.clone()),
            false => Producing::new(producer),
        };
        let mut sink = Slow {
            out: Vec::new(),
            delays: c.delays.clone(),
            writes: 0,
        };
        let guard = run.observe(Join::Origin);
        let o = opts();
        let serving = serve_fused(&mut sink, &mut producing, &run, guard, &o, &m, &stop);
        let exit = tokio::time::timeout(Duration::from_secs(3600), serving).await;
        assert_eq!(exit, Ok(Exit::Ended));
        producing.finish().await;
        Read {
            fused: sink.out,
            general: general.await.unwrap(),
            second: joiner.await.unwrap(),
            handed: handoff.count(),
        }
    })
}

fn ends(bytes: &[u8]) -> usize {
    bytes
        .windows(b"STREAM_END".len())
        .filter(|w| w == b"STREAM_END")
        .count()
}

/// The last frame (the end).
fn end_frame(bytes: &[u8]) -> &[u8] {
    let body = &bytes[..bytes.len().saturating_sub(2)];
    let from = body
        .windows(2)
        .rposition(|w| w == b"\n\n")
        .map_or(0, |i| i + 2);
    &bytes[from..]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// The fused requester writes exactly the general reader's bytes (one snapshot, every
    /// event once in order, one end), with a slow socket and a second reader or not.
    #[test]
    fn the_fused_reader_writes_the_general_readers_bytes(c in case()) {
        let Read { fused, general, second, handed } = read_case(&c);
        if !c.direct {
            prop_assert_eq!(handed, 0);
        }
        prop_assert_eq!(ends(&general), 1);
        prop_assert!(fused == general, "fused {} bytes, general {}", fused.len(), general.len());
        if c.second.is_some_and(|at| at < c.batches.len()) {
            prop_assert_eq!(ends(&second), 1);
            prop_assert_eq!(end_frame(&general), end_frame(&second));
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_slow_socket_does_not_hold_up_the_producer_and_the_reader_catches_up_from_the_journal() {
    let m = Metrics::new();
    let stop = CancellationToken::new();
    let run = Arc::new(Run::new("r", 4096));
    let appended = Arc::new(AtomicUsize::new(0));
    let (r, a) = (run.clone(), appended.clone());
    let handoff = Handoff::new();
    let h = handoff.clone();
    let producer = async move {
        for i in 0..600 {
            tokio::time::sleep(Duration::from_millis(1)).await;
            append(&r, &h, &[text(i, 8)]);
            a.fetch_add(1, Ordering::Relaxed);
        }
        r.finish(true, None);
    };
    let mut producing = Producing::with_handoff(producer, handoff.clone());
    // The snapshot and the first event go at once; the third write takes a second.
    let mut sink = Slow {
        out: Vec::new(),
        delays: vec![0, 0, 1000],
        writes: 0,
    };
    let guard = run.observe(Join::Origin);
    let o = opts();
    let serving = serve_fused(&mut sink, &mut producing, &run, guard, &o, &m, &stop);
    let exit = tokio::time::timeout(Duration::from_secs(60), serving).await;
    assert_eq!(exit, Ok(Exit::Ended));
    // The run grew while the write waited: the producer went on in a task of its own.
    assert!(producing.detached(), "the producer was not detached");
    // Snapshot, event 1, event 2 (slow: the other 598 and the end were appended meanwhile),
    // then the rest from the journal: 512 frames a write at most, the end with the last.
    assert_eq!(sink.writes, 5);
    assert_eq!(ends(&sink.out), 1);
    assert_eq!(appended.load(Ordering::Relaxed), 600);
    let frames = sink.out.windows(6).filter(|w| w == b"data: ").count();
    assert_eq!(frames, 1 + 600 + 1);
    // Events 1 and 2 were handed over; the rest came from the journal.
    assert_eq!(handoff.count(), 2);
}

/// A reader that keeps up writes every append as it was handed over, and those are the
/// general reader's bytes.
#[test]
fn a_reader_that_keeps_up_writes_every_append_as_handed_over() {
    let c = Case {
        batches: (0..30).map(|i| (1 + i % 3, 10)).collect(),
        delays: Vec::new(),
        second: None,
        len: 12,
        direct: true,
    };
    let read = read_case(&c);
    assert_eq!(read.handed, 30);
    assert!(read.fused == read.general);
    assert_eq!(ends(&read.fused), 1);
    assert!(read.fused.windows(9).any(|w| w == br#"\"named\""#));
}

/// A requester that leaves mid-run hands its producer on: the run is produced to its end by a
/// task of its own, and the requester is counted out at once.
#[tokio::test(start_paused = true)]
async fn a_requester_leaving_hands_the_producer_to_a_task_of_its_own() {
    struct Gone;
    impl Sink for Gone {
        async fn send(&mut self, _: Bytes) -> Result<(), ClientGone> {
            Err(ClientGone)
        }
        async fn closed(&mut self) {
            std::future::pending::<()>().await
        }
    }
    let m = Metrics::new();
    let stop = CancellationToken::new();
    let run = Arc::new(Run::new("r", 4096));
    let r = run.clone();
    let producer = async move {
        for i in 0..5 {
            tokio::time::sleep(Duration::from_millis(10)).await;
            r.append(&[text(i, 8)]);
        }
        r.finish(true, None);
    };
    let mut producing = Producing::new(producer);
    let guard = run.observe(Join::Origin);
    let exit = serve_fused(&mut Gone, &mut producing, &run, guard, &opts(), &m, &stop).await;
    assert_eq!(exit, Exit::Gone);
    assert_eq!(run.observers(), 0);
    assert!(!producing.ended());
    drop(producing);
    let mut rx = run.subscribe();
    let ended = rx.wait_for(|_| !run.is_producing());
    let ended = tokio::time::timeout(Duration::from_secs(60), ended).await;
    assert!(ended.is_ok(), "the run was not produced to its end");
    assert_eq!(run.head(), 5);
    assert!(run.end().is_some_and(|e| e.persisted));
}

/// A producer with more than a window of events at once (an upstream faster than one poll of
/// the task can read) that paces itself as the read loop does, or not: the fused requester's
/// bytes, on a sink that never waits.
fn read_all_at_once(paced: bool) -> Vec<u8> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        let m = Metrics::new();
        let stop = CancellationToken::new();
        // Larger than the lead the producer is allowed (one write, 512 events).
        let window = 2048;
        let run = Arc::new(Run::new("r", window));
        let handoff = Handoff::new();
        let (r, h) = (run.clone(), handoff.clone());
        let producer = async move {
            for i in 0..window * 4 {
                let batch = [text(i, 8)];
                let appended = r.append(&batch);
                let handed = h.appended(&r, &batch, appended.events);
                if paced {
                    h.pace(&r, handed).await;
                }
            }
            r.finish(true, None);
        };
        let mut producing = Producing::with_handoff(producer, handoff.clone());
        let mut sink = Collect(Vec::new());
        let guard = run.observe(Join::Origin);
        let exit = serve_fused(&mut sink, &mut producing, &run, guard, &opts(), &m, &stop).await;
        assert_eq!(exit, Exit::Ended);
        sink.0
    })
}

#[test]
fn a_producer_more_than_one_write_ahead_lets_its_requester_write_before_reading_on() {
    let snapshots = |b: &[u8]| b.windows(15).filter(|w| w == b"STREAM_SNAPSHOT").count();
    let events = |b: &[u8]| b.windows(12).filter(|w| w == b"STREAM_EVENT").count();
    let paced = read_all_at_once(true);
    assert_eq!(snapshots(&paced), 1, "the requester was reset");
    assert_eq!(events(&paced), 2048 * 4);
    // Unpaced, the producer appends all of it in one poll, past the window, before the
    // requester writes anything: it is reset by a snapshot.
    let unpaced = read_all_at_once(false);
    assert_eq!(snapshots(&unpaced), 2);
}
