//! Calls go one way inside the sidecar's edges: a route file under `src/proxy` names no other
//! route file and calls no method another route file defines in `impl Sidecar`; no proxy file
//! names `crate::state::auth` or `crate::replica`, and no producer file `crate::replica`
//! (callers, lookups and going live are `crate::chats`'s).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::{modules, uses, without_tests};

/// The route files of `src/proxy`: each serves its routes (a child, such as `record/retry.rs`,
/// belongs to its route). Every other file under `src/proxy` is one of [`PROXY_SHARED`].
const PROXY_ROUTES: &[&str] = &[
    "record", "attach", "resume", "durable", "stop", "status", "annotate",
];

/// The files under `src/proxy` the routes share, below them: they call no route.
const PROXY_SHARED: &[&str] = &[
    "assets", "cors", "deadline", "request", "serve", "session", "shared", "turn",
];

/// The names of the methods `src` defines in its `impl Sidecar` blocks.
fn sidecar_methods(src: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (at, _) in src.match_indices("impl Sidecar {") {
        let body = &src[at..];
        let mut depth = 0;
        let mut end = body.len();
        for (j, c) in body.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = j;
                        break;
                    }
                }
                _ => {}
            }
        }
        for (i, _) in body[..end].match_indices("fn ") {
            let name: String = body[i + 3..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                names.insert(name);
            }
        }
    }
    names
}

/// The problems of `src/proxy`'s one-way calls: a file under `src/proxy` (other than
/// `proxy.rs`, which dispatches) that names another route file's module, or calls a method
/// another route file defines in `impl Sidecar` (`self.<name>(`); a file that is neither a
/// route nor a shared file; and a proxy file that names `crate::state::auth` or
/// `crate::replica` (callers and the journal are [`crate::chats`]'s).
fn proxy_problems(root: &Path) -> Vec<String> {
    let mut files = Vec::new();
    modules(root, &[], &mut files);
    let known: BTreeSet<Vec<String>> = files.iter().map(|(m, _)| m.clone()).collect();
    let proxy: Vec<(&Vec<String>, &PathBuf, String)> = files
        .iter()
        .filter(|(m, _)| m.first().is_some_and(|f| f == "proxy"))
        .map(|(m, p)| (m, p, without_tests(&std::fs::read_to_string(p).unwrap())))
        .collect();
    let mut problems = Vec::new();
    let mut methods: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for (module, path, src) in &proxy {
        if let Some(unit) = module.get(1) {
            if !PROXY_ROUTES.contains(&unit.as_str()) && !PROXY_SHARED.contains(&unit.as_str()) {
                problems.push(format!(
                    "{} is neither a route file nor a shared file of src/proxy (tests/it/layers.rs)",
                    path.display()
                ));
            }
            if PROXY_ROUTES.contains(&unit.as_str()) {
                methods
                    .entry(unit)
                    .or_default()
                    .extend(sidecar_methods(src));
            }
        }
    }
    for (module, path, src) in &proxy {
        for used in uses(src, module, &known) {
            let banned = used.first().is_some_and(|f| f == "replica")
                || used.starts_with(&["state".to_string(), "auth".to_string()]);
            if banned {
                problems.push(format!(
                    "{} uses crate::{}",
                    path.display(),
                    used.join("::")
                ));
            }
        }
        let Some(unit) = module.get(1) else {
            continue; // proxy.rs dispatches to every route
        };
        for used in uses(src, module, &known) {
            if let (Some("proxy"), Some(to)) = (used.first().map(String::as_str), used.get(1)) {
                if to != unit && PROXY_ROUTES.contains(&to.as_str()) {
                    problems.push(format!(
                        "{} uses the route file crate::{}",
                        path.display(),
                        used.join("::")
                    ));
                }
            }
        }
        for (route, names) in &methods {
            if *route == unit.as_str() {
                continue;
            }
            for name in names {
                if src.contains(&format!("self.{name}(")) {
                    problems.push(format!(
                        "{} calls self.{name}(…), which src/proxy/{route}.rs defines",
                        path.display()
                    ));
                }
            }
        }
    }
    problems
}

#[test]
fn route_files_call_no_other_route_and_reach_callers_and_the_journal_through_chats() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let problems = proxy_problems(&root);
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}

#[test]
fn the_producer_goes_live_through_chats_and_never_names_the_replica() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    modules(&root, &[], &mut files);
    let known: BTreeSet<Vec<String>> = files.iter().map(|(m, _)| m.clone()).collect();
    let mut problems = Vec::new();
    for (module, path) in files
        .iter()
        .filter(|(m, _)| m.first().is_some_and(|f| f == "producer"))
    {
        let src = without_tests(&std::fs::read_to_string(path).unwrap());
        for used in uses(&src, module, &known) {
            if used.first().is_some_and(|f| f == "replica") {
                problems.push(format!(
                    "{} uses crate::{}",
                    path.display(),
                    used.join("::")
                ));
            }
        }
    }
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}
