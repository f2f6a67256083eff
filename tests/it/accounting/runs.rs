//! Accounting wired into the sidecar: a scripted backend per format sends its usage frames, and
//! the status route, the run record (the webhook's body), the usage counters and the OTLP
//! receiver each show the provider's numbers; a turn cut before its usage frame says
//! `usage_missing`; a client's `traceparent` is the parent of the run's span and the backend
//! gets a child of it.

use bytes::Bytes;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::{json, Value};
use tether::accounting::webhook::IDEMPOTENCY_KEY;
use tether::record::format::FormatKind;

use crate::formats::common::fixture;
use crate::support::*;

const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

/// An AG-UI turn that reports its usage in a `CUSTOM` event named `usage`.
const AGUI: &str = r#"data: {"type":"RUN_STARTED","threadId":"t","runId":"r"}

data: {"type":"CUSTOM","name":"usage","value":{"input":300,"output":42,"cached":7,"model":"llama-3"}}

data: {"type":"RUN_FINISHED","threadId":"t","runId":"r"}

"#;

/// One route per format; the AG-UI and AI SDK routes name their usage event.
fn routes(hook: &Backend, otlp: &Backend) -> String {
    let route = |path: &str, format: &str| {
        format!(
            "[[routes]]\nmethods = [\"POST\"]\npath = \"{path}\"\nkind = \"record\"\n\
             chat_id = \"body:chat_id\"\nformat = \"{format}\"\n"
        )
    };
    format!(
        "[accounting]\nwebhook_url = \"http://{}/runs\"\notlp_endpoint = \"http://{}\"\n\n\
         {}{}{}{}\
         [routes.usage]\nevent = \"CUSTOM:usage\"\ninput_tokens = \"/value/input\"\n\
         output_tokens = \"/value/output\"\ncached_input_tokens = \"/value/cached\"\n\
         model = \"/value/model\"\n\n{}\
         [routes.usage]\nevent = \"finish\"\n\
         input_tokens = \"/messageMetadata/usage/inputTokens\"\n\
         output_tokens = \"/messageMetadata/usage/outputTokens\"\n\
         cached_input_tokens = \"/messageMetadata/usage/cachedInputTokens\"\n\
         reasoning_tokens = \"/messageMetadata/usage/reasoningTokens\"\n\n\
         [[routes]]\nmethods = [\"GET\"]\npath = \"/chat/run\"\nkind = \"status\"\n\
         chat_id = \"query:chat_id\"\n\n\
         [[routes]]\nmethods = [\"POST\"]\npath = \"/chat/live\"\nkind = \"attach\"\n\
         chat_id = \"body:chat_id\"\n",
        hook.addr,
        otlp.addr,
        route("/oc", "openai_chat"),
        route("/or", "openai_responses"),
        route("/an", "anthropic"),
        route("/agui", "agui"),
        route("/aisdk", "ai_sdk"),
    )
}

/// The SSE body the backend answers on `path`.
fn body_for(path: &str) -> Bytes {
    match path {
        "/oc" => fixture(FormatKind::OpenaiChat, "text"),
        "/or" => fixture(FormatKind::OpenaiResponses, "reasoning_text_and_refusal"),
        "/an" => fixture(FormatKind::Anthropic, "tool_use_and_text"),
        "/agui" => Bytes::from_static(AGUI.as_bytes()),
        _ => fixture(FormatKind::AiSdk, "weather_tool_call"),
    }
}

