//! The harness every format module uses: record bytes through the pure recording path (ingest →
//! journal), read snapshots and tails as a client would, check the recovery invariant for every
//! disconnect point, and drive a fixture through the real sidecar with a client killed mid-turn.

use std::fmt::Debug;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;

use tether::config::Commit;
use tether::frame;
use tether::ingest::Ingest;
use tether::record::format::{Event, FormatChoice, FormatKind};
use tether::state::run::Run;

use crate::support::*;

/// A format's state as its client builds it from events (written per format from the format's
/// rules, independently of tether's compactor).
pub trait Reducer: Default + Debug + PartialEq {
    /// Applies one event (its JSON, as carried by `STREAM_EVENT.event` or a snapshot).
    fn apply(&mut self, event: &Value);

    /// The state as JSON, compared with a fixture's golden `<name>.json`.
    fn to_json(&self) -> Value;

    /// The state after `events`.
    fn of(events: &[Value]) -> Self {
        let mut r = Self::default();
        events.iter().for_each(|e| r.apply(e));
        r
    }
}

/// The bytes of `tests/fixtures/<format>/<name>.sse`.
pub fn fixture(format: FormatKind, name: &str) -> Bytes {
    let path = fixture_path(format, name, "sse");
    Bytes::from(std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

/// `tests/fixtures/<format>/<name>.<ext>`.
pub fn fixture_path(format: FormatKind, name: &str, ext: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(format.as_str())
        .join(format!("{name}.{ext}"))
}

/// The golden reduced state of a fixture (`<name>.json`), shared with the SDK checks.
pub fn golden(format: FormatKind, name: &str) -> Value {
    let path = fixture_path(format, name, "json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// Records `chunks` (upstream reads) as the producer does: one batch per read. Returns the run,
/// the ingest rules (for the format and the verdict) and the head seq after each read.
pub fn record(choice: FormatChoice, chunks: &[Bytes]) -> (Arc<Run>, Ingest, Vec<u64>) {
    let run = Arc::new(Run::new("r", 4096));
    let format = match choice {
        FormatChoice::Fixed(k) => Some(k.format()),
        FormatChoice::Auto => None,
    };
    let mut ingest = Ingest::new(format, Commit::Eof, 8 << 20);
    let mut batch: Vec<Event> = Vec::new();
    let mut heads = Vec::new();
    for c in chunks {
        ingest.feed(c, &mut batch);
        run.append(&batch);
        heads.push(run.head());
    }
    ingest.finish();
    (run, ingest, heads)
}

/// `bytes` cut at `cuts` (sorted offsets) into reads.
pub fn split(bytes: &Bytes, cuts: &[usize]) -> Vec<Bytes> {
    let mut out = Vec::new();
    let mut at = 0;
    for &c in cuts.iter().chain(std::iter::once(&bytes.len())) {
        let c = c.clamp(at, bytes.len());
        out.push(bytes.slice(at..c));
        at = c;
    }
    out
}

/// Random read boundaries for `len` bytes: each taken modulo `len + 1`, sorted.
pub fn cuts_within(cuts: Vec<usize>, len: usize) -> Vec<usize> {
    let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (len + 1)).collect();
    cuts.sort();
    cuts
}

/// The events of a run's current snapshot and the seq it covers.
pub fn snapshot(run: &Run) -> (u64, Vec<Value>, usize) {
    let cap = run.capture();
    let frame = frame::snapshot(run.id(), cap.seq, &cap.history);
    let f = parse_frame(std::str::from_utf8(&frame).unwrap()).unwrap();
    (
        f.seq(),
        f.json["events"].as_array().unwrap().clone(),
        cap.history.len(),
    )
}

/// The events after `after` as `STREAM_EVENT` frames carry them.
pub fn events_after(run: &Run, after: u64) -> Vec<Value> {
    let read = run.read_after(after, usize::MAX).unwrap();
    read.frames
        .iter()
        .map(|f| parse_frame(std::str::from_utf8(f).unwrap()).unwrap().json["event"].clone())
        .collect()
}

/// The recovery invariant for a recording of `bytes` cut at `cuts`: the full stream reduces to
/// `R::of(every event)`, and for the snapshot taken after every read (every point a client
/// could reconnect), snapshot + the events after it reduce to the same state. Returns the
/// full state.
pub fn check_recovery<R: Reducer>(format: FormatKind, bytes: &Bytes, cuts: &[usize]) -> R {
    let chunks = split(bytes, cuts);
    // Snapshots as of each read: re-record up to that read (the journal only grows).
    let (run, _, heads) = record(FormatChoice::Fixed(format), &chunks);
    let all = events_after(&run, 0);
    let full = R::of(&all);
    for (i, _) in heads.iter().enumerate() {
        let (part, _, _) = record(FormatChoice::Fixed(format), &chunks[..=i]);
        let (seq, snap, _) = snapshot(&part);
        let mut r = R::of(&snap);
        events_after(&run, seq).iter().for_each(|e| r.apply(e));
        assert_eq!(r, full, "snapshot at seq {seq} (after read {i}) + tail");
    }
    full
}

/// How a fixture ends per its format.
pub struct Expect {
    /// `STREAM_END.persisted`.
    pub persisted: bool,
    /// `STREAM_END.reason`, when not persisted.
    pub reason: Option<&'static str>,
}

/// Serves `name` of `format` from a scripted backend (one event per chunk, `headers` added),
/// through the real sidecar: a protocol-1 client reads `cut` events and is killed while the
/// backend holds the rest; a second client attaches with `/chat/live` and must recover the whole
/// answer (snapshot, live tail, one `STREAM_END` as `expect` says). Returns the recovered state
/// and the snapshot's size in bytes.
pub async fn kill_and_recover<R: Reducer>(
    format: FormatKind,
    name: &str,
    headers: Vec<(&'static str, String)>,
    cut: usize,
    expect: Expect,
) -> (R, usize) {
    let bytes = fixture(format, name);
    let blocks: Vec<Bytes> = sse_blocks(&bytes);
    let gate = Gate::default();
    let g = gate.clone();
    // The backend holds before the block that follows the `cut`-th event.
    let hold = blocks
        .iter()
        .scan(0, |events, b| {
            *events += usize::from(is_event(b));
            Some(*events)
        })
        .position(|events| events >= cut)
        .map_or(blocks.len(), |i| i + 1)
        .min(blocks.len());
    let hold = if cut == 0 { 0 } else { hold };
    let be = backend(move |_| {
        let mut h = vec![("content-type", "text/event-stream".to_string())];
        h.extend(headers.iter().cloned());
        let mut steps = vec![Step::Head(200, h)];
        for (i, b) in blocks.iter().enumerate() {
            if i == hold {
                steps.push(Step::Wait(g.clone()));
            }
            steps.push(Step::Chunk(b.clone()));
        }
        if hold == blocks.len() {
            steps.push(Step::Wait(g.clone()));
        }
        steps.push(Step::End);
        steps
    })
    .await;
    let tether = sidecar(be.addr, "").await;
    let mut first = post(tether.addr, "/chat", &chat("c")).await;
    let mut seen = 0;
    let snap = first.frame().await.expect("the empty snapshot");
    assert_eq!(snap.ty(), "STREAM_SNAPSHOT");
    while seen < cut.min(count_events(&bytes)) {
        let f = first.frame().await.expect("an event before the cut");
        assert_eq!(f.ty(), "STREAM_EVENT");
        seen += 1;
    }
    first.kill();
    // The run is still live (the backend waits at the cut): the reconnect gets a snapshot of what
    // was recorded, then the rest live.
    let mut second = post(tether.addr, "/chat/live", &chat("c")).await;
    assert_eq!(second.status, 200, "the reconnect after {cut} events");
    let snapshot = second.frame().await.expect("the snapshot");
    gate.open();
    let mut frames = vec![snapshot];
    frames.extend(second.frames_to_end().await);
    let last = frames.last().expect("frames");
    assert_eq!(last.ty(), "STREAM_END", "{frames:?}");
    assert_eq!(last.json["persisted"], expect.persisted, "{:?}", last.json);
    if let Some(reason) = expect.reason {
        assert_eq!(last.json["reason"], reason, "{:?}", last.json);
    }
    assert_eq!(
        frames.iter().filter(|f| f.ty() == "STREAM_END").count(),
        1,
        "exactly one end"
    );
    // The run was counted under the format it was detected as.
    let started = format!(
        "tether_runs_started_total{{format=\"{}\",route=\"/chat\"}}",
        format.as_str()
    );
    assert_eq!(tether.metric(&started).await, 1.0, "{started}");
    let snapshot = &frames[0];
    assert_eq!(snapshot.ty(), "STREAM_SNAPSHOT");
    let snap_events = snapshot.json["events"].as_array().unwrap();
    let size = serde_json::to_vec(snap_events).unwrap().len();
    let mut r = R::of(snap_events);
    let mut after = snapshot.seq();
    for f in &frames[1..] {
        if f.ty() == "STREAM_EVENT" && f.seq() > after {
            r.apply(&f.json["event"]);
            after = f.seq();
        }
    }
    (r, size)
}

/// The SSE blocks of a fixture (each event's lines with its blank line), comments included.
pub fn sse_blocks(bytes: &Bytes) -> Vec<Bytes> {
    let text = std::str::from_utf8(bytes).unwrap();
    assert!(!text.contains('\r'), "fixtures use LF line endings");
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(i) = text[at..].find("\n\n") {
        out.push(bytes.slice(at..at + i + 2));
        at += i + 2;
    }
    assert_eq!(at, text.len(), "a fixture ends with a blank line");
    out
}

/// Whether an SSE block dispatches an event (it has data).
fn is_event(block: &Bytes) -> bool {
    std::str::from_utf8(block)
        .unwrap()
        .lines()
        .any(|l| l.starts_with("data:"))
}

/// How many events a fixture dispatches.
pub fn count_events(bytes: &Bytes) -> usize {
    sse_blocks(bytes).iter().filter(|b| is_event(b)).count()
}
