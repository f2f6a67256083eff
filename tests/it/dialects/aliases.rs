//! Aliases from upstream response headers and their owners: a run known by the backend's
//! header is found by that name for its recorder only; another subject gets exactly the unknown
//! run's answer.

use serde_json::json;

use crate::dialects::common::*;
use crate::support::*;

const ROUTES: &str = r#"
[auth]
subject = "header:x-user"

[[routes]]
methods = ["POST"]
path = "/turn"
kind = "record"
chat_id = "json:/chat"
aliases = ["header:X-Run-Id"]

[[routes]]
methods = ["GET"]
path = "/runs/{id}/stream"
kind = "resume"
dialect = "last_event_id"
run = "path:id"
"#;

fn frames() -> Vec<bytes::Bytes> {
    (0..4)
        .map(|i| frame(None, Some(&i.to_string()), &json!({"i": i}).to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_alias_finds_the_run_for_its_owner_only() {
    let all = frames();
    let gate = Gate::default();
    let script = {
        let all = all.clone();
        let gate = gate.clone();
        move |_: &Req| {
            let mut steps = held(&all, Some((2, &gate)));
            steps[0] = Step::Head(
                200,
                vec![
                    ("content-type", "text/event-stream".into()),
                    ("x-run-id", "up-7".into()),
                ],
            );
            steps
        }
    };
    let be = backend(script).await;
    let tether = sidecar(be.addr, ROUTES).await;
    let body = json!({"chat": "c1"}).to_string();
    let live = request(
        tether.addr,
        "POST",
        "/turn",
        &[("x-user", "alice"), ("content-type", "application/json")],
        body.as_bytes(),
    )
    .await;
    assert_eq!(live.status, 200);
    let got = cut(live, 2).await;
    assert_eq!(concat(&got), concat(&all[..2]));

    // Another subject: the answer of a run that does not exist, byte for byte.
    let mut foreign = get(
        tether.addr,
        "/runs/up-7/stream",
        &[("x-user", "mallory"), ("Last-Event-ID", "1")],
    )
    .await;
    let mut unknown = get(
        tether.addr,
        "/runs/nope/stream",
        &[("x-user", "alice"), ("Last-Event-ID", "1")],
    )
    .await;
    assert_eq!((foreign.status, unknown.status), (404, 404));
    assert_eq!(foreign.body_to_end().await, unknown.body_to_end().await);

    let mut mine = get(
        tether.addr,
        "/runs/up-7/stream",
        &[("x-user", "alice"), ("Last-Event-ID", "1")],
    )
    .await;
    assert_eq!(mine.status, 200);
    assert_eq!(
        mine.header("x-run-id"),
        Some("up-7"),
        "the upstream's headers"
    );
    gate.open();
    let rest = mine.body_to_end().await;
    assert_eq!(std::str::from_utf8(&rest).unwrap(), concat(&all[2..]));
}
