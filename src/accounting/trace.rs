//! A trace of each run, OpenTelemetry over OTLP/HTTP (`--otlp-endpoint`): one span from the
//! record request to the run's end, following the GenAI semantic conventions where they apply,
//! with tether's own attributes and a span event per attach or resume.
//!
//! A run's span starts when its record request arrives ([`Tracing::run_span`]): a child of the
//! caller's W3C `traceparent` when it sent a valid one (its trace goes on), a new trace
//! otherwise. The request forwarded to the backend carries [`RunSpan::traceparent`], whose
//! parent is the run's span. The span ends with the run ([`RunSpan::end`]), its attributes read
//! from the [`RunRecord`].
//!
//! Export never blocks a run: an ended span goes to the SDK's batch span processor, a bounded
//! queue (`queue` spans) that its own thread drains to the collector in batches; when the
//! collector is down or slow, the spans that do not fit are dropped, so memory stays bounded.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{
    SpanContext, SpanKind, Status, TraceContextExt, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Array, Context, KeyValue, StringValue, Value};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracer, SdkTracerProvider, Span as SdkSpan,
};
use opentelemetry_sdk::Resource;

use super::client::{blocking_client, ClientError};
use super::record::RunRecord;
use super::watch::Join;
use crate::metrics::RunOutcome;
use crate::vocab::kinds::FormatKind;

/// The header of the W3C trace context.
pub const TRACEPARENT: &str = "traceparent";
/// The header of the W3C trace state.
pub const TRACESTATE: &str = "tracestate";

/// How spans are exported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceOptions {
    /// The collector's traces URL (`…/v1/traces`).
    pub traces_url: String,
    /// Ended spans waiting for export at most; more are dropped.
    pub queue: usize,
    /// Spans per export request at most.
    pub batch: usize,
    /// The longest an ended span waits before its batch is sent.
    pub delay: Duration,
    /// One export request's timeout.
    pub timeout: Duration,
}

impl TraceOptions {
    /// The options for `traces_url`: a queue of 2,048 spans, batches of 512, sent within 1 s,
    /// each request given 10 s.
    pub fn new(traces_url: impl Into<String>) -> TraceOptions {
        TraceOptions {
            traces_url: traces_url.into(),
            queue: 2048,
            batch: 512,
            delay: Duration::from_secs(1),
            timeout: Duration::from_secs(10),
        }
    }
}

/// Why tracing could not start.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The HTTP client.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The OTLP exporter refused its configuration.
    #[error("OTLP exporter: {0}")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
}

/// The trace exporter: a tracer provider whose batch span processor sends OTLP/HTTP protobuf.
#[derive(Debug)]
pub struct Tracing {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

impl Tracing {
    /// Starts the exporter (its batch thread); nothing is sent until a span ends.
    pub fn start(opts: &TraceOptions) -> Result<Tracing, TraceError> {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(blocking_client(opts.timeout)?)
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(&opts.traces_url)
            .with_timeout(opts.timeout)
            .build()?;
        let batch = BatchConfigBuilder::default()
            .with_max_queue_size(opts.queue.max(1))
            .with_max_export_batch_size(opts.batch.clamp(1, opts.queue.max(1)))
            .with_scheduled_delay(opts.delay)
            .build();
        let processor = BatchSpanProcessor::builder(exporter)
            .with_batch_config(batch)
            .build();
        let mut resource = Resource::builder();
        // OTEL_SERVICE_NAME, when set, names the service (the SDK reads it).
        if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
            resource = resource.with_service_name("tether");
        }
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_resource(resource.build())
            .build();
        let tracer = provider.tracer("tether");
        Ok(Tracing { provider, tracer })
    }

    /// Starts the span of a run whose record request arrived now, with the request's
    /// `traceparent` and `tracestate` (if any) and the model its body asked for (if any).
    pub fn run_span(
        &self,
        traceparent: Option<&str>,
        tracestate: Option<&str>,
        request_model: Option<&str>,
    ) -> RunSpan {
        self.run_span_from(traceparent, tracestate, request_model, SystemTime::now())
    }

    /// [`Tracing::run_span`] for a record request that arrived at `started`.
    pub fn run_span_from(
        &self,
        traceparent: Option<&str>,
        tracestate: Option<&str>,
        request_model: Option<&str>,
        started: SystemTime,
    ) -> RunSpan {
        let parent = parent_context(traceparent, tracestate)
            .map(|sc| Context::new().with_remote_span_context(sc))
            .unwrap_or_default();
        let mut attributes = Vec::new();
        if let Some(m) = request_model {
            attributes.push(KeyValue::new("gen_ai.request.model", m.to_string()));
        }
        let span = self
            .tracer
            .span_builder(span_name("chat", request_model))
            .with_kind(SpanKind::Client)
            .with_start_time(started)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &parent);
        RunSpan {
            span,
            started,
            request_model: request_model.map(str::to_string),
        }
    }

    /// Sends every ended span now (blocking work, run on a blocking thread).
    pub async fn flush(&self) {
        let provider = self.provider.clone();
        let _ = tokio::task::spawn_blocking(move || provider.force_flush()).await;
    }

    /// Sends what is queued and stops the batch thread (at most the export timeout).
    pub async fn shutdown(self) {
        let provider = self.provider;
        let _ = tokio::task::spawn_blocking(move || provider.shutdown()).await;
    }
}

