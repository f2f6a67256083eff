//! The journal's connections to Redis, one server or a Redis Cluster, behind one
//! [`ConnectionLike`] ([`Conn`]), so the scripts, the write pipeline, the follower and the
//! reaper run unchanged on both.
//!
//! - One server: redis-rs's reconnecting `ConnectionManager`; doorbells and control messages
//!   use plain pub/sub (`PUBLISH`/`SUBSCRIBE`), resubscribed after a reconnect.
//! - A Redis Cluster: redis-rs's cluster connection (`cluster-async`: one multiplexed connection
//!   per node, commands routed by slot, MOVED/ASK followed, topology refreshed), made on first
//!   use so start never waits for Redis. Pub/sub is sharded (`SPUBLISH`/`SSUBSCRIBE` on the
//!   channel's slot, which every doorbell shares with its run's keys), resubscribed after a
//!   reconnect or a topology change. A pipeline whose commands span several slots (the write
//!   pipeline's calls for many chats) is sent as one pipeline per slot, all at once, since
//!   redis-rs sends a cluster pipeline to one node only.
//!
//! With `rediss://` URLs every connection speaks TLS (redis-rs over rustls), verified against the
//! system's roots or `[journal] ca`, with the client certificate when one is configured.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{AsyncPushSender, ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::Slot;
use redis::{
    Arg, ClientTlsConfig, Cmd, IntoConnectionInfo, Pipeline, ProtocolVersion, RedisFuture,
    RedisResult, TlsCertificates, Value,
};
use tokio::sync::OnceCell;

use super::CALL_TIMEOUT;
use crate::config;

/// How long connecting to one node may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Retries of a failed call inside the client (the caller's [`CALL_TIMEOUT`] bounds them).
const RETRIES: u32 = 2;
/// The longest wait between two retries.
const MAX_RETRY_WAIT: Duration = Duration::from_millis(500);

/// A connection to the journal's Redis (cheap to clone; clones share it).
#[derive(Clone)]
pub(crate) enum Conn {
    /// One server.
    Server(ConnectionManager),
    /// A Redis Cluster.
    Cluster(LazyCluster),
}

/// A cluster connection made on first use (and again on the next use while it cannot be made).
#[derive(Clone)]
pub(crate) struct LazyCluster(Arc<(ClusterClient, OnceCell<ClusterConnection>)>);

impl LazyCluster {
    fn new(client: ClusterClient) -> Self {
        LazyCluster(Arc::new((client, OnceCell::new())))
    }

    async fn get(&self) -> RedisResult<ClusterConnection> {
        let (client, conn) = &*self.0;
        conn.get_or_try_init(|| client.get_async_connection())
            .await
            .cloned()
    }
}

impl Conn {
    /// The command connection to `cfg`'s Redis (multiplexed; never used for a blocking command).
    pub(crate) fn commands(cfg: &config::JournalSettings) -> RedisResult<Conn> {
        if cfg.cluster {
            return Ok(Conn::Cluster(LazyCluster::new(
                cluster_builder(cfg)?.build()?,
            )));
        }
        let client = client(cfg, cfg.url.as_str())?;
        Ok(Conn::Server(ConnectionManager::new_lazy_with_config(
            client,
            manager_config(),
        )?))
    }

    /// The push connection: RESP3, every message of the channels it subscribes handed to `push`
    /// where it arrives, subscriptions renewed after a reconnect.
    pub(crate) fn pushes(
        cfg: &config::JournalSettings,
        push: impl AsyncPushSender,
    ) -> RedisResult<Conn> {
        if cfg.cluster {
            let client = cluster_builder(cfg)?
                .use_protocol(ProtocolVersion::RESP3)
                .push_sender(push)
                .build()?;
            return Ok(Conn::Cluster(LazyCluster::new(client)));
        }
        let info = redis::Client::open(cfg.url.as_str())?
            .get_connection_info()
            .clone();
        let resp3 = info.clone().set_redis_settings(
            info.redis_settings()
                .clone()
                .set_protocol(ProtocolVersion::RESP3),
        );
        Ok(Conn::Server(ConnectionManager::new_lazy_with_config(
            client(cfg, resp3)?,
            manager_config()
                .set_push_sender(push)
                .set_automatic_resubscription(),
        )?))
    }

