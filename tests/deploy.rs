//! Checks the files in `deploy/` against tether itself: every metric the Grafana dashboard and the
//! Prometheus alerts name is a family tether exports, and the Kubernetes manifest, the Dockerfile
//! and the systemd unit keep the ports, probes, annotations, non-root user, stop signal and
//! timeouts that tether's admin endpoints and SIGTERM drain rely on. No network, no Docker.

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;
use std::path::Path;
use std::time::Duration;

use clap::Parser;
use promql_parser::label::{MatchOp, METRIC_NAME};
use promql_parser::parser::Expr;
use promql_parser::util::{walk_expr, ExprVisitor};
use serde_json::Value;
use tether::config::{Config, Flags};
use tether::metrics::Metrics;
use yaml_rust2::{Yaml, YamlLoader};

/// Series that Prometheus writes itself for every scrape target; the rules may name them.
const PROMETHEUS_SERIES: &[&str] = &["up"];

/// The series a histogram family `<name>` exposes besides the family name itself.
const HISTOGRAM_SUFFIXES: &[&str] = &["_bucket", "_sum", "_count"];

/// The proxy and admin ports of the image's entrypoint.
const PROXY_PORT: i64 = 8080;
const ADMIN_PORT: i64 = 9090;

// ---------------------------------------------------------------------------------------------
// Files

fn read(rel: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn dashboard() -> Value {
    serde_json::from_str(&read("deploy/grafana-dashboard.json"))
        .unwrap_or_else(|e| panic!("deploy/grafana-dashboard.json is not JSON: {e}"))
}

fn yaml_documents(rel: &str) -> Vec<Yaml> {
    let docs =
        YamlLoader::load_from_str(&read(rel)).unwrap_or_else(|e| panic!("{rel} is not YAML: {e}"));
    assert!(!docs.is_empty(), "{rel} holds no YAML document");
    docs
}

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

fn seq(y: &Yaml) -> &[Yaml] {
    y.as_vec().map(Vec::as_slice).unwrap_or(&[])
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

/// The value of `Key=value` lines of a systemd unit (all of them, in order).
fn unit_values<'a>(unit: &'a str, key: &str) -> Vec<&'a str> {
    unit.lines()
        .filter_map(|l| l.trim().strip_prefix(key)?.strip_prefix('='))
        .map(str::trim)
        .collect()
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

// ---------------------------------------------------------------------------------------------
// Metric families and PromQL

/// The families tether exports, name → Prometheus type, from its own text exposition.
fn exported_families() -> BTreeMap<String, String> {
    let m = Metrics::new();
    // A labelled family whose label values are not known up front is left out of the exposition
    // until it has a child; give it one.
    m.runs_started.with_label_values(&["/chat"]).inc();
    let families: BTreeMap<String, String> = m
        .render()
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|rest| {
            let mut words = rest.split_whitespace();
            Some((words.next()?.to_owned(), words.next()?.to_owned()))
        })
        .collect();
    assert!(
        families.len() >= 16,
        "tether exports only {families:?}: is the exposition format still `# TYPE name type`?"
    );
    families
}

/// The family a series name belongs to: the name itself, or a histogram's `_bucket`, `_sum` or
/// `_count` series.
fn family_of<'a>(series: &'a str, families: &BTreeMap<String, String>) -> Option<&'a str> {
    if families.contains_key(series) {
        return Some(series);
    }
    HISTOGRAM_SUFFIXES.iter().find_map(|suffix| {
        let base = series.strip_suffix(suffix)?;
        (families.get(base).map(String::as_str) == Some("histogram")).then_some(base)
    })
}

/// What Grafana's time variables stand for here: any range will do for parsing.
const GRAFANA_RANGE: &str = "5m";

