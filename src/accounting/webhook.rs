//! The run records' webhook (`[accounting] webhook_url`): each ended run's record POSTed once,
//! as JSON, with the run id in the `Idempotency-Key` header so a receiver can drop the copy a
//! retry sends after a lost answer.
//!
//! [`Webhook::send`] never blocks: it puts the record on a bounded queue (full: the record is
//! dropped and counted, `tether_webhook_records_dropped_total{reason="queue_full"}`). One task
//! sends the queue in order, retrying each record with exponential backoff (jittered, capped)
//! across a receiver outage until the receiver accepts it (2xx) or refuses it for good (a 4xx
//! other than 408 and 429: dropped, `reason="rejected"`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, StatusCode};
use prometheus::IntCounter;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::client::{client, ClientError};
use super::record::RunRecord;
use crate::config::WebhookSettings;
use crate::metrics::{Counters, Metrics, WebhookDrop};

/// The header carrying the run id.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// A failed attempt is logged at its first and then every this many attempts of one record.
const LOG_EVERY: u32 = 10;

/// How the webhook sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookOptions {
    /// The receiver's URL.
    pub url: String,
    /// Records queued at most.
    pub queue: usize,
    /// One POST's timeout (connect included).
    pub timeout: Duration,
    /// The wait after a record's first failed attempt; it doubles after each failure.
    pub backoff_min: Duration,
    /// The longest wait between two attempts (also the cap of a `Retry-After`).
    pub backoff_max: Duration,
}

impl WebhookOptions {
    /// The options of the `[accounting]` webhook: backoff from 250 ms to 30 s.
    pub fn new(s: &WebhookSettings) -> WebhookOptions {
        WebhookOptions {
            url: s.url.clone(),
            queue: s.queue,
            timeout: s.timeout,
            backoff_min: Duration::from_millis(250),
            backoff_max: Duration::from_secs(30),
        }
    }
}

/// One record on its way.
struct Outgoing {
    key: HeaderValue,
    body: Bytes,
}

/// How one record's delivery ended.
enum Delivery {
    Sent,
    Rejected,
}

/// The webhook: a bounded queue and the task that sends it.
#[derive(Debug)]
pub struct Webhook {
    tx: mpsc::Sender<Outgoing>,
    /// Records accepted and not yet delivered or refused.
    pending: Arc<AtomicUsize>,
    dropped: Counters<WebhookDrop>,
    worker: JoinHandle<()>,
}

impl std::fmt::Debug for Outgoing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outgoing").field("key", &self.key).finish()
    }
}

impl Webhook {
    /// Starts the sending task on the current Tokio runtime.
    pub fn start(opts: WebhookOptions, metrics: &Metrics) -> Result<Webhook, ClientError> {
        let http = client(opts.timeout)?;
        let (tx, rx) = mpsc::channel(opts.queue.max(1));
        let pending = Arc::new(AtomicUsize::new(0));
        let sender = Sender {
            http,
            opts,
            sent: metrics.webhook_sent.clone(),
            retries: metrics.webhook_retries.clone(),
            dropped: metrics.webhook_dropped.clone(),
            pending: pending.clone(),
        };
        let worker = tokio::spawn(sender.run(rx));
        Ok(Webhook {
            tx,
            pending,
            dropped: metrics.webhook_dropped.clone(),
            worker,
        })
    }

    /// Queues `record` for the receiver; never waits. Returns false when the queue was full
    /// (the record is dropped and counted).
    pub fn send(&self, record: &RunRecord) -> bool {
        let out = Outgoing {
            key: key(record.run_id.as_str()),
            body: Bytes::from(record.to_json()),
        };
        self.pending.fetch_add(1, Ordering::SeqCst);
        match self.tx.try_send(out) {
            Ok(()) => true,
            Err(_) => {
                self.pending.fetch_sub(1, Ordering::SeqCst);
                self.dropped.inc(WebhookDrop::QueueFull);
                log::warn!(
                    "webhook: queue full, record of run {} dropped",
                    record.run_id
                );
                false
            }
        }
    }

    /// Records queued or being sent.
    pub fn pending(&self) -> usize {
        self.pending.load(Ordering::SeqCst)
    }

    /// Stops taking records and gives the queue up to `within` to go out; what is left then
    /// is dropped and counted (`reason="shutdown"`). Returns how many records that was.
    pub async fn shutdown(self, within: Duration) -> usize {
        let Webhook {
            tx,
            pending,
            dropped,
            worker,
        } = self;
        drop(tx);
        let abort = worker.abort_handle();
        if tokio::time::timeout(within, worker).await.is_err() {
            abort.abort();
        }
        let left = pending.swap(0, Ordering::SeqCst);
        if left > 0 {
            dropped.inc_by(WebhookDrop::Shutdown, left as u64);
            log::warn!("webhook: {left} run records not delivered before shutdown");
        }
        left
    }
}

