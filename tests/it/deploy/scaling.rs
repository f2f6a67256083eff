//! The scale-out files: `deploy/compose.yaml` (two replicas, Redis, nginx), `deploy/nginx.conf`
//! and `deploy/kubernetes-journal.yaml`. Every replica's arguments configure tether with the
//! journal on the Redis the file runs, distinct replica ids and one shared secret; Redis runs
//! with `noeviction` and no persistence; the balancer has no affinity. In Kubernetes the journal
//! is `rediss://`, verified against a CA mounted from Redis's Secret, and Redis serves TLS only,
//! probed over TLS: checked in the YAML, and by running Debian's redis-server with the
//! manifest's arguments and redis-cli with its probe (certificates of the test's own).

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use yaml_rust2::Yaml;

use crate::deploy::{config_from_args, image_entrypoint, read, secret_file, seq, yaml_documents};
use crate::support::{Config, TestCa, LIMIT};

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
        .strip_prefix("rediss://")
        .or_else(|| url.strip_prefix("redis://"))
        .and_then(|h| h.split_once(':'))
        .expect("redis[s]://HOST:PORT");
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

/// The value after `flag` in `args`.
fn arg_after<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

/// The journal variant's two Deployments: `chat` (tether's Pod) and `redis`.
struct JournalPods {
    chat: Yaml,
    redis: Yaml,
}

impl JournalPods {
    fn load() -> Self {
        let docs = yaml_documents("deploy/kubernetes-journal.yaml");
        JournalPods {
            chat: object(&docs, "Deployment", "chat").clone(),
            redis: object(&docs, "Deployment", "redis").clone(),
        }
    }

    fn chat_pod(&self) -> &Yaml {
        &self.chat["spec"]["template"]["spec"]
    }

    fn tether(&self) -> &Yaml {
        seq(&self.chat_pod()["containers"])
            .iter()
            .find(|c| c["name"].as_str() == Some("tether"))
            .expect("a tether container")
    }

    fn redis_pod(&self) -> &Yaml {
        &self.redis["spec"]["template"]["spec"]
    }

    fn redis(&self) -> &Yaml {
        &self.redis_pod()["containers"][0]
    }

    fn redis_args(&self) -> Vec<String> {
        strings(&self.redis()["args"])
    }

    fn probe(&self) -> Vec<String> {
        strings(&self.redis()["readinessProbe"]["exec"]["command"])
    }
}

#[test]
fn the_kubernetes_journal_is_rediss_verified_by_the_ca_of_redis_s_own_secret() {
    let k8s = JournalPods::load();
    let tether = k8s.tether();
    let url = env(tether, "TETHER_JOURNAL")["value"]
        .as_str()
        .expect("TETHER_JOURNAL");
    let ca = env(tether, "TETHER_JOURNAL_CA")["value"]
        .as_str()
        .expect("TETHER_JOURNAL_CA is a path");
    assert!(
        url.starts_with("rediss://"),
        "the journal speaks TLS: {url}"
    );
    let cfg = replica_config(&[
        "--journal".into(),
        url.into(),
        "--journal-ca".into(),
        ca.into(),
        "--replica-id".into(),
        "p".into(),
    ]);
    let tls = cfg.journal.and_then(|j| j.tls).expect("a TLS journal");
    assert_eq!(tls.ca.as_deref(), Some(Path::new(ca)));

    // The CA is the ca.crt of the Secret Redis's certificate comes from: the CA that issued it.
    let ca_file = secret_file(k8s.chat_pod(), tether, ca);
    assert!(ca_file.read_only, "{ca}: mounted read-only");
    assert_eq!(
        ca_file.key, "ca.crt",
        "{ca}: the issuing CA of a TLS Secret"
    );
    let args = k8s.redis_args();
    let served = |flag: &str| {
        let path = arg_after(&args, flag).unwrap_or_else(|| panic!("Redis has no {flag}"));
        let f = secret_file(k8s.redis_pod(), k8s.redis(), path);
        assert!(f.read_only, "Redis's {flag} {path}: mounted read-only");
        f
    };
    let redis_cert = served("--tls-cert-file");
    assert_eq!(
        (redis_cert.secret.as_str(), redis_cert.key.as_str()),
        (ca_file.secret.as_str(), "tls.crt"),
        "tether verifies Redis with the CA of the Secret Redis's certificate is in"
    );
    let redis_key = served("--tls-key-file");
    assert_eq!(
        (redis_key.secret.as_str(), redis_key.key.as_str()),
        (redis_cert.secret.as_str(), "tls.key")
    );
    assert_eq!(served("--tls-ca-cert-file").key, "ca.crt");
    // tether's Pods get that one key, never Redis's private key.
    assert_eq!(
        ca_file.items.as_deref(),
        Some(&["ca.crt".to_string()][..]),
        "the chat Pods mount only ca.crt out of {}",
        ca_file.secret
    );

    // Redis's default is to require a client certificate, which tether then has to present.
    if matches!(arg_after(&args, "--tls-auth-clients"), None | Some("yes")) {
        for name in ["TETHER_JOURNAL_CERT", "TETHER_JOURNAL_KEY"] {
            assert!(
                seq(&tether["env"])
                    .iter()
                    .any(|e| e["name"].as_str() == Some(name)),
                "Redis requires a client certificate (--tls-auth-clients yes, its default): \
                 tether needs {name}"
            );
        }
    }
}

