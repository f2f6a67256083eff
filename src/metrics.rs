//! Prometheus metric families. Each sidecar owns one [`Metrics`] with its own registry, so
//! several sidecars in one process (the tests) never share values. Labels are bounded sets,
//! never a run or chat id: each labelled family takes a label enum ([`Label`]), and every value
//! of it is exported at zero from the start, so a scrape before the first request sees every
//! family.

pub mod downstream;

use std::marker::PhantomData;

use prometheus::{
    Encoder, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

use crate::budget::Meter;
use crate::error::UpstreamErrorKind;
pub use crate::vocab::end::RunOutcome;
use crate::vocab::kinds::DialectKind;

pub use crate::vocab::label::Label;
pub(crate) use tether_core::label_enum;

/// A Prometheus gauge as the meter of a [`crate::budget::Budget`] (`tether_buffered_bytes`).
#[derive(Debug, Clone)]
pub struct GaugeMeter(pub IntGauge);

impl Meter for GaugeMeter {
    fn add(&self, delta: i64) {
        self.0.add(delta);
    }
}

label_enum! {
    /// `tether_attach_total{result}`: how an attach was answered.
    pub enum AttachResult {
        /// A snapshot, then the live tail.
        Snapshot => "snapshot",
        /// The events after the cursor, from the window.
        Replay => "replay",
        /// 204: nothing to attach to.
        NoContent => "no_content",
        /// The cursor was the ended run's last seq: just `STREAM_END` (a verbatim dialect: a
        /// `200` stream that ends at once).
        EndOnly => "end_only",
        /// 404: no such run (a verbatim dialect's unknown run or expired cursor).
        NotFound => "not_found",
        /// The cursor's frames are no longer kept, answered by the dialect's `expired` status.
        Expired => "expired",
    }
}

label_enum! {
    /// `tether_snapshot_resets_total{reason}`: why a replacement snapshot was sent.
    pub enum ResetReason {
        /// The observer fell out of the window.
        Lagged => "lagged",
        /// The cursor's events have left the window.
        ExpiredCursor => "expired_cursor",
        /// The cursor's run is not known.
        UnknownRun => "unknown_run",
        /// The cursor is past the run's head.
        FutureCursor => "future_cursor",
    }
}

label_enum! {
    /// `tether_runs_evicted_total{reason}`: why a completed run was dropped.
    pub enum EvictReason {
        /// Its retention passed.
        Expired => "expired",
        /// Room was needed (`max_chats`, `max_runs`, `max_recorded_bytes`).
        Capacity => "capacity",
    }
}

label_enum! {
    /// `tether_events_dropped_total{reason}`: why an upstream event was not recorded.
    pub enum DropReason {
        /// It was over `max_event_bytes`.
        Oversized => "oversized",
        /// It arrived after the run had ended for its observers (superseded).
        AfterEnd => "after_end",
        /// It was still arriving when `[limits] max_buffered_bytes` had no room left for it.
        OverBudget => "over_budget",
    }
}

label_enum! {
    /// `tether_legacy_clients_cut_total{reason}`: why a legacy client's stream was cut.
    pub enum CutReason {
        /// It fell `[limits] max_client_buffer_bytes` behind the upstream.
        QueueFull => "queue_full",
        /// `[limits] max_buffered_bytes` had no room left for its next chunk.
        Budget => "budget",
    }
}

label_enum! {
    /// `tether_usage_tokens_total{kind}`: which of a run's token counts.
    pub enum TokenKind {
        /// Prompt tokens, cached ones included.
        Input => "input",
        /// Completion tokens, reasoning ones included.
        Output => "output",
        /// Prompt tokens read from the provider's cache.
        CachedInput => "cached_input",
        /// Completion tokens spent on reasoning.
        Reasoning => "reasoning",
    }
}

label_enum! {
    /// `tether_webhook_records_dropped_total{reason}`: why a run record was never delivered.
    pub enum WebhookDrop {
        /// The webhook's queue was full (its receiver down or slow for long).
        QueueFull => "queue_full",
        /// The receiver refused it for good (a 4xx other than 408 and 429).
        Rejected => "rejected",
        /// The process stopped before it could be delivered.
        Shutdown => "shutdown",
    }
}

/// A counter family with one label from the bounded set `L`.
#[derive(Debug, Clone)]
pub struct Counters<L> {
    vec: IntCounterVec,
    _label: PhantomData<L>,
}

impl<L: Label> Counters<L> {
    /// The counter of `label`.
    pub fn get(&self, label: L) -> IntCounter {
        self.vec.with_label_values(&[label.as_str()])
    }

    /// Adds one to `label`.
    pub fn inc(&self, label: L) {
        self.get(label).inc();
    }

    /// Adds `n` to `label`.
    pub fn inc_by(&self, label: L, n: u64) {
        self.get(label).inc_by(n);
    }
}

/// A counter family with two labels from the bounded sets `A` and `B`.
#[derive(Debug, Clone)]
pub struct Pairs<A, B> {
    vec: IntCounterVec,
    _labels: PhantomData<(A, B)>,
}

impl<A: Label, B: Label> Pairs<A, B> {
    /// The counter of `(a, b)`.
    pub fn get(&self, a: A, b: B) -> IntCounter {
        self.vec.with_label_values(&[a.as_str(), b.as_str()])
    }

    /// Adds one to `(a, b)`.
    pub fn inc(&self, a: A, b: B) {
        self.get(a, b).inc();
    }
}

fn pairs<A: Label, B: Label>(
    reg: &Registry,
    name: &str,
    help: &str,
    labels: [&str; 2],
) -> Pairs<A, B> {
    let vec = counter_vec(reg, name, help, &labels);
    for a in A::all() {
        for b in B::all() {
            vec.with_label_values(&[a.as_str(), b.as_str()]);
        }
    }
    Pairs {
        vec,
        _labels: PhantomData,
    }
}

/// Every family tether exports.
#[derive(Debug, Clone)]
pub struct Metrics {
    registry: Registry,
    /// `tether_runs_active`: runs whose producer is reading the upstream.
    pub runs_active: IntGauge,
    /// `tether_runs_held{state}`: runs held here (mirrors included), `active` or `completed`;
    /// set when `/metrics` is read.
    pub runs_held: IntGaugeVec,
    /// `tether_runs_started_total{route,format}`: counted once the run's format is known.
    pub runs_started: IntCounterVec,
    /// `tether_runs_finished_total{outcome}`.
    pub runs_finished: Counters<RunOutcome>,
    /// `tether_observers_active`.
    pub observers_active: IntGauge,
    /// `tether_attach_total{dialect,result}`.
    pub attach: Pairs<DialectKind, AttachResult>,
    /// `tether_snapshot_resets_total{dialect,reason}`.
    pub snapshot_resets: Pairs<DialectKind, ResetReason>,
    /// `tether_observer_lag_events`: head seq minus the seq just written, at each write.
    pub observer_lag: Histogram,
    /// `tether_delivery_delay_seconds`: upstream arrival to write to an observer.
    pub delivery_delay: Histogram,
    /// `tether_upstream_events_total`.
    pub upstream_events: IntCounter,
    /// `tether_upstream_bytes_total`.
    pub upstream_bytes: IntCounter,
    /// `tether_upstream_errors_total{kind}`.
    pub upstream_errors: Counters<UpstreamErrorKind>,
    /// `tether_recorded_bytes`: memory held by windows and snapshots, and the ids live runs
    /// remember (`ids = "unique"`).
    pub recorded_bytes: IntGauge,
    /// `tether_upstream_connects_waiting`: turns waiting for a backend connect slot or a free
    /// file descriptor (set at scrape).
    pub upstream_connects_waiting: IntGauge,
    /// `tether_upstream_fd_waits_total`: turns that found no free file descriptor for their
    /// backend connection and waited for one (brought up to date at scrape).
    pub upstream_fd_waits: IntCounter,
    /// `tether_runs_evicted_total{reason}`.
    pub runs_evicted: Counters<EvictReason>,
    /// `tether_events_dropped_total{reason}`.
    pub events_dropped: Counters<DropReason>,
    /// `tether_snapshot_serialize_seconds`.
    pub snapshot_serialize: Histogram,
    /// `tether_unobserved_events_total`: events recorded while no client was attached.
    pub unobserved_events: IntCounter,
    /// `tether_runs_unrecorded_total`: turns passed through unrecorded because the recorder was
    /// at `max_runs` or `max_recorded_bytes`.
    pub runs_unrecorded: IntCounter,
    /// `tether_idempotent_joins_total`: retried record requests (same idempotency key and
    /// body) answered from the run their first request started, not forwarded.
    pub idempotent_joins: IntCounter,
    /// `tether_buffered_bytes`: bytes held for legacy clients' queues and unfinished upstream
    /// events (kept by [`crate::budget::Budget`]).
    pub buffered_bytes: IntGauge,
    /// `tether_legacy_clients_cut_total{reason}`.
    pub legacy_cuts: Counters<CutReason>,
    /// `tether_usage_tokens_total{route,format,kind}`: tokens the providers reported, per run's
    /// route and format (labels as in [`TokenKind`]).
    pub usage_tokens: IntCounterVec,
    /// `tether_unwatched_runs_total{route,format}`: runs that ended with no client attached.
    pub unwatched_runs: IntCounterVec,
    /// `tether_unwatched_output_tokens_total{route,format}`: the output tokens of those runs.
    pub unwatched_output_tokens: IntCounterVec,
    /// `tether_runs_abandoned_total{route}`: runs stopped because no client was left
    /// (a route's `on_disconnect = "cancel"`, or `--abandon-after`).
    pub runs_abandoned: IntCounterVec,
    /// `tether_webhook_records_sent_total`: run records the webhook's receiver accepted.
    pub webhook_sent: IntCounter,
    /// `tether_webhook_records_dropped_total{reason}`.
    pub webhook_dropped: Counters<WebhookDrop>,
    /// `tether_webhook_retries_total`: POSTs of a run record that failed and will be tried
    /// again (the receiver down, slow or answering 5xx, 408 or 429).
    pub webhook_retries: IntCounter,
}

fn counter_vec(reg: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric definition");
    reg.register(Box::new(c.clone()))
        .expect("unique metric name");
    c
}

fn counters<L: Label>(reg: &Registry, name: &str, help: &str, label: &str) -> Counters<L> {
    let vec = counter_vec(reg, name, help, &[label]);
    // Export every label value from the start, at zero.
    for v in L::all() {
        vec.with_label_values(&[v.as_str()]);
    }
    Counters {
        vec,
        _label: PhantomData,
    }
}

fn counter(reg: &Registry, name: &str, help: &str) -> IntCounter {
    let c = IntCounter::new(name, help).expect("valid metric definition");
    reg.register(Box::new(c.clone()))
        .expect("unique metric name");
    c
}

fn gauge(reg: &Registry, name: &str, help: &str) -> IntGauge {
    let g = IntGauge::new(name, help).expect("valid metric definition");
    reg.register(Box::new(g.clone()))
        .expect("unique metric name");
    g
}

/// A gauge with one label, each of `values` exported (at 0) from the start.
fn gauge_vec(reg: &Registry, name: &str, help: &str, label: (&str, &[&str])) -> IntGaugeVec {
    let g = IntGaugeVec::new(Opts::new(name, help), &[label.0]).expect("valid metric definition");
    for v in label.1 {
        g.with_label_values(&[v]).set(0);
    }
    reg.register(Box::new(g.clone()))
        .expect("unique metric name");
    g
}

fn histogram(reg: &Registry, name: &str, help: &str, buckets: Vec<f64>) -> Histogram {
    let h = Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets))
        .expect("valid metric definition");
    reg.register(Box::new(h.clone()))
        .expect("unique metric name");
    h
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every family in a fresh registry. Runs once at start; the definitions are
    /// static, so registration cannot fail at run time.
    pub fn new() -> Self {
        let r = Registry::new();
        let secs = vec![
            0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
            2.5,
        ];
        Metrics {
            runs_active: gauge(
                &r,
                "tether_runs_active",
                "Runs whose producer is reading the upstream",
            ),
            runs_held: gauge_vec(
                &r,
                "tether_runs_held",
                "Runs held here for resume (mirrors included), by state",
                ("state", &["active", "completed"]),
            ),
            runs_started: counter_vec(
                &r,
                "tether_runs_started_total",
                "Runs recorded, by route and stream format",
                &["route", "format"],
            ),
            runs_finished: counters::<RunOutcome>(
                &r,
                "tether_runs_finished_total",
                "Runs ended, by outcome",
                "outcome",
            ),
            observers_active: gauge(&r, "tether_observers_active", "Clients reading a run"),
            attach: pairs(
                &r,
                "tether_attach_total",
                "Attach and resume answers, by dialect and how the reader started",
                ["dialect", "result"],
            ),
            snapshot_resets: pairs(
                &r,
                "tether_snapshot_resets_total",
                "Replacement snapshots sent instead of replay, by dialect and reason",
                ["dialect", "reason"],
            ),
            observer_lag: histogram(
                &r,
                "tether_observer_lag_events",
                "Head seq minus the seq just written to an observer",
                vec![0.0, 1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0],
            ),
            delivery_delay: histogram(
                &r,
                "tether_delivery_delay_seconds",
                "Time from an event's arrival from upstream to its write to an observer",
                secs.clone(),
            ),
            upstream_events: counter(
                &r,
                "tether_upstream_events_total",
                "Events read from upstreams",
            ),
            upstream_bytes: counter(
                &r,
                "tether_upstream_bytes_total",
                "Body bytes read from recorded upstreams",
            ),
            upstream_errors: counters::<UpstreamErrorKind>(
                &r,
                "tether_upstream_errors_total",
                "Upstream failures, by kind",
                "kind",
            ),
            recorded_bytes: gauge(
                &r,
                "tether_recorded_bytes",
                "Bytes held by replay windows, snapshots and the ids live runs remember",
            ),
            upstream_connects_waiting: gauge(
                &r,
                "tether_upstream_connects_waiting",
                "Turns waiting for a backend connect slot or a free file descriptor",
            ),
            upstream_fd_waits: counter(
                &r,
                "tether_upstream_fd_waits_total",
                "Turns that found no free file descriptor for their backend connection and waited",
            ),
            runs_evicted: counters::<EvictReason>(
                &r,
                "tether_runs_evicted_total",
                "Completed runs dropped from the registry, by reason",
                "reason",
            ),
            events_dropped: counters::<DropReason>(
                &r,
                "tether_events_dropped_total",
                "Upstream events not recorded, by reason",
                "reason",
            ),
            snapshot_serialize: histogram(
                &r,
                "tether_snapshot_serialize_seconds",
                "Time to serialize one STREAM_SNAPSHOT frame",
                secs,
            ),
            unobserved_events: counter(
                &r,
                "tether_unobserved_events_total",
                "Events recorded while no client was attached to their run",
            ),
            runs_unrecorded: counter(
                &r,
                "tether_runs_unrecorded_total",
                "Turns passed through unrecorded because the recorder was full",
            ),
            idempotent_joins: counter(
                &r,
                "tether_idempotent_joins_total",
                "Retried record requests answered from the run their idempotency key started",
            ),
            buffered_bytes: gauge(
                &r,
                "tether_buffered_bytes",
                "Bytes held for legacy clients' queues and unfinished upstream events",
            ),
            legacy_cuts: counters::<CutReason>(
                &r,
                "tether_legacy_clients_cut_total",
                "Legacy clients whose stream was cut for falling behind, by reason",
                "reason",
            ),
            usage_tokens: counter_vec(
                &r,
                "tether_usage_tokens_total",
                "Tokens the providers reported in their own usage frames, by route, format and kind",
                &["route", "format", "kind"],
            ),
            unwatched_runs: counter_vec(
                &r,
                "tether_unwatched_runs_total",
                "Runs that ended with no client attached, by route and format",
                &["route", "format"],
            ),
            unwatched_output_tokens: counter_vec(
                &r,
                "tether_unwatched_output_tokens_total",
                "Output tokens of runs that ended with no client attached, by route and format",
                &["route", "format"],
            ),
            runs_abandoned: counter_vec(
                &r,
                "tether_runs_abandoned_total",
                "Runs stopped because no client was left to read them, by route",
                &["route"],
            ),
            webhook_sent: counter(
                &r,
                "tether_webhook_records_sent_total",
                "Run records the webhook's receiver accepted",
            ),
            webhook_dropped: counters::<WebhookDrop>(
                &r,
                "tether_webhook_records_dropped_total",
                "Run records never delivered to the webhook's receiver, by reason",
                "reason",
            ),
            webhook_retries: counter(
                &r,
                "tether_webhook_retries_total",
                "Failed POSTs of a run record to the webhook's receiver, tried again",
            ),
            registry: r,
        }
    }

    /// Exports the `{route,format}` families (`tether_runs_started_total`, the usage and
    /// unwatched counters) at zero for every route that starts runs and every format, so a
    /// scrape before the first turn already has them.
    pub fn seed_routes<'a>(&self, routes: impl IntoIterator<Item = &'a str>) {
        for route in routes {
            self.runs_abandoned.with_label_values(&[route]);
            for format in crate::vocab::kinds::FormatKind::ALL {
                let labels = [route, format.as_str()];
                self.runs_started.with_label_values(&labels);
                self.unwatched_runs.with_label_values(&labels);
                self.unwatched_output_tokens.with_label_values(&labels);
                for kind in TokenKind::ALL {
                    self.usage_tokens
                        .with_label_values(&[route, format.as_str(), kind.as_str()]);
                }
            }
        }
    }

    /// A counter family defined elsewhere (the shared journal's), in this sidecar's registry,
    /// every value of `L` at zero. Runs once at start, like [`Metrics::new`].
    pub fn new_counters<L: Label>(&self, name: &str, help: &str, label: &str) -> Counters<L> {
        counters(&self.registry, name, help, label)
    }

    /// A counter defined elsewhere, in this sidecar's registry.
    pub fn new_counter(&self, name: &str, help: &str) -> IntCounter {
        counter(&self.registry, name, help)
    }

    /// A gauge defined elsewhere, in this sidecar's registry.
    pub fn new_gauge(&self, name: &str, help: &str) -> IntGauge {
        gauge(&self.registry, name, help)
    }

    /// A histogram defined elsewhere, in this sidecar's registry.
    pub fn new_histogram(&self, name: &str, help: &str, buckets: Vec<f64>) -> Histogram {
        histogram(&self.registry, name, help, buckets)
    }

    /// The Prometheus text exposition of every family.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        // Encoding into a Vec cannot fail for well-formed families.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests;