    /// The publish command of this topology: `PUBLISH`, or `SPUBLISH` (sharded) in a cluster.
    /// The scripts take it as an argument, so one script text serves both.
    pub(crate) fn publish_command(&self) -> &'static str {
        match self {
            Conn::Server(_) => "PUBLISH",
            Conn::Cluster(_) => "SPUBLISH",
        }
    }

    /// Subscribes this push connection to `channel` (sharded in a cluster).
    pub(crate) async fn subscribe(&mut self, channel: &str) -> RedisResult<()> {
        match self {
            Conn::Server(m) => m.subscribe(channel).await,
            Conn::Cluster(c) => c.get().await?.ssubscribe(channel).await,
        }
    }

    /// Unsubscribes this push connection from `channel`.
    pub(crate) async fn unsubscribe(&mut self, channel: &str) -> RedisResult<()> {
        match self {
            Conn::Server(m) => m.unsubscribe(channel).await,
            Conn::Cluster(c) => c.get().await?.sunsubscribe(channel).await,
        }
    }

    /// Publishes `msg` on `channel` with this topology's publish command.
    pub(crate) async fn publish(&mut self, channel: &str, msg: &str) -> RedisResult<i64> {
        redis::cmd(self.publish_command())
            .arg(channel)
            .arg(msg)
            .query_async(self)
            .await
    }
}

/// Sends `p` on a command connection to `cfg`'s Redis made as the journal makes its own (on a
/// cluster, split by slot as the write pipeline is) with `ignore_errors`, as the write pipeline
/// sends, and returns each command's answer in `p`'s order, a failed command's error at its
/// place. For tests against a real Redis; the journal itself never calls it.
pub async fn pipeline_answers(
    cfg: &config::JournalSettings,
    p: &Pipeline,
) -> RedisResult<Vec<RedisResult<Value>>> {
    let mut p = p.clone();
    p.ignore_errors();
    p.query_async(&mut Conn::commands(cfg)?).await
}

/// The connection manager's settings: a call fails after [`CALL_TIMEOUT`], connecting after
/// [`CONNECT_TIMEOUT`].
fn manager_config() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_response_timeout(Some(CALL_TIMEOUT))
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_number_of_retries(RETRIES as usize)
        .set_max_delay(MAX_RETRY_WAIT)
}

/// The cluster client's settings, the same as [`manager_config`]'s, on the seed nodes (over TLS
/// with the configured certificates for `rediss://` seeds).
fn cluster_builder(cfg: &config::JournalSettings) -> RedisResult<ClusterClientBuilder> {
    let builder = ClusterClientBuilder::new(cfg.nodes.iter().map(String::as_str))
        .connection_timeout(CONNECT_TIMEOUT)
        .response_timeout(CALL_TIMEOUT)
        .retries(RETRIES)
        .max_retry_wait(MAX_RETRY_WAIT.as_millis() as u64);
    Ok(match &cfg.tls {
        Some(tls) => builder.certs(certificates(tls)?),
        None => builder,
    })
}

/// A client of one server: over TLS with the configured certificates for `rediss://`.
fn client(
    cfg: &config::JournalSettings,
    info: impl IntoConnectionInfo,
) -> RedisResult<redis::Client> {
    match &cfg.tls {
        Some(tls) => redis::Client::build_with_tls(info, certificates(tls)?),
        None => redis::Client::open(info),
    }
}

/// The PEM files of a TLS journal, read.
fn certificates(tls: &config::JournalTls) -> RedisResult<TlsCertificates> {
    let read = |p: &std::path::Path| {
        std::fs::read(p).map_err(|e| {
            redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "cannot read a journal TLS file",
                format!("{}: {e}", p.display()),
            ))
        })
    };
    Ok(TlsCertificates {
        root_cert: tls.ca.as_deref().map(read).transpose()?,
        client_tls: match &tls.client {
            Some((cert, key)) => Some(ClientTlsConfig {
                client_cert: read(cert)?,
                client_key: read(key)?,
            }),
            None => None,
        },
    })
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Server(m) => m.req_packed_command(cmd),
            Conn::Cluster(c) => Box::pin(async move {
                let mut conn = c.get().await?;
                conn.req_packed_command(cmd).await
            }),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Server(m) => m.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => Box::pin(async move {
                let conn = c.get().await?;
                by_slot(conn, pipeline, offset, count).await
            }),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Server(m) => m.get_db(),
            Conn::Cluster(_) => 0,
        }
    }
}

