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

use super::world::{answer, diagnose, rng, Scope, Turn, World, NAMES, SILENCE};
use crate::support::{try_request, Frame, Reduced, Resp};

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

    fn headers(&self) -> [(&'static str, &'static str); 2] {
        [
            ("x-user", self.turn.owner),
            ("content-type", "application/json"),
        ]
    }

    /// Sends one request; `Err` when it got no answer (a violation unless a fault explains it).
    async fn connect(
        &mut self,
        r: usize,
        method: &str,
        path: &str,
        body: &Value,
        scope: Scope,
    ) -> Option<Resp> {
        let body = match body {
            Value::Null => Vec::new(),
            v => v.to_string().into_bytes(),
        };
        let t0 = Instant::now();
        let headers = self.headers();
        let fut = try_request(self.ctx.addrs[r], method, path, &headers, &body);
        tokio::pin!(fut);
        self.w().count("connections");
        loop {
            tokio::select! {
                res = &mut fut => match res {
                    Ok(resp) => return Some(resp),
                    Err(e) => {
                        if self.w().fault_since(t0, scope) {
                            self.w().count("requests_failed_in_a_fault");
                        } else {
                            self.violation(r, format!("{method} {path} failed: {e}"));
                        }
                        return None;
                    }
                },
                _ = tokio::time::sleep(TICK) => {}
            }
            if self.w().fault_since(t0, scope) && t0.elapsed() >= SILENCE {
                self.w().count("cuts.watchdog");
                return None;
            }
            if self.w().overdue(t0, scope) {
                self.violation(
                    r,
                    format!("hang: no answer to {method} {path} in {:?}", t0.elapsed()),
                );
                return None;
            }
        }
    }

    /// The chatter's record request: the turn goes to the backend once, from here.
    async fn record(&mut self, r: usize) -> Flow {
        let body = json!({"chat_id": self.turn.chat, "protocol": 1, "turn": self.turn.n});
        let posted = Instant::now();
        let Some(mut resp) = self.connect(r, "POST", "/chat", &body, Scope::Local).await else {
            self.post_excused = true;
            return Flow::Again;
        };
        match resp.status {
            200 => self.read(r, resp, true).await,
            502 => {
                let body = tokio::time::timeout(self.w().bound, resp.body_to_end()).await;
                let v: Value = body
                    .ok()
                    .and_then(|b| serde_json::from_slice(&b).ok())
                    .unwrap_or_default();
                let code = v["error"].as_str().unwrap_or("?").to_string();
                if code != "upstream_unreachable" || !self.w().fault_since(posted, Scope::Local) {
                    self.violation(r, format!("record answered 502 {v}"));
                    return Flow::End(Outcome::Violated);
                }
                Flow::End(Outcome::Refused(code))
            }
            s => {
                self.violation(r, format!("record answered {s}"));
                Flow::End(Outcome::Violated)
            }
        }
    }

    /// The record request got no answer: the turn may have started. Look for the chat's run on
    /// the status route until the hang bound (after every fault) has passed.
    async fn search(&mut self, r: usize, since: Instant) -> Flow {
        if self.w().overdue(since, Scope::Any) {
            if !self.post_excused {
                self.violation(r, "the turn's run never appeared");
                return Flow::End(Outcome::Violated);
            }
            return Flow::End(Outcome::NeverStarted);
        }
        self.w().count("searches");
        let path = format!("/chat/run?chat_id={}", self.turn.chat);
        let Some(mut resp) = self
            .connect(r, "GET", &path, &Value::Null, Scope::Any)
            .await
        else {
            return Flow::Again;
        };
        if resp.status != 200 {
            return Flow::Again;
        }
        let body = tokio::time::timeout(self.w().bound, resp.body_to_end()).await;
        let v: Value = body
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        let Some(run) = v["run_id"].as_str() else {
            return Flow::Again;
        };
        // The chat's current run is this turn's unless an earlier turn's observers know it.
        if self.w().turn_of(run).is_some_and(|t| t != self.turn) {
            return Flow::Again;
        }
        self.adopt(run)
    }

    /// Binds the run to the turn and lets other tabs join it.
    fn adopt(&mut self, run: &str) -> Flow {
        self.run = Some(run.to_string());
        if !self.w().bind_run(&self.turn, run) {
            return Flow::End(Outcome::Violated);
        }
        if self.role == Role::Chatter {
            let tabs = match self.rng.gen_range(0..100) {
                0..50 => 0,
                50..85 => 1,
                _ => 2,
            };
            for _ in 0..tabs {
                let delay = Duration::from_millis(self.rng.gen_range(0..600));
                let tab = Observer::new(
                    self.ctx.clone(),
                    Role::Tab,
                    self.turn.clone(),
                    self.run.clone(),
                );
                self.tabs.push(tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    tab.run().await;
                }));
            }
        }
        Flow::Again
    }

    async fn attach(&mut self, r: usize, body: Value) -> Flow {
        let cursor = body.get("run_id").is_some();
        let Some(resp) = self
            .connect(r, "POST", "/chat/live", &body, Scope::Any)
            .await
        else {
            return Flow::Again;
        };
        match resp.status {
            200 => self.read(r, resp, false).await,
            204 if !cursor => Flow::Again,
            204 => {
                self.w().count("attach_204");
                self.not_served(r, "204")
            }
            s => {
                self.violation(r, format!("attach answered {s}"));
                Flow::End(Outcome::Violated)
            }
        }
    }

    /// Replica `r` does not serve the run (`204`, or another run's replacement snapshot).
    /// When none does, the run is gone: allowed only after Redis was restarted empty.
    fn not_served(&mut self, r: usize, why: &str) -> Flow {
        // A replica that cannot reach Redis (or is catching up after a fault) answers from what
        // it knows: that is excused until the hang bound after the heal, and asked again.
        if self.w().settling(self.attempt) {
            self.w().count("not_served_in_a_fault");
            return Flow::Again;
        }
        self.refused.insert(r);
        let all = self.refused.len() == self.ctx.addrs.len();
        if !all && !matches!(self.role, Role::Sweep(_)) {
            return Flow::Again;
        }
        let live_at = self.w().live_at(&self.turn).unwrap_or_else(Instant::now);
        if self.w().restarted_since(live_at) {
            return Flow::End(Outcome::Gone("redis_restarted"));
        }
        if self.w().later_run(&self.turn) {
            return Flow::End(Outcome::Gone("not_current"));
        }
        if let Role::Sweep(_) = self.role {
            // Asked again for a while, so the violation says whether the replica was only late
            // or never served the run.
            match &self.unserved {
                None => {
                    self.unserved = Some((Instant::now(), self.w().since_heal(), why.into()));
                    return Flow::Again;
                }
                Some((t, ..)) if t.elapsed() < UNSERVED => return Flow::Again,
                Some((_, heal, first)) => {
                    let what = format!(
                        "the replica does not serve the run ({first}, {heal:.1?} after the last \
                         heal), nor {UNSERVED:?} later ({why})"
                    );
                    self.violation(r, what);
                    return Flow::End(Outcome::Violated);
                }
            }
        }
        self.violation(r, format!("no replica serves the run (the last: {why})"));
        Flow::End(Outcome::Violated)
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

    /// Reads one stream to its end, a cut, or a violation.
    async fn read(&mut self, r: usize, mut resp: Resp, record: bool) -> Flow {
        let cut = self.plan_cut();
        let opened = Instant::now();
        // The run's producer serves its own stream whatever Redis does.
        let producer = self
            .run
            .as_ref()
            .and_then(|run| self.w().producers.lock().get(run).copied());
        let scope = match record || producer == Some(r) {
            true => Scope::Local,
            false => Scope::Any,
        };
        let mut since = opened;
        let mut frames = 0u32;
        loop {
            if let Some(c) = &cut {
                if c.frames.is_some_and(|n| frames >= n)
                    || c.at.is_some_and(|t| t <= Instant::now())
                {
                    let kind = if c.rst { "rst" } else { "fin" };
                    self.w().count(&format!("cuts.{kind}"));
                    match c.rst {
                        true => resp.kill(),
                        false => drop(resp),
                    }
                    return Flow::Again;
                }
            }
            let wait = match cut.as_ref().and_then(|c| c.at) {
                Some(t) => TICK.min(t.saturating_duration_since(Instant::now())),
                None => TICK,
            };
            match tokio::time::timeout(wait, resp.next_frame()).await {
                Ok(Some(f)) => {
                    since = Instant::now();
                    frames += 1;
                    if let Some(flow) = self.on_frame(r, &f, record && frames == 1) {
                        return flow;
                    }
                }
                Ok(None) => {
                    if self.w().fault_since(opened, scope) {
                        self.w().count("streams_broken_in_a_fault");
                    } else {
                        self.violation(r, "the stream ended without a STREAM_END");
                    }
                    return Flow::Again;
                }
                Err(_) => {
                    let quiet = resp.last_read();
                    if quiet.elapsed() >= SILENCE && self.w().fault_since(quiet, scope) {
                        self.w().count("cuts.watchdog");
                        resp.kill();
                        return Flow::Again;
                    }
                    if self.w().overdue(since, scope) {
                        let whose = match scope {
                            Scope::Local => "its producer's own stream",
                            Scope::Any => "a stream",
                        };
                        let what = format!("hang: no frame for {:?} on {whose}", since.elapsed());
                        self.violation(r, what);
                        resp.kill();
                        return Flow::Again;
                    }
                }
            }
        }
    }

    /// Checks that the state is the answer reduced up to `last`.
    fn check_state(&self, r: usize) -> bool {
        let k = self.last as usize;
        if k > self.answer.len() {
            self.violation(
                r,
                format!("seq {k} past the answer's {} events", self.answer.len()),
            );
            return false;
        }
        let want = Reduced::of(&self.answer[..k]);
        if self.state != want {
            self.violation(r, diagnose(&self.turn, &self.state, &want));
            return false;
        }
        true
    }

    /// Applies one frame; `Some` when the connection is done.
    fn on_frame(&mut self, r: usize, f: &Frame, first_of_record: bool) -> Option<Flow> {
        let run = f.json["run_id"].as_str().unwrap_or_default().to_string();
        let end = |o: Outcome| Some(Flow::End(o));
        if first_of_record {
            if f.ty() != "STREAM_SNAPSHOT" || f.seq() != 0 {
                self.violation(r, format!("a record stream began with {}", f.json));
                return end(Outcome::Violated);
            }
            self.w().live[r].fetch_add(1, Ordering::SeqCst);
            self.producer = Some(r);
            self.w().producers.lock().insert(run.clone(), r);
            if let Flow::End(o) = self.adopt(&run) {
                return end(o);
            }
            return None;
        }
        if self.run.as_deref() != Some(run.as_str()) {
            if f.ty() != "STREAM_SNAPSHOT" {
                self.violation(r, format!("a frame of another run: {}", f.json));
                return end(Outcome::Violated);
            }
            return self.other_run(r, f, &run);
        }
        self.refused.clear();
        match f.ty() {
            "STREAM_SNAPSHOT" => {
                let events = f.json["events"].as_array().cloned().unwrap_or_default();
                self.state = Reduced::of(&events);
                self.last = f.seq();
                self.w().count("snapshots");
                if !self.check_state(r) {
                    return end(Outcome::Violated);
                }
            }
            "STREAM_EVENT" => {
                let seq = f.seq();
                if seq <= self.last {
                    // Ignored by the client rules; it must be the same event.
                    self.w().count("events_resent");
                    if self.answer.get(seq as usize - 1) != Some(&f.json["event"]) {
                        self.violation(
                            r,
                            format!("seq {seq} again with another event: {}", f.json),
                        );
                        return end(Outcome::Violated);
                    }
                    return None;
                }
                if seq != self.last + 1 {
                    self.violation(r, format!("a gap: seq {seq} after {}", self.last));
                    return end(Outcome::Violated);
                }
                self.state.apply(&f.json["event"]);
                self.last = seq;
                self.w().count("events");
                if !self.check_state(r) {
                    return end(Outcome::Violated);
                }
            }
            "STREAM_END" => return Some(self.on_end(r, f)),
            t => {
                self.violation(r, format!("an unknown frame type {t}"));
                return end(Outcome::Violated);
            }
        }
        None
    }

    /// A replacement snapshot of another run (the documented answer to a cursor the replica
    /// does not know): foreign when it is another owner's or chat's, a second run of the turn
    /// when its events are this turn's; else (another turn's run) not served here.
    fn other_run(&mut self, r: usize, f: &Frame, run: &str) -> Option<Flow> {
        let events = f.json["events"].as_array().cloned().unwrap_or_default();
        let state = Reduced::of(&events);
        let mine = format!("{}/{}/", self.turn.owner, self.turn.chat);
        let marks: Vec<&str> = events
            .iter()
            .filter_map(|e| e["m"].as_str().or(e["delta"].as_str()))
            .collect();
        if let Some(m) = marks.iter().find(|m| !m.starts_with(&mine)) {
            self.violation(
                r,
                format!("a snapshot of another owner's or chat's run {run}: {m}"),
            );
            return Some(Flow::End(Outcome::Violated));
        }
        let turn = format!("{}{}/", mine, self.turn.n);
        if marks.iter().any(|m| m.starts_with(&turn))
            || self.w().turn_of(run) == Some(self.turn.clone())
        {
            self.violation(r, format!("a second run {run} of the turn ({state:?})"));
            return Some(Flow::End(Outcome::Violated));
        }
        self.w().count("replaced_by_another_run");
        let other = self.w().turn_of(run).map(|t| t.mark());
        Some(self.not_served(r, &format!("a snapshot of run {run} of {other:?}")))
    }

    fn on_end(&mut self, r: usize, f: &Frame) -> Flow {
        let j = &f.json;
        if f.seq() != self.last {
            self.violation(
                r,
                format!("STREAM_END at seq {} after seq {}: {j}", f.seq(), self.last),
            );
            return Flow::End(Outcome::Violated);
        }
        if j["persisted"] == json!(true) {
            if self.last as usize != self.answer.len() || self.state != Reduced::of(&self.answer) {
                self.violation(r, format!("persisted:true without the whole answer: {j}"));
                return Flow::End(Outcome::Violated);
            }
            return Flow::End(Outcome::Persisted);
        }
        let reason = j["reason"].as_str().unwrap_or_default();
        let superseded = j["superseded"] == json!(true);
        let ok = match reason {
            "owner_lost" | "upstream_reset" => !superseded,
            "superseded" => superseded && j["next_run_id"].is_string(),
            _ => false,
        };
        if !ok {
            self.violation(r, format!("an end that is not allowed: {j}"));
            return Flow::End(Outcome::Violated);
        }
        if superseded {
            // Only a later turn of the chat may supersede this one.
            let next = j["next_run_id"].as_str().unwrap_or_default();
            match self.w().turn_of(next) {
                Some(t) if t.n <= self.turn.n => {
                    self.violation(r, format!("superseded by the run of {}: {j}", t.mark()));
                    return Flow::End(Outcome::Violated);
                }
                Some(_) => self.w().count("superseded_by.a_later_turn"),
                None => {
                    self.w().count("superseded_by.an_unknown_run");
                    println!(
                        "chaos: note: {} on {} superseded by a run no turn knows: {j}",
                        self.turn.mark(),
                        NAMES[r]
                    );
                }
            }
        }
        Flow::End(Outcome::NotPersisted(reason.to_string()))
    }
}
