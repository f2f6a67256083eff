//! The OTLP/HTTP trace exporter against an in-process collector decoding the real protobuf: a
//! run's span continues the caller's trace with the right attributes and events, the backend's
//! `traceparent` is its child, and a collector that hangs costs a bounded queue, not a wait.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use tether::accounting::{Join, RunRecord, TraceOptions, Tracing, Watch};
use tether::metrics::RunOutcome;
use tether::record::usage::{Metered, Usage};
use tether::vocab::end::EndReason;
use tether::vocab::kinds::FormatKind;
use tether::vocab::RunId;
use tokio::time::Instant;

use crate::support::*;

const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

fn options(b: &Backend, queue: usize, batch: usize, timeout: Duration) -> TraceOptions {
    TraceOptions {
        traces_url: format!("http://{}/v1/traces", b.addr),
        queue,
        batch,
        delay: Duration::from_millis(20),
        timeout,
    }
}

/// The record of a run that was attached once and resumed once, with the provider's usage.
fn record(trace_id: String) -> RunRecord {
    let t0 = Instant::now();
    let ms = Duration::from_millis;
    let mut w = Watch::new(t0);
    w.join(t0, Join::Origin);
    w.leave(t0 + ms(100));
    w.join(t0 + ms(400), Join::Attach);
    w.leave(t0 + ms(500));
    w.join(t0 + ms(900), Join::Resume);
    let mut r = RunRecord::new(RunId::from("run-7"), "/chat").metered(Metered {
        usage: Some(Usage {
            input_tokens: Some(21),
            output_tokens: Some(31),
            cached_input_tokens: Some(4),
            reasoning_tokens: None,
            model: Some("gpt-4o-2024-08-06".into()),
        }),
        usage_missing: false,
        model: Some("gpt-4o-2024-08-06".into()),
        finish_reason: Some("stop".into()),
    });
    r.format = Some(FormatKind::OpenaiChat);
    r.outcome = Some(RunOutcome::Persisted);
    r.persisted = true;
    r.watch = w.end(t0 + ms(1500));
    r.duration_ms = 1500;
    r.first_byte_ms = Some(80);
    r.trace_id = Some(trace_id);
    r
}

fn text(v: Option<&AnyValue>) -> Option<&str> {
    match v {
        Some(AnyValue::StringValue(s)) => Some(s),
        _ => None,
    }
}

