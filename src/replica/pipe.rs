//! The per-process write pipeline: every run's append lane ([`lane`]) and every writer's
//! other script calls ([`Inv`]) go to one flusher task, which sends all the calls pending at that
//! moment as ONE pipelined round trip (`EVALSHA` each, a `SCRIPT LOAD` and a resend when Redis
//! lost the scripts). Calls queue while up to [`IN_FLIGHT`] round trips are on the wire, and a
//! round trip of few calls that would follow the one before within `[journal] flush_delay`
//! waits out the rest of it ([`gather`]): Redis's cost is mostly per round trip, so a busy
//! replica sends few large ones, and an idle one sends a lone call at once. A lane has one call
//! in flight and its answer is settled here (no hop back through the run's writer task); a
//! writer's call is answered to the writer. An append is two commands (`XADD` + `PUBLISH`, no
//! script); fencing is by the stream ids and, on the rare path, in the scripts.

mod gather;
pub(super) mod lane;

use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, Pipeline, RedisResult, Script, Value};
use tokio::sync::{mpsc, oneshot};

use super::{scripts, Conn, Health, JournalMetrics};
use gather::Pace;
use lane::{Lane, Sent};

/// Pipelined round trips on the wire at once.
const IN_FLIGHT: usize = 4;

/// A script call for the pipeline: an `EVALSHA` built in place (no argument vectors).
pub(crate) struct Inv {
    script: &'static Script,
    cmd: Cmd,
}

impl Inv {
    /// A call of `script` on `keys` (its arguments follow with [`Self::arg`]).
    pub(crate) fn new(script: &'static Script, keys: &[&str]) -> Self {
        let mut cmd = Cmd::with_capacity(keys.len() + 16, 256);
        cmd.arg("EVALSHA").arg(script.get_hash()).arg(keys.len());
        for k in keys {
            cmd.arg(*k);
        }
        Inv { script, cmd }
    }

    /// Adds an argument (`ARGV[i]`).
    pub(crate) fn arg<T: redis::ToRedisArgs>(mut self, arg: T) -> Self {
        self.cmd.arg(arg);
        self
    }
}

pub(crate) struct Call {
    script: &'static Script,
    cmd: Cmd,
    tx: oneshot::Sender<RedisResult<Value>>,
}

/// What the flusher sends: a writer's call, or a lane with batches to append.
pub(crate) enum Work {
    Call(Call),
    Lane(Arc<Lane>),
}

/// The sending side of the pipeline.
pub(crate) struct Pipe(mpsc::UnboundedSender<Work>);

impl Pipe {
    /// Starts the flusher on `conn`; a round trip of fewer than [`gather::FULL`] calls waits
    /// until `delay` after the one before.
    pub(crate) fn start(
        conn: Conn,
        delay: Duration,
        jm: JournalMetrics,
        health: Arc<Health>,
    ) -> Pipe {
        let (tx, rx) = mpsc::unbounded_channel();
        let pace = Pace {
            in_flight: IN_FLIGHT,
            delay,
        };
        tokio::spawn(flusher(conn, rx, pace, jm, health));
        Pipe(tx)
    }

    /// The queue lanes hand themselves to.
    pub(crate) fn sender(&self) -> mpsc::UnboundedSender<Work> {
        self.0.clone()
    }

    /// Queues `inv` for the next round trip and waits for its answer (the caller times out).
    pub(crate) async fn call(&self, inv: Inv) -> RedisResult<Value> {
        let (tx, rx) = oneshot::channel();
        let call = Call {
            script: inv.script,
            cmd: inv.cmd,
            tx,
        };
        if self.0.send(Work::Call(call)).is_err() {
            return Err((redis::ErrorKind::Io, "journal pipeline stopped").into());
        }
        rx.await
            .unwrap_or_else(|_| Err((redis::ErrorKind::Io, "journal pipeline dropped").into()))
    }
}

/// Sends the calls of `rx` as [`gather`] batches them, each batch one pipelined round trip.
async fn flusher(
    conn: Conn,
    rx: mpsc::UnboundedReceiver<Work>,
    pace: Pace,
    jm: JournalMetrics,
    health: Arc<Health>,
) {
    gather::gather(rx, pace, |batch: Vec<Work>| {
        jm.flush_calls.observe(batch.len() as f64);
        flush(conn.clone(), batch, jm.clone(), health.clone())
    })
    .await;
}

