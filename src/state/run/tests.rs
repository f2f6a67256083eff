//! Tests of the run log, including the recovery invariant as a property test over the whole
//! pure path: SSE bytes split at random boundaries → decoder → classifier → run log.

use std::collections::BTreeMap;

use bytes::Bytes;
use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;
use crate::record::format::{agui::Agui, Format};
use crate::record::sse::{Decoded, Decoder, SseEvent};

fn ev(json: &str) -> Event {
    Agui.classify(&SseEvent {
        event: None,
        data: Bytes::copy_from_slice(json.as_bytes()),
        id: None,
    })
}

fn text(id: &str, delta: &str) -> Event {
    ev(&json!({"type":"TEXT_MESSAGE_CONTENT","messageId":id,"delta":delta}).to_string())
}

/// Splits a frame into its id and JSON.
fn parse_frame(frame: &[u8]) -> (String, Value) {
    let s = std::str::from_utf8(frame).expect("utf8 frame");
    let rest = s.strip_prefix("id: ").expect("id line");
    let (id, rest) = rest.split_once('\n').expect("id ends");
    let data = rest
        .strip_prefix("data: ")
        .and_then(|d| d.strip_suffix("\n\n"))
        .expect("data line");
    (
        id.to_string(),
        serde_json::from_str(data).expect("json frame"),
    )
}

/// The reducer of the tests: text, arguments and reasoning accumulated per id, and the ordered
/// list of every other event.
#[derive(Debug, Default, PartialEq)]
struct Reduced {
    text: BTreeMap<String, String>,
    args: BTreeMap<String, String>,
    reasoning: BTreeMap<String, String>,
    thinking: String,
    others: Vec<Value>,
    open_chunk: BTreeMap<String, String>,
}

impl Reduced {
    fn apply(&mut self, e: &Value) {
        let ty = e["type"].as_str().unwrap_or_default().to_string();
        let delta = e["delta"].as_str();
        let id = |k: &str| e[k].as_str().map(str::to_string);
        match (ty.as_str(), delta) {
            ("TEXT_MESSAGE_CONTENT", Some(d)) => {
                *self.text.entry(id("messageId").unwrap()).or_default() += d
            }
            ("REASONING_MESSAGE_CONTENT", Some(d)) => {
                *self.reasoning.entry(id("messageId").unwrap()).or_default() += d
            }
            ("TOOL_CALL_ARGS", Some(d)) => {
                *self.args.entry(id("toolCallId").unwrap()).or_default() += d
            }
            ("THINKING_TEXT_MESSAGE_CONTENT", Some(d)) => self.thinking += d,
            ("TEXT_MESSAGE_CHUNK", Some(d)) => {
                let key = id("messageId")
                    .or_else(|| self.open_chunk.get(&ty).cloned())
                    .unwrap_or_default();
                self.open_chunk.insert(ty.clone(), key.clone());
                *self.text.entry(key).or_default() += d;
            }
            _ => self.others.push(e.clone()),
        }
    }

    fn of(events: &[Value]) -> Self {
        let mut r = Reduced::default();
        events.iter().for_each(|e| r.apply(e));
        r
    }
}

fn snapshot_events(frame: &[u8]) -> (u64, Vec<Value>) {
    let (_, v) = parse_frame(frame);
    assert_eq!(v["type"], "STREAM_SNAPSHOT");
    (
        v["seq"].as_u64().unwrap(),
        v["events"].as_array().unwrap().clone(),
    )
}

