//! langgraph (the SDK's join stream): the turn is `POST /threads/{thread_id}/runs/stream`, its
//! first event `metadata` naming the backend's `run_id` (the alias); frames carry `id:` lines;
//! `GET /threads/{thread_id}/runs/{run_id}/stream` with `Last-Event-ID` is a `last_event_id`
//! resume whose nothing-to-resume answer is an empty `200` stream. Through the profile itself
//! (`conf/profiles/langgraph.toml`), a backend that stamps a burst of events with one id (the
//! in-memory runtime's `<ms>-0`) is relayed with ids unique in the run, and a rejoin inside the
//! burst gets the rest of it once.

use bytes::Bytes;
use serde_json::json;

use crate::dialects::common::*;
use crate::support::*;

const ROUTES: &str = r#"
[[routes]]
methods = ["POST"]
path = "/threads/{thread_id}/runs/stream"
kind = "record"
chat_id = "path:thread_id"
aliases = ["event:/run_id"]

[[routes]]
methods = ["GET"]
path = "/threads/{thread_id}/runs/{run_id}/stream"
kind = "resume"
dialect = "last_event_id"
run = "path:run_id"
on_nothing = "empty_stream"
"#;

const RUN: &str = "1ef-run-7";

/// A LangGraph stream: `metadata`, then `values` and `messages/partial` events, each with an
/// `id:` line of the backend's own form.
fn frames() -> Vec<Bytes> {
    let mut v = vec![frame(
        Some("metadata"),
        Some("1719-0"),
        &json!({"run_id": RUN, "attempt": 1}).to_string(),
    )];
    let mut text = String::new();
    for i in 0..8 {
        text.push_str(&format!("w{i} "));
        let data = json!([{"type":"AIMessageChunk","id":"m1","content":text}]).to_string();
        v.push(frame(
            Some("messages/partial"),
            Some(&format!("1719-{}", i + 1)),
            &data,
        ));
    }
    let values = json!({"messages":[{"type":"ai","id":"m1","content":text}]}).to_string();
    v.push(frame(Some("values"), Some("1719-9"), &values));
    v
}

fn id_of(block: &[u8]) -> String {
    std::str::from_utf8(block)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("id: "))
        .expect("an id line")
        .to_string()
}

fn stream_path() -> String {
    format!("/threads/th-1/runs/{RUN}/stream")
}

async fn start(pause: Option<(usize, Gate)>) -> (Backend, Sidecar) {
    let all = frames();
    let be = backend(move |_| held(&all, pause.as_ref().map(|(at, g)| (*at, g)))).await;
    let tether = sidecar(be.addr, ROUTES).await;
    (be, tether)
}