#[test]
fn the_kubernetes_journal_redis_serves_tls_only_and_is_probed_over_tls() {
    let k8s = JournalPods::load();
    let url = env(k8s.tether(), "TETHER_JOURNAL")["value"]
        .as_str()
        .expect("TETHER_JOURNAL");
    let url_port: i64 = url
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .expect("TETHER_JOURNAL has a port");
    let args = k8s.redis_args();
    assert_eq!(
        arg_after(&args, "--port"),
        Some("0"),
        "Redis's plain port is closed"
    );
    let tls_port: i64 = arg_after(&args, "--tls-port")
        .and_then(|p| p.parse().ok())
        .expect("Redis serves --tls-port");
    assert_eq!(tls_port, url_port, "tether connects to Redis's TLS port");
    let declared: Vec<i64> = seq(&k8s.redis()["ports"])
        .iter()
        .filter_map(|p| p["containerPort"].as_i64())
        .collect();
    assert_eq!(
        declared,
        [tls_port],
        "the container declares the TLS port only"
    );
    let docs = yaml_documents("deploy/kubernetes-journal.yaml");
    for p in seq(&object(&docs, "Service", "redis")["spec"]["ports"]) {
        let target = if p["targetPort"].is_badvalue() {
            &p["port"]
        } else {
            &p["targetPort"]
        };
        assert_eq!(target.as_i64(), Some(tls_port), "the redis Service's ports");
    }

    let probe = k8s.probe();
    assert_eq!(probe.first().map(String::as_str), Some("redis-cli"));
    assert_eq!(probe.last().map(String::as_str), Some("ping"));
    assert!(
        probe.iter().any(|a| a == "--tls"),
        "the probe speaks TLS: {probe:?}"
    );
    assert_eq!(
        arg_after(&probe, "-p").and_then(|p| p.parse().ok()),
        Some(tls_port),
        "the probe asks the TLS port (the default 6379 is closed)"
    );
    let cacert = arg_after(&probe, "--cacert").expect("the probe verifies Redis: --cacert");
    assert_eq!(
        secret_file(k8s.redis_pod(), k8s.redis(), cacert).key,
        "ca.crt",
        "the probe's --cacert is the mounted CA"
    );
}

/// A process of the test's own, killed (by its PID) and reaped when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_kubernetes_journal_redis_arguments_and_probe_run_on_a_real_redis_over_tls() {
    let k8s = JournalPods::load();
    // Never a plain Redis on the default port, which another Redis of this host may hold.
    let args = k8s.redis_args();
    assert_eq!(
        arg_after(&args, "--port"),
        Some("0"),
        "Redis's plain port is closed"
    );
    assert!(
        arg_after(&args, "--tls-port").is_some(),
        "Redis serves --tls-port"
    );
    let ca = TestCa::new("k8s-journal");
    let cert = ca.issue("redis", &["redis", "localhost"]);
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
        .to_string();
    // The manifest's arguments with the port made free and every mounted file replaced by the
    // test's file for that Secret key; nothing else changed.
    let local = |pod: &Yaml, container: &Yaml, args: &[String]| -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for a in args {
            let after_port = out.last().is_some_and(|p| p == "--tls-port" || p == "-p");
            out.push(if after_port {
                port.clone()
            } else if a.starts_with('/') {
                let file: &PathBuf = match secret_file(pod, container, a).key.as_str() {
                    "tls.crt" => &cert.cert_pem,
                    "tls.key" => &cert.key_pem,
                    "ca.crt" => &ca.pem,
                    other => panic!("{a}: key {other} of no TLS Secret"),
                };
                file.display().to_string()
            } else {
                a.clone()
            });
        }
        out
    };
    let server_args = local(k8s.redis_pod(), k8s.redis(), &args);
    let _redis = Killed(
        Command::new("redis-server")
            .args(["--bind", "127.0.0.1"])
            .args(&server_args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server is installed (scripts/test.sh installs it)"),
    );
    let probe = local(k8s.redis_pod(), k8s.redis(), &k8s.probe());
    let cli = |args: &[String]| {
        let out = Command::new(&args[0])
            .args(&args[1..])
            .stdin(Stdio::null())
            .output()
            .expect("redis-cli is installed (with redis-server)");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).trim().to_string(),
        )
    };
    // The kubelet's view: the probe passes once Redis is up.
    const PAUSE: Duration = Duration::from_millis(50);
    let mut tries = 0;
    loop {
        let (ok, out) = cli(&probe);
        if ok && out == "PONG" {
            break;
        }
        tries += 1;
        assert!(
            PAUSE * tries < LIMIT,
            "the probe {probe:?} never passed against redis-server {server_args:?}: {out}"
        );
        std::thread::sleep(PAUSE);
    }
    // No plain port, and the TLS port answers no plain PING.
    let mut config_get = probe[..probe.len() - 1].to_vec();
    config_get.extend(["CONFIG".into(), "GET".into(), "port".into()]);
    assert_eq!(cli(&config_get), (true, "port\n0".to_string()));
    let mut plain = TcpStream::connect(("127.0.0.1", port.parse::<u16>().unwrap())).unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let _ = plain.write_all(b"PING\r\n");
    let mut buf = Vec::new();
    let _ = plain.read_to_end(&mut buf);
    assert!(
        !buf.starts_with(b"+PONG"),
        "the TLS port answered a plain PING"
    );
}