#[test]
fn assigns_seq_and_reads_after_a_cursor() {
    let run = Run::new("r", 8);
    run.append(&[text("m", "a"), text("m", "b")]);
    run.append(&[text("m", "c")]);
    assert_eq!(run.head(), 3);
    let read = run.read_after(1, usize::MAX).unwrap();
    assert_eq!(read.last, 3);
    let seqs: Vec<u64> = read
        .frames
        .iter()
        .map(|f| parse_frame(f).1["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [2, 3]);
    assert_eq!(parse_frame(&read.frames[0]).0, "r:2");
    assert!(read.end.is_none());
    assert_eq!(run.read_after(3, 10).unwrap().frames.len(), 0);
    assert_eq!(run.read_after(1, 1).unwrap().last, 2);
}

#[test]
fn cursor_ahead_of_head_or_older_than_the_window_misses() {
    let run = Run::new("r", 2);
    for d in ["a", "b", "c", "d"] {
        run.append(&[text("m", d)]);
    }
    assert_eq!(run.read_after(5, 10).unwrap_err(), CursorMiss::Ahead);
    assert_eq!(run.read_after(1, 10).unwrap_err(), CursorMiss::Expired);
    assert_eq!(run.read_after(2, 10).unwrap().frames.len(), 2);
}

#[test]
fn the_end_is_returned_once_the_cursor_reaches_it() {
    let run = Run::new("r", 8);
    run.append(&[text("m", "a"), ev(r#"{"type":"RUN_FINISHED"}"#)]);
    let end = run.finish(true, None);
    assert_eq!(end.seq, 2);
    let read = run.read_after(0, 1).unwrap();
    assert!(read.end.is_none());
    let read = run.read_after(1, 10).unwrap();
    assert_eq!(read.end.as_ref().unwrap().seq, 2);
    assert!(read.end.unwrap().persisted);
    let read = run.read_after(2, 10).unwrap();
    assert!(read.frames.is_empty());
    assert!(read.end.is_some());
    assert!(!run.is_producing());
}

#[test]
fn superseded_run_ends_for_observers_and_records_no_more() {
    let run = Run::new("r", 8);
    run.append(&[text("m", "a")]);
    assert!(run.supersede(&RunId::from("r2")));
    assert!(!run.supersede(&RunId::from("r3")));
    assert_eq!(run.append(&[text("m", "b")]).events, 0);
    let end = run.read_after(0, 10).unwrap().end.unwrap();
    assert_eq!((end.seq, end.superseded), (1, true));
    assert_eq!(end.next_run_id.as_deref(), Some("r2"));
    assert!(run.is_producing());
    // The producer's own end does not overwrite what observers were told.
    let end = run.finish(true, None);
    assert!(end.superseded && !end.persisted);
}

#[test]
fn wakes_subscribers_on_append_and_end() {
    let run = Run::new("r", 8);
    let mut rx = run.subscribe();
    assert!(!rx.has_changed().unwrap());
    run.append(&[text("m", "a")]);
    assert!(rx.has_changed().unwrap());
    rx.borrow_and_update();
    run.finish(false, Some(EndReason::NoTerminalEvent));
    assert!(rx.has_changed().unwrap());
}

#[test]
fn capture_shares_history_without_copying() {
    let run = Run::new("r", 4);
    for i in 0..100 {
        run.append(&[ev(
            &json!({"type":"CUSTOM","name":"n","value":i}).to_string()
        )]);
    }
    let a = run.capture();
    let b = run.capture();
    assert_eq!(a.seq, 100);
    assert_eq!(a.history.blocks[0].as_ptr(), b.history.blocks[0].as_ptr());
    assert_eq!(a.history.events, 100);
}

#[test]
fn window_memory_is_bounded_by_its_size() {
    let run = Run::new("r", 16);
    let big = "x".repeat(1000);
    run.append(&[ev(&json!({"type":"CUSTOM","value":big}).to_string())]);
    let one = run.bytes();
    for _ in 0..200 {
        run.append(&[text("m", &big)]);
    }
    // 16 frames of ~1 KiB plus one merged history entry of ~200 KiB (and its block slack).
    assert!(
        run.bytes() < 16 * 1200 + 200 * 1000 + 128 * 1024 + one,
        "{}",
        run.bytes()
    );
}

// ---- the recovery invariant -------------------------------------------------------------

/// Text with JSON escapes, multi-byte UTF-8 and astral-plane characters.
fn arb_text() -> impl Strategy<Value = String> {
    "[a-z \"\\\\\n\t/\u{e9}\u{4e16}\u{1F600}\u{10FFFF}]{0,6}"
}

fn arb_event() -> impl Strategy<Value = Value> {
    let id = || prop::sample::select(vec!["m1", "m2", "m3"]);
    prop_oneof![
        4 => (id(), arb_text()).prop_map(|(m, d)| json!({"type":"TEXT_MESSAGE_CONTENT","messageId":m,"delta":d})),
        2 => (id(), arb_text()).prop_map(|(m, d)| json!({"delta":d,"type":"REASONING_MESSAGE_CONTENT","messageId":m})),
        2 => (prop::sample::select(vec!["t1", "t2"]), arb_text()).prop_map(|(t, d)| json!({"type":"TOOL_CALL_ARGS","toolCallId":t,"delta":d})),
        1 => arb_text().prop_map(|d| json!({"type":"THINKING_TEXT_MESSAGE_CONTENT","delta":d})),
        1 => (proptest::option::of(id()), arb_text()).prop_map(|(m, d)| match m {
            Some(m) => json!({"type":"TEXT_MESSAGE_CHUNK","messageId":m,"delta":d}),
            None => json!({"type":"TEXT_MESSAGE_CHUNK","delta":d}),
        }),
        1 => id().prop_map(|m| json!({"type":"TEXT_MESSAGE_START","messageId":m,"role":"assistant"})),
        1 => id().prop_map(|m| json!({"type":"TEXT_MESSAGE_END","messageId":m})),
        1 => prop::sample::select(vec!["t1", "t2"]).prop_map(|t| json!({"type":"TOOL_CALL_START","toolCallId":t,"toolCallName":"f"})),
        1 => arb_text().prop_map(|v| json!({"type":"CUSTOM","name":"n","value":v})),
        1 => Just(json!({"type":"STEP_STARTED","stepName":"s"})),
    ]
}

/// Recorded events in the form a client sees them: `event` of each frame.
fn frame_events(frames: &[Bytes], after: u64) -> Vec<Value> {
    frames
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let (_, v) = parse_frame(f);
            assert_eq!(v["type"], "STREAM_EVENT");
            assert_eq!(
                v["seq"].as_u64().unwrap(),
                after + 1 + i as u64,
                "gap or repeat"
            );
            v["event"].clone()
        })
        .collect()
}

fn serialize(cap: &SnapshotCapture) -> Bytes {
    crate::frame::snapshot(&RunId::from("r"), cap.seq, &cap.history)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn recovery_after_any_disconnect_reduces_to_the_full_stream(
        events in proptest::collection::vec(arb_event(), 0..40),
        raw_at in proptest::collection::vec(any::<bool>(), 40),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..16),
        window in 1usize..12,
    ) {
        // Upstream bytes: one SSE event per AG-UI event, some of them non-JSON (RAW).
        let mut upstream = Vec::new();
        let mut expected: Vec<Value> = Vec::new();
        for (i, e) in events.iter().enumerate() {
            if raw_at[i] && i % 5 == 0 {
                upstream.extend_from_slice(b"event: note\r\ndata: plain \xC3\xA9 text\r\n\r\n");
                expected.push(json!({"type":"RAW","source":"sse","event":{"event":"note","data":"plain \u{e9} text"}}));
            } else {
                upstream.extend_from_slice(format!("data: {e}\n\n").as_bytes());
                expected.push(e.clone());
            }
        }
        let mut points: Vec<usize> = cuts.iter().map(|c| c.index(upstream.len() + 1)).collect();
        points.sort_unstable();
        points.push(upstream.len());

        let run = Run::new("r", window);
        let mut decoder = Decoder::new(1 << 20);
        let mut at = 0;
        let mut decoded = Vec::new();
        for p in points {
            let chunk = Bytes::copy_from_slice(&upstream[at..p]);
            at = p;
            decoded.clear();
            decoder.feed(&chunk, &mut decoded);
            let batch: Vec<Event> = decoded.iter().map(|d| match d {
                Decoded::Event(e) => Agui.classify(e),
                Decoded::Oversized { .. } => panic!("oversized"),
            }).collect();
            run.append(&batch);
            // A snapshot at any point reduces like the events it covers.
            let cap = run.capture();
            let (seq, snap) = snapshot_events(&serialize(&cap));
            prop_assert_eq!(seq as usize, run.head() as usize);
            prop_assert_eq!(Reduced::of(&snap), Reduced::of(&expected[..seq as usize]));
            prop_assert!(snap.len() <= seq as usize);
        }
        prop_assert!(!decoder.finish());
        prop_assert_eq!(run.head() as usize, expected.len());
        run.finish(true, None);

        let full = Reduced::of(&expected);
        for k in 0..=expected.len() {
            let had = &expected[..k];
            let recovered = match run.read_after(k as u64, usize::MAX) {
                Ok(read) => {
                    prop_assert!(read.end.is_some());
                    let mut all = had.to_vec();
                    all.extend(frame_events(&read.frames, k as u64));
                    Reduced::of(&all)
                }
                Err(miss) => {
                    prop_assert_eq!(miss, CursorMiss::Expired);
                    let (seq, snap) = snapshot_events(&serialize(&run.capture()));
                    prop_assert_eq!(seq as usize, expected.len());
                    Reduced::of(&snap)
                }
            };
            prop_assert_eq!(&recovered, &full, "disconnect at {}", k);
        }
    }
}

#[test]
fn a_run_is_local_until_marked_a_mirror() {
    let run = Run::new("r", 4);
    assert_eq!(run.origin(), Origin::Local);
    run.mark_mirror();
    assert_eq!(run.origin(), Origin::Mirror);
    assert!(run.origin().is_mirror());
}

#[derive(Debug, PartialEq)]
struct Head(u16);
#[derive(Debug, PartialEq)]
struct Mark;

#[test]
fn slots_keep_one_value_per_type_and_each_room_reads_back_its_own() {
    let run = Run::new("r", 4);
    assert!(run.slots().get::<Head>().is_none());
    assert!(!run.slots().contains::<Mark>());
    run.slots().insert(Head(200));
    run.slots().insert(Mark);
    assert_eq!(run.slots().get::<Head>().as_deref(), Some(&Head(200)));
    assert!(run.slots().contains::<Mark>());
    run.slots().insert(Head(404));
    assert_eq!(*run.slots().get::<Head>().unwrap(), Head(404), "replaced");
    let made = run.slots().get_or_insert_with(|| Head(500));
    assert_eq!(*made, Head(404), "an occupied slot is not refilled");
    let counter = run.slots().get_or_insert_with(|| AtomicUsize::new(7));
    counter.fetch_add(1, Ordering::Relaxed);
    let again = run.slots().get_or_insert_with(|| AtomicUsize::new(0));
    assert_eq!(again.load(Ordering::Relaxed), 8, "the one value, shared");
}

#[test]
#[cfg_attr(debug_assertions, should_panic(expected = "at most"))]
fn slots_hold_at_most_their_bound() {
    struct Nth<const N: usize>;
    let slots = Slots::default();
    slots.insert(Nth::<0>);
    slots.insert(Nth::<1>);
    slots.insert(Nth::<2>);
    slots.insert(Nth::<3>);
    slots.insert(Nth::<4>);
    slots.insert(Nth::<5>);
    slots.insert(Nth::<6>);
    slots.insert(Nth::<7>);
    assert_eq!(MAX_SLOTS, 8);
    assert!(slots.contains::<Nth<7>>());
    slots.insert(Nth::<8>);
    assert!(!slots.contains::<Nth<8>>(), "past the bound, not kept");
}