/// The caller's span context from its W3C `traceparent` (and `tracestate`), when valid.
pub fn parent_context(traceparent: Option<&str>, tracestate: Option<&str>) -> Option<SpanContext> {
    let mut headers = HashMap::new();
    headers.insert(TRACEPARENT.to_string(), traceparent?.to_string());
    if let Some(s) = tracestate {
        headers.insert(TRACESTATE.to_string(), s.to_string());
    }
    let cx = TraceContextPropagator::new().extract(&headers);
    let sc = cx.span().span_context().clone();
    sc.is_valid().then_some(sc)
}

/// The span name the GenAI conventions ask for: the operation, then the model when known.
fn span_name(operation: &str, model: Option<&str>) -> String {
    match model {
        Some(m) => format!("{operation} {m}"),
        None => operation.to_string(),
    }
}

/// `gen_ai.operation.name` of a run of `format`: AG-UI runs an agent, the others a chat.
fn operation(format: Option<FormatKind>) -> &'static str {
    match format {
        Some(FormatKind::Agui) => "invoke_agent",
        _ => "chat",
    }
}

/// `gen_ai.provider.name` of a format that names its provider.
fn provider(format: FormatKind) -> Option<&'static str> {
    match format {
        FormatKind::OpenaiChat | FormatKind::OpenaiResponses => Some("openai"),
        FormatKind::Anthropic => Some("anthropic"),
        FormatKind::Agui | FormatKind::AiSdk => None,
    }
}

/// One run's span, open from its record request to its end.
#[derive(Debug)]
pub struct RunSpan {
    span: SdkSpan,
    started: SystemTime,
    request_model: Option<String>,
}

impl RunSpan {
    /// The span's context.
    pub fn context(&self) -> &SpanContext {
        use opentelemetry::trace::Span as _;
        self.span.span_context()
    }

    /// The trace id, 32 lower-case hex digits (the run record's `trace_id`).
    pub fn trace_id(&self) -> String {
        self.context().trace_id().to_string()
    }

    /// When the span started (the record request's arrival).
    pub fn started(&self) -> SystemTime {
        self.started
    }

    /// The `traceparent` of the request forwarded to the backend: this run's trace, this run's
    /// span as its parent.
    pub fn traceparent(&self) -> String {
        self.propagated().remove(TRACEPARENT).unwrap_or_default()
    }

    /// The `tracestate` forwarded with it, when the caller sent one.
    pub fn tracestate(&self) -> Option<String> {
        self.propagated()
            .remove(TRACESTATE)
            .filter(|s| !s.is_empty())
    }

    fn propagated(&self) -> HashMap<String, String> {
        let cx = Context::new().with_remote_span_context(self.context().clone());
        let mut headers = HashMap::new();
        TraceContextPropagator::new().inject_context(&cx, &mut headers);
        headers
    }

    /// Ends the span with the run's record: its attributes, a span event per attach and
    /// resume, its status, and its end (the record's duration after its start). Queues it for
    /// export; never waits.
    pub fn end(mut self, record: &RunRecord) {
        use opentelemetry::trace::Span as _;
        let model = self.request_model.take().or(record.request_model.clone());
        let op = operation(record.format);
        self.span.update_name(span_name(op, model.as_deref()));
        self.span.set_attributes(attributes(op, model, record));
        for mark in &record.watch.marks {
            let name = match mark.join {
                Join::Resume => "tether.resume",
                Join::Attach | Join::Origin => "tether.attach",
            };
            let at = self.started + Duration::from_millis(mark.at_ms);
            self.span.add_event_with_timestamp(
                name,
                at,
                vec![KeyValue::new("tether.observers", i64::from(mark.observers))],
            );
        }
        if let Some(status) = status(record) {
            self.span.set_status(status);
        }
        let end = self.started + Duration::from_millis(record.duration_ms);
        self.span.end_with_timestamp(end);
    }
}

/// The span's status: an error when the run failed (not persisted for a reason other than
/// being stopped or replaced), unset otherwise.
fn status(record: &RunRecord) -> Option<Status> {
    match (record.outcome, record.reason) {
        (Some(RunOutcome::NotPersisted | RunOutcome::OwnerLost), Some(reason)) => {
            Some(Status::error(reason.as_str()))
        }
        _ => None,
    }
}

