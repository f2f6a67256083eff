//! A re-base that leaves a hole in the stream: batches recorded while Redis held writes are
//! never written (the run is re-written at the local head instead). A follower whose mirror
//! stops before the hole re-seeds from the re-base's checkpoint and still gets the whole turn.

use serde_json::json;

use crate::journal::{ends, known, start_run};
use crate::support::*;

/// The events, held before each index in `at` until its gate opens.
fn held(events: &[serde_json::Value], at: &[(usize, Gate)]) -> Vec<Step> {
    let mut steps = vec![sse_head()];
    for (i, e) in events.iter().enumerate() {
        if let Some((_, g)) = at.iter().find(|(n, _)| *n == i) {
            steps.push(Step::Wait(g.clone()));
        }
        steps.push(Step::Chunk(sse(e)));
    }
    steps.push(Step::End);
    steps
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_re_seeds_past_the_hole_a_re_base_leaves_in_the_stream() {
    let redis = RedisServer::start();
    let events = turn(10);
    let (g6, g8, g9) = (Gate::default(), Gate::default(), Gate::default());
    let steps = held(
        &events,
        &[(5, g6.clone()), (7, g8.clone()), (8, g9.clone())],
    );
    let be = backend(move |_| steps.clone()).await;
    // A lease longer than the stall: no liveness lapses while Redis holds writes.
    let toml = |id: &str| {
        format!(
            "[journal]\nurl = \"{}\"\nreplica_id = \"{id}\"\nlease = \"10s\"\npoll = \"100ms\"\n",
            redis.url()
        )
    };
    let a = sidecar(be.addr, &toml("a")).await;
    let b = sidecar(be.addr, &toml("b")).await;
    let (run, mut origin) = start_run(&a, "c", 5).await;
    known(&b, "c").await;
    let mut r = post(b.addr, "/chat/live", &chat("c")).await;
    let snap = r.frame().await.unwrap();
    assert_eq!(snap.json["run_id"], json!(run));

    // Redis holds writes for longer than a call may take: the append of 6..7 fails, 8 is
    // recorded meanwhile and never written; A re-bases the run at 8 once Redis writes again.
    let _: () = redis.query(&["CLIENT", "PAUSE", "3000", "WRITE"]);
    g6.open();
    while origin.frame().await.unwrap().seq() != 7 {}
    g8.open();
    while origin.frame().await.unwrap().seq() != 8 {}
    eventually("A re-based the run at 8", || {
        let metas: Vec<String> = redis.query(&["KEYS", "tj:*:r:*:m"]);
        redis
            .query::<Option<String>>(&["HGET", &metas[0], "ckpt"])
            .as_deref()
            == Some("8")
    })
    .await;
    g9.open();

    let rest = within("B's stream ends", r.frames_to_end()).await;
    let mut state = Reduced::default();
    let at = state.apply_frames(std::slice::from_ref(&snap), 0);
    assert_eq!(state.apply_frames(&rest, at), events.len() as u64);
    assert_eq!(state, Reduced::of(&events));
    assert_eq!(ends(&rest), 1);
    assert_eq!(rest.last().unwrap().json["persisted"], json!(true));
}