/// `expr` with Grafana's variables given concrete values, so that it is PromQL: the time
/// variables (`$__rate_interval`, `$__interval`, `$__range`, …) become a duration, every other
/// variable (`$name`, `${name}`, `${name:format}`, used inside label matchers here) its name.
fn without_grafana_variables(expr: &str) -> String {
    let mut out = String::with_capacity(expr.len());
    let mut rest = expr;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let (name, len) = match after.strip_prefix('{') {
            Some(braced) => {
                let end = braced.find('}').unwrap_or(braced.len());
                let name = braced[..end].split(':').next().unwrap_or_default();
                (name, end + 2)
            }
            None => {
                let end = after
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(after.len());
                (&after[..end], end)
            }
        };
        out.push_str(if name.starts_with("__") {
            GRAFANA_RANGE
        } else {
            name
        });
        rest = &after[len.min(after.len())..];
    }
    out.push_str(rest);
    out
}

/// The metric names a PromQL expression (with Grafana variables) selects, in order: the name of
/// every vector and range selector in its syntax tree.
fn metric_names(expr: &str) -> Result<Vec<String>, String> {
    struct Selected(Vec<String>);
    impl ExprVisitor for Selected {
        type Error = Infallible;
        fn pre_visit(&mut self, e: &Expr) -> Result<bool, Infallible> {
            let selector = match e {
                Expr::VectorSelector(v) => v,
                Expr::MatrixSelector(m) => &m.vs,
                _ => return Ok(true),
            };
            // `{__name__="x"}` names its metric by a matcher.
            let by_matcher = || {
                selector
                    .matchers
                    .matchers
                    .iter()
                    .find(|m| m.name == METRIC_NAME && m.op == MatchOp::Equal)
                    .map(|m| m.value.clone())
            };
            self.0.extend(selector.name.clone().or_else(by_matcher));
            Ok(true)
        }
        fn post_visit(&mut self, _: &Expr) -> Result<bool, Infallible> {
            Ok(true)
        }
    }
    let ast = promql_parser::parser::parse(&without_grafana_variables(expr))?;
    let mut names = Selected(Vec::new());
    let Ok(_) = walk_expr(&mut names, &ast);
    Ok(names.0)
}

/// The series selector of a Grafana `label_values(<selector>, <label>)` variable query.
fn label_values_selector(query: &str) -> Option<&str> {
    let args = query
        .trim()
        .strip_prefix("label_values(")?
        .strip_suffix(')')?;
    // One argument is the label alone; two are the selector and the label.
    args.rsplit_once(',').map(|(selector, _label)| selector)
}

