//! How an observer reads one stream: each frame checked against the backend's answer reduced
//! up to its seq, a planned cut carried out, and the one `STREAM_END` judged.

use std::sync::atomic::Ordering;

use serde_json::json;
use tokio::time::Instant;

use super::{Flow, Observer, Outcome, TICK};
use crate::chaos::world::{diagnose, Scope, NAMES, SILENCE};
use crate::support::{Frame, Reduced, Resp};

impl Observer {
    /// Reads one stream to its end, a cut, or a violation.
    pub(super) async fn read(&mut self, r: usize, mut resp: Resp, record: bool) -> Flow {
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
    pub(super) fn check_state(&self, r: usize) -> bool {
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
    pub(super) fn on_frame(&mut self, r: usize, f: &Frame, first_of_record: bool) -> Option<Flow> {
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
    pub(super) fn other_run(&mut self, r: usize, f: &Frame, run: &str) -> Option<Flow> {
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

    pub(super) fn on_end(&mut self, r: usize, f: &Frame) -> Flow {
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
