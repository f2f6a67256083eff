//! A randomized exactly-once checker across replicas, seeded and reproducible. Three replicas
//! (two in-process, one the `tether` binary) share one redis-server, each through fault proxies
//! on its Redis link and its backend link. Two owners' chats (the same chat ids for both) run
//! turns back to back; each turn's client records it on a random replica, cuts its connection
//! at random points (RST or FIN) and reconnects with its cursor to random replicas, and other
//! tabs join the turn by its run id. Meanwhile a schedule injects, one at a time: Redis paused
//! (SIGSTOP) for twice the lease, one replica's Redis link partitioned while its clients stay
//! connected, Redis restarted empty, the binary replica SIGSTOPped then resumed (it must be
//! fenced), 50-200 ms of latency on Redis links, a replica's backend connections reset
//! mid-turn, a producing replica's appends held in a partition until a reaper ended its runs
//! and then delivered (Redis must refuse them by their stream ids), and the same while another
//! replica's push connection is cut across the ends' doorbells. After the turns, every run's
//! stream in Redis must be whole: no batch over a hole, nothing past an end.
//!
//! The backend's answer to each turn is deterministic from (seed, owner, chat, turn), and every
//! event carries a marker `owner/chat/turn/g<generation>/<index>`. Every observer is checked on
//! every frame: its state after seq `s` is exactly the answer reduced up to its event `s` (no
//! duplicate, no gap, no other owner's, chat's, turn's or generation's event). Its end is
//! `persisted:true` with the whole answer, or `persisted:false` with an allowed reason
//! (`owner_lost`, `upstream_reset`, `superseded`), or a documented answer: `204` or another
//! run's replacement snapshot from every replica once Redis lost the run (restarted empty) or
//! the chat's next turn replaced it, `502 upstream_unreachable` to a record request during a
//! backend reset. No wait for a frame or an answer lasts past lease + poll + heartbeat (+ a
//! margin) once every fault has healed, and a run's producer serves its own stream and record
//! requests through every Redis fault. The backend sees each turn at most once, each turn has
//! at most one run, and the stopped replica's runs keep their `owner_lost` end after it
//! resumes. Once a turn ended, every replica is asked for its run from the start and must serve
//! it; every reader of one run, on every replica, must see the same end (`persisted` and
//! `reason`): readers that disagree are a split end, counted and a violation. The counts are
//! printed at the end; any violation fails the test, each listed with its seed.
//!
//! The short profile (every fault kind once, each followed by a quiet stretch past the hang
//! bound) runs with the integration tests.
//! `SEED=<n> cargo test --test it chaos -- --nocapture` reruns a seed (the same answers, fault
//! order and cut points; the machine's timing still varies). `CHAOS_PROFILE=long` (or
//! `scripts/chaos.sh --long`) runs the schedule for 20 minutes; `CHAOS_DURATION=5m` sets another
//! length. `CHAOS_TRACE=1` prints each observer's outcome, `CHAOS_LOG=1` the in-process
//! replicas' log (`RUST_LOG`), and `TETHER_TEST_BINARY_LOG=<file>` keeps the binary's.

mod observer;
mod schedule;
mod streams;
mod world;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::Value;
use tokio::time::Instant;

use crate::support::*;
use observer::{Ctx, Observer, Role};
use schedule::{Links, Schedule};
use world::{answer, rng, Turn, World, HEARTBEAT, NAMES};

/// A journal URL through a replica's Redis link (a fault proxy in front of the server).
struct Via(std::net::SocketAddr);

impl JournalRedis for Via {
    fn journal_toml(&self) -> String {
        format!("url = \"redis://{}\"\n", self.0)
    }
    fn keys(&self, _: &str) -> Vec<String> {
        unreachable!("the checker asks the server itself")
    }
    fn channels(&self, _: &str) -> Vec<String> {
        unreachable!("the checker asks the server itself")
    }
    fn first_port(&self) -> u16 {
        self.0.port()
    }
}

/// Every replica's configuration besides the journal: owners by header, a short heartbeat (part
/// of the hang bound), runs kept for the whole long profile (the sweep reads them all).
fn settings() -> String {
    format!(
        "[server]\nheartbeat = \"{}ms\"\n[auth]\nsubject = \"header:x-user\"\nsecret = \"chaos\"\n\
         [recorder]\nretention = \"30m\"\n",
        HEARTBEAT.as_millis()
    )
}