/// A count as an attribute value (OTLP integers are signed).
fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The span's attributes from the run's record.
fn attributes(op: &'static str, request_model: Option<String>, r: &RunRecord) -> Vec<KeyValue> {
    let mut a = vec![
        KeyValue::new("gen_ai.operation.name", op),
        KeyValue::new("tether.run.id", r.run_id.to_string()),
        KeyValue::new("tether.route", r.route.clone()),
        KeyValue::new("tether.run.persisted", r.persisted),
        KeyValue::new("tether.run.usage_missing", r.usage_missing),
        KeyValue::new("tether.run.attaches", i64::from(r.watch.attaches)),
        KeyValue::new("tether.run.resumes", i64::from(r.watch.resumes)),
        KeyValue::new("tether.run.observers_max", i64::from(r.watch.observers_max)),
        KeyValue::new("tether.run.watched_ms", int(r.watch.watched_ms)),
        KeyValue::new("tether.run.unwatched_ms", int(r.watch.unwatched_ms)),
        KeyValue::new("tether.run.events_unwatched", int(r.watch.events_unwatched)),
        KeyValue::new("tether.run.ended_watched", r.watch.ended_watched),
    ];
    let mut opt = |key: &'static str, v: Option<Value>| {
        if let Some(v) = v {
            a.push(KeyValue::new(key, v));
        }
    };
    opt("gen_ai.request.model", request_model.map(Value::from));
    opt(
        "gen_ai.provider.name",
        r.format.and_then(provider).map(Value::from),
    );
    opt("tether.format", r.format.map(|f| Value::from(f.as_str())));
    opt(
        "gen_ai.response.model",
        r.response_model.clone().map(Value::from),
    );
    let usage = r.usage.as_ref();
    let count = |f: fn(&crate::record::usage::Usage) -> Option<u64>| {
        usage.and_then(f).map(|n| Value::I64(int(n)))
    };
    opt("gen_ai.usage.input_tokens", count(|u| u.input_tokens));
    opt("gen_ai.usage.output_tokens", count(|u| u.output_tokens));
    opt(
        "tether.usage.cached_input_tokens",
        count(|u| u.cached_input_tokens),
    );
    opt(
        "tether.usage.reasoning_tokens",
        count(|u| u.reasoning_tokens),
    );
    opt(
        "gen_ai.response.finish_reasons",
        r.finish_reason
            .clone()
            .map(|f| Value::Array(Array::String(vec![StringValue::from(f)]))),
    );
    opt(
        "tether.run.outcome",
        r.outcome.map(|o| Value::from(o.as_str())),
    );
    opt(
        "tether.run.end_reason",
        r.reason.map(|e| Value::from(e.as_str())),
    );
    opt(
        "error.type",
        status(r).and(r.reason).map(|e| Value::from(e.as_str())),
    );
    opt(
        "tether.run.first_byte_ms",
        r.first_byte_ms.map(|n| Value::I64(int(n))),
    );
    opt(
        "tether.run.marks_dropped",
        (r.watch.marks_dropped > 0).then(|| Value::I64(i64::from(r.watch.marks_dropped))),
    );
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_traceparent_is_the_parent_and_others_are_not() {
        let sc = parent_context(Some(PARENT), Some("vendor=a")).unwrap();
        assert_eq!(
            sc.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(sc.span_id().to_string(), "00f067aa0ba902b7");
        assert!(sc.is_sampled() && sc.is_remote());
        assert_eq!(sc.trace_state().header(), "vendor=a");
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "not a traceparent",
        ] {
            assert!(parent_context(Some(bad), None).is_none(), "{bad:?}");
        }
        assert!(parent_context(None, Some("vendor=a")).is_none());
    }

    #[test]
    fn span_names_and_gen_ai_names_follow_the_format() {
        assert_eq!(span_name("chat", Some("gpt-4o")), "chat gpt-4o");
        assert_eq!(span_name("invoke_agent", None), "invoke_agent");
        assert_eq!(operation(Some(FormatKind::Agui)), "invoke_agent");
        assert_eq!(operation(Some(FormatKind::Anthropic)), "chat");
        assert_eq!(operation(None), "chat");
        assert_eq!(provider(FormatKind::OpenaiResponses), Some("openai"));
        assert_eq!(provider(FormatKind::Anthropic), Some("anthropic"));
        assert_eq!(provider(FormatKind::AiSdk), None);
    }

    #[test]
    fn a_failed_run_is_an_error_and_a_stopped_one_is_not() {
        use crate::vocab::end::EndReason;
        use crate::vocab::RunId;
        let mut r = RunRecord::new(RunId::from("r"), "/chat");
        r.outcome = Some(RunOutcome::NotPersisted);
        r.reason = Some(EndReason::UpstreamReset);
        assert_eq!(status(&r), Some(Status::error("upstream_reset")));
        let a = attributes("chat", None, &r);
        assert!(a.contains(&KeyValue::new("error.type", "upstream_reset")));
        r.outcome = Some(RunOutcome::Cancelled);
        r.reason = Some(EndReason::Cancelled);
        assert_eq!(status(&r), None);
        let a = attributes("chat", None, &r);
        assert!(!a.iter().any(|kv| kv.key.as_str() == "error.type"));
        assert!(a.contains(&KeyValue::new("tether.run.end_reason", "cancelled")));
    }
}
