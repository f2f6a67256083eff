//! A route's disconnect policy: with `on_disconnect = "cancel"`, a run whose last client left
//! is stopped (`abandoned`, its upstream request aborted: the backend sees the connection close)
//! once the grace passes or the unwatched-event budget is spent; a client attaching within the
//! grace keeps it; counted in `tether_runs_abandoned_total{route}`.

use std::time::Duration;

use serde_json::{json, Value};

use tether::config::OnDisconnect;

use crate::support::*;

/// A record route with `policy`, an attach route, and the webhook at `hook`.
fn conf(hook: &Backend, policy: &str) -> String {
    format!(
        "[accounting]\nwebhook_url = \"http://{}/runs\"\n\n\
         [[routes]]\nmethods = [\"POST\"]\npath = \"/chat\"\nkind = \"record\"\n\
         chat_id = \"body:chat_id\"\nformat = \"agui\"\n{policy}\n\n\
         [[routes]]\nmethods = [\"POST\"]\npath = \"/chat/live\"\nkind = \"attach\"\n\
         chat_id = \"body:chat_id\"\n",
        hook.addr
    )
}

/// A backend answering a turn of `n` text deltas, one every `pace`.
async fn paced(n: usize, pace: Duration) -> Backend {
    backend(move |_| {
        let mut steps = vec![sse_head()];
        for e in turn(n) {
            steps.push(Step::Chunk(sse(&e)));
            steps.push(Step::Sleep(pace));
        }
        steps.push(Step::End);
        steps
    })
    .await
}

/// The one record the webhook receiver got.
async fn the_record(hook: &Backend) -> Value {
    eventually("the run's record", || hook.requests.lock().len() == 1).await;
    serde_json::from_slice(&hook.requests.lock()[0].body).unwrap()
}

/// Starts a turn of chat `c`, reads its first event, and leaves (the connection reset).
async fn start_and_leave(tether: &Sidecar) -> String {
    let mut r = post(tether.addr, "/chat", &chat("c")).await;
    assert_eq!(r.status, 200);
    let snap = r.frame().await.unwrap();
    let run = snap.json["run_id"].as_str().unwrap().to_string();
    r.next_frame().await.unwrap();
    r.kill();
    run
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_the_backends_request_once_the_grace_has_passed() {
    let be = paced(200, Duration::from_millis(20)).await;
    let hook = backend(|_| fixed_answer(200, "text/plain", "")).await;
    let policy = "on_disconnect = \"cancel\"\ngrace = \"300ms\"";
    let tether = sidecar(be.addr, &conf(&hook, policy)).await;
    let run = start_and_leave(&tether).await;
    be.wait_answers(1).await;
    let served = be.served.lock()[0].clone();
    assert!(
        served.write_failed && !served.completed,
        "the backend saw its connection closed: {served:?}"
    );
    let r = the_record(&hook).await;
    assert_eq!(r["run_id"], run.as_str());
    assert_eq!(
        (&r["reason"], &r["outcome"]),
        (&json!("abandoned"), &json!("not_persisted"))
    );
    let w = &r["watch"];
    assert!(w["unwatched_ms"].as_u64().unwrap() >= 300, "{w}");
    assert!(w["events_unwatched"].as_u64().unwrap() > 0, "{w}");
    assert_eq!(w["ended_watched"], false);
    assert_eq!(
        tether
            .metric("tether_runs_abandoned_total{route=\"/chat\"}")
            .await,
        1.0
    );
    assert_eq!(
        tether
            .metric("tether_unwatched_runs_total{format=\"agui\",route=\"/chat\"}")
            .await,
        1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_attaching_within_the_grace_keeps_the_run() {
    // 40 events 25 ms apart: a second, over twice the grace.
    let be = paced(40, Duration::from_millis(25)).await;
    let hook = backend(|_| fixed_answer(200, "text/plain", "")).await;
    let policy = "on_disconnect = \"cancel\"\ngrace = \"400ms\"";
    let tether = sidecar(be.addr, &conf(&hook, policy)).await;
    let run = start_and_leave(&tether).await;
    let mut back = post(tether.addr, "/chat/live", &chat("c")).await;
    assert_eq!(back.status, 200);
    let frames = back.frames_to_end().await;
    let end = frames.last().unwrap();
    assert_eq!(
        (end.ty(), &end.json["persisted"]),
        ("STREAM_END", &json!(true))
    );
    be.wait_answers(1).await;
    assert!(
        be.served.lock()[0].completed,
        "the backend's answer ran to its end"
    );
    let r = the_record(&hook).await;
    assert_eq!(r["run_id"], run.as_str());
    assert_eq!(
        (&r["reason"], &r["outcome"]),
        (&Value::Null, &json!("persisted"))
    );
    assert_eq!(r["watch"]["attaches"], 1);
    assert_eq!(r["watch"]["ended_watched"], true);
    assert_eq!(
        tether
            .metric("tether_runs_abandoned_total{route=\"/chat\"}")
            .await,
        0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_a_run_once_its_unwatched_event_budget_is_spent() {
    let be = paced(200, Duration::from_millis(10)).await;
    let hook = backend(|_| fixed_answer(200, "text/plain", "")).await;
    let policy = "on_disconnect = \"cancel\"\ngrace = \"60s\"\nmax_unwatched_events = 5";
    let tether = sidecar(be.addr, &conf(&hook, policy)).await;
    start_and_leave(&tether).await;
    let r = within("the budget spent long before the grace", the_record(&hook)).await;
    assert_eq!(r["reason"], "abandoned");
    let unwatched = r["watch"]["events_unwatched"].as_u64().unwrap();
    assert!((5..10).contains(&unwatched), "{unwatched}");
    be.wait_answers(1).await;
    assert!(be.served.lock()[0].write_failed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continue_is_the_default_and_the_policy_is_checked() {
    let check = |kind: &str, extra: &str| {
        let text = format!(
            "[[routes]]\nmethods = [\"POST\"]\npath = \"/chat\"\nkind = \"{kind}\"\n{extra}\n"
        );
        Config::from_parts(parse_file(&text).unwrap(), &Flags::default())
            .map(|c| c.routes[0].on_disconnect)
            .map_err(|e| e.to_string())
    };
    assert_eq!(check("record", ""), Ok(OnDisconnect::Continue));
    assert_eq!(
        check("record", "on_disconnect = \"cancel\"\ngrace = \"0s\""),
        Ok(OnDisconnect::Cancel {
            grace: Duration::ZERO,
            max_unwatched_events: None
        })
    );
    for (kind, bad, key) in [
        ("record", "on_disconnect = \"cancel\"", "grace"),
        ("record", "grace = \"1s\"", "grace"),
        ("record", "max_unwatched_events = 3", "max_unwatched_events"),
        (
            "record",
            "on_disconnect = \"cancel\"\ngrace = \"1s\"\nmax_unwatched_events = 0",
            "max_unwatched_events",
        ),
        (
            "stop",
            "on_disconnect = \"cancel\"\ngrace = \"1s\"",
            "on_disconnect",
        ),
    ] {
        let e = check(kind, bad).unwrap_err();
        assert!(e.contains(&format!("routes[0].{key}")), "{bad}: {e}");
    }
}
