//! The record of one ended run (`event = "run_ended"`): what it was (run id, route, format, the
//! owner's subject), how it ended (outcome, reason), what it cost (the provider's usage), who
//! watched it, and its timings and trace id. Written once per run: a log line, the webhook's
//! body, and the attributes of the run's span.

use serde::{Serialize, Serializer};

use super::watch::WatchRecord;
use crate::metrics::{Metrics, RunOutcome, TokenKind};
use crate::record::usage::{Metered, Usage};
use crate::vocab::end::EndReason;
use crate::vocab::kinds::FormatKind;
use crate::vocab::label::Label;
use crate::vocab::RunId;

/// The log target of run records (`--log-format json` writes each as one JSON object).
pub const LOG_TARGET: &str = "tether::run";

/// The `event` field of every run record.
pub const RUN_ENDED: &str = "run_ended";

/// One ended run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunRecord {
    /// Always [`RUN_ENDED`].
    pub event: &'static str,
    /// tether's id of the run (the webhook's idempotency key).
    pub run_id: RunId,
    /// The route that recorded it (its path, as in the metrics' `route` label).
    pub route: String,
    /// The stream's format, once known (`None`: the run ended before its first event).
    #[serde(serialize_with = "label")]
    pub format: Option<FormatKind>,
    /// The owner's subject as configured (`[auth] subject`: the header, cookie or
    /// `Authorization` value), `None` when every caller is the same owner.
    pub owner: Option<String>,
    /// How the run ended, as `tether_runs_finished_total{outcome}` counts it.
    #[serde(serialize_with = "label")]
    pub outcome: Option<RunOutcome>,
    /// Why its answer was not persisted (`STREAM_END`'s `reason`).
    #[serde(serialize_with = "label")]
    pub reason: Option<EndReason>,
    /// Whether its answer was persisted.
    pub persisted: bool,
    /// The provider's token usage (see [`Metered::usage`]); `null` when it reported none.
    pub usage: Option<Usage>,
    /// The run ended without the provider's final usage frame.
    pub usage_missing: bool,
    /// The model the record request asked for, when its body named one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_model: Option<String>,
    /// The provider's finish reason, when the stream gave one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    /// The model that answered, when the stream named one (in `usage` too, when there is
    /// one); for the trace's `gen_ai.response.model`.
    #[serde(skip)]
    pub response_model: Option<String>,
    /// Who watched it.
    pub watch: WatchRecord,
    /// Milliseconds from the record request to the backend's first body byte (`None`: none
    /// came).
    pub first_byte_ms: Option<u64>,
    /// Milliseconds from the record request to the run's end.
    pub duration_ms: u64,
    /// When the record request arrived, in milliseconds since the Unix epoch.
    pub started_at_ms: u64,
    /// The W3C trace id of the run's span (32 hex digits), when tracing is on or the caller
    /// sent a `traceparent`.
    pub trace_id: Option<String>,
}

/// Serializes a bounded word as its label string.
fn label<L: Label, S: Serializer>(v: &Option<L>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(l) => s.serialize_str(l.as_str()),
        None => s.serialize_none(),
    }
}

impl RunRecord {
    /// A record of run `run_id` of `route` with nothing else known yet; the caller fills the
    /// rest (every field is public).
    pub fn new(run_id: RunId, route: impl Into<String>) -> RunRecord {
        RunRecord {
            event: RUN_ENDED,
            run_id,
            route: route.into(),
            format: None,
            owner: None,
            outcome: None,
            reason: None,
            persisted: false,
            usage: None,
            usage_missing: true,
            request_model: None,
            finish_reason: None,
            response_model: None,
            watch: WatchRecord::default(),
            first_byte_ms: None,
            duration_ms: 0,
            started_at_ms: 0,
            trace_id: None,
        }
    }

    /// Takes the usage a run's meter reported at its end.
    pub fn metered(mut self, m: Metered) -> RunRecord {
        self.usage = m.usage;
        self.usage_missing = m.usage_missing;
        self.finish_reason = m.finish_reason;
        self.response_model = m.model;
        self
    }

    /// Counts the run in the usage and unwatched families: its tokens by kind, and, when it
    /// ended with no client attached, the run and its output tokens; a run stopped as
    /// `abandoned` in `tether_runs_abandoned_total{route}`. A run whose format was
    /// never known (it ended before its first event) reported nothing and is not counted.
    pub fn count(&self, metrics: &Metrics) {
        if self.reason == Some(EndReason::Abandoned) {
            metrics
                .runs_abandoned
                .with_label_values(&[self.route.as_str()])
                .inc();
        }
        let Some(format) = self.format else { return };
        let (route, format) = (self.route.as_str(), format.as_str());
        let output = self.usage.as_ref().and_then(|u| u.output_tokens);
        if let Some(u) = &self.usage {
            for (kind, n) in [
                (TokenKind::Input, u.input_tokens),
                (TokenKind::Output, u.output_tokens),
                (TokenKind::CachedInput, u.cached_input_tokens),
                (TokenKind::Reasoning, u.reasoning_tokens),
            ] {
                if let Some(n) = n {
                    metrics
                        .usage_tokens
                        .with_label_values(&[route, format, kind.as_str()])
                        .inc_by(n);
                }
            }
        }
        if !self.watch.ended_watched {
            metrics
                .unwatched_runs
                .with_label_values(&[route, format])
                .inc();
            metrics
                .unwatched_output_tokens
                .with_label_values(&[route, format])
                .inc_by(output.unwrap_or(0));
        }
    }

