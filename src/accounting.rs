//! Accounting: every run accounted for. The record of each ended run ([`record`]: usage, watch,
//! outcome, timings), the watch accumulator it is built from ([`watch`]), the webhook that POSTs
//! each record once ([`webhook`]), and the OpenTelemetry trace of each run over OTLP/HTTP
//! ([`trace`]), and the [`ledger`] that holds the webhook and the tracer for the whole sidecar.
//!
//! The token usage itself is read by the pure recorder ([`crate::record::usage`]); this layer
//! turns a run's facts into a record and sends it on, never blocking the run that ends: the
//! webhook and the trace exporter each hold a bounded queue and drop (and count) what does not
//! fit while their receiver is down.

pub mod client;
pub mod ledger;
pub mod record;
pub mod trace;
pub mod watch;
pub mod webhook;

pub use ledger::{Ledger, LedgerError};
pub use record::RunRecord;
pub use trace::{RunSpan, TraceOptions, Tracing};
pub use watch::{Join, Watch, WatchRecord};
pub use webhook::{Webhook, WebhookOptions};