fn int(v: Option<&AnyValue>) -> Option<i64> {
    match v {
        Some(AnyValue::IntValue(n)) => Some(*n),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_span_continues_the_callers_trace_with_the_providers_numbers() {
    let collector = otlp_collector(None).await;
    let tracing = Tracing::start(&options(&collector, 64, 8, Duration::from_secs(5))).unwrap();
    let caller = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01");
    let span = tracing.run_span(Some(&caller), Some("vendor=a"), Some("gpt-4o"));
    // The backend's traceparent: the caller's trace, the run's span as parent.
    let child = span.traceparent();
    let parts: Vec<&str> = child.split('-').collect();
    assert_eq!((parts[0], parts[1], parts[3]), ("00", CALLER_TRACE, "01"));
    assert_ne!(parts[2], CALLER_SPAN);
    assert_eq!(span.tracestate().as_deref(), Some("vendor=a"));
    assert_eq!(span.trace_id(), CALLER_TRACE);
    let started = span.started();
    span.end(&record(CALLER_TRACE.into()));
    tracing.flush().await;

    let spans = received_spans(&collector);
    assert_eq!(spans.len(), 1, "one span per run");
    let s = &spans[0];
    assert_eq!(hex(&s.trace_id), CALLER_TRACE);
    assert_eq!(hex(&s.parent_span_id), CALLER_SPAN);
    assert_eq!(
        hex(&s.span_id),
        parts[2],
        "the backend's parent is the run's span"
    );
    assert_eq!(s.name, "chat gpt-4o");
    assert_eq!(s.kind, SpanKind::Client as i32);
    let start_ns = started.duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64;
    assert_eq!(s.start_time_unix_nano, start_ns);
    assert_eq!(s.end_time_unix_nano - s.start_time_unix_nano, 1_500_000_000);
    let a = |k: &str| span_attr(s, k);
    assert_eq!(text(a("gen_ai.operation.name")), Some("chat"));
    assert_eq!(text(a("gen_ai.provider.name")), Some("openai"));
    assert_eq!(text(a("gen_ai.request.model")), Some("gpt-4o"));
    assert_eq!(text(a("gen_ai.response.model")), Some("gpt-4o-2024-08-06"));
    assert_eq!(int(a("gen_ai.usage.input_tokens")), Some(21));
    assert_eq!(int(a("gen_ai.usage.output_tokens")), Some(31));
    assert_eq!(int(a("tether.usage.cached_input_tokens")), Some(4));
    assert_eq!(a("tether.usage.reasoning_tokens"), None, "absent, not zero");
    match a("gen_ai.response.finish_reasons") {
        Some(AnyValue::ArrayValue(arr)) => {
            let v: Vec<_> = arr.values.iter().map(|v| text(v.value.as_ref())).collect();
            assert_eq!(v, [Some("stop")]);
        }
        other => panic!("finish reasons: {other:?}"),
    }
    assert_eq!(text(a("tether.run.id")), Some("run-7"));
    assert_eq!(text(a("tether.run.outcome")), Some("persisted"));
    assert_eq!(a("tether.run.end_reason"), None);
    assert_eq!(a("tether.run.persisted"), Some(&AnyValue::BoolValue(true)));
    assert_eq!(int(a("tether.run.resumes")), Some(1));
    assert_eq!(int(a("tether.run.attaches")), Some(1));
    // Unwatched: 100 to 400 and 500 to 900 ms.
    assert_eq!(int(a("tether.run.unwatched_ms")), Some(700));
    let events: Vec<(&str, u64)> = s
        .events
        .iter()
        .map(|e| (e.name.as_str(), (e.time_unix_nano - start_ns) / 1_000_000))
        .collect();
    assert_eq!(events, [("tether.attach", 400), ("tether.resume", 900)]);
    assert_ne!(
        s.status.as_ref().map(|st| st.code),
        Some(StatusCode::Error as i32)
    );
    let resource = &export_requests(&collector)[0].resource_spans[0].resource;
    let service = resource
        .as_ref()
        .and_then(|r| r.attributes.iter().find(|kv| kv.key == "service.name"))
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| v.value.as_ref());
    assert_eq!(service, Some(&AnyValue::StringValue("tether".into())));
    tracing.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_caller_a_run_starts_its_own_trace_and_an_unsampled_caller_is_followed() {
    let collector = otlp_collector(None).await;
    let tracing = Tracing::start(&options(&collector, 64, 8, Duration::from_secs(5))).unwrap();
    // No traceparent (or a malformed one): a new trace, no parent.
    let span = tracing.run_span(Some("garbage"), None, None);
    let trace_id = span.trace_id();
    assert_ne!(trace_id, CALLER_TRACE);
    let mut r = record(trace_id.clone());
    r.format = Some(FormatKind::Agui);
    r.outcome = Some(RunOutcome::NotPersisted);
    r.reason = Some(EndReason::UpstreamReset);
    span.end(&r);
    // The caller decided not to sample: no span is exported, and the backend is told so.
    let unsampled = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-00");
    let span = tracing.run_span(Some(&unsampled), None, None);
    assert!(span
        .traceparent()
        .starts_with(&format!("00-{CALLER_TRACE}-")));
    assert!(span.traceparent().ends_with("-00"));
    span.end(&record(CALLER_TRACE.into()));
    tracing.flush().await;

    let spans = received_spans(&collector);
    assert_eq!(spans.len(), 1);
    let s = &spans[0];
    assert_eq!(hex(&s.trace_id), trace_id);
    assert!(s.parent_span_id.is_empty());
    assert_eq!(s.name, "invoke_agent");
    assert_eq!(
        text(span_attr(s, "gen_ai.operation.name")),
        Some("invoke_agent")
    );
    assert_eq!(span_attr(s, "gen_ai.provider.name"), None);
    assert_eq!(text(span_attr(s, "error.type")), Some("upstream_reset"));
    assert_eq!(
        s.status.as_ref().map(|st| (st.code, st.message.as_str())),
        Some((StatusCode::Error as i32, "upstream_reset"))
    );
    tracing.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_hangs_costs_a_bounded_queue_and_no_wait() {
    const QUEUE: usize = 16;
    const BATCH: usize = 4;
    const RUNS: usize = 500;
    let gate = Gate::default();
    let collector = otlp_collector(Some(gate.clone())).await;
    // Each export waits longer than any test: a request path that waited would never finish.
    let tracing =
        Tracing::start(&options(&collector, QUEUE, BATCH, Duration::from_secs(60))).unwrap();
    let tracing = std::sync::Arc::new(tracing);
    let t = tracing.clone();
    within(
        "ending every run's span while the collector hangs",
        tokio::task::spawn_blocking(move || {
            for i in 0..RUNS {
                let span = t.run_span(None, None, None);
                let mut r = RunRecord::new(RunId::from(format!("run-{i}")), "/chat");
                r.started_at_ms = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap()
                    .as_millis() as u64;
                span.end(&r);
            }
        }),
    )
    .await
    .unwrap();
    // The first batch is stuck at the collector.
    within("the first export", async {
        while collector.requests.lock().is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    gate.open();
    tracing.flush().await;
    let received = received_spans(&collector).len();
    // What was kept while the collector hung: one batch in flight and the queue; the rest
    // was dropped, not held.
    assert!(received >= 1, "{received}");
    assert!(received <= QUEUE + BATCH, "{received} spans kept");
    let tracing = std::sync::Arc::try_unwrap(tracing).unwrap();
    tracing.shutdown().await;
}
