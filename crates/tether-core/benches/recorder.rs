//! Recorder hot paths: SSE bytes in → decoded → classified → framed into the window → compacted,
//! against a plain copy of the same bytes, for every stream format; snapshot capture and
//! serialization, and the `from_start` dialect's rendering. It also prints each format's
//! snapshot size and `from_start` size for a 100,000-delta turn against the turn's text bytes.
//! The `usage` group: ingest alone, with and without the usage meter, per format.

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use tether_core::dialect::from_start;
use tether_core::frame;
use tether_core::ingest::Ingest;
use tether_core::journal::memory::MemoryJournal;
use tether_core::journal::{Journal, DEFAULT_WINDOW};
use tether_core::record::format::{Event, FormatKind};
use tether_core::record::sse::{Decoded, Decoder};
use tether_core::settings::Commit;

/// One text delta of `format` as its upstream sends it (the `i`-th of the turn).
fn delta_event(format: FormatKind, i: usize, delta: &str) -> String {
    match format {
        FormatKind::Agui => format!(
            "data: {{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"msg-1\",\"delta\":\"{delta}\"}}\n\n"
        ),
        FormatKind::OpenaiChat => format!(
            "data: {{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{delta}\"}},\"finish_reason\":null}}]}}\n\n"
        ),
        FormatKind::OpenaiResponses => format!(
            "event: response.output_text.delta\ndata: {{\"type\":\"response.output_text.delta\",\"sequence_number\":{},\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\"{delta}\",\"logprobs\":[]}}\n\n",
            i + 4
        ),
        FormatKind::Anthropic => format!(
            "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"{delta}\"}}}}\n\n"
        ),
        FormatKind::AiSdk => {
            format!("data: {{\"type\":\"text-delta\",\"id\":\"t1\",\"delta\":\"{delta}\"}}\n\n")
        }
    }
}

/// Upstream SSE bytes of `n` text deltas of `format`, `delta_len(i)` bytes each, cut into reads
/// of `read` bytes. Returns the reads and the text bytes.
fn upstream(
    format: FormatKind,
    n: usize,
    delta_len: impl Fn(usize) -> usize,
    read: usize,
) -> (Vec<Bytes>, usize) {
    let mut all = Vec::new();
    let mut text = 0;
    for i in 0..n {
        let delta: String = (0..delta_len(i))
            .map(|j| (b'a' + ((i + j) % 26) as u8) as char)
            .collect();
        text += delta.len();
        all.extend_from_slice(delta_event(format, i, &delta).as_bytes());
    }
    (all.chunks(read).map(Bytes::copy_from_slice).collect(), text)
}

/// The whole recording path, as the producer runs it: one batch per upstream read.
fn record(chunks: &[Bytes]) -> MemoryJournal {
    record_as(FormatKind::Agui, chunks)
}

/// [`record`] for a stream of `format`.
fn record_as(format: FormatKind, chunks: &[Bytes]) -> MemoryJournal {
    let run = MemoryJournal::new(&"run-0123456789abcdef".into(), DEFAULT_WINDOW);
    let mut ingest = Ingest::new(Some(format.format()), Commit::Eof, 8 << 20);
    let mut batch: Vec<Event> = Vec::new();
    for c in chunks {
        ingest.feed(c, &mut batch);
        run.append(&batch);
    }
    run
}

/// Ingest alone (decode and classify, no journal), with the usage meter when `metered`. Not
/// inlined, so a profiler can count its instructions per call.
#[inline(never)]
fn ingest_as(format: FormatKind, chunks: &[Bytes], metered: bool) -> u64 {
    let mut ingest = Ingest::new(Some(format.format()), Commit::Eof, 8 << 20);
    if metered {
        ingest = ingest.meter_usage(None);
    }
    let mut batch: Vec<Event> = Vec::new();
    for c in chunks {
        ingest.feed(c, &mut batch);
    }
    ingest.events()
}

/// The usage meter's cost on the hot path: ingest of a 100,000-delta turn with and without it.
fn usage(c: &mut Criterion) {
    let mut g = c.benchmark_group("usage");
    g.throughput(Throughput::Elements(100_000));
    for &format in FormatKind::ALL {
        let name = format.as_str();
        let (tokens, _) = upstream(format, 100_000, |i| 4 + i % 5, 16 * 1024);
        for (label, metered) in [("plain", false), ("metered", true)] {
            g.bench_function(format!("ingest_100k_tokens_{name}_{label}"), |b| {
                b.iter(|| ingest_as(format, &tokens, metered))
            });
        }
    }
    g.finish();
}