/// The run id as a header value; percent-encoded if it has bytes a header may not carry.
fn key(run_id: &str) -> HeaderValue {
    HeaderValue::from_str(run_id).unwrap_or_else(|_| {
        let enc = percent_encoding::utf8_percent_encode(run_id, percent_encoding::NON_ALPHANUMERIC);
        HeaderValue::from_str(&enc.to_string()).unwrap_or(HeaderValue::from_static("-"))
    })
}

/// The sending task's state.
struct Sender {
    http: reqwest::Client,
    opts: WebhookOptions,
    sent: IntCounter,
    retries: IntCounter,
    dropped: Counters<WebhookDrop>,
    pending: Arc<AtomicUsize>,
}

impl Sender {
    /// Sends each queued record in turn until the queue is closed and empty.
    async fn run(self, mut rx: mpsc::Receiver<Outgoing>) {
        while let Some(out) = rx.recv().await {
            match self.deliver(&out).await {
                Delivery::Sent => self.sent.inc(),
                Delivery::Rejected => self.dropped.inc(WebhookDrop::Rejected),
            }
            self.pending.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// POSTs one record until the receiver accepts or refuses it for good.
    async fn deliver(&self, out: &Outgoing) -> Delivery {
        let mut backoff = self.opts.backoff_min;
        for attempt in 1u32.. {
            let request = self
                .http
                .post(&self.opts.url)
                .header(http::header::CONTENT_TYPE, "application/json")
                .header(IDEMPOTENCY_KEY, out.key.clone())
                .body(out.body.clone());
            let (why, retry_after) = match request.send().await {
                Ok(r) if r.status().is_success() => return Delivery::Sent,
                Ok(r) if refused(r.status()) => {
                    log::warn!(
                        "webhook: {} refused the record of run {:?} ({}); dropped",
                        self.opts.url,
                        out.key,
                        r.status()
                    );
                    return Delivery::Rejected;
                }
                Ok(r) => (r.status().to_string(), retry_after(&r)),
                Err(e) if e.is_builder() => {
                    log::warn!("webhook: cannot send to {}: {e}; dropped", self.opts.url);
                    return Delivery::Rejected;
                }
                Err(e) => (e.to_string(), None),
            };
            self.retries.inc();
            if attempt == 1 || attempt % LOG_EVERY == 0 {
                log::warn!(
                    "webhook: attempt {attempt} to send the record of run {:?} to {} failed \
                     ({why}); retrying",
                    out.key,
                    self.opts.url
                );
            }
            let wait = retry_after.unwrap_or_else(|| jitter(backoff));
            tokio::time::sleep(wait.min(self.opts.backoff_max)).await;
            backoff = backoff.saturating_mul(2).min(self.opts.backoff_max);
        }
        Delivery::Rejected
    }
}

/// Whether `status` refuses a record for good: a 4xx other than 408 (timeout) and 429 (too
/// many requests).
fn refused(status: StatusCode) -> bool {
    status.is_client_error()
        && status != StatusCode::REQUEST_TIMEOUT
        && status != StatusCode::TOO_MANY_REQUESTS
}

/// A `Retry-After` in seconds, when the answer has one.
fn retry_after(r: &reqwest::Response) -> Option<Duration> {
    let secs: u64 = r
        .headers()
        .get(http::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_secs(secs))
}

/// A wait between half of `d` and `d`, so senders that failed together do not retry together.
fn jitter(d: Duration) -> Duration {
    d.mul_f64(rand::random::<f64>().mul_add(0.5, 0.5))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_4xx_other_than_408_and_429_refuses_a_record_for_good() {
        assert!(refused(StatusCode::BAD_REQUEST));
        assert!(refused(StatusCode::UNPROCESSABLE_ENTITY));
        assert!(!refused(StatusCode::REQUEST_TIMEOUT));
        assert!(!refused(StatusCode::TOO_MANY_REQUESTS));
        assert!(!refused(StatusCode::SERVICE_UNAVAILABLE));
        assert!(!refused(StatusCode::OK));
    }

    #[test]
    fn the_key_is_the_run_id_or_its_percent_encoding() {
        assert_eq!(key("run-1"), "run-1");
        assert_eq!(key("r\u{e9}\n"), "r%C3%A9%0A");
    }

    #[test]
    fn jitter_waits_between_half_and_all_of_the_backoff() {
        let d = Duration::from_millis(1000);
        for _ in 0..100 {
            let j = jitter(d);
            assert!(j >= d / 2 && j <= d, "{j:?}");
        }
    }
}
