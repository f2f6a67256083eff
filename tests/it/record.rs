//! Record routes end to end: the real sidecar in front of scripted backends.

use crate::support::*;
use bytes::Bytes;
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_killed_mid_stream_does_not_reach_the_backend_and_recovers_prefix_and_suffix() {
    let events = turn(30);
    let half = events.len() / 2;
    let gate = Gate::default();
    let be = turn_backend(events.clone(), Some((half, gate.clone()))).await;
    let tether = sidecar(be.addr, "").await;

    let mut client = post(tether.addr, "/chat", &chat("c1")).await;
    assert_eq!(client.status, 200);
    let first = client.frame().await.unwrap();
    assert_eq!((first.ty(), first.seq()), ("STREAM_SNAPSHOT", 0));
    let run_id = first.json["run_id"].as_str().unwrap().to_string();
    assert_eq!(client.header("x-tether-run-id"), Some(run_id.as_str()));
    assert_eq!(first.id.as_deref(), Some(format!("{run_id}:0").as_str()));
    let mut had = Vec::new();
    while had.len() < half {
        let f = client.frame().await.unwrap();
        assert_eq!(f.ty(), "STREAM_EVENT");
        assert_eq!(
            f.id.as_deref(),
            Some(format!("{run_id}:{}", f.seq()).as_str())
        );
        had.push(f);
    }
    client.kill();

    // The backend writes the rest only now, after the client is gone.
    gate.open();
    be.wait_answers(1).await;
    let served = be.served.lock()[0].clone();
    assert!(served.completed && !served.write_failed, "{served:?}");
    assert_eq!(served.steps_written, events.len() + 2);
    let req = be.requests.lock()[0].clone();
    assert_eq!(req.header("x-tether-run-id"), Some(run_id.as_str()));
    assert_eq!(req.header("accept-encoding"), Some("identity"));
    assert_eq!(
        serde_json::from_slice::<Value>(&req.body).unwrap(),
        chat("c1")
    );

    // Recover the suffix from the cursor.
    let last = had.last().unwrap().seq();
    let mut rec = post(tether.addr, "/chat/live", &cursor("c1", &run_id, last)).await;
    assert_eq!(rec.status, 200);
    let rest = rec.frames_to_end().await;
    assert!(rec.ended);
    assert_eq!(
        rest[0].ty(),
        "STREAM_EVENT",
        "no snapshot when the cursor is in the window"
    );
    assert_eq!(rest[0].seq(), last + 1);
    let end = rest.last().unwrap();
    assert_eq!(
        end.json,
        json!({"type":"STREAM_END","run_id":run_id,"seq":events.len(),"persisted":true,"superseded":false})
    );
    let mut state = Reduced::default();
    let at = state.apply_frames(&had, 0);
    state.apply_frames(&rest, at);
    assert_eq!(state, Reduced::of(&events));

    // The run is complete and persisted: a fresh probe gets 204.
    let probe = post(tether.addr, "/chat/live", &chat("c1")).await;
    assert_eq!(probe.status, 204);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_client_gets_the_upstream_bytes_byte_for_byte() {
    let chunks: Vec<Bytes> = vec![
        Bytes::from_static(b": hello\r\n\r\nid: 1\r\nevent: x\r\ndata: {\"type\":\"RUN_STA"),
        Bytes::from_static(b"RTED\"}\r\n\r\ndata: not json\n\ndata: {\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m\",\"delta\":\"caf\xC3"),
        Bytes::from_static(b"\xA9\"}\n\ndata: {\"type\":\"RUN_FINISHED\"}\n\n"),
    ];
    let c2 = chunks.clone();
    let be = backend(move |_| {
        let mut s = vec![Step::Head(
            200,
            vec![
                ("content-type", "text/event-stream; charset=utf-8".into()),
                ("x-backend", "yes".into()),
            ],
        )];
        s.extend(c2.iter().cloned().map(Step::Chunk));
        s.push(Step::End);
        s
    })
    .await;
    let tether = sidecar(be.addr, "").await;
    let mut r = post(tether.addr, "/chat", &json!({"chat_id":"legacy"})).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-backend"), Some("yes"));
    assert_eq!(
        r.header("content-type"),
        Some("text/event-stream; charset=utf-8")
    );
    let body = r.body_to_end().await;
    assert!(r.ended, "a clean upstream end is a clean end");
    assert_eq!(body, chunks.concat());
    // It was recorded all the same: 4 events, the last one terminal.
    assert_eq!(tether.metric("tether_upstream_events_total").await, 4.0);
    assert_eq!(
        tether
            .metric("tether_runs_finished_total{outcome=\"persisted\"}")
            .await,
        1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_reset_mid_stream_ends_with_persisted_false() {
    let events = turn(6);
    let ev = events.clone();
    let be = backend(move |_| {
        let mut s = scripted_turn(&ev[..4], None);
        *s.last_mut().unwrap() = Step::Reset; // instead of the end
        s
    })
    .await;
    let tether = sidecar(be.addr, "").await;
    let mut r = post(tether.addr, "/chat", &chat("c")).await;
    let frames = r.frames_to_end().await;
    assert!(r.ended);
    let end = frames.last().unwrap();
    assert_eq!(end.ty(), "STREAM_END");
    assert_eq!(end.json["persisted"], false);
    assert_eq!(end.json["reason"], "upstream_reset");
    assert_eq!(end.seq(), 4);
    assert_eq!(
        tether
            .metric("tether_runs_finished_total{outcome=\"not_persisted\"}")
            .await,
        1.0
    );
    assert_eq!(
        tether
            .metric("tether_upstream_errors_total{kind=\"reset\"}")
            .await,
        1.0
    );
    // A later probe gets the snapshot and the unpersisted end.
    let mut probe = post(tether.addr, "/chat/live", &chat("c")).await;
    let f = probe.frames_to_end().await;
    assert_eq!(
        f.iter().map(Frame::ty).collect::<Vec<_>>(),
        ["STREAM_SNAPSHOT", "STREAM_END"]
    );
    assert_eq!(
        Reduced::of(f[0].json["events"].as_array().unwrap()),
        Reduced::of(&events[..4])
    );
    assert_eq!(f[1].json["persisted"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_end_without_a_terminal_event_is_not_persisted() {
    let events = turn(4);
    let ev = events[..events.len() - 1].to_vec(); // no RUN_FINISHED
    let be = turn_backend(ev, None).await;
    let tether = sidecar(be.addr, "").await;
    let frames = post(tether.addr, "/chat", &chat("c"))
        .await
        .frames_to_end()
        .await;
    let end = frames.last().unwrap();
    assert_eq!(
        (end.json["persisted"].clone(), end.json["reason"].clone()),
        (json!(false), json!("no_terminal_event"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_on_an_event_persists_only_when_it_arrives() {
    let mut with = turn(2);
    with.insert(
        with.len() - 1,
        json!({"type":"CUSTOM","name":"persisted","value":{}}),
    );
    let without = turn(2);
    let be = backend(move |r: &Req| {
        let saved = serde_json::from_slice::<Value>(&r.body).unwrap()["chat_id"] == "saved";
        scripted_turn(if saved { &with } else { &without }, None)
    })
    .await;
    let routes = "[[routes]]\nmethods=[\"POST\"]\npath=\"/chat\"\nkind=\"record\"\ncommit=\"event:CUSTOM:persisted\"\n[[routes]]\nmethods=[\"POST\",\"GET\"]\npath=\"/chat/live\"\nkind=\"attach\"\n";
    let tether = sidecar(be.addr, routes).await;
    let f = post(tether.addr, "/chat", &chat("saved"))
        .await
        .frames_to_end()
        .await;
    assert_eq!(f.last().unwrap().json["persisted"], true);
    let f = post(tether.addr, "/chat", &chat("other"))
        .await
        .frames_to_end()
        .await;
    assert_eq!(f.last().unwrap().json["persisted"], false);
    assert_eq!(f.last().unwrap().json["reason"], "not_committed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_run_supersedes_the_active_one_whose_producer_keeps_going() {
    let gate = Gate::default();
    let g = gate.clone();
    let be = backend(move |r: &Req| {
        let first = serde_json::from_slice::<Value>(&r.body).unwrap()["n"] == 1;
        if first {
            scripted_turn(&turn(4), Some((2, &g)))
        } else {
            scripted_turn(&turn(2), None)
        }
    })
    .await;
    let tether = sidecar(be.addr, "").await;
    let mut a = post(
        tether.addr,
        "/chat",
        &json!({"chat_id":"c","protocol":1,"n":1}),
    )
    .await;
    let snap = a.frame().await.unwrap();
    let run_a = snap.json["run_id"].as_str().unwrap().to_string();
    assert_eq!(a.frame().await.unwrap().seq(), 1);
    assert_eq!(a.frame().await.unwrap().seq(), 2);
    let mut b = post(
        tether.addr,
        "/chat",
        &json!({"chat_id":"c","protocol":1,"n":2}),
    )
    .await;
    let run_b = b.frame().await.unwrap().json["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    let rest = a.frames_to_end().await;
    let end = rest.last().unwrap();
    assert_eq!(
        end.json,
        json!({"type":"STREAM_END","run_id":run_a,"seq":2,"persisted":false,"superseded":true,"next_run_id":run_b,"reason":"superseded"})
    );
    assert!(b.frames_to_end().await.last().unwrap().json["persisted"] == true);
    // The superseded run's producer was not stopped: its backend answer completes.
    gate.open();
    be.wait_answers(2).await;
    assert!(be.served.lock().iter().all(|s| s.completed));
    // The backend has written its end; tether's producer reads it a moment later.
    let run = tether.find_run("c", &run_a).unwrap();
    eventually("superseded producer ended", || !run.is_producing()).await;
    assert_eq!(
        tether
            .metric("tether_runs_finished_total{outcome=\"superseded\"}")
            .await,
        1.0
    );
    // A cursor on the superseded run: its events after the cursor, then the superseded end.
    let mut r = post(tether.addr, "/chat/live", &cursor("c", &run_a, 1)).await;
    let f = r.frames_to_end().await;
    assert_eq!(
        f.iter().map(Frame::ty).collect::<Vec<_>>(),
        ["STREAM_EVENT", "STREAM_END"]
    );
    assert_eq!(f[1].json["next_run_id"], json!(run_b));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn utf8_split_across_upstream_chunks_arrives_intact() {
    let e = json!({"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"caf\u{e9} \u{1F600}\u{4e16}"});
    let bytes = sse(&e);
    let be = backend(move |_| {
        let mut s = vec![sse_head()];
        // One byte per chunk: every multi-byte character is split.
        s.extend(
            bytes
                .iter()
                .map(|b| Step::Chunk(Bytes::copy_from_slice(&[*b]))),
        );
        s.push(Step::Chunk(sse(&json!({"type":"RUN_FINISHED"}))));
        s.push(Step::End);
        s
    })
    .await;
    let tether = sidecar(be.addr, "").await;
    let f = post(tether.addr, "/chat", &chat("c"))
        .await
        .frames_to_end()
        .await;
    assert_eq!(f[1].json["event"], e);
    assert_eq!(f.last().unwrap().json["persisted"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_upstream_event_is_dropped_and_counted_and_the_run_is_not_persisted() {
    let big = json!({"type":"CUSTOM","name":"big","value":"x".repeat(5000)});
    let be = turn_backend(
        vec![
            json!({"type":"RUN_STARTED"}),
            big,
            json!({"type":"RUN_FINISHED"}),
        ],
        None,
    )
    .await;
    let tether = sidecar(be.addr, "[recorder]\nmax_event_bytes = 1024\n").await;
    let f = post(tether.addr, "/chat", &chat("c"))
        .await
        .frames_to_end()
        .await;
    let types: Vec<Value> = f
        .iter()
        .filter(|f| f.ty() == "STREAM_EVENT")
        .map(|f| f.json["event"]["type"].clone())
        .collect();
    assert_eq!(types, [json!("RUN_STARTED"), json!("RUN_FINISHED")]);
    // The stream goes on, but the record is not the whole answer: never claimed as saved.
    let end = f.last().unwrap();
    assert_eq!(end.ty(), "STREAM_END");
    assert_eq!(end.json["persisted"], false);
    assert_eq!(end.json["reason"], "event_too_large");
    assert_eq!(
        tether
            .metric("tether_events_dropped_total{reason=\"oversized\"}")
            .await,
        1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_sse_and_error_answers_are_relayed_unchanged_and_nothing_is_recorded() {
    let be = backend(|r: &Req| {
        let body: Value = serde_json::from_slice(&r.body).unwrap();
        let (status, text) = if body["chat_id"] == "err" {
            (500, "{\"boom\":true}")
        } else {
            (200, "{\"ok\":1}")
        };
        fixed_answer(status, "application/json", text)
    })
    .await;
    let tether = sidecar(be.addr, "").await;
    let mut r = post(tether.addr, "/chat", &chat("err")).await;
    assert_eq!(r.status, 500);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(&r.body_to_end().await[..], b"{\"boom\":true}");
    let mut r = post(tether.addr, "/chat", &chat("ok")).await;
    assert_eq!(r.status, 200);
    assert_eq!(&r.body_to_end().await[..], b"{\"ok\":1}");
    assert_eq!(
        post(tether.addr, "/chat/live", &chat("err")).await.status,
        204
    );
    assert_eq!(
        tether
            .metric("tether_upstream_errors_total{kind=\"status\"}")
            .await,
        1.0
    );
    assert_eq!(
        tether
            .metric("tether_runs_started_total{format=\"agui\",route=\"/chat\"}")
            .await,
        0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_upstream_gives_502_with_a_json_error() {
    let closed = {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap()
    };
    let tether = sidecar(closed, "").await;
    let mut r = post(tether.addr, "/chat", &chat("c")).await;
    assert_eq!(r.status, 502);
    let v: Value = serde_json::from_slice(&r.body_to_end().await).unwrap();
    assert_eq!(v["error"], "upstream_unreachable");
    assert_eq!(
        tether
            .metric("tether_upstream_errors_total{kind=\"connect\"}")
            .await,
        1.0
    );
    assert_eq!(
        post(tether.addr, "/chat/live", &chat("c")).await.status,
        204
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_backend_turn_records_and_recovers() {
    // tether without an upstream runs its own demo backend.
    let tether = demo_sidecar(DemoOptions {
        tokens: 12,
        pace: std::time::Duration::ZERO,
    })
    .await;
    let f = post(tether.addr, "/chat", &chat("demo"))
        .await
        .frames_to_end()
        .await;
    let events: Vec<Value> = f
        .iter()
        .filter(|f| f.ty() == "STREAM_EVENT")
        .map(|f| f.json["event"].clone())
        .collect();
    assert_eq!(events, demo::turn("demo", 1, 12));
    assert_eq!(f.last().unwrap().json["persisted"], true);
    let backend = &tether.handle().demo.as_ref().unwrap().1;
    assert_eq!(
        backend
            .stats
            .completed
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_silent_for_the_idle_timeout_ends_the_run_as_upstream_timeout() {
    // Two events, then the backend says nothing (its gate never opens) with the connection open.
    let gate = Gate::default();
    let be = turn_backend(turn(4), Some((2, gate.clone()))).await;
    let tether = sidecar(be.addr, "[upstream]\nidle_timeout = \"300ms\"\n").await;
    let mut client = post(tether.addr, "/chat", &chat("quiet")).await;
    let frames = client.frames_to_end().await;
    let end = frames.last().unwrap();
    assert_eq!(end.ty(), "STREAM_END");
    assert_eq!(end.json["persisted"], false);
    assert_eq!(end.json["reason"], "upstream_timeout");
    assert_eq!(
        frames.iter().filter(|f| f.ty() == "STREAM_EVENT").count(),
        2
    );
    assert_eq!(
        tether
            .metric("tether_upstream_errors_total{kind=\"timeout\"}")
            .await,
        1.0
    );
    drop(gate);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_pipelined_behind_a_stream_lets_it_end_whole_then_the_connection_closes() {
    let gate = Gate::default();
    let events = turn(6);
    let be = turn_backend(events.clone(), Some((2, gate.clone()))).await;
    let tether = sidecar(be.addr, "[server]\nheartbeat = \"50ms\"\n").await;
    let mut recorder = post(tether.addr, "/chat", &chat("p")).await;
    let mut recorded = vec![recorder.frame().await.unwrap()];
    while recorded.last().unwrap().seq() < 2 {
        recorded.push(recorder.frame().await.unwrap());
    }
    let mut watcher = post(tether.addr, "/chat/live", &chat("p")).await;
    let mut watched = vec![watcher.frame().await.unwrap()];
    // On each stream's connection, a second request while the stream is idle.
    let second = b"GET /chat/live?chat_id=p HTTP/1.1\r\nhost: test\r\n\r\n";
    recorder.send(second).await;
    watcher.send(second).await;
    // Both streams go on (their heartbeats keep coming) until the run ends.
    let beats = sidecar_keepalives(2);
    assert!(
        recorder.read_until(&beats).await,
        "the recorder's stream was cut"
    );
    assert!(
        watcher.read_until(&beats).await,
        "the watcher's stream was cut"
    );
    gate.open();
    recorded.extend(recorder.frames_to_end().await);
    watched.extend(watcher.frames_to_end().await);
    for (who, frames, resp) in [
        ("recorder", &recorded, &mut recorder),
        ("watcher", &watched, &mut watcher),
    ] {
        let end = frames.last().unwrap();
        assert_eq!(
            (end.ty(), end.json["persisted"].clone()),
            ("STREAM_END", json!(true)),
            "{who}"
        );
        let mut state = Reduced::default();
        state.apply_frames(frames, 0);
        assert_eq!(state, Reduced::of(&events), "{who}");
        assert!(resp.ended, "{who}: the chunked body ended cleanly");
        // The pipelined request is not answered: the connection closes after the stream.
        let after = resp.rest_until_close().await;
        assert_eq!(String::from_utf8_lossy(&after), "", "{who}");
    }
}

/// `n` heartbeat comments in a row, as an idle stream sends them.
fn sidecar_keepalives(n: usize) -> Vec<u8> {
    b": keepalive\n\n".repeat(n)
}
