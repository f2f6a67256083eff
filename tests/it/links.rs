//! Every relative link in the project's Markdown (README.md, docs/, deploy/, clients/js/, the
//! CHANGELOG) resolves: the file it names exists, and an `#anchor` names a heading of that file
//! (GitHub's slug rules: lower case, punctuation dropped, spaces to hyphens).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The Markdown files whose links are checked, relative to the repository root.
fn documents(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![
        root.join("README.md"),
        root.join("CHANGELOG.md"),
        root.join("deploy/README.md"),
        root.join("clients/js/README.md"),
    ];
    let mut docs: Vec<_> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    out.extend(docs);
    out.retain(|p| p.exists());
    out
}

/// The text outside fenced code blocks and inline code spans, line by line (a code span may run
/// on to the next line of its paragraph).
fn prose(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let (mut fenced, mut in_code) = (false, false);
    for line in text.lines() {
        if line.trim_start().starts_with("```") || fenced {
            fenced ^= line.trim_start().starts_with("```");
            out.push(String::new());
            continue;
        }
        if line.trim().is_empty() {
            in_code = false;
        }
        let mut kept = String::new();
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
                kept.push(' ');
            } else if !in_code {
                kept.push(c);
            }
        }
        out.push(kept);
    }
    out
}

/// The targets of the inline links `[text](target)` and images `![alt](target)` of a line.
fn link_targets(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find("](") {
        let after = &rest[i + 2..];
        let Some(end) = after.find(')') else { break };
        let target = after[..end].split_whitespace().next().unwrap_or("");
        out.push(target.to_string());
        rest = &after[end..];
    }
    out
}

/// GitHub's anchor for a heading's text.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a Markdown file's headings (a repeated heading gets `-1`, `-2`, … as on GitHub).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let heading = line.trim_start_matches('#').replace('`', "");
        let base = slug(&heading);
        let mut anchor = base.clone();
        let mut n = 0;
        while out.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        out.insert(anchor);
    }
    out
}

/// What is wrong with one relative link of `doc`, if anything.
fn check(doc: &Path, target: &str) -> Option<String> {
    if target.is_empty()
        || target.contains("://")
        || target.starts_with("mailto:")
        || target.starts_with('<')
    {
        return None;
    }
    let (path, anchor) = match target.split_once('#') {
        Some((p, a)) => (p, Some(a)),
        None => (target, None),
    };
    let file = if path.is_empty() {
        doc.to_path_buf()
    } else {
        doc.parent().unwrap().join(path)
    };
    if !file.exists() {
        return Some(format!("{target}: no file {}", file.display()));
    }
    let anchor = anchor.filter(|a| !a.is_empty())?;
    if file.extension().is_some_and(|e| e == "md") {
        let text = std::fs::read_to_string(&file).unwrap();
        if !anchors(&text).contains(anchor) {
            return Some(format!(
                "{target}: no heading #{anchor} in {}",
                file.display()
            ));
        }
    }
    None
}

#[test]
fn every_relative_link_in_the_docs_resolves() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut broken = Vec::new();
    let mut checked = 0;
    for doc in documents(root) {
        let text = std::fs::read_to_string(&doc).unwrap();
        for (n, line) in prose(&text).iter().enumerate() {
            for target in link_targets(line) {
                checked += 1;
                if let Some(why) = check(&doc, &target) {
                    let name = doc.strip_prefix(root).unwrap().display();
                    broken.push(format!("{name}:{}: {why}", n + 1));
                }
            }
        }
    }
    assert!(
        checked > 20,
        "only {checked} links found: the scan is broken"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn slugs_follow_githubs_rules() {
    assert_eq!(slug("7.1 Errors"), "71-errors");
    assert_eq!(
        slug("2.7 Pages on another origin (CORS)"),
        "27-pages-on-another-origin-cors"
    );
    assert_eq!(
        slug("The AI SDK's useChat in a browser"),
        "the-ai-sdks-usechat-in-a-browser"
    );
    let text = "# A\n## A\n```\n# not a heading\n```\n";
    let found = anchors(text);
    assert!(found.contains("a") && found.contains("a-1") && !found.contains("not-a-heading"));
    assert_eq!(
        link_targets("see [x](a.md#b) and ![y](c.png \"t\")"),
        ["a.md#b", "c.png"]
    );
}
