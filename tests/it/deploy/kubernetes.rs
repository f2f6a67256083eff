//! The Kubernetes manifest: tether's ports, probes, security context, scrape annotations, grace
//! period against the drain, memory limit against the recorder's cap, and the Service; in both
//! manifests, the listener's certificate from a read-only mount of a TLS Secret and a Service
//! that says HTTPS.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use yaml_rust2::Yaml;

use crate::deploy::{
    config_from_args, image_entrypoint, secret_file, seq, yaml_documents, ADMIN_PORT, PROXY_PORT,
};

/// The manifests whose `chat` Pod runs tether in front of the backend, behind the `chat`
/// Service.
const MANIFESTS: [&str; 2] = ["deploy/kubernetes.yaml", "deploy/kubernetes-journal.yaml"];

/// The one document of `deploy/kubernetes.yaml` of this `kind`.
fn k8s_object(kind: &str) -> Yaml {
    let mut found: Vec<Yaml> = yaml_documents("deploy/kubernetes.yaml")
        .into_iter()
        .filter(|d| d["kind"].as_str() == Some(kind))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "deploy/kubernetes.yaml: one {kind} expected"
    );
    found.remove(0)
}

/// The `chat` object of this `kind` in `file`: the Deployment of tether's Pod, or the Service
/// in front of it.
fn chat_object(file: &str, kind: &str) -> Yaml {
    yaml_documents(file)
        .into_iter()
        .find(|d| {
            d["kind"].as_str() == Some(kind) && d["metadata"]["name"].as_str() == Some("chat")
        })
        .unwrap_or_else(|| panic!("{file}: no {kind} chat"))
}

fn container<'a>(pod_spec: &'a Yaml, name: &str) -> &'a Yaml {
    seq(&pod_spec["containers"])
        .iter()
        .find(|c| c["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("the Pod has no container named {name}"))
}

/// A port given as a number or as the name of one of the container's ports.
fn resolve_port(container: &Yaml, port: &Yaml) -> Option<i64> {
    if let Some(n) = port.as_i64() {
        return Some(n);
    }
    let name = port.as_str()?;
    seq(&container["ports"])
        .iter()
        .find(|p| p["name"].as_str() == Some(name))
        .and_then(|p| p["containerPort"].as_i64())
}

fn container_ports(container: &Yaml) -> BTreeSet<i64> {
    seq(&container["ports"])
        .iter()
        .filter_map(|p| p["containerPort"].as_i64())
        .collect()
}

fn env_value<'a>(container: &'a Yaml, name: &str) -> Option<&'a str> {
    seq(&container["env"])
        .iter()
        .find(|e| e["name"].as_str() == Some(name))
        .and_then(|e| e["value"].as_str())
}

/// The seconds of a container's `preStop` sleep action (0 without one).
fn pre_stop_sleep(container: &Yaml) -> u64 {
    let secs = container["lifecycle"]["preStop"]["sleep"]["seconds"]
        .as_i64()
        .unwrap_or(0);
    u64::try_from(secs).expect("a preStop sleep is not negative")
}

/// A Kubernetes memory quantity in bytes (`512Mi`, `1Gi`, `1000000`).
fn memory_bytes(quantity: &str) -> u64 {
    let (digits, unit) = quantity.split_at(
        quantity
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(quantity.len()),
    );
    let n: u64 = digits
        .parse()
        .unwrap_or_else(|e| panic!("memory {quantity:?}: {e}"));
    let scale = match unit {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        _ => panic!("memory {quantity:?}: unit {unit:?} not understood here"),
    };
    n * scale
}

