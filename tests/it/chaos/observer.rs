//! One observer of one turn, as a browser tab does it: the chat's own client (which records the
//! turn), a second tab that joins it, or a look at one replica once the turn ended. It connects
//! to a random replica, applies frames by the client rules (docs/protocol.md 3.3), may cut the
//! connection at a random point (RST or FIN) and reconnects with its cursor to a random replica,
//! until one `STREAM_END`. Every frame is checked: the state after seq `s` is exactly the
//! backend's answer reduced up to its event `s`; an end is explicit; every wait is bounded.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::Rng;
use serde_json::{json, Value};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::world::{answer, rng, Turn, World, NAMES};
use crate::support::Reduced;

mod attach;
mod frames;

/// How often a waiting reader looks at the clock.
const TICK: Duration = Duration::from_millis(250);
/// An observer that has not ended after this long is a violation (a safety net far past every
/// fault's length plus the hang bound; the hang checks fire long before).
const LIMIT: Duration = Duration::from_secs(120);
/// How long a sweep keeps asking a replica that did not serve a run, to tell late from never.
const UNSERVED: Duration = Duration::from_secs(20);

/// A stream entry as `XRANGE` answers it: its id and fields.
type StreamEntry = (String, Vec<(String, Vec<u8>)>);

/// The replicas' client-facing addresses and the world.
#[derive(Clone)]
pub struct Ctx {
    pub w: Arc<World>,
    pub addrs: Arc<Vec<SocketAddr>>,
    pub redis: Arc<parking_lot::Mutex<crate::support::RedisServer>>,
}

