//! The layer tables in `src/lib.rs` and `crates/tether-core/src/lib.rs` are true: read from the
//! `use crate::…` paths of each crate's sources (tests left out), a top-level module uses only
//! modules listed above it in its crate's table, and under any one parent, the child modules form
//! no import cycle. The core crate depends on no Pingora, Redis or networking crate (so the
//! compiler, not only this test, keeps it pure).
//!
//! Inside the sidecar, calls go one way between the route files and reach callers and the
//! journal through `crate::chats` ([`routes`]).
//! A run's local handle names no HTTP, Pingora, config or replica type ([`run_handle`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

mod routes;
mod run_handle;

/// The top-level modules in table order, read from the `//! | layer | modules |` rows of lib.rs
/// (every module named in backticks in a row, rows top to bottom: the lowest layer first).
fn table_order(lib: &str) -> Vec<String> {
    let mut order = Vec::new();
    for line in lib.lines().filter_map(|l| l.strip_prefix("//! |")) {
        let Some(modules) = line.split('|').nth(1) else {
            continue;
        };
        for name in modules.split('`').skip(1).step_by(2) {
            let name = name.trim_matches(|c| c == '[' || c == ']');
            if !name.is_empty() && name.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
                order.push(name.to_string());
            }
        }
    }
    order
}

/// Every `.rs` file under `dir` with its module path (`["journal", "memory"]`), test files left
/// out (`tests.rs` and anything under a `tests/` directory).
fn modules(dir: &Path, prefix: &[String], out: &mut Vec<(Vec<String>, PathBuf)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        let name = p.file_stem().unwrap().to_str().unwrap().to_string();
        if name == "tests" {
            continue;
        }
        if p.is_dir() {
            let mut sub = prefix.to_vec();
            sub.push(name);
            modules(&p, &sub, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            let mut path = prefix.to_vec();
            if !(prefix.is_empty() && (name == "lib" || name == "main")) {
                path.push(name);
            }
            out.push((path, p));
        }
    }
}