/// Each route's format, and the usage its provider reported (as the run record writes it).
fn cases() -> Vec<(&'static str, &'static str, Value)> {
    vec![
        (
            "/oc",
            "openai_chat",
            json!({"input_tokens":21,"output_tokens":31,"cached_input_tokens":0,
                   "reasoning_tokens":0,"model":"gpt-4o-2024-08-06"}),
        ),
        (
            "/or",
            "openai_responses",
            json!({"input_tokens":40,"output_tokens":60,"cached_input_tokens":0,
                   "reasoning_tokens":30,"model":"gpt-5-2025-08-07"}),
        ),
        (
            "/an",
            "anthropic",
            json!({"input_tokens":472,"output_tokens":89,"cached_input_tokens":0,
                   "model":"claude-sonnet-4-5"}),
        ),
        (
            "/agui",
            "agui",
            json!({"input_tokens":300,"output_tokens":42,"cached_input_tokens":7,
                   "model":"llama-3"}),
        ),
        (
            "/aisdk",
            "ai_sdk",
            json!({"input_tokens":412,"output_tokens":128,"cached_input_tokens":256,
                   "reasoning_tokens":31}),
        ),
    ]
}

/// A webhook receiver that accepts every record.
async fn receiver() -> Backend {
    backend(|_| fixed_answer(200, "text/plain", "")).await
}

/// The records the receiver got, by run id (each once).
fn records(hook: &Backend) -> Vec<Value> {
    hook.requests
        .lock()
        .iter()
        .map(|r| {
            let v: Value = serde_json::from_slice(&r.body).unwrap();
            assert_eq!(r.header(IDEMPOTENCY_KEY), v["run_id"].as_str());
            v
        })
        .collect()
}

/// Records a protocol-1 turn of chat `chat_id` on `path` and reads it to its end; returns its
/// run id.
async fn record_turn(
    tether: &Sidecar,
    path: &str,
    chat_id: &str,
    headers: &[(&str, &str)],
) -> String {
    let body = json!({"chat_id": chat_id, "protocol": 1, "model": "m-asked"}).to_string();
    let mut h = vec![("content-type", "application/json")];
    h.extend_from_slice(headers);
    let mut r = request(tether.addr, "POST", path, &h, body.as_bytes()).await;
    assert_eq!(r.status, 200, "{path}");
    let frames = r.frames_to_end().await;
    let end = frames.last().unwrap();
    assert_eq!(end.ty(), "STREAM_END", "{path}");
    end.json["run_id"].as_str().unwrap().to_string()
}

/// The status route's answer for `chat_id`.
async fn status(tether: &Sidecar, chat_id: &str) -> Value {
    let mut r = request(
        tether.addr,
        "GET",
        &format!("/chat/run?chat_id={chat_id}"),
        &[],
        b"",
    )
    .await;
    assert_eq!(r.status, 200);
    serde_json::from_slice(&r.body_to_end().await).unwrap()
}

fn attr<'a>(s: &'a Span, k: &str) -> Option<&'a AnyValue> {
    span_attr(s, k)
}

fn int(v: Option<&AnyValue>) -> Option<i64> {
    match v {
        Some(AnyValue::IntValue(n)) => Some(*n),
        _ => None,
    }
}

fn text(v: Option<&AnyValue>) -> Option<&str> {
    match v {
        Some(AnyValue::StringValue(s)) => Some(s),
        _ => None,
    }
}