/// Where an answer goes.
enum Answer {
    Call(oneshot::Sender<RedisResult<Value>>),
    Lane(Arc<Lane>, Sent),
}

/// One caller's commands in a flush: the script a `NOSCRIPT` answer loads (none for a lane's
/// append, which runs no script), where the answers go, and how many commands it sent.
struct Out {
    script: Option<&'static Script>,
    to: Answer,
    n: usize,
}

impl Out {
    fn reply(self, mut a: Vec<RedisResult<Value>>, jm: &JournalMetrics, health: &Health) {
        match self.to {
            Answer::Call(tx) => drop(tx.send(a.pop().unwrap_or_else(|| Err(short())))),
            Answer::Lane(lane, sent) => lane.answered(sent, a, jm, health),
        }
    }
}

fn short() -> redis::RedisError {
    (redis::ErrorKind::Io, "journal pipeline: short answer").into()
}

/// Sends `batch` as one pipeline; script calls whose script Redis does not know are sent again
/// after loading it.
async fn flush(mut conn: Conn, batch: Vec<Work>, jm: JournalMetrics, health: Arc<Health>) {
    let (pipe, outs) = build(batch);
    if outs.is_empty() {
        return;
    }
    let answers: RedisResult<Vec<RedisResult<Value>>> = pipe.query_async(&mut conn).await;
    let total: usize = outs.iter().map(|o| o.n).sum();
    let answers = match answers {
        Ok(a) if a.len() == total => a,
        other => {
            let e = other.err().unwrap_or_else(short);
            for o in outs {
                let errs = (0..o.n).map(|_| Err(e.clone())).collect();
                o.reply(errs, &jm, &health);
            }
            return;
        }
    };
    let again = settle(&pipe, outs, answers, &jm, &health);
    // Each script is loaded once, then its calls are sent again in order.
    let mut loaded: Vec<&str> = Vec::new();
    for (script, o, cmd) in again {
        let load = match loaded.contains(&script.get_hash()) {
            true => Ok(()),
            false => script.load_async(&mut conn).await.map(drop),
        };
        loaded.push(script.get_hash());
        let r = match load {
            Ok(()) => cmd.query_async(&mut conn).await,
            Err(e) => Err(e),
        };
        o.reply(vec![r], &jm, &health);
    }
}

/// The pipeline of `batch`'s commands, and where each caller's answers go.
fn build(batch: Vec<Work>) -> (Pipeline, Vec<Out>) {
    let mut pipe = Pipeline::with_capacity(batch.len() * 2);
    pipe.ignore_errors();
    let mut outs: Vec<Out> = Vec::with_capacity(batch.len());
    for w in batch {
        match w {
            Work::Call(c) => {
                pipe.add_command(c.cmd);
                let (script, to) = (Some(c.script), Answer::Call(c.tx));
                outs.push(Out { script, to, n: 1 });
            }
            Work::Lane(lane) => {
                if let Some((cmds, sent)) = lane.take() {
                    let n = cmds.len();
                    let script = (n == 1).then_some(&*scripts::REFUSED);
                    for c in cmds {
                        pipe.add_command(c);
                    }
                    outs.push(Out {
                        script,
                        to: Answer::Lane(lane, sent),
                        n,
                    });
                }
            }
        }
    }
    (pipe, outs)
}

/// Hands each caller its answers; returns the script calls Redis did not know the script of,
/// to send again after loading it.
fn settle(
    pipe: &Pipeline,
    outs: Vec<Out>,
    answers: Vec<RedisResult<Value>>,
    jm: &JournalMetrics,
    health: &Health,
) -> Vec<(&'static Script, Out, Cmd)> {
    let mut answers = answers.into_iter();
    let mut cmds = pipe.cmd_iter();
    let mut again = Vec::new();
    let noscript = |a: &RedisResult<Value>| matches!(a, Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript));
    for o in outs {
        let a: Vec<_> = answers.by_ref().take(o.n).collect();
        let cmd = cmds.by_ref().take(o.n).last();
        match (o.script, cmd) {
            (Some(script), Some(cmd)) if a.len() == 1 && a.iter().all(noscript) => {
                again.push((script, o, cmd.clone()))
            }
            _ => o.reply(a, jm, health),
        }
    }
    again
}