const OWNERS: [&str; 2] = ["alice", "bob"];

struct Profile {
    /// None: every fault kind once.
    length: Option<Duration>,
    chats_per_owner: usize,
}

impl Profile {
    fn from_env() -> Profile {
        let length = match std::env::var("CHAOS_DURATION") {
            Ok(d) => Some(humantime::parse_duration(&d).expect("CHAOS_DURATION: a duration")),
            Err(_) => match std::env::var("CHAOS_PROFILE").as_deref() {
                Ok("long") => Some(Duration::from_secs(20 * 60)),
                _ => None,
            },
        };
        Profile {
            chats_per_owner: if length.is_some() { 4 } else { 3 },
            length,
        }
    }
}

fn seed() -> u64 {
    match std::env::var("SEED") {
        Ok(s) => s.trim().parse().expect("SEED: an unsigned integer"),
        Err(_) => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap();
            world::mix(now.as_nanos() as u64, &["seed"]) % 1_000_000_000
        }
    }
}

/// The backend: each record request is answered with its turn's answer, marked with how many
/// times the backend has seen that turn.
async fn chaos_backend(w: Arc<World>) -> Backend {
    backend(move |req: &Req| {
        let v: Value = serde_json::from_slice(&req.body).unwrap_or_default();
        let owner = OWNERS
            .into_iter()
            .find(|o| req.header("x-user") == Some(*o));
        let (Some(owner), Some(chat), Some(n)) = (owner, v["chat_id"].as_str(), v["turn"].as_u64())
        else {
            w.violation(format!(
                "the backend got a request it did not expect: {req:?}"
            ));
            return fixed_answer(404, "text/plain", "no");
        };
        let turn = Turn {
            owner,
            chat: chat.to_string(),
            n: n as u32,
        };
        let gen = {
            let mut g = w.gens.lock();
            let c = g.entry(turn.clone()).or_default();
            *c += 1;
            *c
        };
        w.count("backend.requests");
        let (events, pauses) = answer(w.seed, &turn, gen);
        let mut steps = vec![sse_head()];
        for (e, p) in events.iter().zip(pauses) {
            steps.push(Step::Sleep(p));
            steps.push(Step::Chunk(sse(e)));
        }
        steps.push(Step::End);
        steps
    })
    .await
}

