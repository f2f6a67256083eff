//! Prometheus metric families. Each sidecar owns one [`Metrics`] with its own registry, so
//! several sidecars in one process (the tests) never share values. Labels are bounded sets,
//! never a run or chat id.

use prometheus::{
    Encoder, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry,
    TextEncoder,
};

/// Every family tether exports.
#[derive(Debug, Clone)]
pub struct Metrics {
    registry: Registry,
    /// `tether_runs_active`: runs whose producer is reading the upstream.
    pub runs_active: IntGauge,
    /// `tether_runs_started_total{route}`.
    pub runs_started: IntCounterVec,
    /// `tether_runs_finished_total{outcome}`: persisted, not_persisted, superseded, cancelled.
    pub runs_finished: IntCounterVec,
    /// `tether_observers_active`.
    pub observers_active: IntGauge,
    /// `tether_attach_total{result}`: snapshot, replay, no_content, end_only.
    pub attach: IntCounterVec,
    /// `tether_snapshot_resets_total{reason}`: lagged, expired_cursor, unknown_run, future_cursor.
    pub snapshot_resets: IntCounterVec,
    /// `tether_observer_lag_events`: head seq minus the seq just written, at each write.
    pub observer_lag: Histogram,
    /// `tether_delivery_delay_seconds`: upstream arrival to write to an observer.
    pub delivery_delay: Histogram,
    /// `tether_upstream_events_total`.
    pub upstream_events: IntCounter,
    /// `tether_upstream_bytes_total`.
    pub upstream_bytes: IntCounter,
    /// `tether_upstream_errors_total{kind}`: connect, timeout, reset, status, protocol.
    pub upstream_errors: IntCounterVec,
    /// `tether_recorded_bytes`: memory held by windows and snapshots.
    pub recorded_bytes: IntGauge,
    /// `tether_runs_evicted_total{reason}`: expired, capacity.
    pub runs_evicted: IntCounterVec,
    /// `tether_events_dropped_total{reason}`: oversized, after_end.
    pub events_dropped: IntCounterVec,
    /// `tether_snapshot_serialize_seconds`.
    pub snapshot_serialize: Histogram,
    /// `tether_unobserved_events_total`: events recorded while no client was attached.
    pub unobserved_events: IntCounter,
    /// `tether_runs_unrecorded_total`: turns passed through unrecorded because the recorder was
    /// at `max_runs` or `max_recorded_bytes`.
    pub runs_unrecorded: IntCounter,
}

fn counter_vec(
    reg: &Registry,
    name: &str,
    help: &str,
    label: &str,
    values: &[&str],
) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help), &[label]).expect("valid metric definition");
    reg.register(Box::new(c.clone()))
        .expect("unique metric name");
    // Export every label value from the start, at zero.
    for v in values {
        c.with_label_values(&[v]);
    }
    c
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
            runs_started: counter_vec(
                &r,
                "tether_runs_started_total",
                "Runs recorded, by route",
                "route",
                &[],
            ),
            runs_finished: counter_vec(
                &r,
                "tether_runs_finished_total",
                "Runs ended, by outcome",
                "outcome",
                &["persisted", "not_persisted", "superseded", "cancelled"],
            ),
            observers_active: gauge(&r, "tether_observers_active", "Clients reading a run"),
            attach: counter_vec(
                &r,
                "tether_attach_total",
                "Attach answers, by how the observer started",
                "result",
                &["snapshot", "replay", "no_content", "end_only"],
            ),
            snapshot_resets: counter_vec(
                &r,
                "tether_snapshot_resets_total",
                "Replacement snapshots sent instead of replay, by reason",
                "reason",
                &["lagged", "expired_cursor", "unknown_run", "future_cursor"],
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
            upstream_errors: counter_vec(
                &r,
                "tether_upstream_errors_total",
                "Upstream failures, by kind",
                "kind",
                &["connect", "timeout", "reset", "status", "protocol"],
            ),
            recorded_bytes: gauge(
                &r,
                "tether_recorded_bytes",
                "Bytes held by replay windows and snapshots",
            ),
            runs_evicted: counter_vec(
                &r,
                "tether_runs_evicted_total",
                "Completed runs dropped from the registry, by reason",
                "reason",
                &["expired", "capacity"],
            ),
            events_dropped: counter_vec(
                &r,
                "tether_events_dropped_total",
                "Upstream events not recorded, by reason",
                "reason",
                &["oversized", "after_end"],
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
            registry: r,
        }
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
mod tests {
    use super::*;

    #[test]
    fn every_family_is_exported_with_bounded_labels() {
        let m = Metrics::new();
        m.runs_started.with_label_values(&["/chat"]).inc();
        m.observer_lag.observe(1.0);
        let text = m.render();
        for name in [
            "tether_runs_active",
            "tether_runs_started_total{route=\"/chat\"} 1",
            "tether_runs_finished_total{outcome=\"cancelled\"} 0",
            "tether_observers_active",
            "tether_attach_total{result=\"end_only\"} 0",
            "tether_snapshot_resets_total{reason=\"future_cursor\"} 0",
            "tether_observer_lag_events_count 1",
            "tether_delivery_delay_seconds_bucket",
            "tether_upstream_events_total",
            "tether_upstream_bytes_total",
            "tether_upstream_errors_total{kind=\"protocol\"} 0",
            "tether_recorded_bytes",
            "tether_runs_evicted_total{reason=\"capacity\"} 0",
            "tether_events_dropped_total{reason=\"oversized\"} 0",
            "tether_snapshot_serialize_seconds_bucket",
            "tether_unobserved_events_total",
            "tether_runs_unrecorded_total",
        ] {
            assert!(text.contains(name), "missing {name}");
        }
    }
}
