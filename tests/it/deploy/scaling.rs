//! The scale-out files: `deploy/compose.yaml` (two replicas, Redis, nginx), `deploy/nginx.conf`
//! and `deploy/kubernetes-journal.yaml`. Every replica's arguments configure tether with the
//! journal on the Redis the file runs, distinct replica ids and one shared secret; Redis runs
//! with `noeviction` and no persistence; the balancer has no affinity.

use std::collections::BTreeSet;

use yaml_rust2::Yaml;

use crate::deploy::{config_from_args, image_entrypoint, read, seq, yaml_documents};
use crate::support::Config;

fn strings(y: &Yaml) -> Vec<String> {
    seq(y)
        .iter()
        .map(|v| v.as_str().expect("a string argument").to_string())
        .collect()
}

/// Redis's arguments keep the journal's data safe: no eviction, no persistence.
fn assert_journal_redis(args: &[String], file: &str) {
    let pair = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .map(String::as_str)
    };
    assert_eq!(
        pair("--maxmemory-policy"),
        Some("noeviction"),
        "{file}: Redis must not evict the journal's keys"
    );
    assert_eq!(pair("--save"), Some(""), "{file}: no RDB snapshots");
    assert!(
        pair("--maxmemory").is_some(),
        "{file}: Redis needs maxmemory"
    );
}

/// The tether configuration a replica runs with: the image's entrypoint plus `extra`.
fn replica_config(extra: &[String]) -> Config {
    let argv = image_entrypoint();
    let mut args: Vec<&str> = argv[1..].iter().map(String::as_str).collect();
    args.extend(extra.iter().map(String::as_str));
    config_from_args(&args)
}

#[test]
fn compose_runs_two_replicas_on_one_journal_behind_nginx_round_robin() {
    let docs = yaml_documents("deploy/compose.yaml");
    let services = &docs[0]["services"];
    let names: Vec<&str> = services
        .as_hash()
        .expect("services")
        .keys()
        .filter_map(Yaml::as_str)
        .collect();
    assert_journal_redis(&strings(&services["redis"]["command"])[1..], "compose.yaml");

    let replicas: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| n.starts_with("tether"))
        .collect();
    assert!(replicas.len() >= 2, "two replicas at least: {replicas:?}");
    let mut ids = BTreeSet::new();
    let mut secrets = BTreeSet::new();
    for name in &replicas {
        let s = &services[*name];
        let cfg = replica_config(&strings(&s["command"]));
        let j = cfg
            .journal
            .unwrap_or_else(|| panic!("{name} runs without the journal"));
        assert_eq!(j.url, "redis://redis:6379", "{name}: the compose Redis");
        assert!(
            ids.insert(j.replica_id.clone()),
            "{name}: replica ids differ"
        );
        let upstream = cfg.upstream.expect("an upstream");
        assert!(upstream.host == "backend", "{name}: upstream {upstream}");
        let secret = s["environment"]["TETHER_AUTH_SECRET"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: TETHER_AUTH_SECRET"));
        secrets.insert(secret.to_string());
    }
    assert_eq!(secrets.len(), 1, "every replica has the same secret");

    let nginx = &services["nginx"];
    let mounts = strings(&nginx["volumes"]);
    assert!(
        mounts.iter().any(|m| m.starts_with("./nginx.conf:")),
        "nginx runs deploy/nginx.conf: {mounts:?}"
    );
    let conf = read("deploy/nginx.conf");
    // `server host:port;` lines of the upstream block (not the `server {` block).
    let servers: BTreeSet<String> = conf
        .lines()
        .filter_map(|l| l.trim().strip_prefix("server "))
        .filter_map(|s| s.strip_suffix(';'))
        .map(str::to_string)
        .collect();
    let expected: BTreeSet<String> = replicas.iter().map(|r| format!("{r}:8080")).collect();
    assert_eq!(servers, expected, "nginx balances over every replica");
    for directive in ["ip_hash", "hash ", "sticky"] {
        assert!(
            !conf.lines().any(|l| l.trim().starts_with(directive)),
            "nginx.conf: no affinity ({directive})"
        );
    }
    assert!(conf.contains("proxy_pass http://tether;"));
    assert!(
        conf.contains("proxy_buffering off;"),
        "SSE frames pass as they come"
    );
}

fn object<'a>(docs: &'a [Yaml], kind: &str, name: &str) -> &'a Yaml {
    docs.iter()
        .find(|d| d["kind"].as_str() == Some(kind) && d["metadata"]["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("kubernetes-journal.yaml: no {kind} {name}"))
}

fn env<'a>(container: &'a Yaml, name: &str) -> &'a Yaml {
    seq(&container["env"])
        .iter()
        .find(|e| e["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("no env {name}"))
}

#[test]
fn the_kubernetes_journal_variant_shares_redis_a_secret_and_no_affinity() {
    let docs = yaml_documents("deploy/kubernetes-journal.yaml");
    let chat = object(&docs, "Deployment", "chat");
    assert!(chat["spec"]["replicas"].as_i64() >= Some(2));
    let pod = &chat["spec"]["template"]["spec"];
    let tether = seq(&pod["containers"])
        .iter()
        .find(|c| c["name"].as_str() == Some("tether"))
        .expect("a tether container");
    let url = env(tether, "TETHER_JOURNAL")["value"]
        .as_str()
        .expect("TETHER_JOURNAL");
    let cfg = replica_config(&[
        "--journal".into(),
        url.into(),
        "--replica-id".into(),
        "p".into(),
    ]);
    assert!(cfg.journal.is_some());
    let (host, port) = url
        .strip_prefix("redis://")
        .and_then(|h| h.split_once(':'))
        .expect("redis://HOST:PORT");
    let svc = object(&docs, "Service", host);
    assert!(seq(&svc["spec"]["ports"]).iter().any(|p| p["port"]
        .as_i64()
        .map(|p| p.to_string())
        .as_deref()
        == Some(port)));
    let selected = svc["spec"]["selector"]["app.kubernetes.io/name"].as_str();
    let redis = object(&docs, "Deployment", "redis");
    assert_eq!(
        redis["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"].as_str(),
        selected,
        "the redis Service selects the Redis Pods"
    );
    let redis_container = &redis["spec"]["template"]["spec"]["containers"][0];
    assert_journal_redis(
        &strings(&redis_container["args"]),
        "kubernetes-journal.yaml",
    );

    assert_eq!(
        env(tether, "TETHER_REPLICA_ID")["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
        Some("metadata.name"),
        "each Pod is its own replica"
    );
    assert!(
        env(tether, "TETHER_AUTH_SECRET")["valueFrom"]["secretKeyRef"]["key"]
            .as_str()
            .is_some(),
        "the shared secret comes from a Secret"
    );
    let front = object(&docs, "Service", "chat");
    assert!(
        matches!(
            front["spec"]["sessionAffinity"].as_str(),
            None | Some("None")
        ),
        "no affinity: any replica serves any attach"
    );
}
