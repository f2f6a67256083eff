//! Checks the files in `deploy/` against tether itself: every metric the Grafana dashboard and the
//! Prometheus alerts name is a family tether exports, and the Kubernetes manifest, the Dockerfile
//! and the systemd unit keep the ports, probes, annotations, non-root user, stop signal and
//! timeouts that tether's admin endpoints and SIGTERM drain rely on, and the TLS files each
//! container reads out of which Secret. No Docker: `balancer` runs the scale-out for real, two
//! replicas on a test-owned redis-server behind Debian's nginx with the shipped
//! `deploy/nginx.conf` ([`nginx`]), all on loopback; `scaling` runs the Kubernetes Redis's
//! TLS-only arguments and its probe on Debian's redis-server and redis-cli.
//!
//! This file reads the files and holds what more than one part uses; `monitoring`,
//! `kubernetes`, `image`, `scaling` and `balancer` hold the checks.

mod balancer;
mod image;
mod kubernetes;
mod monitoring;
mod nginx;
mod scaling;

use std::path::Path;

use crate::support::{Config, Flags};
use clap::Parser;
use yaml_rust2::{Yaml, YamlLoader};

/// The proxy and admin ports of the image's entrypoint.
const PROXY_PORT: i64 = 8080;
const ADMIN_PORT: i64 = 9090;

/// A file of the repository, by its path from the root.
fn read(rel: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn yaml_documents(rel: &str) -> Vec<Yaml> {
    let docs =
        YamlLoader::load_from_str(&read(rel)).unwrap_or_else(|e| panic!("{rel} is not YAML: {e}"));
    assert!(!docs.is_empty(), "{rel} holds no YAML document");
    docs
}

fn seq(y: &Yaml) -> &[Yaml] {
    y.as_vec().map(Vec::as_slice).unwrap_or(&[])
}

/// The exec-form `ENTRYPOINT` of the image's last stage: the program and its arguments.
fn image_entrypoint() -> Vec<String> {
    let dockerfile = read("deploy/Dockerfile");
    let entrypoint = dockerfile
        .lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix("ENTRYPOINT "))
        .expect("the Dockerfile has an ENTRYPOINT");
    serde_json::from_str(entrypoint)
        .unwrap_or_else(|e| panic!("ENTRYPOINT must be a JSON array (exec form): {e}"))
}

/// The configuration tether would run with given these command-line arguments (after the
/// program name), with the container or host path of the config file replaced by the
/// repository's `conf/tether.toml`, which is what the image and the unit install there.
fn config_from_args(args: &[&str]) -> Config {
    let conf = Path::new(env!("CARGO_MANIFEST_DIR")).join("conf/tether.toml");
    let conf = conf.to_str().expect("a UTF-8 path");
    let mut argv = vec!["tether"];
    let mut next_is_config = false;
    for a in args {
        argv.push(if next_is_config { conf } else { a });
        next_is_config = matches!(*a, "--config" | "-c");
    }
    let flags = Flags::try_parse_from(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    Config::load(&flags).unwrap_or_else(|e| panic!("{argv:?}: {e}"))
}

/// A file a container reads out of a Secret volume: the Secret, the key the file holds, and how
/// the volume is mounted.
#[derive(Debug)]
struct SecretFile {
    secret: String,
    key: String,
    /// The keys the volume selects (`items`); `None`: every key of the Secret.
    items: Option<Vec<String>>,
    read_only: bool,
    /// Mounted with `subPath`: the kubelet never updates such a mount.
    sub_path: bool,
    /// The volume is `optional`: the Pod starts without the Secret, and the file is missing.
    optional: bool,
}

/// Where `path` comes from in `container` of the Pod spec `pod`: the Secret volume mounted over
/// the directory holding it. Panics, naming the file, when no Secret volume holds it.
fn secret_file(pod: &Yaml, container: &Yaml, path: &str) -> SecretFile {
    let who = container["name"].as_str().unwrap_or("?");
    let (mount, rel) = seq(&container["volumeMounts"])
        .iter()
        .find_map(|m| {
            let dir = m["mountPath"].as_str()?.trim_end_matches('/');
            match m["subPath"].as_str() {
                // A single key mounted as the file itself.
                Some(sub) if path == dir => Some((m, sub)),
                _ => Some((m, path.strip_prefix(dir)?.strip_prefix('/')?)),
            }
        })
        .unwrap_or_else(|| panic!("{path}: not under a volume mounted in the {who} container"));
    let name = mount["name"].as_str().expect("a volumeMount name");
    let volume = seq(&pod["volumes"])
        .iter()
        .find(|v| v["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("{who} mounts volume {name}, which the Pod does not define"));
    let secret = &volume["secret"];
    let secret_name = secret["secretName"]
        .as_str()
        .unwrap_or_else(|| panic!("{path}: volume {name} is not a Secret volume"));
    let items: Option<Vec<(String, String)>> = secret["items"].as_vec().map(|items| {
        items
            .iter()
            .map(|i| {
                let s = |k: &str| i[k].as_str().expect("an item's key and path").to_string();
                (s("key"), s("path"))
            })
            .collect()
    });
    let key = match &items {
        Some(items) => items
            .iter()
            .find(|(_, p)| p == rel)
            .map(|(k, _)| k.clone())
            .unwrap_or_else(|| panic!("{path}: volume {name} has no item at {rel}")),
        None => rel.to_string(),
    };
    SecretFile {
        secret: secret_name.to_string(),
        key,
        items: items.map(|items| items.into_iter().map(|(k, _)| k).collect()),
        read_only: mount["readOnly"].as_bool() == Some(true),
        sub_path: !mount["subPath"].is_badvalue(),
        optional: secret["optional"].as_bool() == Some(true),
    }
}
