//! Accounting's senders against in-process receivers: the run records' webhook across a
//! receiver outage (every record arrives, once per idempotency key), its bounded queue, and the
//! OTLP/HTTP trace exporter (the real protobuf decoded).

mod disconnect;
mod journal;
mod logline;
mod otlp;
mod outage;
mod runs;
mod webhook;