async fn turn(tether: &Sidecar) -> Resp {
    let body = json!({"assistant_id": "agent", "input": {}, "stream_mode": ["messages", "values"]});
    let r = post(tether.addr, "/threads/th-1/runs/stream", &body).await;
    assert_eq!(r.status, 200);
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_with_the_last_event_id_gets_the_frames_after_it_byte_for_byte() {
    let all = frames();
    let at = random_cut("langgraph", 1, all.len() - 1);
    let gate = Gate::default();
    let (be, tether) = start(Some((at, gate.clone()))).await;
    let got = cut(turn(&tether).await, at).await;
    assert_eq!(concat(&got), concat(&all[..at]));
    let last = id_of(got.last().unwrap());
    let mut join = get(tether.addr, &stream_path(), &[("Last-Event-ID", &last)]).await;
    assert_eq!(join.status, 200);
    assert_eq!(join.header("content-type"), Some("text/event-stream"));
    gate.open();
    let body = join.body_to_end().await;
    assert_eq!(std::str::from_utf8(&body).unwrap(), concat(&all[at..]));
    assert_eq!(attach_metric(&tether, "last_event_id", "replay").await, 1.0);
    assert_eq!(requests(&be), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_event_id_minus_one_is_the_whole_turn_byte_for_byte() {
    let gate = Gate::default();
    let (_be, tether) = start(Some((3, gate.clone()))).await;
    let _live = turn(&tether).await;
    eventually("the alias is known", || {
        tether.registry().by_id(&Owner::NONE, &RUN.into()).is_some()
    })
    .await;
    let mut join = get(tether.addr, &stream_path(), &[("Last-Event-ID", "-1")]).await;
    assert_eq!(join.status, 200);
    gate.open();
    let body = join.body_to_end().await;
    assert_eq!(std::str::from_utf8(&body).unwrap(), concat(&frames()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_final_id_of_an_ended_run_is_an_empty_stream_and_an_unknown_run_404() {
    let (_be, tether) = start(None).await;
    turn(&tether).await.body_to_end().await;
    eventually("the run ended", || {
        tether
            .registry()
            .by_id(&Owner::NONE, &RUN.into())
            .is_some_and(|f| f.run.end().is_some())
    })
    .await;
    let last = id_of(frames().last().unwrap());
    let mut join = get(tether.addr, &stream_path(), &[("Last-Event-ID", &last)]).await;
    assert_eq!(join.status, 200);
    assert_eq!(join.header("content-type"), Some("text/event-stream"));
    assert!(join.body_to_end().await.is_empty());
    assert!(join.ended, "the empty stream ends at once");
    assert_eq!(
        attach_metric(&tether, "last_event_id", "end_only").await,
        1.0
    );

    let path = "/threads/th-1/runs/no-such-run/stream";
    let r = get(tether.addr, path, &[("Last-Event-ID", "1719-3")]).await;
    assert_eq!(r.status, 404);
    assert_eq!(
        attach_metric(&tether, "last_event_id", "not_found").await,
        1.0
    );
}

/// The profile as shipped.
const PROFILE: &str = include_str!("../../../conf/profiles/langgraph.toml");

/// A run as LangGraph's in-memory runtime stamps it, `<ms>-0`: `metadata`, a burst of six token
/// chunks in one millisecond, `values`, a burst of three, `values`. Each frame's id as the
/// server wrote it, and its data.
fn burst() -> Vec<(String, String)> {
    let mut v = vec![("1760-0".to_string(), json!({"run_id": RUN}).to_string())];
    let chunk = |i: usize| json!([{"type":"AIMessageChunk","id":"m1","content":format!("w{i} ")}]);
    v.extend((0..6).map(|i| ("1761-0".to_string(), chunk(i).to_string())));
    v.push(("1762-0".into(), json!({"messages": [1]}).to_string()));
    v.extend((6..9).map(|i| ("1763-0".to_string(), chunk(i).to_string())));
    v.push(("1764-0".into(), json!({"messages": [2]}).to_string()));
    v
}

fn burst_frame(n: usize, id: &str, data: &str) -> Bytes {
    let event = match n {
        0 => "metadata",
        7 | 11 => "values",
        _ => "messages",
    };
    frame(Some(event), Some(id), data)
}

/// What the server sent, and what tether relays: the first frame of each id as the server
/// wrote it, each repeat with `<id>~<frame index>` in its `id:` line.
fn burst_frames() -> (Vec<Bytes>, Vec<Bytes>) {
    let mut seen = std::collections::HashSet::new();
    let (mut sent, mut relayed) = (Vec::new(), Vec::new());
    for (n, (id, data)) in burst().iter().enumerate() {
        sent.push(burst_frame(n, id, data));
        let unique = match seen.insert(id.clone()) {
            true => id.clone(),
            false => format!("{id}~{n}"),
        };
        relayed.push(burst_frame(n, &unique, data));
    }
    (sent, relayed)
}

async fn start_burst(pause: Option<(usize, Gate)>) -> (Backend, Sidecar) {
    let (sent, _) = burst_frames();
    let be = backend(move |_| held(&sent, pause.as_ref().map(|(at, g)| (*at, g)))).await;
    let tether = sidecar(be.addr, PROFILE).await;
    (be, tether)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejoin_inside_a_burst_of_one_id_gets_the_rest_of_the_burst_once() {
    let (_, relayed) = burst_frames();
    // Cut after the first to the fifth frame of the six-frame burst (frames 1..=6).
    let at = random_cut("langgraph burst", 2, 6);
    let gate = Gate::default();
    let (be, tether) = start_burst(Some((at, gate.clone()))).await;
    let got = cut(turn(&tether).await, at).await;
    assert_eq!(concat(&got), concat(&relayed[..at]), "the ids as relayed");
    // The requester reads the frames as relayed, from the raw record: not a resume.
    assert_eq!(attach_total(&tether).await, 0.0);
    let last = id_of(got.last().unwrap());
    let mut join = get(tether.addr, &stream_path(), &[("Last-Event-ID", &last)]).await;
    assert_eq!(join.status, 200);
    gate.open();
    let rest = blocks_to_end(&mut join).await;
    assert_eq!(concat(&rest), concat(&relayed[at..]));
    // Every token chunk once, in order.
    let seen: Vec<String> = got
        .iter()
        .chain(&rest)
        .map(|b| data(b).to_string())
        .collect();
    let sent: Vec<String> = burst().into_iter().map(|(_, d)| d).collect();
    assert_eq!(seen, sent);
    let ids: std::collections::HashSet<String> =
        got.iter().chain(&rest).map(|b| id_of(b)).collect();
    assert_eq!(ids.len(), sent.len(), "every id relayed names one frame");
    assert_eq!(attach_metric(&tether, "last_event_id", "replay").await, 1.0);
    assert_eq!(attach_total(&tether).await, 1.0);
    assert_eq!(requests(&be), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unique_ids_are_the_servers_bytes_and_either_form_joins_right_after_its_frame() {
    let (sent, relayed) = burst_frames();
    let (_be, tether) = start_burst(None).await;
    let live = turn(&tether).await.body_to_end().await;
    assert_eq!(std::str::from_utf8(&live).unwrap(), concat(&relayed));
    for n in [0, 1, 7, 8, 11] {
        assert_eq!(
            relayed[n], sent[n],
            "frame {n}: the first of its id, byte for byte"
        );
    }
    eventually("the run ended", || {
        tether
            .registry()
            .by_id(&Owner::NONE, &RUN.into())
            .is_some_and(|f| f.run.end().is_some())
    })
    .await;
    let join = |id: &'static str| {
        let addr = tether.addr;
        async move {
            let mut r = get(addr, &stream_path(), &[("Last-Event-ID", id)]).await;
            assert_eq!(r.status, 200);
            String::from_utf8(r.body_to_end().await.to_vec()).unwrap()
        }
    };
    // The plain id is the burst's first frame; a suffixed id, its own frame.
    assert_eq!(join("1761-0").await, concat(&relayed[2..]));
    assert_eq!(join("1761-0~4").await, concat(&relayed[5..]));
    assert_eq!(join("1763-0~9").await, concat(&relayed[10..]));
    assert_eq!(join("-1").await, concat(&relayed));
    assert!(
        join("1764-0").await.is_empty(),
        "after the last frame: nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ids_a_run_remembers_count_in_its_recorded_bytes_until_its_upstream_ends() {
    // A run of 3,000 frames, each with an id of its own, paused before its last frame.
    let n = 3000;
    let mut sent = vec![burst_frame(
        0,
        "1760-0",
        &json!({"run_id": RUN}).to_string(),
    )];
    sent.extend((1..n).map(|i| burst_frame(i, &format!("{}-0", 1760 + i), "[]")));
    let gate = Gate::default();
    let frames = sent.clone();
    let pause = (n - 1, gate.clone());
    let be = backend(move |_| held(&frames, Some((pause.0, &pause.1)))).await;
    let tether = sidecar(be.addr, PROFILE).await;
    let _live = turn(&tether).await;
    let run = || {
        tether
            .registry()
            .by_id(&Owner::NONE, &RUN.into())
            .map(|f| f.run)
    };
    // Beyond the run's window and raw frames: the ids it remembers (8 bytes each at least).
    let extra = || {
        let reg = tether.registry();
        run().map_or(0, |r| reg.recorded_bytes() as i64 - r.bytes() as i64)
    };
    eventually("the remembered ids are counted", || {
        extra() >= (n as i64 - 1) * 8
    })
    .await;
    gate.open();
    eventually("the run ended", || run().is_some_and(|r| r.end().is_some())).await;
    eventually("the remembered ids are given back", || extra() == 0).await;
    assert_eq!(requests(&be), 1);
}
