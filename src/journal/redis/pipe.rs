//! The per-process write pipeline: every run's writer hands its script call ([`Inv`]) to one
//! flusher task, which sends all the calls pending at that moment as ONE pipelined round trip
//! (`EVALSHA` each, a `SCRIPT LOAD` and a resend when Redis lost the scripts). No timer: calls
//! queue while up to [`IN_FLIGHT`] flushes are on the wire, so an idle replica adds no delay and
//! a busy one sends few large writes. Each writer still has one call in flight, so a run's
//! calls stay in order; fencing and explicit ids live in the scripts, unchanged.

use std::task::Poll;

use redis::{Cmd, Pipeline, RedisResult, Script, ToRedisArgs, Value};
use tokio::sync::{mpsc, oneshot};

use super::{Conn, JournalMetrics};

/// Pipelined round trips on the wire at once.
const IN_FLIGHT: usize = 4;
/// Calls per round trip at most.
const MAX_CALLS: usize = 512;

/// A script call for the pipeline (the keys and arguments of an `EVALSHA`).
pub(crate) struct Inv {
    script: &'static Script,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
}

impl Inv {
    /// A call of `script`.
    pub(crate) fn new(script: &'static Script) -> Self {
        Inv {
            script,
            keys: Vec::with_capacity(6),
            args: Vec::with_capacity(14),
        }
    }

    /// Adds a key (`KEYS[i]`).
    pub(crate) fn key<T: ToRedisArgs>(&mut self, key: T) -> &mut Self {
        key.write_redis_args(&mut self.keys);
        self
    }

    /// Adds an argument (`ARGV[i]`).
    pub(crate) fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Self {
        arg.write_redis_args(&mut self.args);
        self
    }

    fn cmd(&self) -> Cmd {
        let mut c = redis::cmd("EVALSHA");
        c.arg(self.script.get_hash())
            .arg(self.keys.len())
            .arg(&self.keys)
            .arg(&self.args);
        c
    }
}

struct Call {
    script: &'static Script,
    cmd: Cmd,
    tx: oneshot::Sender<RedisResult<Value>>,
}

/// The sending side of the pipeline.
pub(crate) struct Pipe(mpsc::UnboundedSender<Call>);

impl Pipe {
    /// Starts the flusher on `conn`.
    pub(crate) fn start(conn: Conn, jm: JournalMetrics) -> Pipe {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(flusher(conn, rx, jm));
        Pipe(tx)
    }

    /// Queues `inv` for the next round trip and waits for its answer (the caller times out).
    pub(crate) async fn call(&self, inv: &Inv) -> RedisResult<Value> {
        let (tx, rx) = oneshot::channel();
        let call = Call {
            script: inv.script,
            cmd: inv.cmd(),
            tx,
        };
        if self.0.send(call).is_err() {
            return Err((redis::ErrorKind::Io, "journal pipeline stopped").into());
        }
        rx.await
            .unwrap_or_else(|_| Err((redis::ErrorKind::Io, "journal pipeline dropped").into()))
    }
}

type Flush = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Gathers the pending calls into flushes and drives up to [`IN_FLIGHT`] of them itself (no
/// task per flush: one scheduling hop less on the way back to the writers).
async fn flusher(conn: Conn, mut rx: mpsc::UnboundedReceiver<Call>, jm: JournalMetrics) {
    let mut flights: Vec<Flush> = Vec::with_capacity(IN_FLIGHT);
    loop {
        let first = std::future::poll_fn(|cx| {
            flights.retain_mut(|f| f.as_mut().poll(cx).is_pending());
            if flights.len() < IN_FLIGHT {
                if let Poll::Ready(c) = rx.poll_recv(cx) {
                    return Poll::Ready(c);
                }
            }
            Poll::Pending
        })
        .await;
        let Some(first) = first else { break };
        let mut batch = vec![first];
        while batch.len() < MAX_CALLS {
            match rx.try_recv() {
                Ok(c) => batch.push(c),
                Err(_) => break,
            }
        }
        jm.flush_calls.observe(batch.len() as f64);
        flights.push(Box::pin(flush(conn.clone(), batch)));
    }
    // The senders are gone: let the flushes on the wire answer their writers.
    for f in flights {
        f.await;
    }
}

/// Sends `batch` as one pipeline; calls whose script Redis does not know are sent again after
/// loading it.
async fn flush(mut conn: Conn, batch: Vec<Call>) {
    let mut pipe = Pipeline::with_capacity(batch.len());
    pipe.ignore_errors();
    for c in &batch {
        pipe.add_command(c.cmd.clone());
    }
    let answers: RedisResult<Vec<RedisResult<Value>>> = pipe.query_async(&mut conn).await;
    let answers = match answers {
        Ok(a) if a.len() == batch.len() => a,
        Ok(_) => {
            let e = || (redis::ErrorKind::Io, "journal pipeline: short answer").into();
            batch.into_iter().for_each(|c| drop(c.tx.send(Err(e()))));
            return;
        }
        Err(e) => {
            for c in batch {
                let _ = c.tx.send(Err(e.clone()));
            }
            return;
        }
    };
    let mut again = Vec::new();
    for (c, a) in batch.into_iter().zip(answers) {
        match a {
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                again.push(c)
            }
            a => drop(c.tx.send(a)),
        }
    }
    for c in again {
        let r = match c.script.load_async(&mut conn).await {
            Ok(_) => c.cmd.query_async(&mut conn).await,
            Err(e) => Err(e),
        };
        let _ = c.tx.send(r);
    }
}
