//! How an observer gets a stream: the record request that sends the turn, the search for its
//! run when that request got no answer, and the attach of a tab that joins it.

use rand::Rng;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::time::Instant;

use super::{Flow, Observer, Outcome, Role, TICK, UNSERVED};
use crate::chaos::world::{Scope, SILENCE};
use crate::support::{try_request, Resp};

impl Observer {
    pub(super) fn headers(&self) -> [(&'static str, &'static str); 2] {
        [
            ("x-user", self.turn.owner),
            ("content-type", "application/json"),
        ]
    }

    /// Sends one request; `Err` when it got no answer (a violation unless a fault explains it).
    pub(super) async fn connect(
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
    pub(super) async fn record(&mut self, r: usize) -> Flow {
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
    pub(super) async fn search(&mut self, r: usize, since: Instant) -> Flow {
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
    pub(super) fn adopt(&mut self, run: &str) -> Flow {
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

    pub(super) async fn attach(&mut self, r: usize, body: Value) -> Flow {
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
    pub(super) fn not_served(&mut self, r: usize, why: &str) -> Flow {
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
}
