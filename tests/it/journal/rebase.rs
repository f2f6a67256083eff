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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_that_holds_the_chats_new_run_as_an_older_one_makes_it_current() {
    // Found by tests/it/chaos.rs (SEED=3): a follower's lookup read the chat's pointer (still
    // the previous run) before the new run went live, then mirrored the new run by its cursor
    // as an older run of the chat; later lookups found that mirror and never made it the
    // chat's current run. A cursor outside the mirror's window (the run was journaled by a
    // re-base at its end) then got a replacement snapshot of the previous turn's run.
    let redis = RedisServer::start();
    let be = turn_backend(turn(4), None).await;
    let toml = |id: &str| {
        format!(
            "[journal]\nurl = \"{}\"\nreplica_id = \"{id}\"\nlease = \"10s\"\npoll = \"100ms\"\n",
            redis.url()
        )
    };
    let a = sidecar(be.addr, &toml("a")).await;
    let b = sidecar(be.addr, &toml("b")).await;
    let first = post(a.addr, "/chat", &chat("c"))
        .await
        .frames_to_end()
        .await;
    let old = first[0].json["run_id"].as_str().unwrap().to_string();
    eventually_async("B follows the first run", || async {
        let mut r = post(b.addr, "/chat/live", &cursor("c", &old, 0)).await;
        r.status == 200 && r.frames_to_end().await.last().unwrap().ty() == "STREAM_END"
    })
    .await;
    // Redis holds writes for longer than a call may take: the second run reaches Redis only by
    // a re-base at its end (its stream holds the end, the checkpoint the rest).
    let _: () = redis.query(&["CLIENT", "PAUSE", "2500", "WRITE"]);
    let second = post(a.addr, "/chat", &chat("c"))
        .await
        .frames_to_end()
        .await;
    let run = second[0].json["run_id"].as_str().unwrap().to_string();
    let meta = || {
        let keys: Vec<String> = redis.query(&["KEYS", &format!("tj:*:r:{run}:m")]);
        keys.into_iter().next()
    };
    eventually("the run ended in the journal", || {
        meta().is_some_and(|m| {
            redis
                .query::<Option<String>>(&["HGET", &m, "state"])
                .as_deref()
                == Some("ended")
        })
    })
    .await;
    // B's lookup as the race had it: the chat's pointer still names the first run while B
    // mirrors the second by its cursor (an older run of the chat on B).
    let m = meta().unwrap();
    let chat_key = format!("{}:chat", &m[..m.find("}:").unwrap() + 1]);
    let _: () = redis.query(&["HSET", &chat_key, "run", &old]);
    let f = post(b.addr, "/chat/live", &cursor("c", &run, 12))
        .await
        .frames_to_end()
        .await;
    assert_eq!(f[0].json["run_id"], json!(run), "{:?}", f[0].json);
    let _: () = redis.query(&["HSET", &chat_key, "run", &run]);
    // Now a cursor B's mirror cannot replay gets the chat's current run: the second.
    let mut r = post(b.addr, "/chat/live", &cursor("c", &run, 0)).await;
    assert_eq!(r.status, 200);
    let f = r.frames_to_end().await;
    assert_eq!(
        (f[0].ty(), f[0].json["run_id"].clone()),
        ("STREAM_SNAPSHOT", json!(run))
    );
    assert_eq!(f.last().unwrap().json["persisted"], json!(true));
}
