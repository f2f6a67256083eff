//! A follower's mirrors in its recorded bytes: followed, evicted at its chat limit, and its own
//! turns still counted.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followers_evicted_mirrors_leave_its_own_turns_counted() {
    let redis = RedisServer::start();
    let be = backend(|r: &Req| {
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        let size = if v["chat_id"] == "mine" {
            200_000
        } else {
            50_000
        };
        // No RUN_FINISHED: not persisted, so an attach on the follower reads it whole.
        scripted_turn(
            &[
                json!({"type":"RUN_STARTED"}),
                json!({"type":"CUSTOM","value":"x".repeat(size)}),
            ],
            None,
        )
    })
    .await;
    let a = replica(be.addr, &redis, "a", "").await;
    let b = replica(be.addr, &redis, "b", "[recorder]\nmax_chats = 4\n").await;
    for i in 0..12 {
        let id = format!("m{i}");
        post(a.addr, "/chat", &chat(&id))
            .await
            .frames_to_end()
            .await;
        // b follows the run from the journal (once its end is there) and holds it as a mirror.
        eventually_async("the follower reads the run", || async {
            let mut r = post(b.addr, "/chat/live", &chat(&id)).await;
            r.status == 200 && ends(&r.frames_to_end().await) == 1
        })
        .await;
    }
    // Mirrors were evicted past max_chats; they took out only what they had counted.
    let mirrors_only = b.metric("tether_recorded_bytes").await;
    assert!(
        (4.0 * 100_000.0..=5.0 * 130_000.0).contains(&mirrors_only),
        "the 4 or 5 mirrors held, each its 50 KB event twice: {mirrors_only}"
    );
    post(b.addr, "/chat", &chat("mine"))
        .await
        .frames_to_end()
        .await;
    let after = b.metric("tether_recorded_bytes").await;
    assert!(
        after >= mirrors_only - 2.0 * 130_000.0 + 400_000.0,
        "the follower's own 200 KB event, in its window and its history, is counted: {after}"
    );
}