/// The span of run `run_id` the collector received, once it has.
async fn span_of(otlp: &Backend, run_id: &str) -> Span {
    let find = || {
        received_spans(otlp)
            .into_iter()
            .find(|s| text(attr(s, "tether.run.id")) == Some(run_id))
    };
    eventually("the run's span at the collector", || find().is_some()).await;
    find().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_format_shows_the_providers_usage_in_status_record_metrics_and_trace() {
    let be = backend(|req| vec![sse_head(), Step::Chunk(body_for(&req.path)), Step::End]).await;
    let (hook, otlp) = (receiver().await, otlp_collector(None).await);
    let tether = sidecar(be.addr, &routes(&hook, &otlp)).await;
    let mut runs = Vec::new();
    for (path, format, usage) in cases() {
        let chat_id = format!("c{}", &path[1..]);
        let run_id = record_turn(&tether, path, &chat_id, &[]).await;
        let st = status(&tether, &chat_id).await;
        assert_eq!(st["run_id"], run_id.as_str());
        assert_eq!(st["usage"], usage, "status usage of {format}");
        assert_eq!(st["watch"]["observers_max"], 1, "{format}: its requester");
        runs.push((path, format, usage, run_id));
    }
    eventually("every run's record at the webhook", || {
        records(&hook).len() == runs.len()
    })
    .await;
    let recs = records(&hook);
    for (path, format, usage, run_id) in &runs {
        let r = recs
            .iter()
            .find(|r| r["run_id"] == run_id.as_str())
            .unwrap();
        assert_eq!(
            (&r["event"], &r["route"], &r["format"], &r["outcome"]),
            (
                &json!("run_ended"),
                &json!(path),
                &json!(format),
                &json!("persisted")
            ),
        );
        assert_eq!(&r["usage"], usage, "record of {format}");
        assert_eq!(r["usage_missing"], false);
        assert_eq!(r["request_model"], "m-asked");
        assert!(r["first_byte_ms"].as_u64().unwrap() <= r["duration_ms"].as_u64().unwrap());
        assert_eq!(r["trace_id"].as_str().map(str::len), Some(32));
        for (kind, key) in [("input", "input_tokens"), ("output", "output_tokens")] {
            let sample = format!(
                "tether_usage_tokens_total{{format=\"{format}\",kind=\"{kind}\",route=\"{path}\"}}"
            );
            assert_eq!(
                tether.metric(&sample).await,
                usage[key].as_u64().unwrap() as f64,
                "{sample}"
            );
        }
        let s = span_of(&otlp, run_id).await;
        assert_eq!(hex(&s.trace_id), r["trace_id"].as_str().unwrap());
        assert_eq!(
            int(attr(&s, "gen_ai.usage.input_tokens")),
            usage["input_tokens"].as_i64()
        );
        assert_eq!(
            int(attr(&s, "gen_ai.usage.output_tokens")),
            usage["output_tokens"].as_i64()
        );
        assert_eq!(text(attr(&s, "gen_ai.request.model")), Some("m-asked"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_cut_before_its_usage_frame_says_usage_missing() {
    // The OpenAI chat fixture without its usage chunk and `[DONE]`, then a reset.
    let text = fixture(FormatKind::OpenaiChat, "text");
    let s = String::from_utf8(text.to_vec()).unwrap();
    let frames: Vec<&str> = s.split_inclusive("\n\n").collect();
    let cut = Bytes::from(frames[..frames.len() - 2].concat());
    let be = backend(move |_| vec![sse_head(), Step::Chunk(cut.clone()), Step::Reset]).await;
    let (hook, otlp) = (receiver().await, otlp_collector(None).await);
    let tether = sidecar(be.addr, &routes(&hook, &otlp)).await;
    let run_id = record_turn(&tether, "/oc", "cut", &[]).await;
    eventually("the run's record", || records(&hook).len() == 1).await;
    let r = &records(&hook)[0];
    assert_eq!(r["run_id"], run_id.as_str());
    assert_eq!(
        (&r["usage"], &r["usage_missing"]),
        (&Value::Null, &json!(true))
    );
    assert_eq!(
        (&r["outcome"], &r["reason"]),
        (&json!("not_persisted"), &json!("upstream_reset"))
    );
    assert_eq!(status(&tether, "cut").await["usage"], Value::Null);
    let s = span_of(&otlp, &run_id).await;
    assert_eq!(
        attr(&s, "gen_ai.usage.output_tokens"),
        None,
        "never an estimate"
    );
    assert_eq!(
        attr(&s, "tether.run.usage_missing"),
        Some(&AnyValue::BoolValue(true))
    );
    assert_eq!(
        tether
            .metric(
                "tether_usage_tokens_total{format=\"openai_chat\",kind=\"output\",route=\"/oc\"}"
            )
            .await,
        0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_traceparent_is_the_parent_of_the_run_span_and_the_backend_gets_its_child() {
    let be = backend(|req| vec![sse_head(), Step::Chunk(body_for(&req.path)), Step::End]).await;
    let (hook, otlp) = (receiver().await, otlp_collector(None).await);
    let tether = sidecar(be.addr, &routes(&hook, &otlp)).await;
    let caller = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01");
    let headers = [("traceparent", caller.as_str()), ("tracestate", "vendor=a")];
    let run_id = record_turn(&tether, "/an", "traced", &headers).await;
    let s = span_of(&otlp, &run_id).await;
    assert_eq!(hex(&s.trace_id), CALLER_TRACE);
    assert_eq!(hex(&s.parent_span_id), CALLER_SPAN);
    let sent = be.requests.lock()[0].clone();
    let child = sent.header("traceparent").unwrap();
    assert_eq!(
        child,
        format!("00-{CALLER_TRACE}-{}-01", hex(&s.span_id)),
        "the backend's parent is the run's span"
    );
    assert_eq!(sent.header("tracestate"), Some("vendor=a"));
    eventually("the run's record", || records(&hook).len() == 1).await;
    assert_eq!(records(&hook)[0]["trace_id"], CALLER_TRACE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_run_shows_its_usage_so_far_and_who_attached_or_resumed() {
    // The Anthropic fixture held after message_start (input counts) and one more frame.
    let text =
        String::from_utf8(fixture(FormatKind::Anthropic, "tool_use_and_text").to_vec()).unwrap();
    let frames: Vec<String> = text.split_inclusive("\n\n").map(str::to_string).collect();
    let gate = Gate::default();
    let g = gate.clone();
    let be = backend(move |_| {
        let mut steps = vec![sse_head(), Step::Chunk(Bytes::from(frames[..2].concat()))];
        steps.push(Step::Wait(g.clone()));
        steps.push(Step::Chunk(Bytes::from(frames[2..].concat())));
        steps.push(Step::End);
        steps
    })
    .await;
    let (hook, otlp) = (receiver().await, otlp_collector(None).await);
    let tether = sidecar(be.addr, &routes(&hook, &otlp)).await;
    let mut origin = post(tether.addr, "/an", &chat("live")).await;
    let run = origin.frame().await.unwrap().json["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    while origin.frame().await.unwrap().seq() != 2 {}
    let st = status(&tether, "live").await;
    assert_eq!(st["status"], "running");
    assert_eq!(
        st["usage"]["input_tokens"], 472,
        "message_start's count, mid-stream: {st}"
    );
    assert_eq!(st["usage"]["model"], "claude-sonnet-4-5");
    assert_eq!(st["watch"]["observers"], 1);
    // One client resumes from a cursor, another attaches with a snapshot.
    let mut resumed = post(tether.addr, "/chat/live", &cursor("live", &run, 1)).await;
    assert_eq!(resumed.frame().await.unwrap().seq(), 2);
    let mut attached = post(tether.addr, "/chat/live", &chat("live")).await;
    assert_eq!(attached.frame().await.unwrap().ty(), "STREAM_SNAPSHOT");
    let w = status(&tether, "live").await["watch"].clone();
    assert_eq!(
        (
            &w["observers"],
            &w["observers_max"],
            &w["attaches"],
            &w["resumes"]
        ),
        (&json!(3), &json!(3), &json!(1), &json!(1)),
        "{w}"
    );
    gate.open();
    for r in [&mut origin, &mut resumed, &mut attached] {
        assert_eq!(r.frames_to_end().await.last().unwrap().ty(), "STREAM_END");
    }
    eventually("the run's record", || records(&hook).len() == 1).await;
    let w = &records(&hook)[0]["watch"];
    assert_eq!(
        (&w["attaches"], &w["resumes"], &w["ended_watched"]),
        (&json!(1), &json!(1), &json!(true))
    );
    let s = span_of(&otlp, &run).await;
    let events: Vec<&str> = s.events.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(
        events,
        ["tether.resume", "tether.attach"],
        "a span event per join, in order"
    );
}
