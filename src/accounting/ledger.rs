//! The sidecar's accounting outlets, started once from `[accounting]`: where each ended run's
//! record goes (the log, the usage and unwatched counters, the webhook when one is set) and the
//! tracer that opens each run's span (when an OTLP endpoint is set).

use std::time::{Duration, SystemTime};

use parking_lot::Mutex;

use super::client::ClientError;
use super::record::RunRecord;
use super::trace::{RunSpan, TraceError, TraceOptions, Tracing};
use super::webhook::{Webhook, WebhookOptions};
use crate::config::AccountingSettings;
use crate::metrics::Metrics;

/// Why the accounting outlets could not start.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// The webhook's HTTP client.
    #[error("webhook: {0}")]
    Webhook(#[from] ClientError),
    /// The trace exporter.
    #[error("OTLP exporter: {0}")]
    Trace(#[from] TraceError),
}

/// The run records' outlets and the run spans' tracer.
#[derive(Debug)]
pub struct Ledger {
    metrics: Metrics,
    /// Taken by the drain's [`Ledger::shutdown`]; records of runs ending after it are only
    /// logged and counted.
    webhook: Mutex<Option<Webhook>>,
    tracing: Option<Tracing>,
}

impl Ledger {
    /// Starts the webhook's sender (on the current Tokio runtime) and the trace exporter, each
    /// when `[accounting]` sets it.
    pub fn start(s: &AccountingSettings, metrics: &Metrics) -> Result<Ledger, LedgerError> {
        let webhook = match &s.webhook {
            Some(w) => Some(Webhook::start(WebhookOptions::new(w), metrics)?),
            None => None,
        };
        let tracing = match &s.otlp_traces {
            Some(url) => Some(Tracing::start(&TraceOptions::new(url.clone()))?),
            None => None,
        };
        Ok(Ledger {
            metrics: metrics.clone(),
            webhook: Mutex::new(webhook),
            tracing,
        })
    }

    /// Opens the span of a run whose record request arrived at `started`, carried these trace
    /// headers and named `model`; `None` when tracing is off.
    pub fn run_span(
        &self,
        traceparent: Option<&str>,
        tracestate: Option<&str>,
        model: Option<&str>,
        started: SystemTime,
    ) -> Option<RunSpan> {
        let t = self.tracing.as_ref()?;
        Some(t.run_span_from(traceparent, tracestate, model, started))
    }

    /// Accounts for one ended run, once: its record logged (`event = "run_ended"`), counted,
    /// queued for the webhook, and its span ended with it. Never waits.
    pub fn close(&self, record: &RunRecord, span: Option<RunSpan>) {
        record.log();
        record.count(&self.metrics);
        if let Some(w) = self.webhook.lock().as_ref() {
            w.send(record);
        }
        if let Some(span) = span {
            span.end(record);
        }
    }

    /// The drain's end: the webhook gets up to `within` to deliver its queue, and the ended
    /// spans are sent.
    pub async fn shutdown(&self, within: Duration) {
        let webhook = self.webhook.lock().take();
        if let Some(w) = webhook {
            w.shutdown(within).await;
        }
        if let Some(t) = &self.tracing {
            t.flush().await;
        }
    }
}