    /// The record as one line of JSON (no newline).
    pub fn to_json(&self) -> String {
        // A struct of strings, numbers and options: serialization cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Writes the record to the log, target [`LOG_TARGET`], level `info`: its JSON as the
    /// message (a JSON object of its own with `--log-format json`).
    pub fn log(&self) {
        log::info!(target: LOG_TARGET, "{}", self.to_json());
    }
}

/// The JSON log line of a log record: `ts`, `level`, `target` and `msg`; a run record's
/// fields (target [`LOG_TARGET`]) in place of `msg`, so each ended run is one JSON object.
pub fn json_log_line(ts: &str, level: &str, target: &str, msg: &str) -> serde_json::Value {
    let mut line = serde_json::json!({"ts": ts, "level": level, "target": target});
    let fields = (target == LOG_TARGET)
        .then(|| serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(msg).ok())
        .flatten();
    match (line.as_object_mut(), fields) {
        (Some(obj), Some(fields)) => obj.extend(fields),
        (Some(obj), None) => {
            obj.insert("msg".into(), msg.into());
        }
        (None, _) => {}
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> RunRecord {
        let mut r = RunRecord::new(RunId::from("run-1"), "/chat");
        r.format = Some(FormatKind::OpenaiChat);
        r.owner = Some("alice".into());
        r.outcome = Some(RunOutcome::Persisted);
        r.persisted = true;
        r.first_byte_ms = Some(120);
        r.duration_ms = 2400;
        r.started_at_ms = 1_767_225_600_000;
        r.trace_id = Some("4bf92f3577b34da6a3ce929d0e0e4736".into());
        r.request_model = Some("gpt-4o".into());
        r.metered(Metered {
            usage: Some(Usage {
                input_tokens: Some(21),
                output_tokens: Some(31),
                cached_input_tokens: Some(0),
                reasoning_tokens: None,
                model: Some("gpt-4o-2024-08-06".into()),
            }),
            usage_missing: false,
            model: Some("gpt-4o-2024-08-06".into()),
            finish_reason: Some("stop".into()),
        })
    }

    #[test]
    fn a_run_record_is_one_json_object_with_every_field() {
        let v: serde_json::Value = serde_json::from_str(&record().to_json()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "event": "run_ended", "run_id": "run-1", "route": "/chat",
                "format": "openai_chat", "owner": "alice", "outcome": "persisted",
                "reason": null, "persisted": true,
                "usage": {"input_tokens": 21, "output_tokens": 31, "cached_input_tokens": 0,
                          "model": "gpt-4o-2024-08-06"},
                "usage_missing": false, "request_model": "gpt-4o", "finish_reason": "stop",
                "watch": {"observers": 0, "observers_max": 0, "attaches": 0, "resumes": 0,
                          "watched_ms": 0, "unwatched_ms": 0, "events_unwatched": 0,
                          "ended_watched": false},
                "first_byte_ms": 120, "duration_ms": 2400, "started_at_ms": 1_767_225_600_000u64,
                "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"
            })
        );
    }

    #[test]
    fn a_record_counts_its_tokens_and_whether_it_ended_unwatched() {
        let m = Metrics::new();
        let r = record();
        r.count(&m);
        let labels = |kind: &str| ["/chat", "openai_chat", kind].map(str::to_string);
        let get = |kind: &str| {
            let l = labels(kind);
            m.usage_tokens
                .with_label_values(&[&l[0], &l[1], &l[2]])
                .get()
        };
        assert_eq!(
            (get("input"), get("output"), get("cached_input")),
            (21, 31, 0)
        );
        assert_eq!(get("reasoning"), 0);
        let unwatched = |m: &Metrics| {
            (
                m.unwatched_runs
                    .with_label_values(&["/chat", "openai_chat"])
                    .get(),
                m.unwatched_output_tokens
                    .with_label_values(&["/chat", "openai_chat"])
                    .get(),
            )
        };
        // Nobody was attached at its end.
        assert_eq!(unwatched(&m), (1, 31));
        let mut watched = record();
        watched.watch.ended_watched = true;
        watched.count(&m);
        assert_eq!(unwatched(&m), (1, 31));
        assert_eq!(get("output"), 62);
    }

    #[test]
    fn a_run_cut_before_its_usage_frame_says_usage_null_and_missing() {
        let mut r = RunRecord::new(RunId::from("run-2"), "/chat").metered(Metered {
            usage_missing: true,
            ..Metered::default()
        });
        r.reason = Some(EndReason::UpstreamReset);
        r.outcome = Some(RunOutcome::NotPersisted);
        let v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(v["usage"], serde_json::Value::Null);
        assert_eq!(v["usage_missing"], true);
        assert_eq!(v["reason"], "upstream_reset");
        assert!(v.get("finish_reason").is_none());
    }

    #[test]
    fn the_json_log_line_of_a_run_record_carries_its_fields_and_others_their_message() {
        let json = record().to_json();
        let line = json_log_line("t", "INFO", LOG_TARGET, &json);
        assert_eq!(line["event"], "run_ended");
        assert_eq!(line["usage"]["output_tokens"], 31);
        assert_eq!(line["ts"], "t");
        assert!(line.get("msg").is_none());
        let line = json_log_line("t", "INFO", "tether::producer", "hello");
        assert_eq!(line["msg"], "hello");
        // A message on the run target that is not a record stays a message.
        let line = json_log_line("t", "INFO", LOG_TARGET, "not json");
        assert_eq!(line["msg"], "not json");
    }
}