#[test]
fn the_tether_container_is_probed_on_the_admin_port_and_runs_as_non_root() {
    let deployment = k8s_object("Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    let tether = container(pod, "tether");

    let ports = container_ports(tether);
    assert!(
        ports.contains(&PROXY_PORT) && ports.contains(&ADMIN_PORT),
        "tether must declare ports {PROXY_PORT} and {ADMIN_PORT}, has {ports:?}"
    );
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        let get = &tether[probe]["httpGet"];
        assert_eq!(get["path"].as_str(), Some(path), "tether {probe} path");
        assert_eq!(
            resolve_port(tether, &get["port"]),
            Some(ADMIN_PORT),
            "tether {probe} port"
        );
    }

    let sc = &tether["securityContext"];
    let non_root = sc["runAsNonRoot"]
        .as_bool()
        .or(pod["securityContext"]["runAsNonRoot"].as_bool());
    assert_eq!(non_root, Some(true), "tether must set runAsNonRoot: true");
    assert_ne!(
        sc["runAsUser"].as_i64(),
        Some(0),
        "tether must not run as uid 0"
    );
    assert_eq!(sc["readOnlyRootFilesystem"].as_bool(), Some(true));
    assert_eq!(sc["allowPrivilegeEscalation"].as_bool(), Some(false));

    let upstream = env_value(tether, "TETHER_UPSTREAM").expect("TETHER_UPSTREAM is set");
    let backend_ports = container_ports(container(pod, "backend"));
    let upstream_port: i64 = upstream
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .unwrap_or_else(|| panic!("TETHER_UPSTREAM {upstream:?} is not host:port"));
    assert!(
        backend_ports.contains(&upstream_port),
        "TETHER_UPSTREAM {upstream} is not a port of the backend container {backend_ports:?}"
    );
    assert_eq!(env_value(tether, "TETHER_LOG_FORMAT"), Some("json"));
}

#[test]
fn the_pod_is_annotated_for_prometheus_to_scrape_the_admin_port() {
    let deployment = k8s_object("Deployment");
    let annotations = &deployment["spec"]["template"]["metadata"]["annotations"];
    // Annotation values must be strings: an unquoted `true` or `9090` is rejected by the API.
    assert_eq!(annotations["prometheus.io/scrape"].as_str(), Some("true"));
    assert_eq!(
        annotations["prometheus.io/port"].as_str(),
        Some(ADMIN_PORT.to_string().as_str())
    );
    assert_eq!(annotations["prometheus.io/path"].as_str(), Some("/metrics"));
}