/// The source without its `#[cfg(test)]` items (a `mod tests { … }` block or a `mod tests;`
/// line), so test-only imports do not count.
fn without_tests(src: &str) -> String {
    let mut out = String::new();
    let mut rest = src;
    while let Some(i) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..i]);
        let after = &rest[i..];
        // The item ends at its `;` or at the `}` that closes its first `{`.
        let semi = after.find(';').unwrap_or(after.len());
        let brace = after.find('{').unwrap_or(after.len());
        if semi < brace {
            rest = &after[semi + 1..];
            continue;
        }
        let mut depth = 0;
        let mut end = after.len();
        for (j, c) in after.char_indices().skip(brace) {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = j + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    // Doc comments may name paths for links; they are not imports.
    out.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths of a use tree at the start of `s` (`a::b::{c, d::e}` → `a::b::c`, `a::b::d::e`).
fn tree(s: &str) -> Vec<Vec<String>> {
    fn parse(s: &[u8], i: &mut usize) -> Vec<Vec<String>> {
        let mut prefix = Vec::new();
        loop {
            while *i < s.len() && s[*i].is_ascii_whitespace() {
                *i += 1;
            }
            if *i < s.len() && s[*i] == b'{' {
                *i += 1;
                let mut out = Vec::new();
                loop {
                    for mut p in parse(s, i) {
                        let mut full = prefix.clone();
                        full.append(&mut p);
                        out.push(full);
                    }
                    while *i < s.len() && s[*i].is_ascii_whitespace() {
                        *i += 1;
                    }
                    match s.get(*i) {
                        Some(b',') => *i += 1,
                        Some(b'}') => {
                            *i += 1;
                            return out;
                        }
                        _ => return out,
                    }
                    while *i < s.len() && s[*i].is_ascii_whitespace() {
                        *i += 1;
                    }
                    if s.get(*i) == Some(&b'}') {
                        *i += 1;
                        return out;
                    }
                }
            }
            let start = *i;
            while *i < s.len() && (s[*i].is_ascii_alphanumeric() || s[*i] == b'_') {
                *i += 1;
            }
            if *i == start {
                return vec![prefix];
            }
            prefix.push(String::from_utf8_lossy(&s[start..*i]).into_owned());
            if s[*i..].starts_with(b"::") {
                *i += 2;
            } else {
                return vec![prefix];
            }
        }
    }
    parse(s.as_bytes(), &mut 0)
}

/// The module paths `src` (the file of `module`) names with `crate::…`, `super::…` or
/// `self::…`, each cut to the longest path that is a module of the crate
/// (`crate::journal::memory::MemoryJournal` → `journal::memory`).
fn uses(src: &str, module: &[String], known: &BTreeSet<Vec<String>>) -> BTreeSet<Vec<String>> {
    let mut found = BTreeSet::new();
    let bytes = src.as_bytes();
    for (i, _) in src.match_indices("::") {
        // The word before `::` decides where the path starts.
        let start = src[..i]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(0, |j| j + 1);
        if start > 0 && bytes[start - 1] == b':' {
            continue; // not the first segment
        }
        let mut base: Vec<String> = match &src[start..i] {
            "crate" => Vec::new(),
            "self" => module.to_vec(),
            "super" => module[..module.len().saturating_sub(1)].to_vec(),
            _ => continue,
        };
        let mut rest = &src[i + 2..];
        while let Some(r) = rest.strip_prefix("super::") {
            base.pop();
            rest = r;
        }
        for p in tree(rest) {
            let mut full = base.clone();
            full.extend(p);
            if let Some(n) = (1..=full.len()).rev().find(|n| known.contains(&full[..*n])) {
                found.insert(full[..n].to_vec());
            }
        }
    }
    found
}

/// A cycle in `edges`, if there is one (as the list of its nodes).
fn cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(n.to_string(), 1);
        stack.push(n.to_string());
        for m in edges.get(n).into_iter().flatten() {
            match state.get(m.as_str()) {
                Some(1) => {
                    let at = stack.iter().position(|s| s == m).unwrap();
                    return Some(stack[at..].to_vec());
                }
                Some(_) => {}
                None => {
                    if let Some(c) = visit(m, edges, state, stack) {
                        return Some(c);
                    }
                }
            }
        }
        stack.pop();
        state.insert(n.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in edges.keys() {
        if !state.contains_key(n) {
            if let Some(c) = visit(n, edges, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

/// The layer problems of the crate whose sources are in `root`.
fn layer_problems(root: &Path) -> Vec<String> {
    let lib = std::fs::read_to_string(root.join("lib.rs")).unwrap();
    let order = table_order(&lib);
    let mut files = Vec::new();
    modules(root, &[], &mut files);
    let known: BTreeSet<Vec<String>> = files.iter().map(|(m, _)| m.clone()).collect();

    let mut problems = Vec::new();
    let tops: BTreeSet<&String> = files.iter().filter_map(|(m, _)| m.first()).collect();
    for top in &tops {
        if !order.contains(top) {
            problems.push(format!("`{top}` is not in lib.rs's layer table"));
        }
    }
    let rank = |m: &str| order.iter().position(|o| o == m);

    // Under each parent, an edge from child a to child b when a file in a's subtree names a
    // module in b's subtree.
    let mut siblings: BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (module, path) in &files {
        let src = without_tests(&std::fs::read_to_string(path).unwrap());
        for used in uses(&src, module, &known) {
            let common = module.iter().zip(&used).take_while(|(a, b)| a == b).count();
            if common == module.len() || common == used.len() {
                continue; // a module and its own ancestors or descendants
            }
            let (from, to) = (&module[common], &used[common]);
            if common == 0 {
                if let (Some(f), Some(t)) = (rank(from), rank(to)) {
                    if t > f {
                        problems.push(format!(
                            "{} uses crate::{}: `{to}` is listed after `{from}` in the layer table",
                            path.display(),
                            used.join("::")
                        ));
                    }
                }
            }
            siblings
                .entry(module[..common].to_vec())
                .or_default()
                .entry(from.clone())
                .or_default()
                .insert(to.clone());
        }
    }
    for (parent, edges) in &siblings {
        if let Some(c) = cycle(edges) {
            problems.push(format!(
                "an import cycle under {}::{}: {}",
                root.display(),
                parent.join("::"),
                c.join(" → ")
            ));
        }
    }
    problems
}

#[test]
fn every_module_uses_only_the_layers_below_it_and_no_siblings_cycle() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut problems = layer_problems(&manifest.join("src"));
    problems.extend(layer_problems(&manifest.join("crates/tether-core/src")));
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}

#[test]
fn the_core_crate_depends_on_no_pingora_redis_or_network_crate() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let toml = std::fs::read_to_string(manifest.join("crates/tether-core/Cargo.toml")).unwrap();
    let deps = toml
        .split("[dependencies]")
        .nth(1)
        .and_then(|d| d.split("\n[").next())
        .unwrap();
    for line in deps.lines().filter(|l| !l.trim_start().starts_with('#')) {
        let name = line.split('=').next().unwrap_or("").trim();
        for banned in [
            "pingora", "redis", "hyper", "h2", "rustls", "socket2", "mio",
        ] {
            assert!(!name.starts_with(banned), "the core depends on {name}");
        }
        if name == "tokio" {
            for feature in ["\"net\"", "\"io-util\"", "\"rt", "\"full\"", "\"process\""] {
                assert!(
                    !line.contains(feature),
                    "the core's tokio has {feature}: {line}"
                );
            }
        }
    }
    let lib = std::fs::read_to_string(manifest.join("src/lib.rs")).unwrap();
    assert!(
        lib.contains("pub use tether_core::"),
        "the sidecar re-exports the core's modules"
    );
}

/// The top-level modules of the README's architecture table, in order, each with its crate
/// column (`core` or `sidecar`): the first path segment of every module named in backticks.
fn readme_order(readme: &str) -> Vec<(String, String)> {
    let section = readme
        .split("\n## Architecture\n")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("the README has an Architecture section");
    let mut out: Vec<(String, String)> = Vec::new();
    for line in section.lines().filter(|l| l.starts_with('|')) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let (Some(krate), Some(modules)) = (cells.get(1), cells.get(3)) else {
            continue;
        };
        if !matches!(*krate, "core" | "sidecar") {
            continue;
        }
        for name in modules.split('`').skip(1).step_by(2) {
            let top = name.split('/').next().unwrap_or("").to_string();
            let entry = (krate.to_string(), top);
            if out.last() != Some(&entry) {
                out.push(entry);
            }
        }
    }
    out
}

#[test]
fn the_readme_architecture_table_names_both_crates_layers_in_order() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |p: &str| std::fs::read_to_string(manifest.join(p)).unwrap();
    let mut expected: Vec<(String, String)> = Vec::new();
    for (krate, lib) in [
        ("core", "crates/tether-core/src/lib.rs"),
        ("sidecar", "src/lib.rs"),
    ] {
        expected.extend(
            table_order(&read(lib))
                .into_iter()
                .map(|m| (krate.to_string(), m)),
        );
    }
    let readme = readme_order(&read("README.md"));
    assert_eq!(
        readme, expected,
        "README.md's architecture table and the lib.rs layer tables differ"
    );
    assert!(
        !read("README.md").contains("`ls src/` is the layer table"),
        "ls sorts alphabetically; it is not the layer table"
    );
}
