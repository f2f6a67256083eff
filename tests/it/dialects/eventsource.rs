//! eventsource (the browser's `EventSource`, `fetch-event-source`): the turn is `GET /events`
//! keyed by the query's `chat_id` in front of an id-less upstream; tether injects
//! `id: <run_id>:<index>` lines, and a reconnect carrying `Last-Event-ID` is served from the
//! record (`resume_on`) instead of starting a new turn.

use bytes::Bytes;
use serde_json::json;

use crate::dialects::common::*;
use crate::support::*;

const ROUTES: &str = r#"
[[routes]]
methods = ["GET"]
path = "/events"
kind = "record"
chat_id = "query:chat_id"
ids = "inject"
resume_on = "header:Last-Event-ID"
"#;

/// An id-less stream of JSON messages.
fn frames() -> Vec<Bytes> {
    (0..8)
        .map(|i| {
            frame(
                None,
                None,
                &json!({"n": i, "text": format!("part {i} \u{e9}")}).to_string(),
            )
        })
        .collect()
}

/// Frame `index` of `run` as tether relays it: the upstream's bytes plus an id line.
fn with_id(f: &Bytes, run: &str, index: usize) -> String {
    let s = std::str::from_utf8(f).unwrap();
    format!("{}id: {run}:{index}\n\n", &s[..s.len() - 1])
}

fn id_of(block: &[u8]) -> String {
    std::str::from_utf8(block)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("id: "))
        .expect("an id line")
        .to_string()
}

/// The run id of an injected id.
fn run_of(id: &str) -> String {
    id.rsplit_once(':').unwrap().0.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnect_with_the_last_injected_id_gets_the_rest_without_a_new_turn() {
    let all = frames();
    let at = random_cut("eventsource", 1, all.len() - 1);
    let gate = Gate::default();
    let (f, g) = (all.clone(), gate.clone());
    let be = backend(move |_| held(&f, Some((at, &g)))).await;
    let tether = sidecar(be.addr, ROUTES).await;
    let r = get(tether.addr, "/events?chat_id=c1", &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    let got = cut(r, at).await;
    let run = run_of(&id_of(&got[0]));
    let expected: String = (0..at).map(|i| with_id(&all[i], &run, i)).collect();
    assert_eq!(concat(&got), expected);

    assert_eq!(
        attach_total(&tether).await,
        0.0,
        "the requester is no resume"
    );
    let last = id_of(got.last().unwrap());
    let mut again = get(
        tether.addr,
        "/events?chat_id=c1",
        &[("Last-Event-ID", &last)],
    )
    .await;
    assert_eq!(again.status, 200);
    gate.open();
    let body = again.body_to_end().await;
    let rest: String = (at..all.len()).map(|i| with_id(&all[i], &run, i)).collect();
    assert_eq!(std::str::from_utf8(&body).unwrap(), rest);
    assert_eq!(requests(&be), 1, "the reconnect is not a new turn");
    assert_eq!(attach_metric(&tether, "last_event_id", "replay").await, 1.0);
    assert_eq!(attach_total(&tether).await, 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_end_the_final_id_is_204_and_an_unknown_id_starts_a_new_turn() {
    let all = frames();
    let f = all.clone();
    let be = backend(move |_| held(&f, None)).await;
    let tether = sidecar(be.addr, ROUTES).await;
    let mut r = get(tether.addr, "/events?chat_id=c1", &[]).await;
    let blocks = blocks_to_end(&mut r).await;
    assert_eq!(blocks.len(), all.len());
    let last = id_of(blocks.last().unwrap());
    let first_run = run_of(&last);
    eventually("the run ended", || {
        tether.current_run("c1").is_some_and(|r| r.end().is_some())
    })
    .await;

    let r = get(
        tether.addr,
        "/events?chat_id=c1",
        &[("Last-Event-ID", &last)],
    )
    .await;
    assert_eq!(r.status, 204, "EventSource stops reconnecting");
    assert_eq!(requests(&be), 1);
    assert_eq!(
        attach_metric(&tether, "last_event_id", "no_content").await,
        1.0
    );

    let stale = "stale-run:3";
    let mut r = get(
        tether.addr,
        "/events?chat_id=c1",
        &[("Last-Event-ID", stale)],
    )
    .await;
    assert_eq!(r.status, 200);
    let blocks = blocks_to_end(&mut r).await;
    assert_eq!(requests(&be), 2, "an id tether does not know is a new turn");
    let second_run = run_of(&id_of(&blocks[0]));
    assert_ne!(second_run, first_run);
    let expected: String = (0..all.len())
        .map(|i| with_id(&all[i], &second_run, i))
        .collect();
    assert_eq!(concat(&blocks), expected);
}
