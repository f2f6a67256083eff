//! The Grafana dashboard and the Prometheus alert rules: every metric they name is a family
//! tether exports (read with promql-parser), every family is charted, and the dashboard and the
//! rules have the shape Grafana and Alertmanager need.

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;

use promql_parser::label::{MatchOp, METRIC_NAME};
use promql_parser::parser::Expr;
use promql_parser::util::{walk_expr, ExprVisitor};
use serde_json::Value;

use crate::deploy::{read, seq, yaml_documents};
use crate::support::Metrics;

/// Series that Prometheus writes itself for every scrape target; the rules may name them.
const PROMETHEUS_SERIES: &[&str] = &["up"];

/// The series a histogram family `<name>` exposes besides the family name itself.
const HISTOGRAM_SUFFIXES: &[&str] = &["_bucket", "_sum", "_count"];

fn dashboard() -> Value {
    serde_json::from_str(&read("deploy/grafana-dashboard.json"))
        .unwrap_or_else(|e| panic!("deploy/grafana-dashboard.json is not JSON: {e}"))
}

/// The families tether exports, name → Prometheus type, from its own text exposition.
fn exported_families() -> BTreeMap<String, String> {
    let m = Metrics::new();
    // A labelled family whose label values are not known up front is left out of the exposition
    // until it has a child; give it one.
    m.runs_started.with_label_values(&["/chat", "agui"]).inc();
    // The other `{route,format}` families (usage, unwatched runs), as a start seeds them.
    m.seed_routes(["/chat"]);
    // The shared journal's families are registered when a journal is configured.
    tether::replica::JournalMetrics::new(&m);
    // The proxy listener's connection families are registered at start.
    tether::server::DownstreamMetrics::new(&m);
    // The per-owner limits' family is registered at start.
    tether::state::owner_limits::OwnerLimits::metric(&m);
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
