//! One end for every reader of a run: the end Redis took first is the one every replica's
//! readers get. A producer whose own end Redis refuses (another end was written first, here
//! the reaper's `owner_lost` while the producer could not be heard) shows its readers the end
//! that won, not its own; and a Redis that refuses writes (`-OOM` under `noeviction`) is a Redis
//! that is down: the producer's lease lapses, followers end their readers `owner_lost` in
//! bounded time and so does the producer's replica, and the metrics say Redis refused.

use serde_json::{json, Value};
use tether::replica::{codec, scripts};
use tether::vocab::end::{End, EndReason};

use crate::journal::{known, start_run};
use crate::support::*;

/// `(type, persisted, reason)` of a stream's last frame.
pub(super) fn end_of(frames: &[Frame]) -> (String, Value, Value) {
    let end = frames.last().expect("a frame");
    (
        end.ty().to_string(),
        end.json["persisted"].clone(),
        end.json["reason"].clone(),
    )
}

pub(super) fn owner_lost() -> (String, Value, Value) {
    ("STREAM_END".into(), json!(false), json!("owner_lost"))
}

/// The run's meta key in `redis`.
pub(super) fn meta_key(redis: &RedisServer, run: &str) -> String {
    let keys: Vec<String> = redis.query(&["KEYS", &format!("tj:*:r:{run}:m")]);
    keys.into_iter().next().expect("the run is in Redis")
}

/// Ends `run` `owner_lost` in Redis as a reaper does: the journal's own end script, with the
/// producer's lease (the first end written wins).
pub(super) fn reap(redis: &RedisServer, run: &str) {
    let m = meta_key(redis, run);
    let prefix = m.strip_suffix(&format!("r:{run}:m")).unwrap();
    let lease: String = redis.query(&["HGET", &m, "lease"]);
    let client = ::redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_connection().unwrap();
    let end = End::finished(false, Some(EndReason::OwnerLost));
    let answer: Vec<String> = scripts::END
        .key(format!("{prefix}chat"))
        .key(&m)
        .key(format!("{prefix}r:{run}:s"))
        .key(format!("{prefix}r:{run}:k"))
        .arg(lease)
        .arg(codec::encode_end(&end))
        .arg(60_000)
        .arg(format!("{prefix}r:{run}:n"))
        .arg(run)
        .arg("0")
        .arg("PUBLISH")
        .arg(0)
        .invoke(&mut conn)
        .unwrap();
    assert_eq!(answer.first().map(String::as_str), Some("ok"));
}

/// Runs finished on `s`, whatever their outcome.
async fn finished(s: &Sidecar) -> f64 {
    let text = s.metrics().await;
    text.lines()
        .filter(|l| l.starts_with("tether_runs_finished_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_end_redis_took_first_is_every_readers_end_the_producers_too() {
    let redis = RedisServer::start();
    let link = FaultProxy::start(([127, 0, 0, 1], redis.port).into()).await;
    let gate = Gate::default();
    let events = turn(6);
    // Every event reaches the readers; the backend's end waits for the gate.
    let be = turn_backend(events.clone(), Some((events.len(), gate.clone()))).await;
    let a = replica(be.addr, &Via(link.addr), "a", "").await;
    let b = replica(be.addr, &redis, "b", "").await;
    let (run, mut origin) = start_run(&a, "c", events.len() as u64).await;
    known(&b, "c").await;
    let mut watcher = post(b.addr, "/chat/live", &chat("c")).await;
    assert_eq!(watcher.frame().await.unwrap().json["run_id"], json!(run));
    eventually("every batch is in Redis", || {
        redis.stream_head(&meta_key(&redis, &run)) == Some(events.len() as u64)
    })
    .await;

    // A cannot be heard for a moment (what it sends is held, not lost): the reaper's end is
    // written first, then the producer finishes and ends the run `persisted:true` here.
    link.set(Fault::Stall);
    reap(&redis, &run);
    let rest = within("B's observer ends", watcher.frames_to_end()).await;
    assert_eq!(end_of(&rest), owner_lost());
    gate.open();
    eventually_async("A's producer finished", || async {
        finished(&a).await >= 1.0
    })
    .await;
    link.heal();

    // A's end is refused (an end exists): A's readers get the end that won.
    let rest = within("A's observer ends", origin.frames_to_end()).await;
    assert_eq!(end_of(&rest), owner_lost(), "A's own reader");
    for (name, s) in [("A", &a), ("B", &b)] {
        let mut late = post(s.addr, "/chat/live", &cursor("c", &run, 0)).await;
        let frames = within("a late reader's stream", late.frames_to_end()).await;
        assert_eq!(end_of(&frames), owner_lost(), "a late reader on {name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_refuses_writes_ends_every_reader_owner_lost_in_bounded_time() {
    let redis = RedisServer::start();
    let gate = Gate::default();
    let events = turn(6);
    let be = turn_backend(events.clone(), Some((3, gate.clone()))).await;
    let a = replica(be.addr, &redis, "a", "").await;
    let b = replica(be.addr, &redis, "b", "").await;
    let (run, mut origin) = start_run(&a, "c", 3).await;
    known(&b, "c").await;
    let mut watcher = post(b.addr, "/chat/live", &chat("c")).await;
    assert_eq!(watcher.frame().await.unwrap().json["run_id"], json!(run));

    // Redis is full and refuses every write; it still answers reads.
    let _: () = redis.query(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    let _: () = redis.query(&["CONFIG", "SET", "maxmemory", "1"]);
    let full = tokio::time::Instant::now();
    let rest = within("B's observer ends", watcher.frames_to_end()).await;
    assert_eq!(end_of(&rest), owner_lost(), "B's reader");
    // A's lease lapses (a lease), B notices its mirror stalled (a lease) and checks (half a
    // lease apart): generous for a loaded machine, far short of "as long as Redis is full".
    assert!(
        full.elapsed() < std::time::Duration::from_secs(8),
        "{:?}",
        full.elapsed()
    );
    let rest = within("A's observer ends", origin.frames_to_end()).await;
    assert_eq!(end_of(&rest), owner_lost(), "A's reader");
    assert!(
        a.metric("tether_journal_writes_total{result=\"refused\"}")
            .await
            >= 1.0
    );
    assert_eq!(a.metric("tether_journal_degraded").await, 1.0);

    // Redis takes writes again: A writes the end its readers got.
    let _: () = redis.query(&["CONFIG", "SET", "maxmemory", "0"]);
    gate.open();
    eventually("Redis has the run's owner_lost end", || {
        redis
            .query::<Option<String>>(&["HGET", &meta_key(&redis, &run), "end"])
            .is_some_and(|e| e.contains("owner_lost"))
    })
    .await;
}

/// A journal URL through a fault proxy in front of the test's redis-server.
pub(super) struct Via(pub(super) std::net::SocketAddr);

impl JournalRedis for Via {
    fn journal_toml(&self) -> String {
        format!("url = \"redis://{}\"\n", self.0)
    }
    fn keys(&self, _: &str) -> Vec<String> {
        unreachable!("the test asks the server itself")
    }
    fn channels(&self, _: &str) -> Vec<String> {
        unreachable!("the test asks the server itself")
    }
    fn first_port(&self) -> u16 {
        self.0.port()
    }
}