fn benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("recorder");
    let (big, _) = upstream(FormatKind::Agui, 10_000, |_| 1024, 16 * 1024);
    let bytes: usize = big.iter().map(Bytes::len).sum();
    g.throughput(Throughput::Bytes(bytes as u64));
    g.bench_function("append_10k_1k", |b| b.iter(|| record(&big)));
    // Baseline: keep a plain copy of the same bytes, one allocation per event.
    let events: Vec<Bytes> = {
        let mut dec = Decoder::new(8 << 20);
        let mut out = Vec::new();
        big.iter().for_each(|c| dec.feed(c, &mut out));
        out.into_iter()
            .filter_map(|d| match d {
                Decoded::Event(e) => Some(e.data),
                _ => None,
            })
            .collect()
    };
    g.bench_function("memcpy_10k_1k", |b| {
        b.iter(|| {
            events
                .iter()
                .map(|e| Bytes::copy_from_slice(e))
                .collect::<Vec<_>>()
        })
    });

    let (tokens, _) = upstream(FormatKind::Agui, 100_000, |i| 4 + i % 5, 16 * 1024);
    g.throughput(Throughput::Elements(100_000));
    g.bench_function("append_100k_tokens", |b| b.iter(|| record(&tokens)));
    // A resume's first write: the frames after a cursor 100 events behind the head of a token run
    // (what scenario 4's reconnect reads after its 50 ms gap at 2,000 events/s).
    let run = record(&tokens);
    let head = run.head();
    g.throughput(Throughput::Elements(100));
    g.bench_function("read_after_100_tokens", |b| {
        b.iter(|| run.read_after(head - 100, 512).map(|r| r.frames.len()))
    });

    for &format in FormatKind::ALL {
        let name = format.as_str();
        let (big, _) = upstream(format, 10_000, |_| 1024, 16 * 1024);
        let bytes: usize = big.iter().map(Bytes::len).sum();
        g.throughput(Throughput::Bytes(bytes as u64));
        g.bench_function(format!("append_10k_1k_{name}"), |b| {
            b.iter(|| record_as(format, &big))
        });
        let (tokens, text) = upstream(format, 100_000, |i| 4 + i % 5, 16 * 1024);
        g.throughput(Throughput::Elements(100_000));
        g.bench_function(format!("append_100k_tokens_{name}"), |b| {
            b.iter(|| record_as(format, &tokens))
        });
        let cap = record_as(format, &tokens).capture();
        let snap = cap.history.len();
        println!(
            "recorder/snapshot_size_100k_{name}: {snap} bytes for {text} text bytes ({:.3}x)",
            snap as f64 / text as f64
        );
        // What the `from_start` dialect sends for the whole turn: the compacted history
        // rendered as the upstream's own SSE frames.
        let rendered = from_start::render(&cap).len();
        println!(
            "recorder/from_start_size_100k_{name}: {rendered} bytes for {text} text bytes ({:.3}x)",
            rendered as f64 / text as f64
        );
        if format == FormatKind::AiSdk {
            g.throughput(Throughput::Bytes(rendered as u64));
            g.bench_function("from_start_render_100k_ai_sdk", |b| {
                b.iter(|| from_start::render(&cap))
            });
        }
    }

    // Capture on a large run with many unmergeable events: cost must not grow with the run.
    let mut mixed = Vec::new();
    for i in 0..100_000 {
        mixed.extend_from_slice(
            format!("data: {{\"type\":\"CUSTOM\",\"name\":\"n\",\"value\":{i}}}\n\ndata: {{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m{i}\",\"delta\":\"tok\"}}\n\n").as_bytes(),
        );
    }
    let mixed: Vec<Bytes> = mixed
        .chunks(16 * 1024)
        .map(Bytes::copy_from_slice)
        .collect();
    let large = record(&mixed);
    g.throughput(Throughput::Elements(1));
    g.bench_function("snapshot_capture", |b| b.iter(|| large.capture()));

    let run10m = record(&big);
    let cap = run10m.capture();
    g.throughput(Throughput::Bytes(cap.history.len() as u64));
    g.bench_function("snapshot_serialize", |b| {
        b.iter_batched(
            || cap.clone(),
            |cap| frame::snapshot(&tether_core::vocab::RunId::from("r"), cap.seq, &cap.history),
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

criterion_group!(recorder, benches, usage);
criterion_main!(recorder);
