//! The rows of the admin API's answers: a run held here (its own or a mirror), or a run only
//! the shared journal describes (another replica's, not followed here), each shown with the
//! same fields; what the journal does not carry is `null`.

use serde_json::{json, Map, Value};

use crate::chats::admin::Indexed;
use crate::ingest::Ending;
use crate::state::auth::{Auth, Owner};
use crate::state::registry::Held;
use crate::vocab::end::{End, EndReason};
use crate::vocab::RunId;

/// A run an answer shows.
pub enum Row {
    /// Held here: produced here, or a mirror of another replica's run.
    Here(Held),
    /// Only in the shared journal: another replica's run not followed here.
    There(Indexed),
}

impl Row {
    /// Tether's run id.
    pub fn id(&self) -> &RunId {
        match self {
            Row::Here(h) => h.run.id(),
            Row::There(r) => &r.run.run,
        }
    }

    /// Whether the run is still going.
    pub fn is_active(&self) -> bool {
        match self {
            Row::Here(h) => h.run.end().is_none(),
            Row::There(r) => r.run.live,
        }
    }

    /// Who recorded it.
    pub fn owner(&self) -> Owner {
        match self {
            Row::Here(h) => h.owner,
            Row::There(r) => r.owner,
        }
    }

    /// The path of the route that recorded it, when known.
    pub fn route(&self) -> Option<&str> {
        match self {
            Row::Here(h) => h.run.labels().route(),
            Row::There(r) => r.run.route.as_deref(),
        }
    }

    /// The fields every answer shows of the run.
    pub fn view(&self) -> Map<String, Value> {
        match self {
            Row::Here(h) => view(h),
            Row::There(r) => view_indexed(r),
        }
    }
}

/// The fields of a run only the shared journal describes: its observers, usage, watch, format
/// and end time are the producing replica's to tell (`null`).
fn view_indexed(r: &Indexed) -> Map<String, Value> {
    let run = &r.run;
    let end = run.end.as_ref();
    let mut v = Map::new();
    v.insert("run_id".into(), json!(run.run.as_str()));
    v.insert("chat_id".into(), json!(Auth::chat_of(&r.owner, &run.scope)));
    v.insert("owner".into(), json!(r.owner.hex()));
    v.insert("route".into(), json!(run.route));
    v.insert("format".into(), Value::Null);
    let state = if run.live { "active" } else { "completed" };
    v.insert("state".into(), json!(state));
    v.insert("head_seq".into(), json!(run.head));
    v.insert("observers".into(), Value::Null);
    v.insert("started_at_ms".into(), json!(run.started_at_ms));
    v.insert("ended_at_ms".into(), Value::Null);
    ending(&mut v, end);
    v.insert("usage".into(), Value::Null);
    v.insert("watch".into(), Value::Null);
    v.insert("held".into(), json!(false));
    v
}

/// The end's fields: outcome, persisted, reason.
fn ending(v: &mut Map<String, Value>, end: Option<&End>) {
    v.insert("outcome".into(), json!(end.map(outcome)));
    v.insert("persisted".into(), json!(end.map(|e| e.persisted)));
    let reason = end.and_then(|e| e.reason).map(|r| r.as_str());
    v.insert("reason".into(), json!(reason));
}

/// How a run ended, as `tether_runs_finished_total{outcome}` names it: the producer's rule,
/// told how the read ended by the end's reason (a stop's reason is the stop's).
fn outcome(end: &End) -> &'static str {
    let ending = match end.reason {
        Some(r @ EndReason::Cancelled) => Ending::Stopped(r),
        _ => Ending::Clean,
    };
    crate::ingest::outcome(end, ending).as_str()
}

/// The fields every answer shows of a run.
fn view(h: &Held) -> Map<String, Value> {
    let run = &h.run;
    let labels = run.labels();
    let end = run.end();
    let ended_at = run
        .finished_at()
        .map(|t| labels.at_ms(t.saturating_duration_since(run.started())));
    let mut v = Map::new();
    v.insert("run_id".into(), json!(run.id().as_str()));
    v.insert("chat_id".into(), json!(Auth::chat_of(&h.owner, &h.scope)));
    v.insert("owner".into(), json!(h.owner.hex()));
    v.insert("route".into(), json!(labels.route()));
    v.insert("format".into(), json!(labels.format().map(|f| f.as_str())));
    let state = if end.is_none() { "active" } else { "completed" };
    v.insert("state".into(), json!(state));
    v.insert("head_seq".into(), json!(run.head()));
    v.insert("observers".into(), json!(run.observers()));
    v.insert("started_at_ms".into(), json!(labels.started_at_ms()));
    v.insert("ended_at_ms".into(), json!(ended_at));
    ending(&mut v, end.as_ref());
    // The accounting figures, as the status route shows them: a mirror's are the producing
    // replica's to tell.
    let (usage, watch) = match run.origin().is_mirror() {
        true => (Value::Null, Value::Null),
        false => (json!(run.usage()), json!(run.watch_record())),
    };
    v.insert("usage".into(), usage);
    v.insert("watch".into(), watch);
    v.insert("held".into(), json!(true));
    v
}