#[test]
fn the_grace_period_outlasts_the_drain_and_the_backend_outlives_it() {
    let deployment = k8s_object("Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    let tether = container(pod, "tether");
    let drain = env_value(tether, "TETHER_DRAIN_TIMEOUT").expect("TETHER_DRAIN_TIMEOUT is set");
    let drain = humantime::parse_duration(drain).expect("TETHER_DRAIN_TIMEOUT is a duration");
    let tether_stops_at = Duration::from_secs(pre_stop_sleep(tether)) + drain;

    let grace = pod["terminationGracePeriodSeconds"]
        .as_i64()
        .and_then(|s| u64::try_from(s).ok())
        .map(Duration::from_secs)
        .expect("terminationGracePeriodSeconds is set");
    assert!(
        grace > tether_stops_at,
        "terminationGracePeriodSeconds {grace:?} must exceed tether's preStop pause plus its \
         drain timeout ({tether_stops_at:?})"
    );
    let backend_signalled_at = Duration::from_secs(pre_stop_sleep(container(pod, "backend")));
    assert!(
        backend_signalled_at >= tether_stops_at,
        "the backend gets SIGTERM after {backend_signalled_at:?}, before tether's drain can end \
         ({tether_stops_at:?}): the runs being drained would lose their upstream"
    );
}

#[test]
fn the_memory_limit_leaves_room_above_the_recorder_byte_cap() {
    let deployment = k8s_object("Deployment");
    let tether = container(&deployment["spec"]["template"]["spec"], "tether");
    let limit = tether["resources"]["limits"]["memory"]
        .as_str()
        .map(memory_bytes)
        .expect("tether has a memory limit");
    let argv = image_entrypoint();
    let args: Vec<&str> = argv[1..].iter().map(String::as_str).collect();
    let cap = config_from_args(&args).limits.max_recorded_bytes as u64;
    // Past the cap tether passes turns through unrecorded; past the limit the kernel kills it.
    // Leave a quarter of the cap for connections, buffers in flight and the runtime.
    assert!(
        limit >= cap + cap / 4,
        "memory limit {limit} bytes is too close to max_recorded_bytes {cap}: tether would be \
         OOM-killed before its own cap sheds load"
    );
}

#[test]
fn the_service_exposes_only_tethers_proxy_port_and_says_it_is_https() {
    for file in MANIFESTS {
        let deployment = chat_object(file, "Deployment");
        let template = &deployment["spec"]["template"];
        let pod = &template["spec"];
        let tether = container(pod, "tether");
        let backend_ports = container_ports(container(pod, "backend"));

        let service = chat_object(file, "Service");
        let selector = service["spec"]["selector"]
            .as_hash()
            .expect("the Service has a selector");
        assert!(!selector.is_empty());
        for (k, v) in selector {
            assert_eq!(
                &template["metadata"]["labels"][k.as_str().expect("a label name")],
                v,
                "{file}: the Service selector {k:?} does not match the Pod's labels"
            );
        }
        let ports = seq(&service["spec"]["ports"]);
        assert!(!ports.is_empty(), "{file}: the Service has no port");
        for p in ports {
            // targetPort defaults to port.
            let target = if p["targetPort"].is_badvalue() {
                &p["port"]
            } else {
                &p["targetPort"]
            };
            let target = resolve_port(tether, target);
            assert_eq!(
                target,
                Some(PROXY_PORT),
                "{file}: Service port {:?}",
                p["port"]
            );
            assert!(!target.is_some_and(|t| backend_ports.contains(&t)));
            // The listener serves TLS (TETHER_TLS_CERT): a plain-HTTP port would be a lie to
            // whatever connects (an ingress picks its backend protocol from it).
            assert_eq!(
                p["appProtocol"].as_str(),
                Some("https"),
                "{file}: Service port {:?} leads to the HTTPS listener",
                p["port"]
            );
            assert_eq!(p["port"].as_i64(), Some(443), "{file}: HTTPS on 443");
        }
    }
}

#[test]
fn the_listener_serves_https_from_a_read_only_mount_of_a_tls_secret() {
    for file in MANIFESTS {
        let deployment = chat_object(file, "Deployment");
        let pod = &deployment["spec"]["template"]["spec"];
        let tether = container(pod, "tether");
        let env = |name: &str| {
            env_value(tether, name).unwrap_or_else(|| panic!("{file}: tether has no {name}"))
        };
        let (cert, key) = (env("TETHER_TLS_CERT"), env("TETHER_TLS_KEY"));

        // tether runs with them: HTTPS on the entrypoint's proxy port.
        let argv = image_entrypoint();
        let mut args: Vec<&str> = argv[1..].iter().map(String::as_str).collect();
        args.extend(["--tls-cert", cert, "--tls-key", key]);
        let cfg = config_from_args(&args);
        assert_eq!(cfg.server.tls_cert.as_deref(), Some(Path::new(cert)));
        assert_eq!(cfg.server.tls_key.as_deref(), Some(Path::new(key)));
        assert_eq!(i64::from(cfg.listen.port()), PROXY_PORT);

        let cert_file = secret_file(pod, tether, cert);
        let key_file = secret_file(pod, tether, key);
        for (f, want, path) in [(&cert_file, "tls.crt", cert), (&key_file, "tls.key", key)] {
            assert_eq!(
                f.key, want,
                "{file}: {path} must be the {want} of a kubernetes.io/tls Secret (what \
                 cert-manager and `kubectl create secret tls` write)"
            );
            assert!(f.read_only, "{file}: {path} must be mounted read-only");
            assert!(
                !f.sub_path,
                "{file}: {path} is mounted with subPath, which a renewed Secret never reaches: \
                 SIGHUP would read the old certificate again"
            );
            assert!(
                !f.optional,
                "{file}: without the Secret tether would exit at start; let the Pod wait for it"
            );
        }
        assert_eq!(
            cert_file.secret, key_file.secret,
            "{file}: the certificate and its key come from one Secret (the kubelet swaps its \
             files together)"
        );

        // The private key is tether's alone: no other container mounts that Secret.
        let volumes: Vec<&str> = seq(&pod["volumes"])
            .iter()
            .filter(|v| v["secret"]["secretName"].as_str() == Some(cert_file.secret.as_str()))
            .filter_map(|v| v["name"].as_str())
            .collect();
        for c in seq(&pod["containers"]) {
            if c["name"].as_str() == Some("tether") {
                continue;
            }
            for m in seq(&c["volumeMounts"]) {
                assert!(
                    !m["name"].as_str().is_some_and(|n| volumes.contains(&n)),
                    "{file}: container {:?} mounts the listener's Secret {}",
                    c["name"],
                    cert_file.secret
                );
            }
        }

        // The admin listener stays plain: the kubelet probes it over HTTP.
        for probe in ["livenessProbe", "readinessProbe"] {
            let get = &tether[probe]["httpGet"];
            assert_eq!(resolve_port(tether, &get["port"]), Some(ADMIN_PORT));
            assert_eq!(
                get["scheme"].as_str().unwrap_or("HTTP"),
                "HTTP",
                "{file}: tether {probe} is on the plain admin port"
            );
        }
    }
}
