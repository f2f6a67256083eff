//! An OTLP/HTTP collector in-process: a scripted backend that answers every export request
//! (after a gate, when given one: a collector that hangs) and decodes the real protobuf of
//! what it received (`ExportTraceServiceRequest`, with the crate opentelemetry-otlp encodes
//! with).

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

use super::backend::{backend, fixed_answer, Backend, Gate, Step};

/// A collector answering `200` to each export request, each answer held until `gate` opens
/// when there is one.
pub async fn otlp_collector(gate: Option<Gate>) -> Backend {
    backend(move |_| {
        let mut steps: Vec<Step> = gate.iter().map(|g| Step::Wait(g.clone())).collect();
        steps.extend(fixed_answer(200, "application/x-protobuf", ""));
        steps
    })
    .await
}

/// Every export request the collector received (answered or not), decoded.
pub fn export_requests(b: &Backend) -> Vec<ExportTraceServiceRequest> {
    b.requests
        .lock()
        .iter()
        .map(|r| {
            assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/v1/traces"));
            assert_eq!(r.header("content-type"), Some("application/x-protobuf"));
            ExportTraceServiceRequest::decode(&r.body[..]).expect("OTLP protobuf")
        })
        .collect()
}

/// Every span the collector received.
pub fn received_spans(b: &Backend) -> Vec<Span> {
    export_requests(b)
        .into_iter()
        .flat_map(|r| r.resource_spans)
        .flat_map(|r| r.scope_spans)
        .flat_map(|s| s.spans)
        .collect()
}

/// The value of a span's attribute `key`.
pub fn span_attr<'a>(span: &'a Span, key: &str) -> Option<&'a AnyValue> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| v.value.as_ref())
}

/// Lower-case hex of an id's bytes.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
