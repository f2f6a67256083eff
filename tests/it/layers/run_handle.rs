//! A run's local handle (`src/state/run.rs` and `src/state/run/`) names no HTTP, Pingora,
//! config or replica type: what the rooms above hang on a run lives in its slots, each under the
//! owning room's type (`crate::config` sits below the state room, so the layer table alone would
//! let it in).

use std::collections::BTreeSet;
use std::path::Path;

use super::{modules, uses, without_tests};

/// Modules of the crate the run's handle may not name.
const FORBIDDEN_MODULES: &[&str] = &["config", "replica"];
/// External crates the run's handle may not name (any `pingora*` crate, and `http`).
const FORBIDDEN_CRATES: &[&str] = &["pingora", "http"];

/// Whether `code` names a path starting with the crate `name` (`pingora_http::…` for
/// `pingora`, `http::…` for `http`, but not `crate::x::http::…`).
fn names_crate(code: &str, name: &str) -> bool {
    code.match_indices(name).any(|(i, _)| {
        let before = code[..i].chars().next_back();
        let rest = &code[i + name.len()..];
        let word = rest.trim_start_matches(|c: char| c.is_ascii_alphanumeric() || c == '_');
        let prefix_ok = !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
        let crate_ok = name == "pingora" || word.len() == rest.len();
        prefix_ok && crate_ok && word.starts_with("::")
    })
}

/// The problems of the run handle's files under the crate's sources at `root`.
fn run_handle_problems(root: &Path) -> Vec<String> {
    let mut all = Vec::new();
    modules(root, &[], &mut all);
    let known: BTreeSet<Vec<String>> = all.iter().map(|(m, _)| m.clone()).collect();
    let mut problems = Vec::new();
    let run = ["state".to_string(), "run".to_string()];
    for (module, path) in all.iter().filter(|(m, _)| m.starts_with(&run)) {
        let code = without_tests(&std::fs::read_to_string(path).unwrap());
        for used in uses(&code, module, &known) {
            if FORBIDDEN_MODULES.contains(&used[0].as_str()) {
                problems.push(format!(
                    "{} uses crate::{}",
                    path.display(),
                    used.join("::")
                ));
            }
        }
        for name in FORBIDDEN_CRATES.iter().filter(|n| names_crate(&code, n)) {
            problems.push(format!("{} names the {name} crate", path.display()));
        }
    }
    problems
}

#[test]
fn a_runs_handle_names_no_http_pingora_config_or_replica_type() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    assert!(root.join("state/run.rs").is_file());
    let problems = run_handle_problems(&root);
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}

#[test]
fn the_check_sees_a_crate_named_at_a_paths_start_only() {
    assert!(names_crate(
        "x: Mutex<pingora_http::ResponseHeader>,",
        "pingora"
    ));
    assert!(names_crate("use pingora_core::Result;", "pingora"));
    assert!(names_crate("fn f(h: &http::HeaderMap) {}", "http"));
    assert!(!names_crate("use crate::deliver::http::X;", "http"));
    assert!(!names_crate("let https = 1; httpx::y();", "http"));
    let known = BTreeSet::from([vec!["config".to_string()], vec!["state".to_string()]]);
    let module = ["state".to_string(), "run".to_string()];
    let grouped = uses("use crate::{config::Tokens, state};", &module, &known);
    assert!(grouped.contains(&vec!["config".to_string()]));
}
