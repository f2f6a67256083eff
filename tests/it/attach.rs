//! Attach routes end to end: every row of the attach table, observers, resets and heartbeats.

use crate::support::*;
use serde_json::{json, Value};

/// Starts a run for `chat` and reads its frames up to seq `upto`; returns the run id and client.
async fn start_run(tether: &Sidecar, chat_id: &str, upto: u64) -> (String, Resp) {
    let mut r = post(tether.addr, "/chat", &chat(chat_id)).await;
    let snap = r.frame().await.unwrap();
    let run = snap.json["run_id"].as_str().unwrap().to_string();
    if upto > 0 {
        while r.frame().await.unwrap().seq() != upto {}
    }
    (run, r)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_cursor_active_run_gets_snapshot_then_live_events_then_end() {
    let gate = Gate::default();
    let be = turn_backend(turn(10), Some((5, gate.clone()))).await;
    let tether = sidecar(be.addr, "").await;
    let (run, _origin) = start_run(&tether, "c", 5).await;
    let mut r = post(tether.addr, "/chat/live", &chat("c")).await;
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    let snap = r.frame().await.unwrap();
    assert_eq!((snap.ty(), snap.seq()), ("STREAM_SNAPSHOT", 5));
    assert_eq!(snap.json["run_id"], json!(run));
    gate.open();
    let rest = r.frames_to_end().await;
    let mut state = Reduced::default();
    state.apply_frames(&[snap], 0);
    state.apply_frames(&rest, 5);
    assert_eq!(state, Reduced::of(&turn(10)));
    assert_eq!(rest.last().unwrap().json["persisted"], true);
    assert_eq!(
        tether
            .metric("tether_attach_total{dialect=\"protocol1\",result=\"snapshot\"}")
            .await,
        1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_cursor_completed_runs_get_204_when_persisted_and_snapshot_with_end_when_not() {
    let be = backend(|r: &Req| {
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        let mut events = vec![json!({"type":"RUN_STARTED"})];
        if v["chat_id"] == "saved" {
            events.push(json!({"type":"RUN_FINISHED"}));
        }
        scripted_turn(&events, None)
    })
    .await;
    let tether = sidecar(be.addr, "").await;
    post(tether.addr, "/chat", &chat("saved"))
        .await
        .frames_to_end()
        .await;
    post(tether.addr, "/chat", &chat("lost"))
        .await
        .frames_to_end()
        .await;
    let r = post(tether.addr, "/chat/live", &chat("saved")).await;
    assert_eq!(r.status, 204);
    let f = post(tether.addr, "/chat/live", &chat("lost"))
        .await
        .frames_to_end()
        .await;
    assert_eq!(
        f.iter().map(Frame::ty).collect::<Vec<_>>(),
        ["STREAM_SNAPSHOT", "STREAM_END"]
    );
    assert_eq!(f[0].json["events"], json!([{"type":"RUN_STARTED"}]));
    assert_eq!(f[1].json["persisted"], false);
    assert_eq!(
        tether
            .metric("tether_attach_total{dialect=\"protocol1\",result=\"no_content\"}")
            .await,
        1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_run_answers_204_after_wait_ms_or_the_run_that_goes_live_meanwhile() {
    let be = turn_backend(turn(3), None).await;
    let tether = sidecar(be.addr, "").await;
    assert_eq!(
        post(tether.addr, "/chat/live", &chat("none")).await.status,
        204
    );
    let r = post(
        tether.addr,
        "/chat/live",
        &json!({"chat_id":"none","protocol":1,"wait_ms":30}),
    )
    .await;
    assert_eq!(r.status, 204);
    // A waiting attach gets the run as soon as it is live.
    let addr = tether.addr;
    let waiter = tokio::spawn(async move {
        let mut r = post(
            addr,
            "/chat/live",
            &json!({"chat_id":"later","protocol":1,"wait_ms":20000}),
        )
        .await;
        (r.status, r.frames_to_end().await)
    });
    let registry = tether.registry();
    eventually("the attach is waiting", || registry.subscribers() > 0).await;
    let f = post(tether.addr, "/chat", &chat("later"))
        .await
        .frames_to_end()
        .await;
    let (status, frames) = within("waiter", waiter).await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(frames[0].ty(), "STREAM_SNAPSHOT");
    assert_eq!(frames.last().unwrap().ty(), "STREAM_END");
    assert_eq!(frames.last().unwrap().json["run_id"], f[0].json["run_id"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_inside_the_window_replays_without_snapshot_and_at_the_head_gets_just_the_end() {
    let be = turn_backend(turn(6), None).await;
    let tether = sidecar(be.addr, "").await;
    let f = post(tether.addr, "/chat", &chat("c"))
        .await
        .frames_to_end()
        .await;
    let run = f[0].json["run_id"].as_str().unwrap();
    let head = f.last().unwrap().seq();
    let r = post(tether.addr, "/chat/live", &cursor("c", run, 3))
        .await
        .frames_to_end()
        .await;
    assert_eq!(r[0].seq(), 4);
    assert!(r.iter().all(|f| f.ty() != "STREAM_SNAPSHOT"));
    assert_eq!(r.len() as u64, head - 3 + 1);
    let r = post(tether.addr, "/chat/live", &cursor("c", run, head))
        .await
        .frames_to_end()
        .await;
    assert_eq!(r.len(), 1);
    assert_eq!(
        r[0].json,
        json!({"type":"STREAM_END","run_id":run,"seq":head,"persisted":true,"superseded":false})
    );
    assert_eq!(
        tether
            .metric("tether_attach_total{dialect=\"protocol1\",result=\"end_only\"}")
            .await,
        1.0
    );
    assert_eq!(
        tether
            .metric("tether_attach_total{dialect=\"protocol1\",result=\"replay\"}")
            .await,
        1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_with_last_event_id_resumes_like_a_cursor() {
    let be = turn_backend(turn(6), None).await;
    let tether = sidecar(be.addr, "").await;
    let f = post(tether.addr, "/chat", &chat("c"))
        .await
        .frames_to_end()
        .await;
    let run = f[0].json["run_id"].as_str().unwrap();
    let id = format!("{run}:5");
    let mut r = request(
        tether.addr,
        "GET",
        "/chat/live?chat_id=c",
        &[("last-event-id", &id)],
        b"",
    )
    .await;
    let frames = r.frames_to_end().await;
    assert_eq!(frames[0].seq(), 6);
    assert_eq!(frames[0].id.as_deref(), Some(format!("{run}:6").as_str()));
    // Without the header: the query's cursor.
    let q = format!("/chat/live?chat_id=c&run_id={run}&after_seq=7");
    let frames = request(tether.addr, "GET", &q, &[], b"")
        .await
        .frames_to_end()
        .await;
    assert_eq!(frames[0].seq(), 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_run_future_cursor_and_expired_cursor_get_a_replacement_snapshot() {
    let be = turn_backend(turn(20), None).await;
    let tether = sidecar(be.addr, "[recorder]\nwindow = 4\n").await;
    let f = post(tether.addr, "/chat", &chat("c"))
        .await
        .frames_to_end()
        .await;
    let run = f[0].json["run_id"].as_str().unwrap();
    let head = f.last().unwrap().seq();
    let full = Reduced::of(&turn(20));
    for (body, reason) in [
        (cursor("c", "nosuchrun", 3), "unknown_run"),
        (cursor("c", run, head + 5), "future_cursor"),
        (cursor("c", run, 2), "expired_cursor"),
    ] {
        let frames = post(tether.addr, "/chat/live", &body)
            .await
            .frames_to_end()
            .await;
        assert_eq!(
            frames.iter().map(Frame::ty).collect::<Vec<_>>(),
            ["STREAM_SNAPSHOT", "STREAM_END"],
            "{reason}"
        );
        assert_eq!(frames[0].seq(), head);
        assert_eq!(
            Reduced::of(frames[0].json["events"].as_array().unwrap()),
            full
        );
        let sample =
            format!("tether_snapshot_resets_total{{dialect=\"protocol1\",reason=\"{reason}\"}}");
        assert_eq!(tether.metric(&sample).await, 1.0, "{reason}");
    }
    // No run at all for the chat: 204.
    assert_eq!(
        post(tether.addr, "/chat/live", &cursor("other", run, 1))
            .await
            .status,
        204
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_observers_read_independently() {
    let gate = Gate::default();
    let be = turn_backend(turn(8), Some((4, gate.clone()))).await;
    let tether = sidecar(be.addr, "").await;
    let (run, mut origin) = start_run(&tether, "c", 2).await;
    let mut a = post(tether.addr, "/chat/live", &chat("c")).await;
    let mut b = post(tether.addr, "/chat/live", &cursor("c", &run, 1)).await;
    let a_snap = a.frame().await.unwrap();
    assert_eq!(a_snap.ty(), "STREAM_SNAPSHOT");
    let b_first = b.frame().await.unwrap();
    assert_eq!((b_first.ty(), b_first.seq()), ("STREAM_EVENT", 2));
    // One observer leaving does not disturb the other or the origin.
    b.kill();
    gate.open();
    let a_rest = a.frames_to_end().await;
    let mut st = Reduced::default();
    let at = st.apply_frames(&[a_snap], 0);
    st.apply_frames(&a_rest, at);
    assert_eq!(st, Reduced::of(&turn(8)));
    let o = origin.frames_to_end().await;
    assert_eq!(o.last().unwrap().ty(), "STREAM_END");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_is_reset_by_snapshot_and_still_reduces_to_the_full_stream() {
    // Big deltas and a small window: a client that stops reading falls out of the window
    // once the socket buffers are full.
    let n = 600;
    let delta = "y".repeat(32 * 1024);
    let events: Vec<Value> = std::iter::once(json!({"type":"RUN_STARTED"}))
        .chain((0..n).map(|i| json!({"type":"TEXT_MESSAGE_CONTENT","messageId":format!("m{}", i / 100),"delta":delta})))
        .chain(std::iter::once(json!({"type":"RUN_FINISHED"})))
        .collect();
    let be = turn_backend(events.clone(), None).await;
    let tether = sidecar(be.addr, "[recorder]\nwindow = 4\n").await;
    let mut r = post(tether.addr, "/chat", &chat("c")).await;
    let first = r.frame().await.unwrap();
    // Do not read until the backend has written everything.
    be.wait_answers(1).await;
    let mut frames = vec![first];
    frames.extend(r.frames_to_end().await);
    assert!(
        frames.iter().skip(1).any(|f| f.ty() == "STREAM_SNAPSHOT"),
        "no reset happened"
    );
    let mut st = Reduced::default();
    st.apply_frames(&frames, 0);
    assert_eq!(st, Reduced::of(&events));
    assert!(
        tether
            .metric("tether_snapshot_resets_total{dialect=\"protocol1\",reason=\"lagged\"}")
            .await
            >= 1.0
    );
    assert!(be.served.lock()[0].completed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_streams_get_heartbeats_and_an_idle_disconnect_is_noticed() {
    let gate = Gate::default();
    let be = turn_backend(turn(4), Some((2, gate.clone()))).await;
    let tether = sidecar(be.addr, "[server]\nheartbeat = \"20ms\"\n").await;
    let (_run, mut origin) = start_run(&tether, "c", 2).await;
    assert!(origin.read_until(b": keepalive\n\n").await);
    let run = tether.current_run("c").unwrap();
    let mut watcher = post(tether.addr, "/chat/live", &chat("c")).await;
    watcher.frame().await.unwrap();
    assert_eq!(run.observers(), 2);
    // The watcher leaves while its stream is idle: noticed without any write to it.
    watcher.kill();
    eventually("idle disconnect noticed", || run.observers() == 1).await;
    gate.open();
    assert_eq!(
        origin.frames_to_end().await.last().unwrap().ty(),
        "STREAM_END"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_attach_is_passed_to_the_backend_unchanged() {
    let be = backend(|r: &Req| {
        let body = format!("legacy {} {}", r.path, String::from_utf8_lossy(&r.body));
        fixed_answer(200, "text/plain", body)
    })
    .await;
    let tether = sidecar(be.addr, "").await;
    let mut r = post(tether.addr, "/chat/live", &json!({"chat_id":"c"})).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        &r.body_to_end().await[..],
        br#"legacy /chat/live {"chat_id":"c"}"#
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_miss_record_attaches_share_one_upstream_request() {
    let gate = Gate::default();
    let be = turn_backend(turn(4), Some((1, gate.clone()))).await;
    let routes = "[[routes]]\nmethods=[\"POST\"]\npath=\"/chat\"\nkind=\"record\"\n[[routes]]\nmethods=[\"POST\",\"GET\"]\npath=\"/chat/live\"\nkind=\"attach\"\non_miss=\"record\"\n";
    let tether = sidecar(be.addr, routes).await;
    let mut a = post(tether.addr, "/chat/live", &chat("c")).await;
    assert_eq!(a.frame().await.unwrap().ty(), "STREAM_SNAPSHOT");
    let mut b = post(tether.addr, "/chat/live", &chat("c")).await;
    assert_eq!(b.frame().await.unwrap().ty(), "STREAM_SNAPSHOT");
    gate.open();
    let fa = a.frames_to_end().await;
    let fb = b.frames_to_end().await;
    assert_eq!(fa.last().unwrap().json, fb.last().unwrap().json);
    assert_eq!(
        be.requests.lock().len(),
        1,
        "one upstream request for both attaches"
    );
    assert_eq!(be.requests.lock()[0].path, "/chat/live");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_client_is_closed_after_the_write_timeout_and_the_run_goes_on() {
    let n = 400;
    let delta = "z".repeat(64 * 1024);
    let events: Vec<Value> = (0..n)
        .map(|_| json!({"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":delta}))
        .chain(std::iter::once(json!({"type":"RUN_FINISHED"})))
        .collect();
    let be = turn_backend(events, None).await;
    let tether = sidecar(be.addr, "[server]\nwrite_timeout = \"200ms\"\n").await;
    let mut r = post(tether.addr, "/chat", &chat("c")).await;
    r.frame().await.unwrap();
    // Never read again: the backend still completes and the run is persisted.
    be.wait_answers(1).await;
    assert!(be.served.lock()[0].completed);
    let run = tether.current_run("c").unwrap();
    eventually("stalled observer closed", || {
        run.observers() == 0 && !run.is_producing()
    })
    .await;
    assert!(run.end().unwrap().persisted);
    drop(r);
}