/// Every panel of the dashboard, rows and the panels of collapsed rows included.
fn dashboard_panels(dash: &Value) -> Vec<&Value> {
    fn walk<'a>(panels: &'a Value, out: &mut Vec<&'a Value>) {
        for p in panels.as_array().into_iter().flatten() {
            out.push(p);
            walk(&p["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&dash["panels"], &mut out);
    out
}

/// Every PromQL expression of the dashboard and the alert rules, with where it comes from.
fn promql_expressions() -> Vec<(String, String)> {
    let mut exprs = Vec::new();
    let dash = dashboard();
    for p in dashboard_panels(&dash) {
        let title = p["title"].as_str().unwrap_or("?");
        for t in p["targets"].as_array().into_iter().flatten() {
            let expr = t["expr"].as_str().unwrap_or_default();
            exprs.push((format!("dashboard panel {title:?}"), expr.to_owned()));
        }
    }
    for v in dash["templating"]["list"].as_array().into_iter().flatten() {
        let query = v["query"]["query"].as_str().or_else(|| v["query"].as_str());
        if v["type"].as_str() == Some("query") {
            let name = v["name"].as_str().unwrap_or("?");
            let selector = query.and_then(label_values_selector).unwrap_or_else(|| {
                panic!("dashboard variable {name}: expected label_values(<selector>, <label>)")
            });
            exprs.push((format!("dashboard variable {name}"), selector.to_owned()));
        }
    }
    for doc in yaml_documents("deploy/prometheus-rules.yaml") {
        for group in seq(&doc["groups"]) {
            for rule in seq(&group["rules"]) {
                let name = rule["alert"].as_str().or(rule["record"].as_str());
                let expr = rule["expr"].as_str().unwrap_or_default();
                exprs.push((format!("rule {}", name.unwrap_or("?")), expr.to_owned()));
            }
        }
    }
    exprs
}

// ---------------------------------------------------------------------------------------------
// Metrics

#[test]
fn metric_names_skip_functions_labels_strings_variables_and_durations() {
    assert_eq!(
        without_grafana_variables(r#"rate(a{i=~"$instance",j="${v:regex}"}[$__rate_interval])"#),
        r#"rate(a{i=~"instance",j="v"}[5m])"#
    );
    assert_eq!(
        metric_names(
            r#"histogram_quantile(0.99, sum by (instance, le) (rate(tether_a_bucket{job="tether_not_a_metric", le!="1"}[$__rate_interval]))) > 1e3"#
        ),
        Ok(vec!["tether_a_bucket".to_owned()])
    );
    assert_eq!(
        metric_names(
            "sum without(kind) (rate(a_total{x=~\"${v}\"}[5m] offset 1h)) / on (instance) \
             group_left (reason) b unless up == bool 0"
        )
        .unwrap(),
        ["a_total", "b", "up"]
    );
    assert_eq!(metric_names("sum(rate(x[5m:1m]))").unwrap(), ["x"]);
    assert_eq!(
        metric_names("max without (le) (y) and count by(z) (w)").unwrap(),
        ["y", "w"]
    );
    assert_eq!(metric_names(r#"{__name__="n", a="b"}"#).unwrap(), ["n"]);
    assert!(metric_names("sum(rate(x[5m])").is_err(), "not PromQL");
    assert_eq!(
        label_values_selector("label_values(tether_runs_active, instance)"),
        Some("tether_runs_active")
    );
}

#[test]
fn every_metric_the_dashboard_and_alerts_name_is_exported() {
    let families = exported_families();
    let exprs = promql_expressions();
    assert!(
        exprs.len() >= 20,
        "only {} PromQL expressions found",
        exprs.len()
    );
    let mut wrong = Vec::new();
    for (source, expr) in &exprs {
        let names = match metric_names(expr) {
            Ok(names) => names,
            Err(e) => {
                wrong.push(format!("{source}: {expr:?} is not PromQL: {e}"));
                continue;
            }
        };
        if names.is_empty() {
            wrong.push(format!("{source}: {expr:?} selects no metric"));
        }
        for name in names {
            let known = if name.starts_with("tether_") {
                family_of(&name, &families).is_some()
            } else {
                PROMETHEUS_SERIES.contains(&name.as_str())
            };
            if !known {
                wrong.push(format!(
                    "{source}: {name} is not exported by tether ({expr})"
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{}\nexported: {:?}",
        wrong.join("\n"),
        families.keys().collect::<Vec<_>>()
    );
}

#[test]
fn every_exported_family_is_charted_on_the_dashboard() {
    let families = exported_families();
    let dash = dashboard();
    let charted: BTreeSet<String> = dashboard_panels(&dash)
        .into_iter()
        .flat_map(|p| p["targets"].as_array().into_iter().flatten())
        .filter_map(|t| t["expr"].as_str())
        .flat_map(|e| metric_names(e).unwrap_or_else(|err| panic!("{e:?}: {err}")))
        .filter_map(|n| family_of(&n, &families).map(str::to_owned))
        .collect();
    let missing: Vec<&String> = families.keys().filter(|f| !charted.contains(*f)).collect();
    assert!(missing.is_empty(), "no dashboard panel charts {missing:?}");
}

#[test]
fn the_dashboard_is_schema_39_and_takes_its_datasource_from_a_variable() {
    let dash = dashboard();
    assert_eq!(dash["schemaVersion"].as_i64(), Some(39));
    assert!(dash["title"].as_str().is_some_and(|t| !t.is_empty()));
    let vars = dash["templating"]["list"]
        .as_array()
        .expect("templating.list");
    assert!(
        vars.iter().any(|v| v["type"].as_str() == Some("datasource")
            && v["name"].as_str() == Some("DS_PROMETHEUS")
            && v["query"].as_str() == Some("prometheus")),
        "no DS_PROMETHEUS datasource variable"
    );
    let mut ids = BTreeSet::new();
    for p in dashboard_panels(&dash) {
        let title = p["title"].as_str().unwrap_or("?");
        let id = p["id"]
            .as_i64()
            .unwrap_or_else(|| panic!("panel {title:?} has no id"));
        assert!(ids.insert(id), "panel id {id} is used twice");
        let (x, w) = (p["gridPos"]["x"].as_i64(), p["gridPos"]["w"].as_i64());
        assert!(
            matches!((x, w), (Some(x), Some(w)) if x >= 0 && w > 0 && x + w <= 24),
            "panel {title:?}: gridPos outside the 24 columns"
        );
        if p["type"].as_str() == Some("row") {
            continue;
        }
        assert_eq!(
            p["datasource"]["uid"].as_str(),
            Some("${DS_PROMETHEUS}"),
            "panel {title:?}"
        );
        let targets = p["targets"].as_array().map(Vec::as_slice).unwrap_or(&[]);
        assert!(!targets.is_empty(), "panel {title:?} has no query");
        for t in targets {
            assert!(
                t["expr"].as_str().is_some_and(|e| !e.trim().is_empty()),
                "panel {title:?}: a target without expr"
            );
            assert_eq!(
                t["datasource"]["uid"].as_str(),
                Some("${DS_PROMETHEUS}"),
                "panel {title:?}: target datasource"
            );
        }
    }
}

#[test]
fn every_alert_rule_has_a_severity_a_summary_a_description_and_a_for_duration() {
    let docs = yaml_documents("deploy/prometheus-rules.yaml");
    let mut alerts = BTreeSet::new();
    for doc in &docs {
        let groups = seq(&doc["groups"]);
        assert!(!groups.is_empty(), "prometheus-rules.yaml: no groups");
        for group in groups {
            assert!(
                group["name"].as_str().is_some(),
                "a rule group without name"
            );
            for rule in seq(&group["rules"]) {
                let name = rule["alert"].as_str().expect("every rule is an alert");
                assert!(
                    alerts.insert(name.to_owned()),
                    "alert {name} is defined twice"
                );
                assert!(rule["expr"].as_str().is_some(), "{name}: no expr");
                let for_ = rule["for"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{name}: no for"));
                humantime::parse_duration(for_)
                    .unwrap_or_else(|e| panic!("{name}: for {for_:?}: {e}"));
                assert!(
                    matches!(
                        rule["labels"]["severity"].as_str(),
                        Some("info" | "warning" | "critical")
                    ),
                    "{name}: labels.severity must be info, warning or critical"
                );
                for key in ["summary", "description"] {
                    assert!(
                        rule["annotations"][key]
                            .as_str()
                            .is_some_and(|s| !s.trim().is_empty()),
                        "{name}: no annotations.{key}"
                    );
                }
            }
        }
    }
    for expected in [
        "TetherSnapshotResetsHigh",
        "TetherUpstreamErrors",
        "TetherRunsNotPersisted",
    ] {
        assert!(alerts.contains(expected), "no {expected} alert");
    }
}

// ---------------------------------------------------------------------------------------------
// Kubernetes

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
fn the_service_exposes_only_tethers_proxy_port() {
    let deployment = k8s_object("Deployment");
    let template = &deployment["spec"]["template"];
    let pod = &template["spec"];
    let tether = container(pod, "tether");
    let backend_ports = container_ports(container(pod, "backend"));

    let service = k8s_object("Service");
    let selector = service["spec"]["selector"]
        .as_hash()
        .expect("the Service has a selector");
    assert!(!selector.is_empty());
    for (k, v) in selector {
        assert_eq!(
            &template["metadata"]["labels"][k.as_str().expect("a label name")],
            v,
            "the Service selector {k:?} does not match the Pod's labels"
        );
    }
    let ports = seq(&service["spec"]["ports"]);
    assert!(!ports.is_empty(), "the Service has no port");
    for p in ports {
        // targetPort defaults to port.
        let target = if p["targetPort"].is_badvalue() {
            &p["port"]
        } else {
            &p["targetPort"]
        };
        let target = resolve_port(tether, target);
        assert_eq!(target, Some(PROXY_PORT), "Service port {:?}", p["port"]);
        assert!(!target.is_some_and(|t| backend_ports.contains(&t)));
    }
}

// ---------------------------------------------------------------------------------------------
// Image and unit

#[test]
fn the_image_builds_with_cmake_runs_as_non_root_and_stops_with_sigterm() {
    let dockerfile = read("deploy/Dockerfile");
    let instructions: Vec<(String, &str)> = dockerfile
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let (word, rest) = l.split_once(char::is_whitespace)?;
            Some((word.to_ascii_uppercase(), rest.trim()))
        })
        .collect();
    let all = |word: &str| -> Vec<&str> {
        instructions
            .iter()
            .filter(|(w, _)| w == word)
            .map(|(_, rest)| *rest)
            .collect()
    };

    assert!(
        dockerfile.contains("apt-get install") && dockerfile.contains("cmake"),
        "the build stage must install cmake (Pingora's zlib-ng build needs it)"
    );
    let froms = all("FROM");
    assert!(froms.len() >= 2, "a multi-stage build is expected");
    assert!(
        froms[0].starts_with("rust:1-bookworm"),
        "build stage: {}",
        froms[0]
    );

    // The runtime stage: everything after the last FROM.
    let runtime = froms.last().expect("a FROM");
    let last_user = all("USER").last().map(|u| u.split(':').next().unwrap_or(u));
    let non_root = match last_user {
        Some(user) => !matches!(user, "root" | "0"),
        None => runtime.contains(":nonroot"),
    };
    assert!(non_root, "the image must run as a non-root user");

    assert_eq!(all("STOPSIGNAL"), ["SIGTERM"]);
    let exposed: BTreeSet<&str> = all("EXPOSE")
        .iter()
        .flat_map(|e| e.split_whitespace())
        .collect();
    assert!(
        exposed.contains("8080") && exposed.contains("9090"),
        "EXPOSE {exposed:?}"
    );
    assert!(
        all("COPY")
            .iter()
            .any(|c| c.ends_with("conf/tether.toml /etc/tether/tether.toml")),
        "conf/tether.toml must be copied to /etc/tether/tether.toml"
    );

    let argv = image_entrypoint();
    assert!(argv[0].ends_with("/tether"), "ENTRYPOINT runs {}", argv[0]);
    let args: Vec<&str> = argv[1..].iter().map(String::as_str).collect();
    let cfg = config_from_args(&args);
    assert_eq!(cfg.listen.to_string(), format!("0.0.0.0:{PROXY_PORT}"));
    assert_eq!(cfg.admin.to_string(), format!("0.0.0.0:{ADMIN_PORT}"));

    let ignore = read(".dockerignore");
    let ignored: Vec<&str> = ignore
        .lines()
        .map(|l| l.trim().trim_end_matches('/'))
        .collect();
    assert!(
        ignored.contains(&"target") && ignored.contains(&".git"),
        ".dockerignore must leave out target/ and .git"
    );
}

#[test]
fn the_systemd_unit_stops_with_sigterm_after_the_drain_it_configures() {
    let unit = read("deploy/tether.service");
    assert_eq!(unit_values(&unit, "KillSignal"), ["SIGTERM"]);
    assert_eq!(unit_values(&unit, "Type"), ["simple"]);
    assert_eq!(unit_values(&unit, "DynamicUser"), ["yes"]);
    assert_eq!(unit_values(&unit, "NoNewPrivileges"), ["yes"]);
    assert_eq!(unit_values(&unit, "Restart"), ["on-failure"]);

    let exec = unit_values(&unit, "ExecStart");
    assert_eq!(exec.len(), 1, "one ExecStart");
    let argv: Vec<&str> = exec[0].split_whitespace().collect();
    assert_eq!(argv[0], "/usr/local/bin/tether");
    let cfg = config_from_args(&argv[1..]);
    assert_eq!(cfg.upstream.as_deref(), Some("127.0.0.1:3000"));

    let stop = unit_values(&unit, "TimeoutStopSec");
    let stop = humantime::parse_duration(stop.first().expect("TimeoutStopSec is set"))
        .expect("TimeoutStopSec is a duration");
    let drain = cfg.server.drain_timeout.0;
    assert!(
        stop > drain,
        "TimeoutStopSec {stop:?} must exceed the drain timeout {drain:?}, or systemd kills \
         tether mid-drain"
    );
}
