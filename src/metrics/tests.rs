//! Tests of the metric families: every one exported, with bounded labels.

use super::*;

#[test]
fn every_family_is_exported_with_bounded_labels() {
    let m = Metrics::new();
    m.runs_started.with_label_values(&["/chat", "agui"]).inc();
    m.observer_lag.observe(1.0);
    let text = m.render();
    for name in [
        "tether_runs_active",
        "tether_runs_started_total{format=\"agui\",route=\"/chat\"} 1",
        "tether_runs_finished_total{outcome=\"cancelled\"} 0",
        "tether_observers_active",
        "tether_attach_total{dialect=\"protocol1\",result=\"end_only\"} 0",
        "tether_snapshot_resets_total{dialect=\"protocol1\",reason=\"future_cursor\"} 0",
        "tether_observer_lag_events_count 1",
        "tether_delivery_delay_seconds_bucket",
        "tether_upstream_events_total",
        "tether_upstream_bytes_total",
        "tether_upstream_errors_total{kind=\"protocol\"} 0",
        "tether_recorded_bytes",
        "tether_upstream_connects_waiting",
        "tether_upstream_fd_waits_total",
        "tether_runs_evicted_total{reason=\"capacity\"} 0",
        "tether_events_dropped_total{reason=\"oversized\"} 0",
        "tether_snapshot_serialize_seconds_bucket",
        "tether_unobserved_events_total",
        "tether_runs_unrecorded_total",
        "tether_buffered_bytes 0",
        "tether_legacy_clients_cut_total{reason=\"queue_full\"} 0",
        "tether_events_dropped_total{reason=\"over_budget\"} 0",
        "tether_webhook_records_sent_total 0",
        "tether_webhook_retries_total 0",
        "tether_webhook_records_dropped_total{reason=\"queue_full\"} 0",
    ] {
        assert!(text.contains(name), "missing {name}");
    }
}

#[test]
fn seeded_routes_export_the_usage_and_unwatched_families_at_zero() {
    let m = Metrics::new();
    m.seed_routes(["/chat"]);
    let text = m.render();
    for name in [
        "tether_usage_tokens_total{format=\"anthropic\",kind=\"cached_input\",route=\"/chat\"} 0",
        "tether_unwatched_runs_total{format=\"agui\",route=\"/chat\"} 0",
        "tether_unwatched_output_tokens_total{format=\"ai_sdk\",route=\"/chat\"} 0",
    ] {
        assert!(text.contains(name), "missing {name}");
    }
}