impl Ctx {
    /// What Redis holds of `run` (its meta, stream entry ids and its chat's pointer), for a
    /// violation's report.
    pub async fn journal_of(&self, run: &str) -> String {
        let redis = self.redis.clone();
        let run = run.to_string();
        let look = tokio::task::spawn_blocking(move || {
            let r = redis.lock();
            let keys: Vec<String> = r.query(&["KEYS", &format!("tj:*:r:{run}:m")]);
            let Some(m) = keys.first() else {
                return "the journal has no such run".to_string();
            };
            let mut meta: Vec<(String, String)> = r.query(&["HGETALL", m]);
            meta.retain(|(k, _)| k != "header" && k != "scope");
            let s = format!("{}:s", &m[..m.len() - 2]);
            let ids: Vec<StreamEntry> = r.query(&["XRANGE", &s, "-", "+"]);
            let ids: Vec<String> = ids.into_iter().map(|(id, _)| id).collect();
            let chat = format!("{}:chat", &m[..m.find("}:").map_or(0, |i| i + 1)]);
            let pointer: Option<String> = r.query(&["HGET", &chat, "run"]);
            let k = format!("{}:k", &m[..m.len() - 2]);
            let ck: Option<Vec<u8>> = r.query(&["GET", &k]);
            let ck = ck.map(|b| {
                let len = b.len();
                let d = tether::replica::codec::decode_checkpoint(bytes::Bytes::from(b));
                format!(
                    "{len} bytes, decoded at seq {:?}",
                    d.map(|c| (c.seq, c.events))
                )
            });
            format!(
                "meta {meta:?}, stream {ids:?}, checkpoint {ck:?}, the chat points at {pointer:?}"
            )
        });
        look.await
            .unwrap_or_else(|e| format!("the look failed: {e}"))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The chat's client: it sends the turn and follows it.
    Chatter,
    /// Another tab of the same owner, joining the turn by its run id.
    Tab,
    /// After the turn: one look at the run on one replica, no cuts.
    Sweep(usize),
}

/// How an observer's turn ended for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// `STREAM_END{persisted:true}` with the whole answer.
    Persisted,
    /// `STREAM_END{persisted:false}` with an allowed reason.
    NotPersisted(String),
    /// No replica serves the run (the documented answer to an unknown run: `204` or another
    /// run's replacement snapshot): after Redis was restarted empty, or once the chat's next
    /// turn went live (a completed run is held only while it is the chat's current one).
    Gone(&'static str),
    /// The record request got no answer (its replica was stopped) and the run never appeared.
    NeverStarted,
    /// The record request was answered with a documented error (`502 upstream_unreachable`).
    Refused(String),
    /// A violation was recorded; the observer stopped.
    Violated,
}

impl Outcome {
    pub fn label(&self) -> String {
        match self {
            Outcome::Persisted => "persisted".into(),
            Outcome::NotPersisted(r) => format!("not_persisted.{r}"),
            Outcome::Gone(why) => format!("gone.{why}"),
            Outcome::NeverStarted => "never_started".into(),
            Outcome::Refused(e) => format!("refused.{e}"),
            Outcome::Violated => "violated".into(),
        }
    }
}

/// What the current connection does next.
enum Flow {
    /// Reconnect (with the cursor).
    Again,
    End(Outcome),
}

/// Where a connection is cut by the client.
struct Cut {
    frames: Option<u32>,
    at: Option<Instant>,
    rst: bool,
}

pub struct Observer {
    ctx: Ctx,
    role: Role,
    turn: Turn,
    answer: Vec<Value>,
    rng: StdRng,
    run: Option<String>,
    state: Reduced,
    last: u64,
    /// Replicas that answered the cursor with `204` or another run since the run was last
    /// served.
    refused: BTreeSet<usize>,
    /// The record request got no answer while a fault was active.
    post_excused: bool,
    /// The replica producing the run (the chatter's record request's), counted in `live`.
    producer: Option<usize>,
    tabs: Vec<JoinHandle<()>>,
    /// When the current connection attempt began, and to which replica.
    attempt: Instant,
    at: usize,
    /// A sweep's replica did not serve the run on a healthy system: when it was first asked,
    /// how long after the last heal, and what it answered.
    unserved: Option<(Instant, Duration, String)>,
}

impl Observer {
    pub fn new(ctx: Ctx, role: Role, turn: Turn, run: Option<String>) -> Self {
        let seed = ctx.w.seed;
        let (answer, _) = answer(seed, &turn, 1);
        let tag = format!("{role:?}");
        let n = turn.n.to_string();
        let rng = rng(seed, &["observer", &tag, turn.owner, &turn.chat, &n]);
        Observer {
            ctx,
            role,
            turn,
            answer,
            rng,
            run,
            state: Reduced::default(),
            last: 0,
            refused: BTreeSet::new(),
            post_excused: false,
            producer: None,
            tabs: Vec::new(),
            attempt: Instant::now(),
            at: 0,
            unserved: None,
        }
    }

    fn w(&self) -> &World {
        &self.ctx.w
    }

    fn violation(&self, replica: usize, what: impl std::fmt::Display) {
        let run = self.run.as_deref().unwrap_or("-");
        let producer = self
            .w()
            .producers
            .lock()
            .get(run)
            .map_or("?", |p| NAMES[*p]);
        self.w().violation(format!(
            "{:?} of {} on replica {} (run {run} from {producer}, seq {}) at {:.1?}: {what}",
            self.role,
            self.turn.mark(),
            NAMES[replica],
            self.last,
            self.w().elapsed(),
        ));
    }

