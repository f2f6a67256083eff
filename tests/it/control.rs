//! Control and security: stop, run status, ownership, single flight, resolution events,
//! abandoned runs and limits.

use crate::support::*;
use serde_json::{json, Value};

/// A backend streaming `turn(6)` that holds after 2 events until `gate` opens; other paths
/// (stop, approve) answer 200 JSON.
async fn held_backend(gate: &Gate) -> Backend {
    let g = gate.clone();
    backend(move |r: &Req| {
        if r.path != "/chat" {
            return fixed_answer(200, "application/json", r#"{"ok":true}"#);
        }
        scripted_turn(&turn(6), Some((2, &g)))
    })
    .await
}

async fn json_body(r: &mut Resp) -> Value {
    serde_json::from_slice(&r.body_to_end().await).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_aborts_the_upstream_and_observers_get_a_cancelled_end() {
    let gate = Gate::default();
    let be = held_backend(&gate).await;
    let tether = sidecar(be.addr, "").await;
    let (run, mut client) = started(&tether, "c", &[]).await;
    let mut r = post(tether.addr, "/chat/stop", &json!({"chat_id":"c"})).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        json_body(&mut r).await,
        json!({"run_id":run,"execution_stopped":true,"terminal_persisted":false})
    );
    let end = client.frames_to_end().await.pop().unwrap();
    assert_eq!(
        (end.json["persisted"].clone(), end.json["reason"].clone()),
        (json!(false), json!("cancelled"))
    );
    assert_eq!(
        tether
            .metric("tether_runs_finished_total{outcome=\"cancelled\"}")
            .await,
        1.0
    );
    // The backend's connection was closed: what it writes after the stop fails.
    gate.open();
    be.wait_answers(1).await;
    assert!(be.served.lock()[0].write_failed);
    // Stopping a finished run changes nothing and says so.
    let mut again = post(
        tether.addr,
        "/chat/stop",
        &json!({"chat_id":"c","run_id":run}),
    )
    .await;
    assert_eq!(json_body(&mut again).await["execution_stopped"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_of_a_run_that_already_finished_keeps_its_persisted_end() {
    let be = turn_backend(vec![json!({"type":"RUN_FINISHED"})], None).await;
    let tether = sidecar(be.addr, "").await;
    let f = post(tether.addr, "/chat", &chat("c"))
        .await
        .frames_to_end()
        .await;
    let run = f[0].json["run_id"].as_str().unwrap();
    let mut r = post(tether.addr, "/chat/stop", &json!({"chat_id":"c"})).await;
    assert_eq!(
        json_body(&mut r).await,
        json!({"run_id":run,"execution_stopped":true,"terminal_persisted":true})
    );
    let end = post(tether.addr, "/chat/live", &cursor("c", run, 1))
        .await
        .frames_to_end()
        .await;
    assert_eq!(end[0].json["persisted"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_naming_a_run_or_repeating_a_cancel_id_never_stops_a_later_run() {
    let gate = Gate::default();
    let be = held_backend(&gate).await;
    let tether = sidecar(be.addr, "").await;
    let (r1, _c1) = started(&tether, "c", &[]).await;
    let mut s = post(
        tether.addr,
        "/chat/stop",
        &json!({"chat_id":"c","cancel_request_id":"k1"}),
    )
    .await;
    assert_eq!(json_body(&mut s).await["run_id"], json!(r1));
    let (r2, mut c2) = started(&tether, "c", &[]).await;
    // The same cancel_request_id again: idempotent, about r1.
    let mut s = post(
        tether.addr,
        "/chat/stop",
        &json!({"chat_id":"c","cancel_request_id":"k1"}),
    )
    .await;
    assert_eq!(json_body(&mut s).await["run_id"], json!(r1));
    // A stop naming r1.
    let mut s = post(
        tether.addr,
        "/chat/stop",
        &json!({"chat_id":"c","run_id":r1}),
    )
    .await;
    assert_eq!(json_body(&mut s).await["run_id"], json!(r1));
    gate.open();
    let end = c2.frames_to_end().await.pop().unwrap();
    assert_eq!(end.json["run_id"], json!(r2));
    assert_eq!(end.json["persisted"], true, "the later run was not stopped");
    // An unknown run: 404.
    let mut s = post(
        tether.addr,
        "/chat/stop",
        &json!({"chat_id":"c","run_id":"nope"}),
    )
    .await;
    assert_eq!(s.status, 404);
    assert_eq!(json_body(&mut s).await["error"], "no_run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_with_forward_also_tells_the_backend() {
    let gate = Gate::default();
    let be = held_backend(&gate).await;
    let routes = "[[routes]]\nmethods=[\"POST\"]\npath=\"/chat\"\nkind=\"record\"\n[[routes]]\nmethods=[\"POST\"]\npath=\"/chat/stop\"\nkind=\"stop\"\nforward=true\n";
    let tether = sidecar(be.addr, routes).await;
    let (_run, _client) = started(&tether, "c", &[]).await;
    assert_eq!(
        post(tether.addr, "/chat/stop", &json!({"chat_id":"c"}))
            .await
            .status,
        200
    );
    eventually("forwarded stop", || {
        be.requests.lock().iter().any(|r| r.path == "/chat/stop")
    })
    .await;
    let fwd = be
        .requests
        .lock()
        .iter()
        .find(|r| r.path == "/chat/stop")
        .cloned()
        .unwrap();
    assert_eq!(
        serde_json::from_slice::<Value>(&fwd.body).unwrap(),
        json!({"chat_id":"c"})
    );
    gate.open();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_status_reports_running_then_completed_and_204_without_a_run() {
    let gate = Gate::default();
    let be = held_backend(&gate).await;
    let tether = sidecar(be.addr, "").await;
    assert_eq!(
        request(tether.addr, "GET", "/chat/run?chat_id=c", &[], b"")
            .await
            .status,
        204
    );
    let (run, mut client) = started(&tether, "c", &[]).await;
    let mut r = request(tether.addr, "GET", "/chat/run?chat_id=c", &[], b"").await;
    let mut v = json_body(&mut r).await;
    let watch = v.as_object_mut().unwrap().remove("watch").unwrap();
    assert_eq!(
        v,
        json!({"run_id":run,"status":"running","seq":2,"persisted":false,"superseded":false,
               "usage":null})
    );
    // Its requester reads it; AG-UI reports no usage unless the route says where.
    assert_eq!(
        (&watch["observers"], &watch["attaches"]),
        (&json!(1), &json!(0))
    );
    gate.open();
    client.frames_to_end().await;
    let mut r = request(tether.addr, "GET", "/chat/run?chat_id=c", &[], b"").await;
    let v = json_body(&mut r).await;
    assert_eq!(
        (v["status"].clone(), v["persisted"].clone()),
        (json!("completed"), json!(true))
    );
    let mut r = request(tether.addr, "GET", "/chat/run", &[], b"").await;
    assert_eq!(
        (r.status, json_body(&mut r).await["error"].clone()),
        (400, json!("missing_chat_id"))
    );
}

/// Everything a caller can observe of a response, but the `date` header.
async fn seen(mut r: Resp) -> (u16, Vec<(String, String)>, bytes::Bytes) {
    let headers = r
        .headers
        .iter()
        .filter(|(k, _)| k != "date")
        .cloned()
        .collect();
    (r.status, headers, r.body_to_end().await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_subject_cannot_tell_a_hidden_run_from_no_run() {
    let gate = Gate::default();
    let be = held_backend(&gate).await;
    let tether = sidecar(be.addr, "[auth]\nsubject = \"header:X-User\"\n").await;
    let alice = [("x-user", "alice")];
    let (run, mut client) = started(&tether, "secret", &alice).await;
    let probes = |chat_id: &'static str, who: &'static [(&'static str, &'static str)]| {
        let addr = tether.addr;
        let run = run.clone();
        async move {
            let live = cursor(chat_id, &run, 1).to_string();
            let stop = json!({"chat_id":chat_id,"run_id":run}).to_string();
            let q = format!("/chat/run?chat_id={chat_id}");
            vec![
                seen(
                    request(
                        addr,
                        "POST",
                        "/chat/live",
                        who,
                        chat(chat_id).to_string().as_bytes(),
                    )
                    .await,
                )
                .await,
                seen(request(addr, "POST", "/chat/live", who, live.as_bytes()).await).await,
                seen(request(addr, "POST", "/chat/stop", who, stop.as_bytes()).await).await,
                seen(request(addr, "GET", &q, who, b"").await).await,
            ]
        }
    };
    const BOB: &[(&str, &str)] = &[("x-user", "bob")];
    let hidden = probes("secret", BOB).await;
    let missing = probes("never-used", BOB).await;
    assert_eq!(hidden, missing);
    assert_eq!(hidden[0].0, 204);
    assert_eq!(hidden[2].0, 404);
    // Bob's stop did not touch Alice's run; Alice still sees it.
    let mut r = request(tether.addr, "GET", "/chat/run?chat_id=secret", &alice, b"").await;
    assert_eq!(json_body(&mut r).await["status"], "running");
    // Without the subject header: 401.
    let mut r = post(tether.addr, "/chat/live", &chat("secret")).await;
    assert_eq!(
        (r.status, json_body(&mut r).await["error"].clone()),
        (401, json!("unauthenticated"))
    );
    gate.open();
    assert_eq!(
        client.frames_to_end().await.pop().unwrap().json["persisted"],
        true
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_flight_refuses_a_second_turn_without_forwarding_it() {
    let gate = Gate::default();
    let be = held_backend(&gate).await;
    let routes =
        "[[routes]]\nmethods=[\"POST\"]\npath=\"/chat\"\nkind=\"record\"\nsingle_flight=true\n";
    let tether = sidecar(be.addr, routes).await;
    let (run, mut client) = started(&tether, "c", &[]).await;
    let mut r = post(tether.addr, "/chat", &chat("c")).await;
    assert_eq!(r.status, 409);
    let v = json_body(&mut r).await;
    assert_eq!(
        (v["error"].clone(), v["run_id"].clone()),
        (json!("turn_already_running"), json!(run))
    );
    assert_eq!(be.requests.lock().len(), 1);
    // Another chat is not affected; after the run ends the chat takes a new turn.
    gate.open();
    client.frames_to_end().await;
    let f = post(tether.addr, "/chat", &chat("c"))
        .await
        .frames_to_end()
        .await;
    assert_eq!(f.last().unwrap().ty(), "STREAM_END");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answered_approval_is_recorded_as_a_resolution_event() {
    let gate = Gate::default();
    let be = held_backend(&gate).await;
    let routes = "[[routes]]\nmethods=[\"POST\"]\npath=\"/chat\"\nkind=\"record\"\n[[routes]]\nmethods=[\"POST\",\"GET\"]\npath=\"/chat/live\"\nkind=\"attach\"\n[[routes]]\nmethods=[\"POST\"]\npath=\"/chat/approve\"\nkind=\"annotate\"\n";
    let tether = sidecar(be.addr, routes).await;
    let (_run, mut client) = started(&tether, "c", &[]).await;
    let answer = json!({"chat_id":"c","tool_call_id":"t1","decision":"approve"});
    let mut r = post(tether.addr, "/chat/approve", &answer).await;
    assert_eq!(
        (r.status, json_body(&mut r).await),
        (200, json!({"ok":true}))
    );
    let f = client.frame().await.unwrap();
    assert_eq!(
        f.json["event"],
        json!({"type":"CUSTOM","name":"tether.resolution","value":answer})
    );
    // A replay from scratch carries it too.
    let snap = post(tether.addr, "/chat/live", &chat("c"))
        .await
        .frame()
        .await
        .unwrap();
    let events = snap.json["events"].as_array().unwrap();
    assert!(events.iter().any(|e| e["name"] == "tether.resolution"));
    gate.open();
    client.frames_to_end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_approval_is_not_recorded() {
    let gate = Gate::default();
    let g = gate.clone();
    let be = backend(move |r: &Req| {
        if r.path == "/chat/approve" {
            return vec![Step::Head(409, vec![("content-length", "0".into())])];
        }
        scripted_turn(&[json!({"type":"RUN_STARTED"})], Some((1, &g)))
    })
    .await;
    let routes = "[[routes]]\nmethods=[\"POST\"]\npath=\"/chat\"\nkind=\"record\"\n[[routes]]\nmethods=[\"POST\"]\npath=\"/chat/approve\"\nkind=\"annotate\"\n";
    let tether = sidecar(be.addr, routes).await;
    let mut client = post(tether.addr, "/chat", &chat("c")).await;
    client.frame().await.unwrap();
    client.frame().await.unwrap();
    assert_eq!(
        post(tether.addr, "/chat/approve", &json!({"chat_id":"c"}))
            .await
            .status,
        409
    );
    gate.open();
    let rest = client.frames_to_end().await;
    assert_eq!(
        rest.iter().map(Frame::ty).collect::<Vec<_>>(),
        ["STREAM_END"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_without_a_json_body_is_refused_and_never_forwarded() {
    let gate = Gate::default();
    let be = held_backend(&gate).await;
    // The chat id comes from the query, so the body is not needed to find the chat.
    let routes = "[[routes]]\nmethods=[\"POST\"]\npath=\"/chat\"\nkind=\"record\"\n[[routes]]\nmethods=[\"POST\"]\npath=\"/chat/approve\"\nkind=\"annotate\"\nchat_id=\"query:chat_id\"\n";
    let tether = sidecar(be.addr, routes).await;
    let (_run, mut client) = started(&tether, "c", &[]).await;
    let mut r = request(tether.addr, "POST", "/chat/approve?chat_id=c", &[], b"").await;
    assert_eq!(
        (r.status, json_body(&mut r).await["error"].clone()),
        (400, json!("invalid_json"))
    );
    assert!(
        !be.requests
            .lock()
            .iter()
            .any(|r| r.path.starts_with("/chat/approve")),
        "a refused approval reached the backend"
    );
    gate.open();
    let rest = client.frames_to_end().await;
    assert!(
        rest.iter().all(|f| f.json["event"]["type"] != "RAW"),
        "nothing was recorded as RAW: {rest:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_nobody_watches_is_stopped_as_abandoned() {
    let gate = Gate::default();
    let be = held_backend(&gate).await;
    let tether = sidecar(be.addr, "[limits]\nabandon_after = \"50ms\"\n").await;
    let (run, client) = started(&tether, "c", &[]).await;
    client.kill();
    let r = tether.find_run("c", &run).unwrap();
    eventually("abandoned", || !r.is_producing()).await;
    let end = r.end().unwrap();
    assert_eq!(
        (end.persisted, end.reason.map(|r| r.as_str())),
        (false, Some("abandoned"))
    );
    // The global abandon counts in the per-route family, as a route's on_disconnect does.
    assert_eq!(
        tether
            .metric("tether_runs_abandoned_total{route=\"/chat\"}")
            .await,
        1.0
    );
    gate.open();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_headers_get_431_and_too_many_observers_get_429() {
    let gate = Gate::default();
    let be = held_backend(&gate).await;
    let tether = sidecar(
        be.addr,
        "[limits]\nmax_header_bytes = 2048\nmax_observers_per_run = 2\n",
    )
    .await;
    let big = "h".repeat(4096);
    let mut r = request(tether.addr, "GET", "/anything", &[("x-big", &big)], b"").await;
    assert_eq!(
        (r.status, json_body(&mut r).await["error"].clone()),
        (431, json!("headers_too_large"))
    );
    let (_run, _origin) = started(&tether, "c", &[]).await;
    let mut second = post(tether.addr, "/chat/live", &chat("c")).await;
    second.frame().await.unwrap();
    let mut third = post(tether.addr, "/chat/live", &chat("c")).await;
    assert_eq!(
        (third.status, json_body(&mut third).await["error"].clone()),
        (429, json!("too_many_observers"))
    );
    gate.open();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_max_runs_completed_runs_go_first_then_new_turns_pass_through_unrecorded() {
    let gate = Gate::default();
    let be = held_backend(&gate).await;
    let tether = sidecar(be.addr, "[limits]\nmax_runs = 1\n").await;
    gate.open();
    post(tether.addr, "/chat", &chat("done"))
        .await
        .frames_to_end()
        .await;
    // The completed run is evicted to make room.
    let f = post(tether.addr, "/chat", &chat("next"))
        .await
        .frames_to_end()
        .await;
    assert_eq!(f[0].ty(), "STREAM_SNAPSHOT");
    assert_eq!(
        tether
            .metric("tether_runs_evicted_total{reason=\"capacity\"}")
            .await,
        1.0
    );
    // With an active run holding the only place, a new turn passes through unrecorded.
    let held = Gate::default();
    let be2 = held_backend(&held).await;
    let tether2 = sidecar(be2.addr, "[limits]\nmax_runs = 1\n").await;
    let (_run, _client) = started(&tether2, "busy", &[]).await;
    assert_next_turn_passes_through_unrecorded(&tether2, &be2, &held).await;
}

/// With a run held open at the backend, a turn for another chat is forwarded and relayed
/// unchanged, and counted as unrecorded.
async fn assert_next_turn_passes_through_unrecorded(tether: &Sidecar, be: &Backend, held: &Gate) {
    let addr = tether.addr;
    let other = tokio::spawn(async move {
        post(addr, "/chat", &chat("other"))
            .await
            .body_to_end()
            .await
    });
    // Both turns are at the backend before either may finish.
    eventually("both turns forwarded", || be.requests.lock().len() >= 2).await;
    held.open();
    let raw = within("unrecorded turn", other).await.unwrap();
    assert!(raw.starts_with(b"data: {"), "the upstream bytes, unchanged");
    assert_eq!(tether.metric("tether_runs_unrecorded_total").await, 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_max_recorded_bytes_a_new_turn_passes_through_unrecorded() {
    let held = Gate::default();
    let be = held_backend(&held).await;
    // The first run alone holds more than the cap once it has a few events.
    let tether = sidecar(be.addr, "[limits]\nmax_recorded_bytes = 200\n").await;
    let (_run, _client) = started(&tether, "big", &[]).await;
    assert_next_turn_passes_through_unrecorded(&tether, &be, &held).await;
    assert_eq!(
        post(tether.addr, "/chat/live", &chat("other")).await.status,
        204
    );
}

/// Two owners recording the same chat id record two chats: Bob's turn for "c" does not
/// supersede Alice's. Alice's observer of "c" gets her run's events, and only hers, to a
/// persisted end; her status still names her run while Bob's names his.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_owner_recording_the_same_chat_id_does_not_supersede_the_first() {
    let gate = Gate::default();
    let g = gate.clone();
    let alices = turn(6);
    let bobs = vec![
        json!({"type":"RUN_STARTED","threadId":"t","runId":"b"}),
        json!({"type":"TEXT_MESSAGE_START","messageId":"bob","role":"assistant"}),
        json!({"type":"TEXT_MESSAGE_CONTENT","messageId":"bob","delta":"bob's answer"}),
        json!({"type":"TEXT_MESSAGE_END","messageId":"bob"}),
        json!({"type":"RUN_FINISHED","threadId":"t","runId":"b"}),
    ];
    let (a, b) = (alices.clone(), bobs.clone());
    let be = backend(move |r: &Req| match r.header("x-user") {
        Some("alice") => scripted_turn(&a, Some((2, &g))),
        _ => scripted_turn(&b, Some((2, &g))),
    })
    .await;
    let tether = sidecar(be.addr, "[auth]\nsubject = \"header:X-User\"\n").await;
    const ALICE: &[(&str, &str)] = &[("x-user", "alice")];
    const BOB: &[(&str, &str)] = &[("x-user", "bob")];
    let (run_a, mut client_a) = started(&tether, "c", ALICE).await;
    let live = chat("c").to_string();
    let mut observer = request(tether.addr, "POST", "/chat/live", ALICE, live.as_bytes()).await;
    let mut seen = vec![observer.frame().await.unwrap()];
    assert_eq!(seen[0].ty(), "STREAM_SNAPSHOT");

    let (run_b, mut client_b) = started(&tether, "c", BOB).await;
    assert_ne!(run_a, run_b);
    assert_eq!(be.requests.lock().len(), 2, "both turns are at the backend");
    let status = |who: &'static [(&'static str, &'static str)]| {
        let addr = tether.addr;
        async move {
            let mut r = request(addr, "GET", "/chat/run?chat_id=c", who, b"").await;
            let v = json_body(&mut r).await;
            (
                v["run_id"].as_str().unwrap().to_string(),
                v["status"].clone(),
            )
        }
    };
    assert_eq!(status(ALICE).await, (run_a.clone(), json!("running")));
    assert_eq!(status(BOB).await, (run_b.clone(), json!("running")));

    gate.open();
    seen.extend(observer.frames_to_end().await);
    let end = seen.last().unwrap();
    assert_eq!(end.ty(), "STREAM_END");
    assert_eq!(end.json["run_id"], json!(run_a));
    assert_eq!(end.json["persisted"], true);
    assert_eq!(end.json["superseded"], false);
    assert!(end.json.get("next_run_id").is_none(), "{:?}", end.json);
    assert!(seen.iter().all(|f| f.json["run_id"] == json!(run_a)));
    let mut state = Reduced::default();
    state.apply_frames(&seen, 0);
    assert_eq!(state, Reduced::of(&alices), "Alice's events, and only hers");
    let end_a = client_a.frames_to_end().await.pop().unwrap();
    assert_eq!(
        (
            end_a.json["persisted"].clone(),
            end_a.json["superseded"].clone()
        ),
        (json!(true), json!(false))
    );
    let end_b = client_b.frames_to_end().await.pop().unwrap();
    assert_eq!(end_b.json["persisted"], true);
    assert_eq!(status(ALICE).await, (run_a, json!("completed")));
    assert_eq!(
        tether
            .metric("tether_runs_finished_total{outcome=\"superseded\"}")
            .await,
        0.0
    );
}