/// One chat's client: turns back to back until `stop`.
async fn chat_loop(ctx: Ctx, owner: &'static str, chat: String, stop: Arc<AtomicBool>) {
    let mut think = rng(ctx.w.seed, &["think", owner, &chat]);
    for n in 1.. {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let turn = Turn {
            owner,
            chat: chat.clone(),
            n,
        };
        Observer::new(ctx.clone(), Role::Chatter, turn, None)
            .run()
            .await;
        ctx.w.count("turns");
        let pause = rand::Rng::gen_range(&mut think, 0..300);
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
}

fn report(w: &World, wall: Duration) -> String {
    let counts = w.counts();
    let get = |k: &str| counts.get(k).copied().unwrap_or(0);
    let group = |prefix: &str| {
        let v: Vec<String> = counts
            .iter()
            .filter_map(|(k, n)| Some(format!("{}={n}", k.strip_prefix(prefix)?)))
            .collect();
        v.join(" ")
    };
    let splits = w.split_ends();
    let mut out = format!(
        "chaos: seed={} wall={:.0}s turns={} backend_requests={} observers[{}] connections={} \
         cuts[{}] reconnects={} faults[{}] outcomes[{}] split_ends={} violations={}",
        w.seed,
        wall.as_secs_f64(),
        get("turns"),
        get("backend.requests"),
        group("observers."),
        get("connections"),
        group("cuts."),
        get("reconnects"),
        group("fault."),
        group("outcome."),
        splits.len(),
        w.violations().len()
    );
    let rest: BTreeMap<&String, &u64> = counts
        .iter()
        .filter(|(k, _)| {
            !["observers.", "cuts.", "fault.", "outcome."]
                .iter()
                .any(|p| k.starts_with(p))
        })
        .collect();
    out.push_str(&format!("\nchaos: other counts {rest:?}"));
    for (turn, ends) in splits.iter().take(8) {
        out.push_str(&format!(
            "\nchaos: split end of {}: {}",
            turn.mark(),
            ends.join(" / ")
        ));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_every_observer_gets_the_whole_answer_once_or_an_explicit_end() {
    if std::env::var_os("CHAOS_LOG").is_some() {
        let _ = env_logger::builder().is_test(true).try_init();
    }
    let seed = seed();
    let profile = Profile::from_env();
    println!(
        "chaos: SEED={seed} ({}); rerun: SEED={seed} cargo test --test it chaos -- --nocapture",
        match profile.length {
            None => "short profile: every fault kind once".to_string(),
            Some(d) => format!("{d:?} of faults"),
        }
    );
    let wall = Instant::now();
    let w = Arc::new(World::new(seed));
    let redis = Arc::new(Mutex::new(RedisServer::start()));
    let redis_addr: std::net::SocketAddr = ([127, 0, 0, 1], redis.lock().port).into();
    let be = chaos_backend(w.clone()).await;
    let mut links = Vec::new();
    for _ in NAMES {
        links.push(Links {
            redis: FaultProxy::start(redis_addr).await,
            backend: FaultProxy::start(be.addr).await,
        });
    }
    let settings = settings();
    let (server, rest) = settings.split_at(settings.find("\n[").unwrap() + 1);
    let mut in_process = Vec::new();
    for (i, l) in links.iter().take(2).enumerate() {
        let journal = journal_table(&Via(l.redis.addr), NAMES[i]);
        in_process.push(sidecar(l.backend.addr, &format!("{server}{journal}{rest}")).await);
    }
    let binary = Binary::start_with(
        links[2].backend.addr,
        &Via(links[2].redis.addr),
        NAMES[2],
        &settings,
    );
    let mut addrs: Vec<_> = in_process.iter().map(|s| s.addr).collect();
    addrs.push(binary.addr);
    let ctx = Ctx {
        w: w.clone(),
        addrs: Arc::new(addrs),
        redis: redis.clone(),
    };
    let links = Arc::new(links);

    let stop = Arc::new(AtomicBool::new(false));
    let mut chats = Vec::new();
    for owner in OWNERS {
        for i in 0..profile.chats_per_owner {
            let chat = format!("c{i}");
            chats.push(tokio::spawn(chat_loop(
                ctx.clone(),
                owner,
                chat,
                stop.clone(),
            )));
        }
    }
    let mut schedule = Schedule {
        w: w.clone(),
        redis: redis.clone(),
        links: links.clone(),
        binary_pid: binary.pid(),
        rng: rng(seed, &["schedule"]),
    };
    schedule
        .run(1, profile.length.map(|d| Instant::now() + d))
        .await;
    // A quiet stretch after the last fault, then every chat finishes its turn.
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::SeqCst);
    for c in chats {
        if tokio::time::timeout(Duration::from_secs(180), c)
            .await
            .is_err()
        {
            w.violation("a chat did not finish its turn".into());
        }
    }
    // Every run's stream in Redis is whole: no batch over a hole, nothing past an end.
    let (faults, streams) = {
        let redis = redis.clone();
        tokio::task::spawn_blocking(move || streams::all_stream_faults(&redis.lock()))
            .await
            .unwrap()
    };
    w.add("streams_checked", streams);
    for f in faults {
        w.violation(format!("stream: {f}"));
    }
    for (turn, n) in w.gens.lock().iter() {
        if *n > 1 {
            w.violation(format!("the backend got turn {} {n} times", turn.mark()));
        }
    }
    // One end for every reader of a run (docs/protocol.md): readers that saw different
    // `persisted`/`reason` for one run are a violation.
    for (turn, ends) in w.split_ends() {
        w.violation(format!(
            "split end of {}: {}",
            turn.mark(),
            ends.join(" / ")
        ));
    }
    let report = report(&w, wall.elapsed());
    println!("{report}");
    let violations = w.violations();
    assert!(
        violations.is_empty(),
        "{} violations (SEED={seed}):\n{}\n{report}",
        violations.len(),
        violations.join("\n")
    );
    drop(binary);
}
