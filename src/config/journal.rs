//! The `[journal]` table validated: the Redis URL or a cluster's seed nodes, TLS files, the
//! lease and poll intervals and this replica's name.

use super::{err, paired, ConfigError, JournalConf};

/// The shared journal's validated settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalSettings {
    /// `redis://…` as configured (in cluster mode, the seed nodes separated by commas).
    pub url: String,
    /// Whether the journal is a Redis Cluster (sharded pub/sub, one connection per node).
    pub cluster: bool,
    /// The URLs connected to: the server, or the cluster's seed nodes.
    pub nodes: Vec<String>,
    /// This replica's name.
    pub replica_id: String,
    /// Liveness lease.
    pub lease: std::time::Duration,
    /// Follower poll interval.
    pub poll: std::time::Duration,
    /// How long an append may wait for others to share its round trip (zero: never waits).
    pub flush_delay: std::time::Duration,
    /// TLS (`rediss://`): the CA file (`None`: the system's roots), the client certificate
    /// and key files; `None`: plain `redis://`.
    pub tls: Option<JournalTls>,
}

/// The files of a `rediss://` journal's TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalTls {
    /// CA certificates (PEM) that verify Redis; `None`: the system's roots.
    pub ca: Option<std::path::PathBuf>,
    /// A client certificate chain (PEM) and its key (PEM), for a Redis that asks for one.
    pub client: Option<(std::path::PathBuf, std::path::PathBuf)>,
}

/// The `[journal]` table checked: `None` when no URL is set.
pub(super) fn journal(j: &JournalConf) -> Result<Option<JournalSettings>, ConfigError> {
    let url = j.url.trim();
    if url.is_empty() {
        return Ok(None);
    }
    let nodes: Vec<String> = url.split(',').map(|u| u.trim().to_string()).collect();
    for node in &nodes {
        redis_url(node, j.cluster)?;
    }
    let tls = nodes[0].starts_with("rediss://");
    if nodes.iter().any(|n| n.starts_with("rediss://") != tls) {
        return Err(err(
            "journal.url",
            "every seed node speaks TLS (rediss://) or none does (redis://)",
        ));
    }
    paired(
        ("journal.cert", j.cert.is_some()),
        ("journal.key", j.key.is_some()),
        "a client certificate needs both cert and key",
    )?;
    if !tls && (j.ca.is_some() || j.cert.is_some()) {
        let key = if j.ca.is_some() {
            "journal.ca"
        } else {
            "journal.cert"
        };
        return Err(err(key, "is for a TLS journal (rediss://)"));
    }
    let tls = tls.then(|| JournalTls {
        ca: j.ca.clone(),
        client: j.cert.clone().zip(j.key.clone()),
    });
    if nodes.len() > 1 && !j.cluster {
        return Err(err(
            "journal.url",
            "several URLs name a Redis Cluster's seed nodes: set journal.cluster = true",
        ));
    }
    if j.lease.0 < std::time::Duration::from_millis(100) {
        return Err(err("journal.lease", "must be at least 100ms"));
    }
    if j.poll.0.is_zero() || j.poll.0 > std::time::Duration::from_secs(1) {
        return Err(err("journal.poll", "must be more than 0s and at most 1s"));
    }
    if j.flush_delay.0 > std::time::Duration::from_millis(10) {
        return Err(err("journal.flush_delay", "must be at most 10ms"));
    }
    let replica_id = match j.replica_id.trim() {
        "" => default_replica_id(),
        r if r.len() > 64 || r.contains(['{', '}', ' ']) => {
            return Err(err(
                "journal.replica_id",
                "must be at most 64 characters, without spaces or braces",
            ))
        }
        r => r.to_string(),
    };
    Ok(Some(JournalSettings {
        url: url.to_string(),
        cluster: j.cluster,
        nodes,
        replica_id,
        lease: j.lease.0,
        poll: j.poll.0,
        flush_delay: j.flush_delay.0,
        tls,
    }))
}

/// Checks one Redis URL: `redis://` or `rediss://` (TLS), and in a cluster no database but 0.
fn redis_url(url: &str, cluster: bool) -> Result<(), ConfigError> {
    let Some(rest) = url
        .strip_prefix("redis://")
        .or_else(|| url.strip_prefix("rediss://"))
        .filter(|r| !r.is_empty())
    else {
        return Err(err(
            "journal.url",
            format!("{url:?} must be redis://HOST:PORT[/DB] or rediss://HOST:PORT[/DB]"),
        ));
    };
    let after_host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    let db = after_host
        .split_once('/')
        .map_or("", |(_, p)| p.split('?').next().unwrap_or(""));
    if cluster && !matches!(db, "" | "0") {
        return Err(err(
            "journal.url",
            format!("{url:?}: a Redis Cluster has database 0 only"),
        ));
    }
    Ok(())
}

/// `hostname-pid-random`: unique per process even when two share a host and a pid namespace.
fn default_replica_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().replace(['{', '}', ' '], ""))
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "tether".into());
    format!(
        "{host}-{}-{:06x}",
        std::process::id(),
        rand::random::<u32>() & 0xff_ffff
    )
}