    /// Follows the turn to its end; records the outcome.
    pub async fn run(mut self) -> Outcome {
        let w = self.ctx.w.clone();
        w.count(&format!("observers.{}", self.role_name()));
        let mut outcome = self.follow().await;
        if let (Some(_), Some(run)) = (&self.unserved, &self.run) {
            println!(
                "chaos: the journal of run {run}: {}",
                self.ctx.journal_of(run).await
            );
        }
        if let (Some((t, heal, why)), false) = (&self.unserved, outcome == Outcome::Violated) {
            let what = format!(
                "the replica did not serve the run ({why}, {heal:.1?} after the last heal), \
                 and did {:.1?} later",
                t.elapsed()
            );
            let r = self.pick();
            self.violation(r, what);
            outcome = Outcome::Violated;
        }
        w.count(&format!("outcome.{}", outcome.label()));
        if std::env::var_os("CHAOS_TRACE").is_some() {
            let run = self.run.as_deref().unwrap_or("-");
            let producer = w.producers.lock().get(run).map_or("?", |p| NAMES[*p]);
            println!(
                "chaos: trace {:.1?} {:?} {} run {run} from {producer} seq {}: {}",
                w.elapsed(),
                self.role,
                self.turn.mark(),
                self.last,
                outcome.label()
            );
        }
        w.end_seen(&self.turn, &outcome.label());
        if let Some(p) = self.producer {
            w.live[p].fetch_sub(1, Ordering::SeqCst);
        }
        for t in self.tabs.drain(..) {
            let _ = t.await;
        }
        if let (Role::Chatter, Some(run)) = (self.role, &self.run) {
            // Once the turn ended for its tabs too, every replica is asked for the run while it
            // is still the chat's current one: each must serve it and agree on its end.
            let looks = (0..self.ctx.addrs.len()).map(|r| {
                let o = Observer::new(
                    self.ctx.clone(),
                    Role::Sweep(r),
                    self.turn.clone(),
                    Some(run.clone()),
                );
                // Boxed: an observer's future holds its sweep's.
                Box::pin(o.run())
            });
            futures_util::future::join_all(looks).await;
        }
        outcome
    }

    fn role_name(&self) -> &'static str {
        match self.role {
            Role::Chatter => "chatter",
            Role::Tab => "tab",
            Role::Sweep(_) => "sweep",
        }
    }

    fn pick(&mut self) -> usize {
        match self.role {
            Role::Sweep(r) => r,
            _ => self.rng.gen_range(0..self.ctx.addrs.len()),
        }
    }

    async fn follow(&mut self) -> Outcome {
        let began = Instant::now();
        let mut record = self.role == Role::Chatter;
        let mut no_cursor = self.role == Role::Tab && self.rng.gen_bool(0.5);
        let mut search_since = None;
        let mut first = true;
        loop {
            if began.elapsed() > LIMIT {
                let journal = match &self.run {
                    Some(run) => self.ctx.journal_of(run).await,
                    None => "no run".into(),
                };
                self.violation(
                    self.at,
                    format!("no end after {LIMIT:?}; the journal: {journal}"),
                );
                return Outcome::Violated;
            }
            if !first {
                if let Role::Sweep(_) = self.role {
                    // A look that failed in a fault is tried again once it healed; one that
                    // failed on a healthy system was a violation, recorded as it happened.
                    if !self.w().settling(self.attempt) && self.unserved.is_none() {
                        return Outcome::Violated;
                    }
                    self.w().count("sweeps_retried");
                }
                self.w().count("reconnects");
                let pause = match self.role {
                    Role::Sweep(_) => 300,
                    _ => self.rng.gen_range(0..200),
                };
                tokio::time::sleep(Duration::from_millis(pause)).await;
            }
            first = false;
            self.attempt = Instant::now();
            let r = self.pick();
            self.at = r;
            let flow = if record {
                record = false;
                self.record(r).await
            } else if self.run.is_none() {
                let since = *search_since.get_or_insert_with(Instant::now);
                self.search(r, since).await
            } else {
                let body = match std::mem::take(&mut no_cursor) {
                    true => json!({"chat_id": self.turn.chat, "protocol": 1}),
                    false => json!({"chat_id": self.turn.chat, "protocol": 1,
                        "run_id": self.run, "after_seq": self.last}),
                };
                self.attach(r, body).await
            };
            if let Flow::End(o) = flow {
                return o;
            }
        }
    }

    fn plan_cut(&mut self) -> Option<Cut> {
        if matches!(self.role, Role::Sweep(_)) || !self.rng.gen_bool(0.45) {
            return None;
        }
        let rst = self.rng.gen_bool(0.5);
        Some(match self.rng.gen_bool(0.5) {
            true => Cut {
                frames: Some(self.rng.gen_range(1..16)),
                at: None,
                rst,
            },
            false => Cut {
                frames: None,
                at: Some(Instant::now() + Duration::from_millis(self.rng.gen_range(50..1500))),
                rst,
            },
        })
    }
}