/// The slot of a command the journal sends: `EVAL`/`EVALSHA` name their first key after the
/// script and the key count; the other commands with a key (or a shard channel) take it first.
/// `None` for a command without one.
fn slot(cmd: &Cmd) -> Option<Slot> {
    let mut args = cmd.args_iter().map(|a| match a {
        Arg::Simple(b) => b,
        _ => &b""[..],
    });
    let name = args.next()?;
    let is = |n: &str| name.eq_ignore_ascii_case(n.as_bytes());
    let key = if is("EVALSHA") || is("EVAL") {
        args.nth(1).filter(|n| *n != b"0")?;
        args.next()?
    } else if is("SCRIPT") || is("PING") || is("INFO") || is("CLUSTER") {
        return None;
    } else {
        args.next()?
    };
    Some(Slot::for_key(key))
}

/// Sends `p` on a cluster: as it is when its keyed commands share one slot (or it is a
/// transaction, which must), else one pipeline per slot and each keyless command alone, all at
/// once, with the answers put back in the pipeline's order.
async fn by_slot(
    mut conn: ClusterConnection,
    p: &Pipeline,
    offset: usize,
    count: usize,
) -> RedisResult<Vec<Value>> {
    let slots: Vec<Option<Slot>> = p.cmd_iter().map(slot).collect();
    let first = slots.iter().flatten().next();
    if p.is_transaction() || slots.iter().flatten().all(|s| Some(s) == first) {
        return conn.req_packed_commands(p, offset, count).await;
    }
    // One part per slot, and one per keyless command: the commands and their indexes in `p`.
    let mut parts: Vec<(Pipeline, Vec<usize>)> = Vec::new();
    let mut by: HashMap<Slot, usize> = HashMap::new();
    for (i, (cmd, s)) in p.cmd_iter().zip(&slots).enumerate() {
        let at = match s {
            Some(s) => *by.entry(*s).or_insert(parts.len()),
            None => parts.len(),
        };
        if at == parts.len() {
            parts.push((Pipeline::new(), Vec::new()));
        }
        parts[at].0.add_command(cmd.clone());
        parts[at].1.push(i);
    }
    let answers = futures_util::future::join_all(parts.iter().map(|(part, _)| {
        let mut conn = conn.clone();
        async move {
            match part.cmd_iter().next() {
                Some(cmd) if part.len() == 1 => conn.req_packed_command(cmd).await.map(|v| vec![v]),
                _ => conn.req_packed_commands(part, 0, part.len()).await,
            }
        }
    }))
    .await;
    let mut out = vec![Value::Nil; p.len()];
    for ((_, at), answer) in parts.iter().zip(answers) {
        let answer = answer?;
        if answer.len() != at.len() {
            return Err((redis::ErrorKind::Io, "cluster pipeline: short answer").into());
        }
        for (i, v) in at.iter().zip(answer) {
            out[*i] = v;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_commands_slot_is_its_first_keys_and_scripts_name_theirs_after_the_count() {
        let tagged = Slot::for_key("tj:{abc}:chat");
        let eval = redis::cmd("EVALSHA")
            .arg("0123")
            .arg(2)
            .arg("tj:{abc}:r:1:m")
            .arg("tj:{abc}:r:1:s")
            .arg("lease")
            .clone();
        assert_eq!(slot(&eval), Some(tagged));
        assert_eq!(slot(redis::cmd("EVALSHA").arg("0123").arg(0)), None);
        assert_eq!(
            slot(redis::cmd("SADD").arg("tj:{abc}:x").arg("m")),
            Some(tagged)
        );
        assert_eq!(
            slot(redis::cmd("SPUBLISH").arg("tj:{abc}:n").arg("m")),
            Some(tagged)
        );
        assert_eq!(slot(redis::cmd("SCRIPT").arg("LOAD").arg("return 1")), None);
        assert_ne!(slot(redis::cmd("GET").arg("tj:leases")), Some(tagged));
    }
}
