//! The journal's pub/sub side: doorbells (a follower's wake-up, carrying the entry just
//! appended), control messages (a stop asked through another replica) and erasures (an
//! owner erased through another replica's admin API), on the push
//! connection. Plain pub/sub on one server, sharded pub/sub in a cluster (each channel under
//! the hash tag of the keys it belongs to, so a script publishes on its own slot).

use std::sync::Arc;

use bytes::Bytes;
use log::info;
use redis::{PushInfo, PushKind, Value};

use super::{codec, scripts, timed, Bell, Replica, RunKeys};
use crate::state::run::Run;
use crate::vocab::end::EndReason;
use crate::vocab::{RunId, Scope};

impl Replica {
    /// The publish command the scripts use on this topology (`PUBLISH`, or `SPUBLISH` in a
    /// cluster): their last argument.
    pub(crate) fn publish_command(&self) -> &'static str {
        self.bus.publish_command()
    }

    /// This replica's control channel.
    pub(super) fn ctl_channel(id: &str) -> String {
        format!("tj:{{rep:{id}}}:ctl")
    }

    /// Subscribes to `channel` and waits for the acknowledgement; returns its wake-up.
    pub(crate) async fn subscribe(&self, channel: &str) -> redis::RedisResult<Arc<Bell>> {
        let bell = self
            .bells
            .entry(channel.to_string())
            .or_insert_with(|| Arc::new(Bell::default()))
            .clone();
        let mut bus = self.bus.clone();
        timed(bus.subscribe(channel)).await?;
        Ok(bell)
    }

    /// Unsubscribes from `channel`.
    pub(crate) async fn unsubscribe(&self, channel: &str) {
        self.bells.remove(channel);
        let mut bus = self.bus.clone();
        let _ = timed(bus.unsubscribe(channel)).await;
    }

    /// Tells the producing replica of a mirror run to stop it: a durable flag on the run, then
    /// a message on the producer's control channel. Returns false when `run` is not a mirror
    /// here (its own producer handles the stop).
    pub async fn stop_remote(&self, run: &Run, scope: &Scope, reason: EndReason) -> bool {
        if !run.origin().is_mirror() {
            return false;
        }
        self.stop_in_journal(scope, run.id(), reason).await;
        true
    }

    /// Stops run `run` of the chat at `scope` wherever it is produced, as [`Self::stop_remote`]
    /// does; true when the journal had it live.
    pub async fn stop_in_journal(&self, scope: &Scope, run: &RunId, reason: EndReason) -> bool {
        let keys = RunKeys::new(scope, run);
        let mut c = self.conn();
        let r: redis::RedisResult<Vec<String>> = timed(
            scripts::STOP
                .key(&keys.m)
                .arg(reason.as_str())
                .invoke_async(&mut c),
        )
        .await;
        let Ok(v) = r else { return false };
        if v.first().map(String::as_str) != Some("live") {
            return false;
        }
        if let Some(producer) = v.get(1) {
            let msg = codec::encode_stop(&codec::StopRequest {
                run: run.clone(),
                reason,
            });
            let _ = c.publish(&Replica::ctl_channel(producer), &msg).await;
        }
        true
    }
}

/// Routes a push where tether receives it (no channel and dispatcher task of tether's own; on
/// one server redis-rs's connection manager relays each push through one task of its own
/// first, measured at 57–116 µs at p50): a doorbell rings its follower's bell; a control message
/// stops a run produced here. Nothing here waits.
pub(super) fn route(c: &Replica, push: PushInfo) {
    let mut data = push.data.into_iter();
    match push.kind {
        PushKind::Message | PushKind::SMessage => {}
        PushKind::Disconnection => {
            // Wake every follower: it reads the stream (nothing is lost, only delayed).
            c.bells.iter().for_each(|b| b.ring(None));
            return;
        }
        PushKind::SUnsubscribe => {
            // A cluster unsubscribes a shard channel whose slot moved (the client subscribes it
            // again after its topology refresh): its follower reads the stream meanwhile.
            if let Some(Value::BulkString(ch)) = data.next() {
                if let Some(bell) = c.bells.get(String::from_utf8_lossy(&ch).as_ref()) {
                    bell.ring(None);
                }
            }
            return;
        }
        _ => return,
    }
    let (Some(Value::BulkString(ch)), Some(Value::BulkString(msg))) = (data.next(), data.next())
    else {
        return;
    };
    let ch = String::from_utf8_lossy(&ch);
    let msg = Bytes::from(msg);
    if let Some(bell) = c.bells.get(ch.as_ref()) {
        bell.ring(Some(msg.clone()));
    }
    if ch == super::erase::ERASE_CHANNEL {
        c.erased_elsewhere(&msg);
        return;
    }
    if ch.ends_with(":ctl") && ch == Replica::ctl_channel(&c.cfg.replica_id) {
        let stop = codec::decode_stop(&msg);
        if let Some(run) = c.producers.get(&stop.run).and_then(|w| w.upgrade()) {
            info!("run {}: stop requested through another replica", stop.run);
            run.request_stop(stop.reason);
        }
    }
}
